"""The reference semantics of expressions: `evaluate` computes any expression on Python numbers.

Semantics are numpy's, not C's: `//` is floor division and `%` is floor
modulo; integer division or modulo by zero gives 0; integer arithmetic wraps
at the dtype's width; float32 arithmetic rounds to float32 after every
operation; min/max propagate NaN; a float converted to an integer truncates
toward zero and saturates, NaN giving 0. The generated C is tested against this.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from tensorkiln.loops.expr_nodes import (BITWISE_OPS, COMPARISON_OPS, BinOp, Bitcast, Call, Cast, Const, Expr, Load,
                                        Number, Select, Unary, Var, normalize_value)
from tensorkiln.loops.math import MATH_FUNCTIONS
from tensorkiln.loops.types import int_range, is_bool, is_int


def wrap_int(value: int, dtype: str) -> int:
    """Two's-complement wrap of `value` to the width of integer `dtype`."""
    if dtype == "bool":
        return int(bool(value))
    lo, hi = int_range(dtype)
    span = hi - lo + 1
    return (value - lo) % span + lo


def _np_scalar(value: Number, dtype: str):
    return np.float32(value) if dtype == "float32" else np.float64(value)


def _binary(op: str, a: Number, b: Number, dtype: str) -> Number:
    """Apply a binary operator to values of operand dtype `dtype`."""
    if op in COMPARISON_OPS:
        return {"lt": a < b, "le": a <= b, "eq": a == b, "ne": a != b}[op]
    if op == "and":
        return bool(a) and bool(b)
    if op == "or":
        return bool(a) or bool(b)
    if op in BITWISE_OPS:
        a, b = int(a), int(b)
        if op in ("shl", "shr") and not 0 <= b < 64:
            raise ValueError(f"shift count {b} is out of range")  # undefined in C as well
        return wrap_int({"bitand": a & b, "bitor": a | b, "bitxor": a ^ b, "shl": a << b if op == "shl" else 0,
                         "shr": a >> b if op == "shr" else 0}[op], dtype)
    # min/max propagate NaN from either side, like numpy.minimum/maximum
    if op == "min":
        return a if (a < b or a != a) else b
    if op == "max":
        return a if (a > b or a != a) else b
    if is_int(dtype):
        a, b = int(a), int(b)
        if op in ("floordiv", "mod") and b == 0:
            return 0  # numpy's answer; the generated C does the same instead of trapping
        result = {"add": a + b, "sub": a - b, "mul": a * b}.get(op)
        if result is None:
            result = a // b if op == "floordiv" else a % b
        return wrap_int(result, dtype)
    x, y = _np_scalar(a, dtype), _np_scalar(b, dtype)
    with np.errstate(all="ignore"):
        if op == "add":
            r = x + y
        elif op == "sub":
            r = x - y
        elif op == "mul":
            r = x * y
        elif op == "div":
            r = x / y
        elif op == "floordiv":
            r = np.floor_divide(x, y)
        else:  # floor modulo, numpy's definition
            r = np.mod(x, y)
    return float(r)


def evaluate(expr: Expr, env: Mapping[str, Number], buffers: Mapping[str, np.ndarray] | None = None) -> Number:
    """Evaluate `expr` with variable values from `env` and flat arrays from `buffers`."""
    if isinstance(expr, Var):
        return normalize_value(env[expr.name], expr.dtype)
    if isinstance(expr, Const):
        return expr.value
    if isinstance(expr, BinOp):
        a = evaluate(expr.a, env, buffers)
        b = evaluate(expr.b, env, buffers)
        return _binary(expr.operator, a, b, expr.a.dtype)
    if isinstance(expr, Unary):
        x = evaluate(expr.x, env, buffers)
        if expr.operator == "not":
            return not x
        return wrap_int(-x, expr.dtype) if is_int(expr.dtype) else -x
    if isinstance(expr, Select):
        c = evaluate(expr.cond, env, buffers)
        return evaluate(expr.a, env, buffers) if c else evaluate(expr.b, env, buffers)
    if isinstance(expr, Cast):
        x = evaluate(expr.x, env, buffers)
        if is_bool(expr.dtype):
            return bool(x)
        if is_int(expr.dtype) and isinstance(x, float):
            if x != x:
                return 0
            lo, hi = int_range(expr.dtype)
            return hi if x >= hi else lo if x <= lo else int(math.trunc(x))
        if is_int(expr.dtype):
            return wrap_int(int(x), expr.dtype)
        if isinstance(x, int) and not isinstance(x, bool):
            # one rounding, int64 -> float, as C does (not int -> float64 -> float32)
            return float(np.array(x, dtype=np.int64).astype(np.float32 if expr.dtype == "float32" else np.float64))
        return normalize_value(x, expr.dtype)
    if isinstance(expr, Bitcast):
        value = np.array(evaluate(expr.x, env, buffers), dtype=expr.x.dtype)
        return value.view(expr.dtype).item()
    if isinstance(expr, Call):
        if MATH_FUNCTIONS[expr.fn].signature is not None:  # integer arguments, as they are
            return normalize_value(MATH_FUNCTIONS[expr.fn].evaluate(*(evaluate(a, env, buffers) for a in expr.args)),
                              expr.dtype)
        args = [_np_scalar(evaluate(a, env, buffers), expr.dtype) for a in expr.args]
        with np.errstate(all="ignore"):
            return float(MATH_FUNCTIONS[expr.fn].evaluate(*args))
    if isinstance(expr, Load):
        if buffers is None or expr.buffer.name not in buffers:
            raise KeyError(f"no array given for buffer {expr.buffer.name}")
        index = evaluate(expr.index, env, buffers)
        array = buffers[expr.buffer.name].reshape(-1)
        if not 0 <= index < array.size:
            raise IndexError(f"index {index} out of range for {expr.buffer.name} of size {array.size}")
        return array[index].item()
    raise TypeError(f"not an expression: {expr!r}")
