"""Closed-form timing and SRAM traffic of one GEMM on an R x C systolic array.

Each dataflow keeps one operand still in the processing elements (PEs) and
streams the other through. The GEMM (M x K) @ (K x N) has three dimensions;
a dataflow puts two of them on the array (Sr on the rows, Sc on the columns)
and streams the third in time (T):

    dataflow             stationary   Sr   Sc   T
    weight stationary    filter       K    N    M
    output stationary    ofmap        M    N    K
    input stationary     ifmap        K    M    N

When Sr > R or Sc > C the work is cut into ``ceil(Sr/R) * ceil(Sc/C)`` folds,
run one after another (column folds outer, row folds inner, as SCALE-Sim
does). A fold is never shortened when the array is only partly used: the
skewed wavefront still crosses all R rows and C columns.

Cycles of one fold (derived in docs/accelerator.md, and checked cycle by cycle
in ``functional_sim``):

    ws, is:  R (load the stationary tile, one row per cycle)
             + R - 1 (skew of the streamed rows) + T (stream) + C - 1 (skew/drain)
             = 2R + C + T - 2
    os:      T (accumulate) + R - 1 + C - 1 (input skews)
             = R + C + T - 2

SCALE-Sim reports the *index* of the last cycle (0-based), so its "Total
Cycles" is ``folds * cycles_per_fold - 1``; we report the same number.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .arch import DATAFLOWS
from .errors import AccelConfigError
from .layer import Gemm, Layer


@dataclass(frozen=True)
class FoldPlan:
    """How one GEMM is cut into folds on an R x C array."""

    dataflow: str
    rows: int      # R
    cols: int      # C
    sr: int        # GEMM dimension mapped onto the array rows
    sc: int        # GEMM dimension mapped onto the array columns
    t: int         # GEMM dimension streamed in time

    @property
    def row_folds(self) -> int:
        """Folds along the array rows: ceil(Sr / R)."""
        return math.ceil(self.sr / self.rows)

    @property
    def col_folds(self) -> int:
        """Folds along the array columns: ceil(Sc / C)."""
        return math.ceil(self.sc / self.cols)

    @property
    def folds(self) -> int:
        """Total folds."""
        return self.row_folds * self.col_folds

    @property
    def cycles_per_fold(self) -> int:
        """Cycle slots one fold occupies the array."""
        r, c, t = self.rows, self.cols, self.t
        if self.dataflow == "os":
            return r + c + t - 2
        return 2 * r + c + t - 2

    @property
    def compute_cycles(self) -> int:
        """SCALE-Sim's "Total Cycles": index of the last cycle of the last fold."""
        return self.folds * self.cycles_per_fold - 1

    @property
    def rows_used_first(self) -> int:
        """Array rows holding data in the first fold."""
        return min(self.rows, self.sr)

    @property
    def rows_used_last(self) -> int:
        """Array rows holding data in the last fold."""
        return self.sr - (self.row_folds - 1) * self.rows

    @property
    def cols_used_first(self) -> int:
        """Array columns holding data in the first fold."""
        return min(self.cols, self.sc)

    @property
    def cols_used_last(self) -> int:
        """Array columns holding data in the last fold."""
        return self.sc - (self.col_folds - 1) * self.cols

    @property
    def mapping_efficiency(self) -> float:
        """Average over folds of the fraction of PEs that hold data (0..1)."""
        # Summed over all folds, the used PEs cover the Sr x Sc plane exactly once.
        return self.sr * self.sc / (self.folds * self.rows * self.cols)

    @property
    def compute_utilization(self) -> float:
        """SCALE-Sim's "Compute Util": average over folds of busy PE-cycles / PE-cycles (0..1).

        SCALE-Sim measures a ws/is fold as 2R + 2C + T - 3 cycles here (it counts
        the output skew twice), so we do too; for os it uses the fold length.
        """
        r, c, t = self.rows, self.cols, self.t
        fold_len = r + c + t - 2 if self.dataflow == "os" else 2 * r + 2 * c + t - 3
        return self.sr * self.sc * t / (self.folds * r * c * fold_len)


