"""One kernel row of a blocked depthwise tile with each input column loaded once.

A tile of T output pixels of one channel block reads, for kernel row r, the
input columns c = i*sw + s*dw (pixel i < T, tap s < KW) of one input row. At
stride 1 a 3x3 kernel's neighbouring pixels share two of their three columns,
so loading per (pixel, tap) loads each input vector three times (and, from a
bf16 buffer, widens it three times) for one FMA each. Here each column is
loaded once into a register and meets every (pixel, tap) that reads it::

    wrow[s][:] = w[block, r, s, :]                  KW weight vectors of the row
    for j < kb (vectorized):
      for c in columns:                             unrolled at generation time
        x_c = x[row, ox0*sw + c, j]                 one load (a widening one from bf16)
        for (i, s) with i*sw + s*dw == c:
          acc[i][j] = fma(x_c, wrow[s][j], acc[i][j])

Per accumulator the taps still come in the order s = 0, 1, ..., so the sums are
bit for bit those of a loop over (pixel, tap). Registers hold the T
accumulators, the KW weights and a loaded column (`depthwise_columns_tile`).
"""
from __future__ import annotations

from typing import Callable

from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import Alloc, For, Let, Stmt, Store, block


def column_taps(pixels: int, kw: int, sw: int, dw: int) -> list[tuple[int, list[tuple[int, int]]]]:
    """Each input column c a tile of `pixels` reads, in order, with its (pixel, tap) pairs.

    >>> column_taps(2, 3, 1, 1)
    [(0, [(0, 0)]), (1, [(0, 1), (1, 0)]), (2, [(0, 2), (1, 1)]), (3, [(1, 2)])]
    >>> column_taps(2, 3, 2, 1)
    [(0, [(0, 0)]), (1, [(0, 1)]), (2, [(0, 2), (1, 0)]), (3, [(1, 1)]), (4, [(1, 2)])]
    """
    readers: dict[int, list[tuple[int, int]]] = {}
    for i in range(pixels):
        for s in range(kw):
            readers.setdefault(i * sw + s * dw, []).append((i, s))
    return sorted(readers.items())


def depthwise_columns_tile(ow: int, kw: int, vector_registers: int) -> int:
    """Pixels per tile: as many as registers hold beside KW weights, a loaded column and a spare,
    spread evenly over the row (112 pixels at 25 per tile: 5 tiles of 23, 23, 23, 23, 20)."""
    limit = max(1, vector_registers - kw - 2)
    tiles = -(-ow // limit)
    return max(1, -(-ow // tiles))


def depthwise_row_update(source: Buffer, x_at: E.Expr, weight_at: Callable[[E.Expr, E.Expr], E.Expr], acc: Buffer,
                         pixels: int, kw: int, kb: int, stride: int, dilation: int, prefix: str) -> Stmt:
    """acc[i][:] += sum over taps s of x[x_at + (i*stride + s*dilation)*kb + :] * w[s][:], one kernel row.

    `x_at` is the flat index of lane 0 of the tile's first input column (pixel 0, tap 0) in
    `source`; `weight_at(s, lane)` the weight of tap s of this kernel row.
    """
    dtype = acc.dtype
    j, s = E.Var(f"{prefix}_j"), E.Var(f"{prefix}_s")
    wrow = Buffer(f"{prefix}_wrow", dtype, (kw * kb,), scope="local")
    load_weights = For(s, E.const(kw), For(j, E.const(kb), Store(wrow, s * kb + j, weight_at(s, j)),
                                           "vectorized"), "unrolled")
    updates: list[Stmt] = []
    for c, readers in column_taps(pixels, kw, stride, dilation):
        column = E.Var(f"{prefix}_x{c}", dtype)
        updates.append(Let(column, E.Load(source, x_at + c * kb + j)))
        for i, tap in readers:
            slot = i * kb + j
            updates.append(Store(acc, slot, E.call("fma", column, E.Load(wrow, tap * kb + j), E.Load(acc, slot))))
    return Alloc(wrow, block(load_weights, For(j, E.const(kb), block(*updates), "vectorized")))
