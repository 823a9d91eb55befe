"""Design-space sweep: array shapes x dataflows x SRAM sizes, one network.

Each configuration is one SimReport; the sweep keeps its totals. A
configuration whose SRAM cannot hold one fold is kept as infeasible (with
the reason) rather than dropped, so the CSV shows where the design space ends.
"""
from __future__ import annotations

import csv
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from ..driver.progress import Progress
from .api import simulate_layers
from .arch import ArrayConfig
from .energy import EnergyTable
from .errors import AccelConfigError
from .layer import Layer

SWEEP_COLUMNS = ("config", "rows", "cols", "dataflow", "sram_kb", "feasible", "cycles",
                 "compute_cycles", "stall_cycles", "utilization_pct", "dram_bytes", "energy",
                 "energy_unit", "error")


@dataclass(frozen=True)
class SweepPoint:
    """Totals of one configuration of the sweep."""

    rows: int
    cols: int
    dataflow: str
    sram_kb: float
    cycles: int | None = None
    compute_cycles: int | None = None
    stall_cycles: int | None = None
    utilization: float | None = None
    dram_bytes: int | None = None
    energy: float | None = None
    energy_unit: str = ""
    error: str = ""

    @property
    def label(self) -> str:
        """Short name, e.g. '32x32 ws 64K'."""
        return f"{self.rows}x{self.cols} {self.dataflow} {self.sram_kb:g}K"

    @property
    def feasible(self) -> bool:
        """False when some layer did not fit the SRAMs."""
        return not self.error


def sweep(layers: Sequence[Layer], arrays: Iterable[tuple[int, int]],
          dataflows: Iterable[str], sram_kbs: Iterable[float], base: ArrayConfig,
          energy: EnergyTable | None = None) -> list[SweepPoint]:
    """Model ``layers`` on every (array shape, dataflow, SRAM size) combination.

    ``sram_kbs`` gives one size per point, used for all three SRAMs; the other
    settings (word size, DRAM bandwidth) come from ``base``. A sweep that takes
    more than a second reports its progress (driver/progress.py).
    """
    points = []
    dataflows = list(dataflows)
    sram_kbs = list(sram_kbs)
    arrays = list(arrays)
    with Progress("accel sweep") as progress:
        progress.stage(f"modelling {len(layers)} layers", total=len(arrays) * len(sram_kbs) * len(dataflows))
        for rows, cols in arrays:
            _sweep_array(layers, rows, cols, dataflows, sram_kbs, base, energy, points, progress)
    return points


def _sweep_array(layers, rows: int, cols: int, dataflows: list[str], sram_kbs: list[float], base: ArrayConfig,
                 energy: EnergyTable | None, points: list[SweepPoint], progress: Progress) -> None:
    """The points of one array shape, appended to `points`."""
    for kb in sram_kbs:
        config = base.with_(rows=rows, cols=cols, ifmap_sram_kb=kb, filter_sram_kb=kb,
                            ofmap_sram_kb=kb, name=f"{rows}x{cols}")
        for df in dataflows:
            progress.step()
            try:
                report = simulate_layers(layers, config, df, energy)
            except AccelConfigError as err:
                points.append(SweepPoint(rows, cols, df, kb, error=str(err)))
                continue
            t = report.totals
            points.append(SweepPoint(rows, cols, df, kb, cycles=t.cycles,
                                     compute_cycles=t.compute_cycles,
                                     stall_cycles=t.stall_cycles, utilization=t.utilization,
                                     dram_bytes=t.dram_bytes, energy=t.energy.total,
                                     energy_unit=t.energy.unit))


def write_sweep_csv(points: Sequence[SweepPoint], path: str | Path) -> Path:
    """Write the sweep as a CSV, one row per configuration."""
    path = Path(path)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(SWEEP_COLUMNS)
        for p in points:
            writer.writerow([p.label, p.rows, p.cols, p.dataflow, p.sram_kb, int(p.feasible),
                             p.cycles, p.compute_cycles, p.stall_cycles,
                             None if p.utilization is None else round(100 * p.utilization, 3),
                             p.dram_bytes, p.energy, p.energy_unit, p.error])
    return path


def plot_sweep(points: Sequence[SweepPoint], path: str | Path) -> bool:
    """Plot cycles and energy per configuration as a PNG; False if matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return False
    # Matplotlib wants a writable config directory; CI home directories may not be.
    os.environ.setdefault("MPLCONFIGDIR", tempfile.gettempdir())
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    ok = [p for p in points if p.feasible]
    if not ok:
        return False
    labels = [p.label for p in ok]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(6, 0.35 * len(ok)), 7), sharex=True)
    colors = {"ws": "tab:blue", "os": "tab:orange", "is": "tab:green"}
    bar_colors = [colors.get(p.dataflow, "gray") for p in ok]
    ax1.bar(range(len(ok)), [p.cycles for p in ok], color=bar_colors)
    ax1.set_ylabel("cycles")
    ax1.set_yscale("log")
    ax2.bar(range(len(ok)), [p.energy for p in ok], color=bar_colors)
    ax2.set_ylabel(f"energy ({ok[0].energy_unit})")
    ax2.set_yscale("log")
    ax2.set_xticks(range(len(ok)))
    ax2.set_xticklabels(labels, rotation=90, fontsize=7)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax1.legend(handles, list(colors), title="dataflow")
    ax1.set_title("design-space sweep: cycles and energy per configuration")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
