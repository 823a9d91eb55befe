"""Whether `vdpbf16ps` multiplies faster than float32 FMAs on this CPU: measured once per process.

AVX512-BF16's `vdpbf16ps` does 32 multiply-adds per 512-bit instruction against an FMA's 16, but how
many issue per cycle differs by core. On the Zen 4 host the bf16 kernels took about half the float32
kernels' time (BERT-base, GPT-2); on an Intel AVX-512 Xeon they took 1.38x (ResNet-18) and 1.50x
(BERT-base) the float32 kernels' time, their instruction there no faster than two FMA ports and the
operands' conversion and packing on top (docs/performance.md). So the target uses the bf16 dot
product only where it measures at least BF16_DOT_MIN_RATE times the FMA's multiply-add rate; elsewhere
precision="bf16" runs the float32 kernels on bf16-rounded operands, as on a CPU without the
instruction (passes/bf16_fp32_gemm.py).

The measurement: 12 independent accumulator chains of each instruction (more than the latency times
the ports of any core, so throughput, not latency, is timed), the two loops in turns, the best of
ROUNDS each, about 10 ms in all. TENSORKILN_BF16_DOT=1 or 0 decides without measuring.
"""
from __future__ import annotations

import functools
import os

from .instruction_rate import chain_function, fma_chains, instruction_rates

BF16_DOT_MIN_RATE = 1.5  # multiply-adds per second of vdpbf16ps / of vfmadd231ps for the bf16 kernels
ROUNDS = 3
ITERATIONS = 200_000  # of 12 instructions each: ~2.4M instructions, about a millisecond

_SOURCE = "\n".join([
    "#include <immintrin.h>",
    "#include <stdint.h>",
    fma_chains("fma", 512),
    chain_function("dpbf16", "vdpbf16ps: 16 lanes of two bf16 products each", 512,
                   ["const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(step), _mm512_set1_ps(step));",
                    "const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1.0f), _mm512_set1_ps(1.0f));"],
                   "_mm512_dpbf16_ps({a}, x, y)"),
    "",
])
MACS_PER_INSTRUCTION = {"fma": 16, "dpbf16": 32}


def forced_choice() -> bool | None:
    """TENSORKILN_BF16_DOT: "1" use the bf16 dot product, "0" do not, unset (or anything else) measure."""
    value = os.environ.get("TENSORKILN_BF16_DOT", "").strip()
    return {"1": True, "0": False}.get(value)


@functools.lru_cache(maxsize=None)
def bf16_dot_rate() -> float | None:
    """vdpbf16ps's multiply-adds per second over vfmadd231ps's on this CPU (which must have AVX512-BF16);
    None where the probe cannot be built or run (a compiler that lacks the intrinsics: the instruction
    keeps its use)."""
    rates = instruction_rates(_SOURCE, MACS_PER_INSTRUCTION, ITERATIONS, ROUNDS)
    return None if rates is None else rates["dpbf16"] / rates["fma"]


def bf16_dot_pays(rate: float | None) -> bool:
    """Whether kernels on `vdpbf16ps` beat the float32 ones at this measured rate (None: unmeasured,
    the instruction is used as before the measurement existed)."""
    return rate is None or rate >= BF16_DOT_MIN_RATE


__all__ = ["BF16_DOT_MIN_RATE", "bf16_dot_pays", "bf16_dot_rate", "forced_choice"]
