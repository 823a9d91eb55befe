"""Lowerings of the ATen ops that order or accumulate along an axis: cumsum, sort, topk.

tensorkiln has no scan or sort primitive, so each is a decomposition into
comparisons, `where` and reductions over an n x n square of the axis (n its
length), exact as the primitives are:

- cumsum: out[i] = sum over j <= i of x[j] (a triangular mask inside one reduction);
- sort: the rank of x[i] is the number of elements that come before it (smaller,
  or equal and earlier: a stable sort; NaN after every number, as PyTorch puts it),
  the index of the k-th element is the i whose rank is k, and the values are
  gathered with those indices, so no arithmetic touches them.

The square is never stored (the mask is inlined into the reduction), but the work
is n^2 per row: fine for the axes models sort or sum (sequence positions, a
vocabulary's top-k), slow for a long flattened tensor.
"""
from __future__ import annotations

import numpy as np
import torch

from ... import dtypes as dt
from ...frontend.functions import where
from ...frontend.tensor import Tensor, as_tensor, normalize_dim
from .lowering import _dtype, register_lowering

aten = torch.ops.aten


def _to_last(x: Tensor, dim: int) -> tuple[Tensor, int]:
    d = normalize_dim(dim, x.ndim, "cumsum")
    return (x.transpose(d, -1) if d != x.ndim - 1 else x), d


def _from_last(x: Tensor, d: int) -> Tensor:
    return x.transpose(d, -1) if d != x.ndim - 1 else x


def cumulative_sum(x: Tensor, dim: int) -> Tensor:
    """Inclusive prefix sums of `x` along `dim`, in x's dtype."""
    if x.ndim == 0:
        return x
    xt, d = _to_last(x, dim)
    n = xt.shape[-1]
    earlier_or_same = as_tensor(np.tril(np.ones((n, n), dtype=bool)))  # [i, j]: j <= i
    zero = as_tensor(0, xt.dtype)
    total = where(earlier_or_same, xt.unsqueeze(-2), zero).sum(-1, dtype=xt.dtype)
    return _from_last(total, d)


@register_lowering(aten.cumsum.default)
def cumsum(x, dim, *, dtype=None):
    if dtype is not None:
        x = x.to(_dtype(dtype))
    elif not x.dtype.is_floating:  # PyTorch sums integers and bools in int64
        x = x.to(dt.int64)
    return cumulative_sum(x, dim)


def _comes_before(a: Tensor, b: Tensor, descending: bool) -> Tensor:
    """a strictly before b in PyTorch's order: NaN is larger than every number."""
    before = a > b if descending else a < b
    if not a.dtype.is_floating:
        return before
    a_nan, b_nan = a.isnan(), b.isnan()
    nan_first = a_nan.logical_and(b_nan.logical_not())
    nan_last = b_nan.logical_and(a_nan.logical_not())
    return before.logical_or(nan_first if descending else nan_last)


def _ties(a: Tensor, b: Tensor) -> Tensor:
    same = a == b
    return same.logical_or(a.isnan().logical_and(b.isnan())) if a.dtype.is_floating else same


def sort_indices(x: Tensor, descending: bool) -> Tensor:
    """int64 indices that sort `x` along its last axis (stable)."""
    n = x.shape[-1]
    xi, xj = x.unsqueeze(-1), x.unsqueeze(-2)  # [..., i, j]
    earlier = as_tensor(np.tril(np.ones((n, n), dtype=bool), -1))  # [i, j]: j < i
    before = _comes_before(xj, xi, descending).logical_or(_ties(xj, xi).logical_and(earlier))
    rank = before.to(dt.int64).sum(-1)  # [..., i]
    positions = as_tensor(np.arange(n, dtype=np.int64))
    is_kth = rank.unsqueeze(-2) == positions.reshape(n, 1)  # [..., k, i]
    return where(is_kth, positions, as_tensor(0, dt.int64)).sum(-1)


@register_lowering(aten.sort.default, aten.sort.stable)
def sort(x, dim=-1, descending=False, *, stable=None):
    if isinstance(dim, bool) or dim is None:  # sort.stable(self, *, stable, dim, descending)
        dim = -1
    if x.ndim == 0:
        return x, as_tensor(0, dt.int64)
    xt, d = _to_last(x, dim)
    order = sort_indices(xt, bool(descending))
    return _from_last(xt.gather(-1, order), d), _from_last(order, d)


@register_lowering(aten.topk.default)
def topk(x, k, dim=-1, largest=True, sorted=True):  # noqa: A002 (the schema's name)
    if x.ndim == 0:
        return x, as_tensor(0, dt.int64)
    xt, d = _to_last(x, dim)
    order = sort_indices(xt, bool(largest)).narrow(-1, 0, k)
    return _from_last(xt.gather(-1, order), d), _from_last(order, d)


@register_lowering(aten.cumprod.default)
def cumprod(x, dim, *, dtype=None):
    if dtype is not None:
        x = x.to(_dtype(dtype))
    elif not x.dtype.is_floating:
        x = x.to(dt.int64)
    if x.ndim == 0:
        return x
    xt, d = _to_last(x, dim)
    n = xt.shape[-1]
    earlier_or_same = as_tensor(np.tril(np.ones((n, n), dtype=bool)))
    product = where(earlier_or_same, xt.unsqueeze(-2), as_tensor(1, xt.dtype)).prod(-1, dtype=xt.dtype)
    return _from_last(product, d)


def _cumulative_extremum(x: Tensor, dim: int, largest: bool):
    """cummax/cummin: the running extremum (NaN sticks once seen) and the last index holding it."""
    if x.ndim == 0:
        return x, as_tensor(0, dt.int64)
    xt, d = _to_last(x, dim)
    n = xt.shape[-1]
    earlier_or_same = as_tensor(np.tril(np.ones((n, n), dtype=bool)))  # [i, j]: j <= i
    row = xt.unsqueeze(-2)  # [..., i, j] = x[j]
    if xt.dtype.is_floating:
        fill = float("-inf") if largest else float("inf")
    elif xt.dtype.is_bool:
        fill = not largest
    else:
        info = np.iinfo(xt.dtype.storage)
        fill = int(info.min if largest else info.max)
    picked = where(earlier_or_same, row, as_tensor(fill, xt.dtype))
    values = picked.amax(-1) if largest else picked.amin(-1)  # NaN propagates, as in PyTorch
    holds = _ties(row, values.unsqueeze(-1)).logical_and(earlier_or_same)
    positions = as_tensor(np.arange(n, dtype=np.int64))
    indices = where(holds, positions, as_tensor(-1, dt.int64)).amax(-1)
    return _from_last(values, d), _from_last(indices, d)


@register_lowering(aten.cummax.default)
def cummax(x, dim):
    return _cumulative_extremum(x, dim, True)


@register_lowering(aten.cummin.default)
def cummin(x, dim):
    return _cumulative_extremum(x, dim, False)
