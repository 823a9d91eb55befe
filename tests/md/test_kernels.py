"""The compiled neighbour list and forces against brute force over all pairs (md_reference.py)."""
from __future__ import annotations

import numpy as np
import pytest

from md_reference import lj_brute_force, pair_table
from md_systems import random_system
from tensorkiln.md.lattice import Box, MDInputError
from tensorkiln.md.neighbor_kernels import CellGrid
from tensorkiln.md.pair_lj import LJCut
from tensorkiln.md.simulation import NeighborSettings, Simulation
from tensorkiln.md.system import System


# box shapes: many cells, exactly 2 cutoffs wide (1-2 cells per axis), and odd sizes
CASES = [
    (97, (9.3, 8.1, 7.7), 2.5, 0.3, 3),
    (41, (5.6, 5.61, 7.9), 2.5, 0.3, 1),
    (60, (6.3, 12.0, 5.2), 2.0, 0.6, 2),
    (1, (6.0, 6.0, 6.0), 2.5, 0.3, 2),
]


@pytest.mark.parametrize("full_list", [True, False], ids=["full", "half"])
@pytest.mark.parametrize("atoms, lengths, cutoff, skin, threads", CASES)
def test_neighbor_list_and_forces_match_brute_force(rng, atoms, lengths, cutoff, skin, threads, full_list):
    system = random_system(rng, atoms, lengths)
    pair = LJCut(1.3, 0.9, cutoff)
    sim = Simulation(system, pair, NeighborSettings(skin=skin), threads=threads, full_list=full_list)
    sim.build_neighbor_list()
    assert sim.neighbor_pairs() == pair_table(system.positions, system.box.lengths, cutoff + skin)
    # each pair stored once in a half list, from both ends in a full one
    assert int(sim.neighbor_counts().sum()) == len(sim.neighbor_pairs()) * (2 if full_list else 1)

    sim.compute_forces(energy=True)
    forces, energy, virial = lj_brute_force(system.positions, system.box.lengths, 1.3, 0.9, cutoff)
    scale = max(1.0, np.abs(forces).max())
    np.testing.assert_allclose(sim.forces(), forces, rtol=1e-10, atol=1e-10 * scale)
    assert sim.energy_virial[0] == pytest.approx(energy, rel=1e-10, abs=1e-10)
    assert sim.energy_virial[1] == pytest.approx(virial, rel=1e-10, abs=1e-10)
    # Newton's third law: the forces add up to zero
    np.testing.assert_allclose(sim.forces().sum(axis=0), 0.0, atol=1e-9 * scale)


def test_list_capacity_grows_when_a_row_overflows(rng):
    system = random_system(rng, 120, (8.0, 8.0, 8.0), min_distance=0.5)
    sim = Simulation(system, LJCut(cutoff=2.5), NeighborSettings(skin=0.3), threads=1)
    sim._compile(2)  # far too small: every row overflows
    sim.build_neighbor_list()
    assert sim.setup.max_neighbors >= int(sim.neighbor_counts().max())
    assert sim.neighbor_pairs() == pair_table(system.positions, system.box.lengths, 2.8)


def test_stencil_has_each_cell_pair_once():
    box = Box((0.0, 0.0, 0.0), (10.0, 5.6, 7.0))
    for per_cutoff in (1, 2, 3):
        grid = CellGrid.for_cutoff(box, 2.8, per_cutoff)
        counts = np.array(grid.counts)
        seen = set()
        for *offset, self_mirror in grid.stencil.tolist():
            residue = tuple(np.mod(offset, counts))
            mirror = tuple(np.mod(-np.array(offset), counts))
            assert residue not in seen and mirror not in seen or residue == mirror
            assert bool(self_mirror) == (residue == mirror)
            seen.add(residue)


def test_box_smaller_than_two_cutoffs_is_refused():
    system = System(Box((0.0, 0.0, 0.0), (5.0, 9.0, 9.0)), np.zeros((1, 3)))
    with pytest.raises(MDInputError, match="at least twice the neighbour cutoff"):
        Simulation(system, LJCut(cutoff=2.5), NeighborSettings(skin=0.3), threads=1)


def test_cases_cover_both_image_rules():
    # CASES[0]'s grid reaches every neighbouring cell by one stencil offset (images from the offsets);
    # CASES[1]'s has 2-3 cells per axis, so it finds images by the minimum-image rule
    modes = [CellGrid.for_cutoff(Box((0.0,) * 3, lengths), cutoff + skin).needs_minimum_image
             for _, lengths, cutoff, skin, _ in CASES[:2]]
    assert modes == [False, True]


@pytest.mark.parametrize("full_list", [True, False], ids=["full", "half"])
def test_bounds_checked_build_gives_the_same_run(rng, full_list):
    # every load and store the compiler cannot prove in range is checked: a stray index would raise
    system = random_system(rng, 70, (6.1, 7.3, 9.0))
    system.velocities = rng.normal(size=(70, 3))
    runs = [Simulation(System(system.box, system.positions, 1.0, system.velocities), LJCut(cutoff=2.5),
                       NeighborSettings(skin=0.3, every=1), threads=2, debug=debug, full_list=full_list)
            for debug in (False, True)]
    rows = [sim.run(10).rows[-1] for sim in runs]
    assert rows[1].tot_eng == pytest.approx(rows[0].tot_eng, rel=1e-12)


def test_a_row_that_fills_its_capacity_exactly_is_built_again(rng):
    # the build writes every candidate at the next free slot before deciding to keep it, so a row at exactly
    # the capacity would lose its last entry to a later candidate: the list needs one spare slot per row
    system = random_system(rng, 150, (8.3, 8.0, 8.6), min_distance=0.5)
    sim = Simulation(system, LJCut(cutoff=2.5), NeighborSettings(skin=0.3), threads=1)
    sim.build_neighbor_list()
    fullest = int(sim.neighbor_counts().max())
    sim._compile(fullest)
    sim.build_neighbor_list()
    assert sim.setup.max_neighbors > fullest
    assert sim.neighbor_pairs() == pair_table(system.positions, system.box.lengths, 2.8)
