"""Lowerings of two-operand math (atan2, fmod, fmax, fmin, copysign), addmv/addbmm and strided creation."""
from __future__ import annotations

import torch

from ...frontend.functions import matmul, where
from ...frontend.tensor import Tensor, as_tensor
from .lowering import _dtype, _fill, _float_of, register_lowering

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


@register_lowering(aten.empty_strided.default)
def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    """Uninitialized memory in PyTorch; zeros here (as `empty`): tensorkiln values have no strides."""
    return _fill(size, 0, _dtype(dtype, None) or _dtype(torch.float32))


@register_lowering(aten.fmax.default)
def fmax(a, b):
    """maximum that ignores a NaN operand (NaN only when both are)."""
    return where(a.isnan(), b, where(b.isnan(), a, a.maximum(b)))


@register_lowering(aten.fmin.default)
def fmin(a, b):
    """minimum that ignores a NaN operand (NaN only when both are)."""
    return where(a.isnan(), b, where(b.isnan(), a, a.minimum(b)))


def _sign_bit(x: Tensor) -> Tensor:
    """True where x is negative or -0.0 (1 / -0.0 is -inf); a NaN counts as positive."""
    return (x < 0).logical_or((x == 0).logical_and((1.0 / x) < 0))


@register_lowering(aten.copysign.Tensor, aten.copysign.Scalar)
def copysign(a, b):
    a = _float_of(a if isinstance(a, Tensor) else as_tensor(a))
    b = b if isinstance(b, Tensor) else as_tensor(float(b), a.dtype)
    magnitude = a.abs()
    return where(_sign_bit(_float_of(b)), -magnitude, magnitude)


@register_lowering(aten.addmv.default)
def addmv(bias, matrix, vector, *, beta=1, alpha=1):
    product = matmul(matrix, vector)
    product = product * alpha if alpha != 1 else product
    return product if beta == 0 else product + (bias if beta == 1 else bias * beta)


@register_lowering(aten.addbmm.default)
def addbmm(bias, batch1, batch2, *, beta=1, alpha=1):
    product = matmul(batch1, batch2).sum(0)
    product = product * alpha if alpha != 1 else product
    return product if beta == 0 else product + (bias if beta == 1 else bias * beta)


@register_lowering(aten.hypot.default)
def hypot(a, b):
    a, b = _tensors(a, b)
    return a.hypot(b)


@register_lowering(aten.nextafter.default)
def nextafter(a, b):
    a, b = _tensors(a, b)
    return a.nextafter(b)


@register_lowering(aten.ldexp.Tensor)
def ldexp(x, exponent):
    """x * 2**exponent, as ATen computes it (the power of two is exact for integer exponents)."""
    x = _float_of(x if isinstance(x, Tensor) else as_tensor(x))
    exponent = exponent if isinstance(exponent, Tensor) else as_tensor(exponent)
    return x * exponent.to(x.dtype).exp2()
