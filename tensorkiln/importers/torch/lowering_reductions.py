"""Lowerings of ATen's reductions: sums, means, products, extrema and their indices, variance, any/all
and vector norms."""
from __future__ import annotations

import torch

from ...frontend.functions import mean, var
from ...frontend.tensor import as_tensor
from .lowering import _dtype, _float_of, aten, register_lowering


# ---- reductions ----------------------------------------------------------------------------------------

def _dims(dim, ndim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    return dim


@register_lowering(aten.sum.dim_IntList, aten.sum.default)
def sum_(x, dim=None, keepdim=False, *, dtype=None):
    if isinstance(dim, torch.dtype):  # sum.default(self, *, dtype)
        dim, dtype = None, dim
    return x.sum(_dims(dim, x.ndim), keepdim, dtype=_dtype(dtype))


@register_lowering(aten.mean.dim, aten.mean.default)
def mean_(x, dim=None, keepdim=False, *, dtype=None):
    if isinstance(dim, torch.dtype):
        dim, dtype = None, dim
    return mean(x, _dims(dim, x.ndim), keepdim, _dtype(dtype))


@register_lowering(aten.prod.dim_int, aten.prod.default)
def prod(x, dim=None, keepdim=False, *, dtype=None):
    if isinstance(dim, torch.dtype):
        dim, dtype = None, dim
    return x.prod(dim, keepdim, dtype=_dtype(dtype))


@register_lowering(aten.amax.default)
def amax(x, dim=(), keepdim=False):
    return x.amax(_dims(dim, x.ndim), keepdim)


@register_lowering(aten.amin.default)
def amin(x, dim=(), keepdim=False):
    return x.amin(_dims(dim, x.ndim), keepdim)


@register_lowering(aten.max.dim)
def max_dim(x, dim, keepdim=False):
    return x.amax(dim, keepdim), x.argmax(dim, keepdim)


@register_lowering(aten.min.dim)
def min_dim(x, dim, keepdim=False):
    return x.amin(dim, keepdim), x.argmin(dim, keepdim)


@register_lowering(aten.max.default)
def max_all(x):
    return x.amax()


@register_lowering(aten.min.default)
def min_all(x):
    return x.amin()


@register_lowering(aten.argmax.default)
def argmax(x, dim=None, keepdim=False):
    return x.argmax(dim, keepdim)


@register_lowering(aten.argmin.default)
def argmin(x, dim=None, keepdim=False):
    return x.argmin(dim, keepdim)


@register_lowering(aten.var.correction, aten.var.dim)
def var_(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(unbiased, bool):  # var.dim(self, dim, unbiased, keepdim)
        correction = 1 if unbiased else 0
    return var(x, _dims(dim, x.ndim), keepdim=keepdim, correction=1 if correction is None else correction)


@register_lowering(aten.var_mean.correction, aten.var_mean.dim, aten.var_mean.default)
def var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):  # var_mean.default(self, unbiased)
        dim, unbiased = None, dim
    dims = _dims(dim, x.ndim)
    return var_(x, dim, unbiased, keepdim, correction=correction), mean(x, dims, keepdim=keepdim)


@register_lowering(aten.round.decimals)
def round_decimals(x, *, decimals=0):
    """ATen's rule: round(x * 10^d) / 10^d, or for d < 0 round(x / 10^-d) * 10^-d, in x's precision."""
    if decimals == 0:
        return x.round()
    scale = as_tensor(10.0 ** abs(decimals), x.dtype)
    return (x * scale).round() / scale if decimals > 0 else (x / scale).round() * scale


@register_lowering(aten.any.dim, aten.any.dims, aten.any.default)
def any_(x, dim=None, keepdim=False):
    return x.any(_dims(dim, x.ndim), keepdim)


@register_lowering(aten.all.dim, aten.all.dims, aten.all.default)
def all_(x, dim=None, keepdim=False):
    return x.all(_dims(dim, x.ndim), keepdim)


@register_lowering(aten.linalg_vector_norm.default)
def linalg_vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    x = _float_of(x.to(_dtype(dtype)) if dtype is not None else x)
    dims = _dims(dim, x.ndim)
    if ord == 2:
        return (x * x).sum(dims, keepdim).sqrt()
    if ord == 1:
        return x.abs().sum(dims, keepdim)
    if ord == float("inf"):
        return x.abs().amax(dims, keepdim)
    if ord == float("-inf"):
        return x.abs().amin(dims, keepdim)
    if ord == 0:
        return (x != 0).to(x.dtype).sum(dims, keepdim)
    return (x.abs() ** ord).sum(dims, keepdim) ** (1.0 / ord)
