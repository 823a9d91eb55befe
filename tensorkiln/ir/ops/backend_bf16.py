"""`matmul_bf16_packed`: a matmul by a constant weight given as the bf16 GEMM's panels.

With precision="bf16" (passes/precision.py) a linear layer's weight holds bf16
values; the packed_weights pass then lays it out once, at compile time, as the
bf16 pairs the GEMM's micro-kernel reads (ir/ops/gemm_panels.py:
`pack_bf16_pairs`), half the bytes of float32 panels, so no call packs it
again. Backend only, like backend.py's ops: users and importers never build it.
"""
from __future__ import annotations

import numpy as np

from ...errors import DTypeError, ShapeError
from .contraction import _matmul_gradient
from .gemm_panels import unpack_bf16_pairs
from .gradient import slice_axis
from .registry import MappingType, OpKind, TensorType, register


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
