"""The half-list force kernel's split among threads: chunks of equal pairs in two colours, never two threads on
one atom (a full list's force kernel writes only its own atoms and needs no split)."""
from __future__ import annotations

import numpy as np
import pytest

from md_reference import lj_brute_force
from md_systems import lattice_block
from tensorkiln.md.lattice import Box
from tensorkiln.md.neighbor_kernels import CellGrid
from tensorkiln.md.pair_lj import LJCut
from tensorkiln.md.simulation import NeighborSettings, Simulation
from tensorkiln.md.system import System


def _liquid(rng, cells=(5, 6, 15), jitter=0.15) -> System:
    """An fcc block (odd sizes, tall in z: enough z-planes for the threads) shaken off its lattice."""
    system = lattice_block("fcc", 0.8442, cells)
    x = system.positions + rng.uniform(-jitter, jitter, size=system.positions.shape)
    return System(system.box, x, 1.0, rng.normal(scale=0.5, size=x.shape))


def _written_atoms(sim: Simulation, first: int, end: int) -> set[int]:
    """The atoms a chunk's rows write to: the rows themselves and every j they list."""
    capacity = sim.neighbors.shape[1]
    written = set(range(first, end))
    for i in range(first, end):
        plain, image = sim.neighbor_count[i]
        written.update(sim.neighbors[i, :plain].tolist())
        written.update(sim.neighbors[i, capacity - image:].tolist())
    return written


@pytest.mark.parametrize("threads", [2, 3])
def test_chunks_of_one_colour_write_disjoint_atoms_and_hold_equal_pairs(rng, threads):
    sim = Simulation(_liquid(rng), LJCut(cutoff=2.5), NeighborSettings(skin=0.3), threads=threads, full_list=False)
    sim.build_neighbor_list()
    assert sim.programs.coloured and sim.coloured[0] == 1
    starts = sim.chunk_start.tolist()
    assert starts[0] == 0 and starts[-1] == sim.system.atoms and starts == sorted(starts)
    rows = sim.neighbor_count.sum(axis=1)
    pairs = [int(rows[a:b].sum()) for a, b in zip(starts, starts[1:])]
    assert max(pairs) - min(pairs) <= 2 * int(rows.max())  # equal work, to a row or so at each cut
    for colour in (0, 1):
        chunks = range(colour, 2 * threads, 2)
        written = [_written_atoms(sim, starts[c], starts[c + 1]) for c in chunks]
        for a in range(len(written)):
            for b in range(a + 1, len(written)):
                assert not written[a] & written[b]


@pytest.mark.parametrize("threads", [3])
def test_coloured_forces_match_brute_force_and_one_thread(rng, threads):
    system = _liquid(rng)
    pair = LJCut(1.0, 1.0, 2.5)
    sim = Simulation(system, pair, NeighborSettings(skin=0.3), threads=threads, full_list=False)
    sim.build_neighbor_list()
    sim.compute_forces(energy=True)
    assert sim.coloured[0] == 1
    forces, energy, virial = lj_brute_force(system.positions, system.box.lengths, 1.0, 1.0, 2.5)
    scale = np.abs(forces).max()
    np.testing.assert_allclose(sim.forces(), forces, rtol=1e-10, atol=1e-10 * scale)
    assert sim.energy_virial[0] == pytest.approx(energy, rel=1e-10)
    assert sim.energy_virial[1] == pytest.approx(virial, rel=1e-10)
    # whole runs: the same table on one thread and several, up to the order of the sums
    runs = [Simulation(System(system.box, system.positions, 1.0, system.velocities), pair,
                       NeighborSettings(skin=0.3, every=1, check=True), threads=t, full_list=False)
            .run(20, thermo_every=10)
            for t in (1, threads)]
    for one, several in zip(*(r.rows for r in runs)):
        assert several.tot_eng == pytest.approx(one.tot_eng, rel=1e-12)
        assert several.press == pytest.approx(one.press, rel=1e-10)


def test_too_few_planes_fall_back_to_force_copies(rng):
    # 4 chunks over 9 z-planes cannot keep two planes between chunks of one colour
    sim = Simulation(_liquid(rng, cells=(8, 8, 5)), LJCut(cutoff=2.5), NeighborSettings(skin=0.3), threads=2,
                     full_list=False)
    sim.build_neighbor_list()
    assert sim.coloured[0] == 0
    sim.compute_forces(energy=False)
    assert sim.clock.calls.get("force") == 1 and "force_coloured" not in sim.clock.calls
    np.testing.assert_allclose(sim.forces().sum(axis=0), 0.0, atol=1e-9 * np.abs(sim.f).max())


@pytest.mark.parametrize("lengths", [(9.3, 8.1, 7.7), (30.0, 20.0, 11.3), (6.0, 6.0, 26.0)])
def test_stencil_points_up_in_z_where_the_grid_allows(lengths):
    grid = CellGrid.for_cutoff(Box((0.0, 0.0, 0.0), lengths), 2.8)
    if grid.plane_reach is not None:
        assert grid.stencil[:, 2].min() >= 0 and grid.plane_reach == grid.stencil[:, 2].max()
