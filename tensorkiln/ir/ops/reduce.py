"""Reduction primitives: sum, max, min, prod over a set of axes; argmax/argmin over one.

Attributes are normalized by the front-end: `axes` is a sorted tuple of
non-negative axes, `keepdims` a bool.
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError
from .gradient import NOT_DIFFERENTIABLE, kept, mask
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


# ---- reductions --------------------------------------------------------------------------

def _reduce_sum_gradient(g, inputs, out, attrs, needs, build):
    x = inputs[0]
    return (kept(g, x.shape, attrs["axes"], attrs["keepdims"]).expand(x.shape),)


def _reduce_extremum_gradient(reached: str):
    """The rule of reduce_max (reached="ge") or reduce_min ("le"): ties split evenly, each of
    k equal extremes gets g / k."""
    def rule(g, inputs, out, attrs, needs, build):
        x = inputs[0]
        axes, keep = attrs["axes"], attrs["keepdims"]
        extreme = kept(out, x.shape, axes, keep)
        count = build.apply("reduce_sum", [(x == extreme).to(g.dtype)], axes=axes, keepdims=True)
        share = kept(g, x.shape, axes, keep) / count  # at the reduced shape: one division per extreme
        # x >= max (x <= min) holds exactly where x == the extreme. Spelt differently from the
        # count's mask, the two are not merged into one stored mask: each fuses into its reader
        # (max-pool backward is then a small count reduction and one elementwise kernel).
        return (mask(build, build.apply(reached, [x, extreme]), share),)
    return rule




def _reduce_prod_gradient(g, inputs, out, attrs, needs, build):
    """d prod / d x_i = product of the others; exact with zeros (no division by a zero)."""
    x = inputs[0]
    axes, keep = attrs["axes"], attrs["keepdims"]
    is_zero = x == 0
    zero, one = build.constant(0, x.dtype), build.constant(1, x.dtype)
    safe = build.apply("where", [is_zero, one, x])
    zeros = build.apply("reduce_sum", [is_zero.to(x.dtype)], axes=axes, keepdims=True)
    others_nonzero = build.apply("reduce_prod", [safe], axes=axes, keepdims=True)
    out_k = kept(out, x.shape, axes, keep)
    local = build.apply("where", [zeros == 0, out_k / safe,
                                  build.apply("where", [(zeros == 1) & is_zero, others_nonzero, zero])])
    return (kept(g, x.shape, axes, keep) * local,)


for _name, _fn, _rule in [("reduce_sum", np.sum, _reduce_sum_gradient),
                         ("reduce_max", np.max, _reduce_extremum_gradient("ge")),
                         ("reduce_min", np.min, _reduce_extremum_gradient("le")),
                         ("reduce_prod", np.prod, _reduce_prod_gradient)]:
    register(_name, OpKind.REDUCTION, MappingType.MANY_TO_MANY,
             _reduce_infer(_name), _reduce_reference(_fn), 1, gradient=_rule,
             doc="attrs axes (sorted), keepdims" + ("; an empty axis is an error" if _name in ("reduce_max", "reduce_min")
                                                     else ""))
# Ties go to the first index, as in numpy and PyTorch.
register("argmax", OpKind.REDUCTION, MappingType.MANY_TO_MANY, _arg_infer, _arg_reference(np.argmax), 1,
         doc="attrs axis, keepdims; first index on ties; int64",
         gradient=NOT_DIFFERENTIABLE)
register("argmin", OpKind.REDUCTION, MappingType.MANY_TO_MANY, _arg_infer, _arg_reference(np.argmin), 1,
         doc="attrs axis, keepdims; first index on ties; int64",
         gradient=NOT_DIFFERENTIABLE)
