"""Timing chains of one instruction, for the probes that compare two instructions' rates on this CPU.

A probe's C defines `float tk_rate_<name>(int64_t n, float step)` per instruction (`chain_function`):
n rounds of independent accumulator chains (more than the latency times the pipes of any core, so throughput, not
latency, is timed). `instruction_rates` builds it once (the compile cache keeps it), warms the core up,
times the functions in turns and keeps each one's best round: the two rates are measured in the same
phases of a machine whose speed drifts.
"""
from __future__ import annotations

import ctypes
import time

from ..errors import CompileError
from ..runtime.c_compiler import compile_c, find_c_compiler

CHAINS = 12  # independent accumulators: more than the latency times the pipes of any core
_VECTORS = {512: ("__m512", "_mm512"), 256: ("__m256", "_mm256")}  # float vector type, intrinsics prefix


def chain_function(name: str, comment: str, bits: int, operands: list[str], step: str) -> str:
    """C of `float tk_rate_<name>(int64_t n, float step)`: n rounds of CHAINS independent accumulators
    on `bits`-bit float vectors, each advanced by `step` (C with {a} for the accumulator) from the
    `operands` (C declarations), lane 0 of their sum returned so that nothing is optimized away. The
    chains start apart: alike, the compiler would compute one and copy it."""
    vector, prefix = _VECTORS[bits]
    total = f"{prefix}_add_ps(" * (CHAINS - 1) + "a0, " + "), ".join(f"a{i}" for i in range(1, CHAINS)) + ")"
    return "\n".join([
        f"/* {comment} */",
        f"float tk_rate_{name}(int64_t n, float step)",
        "{",
        *[f"    {line}" for line in operands],
        "    " + " ".join(f"{vector} a{i} = {prefix}_set1_ps({i}.0f);" for i in range(CHAINS)),
        "    for (int64_t r = 0; r < n; ++r) {",
        *[f"        a{i} = {step.format(a=f'a{i}')};" for i in range(CHAINS)],
        "    }",
        f"    return _mm_cvtss_f32({prefix}_castps{bits}_ps128({total}));",
        "}",
    ])


def fma_chains(name: str, bits: int) -> str:
    """`chain_function` of float32 FMAs on `bits`-bit vectors."""
    vector, prefix = _VECTORS[bits]
    return chain_function(name, f"FMAs on {bits // 32} float32 lanes", bits,
                          [f"const {vector} x = {prefix}_set1_ps(step), y = {prefix}_set1_ps(1.0f);"],
                          f"{prefix}_fmadd_ps(x, y, {{a}})")


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


__all__ = ["CHAINS", "chain_function", "fma_chains", "instruction_rates"]