def plan_folds(gemm: Gemm, rows: int, cols: int, dataflow: str) -> FoldPlan:
    """Map a GEMM onto an R x C array with the given dataflow."""
    if dataflow == "ws":
        return FoldPlan(dataflow, rows, cols, sr=gemm.k, sc=gemm.n, t=gemm.m)
    if dataflow == "os":
        return FoldPlan(dataflow, rows, cols, sr=gemm.m, sc=gemm.n, t=gemm.k)
    if dataflow == "is":
        return FoldPlan(dataflow, rows, cols, sr=gemm.k, sc=gemm.m, t=gemm.n)
    raise AccelConfigError(f"dataflow must be one of {', '.join(DATAFLOWS)}, got {dataflow!r}")


@dataclass(frozen=True)
class SramTraffic:
    """Words moved between the SRAMs and the array for one GEMM.

    ``ofmap_writes`` counts every (partial) output the array emits;
    ``ofmap_reads`` the partial sums read back to be accumulated when the
    reduction dimension K is split over row folds (ws, is). SCALE-Sim does not
    count those reads; ``scalesim_ofmap_writes`` is its exact "SRAM OFMAP
    Writes" figure (for os it adds R + C per fold, a bookkeeping quirk of its
    code that we reproduce so reports match).
    """

    ifmap_reads: int
    filter_reads: int
    ofmap_writes: int
    ofmap_reads: int
    scalesim_ofmap_writes: int


def sram_traffic(gemm: Gemm, plan: FoldPlan) -> SramTraffic:
    """SRAM reads and writes of one GEMM under ``plan`` (closed form of SCALE-Sim's counts)."""
    m, n, k = gemm.m, gemm.n, gemm.k
    rf, cf = plan.row_folds, plan.col_folds
    if plan.dataflow == "ws":
        # The ifmap is streamed once per column fold; each weight is loaded once;
        # each row fold (a slice of K) emits a full M x N set of partial sums.
        return SramTraffic(ifmap_reads=cf * m * k, filter_reads=k * n, ofmap_writes=rf * m * n,
                           ofmap_reads=(rf - 1) * m * n, scalesim_ofmap_writes=rf * m * n)
    if plan.dataflow == "os":
        # Row folds re-stream the filter, column folds re-stream the ifmap; outputs
        # are finished inside the PEs and written once.
        return SramTraffic(ifmap_reads=cf * m * k, filter_reads=rf * k * n, ofmap_writes=m * n,
                           ofmap_reads=0,
                           scalesim_ofmap_writes=m * n + plan.folds * (plan.rows + plan.cols))
    # is: each ifmap word is loaded once; the filter is streamed once per column fold;
    # row folds (slices of K) emit partial sums.
    return SramTraffic(ifmap_reads=k * m, filter_reads=cf * n * k, ofmap_writes=rf * n * m,
                       ofmap_reads=(rf - 1) * n * m, scalesim_ofmap_writes=rf * n * m)


@dataclass(frozen=True)
class SramWindow:
    """First and last cycle at which the array touches each SRAM (SCALE-Sim's trace view)."""

    ifmap_start: int
    ifmap_stop: int
    filter_start: int
    filter_stop: int
    ofmap_start: int
    ofmap_stop: int


def sram_window(plan: FoldPlan, layer: Layer | None = None) -> SramWindow:
    """Start/stop cycles of SRAM traffic, as SCALE-Sim's detailed report gives them.

    Reads are served one cycle after the request (SRAM hit latency 1), writes in
    the same cycle. When SCALE-Sim's ceil() output formula runs the last windows
    past the input edge, those ifmap addresses are invalid and never requested;
    given the ``layer``, the ifmap stop cycle accounts for that.
    """
    window = _plain_sram_window(plan)
    if layer is not None and _overshoots(layer):
        stop = _ifmap_stop_at_edges(layer, plan)
        if stop is not None:
            window = SramWindow(window.ifmap_start, stop, window.filter_start, window.filter_stop,
                                window.ofmap_start, window.ofmap_stop)
    return window


