"""`matmul_bf16_packed` and `conv2d_nchwc_bf16`: contractions by constant weights given as bf16 pairs.

With precision="bf16" (passes/precision.py) a linear layer's weight holds bf16
values; the packed_weights pass then lays it out once, at compile time, as the
bf16 pairs the GEMM's micro-kernel reads (ir/ops/gemm_panels.py:
`pack_bf16_pairs`), half the bytes of float32 panels, so no call packs it
again. Backend only, like backend.py's ops: users and importers never build it.

`conv2d_nchwc_bf16` is `conv2d_nchwc` (groups 1) with its blocked weight in the
same pairs: w[K/kb, C/cb, KH, KW, cb/2, kb, 2] holds input channels 2p and
2p + 1 of output lane j side by side, the order `vdpbf16ps` multiplies
(kernels/templates/conv_nchwc_bf16.py; packed by passes/conv_bf16_weights.py).

`round_bf16` is x rounded to bf16 and kept in float32: the same values as the
precision pass's cast(cast(x, bfloat16), float32), written where the float32
templates are to compute on them (passes/bf16_fp32_gemm.py: a target without
bf16 dot products), so the bf16 GEMM and attention do not take them for bf16
storage.
"""
from __future__ import annotations

import numpy as np

from ...errors import DTypeError, ShapeError
from ...dtypes import bf16_bits_from_f32, f32_from_bf16_bits
from ...loops import expr as E
from .backend import _conv2d_nchwc_gradient, _conv2d_nchwc_infer, _conv2d_nchwc_reference
from .contraction import _matmul_gradient
from .gemm_panels import unpack_bf16_pairs
from .gradient import slice_axis
from .registry import MappingType, OpKind, TensorType, register
from .elementwise import _cast_gradient


