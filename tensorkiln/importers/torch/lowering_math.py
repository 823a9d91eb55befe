"""Lowerings of the two-operand math ops atan2 and fmod, shape queries and strided creation."""
from __future__ import annotations

import numpy as np
import torch

from ...frontend.tensor import Tensor, as_tensor
from .lowering import _fill, _dtype, register_lowering

aten = torch.ops.aten


def _tensors(a, b) -> tuple[Tensor, object]:
    return (a, b) if isinstance(a, Tensor) else (as_tensor(a), b)


@register_lowering(aten.atan2.default)
def atan2(a, b):
    a, b = _tensors(a, b)
    return a.atan2(b)


@register_lowering(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(a, b):
    a, b = _tensors(a, b)
    return a.fmod(b)


# Shapes are static in tensorkiln (each signature is traced with its own), so a size query is a number.
@register_lowering(aten.sym_size.int)
def sym_size(x, dim):
    return int(x.shape[dim])


@register_lowering(aten.sym_numel.default)
def sym_numel(x):
    return int(np.prod(x.shape, dtype=np.int64))


@register_lowering(aten.empty_strided.default)
def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    """Uninitialized memory in PyTorch; zeros here (as `empty`): tensorkiln values have no strides."""
    return _fill(size, 0, _dtype(dtype, None) or _dtype(torch.float32))
