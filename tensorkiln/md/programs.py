"""The compiled programs of one MD setup: each a loop-IR Program built into one shared library.

A setup (atom count, box, pair style, neighbour cutoff, list capacity,
threads, time step, mass) fixes every size and constant the kernels bake in,
so each program is compiled once per setup; the compile cache makes a repeated
setup a lookup. The state arrays (x, v, f, the neighbour list) live in numpy
and are passed to the programs by pointer on every call.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from tensorkiln.driver.build import build
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.program import Program
from tensorkiln.md import force_kernels as forces
from tensorkiln.md import full_force_kernels as full_forces
from tensorkiln.md import full_neighbor_kernels as full_neighbors
from tensorkiln.md import integrate_kernels as integrate
from tensorkiln.md import neighbor_kernels as neighbors
from tensorkiln.md import thread_split
from tensorkiln.md.lattice import Box
from tensorkiln.md.pair_lj import LJCut
from tensorkiln.md.timing import ProgramClock
from tensorkiln.runtime.module import CompiledModule


@dataclass(frozen=True)
class Setup:
    """Everything the generated code depends on."""

    atoms: int
    box: Box
    pair: LJCut
    skin: float
    max_neighbors: int
    threads: int
    dt: float
    mass: float
    cells_per_cutoff: int = 2
    debug: bool = False  # compile with bounds checks on every load and store not proven in range
    full_list: bool = False  # a full neighbour list (each pair in both rows) and its force kernel

    @property
    def neighbor_cutoff(self) -> float:
        return self.pair.cutoff + self.skin


def _program(name: str, kernels, inputs: tuple[Buffer, ...], outputs: tuple[Buffer, ...]) -> Program:
    return Program(name, tuple(kernels), inputs, outputs)


def _force_program(s: Setup, fb: forces.ForceBuffers, energy: bool) -> Program:
    """The forces added to f: over a full list, or a half list on one thread or several over per-thread
    copies of the forces."""
    extra = (fb.energy_virial,) if energy else ()
    name = "md_force_energy" if energy else "md_force"
    if s.full_list:
        return _program(name, [full_forces.lj_force_full(fb, s.pair, s.box, energy)],
                        (fb.x, fb.neighbors, fb.neighbor_count), (fb.f, *extra))
    kernel = forces.lj_force(fb, s.pair, s.box, energy)
    if s.threads == 1:
        return _program(name, [kernel], (fb.x, fb.neighbors, fb.neighbor_count), (fb.f, *extra))
    return _program(name, [kernel, forces.sum_force_copies(fb)], (fb.x, fb.neighbors, fb.neighbor_count),
                    (fb.force_copies, fb.f, *extra))


def _coloured_force_program(s: Setup, fb: forces.ForceBuffers, energy: bool) -> Program:
    """The forces added to f by several threads over chunks of equal pairs in two colours."""
    extra = (fb.energy_virial,) if energy else ()
    return _program("md_force_energy_coloured" if energy else "md_force_coloured",
                    [forces.lj_force_coloured(fb, s.pair, s.box, energy)],
                    (fb.x, fb.neighbors, fb.neighbor_count, fb.chunk_start), (fb.f, *extra))


def atom_programs(s: Setup) -> dict[str, Program]:
    """The programs that run over every row of the atom arrays whatever their neighbour list came from:
    forces, integration, the kinetic sum and the displacement check."""
    fb = forces.ForceBuffers(s.atoms, s.max_neighbors, s.threads)
    x_hold = Buffer("x_hold", "float64", (s.atoms, 3))
    return {
        "force": _force_program(s, fb, energy=False),
        "force_energy": _force_program(s, fb, energy=True),
        "initial_integrate": _program("md_initial_integrate", [integrate.initial_integrate(s.atoms, s.dt, s.mass, s.threads)],
                                      (), (fb.f, fb.x, Buffer("v", "float64", (s.atoms, 3)))),
        "final_integrate": _program("md_final_integrate", [integrate.final_integrate(s.atoms, s.dt, s.mass, s.threads)],
                                    (fb.f,), (Buffer("v", "float64", (s.atoms, 3)),
                                              Buffer("kinetic", "float64", (1,)))),
        "final_then_initial": _program(
            "md_final_then_initial", [integrate.final_then_initial(s.atoms, s.dt, s.mass, s.threads)], (),
            (fb.f, fb.x, Buffer("v", "float64", (s.atoms, 3)), Buffer("kinetic", "float64", (1,)))),
        "kinetic": _program("md_kinetic", [integrate.kinetic_sum(s.atoms, s.mass, s.threads)],
                            (Buffer("v", "float64", (s.atoms, 3)),), (Buffer("kinetic", "float64", (1,)),)),
        "displacement": _program("md_displacement", [integrate.largest_displacement(s.atoms, s.threads)],
                                 (fb.x, x_hold), (Buffer("moved", "float64", (1,)),)),
    }


class CompiledPrograms:
    """Compiled modules by name, called with numpy arrays (inputs, then outputs); `clock` keeps the wall time
    of each program's calls.

    A step calls the same programs with the same arrays again and again, so a call whose arrays are the
    very objects of the program's last checked call skips the argument checks (an array object keeps its
    dtype, shape and memory): the per-step Python work stays a few identity comparisons per call.
    """

    coloured = False  # whether "force_coloured" and "split" exist (thread_split.py)

    def __init__(self, modules: dict[str, CompiledModule], clock: Optional[ProgramClock] = None):
        self.modules = modules
        self.clock = clock if clock is not None else ProgramClock()
        self._checked: dict[str, tuple[np.ndarray, ...]] = {}

    def source(self, name: str) -> str:
        """The generated C of program `name`."""
        return self.modules[name].source.text

    def __call__(self, name: str, *arrays: np.ndarray) -> None:
        start = time.perf_counter()
        module = self.modules[name]
        last = self._checked.get(name)
        if last is not None and len(last) == len(arrays) and all(a is b for a, b in zip(arrays, last)):
            with module.lock:
                module.call_checked(arrays)
        else:
            module(*arrays)
            self._checked[name] = arrays
        self.clock.add(name, time.perf_counter() - start)


class Programs(CompiledPrograms):
    """The compiled programs of a Setup, each called with numpy arrays (inputs, then outputs)."""

    def __init__(self, setup: Setup, clock: Optional[ProgramClock] = None):
        self.setup = setup
        s = setup
        self.grid = neighbors.CellGrid.for_cutoff(s.box, s.neighbor_cutoff, s.cells_per_cutoff)
        nb = neighbors.NeighborBuffers(s.atoms, self.grid, s.max_neighbors, s.threads)
        # the neighbour build's stencil argument: cells for a half list, rows of cells for a full one
        self.stencil = np.ascontiguousarray(
            full_neighbors.row_stencil(self.grid, s.neighbor_cutoff) if s.full_list else self.grid.stencil)
        build_list = ([full_neighbors.build_full_neighbors(nb, s.neighbor_cutoff), full_neighbors.pad_full_rows(nb)]
                      if s.full_list else [neighbors.build_neighbors(nb, s.neighbor_cutoff)])
        self.programs: dict[str, Program] = {
            "sort": _program(
                "md_sort_atoms",
                [neighbors.wrap_positions(nb), neighbors.bin_atoms(nb), neighbors.sort_by_cell(nb),
                 neighbors.permute_atoms(nb)],
                (nb.per_atom("v"), nb.per_atom("f"), nb.per_atom("ids", "int32", 0)),
                (nb.x, nb.cell, nb.cell_start, nb.cell_fill, nb.cell_atoms, nb.per_atom("x_sorted"),
                 nb.per_atom("v_sorted"), nb.per_atom("f_sorted"), nb.per_atom("ids_sorted", "int32", 0),
                 nb.per_atom("cell_sorted", "int32", 0), nb.x_hold)),
            "neighbor": _program(
                "md_neighbor", build_list,
                (nb.x, nb.cell, nb.cell_start, Buffer("stencil", "int32", self.stencil.shape)),
                (nb.neighbors, nb.neighbor_count, nb.most_neighbors)),
            **atom_programs(s),
        }
        reach = self.grid.plane_reach
        # several threads add into one force array where the grid lets chunks of atoms be kept apart (a full
        # list's force kernel writes f[i] alone: its threads need no split)
        self.coloured = s.threads > 1 and reach is not None and not s.full_list
        if self.coloured:
            split = thread_split.SplitBuffers(s.atoms, s.threads)
            nx, ny, nz = self.grid.counts
            fb = forces.ForceBuffers(s.atoms, s.max_neighbors, s.threads)
            self.programs["split"] = _program(
                "md_split_for_threads", [thread_split.split_for_threads(split, nx * ny, nz, reach)],
                (split.neighbor_count, split.cell), (split.chunk_start, split.coloured))
            self.programs["force_coloured"] = _coloured_force_program(s, fb, energy=False)
            self.programs["force_energy_coloured"] = _coloured_force_program(s, fb, energy=True)
        super().__init__({name: build(p, debug=s.debug) for name, p in self.programs.items()}, clock)
