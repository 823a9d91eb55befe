"""`conv2d_shallow_bf16`: an NCHW convolution with few input channels (the RGB stem) on bf16 column pairs.

With precision="bf16" a layer the float32 path runs as "shallow" (few input
channels, kernels/templates/conv_shallow.py) has no pairs of input channels
for `vdpbf16ps` to multiply; it pairs neighbouring taps of a kernel row
instead. Its constant weight is laid out once, at compile time
(passes/shallow_bf16_weights.py), as

    pairs[k, c, r, p, t] = bf16(w[k, c, r, 2p + t])      t = 0, 1; zero where 2p + t = KW (odd KW)

so taps 2p and 2p + 1 of a row are one 32-bit word, which the kernel broadcasts
against the input's column pairs (kernels/templates/conv_shallow_bf16.py).
The attribute `kernel_width` keeps KW (the pairs hold ceil(KW / 2) * 2
taps). Backend only, like backend_bf16.py's ops: users and importers never
build it.
"""
from __future__ import annotations

import numpy as np

from ...dtypes import f32_from_bf16_bits
from ...errors import DTypeError, ShapeError
from .contraction import _conv2d_gradient, _conv2d_infer, _conv2d_reference
from .gradient import slice_axis
from .registry import MappingType, OpKind, TensorType, register

_CONV_ATTRS = ("stride", "padding", "dilation", "groups")


def shallow_weight_from_pairs(pairs: np.ndarray, kernel_width: int) -> np.ndarray:
    """The float32 weight w[K, C/groups, KH, KW] that pairs [K, C/groups, KH, ceil(KW/2), 2] (bits or values) hold."""
    values = f32_from_bf16_bits(pairs) if pairs.dtype == np.uint16 else np.asarray(pairs, np.float32)
    k, cg, kh, half, _ = values.shape
    return np.ascontiguousarray(values.reshape(k, cg, kh, 2 * half)[..., :kernel_width])


def _weight_type(x: TensorType, pairs: TensorType, attrs) -> TensorType:
    """The float32 weight type the pairs stand for (checking their shape against kernel_width)."""
    if x.dtype.name != "float32" or pairs.dtype.name != "bfloat16":
        raise DTypeError(f"conv2d_shallow_bf16 expects a float32 input and bfloat16 weight pairs, got "
                         f"{x.dtype.name} and {pairs.dtype.name}")
    kw = attrs["kernel_width"]
    if pairs.ndim != 5 or pairs.shape[4] != 2 or kw < 1 or pairs.shape[3] != -(-kw // 2):
        raise ShapeError(f"conv2d_shallow_bf16 expects weight pairs (K, C/groups, KH, ceil(KW/2), 2) for "
                         f"KW = {kw}, got {pairs.shape}")
    k, cg, kh, _, _ = pairs.shape
    return TensorType((k, cg, kh, kw), x.dtype)


def _infer(types, attrs):
    x, pairs = types
    return _conv2d_infer([x, _weight_type(x, pairs, attrs)], {a: attrs[a] for a in _CONV_ATTRS})


def _reference(inputs, attrs, out):
    x, pairs = inputs
    return _conv2d_reference([x, shallow_weight_from_pairs(pairs, attrs["kernel_width"])],
                             {a: attrs[a] for a in _CONV_ATTRS}, out)


def _gradient(g, inputs, out, attrs, needs, build):
    """conv2d's rule on the float32 weight the pairs hold; the weight (a constant) gets none."""
    x, pairs = inputs
    k, cg, kh, half, _ = pairs.shape
    w = slice_axis(build, pairs.reshape(k, cg, kh, 2 * half), 3, 0, attrs["kernel_width"])
    gx, _ = _conv2d_gradient(g, (x, build.apply("cast", [w], dtype=x.dtype)), out,
                             {a: attrs[a] for a in _CONV_ATTRS}, (needs[0], False), build)
    return gx, None


# conv2d (NCHW) with the weight as bf16 pairs of neighbouring taps (K, C/groups, KH, ceil(KW/2), 2); the input
# holds bf16 values (precision="bf16"). Made by the shallow_bf16_weights pass, never by the front-end.
register("conv2d_shallow_bf16", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _infer, _reference, 2,
         backend_only=True,
         doc="conv2d (NCHW) by a weight given as bf16 pairs of neighbouring taps (K, C/groups, KH, ceil(KW/2), 2); "
             "attrs stride, padding, dilation, groups, kernel_width",
         gradient=_gradient)
