"""LAMMPS's Lennard-Jones melt benchmark, in.lj, as an input script of a chosen size.

One text for the tests, the benchmarks and the commands the docs name, so they all run the input
LAMMPS's bench/in.lj runs: fcc lattice at reduced density 0.8442, velocities for T = 1.44 (seed
87287, `loop geom`), lj/cut with cutoff 2.5, a 0.3 skin, lists rebuilt every `every` steps unchecked.
"""
from __future__ import annotations

from typing import Sequence


def in_lj(cells: Sequence[int | str] = (20, 20, 20), every: int = 20, thermo: int = 100, run: int = 100) -> str:
    """in.lj over a block of cells[0] x cells[1] x cells[2] fcc unit cells (each a number or a LAMMPS
    variable reference such as "${xx}"), `neigh_modify every`, `thermo` and `run` as given."""
    nx, ny, nz = cells
    return f"""units lj
atom_style atomic
lattice fcc 0.8442
region box block 0 {nx} 0 {ny} 0 {nz}
create_box 1 box
create_atoms 1 box
mass 1 1.0
velocity all create 1.44 87287 loop geom
pair_style lj/cut 2.5
pair_coeff 1 1 1.0 1.0 2.5
neighbor 0.3 bin
neigh_modify delay 0 every {every} check no
fix 1 all nve
thermo {thermo}
run {run}
"""
