"""Loop-IR kernels of the neighbour list of one rank of a decomposed run: own atoms and ghosts.

The arrays hold the rank's own atoms in rows [0, n_own), ghosts (with
coordinates shifted across the periodic boundary, ghosts.py) in [n_own, n_all)
and unused rows up to the compiled capacity; `counts` = (n_own, n_all) is read
at run time, so one build serves every re-neighbouring whatever the atoms do.
The grid of cells covers the sub-box and the ghost shell and is not periodic:
a pair's distance is x_i - x_j.

1. `bin_all_atoms`: the cell of each own atom and ghost;
2. `sort_by_cell`: two counting sorts, the own atoms by cell and the ghosts by
   cell (`own_start`/`own_atoms`, `ghost_start`/`ghost_atoms`);
3. `build_neighbors`: row i of the list (i an own atom) holds, once per pair:
   - own atoms j of the half stencil (one of each pair of mirror cells; in
     i's own cell only j > i), as the one-process list;
   - ghosts j of the full stencil that lie "above" i: z_j > z_i, or equal z
     and y_j > y_i, or equal z and y and x_j > x_i (LAMMPS's rule for ghosts
     in half/bin/newton lists). The rank owning j sees i's image at the
     opposite offset, so exactly one of the two ranks lists the pair; with
     Newton's third law the ghost's force is sent back (ghosts.reverse).
   Rows of ghosts and unused rows get no pairs, so the force kernel, compiled
   for the capacity, runs over all rows unchanged.

`build_full_neighbors` is step 3 for a full list (the default): row i holds
every own atom and ghost j != i of the full stencil, the rank computes the
forces on its own atoms alone, and no ghost force goes back.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import (Const, Load, Var, call, cast, eq, logical_and, logical_not, logical_or, lt,
                                   maximum, minimum, ne, where)
from tensorkiln.loops.ir import Assign, For, Kernel, Let, Stmt, Store, block
from tensorkiln.md.loop_helpers import (F64, I64, atom_loop_kind, f64, i64, index, let, let_cell_coordinates,
                                        let_position, load3)


@dataclass(frozen=True)
class ShellGrid:
    """Cells over a rank's sub-box and ghost shell: `origin`, `counts` per axis, `widths`, and the stencils."""

    origin: tuple[float, float, float]
    counts: tuple[int, int, int]
    widths: tuple[float, float, float]
    half_stencil: np.ndarray  # int32 [s, 4]: offset, and 1 where only j > i counts (the home cell)
    full_stencil: np.ndarray  # int32 [t, 3]: every offset whose cell can hold a neighbour

    @classmethod
    def around(cls, sub_lo, sub_hi, box_lo, box_lengths, cutoff: float, cells_per_cutoff: int = 2) -> "ShellGrid":
        """Cells of the box's global binning (at least cutoff / cells_per_cutoff wide) that cover
        [sub_lo - cutoff, sub_hi + cutoff], with one cell of margin each side."""
        origin, counts, widths = [], [], []
        for d in range(3):
            length = float(box_lengths[d])
            width = length / max(1, int(math.floor(length * cells_per_cutoff / cutoff)))
            first = int(math.floor((sub_lo[d] - cutoff - box_lo[d]) / width)) - 1
            last = int(math.ceil((sub_hi[d] + cutoff - box_lo[d]) / width)) + 1
            origin.append(box_lo[d] + first * width)
            counts.append(last - first)
            widths.append(width)
        reach = [int(math.ceil(cutoff / w)) for w in widths]
        full, half = [], []
        for offset in itertools.product(*(range(-r, r + 1) for r in reach)):
            gap = sum((max(abs(o) - 1, 0) * w) ** 2 for o, w in zip(offset, widths))
            if gap >= cutoff * cutoff:
                continue  # no point of that cell is within the cutoff of any point of the home cell
            full.append(offset)
            if offset == (0, 0, 0):
                half.append((*offset, 1))
            elif offset > tuple(-o for o in offset):
                half.append((*offset, 0))
        return cls(tuple(origin), tuple(counts), tuple(widths),  # type: ignore[arg-type]
                   np.array(half, np.int32).reshape(-1, 4), np.array(full, np.int32).reshape(-1, 3))

    @property
    def cells(self) -> int:
        return int(np.prod(self.counts))

    def cell_of(self, x: np.ndarray) -> np.ndarray:
        """Flat cell index of positions [n, 3] (as `bin_all_atoms` computes it): for sorting in numpy."""
        c = [np.clip(np.floor((x[:, d] - self.origin[d]) / self.widths[d]).astype(np.int64), 0, self.counts[d] - 1)
             for d in range(3)]
        return (c[2] * self.counts[1] + c[1]) * self.counts[0] + c[0]


