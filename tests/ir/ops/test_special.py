"""Special functions (ir/ops/special_*.py, tk.special) compiled, against eager PyTorch and scipy.

Every function runs over random values across its domain and its edges (0, +-1, negative, large,
+-inf, NaN) in float32 and float64, in one compiled graph per dtype, at assert_close's default
tolerance; the numpy reference (the same scalar algorithm, loops/scalar_c.py) is checked too.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special
import torch

import tensorkiln as tk
from tensorkiln.ir.ops import REGISTRY

EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 8.0, -2.5, 30.0, 100.0, 1e-6, np.inf, -np.inf, np.nan]

# tk.special name -> (torch function, low, high of the random values)
UNARY = {
    "i0": (torch.special.i0, -20, 20), "i0e": (torch.special.i0e, -50, 50),
    "i1": (torch.special.i1, -20, 20), "i1e": (torch.special.i1e, -50, 50),
    "modified_bessel_k0": (torch.special.modified_bessel_k0, 0, 20),
    "modified_bessel_k1": (torch.special.modified_bessel_k1, 0, 20),
    "scaled_modified_bessel_k0": (torch.special.scaled_modified_bessel_k0, 0, 50),
    "scaled_modified_bessel_k1": (torch.special.scaled_modified_bessel_k1, 0, 50),
    "bessel_j0": (torch.special.bessel_j0, -30, 30), "bessel_j1": (torch.special.bessel_j1, -30, 30),
    "bessel_y0": (torch.special.bessel_y0, 0, 30), "bessel_y1": (torch.special.bessel_y1, 0, 30),
    "spherical_bessel_j0": (torch.special.spherical_bessel_j0, -20, 20),
    "airy_ai": (torch.special.airy_ai, -30, 30),  # below -30 float32 PyTorch rounds the phase first
    "digamma": (torch.special.digamma, -10, 20), "erfinv": (torch.special.erfinv, -1, 1),
    "ndtri": (torch.special.ndtri, 0, 1), "erfcx": (torch.special.erfcx, -3, 80),  # below -3 float32 PyTorch rounds x*x first
    "log_ndtr": (torch.special.log_ndtr, -40, 10),
}
BINARY = {  # name -> (torch function, x range, n (or q) range)
    "chebyshev_polynomial_t": (torch.special.chebyshev_polynomial_t, (-1.5, 1.5), (-1, 12)),
    "chebyshev_polynomial_u": (torch.special.chebyshev_polynomial_u, (-1.5, 1.5), (-1, 12)),
    "chebyshev_polynomial_v": (torch.special.chebyshev_polynomial_v, (-1.5, 1.5), (-1, 12)),
    "chebyshev_polynomial_w": (torch.special.chebyshev_polynomial_w, (-1.5, 1.5), (-1, 12)),
    "shifted_chebyshev_polynomial_t": (torch.special.shifted_chebyshev_polynomial_t, (-0.5, 1.5), (-1, 12)),
    "shifted_chebyshev_polynomial_u": (torch.special.shifted_chebyshev_polynomial_u, (-0.5, 1.5), (-1, 12)),
    "shifted_chebyshev_polynomial_v": (torch.special.shifted_chebyshev_polynomial_v, (-0.5, 1.5), (-1, 12)),
    "shifted_chebyshev_polynomial_w": (torch.special.shifted_chebyshev_polynomial_w, (-0.5, 1.5), (-1, 12)),
    "hermite_polynomial_h": (torch.special.hermite_polynomial_h, (-3, 3), (-1, 12)),
    "hermite_polynomial_he": (torch.special.hermite_polynomial_he, (-3, 3), (-1, 12)),
    "laguerre_polynomial_l": (torch.special.laguerre_polynomial_l, (-3, 10), (-1, 12)),
    "legendre_polynomial_p": (torch.special.legendre_polynomial_p, (-1.5, 1.5), (-1, 12)),
    "zeta": (torch.special.zeta, (1, 8), (-3, 10)),
    "gammainc": (torch.special.gammainc, (0, 300), (0, 320)),
    "gammaincc": (torch.special.gammaincc, (0, 300), (0, 320)),
}


def _values(rng, low, high, dtype):
    return np.concatenate([rng.uniform(low, high, 61), EDGES]).astype(dtype)


def _assert_close(got, want, what):
    torch.testing.assert_close(torch.from_numpy(np.asarray(got)), want, equal_nan=True, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_one_operand_functions_against_pytorch(dtype, rng):
    inputs = {name: _values(rng, low, high, dtype) for name, (_, low, high) in UNARY.items()}
    compiled = tk.jit(lambda *xs: tuple(getattr(tk.special, name)(x) for name, x in zip(UNARY, xs)))
    outputs = compiled(*inputs.values())
    for (name, (reference, _, _)), out in zip(UNARY.items(), outputs):
        _assert_close(out.numpy(), reference(torch.from_numpy(inputs[name])), name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_polynomials_and_zeta_against_pytorch(dtype, rng):
    pairs = {}
    for name, (_, (xl, xh), (nl, nh)) in BINARY.items():
        x = np.concatenate([rng.uniform(xl, xh, 40), [0.0, 1.0, -1.0, 0.5, np.inf, -np.inf] * 2]).astype(dtype)
        n = np.concatenate([rng.integers(nl, nh, 40), [0, 1, 2, 3, 7, 9, 10, 11, -2, 4.7, 5, 13]]).astype(dtype)
        pairs[name] = (x, n)
    compiled = tk.jit(lambda *xs: tuple(getattr(tk.special, name)(xs[2 * i], xs[2 * i + 1])
                                        for i, name in enumerate(BINARY)))
    outputs = compiled(*[a for pair in pairs.values() for a in pair])
    for (name, (reference, _, _)), out in zip(BINARY.items(), outputs):
        x, n = pairs[name]
        _assert_close(out.numpy(), reference(torch.from_numpy(x), torch.from_numpy(n)), name)


def test_polygamma_and_multigammaln_against_pytorch(rng):
    x = np.concatenate([rng.uniform(-5, 10, 40), [0.5, 1.0, 2.0, 30.0]]).astype(np.float32)
    positive = rng.uniform(2.5, 10, 30).astype(np.float64)
    compiled = tk.jit(lambda v, w: tuple(tk.special.polygamma(n, v) for n in range(5))
                      + (tk.special.multigammaln(w, 3),))
    outputs = compiled(x, positive)
    for n in range(5):
        _assert_close(outputs[n].numpy(), torch.polygamma(n, torch.from_numpy(x)), f"polygamma {n}")
    _assert_close(outputs[5].numpy(), torch.mvlgamma(torch.from_numpy(positive), 3), "mvlgamma")


def test_frexp_matches_pytorch_bit_for_bit(rng):
    x = np.concatenate([rng.standard_normal(40) * 10.0 ** rng.integers(-40, 38, 40),
                        [0.0, -0.0, 0.5, 1.0, -4.0, 1e-45, -3e-39, 3.4e38, np.inf, -np.inf, np.nan]]).astype(np.float32)
    mantissa, exponent = tk.jit(tk.special.frexp)(x)
    expected_mantissa, expected_exponent = torch.frexp(torch.from_numpy(x))
    np.testing.assert_array_equal(mantissa.numpy(), expected_mantissa.numpy())
    np.testing.assert_array_equal(exponent.numpy(), expected_exponent.numpy())
    assert exponent.dtype == tk.int32


def test_references_agree_with_scipy(rng):
    """The numpy references (the scalar algorithms run by numpy), against scipy in float64 (J0, J1, Y0
    and Y1 follow PyTorch's rational approximations, which differ from scipy's by up to 1e-5)."""
    x = rng.uniform(0.05, 20, 50)
    cases = {"i0": scipy.special.i0, "i0e": scipy.special.i0e, "i1": scipy.special.i1, "i1e": scipy.special.i1e,
             "bessel_k0": scipy.special.k0, "bessel_k1": scipy.special.k1, "bessel_k0e": scipy.special.k0e,
             "bessel_k1e": scipy.special.k1e, "digamma": scipy.special.digamma,
             "erfcx": scipy.special.erfcx, "log_ndtr": scipy.special.log_ndtr, "airy_ai": lambda v: scipy.special.airy(v)[0]}
    for name, expected in cases.items():
        np.testing.assert_allclose(REGISTRY[name].reference([x], {}, None), expected(x), rtol=1e-12, atol=1e-13,
                                   err_msg=name)
    a = rng.uniform(0.1, 300, 50)
    for name, expected in {"igamma": scipy.special.gammainc, "igammac": scipy.special.gammaincc}.items():
        np.testing.assert_allclose(REGISTRY[name].reference([a, x * 15], {}, None), expected(a, x * 15), rtol=1e-10,
                                   atol=1e-14, err_msg=name)
    p = rng.uniform(0.01, 0.99, 50)
    np.testing.assert_allclose(REGISTRY["ndtri"].reference([p], {}, None), scipy.special.ndtri(p), rtol=1e-12)
    np.testing.assert_allclose(REGISTRY["erfinv"].reference([2 * p - 1], {}, None), scipy.special.erfinv(2 * p - 1),
                               rtol=1e-12)


def test_torch_compile_lowers_them(rng):
    x = torch.from_numpy(rng.uniform(0.1, 0.9, (3, 5)).astype(np.float32))
    n = torch.tensor([0.0, 1.0, 2.0, 5.0, 9.0])

    def f(x, n):
        return (torch.special.i1e(x * 9), torch.digamma(x), torch.polygamma(2, x), torch.erfinv(x),
                torch.special.chebyshev_polynomial_u(x, n), torch.signbit(x - 0.5), torch.angle(x - 0.5),
                torch.logaddexp2(x, 1 - x), torch.special.zeta(x + 1.5, x))
    for got, want in zip(torch.compile(f, backend="tensorkiln")(x, n), f(x, n)):
        torch.testing.assert_close(got, want)
