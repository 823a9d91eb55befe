"""Loop-IR kernels of the Lennard-Jones force, with Newton's third law over a half neighbour list.

Each pair (i, j) is stored once, so the kernel adds its force to atom i and
subtracts it from atom j: half the pair evaluations of a full list. The
kernels add into `f`, which the caller has zeroed (the integrator's first
half clears it once it has used it). With several threads two threads could
update the same atom j at once: `lj_force_coloured` runs chunks of equal
pairs in two colours so that they never do (thread_split.py) and adds into
`f` directly; where that split is not safe (few atoms or z-planes for the
threads) `lj_force` has each thread t accumulate into its own copy
`force_copies[t]` over a contiguous block of atoms, and `sum_force_copies`
adds the copies (parallel over atoms).

The pair loop is branch-free: a neighbour beyond the force cutoff (the list
reaches cutoff + skin) gets a zero force through a select. A row's pairs
come in two segments (neighbor_kernels.py): those within the box need no
periodic correction; only those across the boundary (about one in six on
in.lj) pay for the minimum-image rule.

LAMMPS's lj/cut: with r2inv = 1/r^2 and r6inv = r2inv^3,
fpair = r6inv (lj1 r6inv - lj2) r2inv, lj1 = 48 eps sigma^12, lj2 = 24 eps sigma^6;
the energy of a pair is r6inv (lj3 r6inv - lj4) - offset (lj3 = 4 eps sigma^12,
lj4 = 4 eps sigma^6), and its virial r^2 fpair. The energy variant also
returns `energy_virial` = [sum of pair energies, sum of pair virials].
"""
from __future__ import annotations

from dataclasses import dataclass

from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Load, Var, call, lt, maximum, minimum, where
from tensorkiln.loops.ir import Assign, For, Kernel, Let, Stmt, Store, block
from tensorkiln.md.lattice import Box
from tensorkiln.md.loop_helpers import F64, atom_loop_kind, f64, i64, index, let, let_position, load3
from tensorkiln.md.pair_lj import LJCut

# The pair loop is branch-free, so it could run as SIMD lanes (gathers of x[j], scatters to f[j]; the atoms
# of one row are distinct, so scatters never collide). Measured on in.lj (32,000 atoms, one thread, Zen 4):
# ~13-17 ms per force call as `omp simd` against ~12 ms as a plain loop that GCC schedules itself.
PAIR_LOOP_KIND = "serial"


@dataclass(frozen=True)
class ForceBuffers:
    """The buffers of the force computation."""

    atoms: int
    max_neighbors: int
    threads: int

    @property
    def x(self) -> Buffer:
        return Buffer("x", F64, (self.atoms, 3))

    @property
    def f(self) -> Buffer:
        return Buffer("f", F64, (self.atoms, 3))

    @property
    def force_copies(self) -> Buffer:
        return Buffer("force_copies", F64, (self.threads, self.atoms, 3))

    @property
    def neighbors(self) -> Buffer:
        return Buffer("neighbors", "int32", (self.atoms, self.max_neighbors))

    @property
    def neighbor_count(self) -> Buffer:
        return Buffer("neighbor_count", "int32", (self.atoms, 2))

    @property
    def energy_virial(self) -> Buffer:
        return Buffer("energy_virial", F64, (2,))

    @property
    def chunk_start(self) -> Buffer:
        return Buffer("chunk_start", "int32", (2 * self.threads + 1,))


def _pair_loop(b: ForceBuffers, target: Buffer, target_base, i, pair: LJCut, box: Box, energy: bool) -> Stmt:
    """The forces of atom i's neighbour row, added to i and subtracted from each j in `target`."""
    stmts, xi = let_position(b.x, i)
    sums = [Var(f"f{name}i", F64) for name in "xyz"]
    stmts += [Let(v, f64(0.0)) for v in sums]
    for segment in ("plain", "image"):
        stmts.append(_segment_loop(b, target, target_base, i, xi, sums, pair, box, energy, segment))
    for d in range(3):
        stmts.append(Store(target, target_base + i * 3 + d, Load(target, target_base + i * 3 + d) + sums[d]))
    return block(*stmts)


