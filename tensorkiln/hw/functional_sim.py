"""A cycle-by-cycle functional simulator of an R x C systolic array.

It really moves values: every cycle each processing element (PE) takes the
operands its neighbours held the cycle before, multiplies, adds, and passes
values on. It exists to *show* (in tests/hw/test_functional_sim.py) that each
dataflow computes A @ B exactly and that the closed-form cycle count of
``dataflow.py`` is what a cycle-level machine takes. It is for small arrays
and small GEMMs (it costs O(folds x cycles x R x C)).

The three dataflows share two machines:

* ``_stationary_machine`` (weight stationary; input stationary is the same
  machine on the transposed problem, (A @ B)^T = B^T @ A^T, with A^T held
  still and B^T streamed). Per fold:
    - load: the stationary tile shifts down one row per cycle, bottom row
      first, so after R cycles PE (r, c) holds tile[r, c];
    - stream: row t of the streamed operand enters array row r at the left
      edge at cycle R + t + r (skewed), moving one PE right per cycle;
    - partial sums move one PE down per cycle; PE (r, c) adds its product to
      the sum from PE (r-1, c); column c's result for row t leaves the bottom
      edge at cycle 2R - 1 + t + c and is accumulated into the output SRAM.
  The fold is over when the last (possibly padding) result has left the
  array: 2R + C + T - 2 cycles.

* ``_output_machine`` (output stationary). Per fold: A's rows enter the left
  edge (row r delayed r cycles), B's columns the top edge (column c delayed c
  cycles); PE (r, c) sees the k-th pair at cycle k + r + c and accumulates.
  When a PE has consumed all K pairs its sum is written out (SCALE-Sim's
  model: outputs drain through shadow registers, overlapped with the next
  fold). The fold is over when the last PE finishes: R + C + K - 2 cycles.

Folds do not overlap, and a fold is never cut short when the array is only
partly used: unused PEs get zero padding, exactly as the skewed wavefront of a
real array would carry bubbles through them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .arch import DATAFLOWS
from .errors import AccelConfigError


@dataclass(frozen=True)
class FunctionalResult:
    """What the simulated array computed, and what it took."""

    output: np.ndarray      # the M x N product as the array produced it
    cycles: int             # cycle slots the array was busy, all folds
    folds: int
    ifmap_reads: int        # words read from each SRAM (real data, not padding)
    filter_reads: int
    ofmap_writes: int       # results (and partial sums) written to the output SRAM
    ofmap_reads: int        # partial sums read back to accumulate across row folds

    @property
    def last_cycle(self) -> int:
        """Index of the last busy cycle: SCALE-Sim's "Total Cycles"."""
        return self.cycles - 1


@dataclass
class _Counts:
    stream_reads: int = 0
    stationary_reads: int = 0
    out_writes: int = 0
    out_reads: int = 0


def _stationary_machine(stream: np.ndarray, stationary: np.ndarray, rows: int, cols: int,
                        counts: _Counts) -> tuple[np.ndarray, int, int]:
    """Y = stream @ stationary with the stationary operand held in the PEs."""
    t_len, sr = stream.shape
    sc = stationary.shape[1]
    dtype = np.result_type(stream, stationary)
    y = np.zeros((t_len, sc), dtype=dtype)
    cycle = 0
    folds = 0
    for c0 in range(0, sc, cols):            # column folds outer, as SCALE-Sim orders them
        for r0 in range(0, sr, rows):
            folds += 1
            tile = np.zeros((rows, cols), dtype=dtype)
            used_r, used_c = min(rows, sr - r0), min(cols, sc - c0)
            tile[:used_r, :used_c] = stationary[r0:r0 + used_r, c0:c0 + used_c]
            feed = np.zeros((t_len, rows), dtype=dtype)
            feed[:, :used_r] = stream[:, r0:r0 + used_r]

            weights = np.zeros((rows, cols), dtype=dtype)
            moving = np.zeros((rows, cols), dtype=dtype)       # streamed values in flight
            psums = np.zeros((rows, cols), dtype=dtype)
            emitted = np.zeros(cols, dtype=np.int64)            # results out of each column
            local = 0
            while emitted.min() < t_len:
                if local < rows:
                    # Load: shift the tile down one row; the bottom row goes in first.
                    weights = np.vstack([tile[rows - 1 - local][None, :], weights[:-1]])
                    if rows - 1 - local < used_r:
                        counts.stationary_reads += used_c
                else:
                    step = local - rows
                    # Left edge: array row r receives streamed row t = step - r.
                    t_in = step - np.arange(rows)
                    live = (t_in >= 0) & (t_in < t_len)
                    edge = np.where(live, feed[np.clip(t_in, 0, t_len - 1), np.arange(rows)], 0)
                    counts.stream_reads += int(np.count_nonzero(live[:used_r]))
                    moving = np.hstack([edge[:, None], moving[:, :-1]])
                    # Each PE adds its product to the partial sum from the PE above.
                    psums = np.vstack([np.zeros((1, cols), dtype=dtype), psums[:-1]]) \
                        + weights * moving
                    # Bottom edge: column c emits row t = step - (rows - 1) - c.
                    t_out = step - (rows - 1) - np.arange(cols)
                    out = (t_out >= 0) & (t_out < t_len)
                    emitted += out
                    for c in np.flatnonzero(out[:used_c]):
                        if r0 > 0:
                            counts.out_reads += 1   # read back the partial sum to add to
                        y[t_out[c], c0 + c] += psums[rows - 1, c]
                        counts.out_writes += 1
                local += 1
            cycle += local
    return y, cycle, folds


