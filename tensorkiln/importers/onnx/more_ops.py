"""ONNX CumProd, LpNormalization, ReverseSequence and MaxUnpool as compositions of front-end ops.

- CumProd: a log-step scan (Hillis-Steele): log2(n) rounds of multiplying by
  a copy shifted by 1, 2, 4, ... positions, padded with ones. O(n log n)
  work and no n x n intermediate (CumSum's triangular matmul has no product
  counterpart).
- ReverseSequence: a gather along the time axis with the source position
  `len - 1 - t` below each sequence's length and `t` beyond it, computed
  from `sequence_lens` with tensor ops, so lengths known at compile time fold
  to a constant index and lengths given at runtime work too.
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
from .ops import _axis, _full, _prod, converter


# ---- CumProd ----------------------------------------------------------------------------------

def _shifted(x: Tensor, axis: int, shift: int, fill) -> Tensor:
    """x moved `shift` positions forward along `axis`, the first `shift` positions set to `fill`."""
    n = x.shape[axis]
    shift = min(shift, n)
    kept = x.narrow(axis, 0, n - shift)
    pads = tuple((shift, 0) if d == axis else (0, 0) for d in range(x.ndim))
    return apply("pad", [kept], pads=pads, value=fill)


def cumprod(x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False) -> Tensor:
    """Cumulative product along `axis` by a log-step scan."""
    if reverse:
        x = x.flip(axis)
    n = x.shape[axis]
    if exclusive and n:
        x = _shifted(x, axis, 1, 1)
    step = 1
    while step < n:  # after this round each position holds the product of the 2*step inputs ending there
        x = x * _shifted(x, axis, step, 1)
        step *= 2
    return x.flip(axis) if reverse else x


@converter("CumProd", values={1})
def _cumprod(ctx, inputs, attrs):
    x = inputs[0]
    axis = _axis(ctx.ints(inputs[1], "axis")[0], x.ndim)
    with composite_scope("cumprod"):
        return cumprod(x, axis, bool(attrs.get("exclusive", 0)), bool(attrs.get("reverse", 0)))


# ---- LpNormalization ----------------------------------------------------------------------------

@converter("LpNormalization")
def _lp_normalization(ctx, inputs, attrs):
    x = inputs[0]
    axis = _axis(attrs.get("axis", -1), x.ndim)
    p = attrs.get("p", 2)
    if p not in (1, 2):
        raise ctx.unsupported(f"p={p} (the operator defines p = 1 or 2)")
    with composite_scope("lp_normalization"):
        norm = x.abs().sum(axis, keepdim=True) if p == 1 else (x * x).sum(axis, keepdim=True).sqrt()
        zero = norm == 0  # an all-zero slice normalizes to zeros, not 0/0 (opset 22's rule, harmless before)
        return where(zero, _full((), 0, x.dtype), x / where(zero, _full((), 1, x.dtype), norm))


# ---- ReverseSequence ----------------------------------------------------------------------------

@converter("ReverseSequence")
def _reverse_sequence(ctx, inputs, attrs):
    x, lengths = inputs
    batch_axis, time_axis = attrs.get("batch_axis", 1), attrs.get("time_axis", 0)
    if x.ndim < 2 or {batch_axis, time_axis} != {0, 1}:
        raise ShapeError(f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1 "
                         f"(input {list(x.shape)})")
    batch, steps = x.shape[batch_axis], x.shape[time_axis]
    if tuple(lengths.shape) != (batch,):
        raise ShapeError(f"sequence_lens {list(lengths.shape)} must have shape [{batch}] (input {list(x.shape)})")
    if not lengths.is_traced and lengths.numel() and lengths.numpy().min() < 0:
        raise ShapeError(f"sequence_lens {lengths.numpy().tolist()} must not be negative")
    with composite_scope("reverse_sequence"):
        # a length beyond the time axis reverses all of it (as onnx's reference slices); a negative
        # runtime length reverses nothing; either way the gather below stays in range
        n = lengths.to(dt.int64).maximum(_full((), 0, dt.int64)).minimum(_full((), steps, dt.int64))
        n = n.reshape([batch if d == batch_axis else 1 for d in range(x.ndim)])
        t = as_tensor(np.arange(steps, dtype=np.int64).reshape([steps if d == time_axis else 1
                                                                 for d in range(x.ndim)]))
        source = where(t < n, n - 1 - t, t)
        return x.gather(time_axis, source.expand(tuple(x.shape)))


# ---- MaxUnpool ----------------------------------------------------------------------------------

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
        return _full(shape, fill, t.dtype)
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
    n, plane = len(kernel), _prod(sizes)
    lead = (batch, channels)
    # each index relative to its own (batch, channel) plane
    offsets = np.arange(batch * channels, dtype=np.int64).reshape(lead + (1,) * n) * plane
    target = index.to(dt.int64) - as_tensor(offsets)
    # 1 + the position of each value in its plane: orders the writes (the reference's loop order)
    order = as_tensor(np.arange(1, _prod(pooled) + 1, dtype=np.int64).reshape(pooled))
    grids = np.meshgrid(*(np.arange(o) for o in pooled), indexing="ij")
    best = None
    for offset in itertools.product(*(range(k) for k in kernel)):
        coords = [g * s - p + k for g, s, p, k in zip(grids, strides, pads, offset)]
        inside = np.logical_and.reduce([(c >= 0) & (c < size) for c, size in zip(coords, sizes)])
        flat = np.ravel_multi_index([np.clip(c, 0, size - 1) for c, size in zip(coords, sizes)], sizes)
        candidate = as_tensor(np.where(inside, flat, -1).astype(np.int64))
        key = where(target == candidate, order, _full((), 0, dt.int64))
        for d in range(n):
            key = _place(key, 2 + d, offset[d] - pads[d], strides[d], sizes[d], 0)
        best = key if best is None else best.maximum(key)
    source = (best - 1).maximum(_full((), 0, dt.int64)).reshape(lead + (plane,))
    values = x.reshape(lead + (_prod(pooled),)).gather(2, source).reshape(lead + tuple(sizes))
    return where(best > 0, values, _full((), 0, x.dtype))


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
            _full(tuple(x.shape[:2]) + tuple(sizes), 0, x.dtype)
        if shape is not None:  # onnx's reference places the unpooled tensor at the start of the larger one
            pads_out = tuple((0, s - d) for s, d in zip(shape, y.shape))
            if any(hi for _, hi in pads_out):
                y = apply("pad", [y], pads=pads_out, value=0)
        return y
