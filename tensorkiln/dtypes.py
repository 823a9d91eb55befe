"""Data types and the type-promotion rule.

Storage: every dtype is kept in a numpy array of its own width. numpy has no
bfloat16, so bfloat16 values are stored as their upper 16 bits in uint16 arrays
and converted (round to nearest even) when written. float16 and bfloat16 are
storage types: arithmetic on them runs in float32 and the result is rounded
back, as PyTorch does on CPUs.

Promotion (docs/dtypes.md has the table) follows torch.promote_types:
categories order bool < integer < floating. Two tensors promote to the wider
type of the higher category; float16 with bfloat16 gives float32; uint8 with a
signed integer gives the narrowest signed type that holds both (int16 with
int8, else the signed one). A Python scalar is "weak": it never widens a
tensor's type within its category (int8 tensor + 3 stays int8, uint8 tensor
minus 1 stays uint8 and wraps, float16 tensor * 0.5 stays float16), and only
lifts the category (int tensor + 0.5 gives float32, the default float).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    """A tensor element type: its name, category, width and numpy storage type."""

    name: str
    category: int  # 0 bool, 1 integer, 2 floating
    bits: int
    storage: np.dtype  # numpy dtype the values are kept in
    short: str  # used by the graph printer: f32, i64, ...

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.bits // 8 if self.bits >= 8 else 1

    @property
    def is_floating(self) -> bool:
        return self.category == 2

    @property
    def is_integer(self) -> bool:
        return self.category == 1

    @property
    def is_bool(self) -> bool:
        return self.category == 0

    @property
    def is_unsigned(self) -> bool:
        """True for unsigned integers (uint8 ... uint64); bfloat16's uint16 storage does not count."""
        return self.is_integer and self.storage.kind == "u"

    @property
    def compute(self) -> "DType":
        """The type arithmetic runs in: float32 for the 16-bit floats, else itself."""
        return float32 if self.name in ("float16", "bfloat16") else self

    def __repr__(self) -> str:
        return f"tk.{self.name}"


bool_ = DType("bool", 0, 8, np.dtype(np.bool_), "bool")
uint8 = DType("uint8", 1, 8, np.dtype(np.uint8), "u8")
uint16 = DType("uint16", 1, 16, np.dtype(np.uint16), "u16")
uint32 = DType("uint32", 1, 32, np.dtype(np.uint32), "u32")
uint64 = DType("uint64", 1, 64, np.dtype(np.uint64), "u64")
int8 = DType("int8", 1, 8, np.dtype(np.int8), "i8")
int16 = DType("int16", 1, 16, np.dtype(np.int16), "i16")
int32 = DType("int32", 1, 32, np.dtype(np.int32), "i32")
int64 = DType("int64", 1, 64, np.dtype(np.int64), "i64")
float16 = DType("float16", 2, 16, np.dtype(np.float16), "f16")
bfloat16 = DType("bfloat16", 2, 16, np.dtype(np.uint16), "bf16")
float32 = DType("float32", 2, 32, np.dtype(np.float32), "f32")
float64 = DType("float64", 2, 64, np.dtype(np.float64), "f64")

ALL_DTYPES = (bool_, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, uint16, uint32, uint64)
FLOAT_DTYPES = (float16, bfloat16, float32, float64)
INT_DTYPES = (uint8, int8, int16, int32, int64, uint16, uint32, uint64)
_SIGNED_BY_BITS = {d.bits: d for d in INT_DTYPES if not d.is_unsigned}
_BY_NAME = {d.name: d for d in ALL_DTYPES}
_BY_NAME.update({"bool_": bool_, "float": float32, "double": float64, "half": float16, "byte": uint8,
                 "short": int16, "int": int32, "long": int64, "f32": float32, "f64": float64})

DEFAULT_FLOAT = float32
DEFAULT_INT = int64


def as_dtype(value) -> DType:
    """Convert a DType, name, numpy dtype, Python type or torch-like dtype to a DType."""
    if isinstance(value, DType):
        return value
    if value is bool:
        return bool_
    if value is int:
        return int64
    if value is float:
        return float32
    if isinstance(value, str):
        key = value.split(".")[-1]
        if key in _BY_NAME:
            return _BY_NAME[key]
        raise TypeError(f"unknown dtype {value!r}")
    name = getattr(value, "name", None) or str(value).split(".")[-1]
    if name in _BY_NAME:  # numpy dtypes, torch.float32, ...
        return _BY_NAME[name]
    try:
        np_name = np.dtype(value).name
    except TypeError:
        raise TypeError(f"unknown dtype {value!r}") from None
    if np_name in _BY_NAME:
        return _BY_NAME[np_name]
    raise TypeError(f"dtype {value!r} is not supported (supported: "
                    f"{', '.join(d.name for d in ALL_DTYPES)})")


