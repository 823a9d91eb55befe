"""Movement primitives: reshape, permute, expand, slice, pad, concat, take, gather, window.

None of them computes anything: each output element is a copy of one input
element (or the pad value), so the compiler lowers them to index arithmetic.
The front-end normalizes attributes (no -1 in shapes, full-rank slices, ...).
"""
from __future__ import annotations

import itertools

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError
from .gradient import pad_axis, place, slice_axis, sum_to
from .registry import Attrs, MappingType, OpKind, TensorType, register
from ...shapes import prod


def _reshape_infer(types, attrs):
    t, shape = types[0], tuple(attrs["shape"])
    if any(d < 0 for d in shape):
        raise ShapeError(f"negative size in target shape {list(shape)}")
    if prod(shape) != t.size:
        raise ShapeError(f"cannot reshape {t.size} elements to {list(shape)}")
    return TensorType(shape, t.dtype)


def _permute_infer(types, attrs):
    t, perm = types[0], tuple(attrs["perm"])
    if sorted(perm) != list(range(t.ndim)):
        raise ShapeError(f"permutation {list(perm)} does not fit rank {t.ndim}")
    return TensorType(tuple(t.shape[p] for p in perm), t.dtype)


def _expand_infer(types, attrs):
    t, shape = types[0], tuple(attrs["shape"])
    if len(shape) < t.ndim:
        raise ShapeError(f"cannot expand rank {t.ndim} to rank {len(shape)}")
    if any(d < 0 for d in shape):
        raise ShapeError(f"negative size in target shape {list(shape)}")
    for d_in, d_out in zip(t.shape[::-1], shape[::-1]):
        if d_in != 1 and d_in != d_out:
            raise ShapeError(f"cannot expand {list(t.shape)} to {list(shape)}")
    return TensorType(shape, t.dtype)


def slice_length(start: int, stop: int, step: int) -> int:
    """Number of elements a normalized slice selects."""
    if step > 0:
        return max(0, (stop - start + step - 1) // step)
    return max(0, (start - stop + (-step) - 1) // (-step))


def _slice_infer(types, attrs):
    t = types[0]
    starts, stops, steps = attrs["starts"], attrs["stops"], attrs["steps"]
    if not len(starts) == len(stops) == len(steps) == t.ndim:
        raise ShapeError(f"slice needs one (start, stop, step) per axis of rank {t.ndim}")
    if any(s == 0 for s in steps):
        raise ShapeError("slice step cannot be zero")
    return TensorType(tuple(slice_length(*x) for x in zip(starts, stops, steps)), t.dtype)


def python_slices(attrs: Attrs) -> tuple[slice, ...]:
    """Normalized slice attributes as Python slices (stop -1 with a negative step means 'through 0';
    start -1 with a negative step selects nothing, as Python would read it as the last element)."""
    return tuple(slice(0, 0) if (c < 0 and a < 0) else slice(a, None if (c < 0 and b < 0) else b, c)
                 for a, b, c in zip(attrs["starts"], attrs["stops"], attrs["steps"]))


def _pad_infer(types, attrs):
    t, pads = types[0], attrs["pads"]
    if len(pads) != t.ndim or any(lo < 0 or hi < 0 for lo, hi in pads):
        raise ShapeError(f"pad needs one non-negative (before, after) pair per axis, got {list(pads)}")
    return TensorType(tuple(d + lo + hi for d, (lo, hi) in zip(t.shape, pads)), t.dtype)


def _pad_reference(inputs, attrs, out):
    return np.pad(inputs[0], attrs["pads"], mode="constant",
                  constant_values=np.asarray(attrs["value"]).astype(inputs[0].dtype))


def _concat_infer(types, attrs):
    axis, first = attrs["axis"], types[0]
    if not types:
        raise ShapeError("concat of no tensors")
    if not 0 <= axis < first.ndim:
        raise ShapeError(f"axis {axis} out of range for rank {first.ndim}")
    for t in types[1:]:
        if t.dtype != first.dtype:
            raise DTypeError("concat operands must share one dtype")
        if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape))
                                       if i != axis):
            raise ShapeError(f"concat along axis {axis} needs equal sizes on the other axes")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in types)
    return TensorType(tuple(shape), first.dtype)


