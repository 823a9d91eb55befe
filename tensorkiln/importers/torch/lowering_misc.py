"""Lowerings of ATen ops that are compositions of tensorkiln's primitives: empty_permuted, narrow_copy,
dist, unfold, as_strided_scatter and the like (each says what it is built from)."""
from __future__ import annotations

import torch

from .lowering import _dtype, _fill, register_lowering

aten = torch.ops.aten


@register_lowering(aten.empty_permuted.default)
def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None, pin_memory=None):
    """Uninitialized memory in PyTorch, laid out in `physical_layout`'s order; zeros of the logical
    `size` here (tensorkiln values have no strides)."""
    return _fill(size, 0, _dtype(dtype, None) or _dtype(torch.float32))
