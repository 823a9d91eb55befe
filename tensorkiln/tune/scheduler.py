"""Sharing one budget among a model's kernel workloads, as Ansor's task scheduler does.

A model's distinct workloads (deduplicated by key: ResNet-18's repeated
layers are one task each) are tuned together. Each task's weight is how many
of the model's kernels use it, so its share of the model's time is estimated
as weight x its default's time per call (measured as trial 1 of the task).

Every task first gets its default measured (largest estimated share first)
and the configuration of the nearest tuned workload. After that, the next
few trials always go to the task with the largest gradient of the model's
latency per second of tuning:

    gradient_i = weight_i x default_i x rate_i / seconds_per_trial_i
    rate_i     = ALPHA x backward_i + (1 - ALPHA) x forward_i

backward_i is how much its best time (relative to its default) fell per
trial over its last WINDOW trials, and forward_i the optimistic best_i /
trials_i (Ansor's g_i / t_i: a task that has had few trials may still fall
far). A task stops at `trials` candidates or when its space is exhausted.
Time for the confirmations (two trials' time for every task whose best beats
its default) is kept back from the budget, and each task's search then
finishes as tune_workload's does: the winner is measured again and its record
appended only if it wins twice. The confirmations go largest expected saving
first (weight x default x the fall of its best alone), each only while it
fits; one that does not fit leaves its task unconfirmed, with no record.

`seconds` is a deadline, confirmations included: every request goes through
deadline.py's BoundedMeasurer, so one trial that costs far more than its
task's average (a hang, a slow build) is stopped at the deadline instead of
running past it into the time the caller kept for what follows (tk.tune's
builds of the model). With confirm=False (tk.tune's check_model: the model
judges each candidate itself) no task is confirmed and no record written.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from .deadline import BoundedMeasurer, Deadline
from .measure import Measurer
from .tuner import Trial, WorkloadResult, WorkloadSearch

ALPHA = 0.2  # weight of the recent improvement against the optimistic estimate (Ansor's alpha)
WINDOW = 4  # trials over which the recent improvement is measured
BATCH = 2  # trials a task gets each time it is chosen


@dataclass
class Task:
    """One workload of the model: the kernels that use it and its search."""

    workload: str
    kernels: list[str]
    search: WorkloadSearch | None = None

    @property
    def weight(self) -> int:
        return len(self.kernels)

    def estimated_seconds(self) -> float:
        """Its estimated share of one model call: weight x the default's seconds per call."""
        return self.weight * self.search.result.default_seconds if self.search else 0.0

    def expected_saving(self) -> float:
        """Seconds of one model call its best alone would save: weight x default x (1 - best relative time)."""
        return self.estimated_seconds() * max(1.0 - self.search.best_score(), 0.0) if self.search else 0.0

    def gradient(self) -> float:
        """Seconds of model latency one second of tuning is expected to save (see the module docstring)."""
        search = self.search
        scores = [t.score for t in search.result.trials]
        best = search.best_score()
        backward = 0.0
        if len(scores) > WINDOW:
            before = min((s for s in scores[:-WINDOW] if s is not None), default=1.0)
            backward = (before - best) / WINDOW
        forward = best / max(search.trials, 1)
        rate = ALPHA * backward + (1 - ALPHA) * forward
        return self.estimated_seconds() * rate / max(search.seconds_per_trial, 1e-6)


def schedule(tasks: list[Task], measurer: Measurer, trials: int, seconds: float | None, strategy: str,
             on_trial: Callable[[str, str, WorkloadResult, Trial], None] | None = None, confirm: bool = True,
             clock: Callable[[], float] = time.monotonic) -> list[Task]:
    """Tune `tasks` within `trials` per task and `seconds` in all, confirmations included (a deadline: see
    the module docstring); returns the tasks that were started. clock: a test's fake clock."""
    deadline = Deadline(seconds, clock)
    bounded = BoundedMeasurer(measurer, deadline)

    def reserve() -> float:
        """Seconds kept for the confirmations of the tasks whose best beats their default."""
        return sum(t.search.confirmation_seconds() for t in started) if confirm else 0.0

    def time_left(extra: float = 0.0) -> bool:
        return deadline.fits(extra + reserve())

    started: list[Task] = []
    for task in tasks:  # every task's default first: the estimates need them
        if started and not time_left(max(t.search.seconds_per_trial for t in started)):
            break
        callback = (lambda result, trial, t=task: on_trial(t.kernels[0], t.workload, result, trial)) \
            if on_trial else None
        task.search = WorkloadSearch(task.workload, measurer=bounded, strategy=strategy, on_trial=callback,
                                     clock=clock)
        try:
            task.search.start()
        except RuntimeError:
            if deadline.left() > 0:
                raise  # the default failed by itself, not stopped by the deadline
            task.search = None
            break
        started.append(task)
    for task in started:
        if task.search.trials < trials and time_left(task.search.seconds_per_trial):
            task.search.transfer()

    active = [t for t in started if t.search.trials < trials]
    while active:
        task = max(active, key=Task.gradient)
        search = task.search

        def may_continue(s: WorkloadSearch = search) -> bool:
            return s.trials < trials and time_left(s.seconds_per_trial)
        if not may_continue() or not search.step(min(BATCH, trials - search.trials), may_continue,
                                                 seconds_left=deadline.left() - reserve()):
            active.remove(task)  # its trials are spent, its space exhausted, or no time for another trial
            if not time_left(min((t.search.seconds_per_trial for t in active), default=0.0)):
                break
        elif search.trials >= trials:
            active.remove(task)
    for task in sorted(started, key=Task.expected_saving, reverse=True):
        search = task.search
        search.finish(confirm=confirm and deadline.fits(search.confirmation_seconds()))
        search.result.seconds_spent = search.search_seconds
    return started


__all__ = ["ALPHA", "BATCH", "Task", "WINDOW", "schedule"]
