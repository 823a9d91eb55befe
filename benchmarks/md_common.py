"""What the MD benchmarks (md_lj.py, md_mpi.py) share: the in.lj input, MPICH's launcher, and the figures a
tensorkiln worker prints."""
from __future__ import annotations

import os
import shutil
import sys

IN_LJ = """units lj
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
neigh_modify delay 0 every 20 check no
fix 1 all nve
thermo 100
run 100
"""
# per pair: 3 for the distance vector, 5 for r^2, 1 division, 2 for r6inv, 3 for fpair, 3 products and
# 6 additions for the forces on i and j (the minimum-image correction of boundary pairs not counted)
FLOPS_PER_PAIR = 23


def in_lj(cells) -> str:
    """in.lj over a block of cells[0] x cells[1] x cells[2] fcc unit cells."""
    return IN_LJ.format(nx=cells[0], ny=cells[1], nz=cells[2])


def mpiexec() -> str | None:
    """MPICH's launcher: on PATH, or next to this Python (the `mpich` wheel installs it there)."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return shutil.which("mpiexec") or (beside if os.access(beside, os.X_OK) else None)


def run_figures(sim, run, pairs: int | None = None) -> dict:
    """The figures a tensorkiln worker prints for one run: loop time, TotEng at the first and last rows, atoms
    and the distinct pairs of the neighbour list (`pairs`, when the caller summed them over ranks)."""
    return {"loop_seconds": run.loop_seconds, "e0": run.rows[0].tot_eng, "e1": run.rows[-1].tot_eng,
            "atoms": sim.system.atoms, "pairs": sim.pair_count() if pairs is None else pairs}