def row_neighbor(b: ForceBuffers, box: Box, xi: list, i, k: Var, segment: str) -> tuple[list[Stmt], Var, list, Stmt, Var]:
    """The k-th neighbour j of row i's `segment` ("plain": from the front, no periodic correction;
    "image": from the back, across the boundary, minimum image): (the Lets of j and of the deltas
    xi - xj, j, the deltas, the Let of rsq, rsq)."""
    tag = "" if segment == "plain" else "_image"
    lengths = [float(v) for v in box.lengths]
    capacity = b.max_neighbors
    slot = k if segment == "plain" else (capacity - 1) - k
    decl_j, j = let(f"j{tag}", index(Load(b.neighbors, i * capacity + slot)))
    lets: list[Stmt] = [decl_j]
    deltas = []
    for d, name in enumerate("xyz"):
        if segment == "plain":
            decl_d, dd = let(f"d{name}", xi[d] - load3(b.x, j, d))
            lets.append(decl_d)
        else:
            decl_raw, raw = let(f"d{name}_raw", xi[d] - load3(b.x, j, d))
            decl_d, dd = let(f"d{name}{tag}", raw - f64(lengths[d]) * call("rint", raw * f64(1.0 / lengths[d])))
            lets += [decl_raw, decl_d]
        deltas.append(dd)
    decl_rsq, rsq = let(f"rsq{tag}", deltas[0] * deltas[0] + deltas[1] * deltas[1] + deltas[2] * deltas[2])
    return lets, j, deltas, decl_rsq, rsq


def lj_pair_terms(pair: LJCut, rsq: Var, inside: Var, tag: str) -> tuple[list[Stmt], Var, Var]:
    """The Lets of r2inv, r6inv and fpair of one pair (all 0 outside the cutoff: `inside` false keeps the
    arithmetic finite too), r6inv and fpair."""
    decl_r2inv, r2inv = let(f"r2inv{tag}", where(inside, f64(1.0) / rsq, f64(0.0)))
    decl_r6inv, r6inv = let(f"r6inv{tag}", r2inv * r2inv * r2inv)
    decl_fpair, fpair = let(f"fpair{tag}", r6inv * (f64(pair.lj1) * r6inv - f64(pair.lj2)) * r2inv)
    return [decl_r2inv, decl_r6inv, decl_fpair], r6inv, fpair


def lj_pair_tally(pair: LJCut, rsq: Var, inside: Var, r6inv: Var, fpair: Var) -> list[Stmt]:
    """One pair's energy and virial added to the running `energy` and `virial`."""
    evdwl = r6inv * (f64(pair.lj3) * r6inv - f64(pair.lj4)) - f64(pair.offset)
    return [Assign(Var("energy", F64), Var("energy", F64) + where(inside, evdwl, f64(0.0))),
            Assign(Var("virial", F64), Var("virial", F64) + rsq * fpair)]


def _segment_loop(b: ForceBuffers, target: Buffer, target_base, i, xi, sums, pair: LJCut, box: Box, energy: bool,
                  segment: str) -> Stmt:
    """The pairs of one segment of row i: "plain" (from the front, no periodic correction) or "image"
    (from the back, across the boundary: minimum image)."""
    k = Var(f"k_{segment}")
    tag = "" if segment == "plain" else "_image"
    count = index(Load(b.neighbor_count, i * 2 + (0 if segment == "plain" else 1)))
    inner, j, deltas, decl_rsq, rsq = row_neighbor(b, box, xi, i, k, segment)
    decl_inside, inside = let(f"inside{tag}", lt(rsq, f64(pair.cutoff ** 2)))
    terms, r6inv, fpair = lj_pair_terms(pair, rsq, inside, tag)
    inner += [decl_rsq, decl_inside, *terms]
    for d in range(3):
        decl_push, push = let(f"push{'xyz'[d]}{tag}", deltas[d] * fpair)
        inner += [decl_push, Assign(sums[d], sums[d] + push),
                  Store(target, target_base + j * 3 + d, Load(target, target_base + j * 3 + d) - push)]
    if energy:
        inner += lj_pair_tally(pair, rsq, inside, r6inv, fpair)
    return For(k, count, block(*inner), PAIR_LOOP_KIND)


