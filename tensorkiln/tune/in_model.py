"""Choosing each workload's configuration inside the model: the searches' best candidates timed in the model.

A workload's search (tuner.py) ranks candidates by timing its kernel alone:
one kernel called over and over on operands in its caches, a GEMM without
the epilogue it carries in the model. Those ranks do not predict the model:
a configuration that wins alone often ties or loses between the model's
other kernels (their evictions, their thread barriers, the fused epilogue),
and one that merely tied alone can win there. So the isolated search only
makes a *shortlist* per workload, and the model itself picks from it:

1. shortlist: each workload's best distinct candidates alone (at most
   SHORTLIST, none slower alone than MARGIN x its default), best first;
   the workloads ordered by what their best alone would save in one model
   call (uses x default x its fall), largest first (shortlists_by_saving):
   the first build carries the largest wins, and where two workloads
   share a kernel the larger win goes first;
2. each build compiles the model with the next candidate of every workload
   whose kernels no other candidate of the build touches: candidates of
   different kernels do not change each other, so one build measures one
   candidate of many workloads (a convolution and the GEMMs its kernel
   runs are measured in different builds: the convolution's candidate can
   change its algorithm and with it the GEMMs);
3. each build is profiled (`profile()`: every kernel's time inside whole
   model calls) in alternating rounds with the untuned build, and each
   candidate's in-model ratio is the median over rounds of its workload's
   kernels' summed time, tuned / untuned;
4. a candidate *wins in turns* if its in-model ratio is below 1 - NOISE
   and it was faster than the untuned build in all rounds but at most
   LOST_ROUNDS (a median that one or two lucky rounds of a loaded machine
   pulled down does not count); a workload takes its winner in turns with
   the lowest ratio, if it has one (the default wins ties); where winners of
   two workloads touch a kernel in common (never measured together), only
   the one that saved the most in the model is kept (one_per_kernel); each
   kept winner's record is appended with the in-model times, and every
   earlier record of the workloads' other configurations is withdrawn.

A build stops being made once the next one, and the seconds kept back for
what follows it, would not fit in `seconds` (the first is taken to cost the
caller's estimate, every later one as much as the slowest made so far: the
caches make the untuned build's time a poor estimate). The
records chosen are then checked together, end to end, by model_check.py
(its step 4: the model with them against the untuned one, in turns; its
per-workload steps are these measurements, not repeated).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from ..kernels.knob_space import Config
from ..kernels.tuned import target_key
from ..runtime import tuning_records
from .model_check import WorkloadCheck, _built, _withdraw, workload_seconds
from .tuner import NOISE, WorkloadResult

SHORTLIST = 5  # candidates per workload taken into the model (builds go on while the budget lasts)
LOST_ROUNDS = 1  # rounds of profile() a winner in turns may lose to the untuned build
MARGIN = 1.05  # a candidate slower alone than MARGIN x its default is not taken into the model


def shortlist(result: WorkloadResult, count: int = SHORTLIST, margin: float = MARGIN) -> list[Config]:
    """The search's best distinct candidates alone, best first: at most `count`, none slower than margin x
    the default, never the default itself (the model's untuned build is what each is compared with)."""
    ranked = sorted((t for t in result.trials if not t.is_default and t.score is not None and t.score < margin),
                    key=lambda t: t.score)
    chosen: list[Config] = []
    for trial in ranked:
        if trial.config != result.default_config and trial.config not in chosen:
            chosen.append(dict(trial.config))
        if len(chosen) == count:
            break
    return chosen


def shortlists_by_saving(results: list[tuple[WorkloadResult, int]]) -> dict[str, list[Config]]:
    """{workload: its shortlist} of the (search result, uses) pairs that have one, ordered by what the best
    alone would save in one model call, uses x default x (1 - its time relative to the default), largest
    first (a candidate that only tied alone saves nothing: it goes last)."""
    def saving(item: tuple[WorkloadResult, int]) -> float:
        result, uses = item
        best = min((t.score for t in result.trials if t.score is not None and not t.is_default), default=1.0)
        return uses * result.default_seconds * max(1.0 - best, 0.0)
    ranked = sorted(results, key=saving, reverse=True)
    return {r.workload: found for r, _ in ranked if (found := shortlist(r))}


@dataclass
class CandidateTiming:
    """One candidate of one workload inside the model: its kernels' summed seconds per call."""

    workload: str
    config: Config
    build: int  # which build carried it (0: the first)
    kernels: int
    untuned_seconds: float
    seconds: float
    ratio: float  # median over rounds of tuned / untuned; 0.0: no kernel of the build named the workload
    rounds_lost: int = 0  # rounds in which its kernels were not faster than the untuned build's

    @property
    def wins_in_turns(self) -> bool:
        """Faster than the untuned build by more than NOISE (median) and in all rounds but LOST_ROUNDS."""
        return 0 < self.ratio < 1 - NOISE and self.rounds_lost <= LOST_ROUNDS


@dataclass
class InModelChoice:
    """What choose_in_model measured and chose."""

    timings: list[CandidateTiming] = field(default_factory=list)
    chosen: dict[str, Config] = field(default_factory=dict)
    builds: int = 0
    untried: int = 0  # shortlisted candidates left out: no time for their build
    seconds: float = 0.0

    def best(self, workload: str) -> CandidateTiming | None:
        """The workload's candidate with the lowest in-model ratio among those that win in turns."""
        winners = [t for t in self.timings if t.workload == workload and t.wins_in_turns]
        return min(winners, key=lambda t: t.ratio, default=None)

    def verdicts(self) -> dict[str, WorkloadCheck]:
        """Each chosen workload's in-model times, as the check's per-workload verdicts."""
        return {w: WorkloadCheck(w, dict(c), best.kernels, best.untuned_seconds, best.seconds, best.ratio)
                for w, c in self.chosen.items() if (best := self.best(w)) is not None}

    def __str__(self) -> str:
        lines = [f"in-model choice: {len(self.timings)} candidate(s) timed inside the model in {self.builds} "
                 f"build(s), {self.seconds:.0f} s" + (f"; {self.untried} left untried (no time)" if self.untried else ""),
                 f"{'workload':<60} {'build':>5} {'untuned ms':>10} {'tuned ms':>9} {'ratio':>6} {'lost':>4}  config"]
        for t in self.timings:
            mark = "  <- chosen" if self.chosen.get(t.workload) == t.config else ""
            config = " ".join(f"{k}={v}" for k, v in t.config.items())
            lines.append(f"{t.workload[:60]:<60} {t.build:5d} {t.untuned_seconds * 1e3:10.3f} {t.seconds * 1e3:9.3f} "
                         f"{t.ratio:6.3f} {t.rounds_lost:4d}  {config}{mark}")
        return "\n".join(lines)


def profile_in_turns(untuned, tuned, inputs: tuple, workloads: list[str], rounds: int,
                     repeat: int) -> dict[str, tuple[float, float, int, float, int]]:
    """{workload: (median untuned seconds, median tuned seconds, kernels, median ratio, rounds lost)} of the
    kernels naming each workload, both builds profiled in alternating order each round (a round is lost
    where the tuned kernels were not faster); a workload that no kernel of the tuned build names gets
    ratio 0.0 (unmeasured)."""
    samples: dict[str, list[tuple[float, float, int]]] = {w: [] for w in workloads}
    for round_index in range(rounds):
        order = [(untuned, "u"), (tuned, "t")] if round_index % 2 == 0 else [(tuned, "t"), (untuned, "u")]
        measured = {side: workload_seconds(compiled, inputs, repeat) for compiled, side in order}
        for w in workloads:
            before, count = measured["u"].get(w, (0.0, 0))
            after, _ = measured["t"].get(w, (0.0, 0))
            if before > 0:
                samples[w].append((before, after, count))
    found = {}
    for w, s in samples.items():
        if s:
            ratio = statistics.median(after / before for before, after, _ in s)
            lost = sum(after >= before for before, after, _ in s)
            found[w] = (statistics.median(x[0] for x in s), statistics.median(x[1] for x in s), s[0][2], ratio, lost)
    return found


def kernels_of(compiled, inputs: tuple) -> dict[str, set[str]]:
    """{workload: the names of the kernels that name it} in a compiled build."""
    found: dict[str, set[str]] = {}
    for kernel in compiled.report(*inputs).kernels:
        for use in kernel.tuning:
            found.setdefault(use.split(" ", 1)[0], set()).add(kernel.name)
    return found


def build_table(queues: dict[str, list[Config]], kernels: dict[str, set[str]]) -> dict[str, Config]:
    """The next candidate of each workload whose kernels no other candidate of this build touches, taken
    off `queues` (emptied ones removed). A convolution's candidate can change its algorithm and with it
    the GEMM workloads its kernel names, so a GEMM candidate inside that kernel waits for another build;
    the first workload always goes in, so every build measures something."""
    table: dict[str, Config] = {}
    taken: set[str] = set()
    for w in list(queues):
        mine = kernels.get(w, set())
        if table and mine & taken:
            continue
        table[w] = queues[w].pop(0)
        taken |= mine
        if not queues[w]:
            del queues[w]
    return table


def one_per_kernel(winners: dict[str, CandidateTiming], kernels: dict[str, set[str]]) -> list[str]:
    """The winners that may be kept together: where two touch a kernel in common (a convolution and the
    GEMMs its kernel runs), they were measured in different builds, never together, and the convolution's
    candidate can change the GEMMs; only the one that saved the most in the model is kept (its kernels'
    untuned seconds x (1 - ratio)). Largest saving first."""
    kept: list[str] = []
    taken: set[str] = set()
    for w in sorted(winners, key=lambda w: -winners[w].untuned_seconds * (1 - winners[w].ratio)):
        mine = kernels.get(w, set())
        if not mine & taken:
            kept.append(w)
            taken |= mine
    return kept


def choose_in_model(rebuild: Callable[[], object], inputs: tuple, shortlists: dict[str, list[Config]], untuned,
                    seconds: float | None = None, keep_back: float = 0.0, estimate: float = 0.0, rounds: int = 3,
                    repeat: int = 3, write: bool = True) -> InModelChoice:
    """Time the shortlisted candidates inside the model and choose per workload (see the module docstring).

    rebuild(): a fresh compiled copy of the model; untuned: its build under every analytic choice.
    seconds: make a build only while it fits (None: no limit), with `keep_back` seconds left over for what
    follows; a build (with its profiling and rounds) is taken to cost `estimate` seconds until one is made,
    then as much as the slowest so far. The workloads are taken in the order of `shortlists` (shortlists_by_saving's).
    write: append the chosen records and withdraw the workloads' other configurations.
    """
    start = time.monotonic()
    choice = InModelChoice()
    queues = {w: list(c) for w, c in shortlists.items() if c}
    kernels = kernels_of(untuned, inputs) if untuned is not None else {}
    per_build = estimate
    while queues:
        if seconds is not None and time.monotonic() - start + per_build + keep_back >= seconds:
            choice.untried += sum(len(c) for c in queues.values())
            break
        table = build_table(queues, kernels)
        index = choice.builds
        began = time.monotonic()
        tuned = _built(rebuild, inputs, table)
        for w, (before, after, count, ratio, lost) in profile_in_turns(untuned, tuned, inputs, list(table), rounds,
                                                                       repeat).items():
            choice.timings.append(CandidateTiming(w, dict(table[w]), index, count, before, after,
                                                  ratio if after > 0 else 0.0, lost))
        choice.builds += 1
        # from now on the builds measured say what one costs (the estimate, made before any build of a
        # new configuration, covers a cold compile; a build of the choice recompiles only the C)
        took = time.monotonic() - began
        per_build = took if choice.builds == 1 else max(per_build, took)
    winners = {w: best for w in shortlists if (best := choice.best(w)) is not None}
    for w in one_per_kernel(winners, kernels):
        choice.chosen[w] = winners[w].config
    if write:
        _write(choice, shortlists)
    choice.seconds = time.monotonic() - start
    return choice


def _write(choice: InModelChoice, shortlists: dict[str, list[Config]]) -> None:
    """Withdraw every other configuration of each workload that has a record, then append the chosen ones."""
    records = tuning_records.read_records()
    target = target_key()
    for w in shortlists:
        kept = choice.chosen.get(w)
        earlier = {tuple(sorted(r.config.items())): r for r in records
                   if r.target == target and r.workload == w and r.seconds < r.default_seconds}
        for record in earlier.values():
            if record.config != kept:
                _withdraw(w, record.config, record.default_seconds, record.default_seconds)
        if kept is not None:
            best = choice.best(w)  # its time as ratio x untuned: the medians of the two alone may not agree
            tuning_records.append_record(tuning_records.TuningRecord(
                w, target, dict(kept), best.ratio * best.untuned_seconds, best.untuned_seconds, 0))


__all__ = ["CandidateTiming", "InModelChoice", "MARGIN", "SHORTLIST", "build_table", "choose_in_model", "kernels_of",
           "one_per_kernel", "profile_in_turns", "shortlist", "shortlists_by_saving"]