@dataclass(frozen=True)
class ShellBuffers:
    """The buffers of a rank's neighbour build, for `capacity` rows."""

    capacity: int
    grid: ShellGrid
    max_neighbors: int
    threads: int = 1

    @property
    def kind(self) -> str:
        return atom_loop_kind(self.capacity, self.threads)

    @property
    def x(self) -> Buffer:
        return Buffer("x", F64, (self.capacity, 3))

    @property
    def counts(self) -> Buffer:
        return Buffer("counts", I64, (2,))

    @property
    def cell(self) -> Buffer:
        return Buffer("cell", "int32", (self.capacity,))

    def start(self, group: str) -> Buffer:
        return Buffer(f"{group}_start", "int32", (self.grid.cells + 1,))

    def fill(self, group: str) -> Buffer:
        return Buffer(f"{group}_fill", "int32", (self.grid.cells,))

    def members(self, group: str) -> Buffer:
        return Buffer(f"{group}_atoms", "int32", (self.capacity,))

    @property
    def half_stencil(self) -> Buffer:
        return Buffer("half_stencil", "int32", self.grid.half_stencil.shape)

    @property
    def full_stencil(self) -> Buffer:
        return Buffer("full_stencil", "int32", self.grid.full_stencil.shape)

    @property
    def neighbors(self) -> Buffer:
        return Buffer("neighbors", "int32", (self.capacity, self.max_neighbors))

    @property
    def neighbor_count(self) -> Buffer:
        return Buffer("neighbor_count", "int32", (self.capacity, 2))

    @property
    def most_neighbors(self) -> Buffer:
        return Buffer("most_neighbors", "int32", (1,))

    def sort_outputs(self) -> tuple[Buffer, ...]:
        return (self.cell, self.start("own"), self.fill("own"), self.members("own"), self.start("ghost"),
                self.fill("ghost"), self.members("ghost"))


def _own_count(b: ShellBuffers):
    return Load(b.counts, i64(0))


def _all_count(b: ShellBuffers):
    return Load(b.counts, i64(1))


def bin_all_atoms(b: ShellBuffers) -> Kernel:
    """cell[a] = the flat cell of atom a, own atoms and ghosts (x fastest; clamped onto the grid)."""
    a = Var("a")
    g = b.grid
    coordinates = []
    for d in range(3):
        raw = cast(call("floor", (load3(b.x, a, d) - f64(g.origin[d])) * f64(1.0 / g.widths[d])), I64)
        coordinates.append(minimum(maximum(raw, i64(0)), i64(g.counts[d] - 1)))
    flat = (coordinates[2] * g.counts[1] + coordinates[1]) * g.counts[0] + coordinates[0]
    return Kernel("bin_all_atoms", (b.x, b.counts, b.cell),
                  For(a, _all_count(b), Store(b.cell, a, cast(flat, "int32")), b.kind),
                  f"cell of each own atom and ghost in a {'x'.join(map(str, g.counts))} grid around the sub-box")


def _counting_sort(b: ShellBuffers, group: str, first, count) -> Stmt:
    """Sort atoms [first, first + count) by cell into `<group>_start` (prefix sums) and `<group>_atoms`."""
    start, fill, members = b.start(group), b.fill(group), b.members(group)
    c, k, c2, c3, k2 = (Var(f"{name}_{group}") for name in ("c", "k", "c2", "c3", "k2"))
    one, zero = Const(1, "int32"), Const(0, "int32")
    cells = b.grid.cells
    of_atom = index(Load(b.cell, first + k)) + 1
    decl, home = let(f"home_{group}", index(Load(b.cell, first + k2)))
    return block(
        For(c, cells + 1, Store(start, c, zero)),
        For(k, count, Store(start, of_atom, Load(start, of_atom) + one)),
        For(c2, cells, Store(start, c2 + 1, Load(start, c2 + 1) + Load(start, c2))),
        For(c3, cells, Store(fill, c3, Load(start, c3))),
        For(k2, count, block(decl, Store(members, index(Load(fill, home)), cast(first + k2, "int32")),
                             Store(fill, home, Load(fill, home) + one))))


