"""The compiled programs of one rank of a decomposed run: its neighbour build (a full list, or with
`full_list=False` a half one) and the atom programs.

The atom count of a Setup is here the capacity of the rank's arrays (own
atoms, ghosts, unused rows), so the same libraries serve every
re-neighbouring; they are built again only when the atoms and ghosts outgrow
the capacity or a neighbour row its room.
"""
from __future__ import annotations

from typing import Optional

from tensorkiln.driver.build import build
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.program import Program
from tensorkiln.md import domain_neighbor_kernels as shell
from tensorkiln.md.full_neighbor_kernels import pad_rows
from tensorkiln.md.programs import CompiledPrograms, Setup, atom_programs
from tensorkiln.md.timing import ProgramClock


class RankPrograms(CompiledPrograms):
    """Programs for a Setup (atoms = capacity) and the cell grid around the rank's sub-box."""

    def __init__(self, setup: Setup, grid: shell.ShellGrid, clock: Optional[ProgramClock] = None):
        self.setup, self.grid = setup, grid
        b = shell.ShellBuffers(setup.atoms, grid, setup.max_neighbors, setup.threads)
        sort = (shell.bin_all_atoms(b), shell.sort_by_cell(b))
        if setup.full_list:  # no half stencil: every cell around i, and the rows padded for the force kernel
            kernels = sort + (shell.build_full_neighbors(b, setup.neighbor_cutoff),
                              pad_rows(b.neighbors, b.neighbor_count, b.most_neighbors, b.kind))
            stencils: tuple[Buffer, ...] = (b.full_stencil,)
        else:
            kernels = sort + (shell.build_neighbors(b, setup.neighbor_cutoff),)
            stencils = (b.half_stencil, b.full_stencil)
        neighbor = Program("md_rank_neighbor", kernels, (b.x, b.counts, *stencils),
                           b.sort_outputs() + (b.neighbors, b.neighbor_count, b.most_neighbors))
        self.programs: dict[str, Program] = {"neighbor": neighbor, **atom_programs(setup)}
        super().__init__({name: build(p, debug=setup.debug) for name, p in self.programs.items()}, clock)
