"""Do a model's tuning records pay inside the model? Per-workload kernel times and the latency, in turns.

A workload's search measures its kernel alone: one kernel in a program of
its own, called over and over on the same operands, its caches hot. Inside a
model the same kernel runs between others that evicted its operands, and a
GEMM there carries its epilogue (bias, GELU, a residual add) that the
search's GEMM alone does not. A configuration that won alone can lose in the
model, and the searches' "never slower" does not add up to a faster model.

`check_model(rebuild, inputs, workloads)` settles it in the model itself:

1. the model is compiled twice, untuned (every template's analytic choice)
   and tuned (the records in use), and both are profiled (`profile()`: the
   time of every kernel inside whole-model calls) in alternating rounds;
2. each tuned workload's share is the summed time of the kernels that name
   it (a kernel's comment lists the workloads it asked about), in each
   build; its in-model ratio is the median over rounds of tuned / untuned;
3. a workload whose kernels are not faster in the model by more than NOISE
   has its record withdrawn (the default wins ties), and so has one that no
   kernel of the tuned build names (another record changed its kernel: a
   convolution tuned to another algorithm has no Winograd GEMM left);
4. the model with the remaining records is compiled and timed against the
   untuned one in END_TO_END_ROUNDS pairs of blocks side by side; unless it
   wins enough pairs that a coin would win as many at most once in 20 (a
   one-sided sign test) and its median pair is faster by more than
   END_TO_END_MARGIN, every record of the model is withdrawn too.

A withdrawal is a record appended with the same workload and configuration
and the in-model times, seconds >= default_seconds (a tie is written at the
default's time): an append-only file that says "measured in the model, this
configuration did not pay" (kernels/tuned.py then ignores the earlier
record of that configuration).
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from ..kernels.tuned import active_configs, target_key, using_configs
from ..runtime import tuning_records
from ..runtime.c_compiler import recorded_compile_seconds
from .tuner import NOISE


@dataclass
class WorkloadCheck:
    """One tuned workload inside the model: its kernels' summed seconds per call, untuned and tuned."""

    workload: str
    config: dict
    kernels: int
    untuned_seconds: float
    tuned_seconds: float
    ratio: float  # median over rounds of tuned / untuned
    kept: bool = False


@dataclass
class ModelCheck:
    """What check_model measured and decided."""

    workloads: list[WorkloadCheck] = field(default_factory=list)
    untuned_seconds: float = 0.0  # the whole model per call, in turns with the kept records' build
    tuned_seconds: float = 0.0
    rounds: int = 0
    round_ratios: list[float] = field(default_factory=list)  # tuned / untuned seconds per call, pair by pair
    kept_end_to_end: bool = False  # the kept records made the model faster (`faster_in_pairs`)

    @property
    def speedup(self) -> float:
        """Untuned / tuned latency with the records that were kept (1.0: none kept)."""
        return self.untuned_seconds / self.tuned_seconds if self.tuned_seconds > 0 else 1.0

    @property
    def kept(self) -> dict[str, dict]:
        return {w.workload: w.config for w in self.workloads if w.kept}

    def __str__(self) -> str:
        lines = [f"in-model check ({self.rounds} rounds of profile() in turns, untuned vs tuned):",
                 f"{'workload':<60} {'kernels':>7} {'untuned ms':>10} {'tuned ms':>9} {'ratio':>6}  verdict"]
        for w in self.workloads:
            verdict = "kept" if w.kept else "withdrawn"
            lines.append(f"{w.workload[:60]:<60} {w.kernels:7d} {w.untuned_seconds * 1e3:10.3f} "
                         f"{w.tuned_seconds * 1e3:9.3f} {w.ratio:6.3f}  {verdict}")
        if not self.workloads:
            lines.append("no tuned record in use: nothing to check")
        elif self.untuned_seconds <= 0:
            lines.append("no record paid in the model: the tuned model is the untuned one")
        else:
            wins = sum(r < 1 for r in self.round_ratios)
            lines.append(f"end to end, {len(self.round_ratios)} pairs of blocks: untuned "
                         f"{self.untuned_seconds * 1e3:.2f} ms, with the records that paid "
                         f"{self.tuned_seconds * 1e3:.2f} ms ({self.speedup:.2f}x), faster in {wins} pairs "
                         f"(needs {wins_needed(len(self.round_ratios))})"
                         + ("" if self.kept_end_to_end else "; not shown faster: every record withdrawn"))
        return "\n".join(lines)


