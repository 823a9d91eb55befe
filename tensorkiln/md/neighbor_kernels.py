"""Loop-IR kernels that build a half neighbour list by cell binning.

The box is cut into a grid of cells at least `cutoff / cells_per_cutoff`
wide. A rebuild runs two programs. The first sorts the atoms by cell:

1. `wrap_positions`: put every atom back into the periodic box;
2. `bin_atoms`: the cell of each atom (parallel over atoms);
3. `sort_by_cell`: a counting sort of the atoms by cell (serial, O(n)):
   `cell_start[c] .. cell_start[c+1]` index the atoms of cell c in `cell_atoms`;
4. `permute_atoms`: x, v, f and the atom ids gathered into cell order (and
   the positions remembered in `x_hold`: the displacement check measures
   from there). Neighbouring atoms then sit close in memory, so the force
   kernel's gathers hit the cache as the liquid mixes; the caller swaps the
   sorted arrays in.

The second, `build_neighbors`, lists for each atom i (parallel) the atoms j
of the stencil cells whose minimum-image distance is below cutoff + skin. Each
pair is stored once (Newton's third law: the force kernel applies it to both
atoms): the stencil holds one of each pair of mirror cells (c + o and c - o),
and in a cell that is its own mirror (i's own cell, or one across a grid of
1 or 2 cells) only j > i is taken. Atom i's neighbours fill row i of
`neighbors` (capacity `max_neighbors`): the pairs that need no periodic
correction from the front, those across the boundary from the back, so the
force kernel spends the minimum-image arithmetic only on the latter;
`neighbor_count[i]` counts each segment,
and `most_neighbors[0]`, the largest count, tells the caller when a row
overflowed and the list must be built again with more room.

The stencil lists each distinct neighbouring cell once (offsets taken modulo
the grid), and leaves out cells whose nearest corner is beyond the cutoff.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import (Const, Load, Var, call, cast, eq, logical_and, logical_not, logical_or, lt,
                                   maximum, minimum, ne)
from tensorkiln.loops.ir import Assign, For, If, Kernel, Let, Stmt, Store, block
from tensorkiln.md.lattice import Box, MDInputError
from tensorkiln.md.loop_helpers import (F64, I64, atom_loop_kind, f64, i64, index, let, let_cell_coordinates,
                                        let_position, load3, store3)


def initial_capacity(density: float, cutoff: float) -> int:
    """Room per row of a half list for atoms at `density` within `cutoff`.

    A row holds about half the neighbours on average, but a liquid's rows
    vary (the first atom of a cell lists the whole home cell): on in.lj the
    fullest row reaches ~1.65x the average as the lattice melts. A row that
    outgrows its room forces a rebuild of every program (a compile-cache hit
    still costs ~0.2 s, inside the run), so the room is twice the average.
    """
    expected_half = 0.5 * density * 4.0 / 3.0 * math.pi * cutoff ** 3
    return max(16, int(2.0 * expected_half) + 16)


def has_room(most_neighbors: int, capacity: int) -> bool:
    """Whether rows of up to `most_neighbors` fit a capacity: the build writes each candidate at the next
    free slot before it knows whether to keep it, so a full row's last entry would be overwritten; a row
    needs one spare slot."""
    return most_neighbors < capacity


def _upper(offset: tuple[int, ...], residue: tuple[int, ...], mirror: tuple[int, ...]) -> bool:
    """Whether `offset` is the one of a mirror pair the stencil keeps: the one pointing up in z, or in y
    where z is level, or in x (the first axis, z first, on which the two differ decides). Cells are
    numbered z-major, so each pair lands in the same z-plane as i or in the planes above it: a thread
    working on a run of planes writes only to those and the few above (thread_split.py)."""
    for d in (2, 1, 0):
        if residue[d] != mirror[d]:
            return offset[d] > 0
    return False


@dataclass(frozen=True)
class CellGrid:
    """The binning of a box for a neighbour cutoff: cells per axis, their widths, and the stencil."""

    box: Box
    counts: tuple[int, int, int]
    stencil: np.ndarray  # int32 [s, 4]: offsets of the cells to search, and 1 where only j > i counts

    @property
    def plane_reach(self) -> Optional[int]:
        """How many z-planes above its own a pair can reach, when every stencil cell lies in i's plane or above
        (None when the z axis has too few cells for that: an offset and its mirror fall on one plane)."""
        dz = self.stencil[:, 2] if len(self.stencil) else np.zeros(1, np.int32)
        if self.counts[2] < 2 * int(np.abs(dz).max()) + 1 or dz.min() < 0:
            return None
        return int(dz.max())

    @classmethod
    def for_cutoff(cls, box: Box, cutoff: float, cells_per_cutoff: int = 2) -> "CellGrid":
        """Cells at least cutoff / cells_per_cutoff wide (at least one per axis)."""
        lengths = box.lengths
        if np.any(lengths < 2.0 * cutoff):
            raise MDInputError(
                f"box lengths {tuple(float(v) for v in lengths)} must be at least twice the neighbour "
                f"cutoff {cutoff:g} (pair cutoff + skin): the minimum-image convention needs it")
        counts = tuple(max(1, int(math.floor(length * cells_per_cutoff / cutoff))) for length in lengths)
        widths = lengths / np.array(counts)
        reach = [min(int(math.ceil(cutoff / w)), n) for w, n in zip(widths, counts)]
        per_axis = []
        for n, r in zip(counts, reach):
            # each residue modulo n once, by its offset of smallest magnitude
            seen: dict[int, int] = {}
            for offset in sorted(range(-r, r + 1), key=abs):
                seen.setdefault(offset % n, offset)
            per_axis.append(sorted(seen.values()))
        stencil = []
        for offset in itertools.product(*per_axis):
            gap = sum((max(abs(o) - 1, 0) * w) ** 2 for o, w in zip(offset, widths))
            if gap >= cutoff * cutoff:
                continue
            residue = tuple(o % n for o, n in zip(offset, counts))
            mirror = tuple(-o % n for o, n in zip(offset, counts))
            if residue == mirror:
                stencil.append((*offset, 1))  # its own mirror: take j > i only
            elif _upper(offset, residue, mirror):
                stencil.append((*offset, 0))  # the mirror cell's atoms find these pairs otherwise
        return cls(box, counts, np.array(stencil, dtype=np.int32).reshape(-1, 4))  # type: ignore[arg-type]

    @property
    def needs_minimum_image(self) -> bool:
        """True when an axis has too few cells for the stencil to reach each neighbouring cell by one offset
        (fewer than 2 * reach + 1): then the image of a pair is found by the minimum-image rule instead
        of from the stencil offset."""
        reach = np.abs(self.stencil[:, :3]).max(axis=0) if len(self.stencil) else np.zeros(3, int)
        return bool(np.any(np.array(self.counts) < 2 * reach + 1))

    @property
    def cells(self) -> int:
        return int(np.prod(self.counts))


@dataclass(frozen=True)
class NeighborBuffers:
    """The buffers of the neighbour build for `atoms` atoms and a grid."""

    atoms: int
    grid: CellGrid
    max_neighbors: int
    threads: int = 1

    @property
    def kind(self) -> str:
        """How the loops over atoms run."""
        return atom_loop_kind(self.atoms, self.threads)

    @property
    def x(self) -> Buffer:
        return Buffer("x", F64, (self.atoms, 3))

    @property
    def x_hold(self) -> Buffer:
        return Buffer("x_hold", F64, (self.atoms, 3))

    @property
    def cell(self) -> Buffer:
        return Buffer("cell", "int32", (self.atoms,))

    @property
    def cell_start(self) -> Buffer:
        return Buffer("cell_start", "int32", (self.grid.cells + 1,))

    @property
    def cell_fill(self) -> Buffer:
        return Buffer("cell_fill", "int32", (self.grid.cells,))

    @property
    def cell_atoms(self) -> Buffer:
        return Buffer("cell_atoms", "int32", (self.atoms,))

    @property
    def stencil(self) -> Buffer:
        return Buffer("stencil", "int32", self.grid.stencil.shape)

    def per_atom(self, name: str, dtype: str = F64, width: int = 3) -> Buffer:
        """A per-atom array: [atoms, width], or [atoms] for width 0."""
        return Buffer(name, dtype, (self.atoms, width) if width else (self.atoms,))

    @property
    def neighbors(self) -> Buffer:
        return Buffer("neighbors", "int32", (self.atoms, self.max_neighbors))

    @property
    def neighbor_count(self) -> Buffer:
        return Buffer("neighbor_count", "int32", (self.atoms, 2))

    @property
    def most_neighbors(self) -> Buffer:
        return Buffer("most_neighbors", "int32", (1,))


def wrap_positions(b: NeighborBuffers) -> Kernel:
    """x = x wrapped into [lo, hi) per axis."""
    i = Var("i")
    stmts = []
    for d in range(3):
        lo, length = b.grid.box.lo[d], float(b.grid.box.lengths[d])
        x = load3(b.x, i, d)
        wrapped = x - f64(length) * call("floor", (x - f64(lo)) * f64(1.0 / length))
        decl, w = let(f"w{d}", wrapped)
        stmts += [decl, store3(b.x, i, d, w)]
    return Kernel("wrap_positions", (b.x,), For(i, b.atoms, block(*stmts), b.kind),
                  "periodic wrap of positions before a neighbour-list build (LAMMPS's pbc())")


def _cell_coordinate(b: NeighborBuffers, atom: Var, d: int):
    lo = b.grid.box.lo[d]
    n = b.grid.counts[d]
    inverse_width = n / float(b.grid.box.lengths[d])
    raw = cast(call("floor", (load3(b.x, atom, d) - f64(lo)) * f64(inverse_width)), I64)
    return minimum(maximum(raw, i64(0)), i64(n - 1))  # a coordinate rounded onto hi stays in the grid


def bin_atoms(b: NeighborBuffers) -> Kernel:
    """cell[i] = the index of the cell holding atom i (x fastest)."""
    i = Var("i")
    nx, ny, _ = b.grid.counts
    cx, cy, cz = (_cell_coordinate(b, i, d) for d in range(3))
    flat = (cz * ny + cy) * nx + cx
    return Kernel("bin_atoms", (b.x, b.cell), For(i, b.atoms, Store(b.cell, i, cast(flat, "int32")), b.kind),
                  f"cell of each atom in a {nx}x{ny}x{b.grid.counts[2]} grid")


def sort_by_cell(b: NeighborBuffers) -> Kernel:
    """Counting sort of atoms by cell: cell_start (prefix sums of counts) and cell_atoms."""
    c, i, c2, i2, c3 = Var("c"), Var("i"), Var("c2"), Var("i2"), Var("c3")
    one = Const(1, "int32")
    zero = Const(0, "int32")
    cells = b.grid.cells
    clear = For(c, cells + 1, Store(b.cell_start, c, zero))
    of_i = index(Load(b.cell, i)) + 1
    count = For(i, b.atoms, Store(b.cell_start, of_i, Load(b.cell_start, of_i) + one))
    prefix = For(c2, cells, Store(b.cell_start, c2 + 1, Load(b.cell_start, c2 + 1) + Load(b.cell_start, c2)))
    start_fill = For(c3, cells, Store(b.cell_fill, c3, Load(b.cell_start, c3)))
    decl, home = let("home", index(Load(b.cell, i2)))
    place = For(i2, b.atoms, block(
        decl,
        Store(b.cell_atoms, index(Load(b.cell_fill, home)), cast(i2, "int32")),
        Store(b.cell_fill, home, Load(b.cell_fill, home) + one)))
    return Kernel("sort_by_cell", (b.cell, b.cell_start, b.cell_fill, b.cell_atoms),
                  block(clear, count, prefix, start_fill, place),
                  "counting sort of the atoms by cell (serial: one pass over the atoms)")


def permute_atoms(b: NeighborBuffers) -> Kernel:
    """Gather x, v, f, ids and cells into cell order (`*_sorted`); x_hold = the sorted positions."""
    k = Var("k")
    decl, source = let("source", index(Load(b.cell_atoms, k)))
    stmts = [decl]
    params = [b.cell_atoms]
    for name in ("x", "v", "f"):
        old, new = b.per_atom(name), b.per_atom(f"{name}_sorted")
        params += [old, new]
        for d in range(3):
            stmts.append(store3(new, k, d, load3(old, source, d)))
            if name == "x":
                stmts.append(store3(b.x_hold, k, d, load3(old, source, d)))
    for name in ("ids", "cell"):
        old, new = b.per_atom(name, "int32", 0), b.per_atom(f"{name}_sorted", "int32", 0)
        params += [old, new]
        stmts.append(Store(new, k, Load(old, source)))
    params.append(b.x_hold)
    return Kernel("permute_atoms", tuple(params), For(k, b.atoms, block(*stmts), b.kind),
                  "atoms gathered into cell order, so that neighbours sit close in memory")


def build_neighbors(b: NeighborBuffers, cutoff: float) -> Kernel:
    """Half neighbour list of atoms sorted by cell (`cell` ascending): each pair within `cutoff` once.

    Row i holds two segments: from the front, the neighbours j whose nearest
    image is j itself (x_i - x_j needs no periodic correction); from the back,
    those across the periodic boundary (the force kernel corrects them by the
    minimum-image rule). `neighbor_count[i]` = (front count, back count).
    """
    i, s = Var("i"), Var("s")
    nx, ny, nz = b.grid.counts
    capacity = b.max_neighbors
    lengths = [float(v) for v in b.grid.box.lengths]
    decl_home, home = let("home", index(Load(b.cell, i)))
    decl_cells, cvars = let_cell_coordinates(home, b.grid.counts)
    decl_position, positions = let_position(b.x, i)
    stmts: list[Stmt] = [decl_home, *decl_cells, *decl_position]
    decl_plain, plain_count = let("n_plain", i64(0))
    decl_image, image_count = let("n_image", i64(0))
    stmts += [decl_plain, decl_image]

    # the stencil cell s, wrapped around the periodic grid
    unwrapped, wrapped, decls = [], [], []
    for d, n_axis in enumerate((nx, ny, nz)):
        decl_u, u = let(f"u{'xyz'[d]}", cvars[d] + index(Load(b.stencil, s * 4 + d)))
        decl_w, w = let(f"w{'xyz'[d]}", (u + n_axis) % n_axis)
        decls += [decl_u, decl_w]
        unwrapped.append(u)
        wrapped.append(w)
    decl_cell, other = let("other", (wrapped[2] * ny + wrapped[1]) * nx + wrapped[0])
    decl_begin, begin = let("begin", index(Load(b.cell_start, other)))
    decl_size, size = let("size", index(Load(b.cell_start, other + 1)) - begin)
    decl_half, only_above_i = let("only_above_i", ne(Load(b.stencil, s * 4 + 3), Const(0, "int32")))
    decls += [decl_cell, decl_begin, decl_size, decl_half]
    if b.grid.needs_minimum_image:
        # too few cells to tell the image from the offset: every pair is corrected by the minimum-image rule
        decls.append(Let(Var("same_image", "bool"), Const(False, "bool")))
    else:
        # the image of cell s lies `crossed` box lengths away: atom i is moved by as much the other way
        crossed = [cast((unwrapped[d] - wrapped[d]) // b.grid.counts[d], F64) for d in range(3)]
        for d, name in enumerate("xyz"):
            decls.append(Let(Var(f"{name}s", F64), positions[d] - crossed[d] * f64(lengths[d])))
        decls.append(Let(Var("same_image", "bool"),
                         logical_and(logical_and(eq(wrapped[0], unwrapped[0]), eq(wrapped[1], unwrapped[1])),
                                     eq(wrapped[2], unwrapped[2]))))

    def candidates(segment: str) -> Stmt:
        """The loop over the atoms of cell s, recording into the front or the back segment."""
        k = Var(f"k_{segment}")
        decl_j, j = let(f"j_{segment}", begin + k)  # atoms are sorted by cell
        inner = [decl_j]
        squared = None
        for d, name in enumerate("xyz"):
            if b.grid.needs_minimum_image:
                decl_raw, raw = let(f"d{name}_raw_{segment}", positions[d] - load3(b.x, j, d))
                decl_d, dd = let(f"d{name}_{segment}",
                                 raw - f64(lengths[d]) * call("rint", raw * f64(1.0 / lengths[d])))
                inner += [decl_raw, decl_d]
            else:
                decl_d, dd = let(f"d{name}_{segment}", Var(f"{name}s", F64) - load3(b.x, j, d))
                inner.append(decl_d)
            squared = dd * dd if squared is None else squared + dd * dd
        decl_rsq, rsq = let(f"rsq_{segment}", squared)
        # Branch-free: j is always written at the next free slot, and the slot is taken only when j is a
        # neighbour. (Whether it is cannot be predicted; a branch on it mispredicts about every fourth pair.)
        counted = logical_or(logical_not(only_above_i), lt(i, j))
        decl_take, take = let(f"take_{segment}", logical_and(counted, lt(rsq, f64(cutoff * cutoff))))
        count = plain_count if segment == "plain" else image_count
        position = minimum(count, i64(capacity - 1))
        slot = position if segment == "plain" else (capacity - 1) - position
        inner += [decl_rsq, decl_take, Store(b.neighbors, i * capacity + slot, cast(j, "int32")),
                  Assign(count, count + cast(take, I64))]
        return For(k, size, block(*inner))

    per_cell = block(*decls, If(Var("same_image", "bool"), candidates("plain"), candidates("image")))
    stmts.append(For(s, b.grid.stencil.shape[0], per_cell))
    stmts += [Store(b.neighbor_count, i * 2, cast(plain_count, "int32")),
              Store(b.neighbor_count, i * 2 + 1, cast(image_count, "int32"))]
    most = Var("most", I64)
    stmts.append(Assign(most, maximum(most, plain_count + image_count)))
    body = block(Let(most, i64(0)), For(i, b.atoms, block(*stmts), b.kind),
                 Store(b.most_neighbors, i64(0), cast(most, "int32")))
    return Kernel("build_neighbors",
                  (b.x, b.cell, b.cell_start, b.stencil, b.neighbors, b.neighbor_count, b.most_neighbors),
                  body, f"half neighbour list within {cutoff:g}, cell stencil of "
                        f"{b.grid.stencil.shape[0]} cells, capacity {capacity} per atom (same-image pairs "
                        "from the front, pairs across the boundary from the back)")
