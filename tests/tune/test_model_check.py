"""The in-model check of tuning records: a record that does not pay inside the model is withdrawn."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.kernels.templates.gemm import gemm_workload
from tensorkiln.kernels.tuned import record_table, target_key
from tensorkiln.runtime.tuning_records import TuningRecord, append_record, read_records
from tensorkiln.tune import model_check
from tensorkiln.tune.measure import Measurer
from tensorkiln.tune.model_check import check_model

# a stand-in measuring process: every candidate measures twice as fast as its default
WINNING = [sys.executable, "-c", "import json, sys\nfor line in sys.stdin:\n    print(json.dumps({'ok': True, "
           "'seconds': 0.005, 'default_seconds': 0.01, 'ratio': 0.5}), flush=True)"]
M, N, K = 48, 40, 36
KEY = gemm_workload(M, N, K, "float32")  # the first product: x (48 x 36) @ w1 (36 x 40), w1 an input
CONFIG = {"mr": 6, "nr": 16, "kc": 40, "mc": 48, "nc": 32, "split": "cols"}


@pytest.fixture
def records(tmp_path, monkeypatch):
    path = tmp_path / "records.jsonl"
    monkeypatch.setenv("TENSORKILN_TUNING_RECORDS", str(path))
    return path


def model(x, w1, w2):
    """Two GEMMs with epilogues: a small model of several workloads."""
    return ((x @ w1).relu() @ w2).tanh()


def operands(rng):
    return (rng.uniform(-1, 1, (M, K)).astype(np.float32), rng.uniform(-1, 1, (K, N)).astype(np.float32),
            rng.uniform(-1, 1, (N, 24)).astype(np.float32))


def expected(x, w1, w2):
    return np.tanh(np.maximum(x.astype(np.float64) @ w1, 0) @ w2)


def win(config=CONFIG, seconds=1.0, default=2.0, workload=KEY) -> TuningRecord:
    return TuningRecord(workload, target_key(), dict(config), seconds, default, 8)


def test_a_later_record_that_did_not_pay_withdraws_its_configuration(records):
    other = {**CONFIG, "nc": 16}
    append_record(win(other, seconds=1.5))
    append_record(win())
    assert record_table().best[KEY] == CONFIG
    append_record(win(seconds=2.0))  # the model check's verdict: CONFIG did not pay
    assert record_table().best[KEY] == other  # the next best win is used
    append_record(win(other, seconds=2.0))
    assert KEY not in record_table().best  # every win withdrawn: the default
    append_record(win(seconds=0.5))
    assert record_table().best[KEY] == CONFIG  # measured winning again later: back in use


def fake_profiles(monkeypatch, tuned_ratio: dict[str, float], end_to_end: float):
    """check_model's measurements replaced by fixed ones: each workload's kernels take 1 ms untuned and
    tuned_ratio[w] ms tuned; the whole model untuned 10 ms and with the kept records 10 x end_to_end ms."""
    seen = []

    def workload_seconds(compiled, inputs, repeat):
        tuned = compiled.report(*inputs).kernels and any(" tuned: " in use for k in compiled.report(*inputs).kernels
                                                         for use in k.tuning)
        seen.append(tuned)
        return {w: (1e-3 * (r if tuned else 1.0), 1) for w, r in tuned_ratio.items()}

    def paired_blocks(runs):
        rounds = model_check.END_TO_END_ROUNDS
        return {"untuned": [10e-3] * rounds, "tuned": [10e-3 * end_to_end] * rounds}
    monkeypatch.setattr(model_check, "workload_seconds", workload_seconds)
    monkeypatch.setattr(model_check, "latency_in_turns", paired_blocks)
    return seen


@pytest.mark.parametrize("ratio, end_to_end, kept", [
    (0.8, 0.9, True),  # faster in the model and end to end: kept
    (0.99, 0.9, False),  # within the noise margin in the model: the default wins the tie
    (1.3, 0.9, False),  # won alone, slower in the model
    (0.8, 0.995, False),  # faster kernels, but the model is not faster end to end
    (0.0, 0.9, False),  # no kernel of the tuned build names it: not measured, so not kept
])
def test_the_verdict_follows_the_in_model_times(records, rng, monkeypatch, ratio, end_to_end, kept):
    x, w1, w2 = operands(rng)
    append_record(win())
    seen = fake_profiles(monkeypatch, {KEY: ratio}, end_to_end)
    check = check_model(lambda: tk.jit(model), (x, w1, w2), rounds=3)
    assert seen.count(True) == seen.count(False) == 3  # profiled in turns, three rounds each
    assert [w.workload for w in check.workloads] == [KEY]
    assert check.workloads[0].ratio == pytest.approx(ratio, abs=1e-12)
    assert check.workloads[0].kept is kept and check.kept_end_to_end is kept
    assert (KEY in record_table().best) is kept  # withdrawn unless kept
    if not kept:
        verdict = read_records()[-1]
        assert verdict.config == CONFIG and verdict.seconds >= verdict.default_seconds and verdict.trials == 0
    assert KEY in str(check)


def test_the_sign_test_asks_for_pairs_a_coin_would_rarely_win():
    assert model_check.wins_needed(16) == 12  # P(12 or more of 16) = 0.038, P(11 or more) = 0.105
    assert model_check.wins_needed(5) == 5  # 1/32
    assert model_check.wins_needed(4) == 5  # 1/16 > 0.05: no count of 4 pairs is evidence


@pytest.mark.parametrize("ratios, faster", [
    ([0.95] * 12 + [1.05] * 4, True),  # 12 of 16 pairs, the median 0.95
    ([0.95] * 11 + [1.05] * 5, False),  # 11 wins: a coin does as well one time in ten
    ([0.995] * 16, False),  # every pair, by less than the margin: a tie, the default wins
    ([0.80] * 8 + [1.01] * 8, False),  # a median pulled down by half the pairs is no evidence
    ([], False),
])
def test_a_tuned_model_must_win_most_pairs_by_more_than_the_margin(ratios, faster):
    assert model_check.faster_in_pairs(ratios) is faster


def test_latency_in_turns_pairs_blocks_in_alternating_order():
    order = []
    times = model_check.latency_in_turns({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                                         rounds=4, block_seconds=0.0)
    assert [len(t) for t in times.values()] == [4, 4]
    runs = [name for k, name in enumerate(order) if k == 0 or order[k - 1] != name]
    assert runs == ["a", "b", "a", "b", "a"]  # a, b | b, a | a, b | b, a
    assert order.count("a") == 4 * (1 + 2)  # an untimed call, then a block of at least 2


def test_the_check_measures_the_real_model_and_leaves_results_right(records, rng, monkeypatch):
    monkeypatch.setattr(model_check, "END_TO_END_BLOCK_SECONDS", 0.0)  # blocks of 2 calls: a short check
    x, w1, w2 = operands(rng)
    append_record(win())
    check = check_model(lambda: tk.jit(model), (x, w1, w2), rounds=1, repeat=1, withdraw=False)
    assert len(read_records()) == 1  # withdraw=False: nothing appended
    (only,) = check.workloads
    assert only.workload == KEY and only.config == CONFIG and only.kernels == 1
    assert only.untuned_seconds > 0 and only.tuned_seconds > 0 and only.ratio > 0
    f = tk.jit(model)
    np.testing.assert_allclose(f(x, w1, w2).numpy(), expected(x, w1, w2), rtol=1e-4, atol=1e-5)


def test_nothing_to_check_without_records(records, rng):
    check = check_model(lambda: tk.jit(model), operands(rng))
    assert check.workloads == [] and check.speedup == 1.0
    assert "nothing to check" in str(check)


def test_tune_checks_what_the_model_chose(records, rng):
    """The searches' measurements come from a stand-in worker (every candidate "wins"); the model then
    chooses among them and the check profiles it, and each record ends kept or withdrawn as its verdict says."""
    x, w1, w2 = operands(rng)
    with Measurer(command=WINNING) as measurer:
        result = tk.tune(model, x, w1, w2, trials=3, strategy="random", measurer=measurer, check_model=True)
    won = {k.workload for k in result.kernels if k.result.wins_alone}
    assert won and set(result.in_model.chosen) <= {k.workload for k in result.kernels}
    assert {w.workload for w in result.model_check.workloads} == set(result.in_model.chosen)
    for verdict in result.model_check.workloads:
        assert (verdict.workload in record_table().best) is verdict.kept
    assert "in-model check" in str(result)

    class Loaded:  # a compiled object that tk.tune cannot copy by itself
        def report(self, *args):
            return tk.jit(model).report(*args)
    with pytest.raises(ValueError, match="needs rebuild="):
        tk.tune(Loaded(), x, w1, w2, trials=1, check_model=True)


@pytest.mark.parametrize("ratio, end_to_end, kept", [(0.8, 0.9, True), (0.8, 0.995, False), (0.99, 0.9, False)])
def test_times_already_measured_in_the_model_go_straight_to_the_end_to_end_check(records, rng, monkeypatch, ratio,
                                                                                 end_to_end, kept):
    x, w1, w2 = operands(rng)
    append_record(win())
    seen = fake_profiles(monkeypatch, {KEY: 0.5}, end_to_end)
    measured = {KEY: model_check.WorkloadCheck(KEY, dict(CONFIG), 1, 1e-3, ratio * 1e-3, ratio)}
    check = check_model(lambda: tk.jit(model), (x, w1, w2), [KEY], rounds=3, measured=measured)
    assert seen == []  # nothing profiled again: the verdicts given are the per-workload ones
    assert check.workloads[0].ratio == ratio and check.workloads[0].kept is kept
    assert (KEY in record_table().best) is kept
