"""Thermodynamic output as LAMMPS's `thermo_style one` prints it (LJ units, normalized per atom)."""
from __future__ import annotations

from dataclasses import dataclass

COLUMNS = ("Step", "Temp", "E_pair", "E_mol", "TotEng", "Press")


@dataclass(frozen=True)
class ThermoRow:
    """One line of the thermo table: intensive values, energies per atom (thermo_modify norm yes)."""

    step: int
    temp: float
    e_pair: float
    e_mol: float
    tot_eng: float
    press: float

    @classmethod
    def from_sums(cls, step: int, atoms: int, dof: int, volume: float, mvv: float, energy: float,
                  virial: float) -> "ThermoRow":
        """From sum(m v^2), the pair energy and sum(r^2 fpair) over pairs."""
        temp = mvv / dof if dof > 0 else 0.0
        kinetic = 0.5 * dof * temp
        press = (dof * temp + virial) / 3.0 / volume
        return cls(step, temp, energy / atoms, 0.0, (energy + kinetic) / atoms, press)

    def format(self) -> str:
        """The row as LAMMPS prints it ("%10d" then " % -14.8g" per value)."""
        values = (self.temp, self.e_pair, self.e_mol, self.tot_eng, self.press)
        return f"{self.step:10d} " + "".join(" " + _g(v) for v in values)


def _g(value: float) -> str:
    return "% -14.8g" % value


def header() -> str:
    """The column header line."""
    return f"{COLUMNS[0]:^11}" + "".join(f" {name:^14}" for name in COLUMNS[1:])


def loop_line(seconds: float, procs: int, steps: int, atoms: int) -> str:
    """LAMMPS's summary line after a run."""
    return f"Loop time of {seconds:.6g} on {procs} procs for {steps} steps with {atoms} atoms"
