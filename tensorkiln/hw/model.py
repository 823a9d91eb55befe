"""One layer on one array: cycles, traffic, energy, and what bounds it.

``simulate_layer`` glues the closed forms together. Counts in a LayerResult
are *per group* (that is what a SCALE-Sim report row holds: SCALE-Sim runs the
channels of a depthwise layer as separate layers); the ``layer_*`` properties
give whole-layer figures (per group times ``groups``), which the tables use.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .arch import DATAFLOWS, ArrayConfig
from .dataflow import FoldPlan, SramTraffic, SramWindow, plan_folds, sram_traffic, sram_window
from .dram import DramTraffic, DramWindow, check_fold_fits, dram_traffic, dram_window
from .energy import EnergyBreakdown, EnergyTable, energy_of
from .errors import AccelConfigError
from .layer import Layer


@dataclass(frozen=True)
class LayerResult:
    """The model's answer for one layer on one array with one dataflow."""

    layer: Layer
    array: ArrayConfig
    plan: FoldPlan
    sram: SramTraffic
    sram_window: SramWindow
    dram: DramTraffic
    dram_window: DramWindow
    stall_cycles: int           # per group: cycles the DRAM link adds beyond compute
    energy: EnergyBreakdown     # whole layer

    # -- per group (one SCALE-Sim report row) ------------------------------------------
    @property
    def dataflow(self) -> str:
        """The dataflow this result is for."""
        return self.plan.dataflow

    @property
    def compute_cycles(self) -> int:
        """Per group: SCALE-Sim's "Total Cycles" (stall-free)."""
        return self.plan.compute_cycles

    @property
    def macs_per_group(self) -> int:
        """MACs of one group."""
        g = self.layer.gemm_dims
        return g.m * g.n * g.k

    @property
    def overall_utilization(self) -> float:
        """MACs / (cycles x PEs), 0..1 (SCALE-Sim's "Overall Util" / 100)."""
        return self.macs_per_group / (self.compute_cycles * self.array.pes)

    # -- whole layer --------------------------------------------------------------------
    @property
    def groups(self) -> int:
        """Independent GEMMs the layer runs as."""
        return self.layer.groups

    @property
    def layer_compute_cycles(self) -> int:
        """Compute cycles of all groups, run back to back."""
        return self.groups * self.compute_cycles

    @property
    def layer_cycles(self) -> int:
        """Cycles including DRAM stalls, all groups."""
        return self.groups * (self.compute_cycles + self.stall_cycles)

    @property
    def macs(self) -> int:
        """MACs of the whole layer."""
        return self.layer.macs

    @property
    def layer_sram_reads(self) -> int:
        """Words the array reads from the SRAMs (operands and partial sums), all groups."""
        s = self.sram
        return self.groups * (s.ifmap_reads + s.filter_reads + s.ofmap_reads)

    @property
    def layer_sram_writes(self) -> int:
        """Words the array writes to the ofmap SRAM, all groups."""
        return self.groups * self.sram.ofmap_writes

    @property
    def layer_dram_words(self) -> int:
        """Words moved to or from DRAM, all groups."""
        return self.groups * self.dram.total

    @property
    def dram_bytes(self) -> int:
        """Bytes moved to or from DRAM, all groups."""
        return self.layer_dram_words * self.array.word_bytes

    @property
    def bandwidth_needed(self) -> float:
        """DRAM bytes per cycle the layer needs to run without stalls (average)."""
        return self.dram_bytes / max(1, self.layer_compute_cycles)

    @property
    def arithmetic_intensity(self) -> float:
        """MACs per DRAM byte: the layer's x coordinate on the roofline."""
        return self.macs / max(1, self.dram_bytes)

    @property
    def attainable_macs_per_cycle(self) -> float:
        """Roofline: min(peak MACs/cycle, intensity x DRAM bytes/cycle)."""
        bw = self.array.dram_words_per_cycle
        if bw is None:
            return float(self.array.pes)
        return min(float(self.array.pes), self.arithmetic_intensity * bw * self.array.word_bytes)

    @property
    def ridge_intensity(self) -> float | None:
        """MACs per byte where the roofline bends (None without a DRAM bandwidth)."""
        bw = self.array.dram_words_per_cycle
        return None if bw is None else self.array.pes / (bw * self.array.word_bytes)

    @property
    def bound(self) -> str:
        """What limits the layer: "compute" (the array) or "DRAM" (the link)."""
        return "DRAM" if self.stall_cycles > 0 else "compute"


def simulate_layer(layer: Layer, array: ArrayConfig, dataflow: str | None = None,
                   energy: EnergyTable | None = None) -> LayerResult:
    """Model one layer on ``array`` with ``dataflow`` (default: the array's)."""
    dataflow = dataflow or array.dataflow
    if dataflow not in DATAFLOWS:
        raise AccelConfigError(f"dataflow must be one of {', '.join(DATAFLOWS)}, got {dataflow!r}")
    table = energy or EnergyTable()
    plan = plan_folds(layer.gemm_dims, array.rows, array.cols, dataflow)
    check_fold_fits(layer, plan, array)
    sram = sram_traffic(layer.gemm_dims, plan)
    window = sram_window(plan, layer)
    dram = dram_traffic(layer, plan, array)
    dwin = dram_window(dram, plan.compute_cycles, window.ofmap_start, array)

    stall = 0
    if array.dram_words_per_cycle is not None:
        # Double buffering hides DRAM time behind compute; transfers that take longer
        # than the compute stall the array. (The first fill, before cycle 0, is in
        # the DRAM window's "incl. prefetch" figure, as in SCALE-Sim.)
        transfer = math.ceil(dram.total / array.dram_words_per_cycle)
        stall = max(0, transfer - (plan.compute_cycles + 1))

    # Every DRAM word also enters or leaves an SRAM, so it costs an SRAM access too.
    sram_accesses = (sram.ifmap_reads + sram.filter_reads + sram.ofmap_writes + sram.ofmap_reads
                     + dram.total)
    e = energy_of(layer.gemm_dims.m * layer.gemm_dims.n * layer.gemm_dims.k, sram_accesses,
                  dram.total, table).scaled(layer.groups)
    return LayerResult(layer=layer, array=array, plan=plan, sram=sram, sram_window=window,
                       dram=dram, dram_window=dwin, stall_cycles=stall, energy=e)


def best_dataflow(layer: Layer, array: ArrayConfig,
                  energy: EnergyTable | None = None) -> LayerResult:
    """The fastest of ws/os/is for ``layer`` (ties go to the lower energy).

    A dataflow whose fold does not fit the SRAMs is skipped; if none fits, the
    error of the array's own dataflow is raised.
    """
    results = []
    first_error: AccelConfigError | None = None
    for df in DATAFLOWS:
        try:
            results.append(simulate_layer(layer, array, df, energy))
        except AccelConfigError as err:
            first_error = first_error or err
    if not results:
        assert first_error is not None
        raise first_error
    return min(results, key=lambda r: (r.layer_cycles, r.energy.total))