def from_numpy_dtype(np_dtype: np.dtype) -> DType:
    """The DType for a numpy array (each numpy integer and float type has its own)."""
    np_dtype = np.dtype(np_dtype)
    if np_dtype.name in _BY_NAME:
        return _BY_NAME[np_dtype.name]
    if np_dtype.kind == "i":
        return int32 if np_dtype.itemsize <= 4 else int64
    if np_dtype.kind == "f":
        return float64 if np_dtype.itemsize > 4 else float32
    raise TypeError(f"numpy dtype {np_dtype} is not supported")


def _promote_two(a: DType, b: DType) -> DType:
    if a == b:
        return a
    if a.category != b.category:
        return a if a.category > b.category else b
    if a.is_integer and a.is_unsigned != b.is_unsigned:
        return _promote_mixed_sign(a, b)
    if a.bits == b.bits:  # float16 with bfloat16
        return float32
    return a if a.bits > b.bits else b


def _promote_mixed_sign(a: DType, b: DType) -> DType:
    """An unsigned with a signed integer: the narrowest signed type holding both ranges
    (uint8 with int8 gives int16, as torch.promote_types does); uint64 with a signed type gives
    int64, the widest there is, which does not hold uint64's upper half."""
    unsigned, signed = (a, b) if a.is_unsigned else (b, a)
    return _SIGNED_BY_BITS[min(max(signed.bits, 2 * unsigned.bits), 64)]


def promote_types(*dtypes: DType) -> DType:
    """The result type of combining tensors of these dtypes."""
    result = dtypes[0]
    for d in dtypes[1:]:
        result = _promote_two(result, d)
    return result


def scalar_category(value) -> int:
    """Category of a Python scalar: 0 bool, 1 int, 2 float."""
    if isinstance(value, (bool, np.bool_)):
        return 0
    if isinstance(value, (int, np.integer)):
        return 1
    if isinstance(value, (float, np.floating)):
        return 2
    raise TypeError(f"not a scalar: {value!r}")


def result_type(tensor_dtypes: list[DType], scalar_categories: list[int]) -> DType:
    """Promotion with weak Python scalars: scalars only lift the category."""
    if tensor_dtypes:
        result = promote_types(*tensor_dtypes)
    else:
        top = max(scalar_categories)
        return (bool_, DEFAULT_INT, DEFAULT_FLOAT)[top]
    top = max(scalar_categories, default=-1)
    if top > result.category:
        result = (bool_, DEFAULT_INT, DEFAULT_FLOAT)[top]
    return result


# ---- storage conversion -------------------------------------------------------

def bf16_bits_from_f32(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest even), returned as uint16 bit patterns."""
    values = np.asarray(values)
    # ascontiguousarray would turn a 0-d array into shape (1,); keep the shape.
    f = np.ascontiguousarray(values, dtype=np.float32).reshape(values.shape)
    bits = f.view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    rounded = ((bits + rounding) >> 16).astype(np.uint16)
    # NaN must stay NaN (rounding could carry it into infinity).
    return np.where(np.isnan(f), np.uint16(0x7FC0), rounded).astype(np.uint16)


def f32_from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    """Widen bfloat16 bit patterns to float32 values."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_compute(array: np.ndarray, dtype: DType) -> np.ndarray:
    """Storage array -> array in the type arithmetic runs in."""
    if dtype is bfloat16:
        return f32_from_bf16_bits(array)
    if dtype is float16:
        return array.astype(np.float32)
    return array


def to_storage(array, dtype: DType) -> np.ndarray:
    """Any numeric array -> storage array of `dtype` (rounding for bfloat16)."""
    array = np.asarray(array)
    if dtype is bfloat16:
        if array.dtype == np.uint16:
            return array
        return bf16_bits_from_f32(array.astype(np.float32))
    return array.astype(dtype.storage, copy=False)


def finfo_min(dtype: DType):
    """The lowest value of a dtype (-inf for floats): identity of max-reduction."""
    if dtype.is_floating:
        return -np.inf
    if dtype.is_bool:
        return False
    return np.iinfo(dtype.storage).min


def finfo_max(dtype: DType):
    """The highest value of a dtype (+inf for floats): identity of min-reduction."""
    if dtype.is_floating:
        return np.inf
    if dtype.is_bool:
        return True
    return np.iinfo(dtype.storage).max