def _check_index_dtype(t: TensorType) -> None:
    if not t.dtype.is_integer:
        raise DTypeError(f"indices must be integers, got {t.dtype.name}")


def _checked_indices(index: np.ndarray, size: int, op: str) -> np.ndarray:
    index = index.astype(np.int64, copy=False)  # int8 indices: index + size must not overflow
    if index.size and (index.min() < -size or index.max() >= size):
        bad = index[(index < -size) | (index >= size)].reshape(-1)[0]
        raise IndexError(f"{op}: index {bad} is out of range for an axis of size {size}")
    return np.where(index < 0, index + size, index)


def _take_infer(types, attrs):
    data, index = types
    axis = attrs["axis"]
    _check_index_dtype(index)
    if not 0 <= axis < data.ndim:
        raise ShapeError(f"axis {axis} out of range for rank {data.ndim}")
    return TensorType(data.shape[:axis] + index.shape + data.shape[axis + 1:], data.dtype)


def _take_reference(inputs, attrs, out):
    data, index = inputs
    axis = attrs["axis"]
    return np.take(data, _checked_indices(index, data.shape[axis], "take"), axis=axis)


def _gather_infer(types, attrs):
    data, index = types
    axis = attrs["axis"]
    _check_index_dtype(index)
    if index.ndim != data.ndim or not 0 <= axis < data.ndim:
        raise ShapeError("gather needs index of the same rank as the input and a valid axis")
    for d, (a, b) in enumerate(zip(index.shape, data.shape)):
        if d != axis and a > b:
            raise ShapeError(f"index size {a} exceeds input size {b} on axis {d}")
    return TensorType(index.shape, data.dtype)


def _gather_reference(inputs, attrs, out):
    data, index = inputs
    axis = attrs["axis"]
    region = tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(index.shape))
    index = _checked_indices(index, data.shape[axis], "gather")
    return np.take_along_axis(data[region], index, axis=axis)


def window_output_size(size: int, kernel: int, stride: int, dilation: int) -> int:
    """Number of window positions along one axis."""
    return (size - dilation * (kernel - 1) - 1) // stride + 1


def _window_infer(types, attrs):
    t = types[0]
    kernel, stride, dilation = attrs["kernel"], attrs["stride"], attrs["dilation"]
    n = len(kernel)
    if t.ndim < n or not len(stride) == len(dilation) == n:
        raise ShapeError(f"window of rank {n} on a tensor of rank {t.ndim}")
    if any(k < 1 for k in kernel) or any(s < 1 for s in stride) or any(d < 1 for d in dilation):
        raise ShapeError("window kernel, stride and dilation must be positive")
    outs = []
    for size, k, s, d in zip(t.shape[-n:], kernel, stride, dilation):
        if size < d * (k - 1) + 1:
            raise ShapeError(f"window of extent {d * (k - 1) + 1} is larger than the input ({size})")
        outs.append(window_output_size(size, k, s, d))
    return TensorType(t.shape[:-n] + tuple(outs) + tuple(kernel), t.dtype)


def window_view(x: np.ndarray, kernel, stride, dilation) -> np.ndarray:
    """Sliding windows over the last len(kernel) axes: (..., out..., kernel...), a strided view."""
    n = len(kernel)
    lead = x.shape[:-n]
    outs = tuple(window_output_size(x.shape[-n + i], kernel[i], stride[i], dilation[i]) for i in range(n))
    strides = (x.strides[:-n]
               + tuple(x.strides[-n + i] * stride[i] for i in range(n))
               + tuple(x.strides[-n + i] * dilation[i] for i in range(n)))
    return np.lib.stride_tricks.as_strided(x, lead + outs + tuple(kernel), strides, writeable=False)


