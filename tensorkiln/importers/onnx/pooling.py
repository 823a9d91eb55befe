"""ONNX pooling: MaxPool (with its Indices output, `storage_order` 0 and 1), AveragePool,
LpPool, GlobalAveragePool, GlobalMaxPool, GlobalLpPool, and MaxUnpool.

- The pools are N-d: pad, the `window` primitive, then a reduction over the window axes, with
  ONNX's ceil-mode rule, dilations, `auto_pad` and `count_include_pad`.
- MaxUnpool: the indices come from MaxPool, so each value goes back to a
  position inside its own pooling window. For each kernel offset the values
  whose index equals that window position are placed on the strided lattice
  of the output (zero insertion, as in ConvTranspose); where overlapping
  windows hit one position the value written last in onnx's loop order
  wins. Memory is about (kernel cells) x (output size), not a one-hot of
  (pooled size) x (output size). An index outside its value's window or
  (batch, channel) plane, which MaxPool never produces, is ignored.
"""
from __future__ import annotations

import itertools

import numpy as np

from ... import dtypes as dt
from ...errors import ShapeError
from ...frontend.functions import where
from ...frontend.tensor import Tensor, apply, as_tensor
from ...frontend.trace import composite_scope
from ...nn.functional import run_time_window_counts
from ...shapes import has_symbols
from .conv import conv_pads
from .helpers import filled, prod
from .registry import converter


