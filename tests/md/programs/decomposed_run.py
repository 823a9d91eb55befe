"""Run on 2+ ranks: a decomposed run against all-pairs numpy and against one process.

Every rank builds the whole system from the same seed, keeps its sub-box's
atoms, and checks: the ranks' neighbour lists together hold each pair within
the neighbour cutoff exactly once (a half list) or from both of its atoms (a
full list); the forces (ghost forces sent back), energy
and virial equal an all-pairs computation; after a run with migrations the
thermo rows and positions equal a one-process Simulation's. Prints
'OK decomposed_run rank r'; any failure aborts every rank.
"""
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/md: the numpy references
from md_reference import lj_brute_force, pair_table  # noqa: E402
from md_systems import lattice_block  # noqa: E402
from tensorkiln.md.decomposed import DecomposedSimulation  # noqa: E402
from tensorkiln.md.pair_lj import LJCut  # noqa: E402
from tensorkiln.md.simulation import DangerousBuildWarning, NeighborSettings, Simulation  # noqa: E402
from tensorkiln.md.system import System  # noqa: E402
from tensorkiln.runtime import communicator  # noqa: E402

warnings.simplefilter("ignore", DangerousBuildWarning)
communicator.init()
RANK, SIZE = communicator.rank(), communicator.world_size()
COMM = communicator.world().comm
CELLS = tuple(int(c) for c in sys.argv[1:4])
CHECK = sys.argv[4] == "check"  # `check yes` every step: the displacement is reduced over the ranks
FULL_LIST = sys.argv[5] == "full"  # a full list (no ghost forces sent back) or a half one


def system() -> System:
    s = lattice_block("fcc", 0.8442, CELLS)
    s.positions += np.random.default_rng(11).uniform(-0.1, 0.1, s.positions.shape)
    s.create_velocities(1.44, 87287)
    return s


settings = NeighborSettings(skin=0.3, every=1 if CHECK else 5, check=CHECK)
sim = DecomposedSimulation(system(), LJCut(), settings, threads=1, ranks=SIZE, rank=RANK, full_list=FULL_LIST)
assert sim.domain.ranks == SIZE and sum(COMM.allgather(sim.own)) == sim.system.atoms
sim.build_neighbor_list()
sim.compute_forces(energy=True)
x = sim.domain.wrap(sim.system.positions)
lengths = sim.system.box.lengths
pairs = COMM.allgather(sim.neighbor_pairs())
counts = COMM.allgather(int(sim.neighbor_counts().sum()))
want = pair_table(x, lengths, 2.8)
assert set().union(*pairs) == want, "the ranks' lists miss or add pairs"
listings = 2 if FULL_LIST else 1  # a full list holds each pair from both atoms (own or ghost)
assert sum(counts) == listings * len(want), f"{sum(counts) - listings * len(want)} pairs listed too often"
forces, energy, virial = lj_brute_force(x, lengths, 1.0, 1.0, 2.5)
np.testing.assert_allclose(sim.forces(), forces, rtol=1e-10, atol=1e-10 * np.abs(forces).max())
mvv_energy_virial = communicator.all_reduce(sim.energy_virial.copy())
np.testing.assert_allclose(mvv_energy_virial, [energy, virial], rtol=1e-11)

decomposed = DecomposedSimulation(system(), LJCut(), settings, threads=1, ranks=SIZE, rank=RANK,
                                  full_list=FULL_LIST)
one = Simulation(system(), LJCut(), settings, threads=1)
a, b = one.run(40, thermo_every=10), decomposed.run(40, thermo_every=10)
assert a.builds == b.builds, (a.builds, b.builds)
for row_a, row_b in zip(a.rows, b.rows):
    tolerance = 1e-12 if row_a.step == 0 else 1e-9
    for name in ("temp", "e_pair", "tot_eng", "press"):
        got, expected = getattr(row_b, name), getattr(row_a, name)
        assert abs(got - expected) <= tolerance * abs(expected), (row_a.step, name, got, expected)
moved = decomposed.positions() - one.positions()
np.testing.assert_allclose(moved - lengths * np.round(moved / lengths), 0.0, atol=1e-9)
migrated = COMM.allreduce(int(np.sum(~np.isin(decomposed.ids[:decomposed.own], sim.ids[:sim.own]))))
assert migrated > 0, "no atom changed ranks: the run tested no migration"
print(f"OK decomposed_run rank {RANK} (grid {sim.domain.grid}, {migrated} atoms migrated)", flush=True)
