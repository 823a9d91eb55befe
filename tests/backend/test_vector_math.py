"""The vectorizable float32 exp and tanh of the C prelude, against numpy, in units in the last place."""
from __future__ import annotations

import numpy as np

import tensorkiln as tk


def ulp_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in float32 ulps of the wanted value."""
    want32 = want.astype(np.float32)
    spacing = np.spacing(np.abs(want32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


def _values() -> np.ndarray:
    rng = np.random.default_rng(0)
    grid = np.linspace(-100, 100, 200_001, dtype=np.float32)
    small = (rng.standard_normal(50_000) * 1e-3).astype(np.float32)
    special = np.array([0.0, -0.0, 1e-30, -1e-30, 0.625, -0.625, 9.0, -9.0, 88.7, -87.3, 88.73, -87.34,
                        np.inf, -np.inf, np.nan], dtype=np.float32)
    return np.concatenate([grid, small, special])


def test_exp_and_tanh_are_within_their_ulp_bounds():
    x = _values()
    exp, tanh = tk.jit(lambda v: (v.exp(), v.tanh()))(x)
    want_exp = np.exp(x.astype(np.float64))
    want_tanh = np.tanh(x.astype(np.float64))
    normal = (want_exp > 1.2e-38) & (want_exp < 3.4e38)
    assert ulp_error(exp.numpy()[normal], want_exp[normal]).max() <= 2.0
    assert np.all(exp.numpy()[want_exp <= 1.2e-38] <= 1.2e-38)  # flushed or subnormal, never negative
    assert np.all(np.isinf(exp.numpy()[np.isinf(want_exp)]))
    finite = np.isfinite(want_tanh)
    assert ulp_error(tanh.numpy()[finite], want_tanh[finite]).max() <= 3.0
    assert np.isnan(exp.numpy()[-1]) and np.isnan(tanh.numpy()[-1])
    assert tanh.numpy()[-3] == 1.0 and tanh.numpy()[-2] == -1.0