def workload_seconds(compiled, inputs: tuple, repeat: int) -> dict[str, tuple[float, int]]:
    """{workload: (summed seconds per call of the kernels naming it, how many kernels)} from one profile()."""
    report = compiled.report(*inputs)
    profile = compiled.profile(*inputs, repeat=repeat)
    totals: dict[str, tuple[float, int]] = {}
    for kernel, timed in zip(report.kernels, profile.kernels):
        for use in kernel.tuning:
            workload = use.split(" ", 1)[0]
            seconds, count = totals.get(workload, (0.0, 0))
            totals[workload] = (seconds + timed.seconds, count + 1)
    return totals


END_TO_END_ROUNDS = 16  # pairs of blocks, the untuned build's and the tuned one's side by side
END_TO_END_BLOCK_SECONDS = 0.15  # a block: at least this long and END_TO_END_BLOCK_CALLS calls
END_TO_END_BLOCK_CALLS = 2  # calls a block has at least, after an untimed one
END_TO_END_MARGIN = 0.01  # the median pair's tuned / untuned must be below 1 minus this
SIGN_TEST_LEVEL = 0.05  # the chance a coin wins as many pairs, at most


def wins_needed(pairs: int, level: float = SIGN_TEST_LEVEL) -> int:
    """The fewest pairs of `pairs` a build must win so that a fair coin wins as many with probability at
    most `level` (a one-sided sign test; 12 of 16); pairs + 1 where no count is that unlikely."""
    for wins in range(pairs + 1):
        if sum(math.comb(pairs, k) for k in range(wins, pairs + 1)) <= level * 2 ** pairs:
            return wins
    return pairs + 1


def faster_in_pairs(ratios: list[float]) -> bool:
    """Whether pairs of blocks with these tuned / untuned ratios show the tuned build faster: it wins
    `wins_needed` of them and the median is below 1 - END_TO_END_MARGIN (the default wins ties)."""
    return bool(ratios) and sum(r < 1 for r in ratios) >= wins_needed(len(ratios)) and \
        statistics.median(ratios) < 1 - END_TO_END_MARGIN


def latency_in_turns(runs: dict[str, Callable[[], object]], rounds: int | None = None,
                     block_seconds: float | None = None) -> dict[str, list[float]]:
    """Seconds per call of each of `runs` in `rounds` (END_TO_END_ROUNDS) rounds of one block each, side by
    side (the order reversed every round, one untimed call before each block, a block at least
    `block_seconds` (END_TO_END_BLOCK_SECONDS) and END_TO_END_BLOCK_CALLS calls): a drifting machine
    moves both blocks of a round alike, so their ratio is one phase's."""
    rounds = END_TO_END_ROUNDS if rounds is None else rounds
    block_seconds = END_TO_END_BLOCK_SECONDS if block_seconds is None else block_seconds
    times: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs)
    for round_index in range(rounds):
        for name in (order if round_index % 2 == 0 else order[::-1]):
            runs[name]()
            began = time.perf_counter()
            done = 0
            while done < END_TO_END_BLOCK_CALLS or time.perf_counter() - began < block_seconds:
                runs[name]()
                done += 1
            times[name].append((time.perf_counter() - began) / done)
    return times


def end_to_end_latency_seconds(call_seconds: float) -> float:
    """What latency_in_turns costs for two builds of a model whose call takes `call_seconds`."""
    block = max(END_TO_END_BLOCK_SECONDS, END_TO_END_BLOCK_CALLS * call_seconds)
    return 2 * END_TO_END_ROUNDS * (block + 2 * call_seconds)  # a block, its untimed call, and one call's overrun


def _built(rebuild: Callable[[], object], inputs: tuple, table: dict[str, dict]):
    """The model compiled (and called once) under exactly the configurations of `table`."""
    with using_configs(table):
        compiled = rebuild()
        compiled(*inputs)
        compiled.report(*inputs)
    return compiled


