"""Software prefetch of weights that a matrix-vector product streams from memory once per call.

A decode step multiplies one token's vector by every weight matrix once: the panel-order
matmul (matmul.py `_panel_order`) reads each panel of B front to back and does 2 flops per
weight, so its time is the weights' bytes over the bandwidth the core reaches. The hardware
prefetchers alone keep fewer reads in flight than the memory system can serve, most of all
when several processes stream at once (tensor-parallel ranks on one socket); a prefetch a fixed
distance ahead in the stream adds requests of its own. `prefetchnta` brings the lines in
without displacing the rest of the cache (each weight is read once a call: keeping it would only
push out the activations and the KV cache). The weight-only helpers' avx2 tiles (int8 and int4
weights, weight_only_c.py) prefetch their byte streams the same way.

What to prefetch and how far ahead comes from the target description and the CPU's vendor
(`stream_prefetch_for`: AMD's cores gain, an Intel Xeon lost), never from the model: `weight_stream_prefetch(dtype)` reads it for the host the code is built
for. `benchmarks/matvec_prefetch.py` times the GPT-2 decode with each setting in turns, token after
token, on 1 and on 2 ranks (docs/distributed.md has the figures); `WEIGHT_STREAM_PREFETCH = None`
turns the prefetch off.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import NativeCall, Pointer, Stmt
from ...loops.types import itemsize
from ..target import CACHE_LINE, CpuTarget, cpu_target, cpu_vendor

HINTS = {"nta": 0, "t2": 1, "t1": 2, "t0": 3}  # __builtin_prefetch's locality argument per x86 hint


@dataclass(frozen=True)
class StreamPrefetch:
    """Prefetch each cache line `distance` bytes ahead of the load, with x86 hint `hint` (HINTS)."""

    hint: str
    distance: int

    def __post_init__(self) -> None:
        if self.hint not in HINTS:
            raise ValueError(f"stream prefetch: hint {self.hint!r} is none of {', '.join(HINTS)}")
        if self.distance <= 0 or self.distance % CACHE_LINE:
            raise ValueError(f"stream prefetch: distance {self.distance} bytes is not a positive number of "
                             f"{CACHE_LINE}-byte cache lines")

    @property
    def helper(self) -> str:
        """The C helper's name, one per hint."""
        return f"tk_prefetch_stream_{self.hint}"

    def clamped_macro(self, macro: str, last: str) -> str:
        """C defining `macro(p)`: the prefetch of the line `distance` bytes past p, never past the pointer
        `last` (the stream's last byte; compared as integers, so no pointer leaves its array)."""
        ahead = f"(uintptr_t)(p) + {self.distance}"
        return (f"#include <stdint.h>\n#undef {macro}\n"
                f"/* the weight stream {self.distance} bytes ahead ({self.hint}): more reads in flight than the "
                f"hardware prefetchers keep */\n"
                f"#define {macro}(p) __builtin_prefetch((const void *)({ahead} < (uintptr_t)({last}) \\\n"
                f"    ? {ahead} : (uintptr_t)({last})), 0, {HINTS[self.hint]})\n")

    @property
    def source(self) -> str:
        return (f"static inline void {self.helper}(const void *p) "
                f"{{ __builtin_prefetch(p, 0, {HINTS[self.hint]}); }}")


def stream_prefetch_for(target: CpuTarget, vendor: str = "AuthenticAMD") -> Optional[StreamPrefetch]:
    """How the weight stream is prefetched on `target` of `vendor` (/proc/cpuinfo's vendor_id).

    AMD: non-temporal, a quarter of L1d ahead (8 KiB on a 32 KiB L1d, 128 lines): far enough ahead
    that a line has arrived when its loads come (8 KiB is about 0.4 us of the stream at 20 GB/s,
    several memory latencies), near enough that it is still in L1 then. On the Zen 4 host of
    docs/distributed.md shorter distances cost time on 1 rank (1 KiB: 1.19x, 4 KiB: 1.05x, loaded,
    in turns) and 8 KiB none measurable; 2 ranks streamed 1.36x one process's read with it.
    Other vendors: none. On the Intel Xeon of docs/distributed.md STREAM's read with `prefetchnta`
    ran at 0.55x the plain read, and the decode's kernels with this prefetch read at a third of
    STREAM's rate: there a non-temporal line is not kept in L2, and lines evicted from L1 before
    their loads come go back to memory."""
    if WEIGHT_STREAM_PREFETCH is not DESCRIBED:
        return WEIGHT_STREAM_PREFETCH
    if vendor != "AuthenticAMD":
        return None
    return StreamPrefetch("nta", max(CACHE_LINE, target.l1d // 4 // CACHE_LINE * CACHE_LINE))


DESCRIBED = object()
# What the templates use: DESCRIBED reads the target; a StreamPrefetch or None overrides it (the
# benchmark compiles both forms in one process to time them in turns).
WEIGHT_STREAM_PREFETCH: object = DESCRIBED


def weight_stream_prefetch(dtype: str) -> Optional[StreamPrefetch]:
    """The prefetch of a weight stream of `dtype` on the host: float weights (the panel-order matmul)
    and int8 ones (the weight-only helper's avx2 tile, weight_only_c.py)."""
    if dtype not in ("float32", "float64", "int8"):
        return None
    return stream_prefetch_for(cpu_target(), cpu_vendor())


def prefetch_stream(buffer: Buffer, start: E.Expr, count: int, ahead: Optional[StreamPrefetch]) -> list[Stmt]:
    """Prefetches of the cache lines of `buffer[start + distance : start + distance + count]`, where a
    loop step reads `buffer[start : start + count]` (one per 64 bytes, at least one): [] without
    `ahead`. Addresses are clamped into the buffer (a prefetch never faults, but stays in bounds)."""
    if ahead is None:
        return []
    size = itemsize(buffer.dtype)
    per_line = max(CACHE_LINE // size, 1)
    distance, last = ahead.distance // size, buffer.size - 1
    return [NativeCall(ahead.helper, (Pointer(buffer, E.minimum(start + (distance + line), E.const(last))),),
                       source=ahead.source)
            for line in range(0, max(count, 1), per_line)]
