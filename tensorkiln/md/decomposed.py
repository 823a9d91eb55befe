"""One rank of a spatially decomposed run: the atoms of its sub-box, ghosts around it, MPI in between.

`DecomposedSimulation` is a `Simulation` whose two hooks talk to the other
ranks as LAMMPS's Verlet does: a re-neighbouring step wraps the own atoms
into the box, migrates those that left the sub-box (`ghosts.exchange`),
sorts them by cell, gathers the ghosts (`ghosts.borders`) and builds the
list over own atoms and ghosts (domain_neighbor_kernels.py); every other
step sends the ghosts' new positions (`ghosts.forward`). The list is full
(LAMMPS's `newton off` with a full list): each rank computes the forces on
its own atoms alone, a pair across two ranks on both, and no force goes
back. With `full_list=False` it is a half list with Newton's third law, as
LAMMPS by default: each pair is computed by one rank only and the forces it
puts on ghosts go back to their owners (`ghosts.reverse`). The thermo sums (kinetic, energy, virial) and the
displacement check are reduced over the ranks, so every rank decides alike
and the thermo table is the one-process table up to the order of the sums.

The rows of the arrays: own atoms, then ghosts, then unused rows up to the
capacity the programs were compiled for. Ghosts and unused rows have zero
velocity and, outside the force call, zero force, so the integrator and the
reductions run over every row unchanged.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from tensorkiln.kernels.schedule_defaults import thread_count
from tensorkiln.md import ghosts
from tensorkiln.md.domain import Domain
from tensorkiln.md.domain_neighbor_kernels import ShellGrid
from tensorkiln.md.full_neighbor_kernels import full_capacity
from tensorkiln.md.lattice import MDInputError
from tensorkiln.md.loop_helpers import atom_loop_kind
from tensorkiln.md.neighbor_kernels import has_room, initial_capacity
from tensorkiln.md.pair_lj import LJCut
from tensorkiln.md.programs import Setup
from tensorkiln.md.rank_programs import RankPrograms
from tensorkiln.md.simulation import NeighborSettings, Simulation
from tensorkiln.md.system import System
from tensorkiln.md.thermo import ThermoRow
from tensorkiln.md.timing import SECTIONS, ProgramClock, SectionStats, StepTimer
from tensorkiln.runtime import communicator


def _sum_over_ranks(values: np.ndarray, domain: Domain, op: str = "sum") -> np.ndarray:
    return communicator.all_reduce(values, op) if domain.ranks > 1 else values


class DecomposedSimulation(Simulation):
    """This rank's part of an NVE run of `system` (every rank passes the whole system and keeps its
    sub-box's atoms); `ranks` and `rank` as MPI numbers them."""

    def __init__(self, system: System, pair: LJCut, neighbor: NeighborSettings = NeighborSettings(),
                 dt: float = 0.005, threads: Optional[int] = None, debug: bool = False, ranks: int = 1,
                 rank: int = 0, full_list: bool = True):
        self.system, self.pair, self.neighbor, self.dt, self.debug = system, pair, neighbor, dt, debug
        self.full_list = full_list
        if system.atoms < 1:
            raise MDInputError("the system has no atoms")
        self.domain = Domain.for_rank(system.box, ranks, rank)
        self.procs = self.domain.ranks
        self.cutoff = pair.cutoff + neighbor.skin  # ghosts reach as far as the neighbour list
        self.domain.check_ghost_cutoff(self.cutoff)
        self.shell = ShellGrid.around(self.domain.sub_lo, self.domain.sub_hi, system.box.lo, system.box.lengths,
                                      self.cutoff)
        x = self.domain.wrap(system.positions)
        mine = self.domain.owned(x)
        self.own = int(mine.sum())
        self.rows_used = self.own  # own atoms and ghosts: set by each build
        share = system.atoms / self.procs
        self.threads = threads or (thread_count() if atom_loop_kind(int(share), thread_count()) == "parallel" else 1)
        self.step = 0
        self.timer, self.clock = StepTimer(), ProgramClock()
        self.forces_cleared = False
        self.since_build = 0
        self.builds = 0
        self.dangerous_builds = 0
        self.energy_virial = np.zeros(2)
        self.kinetic = np.zeros(1)
        self.moved = np.zeros(1)
        self.counts = np.zeros(2, np.int64)
        self.swaps: list[ghosts.Swap] = []
        self.ghosts_current = False
        shell_volume = np.prod(self.domain.sub_hi - self.domain.sub_lo + 2 * self.cutoff)
        expected = int(system.atoms / system.box.volume * shell_volume)
        room = full_capacity if full_list else initial_capacity
        self._allocate(int(1.2 * expected) + 64, room(system.atoms / system.box.volume, self.cutoff))
        self.x[:self.own] = x[mine]
        self.v[:self.own] = system.velocities[mine]
        self.ids[:self.own] = np.nonzero(mine)[0]

    # ---- the arrays and programs of a capacity

    def _allocate(self, capacity: int, max_neighbors: int) -> None:
        """Compile for `capacity` rows and `max_neighbors` per row; the arrays keep their rows."""
        s = self.system
        self.setup = Setup(capacity, s.box, self.pair, self.neighbor.skin, max_neighbors, self.threads, self.dt,
                           s.mass, debug=self.debug, full_list=self.full_list)
        self.programs = RankPrograms(self.setup, self.shell, self.clock)

        def resized(name: str, shape, dtype=np.float64) -> np.ndarray:
            fresh = np.zeros(shape, dtype)
            old = getattr(self, name, None)
            if old is not None:
                rows = min(len(old), capacity)
                fresh[:rows] = old[:rows]
            return fresh
        self.x, self.v, self.f = (resized(name, (capacity, 3)) for name in ("x", "v", "f"))
        self.x_hold = resized("x_hold", (capacity, 3))
        self.ids = resized("ids", (capacity,), np.int32)
        self.force_copies = np.zeros((self.threads, capacity, 3)) if self.threads > 1 and not self.full_list else None
        grid = self.shell
        self.half_stencil = np.ascontiguousarray(grid.half_stencil)
        self.full_stencil = np.ascontiguousarray(grid.full_stencil)
        self.cell = np.zeros(capacity, np.int32)
        self.cell_lists = [np.zeros(size, np.int32) for size in (grid.cells + 1, grid.cells, capacity) * 2]
        self.neighbors = np.zeros((capacity, max_neighbors), np.int32)
        self.neighbor_count = np.zeros((capacity, 2), np.int32)
        self.most_neighbors = np.zeros(1, np.int32)

    # ---- the two hooks of a step

    def build_neighbor_list(self) -> None:
        """Migrate atoms, gather ghosts, and build the list (LAMMPS: pbc, exchange, borders, neighbor)."""
        own = self.own
        self.timer.stamp("Neigh")  # the rebuild decision
        x = self.domain.wrap(self.x[:own])
        x, v, ids = ghosts.exchange(self.domain, x, self.v[:own].copy(), self.ids[:own].copy())
        self.timer.stamp("Comm")
        order = np.argsort(self.shell.cell_of(x), kind="stable")  # cell order: neighbours close in memory
        x, v, ids = x[order], v[order], ids[order]
        self.timer.stamp("Neigh")
        everything, all_ids, self.swaps = ghosts.borders(self.domain, x, ids, self.cutoff)
        self.timer.stamp("Comm")
        self.own, self.rows_used = len(x), len(everything)
        capacity = self.setup.atoms
        if self.rows_used > capacity:
            self._allocate(int(1.2 * self.rows_used) + 64, self.setup.max_neighbors)
        self.x[:self.rows_used], self.x[self.rows_used:] = everything, 0.0
        self.v[:self.own], self.v[self.own:] = v, 0.0
        self.f[:] = 0.0
        self.ids[:self.rows_used], self.ids[self.rows_used:] = all_ids, -1
        self.x_hold[:] = self.x
        self.counts[:] = (self.own, self.rows_used)
        stencils = (self.full_stencil,) if self.full_list else (self.half_stencil, self.full_stencil)
        while True:
            self.programs("neighbor", self.x, self.counts, *stencils, self.cell,
                          *self.cell_lists, self.neighbors, self.neighbor_count, self.most_neighbors)
            most = int(_sum_over_ranks(self.most_neighbors.astype(np.int64), self.domain, "max")[0])
            if has_room(most, self.setup.max_neighbors):
                break
            self._allocate(self.setup.atoms, int(most * 1.2) + 8)  # every rank grows alike: same programs
        self.since_build = 0
        self.last_safe_step = self.step
        self.builds += 1
        self.ghosts_current = True

    def compute_forces(self, energy: bool) -> None:
        """Ghost positions forward, forces (and energy, virial), ghost forces back to their owners (a half
        list's; a full list puts none on ghosts)."""
        if not self.ghosts_current:
            ghosts.forward(self.domain, self.swaps, self.x)
        self.timer.stamp("Comm")
        super().compute_forces(energy)
        self.timer.stamp("Pair")
        if self.full_list:
            self.ghosts_current = False
            return
        ghosts.reverse(self.domain, self.swaps, self.f)
        self.f[self.own:self.rows_used] = 0.0  # the ghosts' share is now their owners'
        self.ghosts_current = False
        self.timer.stamp("Comm")

    def _moved_beyond_half_skin(self) -> bool:
        self.programs("displacement", self.x, self.x_hold, self.moved)
        moved = float(_sum_over_ranks(self.moved, self.domain, "max")[0])
        return moved > (0.5 * self.neighbor.skin) ** 2

    def section_stats(self) -> list[SectionStats]:
        """The timer sections of the last run: min, average and max over the ranks (a collective)."""
        mine = np.array([self.timer.seconds[name] for name in SECTIONS])
        if self.domain.ranks == 1:
            return [SectionStats.over_ranks(name, [t]) for name, t in zip(SECTIONS, mine)]
        least, most = (communicator.all_reduce(mine, op) for op in ("min", "max"))
        total, squares = (communicator.all_reduce(values) for values in (mine, mine * mine))
        ranks = self.domain.ranks
        return [SectionStats.from_moments(name, lo, t / ranks, t2 / ranks, hi)
                for name, lo, t, t2, hi in zip(SECTIONS, least, total, squares, most)]

    def thermo(self) -> ThermoRow:
        """Thermo values summed over the ranks."""
        s = self.system
        mvv, energy, virial = _sum_over_ranks(np.array([self.kinetic[0], *self.energy_virial]), self.domain)
        return ThermoRow.from_sums(self.step, s.atoms, s.degrees_of_freedom, s.box.volume, float(mvv),
                                   float(energy), float(virial))

    # ---- the whole system, gathered on every rank

    def _gathered(self, rows: np.ndarray) -> np.ndarray:
        out = np.zeros((self.system.atoms, 3))
        out[self.ids[:self.own]] = rows[:self.own]
        return _sum_over_ranks(out, self.domain)  # each atom is some rank's own: a sum of one value and zeros

    def positions(self) -> np.ndarray:
        """Positions [n, 3] of every atom in the system's order (own atoms wrapped at the last rebuild)."""
        return self._gathered(self.x)

    def velocities(self) -> np.ndarray:
        return self._gathered(self.v)

    def forces(self) -> np.ndarray:
        return self._gathered(self.f)

    def neighbor_pairs(self) -> set[tuple[int, int]]:
        """This rank's pairs (i, j), i < j, by the system's atom numbers (ghosts by the atom they copy)."""
        slots = np.arange(self.neighbors.shape[1])[None, :]
        listed = slots < self.neighbor_count[:self.own, :1]
        rows = np.repeat(np.arange(self.own), listed.sum(axis=1))
        a, b = self.ids[rows], self.ids[self.neighbors[:self.own][listed]]
        return set(zip(np.minimum(a, b).tolist(), np.maximum(a, b).tolist()))

    def neighbor_counts(self) -> np.ndarray:
        """Neighbours listed per own atom."""
        return self.neighbor_count[:self.own].sum(axis=1)
