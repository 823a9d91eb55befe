"""DRAM traffic of one GEMM under double-buffered SRAMs.

Each operand SRAM is split in two halves: the array works out of the active
half while the other half is filled from (or drained to) DRAM. So the data an
operand can *keep* on chip is half its SRAM. The model asks, per operand, one
question: does the data it will reuse fit in that half?

* If the whole operand fits, each word is read from DRAM once.
* If not, every sweep of the fold loop that revisits it reads it again
  (folds run column-folds outer, row-folds inner).
* For the ifmap, os and is finish each window before moving on, so one sweep
  reads each input pixel once if a band of ``filter height`` input rows fits
  (else every im2col entry is a DRAM read). ws streams all pixels past one
  slice of R filter taps at a time: overlap inside a slice is kept, overlap
  between slices is lost unless the whole ifmap fits, so a sweep reads the
  distinct pixels of each slice.
* Partial sums (ws and is split the reduction K over row folds) stay on chip
  while the outputs of one column fold fit; otherwise they go to DRAM and are
  read back, once per extra row fold.

This is a reuse model, not SCALE-Sim's address-level trace. It reproduces
SCALE-Sim's DRAM counts when operands fit on chip (the common case for the
SRAM sizes people use) and tells you *why* traffic grows when they do not;
tests/hw/test_scalesim_compat.py measures the gap on the stored fixtures.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .arch import ArrayConfig
from .dataflow import FoldPlan
from .errors import SramTooSmallError
from .layer import Layer, touched_positions

# SCALE-Sim's CALC mode fills the first buffer half at 10 words/cycle and drains the
# ofmap at one word per array column per cycle; we use the same rates when the user
# gives no DRAM bandwidth, so the prefetch/drain windows in the reports look alike.
CALC_MODE_READ_WORDS_PER_CYCLE = 10


@dataclass(frozen=True)
class DramTraffic:
    """Words moved between DRAM and the SRAMs for one GEMM, and why."""

    ifmap_reads: int
    filter_reads: int
    ofmap_writes: int
    ofmap_reads: int                 # partial sums read back after spilling
    notes: tuple[str, ...] = ()      # reuse the SRAM sizes could not keep

    @property
    def reads(self) -> int:
        """All words read from DRAM."""
        return self.ifmap_reads + self.filter_reads + self.ofmap_reads

    @property
    def total(self) -> int:
        """All words moved to or from DRAM."""
        return self.reads + self.ofmap_writes


def active_half(array: ArrayConfig, operand: str) -> int:
    """Words of one operand the array can keep while the other half is being refilled.

    SCALE-Sim tracks a read buffer in 100 equal sets and keeps 50 of them active,
    so its usable half is 50 * floor(words / 100), a little under words / 2; we
    use the same figure so that operands right at the boundary agree with it.
    """
    words = array.sram_words(operand)
    if operand == "ofmap":
        return (words + 1) // 2
    return 50 * (words // 100) if words >= 100 else words // 2


def check_fold_fits(layer: Layer, plan: FoldPlan, array: ArrayConfig) -> None:
    """Raise SramTooSmallError if the stationary tile of one fold does not fit its SRAM half."""
    tile = min(plan.sr, plan.rows) * min(plan.sc, plan.cols)
    operand = {"ws": "filter", "is": "ifmap", "os": "ofmap"}[plan.dataflow]
    have = active_half(array, operand)
    if tile > have:
        raise SramTooSmallError(
            f"layer '{layer.name}' ({plan.dataflow}): one fold keeps {tile} {operand} words "
            f"stationary ({min(plan.sr, plan.rows)}x{min(plan.sc, plan.cols)}), but half of the "
            f"{operand} SRAM holds only {have} words "
            f"({array.sram_words(operand) * array.word_bytes} bytes double-buffered); "
            f"use a larger {operand} SRAM or a smaller array")


def dram_traffic(layer: Layer, plan: FoldPlan, array: ArrayConfig) -> DramTraffic:
    """DRAM reads and writes of one group of ``layer`` under ``plan``."""
    g = layer.gemm_dims
    m, n, k = g.m, g.n, g.k
    rf, cf = plan.row_folds, plan.col_folds
    cap_if = active_half(array, "ifmap")
    cap_f = active_half(array, "filter")
    cap_of = active_half(array, "ofmap")
    notes: list[str] = []

    ifmap_once = layer.ifmap_footprint
    band = layer.batch * layer.filter_extent_h * layer.ifmap_w * layer.channels
    if ifmap_once <= cap_if:
        ifmap_pass = ifmap_once
    elif plan.dataflow == "ws":
        ifmap_pass = _ws_ifmap_sweep(layer, plan.rows, cap_if, notes)
    elif band <= cap_if:
        # os and is walk the output pixels in order and finish each window before
        # moving on: a band of `filter height` input rows carries the overlap.
        ifmap_pass = ifmap_once
    else:
        ifmap_pass = m * k
        notes.append(f"ifmap: window overlap needs a {band}-word input band on chip, more "
                     f"than {cap_if}; every im2col entry is read")

    def sweeps(once: int, cap: int, passes: int, operand: str, loop: str) -> int:
        if once <= cap or passes == 1:
            return once
        notes.append(f"{operand}: {once} words do not fit {cap}; re-read once per {loop} "
                     f"({passes}x)")
        return once * passes

    filter_once = k * n
    if plan.dataflow in ("ws", "os") and ifmap_once > cap_if and cf > 1:
        # Every column fold sweeps the whole ifmap again (ws: a new filter slice
        # meets all pixels; os: a new output-column tile needs all pixels).
        notes.append(f"ifmap: {ifmap_once} words do not fit {cap_if}; re-read once per "
                     f"column fold ({cf}x)")
        ifmap_sweeps = cf
    else:
        ifmap_sweeps = 1

    if plan.dataflow == "ws":
        ifmap = ifmap_sweeps * ifmap_pass
        filt = filter_once
        out_tile = m * min(n, plan.cols)
    elif plan.dataflow == "os":
        ifmap = ifmap_sweeps * ifmap_pass
        column_tile = k * min(n, plan.cols)
        if filter_once <= cap_f or column_tile <= cap_f:
            filt = filter_once
        else:
            filt = sweeps(filter_once, cap_f, rf, "filter", "row fold")
        out_tile = 0  # outputs finish inside the PEs: no partial sums
    else:  # is
        ifmap = ifmap_pass
        filt = sweeps(filter_once, cap_f, cf, "filter", "column fold")
        out_tile = min(m, plan.cols) * n

    out_writes, out_reads = m * n, 0
    if out_tile and rf > 1 and out_tile > cap_of:
        out_writes, out_reads = rf * m * n, (rf - 1) * m * n
        notes.append(f"ofmap: partial sums of one column fold ({out_tile} words) do not fit "
                     f"{cap_of}; spilled to DRAM {rf - 1}x")
    return DramTraffic(ifmap_reads=ifmap, filter_reads=filt, ofmap_writes=out_writes,
                       ofmap_reads=out_reads, notes=tuple(notes))


def _ws_ifmap_sweep(layer: Layer, rows: int, cap: int, notes: list[str]) -> int:
    """DRAM words one ws sweep over the filter taps reads when the ifmap does not fit.

    ws streams every output pixel past one slice of R filter taps (im2col
    columns, channel fastest), then the next slice. A word the window at one
    filter column (cc) used is needed again C taps later, by the next filter
    column, after C x M other words have streamed by (M output pixels); it is
    needed by the next filter row fw x C taps later. The active SRAM half keeps
    the most recent ``cap`` words, so a reuse survives if its distance fits.
    """
    g = layer.gemm_dims
    per_tap = g.m                                  # words one tap streams (one channel)
    next_column = layer.channels * per_tap
    next_row = layer.filter_w * next_column
    if next_row <= cap:
        return layer.ifmap_footprint               # every overlap survives: each word once
    if next_column <= cap:
        # Overlap along a filter row survives, across filter rows it does not: each
        # filter row reads the input rows it covers once.
        rows_read = sum(touched_positions(layer.ifmap_h, layer.ofmap_h, layer.stride_h, 1, 1,
                                          offset=r * layer.dilation_h)
                        for r in range(layer.filter_h))
        cols = touched_positions(layer.ifmap_w, layer.ofmap_w, layer.stride_w, layer.filter_w,
                                 layer.dilation_w)
        notes.append(f"ifmap: filter rows {next_row} words apart do not fit {cap}; "
                     f"input rows re-read once per filter row")
        return layer.batch * rows_read * cols * layer.channels
    notes.append(f"ifmap: neighbouring taps {next_column} words apart do not fit {cap}; "
                 f"each slice of {rows} taps reads its own pixels")
    return sum(_slice_footprint(layer, lo, min(g.k, lo + rows)) for lo in range(0, g.k, rows))


@lru_cache(maxsize=65536)
def _slice_footprint(layer: Layer, lo: int, hi: int) -> int:
    """Distinct input words read by filter taps lo..hi-1 (im2col columns) over all pixels.

    Tap j is (filter row, filter column, channel) with the channel fastest, as in
    SCALE-Sim's im2col. Channels whose taps cover the same (row, column) offsets
    touch the same pixel pattern, so each pattern is counted once and multiplied.
    """
    fw, ch = layer.filter_w, layer.channels
    offsets_of: dict[int, set[tuple[int, int]]] = {}
    for j in range(lo, hi):
        offsets_of.setdefault(j % ch, set()).add((j // (fw * ch), (j // ch) % fw))
    patterns: dict[frozenset[tuple[int, int]], int] = {}
    for offsets in offsets_of.values():
        key = frozenset(offsets)
        patterns[key] = patterns.get(key, 0) + 1

    def hit(size: int, out: int, stride: int, dilation: int, taps: list[int]) -> np.ndarray:
        mask = np.zeros((len(taps), size), dtype=bool)
        for i, t in enumerate(taps):
            pos = np.arange(out) * stride + t * dilation
            mask[i, pos[pos < size]] = True
        return mask

    total = 0
    for offsets, channels in patterns.items():
        if len(offsets) == 1:
            # One tap: a plain grid of rows x columns, no overlap to work out.
            ((r, c),) = offsets
            rows = touched_positions(layer.ifmap_h, layer.ofmap_h, layer.stride_h, 1, 1,
                                     offset=r * layer.dilation_h)
            cols = touched_positions(layer.ifmap_w, layer.ofmap_w, layer.stride_w, 1, 1,
                                     offset=c * layer.dilation_w)
            total += rows * cols * channels
            continue
        rows_taps = sorted({r for r, _ in offsets})
        row_mask = hit(layer.ifmap_h, layer.ofmap_h, layer.stride_h, layer.dilation_h, rows_taps)
        col_mask = np.zeros((len(rows_taps), layer.ifmap_w), dtype=bool)
        for i, r in enumerate(rows_taps):
            cols = sorted(c for rr, c in offsets if rr == r)
            col_mask[i] = hit(layer.ifmap_w, layer.ofmap_w, layer.stride_w, layer.dilation_w,
                              cols).any(axis=0)
        # Input (h, w) is read if some filter row r reaches h and one of r's columns w.
        touched = (row_mask.T.astype(np.int64) @ col_mask.astype(np.int64)) > 0
        total += int(touched.sum()) * channels
    return layer.batch * total


@dataclass(frozen=True)
class DramWindow:
    """When each DRAM stream is busy, relative to the first compute cycle (0).

    Reads start before cycle 0: the first active half is filled before the
    array starts (prefetch); the rest streams in behind the compute. Writes
    drain whenever the ofmap active half fills, and the last half drains after
    the last output. This is the model's timeline, not SCALE-Sim's trace.
    """

    ifmap_start: int
    ifmap_stop: int
    filter_start: int
    filter_stop: int
    ofmap_start: int
    ofmap_stop: int

    @property
    def cycles_incl_prefetch(self) -> int:
        """SCALE-Sim's "Total Cycles (incl. prefetch)": last DRAM write minus first DRAM read."""
        return int(self.ofmap_stop - min(self.ifmap_start, self.filter_start))


