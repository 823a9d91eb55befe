"""A whole network's results: per-layer rows, totals, a text table, CSV files."""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from .arch import DATAFLOW_NAMES, ArrayConfig
from .energy import EnergyBreakdown, EnergyTable, zero_energy
from .model import LayerResult
from .scalesim_reports import write_scalesim_reports

SUMMARY_FILE = "TENSORKILN_SUMMARY.csv"


@dataclass(frozen=True)
class Totals:
    """Sums over all layers of a report."""

    cycles: int                 # including DRAM stalls
    compute_cycles: int
    stall_cycles: int
    macs: int
    sram_reads: int
    sram_writes: int
    dram_bytes: int
    energy: EnergyBreakdown
    utilization: float          # MACs / (cycles x PEs)


@dataclass(frozen=True)
class SimReport:
    """Per-layer results of one network on one array, with totals and renderings."""

    results: tuple[LayerResult, ...]
    array: ArrayConfig
    dataflow: str               # "ws", "os", "is", or "best" (chosen per layer)
    energy_table: EnergyTable

    def __iter__(self):
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    @property
    def totals(self) -> Totals:
        """Sums over all layers."""
        energy = zero_energy(self.energy_table.unit)
        for r in self.results:
            energy = energy + r.energy
        cycles = sum(r.layer_cycles for r in self.results)
        macs = sum(r.macs for r in self.results)
        return Totals(
            cycles=cycles,
            compute_cycles=sum(r.layer_compute_cycles for r in self.results),
            stall_cycles=sum(r.groups * r.stall_cycles for r in self.results),
            macs=macs,
            sram_reads=sum(r.layer_sram_reads for r in self.results),
            sram_writes=sum(r.layer_sram_writes for r in self.results),
            dram_bytes=sum(r.dram_bytes for r in self.results),
            energy=energy,
            utilization=macs / max(1, cycles * self.array.pes))

    def rows(self) -> list[dict[str, object]]:
        """One dict per layer with the table's quantities (whole layers, all groups)."""
        out = []
        for r in self.results:
            out.append({
                "layer": r.layer.name, "dataflow": r.dataflow, "groups": r.groups,
                "M": r.layer.gemm_dims.m, "N": r.layer.gemm_dims.n, "K": r.layer.gemm_dims.k,
                "folds": r.plan.folds, "compute_cycles": r.layer_compute_cycles,
                "stall_cycles": r.groups * r.stall_cycles, "cycles": r.layer_cycles,
                "macs": r.macs, "utilization_pct": 100 * r.macs / (r.layer_cycles * r.array.pes),
                "mapping_efficiency_pct": 100 * r.plan.mapping_efficiency,
                "sram_reads": r.layer_sram_reads, "sram_writes": r.layer_sram_writes,
                "dram_ifmap_reads": r.groups * r.dram.ifmap_reads,
                "dram_filter_reads": r.groups * r.dram.filter_reads,
                "dram_ofmap_writes": r.groups * r.dram.ofmap_writes,
                "dram_ofmap_reads": r.groups * r.dram.ofmap_reads,
                "dram_bytes": r.dram_bytes, "bandwidth_needed_bytes_per_cycle": r.bandwidth_needed,
                "arithmetic_intensity_macs_per_byte": r.arithmetic_intensity,
                "attainable_macs_per_cycle": r.attainable_macs_per_cycle, "bound": r.bound,
                "energy": r.energy.total, "energy_mac": r.energy.mac,
                "energy_register": r.energy.register, "energy_inter_pe": r.energy.inter_pe,
                "energy_sram": r.energy.sram, "energy_dram": r.energy.dram,
                "notes": "; ".join(r.dram.notes),
            })
        return out

    def table(self) -> str:
        """A text table: one line per layer, then totals and the roofline parameters."""
        a = self.array
        bw = a.dram_words_per_cycle
        df = "best per layer" if self.dataflow == "best" else DATAFLOW_NAMES[self.dataflow]
        lines = [
            f"{a.name}: {a.rows}x{a.cols} array, {df}, SRAM ifmap/filter/ofmap "
            f"{a.ifmap_sram_kb:g}/{a.filter_sram_kb:g}/{a.ofmap_sram_kb:g} KiB, "
            + (f"{a.precision} " if a.precision else "")
            + f"{a.word_bytes}-byte words, DRAM "
            + (f"{bw * a.word_bytes:.3g} B/cycle" if bw else "unlimited (reporting need)"),
            f"roofline: peak {a.pes} MAC/cycle"
            + (f", ridge at {a.pes / (bw * a.word_bytes):.3g} MAC/B" if bw else ""),
            "",
        ]
        head = (f"{'layer':<16} {'df':>2} {'cycles':>11} {'util%':>6} {'map%':>6} "
                f"{'SRAM words':>11} {'DRAM bytes':>11} {'need B/c':>9} {'MAC/B':>8} "
                f"{'roof MAC/c':>10} {'bound':>7} {'energy':>11}")
        lines += [head, "-" * len(head)]
        for row in self.rows():
            lines.append(
                f"{str(row['layer'])[:16]:<16} {row['dataflow']:>2} {row['cycles']:>11,} "
                f"{row['utilization_pct']:>6.1f} {row['mapping_efficiency_pct']:>6.1f} "
                f"{row['sram_reads'] + row['sram_writes']:>11,} {row['dram_bytes']:>11,} "
                f"{row['bandwidth_needed_bytes_per_cycle']:>9.2f} "
                f"{row['arithmetic_intensity_macs_per_byte']:>8.1f} "
                f"{row['attainable_macs_per_cycle']:>10.0f} {row['bound']:>7} "
                f"{row['energy']:>11.4g}")
        t = self.totals
        lines.append("-" * len(head))
        lines.append(
            f"{'total':<16} {'':>2} {t.cycles:>11,} {100 * t.utilization:>6.1f} {'':>6} "
            f"{t.sram_reads + t.sram_writes:>11,} {t.dram_bytes:>11,} "
            f"{t.dram_bytes / max(1, t.compute_cycles):>9.2f} "
            f"{t.macs / max(1, t.dram_bytes):>8.1f} {'':>10} {'':>7} {t.energy.total:>11.4g}")
        e = t.energy
        lines.append(
            f"energy ({e.unit}): MAC {e.mac:.4g}, register {e.register:.4g}, inter-PE "
            f"{e.inter_pe:.4g}, SRAM {e.sram:.4g}, DRAM {e.dram:.4g}; {e.total / max(1, t.macs):.4g} per MAC"
            f"  [{self.energy_table.source}]")
        if a.clock_mhz:
            lines.append(f"time at {a.clock_mhz:g} MHz: {t.cycles / (a.clock_mhz * 1e3):.4g} ms")
        notes = [f"  {r.layer.name}: {n}" for r in self.results for n in r.dram.notes]
        if notes:
            lines += ["DRAM reuse lost (SRAM too small to keep it):", *notes]
        return "\n".join(lines)

    def to_csv(self, out_dir: str | Path) -> list[Path]:
        """Write SCALE-Sim's three reports plus TENSORKILN_SUMMARY.csv into ``out_dir``."""
        paths = write_scalesim_reports(self.results, out_dir)
        rows = self.rows()
        summary = Path(out_dir) / SUMMARY_FILE
        with summary.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["layer"])
            writer.writeheader()
            writer.writerows(rows)
        return [*paths, summary]