def _plain_sram_window(plan: FoldPlan) -> SramWindow:
    """SRAM start/stop cycles when every operand address is valid."""
    r, t, L = plan.rows, plan.t, plan.cycles_per_fold
    last = (plan.folds - 1) * L
    ru0, rul, cul = plan.rows_used_first, plan.rows_used_last, plan.cols_used_last
    if plan.dataflow == "ws":
        return SramWindow(
            ifmap_start=r + 1, ifmap_stop=last + r + (rul - 1) + (t - 1) + 1,
            filter_start=(r - ru0) + 1, filter_stop=last + r,
            ofmap_start=2 * r - 1, ofmap_stop=last + 2 * r - 1 + (t - 1) + (cul - 1))
    if plan.dataflow == "os":
        return SramWindow(
            ifmap_start=1, ifmap_stop=last + (t - 1) + (rul - 1) + 1,
            filter_start=1, filter_stop=last + (t - 1) + (cul - 1) + 1,
            ofmap_start=(t - 1) + (r - ru0), ofmap_stop=last + (t - 1) + (r - 1) + (cul - 1))
    return SramWindow(
        ifmap_start=(r - ru0) + 1, ifmap_stop=last + r,
        filter_start=r + 1, filter_stop=last + r + (t - 1) + (rul - 1) + 1,
        ofmap_start=2 * r - 1, ofmap_stop=last + 2 * r - 1 + (t - 1) + (cul - 1))


def _overshoots(layer: Layer) -> bool:
    """True when the last output row or column's window runs past the (padded) input."""
    return ((layer.ofmap_h - 1) * layer.stride_h + layer.filter_extent_h > layer.ifmap_h
            or (layer.ofmap_w - 1) * layer.stride_w + layer.filter_extent_w > layer.ifmap_w)


def _ifmap_stop_at_edges(layer: Layer, plan: FoldPlan) -> int | None:
    """Ifmap SRAM stop cycle when some im2col entries fall outside the input.

    Entry (i, j) of the im2col matrix (output pixel i, filter tap j) is valid
    when its input row and column lie inside the input. We look for the
    latest-demanded valid entry, starting from the last fold and walking back
    over folds that hold no valid entry at all.
    """
    oh, ow = layer.ofmap_h, layer.ofmap_w
    fw, ch = layer.filter_w, layer.channels
    r, c, L = plan.rows, plan.cols, plan.cycles_per_fold

    def pixel(i):
        p = i % (oh * ow)
        return (p // ow) * layer.stride_h, (p % ow) * layer.stride_w

    def tap(j):
        return (j // (fw * ch)) * layer.dilation_h, ((j // ch) % fw) * layer.dilation_w

    for fold in range(plan.folds - 1, -1, -1):
        fc, fr = divmod(fold, plan.row_folds)   # column folds outer, row folds inner
        start = fold * L
        lanes = np.arange(fr * r, min(plan.sr, (fr + 1) * r))
        if plan.dataflow == "ws":
            # Lanes are filter taps j; every output pixel i streams by at
            # (fold start) + R + i + lane.
            tr, tc = tap(lanes)
            ohm = np.minimum(oh - 1, (layer.ifmap_h - 1 - tr) // layer.stride_h)
            owm = np.minimum(ow - 1, (layer.ifmap_w - 1 - tc) // layer.stride_w)
            ok = (ohm >= 0) & (owm >= 0)
            if ok.any():
                i_max = (layer.batch - 1) * oh * ow + ohm * ow + owm
                return int(start + r + np.max((i_max + lanes - fr * r)[ok]) + 1)
        elif plan.dataflow == "os":
            # Lanes are output pixels i; taps j stream by at (fold start) + j + lane.
            pr, pc = pixel(lanes)
            crm = np.minimum(layer.filter_h - 1, (layer.ifmap_h - 1 - pr) // layer.dilation_h)
            ccm = np.minimum(fw - 1, (layer.ifmap_w - 1 - pc) // layer.dilation_w)
            ok = (crm >= 0) & (ccm >= 0)
            if ok.any():
                j_max = crm * fw * ch + ccm * ch + ch - 1
                return int(start + np.max((j_max + lanes - fr * r)[ok]) + 1)
        else:
            # is: the fold holds taps j (rows) x pixels i (columns), loaded bottom row
            # first, so its last valid request is the smallest tap with a valid pixel.
            pixels = np.arange(fc * c, min(plan.sc, (fc + 1) * c))
            pr, pc = pixel(pixels)
            tr, tc = tap(lanes)
            valid = ((pr[None, :] + tr[:, None] < layer.ifmap_h)
                     & (pc[None, :] + tc[:, None] < layer.ifmap_w)).any(axis=1)
            if valid.any():
                j_min = int(lanes[np.argmax(valid)])
                return start + (r - 1) - (j_min - fr * r) + 1
    return None