def sort_by_cell(b: ShellBuffers) -> Kernel:
    """Own atoms and ghosts, each sorted by cell (serial: one pass over each)."""
    own, every = _own_count(b), _all_count(b)
    body = block(_counting_sort(b, "own", i64(0), own), _counting_sort(b, "ghost", own, every - own))
    return Kernel("sort_by_cell", (b.cell, b.counts) + b.sort_outputs()[1:], body,
                  "counting sorts by cell of the own atoms and of the ghosts")


def _cell_range(b: ShellBuffers, group: str, home, offset_of, tag: str) -> tuple[list[Stmt], object, object]:
    """Statements that find the atoms of group `group` in the cell at home + offset: (decls, begin, size);
    a cell off the grid holds none."""
    g = b.grid
    decls: list[Stmt] = []
    inside = None
    cell = None
    stride = 1
    for d in range(3):
        decl, u = let(f"u{'xyz'[d]}_{tag}", home[d] + offset_of(d))
        decls.append(decl)
        on_grid = logical_and(logical_not(lt(u, i64(0))), lt(u, i64(g.counts[d])))
        inside = on_grid if inside is None else logical_and(inside, on_grid)
        term = minimum(maximum(u, i64(0)), i64(g.counts[d] - 1)) * stride
        cell = term if cell is None else cell + term
        stride *= g.counts[d]
    decl_cell, other = let(f"other_{tag}", cell)
    start = b.start(group)
    decl_begin, begin = let(f"begin_{tag}", index(Load(start, other)))
    decl_size, size = let(f"size_{tag}", where(inside, index(Load(start, other + 1)) - begin, i64(0)))
    return decls + [decl_cell, decl_begin, decl_size], begin, size


def _row_start(b: ShellBuffers, i: Var) -> tuple[list[Stmt], list, list, Var]:
    """The statements that open row i of a list: (decls, i's cell coordinates, x_i, the pair count)."""
    g = b.grid
    decl_home, home_cell = let("home", index(Load(b.cell, i)))
    decl_cells, home = let_cell_coordinates(home_cell, g.counts)
    decl_position, xi = let_position(b.x, i)
    stmts: list[Stmt] = [decl_home, *decl_cells, *decl_position]
    decl_count, count = let("n_pairs", i64(0))
    stmts.append(decl_count)
    return stmts, home, xi, count


def _candidates(b: ShellBuffers, cutoff: float, i: Var, xi: list, count: Var, group: str, begin, size,
                counted) -> Stmt:
    """Loop over the atoms of one cell of `group`, each written at row i's next free slot and kept when
    within the cutoff and `counted(j, deltas)` (branch-free, as the one-process build)."""
    capacity = b.max_neighbors
    k = Var(f"k_{group}")
    decl_j, j = let(f"j_{group}", index(Load(b.members(group), begin + k)))
    inner: list[Stmt] = [decl_j]
    deltas = []
    for d, name in enumerate("xyz"):
        decl_d, dd = let(f"d{name}_{group}", xi[d] - load3(b.x, j, d))
        inner.append(decl_d)
        deltas.append(dd)
    decl_rsq, rsq = let(f"rsq_{group}", deltas[0] * deltas[0] + deltas[1] * deltas[1] + deltas[2] * deltas[2])
    decl_take, take = let(f"take_{group}", logical_and(counted(j, deltas), lt(rsq, f64(cutoff * cutoff))))
    slot = minimum(count, i64(capacity - 1))
    inner += [decl_rsq, decl_take, Store(b.neighbors, i * capacity + slot, cast(j, "int32")),
              Assign(count, count + cast(take, I64))]
    return For(k, size, block(*inner))


def _rows_without_pairs(b: ShellBuffers) -> Stmt:
    """Ghosts' and unused rows: no pairs."""
    r = Var("r")
    own = _own_count(b)
    no_pairs = block(Store(b.neighbor_count, (own + r) * 2, Const(0, "int32")),
                     Store(b.neighbor_count, (own + r) * 2 + 1, Const(0, "int32")))
    return For(r, i64(b.capacity) - own, no_pairs, b.kind)