def lj_force(b: ForceBuffers, pair: LJCut, box: Box, energy: bool) -> Kernel:
    """Clear the forces, then add every pair's (one thread: into f; several: into per-thread copies)."""
    n = b.atoms
    reductions: list[Stmt] = [Let(Var("energy", F64), f64(0.0)), Let(Var("virial", F64), f64(0.0))] if energy else []
    outputs = [b.energy_virial] if energy else []
    finish = ([Store(b.energy_virial, i64(0), Var("energy", F64)), Store(b.energy_virial, i64(1), Var("virial", F64))]
              if energy else [])
    what = "energy, virial and forces" if energy else "forces"
    if b.threads == 1:
        i = Var("i")
        pairs = For(i, n, _pair_loop(b, b.f, i64(0), i, pair, box, energy))
        return Kernel("lj_force", (b.x, b.neighbors, b.neighbor_count, b.f, *outputs),
                      block(*reductions, pairs, *finish),
                      f"Lennard-Jones {what} over a half list, Newton's third law, one thread, added to f")
    t, i, z, a = Var("t"), Var("i"), Var("z"), Var("a")
    block_size = -(-n // b.threads)
    base = t * (n * 3)
    clear = For(z, n * 3, Store(b.force_copies, base + z, f64(0.0)), "vectorized")
    first = t * block_size
    size = maximum(minimum(i64(block_size), i64(n) - first), i64(0))
    body = block(clear, For(a, size, block(Let(i, first + a), _pair_loop(b, b.force_copies, base, i, pair, box, energy))))
    return Kernel("lj_force", (b.x, b.neighbors, b.neighbor_count, b.force_copies, *outputs),
                  block(*reductions, For(t, b.threads, body, "parallel"), *finish),
                  f"Lennard-Jones {what} over a half list, Newton's third law: thread t takes atoms "
                  f"[t*{block_size}, (t+1)*{block_size}) and accumulates into its own copy of the forces")


def lj_force_coloured(b: ForceBuffers, pair: LJCut, box: Box, energy: bool) -> Kernel:
    """Add every pair's force to f, the atoms in 2 x threads chunks of equal pairs (`chunk_start`): the even
    chunks at once, one per thread, then the odd ones; chunks of one colour never write the same atom."""
    colour, t, a, i = Var("colour"), Var("t"), Var("a"), Var("i")
    reductions: list[Stmt] = [Let(Var("energy", F64), f64(0.0)), Let(Var("virial", F64), f64(0.0))] if energy else []
    outputs = [b.energy_virial] if energy else []
    finish = ([Store(b.energy_virial, i64(0), Var("energy", F64)), Store(b.energy_virial, i64(1), Var("virial", F64))]
              if energy else [])
    chunk = t * 2 + colour
    decl_first, first = let("first", index(Load(b.chunk_start, chunk)))
    decl_size, size = let("size", index(Load(b.chunk_start, chunk + 1)) - first)
    rows = For(a, size, block(Let(i, first + a), _pair_loop(b, b.f, i64(0), i, pair, box, energy)))
    threads = For(t, b.threads, block(decl_first, decl_size, rows), "parallel")
    what = "energy, virial and forces" if energy else "forces"
    return Kernel("lj_force_coloured", (b.x, b.neighbors, b.neighbor_count, b.chunk_start, b.f, *outputs),
                  block(*reductions, For(colour, 2, threads), *finish),
                  f"Lennard-Jones {what} over a half list, Newton's third law, added to f: {2 * b.threads} chunks "
                  f"of equal pairs, even chunks on {b.threads} threads at once, then odd ones (thread_split.py)")


def sum_force_copies(b: ForceBuffers) -> Kernel:
    """f = the sum of the per-thread force copies."""
    z = Var("z")
    total = Load(b.force_copies, z)
    for t in range(1, b.threads):
        total = total + Load(b.force_copies, z + t * b.atoms * 3)
    loop = For(z, b.atoms * 3, Store(b.f, z, total), atom_loop_kind(b.atoms, b.threads))
    return Kernel("sum_force_copies", (b.force_copies, b.f), loop,
                  f"f = sum of {b.threads} per-thread force copies")
