"""GEMM weights in the micro-kernel's panel layout, for `matmul_packed`.

The BLIS-style GEMM (kernels/templates/gemm.py) reads B as micro-panels: NR
consecutive columns for each k, NR floats per row of a panel. Packing copies
B into that layout on every call. A weight known at compile time is packed
once instead (passes/packed_weights.py), into

    panels[p, k, j] = B[k, p*NR + j]      (zero for columns past N)

of shape (ceil(N / NR), K, NR), from which the micro-kernel loads directly.
Leading batch axes are kept: Winograd's transformed weights are a batch of
A operands laid out this way (their transposes' column panels are A's row
panels; ir/ops/winograd_math.py: `weight_panels`).
"""
from __future__ import annotations

import numpy as np

from ...dtypes import bf16_bits_from_f32


def pack_panels(b: np.ndarray, nr: int) -> np.ndarray:
    """B (..., K, N) as (..., ceil(N / nr), K, nr) panels, the columns past N zero."""
    *batch, k, n = b.shape
    count = -(-n // nr)
    padded = np.zeros((*batch, k, count * nr), dtype=b.dtype)
    padded[..., :n] = b
    return np.ascontiguousarray(np.swapaxes(padded.reshape(*batch, k, count, nr), -3, -2))


def unpack_panels(panels: np.ndarray, n: int) -> np.ndarray:
    """The (..., K, N) matrices that `panels` (..., count, K, nr) hold."""
    *batch, count, k, nr = panels.shape
    return np.swapaxes(panels, -3, -2).reshape(*batch, k, count * nr)[..., :n]


def pack_bf16_pairs(b: np.ndarray, nr: int) -> np.ndarray:
    """B (K, N) as the bf16 GEMM's panels (ceil(N / nr), ceil(K / 2), 2 * nr) of bfloat16 bits:

        panels[p, q, 2*j + t] = bf16(B[2q + t, p*nr + j])      (zero past K and N)

    the layout kernels/templates/gemm_bf16.py packs B into, so that its micro-kernel reads a
    constant weight in place, half the bytes of the float32 panels.
    """
    k, n = b.shape
    count, pairs = -(-n // nr), -(-k // 2)
    padded = np.zeros((2 * pairs, count * nr), dtype=np.float32)
    padded[:k, :n] = b
    pairs_last = padded.reshape(pairs, 2, count, nr).transpose(2, 0, 3, 1)  # [p, q, j, t]
    return np.ascontiguousarray(bf16_bits_from_f32(np.ascontiguousarray(pairs_last)).reshape(count, pairs, 2 * nr))


def unpack_bf16_pairs(panels: np.ndarray, k: int, n: int) -> np.ndarray:
    """The (K, N) matrix that `pack_bf16_pairs` made, from its panels' values (bits widened or not)."""
    count, pairs, width = panels.shape
    nr = width // 2
    values = panels.reshape(count, pairs, nr, 2).transpose(1, 3, 0, 2).reshape(2 * pairs, count * nr)
    return values[:k, :n]
