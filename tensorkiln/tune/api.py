"""tk.tune(fn, *example_args): tune every tunable kernel of a compiled function, keep the records.

The function is compiled for the example arguments (tk.jit, or the object's
own `report` for a JitFunction or a loaded ONNX model); each kernel's comment
names the workloads its templates asked `kernels/tuned.py` about (a kernel
without a template, its schedule sketch: kernels/sketch.py), and every
workload with a search space is a task (deduplicated: kernels of the same
shape share one), tuned together within the budget by the task scheduler
(scheduler.py: trials go where they are expected to save the most model
latency per second). Records are appended to the records file, so the next
compile, in this process or another, uses them; a JitFunction passed in
forgets its compiled signatures.

With `check_model=True` the model itself then decides: each workload's
best few candidates alone are timed inside the compiled model (in_model.py:
one candidate per workload per build, the largest wins alone first,
profile() in turns with the untuned build) and the one that is fastest
there is kept if it beats the default by more than the noise; the kept
records are then checked together, end to end (model_check.py: the model
with them against the untuned one, in turns), and unless the model is
faster every record is withdrawn. The searches' winners are then not
confirmed alone (the model judges them), and no search record is written.

Builds of a whole model cost far more than a kernel's trial, so the budget
is planned from the untuned build, made first (`search_seconds`): the time
of IN_MODEL_BUILDS builds of the choice (each a build, its profiling build
and the rounds of profile()) and of the check's build and latency is kept
back (at least MIN_IN_MODEL_SHARE of `seconds`, at most 1 -
MIN_SEARCH_SHARE), so the more a build costs, the fewer seconds the
searches get. The searches stop at their deadline (scheduler.py: every
measurement is bounded by it), and the in-model choice then makes builds
only while one more and the check's fit in what is left.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from ..frontend.jit import JitFunction, jit
from ..kernels.sketch import sketch_kernel
from ..kernels.templates.conv_choice import shape_of_workload
from ..kernels.templates.spaces import space_of
from ..kernels.tuned import parse_workload
from .measure import Measurer
from .in_model import InModelChoice, choose_in_model, shortlists_by_saving
from .model_check import ModelCheck, ModelCost, check_model as check_in_model, untuned_build
from .scheduler import Task, schedule
from .tuner import WorkloadResult


@dataclass
class KernelTuning:
    """One kernel's workload, what tuning it found, and the trials it took."""

    kernel: str
    workload: str
    result: WorkloadResult
    uses: int = 1  # kernels of the model with this workload

    @property
    def default_seconds(self) -> float:
        return self.result.default_seconds

    @property
    def best_seconds(self) -> float:
        return self.result.best_seconds

    @property
    def trials(self) -> int:
        return len(self.result.trials)


@dataclass
class TuneResult:
    """What tk.tune did: per kernel, the default and best time (seconds per call) and the trials."""

    kernels: list[KernelTuning] = field(default_factory=list)
    seconds: float = 0.0
    model_check: ModelCheck | None = None  # the in-model check of the records, when asked for
    in_model: InModelChoice | None = None  # the candidates timed inside the model before the check
    too_small: list[str] = field(default_factory=list)  # workloads left at their default: too little work
    search_seconds: float | None = None  # the searches' share of `seconds` (None: no limit)
    build_estimate: float | None = None  # with check_model and seconds: a build of the in-model choice, planned
    phases: dict[str, float] = field(default_factory=dict)  # where the seconds went, phase by phase, in order

    @property
    def trials(self) -> int:
        return sum(k.trials for k in self.kernels)

    def __str__(self) -> str:
        lines = [f"tuned {len(self.kernels)} workload(s) in {self.seconds:.1f} s, {self.trials} trials"
                 + (f" (the searches' deadline: {self.search_seconds:.0f} s)" if self.search_seconds is not None
                    else "")
                 + (f"; a build of the model in the choice planned at {self.build_estimate:.0f} s"
                    if self.build_estimate is not None else "")
                 + (f"; {len(self.too_small)} too small to tune (under {MIN_WORK_SHARE:g} of the largest task's work "
                    "x uses) kept their defaults" if self.too_small else ""),
                 f"{'kernel':<24} {'workload':<52} {'uses':>4} {'default ms':>10} {'best ms':>9} {'speedup':>7} "
                 f"{'trials':>6}"]
        if self.phases:
            lines.insert(1, "phases: " + ", ".join(f"{name} {spent:.1f} s" for name, spent in self.phases.items()))
        for k in self.kernels:
            mark = "" if k.result.tuned else "  (default kept)"
            if k.result.unconfirmed:  # its best alone went to the model, or had no time to be confirmed
                mark = "  (judged in the model)" if self.in_model is not None else "  (unconfirmed: default kept)"
            lines.append(f"{k.kernel[:24]:<24} {k.workload[:52]:<52} {k.uses:4d} {k.default_seconds * 1e3:10.3f} "
                         f"{k.best_seconds * 1e3:9.3f} {k.result.speedup:6.2f}x {k.trials:6d}{mark}")
        if self.in_model is not None:
            lines.append(str(self.in_model))
        if self.model_check is not None:
            lines.append(str(self.model_check))
        return "\n".join(lines)


