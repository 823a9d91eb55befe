"""Choosing a workload's configuration inside the model: shortlists, in-model ratios, the records written."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.kernels.tuned import record_table
from tensorkiln.runtime.tuning_records import append_record, read_records
from tensorkiln.tune import in_model
from tensorkiln.tune.in_model import choose_in_model, shortlist
from tensorkiln.tune.measure import Measurement, Measurer
from tensorkiln.tune.model_check import untuned_build
from tensorkiln.tune.tuner import Trial, WorkloadResult

from .test_model_check import CONFIG, KEY, WINNING, expected, model, operands, records, win  # noqa: F401

OTHER = {**CONFIG, "nc": 16}
THIRD = {**CONFIG, "mc": 24}


def trial(config, ratio, ok=True, default=False) -> Trial:
    measured = Measurement(ok=ok, seconds=ratio * 1e-3, default_seconds=1e-3, ratio=ratio)
    return Trial(dict(config), measured, 0.0, is_default=default)


def result_of(trials, default=None) -> WorkloadResult:
    default = default or {**CONFIG, "mc": 12}
    return WorkloadResult(KEY, 1e-3, 1e-3, dict(default), dict(default), trials=[trial(default, 1.0, default=True),
                                                                                *trials])


def test_the_shortlist_is_the_best_distinct_candidates_alone_within_the_margin():
    found = result_of([trial(OTHER, 0.97), trial(CONFIG, 0.9), trial(CONFIG, 0.95), trial(THIRD, 1.2),
                       trial({**CONFIG, "kc": 8}, 0.5, ok=False)])
    assert shortlist(found) == [CONFIG, OTHER]  # THIRD is over the margin; a failed candidate never counts
    assert shortlist(found, count=1) == [CONFIG]
    assert shortlist(found, margin=1.3) == [CONFIG, OTHER, THIRD]
    assert shortlist(result_of([])) == []  # the default alone: nothing to take into the model
    default_again = result_of([trial({**CONFIG, "mc": 12}, 0.9)])
    assert shortlist(default_again) == []  # the default is what each candidate is compared with


def fake_in_model(monkeypatch, ratios: dict[tuple, float | tuple[float, int]]):
    """profile_in_turns replaced: the candidate of each workload in a build has a fixed in-model ratio, and
    rounds lost (given with it, or: none when the ratio is under 1, every round otherwise)."""
    builds = []

    def profile_in_turns(untuned, tuned, inputs, workloads, rounds, repeat):
        table = builds[-1]
        found = {}
        for w in workloads:
            given = ratios[(w, tuple(sorted(table[w].items())))]
            ratio, lost = given if isinstance(given, tuple) else (given, 0 if given < 1 else rounds)
            found[w] = (1e-3, 1e-3 * ratio, 1, ratio, lost)
        return found

    def built(rebuild, inputs, table):
        builds.append(dict(table))
        return object()
    monkeypatch.setattr(in_model, "profile_in_turns", profile_in_turns)
    monkeypatch.setattr(in_model, "_built", built)
    return builds


def key_of(config):
    return tuple(sorted(config.items()))


@pytest.mark.parametrize("ratios, chosen", [
    ((1.01, 0.9), OTHER),  # the model picks the one that only tied alone
    ((0.85, 0.9), CONFIG),
    ((0.99, 1.2), None),  # within the noise margin: the default wins the tie
    ((0.0, 1.1), None),  # no kernel named it (0.0: unmeasured) and the other lost
])
def test_each_workload_takes_its_fastest_candidate_in_the_model(records, monkeypatch, ratios, chosen):
    append_record(win())  # the search's winner alone
    builds = fake_in_model(monkeypatch, {(KEY, key_of(c)): r for c, r in zip((CONFIG, OTHER), ratios)})
    choice = choose_in_model(lambda: None, (), {KEY: [CONFIG, OTHER]}, untuned=None)
    assert builds == [{KEY: CONFIG}, {KEY: OTHER}] and choice.builds == 2  # one candidate per build
    assert choice.chosen.get(KEY) == chosen
    assert record_table().best.get(KEY) == chosen  # the search's record withdrawn unless the model chose it
    if chosen is not None:
        last = read_records()[-1]
        assert last.config == chosen and last.seconds < last.default_seconds
    assert KEY in str(choice)


def test_one_build_carries_a_candidate_of_every_workload(records, monkeypatch):
    other_key = KEY.replace("m=48", "m=96")
    builds = fake_in_model(monkeypatch, {(KEY, key_of(CONFIG)): 0.9, (KEY, key_of(OTHER)): 0.95,
                                         (other_key, key_of(THIRD)): 1.0})
    choice = choose_in_model(lambda: None, (), {KEY: [CONFIG, OTHER], other_key: [THIRD]}, untuned=None, write=False)
    assert builds == [{KEY: CONFIG, other_key: THIRD}, {KEY: OTHER}]
    assert choice.chosen == {KEY: CONFIG} and read_records() == []  # write=False appends nothing


def test_no_build_is_made_without_time(records, monkeypatch):
    builds = fake_in_model(monkeypatch, {})
    choice = choose_in_model(lambda: None, (), {KEY: [CONFIG, OTHER]}, untuned=None, seconds=0.0)
    assert builds == [] and choice.untried == 2 and choice.chosen == {}
    assert "left untried" in str(choice)


def test_the_candidates_are_timed_in_the_real_model_and_results_stay_right(records, rng):
    x, w1, w2 = operands(rng)
    untuned, cost = untuned_build(lambda: tk.jit(model), (x, w1, w2))
    assert cost.build_seconds > 0 and cost.call_seconds > 0 and cost.check_seconds() > 0
    choice = choose_in_model(lambda: tk.jit(model), (x, w1, w2), {KEY: [CONFIG]}, untuned, rounds=1, repeat=1,
                             write=False)
    (timed,) = choice.timings
    assert timed.workload == KEY and timed.config == CONFIG and timed.kernels == 1
    assert timed.untuned_seconds > 0 and timed.seconds > 0 and timed.ratio > 0
    np.testing.assert_allclose(tk.jit(model)(x, w1, w2).numpy(), expected(x, w1, w2), rtol=1e-4, atol=1e-5)


def test_tune_chooses_in_the_model_then_checks_what_it_chose(records, rng):
    """Every candidate "wins" alone (a stand-in worker); the model then chooses and checks for real."""
    x, w1, w2 = operands(rng)
    with Measurer(command=WINNING) as measurer:
        result = tk.tune(model, x, w1, w2, trials=3, strategy="random", measurer=measurer, check_model=True)
    assert result.in_model is not None and result.in_model.builds >= 1
    assert {t.workload for t in result.in_model.timings} <= {k.workload for k in result.kernels}
    assert {w.workload for w in result.model_check.workloads} == set(result.in_model.chosen)
    for workload in {k.workload for k in result.kernels}:
        kept = any(w.workload == workload and w.kept for w in result.model_check.workloads)
        assert (workload in record_table().best) is kept
    assert "in-model choice" in str(result)
    # where the seconds went, in the order spent, adding up to the whole call
    assert list(result.phases) == ["finding the workloads", "untuned build", "searches", "in-model choice",
                                   "model check"]
    assert sum(result.phases.values()) == pytest.approx(result.seconds, abs=0.05)
    assert str(result).splitlines()[1].startswith("phases: finding the workloads")


def test_candidates_sharing_a_kernel_go_into_different_builds():
    """A convolution's candidate can change the GEMMs its kernel runs: they are never measured together."""
    conv, gemm, other = "conv:a", "gemm:b", "sketch:c"
    kernels = {conv: {"k1"}, gemm: {"k1"}, other: {"k2"}}
    queues = {conv: [{"x": 1}, {"x": 2}], gemm: [{"y": 1}], other: [{"z": 1}]}
    first = in_model.build_table(queues, kernels)
    assert first == {conv: {"x": 1}, other: {"z": 1}}  # the GEMM shares k1 with the convolution's candidate
    second = in_model.build_table(queues, kernels)
    assert second == {conv: {"x": 2}}
    assert in_model.build_table(queues, kernels) == {gemm: {"y": 1}} and queues == {}