def _window_reference(inputs, attrs, out):
    return np.ascontiguousarray(window_view(np.ascontiguousarray(inputs[0]), attrs["kernel"],
                                            attrs["stride"], attrs["dilation"]))


# ---- movement ----------------------------------------------------------------------------

def _reshape_gradient(g, inputs, out, attrs, needs, build):
    return (g.reshape(inputs[0].shape),)


def _permute_gradient(g, inputs, out, attrs, needs, build):
    perm = attrs["perm"]
    inverse = tuple(int(i) for i in np.argsort(perm))
    return (build.apply("permute", [g], perm=inverse),)


def _expand_gradient(g, inputs, out, attrs, needs, build):
    return (sum_to(build, g, inputs[0].shape),)


def _slice_gradient(g, inputs, out, attrs, needs, build):
    """Scatter back: zeros except at the selected positions (negative steps: flip, then place)."""
    x = inputs[0]
    for axis, (start, stop, step) in enumerate(zip(attrs["starts"], attrs["stops"], attrs["steps"])):
        n, length = x.shape[axis], g.shape[axis]
        if (start, stop, step) == (0, n, 1):
            continue
        if step < 0 and length:
            g = slice_axis(build, g, axis, length - 1, -1, -1)  # reverse
            start, step = start + (length - 1) * step, -step
        g = place(build, g, axis, start if length else 0, step, n)
    return (g,)


def _pad_gradient(g, inputs, out, attrs, needs, build):
    x = inputs[0]
    for axis, (lo, hi) in enumerate(attrs["pads"]):
        if lo or hi:
            g = slice_axis(build, g, axis, lo, lo + x.shape[axis])
    return (g,)


def _concat_gradient(g, inputs, out, attrs, needs, build):
    axis, offset, grads = attrs["axis"], 0, []
    for t, need in zip(inputs, needs):
        size = t.shape[axis]
        grads.append(slice_axis(build, g, axis, offset, offset + size) if need else None)
        offset += size
    return tuple(grads)


def _one_hot(build, index, n, dtype):
    """(index.shape + (n,)) of dtype: 1 where the (wrapped) index equals the position."""
    idx = index.to(dt.int64) % n  # negative indices count from the end
    return (idx.unsqueeze(-1) == build.constant(np.arange(n, dtype=np.int64))).to(dtype)


def _take_gradient(g, inputs, out, attrs, needs, build):
    """Scatter-add of g into the taken rows, as a one-hot matmul (no scatter primitive needed)."""
    data, index = inputs
    axis, shape = attrs["axis"], tuple(data.shape)
    n, k = shape[axis], index.numel()
    if k == 0:
        return build.zeros(shape, g.dtype), None
    pre = prod(shape[:axis])
    post = prod(shape[axis + 1:])
    onehot = _one_hot(build, index.reshape(-1), n, g.dtype)  # (k, n)
    g3 = build.apply("permute", [g.reshape(pre, k, post)], perm=(0, 2, 1))  # (pre, post, k)
    scattered = build.apply("matmul", [g3, onehot])  # (pre, post, n)
    return build.apply("permute", [scattered], perm=(0, 2, 1)).reshape(shape), None


def _gather_gradient(g, inputs, out, attrs, needs, build):
    """Scatter-add along `axis` through a one-hot comparison, then zero-pad to the input's shape."""
    data, index = inputs
    axis, ndim = attrs["axis"], data.ndim
    n = data.shape[axis]
    if index.numel() == 0:
        return build.zeros(data.shape, g.dtype), None
    contributions = build.apply("reduce_sum", [g.unsqueeze(-1) * _one_hot(build, index, n, g.dtype)], axes=(axis,),
                           keepdims=False)
    perm = tuple(range(axis)) + (ndim - 1,) + tuple(range(axis, ndim - 1))
    result = build.apply("permute", [contributions], perm=perm) if perm != tuple(range(ndim)) else contributions
    for d in range(ndim):
        if d != axis:
            result = pad_axis(build, result, d, 0, data.shape[d] - result.shape[d])
    return result, None


