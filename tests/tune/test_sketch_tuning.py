"""Tuning a kernel without a template: its sketch workload measured by the worker, the kernel handed over once,
and the float64 reference kept on disk between measuring processes."""
from __future__ import annotations

import base64
import pickle
import sys

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.kernels.sketch import sketch_kernel
from tensorkiln.loops.nest import ScheduleError
from tensorkiln.tune.api import workload_uses
from tensorkiln.tune.measure import Measurer
from tensorkiln.tune.reference_cache import MIN_ELEMENTS, cached_reference, reference_path
from tensorkiln.tune.worker import Worker

# answers whether the request carried a kernel, as a time ratio (1: it did, 2: it did not)
ECHO = [sys.executable, "-c", "import json, sys\n"
        "for line in sys.stdin:\n"
        "    r = 1.0 if 'kernel' in json.loads(line) else 2.0\n"
        "    print(json.dumps({'ok': True, 'seconds': r, 'default_seconds': 1.0, 'ratio': r}), flush=True)\n"]


def _row_sum_workload() -> str:
    a = np.ones((50, 333), np.float32)
    (workload,) = workload_uses(tk.jit(lambda x: (x * 2).sum(axis=1)), a)
    assert workload.startswith("sketch:kind=reduction:")
    return workload


def test_the_worker_measures_a_sketch_candidate_from_the_kernel_it_was_sent():
    workload = _row_sum_workload()
    kernel = base64.b64encode(pickle.dumps(sketch_kernel(workload))).decode()
    worker = Worker()
    request = {"workload": workload, "config": {"rfactor": 8, "unroll": 0}, "rounds": 1, "block_seconds": 0.001,
               "kernel": kernel}
    answer = worker.answer(request)
    assert answer["ok"], answer
    assert answer["ratio"] > 0 and answer["default_seconds"] > 0
    with pytest.raises(ScheduleError, match="rfactor 4096 needs a reduction loop longer than it"):
        worker.answer({**request, "config": {"rfactor": 4096}})  # main() answers it as a failed candidate


def test_the_kernel_goes_to_each_worker_once():
    workload = _row_sum_workload()
    with Measurer(timeout=5.0, startup_seconds=5.0, command=ECHO) as measurer:
        assert measurer.measure(workload, None).ratio == 1.0  # carried the kernel
        assert measurer.measure(workload, {"rfactor": 8}).ratio == 2.0  # the worker holds it already
        measurer._kill()  # a fresh worker needs it again
        assert measurer.measure(workload, {"rfactor": 8}).ratio == 1.0


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path / "cache"))


def test_the_reference_is_computed_once_per_operands(cache):
    a = np.arange(MIN_ELEMENTS, dtype=np.float32)
    calls = []

    def compute():
        calls.append(1)
        return a.astype(np.float64) * 3

    first = cached_reference("w", 0, [a], compute)
    again = cached_reference("w", 0, [a], compute)
    assert len(calls) == 1 and np.array_equal(first, again) and again.dtype == np.float64
    cached_reference("w", 0, [a + 1], compute)  # other operands: another reference
    assert len(calls) == 2
    reference_path("w", 0, [a]).write_bytes(b"not an array")
    assert np.array_equal(cached_reference("w", 0, [a], compute), first) and len(calls) == 3
    small = np.ones(4, np.float32)
    cached_reference("w", 0, [small], compute)
    cached_reference("w", 0, [small], compute)
    assert len(calls) == 5  # a small reference is cheaper to compute than to read: never kept


def test_a_candidate_far_past_the_cutoff_is_not_timed():
    import time

    from tensorkiln.tune.workloads import Benchmark

    calls = {"slow": 0}

    class Out:
        def numpy(self):
            return np.zeros(2)

    def fast():
        return Out()

    def slow():
        calls["slow"] += 1
        time.sleep(0.05)
        return Out()

    bench = Benchmark([], lambda config: slow if config else fast, np.zeros(2), 0.0)
    worker = Worker()
    worker.benchmarks["w"] = bench
    request = {"workload": "w", "config": {"x": 1}, "rounds": 3, "block_seconds": 0.001}
    assert worker.answer({**request, "config": None})["ok"]  # the default, built and checked once
    answer = worker.answer({**request, "cutoff": 1.1})
    assert answer["untimed"] and answer["ratio"] > 2.2 and calls["slow"] == 1
    timed = worker.answer(request)  # no cutoff (the default's or a confirmation's measurement): timed
    assert "untimed" not in timed and calls["slow"] > 2
