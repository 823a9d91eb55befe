"""Whether 512-bit FMAs multiply-add twice as fast as 256-bit ones on this CPU: measured once per process.

AVX-512 says what a CPU decodes, not how wide its units are. A Zen 5 or a Xeon with two 512-bit FMA
units does 32 float32 multiply-adds a cycle with 512-bit FMAs and 16 with 256-bit ones; a Zen 4 runs
each 512-bit FMA through its two 256-bit units in halves, 16 a cycle either way. A rule that trades
multiplications for memory traffic (Winograd's, in templates/conv.py) needs the rate, not the width:
on the Zen 4 host the direct convolution that the Zen 5 threshold kept for ResNet-18's 256-channel
14x14 layers took 1.3x Winograd F(2x2)'s time in the model (docs/tuning.md).

The measurement: 12 independent accumulator chains of each width (more than the latency times the
pipes of any core), the two loops in turns, the best of ROUNDS each (instruction_rate.py), about
5 ms in all.
TENSORKILN_FMA_FULL_WIDTH=1 or 0 decides without measuring.
"""
from __future__ import annotations

import functools
import os

from .instruction_rate import fma_chains, instruction_rates

FULL_WIDTH_MIN_RATE = 1.5  # 512-bit FMA multiply-adds per second over 256-bit ones for "full width"
ROUNDS = 3
ITERATIONS = 100_000  # rounds of CHAINS instructions each
_SOURCE = "\n".join(["#include <immintrin.h>", "#include <stdint.h>", fma_chains("fma512", 512),
                     fma_chains("fma256", 256), ""])
LANES = {"fma512": 16, "fma256": 8}  # multiply-adds of one instruction


def forced_choice() -> bool | None:
    """TENSORKILN_FMA_FULL_WIDTH: "1" 512-bit FMAs at full rate, "0" in halves, unset (or anything else) measure."""
    return {"1": True, "0": False}.get(os.environ.get("TENSORKILN_FMA_FULL_WIDTH", "").strip())


@functools.lru_cache(maxsize=None)
def fma_width_rate() -> float | None:
    """Multiply-adds per second of 512-bit FMAs over 256-bit ones on this CPU (which must have AVX-512F);
    None where the probe cannot be built or run."""
    rates = instruction_rates(_SOURCE, LANES, ITERATIONS, ROUNDS)
    return None if rates is None else rates["fma512"] / rates["fma256"]


def fma_full_width() -> bool:
    """Whether this AVX-512 CPU's FMAs run 512-bit vectors at full rate (forced, else measured; unmeasured: yes,
    as the rules assumed before the measurement existed)."""
    forced = forced_choice()
    if forced is not None:
        return forced
    rate = fma_width_rate()
    return rate is None or rate >= FULL_WIDTH_MIN_RATE


__all__ = ["FULL_WIDTH_MIN_RATE", "fma_full_width", "fma_width_rate", "forced_choice"]
