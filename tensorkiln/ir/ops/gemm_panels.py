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
