"""ONNX elementwise operators: the one-to-one unary table, binary arithmetic, comparisons and
logic, math functions written as formulas, and the elementwise ops with attributes or logic
(Div, Mod, Pow, IsInf, Clip, the variadic Max/Min/Sum/Mean, Where, Cast).

`ONNX_UNARY_TO_TENSOR_METHOD` is the one-to-one table, read from the op table (`OpDef.onnx`):
each ONNX unary operator in it is exactly one primitive, applied by its Tensor method.
`BINARY_OPERATORS` maps the binary operators to Python operators on Tensors; their converters only add the legacy (opset < 7)
`broadcast`/`axis` handling. Integer Div truncates toward zero and Mod honours `fmod`.
"""
from __future__ import annotations

import operator
from typing import Callable

from ... import dtypes as dt
from ...frontend.functions import where
from ...frontend.tensor import Tensor, apply, promote
from ...ir.ops import REGISTRY
from .element_types import tk_dtype
from .helpers import filled, normalize_axis
from .registry import NodeContext, converter


def _legacy_broadcast(ctx: NodeContext, a: Tensor, b: Tensor, attrs: dict) -> Tensor:
    """Opset < 7 binary ops: b broadcasts into a from `axis` when broadcast=1."""
    if ctx.opset < 7 and attrs.get("broadcast", 0) and "axis" in attrs and b.ndim < a.ndim:
        axis = normalize_axis(attrs["axis"], a.ndim)
        b = b.reshape(tuple(b.shape) + (1,) * (a.ndim - axis - b.ndim))
    return b


def _binary(fn):
    def convert(ctx, inputs, attrs):
        a, b = inputs
        return fn(a, _legacy_broadcast(ctx, a, b, attrs))
    return convert


# ONNX binary operator -> the Python operator it is on Tensors.
BINARY_OPERATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "Add": operator.add, "Sub": operator.sub, "Mul": operator.mul,
    "Equal": operator.eq, "Less": operator.lt, "Greater": operator.gt,
    "LessOrEqual": operator.le, "GreaterOrEqual": operator.ge,
    "And": operator.and_, "BitwiseAnd": operator.and_, "Or": operator.or_, "BitwiseOr": operator.or_,
    "Xor": operator.xor, "BitwiseXor": operator.xor,
}
for _name, _fn in BINARY_OPERATORS.items():
    converter(_name)(_binary(_fn))


@converter("Div")
def _div(ctx, inputs, attrs):
    a, b = inputs
    b = _legacy_broadcast(ctx, a, b, attrs)
    if a.dtype.is_floating:
        return a / b
    q = a // b  # integers: ONNX (like C) truncates toward zero
    fix = ((a % b) != 0) & ((a < 0) != (b < 0))
    return where(fix, q + 1, q)


@converter("Mod")
def _mod(ctx, inputs, attrs):
    a, b = inputs
    r = a % b  # Python semantics: the sign of the divisor
    if attrs.get("fmod", 0):  # C fmod: the sign of the dividend
        r = where((r != 0) & ((r < 0) != (a < 0)), r - b, r)
    return r


@converter("BitShift")
def _bit_shift(ctx, inputs, attrs):
    x, count = inputs
    direction = attrs.get("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.unsupported(f"direction must be LEFT or RIGHT, got {direction!r}")
    return apply("shift_left" if direction == "LEFT" else "shift_right", list(promote(x, count)[0]))


@converter("Pow")
def _pow(ctx, inputs, attrs):
    x, y = inputs
    y = _legacy_broadcast(ctx, x, y, attrs)
    if x.dtype.is_integer and y.dtype.is_floating:
        return (x.to(dt.float64) ** y.to(dt.float64)).to(x.dtype)
    return x ** y.to(x.dtype)


def _unary(fn):
    return lambda ctx, inputs, attrs: fn(inputs[0])


# ONNX unary operator -> the tensorkiln Tensor method that computes it, one to one.
# The op table's rows name the ONNX operator each primitive is exactly (OpDef.onnx).
ONNX_UNARY_TO_TENSOR_METHOD: dict[str, Callable[[Tensor], Tensor]] = {
    op.onnx: getattr(Tensor, op.method) for op in REGISTRY.values() if op.onnx and op.arity == 1}
for _name, _fn in ONNX_UNARY_TO_TENSOR_METHOD.items():
    converter(_name)(_unary(_fn))


# Unary operators that are a short formula over Tensor methods.
_UNARY_FORMULAS: dict[str, Callable[[Tensor], Tensor]] = {
    "Identity": lambda x: x,
    "Asinh": lambda x: (x + (x * x + 1.0).sqrt()).log(), "Acosh": lambda x: (x + (x * x - 1.0).sqrt()).log(),
    "Atanh": lambda x: ((1.0 + x) / (1.0 - x)).log() * 0.5,
    "BitwiseNot": lambda x: x ^ -1,
}
for _name, _fn in _UNARY_FORMULAS.items():
    converter(_name)(_unary(_fn))


@converter("IsNaN")
def _isnan(ctx, inputs, attrs):
    return inputs[0].isnan()


@converter("IsInf")
def _isinf(ctx, inputs, attrs):
    x = inputs[0]
    pos, neg = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    result = filled(x.shape, False, dt.bool_)
    if pos:
        result = result | (x == float("inf"))
    if neg:
        result = result | (x == float("-inf"))
    return result


@converter("Clip", values=lambda opset: set())
def _clip(ctx, inputs, attrs):
    x = inputs[0]
    if ctx.opset < 11:
        lo, hi = attrs.get("min"), attrs.get("max")
        return x.clamp(lo, hi)
    lo = inputs[1] if len(inputs) > 1 else None
    hi = inputs[2] if len(inputs) > 2 else None
    out = x
    if lo is not None:
        out = out.maximum(lo.reshape(()).to(x.dtype))
    if hi is not None:
        out = out.minimum(hi.reshape(()).to(x.dtype))
    return out


def _variadic(fn):
    def convert(ctx, inputs, attrs):
        out = inputs[0]
        for t in inputs[1:]:
            out = fn(out, t)
        return out
    return convert


converter("Max")(_variadic(lambda a, b: a.maximum(b)))
converter("Min")(_variadic(lambda a, b: a.minimum(b)))
converter("Sum")(_variadic(lambda a, b: a + b))


@converter("Mean")
def _mean(ctx, inputs, attrs):
    return _variadic(lambda a, b: a + b)(ctx, inputs, attrs) * (1.0 / len(inputs))


@converter("Where")
def _where(ctx, inputs, attrs):
    return where(*inputs)


@converter("Cast")
def _cast(ctx, inputs, attrs):
    return inputs[0].to(tk_dtype(attrs["to"]))


@converter("BitCast")
def _bit_cast(ctx, inputs, attrs):
    return apply("bitcast", [inputs[0]], dtype=tk_dtype(attrs["to"]))


@converter("CastLike")
def _cast_like(ctx, inputs, attrs):
    return inputs[0].to(inputs[1].dtype)
