"""GEMM weights in the micro-kernel's panel layout, for `matmul_packed`.

The BLIS-style GEMM (loops/templates/gemm.py) reads B as micro-panels: NR
consecutive columns for each k, NR floats per row of a panel. Packing copies
B into that layout on every call. A weight known at compile time is packed
once instead (passes/packed_weights.py), into

    panels[p, k, j] = B[k, p*NR + j]      (zero for columns past N)

of shape (ceil(N / NR), K, NR), from which the micro-kernel loads directly.
"""
from __future__ import annotations

import numpy as np


def pack_panels(b: np.ndarray, nr: int) -> np.ndarray:
    """B (K x N) as (ceil(N / nr), K, nr) panels, the columns past N zero."""
    k, n = b.shape
    count = -(-n // nr)
    padded = np.zeros((k, count * nr), dtype=b.dtype)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, count, nr).transpose(1, 0, 2))


def unpack_panels(panels: np.ndarray, n: int) -> np.ndarray:
    """The K x N matrix that `panels` (count, K, nr) holds."""
    count, k, nr = panels.shape
    return panels.transpose(1, 0, 2).reshape(k, count * nr)[:, :n]