def _withdraw(workload: str, config: dict, seconds: float, default_seconds: float) -> None:
    """Append the record saying `config` did not pay in the model (seconds >= default_seconds)."""
    tuning_records.append_record(tuning_records.TuningRecord(
        workload, target_key(), dict(config), max(seconds, default_seconds), default_seconds, 0))


BUILDS = 4  # builds after the untuned one: tuned, the two profiling builds, and with the records that paid


def calls_of_check(rounds: int = 5, repeat: int = 3) -> int:
    """Model calls the check's profiles make: profile() of both builds each round (a warm-up and `repeat`);
    the latency in turns after them costs end_to_end_latency_seconds."""
    return 2 * rounds * (repeat + 1)


CACHED_BUILD_FACTOR = 0.5  # a cached build is taken to cost at least this share of its recorded C compile
# (recorded whenever the library was first built, under that moment's load: ResNet-18's said 34 s where a
# build of the in-model choice and its profiling build took 38 s together)
PROFILE_BUILD = 0.9  # a profiling build's seconds per build's (ResNet-18: 29.6 s after a 33.5 s build)


@dataclass
class ModelCost:
    """What one build, one profiling build and one call of the model cost here (the untuned build's)."""

    build_seconds: float
    call_seconds: float
    profile_build_seconds: float = 0.0  # its first profile(): the profiling build, and one call

    def check_seconds(self) -> float:
        """The rest of the check: BUILDS more builds, calls_of_check() calls and the latency in turns."""
        return BUILDS * self.build_seconds + calls_of_check() * self.call_seconds + \
            end_to_end_latency_seconds(self.call_seconds)

    def profiled_build_seconds(self, rounds: int, repeat: int) -> float:
        """A build of the model with its profiling build, then `rounds` of profile() in turns with another
        build (the in-model choice's builds): the profiling build is taken as at least PROFILE_BUILD of a
        build, since the compile caches can make the untuned one's cheap."""
        profiling = max(self.profile_build_seconds, PROFILE_BUILD * self.build_seconds)
        return self.build_seconds + profiling + 2 * rounds * (repeat + 1) * self.call_seconds

    def end_to_end_seconds(self) -> float:
        """The check after the in-model choice: one build (no profiling build) and its latency in turns."""
        return self.build_seconds + end_to_end_latency_seconds(self.call_seconds)


def untuned_build(rebuild: Callable[[], object], inputs: tuple) -> tuple[object, ModelCost]:
    """The model compiled with every template's analytic choice, and what a build and a call cost (tk.tune
    keeps the check's time back from its budget). The build is profiled once here: its profiling build is
    what the in-model choice profiles every candidate build against, made now, and it generates and
    compiles the model's whole C under this moment's load. A build found in the compile caches costs
    little: a new configuration's build is then taken to cost as much as that profiling build, and at
    least CACHED_BUILD_FACTOR x the C compiler's time recorded with the cached library; the phases after
    the search measure their own builds."""
    began = time.monotonic()
    built = _built(rebuild, inputs, {})
    build_seconds = time.monotonic() - began
    report = built.report(*inputs)
    began = time.monotonic()
    built(*inputs)
    call_seconds = time.monotonic() - began
    began = time.monotonic()
    built.profile(*inputs, repeat=1)
    profile_build_seconds = time.monotonic() - began
    if report.cache_hit and report.library_path:  # a new configuration generates and compiles its C again
        build_seconds = max(build_seconds, profile_build_seconds,
                            CACHED_BUILD_FACTOR * recorded_compile_seconds(report.library_path))
    return built, ModelCost(build_seconds, call_seconds, profile_build_seconds)