def test_a_build_is_made_only_where_its_estimate_fits(records, monkeypatch):
    builds = fake_in_model(monkeypatch, {(KEY, key_of(CONFIG)): 0.9})
    choice = choose_in_model(lambda: None, (), {KEY: [CONFIG]}, untuned=None, seconds=10.0, estimate=4.0,
                             keep_back=8.0)  # 4 s and 8 s kept back: 12 s > 10 s
    assert builds == [] and choice.untried == 1
    choose_in_model(lambda: None, (), {KEY: [CONFIG]}, untuned=None, seconds=10.0, estimate=4.0, keep_back=4.0)
    assert builds == [{KEY: CONFIG}]


def test_the_largest_wins_alone_go_first():
    small_key, big_key, tied_key = KEY, KEY.replace("m=48", "m=96"), KEY.replace("m=48", "m=24")
    small = WorkloadResult(small_key, 1e-3, 1e-3, {}, {}, trials=[trial({}, 1.0, default=True), trial(CONFIG, 0.5)])
    big = WorkloadResult(big_key, 1e-3, 1e-3, {}, {}, trials=[trial({}, 1.0, default=True), trial(OTHER, 0.8)])
    tied = WorkloadResult(tied_key, 1e-2, 1e-2, {}, {}, trials=[trial({}, 1.0, default=True), trial(THIRD, 1.02)])
    # saved per model call: small 1 x 1 ms x 0.5, big 4 x 1 ms x 0.2, tied nothing (however heavy)
    ordered = in_model.shortlists_by_saving([(tied, 9), (small, 1), (big, 4)])
    assert list(ordered) == [big_key, small_key, tied_key]
    assert ordered[big_key] == [OTHER]
    assert list(in_model.shortlists_by_saving([(small, 1), (big, 1)])) == [small_key, big_key]