def build_neighbors(b: ShellBuffers, cutoff: float) -> Kernel:
    """Half list within `cutoff` of the own atoms against own atoms and ghosts (module docstring)."""
    i, s, t = Var("i"), Var("s"), Var("t")
    g = b.grid
    capacity = b.max_neighbors
    stmts, home, xi, count = _row_start(b, i)

    def candidates(group: str, begin, size, counted) -> Stmt:
        return _candidates(b, cutoff, i, xi, count, group, begin, size, counted)

    # own atoms over the half stencil: in the home cell only j > i
    decls, begin, size = _cell_range(b, "own", home, lambda d: index(Load(b.half_stencil, s * 4 + d)), "own")
    decl_half, only_above_i = let("only_above_i", ne(Load(b.half_stencil, s * 4 + 3), Const(0, "int32")))
    own_pairs = candidates("own", begin, size, lambda j, _: logical_or(logical_not(only_above_i), lt(i, j)))
    stmts.append(For(s, g.half_stencil.shape[0], block(*decls, decl_half, own_pairs)))

    # ghosts over the full stencil: those above i (d = x_i - x_j, so "above" is d < 0 lexicographically)
    def above(_, d):
        zero = f64(0.0)
        return logical_or(lt(d[2], zero), logical_and(eq(d[2], zero),
                                                      logical_or(lt(d[1], zero),
                                                                 logical_and(eq(d[1], zero), lt(d[0], zero)))))
    decls, begin, size = _cell_range(b, "ghost", home, lambda d: index(Load(b.full_stencil, t * 3 + d)), "ghost")
    stmts.append(For(t, g.full_stencil.shape[0], block(*decls, candidates("ghost", begin, size, above))))

    stmts += [Store(b.neighbor_count, i * 2, cast(count, "int32")), Store(b.neighbor_count, i * 2 + 1,
                                                                          Const(0, "int32"))]
    most = Var("most", I64)
    stmts.append(Assign(most, maximum(most, count)))
    own = _own_count(b)
    body = block(Let(most, i64(0)), For(i, own, block(*stmts), b.kind), _rows_without_pairs(b),
                 Store(b.most_neighbors, i64(0), cast(most, "int32")))
    return Kernel("build_neighbors",
                  (b.x, b.counts, b.cell, b.start("own"), b.members("own"), b.start("ghost"), b.members("ghost"),
                   b.half_stencil, b.full_stencil, b.neighbors, b.neighbor_count, b.most_neighbors),
                  body, f"half neighbour list within {cutoff:g} of own atoms and ghosts: own atoms over a half "
                        f"stencil of {g.half_stencil.shape[0]} cells, ghosts above i over the full stencil of "
                        f"{g.full_stencil.shape[0]}; capacity {capacity} per atom")


def build_full_neighbors(b: ShellBuffers, cutoff: float) -> Kernel:
    """Full list within `cutoff` of the own atoms: every own atom and ghost j != i of the full stencil's cells.

    Each rank then computes the forces on its own atoms alone (full_force_kernels.py): a pair of two own
    atoms is met from both, a pair across ranks once on each rank, so no ghost force goes back. Rows of ghosts
    and unused rows get no pairs; `pad_rows` pads the rows and measures the longest next.
    """
    i, t = Var("i"), Var("t")
    g = b.grid
    capacity = b.max_neighbors
    stmts, home, xi, count = _row_start(b, i)
    per_cell: list[Stmt] = []
    for group in ("own", "ghost"):
        decls, begin, size = _cell_range(b, group, home, lambda d: index(Load(b.full_stencil, t * 3 + d)), group)
        per_cell += [*decls, _candidates(b, cutoff, i, xi, count, group, begin, size, lambda j, _: ne(j, i))]
    stmts.append(For(t, g.full_stencil.shape[0], block(*per_cell)))
    stmts += [Store(b.neighbor_count, i * 2, cast(count, "int32")),
              Store(b.neighbor_count, i * 2 + 1, Const(0, "int32"))]  # ghosts carry their image: no back segment
    own = _own_count(b)
    body = block(For(i, own, block(*stmts), b.kind), _rows_without_pairs(b))
    return Kernel("build_full_neighbors",
                  (b.x, b.counts, b.cell, b.start("own"), b.members("own"), b.start("ghost"), b.members("ghost"),
                   b.full_stencil, b.neighbors, b.neighbor_count),
                  body, f"full neighbour list within {cutoff:g} of own atoms: own atoms and ghosts over the full "
                        f"stencil of {g.full_stencil.shape[0]} cells; capacity {capacity} per atom")
