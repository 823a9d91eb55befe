"""tk.special: PyTorch's torch.special functions over tensorkiln tensors.

Each is a primitive of the op table (ir/ops/special_*.py) or a short composition of primitives,
named as torch.special names it. Integer operands compute in float32, as in PyTorch.
"""
from __future__ import annotations

import math

from .. import dtypes as dt
from .tensor import Tensor, apply, as_tensor


def _float(x) -> Tensor:
    x = x if isinstance(x, Tensor) else as_tensor(x)
    return x if x.dtype.is_floating else x.to(dt.DEFAULT_FLOAT)


def _unary(op: str, doc: str):
    def function(x) -> Tensor:
        return apply(op, [_float(x)])
    function.__doc__ = doc
    return function


def _pair(x, n) -> tuple[Tensor, Tensor]:
    """x and n as tensors of one float dtype (PyTorch's promotion, integers to float32)."""
    def scalar_dtype(other):  # a Python number takes a float tensor operand's dtype, else float32
        return other.dtype if isinstance(other, Tensor) and other.dtype.is_floating else dt.DEFAULT_FLOAT
    x = x if isinstance(x, Tensor) else as_tensor(float(x), scalar_dtype(n))
    n = n if isinstance(n, Tensor) else as_tensor(float(n), scalar_dtype(x))
    dtype = dt.promote_types(x.dtype, n.dtype)
    dtype = dtype if dtype.is_floating else dt.DEFAULT_FLOAT
    return x.to(dtype), n.to(dtype)


def _binary(op: str, doc: str):
    def function(x, n) -> Tensor:
        return apply(op, list(_pair(x, n)))
    function.__doc__ = doc
    return function


i0 = modified_bessel_i0 = _unary("i0", "I0(x), the modified Bessel function of the first kind of order 0.")
i0e = _unary("i0e", "exp(-|x|) I0(x).")
i1 = modified_bessel_i1 = _unary("i1", "I1(x), the modified Bessel function of the first kind of order 1.")
i1e = _unary("i1e", "exp(-|x|) I1(x).")
modified_bessel_k0 = _unary("bessel_k0", "K0(x), the modified Bessel function of the second kind of order 0.")
modified_bessel_k1 = _unary("bessel_k1", "K1(x), the modified Bessel function of the second kind of order 1.")
scaled_modified_bessel_k0 = _unary("bessel_k0e", "exp(x) K0(x).")
scaled_modified_bessel_k1 = _unary("bessel_k1e", "exp(x) K1(x).")
bessel_j0 = _unary("bessel_j0", "J0(x), the Bessel function of the first kind of order 0.")
bessel_j1 = _unary("bessel_j1", "J1(x), the Bessel function of the first kind of order 1.")
bessel_y0 = _unary("bessel_y0", "Y0(x), the Bessel function of the second kind of order 0.")
bessel_y1 = _unary("bessel_y1", "Y1(x), the Bessel function of the second kind of order 1.")
spherical_bessel_j0 = _unary("spherical_bessel_j0", "sin(x)/x, 1 at 0.")
airy_ai = _unary("airy_ai", "Ai(x), the Airy function of the first kind.")

chebyshev_polynomial_t = _binary("chebyshev_polynomial_t", "Chebyshev polynomial T_n(x).")
chebyshev_polynomial_u = _binary("chebyshev_polynomial_u", "Chebyshev polynomial U_n(x).")
chebyshev_polynomial_v = _binary("chebyshev_polynomial_v", "Chebyshev polynomial V_n(x).")
chebyshev_polynomial_w = _binary("chebyshev_polynomial_w", "Chebyshev polynomial W_n(x).")
shifted_chebyshev_polynomial_t = _binary("shifted_chebyshev_polynomial_t", "T_n(2x - 1).")
shifted_chebyshev_polynomial_u = _binary("shifted_chebyshev_polynomial_u", "U_n(2x - 1).")
shifted_chebyshev_polynomial_v = _binary("shifted_chebyshev_polynomial_v", "V_n(2x - 1).")
shifted_chebyshev_polynomial_w = _binary("shifted_chebyshev_polynomial_w", "W_n(2x - 1).")
hermite_polynomial_h = _binary("hermite_polynomial_h", "Physicists' Hermite polynomial H_n(x).")
hermite_polynomial_he = _binary("hermite_polynomial_he", "Probabilists' Hermite polynomial He_n(x).")
laguerre_polynomial_l = _binary("laguerre_polynomial_l", "Laguerre polynomial L_n(x).")
legendre_polynomial_p = _binary("legendre_polynomial_p", "Legendre polynomial P_n(x).")

digamma = psi = _unary("digamma", "psi(x) = Gamma'(x) / Gamma(x).")
erfinv = _unary("erfinv", "The inverse error function.")
ndtri = _unary("ndtri", "The inverse of the standard normal CDF.")
erfcx = _unary("erfcx", "exp(x^2) erfc(x).")
log_ndtr = _unary("log_ndtr", "log of the standard normal CDF.")
zeta = _binary("zeta", "The Hurwitz zeta function: sum over k >= 0 of (k + q)^-x.")
gammainc = _binary("igamma", "The regularized lower incomplete gamma function P(a, x).")
gammaincc = _binary("igammac", "The regularized upper incomplete gamma function Q(a, x).")


def polygamma(n: int, x) -> Tensor:
    """The n-th derivative of digamma (n = 0: digamma itself)."""
    if int(n) != n or n < 0:
        raise ValueError(f"polygamma needs an integer order n >= 0, got {n}")
    x = _float(x)
    return digamma(x) if n == 0 else apply("polygamma", [x], n=int(n))


def multigammaln(x, p: int) -> Tensor:
    """The multivariate log-gamma function of dimension p: sum over i < p of lgamma(x - i/2), plus
    p (p - 1)/4 log(pi) (torch.mvlgamma)."""
    if int(p) != p or p < 1:
        raise ValueError(f"multigammaln needs an integer dimension p >= 1, got {p}")
    x = _float(x)
    total = x.lgamma()
    for i in range(1, int(p)):
        total = total + (x - i / 2).lgamma()
    return total + p * (p - 1) / 4 * math.log(math.pi)


def frexp(x) -> tuple[Tensor, Tensor]:
    """(mantissa, exponent) with x = mantissa * 2**exponent, 0.5 <= |mantissa| < 1, exponent int32
    (torch.frexp; 0, infinities and NaN have exponent 0)."""
    x = _float(x)
    return apply("frexp_mantissa", [x]), apply("frexp_exponent", [x]).to(dt.int32)
