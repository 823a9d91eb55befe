"""Tiles for injective kernels that read a transposed layout (`x.T + y`, a weight gradient's permute).

The default nest (schedule_defaults.output_nest) walks the output row by row
with a vectorized column loop. When an operand is read transposed, one output
row reads one element from each of `cols` source rows: every element is a new
cache line (and, past a few KiB of stride, a new page), so a 1024 x 1024
transpose costs ~10 ns per element. Here rows and columns are tiled into
32 x 64 blocks, and each block of the transposed operand is first copied
into a local buffer in the source's own order (contiguous reads; the
strided stores stay in an 8 KiB buffer in L1), from which the block's rows
are computed with contiguous, vectorized loads. Lines 4 KiB apart map to one
L1 set, so tiling alone (reading the block in place) still thrashes; the
copy is what makes it 2-5x faster (`x + y.T` at 1024 x 1024, one thread).

The tile is made with the schedule primitives (loops/schedule.py `tile`,
`pack`, `reorder`, `vectorize`, `parallel`), so their legality checks apply.
"""
from __future__ import annotations

from ..loops import expr as E
from ..loops.ir import For, Kernel, Store, iter_stmts, simplify_kernel
from ..loops.nest import ScheduleError
from ..loops.schedule import pack, parallel, reorder, tile, vectorize
from ..loops.simplify import index_step

TILE_ROWS, TILE_COLS = 32, 64
MIN_ELEMENTS = 1 << 14  # a smaller output stays in cache untiled
MIN_STRIDE = 64  # elements between the loads of neighbouring columns: a line (and more) apart


def tile_transposed_reads(kernel: Kernel) -> Kernel:
    """`kernel` with its row x column nest tiled when a load walks a transposed layout; else as it is."""
    rows = kernel.body
    if not (isinstance(rows, For) and isinstance(rows.body, For) and isinstance(rows.body.body, Store)):
        return kernel
    cols = rows.body
    if cols.kind != "vectorized" or not all(isinstance(f.extent, E.Const) for f in (rows, cols)):
        return kernel
    n_rows, n_cols = int(rows.extent.value), int(cols.extent.value)
    if n_rows < TILE_ROWS or n_cols < TILE_COLS or n_rows * n_cols < MIN_ELEMENTS:
        return kernel
    env = {rows.var.name: 0, cols.var.name: 0}
    loads = [e for e in E.walk(cols.body.value) if isinstance(e, E.Load)]
    if not any(_steps(load, rows.var.name, cols.var.name, env) for load in loads):
        return kernel
    try:
        return _tiled(kernel, rows.var.name, cols.var.name, [load for load in loads if _steps(load, rows.var.name,
                                                                                              cols.var.name, env)],
                      rows.kind == "parallel")
    except ScheduleError:  # e.g. rows that cross a batch boundary: the tile's index is not affine
        return kernel


def _tiled(kernel: Kernel, r: str, c: str, transposed: list, parallel_rows: bool) -> Kernel:
    tiled = tile(kernel, r, c, TILE_ROWS, TILE_COLS)
    for name in dict.fromkeys(load.buffer.name for load in transposed):
        # the tile of the transposed operand, copied first in its own order: contiguous reads along
        # the rows, stores into a 4 KiB local buffer that the tile's rows then read contiguously
        tiled = pack(tiled, name, f"{c}_o")
        copy = [loop.var.name for loop in iter_stmts(tiled.body) if isinstance(loop, For)
                and loop.var.name.startswith(f"{name}_pack")]
        tiled = reorder(tiled, copy[-1], copy[-2])
    tiled = vectorize(tiled, f"{c}_i")
    if parallel_rows:
        tiled = parallel(tiled, f"{r}_o")
    return simplify_kernel(tiled)


def _steps(load: E.Load, row: str, col: str, env: dict[str, int]) -> bool:
    """True when neighbouring columns read far apart and neighbouring rows read next to each other."""
    across, down = index_step(load.index, col, env), index_step(load.index, row, env)
    return across is not None and down is not None and abs(across) >= MIN_STRIDE and abs(down) <= 1
