"""ONNX operators whose output is known when the model is traced: Constant, ConstantOfShape,
EyeLike, Range, and the shape queries Shape and Size. They compute eagerly with numpy (Range's
and ConstantOfShape's inputs must be values), so shape subgraphs are constants by the time
Reshape or Slice read them. A symbolic size keeps its symbol (shape_values.py): Shape and Size
give ShapeValues, ConstantOfShape of one fills a symbolic shape and Range of one is the iota op."""
from __future__ import annotations

import math

import numpy as np

from ...frontend.creation import arange, full
from ...frontend.tensor import as_tensor
from ...shapes import is_symbolic
from .element_types import tensor_from_proto, tk_dtype
from .helpers import filled
from .registry import converter
from .shape_values import ShapeValue


@converter("Constant")
def _constant(ctx, inputs, attrs):
    if "value" in attrs:
        return tensor_from_proto(attrs["value"])
    if "value_float" in attrs:
        return as_tensor(np.float32(attrs["value_float"]))
    if "value_floats" in attrs:
        return as_tensor(np.asarray(attrs["value_floats"], dtype=np.float32))
    if "value_int" in attrs:
        return as_tensor(np.int64(attrs["value_int"]))
    if "value_ints" in attrs:
        return as_tensor(np.asarray(attrs["value_ints"], dtype=np.int64))
    raise ctx.unsupported(f"Constant of kind {sorted(attrs)} is not supported (strings, sparse tensors)")


@converter("ConstantOfShape", values={0})
def _constant_of_shape(ctx, inputs, attrs):
    shape = ctx.sizes(inputs[0], "input")
    value = tensor_from_proto(attrs["value"]) if "value" in attrs else as_tensor(np.float32(0))
    if any(is_symbolic(d) for d in shape):
        return full(tuple(shape), value.numpy().reshape(-1)[0], value.dtype)
    return filled(shape, value.numpy().reshape(-1)[0], value.dtype)


@converter("Shape")
def _shape(ctx, inputs, attrs):
    shape = inputs[0].shape
    start, end = attrs.get("start", 0), attrs.get("end", None)
    return ShapeValue.of(np.array(list(shape[start:end]), dtype=object).reshape(-1))


@converter("Size")
def _size(ctx, inputs, attrs):
    return ShapeValue.of(np.array(inputs[0].numel(), dtype=object))


@converter("EyeLike")
def _eye_like(ctx, inputs, attrs):
    x = inputs[0]
    dtype = tk_dtype(attrs["dtype"]) if "dtype" in attrs else x.dtype
    return as_tensor(np.eye(x.shape[0], x.shape[1], k=attrs.get("k", 0)), dtype)


@converter("Range", values={0, 1, 2})
def _range(ctx, inputs, attrs):
    if any(isinstance(t, ShapeValue) for t in inputs) and inputs[0].dtype.category == 1:
        # a count from symbolic sizes: tk.arange keeps it symbolic (the iota op)
        start, limit, delta = (ctx.sizes(t, n)[0] for t, n in zip(inputs, ("start", "limit", "delta")))
        return arange(start, limit, int(delta), dtype=inputs[0].dtype)
    start, limit, delta = (ctx.values(t, n).reshape(-1)[0] for t, n in zip(inputs, ("start", "limit", "delta")))
    count = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)
    values = start + np.arange(count).astype(start.dtype) * delta
    return as_tensor(np.asarray(values, dtype=start.dtype), inputs[0].dtype)
