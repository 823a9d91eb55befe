"""Lowerings of order statistics and sorted-sequence lookups: kthvalue, median, nanmedian, searchsorted,
bucketize.

They are built on the stable sort of `lowering_scan.py` (PyTorch's order: NaN above every number),
so a value and its index come from the same sorted position. A median over a slice holding NaN
is NaN (its index: that of the slice's first NaN in sorted order), as PyTorch's; nanmedian takes
the lower median of the numbers alone. searchsorted counts, for each value, the sequence
elements before it: one comparison per pair, which suits the short sequences these ops meet.
"""
from __future__ import annotations

import torch

from ... import dtypes as dt
from ...frontend.functions import where
from ...frontend.tensor import Tensor, as_tensor
from .lowering import register_lowering
from .lowering_scan import _from_last, _to_last, sort_indices

aten = torch.ops.aten


def _pick(x: Tensor, dim: int, position, keepdim: bool, ignore_nan: bool | None = None) -> tuple[Tensor, Tensor]:
    """(value, index) at a position of the ascending sort of x along `dim`: `position` is an int, or,
    with `ignore_nan` set, the lower median of each slice (see the module docstring)."""
    xt, d = _to_last(x, dim)
    order = sort_indices(xt, False)
    if ignore_nan is not None:
        position = _median_position(xt, ignore_nan)
    at = as_tensor(position, dt.int64) if isinstance(position, int) else position
    at = at.expand(tuple(xt.shape[:-1])).unsqueeze(-1)
    index = order.gather(-1, at)
    value, index = _from_last(xt.gather(-1, index), d), _from_last(index, d)
    if not keepdim:
        value, index = value.squeeze(d), index.squeeze(d)
    return value, index


def _median_position(xt: Tensor, ignore_nan: bool):
    """The sorted position of the lower median of each row of `xt` (the last axis)."""
    n = xt.shape[-1]
    if not xt.dtype.is_floating:
        return (n - 1) // 2
    nans = xt.isnan().to(dt.int64).sum(-1)
    numbers = nans * -1 + n
    if ignore_nan:  # all NaN: position 0, a NaN
        return ((numbers - 1) // 2).clamp(0, None)
    return where(nans > 0, numbers, as_tensor((n - 1) // 2, dt.int64))  # with NaN: its first NaN


@register_lowering(aten.kthvalue.default)
def kthvalue(x, k, dim=-1, keepdim=False):
    if x.ndim == 0:
        return x, as_tensor(0, dt.int64)
    return _pick(x, dim, int(k) - 1, keepdim)


def _median(x: Tensor, dim, keepdim: bool, ignore_nan: bool):
    if dim is None:  # median.default: of all elements, the value alone
        return _pick(x.reshape(-1), 0, None, False, ignore_nan)[0]
    if x.ndim == 0:
        return x, as_tensor(0, dt.int64)
    return _pick(x, dim, None, keepdim, ignore_nan)


@register_lowering(aten.median.default, aten.median.dim)
def median(x, dim=None, keepdim=False):
    return _median(x, dim, keepdim, ignore_nan=False)


@register_lowering(aten.nanmedian.default, aten.nanmedian.dim)
def nanmedian(x, dim=None, keepdim=False):
    return _median(x, dim, keepdim, ignore_nan=True)


def _count_before(sequence: Tensor, values: Tensor, right: bool, out_int32: bool) -> Tensor:
    """For each value, how many elements of the sorted `sequence` (its last axis) come before it."""
    if sequence.ndim == 1:
        elements, points = sequence, values.unsqueeze(-1)
    else:  # one sorted row per leading index: values[..., i] looks in sequence[..., :]
        elements, points = sequence.unsqueeze(-2), values.unsqueeze(-1)
    before = elements <= points if right else elements < points
    if points.dtype.is_floating:  # a NaN value goes after every number (PyTorch's order)
        before = before.logical_or(points.isnan().logical_and(elements.isnan().logical_not()))
    count = before.to(dt.int64).sum(-1)
    return count.to(dt.int32) if out_int32 else count


@register_lowering(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def searchsorted(sequence, values, *, out_int32=False, right=False, side=None, sorter=None):
    if sorter is not None:
        sequence = sequence.gather(-1, sorter)
    scalar = not isinstance(values, Tensor)
    values = as_tensor(values, sequence.dtype) if scalar else values
    common = sequence.dtype if sequence.dtype == values.dtype else dt.float64 if (
        sequence.dtype.is_floating or values.dtype.is_floating) else dt.int64
    result = _count_before(sequence.to(common), values.to(common), bool(right) or side == "right", out_int32)
    return result.reshape(()) if scalar else result


@register_lowering(aten.bucketize.Tensor, aten.bucketize.Scalar)
def bucketize(values, boundaries, *, out_int32=False, right=False):
    scalar = not isinstance(values, Tensor)
    values = as_tensor(values, boundaries.dtype) if scalar else values
    common = boundaries.dtype if boundaries.dtype == values.dtype else dt.float64 if (
        boundaries.dtype.is_floating or values.dtype.is_floating) else dt.int64
    result = _count_before(boundaries.to(common), values.to(common), bool(right), out_int32)
    return result.reshape(()) if scalar else result
