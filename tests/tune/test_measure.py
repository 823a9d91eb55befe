"""Measurement in a subprocess: a candidate that crashes, hangs or computes a wrong answer costs only itself."""
from __future__ import annotations

import os
import sys

import pytest

from tensorkiln.kernels.templates.gemm import gemm_workload
from tensorkiln.tune.measure import Measurer
from tensorkiln.tune.tuner import tune_workload

FAKE = [sys.executable, os.path.join(os.path.dirname(__file__), "fake_worker.py")]
KEY = gemm_workload(512, 512, 512, "float32")
CONFIG = {"mr": 8, "nr": 32, "kc": 256, "mc": 192, "nc": 512, "split": "auto"}


@pytest.fixture
def records(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_TUNING_RECORDS", str(tmp_path / "records.jsonl"))


def test_crash_hang_and_wrong_answers_are_failed_candidates():
    with Measurer(timeout=1.0, startup_seconds=0.5, command=FAKE) as measurer:
        assert measurer.measure(KEY, CONFIG).ok
        crashed = measurer.measure(KEY, {**CONFIG, "mr": 4})
        assert not crashed.ok and "crashed" in crashed.error
        hung = measurer.measure(KEY, {**CONFIG, "mr": 6, "mc": 192})
        assert not hung.ok and "timed out" in hung.error
        wrong = measurer.measure(KEY, {**CONFIG, "mr": 10, "mc": 190})
        assert not wrong.ok and "wrong result" in wrong.error
        assert measurer.measure(KEY, CONFIG).ratio == pytest.approx(1 - 256 / 4096)
        assert measurer.restarts == 2


def test_the_tuner_goes_on_past_failed_candidates(records):
    with Measurer(timeout=0.5, startup_seconds=0.5, command=FAKE) as measurer:
        result = tune_workload(KEY, trials=24, strategy="random", measurer=measurer, seed=3)
    assert len(result.trials) == 24
    failed = {t.config["mr"] for t in result.failures}
    assert failed and failed <= {4, 6, 10}
    assert all(t.measurement.error for t in result.failures)
    assert result.tuned and result.best_config["mr"] not in (4, 6, 10)
    assert result.best_seconds < result.default_seconds
