"""Scales and zero points: affine 8-bit activations, symmetric int8 weights."""
from __future__ import annotations

import numpy as np

ACTIVATION_RANGES = {"uint8": (0, 255), "int8": (-128, 127)}
WEIGHT_MAX = 127  # symmetric int8 weights use [-127, 127]: the grid stays symmetric about 0
WEIGHT_BITS = range(2, 9)  # tk.quantize's weight_bits: symmetric grids of 2 ** (bits - 1) - 1 steps a side


def affine_params(low: float, high: float, dtype: str) -> tuple[float, int]:
    """(scale, zero point) mapping [low, high] (which holds 0) onto `dtype`'s 256 levels."""
    qmin, qmax = ACTIVATION_RANGES[dtype]
    span = float(high) - float(low)
    scale = float(np.float32(span / (qmax - qmin))) if span > 0 else 1.0
    zero = int(np.clip(np.rint(qmin - low / scale), qmin, qmax))
    return scale, zero


def symmetric_weights(weight: np.ndarray, channel_axis: int | None, bits: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """(int8 values, scales) of weight quantized symmetrically: one scale per index of `channel_axis`
    (None: one in all), max |w| / (2 ** (bits - 1) - 1), so the largest weight of each channel maps to
    +-127 (8 bits) or +-63 (7 bits, what an AVX2 CPU sums without widening: kernels/templates/int8_avx2.py)."""
    top = 2 ** (bits - 1) - 1
    w = np.asarray(weight, np.float64)
    if channel_axis is None:
        amax = np.abs(w).max(initial=0.0)
        scale = np.array(amax / top if amax > 0 else 1.0, np.float32)
        shaped = scale
    else:
        others = tuple(a for a in range(w.ndim) if a != channel_axis)
        amax = np.abs(w).max(axis=others, initial=0.0)
        scale = np.where(amax > 0, amax / top, 1.0).astype(np.float32)
        shaped = scale.reshape([-1 if a == channel_axis else 1 for a in range(w.ndim)])
    q = np.clip(np.rint(w / shaped.astype(np.float64)), -top, top).astype(np.int8)
    return q, scale
