"""Loop-IR kernel of the Lennard-Jones force over a full neighbour list (full_neighbor_kernels.py).

Each pair is listed twice, so the kernel evaluates it twice and writes only
f[i]: twice the arithmetic of the half list's kernel (force_kernels.py), but
no scatter to f[j]. Without the scatter the pair loop runs as SIMD lanes
(`#pragma omp simd`: AVX-512 gathers of x[j], the forces on i summed over
the lanes), and the threads take atoms i in parallel with no colours and no
force copies: nothing two threads write is shared. Measured on in.lj
(32,000 atoms, one thread, Zen 4, a force call after 20 steps): ~7.0 ms
against ~10.1 ms for the half list's scalar loop and ~10.3 ms for the half
list's loop as SIMD lanes with scatters (CPU time, a loaded machine); with
the rows padded to whole vectors (full_neighbor_kernels.py) ~5.9 ms.

The arithmetic per pair is the half kernel's (LAMMPS's lj/cut, the cutoff
a select): each pair's force on i is the same number, only the order of the
sums changes. The energy and virial count each pair twice, so they are
halved at the end.
"""
from __future__ import annotations

from tensorkiln.loops.expr import Load, Var, logical_and, lt, ne
from tensorkiln.loops.ir import Assign, For, Kernel, Let, Stmt, Store, block
from tensorkiln.md.force_kernels import ForceBuffers, lj_pair_tally, lj_pair_terms, row_neighbor
from tensorkiln.md.full_neighbor_kernels import padded
from tensorkiln.md.lattice import Box
from tensorkiln.md.loop_helpers import F64, atom_loop_kind, f64, i64, index, let, let_position
from tensorkiln.md.pair_lj import LJCut

# The pair loop as SIMD lanes: 8 neighbours at a time in AVX-512 (see the module docstring for the figures).
PAIR_LOOP_KIND = "vectorized"


def _segment_loop(b: ForceBuffers, i: Var, xi: list, sums: list, pair: LJCut, box: Box, energy: bool,
                  segment: str) -> Stmt:
    """The pairs of one segment of row i: "plain" (from the front) or "image" (from the back: minimum image)."""
    k = Var(f"k_{segment}")
    tag = "" if segment == "plain" else "_image"
    count = padded(index(Load(b.neighbor_count, i * 2 + (0 if segment == "plain" else 1))))
    inner, j, deltas, decl_rsq, rsq = row_neighbor(b, box, xi, i, k, segment)
    # the row's padding (j == i) contributes nothing, as a pair beyond the cutoff
    decl_inside, inside = let(f"inside{tag}", logical_and(lt(rsq, f64(pair.cutoff ** 2)), ne(j, i)))
    terms, r6inv, fpair = lj_pair_terms(pair, rsq, inside, tag)
    inner += [decl_rsq, decl_inside, *terms]
    inner += [Assign(sums[d], sums[d] + deltas[d] * fpair) for d in range(3)]
    if energy:
        inner += lj_pair_tally(pair, rsq, inside, r6inv, fpair)
    return For(k, count, block(*inner), PAIR_LOOP_KIND)


def lj_force_full(b: ForceBuffers, pair: LJCut, box: Box, energy: bool) -> Kernel:
    """Add every atom's force from its full neighbour row to f (parallel over atoms when the threads have
    work); with `energy`, energy_virial = [pair energy, pair virial], each pair counted once."""
    i = Var("i")
    stmts, xi = let_position(b.x, i)
    sums = [Var(f"f{name}i", F64) for name in "xyz"]
    stmts += [Let(v, f64(0.0)) for v in sums]
    stmts += [_segment_loop(b, i, xi, sums, pair, box, energy, segment) for segment in ("plain", "image")]
    stmts += [Store(b.f, i * 3 + d, Load(b.f, i * 3 + d) + sums[d]) for d in range(3)]
    atoms = For(i, b.atoms, block(*stmts), atom_loop_kind(b.atoms, b.threads))
    if not energy:
        return Kernel("lj_force_full", (b.x, b.neighbors, b.neighbor_count, b.f), atoms,
                      "Lennard-Jones forces over a full list: each atom's row summed into f[i] alone")
    energy_var, virial_var = Var("energy", F64), Var("virial", F64)
    body = block(Let(energy_var, f64(0.0)), Let(virial_var, f64(0.0)), atoms,
                 Store(b.energy_virial, i64(0), f64(0.5) * energy_var),  # each pair was met from both ends
                 Store(b.energy_virial, i64(1), f64(0.5) * virial_var))
    return Kernel("lj_force_full", (b.x, b.neighbors, b.neighbor_count, b.f, b.energy_virial), body,
                  "Lennard-Jones energy, virial and forces over a full list: each atom's row summed into f[i] "
                  "alone, the energy and virial halved (each pair met twice)")
