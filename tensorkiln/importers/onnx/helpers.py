"""Small axis and shape helpers the converter families share."""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import ShapeError
from ...frontend.tensor import Tensor
from ...shapes import prod as sym_prod
from ...shapes.symint import IntLike


def normalize_axis(axis: int, rank: int) -> int:
    """`axis` in [0, rank) from ONNX's [-rank, rank); ShapeError outside it."""
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise ShapeError(f"axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def prod(values) -> IntLike:
    """The product of `values` (a shape) as a Python int; 1 when empty; symbolic when a size is."""
    return sym_prod(values)


def filled(shape, value, dtype: dt.DType) -> Tensor:
    """An eager tensor of `shape` holding `value` everywhere."""
    return Tensor._from_value(dt.to_storage(np.full(tuple(shape), value), dtype), dtype)


def axes_input(ctx, inputs, attrs, since: int, position: int = 1):
    """Axes given as an attribute (before opset `since`) or as an input (from it)."""
    if ctx.opset < since:
        return attrs.get("axes")
    return ctx.ints(inputs[position], "axes") if len(inputs) > position else None
