"""A budget's end that every measurement respects, so a search stops at its deadline and not after it.

A search decides whether another trial fits from what its trials have cost
on average, but one trial can cost far more than the average (a
convolution candidate that builds a Winograd kernel, a fresh worker's
start, a hang up to the measurer's timeout), and the confirmations after
the search cost trials too. The time after the searches is someone else's:
tk.tune keeps it for the builds of the model (in_model.py, model_check.py).
So every request of a search goes through a `BoundedMeasurer`: a request
made after the deadline fails at once without reaching the worker, and one
made before it waits at most until the deadline (the worker is then
stopped like a hung one and the candidate fails). The searches then end by
their deadline, give or take the killing of a worker.
"""
from __future__ import annotations

import math
import time
from typing import Callable

from .measure import Measurement, Measurer


class Deadline:
    """The end of a budget of `seconds` from now on `clock` (None: no end)."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.start = clock()
        self.end = None if seconds is None else self.start + seconds

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        """Seconds until the end (inf without one; negative once past it)."""
        return math.inf if self.end is None else self.end - self.clock()

    def fits(self, seconds: float) -> bool:
        """Whether `seconds` more end by the deadline."""
        return seconds <= self.left()


class BoundedMeasurer:
    """A measurer (measure.py's, or one speaking its `measure`) whose every answer comes by the deadline.

    Its other attributes (rounds, timeout, ...) are the wrapped measurer's."""

    def __init__(self, measurer: Measurer, deadline: Deadline):
        self.measurer, self.deadline = measurer, deadline

    def measure(self, workload: str, config: dict | None, rounds: int | None = None,
                cutoff: float | None = None) -> Measurement:
        left = self.deadline.left()
        if left <= 0:
            return Measurement(False, error="no time left in the budget")
        limit = None if math.isinf(left) else left
        return self.measurer.measure(workload, config, rounds=rounds, cutoff=cutoff, limit=limit)

    def __getattr__(self, name: str):
        return getattr(self.measurer, name)


__all__ = ["BoundedMeasurer", "Deadline"]
