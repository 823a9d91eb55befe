"""What the MD benchmarks (md_lj.py, md_mpi.py) share: whether LAMMPS loads, MPICH's launcher and the
figures a tensorkiln worker prints (their input, in.lj, is tensorkiln.md.in_lj)."""
from __future__ import annotations

import os
import shutil
import sys

# per pair: 3 for the distance vector, 5 for r^2, 1 division, 2 for r6inv, 3 for fpair, 3 products and
# 6 additions for the forces on i and j (the minimum-image correction of boundary pairs not counted)
FLOPS_PER_PAIR = 23


def lammps_available() -> bool:
    """Whether LAMMPS's library loads (the peer); where not, says why and that tensorkiln runs alone."""
    from tensorkiln.tools.lammps_reference import LammpsUnavailable, load_lammps
    try:
        load_lammps()
        return True
    except LammpsUnavailable as error:
        print(f"LAMMPS not available ({error}): tensorkiln only")
        return False


def mpiexec() -> str | None:
    """MPICH's launcher: on PATH, or next to this Python (the `mpich` wheel installs it there)."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return shutil.which("mpiexec") or (beside if os.access(beside, os.X_OK) else None)


def run_figures(sim, run, pairs: int | None = None) -> dict:
    """The figures a tensorkiln worker prints for one run: loop time, TotEng at the first and last rows, atoms
    and the distinct pairs of the neighbour list (`pairs`, when the caller summed them over ranks)."""
    return {"loop_seconds": run.loop_seconds, "e0": run.rows[0].tot_eng, "e1": run.rows[-1].tot_eng,
            "atoms": sim.system.atoms, "pairs": sim.pair_count() if pairs is None else pairs}
