"""Timing chains of one instruction, for the probes that compare two instructions' rates on this CPU.

A probe's C defines `float tk_rate_<name>(int64_t n, float step)` per instruction: n rounds of
independent accumulator chains (more than the latency times the pipes of any core, so throughput, not
latency, is timed). `instruction_rates` builds it once (the compile cache keeps it), warms the core up,
times the functions in turns and keeps each one's best round: the two rates are measured in the same
phases of a machine whose speed drifts.
"""
from __future__ import annotations

import ctypes
import time

from ..errors import CompileError
from ..runtime.c_compiler import compile_c, find_c_compiler


def instruction_rates(source: str, work: dict[str, int], iterations: int, rounds: int) -> dict[str, float] | None:
    """name -> `work[name]` per second, the best of `rounds` calls of `tk_rate_<name>(iterations, ...)` in
    turns; None where the source cannot be built or loaded (no C compiler, or one without the intrinsics)."""
    if find_c_compiler() is None:
        return None
    try:
        library = ctypes.CDLL(compile_c(source).path)
    except (CompileError, OSError):
        return None
    functions = {name: getattr(library, f"tk_rate_{name}") for name in work}
    for function in functions.values():
        function.argtypes, function.restype = (ctypes.c_int64, ctypes.c_float), ctypes.c_float
        function(iterations // 10, 1e-6)  # warm the core up
    best = dict.fromkeys(functions, float("inf"))
    for _ in range(rounds):
        for name, function in functions.items():
            start = time.perf_counter()
            function(iterations, 1e-6)
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: work[name] / max(best[name], 1e-9) for name in best}


__all__ = ["instruction_rates"]