def _output_machine(a: np.ndarray, b: np.ndarray, rows: int, cols: int,
                    counts: _Counts) -> tuple[np.ndarray, int, int]:
    """Y = a @ b with each output accumulating in its own PE."""
    m, k = a.shape
    n = b.shape[1]
    dtype = np.result_type(a, b)
    y = np.zeros((m, n), dtype=dtype)
    cycle = 0
    folds = 0
    for c0 in range(0, n, cols):
        for r0 in range(0, m, rows):
            folds += 1
            used_r, used_c = min(rows, m - r0), min(cols, n - c0)
            left = np.zeros((rows, k), dtype=dtype)
            left[:used_r] = a[r0:r0 + used_r]
            top = np.zeros((k, cols), dtype=dtype)
            top[:, :used_c] = b[:, c0:c0 + used_c]

            a_in = np.zeros((rows, cols), dtype=dtype)
            a_ok = np.zeros((rows, cols), dtype=bool)          # valid bits travel with data
            b_in = np.zeros((rows, cols), dtype=dtype)
            b_ok = np.zeros((rows, cols), dtype=bool)
            acc = np.zeros((rows, cols), dtype=dtype)
            seen = np.zeros((rows, cols), dtype=np.int64)      # pairs each PE has consumed
            done = np.zeros((rows, cols), dtype=bool)
            local = 0
            while not done.all():
                k_row = local - np.arange(rows)                  # which k enters row r now
                live_r = (k_row >= 0) & (k_row < k)
                edge_a = np.where(live_r, left[np.arange(rows), np.clip(k_row, 0, k - 1)], 0)
                k_col = local - np.arange(cols)
                live_c = (k_col >= 0) & (k_col < k)
                edge_b = np.where(live_c, top[np.clip(k_col, 0, k - 1), np.arange(cols)], 0)
                counts.stream_reads += int(np.count_nonzero(live_r[:used_r]))
                counts.stationary_reads += int(np.count_nonzero(live_c[:used_c]))
                a_in = np.hstack([edge_a[:, None], a_in[:, :-1]])
                a_ok = np.hstack([live_r[:, None], a_ok[:, :-1]])
                b_in = np.vstack([edge_b[None, :], b_in[:-1]])
                b_ok = np.vstack([live_c[None, :], b_ok[:-1]])
                pair = a_ok & b_ok
                acc = acc + np.where(pair, a_in * b_in, 0)
                seen += pair
                finished = (seen == k) & ~done
                for r, c in zip(*np.nonzero(finished)):
                    if r < used_r and c < used_c:
                        y[r0 + r, c0 + c] = acc[r, c]
                        counts.out_writes += 1
                done |= finished
                local += 1
            cycle += local
    return y, cycle, folds


def run_gemm(a: np.ndarray, b: np.ndarray, rows: int, cols: int,
             dataflow: str) -> FunctionalResult:
    """Compute a @ b on a simulated R x C array with ``dataflow``, cycle by cycle."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise AccelConfigError(f"run_gemm needs (M x K) @ (K x N), got {a.shape} @ {b.shape}")
    if min(a.shape + b.shape) == 0 or rows <= 0 or cols <= 0:
        raise AccelConfigError(f"run_gemm needs non-empty operands and array, got "
                               f"{a.shape} @ {b.shape} on {rows}x{cols}")
    counts = _Counts()
    if dataflow == "ws":
        y, cycles, folds = _stationary_machine(a, b, rows, cols, counts)
        return FunctionalResult(y, cycles, folds, ifmap_reads=counts.stream_reads,
                                filter_reads=counts.stationary_reads,
                                ofmap_writes=counts.out_writes, ofmap_reads=counts.out_reads)
    if dataflow == "is":
        yt, cycles, folds = _stationary_machine(b.T, a.T, rows, cols, counts)
        return FunctionalResult(yt.T, cycles, folds, ifmap_reads=counts.stationary_reads,
                                filter_reads=counts.stream_reads,
                                ofmap_writes=counts.out_writes, ofmap_reads=counts.out_reads)
    if dataflow == "os":
        y, cycles, folds = _output_machine(a, b, rows, cols, counts)
        return FunctionalResult(y, cycles, folds, ifmap_reads=counts.stream_reads,
                                filter_reads=counts.stationary_reads,
                                ofmap_writes=counts.out_writes, ofmap_reads=0)
    raise AccelConfigError(f"dataflow must be one of {', '.join(DATAFLOWS)}, got {dataflow!r}")
