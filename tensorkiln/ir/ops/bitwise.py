"""Bit-level primitives: shift_left and shift_right (with a result for every shift count), and
bitcast (the same bits read as another type of the same width).

C (and x86) leave a shift by a negative count, or by the operand's width or more,
undefined; these rows define it as ONNX's BitShift does: such a left shift gives
0, such a right shift gives the sign fill (-1 for a negative signed value, else
0). A left shift wraps to the type (a signed value is shifted as its unsigned bit
pattern); a right shift of a signed value is arithmetic, of an unsigned one
logical. The loop-IR lowering clamps the count into range before the C shift
and selects the out-of-range result, so generated code never shifts out of range.

bitcast between integers of one width is their modular conversion (a cast); between a float
and an integer it is the loop IR's Bitcast (a memcpy in C). float16 and bfloat16 are refused:
kernels compute them in float32, so their bits are not at hand (NaN payloads would change).
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError
from ...loops import expr as E
from ...loops.types import itemsize
from .elementwise import _const, _expr, binary
from .gradient import NOT_DIFFERENTIABLE
from .registry import Attrs, MappingType, OpKind, TensorType, register

INTEGER = (1,)


def _bits(dtype: np.dtype) -> int:
    return np.dtype(dtype).itemsize * 8


def _count_in_range(count: np.ndarray, bits: int) -> np.ndarray:
    return (count >= 0) & (count < bits)


def _shift_left_reference(a: np.ndarray, count: np.ndarray) -> np.ndarray:
    bits = _bits(a.dtype)
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    clamped = np.clip(count, 0, bits - 1).astype(unsigned)
    shifted = np.left_shift(a.astype(unsigned), clamped).astype(a.dtype)
    return np.where(_count_in_range(count, bits), shifted, 0).astype(a.dtype)


def _shift_right_reference(a: np.ndarray, count: np.ndarray) -> np.ndarray:
    bits = _bits(a.dtype)
    shifted = np.right_shift(a, np.clip(count, 0, bits - 1).astype(a.dtype))
    fill = np.where(a < 0, -1, 0) if a.dtype.kind == "i" else 0
    return np.where(_count_in_range(count, bits), shifted, fill).astype(a.dtype)


def _in_range_and_clamped(count: E.Expr) -> tuple[E.Expr, E.Expr]:
    """(count in [0, bits), count clamped into that range) for a count of the shifted value's dtype."""
    bits = 8 * itemsize(count.dtype)
    zero, top = _const(0, count.dtype), _const(bits - 1, count.dtype)
    in_range = E.logical_and(E.ge(count, zero), E.le(count, top))
    return in_range, E.minimum(E.maximum(count, zero), top)


def _lower_shift_left(a: E.Expr, count: E.Expr) -> E.Expr:
    in_range, clamped = _in_range_and_clamped(count)
    return E.Select(in_range, E.BinOp("shl", a, clamped), _const(0, a.dtype))


def _lower_shift_right(a: E.Expr, count: E.Expr) -> E.Expr:
    in_range, clamped = _in_range_and_clamped(count)
    zero = _const(0, a.dtype)
    fill = zero if a.dtype.startswith("u") else E.Select(E.lt(a, zero), _const(-1, a.dtype), zero)
    return E.Select(in_range, E.BinOp("shr", a, clamped), fill)


#      name            reference                dtypes   loop-IR lowering             gradients
binary("shift_left",   _shift_left_reference,   INTEGER, _expr(_lower_shift_left),    NOT_DIFFERENTIABLE,
       doc="a << b, wrapping; 0 where b < 0 or b >= the bit width")
binary("shift_right",  _shift_right_reference,  INTEGER, _expr(_lower_shift_right),   NOT_DIFFERENTIABLE,
       doc="a >> b (arithmetic for signed a); the sign fill where b < 0 or b >= the bit width")


def _bitcast_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    source, target = types[0].dtype, attrs["dtype"]
    for d in (source, target):
        if d in (dt.float16, dt.bfloat16):
            raise DTypeError(f"{d.name} is not supported (kernels hold it as float32, not as its bits)")
    if target.is_bool and not source.is_bool:
        raise DTypeError(f"to bool from {source.name}: only 0 and 1 are bools")
    if source.itemsize != target.itemsize:
        raise DTypeError(f"{source.name} ({source.bits} bits) and {target.name} ({target.bits} bits) differ in width")
    return TensorType(types[0].shape, target)


def _bitcast_reference(inputs, attrs, out):
    x = inputs[0]
    return np.ascontiguousarray(x).reshape(x.shape).view(attrs["dtype"].storage)  # (ascontiguousarray makes 0-d 1-d)


def _lower_bitcast(args, node):
    (x,) = args
    target = node.dtype.name
    if x.dtype.startswith("float") != target.startswith("float"):
        return E.Bitcast(x, target)
    return E.cast(x, target)  # integers (and bool) of one width: the modular conversion keeps the bits


register("bitcast", OpKind.ELEMENTWISE, MappingType.ONE_TO_ONE, _bitcast_infer, _bitcast_reference, 1,
         "bitcast(x; dtype): the same bits as `dtype`, of the same width (no float16/bfloat16)",
         lower=_lower_bitcast, gradient=NOT_DIFFERENTIABLE, cheap=True)