def workload_uses(fn, *example_args, **example_kwargs) -> dict[str, list[str]]:
    """{workload key: the names of the kernels that use it} for every tunable workload of the compiled function."""
    compiled = fn if hasattr(fn, "report") else jit(fn)
    report = compiled.report(*example_args, **example_kwargs)
    sketches = {use.split(" ", 1)[0] for kernel in report.kernels for use in kernel.tuning if use.startswith("sketch:")}
    if any(sketch_kernel(w) is None for w in sketches) and hasattr(compiled, "explain"):
        compiled.explain(*example_args, **example_kwargs)  # a cached build: lowered again for its sketch kernels
    found: dict[str, list[str]] = {}
    for kernel in report.kernels:
        for use in kernel.tuning:
            workload = use.split(" ", 1)[0]
            if workload in found:
                found[workload].append(kernel.name)
            elif space_of(workload) is not None:
                found[workload] = [kernel.name]
    return found


def kernel_workloads(fn, *example_args, **example_kwargs) -> list[tuple[str, str]]:
    """(first kernel name, workload key) of every tunable workload the compiled function's kernels use."""
    return [(kernels[0], w) for w, kernels in workload_uses(fn, *example_args, **example_kwargs).items()]


def _work(workload: str) -> float:
    """Multiply-adds of one call of the workload's kernel (the order tasks start in)."""
    template, facts = parse_workload(workload)
    if template == "sketch":  # elements of the output; an attention kernel's are each a row of keys wide, twice
        elements = math.prod(int(d) for d in facts["shape"].split("x"))
        dims = [int(d) for d in facts["shape"].split("x")]
        return elements * 2 * dims[-2] if facts["kind"] == "attention" and len(dims) >= 2 else elements
    if template == "conv":
        shape = shape_of_workload(workload)
        oh, ow = shape.out_hw
        return shape.n * shape.k * oh * ow * shape.c * shape.kh * shape.kw
    return math.prod(int(facts.get(f, 1)) for f in ("m", "n", "k"))


def rebuilder(fn: Callable) -> Callable[[], Callable] | None:
    """A maker of fresh compiled copies of `fn` (a plain function or a JitFunction); None for other objects."""
    if isinstance(fn, JitFunction):
        return lambda: JitFunction(fn.fn, fn.options)
    if hasattr(fn, "report"):
        return None
    return lambda: jit(fn)


MIN_WORK_SHARE = 1e-4  # a task with less work x uses than this share of the largest is not tuned
IN_MODEL_BUILDS = 3  # with check_model, the budget keeps the time of this many builds of the in-model choice
MIN_IN_MODEL_SHARE = 0.25  # ... and at least this share of `seconds` (a build's estimate can be low)
MIN_SEARCH_SHARE = 0.3  # ... and leaves at least this share to the searches
IN_MODEL_ROUNDS, IN_MODEL_REPEAT = 5, 3  # the in-model choice's rounds of profile() in turns, calls in each


def search_seconds(seconds: float, cost: ModelCost, elapsed: float = 0.0) -> float:
    """The searches' share of `seconds` when the model's builds follow them (see the module docstring):
    what is left after `elapsed` and the time kept back for IN_MODEL_BUILDS builds of the choice and the check."""
    model_phase = IN_MODEL_BUILDS * cost.profiled_build_seconds(IN_MODEL_ROUNDS, IN_MODEL_REPEAT) \
        + cost.end_to_end_seconds()
    kept_back = min(max(model_phase, MIN_IN_MODEL_SHARE * seconds), (1 - MIN_SEARCH_SHARE) * seconds)
    return max(seconds - kept_back - elapsed, 0.0)


