"""Output nests whose contiguous axis is 2 or 3 wide (kernels/schedule_defaults.py).

GCC 12.2 at -O3 vectorizes the row loop around a serial 2-iteration column
loop and miscompiles a concat, `r < k ? a[r*2 + c] : b[(r-k)*2 + c]` (rows
past the split read zeros). Columns of 2 and more are therefore `omp simd`
loops, which GCC compiles correctly. Found by test_random_compiled.py.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk

from .compiled import check_compiled


@pytest.mark.parametrize("cols", [1, 2, 3])
@pytest.mark.parametrize("rows", [(3, 2), (13, 27)])
def test_concat_of_narrow_rows(rows, cols):
    rng = np.random.default_rng(cols)
    a = rng.standard_normal((rows[0], cols)).astype(np.float32)
    b = rng.standard_normal((rows[1], cols)).astype(np.float32)
    check_compiled(lambda a, b: tk.cat([a, b], 0), a, b)
