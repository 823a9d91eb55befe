"""tk.tune on a small GEMM: each kernel's default and best time, the trials spent, records kept."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.kernels.templates.gemm import gemm_workload
from tensorkiln.runtime.tuning_records import read_records
from tensorkiln.tune.api import IN_MODEL_BUILDS, MIN_IN_MODEL_SHARE, MIN_SEARCH_SHARE, search_seconds
from tensorkiln.tune.model_check import ModelCost
from tensorkiln.tune.tuner import nearest_tuned


@pytest.fixture
def records(tmp_path, monkeypatch):
    path = tmp_path / "records.jsonl"
    monkeypatch.setenv("TENSORKILN_TUNING_RECORDS", str(path))
    return path


def test_tune_a_small_gemm(records, rng):
    a = rng.standard_normal((96, 64)).astype(np.float32)
    b = rng.standard_normal((64, 80)).astype(np.float32)
    f = tk.jit(lambda x, y: (x @ y).relu())
    f(a, b)
    seen = []
    result = tk.tune(f, a, b, trials=3, strategy="random", progress=lambda *event: seen.append(event))
    assert len(result.kernels) == 1
    kernel = result.kernels[0]
    assert kernel.workload == gemm_workload(96, 80, 64, "float32")
    assert kernel.trials == 3 == result.trials == len(seen)
    assert all(t.measurement.ok for t in kernel.result.trials)  # each checked against the reference first
    assert 0 < kernel.best_seconds <= kernel.default_seconds
    assert kernel.result.trials[0].config == kernel.result.default_config  # the default is trial 1
    assert kernel.workload in str(result)
    written = read_records(records)
    assert len(written) == int(kernel.result.tuned)
    assert f.cache_size() == 0  # compiled again on the next call, with whatever was kept
    np.testing.assert_allclose(f(a, b).numpy(), np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-4, atol=1e-4)


def test_nearest_tuned_workload(records):
    from tensorkiln.kernels.tuned import target_key
    from tensorkiln.runtime.tuning_records import TuningRecord, append_record
    config = {"mr": 8, "nr": 32, "kc": 128, "mc": 96, "nc": 256, "split": "auto"}
    for m, seconds in ((100, 1.0), (1000, 1.0), (120, 3.0)):
        append_record(TuningRecord(gemm_workload(m, 64, 64, "float32"), target_key(), {**config, "mc": m // 4 * 4},
                                   seconds, 2.0, 4))
    assert nearest_tuned(gemm_workload(110, 64, 64, "float32"))[0] == gemm_workload(100, 64, 64, "float32")
    assert nearest_tuned(gemm_workload(110, 64, 64, "float64")) is None  # another dtype is another kernel


def test_tasks_too_small_to_matter_keep_their_defaults():
    from tensorkiln.tune.api import MIN_WORK_SHARE, worth_tuning
    big = gemm_workload(512, 512, 512, "float32")
    small = "sketch:kind=injective:dtype=float32:shape=64:nest=0123456789ab"  # 64 elements, 5 uses
    attention = "sketch:kind=attention:dtype=float32:shape=1x12x128x64:nest=0123456789ab"
    tasks, too_small = worth_tuning({small: ["k1"] * 5, big: ["k0"], attention: ["k2"] * 12})
    assert [t.workload for t in tasks] == [attention, big]  # largest work x uses first (2 x 128 keys a row)
    assert too_small == [small] and 64 * 5 < MIN_WORK_SHARE * 512 ** 3


def test_the_searches_get_less_of_the_budget_the_more_a_build_of_the_model_costs():
    cheap, dear = ModelCost(10.0, 0.1, 8.0), ModelCost(40.0, 0.1, 30.0)
    assert search_seconds(600, dear) < search_seconds(600, cheap) < 600 * (1 - MIN_IN_MODEL_SHARE) + 1e-9
    # the time kept back covers the builds of the choice and the check's, as the untuned build measured them
    kept = 600 - search_seconds(600, dear)
    assert kept >= IN_MODEL_BUILDS * dear.profiled_build_seconds(5, 3) + dear.end_to_end_seconds()
    assert search_seconds(600, ModelCost(1000.0, 1.0, 900.0)) == pytest.approx(MIN_SEARCH_SHARE * 600)
    assert search_seconds(600, cheap, elapsed=30.0) == pytest.approx(search_seconds(600, cheap) - 30.0)
    assert search_seconds(10, dear, elapsed=20.0) == 0.0
    # a profiling build found in the caches is still counted as a fresh one
    assert ModelCost(40.0, 0.1, 1.0).profiled_build_seconds(5, 3) == dear.profiled_build_seconds(5, 3)