def worth_tuning(uses: dict[str, list[str]]) -> tuple[list[Task], list[str]]:
    """The tasks, largest work x uses first, and the workloads with less than MIN_WORK_SHARE of the largest's.

    Every task's default is measured before any search, and each costs seconds (a build, the worker's
    reference): a model's many tiny kernels (ResNet-18's per-channel batch-norm vectors) would spend the
    budget on that alone, for kernels whose time is noise in the model's."""
    ranked = sorted(uses.items(), key=lambda item: -_work(item[0]) * len(item[1]))
    largest = _work(ranked[0][0]) * len(ranked[0][1]) if ranked else 0.0
    small = {w for w, kernels in ranked if _work(w) * len(kernels) < MIN_WORK_SHARE * largest}
    return [Task(w, kernels) for w, kernels in ranked if w not in small], [w for w, _ in ranked if w in small]


def tune(fn: Callable, *example_args, trials: int = 64, seconds: float | None = None,
         strategy: str = "evolutionary", progress: Callable | None = None, measurer: Measurer | None = None,
         check_model: bool = False, rebuild: Callable[[], Callable] | None = None,
         **example_kwargs) -> TuneResult:
    """Tune fn's kernels for these example arguments; records are kept for every later compile.

    trials: candidates measured per workload at most (the default counts as one).
    seconds: the whole call's budget, shared among the workloads by the task scheduler (scheduler.py).
    strategy: random, genetic, annealing or evolutionary (cost-model guided; the default).
    progress(kernel, workload, result, trial) is called after every trial.
    check_model: afterwards, choose among each workload's best candidates inside the model (in_model.py),
    check the records kept inside the model and withdraw those that do not pay (model_check.py); rebuild() makes a fresh compiled copy of the model for it (default: from fn, which
    must then be a plain function or a JitFunction; example_kwargs are not passed to the check).
    """
    start = time.monotonic()
    phases: dict[str, float] = {}
    phase_began = start

    def phase_done(name: str) -> None:
        nonlocal phase_began
        now = time.monotonic()
        phases[name] = now - phase_began
        phase_began = now

    rebuild = rebuild or rebuilder(fn)
    if check_model and rebuild is None:
        raise ValueError("tk.tune(check_model=True) of this object needs rebuild=, a maker of fresh compiled copies")
    uses = workload_uses(fn, *example_args, **example_kwargs)
    phase_done("finding the workloads")
    untuned, searches = None, seconds
    if check_model:  # its untuned build now: it also says roughly what the model's builds will cost
        untuned, cost = untuned_build(rebuild, example_args)
        phase_done("untuned build")
        if seconds is not None:
            searches = search_seconds(seconds, cost, time.monotonic() - start)
    tasks, too_small = worth_tuning(uses)
    outcome = TuneResult(too_small=too_small, search_seconds=searches, build_estimate=None if untuned is None else
                         cost.profiled_build_seconds(IN_MODEL_ROUNDS, IN_MODEL_REPEAT), phases=phases)
    owned = measurer is None
    measurer = measurer or Measurer()
    try:  # with check_model the model judges the winners alone: no confirmation, no record of the searches
        for task in schedule(tasks, measurer, trials, searches, strategy, progress, confirm=not check_model):
            outcome.kernels.append(KernelTuning(task.kernels[0], task.workload, task.search.result, task.weight))
    finally:
        if owned:
            measurer.close()
    phase_done("searches")
    if check_model:
        shortlists = shortlists_by_saving([(k.result, k.uses) for k in outcome.kernels])
        left = None if seconds is None else seconds - (time.monotonic() - start)
        outcome.in_model = choose_in_model(rebuild, example_args, shortlists, untuned, seconds=left,
                                           keep_back=cost.end_to_end_seconds(),
                                           estimate=cost.profiled_build_seconds(IN_MODEL_ROUNDS, IN_MODEL_REPEAT),
                                           rounds=IN_MODEL_ROUNDS, repeat=IN_MODEL_REPEAT)
        phase_done("in-model choice")
        outcome.model_check = check_in_model(rebuild, example_args, list(outcome.in_model.chosen), untuned=untuned,
                                             measured=outcome.in_model.verdicts())
        phase_done("model check")
    outcome.seconds = time.monotonic() - start
    if hasattr(fn, "clear_cache"):
        fn.clear_cache()  # its signatures were compiled before the records existed
    return outcome


__all__ = ["IN_MODEL_BUILDS", "IN_MODEL_REPEAT", "IN_MODEL_ROUNDS", "KernelTuning", "MIN_IN_MODEL_SHARE",
           "MIN_SEARCH_SHARE", "MIN_WORK_SHARE", "TuneResult", "kernel_workloads", "rebuilder", "search_seconds",
           "tune", "worth_tuning", "workload_uses"]
