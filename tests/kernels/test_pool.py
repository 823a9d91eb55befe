"""The pooling template (templates/pool.py) against the reference interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F

from .compiled import check_compiled

RNG = np.random.default_rng(5)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def uses_pool_template(f, *args) -> bool:
    return any("pl_buf" in k.loop_ir for k in f.report(*args).kernels)


CASES = [  # (shape, kernel, stride, padding, dilation)
    ((1, 1, 1, 1), 1, 1, 0, 1),
    ((1, 3, 7, 7), 3, 2, 1, 1),
    ((2, 5, 13, 9), 3, 1, 1, 1),
    ((1, 4, 30, 31), 2, 2, 0, 1),
    ((1, 2, 17, 17), 3, 3, 1, 2),
    ((3, 2, 8, 11), 5, 2, 2, 1),
    ((1, 64, 112, 112), 3, 2, 1, 1),   # ResNet-18's stem pool
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) + "k{}s{}p{}d{}".format(*c[1:]))
def test_max_pool_matches_reference(case):
    shape, k, s, p, d = case
    x = rand(*shape)
    f = check_compiled(lambda x: F.max_pool2d(x.relu(), k, s, p, dilation=d), x)
    assert uses_pool_template(f, x)


@pytest.mark.parametrize("case", CASES[:6], ids=lambda c: "x".join(map(str, c[0])) + "k{}s{}p{}".format(*c[1:4]))
def test_avg_pool_matches_reference(case):
    shape, k, s, p, _ = case
    x = rand(*shape)
    check_compiled(lambda x: F.avg_pool2d(x, k, s, p), x)
    check_compiled(lambda x: F.avg_pool2d(x, k, s, p, count_include_pad=False), x)


def test_max_and_min_propagate_nan_like_numpy():
    x = rand(1, 2, 6, 6)
    x[0, 0, 1, 1] = np.nan
    x[0, 1, 5, 5] = np.nan
    for fn in (lambda x: F.max_pool2d(x, 2), lambda x: -F.max_pool2d(-x, 3, 1, 1)):
        got = tk.jit(fn)(x).numpy()
        want = tk.jit(fn, backend="interpreter")(x).numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, equal_nan=True)


def test_window_reductions_of_other_shapes_and_dtypes():
    x = rand(2, 3, 9, 8)
    w = tk.jit(lambda x: x.unfold(3, 2, 2).amax(-1)) if hasattr(tk.Tensor, "unfold") else None
    if w is not None:  # a 1-D window: the generic reduction
        np.testing.assert_allclose(w(x).numpy(), x.reshape(2, 3, 9, 4, 2).max(-1))
    check_compiled(lambda x: F.max_pool2d(x, 3, 2, 1), rand(1, 3, 10, 10, dtype=np.float64))
    check_compiled(lambda x: F.max_pool2d(x * 2.0 + 1.0, 2), rand(2, 3, 9, 8), debug=True)


def test_padded_planes_with_and_without_nan():
    """The pad is filled into the plane's border (no test per element); planes with a NaN take the
    NaN-aware taps, the others the plain ones: NaN at a padded corner, +inf, a plane of -inf."""
    x = rand(2, 4, 9, 10)
    x[0, 0, 0, 0] = np.nan
    x[1, 3, 8, 9] = np.nan
    x[0, 1, 4, 4] = np.inf
    x[1, 2] = -np.inf
    for fn in (lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: -F.max_pool2d(-x, 3, 2, 1),
               lambda x: F.avg_pool2d(x, 3, 2, 1)):
        got = tk.jit(fn)(x).numpy()
        want = tk.jit(fn, backend="interpreter")(x).numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, equal_nan=True)
    f = tk.jit(lambda x: F.max_pool2d(x, 3, 2, 1))
    loop_ir = f.report(x).kernels[0].loop_ir
    assert "pl_nans" in loop_ir and "-inf" in loop_ir and "where(" not in loop_ir.split("pl_nans")[0]
