"""Shape arithmetic that keeps size symbols: Shape -> Gather/Slice -> Concat/Unsqueeze -> Reshape/Expand.

An exported model computes the shapes it reshapes to from its inputs' shapes
(`Shape`, then `Gather`, `Unsqueeze`, `Concat`, `Mul`, `Div` ...). With symbolic
input sizes (a `dim_param`), those shapes hold size symbols, so the importer
evaluates that arithmetic on the sizes themselves: a `ShapeValue` is an int64
tensor known while the model is traced whose elements may be SymInts, and the
rules below compute each shape operator on such values with numpy object
arrays (elementwise Python arithmetic, which keeps SymInts symbolic). Reshape,
Expand, ConstantOfShape and Range read them as sizes (`NodeContext.sizes`).

A converter that does not know ShapeValue reads its numbers: its `_value` pins
every symbol in it to its value with a guard, so the program specializes there
rather than answering wrongly.
"""
from __future__ import annotations

import operator
from typing import Callable

import numpy as np

from ... import dtypes as dt
from ...frontend.tensor import Tensor, as_tensor
from ...shapes import is_symbolic
from .element_types import tk_dtype
from .helpers import normalize_axis

MAX_SHAPE_ELEMENTS = 64  # an eager integer tensor this small may take part in shape arithmetic


class ShapeValue(Tensor):
    """An int64 tensor of sizes, some of them size symbols (see the module docstring)."""

    __slots__ = ("sizes",)

    @staticmethod
    def of(sizes: np.ndarray) -> Tensor:
        """A ShapeValue of an object array of ints and SymInts; a plain int64 tensor when none is symbolic."""
        if not any(is_symbolic(v) for v in sizes.reshape(-1)):
            return as_tensor(np.asarray(sizes.astype(np.int64)), dt.int64)
        t = ShapeValue._from_value(None, dt.int64)
        t.sizes = sizes
        return t

    @property
    def _value(self) -> np.ndarray:
        # the numbers: int() of each symbol records the guard `symbol == value`
        return np.array([int(v) for v in self.sizes.reshape(-1)], dtype=np.int64).reshape(self.sizes.shape)

    @_value.setter
    def _value(self, value) -> None:  # Tensor._from_value's assignment: the sizes are the value
        pass

    @property
    def shape(self) -> tuple[int, ...]:
        return self.sizes.shape


def symbolic_sizes(t) -> np.ndarray | None:
    """The sizes of a ShapeValue (object array), of a small eager integer tensor, else None."""
    if isinstance(t, ShapeValue):
        return t.sizes
    if isinstance(t, Tensor) and not t.is_traced and t.dtype.category == 1 and t.numel() <= MAX_SHAPE_ELEMENTS:
        return np.array(t.numpy().tolist(), dtype=object).reshape(t.shape)
    return None


def _ints(a: np.ndarray | None) -> list[int] | None:
    return None if a is None else [int(v) for v in a.reshape(-1)]


def _gather(inputs, attrs, opset):
    data, index = inputs
    axis = normalize_axis(attrs.get("axis", 0), data.ndim)
    index = np.array([int(i) + data.shape[axis] if int(i) < 0 else int(i) for i in index.reshape(-1)],
                     dtype=np.int64).reshape(index.shape)
    return np.take(data, index, axis=axis)


def _unsqueeze(inputs, attrs, opset):
    data = inputs[0]
    axes = attrs.get("axes") if opset < 13 else _ints(inputs[1])
    for axis in sorted(normalize_axis(a, data.ndim + len(axes)) for a in axes):
        data = np.expand_dims(data, axis)
    return data


def _squeeze(inputs, attrs, opset):
    data = inputs[0]
    axes = attrs.get("axes") if opset < 13 else _ints(inputs[1]) if len(inputs) > 1 else None
    if axes is None:
        return data.reshape(tuple(d for d in data.shape if d != 1))
    return np.squeeze(data, axis=tuple(normalize_axis(a, data.ndim) for a in axes))


def _concat(inputs, attrs, opset):
    arrays = [a for a in inputs if a is not None]
    return np.concatenate(arrays, axis=normalize_axis(attrs["axis"], arrays[0].ndim))


def _slice(inputs, attrs, opset):
    data = inputs[0]
    if opset < 10:
        starts, ends, axes, steps = attrs["starts"], attrs["ends"], attrs.get("axes"), None
    else:
        starts, ends = _ints(inputs[1]), _ints(inputs[2])
        axes = _ints(inputs[3]) if len(inputs) > 3 else None
        steps = _ints(inputs[4]) if len(inputs) > 4 else None
    key = [slice(None)] * data.ndim
    for k, (start, end) in enumerate(zip(starts, ends)):
        axis = normalize_axis(axes[k], data.ndim) if axes else k
        key[axis] = slice(start, end, steps[k] if steps else 1)  # Python's clamping is ONNX's
    return data[tuple(key)]


def _truncating_div(a, b):
    """ONNX integer Div (toward zero); floor division where both are known non-negative (sizes are)."""
    if (is_symbolic(a) or a >= 0) and (is_symbolic(b) or b > 0):
        return a // b
    return int(a) // int(b) if (int(a) >= 0) == (int(b) > 0) else -(abs(int(a)) // abs(int(b)))


def _elementwise(fn: Callable) -> Callable:
    def rule(inputs, attrs, opset):
        a, b = np.broadcast_arrays(*inputs)
        return np.array([fn(x, y) for x, y in zip(a.reshape(-1), b.reshape(-1))], dtype=object).reshape(a.shape)
    return rule


def _cast(inputs, attrs, opset):
    return inputs[0] if tk_dtype(attrs["to"]).category == 1 else None


# ONNX operator -> rule(object arrays, attrs, opset) -> object array, or None to convert as usual
RULES: dict[str, Callable] = {
    "Gather": _gather, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Concat": _concat, "Slice": _slice,
    "Add": _elementwise(operator.add), "Sub": _elementwise(operator.sub), "Mul": _elementwise(operator.mul),
    "Div": _elementwise(_truncating_div), "Cast": _cast, "Identity": lambda inputs, attrs, opset: inputs[0],
}


def shape_arithmetic(op_type: str, inputs: list, attrs: dict, opset: int) -> Tensor | None:
    """The result of a shape operator on ShapeValues (and small constants), or None when it is not one."""
    rule = RULES.get(op_type)
    if rule is None or not any(isinstance(t, ShapeValue) for t in inputs):
        return None
    sizes = [None if t is None else symbolic_sizes(t) for t in inputs]
    if any(s is None and t is not None for s, t in zip(sizes, inputs)):
        return None
    result = rule(sizes, attrs, opset)
    return None if result is None else ShapeValue.of(np.asarray(result, dtype=object))
