"""A molecular-dynamics run: velocity Verlet with a Lennard-Jones pair style and a Verlet neighbour list.

The step follows LAMMPS's Verlet integrator: first half of the integration,
then (when the neighbour settings say so) a periodic wrap and a new neighbour
list, forces (with energy and virial on thermo steps), second half of the
integration, thermo output. Every one of these is a compiled program
(programs.py); Python only decides which to call.

On several MPI ranks, decomposed.py's DecomposedSimulation runs one sub-box
per rank through the same loop: its two hooks, `build_neighbor_list` and
`compute_forces`, migrate atoms, exchange ghosts and send ghost forces back.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from tensorkiln.kernels.schedule_defaults import thread_count
from tensorkiln.md.full_neighbor_kernels import full_capacity
from tensorkiln.md.lattice import MDInputError
from tensorkiln.md.loop_helpers import atom_loop_kind
from tensorkiln.md.pair_lj import LJCut
from tensorkiln.md.neighbor_kernels import has_room, initial_capacity
from tensorkiln.md.programs import Programs, Setup
from tensorkiln.md.system import System
from tensorkiln.md.thermo import ThermoRow, header, loop_line
from tensorkiln.md.timing import SECTIONS, ProgramClock, SectionStats, StepTimer, breakdown_lines, program_lines


class DangerousBuildWarning(UserWarning):
    """Atoms moved more than half the skin between two neighbour-list builds: pairs may have been missed."""


@dataclass(frozen=True)
class NeighborSettings:
    """LAMMPS `neighbor SKIN bin` and `neigh_modify delay D every E check yes|no`."""

    skin: float = 0.3
    delay: int = 0
    every: int = 1
    check: bool = True

    def __post_init__(self) -> None:
        if self.skin < 0 or self.delay < 0 or self.every < 1:
            raise MDInputError(f"neighbour settings need skin >= 0, delay >= 0, every >= 1; got skin={self.skin}, "
                               f"delay={self.delay}, every={self.every}")


@dataclass
class RunResult:
    """What a run printed and measured."""

    rows: list[ThermoRow]
    loop_seconds: float
    steps: int
    builds: int
    dangerous_builds: int
    sections: dict[str, float] = field(default_factory=dict)  # this rank's seconds per LAMMPS timer section
    program_seconds: dict[str, float] = field(default_factory=dict)  # wall time inside each compiled program
    program_calls: dict[str, int] = field(default_factory=dict)


class Simulation:
    """An NVE run of `system` under `pair`, with neighbour lists per `neighbor` and time step `dt`
    (debug=True: kernels compiled with bounds checks; full_list=False: a half list and Newton's third law
    instead of a full list)."""

    procs = 1  # MPI ranks running it (decomposed.py runs one part per rank)
    full_list = False  # each instance sets it: a full neighbour list (the default) or a half one

    def __init__(self, system: System, pair: LJCut, neighbor: NeighborSettings = NeighborSettings(),
                 dt: float = 0.005, threads: Optional[int] = None, debug: bool = False, full_list: bool = True):
        self.system = system
        self.full_list = full_list  # a full neighbour list (each pair in both rows), else a half list
        self.pair = pair
        self.neighbor = neighbor
        self.dt = dt
        self.debug = debug
        n = system.atoms
        # threads: the force kernel's per-thread blocks (and the parallel loops, when each thread has work)
        self.threads = threads or (thread_count() if atom_loop_kind(n, thread_count()) == "parallel" else 1)
        self.step = 0
        self.timer, self.clock = StepTimer(), ProgramClock()
        self.forces_cleared = False
        if n < 1:
            raise MDInputError("the system has no atoms")
        self.x = system.positions.copy()
        self.v = system.velocities.copy()
        self.f = np.zeros((n, 3))
        self.ids = np.arange(n, dtype=np.int32)  # atom i of the arrays is atom ids[i] of the system
        self.spare = {name: np.zeros_like(getattr(self, name)) for name in ("x", "v", "f", "ids")}
        self.x_hold = np.zeros((n, 3))
        self.force_copies = np.zeros((self.threads, n, 3)) if self.threads > 1 and not full_list else None
        self.energy_virial = np.zeros(2)
        self.kinetic = np.zeros(1)
        self.moved = np.zeros(1)
        self.since_build = 0
        self.builds = 0
        self.dangerous_builds = 0
        capacity = full_capacity if full_list else initial_capacity
        self._compile(capacity(n / system.box.volume, pair.cutoff + neighbor.skin))
        grid = self.programs.grid  # the cell arrays depend on the grid only, not on the list's capacity
        self.stencil = self.programs.stencil
        self.cell = np.zeros(n, np.int32)
        self.cell_start = np.zeros(grid.cells + 1, np.int32)
        self.cell_fill = np.zeros(grid.cells, np.int32)
        self.cell_atoms = np.zeros(n, np.int32)
        self.cell_sorted = np.zeros(n, np.int32)

    def _compile(self, max_neighbors: int) -> None:
        """Build the programs for a neighbour-list capacity (again when a row outgrows it)."""
        s = self.system
        self.setup = Setup(s.atoms, s.box, self.pair, self.neighbor.skin, max_neighbors, self.threads, self.dt, s.mass,
                           debug=self.debug, full_list=self.full_list)
        self.programs = Programs(self.setup, self.clock)
        n = s.atoms
        self.neighbors = np.zeros((n, max_neighbors), np.int32)
        self.neighbor_count = np.zeros((n, 2), np.int32)  # per atom: same-image pairs, pairs across the box
        self.most_neighbors = np.zeros(1, np.int32)
        self.chunk_start = np.zeros(2 * self.threads + 1, np.int32)  # the force kernel's split (thread_split.py)
        self.coloured = np.zeros(1, np.int32)

    # ---- the pieces of a step

    def build_neighbor_list(self) -> None:
        """Wrap positions into the box, sort the atoms by cell and build the neighbour list (growing its
        capacity when a row overflows)."""
        spare = self.spare
        self.programs("sort", self.v, self.f, self.ids, self.x, self.cell, self.cell_start, self.cell_fill,
                      self.cell_atoms, spare["x"], spare["v"], spare["f"], spare["ids"], self.cell_sorted, self.x_hold)
        for name in ("x", "v", "f", "ids"):  # the sorted arrays become the state
            current = getattr(self, name)
            setattr(self, name, spare[name])
            spare[name] = current
        while True:
            self.programs("neighbor", self.x, self.cell_sorted, self.cell_start, self.stencil, self.neighbors,
                          self.neighbor_count, self.most_neighbors)
            most = int(self.most_neighbors[0])
            if has_room(most, self.setup.max_neighbors):
                break
            self._compile(int(most * 1.2) + 8)
        if self.programs.coloured:
            self.programs("split", self.neighbor_count, self.cell_sorted, self.chunk_start, self.coloured)
        self.since_build = 0
        self.last_safe_step = self.step  # nothing has moved since the list was built
        self.builds += 1

    def compute_forces(self, energy: bool) -> None:
        """Forces of the current positions (and the pair energy and virial when `energy`)."""
        if not self.forces_cleared:  # the force kernels add into f; in a run the integrator has cleared it
            self.f.fill(0.0)
        name = "force_energy" if energy else "force"
        extra = (self.energy_virial,) if energy else ()
        if self.programs.coloured and self.coloured[0]:
            self.programs(name + "_coloured", self.x, self.neighbors, self.neighbor_count, self.chunk_start,
                          self.f, *extra)
        else:
            copies = (self.force_copies,) if self.force_copies is not None else ()
            self.programs(name, self.x, self.neighbors, self.neighbor_count, *copies, self.f, *extra)
        self.forces_cleared = False

    def initial_integrate(self) -> None:
        """The first half of velocity Verlet (and f cleared for the next force evaluation)."""
        self.programs("initial_integrate", self.f, self.x, self.v)
        self.forces_cleared = True

    def _moved_beyond_half_skin(self) -> bool:
        self.programs("displacement", self.x, self.x_hold, self.moved)
        return float(self.moved[0]) > (0.5 * self.neighbor.skin) ** 2

    def _decide(self) -> bool:
        """LAMMPS's Neighbor::decide: rebuild now? Also counts dangerous builds.

        A build is dangerous when an atom has moved more than half the skin and
        the last time the displacement was seen within half the skin is more
        than one step ago: the crossing happened at some unseen step in between,
        and from then on a pair may have been missing from the list. (A check
        every step sees the first step past half the skin, and rebuilds then.)
        """
        self.since_build += 1
        settings = self.neighbor
        if self.since_build < settings.delay or self.since_build % settings.every:
            return False
        moved_too_far = self._moved_beyond_half_skin()
        if not moved_too_far:
            self.last_safe_step = self.step
        elif self.step - self.last_safe_step > 1:
            self.dangerous_builds += 1
        return moved_too_far or not settings.check

    def neighbor_pairs(self) -> set[tuple[int, int]]:
        """The pairs (i, j), i < j, of the current neighbour list, as the system numbers its atoms."""
        slots = np.arange(self.neighbors.shape[1])[None, :]
        plain, image = self.neighbor_count[:, :1], self.neighbor_count[:, 1:]
        listed = (slots < plain) | (slots >= self.neighbors.shape[1] - image)  # front and back segments
        rows = np.repeat(np.arange(self.system.atoms), listed.sum(axis=1))
        a, b = self.ids[rows], self.ids[self.neighbors[listed]]
        return set(zip(np.minimum(a, b).tolist(), np.maximum(a, b).tolist()))

    def pair_count(self) -> int:
        """Distinct pairs in the current neighbour list (a full list holds each twice)."""
        listed = int(self.neighbor_counts().sum())
        return listed // 2 if self.full_list else listed

    def neighbor_counts(self) -> np.ndarray:
        """Neighbours listed per atom (a full list: all of them; a half list: each pair once, so about half)."""
        return self.neighbor_count.sum(axis=1)

    def positions(self) -> np.ndarray:
        """Positions [n, 3] in the system's atom order (wrapped into the box at the last rebuild)."""
        out = np.empty_like(self.x)
        out[self.ids] = self.x
        return out

    def velocities(self) -> np.ndarray:
        """Velocities [n, 3] in the system's atom order."""
        out = np.empty_like(self.v)
        out[self.ids] = self.v
        return out

    def forces(self) -> np.ndarray:
        """Forces [n, 3] of the last force evaluation, in the system's atom order."""
        out = np.empty_like(self.f)
        out[self.ids] = self.f
        return out

    def thermo(self) -> ThermoRow:
        """Thermo values from the last energy evaluation and the current velocities."""
        s = self.system
        return ThermoRow.from_sums(self.step, s.atoms, s.degrees_of_freedom, s.box.volume, float(self.kinetic[0]),
                                   float(self.energy_virial[0]), float(self.energy_virial[1]))

    # ---- runs

    def setup_run(self) -> ThermoRow:
        """Neighbour list, forces, energies and thermo at the current step (LAMMPS's Verlet::setup)."""
        self.build_neighbor_list()
        self.compute_forces(energy=True)
        self.programs("kinetic", self.v, self.kinetic)
        return self.thermo()

    def section_stats(self) -> list[SectionStats]:
        """The timer sections of the last run over the ranks (one rank here)."""
        return [SectionStats.over_ranks(name, [self.timer.seconds[name]]) for name in SECTIONS]

    def run(self, steps: int, thermo_every: int = 0, out: Optional[Callable[[str], None]] = None,
            timing: bool = False) -> RunResult:
        """Advance `steps` steps; thermo rows at the first step, every `thermo_every` steps and the last step.
        timing=True also prints where the loop's time went (LAMMPS's timing breakdown, then the compiled
        programs' share); RunResult has the figures either way."""
        if steps < 0:
            raise MDInputError(f"run needs a non-negative step count, got {steps}")
        emit = out or (lambda line: None)
        rows = [self.setup_run()]
        emit(header())
        emit(rows[0].format())
        first_builds, first_dangerous = self.builds, self.dangerous_builds
        last = self.step + steps
        timer = self.timer
        self.clock.reset()
        start = time.perf_counter()
        timer.reset()
        if steps:
            self.initial_integrate()
            timer.stamp("Modify")
        for _ in range(steps):
            self.step += 1
            thermo_step = self.step == last or (thermo_every > 0 and self.step % thermo_every == 0)
            if self._decide():
                self.build_neighbor_list()
            timer.stamp("Neigh")
            self.compute_forces(energy=thermo_step)
            timer.stamp("Pair")
            if self.step == last:
                self.programs("final_integrate", self.f, self.v, self.kinetic)
            else:  # this step's second half and the next one's first: the same kicks, one pass
                self.programs("final_then_initial", self.f, self.x, self.v, self.kinetic)
                self.forces_cleared = True
            timer.stamp("Modify")
            if thermo_step:
                rows.append(self.thermo())
                emit(rows[-1].format())
                timer.stamp("Output")
        seconds = time.perf_counter() - start
        emit(loop_line(seconds, self.procs, steps, self.system.atoms))
        stats = self.section_stats()  # collective on several ranks: every rank takes part
        if timing:
            for line in breakdown_lines(stats, seconds):
                emit(line)
            for line in program_lines(self.clock.seconds, self.clock.calls, seconds, steps,
                                      self.timer.seconds["Comm"]):
                emit(line)
        dangerous = self.dangerous_builds - first_dangerous
        if dangerous:
            message = (f"{dangerous} of {self.builds - first_builds} neighbour-list builds came after an atom had "
                       f"moved more than half the skin ({self.neighbor.skin:g}/2) at an unchecked step: pairs may "
                       "have been missed; use a larger skin or check more often (`neigh_modify every 1 check yes`)")
            warnings.warn(message, DangerousBuildWarning, stacklevel=2)
        return RunResult(rows, seconds, steps, self.builds - first_builds, dangerous, dict(self.timer.seconds),
                         dict(self.clock.seconds), dict(self.clock.calls))
