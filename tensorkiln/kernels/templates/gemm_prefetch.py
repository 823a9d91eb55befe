"""Software prefetches in the GEMM micro-kernel (gemm.py): ahead in B's micro-panel (the tuned `pf`
knob), and into L2 of the next micro-panel of weights read from memory on every call.

Why the second: the panels of a model whose weights outgrow the caches (BERT-base: 340 MB of
float32) stream from memory once per call. With few rows (a short sequence) the micro-kernel makes
only a few passes over each panel, and the first pass waited on memory while the hardware
prefetcher had nothing queued; prefetching panel jq + 1 row by row during the passes over panel jq
keeps memory busy while the registers compute (docs/dynamic_shapes.md has the measured ratio).
"""
from __future__ import annotations

from typing import Callable

from ...loops import expr as E
from ...loops.ir import NativeCall, Pointer, Stmt
from ...loops.schedule import substitute_expr
from ...loops.types import itemsize
from ...loops.buffer import Buffer
from ..target import CACHE_LINE


PREFETCH_SOURCE = "static inline void tk_prefetch(const void *p) { __builtin_prefetch(p, 0, 3); }"


def prefetch_ahead(b_micro: E.Load, p: E.Var, lane: E.Var, distance: int, nr: int, dtype: str) -> list[Stmt]:
    """Prefetches of B's micro-panel row `distance` depth steps past p, one per cache line of its NR
    lanes (clamped into the buffer: a prefetch never faults, but its address stays in bounds)."""
    last = b_micro.buffer.size - 1
    ahead = substitute_expr(b_micro.index, {p.name: p + distance, lane.name: E.const(0)})
    lanes_per_line = max(CACHE_LINE // itemsize(dtype), 1)
    return [NativeCall("tk_prefetch", (Pointer(b_micro.buffer, E.minimum(ahead + lane, last)),),
                       source=PREFETCH_SOURCE) for lane in range(0, nr, lanes_per_line)]


PREFETCH_L2_SOURCE = "static inline void tk_prefetch_l2(const void *p) { __builtin_prefetch(p, 0, 2); }"


def prefetch_next_panel(buffer: Buffer, element: Callable[[E.Expr, E.Expr], E.Expr], panel: E.Expr,
                        panel_count: int, nr: int, dtype: str) -> list[Stmt]:
    """Prefetches into L2 of the next B micro-panel's row at this depth step, one per cache line of
    its NR lanes: over one pass of the micro-kernel the whole next panel arrives while this one is
    computed, so weights streamed from memory overlap the arithmetic. `element(panel, lane)` is the
    index in `buffer` of that lane of this depth step's row in a panel. The last panel prefetches
    itself (the panel index is clamped once per tile, not per step: the address stays in bounds)."""
    ahead = E.minimum(panel + 1, E.const(panel_count - 1))
    lanes_per_line = max(CACHE_LINE // itemsize(dtype), 1)
    return [NativeCall("tk_prefetch_l2", (Pointer(buffer, element(ahead, E.const(lane))),), source=PREFETCH_L2_SOURCE)
            for lane in range(0, nr, lanes_per_line)]



PREFETCH_WRITE_SOURCE = "static inline void tk_prefetch_w(const void *p) { __builtin_prefetch(p, 1, 3); }"


def prefetch_output_tile(out: Buffer, flat_index: Callable[[E.Expr, E.Expr], E.Expr], row_at: Callable[[int], E.Expr],
                         col_at: Callable[[int], E.Expr], tile: tuple[int, int], dtype: str) -> list[Stmt]:
    """Prefetches (for writing) of an MR x NR output tile's rows, issued before the micro-kernel's depth
    loop. `row_at(i)` / `col_at(j)` are the tile's i-th row and j-th column (clamped into the matrix
    by the caller: every address stays in bounds), `flat_index(row, col)` the element's index in `out`.

    Why: over K blocks the write-back reads the partial sums back, and an output block larger than L2
    has left them in L3 or memory; without this the write-back waited on every row (a 2048^3 SGEMM
    spent 14% of its cycles on the tile's first load). The depth loop covers the latency."""
    mr, nr = tile
    lanes_per_line = max(CACHE_LINE // itemsize(dtype), 1)
    offsets = sorted(set(range(0, nr, lanes_per_line)) | {nr - 1})
    return [NativeCall("tk_prefetch_w", (Pointer(out, flat_index(row_at(i), col_at(lane))),),
                       source=PREFETCH_WRITE_SOURCE) for i in range(mr) for lane in offsets]