def _infer(types, attrs):
    a, panels = types
    n, k = attrs["n"], attrs["k"]
    if a.dtype.name != "float32" or panels.dtype.name != "bfloat16":
        raise DTypeError(f"matmul_bf16_packed expects a float32 A and bfloat16 panels, got {a.dtype.name} and "
                         f"{panels.dtype.name}")
    if a.ndim < 2 or a.shape[-1] != k or panels.ndim != 3 or panels.shape[1] != -(-k // 2) or \
            panels.shape[2] % 2 or not (panels.shape[0] - 1) * panels.shape[2] // 2 < n <= \
            panels.shape[0] * panels.shape[2] // 2:
        raise ShapeError(f"matmul_bf16_packed expects A (..., M, K) and B's bf16 pairs (ceil(N / NR), "
                         f"ceil(K / 2), 2 NR) for K = {k}, N = {n}, got {a.shape} and {panels.shape}")
    return TensorType(a.shape[:-1] + (n,), a.dtype)


def _reference(inputs, attrs, out):
    a, panels = inputs
    return np.matmul(a, unpack_bf16_pairs(panels, attrs["k"], attrs["n"]).astype(np.float32))


def _gradient(g, inputs, out, attrs, needs, build):
    """matmul's rule on the K x N matrix the panels hold; the weight (a constant) gets none."""
    a, panels = inputs
    count, pairs, width = panels.shape
    nr = width // 2
    b = build.apply("permute", [panels.reshape(count, pairs, nr, 2)], perm=(1, 3, 0, 2)).reshape(2 * pairs, count * nr)
    b = slice_axis(build, slice_axis(build, b, 0, 0, attrs["k"]), 1, 0, attrs["n"])
    b = build.apply("cast", [b], dtype=a.dtype)
    ga, _ = _matmul_gradient(g, (a, b), out, {}, (needs[0], False), build)
    return ga, None


register("matmul_bf16_packed", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _infer, _reference, 2,
         backend_only=True,
         doc="matmul by a weight given as the bf16 GEMM's pairs (ceil(N/NR), ceil(K/2), 2 NR); attrs n, k",
         gradient=_gradient)


def conv_weight_from_pairs(pairs: np.ndarray) -> np.ndarray:
    """The float32 blocked weight w[K/kb, C/cb, KH, KW, cb, kb] that bf16 pairs
    [K/kb, C/cb, KH, KW, cb/2, kb, 2] (bits, or values) hold."""
    values = f32_from_bf16_bits(pairs) if pairs.dtype == np.uint16 else np.asarray(pairs, np.float32)
    kblocks, cblocks, kh, kw, half, kb, _ = values.shape
    return np.ascontiguousarray(values.transpose(0, 1, 2, 3, 4, 6, 5).reshape(kblocks, cblocks, kh, kw, 2 * half, kb))


def _conv_infer(types, attrs):
    x, pairs = types
    if x.dtype.name != "float32" or pairs.dtype.name != "bfloat16":
        raise DTypeError(f"conv2d_nchwc_bf16 expects a float32 input and bfloat16 weight pairs, got "
                         f"{x.dtype.name} and {pairs.dtype.name}")
    if pairs.ndim != 7 or pairs.shape[6] != 2:
        raise ShapeError(f"conv2d_nchwc_bf16 expects weight pairs (K/kb, C/cb, KH, KW, cb/2, kb, 2), got {pairs.shape}")
    if attrs.get("groups", 1) != 1:
        raise ShapeError(f"conv2d_nchwc_bf16 computes groups=1 only, got groups={attrs['groups']}")
    kblocks, cblocks, kh, kw, half, kb, _ = pairs.shape
    return _conv2d_nchwc_infer([x, TensorType((kblocks, cblocks, kh, kw, 2 * half, kb), x.dtype)], attrs)


def _conv_reference(inputs, attrs, out):
    x, pairs = inputs
    return _conv2d_nchwc_reference([x, conv_weight_from_pairs(pairs)], attrs, out)


def _conv_gradient(g, inputs, out, attrs, needs, build):
    """conv2d_nchwc's rule on the float32 weight the pairs hold; the weight (a constant) gets none."""
    x, pairs = inputs
    kblocks, cblocks, kh, kw, half, kb, _ = pairs.shape
    w = build.apply("permute", [pairs], perm=(0, 1, 2, 3, 4, 6, 5)).reshape(kblocks, cblocks, kh, kw, 2 * half, kb)
    gx, _ = _conv2d_nchwc_gradient(g, (x, build.apply("cast", [w], dtype=x.dtype)), out, attrs,
                                   (needs[0], False), build)
    return gx, None


# conv2d_nchwc (groups 1) with the weight as bf16 pairs (K/kb, C/cb, KH, KW, cb/2, kb, 2); the input holds
# bf16 values (precision="bf16"). Made by the conv_bf16_weights pass, never by the front-end.
register("conv2d_nchwc_bf16", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _conv_infer, _conv_reference, 2,
         backend_only=True,
         doc="conv2d_nchwc (groups 1) by a weight given as bf16 pairs (K/kb, C/cb, KH, KW, cb/2, kb, 2); attrs "
             "stride, padding, dilation, out_layout",
         gradient=_conv_gradient)


def _round_infer(types, attrs):
    (x,) = types
    if x.dtype.name != "float32":
        raise DTypeError(f"round_bf16 rounds float32 values, got {x.dtype.name}")
    return x


def _round_reference(inputs, attrs, out):
    """Nearest even, NaN kept quiet: the bits a float32 -> bfloat16 -> float32 round trip gives."""
    return f32_from_bf16_bits(bf16_bits_from_f32(np.asarray(inputs[0], np.float32)))


# Made by the bf16_fp32_gemm pass, never by the front-end. Its gradient is the cast pair's (straight through).
register("round_bf16", OpKind.ELEMENTWISE, MappingType.ONE_TO_ONE, _round_infer, _round_reference, 1,
         backend_only=True, cheap=True, gradient=_cast_gradient,
         lower=lambda args, node: E.call("round_bf16", args[0]),
         doc="float32 x rounded to bf16 (nearest even), kept in float32: cast(cast(x, bfloat16), float32) "
             "for the float32 kernels")
