"""Elementwise primitives: unary math, binary arithmetic and comparisons, where, cast.

Binary and ternary ops broadcast their operands with numpy's rule; operands of
arithmetic must already share one dtype (the front-end inserts casts after
type promotion, so every conversion is visible in the graph).
"""
from __future__ import annotations

import math

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError
from .registry import Attrs, MappingType, OpKind, TensorType, register


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy broadcasting of shapes; raises ShapeError when they do not fit."""
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(ndim):
        size = 1
        for shape in shapes:
            k = axis - (ndim - len(shape))
            if k < 0:
                continue
            d = shape[k]
            if d == 1:
                continue
            if size != 1 and d != size:
                raise ShapeError(f"shapes {' and '.join(str(list(s)) for s in shapes)} "
                                 f"cannot be broadcast (axis {axis - ndim}: {size} vs {d})")
            size = d
        result.append(size)
    return tuple(result)


def _erf(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf  # exact to the last bit; optional
        return erf(x)
    except ImportError:
        return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x.copy()


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so exp never overflows.
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1.0 + e)
    return out


def _round_half_even(x: np.ndarray) -> np.ndarray:
    return np.round(x)


# name -> (numpy function, which dtype categories it accepts)
FLOAT_ONLY = (2,)
NUMERIC = (1, 2)
ANY = (0, 1, 2)
UNARY_OPS = {
    "neg": (np.negative, NUMERIC),
    "abs": (np.abs, NUMERIC),
    "sign": (np.sign, NUMERIC),
    "relu": (lambda x: np.maximum(x, 0).astype(x.dtype), NUMERIC),
    "exp": (np.exp, FLOAT_ONLY),
    "log": (np.log, FLOAT_ONLY),
    "sqrt": (np.sqrt, FLOAT_ONLY),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), FLOAT_ONLY),
    "reciprocal": (lambda x: 1.0 / x, FLOAT_ONLY),
    "sin": (np.sin, FLOAT_ONLY),
    "cos": (np.cos, FLOAT_ONLY),
    "tanh": (np.tanh, FLOAT_ONLY),
    "erf": (_erf, FLOAT_ONLY),
    "sigmoid": (_sigmoid, FLOAT_ONLY),
    "floor": (np.floor, FLOAT_ONLY),
    "ceil": (np.ceil, FLOAT_ONLY),
    "round": (_round_half_even, FLOAT_ONLY),
    "not": (np.logical_not, (0,)),
    "isnan": (np.isnan, FLOAT_ONLY),
}


def _py_mod(a, b):
    return np.mod(a, b)  # sign follows the divisor, like Python and PyTorch's remainder


def _floor_div(a, b):
    return np.floor_divide(a, b)


def _int_safe(fn):
    """Integer division by zero is undefined in C; make the reference say so loudly."""
    def wrapped(a, b):
        if a.dtype.kind in "iu" and np.any(b == 0):
            raise ZeroDivisionError("integer division by zero")
        return fn(a, b)
    return wrapped


BINARY_OPS = {
    "add": (np.add, NUMERIC),
    "sub": (np.subtract, NUMERIC),
    "mul": (np.multiply, NUMERIC),
    "div": (np.divide, FLOAT_ONLY),
    "floor_div": (_int_safe(_floor_div), NUMERIC),
    "mod": (_int_safe(_py_mod), NUMERIC),
    "pow": (np.power, NUMERIC),
    "maximum": (np.maximum, ANY),
    "minimum": (np.minimum, ANY),
    "and": (np.bitwise_and, (0, 1)),
    "or": (np.bitwise_or, (0, 1)),
    "xor": (np.bitwise_xor, (0, 1)),
}
COMPARE_OPS = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less,
    "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
}
CATEGORY_NAMES = {0: "bool", 1: "integer", 2: "floating"}


def _check_category(name: str, dtype: dt.DType, allowed: tuple[int, ...]) -> None:
    if dtype.category not in allowed:
        kinds = "/".join(CATEGORY_NAMES[c] for c in allowed)
        raise DTypeError(f"expects {kinds} operands, got {dtype.name}")


def _unary_infer(name, allowed):
    def infer(types: list[TensorType], attrs: Attrs) -> TensorType:
        _check_category(name, types[0].dtype, allowed)
        out_dtype = dt.bool_ if name == "isnan" else types[0].dtype
        return TensorType(types[0].shape, out_dtype)
    return infer


def _unary_reference(fn):
    def reference(inputs, attrs, out):
        with np.errstate(all="ignore"):
            return fn(inputs[0])
    return reference


def _same_dtype(types: list[TensorType]) -> dt.DType:
    first = types[0].dtype
    for t in types[1:]:
        if t.dtype != first:
            raise DTypeError(f"operand dtypes differ ({', '.join(x.dtype.name for x in types)}); "
                             "cast them to one dtype first")
    return first


def _binary_infer(name, allowed, compare=False):
    def infer(types: list[TensorType], attrs: Attrs) -> TensorType:
        dtype = _same_dtype(types)
        _check_category(name, dtype, allowed)
        shape = broadcast_shapes(types[0].shape, types[1].shape)
        return TensorType(shape, dt.bool_ if compare else dtype)
    return infer


def _binary_reference(fn):
    def reference(inputs, attrs, out):
        with np.errstate(all="ignore"):
            return fn(inputs[0], inputs[1])
    return reference


def _where_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    cond, a, b = types
    if not cond.dtype.is_bool:
        raise DTypeError(f"condition must be bool, got {cond.dtype.name}")
    dtype = _same_dtype([a, b])
    return TensorType(broadcast_shapes(cond.shape, a.shape, b.shape), dtype)


def _cast_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    return TensorType(types[0].shape, attrs["dtype"])


def _cast_reference(inputs, attrs, out):
    x = inputs[0]
    target = attrs["dtype"].compute
    if target.is_integer and x.dtype.kind == "f":
        # C leaves out-of-range conversions undefined; tensorkiln truncates toward zero,
        # saturates at the integer range and maps NaN to 0, here and in generated code.
        info = np.iinfo(target.storage)
        wide = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0, posinf=np.inf, neginf=-np.inf)
        inside = np.clip(wide, -2.0 ** 62, 2.0 ** 62).astype(np.int64)
        return np.where(wide >= float(info.max), info.max,
                        np.where(wide <= float(info.min), info.min, inside)).astype(target.storage)
    with np.errstate(all="ignore"):
        return x.astype(target.storage)


for _name, (_fn, _allowed) in UNARY_OPS.items():
    register(_name, OpKind.ELEMENTWISE, MappingType.ONE_TO_ONE,
             _unary_infer(_name, _allowed), _unary_reference(_fn), 1)
for _name, (_fn, _allowed) in BINARY_OPS.items():
    register(_name, OpKind.ELEMENTWISE, MappingType.ONE_TO_ONE,
             _binary_infer(_name, _allowed), _binary_reference(_fn), 2)
for _name, _fn in COMPARE_OPS.items():
    register(_name, OpKind.ELEMENTWISE, MappingType.ONE_TO_ONE,
             _binary_infer(_name, ANY, compare=True), _binary_reference(_fn), 2)
register("where", OpKind.ELEMENTWISE, MappingType.ONE_TO_ONE, _where_infer,
         lambda inputs, attrs, out: np.where(*inputs), 3)
register("cast", OpKind.ELEMENTWISE, MappingType.ONE_TO_ONE, _cast_infer, _cast_reference, 1)