def _window_gradient(g, inputs, out, attrs, needs, build):
    """Each window element goes back to its input position; overlapping windows add up."""
    x = inputs[0]
    kernel, stride, dilation = attrs["kernel"], attrs["stride"], attrs["dilation"]
    n = len(kernel)
    lead = x.ndim - n
    sizes = tuple(x.shape[lead:])
    outs = tuple(g.shape[lead:lead + n])
    if all(s == k for s, k in zip(stride, kernel)) and all(d == 1 for d in dilation):
        # Non-overlapping windows (pooling): interleave (out, kernel) pairs and pad the remainder.
        perm = tuple(range(lead)) + tuple(itertools.chain.from_iterable((lead + i, lead + n + i) for i in range(n)))
        tiled = build.apply("permute", [g], perm=perm).reshape(
            tuple(x.shape[:lead]) + tuple(o * k for o, k in zip(outs, kernel)))
        for i in range(n):
            tiled = pad_axis(build, tiled, lead + i, 0, sizes[i] - outs[i] * kernel[i])
        return (tiled,)
    total = None
    for offsets in itertools.product(*(range(k) for k in kernel)):
        starts = (0,) * (lead + n) + offsets
        stops = tuple(g.shape[:lead + n]) + tuple(o + 1 for o in offsets)
        part = build.apply("slice", [g], starts=starts, stops=stops, steps=(1,) * g.ndim)
        part = part.reshape(tuple(g.shape[:lead + n]))
        for i in range(n):
            part = place(build, part, lead + i, offsets[i] * dilation[i], stride[i], sizes[i])
        total = part if total is None else total + part
    return (total,)


register("reshape", OpKind.MOVEMENT, MappingType.REORGANIZE, _reshape_infer,
         lambda i, a, o: i[0].reshape(a["shape"]), 1,
         doc="attr shape (fully specified)",
         gradient=_reshape_gradient)
register("permute", OpKind.MOVEMENT, MappingType.SHUFFLE, _permute_infer,
         lambda i, a, o: np.transpose(i[0], a["perm"]), 1,
         doc="attr perm",
         gradient=_permute_gradient)
register("expand", OpKind.MOVEMENT, MappingType.ONE_TO_MANY, _expand_infer,
         lambda i, a, o: np.broadcast_to(i[0], a["shape"]), 1,
         doc="attr shape, numpy broadcasting",
         gradient=_expand_gradient)
register("slice", OpKind.MOVEMENT, MappingType.REORGANIZE, _slice_infer,
         lambda i, a, o: i[0][python_slices(a)], 1,
         doc="attrs starts, stops, steps, one per axis; steps may be negative",
         gradient=_slice_gradient)
register("pad", OpKind.MOVEMENT, MappingType.REORGANIZE, _pad_infer, _pad_reference, 1,
         doc="attrs pads ((before, after) per axis), value",
         gradient=_pad_gradient)
register("concat", OpKind.MOVEMENT, MappingType.REORGANIZE, _concat_infer,
         lambda i, a, o: np.concatenate(i, axis=a["axis"]), None,
         doc="attr axis; variadic",
         gradient=_concat_gradient)
register("take", OpKind.MOVEMENT, MappingType.ONE_TO_MANY, _take_infer, _take_reference, 2,
         doc="take(data, index; axis): numpy.take / index_select / embedding; negative indices count "
             "from the end",
         gradient=_take_gradient)
register("gather", OpKind.MOVEMENT, MappingType.ONE_TO_MANY, _gather_infer, _gather_reference, 2,
         doc="gather(data, index; axis): torch.gather (take_along_axis); negative indices count from the end",
         gradient=_gather_gradient)
register("window", OpKind.MOVEMENT, MappingType.ONE_TO_MANY, _window_infer, _window_reference, 1,
         doc="sliding windows over the last k axes: (..., out..., kernel...); attrs kernel, stride, "
             "dilation; pooling is window + a reduction",
         gradient=_window_gradient)
