"""Tuning one workload: search its space, measure candidates, confirm the winner, append a record.

`tune_workload(key, trials, seconds)`:

1. measures the default (the analytic configuration; it is trial 1 and
   the reference every later candidate is timed against, in turns);
2. tries the configuration of the nearest workload already tuned on this
   machine (same template, shapes closest in log scale), made legal here:
   it is taken only if it measures faster, like any other candidate;
3. lets the strategy propose candidates, a few at a time, until `trials`
   candidates were measured or another trial and the confirmation would
   not fit in `seconds`;
4. measures the best candidate again against the default with twice the
   rounds; it wins only if it is faster by more than `noise` in both
   measurements (the default wins ties), and then its record is appended.

A candidate's score is its median per-round time ratio to the default, so a
machine whose speed drifts does not pick the winner.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from ..kernels.knob_space import Config
from ..kernels.templates.spaces import space_of
from ..kernels.tuned import parse_workload, target_key
from ..runtime import tuning_records
from .measure import Measurement, Measurer
from .strategies import EvolutionarySearch, make_strategy

NOISE = 0.02  # a candidate must be faster than the default by more than this, twice
CUTOFF = 1.10  # a candidate this much slower than the best so far in its first round is not timed further
PROPOSE_FLOOR = 0.25  # seconds a batch's proposal may take however cheap its measurements are


@dataclass
class Trial:
    """One measured candidate."""

    config: Config
    measurement: Measurement
    elapsed: float  # seconds the search of its workload had spent (measuring, proposing), this trial included
    is_default: bool = False

    @property
    def score(self) -> float | None:
        """Time relative to the default (the default itself is 1 by definition); None: failed."""
        if not self.measurement.ok:
            return None
        return 1.0 if self.is_default else self.measurement.ratio


@dataclass
class WorkloadResult:
    """What tuning one workload found: the default's and the best time (seconds per call), the trials."""

    workload: str
    default_seconds: float
    best_seconds: float
    best_config: Config
    default_config: Config
    trials: list[Trial] = field(default_factory=list)
    tuned: bool = False  # a candidate beat the default (and its record was written)
    strategy: str = ""
    cost_model: str = ""
    seconds_spent: float = 0.0
    unconfirmed: bool = False  # its best alone was not measured again (no record): see WorkloadSearch.finish

    @property
    def wins_alone(self) -> bool:
        """Whether its best candidate beat the default alone by more than NOISE (confirmed or not)."""
        return self.best_seconds < (1 - NOISE) * self.default_seconds

    @property
    def speedup(self) -> float:
        return self.default_seconds / self.best_seconds if self.best_seconds > 0 else 1.0

    @property
    def failures(self) -> list[Trial]:
        return [t for t in self.trials if not t.measurement.ok]

    def convergence(self) -> list[tuple[int, float]]:
        """(trial number, best time so far) after each trial: the convergence plot's points."""
        points, best = [], math.inf
        for number, trial in enumerate(self.trials, start=1):
            if trial.measurement.ok:
                best = min(best, trial.score * self.default_seconds)
            points.append((number, best))
        return points


def _distance(a: dict[str, str], b: dict[str, str]) -> float:
    """How far apart two workloads' shapes are (log scale); inf when not comparable."""
    if set(a) != set(b) or any(a[f] != b[f] for f in a if f not in ("m", "n", "k")):
        return math.inf
    return sum(abs(math.log(int(a[f])) - math.log(int(b[f]))) for f in ("m", "n", "k") if f in a)


def nearest_tuned(workload: str) -> tuple[str, Config] | None:
    """The nearest other workload of the same template tuned on this machine, and its configuration."""
    template, facts = parse_workload(workload)
    best = None
    target = target_key()
    for record in tuning_records.read_records():
        if record.target != target or record.workload == workload or record.seconds >= record.default_seconds:
            continue
        other_template, other = parse_workload(record.workload)
        if other_template != template:
            continue
        distance = _distance(facts, other)
        if distance < math.inf and (best is None or distance < best[0]):
            best = (distance, record.workload, record.config)
    return (best[1], best[2]) if best else None


