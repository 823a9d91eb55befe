"""ONNX Resize (opset 10 and 11+) and Upsample. Each resized axis gets an (out, in)
interpolation matrix built with numpy at trace time (nearest, linear, cubic; every coordinate
transformation mode, `exclude_outside`, `tf_crop_and_resize`, `keep_aspect_ratio_policy`, `antialias`
(the filter stretched by 1/scale when downsampling, as ONNX's reference does it)), applied
as a gather (nearest) or a matmul. Scales, sizes and roi must be known at trace time."""
from __future__ import annotations

import math

import numpy as np

from ... import dtypes as dt
from ...frontend.functions import matmul, where
from ...frontend.tensor import apply, as_tensor
from .helpers import normalize_axis
from .registry import converter


def _source_coordinates(mode, out_size, in_size, scale, roi_start, roi_end):
    x = np.arange(out_size, dtype=np.float64)
    length = in_size * scale  # ONNX uses the unrounded resized length in the transforms
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_size / length
        center = in_size / 2
        return center * (1 - adjustment) + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if length > 1 else np.zeros_like(x)
    if mode == "align_corners":
        return x * (in_size - 1) / (length - 1) if length > 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_crop_and_resize":
        if length > 1:
            return roi_start * (in_size - 1) + x * (roi_end - roi_start) * (in_size - 1) / (length - 1)
        return np.full_like(x, 0.5 * (roi_start + roi_end) * (in_size - 1))
    raise ValueError(f"coordinate_transformation_mode {mode!r} is not supported")


def _nearest(coords, mode):
    if mode == "round_prefer_ceil":
        return np.floor(coords + 0.5)
    if mode == "floor":
        return np.floor(coords)
    if mode == "ceil":
        return np.ceil(coords)
    return np.ceil(coords - 0.5)  # round_prefer_floor


def _cubic_weights(t, a):
    def k(s):
        s = np.abs(s)
        return np.where(s <= 1, ((a + 2) * s - (a + 3)) * s * s + 1,
                        np.where(s < 2, ((a * s - 5 * a) * s + 8 * a) * s - 4 * a, 0.0))
    return [k(t + 1), k(t), k(1 - t), k(2 - t)]


def _antialias_taps(mode, ratio, scale, a):
    """ONNX's antialiased filter taps around a source position (ratio in (0, 1] past its floor): the
    linear (triangle) or cubic kernel stretched by 1/scale when downsampling, normalized to sum 1."""
    scale = min(scale, 1.0)
    if mode == "linear":
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, 2 - start) - ratio) * scale
        taps = np.clip(1 - np.abs(args), 0, 1)
    else:
        start = int(np.floor(-2 / scale) + 1)
        args = np.abs(scale * (np.arange(start, 2 - start) - ratio))
        taps = np.where(args <= 1, ((a + 2) * args - (a + 3)) * args * args + 1,
                        np.where(args < 2, ((a * args - 5 * a) * args + 8 * a) * args - 4 * a, 0.0))
    return taps / taps.sum()


def _antialias_row(mode, coord, in_size, scale, attrs):
    """One output's (input positions, weights) with antialias=1, as ONNX's reference selects them: the
    len(taps) positions nearest the source coordinate in the edge-padded axis (ties to the lower one)."""
    ratio = 1.0 if float(coord).is_integer() else coord - np.floor(coord)
    taps = _antialias_taps(mode, ratio, scale, attrs.get("cubic_coeff_a", -0.75))
    n = len(taps)
    pad = int(np.ceil(n / 2))
    x = coord + pad
    candidates = [i for i in range(int(np.floor(x)) - n, int(np.floor(x)) + n + 2) if 0 <= i < in_size + 2 * pad]
    chosen = np.array(sorted(sorted(candidates, key=lambda i: (abs(x - i), i))[:n])) - pad
    if attrs.get("exclude_outside", 0):
        taps = np.where((chosen >= 0) & (chosen < in_size), taps, 0.0)
        taps = taps / taps.sum()
    return np.clip(chosen, 0, in_size - 1), taps  # the padding repeats the edge


