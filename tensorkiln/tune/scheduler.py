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
appended only if it wins twice.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from .measure import Measurer
from .tuner import NOISE, Trial, WorkloadResult, WorkloadSearch

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
             on_trial: Callable[[str, str, WorkloadResult, Trial], None] | None = None) -> list[Task]:
    """Tune `tasks` within `trials` per task and `seconds` in all; returns the tasks that were started."""
    start = time.monotonic()

    def reserve() -> float:
        """Seconds kept for the confirmations of the tasks whose best beats their default."""
        return sum(2 * t.search.seconds_per_trial for t in started if t.search.best_score() < 1 - NOISE)

    def time_left(extra: float = 0.0) -> bool:
        if seconds is None:
            return True
        elapsed = time.monotonic() - start
        return elapsed + extra + reserve() <= seconds

    started: list[Task] = []
    for task in tasks:  # every task's default first: the estimates need them
        if started and not time_left(max(t.search.seconds_per_trial for t in started)):
            break
        callback = (lambda result, trial, t=task: on_trial(t.kernels[0], t.workload, result, trial)) \
            if on_trial else None
        task.search = WorkloadSearch(task.workload, measurer, strategy, on_trial=callback)
        task.search.start()
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
        if not may_continue() or not search.step(min(BATCH, trials - search.trials), may_continue):
            active.remove(task)  # its trials are spent, its space exhausted, or no time for another trial
            if not time_left(min((t.search.seconds_per_trial for t in active), default=0.0)):
                break
        elif search.trials >= trials:
            active.remove(task)
    for task in started:
        task.search.finish().seconds_spent = task.search.measuring_seconds
    return started


__all__ = ["ALPHA", "BATCH", "Task", "WINDOW", "schedule"]