@pytest.mark.parametrize("ratios, chosen", [
    (((0.85, 2), (0.95, 0)), OTHER),  # the lower median lost 2 of 5 rounds: it does not win in turns
    (((0.85, 1), (0.95, 0)), CONFIG),  # one round lost is allowed
    (((0.85, 3), (0.95, 2)), None),
])
def test_a_winner_wins_in_turns_not_only_in_the_median(records, monkeypatch, ratios, chosen):
    fake_in_model(monkeypatch, {(KEY, key_of(c)): r for c, r in zip((CONFIG, OTHER), ratios)})
    choice = choose_in_model(lambda: None, (), {KEY: [CONFIG, OTHER]}, untuned=None, rounds=5, write=False)
    assert choice.chosen.get(KEY) == chosen
    if chosen is not None:
        assert choice.verdicts()[KEY].ratio == dict(zip((CONFIG["nc"], OTHER["nc"]), ratios))[chosen["nc"]][0]


def test_after_the_first_build_the_builds_measured_say_what_one_costs(records, monkeypatch):
    """The estimate (a cold build) only decides the first build; a cheaper one measured lets more in."""
    clock = [0.0]
    monkeypatch.setattr(in_model.time, "monotonic", lambda: clock[0])
    builds = fake_in_model(monkeypatch, {(KEY, key_of(c)): 0.9 for c in (CONFIG, OTHER, THIRD)})
    built = in_model._built

    def two_seconds(rebuild, inputs, table):
        clock[0] += 2.0
        return built(rebuild, inputs, table)
    monkeypatch.setattr(in_model, "_built", two_seconds)
    choice = choose_in_model(lambda: None, (), {KEY: [CONFIG, OTHER, THIRD]}, untuned=None, seconds=10.0,
                             estimate=7.0, keep_back=1.0, write=False)
    assert len(builds) == 3 and choice.untried == 0  # 7 + 1 fit in 10; then 2 s each: 2 + 2 + 1 more
    clock[0] = 0.0
    choice = choose_in_model(lambda: None, (), {KEY: [CONFIG, OTHER, THIRD]}, untuned=None, seconds=10.0,
                             estimate=9.5, keep_back=1.0, write=False)
    assert choice.builds == 0 and choice.untried == 3


def test_winners_that_share_a_kernel_are_never_kept_together():
    """A convolution's winner and the winner of a GEMM its kernel runs were measured in different builds:
    only the larger saving in the model is kept, and workloads of other kernels are kept beside it."""
    def timing(workload, untuned, ratio):
        return in_model.CandidateTiming(workload, {}, 0, 1, untuned, untuned * ratio, ratio)
    kernels = {"conv:a": {"k1"}, "gemm:b": {"k1"}, "sketch:c": {"k2"}, "gemm:d": {"k1", "k3"}}
    winners = {"conv:a": timing("conv:a", 10e-3, 0.9), "gemm:b": timing("gemm:b", 4e-3, 0.5),
               "sketch:c": timing("sketch:c", 1e-3, 0.9), "gemm:d": timing("gemm:d", 1e-3, 0.5)}
    assert in_model.one_per_kernel(winners, kernels) == ["gemm:b", "sketch:c"]  # 2 ms saved against 1 ms
    winners["conv:a"] = timing("conv:a", 10e-3, 0.7)
    assert in_model.one_per_kernel(winners, kernels) == ["conv:a", "sketch:c"]
    assert in_model.one_per_kernel(winners, {}) == ["conv:a", "gemm:b", "gemm:d", "sketch:c"]  # none shared
