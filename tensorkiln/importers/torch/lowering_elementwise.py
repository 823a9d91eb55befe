"""Lowerings of ATen's elementwise ops: arithmetic, comparisons and logic, activations, and dropout
(inference: the identity)."""
from __future__ import annotations

import torch

from ... import dtypes as dt
from ...frontend.creation import full as tk_full
from ...frontend.functions import where
from ...nn import functional as F
from ...frontend.tensor import Tensor, as_tensor
from ...ir.ops import REGISTRY
from .lowering import _binary, _dtype, _float_of, aten, register_lowering


# ---- elementwise arithmetic -------------------------------------------------------------------

@register_lowering(aten.add.Tensor, aten.add.Scalar)
def add(a, b, alpha=1):
    return _binary(lambda x, y: x + y, a, b if alpha == 1 else _binary(lambda x, y: x * y, b, alpha))


@register_lowering(aten.sub.Tensor, aten.sub.Scalar)
def sub(a, b, alpha=1):
    return _binary(lambda x, y: x - y, a, b if alpha == 1 else _binary(lambda x, y: x * y, b, alpha))


@register_lowering(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(a, b, alpha=1):
    return sub(b, a, alpha)


@register_lowering(aten.mul.Tensor, aten.mul.Scalar)
def mul(a, b):
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a.dtype.is_bool and b.dtype.is_bool:
        return a.logical_and(b)  # PyTorch multiplies bools: logical and
    return _binary(lambda x, y: x * y, a, b)


@register_lowering(aten.div.Tensor, aten.div.Scalar)
def div(a, b):
    return _binary(lambda x, y: x / y, a, b)


@register_lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(a, b, rounding_mode=None):
    if rounding_mode is None:
        return div(a, b)
    a_t = a if isinstance(a, Tensor) else as_tensor(a)
    if rounding_mode == "floor":
        if a_t.dtype.is_floating or (isinstance(b, Tensor) and b.dtype.is_floating) or isinstance(b, float):
            return (a_t / b).floor()
        return a_t // b
    quotient = a_t / b  # trunc: toward zero
    out = where(quotient < 0, quotient.ceil(), quotient.floor())
    return out if quotient.dtype.is_floating and (a_t.dtype.is_floating or isinstance(b, float) or
                                                   (isinstance(b, Tensor) and b.dtype.is_floating)) \
        else out.to(a_t.dtype)


@register_lowering(aten.remainder.Tensor, aten.remainder.Scalar)
def remainder(a, b):
    return _binary(lambda x, y: x % y, a, b)


@register_lowering(aten.floor_divide.default)
def floor_divide(a, b):
    return _binary(lambda x, y: x // y, a, b)


@register_lowering(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)
def pow_(a, b):
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        if b == 2:
            return a * a
        if b == 0.5:
            return _float_of(a).sqrt()
        if b == -0.5:
            return _float_of(a).rsqrt()
        if b == 1:
            return a
    return _binary(lambda x, y: x ** y, a, b)


@register_lowering(aten.maximum.default)
def maximum(a, b):
    return a.maximum(b)


@register_lowering(aten.minimum.default)
def minimum(a, b):
    return a.minimum(b)


def _unary(name: str):
    def lower(x):
        return getattr(x, name)()
    lower.__name__ = name
    return lower


# The ATen operators that are exactly one primitive (the op table's `aten` names), through its method.
for _op in REGISTRY.values():
    if _op.aten and _op.arity == 1:
        register_lowering(getattr(aten, _op.aten).default)(_unary(_op.method))
register_lowering(aten.log1p.default)(_unary("log1p"))


@register_lowering(aten.bitwise_not.default)
def bitwise_not(x):
    """~x: logical not of bools; of integers x ^ -1 (all bits flipped, ~uint8(0) = 255 as in PyTorch)."""
    return x.logical_not() if x.dtype.is_bool else x ^ -1


@register_lowering(aten.expm1.default)
def expm1(x):
    return _float_of(x).exp() - 1.0


@register_lowering(aten.square.default)
def square(x):
    return x * x


# ---- comparisons and logic ----------------------------------------------------------------------

for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    register_lowering(getattr(aten, _name).Tensor, getattr(aten, _name).Scalar)(
        (lambda n: lambda a, b: _binary(lambda x, y: getattr(x, n)(y) if isinstance(x, Tensor)
                                        else getattr(as_tensor(x), n)(y), a, b))(_name))


@register_lowering(aten.logical_and.default)
def logical_and(a, b):
    return a.logical_and(b)


@register_lowering(aten.logical_or.default)
def logical_or(a, b):
    return a.logical_or(b)


@register_lowering(aten.logical_xor.default)
def logical_xor(a, b):
    return a.logical_xor(b)


@register_lowering(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar)
def bitwise_and(a, b):
    return _binary(lambda x, y: x & y, a, b)


@register_lowering(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar)
def bitwise_or(a, b):
    return _binary(lambda x, y: x | y, a, b)


@register_lowering(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar)
def bitwise_xor(a, b):
    return _binary(lambda x, y: x ^ y, a, b)


@register_lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where_(condition, a, b):
    return where(condition, a, b)


@register_lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(x, mask, value):
    return x.masked_fill(mask, value)


@register_lowering(aten.clamp.default, aten.clamp.Tensor)
def clamp(x, min=None, max=None):  # noqa: A002
    return x.clamp(min, max)


@register_lowering(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(x, min):  # noqa: A002
    return x.clamp(min, None)


@register_lowering(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(x, max):  # noqa: A002
    return x.clamp(None, max)


# ---- activations ---------------------------------------------------------------------------------

@register_lowering(aten.gelu.default)
def gelu(x, approximate="none"):
    return F.gelu(x, approximate=approximate)


@register_lowering(aten.silu.default)
def silu(x):
    return F.silu(x)


@register_lowering(aten.hardtanh.default)
def hardtanh(x, min_val=-1.0, max_val=1.0):
    return F.hardtanh(x, min_val, max_val)


@register_lowering(aten.hardswish.default)
def hardswish(x):
    return F.hardswish(x)


@register_lowering(aten.hardsigmoid.default)
def hardsigmoid(x):
    return F.hardsigmoid(x)


@register_lowering(aten.leaky_relu.default)
def leaky_relu(x, negative_slope=0.01):
    return F.leaky_relu(x, negative_slope)


@register_lowering(aten.elu.default)
def elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    x = _float_of(x)
    out = where(x > 0, x, alpha * ((x * input_scale).exp() - 1.0))
    return out * scale if scale != 1.0 else out


@register_lowering(aten.softplus.default)
def softplus(x, beta=1.0, threshold=20.0):
    return F.softplus(x, beta, threshold)


@register_lowering(aten._softmax.default, aten.softmax.int)
def softmax(x, dim, half_to_float=False, dtype=None):
    if isinstance(half_to_float, torch.dtype):  # softmax.int(self, dim, dtype)
        dtype = half_to_float
    x = x.to(_dtype(dtype)) if dtype is not None else x
    return F.softmax(x, dim)


@register_lowering(aten._log_softmax.default, aten.log_softmax.int)
def log_softmax(x, dim, half_to_float=False, dtype=None):
    if isinstance(half_to_float, torch.dtype):
        dtype = half_to_float
    x = x.to(_dtype(dtype)) if dtype is not None else x
    return F.log_softmax(x, dim)


# ---- dropout (inference) ---------------------------------------------------------------------------

@register_lowering(aten.dropout.default, aten.feature_dropout.default, aten.alpha_dropout.default,
                   check=lambda node: None if len(node.args) < 3 or not node.args[2] or node.args[1] == 0
                   else "training-mode dropout")
def dropout(x, p, train):
    return x


@register_lowering(aten.native_dropout.default,
                   check=lambda node: None if node.args[2] is False or node.args[1] == 0
                   else "training-mode dropout")
def native_dropout(x, p, train):
    return x, tk_full(tuple(x.shape), True, dt.bool_)


del _name
