"""iota: the arithmetic sequence start, start + step, ... of a given length (arange's primitive).

An elementwise op without operands: its element is a function of its index
alone, `start + i * step`, so the C backend computes it in whatever loop reads
it and never stores it. Its length (and its start) may be a size symbol
(tensorkiln.shapes.SymInt): `tk.arange(x.shape[0])` then stays symbolic
instead of becoming a constant of one length. A static iota is folded into a
constant by the constant-folding pass like any other all-constant node.
"""
from __future__ import annotations

import numpy as np

from ...errors import DTypeError, ShapeError
from ...loops import expr as E
from ...loops.types import INDEX_DTYPE, compute_dtype
from ...shapes import is_symbolic
from .gradient import NOT_DIFFERENTIABLE
from .registry import Attrs, MappingType, OpKind, TensorType, register


def _infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    length, dtype = attrs["length"], attrs["dtype"]
    if not is_symbolic(length) and (not isinstance(length, (int, np.integer)) or length < 0):
        raise ShapeError(f"length must be a non-negative integer, got {length!r}")
    if dtype.category == 0:
        raise DTypeError("a sequence of bool values is not defined; ask for an integer or floating dtype")
    if dtype.category == 1 and not all(isinstance(v, (int, np.integer)) or is_symbolic(v)
                                       for v in (attrs["start"], attrs["step"])):
        raise DTypeError(f"an integer sequence needs integer start and step, got {attrs['start']!r} "
                         f"and {attrs['step']!r}")
    return TensorType((length,), dtype)


def _reference(inputs, attrs: Attrs, out: TensorType) -> np.ndarray:
    # int() of a symbolic start or length pins it (a guard): the reference runs at one size only
    length, start, step = int(attrs["length"]), attrs["start"], attrs["step"]
    start = int(start) if is_symbolic(start) else start
    if out.dtype.category == 2:  # in float64 first, as the C expression computes it
        return (float(start) + np.arange(length, dtype=np.float64) * float(step)).astype(out.dtype.compute.storage)
    return (start + np.arange(length, dtype=np.int64) * step).astype(out.dtype.compute.storage)


def _lower(index: tuple[E.Expr, ...], node) -> E.Expr:
    """start + i * step at output index i (an operand-free row receives the index as its operands)."""
    (i,) = index
    start, step = node.attrs["start"], node.attrs["step"]
    target = compute_dtype(node.dtype.name)
    if node.dtype.category == 2:  # in float64, as the reference computes it, then rounded once
        value = E.cast(i, "float64")
        if step != 1:
            value = value * E.Const(float(step), "float64")
        if is_symbolic(start):
            value = value + E.cast(E.const(start), "float64")
        elif start != 0:
            value = value + E.Const(float(start), "float64")
        return E.cast(value, target) if target != "float64" else value
    value = i * int(step) if step != 1 else i
    if is_symbolic(start) or start != 0:
        value = value + E.const(start, INDEX_DTYPE)
    return E.cast(value, target) if target != INDEX_DTYPE else value


register("iota", OpKind.ELEMENTWISE, MappingType.ONE_TO_ONE, _infer, _reference, 0,
         "start + i * step for i < length; attrs: length and start may be size symbols, step, dtype; "
         "`tk.arange` of a symbolic size", lower=_lower, cheap=True, gradient=NOT_DIFFERENTIABLE,
         onnx="Range", aten="arange")
