"""The task scheduler: one budget shared among a model's workloads, trials where they save the most."""
from __future__ import annotations

import os
import sys

import pytest

from tensorkiln.kernels.templates.gemm import gemm_workload
from tensorkiln.tune.measure import Measurer
from tensorkiln.tune.scheduler import BATCH, Task, schedule

FAKE = [sys.executable, os.path.join(os.path.dirname(__file__), "fake_worker.py")]


@pytest.fixture
def records(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_TUNING_RECORDS", str(tmp_path / "records.jsonl"))


def test_every_task_starts_with_its_default_and_the_heaviest_gets_the_next_trials(records):
    heavy = Task(gemm_workload(512, 512, 512, "float32"), [f"k{i}_matmul" for i in range(16)])
    light = Task(gemm_workload(256, 256, 256, "float32"), ["k16_matmul"])
    order = []
    with Measurer(timeout=1.0, startup_seconds=5.0, command=FAKE) as measurer:
        started = schedule([light, heavy], measurer, trials=8, seconds=None, strategy="random",
                           on_trial=lambda kernel, workload, result, trial: order.append(workload))
    assert started == [light, heavy]
    assert order[:2] == [light.workload, heavy.workload]  # the defaults first, in the order given
    # the same default time (the fake worker's) and 16 uses against 1: the heavy task's gradient is larger
    assert order[2:2 + BATCH] == [heavy.workload] * BATCH
    assert heavy.search.trials == light.search.trials == 8  # no time limit: each task's trials are spent
    assert heavy.weight == 16 and heavy.search.result.trials[0].is_default


def test_a_budget_stops_the_schedule(records):
    tasks = [Task(gemm_workload(64 * (i + 1), 64, 64, "float32"), [f"k{i}"]) for i in range(3)]
    with Measurer(timeout=1.0, startup_seconds=5.0, command=FAKE) as measurer:
        started = schedule(tasks, measurer, trials=10_000, seconds=1.0, strategy="random")
    assert started  # at least the first default
    assert all(t.search.trials < 10_000 for t in started)
