"""ONNX operators that select elements by position: Slice, Gather, GatherElements, GatherND,
OneHot, Trilu and ReverseSequence.

- Slice: clamping, negative indices and negative steps as a Python slice of the tensor.
- GatherND: the index tuples become linear indices into the flattened leading axes (a `take`).
- ReverseSequence: a gather along the time axis with the source position
  `len - 1 - t` below each sequence's length and `t` beyond it, computed
  from `sequence_lens` with tensor ops, so lengths known at compile time fold
  to a constant index and lengths given at runtime work too.
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import ShapeError
from ...frontend.functions import where
from ...frontend.tensor import Tensor, apply, as_tensor
from ...frontend.trace import composite_scope
from .helpers import filled, normalize_axis, prod
from .registry import converter


def slice_tensor(x: Tensor, starts, ends, axes, steps) -> Tensor:
    """ONNX Slice semantics (clamping, negative indices and steps) as x[key]."""
    axes = list(range(len(starts))) if axes is None else [normalize_axis(a, x.ndim) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    key = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        n = x.shape[axis]
        if step == 0:
            raise ShapeError("Slice: step cannot be 0")
        start = start + n if start < 0 else start
        end = end + n if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), n), min(max(end, 0), n)
            key[axis] = slice(start, end, step)
        else:
            start, end = min(max(start, -1), n - 1), min(max(end, -1), n - 1)
            key[axis] = slice(start, None if end < 0 else end, step) if start >= 0 else slice(0, 0)
    return x[tuple(key)]


@converter("Slice", values=lambda opset: {1, 2, 3, 4} if opset >= 10 else set())
def _slice(ctx, inputs, attrs):
    x = inputs[0]
    if ctx.opset < 10:
        return slice_tensor(x, attrs["starts"], attrs["ends"], attrs.get("axes"), None)
    get = lambda i, n: ctx.ints(inputs[i], n) if len(inputs) > i else None  # noqa: E731
    return slice_tensor(x, get(1, "starts"), get(2, "ends"), get(3, "axes"), get(4, "steps"))


@converter("Gather")
def _gather(ctx, inputs, attrs):
    data, index = inputs
    axis = normalize_axis(attrs.get("axis", 0), data.ndim)
    return apply("take", [data, index], axis=axis)


@converter("GatherElements")
def _gather_elements(ctx, inputs, attrs):
    data, index = inputs
    return data.gather(normalize_axis(attrs.get("axis", 0), data.ndim), index)


@converter("GatherND")
def _gather_nd(ctx, inputs, attrs):
    data, index = inputs
    b = attrs.get("batch_dims", 0)
    k = index.shape[-1]
    batch = tuple(data.shape[:b])
    dims = data.shape[b:b + k]
    tail = tuple(data.shape[b + k:])
    nb, nk = prod(batch), prod(dims)
    index = index.to(dt.int64).reshape((nb, -1, k)) if nb else index.to(dt.int64).reshape((0, 0, k))
    linear = None
    for j, size in enumerate(dims):
        i = index[:, :, j]
        i = where(i < 0, i + size, i)
        linear = i if linear is None else linear * size + i
    if linear is None:
        linear = filled(index.shape[:2], 0, dt.int64)
    linear = linear + as_tensor(np.arange(nb, dtype=np.int64).reshape(-1, 1) * nk)
    flat = data.reshape((nb * nk,) + tail)
    out = apply("take", [flat, linear], axis=0)
    return out.reshape(batch + tuple(inputs[1].shape[b:-1]) + tail)


@converter("OneHot", values={1, 2})
def _one_hot(ctx, inputs, attrs):
    index, depth, values = inputs
    depth = int(ctx.values(depth, "depth").reshape(-1)[0])
    axis = attrs.get("axis", -1)
    rank = index.ndim + 1
    axis = normalize_axis(axis, rank)
    index = index.to(dt.int64)
    index = where(index < 0, index + depth, index).unsqueeze(axis)
    positions = as_tensor(np.arange(depth, dtype=np.int64).reshape([-1 if i == axis else 1 for i in range(rank)]))
    off, on = values.reshape(-1)[0], values.reshape(-1)[1]
    return where(positions == index, on, off)


@converter("Trilu", values={1})
def _trilu(ctx, inputs, attrs):
    x = inputs[0]
    k = ctx.ints(inputs[1], "k")[0] if len(inputs) > 1 and inputs[1] is not None else 0
    n, m = x.shape[-2:]
    ones = np.ones((n, m), dtype=bool)
    mask = np.triu(ones, k) if attrs.get("upper", 1) else np.tril(ones, k)
    return where(as_tensor(mask), x, filled((), 0, x.dtype))


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
        n = lengths.to(dt.int64).maximum(filled((), 0, dt.int64)).minimum(filled((), steps, dt.int64))
        n = n.reshape([batch if d == batch_axis else 1 for d in range(x.ndim)])
        t = as_tensor(np.arange(steps, dtype=np.int64).reshape([steps if d == time_axis else 1
                                                                 for d in range(x.ndim)]))
        source = where(t < n, n - 1 - t, t)
        return x.gather(time_axis, source.expand(tuple(x.shape)))
