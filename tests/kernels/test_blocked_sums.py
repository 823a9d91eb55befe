"""Float sums add in blocks (kernels/reduction.py): long float32 sums keep their precision.

A running float32 sum stops growing at 2**24 times its addend: before
blocking, 3 * 2**31 ones summed to 2**28 and 2**26 copies of 0.1 were 4% off.
The inputs here are scalars or short rows expanded to the long shape, which
the kernel reads in place (in_x[0], in_x[k1]): no large array is allocated.
Sizes past 2**26 (and the very long rows) run with TK_LARGE_SUMS=1.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.kernels.reduction import BLOCK

large = pytest.mark.skipif(not os.environ.get("TK_LARGE_SUMS"), reason="long sums: set TK_LARGE_SUMS=1")
TENTH = np.float32(0.1)


def _rel(got, exact: float) -> float:
    return abs(float(got) - exact) / abs(exact)


def _sum_of_copies(value: np.float32, n: int, mean: bool = False) -> float:
    """The compiled sum (or mean) of n copies of `value`, an expanded scalar."""
    f = tk.jit(lambda x: x.expand(n).mean() if mean else x.expand(n).sum())
    return float(f(tk.tensor(np.array(value))).numpy())


def test_sum_of_2_26_tenths_against_float64():
    """A running sum is 4% off (3.4e-6 blocked): each block's rounding is that of a short sum."""
    n = 2 ** 26
    assert _rel(_sum_of_copies(TENTH, n), float(TENTH) * n) < 2e-5
    assert _rel(_sum_of_copies(TENTH, n, mean=True), float(TENTH)) < 2e-5


def test_sum_of_3_times_2_31_ones_is_exact():
    """Every partial is an integer below 2**24 times its block: exact (a running sum gave 2**28)."""
    n = 3 * 2 ** 31
    assert _sum_of_copies(np.float32(1), n) == n
    assert _sum_of_copies(np.float32(1), n, mean=True) == 1.0


def test_lane_partial_sums_of_a_tiled_row():
    """A (2**16, 1024) sum keeps one partial sum per lane of the 1024 columns: each lane adds
    2**16 values (1.8e-5 off as a running sum, 5e-8 blocked)."""
    row = np.random.default_rng(0).random(1024, dtype=np.float32)
    f = tk.jit(lambda x: x.expand(2 ** 16, 1024).sum())
    exact = float(row.astype(np.float64).sum()) * 2 ** 16
    assert _rel(f(tk.tensor(row)).numpy(), exact) < 2e-6
    assert "acc_lanes_k0" in Path(f.report(tk.tensor(row)).source_path).read_text()


def test_column_sum_over_many_rows():
    """A column sum runs its lanes over the output's columns: each column's sum adds in blocks too."""
    row = np.full(8, TENTH, np.float32)
    f = tk.jit(lambda x: x.expand(2 ** 24, 8).sum(0))
    np.testing.assert_allclose(f(tk.tensor(row)).numpy(), np.full(8, float(TENTH) * 2 ** 24), rtol=2e-5)


def test_short_sums_keep_the_plain_loop():
    """Up to one block the reduction is the loop it was: results of short sums do not change."""
    x = np.random.default_rng(1).standard_normal(BLOCK).astype(np.float32)
    f = tk.jit(lambda x: x.sum())
    np.testing.assert_allclose(f(x).numpy(), x.astype(np.float64).sum(), rtol=1e-5, atol=1e-5)
    text = Path(f.report(x).source_path).read_text()
    assert "acc_k0" not in text and "k0_c0" not in text


def _softmax_error(width: int) -> float:
    x = np.random.default_rng(2).random((1, width), dtype=np.float32)
    got = tk.jit(lambda x: x.softmax(-1))(tk.tensor(x)).numpy()
    e = np.exp(x.astype(np.float64) - x.max())
    e /= e.sum()
    return float(np.max(np.abs(got - e) / e))


def _layer_norm_error(width: int) -> float:
    """Max error of a layer norm over one long row of values near 4 (the mean's sum grows large)."""
    x = (4 + np.random.default_rng(3).random((1, width))).astype(np.float32)
    got = tk.jit(lambda x: tk.nn.functional.layer_norm(x, (width,)))(tk.tensor(x)).numpy()
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean()) / np.sqrt(x64.var() + 1e-5)
    return float(np.max(np.abs(got - want)))


def test_layer_norm_and_softmax_of_a_long_row():
    """The row kernel's sums over 2**22 elements (64 lanes of 2**16 each): layer norm is 1.1e-5 off
    with running lane sums, 2.7e-7 blocked."""
    assert _layer_norm_error(2 ** 22) < 2e-6
    assert _softmax_error(2 ** 22) < 1e-6


@large
@pytest.mark.parametrize("log2n", [28, 29, 30, 31])
def test_long_sums_and_means(log2n):
    n = 2 ** log2n
    assert _sum_of_copies(np.float32(1), n) == n
    assert _rel(_sum_of_copies(TENTH, n), float(TENTH) * n) < 2e-5
    assert _rel(_sum_of_copies(TENTH, n, mean=True), float(TENTH)) < 2e-5


@large
def test_row_kernels_over_a_2_26_row():
    assert _softmax_error(2 ** 26) < 1e-6
    assert _layer_norm_error(2 ** 26) < 2e-6


def test_sum_of_a_0d_input_is_its_element():
    """No reduced loops: nothing to block."""
    assert float(tk.jit(lambda x: x.sum())(np.array(TENTH)).numpy()) == TENTH
