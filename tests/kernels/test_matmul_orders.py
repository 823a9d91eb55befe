"""The simple matmul nests: the dot order (B contiguous along K) computes DOT_COLUMNS outputs
per task as independent sums, with a last group that repeats the last column."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.kernels.templates.matmul import DOT_COLUMNS

from .compiled import check_compiled

rng = np.random.default_rng(7)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("a_shape, n", [((1, 784), 512), ((1, 100), 10), ((3, 37), 7), ((2, 1, 50), 3),
                                        ((2, 3, 64), 9), ((1, 5), 1)])
@pytest.mark.parametrize("threads", ["1", "2"])
def test_dot_order_groups_columns(monkeypatch, a_shape, n, threads):
    """x @ w.T with w an input (a linear layer whose weight is not a constant): each task sums
    DOT_COLUMNS columns at once; bounds checked in debug mode, compared with the interpreter."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    x, w = rand(*a_shape), rand(n, a_shape[-1])
    f = check_compiled(lambda x, w: (x @ w.transpose(0, 1)).relu(), x, w, debug=True)
    loop_ir = f.report(x, w).kernels[0].loop_ir
    if n >= DOT_COLUMNS:
        assert f"total{DOT_COLUMNS - 1}" in loop_ir
    else:
        assert "total " in loop_ir or "total=" in loop_ir or "total0" not in loop_ir
    np.testing.assert_allclose(f(x, w).numpy(), np.maximum(x @ w.T, 0), rtol=1e-4, atol=1e-4)
