"""The vectorizable float32 exp, tanh and erf of the C prelude, against float64, in units in the last place.

Each function is compiled (tk.jit) and run over a dense sweep of float32
inputs: every 255th bit pattern of the range (all magnitudes, denormals
included), a fine uniform grid where the function varies, and the edge
cases (signed zeros, denormals, the limits of the range, infinities, NaN).
The bounds asserted here are the ones docs/kernels.md and c_prelude.py state.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import tensorkiln as tk

# The largest errors over every float32 of each function's range (measured once, exhaustively):
# exp 1.059 ulp at x = 5.2012, tanh 6.13 ulp at 7.9876, erf 6.498 ulp at 3.6709.
EXP_ULP = 1.06
TANH_ULP = 6.2
ERF_ULP = 6.5
FLUSH_BELOW = 2.0 ** -125.5  # tk_expf gives +0 where exp(x) is smaller (x < -86.99)
FLT_MAX = float(np.finfo(np.float32).max)
EDGES = [0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.1754944e-38, -1.1754944e-38, 1e-30, -1e-30, 1e-8, -1e-8,
         0.5, -0.5, 1.0, -1.0, 3.9, -3.9, 3.92, -3.92, 3.93, -3.93, 9.0, -9.0, 9.02, -9.02, 9.03, -9.03,
         -86.98, -86.99, -87.0, -87.3, -87.4, -103.9, -104.0, -150.0, 88.37, 88.38, 88.72, 88.7228, 88.72283,
         88.72284, 88.8, 89.0, 100.0, 3.4e38, -3.4e38, np.inf, -np.inf, np.nan]


def ulp_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in float32 ulps of the wanted value (the spacing of floats at want)."""
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


def bit_sweep(limit: float, step: int) -> np.ndarray:
    """Every `step`-th float32 in [-limit, limit] by bit pattern (so every binade, denormals included)."""
    top = int(np.array(limit, np.float32).view(np.uint32))
    positive = np.arange(0, top + 1, step, dtype=np.uint32).view(np.float32)
    return np.concatenate([positive, -positive])


def inputs(limit: float) -> np.ndarray:
    """The sweep for a function whose interesting range is [-limit, limit]."""
    grid = np.linspace(-limit, limit, 2_000_001, dtype=np.float32)
    return np.concatenate([bit_sweep(limit, 255), grid, np.array(EDGES, np.float32)])


def erf64(x: np.ndarray) -> np.ndarray:
    """erf in float64 (scipy when installed, else math.erf per element)."""
    try:
        from scipy.special import erf
    except ImportError:
        return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)
    return erf(x)


@pytest.fixture(scope="module")
def results():
    x = np.concatenate([inputs(110.0), inputs(12.0)])
    exp, tanh, erf = tk.jit(lambda v: (v.exp(), v.tanh(), v.erf()))(x)
    wide = x.astype(np.float64)
    with np.errstate(over="ignore"):
        want_exp = np.exp(wide)
    return x, exp.numpy(), tanh.numpy(), erf.numpy(), want_exp, np.tanh(wide), erf64(wide)


def test_exp_within_its_bound_where_the_result_is_normal(results):
    x, exp, _, _, want, _, _ = results
    normal = (want >= FLUSH_BELOW) & (want <= FLT_MAX)
    assert ulp_error(exp[normal], want[normal]).max() <= EXP_ULP


def test_exp_limits(results):
    x, exp, _, _, want, _, _ = results
    tiny = want < FLUSH_BELOW
    assert np.all((exp[tiny] >= 0) & (exp[tiny] <= 2.0 ** -125.5))  # flushed to +0 (or the exact tiny value)
    assert np.all(np.signbit(exp[tiny]) == 0)
    assert np.all(np.isposinf(exp[(want > FLT_MAX) & ~np.isnan(x)]))
    assert np.all(np.isnan(exp[np.isnan(x)]))
    assert exp[x == -np.inf][0] == 0.0 and exp[x == 0][0] == 1.0


def test_tanh_within_its_bound(results):
    x, _, tanh, _, _, want, _ = results
    finite = ~np.isnan(x)
    assert ulp_error(tanh[finite], want[finite]).max() <= TANH_ULP
    assert np.all(np.abs(tanh[finite]) <= 1.0)


def test_erf_within_its_bound(results):
    x, _, _, erf, _, _, want = results
    finite = ~np.isnan(x)
    assert ulp_error(erf[finite], want[finite]).max() <= ERF_ULP
    assert np.all(np.abs(erf[finite]) <= 1.0)


@pytest.mark.parametrize("index", [1, 2])
def test_tanh_and_erf_edge_cases(results, index):
    x, values = results[0], results[1 + index]
    assert values[x == np.inf][0] == 1.0 and values[x == -np.inf][0] == -1.0
    assert np.all(np.isnan(values[np.isnan(x)]))
    zeros = values[(x == 0)]
    assert np.all(zeros == 0)
    negative_zero = np.flatnonzero((x == 0) & np.signbit(x))
    assert np.all(np.signbit(values[negative_zero]))  # odd functions keep the sign of zero
    tiny = (np.abs(x) < 1e-30) & (x != 0)
    assert np.all(np.sign(values[tiny]) == np.sign(x[tiny]))
