"""Reduction primitives: sum, max, min, prod over a set of axes; argmax/argmin over one.

Attributes are normalized by the front-end: `axes` is a sorted tuple of
non-negative axes, `keepdims` a bool.
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError
from .registry import Attrs, MappingType, OpKind, TensorType, register


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    """Shape after reducing `axes`."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _check_axes(shape, axes):
    for a in axes:
        if not 0 <= a < len(shape):
            raise ShapeError(f"axis {a} out of range for rank {len(shape)}")
    if len(set(axes)) != len(axes):
        raise ShapeError(f"repeated axis in {list(axes)}")


def _reduce_infer(name):
    def infer(types: list[TensorType], attrs: Attrs) -> TensorType:
        t = types[0]
        axes = attrs["axes"]
        _check_axes(t.shape, axes)
        if name in ("reduce_max", "reduce_min") and any(t.shape[a] == 0 for a in axes):
            raise ShapeError(f"cannot take the {name[7:]} over an empty axis")
        if name in ("reduce_sum", "reduce_prod") and t.dtype.is_bool:
            raise DTypeError("cannot sum booleans; cast to an integer type first")
        return TensorType(reduced_shape(t.shape, axes, attrs["keepdims"]), t.dtype)
    return infer


def _reduce_reference(fn):
    def reference(inputs, attrs, out):
        x = inputs[0]
        result = fn(x, axis=attrs["axes"], keepdims=attrs["keepdims"])
        return np.asarray(result, dtype=x.dtype)
    return reference


def _arg_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    t = types[0]
    axis = attrs["axis"]
    _check_axes(t.shape, (axis,))
    if t.shape[axis] == 0:
        raise ShapeError("argmax/argmin of an empty axis")
    return TensorType(reduced_shape(t.shape, (axis,), attrs["keepdims"]), dt.int64)


def _arg_reference(fn):
    def reference(inputs, attrs, out):
        result = fn(inputs[0], axis=attrs["axis"], keepdims=attrs["keepdims"])
        return np.asarray(result, dtype=np.int64)
    return reference


for _name, _fn in {"reduce_sum": np.sum, "reduce_max": np.max,
                   "reduce_min": np.min, "reduce_prod": np.prod}.items():
    register(_name, OpKind.REDUCTION, MappingType.MANY_TO_MANY,
             _reduce_infer(_name), _reduce_reference(_fn), 1,
             doc="attrs axes (sorted), keepdims" + ("; an empty axis is an error" if _name in ("reduce_max", "reduce_min")
                                                     else ""))
# Ties go to the first index, as in numpy and PyTorch.
register("argmax", OpKind.REDUCTION, MappingType.MANY_TO_MANY, _arg_infer, _arg_reference(np.argmax), 1,
         doc="attrs axis, keepdims; first index on ties; int64")
register("argmin", OpKind.REDUCTION, MappingType.MANY_TO_MANY, _arg_infer, _arg_reference(np.argmin), 1,
         doc="attrs axis, keepdims; first index on ties; int64")
