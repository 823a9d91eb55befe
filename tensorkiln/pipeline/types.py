"""Halide's scalar types and its rules for mixing them.

A type is a dtype name ("uint16", "int32", "float32", "bool", ...). Halide's
rules, which `promote` implements, differ from numpy's:

- equal types stay as they are: uint16 + uint16 is uint16, and wraps;
- a float with an integer gives the float; two floats give the wider;
- two unsigned or two signed integers give the wider;
- a signed with an unsigned integer gives a signed integer of the greater width;
- a Python int next to an expression takes that expression's type (and must
  fit in it); a Python float next to an integer expression makes float32.

Alone, a Python int is int32 and a Python float is float32; a `Var` is int32.
"""
from __future__ import annotations

import numpy as np

from tensorkiln.errors import DTypeError

TYPES = ("bool", "uint8", "uint16", "uint32", "int8", "int16", "int32", "int64", "float32", "float64")
_BITS = {"bool": 1, "uint8": 8, "uint16": 16, "uint32": 32, "int8": 8, "int16": 16, "int32": 32, "int64": 64,
         "float32": 32, "float64": 64}


def UInt(bits: int) -> str:
    """Halide's `UInt(bits)`: "uint8", "uint16" or "uint32"."""
    return check_type(f"uint{bits}")


def Int(bits: int) -> str:
    """Halide's `Int(bits)`: "int8" ... "int64"."""
    return check_type(f"int{bits}")


def Float(bits: int) -> str:
    """Halide's `Float(bits)`: "float32" or "float64"."""
    return check_type(f"float{bits}")


def Bool() -> str:
    """Halide's `Bool()`."""
    return "bool"


def check_type(t: object) -> str:
    """The type name of `t` (a name, a numpy dtype or scalar type), or a DTypeError."""
    if not isinstance(t, str):
        try:
            t = np.dtype(t).name  # type: ignore[arg-type]
        except TypeError:
            raise DTypeError(f"not a type: {t!r}") from None
    if t not in TYPES:
        raise DTypeError(f"image pipelines have no type {t!r}; known: {', '.join(TYPES)}")
    return t


def bits(t: str) -> int:
    """Width in bits."""
    return _BITS[t]


def is_float(t: str) -> bool:
    """True for float32 and float64."""
    return t.startswith("float")


def is_uint(t: str) -> bool:
    """True for unsigned integers."""
    return t.startswith("uint")


def is_int(t: str) -> bool:
    """True for integers, signed or unsigned (not bool)."""
    return t.startswith("int") or is_uint(t)


def type_range(t: str) -> tuple[int, int]:
    """Inclusive value range of an integer or bool type."""
    if t == "bool":
        return (0, 1)
    n = bits(t)
    return (0, (1 << n) - 1) if is_uint(t) else (-(1 << (n - 1)), (1 << (n - 1)) - 1)


def promote(a: str, b: str) -> str:
    """The type both operands of a binary operator are converted to (Halide's rules)."""
    if a == b:
        return a
    if is_float(a) or is_float(b):
        if is_float(a) and is_float(b):
            return a if bits(a) >= bits(b) else b
        return a if is_float(a) else b
    if a == "bool" or b == "bool":
        return b if a == "bool" else a
    if is_uint(a) == is_uint(b):
        return a if bits(a) >= bits(b) else b
    return f"int{max(bits(a), bits(b))}"


def literal_type(value: object, other: str) -> str:
    """The type a Python number takes next to an expression of type `other`."""
    if isinstance(value, (bool, np.bool_)):
        return "bool" if other == "bool" else other
    if isinstance(value, (int, np.integer)):
        if is_float(other):
            return other
        if other == "bool":
            return "int32"
        lo, hi = type_range(other)
        if not lo <= int(value) <= hi:
            raise DTypeError(f"integer constant {int(value)} does not fit in {other}, the type of the expression "
                             f"it is combined with; cast one of them explicitly")
        return other
    if isinstance(value, (float, np.floating)):
        return other if is_float(other) else "float32"
    raise TypeError(f"cannot use {type(value).__name__} {value!r} in a pipeline expression")


def default_literal_type(value: object) -> str:
    """The type of a Python number on its own: bool, int32 or float32."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        if not -(2**31) <= int(value) < 2**31:
            raise DTypeError(f"integer constant {int(value)} does not fit in int32; use pl.cast")
        return "int32"
    if isinstance(value, (float, np.floating)):
        return "float32"
    raise TypeError(f"cannot use {type(value).__name__} {value!r} in a pipeline expression")
