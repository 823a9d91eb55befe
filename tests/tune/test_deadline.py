"""The searches end by their deadline, confirmations included, however long one trial takes."""
from __future__ import annotations

import os
import sys

import pytest

from tensorkiln.kernels.templates.gemm import gemm_workload
from tensorkiln.runtime.tuning_records import read_records
from tensorkiln.tune.deadline import BoundedMeasurer, Deadline
from tensorkiln.tune.measure import Measurement, Measurer
from tensorkiln.tune.scheduler import Task, schedule
from tensorkiln.tune.tuner import WorkloadSearch

FAKE = [sys.executable, os.path.join(os.path.dirname(__file__), "fake_worker.py")]
KEY = gemm_workload(512, 512, 512, "float32")
HANGS = {"mr": 6, "nr": 32, "kc": 256, "mc": 192, "nc": 512, "split": "auto"}  # the fake worker never answers


@pytest.fixture
def records(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_TUNING_RECORDS", str(tmp_path / "records.jsonl"))


class Clock:
    """A fake clock that only the fake measurer moves."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeMeasurer:
    """Speaks Measurer.measure: each request costs `cost(workload, config, rounds, index)` seconds on the clock,
    or `limit` when that is less (the candidate then fails, as a worker stopped at the deadline does)."""

    rounds = 3

    def __init__(self, clock: Clock, cost):
        self.clock, self.cost = clock, cost
        self.requests: list[tuple[str, dict | None, int | None, float | None]] = []

    def measure(self, workload, config, rounds=None, cutoff=None, limit=None) -> Measurement:
        seconds = self.cost(workload, config, rounds, len(self.requests))
        self.requests.append((workload, config, rounds, limit))
        if limit is not None and seconds > limit:
            self.clock.now += limit
            return Measurement(False, error="stopped at the end of the budget")
        self.clock.now += seconds
        ratio = 1.0 if config is None else 1.0 - config["kc"] / 4096  # larger depth blocks "win"
        return Measurement(True, 0.01 * ratio, 0.01, ratio)


def uneven(workload, config, rounds, index) -> float:
    """A default costs 5 s, a candidate 1 s, every 7th request 40 s (a slow build, a hang), a confirmation 3 s."""
    if config is None:
        return 5.0
    if rounds is not None:
        return 3.0
    return 40.0 if index % 7 == 6 else 1.0


def tasks(count: int = 3) -> list[Task]:
    return [Task(gemm_workload(64 * (i + 2), 256, 128, "float32"), [f"k{i}", f"k{i}b"]) for i in range(count)]


@pytest.mark.parametrize("seconds", [0.5, 3.0, 7.0, 12.0, 26.0, 45.0, 90.0])
@pytest.mark.parametrize("confirm", [True, False])
def test_the_schedule_ends_by_its_deadline_confirmations_included(records, seconds, confirm):
    clock = Clock()
    measurer = FakeMeasurer(clock, uneven)
    started = schedule(tasks(), measurer, trials=40, seconds=seconds, strategy="random", confirm=confirm,
                       clock=clock)
    assert clock.now - 100.0 <= seconds  # the 40 s requests were cut at the deadline, not after it
    assert all(limit is not None and limit > 0 for *_, limit in measurer.requests)  # none made past it
    assert started or seconds < 5.0
    if not confirm:  # the model judges: nothing confirmed alone, no record
        assert all(rounds is None for _, _, rounds, _ in measurer.requests)
        assert read_records() == []
        assert any(t.search.result.unconfirmed for t in started) or seconds < 20.0  # room for candidates after the defaults


def test_without_a_deadline_every_trial_and_confirmation_runs(records):
    clock = Clock()
    measurer = FakeMeasurer(clock, uneven)
    started = schedule(tasks(2), measurer, trials=6, seconds=None, strategy="random", clock=clock)
    assert all(t.search.trials == 6 for t in started)
    assert all(limit is None for *_, limit in measurer.requests)
    confirmed = [t for t in started if t.search.result.tuned]
    assert confirmed and {r.workload for r in read_records()} == {t.workload for t in confirmed}


def test_confirmations_go_largest_saving_first_and_only_while_they_fit(records):
    clock = Clock()
    costs = {"confirm": 3.0}

    def cost(workload, config, rounds, index):
        return 1.0 if rounds is None else costs["confirm"]
    measurer = FakeMeasurer(clock, cost)
    light, heavy = tasks(2)
    heavy.kernels = heavy.kernels * 8  # 16 uses: its best alone saves the most in the model
    # 2 defaults + 2 x 5 trials = 12 s of searching; the reserve keeps two trials' time per winner
    started = schedule([light, heavy], measurer, trials=6, seconds=12.0 + 2 * 2.0, strategy="random",
                       clock=clock)
    confirmations = [w for w, _, rounds, _ in measurer.requests if rounds is not None]
    assert confirmations and confirmations[0] == heavy.workload  # the largest expected saving first
    assert clock.now - 100.0 <= 16.0
    unconfirmed = [t for t in started if t.search.result.unconfirmed]
    assert all(not t.search.result.tuned for t in unconfirmed)  # no time to confirm: its default is kept
    assert {r.workload for r in read_records()} == {t.workload for t in started if t.search.result.tuned}


def test_a_default_stopped_at_the_deadline_drops_its_task(records):
    clock = Clock()
    measurer = FakeMeasurer(clock, lambda workload, config, rounds, index: 5.0 if config is None else 1.0)
    started = schedule(tasks(3), measurer, trials=4, seconds=7.0, strategy="random", clock=clock)
    assert [t.workload for t in started] == [tasks(3)[0].workload]  # the second default was cut at 7 s
    assert clock.now - 100.0 <= 7.0


def test_the_bounded_measurer_refuses_after_the_deadline_and_passes_what_is_left():
    clock = Clock()
    inner = FakeMeasurer(clock, lambda *args: 1.0)
    deadline = Deadline(2.5, clock)
    bounded = BoundedMeasurer(inner, deadline)
    assert bounded.rounds == 3  # the wrapped measurer's attributes
    assert bounded.measure(KEY, None).ok and bounded.measure(KEY, None).ok
    assert inner.requests[-1][-1] == pytest.approx(1.5)
    assert not bounded.measure(KEY, None).ok  # 1 s asked, 0.5 s left: cut
    refused = bounded.measure(KEY, None)
    assert not refused.ok and "no time left" in refused.error and len(inner.requests) == 3
    assert Deadline(None, clock).fits(1e12) and BoundedMeasurer(inner, Deadline(None, clock)).measure(KEY, None).ok
    assert inner.requests[-1][-1] is None


def test_a_real_worker_is_stopped_at_the_limit():
    with Measurer(timeout=30.0, startup_seconds=30.0, command=FAKE) as measurer:
        assert measurer.measure(KEY, None).ok
        stopped = measurer.measure(KEY, HANGS, limit=0.2)
        assert not stopped.ok and "end of the budget" in stopped.error
        assert measurer.measure(KEY, None, limit=30.0).ok  # a fresh worker after the stopped one


def test_proposals_count_in_the_search_cost(records):
    """The strategy's proposals (the cost model's fit, the evolutionary pool) cost time the plan must see:
    they are counted in search_seconds and so in seconds_per_trial, the scheduler's cost of a trial."""
    clock = Clock()
    search = WorkloadSearch(KEY, FakeMeasurer(clock, lambda *_: 1.0), strategy="random", clock=clock)
    propose = search.search.propose

    budgets = []

    def slow_propose(count, seconds=None):
        budgets.append(seconds)
        clock.now += 2.0  # two seconds of proposing per batch
        return propose(count, seconds)
    search.search.propose = slow_propose
    search.start()
    search.step(4)
    assert search.trials == 5
    assert search.search_seconds == pytest.approx(5 * 1.0 + 2.0)
    assert search.seconds_per_trial == pytest.approx((4 * 1.0 + 2.0) / 4)
    # the next batch may take as long to choose as its measurements (1 s each), capped by the budget's rest
    search.step(2)
    search.step(2, seconds_left=0.5)
    assert budgets[1:] == [pytest.approx(2.0), pytest.approx(0.5)]
