"""Lowerings of ATen's creation ops (full, zeros, ones, arange ... and their _like forms), copies and
casts, fill, and the triangular masks."""
from __future__ import annotations

import numpy as np
import torch

from ... import dtypes as dt
from ...frontend.creation import arange as tk_arange
from ...frontend.functions import where
from ...frontend.tensor import as_tensor
from ...shapes import is_symbolic
from .tensors import to_tk
from .lowering import _dtype, _fill, aten, register_lowering


# ---- creation -------------------------------------------------------------------------------------------

@register_lowering(aten.full.default)
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _fill(size, fill_value, _dtype(dtype))


@register_lowering(aten.full_like.default)
def full_like(x, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _fill(x.shape, fill_value, _dtype(dtype, x.dtype))


@register_lowering(aten.zeros.default, aten.empty.memory_format, aten.new_empty.default, aten.new_zeros.default)
def zeros(*args, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    size = args[-1]
    like = args[0] if len(args) == 2 else None  # new_zeros(self, size)
    return _fill(size, 0, _dtype(dtype, like.dtype if like is not None else dt.float32))


@register_lowering(aten.ones.default, aten.new_ones.default)
def ones(*args, dtype=None, layout=None, device=None, pin_memory=None):
    size = args[-1]
    like = args[0] if len(args) == 2 else None
    return _fill(size, 1, _dtype(dtype, like.dtype if like is not None else dt.float32))


@register_lowering(aten.zeros_like.default, aten.empty_like.default)
def zeros_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _fill(x.shape, 0, _dtype(dtype, x.dtype))


@register_lowering(aten.ones_like.default)
def ones_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _fill(x.shape, 1, _dtype(dtype, x.dtype))


@register_lowering(aten.arange.default, aten.arange.start, aten.arange.start_step)
def arange(*args, dtype=None, layout=None, device=None, pin_memory=None):
    start, end, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) > 2 else 1)
    if dtype is None:
        dtype = torch.float32 if any(isinstance(v, float) for v in (start, end, step)) else torch.int64
    if any(is_symbolic(v) for v in (start, end, step)):  # a size symbol of the trace: the iota op
        return tk_arange(start, end, step, dtype=_dtype(dtype))
    values = torch.arange(start, end, step, dtype=dtype)  # PyTorch's own length and rounding rules
    return to_tk(values, copy=True)


@register_lowering(aten.scalar_tensor.default)
def scalar_tensor(value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _fill((), value, _dtype(dtype, dt.float32))


@register_lowering(aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout)
def to_copy(x, dtype=None, *args, layout=None, device=None, pin_memory=None, non_blocking=False,
            memory_format=None, copy=False):
    if isinstance(dtype, torch.dtype):
        return x.to(_dtype(dtype))
    return x


@register_lowering(aten.copy.default)
def copy(dst, src, non_blocking=False):
    return src.to(dst.dtype).expand(tuple(dst.shape))


@register_lowering(aten.fill.Scalar)
def fill(x, value):
    return _fill(x.shape, value, x.dtype)


@register_lowering(aten.tril.default)
def tril(x, diagonal=0):
    rows, cols = x.shape[-2:]
    mask = np.tril(np.ones((rows, cols), dtype=bool), diagonal)
    return where(as_tensor(mask), x, as_tensor(0, x.dtype))


@register_lowering(aten.triu.default)
def triu(x, diagonal=0):
    rows, cols = x.shape[-2:]
    mask = np.triu(np.ones((rows, cols), dtype=bool), diagonal)
    return where(as_tensor(mask), x, as_tensor(0, x.dtype))
