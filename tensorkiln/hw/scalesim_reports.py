"""SCALE-Sim's three report files: COMPUTE_REPORT.csv, BANDWIDTH_REPORT.csv,
DETAILED_ACCESS_REPORT.csv - written with SCALE-Sim 3.0's exact column names
and row layout (one row per layer SCALE-Sim runs, so a depthwise layer gives
one row per channel), and read back for comparisons.

Which columns are exact: "Total Cycles", "Overall Util %", "Mapping
Efficiency %", "Compute Util %", every SRAM column and "Avg ... SRAM BW"
reproduce SCALE-Sim's numbers (with no DRAM stalls, i.e. its CALC mode).
The DRAM columns, "Stall Cycles" and "Total Cycles (incl. prefetch)" come from
tensorkiln's reuse model (see dram.py), not SCALE-Sim's address trace.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from .model import LayerResult

COMPUTE_COLUMNS = ("LayerID", "Total Cycles (incl. prefetch)", "Total Cycles", "Stall Cycles",
                   "Overall Util %", "Mapping Efficiency %", "Compute Util %")
BANDWIDTH_COLUMNS = ("LayerID", "Avg IFMAP SRAM BW", "Avg FILTER SRAM BW", "Avg OFMAP SRAM BW",
                     "Avg IFMAP DRAM BW", "Avg FILTER DRAM BW", "Avg OFMAP DRAM BW")
DETAILED_COLUMNS = (
    "LayerID",
    "SRAM IFMAP Start Cycle", "SRAM IFMAP Stop Cycle", "SRAM IFMAP Reads",
    "SRAM Filter Start Cycle", "SRAM Filter Stop Cycle", "SRAM Filter Reads",
    "SRAM OFMAP Start Cycle", "SRAM OFMAP Stop Cycle", "SRAM OFMAP Writes",
    "DRAM IFMAP Start Cycle", "DRAM IFMAP Stop Cycle", "DRAM IFMAP Reads",
    "DRAM Filter Start Cycle", "DRAM Filter Stop Cycle", "DRAM Filter Reads",
    "DRAM OFMAP Start Cycle", "DRAM OFMAP Stop Cycle", "DRAM OFMAP Writes")

REPORT_FILES = ("COMPUTE_REPORT.csv", "BANDWIDTH_REPORT.csv", "DETAILED_ACCESS_REPORT.csv")


def _header(columns: tuple[str, ...]) -> str:
    # SCALE-Sim writes "A, B, C,\n": a space after each comma and a trailing comma.
    return ", ".join(columns) + ",\n"


def _row(values: Iterable[object]) -> str:
    return ", ".join(str(v) for v in values) + ",\n"


def compute_row(r: LayerResult) -> list[object]:
    """COMPUTE_REPORT values of one group of a layer (without LayerID)."""
    total = r.compute_cycles + r.stall_cycles
    return [r.dram_window.cycles_incl_prefetch + r.stall_cycles, total, r.stall_cycles,
            r.macs_per_group * 100 / (total * r.array.pes), r.plan.mapping_efficiency * 100,
            r.plan.compute_utilization * 100]


def bandwidth_row(r: LayerResult) -> list[object]:
    """BANDWIDTH_REPORT values (words/cycle) of one group of a layer (without LayerID)."""
    total = r.compute_cycles + r.stall_cycles
    w, d = r.dram_window, r.dram
    return [r.sram.ifmap_reads / total, r.sram.filter_reads / total,
            r.sram.scalesim_ofmap_writes / total,
            d.ifmap_reads / (w.ifmap_stop - w.ifmap_start + 1),
            d.filter_reads / (w.filter_stop - w.filter_start + 1),
            d.ofmap_writes / (w.ofmap_stop - w.ofmap_start + 1)]


def detailed_row(r: LayerResult) -> list[object]:
    """DETAILED_ACCESS_REPORT values of one group of a layer (without LayerID)."""
    s, w, d, dw = r.sram, r.sram_window, r.dram, r.dram_window
    return [w.ifmap_start, w.ifmap_stop, s.ifmap_reads,
            w.filter_start, w.filter_stop, s.filter_reads,
            w.ofmap_start, w.ofmap_stop, s.scalesim_ofmap_writes,
            dw.ifmap_start, dw.ifmap_stop, d.ifmap_reads,
            dw.filter_start, dw.filter_stop, d.filter_reads,
            dw.ofmap_start, dw.ofmap_stop, d.ofmap_writes]


def write_scalesim_reports(results: Iterable[LayerResult], out_dir: str | Path) -> list[Path]:
    """Write the three SCALE-Sim report files into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    makers = ((COMPUTE_COLUMNS, compute_row), (BANDWIDTH_COLUMNS, bandwidth_row),
              (DETAILED_COLUMNS, detailed_row))
    paths = []
    for filename, (columns, make) in zip(REPORT_FILES, makers):
        lines = [_header(columns)]
        layer_id = 0
        for r in results:
            values = make(r)
            for _ in range(r.groups):  # SCALE-Sim reports each group as its own layer
                lines.append(_row([layer_id, *values]))
                layer_id += 1
        path = out / filename
        path.write_text("".join(lines))
        paths.append(path)
    return paths


def read_scalesim_report(path: str | Path) -> list[dict[str, float]]:
    """Read a SCALE-Sim report CSV into one {column: value} dict per row."""
    lines = [ln for ln in Path(path).read_text().splitlines() if ln.strip()]
    columns = [c.strip() for c in lines[0].split(",") if c.strip()]
    rows = []
    for line in lines[1:]:
        values = [v.strip() for v in line.split(",")][:len(columns)]
        rows.append({c: float(v) for c, v in zip(columns, values)})
    return rows