def dram_window(traffic: DramTraffic, compute_cycles: int, first_ofmap_write: int,
                array: ArrayConfig) -> DramWindow:
    """Timeline of the DRAM streams of one GEMM (see DramWindow)."""
    read_bw = array.dram_words_per_cycle or CALC_MODE_READ_WORDS_PER_CYCLE
    write_bw = array.dram_words_per_cycle or array.cols

    def read_window(words: int, cap: int) -> tuple[int, int]:
        first_fill = min(words, cap)
        start = -math.ceil(first_fill / read_bw)
        stop = compute_cycles - 1 if words > first_fill else -1
        return start, stop

    if_start, if_stop = read_window(traffic.ifmap_reads, active_half(array, "ifmap"))
    f_start, f_stop = read_window(traffic.filter_reads, active_half(array, "filter"))
    cap_of = active_half(array, "ofmap")
    writes = traffic.ofmap_writes
    if writes <= cap_of:
        of_start = compute_cycles
        of_stop = compute_cycles + math.ceil(writes / write_bw) - 1
    else:
        span = max(1, compute_cycles - first_ofmap_write)
        of_start = first_ofmap_write + math.ceil(cap_of * span / writes)
        of_stop = compute_cycles + math.ceil(cap_of / write_bw) - 1
    return DramWindow(if_start, if_stop, f_start, f_stop, of_start, max(of_start, of_stop))
