"""More elementwise primitives: inverse hyperbolics, isinf, atan2, fmod (C's remainder), erfc, exp2,
lgamma, hypot and nextafter.

Rows like those of `elementwise.py`, kept apart so the core table stays short.
PyTorch's core ATen opset has each of them as one operator, and libm has each as
one function, so they are primitives rather than formulas: a formula
(`log(x + sqrt(x*x + 1))` for asinh) loses accuracy where the function does not.
"""
from __future__ import annotations

import math

import numpy as np

from ... import dtypes as dt
from ...loops import expr as E
from ...loops.math import math_function
from .elementwise import (FLOAT_ONLY, NUMERIC, _call, _check_category, _const, _describe, _expr,
                          _int_safe, _unary_gradient, _unary_reference, binary, unary)
from .gradient import NOT_DIFFERENTIABLE
from .registry import Attrs, MappingType, OpKind, TensorType, register

# libm's asinhf/asinh, acoshf/acosh, atanhf/atanh, erfcf/erfc, lgammaf/lgamma, hypotf/hypot, nextafterf/nextafter
math_function("asinh", 1, np.arcsinh)
math_function("acosh", 1, np.arccosh)
math_function("atanh", 1, np.arctanh)


def _elementwise_float64(fn):
    """A scalar math.* function over an array, computed in float64 and returned in the array's dtype."""
    def apply(x):
        x = np.asarray(x)
        values = np.vectorize(fn, otypes=[np.float64])(x.astype(np.float64)) if x.size else x.astype(np.float64)
        return values.astype(x.dtype) if x.dtype.kind == "f" else values
    return apply


def _lgamma(v: float) -> float:
    """log|Gamma(v)|; +inf at the poles (0, -1, -2, ...), as C's lgamma."""
    try:
        return math.lgamma(v)
    except ValueError:
        return math.inf


_erfc = _elementwise_float64(math.erfc)
_lgamma_array = _elementwise_float64(_lgamma)
math_function("erfc", 1, lambda x: type(x)(math.erfc(float(x))))
math_function("lgamma", 1, lambda x: type(x)(_lgamma(float(x))))
math_function("hypot", 2, np.hypot)
math_function("nextafter", 2, np.nextafter)


def _lower_isinf(x: E.Expr) -> E.Expr:
    """x - x is NaN exactly for infinities and NaN; x == x rules NaN out (no infinite constant needed)."""
    difference = x - x
    return E.logical_and(E.ne(difference, difference), E.eq(x, x))


def _isinf_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    _check_category("isinf", types[0].dtype, FLOAT_ONLY)
    return TensorType(types[0].shape, dt.bool_)


def _lower_fmod(a: E.Expr, b: E.Expr) -> E.Expr:
    """C's remainder (sign of the dividend): libm's fmod for floats; for integers the loop IR's
    floor remainder moved back by the divisor where the operands' signs differ."""
    if a.dtype.startswith("float"):
        return E.call("fmod", a, b)
    zero = _const(0, a.dtype)
    m = a % b
    differs = E.logical_and(E.ne(m, zero), E.ne(E.lt(a, zero), E.lt(b, zero)))
    return E.Select(differs, m - b, m)


def _atan2_gradients():
    """d atan2(a, b) = (b da - a db) / (a^2 + b^2)."""
    return (lambda build, g, a, b, y: g * b / (a * a + b * b),
            lambda build, g, a, b, y: -g * a / (a * a + b * b))


_FMOD_GRADIENTS = (lambda build, g, a, b, y: g,
                   lambda build, g, a, b, y: -g * build.apply("trunc", [a / b]))

#     name          reference          dtypes      loop-IR lowering                 gradient of x
unary("asinh",      np.arcsinh,        FLOAT_ONLY, _call("asinh"),                  lambda b, g, x, y: g * (x * x + 1.0).rsqrt(),
      method="asinh", onnx="Asinh", aten="asinh")
unary("acosh",      np.arccosh,        FLOAT_ONLY, _call("acosh"),                  lambda b, g, x, y: g * (x * x - 1.0).rsqrt(),
      domain=(1, None), method="acosh", onnx="Acosh", aten="acosh")
unary("atanh",      np.arctanh,        FLOAT_ONLY, _call("atanh"),                  lambda b, g, x, y: g / (1.0 - x * x),
      domain=(-1, 1), method="atanh", onnx="Atanh", aten="atanh")
unary("erfc",       _erfc,             FLOAT_ONLY, _call("erfc"),
      lambda b, g, x, y: g * (x * x * -1.0).exp() * (-2.0 / math.sqrt(math.pi)),
      doc="1 - erf(x), accurate where erf(x) is close to 1", method="erfc", aten="erfc")
unary("exp2",       np.exp2,           FLOAT_ONLY, _call("exp2"),                   lambda b, g, x, y: g * y * math.log(2.0),
      method="exp2", aten="exp2")
unary("lgamma",     _lgamma_array,     FLOAT_ONLY, _call("lgamma"),                 NOT_DIFFERENTIABLE,
      doc="log |Gamma(x)|; +inf at 0, -1, -2, ...", method="lgamma", aten="lgamma")
# isinf's result is bool, so it is registered without `unary` (whose results keep the operand's dtype);
# its method answers False for integers itself.
register("isinf", OpKind.ELEMENTWISE, MappingType.ONE_TO_ONE, _isinf_infer, _unary_reference(np.isinf), 1,
         _describe(FLOAT_ONLY, "result bool; true for +inf and -inf"), lower=_expr(_lower_isinf),
         gradient=_unary_gradient(NOT_DIFFERENTIABLE), float_only=True, method="isinf", custom_method=True,
         aten="isinf")

#      name         reference                  dtypes      loop-IR lowering              gradients of a and b
binary("atan2",     np.arctan2,                FLOAT_ONLY, _call("atan2"),               _atan2_gradients(),
       doc="angle of the point (b, a)", method="atan2")
binary("fmod",      _int_safe(np.fmod),        NUMERIC,    _expr(_lower_fmod),           _FMOD_GRADIENTS,
       doc="remainder with the dividend's sign (C's fmod and %)", method="fmod")
binary("hypot",     np.hypot,                  FLOAT_ONLY, _call("hypot"),
       (lambda build, g, a, b, y: g * a / y, lambda build, g, a, b, y: g * b / y),
       doc="sqrt(a*a + b*b) without overflow", method="hypot")
binary("nextafter", np.nextafter,              FLOAT_ONLY, _call("nextafter"),           NOT_DIFFERENTIABLE,
       doc="the next float after a toward b", method="nextafter")
