"""Loop-IR kernel that builds a full neighbour list by cell binning, over runs of cells.

A full list holds each pair twice (j in i's row and i in j's), so the force
kernel over it writes only its own atom i (full_force_kernels.py): no
scatter to f[j], no write conflicts between threads, and its pair loop runs
as SIMD lanes.

The atoms are sorted by cell (neighbor_kernels.py's `sort` program) and the
cells are numbered x fastest, so the cells cx + lo .. cx + hi of one (y, z)
row of the stencil hold one contiguous range of atoms: the build visits one
range per stencil row (`row_stencil`: 25 rows on in.lj) instead of one per
cell (125), and its inner loops are long enough to pay for their set-up. A
row that crosses the periodic boundary in x is cut into up to three pieces,
one per image (-1, 0, +1 box lengths).

Row i of `neighbors` holds, as a half list's rows do, the neighbours whose
nearest image is the atom itself from the front and those across the
boundary from the back (`neighbor_count[i]` = both counts), so the force
kernel spends the minimum-image arithmetic only on the latter. Each segment
is padded with i itself up to a multiple of `ROW_PADDING` (the force kernel
skips j == i), so the force kernel's SIMD loop never runs a scalar remainder:
in.lj's rows average ~69 + ~7 pairs, and the remainders cost more than the
padded lanes (force call 6.9 -> 5.9 ms in a C harness over in.lj's list,
32,000 atoms, one thread, Zen 4, CPU time on a loaded machine; 6.9 -> 6.3 ms
in the compiled program).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Expr, Load, Var, call, cast, eq, logical_and, lt, maximum, minimum, ne
from tensorkiln.loops.ir import Assign, For, If, Kernel, Let, Stmt, Store, block
from tensorkiln.md.loop_helpers import F64, I64, f64, i64, index, let, let_cell_coordinates, let_position, load3
from tensorkiln.md.neighbor_kernels import CellGrid, NeighborBuffers


# Doubles per AVX-512 vector: each row segment is padded to a multiple of it (correct at any vector width).
ROW_PADDING = 8


def padded(count: Expr) -> Expr:
    """`count` rounded up to a multiple of ROW_PADDING."""
    return (count + (ROW_PADDING - 1)) // ROW_PADDING * ROW_PADDING


def full_capacity(density: float, cutoff: float) -> int:
    """Room per row of a full list for atoms at `density` within `cutoff`: 1.6 times the average row (a
    full list's rows vary less than a half list's, whose first atom of a cell lists its whole home cell)."""
    expected = density * 4.0 / 3.0 * math.pi * cutoff ** 3
    return max(16, int(1.6 * expected) + 16)


def row_stencil(grid: CellGrid, cutoff: float) -> np.ndarray:
    """int32 [rows, 4]: (dx_lo, dx_hi, dy, dz) per stencil row, the cells (cx + dx_lo .. cx + dx_hi, cy + dy,
    cz + dz) around a cell (cx, cy, cz) that can hold an atom within `cutoff` of one in it.

    On a grid with at least 2 reach + 1 cells per axis each row is a run of cells, the whole x extent
    within reach of (dy, dz). On a smaller grid (`needs_minimum_image`) an offset and its periodic twin
    would name one cell twice, so every cell is its own row, each residue once."""
    widths = grid.box.lengths / np.array(grid.counts)
    reach = [min(int(math.ceil(cutoff / w)), n) for w, n in zip(widths, grid.counts)]
    per_axis = []
    for n, r in zip(grid.counts, reach):
        seen: dict[int, int] = {}  # each residue modulo n once, by its offset of smallest magnitude
        for offset in sorted(range(-r, r + 1), key=abs):
            seen.setdefault(offset % n, offset)
        per_axis.append(sorted(seen.values()))
    near = [o for o in itertools.product(*per_axis)
            if sum((max(abs(a) - 1, 0) * w) ** 2 for a, w in zip(o, widths)) < cutoff * cutoff]
    if grid.needs_minimum_image:
        rows = [(dx, dx, dy, dz) for dx, dy, dz in near]
    else:  # the near cells of a (dy, dz) row are one interval of dx: the gap grows with |dx|
        extents: dict[tuple[int, int], list[int]] = {}
        for dx, dy, dz in near:
            extents.setdefault((dy, dz), []).append(dx)
        in_memory_order = sorted(extents.items(), key=lambda item: (item[0][1], item[0][0]))  # z, then y
        rows = [(min(xs), max(xs), dy, dz) for (dy, dz), xs in in_memory_order]
    return np.array(rows, dtype=np.int32).reshape(-1, 4)


def build_full_neighbors(b: NeighborBuffers, cutoff: float) -> Kernel:
    """Full neighbour list of atoms sorted by cell: every j != i within `cutoff` of i, in row i (padded and
    measured by `pad_full_rows`, which runs next).

    The kernel reads `row_stencil(b.grid, cutoff)` as its `stencil` argument; row i holds the same-image
    neighbours from the front, those across the boundary from the back.
    """
    i, s = Var("i"), Var("s")
    nx, ny, nz = b.grid.counts
    capacity = b.max_neighbors
    lengths = [float(v) for v in b.grid.box.lengths]
    minimum_image = b.grid.needs_minimum_image
    decl_home, home = let("home", index(Load(b.cell, i)))
    decl_cells, cvars = let_cell_coordinates(home, b.grid.counts)
    decl_position, positions = let_position(b.x, i)
    stmts: list[Stmt] = [decl_home, *decl_cells, *decl_position]
    counts = {"plain": Var("n_plain", I64), "image": Var("n_image", I64)}
    stmts += [Let(counts["plain"], i64(0)), Let(counts["image"], i64(0))]

    table = row_stencil(b.grid, cutoff)
    stencil = Buffer("stencil", "int32", table.shape)

    def entry(column: int):
        return index(Load(stencil, s * 4 + column))

    # the stencil row's y and z, wrapped around the periodic grid, and atom i moved to meet their image
    decls: list[Stmt] = []
    level, wrapped = [], {}
    shifted = {}
    for d, column in ((1, 2), (2, 3)):
        n_axis = b.grid.counts[d]
        decl_u, u = let(f"u{'xyz'[d]}", cvars[d] + entry(column))
        decl_w, w = let(f"w{'xyz'[d]}", (u + n_axis) % n_axis)
        decls += [decl_u, decl_w]
        level.append(eq(u, w))
        wrapped[d] = w
        if minimum_image:
            shifted[d] = positions[d]
        else:
            decl_p, p = let(f"{'xyz'[d]}s", positions[d] - cast((u - w) // n_axis, F64) * f64(lengths[d]))
            decls.append(decl_p)
            shifted[d] = p
    decl_row, row = let("row", (wrapped[2] * ny + wrapped[1]) * nx)
    decl_level, same_row_image = let("same_row_image", logical_and(level[0], level[1]))
    decl_first, first = let("first", cvars[0] + entry(0))
    decl_last, last = let("last", cvars[0] + entry(1))
    decls += [decl_row, decl_level, decl_first, decl_last]

    def candidates(segment: str, piece: str, begin: Var, size: Var, xs) -> Stmt:
        """The loop over a contiguous range of atoms, recording into the front or the back segment."""
        k = Var(f"k_{segment}_{piece}")
        decl_j, j = let(f"j_{segment}_{piece}", begin + k)
        inner: list[Stmt] = [decl_j]
        squared = None
        for d, name in enumerate("xyz"):
            centre = xs if d == 0 else shifted[d]
            if minimum_image:
                decl_raw, raw = let(f"d{name}_raw_{segment}_{piece}", centre - load3(b.x, j, d))
                decl_d, dd = let(f"d{name}_{segment}_{piece}",
                                 raw - f64(lengths[d]) * call("rint", raw * f64(1.0 / lengths[d])))
                inner += [decl_raw, decl_d]
            else:
                decl_d, dd = let(f"d{name}_{segment}_{piece}", centre - load3(b.x, j, d))
                inner.append(decl_d)
            squared = dd * dd if squared is None else squared + dd * dd
        decl_rsq, rsq = let(f"rsq_{segment}_{piece}", squared)
        # Branch-free, as the half build: j goes to the next free slot, which is taken only for a neighbour.
        decl_take, take = let(f"take_{segment}_{piece}", logical_and(ne(j, i), lt(rsq, f64(cutoff * cutoff))))
        count = counts[segment]
        position = minimum(count, i64(capacity - 1))
        slot = position if segment == "plain" else (capacity - 1) - position
        inner += [decl_rsq, decl_take, Store(b.neighbors, i * capacity + slot, cast(j, "int32")),
                  Assign(count, count + cast(take, I64))]
        return For(k, size, block(*inner))

    pieces: list[Stmt] = []
    for image in (-1, 0, 1):  # the part of the row's x run that lies in this periodic image
        piece = ("below", "home", "above")[image + 1]
        decl_lo, cell_lo = let(f"cell_lo_{piece}", minimum(maximum(first - image * nx, i64(0)), i64(nx)))
        decl_end, cell_end = let(f"cell_end_{piece}", minimum(maximum(last - image * nx + 1, cell_lo), i64(nx)))
        decl_begin, begin = let(f"begin_{piece}", index(Load(b.cell_start, row + cell_lo)))
        decl_size, size = let(f"size_{piece}", index(Load(b.cell_start, row + cell_end)) - begin)
        pieces += [decl_lo, decl_end, decl_begin, decl_size]
        if minimum_image:
            pieces.append(candidates("image", piece, begin, size, positions[0]))
            continue
        decl_xs, xs = let(f"xs_{piece}", positions[0] - f64(image * lengths[0]))
        pieces.append(decl_xs)
        if image == 0:
            pieces.append(If(same_row_image, candidates("plain", piece, begin, size, xs),
                             candidates("image", piece, begin, size, xs)))
        else:
            pieces.append(candidates("image", piece, begin, size, xs))
    rows = table.shape[0]
    stmts.append(For(s, rows, block(*decls, *pieces)))
    stmts += [Store(b.neighbor_count, i * 2, cast(counts["plain"], "int32")),
              Store(b.neighbor_count, i * 2 + 1, cast(counts["image"], "int32"))]
    body = For(i, b.atoms, block(*stmts), b.kind)
    return Kernel("build_full_neighbors", (b.x, b.cell, b.cell_start, stencil, b.neighbors, b.neighbor_count),
                  body, f"full neighbour list within {cutoff:g}, {rows} stencil rows of cells, capacity "
                        f"{capacity} per atom (same-image pairs from the front, pairs across the boundary from "
                        "the back)")


def pad_full_rows(b: NeighborBuffers) -> Kernel:
    """`pad_rows` for the one-process list of `b`."""
    return pad_rows(b.neighbors, b.neighbor_count, b.most_neighbors, b.kind)


def pad_rows(neighbors: Buffer, neighbor_count: Buffer, most_neighbors: Buffer, kind: str) -> Kernel:
    """Fill each segment of each row with the atom itself up to a multiple of ROW_PADDING; most_neighbors[0] =
    the most room a row takes, padding included.

    A kernel of its own, after the build: in the build's loop nest the same stores made the whole build
    slower (in.lj: 30 -> 42 ms of CPU per build, the compiler's code for the candidate loops changed).
    """
    i = Var("i")
    rows, capacity = neighbors.shape
    stmts: list[Stmt] = []
    counts = {}
    for column, segment in enumerate(("plain", "image")):
        decl, count = let(f"n_{segment}", index(Load(neighbor_count, i * 2 + column)))
        stmts.append(decl)
        counts[segment] = count
        p = Var(f"pad_{segment}")
        position = minimum(count + p, i64(capacity - 1))  # an overflowing row is built again (has_room)
        slot = position if segment == "plain" else (capacity - 1) - position
        stmts.append(For(p, padded(count) - count, Store(neighbors, i * capacity + slot, cast(i, "int32"))))
    most = Var("most", I64)
    stmts.append(Assign(most, maximum(most, padded(counts["plain"]) + padded(counts["image"]))))
    body = block(Let(most, i64(0)), For(i, rows, block(*stmts), kind),
                 Store(most_neighbors, i64(0), cast(most, "int32")))
    return Kernel("pad_full_rows", (neighbor_count, neighbors, most_neighbors), body,
                  f"each row segment padded with its own atom to a multiple of {ROW_PADDING} (the force kernel's "
                  "vector width); the longest row, padding included")
