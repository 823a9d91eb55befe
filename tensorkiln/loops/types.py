"""The element types the loop IR knows, by name.

The names are the ones `tensorkiln.dtypes` uses ("float32", "bfloat16", ...),
so the lowering pass can pass `dtype.name` straight through. This module only
answers the questions the loop IR and the C backend ask about a dtype name;
when `tensorkiln.dtypes` grows the same answers this table can defer to it.

uint16 and uint32 serve the image pipelines too (tensorkiln/pipeline/: a
uint16 image wraps as Halide's does).

float16 and bfloat16 are *storage* types: a buffer may hold them, but an
expression never computes in them. Loading from such a buffer yields a
float32 value and storing a float32 value into one rounds to nearest even.
"""
from __future__ import annotations

# name -> (bytes per element, kind)
_DTYPES: dict[str, tuple[int, str]] = {
    "float32": (4, "float"),
    "float64": (8, "float"),
    "float16": (2, "float"),
    "bfloat16": (2, "float"),
    "uint8": (1, "int"),
    "uint16": (2, "int"),
    "uint32": (4, "int"),
    "uint64": (8, "int"),
    "int8": (1, "int"),
    "int16": (2, "int"),
    "int32": (4, "int"),
    "int64": (8, "int"),
    "bool": (1, "bool"),
}

DTYPE_NAMES: tuple[str, ...] = tuple(_DTYPES)
STORAGE_ONLY: frozenset[str] = frozenset({"float16", "bfloat16"})
UNSIGNED: frozenset[str] = frozenset({"uint8", "uint16", "uint32", "uint64"})
INDEX_DTYPE = "int64"  # loop variables and index arithmetic


def check_dtype(dtype: str) -> str:
    """Return `dtype` if it names a known element type, else raise ValueError."""
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_NAMES)}")
    return dtype


def itemsize(dtype: str) -> int:
    """Bytes per element of `dtype`."""
    return _DTYPES[check_dtype(dtype)][0]


def is_float(dtype: str) -> bool:
    """True for floating-point dtypes (storage-only ones included)."""
    return _DTYPES[check_dtype(dtype)][1] == "float"


def is_int(dtype: str) -> bool:
    """True for integer dtypes, signed or unsigned (not bool)."""
    return _DTYPES[check_dtype(dtype)][1] == "int"


def is_unsigned(dtype: str) -> bool:
    """True for unsigned integer dtypes (uint8, uint16, uint32, uint64)."""
    return check_dtype(dtype) in UNSIGNED


def is_bool(dtype: str) -> bool:
    """True for the boolean dtype."""
    return check_dtype(dtype) == "bool"


def compute_dtype(dtype: str) -> str:
    """The dtype arithmetic happens in for values stored as `dtype` (float16/bfloat16 -> float32)."""
    return "float32" if check_dtype(dtype) in STORAGE_ONLY else dtype


def int_range(dtype: str) -> tuple[int, int]:
    """Inclusive value range of an integer or bool dtype."""
    if dtype == "bool":
        return (0, 1)
    bits = 8 * itemsize(dtype)
    if is_unsigned(dtype):
        return (0, (1 << bits) - 1)
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
