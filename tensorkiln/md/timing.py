"""Where an MD run's time goes: LAMMPS's timer sections, and the compiled programs' share.

A `StepTimer` follows LAMMPS's `Timer::stamp`: the time since the previous
stamp goes to the section named, so the pieces of a step are timed by one
clock read each and nested code (a decomposed run's ghost exchange inside its
force hook) can stamp its own sections. The sections are LAMMPS's: Pair (the
force kernels), Neigh (the rebuild decision, binning, sorting and the list),
Comm (ghost atoms and migration between ranks), Output (thermo rows), Modify
(the integrator); Other is the loop time the sections leave over.

`breakdown_lines` prints them as LAMMPS prints its "MPI task timing
breakdown" after the Loop time line (min, average and max over the ranks,
the % variation from the average as a measure of imbalance, and % of the
loop), and `program_lines` prints the compiled programs' own time: the wall
time inside each program's call, and the Python between the calls.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional, Sequence

SECTIONS = ("Pair", "Neigh", "Comm", "Output", "Modify")


class StepTimer:
    """Seconds per section of the MD loop; `stamp(section)` adds the time since the last stamp to it."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(SECTIONS, 0.0)
        self._last = time.perf_counter()

    def reset(self) -> None:
        """Zero every section and restart the clock (at the start of a run's loop)."""
        self.seconds = dict.fromkeys(SECTIONS, 0.0)
        self._last = time.perf_counter()

    def stamp(self, section: Optional[str] = None) -> None:
        """Give the time since the last stamp to `section` (None: to nobody, e.g. before the loop)."""
        now = time.perf_counter()
        if section is not None:
            self.seconds[section] += now - self._last
        self._last = now


@dataclass(frozen=True)
class SectionStats:
    """One section over the ranks: min, average and max seconds and LAMMPS's %varavg."""

    name: str
    least: float
    average: float
    most: float
    variation: float  # standard deviation over the ranks as a percentage of the average (LAMMPS's %varavg)

    @classmethod
    def over_ranks(cls, name: str, per_rank: Sequence[float]) -> "SectionStats":
        """Statistics of one section's seconds on each rank."""
        mean = sum(per_rank) / len(per_rank)
        mean_square = sum(t * t for t in per_rank) / len(per_rank)
        return cls.from_moments(name, min(per_rank), mean, mean_square, max(per_rank))

    @classmethod
    def from_moments(cls, name: str, least: float, mean: float, mean_square: float, most: float) -> "SectionStats":
        """From the min, mean, mean square and max over the ranks (as MPI reductions give them)."""
        # LAMMPS's formula: sqrt(<t^2>/<t> - <t>) * 100, zero where the section is negligible
        spread = mean_square / mean - mean if mean > 0.001 else 0.0
        variation = math.sqrt(spread) * 100.0 if spread > 1e-10 else 0.0
        return cls(name, float(least), float(mean), float(most), variation)


def breakdown_lines(sections: Sequence[SectionStats], loop_seconds: float) -> list[str]:
    """LAMMPS's "MPI task timing breakdown" block for a loop of `loop_seconds`."""
    def percent(seconds: float) -> float:
        return 100.0 * seconds / loop_seconds if loop_seconds > 0 else 0.0

    lines = ["", "MPI task timing breakdown:",
             "Section |  min time  |  avg time  |  max time  |%varavg| %total",
             "---------------------------------------------------------------"]
    for s in sections:
        lines.append(f"{s.name:<8}| {s.least:<10.5g} | {s.average:<10.5g} | {s.most:<10.5g} |"
                     f"{s.variation:6.1f} |{percent(s.average):6.2f}")
    other = max(loop_seconds - sum(s.average for s in sections), 0.0)
    lines.append(f"{'Other':<8}|            | {other:<10.4g} |            |       |{percent(other):6.2f}")
    return lines


def program_lines(program_seconds: dict[str, float], program_calls: dict[str, int], loop_seconds: float,
                  steps: int, comm_seconds: float = 0.0) -> list[str]:
    """The compiled programs' wall time (inside their calls) and the Python left between them."""
    lines = ["", "Compiled programs (wall time inside each call):",
             "Program           |  calls |  time (s)  | ms/call  | %total",
             "-----------------------------------------------------------"]
    for name, seconds in sorted(program_seconds.items(), key=lambda item: -item[1]):
        calls = program_calls.get(name, 0)
        per_call = 1e3 * seconds / calls if calls else 0.0
        share = 100.0 * seconds / loop_seconds if loop_seconds > 0 else 0.0
        lines.append(f"{name:<18}| {calls:>6} | {seconds:<10.5g} | {per_call:<8.4g} |{share:6.2f}")
    python = max(loop_seconds - sum(program_seconds.values()) - comm_seconds, 0.0)
    share = 100.0 * python / loop_seconds if loop_seconds > 0 else 0.0
    per_step = 1e6 * python / steps if steps else 0.0
    lines.append(f"{'Python (between)':<18}|        | {python:<10.5g} |          |{share:6.2f}"
                 f"   ({per_step:.1f} us per step)")
    return lines


class ProgramClock:
    """Wall seconds and calls per compiled program."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def reset(self) -> None:
        self.seconds, self.calls = {}, {}

    def add(self, name: str, seconds: float) -> None:
        """Charge one call of `seconds` to program `name`."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.calls[name] = self.calls.get(name, 0) + 1