def _pool_geometry(x, attrs, global_pool=False):
    n = x.ndim - 2
    spatial = list(x.shape[2:])
    if global_pool:
        return spatial, [1] * n, [1] * n, [(0, 0)] * n, [1] * n
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides") or [1] * n)
    dilations = list(attrs.get("dilations") or [1] * n)
    auto = attrs.get("auto_pad", "NOTSET")
    ceil_mode = attrs.get("ceil_mode", 0)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = conv_pads(None, attrs, spatial, kernel, strides, dilations)
        outs = [-(-s // st) for s, st in zip(spatial, strides)]
    else:
        if auto == "VALID":
            pads = [(0, 0)] * n
        else:
            p = attrs.get("pads") or [0] * (2 * n)
            pads = [(p[i], p[i + n]) for i in range(n)]
        outs = []
        for size, k, s, d, (lo, hi) in zip(spatial, kernel, strides, dilations, pads):
            span = size + lo + hi - d * (k - 1) - 1
            if ceil_mode:
                o = -(-span // s) + 1
                if (o - 1) * s >= size + lo:
                    o -= 1
            else:
                o = span // s + 1
            outs.append(o)
    return kernel, strides, dilations, pads, outs


def _windows(x, value, kernel, strides, dilations, pads, outs):
    extra = [max(0, (o - 1) * s + (k - 1) * d + 1 - (size + lo + hi))
             for o, s, k, d, size, (lo, hi) in zip(outs, strides, kernel, dilations, x.shape[2:], pads)]
    full = ((0, 0), (0, 0)) + tuple((lo, hi + e) for (lo, hi), e in zip(pads, extra))
    if any(a or b for a, b in full):
        x = apply("pad", [x], pads=full, value=value)
    w = apply("window", [x], kernel=tuple(kernel), stride=tuple(strides), dilation=tuple(dilations))
    # the window op yields as many positions as fit; keep the first `outs`
    if tuple(w.shape[2:2 + len(outs)]) != tuple(outs):
        w = w[(slice(None), slice(None)) + tuple(slice(0, o) for o in outs)]
    return w


def _window_counts(x, kernel, strides, dilations, pads, outs, include_pad):
    """Number of cells each window averages (per output position), as a constant array."""
    counts = None
    for size, k, s, d, (lo, hi), o in zip(x.shape[2:], kernel, strides, dilations, pads, outs):
        pos = (np.arange(o) * s - lo).reshape(-1, 1) + np.arange(k) * d
        low, high = (-lo, size + hi) if include_pad else (0, size)
        c = ((pos >= low) & (pos < high)).sum(axis=1).astype(np.float64)
        counts = c if counts is None else np.multiply.outer(counts, c)
    return counts


@converter("MaxPool")
def _max_pool(ctx, inputs, attrs):
    x = inputs[0]
    kernel, strides, dilations, pads, outs = _pool_geometry(x, attrs)
    n = len(kernel)
    with composite_scope("max_pool"):
        w = _windows(x, float(dt.finfo_min(x.dtype)) if x.dtype.is_floating else int(dt.finfo_min(x.dtype)),
                     kernel, strides, dilations, pads, outs)
        axes = tuple(range(-n, 0))
        values = w.amax(axes)
        if ctx.n_outputs < 2 or not ctx.outputs_used[1]:
            return values
        flat = w.reshape(tuple(w.shape[:2 + n]) + (prod(kernel),)).argmax(-1)
        spatial = list(x.shape[2:])
        coords = []
        rem = flat
        for i in range(n):  # kernel offsets per axis, then input coordinates
            inner = prod(kernel[i + 1:])
            off = rem // inner
            rem = rem % inner
            base = (np.arange(outs[i]) * strides[i] - pads[i][0]).reshape([-1 if j == i else 1 for j in range(n)])
            coords.append(as_tensor(base.astype(np.int64)) + off * dilations[i])
        linear = None
        order = list(range(n)) if not attrs.get("storage_order", 0) else list(reversed(range(n)))
        for i in order:
            linear = coords[i] if linear is None else linear * spatial[i] + coords[i]
        nc = as_tensor((np.arange(x.shape[0] * x.shape[1], dtype=np.int64) * prod(spatial))
                       .reshape((x.shape[0], x.shape[1]) + (1,) * n))
    return [values, linear + nc]


@converter("AveragePool")
def _average_pool(ctx, inputs, attrs):
    x = inputs[0]
    kernel, strides, dilations, pads, outs = _pool_geometry(x, attrs)
    n = len(kernel)
    with composite_scope("avg_pool"):
        w = _windows(x, 0.0, kernel, strides, dilations, pads, outs)
        total = w.sum(tuple(range(-n, 0)))
        include_pad = bool(attrs.get("count_include_pad", 0))
        if has_symbols(outs):  # run-time image sizes: the counts computed per call
            return total / run_time_window_counts(outs, x.shape[2:], kernel, strides, dilations, pads, include_pad,
                                                  x.dtype)
        counts = _window_counts(x, kernel, strides, dilations, pads, outs, include_pad)
        return total / as_tensor(counts, x.dtype)


@converter("LpPool")
def _lp_pool(ctx, inputs, attrs):
    x = inputs[0]
    p = attrs.get("p", 2)
    kernel, strides, dilations, pads, outs = _pool_geometry(x, attrs)
    w = _windows(x, 0.0, kernel, strides, dilations, pads, outs)
    return (w.abs() ** float(p)).sum(tuple(range(-len(kernel), 0))) ** (1.0 / p)


@converter("GlobalAveragePool")
def _global_average_pool(ctx, inputs, attrs):
    x = inputs[0]
    return x.mean(tuple(range(2, x.ndim)), keepdim=True)


@converter("GlobalMaxPool")
def _global_max_pool(ctx, inputs, attrs):
    x = inputs[0]
    return x.amax(tuple(range(2, x.ndim)), keepdim=True)


@converter("GlobalLpPool")
def _global_lp_pool(ctx, inputs, attrs):
    x, p = inputs[0], attrs.get("p", 2)
    return (x.abs() ** float(p)).sum(tuple(range(2, x.ndim)), keepdim=True) ** (1.0 / p)


def _place(t: Tensor, axis: int, start: int, step: int, size: int, fill) -> Tensor:
    """A tensor of `size` along `axis` holding t's element i at start + i*step (those inside) and
    `fill` elsewhere."""
    if step > 1:  # interleave step-1 fills after each element
        shape = tuple(t.shape)
        t = t.unsqueeze(axis + 1)
        t = apply("pad", [t], pads=tuple((0, step - 1) if d == axis + 1 else (0, 0) for d in range(t.ndim)),
                  value=fill)
        t = t.reshape(shape[:axis] + (shape[axis] * step,) + shape[axis + 1:])
    length = t.shape[axis]
    first, stop = max(0, -start), min(length, size - start)  # the part that lands inside [0, size)
    if stop <= first:
        shape = list(t.shape)
        shape[axis] = size
        return filled(shape, fill, t.dtype)
    t = t.narrow(axis, first, stop - first)
    pads = tuple((start + first, size - start - stop) if d == axis else (0, 0) for d in range(t.ndim))
    return apply("pad", [t], pads=pads, value=fill) if any(pads[axis]) else t


def _unpool_geometry(x: Tensor, attrs: dict) -> tuple[list[int], list[int], list[int], list[int]]:
    """kernel, strides, leading pads, and the output's spatial shape as onnx infers it."""
    n = x.ndim - 2
    if "kernel_shape" not in attrs:
        raise ShapeError("MaxUnpool needs the kernel_shape attribute")
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides") or [1] * n)
    pads = list(attrs.get("pads") or [0] * (2 * n))
    if len(kernel) != n or len(strides) != n or len(pads) != 2 * n:
        raise ShapeError(f"kernel_shape {kernel}, strides {strides} and pads {pads} do not fit "
                         f"an input of shape {list(x.shape)}")
    sizes = [(o - 1) * s - (pads[i] + pads[i + n]) + k
             for i, (o, s, k) in enumerate(zip(x.shape[2:], strides, kernel))]
    return kernel, strides, pads[:n], sizes


def max_unpool(x: Tensor, index: Tensor, kernel, strides, pads, sizes) -> Tensor:
    """MaxUnpool to spatial shape `sizes` (indices flat over (N, C, *sizes), as MaxPool's)."""
    batch, channels, pooled = x.shape[0], x.shape[1], tuple(x.shape[2:])
    n, plane = len(kernel), prod(sizes)
    lead = (batch, channels)
    # each index relative to its own (batch, channel) plane
    offsets = np.arange(batch * channels, dtype=np.int64).reshape(lead + (1,) * n) * plane
    target = index.to(dt.int64) - as_tensor(offsets)
    # 1 + the position of each value in its plane: orders the writes (the reference's loop order)
    order = as_tensor(np.arange(1, prod(pooled) + 1, dtype=np.int64).reshape(pooled))
    grids = np.meshgrid(*(np.arange(o) for o in pooled), indexing="ij")
    best = None
    for offset in itertools.product(*(range(k) for k in kernel)):
        coords = [g * s - p + k for g, s, p, k in zip(grids, strides, pads, offset)]
        inside = np.logical_and.reduce([(c >= 0) & (c < size) for c, size in zip(coords, sizes)])
        flat = np.ravel_multi_index([np.clip(c, 0, size - 1) for c, size in zip(coords, sizes)], sizes)
        candidate = as_tensor(np.where(inside, flat, -1).astype(np.int64))
        key = where(target == candidate, order, filled((), 0, dt.int64))
        for d in range(n):
            key = _place(key, 2 + d, offset[d] - pads[d], strides[d], sizes[d], 0)
        best = key if best is None else best.maximum(key)
    source = (best - 1).maximum(filled((), 0, dt.int64)).reshape(lead + (plane,))
    values = x.reshape(lead + (prod(pooled),)).gather(2, source).reshape(lead + tuple(sizes))
    return where(best > 0, values, filled((), 0, x.dtype))


@converter("MaxUnpool", values={2})
def _max_unpool(ctx, inputs, attrs):
    x, index = inputs[0], inputs[1]
    shape = ctx.ints(inputs[2], "output_shape") if len(inputs) > 2 else None
    kernel, strides, pads, sizes = _unpool_geometry(x, attrs)
    if tuple(index.shape) != tuple(x.shape):
        raise ShapeError(f"indices {list(index.shape)} must have the shape of X {list(x.shape)}")
    if any(s <= 0 for s in sizes):
        raise ShapeError(f"the unpooled shape {sizes} of X {list(x.shape)} is empty")
    if shape is not None and (len(shape) != x.ndim or shape[:2] != list(x.shape[:2])
                              or any(s < i for s, i in zip(shape[2:], sizes))):
        raise ShapeError(f"output_shape {shape} must keep X's batch and channels {list(x.shape[:2])} and be at "
                         f"least the unpooled size {sizes}")
    with composite_scope("max_unpool"):
        y = max_unpool(x, index, kernel, strides, pads, sizes) if x.numel() else \
            filled(tuple(x.shape[:2]) + tuple(sizes), 0, x.dtype)
        if shape is not None:  # onnx's reference places the unpooled tensor at the start of the larger one
            pads_out = tuple((0, s - d) for s, d in zip(shape, y.shape))
            if any(hi for _, hi in pads_out):
                y = apply("pad", [y], pads=pads_out, value=0)
        return y
