"""The measuring process (`python -m tensorkiln.tune.worker`): builds, checks and times candidates.

It reads one JSON request per line on stdin and answers one JSON line on the
stdout it was started with (everything the compiler prints goes to stderr):

    request  {"workload": KEY, "config": {...} or null, "rounds": 5, "block_seconds": 0.02, "cutoff": 1.2}
             (+ "kernel": a sketch workload's loop-IR kernel, pickled, from the tuner that started this process)
    answer   {"ok": true, "seconds": s, "default_seconds": s0, "ratio": r, "compile_seconds": c (, "untimed": true)}
             {"ok": false, "error": "why"}

A candidate is compiled, run once and compared with the reference before
anything is timed: a wrong answer is a failed candidate, never a fast one.
It is then timed against the workload's default (the analytic
configuration, built once per workload and kept) in alternating blocks,
default-candidate then candidate-default, `rounds` times; each block repeats
the call until it lasts `block_seconds`. `ratio` is the median of the
rounds' candidate/default ratios, so a machine whose speed drifts over
minutes shifts both sides of a round alike. A candidate `HOPELESS` times
slower than the default in the first round, or slower than the request's
`cutoff` (the search's best so far, with a margin), is not timed further: a
trial of an obviously bad candidate costs one round; one whose checked call
alone took `UNTIMED_MARGIN` times the cutoff's share of the default's is not
timed at all (its ratio is that of the two single calls, marked
"untimed"). The reference check's call, timed, sizes the blocks, so no call
is spent on that alone. A crash or a hang here costs
only this process: the tuner (measure.py) kills it and starts another.
"""
from __future__ import annotations

import base64
import itertools
import json
import os
import pickle
import sys
import time
from typing import Callable

import numpy as np

from ..kernels.sketch import remember_kernel
from .workloads import Benchmark, benchmark_of

HOPELESS = 1.15  # a candidate this much slower than the default in the first round is not timed again
UNTIMED_MARGIN = 2.0  # a checked call this many times past the cutoff: not timed (one call is noisy, hence 2)


_calls = itertools.count()  # every timed call of this process, so the cycle over input lists goes on across blocks


def _block(fn: Callable, inputs: list[list[np.ndarray]], calls: int) -> float:
    """Mean seconds per call over `calls` calls, each on the next argument list of `inputs` (a cycle that
    continues from block to block: the copy a call reads was read longest ago)."""
    start = time.perf_counter()
    for _ in range(calls):
        fn(*inputs[next(_calls) % len(inputs)])
    return (time.perf_counter() - start) / calls


def check(fn: Callable, bench: Benchmark) -> str | None:
    """Why `fn`'s answer is wrong (None when it matches the reference within the tolerance)."""
    return timed_check(fn, bench)[0]


def timed_check(fn: Callable, bench: Benchmark) -> tuple[str | None, float]:
    """(check's answer, the seconds of the call it made)."""
    start = time.perf_counter()
    result = fn(*bench.inputs)
    seconds = time.perf_counter() - start
    return _wrong(np.asarray(result.numpy(), dtype=np.float64), bench), seconds


def _wrong(out: np.ndarray, bench: Benchmark) -> str | None:
    if out.shape != bench.reference.shape:
        return f"wrong shape {out.shape}, expected {bench.reference.shape}"
    error = float(np.max(np.abs(out - bench.reference))) if out.size else 0.0
    if not error <= bench.tolerance:  # NaN fails too
        return f"wrong result: largest error {error:.3g} > tolerance {bench.tolerance:.3g}"
    return None


def compare(candidate: Callable, default: Callable, inputs: list[list[np.ndarray]], rounds: int,
            block_seconds: float, cutoff: float | None = None, single: float | None = None) -> dict:
    """Candidate and default timed in alternating blocks; medians and the median per-round ratio.

    single: seconds of one call, if known (else timed here); cutoff: stop after a first round slower than this."""
    if single is None:
        single = max(_block(default, inputs, 1), _block(candidate, inputs, 1))
    calls = max(1, int(block_seconds / max(single, 1e-7)))
    stop = min(HOPELESS, cutoff) if cutoff is not None else HOPELESS
    cand_times, default_times, ratios = [], [], []
    for r in range(rounds):
        if r % 2 == 0:
            d, c = _block(default, inputs, calls), _block(candidate, inputs, calls)
        else:
            c, d = _block(candidate, inputs, calls), _block(default, inputs, calls)
        cand_times.append(c)
        default_times.append(d)
        ratios.append(c / d)
        if r == 0 and c > stop * d:
            break  # far slower (than the default or the best so far): more rounds would only confirm it
    return {"seconds": float(np.median(cand_times)), "default_seconds": float(np.median(default_times)),
            "ratio": float(np.median(ratios))}


class Worker:
    """Benchmarks and default builds kept across requests."""

    def __init__(self) -> None:
        self.benchmarks: dict[str, Benchmark] = {}
        self.defaults: dict[str, Callable] = {}
        self.default_call: dict[str, float] = {}  # seconds of the default's checked call

    def answer(self, request: dict) -> dict:
        workload = request["workload"]
        if "kernel" in request:  # only ever from the parent process that started this one
            remember_kernel(workload, pickle.loads(base64.b64decode(request["kernel"])))
        if workload not in self.benchmarks:
            self.benchmarks[workload] = benchmark_of(workload)
        bench = self.benchmarks[workload]
        if workload not in self.defaults:
            default = bench.build(None)
            wrong, self.default_call[workload] = timed_check(default, bench)
            if wrong:
                return {"ok": False, "error": f"the default configuration is wrong: {wrong}"}
            self.defaults[workload] = default
        start = time.perf_counter()
        candidate = bench.build(request["config"]) if request["config"] else self.defaults[workload]
        compile_seconds = time.perf_counter() - start
        wrong, call = timed_check(candidate, bench)
        if wrong:
            return {"ok": False, "error": wrong}
        cutoff = request.get("cutoff")
        default_call = self.default_call[workload]
        if cutoff is not None and call > UNTIMED_MARGIN * max(float(cutoff), 1.0) * default_call:
            return {"ok": True, "compile_seconds": compile_seconds, "seconds": call, "default_seconds": default_call,
                    "ratio": call / default_call, "untimed": True}
        timing = compare(candidate, self.defaults[workload], bench.timed_inputs(), int(request.get("rounds", 5)),
                         float(request.get("block_seconds", 0.02)), float(cutoff) if cutoff is not None else None,
                         single=max(call, self.default_call[workload]))
        return {"ok": True, "compile_seconds": compile_seconds, **timing}


def main() -> None:
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr  # the protocol owns the real stdout
    os.environ.setdefault("TENSORKILN_VERBOSE", "0")
    worker = Worker()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = worker.answer(json.loads(line))
        except Exception as err:  # noqa: BLE001  (any failure is this candidate's, reported, not fatal)
            reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        answers.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
