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


@converter("MelWeightMatrix", values={0, 1, 2, 3, 4})
def _mel_weight_matrix(ctx, inputs, attrs):
    """The (dft_length // 2 + 1, num_mel_bins) matrix of triangular mel filters, as onnx's reference
    computes it (its arithmetic on the inputs' own types, so the bin edges floor the same way); every
    input decides the output's shape or values, so a graph input is specialized per value."""
    names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
    mel_bins, dft_length, sample_rate, lower, upper = (ctx.values(t, n).reshape(()) for t, n in zip(inputs, names))
    if int(mel_bins) < 1 or int(dft_length) < 1 or int(sample_rate) < 1:
        raise ValueError(f"node '{ctx.name}' (MelWeightMatrix): num_mel_bins, dft_length and sample_rate must be "
                         f"positive, got {int(mel_bins)}, {int(dft_length)}, {int(sample_rate)}")
    to_mel = lambda hertz: 2595 * np.log1p(hertz / 700) / np.log(10)  # noqa: E731
    low, high = to_mel(lower), to_mel(upper)
    edges = np.arange(0, mel_bins + 2)
    edges = edges * ((high - low) / edges.shape[0]) + low
    edges = 700 * np.expm1(edges / 2595 * np.log(10))
    edges = (((dft_length + 1) * edges) // sample_rate).astype(int)
    spectrum = int(dft_length) // 2 + 1
    if edges.min() < 0 or edges[:-1].max() >= spectrum or edges[-1] > spectrum:
        raise ValueError(f"node '{ctx.name}' (MelWeightMatrix): the band [{float(lower)}, {float(upper)}] Hz "
                         f"reaches past the {spectrum} frequency bins of a {int(dft_length)}-point DFT at "
                         f"{int(sample_rate)} Hz")
    out = np.zeros((spectrum, int(mel_bins)))
    for i in range(int(mel_bins)):
        left, center, right = edges[i], edges[i + 1], edges[i + 2]
        if center == left:
            out[center, i] = 1
        else:
            out[left:center + 1, i] = (np.arange(left, center + 1) - left) / float(center - left)
        if right > center:
            out[center:right, i] = (right - np.arange(center, right)) / float(right - center)
    return as_tensor(out, tk_dtype(attrs.get("output_datatype", 1)))
