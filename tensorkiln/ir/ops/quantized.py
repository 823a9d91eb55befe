"""Integer contractions: exact 8-bit matmuls with 32-bit sums, the ops quantized models run on.

`matmul_integer` is the primitive: (..., M, K) @ (K, N) of 8-bit integers
(int8 or uint8, each operand its own), summed exactly in int32, as ONNX's
MatMulInteger does once zero points are subtracted. Zero points, scales and
requantization are ordinary elementwise ops around it (they fuse as its
epilogue); the product itself never passes through float.

`matmul_u8s8` is its backend form for a constant right operand, made by the
int8_weights pass (passes/int8_weights.py): A as uint8, B as int8 in the
micro-kernel's panels (below), packed once at compile time, plus an int32
`compensation` per column added to every row. The pass folds into it what
turning the operands into u8 x s8 costs: an int8 A is shifted by +128 into
uint8, so compensation = -128 * (column sums of B).

    panels[p, q, 4*j + t] = B[4*q + t, p*NR + j]     (zero past K and past N)

of shape (ceil(N / NR), ceil(K / 4), 4 * NR): each group of four depths of
one column is four consecutive bytes, the operand `vpdpbusd` multiplies
with four bytes of a row of A (kernels/templates/gemm_u8s8.py).
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError
from .gradient import NOT_DIFFERENTIABLE
from .registry import MappingType, OpKind, TensorType, register

INT8_TYPES = ("int8", "uint8")
U8S8_PANEL_COLUMNS = 32  # NR of the u8 x s8 micro-kernel: two 512-bit vectors of 16 int32 sums
U8S8_DEPTH_GROUP = 4  # vpdpbusd adds four byte products into each 32-bit lane


def _matmul_integer_infer(types, attrs):
    a, b = types
    if a.dtype.name not in INT8_TYPES or b.dtype.name not in INT8_TYPES:
        raise DTypeError(f"matmul_integer expects int8 or uint8 operands, got {a.dtype.name} and {b.dtype.name}")
    if a.ndim < 2 or b.ndim != 2:
        raise ShapeError(f"matmul_integer expects A (..., M, K) and B (K, N), got {a.shape} and {b.shape}")
    if a.shape[-1] != b.shape[0]:
        raise ShapeError(f"matmul_integer: inner dimensions differ: {a.shape[-1]} vs {b.shape[0]} "
                         f"(A {a.shape}, B {b.shape})")
    return TensorType(a.shape[:-1] + (b.shape[1],), dt.int32)


def _matmul_integer_reference(inputs, attrs, out):
    a, b = inputs
    # int64 sums are exact for any K a 32-bit result can hold; wrap to int32 as the C kernels do
    return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32)


def pack_u8s8_panels(b: np.ndarray, nr: int = U8S8_PANEL_COLUMNS) -> np.ndarray:
    """B (K, N) of int8 as `matmul_u8s8` panels (ceil(N / nr), ceil(K / 4), 4 * nr)."""
    k, n = b.shape
    g = U8S8_DEPTH_GROUP
    depth, count = -(-k // g), -(-n // nr)
    padded = np.zeros((depth * g, count * nr), dtype=np.int8)
    padded[:k, :n] = b
    # [q, t, p, j] -> [p, q, j, t]
    return np.ascontiguousarray(padded.reshape(depth, g, count, nr).transpose(2, 0, 3, 1)).reshape(
        count, depth, g * nr)


def unpack_u8s8_panels(panels: np.ndarray, k: int, n: int) -> np.ndarray:
    """The (K, N) int8 matrix that `pack_u8s8_panels` laid out."""
    count, depth, width = panels.shape
    g = U8S8_DEPTH_GROUP
    nr = width // g
    return panels.reshape(count, depth, nr, g).transpose(1, 3, 0, 2).reshape(depth * g, count * nr)[:k, :n]


def _matmul_u8s8_infer(types, attrs):
    a, panels, compensation = types
    n = attrs["n"]
    if (a.dtype.name, panels.dtype.name, compensation.dtype.name) != ("uint8", "int8", "int32"):
        raise DTypeError(f"matmul_u8s8 expects uint8 A, int8 panels and int32 compensation, got "
                         f"{a.dtype.name}, {panels.dtype.name} and {compensation.dtype.name}")
    k = a.shape[-1] if a.ndim >= 2 else -1
    nr = panels.shape[2] // U8S8_DEPTH_GROUP if panels.ndim == 3 else 0
    if a.ndim < 2 or panels.ndim != 3 or panels.shape[1] != -(-k // U8S8_DEPTH_GROUP) or nr < 1 or \
            not (panels.shape[0] - 1) * nr < n <= panels.shape[0] * nr or compensation.shape != (n,):
        raise ShapeError(f"matmul_u8s8 expects A (..., M, K), panels (ceil(N / NR), ceil(K / 4), 4 NR) and "
                         f"compensation (N,) for N = {n}, got {a.shape}, {panels.shape} and {compensation.shape}")
    return TensorType(a.shape[:-1] + (n,), dt.int32)


def _matmul_u8s8_reference(inputs, attrs, out):
    a, panels, compensation = inputs
    b = unpack_u8s8_panels(panels, a.shape[-1], attrs["n"])
    return (np.matmul(a.astype(np.int64), b.astype(np.int64)) + compensation).astype(np.int32)


register("matmul_integer", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _matmul_integer_infer,
         _matmul_integer_reference, 2,
         doc="(..., M, K) @ (K, N) of int8/uint8, exact int32 sums",
         gradient=NOT_DIFFERENTIABLE)
register("matmul_u8s8", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _matmul_u8s8_infer,
         _matmul_u8s8_reference, 3, backend_only=True,
         doc="uint8 A (..., M, K) @ int8 B in panels (ceil(N/32), ceil(K/4), 128), plus an int32 "
             "compensation per column; attr n",
         gradient=NOT_DIFFERENTIABLE)
