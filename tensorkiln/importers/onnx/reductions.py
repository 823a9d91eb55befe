"""ONNX reductions and scans: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1,
ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp, ArgMax/ArgMin, TopK, CumSum and CumProd.

- Reduce*: `axes` as an attribute or (from opset 13 or 18) an input, `noop_with_empty_axes`;
  an empty reduction gives the identity.
- TopK: k rounds of argmax (or argmin); ties go to the lower index, as ONNX asks.
- CumSum: a matmul with a triangular constant.
- CumProd: a log-step scan (Hillis-Steele): log2(n) rounds of multiplying by
  a copy shifted by 1, 2, 4, ... positions, padded with ones. O(n log n)
  work and no n x n intermediate (CumSum's triangular matmul has no product
  counterpart).
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...frontend.functions import concat, matmul, where
from ...frontend.tensor import Tensor, apply, as_tensor
from ...frontend.trace import composite_scope
from .helpers import axes_input, filled, normalize_axis
from .registry import converter


def _reduce_args(ctx, x, inputs, attrs, since):
    """(axes, keepdims), or None when the op is a no-op (empty axes with noop_with_empty_axes)."""
    axes = axes_input(ctx, inputs, attrs, since)
    keep = bool(attrs.get("keepdims", 1))
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return None
        axes = range(x.ndim)
    return tuple(sorted({normalize_axis(a, x.ndim) for a in axes})), keep


def _reduced_shape(x, axes, keep):
    return tuple(1 if i in axes else s for i, s in enumerate(x.shape) if keep or i not in axes)


def _reducer(since: int, fn, empty=None):
    def convert(ctx, inputs, attrs):
        x = inputs[0]
        args = _reduce_args(ctx, x, inputs, attrs, since)
        if args is None:
            return x
        axes, keep = args
        if empty is not None and any(x.shape[a] == 0 for a in axes):
            return filled(_reduced_shape(x, axes, keep), empty(x.dtype), x.dtype)
        return fn(x, axes, keep)
    return convert


def _same_dtype(fn):
    return lambda x, axes, keep: fn(x, axes, keep).to(x.dtype)


def _log_sum_exp(x, axes, keep):
    m = x.amax(axes, keepdim=True)
    m = where(m.abs() == float("inf"), 0.0, m).to(x.dtype)
    out = (x - m).exp().sum(axes, keepdim=True).log() + m
    return out if keep else out.reshape(_reduced_shape(x, axes, False))


_REDUCERS = {
    "ReduceSum": (13, _same_dtype(lambda x, a, k: x.sum(a, k)), None),
    "ReduceMean": (18, _same_dtype(lambda x, a, k: x.mean(a, k)), None),
    "ReduceMax": (18, lambda x, a, k: x.amax(a, k), lambda d: dt.finfo_min(d)),
    "ReduceMin": (18, lambda x, a, k: x.amin(a, k), lambda d: dt.finfo_max(d)),
    "ReduceProd": (18, _same_dtype(lambda x, a, k: x.prod(a, k)), None),
    "ReduceL1": (18, _same_dtype(lambda x, a, k: x.abs().sum(a, k)), None),
    "ReduceL2": (18, _same_dtype(lambda x, a, k: (x * x).sum(a, k).to(dt.float64 if not x.dtype.is_floating
                                                                       else x.dtype).sqrt()), None),
    "ReduceSumSquare": (18, _same_dtype(lambda x, a, k: (x * x).sum(a, k)), None),
    "ReduceLogSum": (18, lambda x, a, k: x.sum(a, k).log(), None),
    "ReduceLogSumExp": (18, _log_sum_exp, lambda d: float("-inf")),
}
for _name, (_since, _fn, _empty) in _REDUCERS.items():
    converter(_name, values=lambda opset, s=_since: {1} if opset >= s else set())(_reducer(_since, _fn, _empty))


def _arg(op):
    def convert(ctx, inputs, attrs):
        x = inputs[0]
        axis = normalize_axis(attrs.get("axis", 0), x.ndim)
        keep = bool(attrs.get("keepdims", 1))
        if attrs.get("select_last_index", 0):
            n = x.shape[axis]
            flipped = x.flip(axis)
            index = getattr(flipped, op)(axis, keep)
            return (n - 1) - index
        return getattr(x, op)(axis, keep)
    return convert


converter("ArgMax")(_arg("argmax"))
converter("ArgMin")(_arg("argmin"))


@converter("TopK", values=lambda opset: {1} if opset >= 10 else set())
def _topk(ctx, inputs, attrs):
    x = inputs[0]
    k = attrs["k"] if ctx.opset < 10 else ctx.ints(inputs[1], "k")[0]
    axis = normalize_axis(attrs.get("axis", -1), x.ndim)
    largest = attrs.get("largest", 1)
    sentinel = dt.finfo_min(x.dtype) if largest else dt.finfo_max(x.dtype)
    positions = as_tensor(np.arange(x.shape[axis]).reshape([-1 if i == axis else 1 for i in range(x.ndim)]))
    values, indices, rest = [], [], x
    for _ in range(k):  # k selection rounds: ties go to the lower index, as ONNX asks
        index = rest.argmax(axis, True) if largest else rest.argmin(axis, True)
        values.append(x.gather(axis, index))
        indices.append(index)
        rest = where(positions == index, filled((), sentinel, x.dtype), rest)
    if not k:
        shape = tuple(0 if i == axis else s for i, s in enumerate(x.shape))
        return [filled(shape, 0, x.dtype), filled(shape, 0, dt.int64)]
    return [concat(values, axis), concat(indices, axis)]


@converter("CumSum", values={1})
def _cumsum(ctx, inputs, attrs):
    x = inputs[0]
    axis = normalize_axis(ctx.ints(inputs[1], "axis")[0], x.ndim)
    n = x.shape[axis]
    i, j = np.arange(n).reshape(-1, 1), np.arange(n).reshape(1, -1)
    exclusive, reverse = attrs.get("exclusive", 0), attrs.get("reverse", 0)
    if reverse:
        mask = i > j if exclusive else i >= j
    else:
        mask = i < j if exclusive else i <= j
    moved = x.transpose(axis, -1)
    out = matmul(moved, as_tensor(mask.astype(np.float64), x.dtype))
    return out.transpose(axis, -1)


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
    axis = normalize_axis(ctx.ints(inputs[1], "axis")[0], x.ndim)
    with composite_scope("cumprod"):
        return cumprod(x, axis, bool(attrs.get("exclusive", 0)), bool(attrs.get("reverse", 0)))