def _resize_matrix(mode, coord_mode, nearest_mode, in_size, out_size, scale, roi, attrs):
    """The (out, in) interpolation matrix of one axis and the positions reading the extrapolation value."""
    coords = _source_coordinates(coord_mode, out_size, in_size, scale, *roi)
    outside = (coords < 0) | (coords > in_size - 1) if coord_mode == "tf_crop_and_resize" else \
        np.zeros(out_size, dtype=bool)
    m = np.zeros((out_size, in_size))
    rows = np.arange(out_size)
    if attrs.get("antialias", 0) and mode in ("linear", "cubic"):
        for row, coord in enumerate(coords):
            positions, weights = _antialias_row(mode, coord, in_size, scale, attrs)
            np.add.at(m, (np.full(len(positions), row), positions), weights)
    elif mode == "nearest":
        idx = np.clip(_nearest(coords, nearest_mode).astype(np.int64), 0, in_size - 1)
        m[rows, idx] = 1.0
    elif mode == "linear":
        c = np.clip(coords, 0, in_size - 1)
        lo = np.floor(c).astype(np.int64)
        hi = np.minimum(lo + 1, in_size - 1)
        w = c - lo
        np.add.at(m, (rows, lo), 1 - w)
        np.add.at(m, (rows, hi), w)
    elif mode == "cubic":
        base = np.floor(coords).astype(np.int64)
        t = coords - base
        weights = _cubic_weights(t, attrs.get("cubic_coeff_a", -0.75))
        taps = [base - 1, base, base + 1, base + 2]
        if attrs.get("exclude_outside", 0):
            inside = [(p >= 0) & (p < in_size) for p in taps]
            weights = [wt * ok for wt, ok in zip(weights, inside)]
            total = sum(weights)
            weights = [wt / np.where(total == 0, 1, total) for wt in weights]
        for p, wt in zip(taps, weights):
            np.add.at(m, (rows, np.clip(p, 0, in_size - 1)), wt)
    else:
        raise ValueError(f"Resize mode {mode!r} is not supported")
    return m, outside


def _resize(ctx, x, scales, sizes, roi, attrs, axes=None):
    mode = attrs.get("mode", "nearest")
    coord_mode = attrs.get("coordinate_transformation_mode", "half_pixel")
    nearest_mode = attrs.get("nearest_mode", "round_prefer_floor")
    axes = list(range(x.ndim)) if axes is None else [normalize_axis(a, x.ndim) for a in axes]
    full_scales = [1.0] * x.ndim
    full_sizes = list(x.shape)
    if sizes is not None:
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        ratios = [sizes[i] / x.shape[a] for i, a in enumerate(axes)]
        if policy in ("not_larger", "not_smaller"):
            r = min(ratios) if policy == "not_larger" else max(ratios)
            ratios = [r] * len(axes)
            sizes = [int(math.floor(r * x.shape[a] + 0.5)) for a in axes]
        for i, a in enumerate(axes):
            full_scales[a], full_sizes[a] = ratios[i], int(sizes[i])
    else:
        for i, a in enumerate(axes):
            full_scales[a] = float(scales[i])
            full_sizes[a] = int(math.floor(x.shape[a] * float(scales[i])))
    rois = [(0.0, 1.0)] * x.ndim
    if roi is not None and len(roi) and coord_mode == "tf_crop_and_resize":
        k = len(axes)
        for i, a in enumerate(axes):
            rois[a] = (float(roi[i]), float(roi[i + k]))
    extrapolation = attrs.get("extrapolation_value", 0.0)
    y = x if x.dtype.is_floating else x.to(dt.float32)
    for a in range(x.ndim):
        if full_sizes[a] == x.shape[a] and full_scales[a] == 1.0 and coord_mode != "tf_crop_and_resize":
            continue
        m, outside = _resize_matrix(mode, coord_mode, nearest_mode, x.shape[a], full_sizes[a], full_scales[a],
                                    rois[a], attrs)
        moved = y.transpose(a, -1)
        if mode == "nearest":
            index = as_tensor(np.argmax(m, axis=1).astype(np.int64))
            out = apply("take", [moved, index], axis=moved.ndim - 1)
        else:
            out = matmul(moved, as_tensor(m.T, y.dtype))
        if outside.any():
            out = where(as_tensor(outside), extrapolation, out)
        y = out.transpose(a, -1)
    return y.to(x.dtype) if y.dtype != x.dtype else y


@converter("Resize", values=lambda opset: {1, 2, 3} if opset >= 11 else {1})
def _resize_op(ctx, inputs, attrs):
    x = inputs[0]
    if ctx.opset < 11:
        scales = ctx.values(inputs[1], "scales")
        return _resize(ctx, x, list(scales), None, None, dict(attrs, coordinate_transformation_mode="asymmetric",
                                                              nearest_mode="floor"))
    roi = ctx.values(inputs[1], "roi") if len(inputs) > 1 else None
    scales = ctx.values(inputs[2], "scales") if len(inputs) > 2 else None
    sizes = ctx.ints(inputs[3], "sizes") if len(inputs) > 3 else None
    if scales is not None and scales.size == 0:
        scales = None
    if sizes is not None and not sizes:
        sizes = None
    return _resize(ctx, x, None if scales is None else list(scales), sizes,
                   None if roi is None else list(roi.reshape(-1)), attrs, attrs.get("axes"))


@converter("Upsample", values=lambda opset: {1} if opset >= 9 else set())
def _upsample(ctx, inputs, attrs):
    x = inputs[0]
    scales = attrs.get("scales") if ctx.opset < 9 else list(ctx.values(inputs[1], "scales"))
    mode = attrs.get("mode", "nearest")
    if mode == "bilinear":
        mode = "linear"
    return _resize(ctx, x, scales, None, None, dict(mode=mode, coordinate_transformation_mode="asymmetric",
                                                    nearest_mode="floor"))