class WorkloadSearch:
    """The search of one workload, run a few trials at a time (`step`), so that a task scheduler can
    share a budget among many workloads (scheduler.py); `tune_workload` runs one to the end.

    `start()` measures the default (trial 1) and the nearest tuned workload's configuration;
    `step(count)` measures up to `count` more candidates and says whether the space has more;
    `finish()` confirms the best and appends its record.
    clock: what search_seconds (measuring and proposing) is counted on (a test's fake clock; time.monotonic).
    """

    def __init__(self, workload: str, measurer: Measurer, strategy: str = "evolutionary", seed: int = 0,
                 on_trial: Callable[[WorkloadResult, Trial], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        space = space_of(workload)
        if space is None:
            raise ValueError(f"workload {workload!r} has no search space")
        self.space, self.measurer, self.on_trial, self.clock = space, measurer, on_trial, clock
        self.search = make_strategy(strategy, space, seed)
        self.result = WorkloadResult(workload, math.inf, math.inf, dict(space.default), dict(space.default),
                                     strategy=strategy,
                                     cost_model=self.search.model.name if isinstance(self.search, EvolutionarySearch)
                                     else "")
        self.exhausted = False
        # Time this workload's search has cost: its measurements, and its strategy's proposals (the cost
        # model's fit and the evolutionary pool: a tenth of a second to seconds per batch)
        self.measuring_seconds = 0.0
        self.proposing_seconds = 0.0

    @property
    def trials(self) -> int:
        return len(self.result.trials)

    @property
    def search_seconds(self) -> float:
        """What the search has cost so far: measuring and proposing."""
        return self.measuring_seconds + self.proposing_seconds

    @property
    def seconds_per_trial(self) -> float:
        """What a candidate's trial costs: the trials after the first (which also started the worker,
        computed the reference and built the default), or the first alone while it is the only one."""
        return self._per_candidate(self.search_seconds)

    @property
    def measuring_seconds_per_trial(self) -> float:
        """What measuring a candidate costs (seconds_per_trial without the proposing)."""
        return self._per_candidate(self.measuring_seconds)

    def _per_candidate(self, spent: float) -> float:
        """`spent` (seconds, counted since the search began) per trial after the first, which also started
        the worker and built the default; the first alone while it is the only one."""
        if self.trials <= 1:
            return spent
        return (spent - self.result.trials[0].elapsed) / (self.trials - 1)

    def best_score(self) -> float:
        """The best time relative to the default measured so far (1.0: only the default)."""
        return min((t.score for t in self.result.trials if t.score is not None), default=1.0)

    def _run(self, config: Config | None) -> Trial:
        began = self.clock()
        cutoff = None if config is None else self.best_score() * CUTOFF
        measurement = self.measurer.measure(self.result.workload, config, cutoff=cutoff)
        self.measuring_seconds += self.clock() - began
        trial = Trial(dict(config or self.space.default), measurement, self.search_seconds, is_default=config is None)
        self.result.trials.append(trial)
        self.search.observe(trial.config, trial.score)
        if self.on_trial:
            self.on_trial(self.result, trial)
        return trial

    def start(self) -> None:
        """The default (trial 1, the reference of every later one), then the nearest tuned configuration."""
        first = self._run(None)
        if not first.measurement.ok:
            raise RuntimeError(f"{self.result.workload}: the default configuration failed: {first.measurement.error}")
        self.result.default_seconds = self.result.best_seconds = first.measurement.default_seconds

    def transfer(self) -> None:
        """Try the configuration of the nearest workload tuned on this machine, made legal here."""
        near = nearest_tuned(self.result.workload)
        if near is not None:
            transferred = self.space.fix(dict(near[1]))
            if transferred is not None and not self.search.seen(transferred):
                self._run(transferred)

    def step(self, count: int, may_continue: Callable[[], bool] = lambda: True,
             seconds_left: float | None = None) -> bool:
        """Measure up to `count` proposed candidates while `may_continue()`; False once the space is exhausted.

        Choosing them may take about as long as measuring them is expected to (at least PROPOSE_FLOOR), so
        proposing costs about half of a search at most, and no more than `seconds_left` (a budget's rest)."""
        propose_seconds = max(PROPOSE_FLOOR, count * self.measuring_seconds_per_trial)
        if seconds_left is not None:
            propose_seconds = max(min(propose_seconds, seconds_left), 0.0)
        began = self.clock()
        batch = self.search.propose(count, propose_seconds)
        self.proposing_seconds += self.clock() - began
        if not batch:
            self.exhausted = True
            return False
        for config in batch:
            if not may_continue():
                break
            self._run(config)
        return True

    def confirmation_seconds(self) -> float:
        """What finish() is expected to cost: twice the rounds of a trial, counted as two trials (nothing
        when the best alone does not beat the default, and there is nothing to confirm)."""
        return 2 * self.seconds_per_trial if self.best_score() < 1 - NOISE else 0.0

    def finish(self, write_record: bool = True, confirm: bool = True) -> WorkloadResult:
        """Confirm the best candidate (twice the rounds); append its record if it wins again.

        confirm=False: no second measurement and no record; the result's best is the best alone,
        marked unconfirmed (the budget had no time for it, or the model itself will judge it)."""
        if not confirm:
            best = self.best_score()
            if best < 1.0:  # a candidate was faster alone; the default's is kept until it is confirmed
                self.result.best_config = dict(self.search.best(1)[0])
                self.result.best_seconds = best * self.result.default_seconds
                self.result.unconfirmed = True
            return self.result
        _confirm(self.result, self.search, self.measurer, self.space.default)
        if self.result.tuned and write_record:
            tuning_records.append_record(tuning_records.TuningRecord(
                self.result.workload, target_key(), self.result.best_config, self.result.best_seconds,
                self.result.default_seconds, len(self.result.trials)))
        return self.result


def tune_workload(workload: str, trials: int = 64, seconds: float | None = None, strategy: str = "evolutionary",
                  measurer: Measurer | None = None, seed: int = 0, write_record: bool = True,
                  on_trial: Callable[[WorkloadResult, Trial], None] | None = None) -> WorkloadResult:
    """Search `workload`'s space (see the module docstring); the result says what was found and kept."""
    owned = measurer is None
    measurer = measurer or Measurer()
    search = WorkloadSearch(workload, measurer, strategy, seed, on_trial)
    start = time.monotonic()

    def time_left() -> bool:
        """Another trial fits: under `trials`, and within `seconds` with room left for the confirmation
        (about two trials' time) after it. After the default alone the cost of a candidate is not known
        yet (the default's trial also started the worker): one is measured if any time is left."""
        if search.trials >= trials:
            return False
        if seconds is None:
            return True
        per_trial = search.seconds_per_trial if search.trials > 1 else 0.0
        return time.monotonic() - start + 3 * per_trial <= seconds

    try:
        search.start()
        if time_left():
            search.transfer()
        while time_left() and search.step(min(4, trials - search.trials), time_left,
                                          None if seconds is None else seconds - (time.monotonic() - start)):
            pass
        result = search.finish(write_record)
    finally:
        if owned:
            measurer.close()
    result.seconds_spent = time.monotonic() - start
    return result


def _confirm(result: WorkloadResult, search, measurer: Measurer, default: Config) -> None:
    """Measure the best candidate again with twice the rounds; keep it only if it wins again."""
    ranked = [c for c in search.best(2) if c != default]
    if not ranked:
        return
    best = ranked[0]
    first = search.scores[search.space.key(best)]
    if first is None or first >= 1 - NOISE:
        return
    again = measurer.measure(result.workload, best, rounds=2 * measurer.rounds)
    if not again.ok or again.ratio >= 1 - NOISE:
        return
    ratio = max(first, again.ratio)  # the less flattering of the two
    result.best_config, result.tuned = dict(best), True
    result.best_seconds = ratio * result.default_seconds


__all__ = ["CUTOFF", "NOISE", "Trial", "WorkloadResult", "WorkloadSearch", "nearest_tuned", "tune_workload"]