def check_model(rebuild: Callable[[], object], inputs: tuple, workloads: list[str] | None = None,
                rounds: int = 5, repeat: int = 3, withdraw: bool = True, untuned=None,
                measured: dict[str, WorkloadCheck] | None = None) -> ModelCheck:
    """Check the model's tuned workloads inside the model (see the module docstring).

    rebuild(): a fresh compiled callable of the model (tk.jit of it, a loaded ONNX model), with
    `report`, `profile` and a call on `inputs`; each build is made under a fixed configuration table.
    workloads: the model's workloads to check (default: every one the model's kernels name that has
    a record in use). withdraw=False measures and decides without appending to the records file.
    untuned: the untuned build (untuned_build's), when already made.
    measured: per-workload times inside the model already taken (the in-model choice's, in_model.py):
    steps 1-3 are not repeated, and only these workloads are checked, end to end (step 4).
    """
    tuned_table = dict(active_configs())
    untuned = untuned if untuned is not None else _built(rebuild, inputs, {})
    named = {use.split(" ", 1)[0] for k in untuned.report(*inputs).kernels for use in k.tuning}
    chosen = [w for w in (workloads if workloads is not None else sorted(named)) if w in tuned_table and w in named]
    check = ModelCheck(rounds=rounds)
    if measured is not None:
        check.workloads = [measured[w] for w in chosen if w in measured]
        for w in check.workloads:
            w.kept = w.tuned_seconds > 0 and w.ratio < 1 - NOISE
        return _end_to_end(check, rebuild, inputs, untuned, None, withdraw)
    if not chosen:
        return check
    tuned = _built(rebuild, inputs, {w: tuned_table[w] for w in chosen})
    ratios: dict[str, list[float]] = {w: [] for w in chosen}
    sums: dict[str, list[tuple[float, float, int]]] = {w: [] for w in chosen}
    for round_index in range(rounds):
        order = [(untuned, "u"), (tuned, "t")] if round_index % 2 == 0 else [(tuned, "t"), (untuned, "u")]
        measured = {side: workload_seconds(compiled, inputs, repeat) for compiled, side in order}
        for w in chosen:
            before, count = measured["u"].get(w, (0.0, 0))
            after, _ = measured["t"].get(w, (0.0, 0))
            if before > 0:
                ratios[w].append(after / before)
                sums[w].append((before, after, count))
    for w in chosen:
        if not ratios[w]:
            continue
        ratio = statistics.median(ratios[w])
        before = statistics.median(s[0] for s in sums[w])
        after = statistics.median(s[1] for s in sums[w])
        # after == 0: no kernel of the tuned build names it (another record changed that kernel, as a
        # convolution's algorithm removes its Winograd GEMM); unmeasured, it is withdrawn: the default wins
        check.workloads.append(WorkloadCheck(w, dict(tuned_table[w]), sums[w][0][2], before, after, ratio,
                                             kept=after > 0 and ratio < 1 - NOISE))
    return _end_to_end(check, rebuild, inputs, untuned, tuned if len(check.kept) == len(chosen) else None, withdraw)


def _end_to_end(check: ModelCheck, rebuild: Callable[[], object], inputs: tuple, untuned, built,
                withdraw: bool) -> ModelCheck:
    """Step 4: the model with the kept records (`built`, or built now) against the untuned one in pairs of
    blocks; unless `faster_in_pairs` shows it faster nothing is kept. Every record not kept is withdrawn."""
    kept = check.kept
    if kept:
        final = built if built is not None else _built(rebuild, inputs, kept)
        times = latency_in_turns({"untuned": lambda: untuned(*inputs), "tuned": lambda: final(*inputs)})
        check.untuned_seconds = statistics.median(times["untuned"])
        check.tuned_seconds = statistics.median(times["tuned"])
        check.round_ratios = [t / u for u, t in zip(times["untuned"], times["tuned"])]
        check.kept_end_to_end = faster_in_pairs(check.round_ratios)
    if not check.kept_end_to_end:
        for w in check.workloads:
            w.kept = False
    if withdraw:
        for w in check.workloads:
            if not w.kept:
                _withdraw(w.workload, w.config, w.tuned_seconds, w.untuned_seconds)
    return check


__all__ = ["BUILDS", "CACHED_BUILD_FACTOR", "END_TO_END_ROUNDS", "PROFILE_BUILD", "ModelCheck", "ModelCost",
           "calls_of_check", "WorkloadCheck", "check_model", "end_to_end_latency_seconds", "faster_in_pairs",
           "latency_in_turns", "untuned_build", "wins_needed", "workload_seconds"]
