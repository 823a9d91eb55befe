"""A decomposed run's machinery in one process: every ghost is a periodic image, every swap a copy.

The neighbour list over own atoms and ghosts must hold each pair within the
neighbour cutoff exactly once, the forces (with the ghosts' forces sent back)
must equal an all-pairs numpy computation, and a run must print the thermo
table of the one-process Simulation. Several ranks: test_md_ranks.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from md_reference import lj_brute_force, pair_table
from md_systems import melt
from tensorkiln.md.decomposed import DecomposedSimulation
from tensorkiln.md.lattice import Box
from tensorkiln.md.pair_lj import LJCut
from tensorkiln.md.simulation import NeighborSettings, Simulation
from tensorkiln.md.system import System

pytestmark = pytest.mark.filterwarnings("ignore::tensorkiln.md.simulation.DangerousBuildWarning")


@pytest.mark.parametrize("style, density, cells, cutoff, skin, threads", [
    ("fcc", 0.8442, (5, 5, 5), 2.5, 0.3, 1),
    ("bcc", 0.7, (7, 5, 6), 2.2, 0.4, 2),       # odd, unequal sides; per-thread force copies
    ("sc", 1.05, (6, 9, 7), 1.8, 0.2, 1),
])
@pytest.mark.parametrize("full_list", [True, False], ids=["full", "half"])
def test_pairs_once_and_forces_match_all_pairs(style, density, cells, cutoff, skin, threads, full_list):
    system = melt(style, density, cells)
    rng = np.random.default_rng(7)
    system.positions += rng.uniform(-0.1, 0.1, system.positions.shape)  # off the lattice: no coordinate ties
    sim = DecomposedSimulation(system, LJCut(cutoff=cutoff), NeighborSettings(skin=skin), threads=threads,
                               full_list=full_list)
    sim.build_neighbor_list()
    sim.compute_forces(energy=True)
    lengths = system.box.lengths
    x = sim.domain.wrap(system.positions)
    want = pair_table(x, lengths, cutoff + skin)
    assert sim.neighbor_pairs() == want
    # a half list: no pair twice; a full list: every pair from both atoms (own or ghost image)
    assert int(sim.neighbor_counts().sum()) == len(want) * (2 if full_list else 1)
    assert sim.rows_used > sim.own == system.atoms  # ghosts: the periodic images
    forces, energy, virial = lj_brute_force(x, lengths, 1.0, 1.0, cutoff)
    np.testing.assert_allclose(sim.forces(), forces, rtol=1e-10, atol=1e-10 * np.abs(forces).max())
    assert sim.energy_virial[0] == pytest.approx(energy, rel=1e-11)
    assert sim.energy_virial[1] == pytest.approx(virial, rel=1e-11)
    assert np.all(sim.f[sim.own:] == 0.0)  # ghosts' forces went back to their owners, or were never made


@pytest.mark.parametrize("check, full_list", [(False, True), (True, True), (False, False)])
def test_run_prints_the_one_process_table(check, full_list):
    settings = NeighborSettings(skin=0.3, every=5 if check else 10, check=check)
    one = Simulation(melt(cells=(6, 5, 7)), LJCut(), settings, threads=1)
    decomposed = DecomposedSimulation(melt(cells=(6, 5, 7)), LJCut(), settings, threads=1, full_list=full_list)
    lines_one, lines_decomposed = [], []
    a = one.run(60, thermo_every=20, out=lines_one.append)
    b = decomposed.run(60, thermo_every=20, out=lines_decomposed.append)
    assert a.builds == b.builds and len(a.rows) == len(b.rows) == 4
    for row_a, row_b in zip(a.rows, b.rows):
        tolerance = 1e-12 if row_a.step == 0 else 1e-9
        for name in ("temp", "e_pair", "tot_eng", "press"):
            assert getattr(row_b, name) == pytest.approx(getattr(row_a, name), rel=tolerance), (row_a.step, name)
    assert lines_decomposed[-1].startswith("Loop time of ") and " on 1 procs for 60 steps with 840 atoms" in \
        lines_decomposed[-1]
    moved = decomposed.positions() - one.positions()
    lengths = one.system.box.lengths
    np.testing.assert_allclose(moved - lengths * np.round(moved / lengths), 0.0, atol=1e-9)


def test_one_atom_sees_only_its_images_beyond_the_cutoff():
    box = Box((0.0, 0.0, 0.0), (6.0, 6.5, 7.0))
    system = System(box, np.array([[1.0, 2.0, 3.0]]))
    sim = DecomposedSimulation(system, LJCut(cutoff=2.5), NeighborSettings(skin=0.3))
    sim.build_neighbor_list()
    sim.compute_forces(energy=True)
    assert sim.neighbor_pairs() == set() and np.all(sim.forces() == 0.0)
    assert sim.energy_virial.tolist() == [0.0, 0.0]
