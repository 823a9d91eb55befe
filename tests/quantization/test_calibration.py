"""Calibration methods (quantization/calibration.py) and scales (quantization/params.py) against
references computed by hand, on synthetic distributions."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensorkiln.quantization.calibration import (HISTOGRAM_BINS, ActivationStats, clip_range, kl_threshold,
                                                 mse_threshold, percentile_threshold, threshold)
from tensorkiln.quantization.params import affine_params, symmetric_weights


def observed(*batches: np.ndarray, histogram: bool = True) -> ActivationStats:
    stats = ActivationStats()
    for batch in batches:
        stats.observe_range(batch)
    if histogram:
        for batch in batches:
            stats.observe_histogram(batch)
    return stats


def test_minmax_is_the_observed_range(rng):
    batches = [rng.normal(size=(7, 13)).astype(np.float32) * (i + 1) for i in range(3)]
    stats = observed(*batches)
    everything = np.concatenate([b.ravel() for b in batches])
    assert threshold(stats, "minmax") == pytest.approx(np.abs(everything).max())
    assert clip_range(stats, threshold(stats, "minmax")) == pytest.approx((everything.min(), everything.max()))
    relu = observed(np.maximum(batches[0], 0) + 0.5)  # non-negative, minimum above 0: the range still holds 0
    assert clip_range(relu, threshold(relu, "minmax")) == pytest.approx((0.0, float(relu.high)))


def test_percentile_matches_numpy_within_a_bin(rng):
    x = rng.exponential(size=200_003).astype(np.float32)
    stats = observed(x)
    for p in (50.0, 99.0, 99.99):
        assert threshold(stats, "percentile", p) == pytest.approx(np.percentile(x, p), abs=stats.bin_width)


def kl_reference(hist: list[float], levels: int) -> int:
    """TensorRT's entropy calibration written out with plain loops: the number of bins kept."""
    best, best_i = math.inf, len(hist)
    for i in range(levels, len(hist) + 1):
        p = hist[:i]
        p[-1] += sum(hist[i:])
        q = [0.0] * i
        for level in range(levels):
            members = [j for j in range(i) if j * levels // i == level]
            nonzero = [j for j in members if hist[j] != 0]
            for j in nonzero:
                q[j] = sum(hist[j] for j in members) / len(nonzero)
        ps, qs = sum(p), sum(q)
        if any(p[j] > 0 and q[j] == 0 for j in range(i)):
            continue
        divergence = sum(p[j] / ps * math.log((p[j] / ps) / (q[j] / qs)) for j in range(i) if p[j] > 0)
        if divergence < best:
            best, best_i = divergence, i
    return best_i


@pytest.mark.parametrize("seed", range(4))
def test_kl_matches_the_written_out_algorithm(seed):
    rng = np.random.default_rng(seed)
    hist = rng.integers(0, 50, size=37).astype(float)
    hist[rng.integers(0, 37, size=5)] = 0
    hist[-3:] = rng.integers(0, 3, size=3)  # a thin tail
    assert kl_threshold(hist, 0.5, 8) == pytest.approx(kl_reference(list(hist), 8) * 0.5)


def test_kl_clips_a_heavy_tail_and_keeps_a_uniform_range(rng):
    heavy = rng.standard_t(df=2, size=400_000).astype(np.float32)  # rare values far out
    stats = observed(heavy)
    assert threshold(stats, "kl") < 0.2 * stats.amax
    assert np.mean(np.abs(heavy) <= threshold(stats, "kl")) > 0.99
    uniform = observed(rng.uniform(0, 1, size=400_000).astype(np.float32))
    assert threshold(uniform, "kl") > 0.9 * uniform.amax


def mse_reference(samples: np.ndarray, levels: int, candidates: np.ndarray) -> float:
    """The candidate threshold whose grid of `levels` steps on [0, t] rounds |samples| with least squared error."""
    errors = []
    for t in candidates:
        step = t / (levels - 1)
        errors.append(np.sum((samples - np.minimum(np.rint(samples / step), levels - 1) * step) ** 2))
    return float(candidates[int(np.argmin(errors))])


def test_mse_matches_a_direct_search(rng):
    x = np.abs(rng.laplace(size=100_000))
    stats = observed(x)
    t = threshold(stats, "mse")
    candidates = stats.amax * np.arange(1, 257) / 256
    centers = (np.floor(x / stats.bin_width).clip(max=HISTOGRAM_BINS - 1) + 0.5) * stats.bin_width
    assert t == pytest.approx(mse_reference(centers, 256, candidates))
    assert t < stats.amax  # Laplace's tail is clipped
    assert mse_threshold(np.ones(16), 1.0, 256) >= 15.5  # uniform: no centre is clipped


def test_unknown_method_is_named():
    with pytest.raises(ValueError, match="unknown calibration method 'entropy'"):
        threshold(observed(np.arange(5.0)), "entropy")


@pytest.mark.parametrize("low, high, dtype, scale, zero", [
    (0.0, 2.55, "uint8", 0.01, 0), (-1.0, 3.0, "uint8", 4 / 255, 64), (-1.0, 3.0, "int8", 4 / 255, -64),
    (-2.55, 0.0, "uint8", 0.01, 255), (0.0, 2.55, "int8", 0.01, -128), (0.0, 0.0, "uint8", 1.0, 0)])
def test_affine_params(low, high, dtype, scale, zero):
    assert affine_params(low, high, dtype) == (pytest.approx(scale, rel=1e-6), zero)


@pytest.mark.parametrize("shape, axis", [((17, 5), 1), ((4, 3, 3, 3), 0), ((1, 1), 1), ((9, 2), None)])
def test_symmetric_weights_per_channel(rng, shape, axis):
    w = rng.normal(size=shape)
    if axis is not None and shape[axis] > 1:
        w[(slice(None),) * axis + (0,)] = 0.0  # an all-zero channel gets scale 1
    q, scale = symmetric_weights(w, axis)
    assert q.dtype == np.int8 and np.abs(q).max(initial=0) <= 127
    others = tuple(a for a in range(w.ndim) if a != axis) if axis is not None else None
    amax = np.abs(w).max(axis=others)
    np.testing.assert_allclose(scale, np.where(amax > 0, amax / 127, 1.0), rtol=1e-6)
    shaped = scale if axis is None else scale.reshape([-1 if a == axis else 1 for a in range(w.ndim)])
    assert np.all(np.abs(q * shaped.astype(np.float64) - w) <= shaped / 2 + 1e-7)
    assert np.all((np.abs(q).max(axis=others) == 127) | (amax == 0))
