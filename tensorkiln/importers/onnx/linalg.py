"""ONNX Det: determinants of (..., n, n) matrices by Gaussian elimination with partial pivoting.

n is static, so the n elimination steps are unrolled into graph ops: each step picks the row
with the largest magnitude in its column (argmax), swaps it into place (a gather by the swap
permutation), multiplies the pivot into the determinant (negated for a swap) and eliminates
the column below it. This is LAPACK's getrf, which numpy's det calls, in the same order (a
matrix holding inf or NaN gives NaN, as the swap is a product with a permutation matrix).
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ...frontend.functions import concat, matmul, where
from ...frontend.tensor import Tensor, as_tensor
from .helpers import filled
from .registry import converter


def determinant(a: Tensor) -> Tensor:
    """det of every (n, n) matrix in the last two axes of a float tensor (computed in its compute type)."""
    n = a.shape[-1]
    batch = tuple(a.shape[:-2])
    a = a.to(a.dtype.compute)
    rows = as_tensor(np.arange(n, dtype=np.int64))
    det = filled(batch, 1.0, a.dtype)
    for j in range(n):
        column = a.narrow(-1, j, 1).squeeze(-1).narrow(-1, j, n - j)  # (..., n - j): column j from row j
        pivot_row = column.abs().argmax(-1) + j  # (...,)
        p = pivot_row.unsqueeze(-1)
        permutation = where(rows == j, p, where(rows == p, j, rows))  # swap rows j and p
        # as a product with the permutation matrix: each step's result is then stored, where a gather
        # would nest every earlier step's loads into the next step's expressions
        a = matmul((permutation.unsqueeze(-1) == rows).to(a.dtype), a)
        pivot = a.narrow(-2, j, 1).narrow(-1, j, 1).squeeze(-1).squeeze(-1)
        det = det * where(pivot_row != j, -pivot, pivot)
        if j == n - 1:
            break
        safe = where(pivot == 0.0, 1.0, pivot)  # a zero pivot: the column is zero, det is 0 already
        factors = a.narrow(-2, j + 1, n - j - 1).narrow(-1, j, 1) / safe.unsqueeze(-1).unsqueeze(-1)
        below = a.narrow(-2, j + 1, n - j - 1) - factors * a.narrow(-2, j, 1)
        a = concat([a.narrow(-2, 0, j + 1), below], -2)
    return det


@converter("Det")
def _det(ctx, inputs, attrs):
    x = inputs[0]
    if x.ndim < 2 or x.shape[-1] != x.shape[-2] or not x.dtype.is_floating:
        raise ShapeError(f"node '{ctx.name}' (Det): input must be float (..., n, n) matrices, got "
                         f"{x.dtype.name} {list(x.shape)}")
    if x.shape[-1] == 0:
        return filled(tuple(x.shape[:-2]), 1.0, x.dtype)
    return determinant(x).to(x.dtype)
