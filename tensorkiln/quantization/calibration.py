"""Activation ranges from calibration statistics: min/max, and a histogram of |x| for the
percentile, KL-divergence (entropy) and MSE methods.

Each method chooses a clipping threshold t on |x|; the quantized range is then
[max(min, -t), min(max, t)], widened to hold 0 (so that 0, a convolution's padding, is exact).
A non-negative tensor (after a ReLU) thus gets [0, t], a signed one [-t, t].

    minmax      t = max |x|: nothing is clipped
    percentile  t = the p-th percentile of |x| (of its nonzero values: 0 is always exact)
    kl          TensorRT's entropy calibration: the t whose histogram, folded at t and
                requantized to the grid's levels, differs least from the float one (KL divergence)
    mse         the t minimizing the expected squared error of quantize-dequantize
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

METHODS = ("minmax", "percentile", "kl", "mse")
HISTOGRAM_BINS = 2048


@dataclass
class ActivationStats:
    """Running statistics of one layer's input over the calibration data."""

    low: float = np.inf
    high: float = -np.inf
    histogram: np.ndarray | None = field(default=None, repr=False)  # counts of |x| over [0, amax]

    @property
    def amax(self) -> float:
        return max(abs(self.low), abs(self.high))

    @property
    def signed(self) -> bool:
        return self.low < 0

    def observe_range(self, x: np.ndarray) -> None:
        """First pass: min and max."""
        if x.size:
            self.low = min(self.low, float(x.min()))
            self.high = max(self.high, float(x.max()))

    def observe_histogram(self, x: np.ndarray) -> None:
        """Second pass (the range known): the histogram of the nonzero |x| over [0, amax] in HISTOGRAM_BINS
        bins. Exact zeros (half of a ReLU's output) are left out: the grid holds 0 exactly, and as a spike
        in the first bin they would make the KL search favour a grid fine enough to resolve that bin."""
        if self.histogram is None:
            self.histogram = np.zeros(HISTOGRAM_BINS, np.int64)
        top = self.amax if self.amax > 0 else 1.0
        magnitudes = np.abs(x[x != 0])
        counts, _ = np.histogram(magnitudes, bins=HISTOGRAM_BINS, range=(0.0, top))
        self.histogram += counts

    @property
    def bin_width(self) -> float:
        return (self.amax if self.amax > 0 else 1.0) / HISTOGRAM_BINS


def threshold(stats: ActivationStats, method: str, percentile: float = 99.99) -> float:
    """The clipping threshold on |x| that `method` picks (see the module's docstring)."""
    if method == "minmax" or stats.amax == 0:
        return stats.amax
    if stats.histogram is None:
        raise ValueError(f"method {method!r} needs the histogram pass")
    if method == "percentile":
        return percentile_threshold(stats.histogram, stats.bin_width, percentile)
    levels = 256 if not stats.signed else 128  # grid steps on [0, t]: 255 over [0, t], 255 over [-t, t]
    if method == "kl":
        return kl_threshold(stats.histogram, stats.bin_width, levels)
    if method == "mse":
        return mse_threshold(stats.histogram, stats.bin_width, levels)
    raise ValueError(f"unknown calibration method {method!r}; expected one of {', '.join(METHODS)}")


def clip_range(stats: ActivationStats, t: float) -> tuple[float, float]:
    """[max(min, -t), min(max, t)] widened to hold 0."""
    return min(max(stats.low, -t), 0.0), max(min(stats.high, t), 0.0)


def percentile_threshold(histogram: np.ndarray, bin_width: float, percentile: float) -> float:
    """The value below which `percentile` % of |x| lies, interpolated linearly inside its bin."""
    cumulative = np.cumsum(histogram, dtype=np.float64)
    target = cumulative[-1] * percentile / 100.0
    i = int(np.searchsorted(cumulative, target))
    i = min(i, len(histogram) - 1)
    before = cumulative[i - 1] if i else 0.0
    inside = (target - before) / histogram[i] if histogram[i] else 1.0
    return float((i + min(max(inside, 0.0), 1.0)) * bin_width)


def kl_threshold(histogram: np.ndarray, bin_width: float, levels: int) -> float:
    """TensorRT's entropy calibration: for each candidate i >= levels (bins kept), the reference P is
    the first i bins with everything above folded into bin i-1; Q merges those i bins into `levels`
    groups and spreads each group's count evenly over its non-empty bins. The threshold is the
    upper edge of the i minimizing KL(P || Q)."""
    hist = histogram.astype(np.float64)
    nbins = len(hist)
    if nbins <= levels:
        return nbins * bin_width
    tail = np.cumsum(hist[::-1])[::-1]  # tail[i] = sum(hist[i:])
    best, best_i = np.inf, nbins
    for i in range(levels, nbins + 1):
        p = hist[:i].copy()
        if i < nbins:
            p[i - 1] += tail[i]
        group = np.arange(i) * levels // i  # the quantized level each kept bin falls into
        nonzero = hist[:i] != 0
        group_sum = np.bincount(group, weights=hist[:i], minlength=levels)
        group_count = np.bincount(group, weights=nonzero.astype(np.float64), minlength=levels)
        q = np.where(nonzero, group_sum[group] / np.maximum(group_count[group], 1.0), 0.0)
        divergence = _kl(p, q)
        if divergence < best:
            best, best_i = divergence, i
    return float(best_i * bin_width)


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    """KL(P || Q) of two unnormalized histograms; a bin where P has mass and Q none counts as infinite."""
    p_total, q_total = p.sum(), q.sum()
    if p_total == 0 or q_total == 0:
        return np.inf
    mask = p > 0
    if np.any(q[mask] == 0):
        return np.inf
    pn, qn = p[mask] / p_total, q[mask] / q_total
    return float(np.sum(pn * np.log(pn / qn)))


def mse_threshold(histogram: np.ndarray, bin_width: float, levels: int, candidates: int = 256) -> float:
    """The t among `candidates` evenly spaced ones in (0, amax] minimizing the expected squared error
    of |x| (bin centres, weighted by count) rounded to a grid of `levels` steps on [0, t] and clipped at t."""
    centers = (np.arange(len(histogram)) + 0.5) * bin_width
    weights = histogram.astype(np.float64)
    top = len(histogram) * bin_width
    best, best_t = np.inf, top
    for t in top * np.arange(1, candidates + 1) / candidates:
        step = t / (levels - 1)
        rounded = np.minimum(np.rint(centers / step), levels - 1) * step
        error = float(np.dot(weights, (centers - rounded) ** 2))
        if error < best:
            best, best_t = error, float(t)
    return best_t
