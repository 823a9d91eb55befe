"""The gamma family and the error function's relatives as primitives: digamma, polygamma (n >= 1),
Hurwitz zeta, erfinv, ndtri, erfcx and log_ndtr.

Each is a scalar algorithm (loops/scalar_c.py: one text, the numpy reference and the generated C)
evaluated in double, after PyTorch's (aten/src/ATen/native/Math.h: Cephes' digamma, zeta and ndtri,
Pavlis' erfinv with two Newton steps); erfcx is exp(x^2) erfc(x) where erfc keeps its relative
accuracy and a continued fraction beyond.
"""
from __future__ import annotations

import math

import numpy as np

from ...loops import expr as E
from ...loops.scalar_c import (copysign, erf, erfc, exp, fabs, floor, isnan, lgamma, log, log1p, polevl, pow,
                               scalar_function, sin, sqrt, tan, trunc)
from .elementwise import FLOAT_ONLY, _check_category, _describe
from .gradient import NOT_DIFFERENTIABLE
from .registry import Attrs, MappingType, OpKind, TensorType, register
from .special_gamma_tables import (DIGAMMA_A, NDTRI_P0, NDTRI_P1, NDTRI_P2, NDTRI_Q0, NDTRI_Q1,  # noqa: F401
                                   NDTRI_Q2, ZETA_A)
from .special_rows import special_binary, special_math_function, special_unary

PI = math.pi
INFINITY = float("inf")
NAN = float("nan")
MACHEP = 1.11022302462515654042e-16
PSI_10 = 2.25175258906672110764
ONE_OVER_SQRT_PI = 0.56418958354775628694807945156
SQRT_2PI = 2.50662827463100050242
EXP_MINUS_2 = 0.13533528323661269189


@scalar_function
def digamma(x):
    """psi(x) = Gamma'(x)/Gamma(x) (Cephes psi): reflection psi(x) = psi(1 - x) - pi/tan(pi x) for
    x < 0, the recurrence psi(x) = psi(x + 1) - 1/x up to x >= 10, then the asymptotic series.
    -+inf at 0 (by the sign of zero), NaN at the negative integers."""
    if x == 0.0:
        return copysign(INFINITY, -x)
    reflection = 0.0
    if x < 0.0:
        if x == trunc(x):
            return NAN
        reflection = PI / tan(PI * (x - trunc(x)))
        x = 1.0 - x
    result = 0.0
    while x < 10.0:
        result -= 1.0 / x
        x += 1.0
    if x == 10.0:
        return result + PSI_10 - reflection
    y = 0.0
    if x < 1.0e17:
        z = 1.0 / (x * x)
        y = z * polevl(z, DIGAMMA_A)
    return result + log(x) - 0.5 / x - y - reflection


@scalar_function(native=True)
def trigamma(x):
    """psi'(x): reflection for x < 1/2, six steps of psi'(x) = psi'(x + 1) + 1/x^2, then the
    asymptotic series (PyTorch's trigamma, float32 in float32 as PyTorch's: its sin(pi x) rounds
    pi x to float32, which moves results near the poles)."""
    sign = 1.0
    result = 0.0
    if x < 0.5:
        sign = -1.0
        s = sin(PI * x)
        result -= PI * PI / (s * s)
        x = 1.0 - x
    for i in range(6):
        result += 1.0 / (x * x)
        x += 1.0
    ixx = 1.0 / (x * x)
    result += (1.0 + 1.0 / (2.0 * x) + ixx * (1.0 / 6.0 - ixx * (1.0 / 30.0 - ixx * (1.0 / 42.0)))) / x
    return sign * result


@scalar_function
def zeta(x, q):
    """The Hurwitz zeta function sum_k (k + q)^-x (Cephes zeta): the sum's first terms up to
    k + q > 9, then the Euler-Maclaurin tail. +inf at x = 1 and at q = 0, -1, ...; NaN for x < 1."""
    if x == 1.0:
        return INFINITY
    if x < 1.0:
        return NAN
    if q <= 0.0:
        if q == floor(q):
            return INFINITY
        if x != floor(x):
            return NAN
    s = pow(q, -x)
    a = q
    i = 0.0
    b = 0.0
    while i < 9.0 or a <= 9.0:
        i += 1.0
        a += 1.0
        b = pow(a, -x)
        s += b
        if -MACHEP * s < b and b < MACHEP * s:
            return s
    w = a
    s += b * w / (x - 1.0)
    s -= 0.5 * b
    a = 1.0
    k = 0.0
    for j in range(12):
        a *= x + k
        b /= w
        t = a * b / ZETA_A[j]
        s = s + t
        t = fabs(t / s)
        if t < MACHEP:
            return s
        k += 1.0
        a *= x + k
        b /= w
        k += 1.0
    return s


@scalar_function(native=True)
def polygamma(n, x):
    """psi^(n)(x) for n >= 1: trigamma for n = 1, else (-1)^(n+1) n! zeta(n + 1, x)."""
    if n == 1.0:
        return trigamma(x)
    sign = 1.0 if n - 2.0 * floor(n / 2.0) == 1.0 else -1.0
    return sign * exp(lgamma(n + 1.0)) * zeta(n + 1.0, x)


@scalar_function
def erfinv(y):
    """The inverse error function: Pavlis' rational approximation (|y| <= 0.7, and in
    sqrt(-log((1 - |y|)/2)) beyond), then two Newton steps on erf(x) = y. +-inf at +-1."""
    y_abs = fabs(y)
    if y_abs > 1.0:
        return NAN
    if y_abs == 1.0:
        return copysign(INFINITY, y)
    if y_abs <= 0.7:
        z = y * y
        num = ((-0.140543331 * z + 0.914624893) * z + -1.645349621) * z + 0.886226899
        dem = (((0.012229801 * z + -0.329097515) * z + 1.442710462) * z + -2.118377725) * z + 1.0
        x = y * num / dem
    else:
        z = sqrt(-log((1.0 - y_abs) / 2.0))
        num = ((1.641345311 * z + 3.429567803) * z + -1.624906493) * z + -1.970840454
        dem = (1.637067800 * z + 3.543889200) * z + 1.0
        x = copysign(num, y) / dem
    x = x - (erf(x) - y) / (2.0 * ONE_OVER_SQRT_PI * exp(-x * x))
    x = x - (erf(x) - y) / (2.0 * ONE_OVER_SQRT_PI * exp(-x * x))
    return x


@scalar_function
def ndtri(y0):
    """The inverse of the standard normal CDF (Cephes ndtri): a rational function of y - 1/2 near
    the middle, of 1/z with z = sqrt(-2 log y) in the tails. -inf at 0, +inf at 1."""
    if y0 == 0.0:
        return -INFINITY
    if y0 == 1.0:
        return INFINITY
    if y0 < 0.0 or y0 > 1.0:
        return NAN
    negate = 1.0
    y = y0
    if y > 1.0 - EXP_MINUS_2:
        y = 1.0 - y
        negate = 0.0
    if y > EXP_MINUS_2:
        y = y - 0.5
        y2 = y * y
        x = y + y * (y2 * polevl(y2, NDTRI_P0) / polevl(y2, NDTRI_Q0))
        return x * SQRT_2PI
    x = sqrt(-2.0 * log(y))
    x0 = x - log(x) / x
    z = 1.0 / x
    if x < 8.0:
        x1 = z * polevl(z, NDTRI_P1) / polevl(z, NDTRI_Q1)
    else:
        x1 = z * polevl(z, NDTRI_P2) / polevl(z, NDTRI_Q2)
    x = x0 - x1
    return -x if negate == 1.0 else x


@scalar_function
def erfcx(x):
    """exp(x^2) erfc(x): the product itself where erfc keeps full relative accuracy (x < 25; for
    x < 0 erfc is in (1, 2)), the continued fraction 1/sqrt(pi) / (x + (1/2)/(x + 1/(x + ...)))
    beyond (30 terms for x <= 50, PyTorch's 5-term form past 50, 1/(sqrt(pi) x) past 5e7)."""
    if isnan(x):
        return x
    if x < -26.7:
        return INFINITY
    if x < 25.0:
        return exp(x * x) * erfc(x)
    if x > 50.0:
        if x > 5e7:
            return ONE_OVER_SQRT_PI / x
        return ONE_OVER_SQRT_PI * ((x * x) * (x * x + 4.5) + 2.0) / (x * ((x * x) * (x * x + 5.0) + 3.75))
    t = x
    for k in range(30, 0, -1):
        t = x + 0.5 * k / t
    return ONE_OVER_SQRT_PI / t


@scalar_function
def log_ndtr(x):
    """log Phi(x), Phi the standard normal CDF: log(erfcx(-x/sqrt 2)/2) - x^2/2 for x < -1 (no
    underflow), log1p(-erfc(x/sqrt 2)/2) above (SciPy's and PyTorch's split)."""
    t = x * 0.7071067811865476
    if x < -1.0:
        return log(erfcx(-t) / 2.0) - t * t
    return log1p(-erfc(t) / 2.0)


# ---- the rows ------------------------------------------------------------------------------------

def _polygamma_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    _check_category("polygamma", types[0].dtype, FLOAT_ONLY)
    if int(attrs["n"]) < 1:
        raise ValueError(f"polygamma needs an order n >= 1 (n = 0 is digamma), got {attrs['n']}")
    return TensorType(types[0].shape, types[0].dtype)


def _polygamma_reference(inputs, attrs, out):
    x = np.asarray(inputs[0])
    return polygamma.reference(np.full(x.shape, float(attrs["n"]), dtype=x.dtype), x)


def _lower_polygamma(args, node):
    (x,) = args
    return E.call("polygamma", E.Const(float(node.attrs["n"]), x.dtype), x)


def _polygamma_gradient(build, g, x, y, n: int):
    return g * build.apply("polygamma", [x], n=n + 1)


special_math_function(polygamma)
register("polygamma", OpKind.ELEMENTWISE, MappingType.ONE_TO_ONE, _polygamma_infer, _polygamma_reference, 1,
         _describe(FLOAT_ONLY, "attr n >= 1: the n-th derivative of digamma"), lower=_lower_polygamma,
         gradient=lambda g, inputs, out, attrs, needs, build: (
             _polygamma_gradient(build, g, inputs[0], out, int(attrs["n"])),),
         float_only=True)

#             name        algorithm  gradient
special_unary("digamma",  digamma,   lambda b, g, x, y: g * b.apply("polygamma", [x], n=1),
              "Gamma'(x)/Gamma(x); NaN at 0, -1, -2, ...", method="digamma", aten="digamma")
special_unary("erfinv",   erfinv,    lambda b, g, x, y: g * (y * y).exp() * (math.sqrt(math.pi) / 2.0),
              "the inverse of erf on (-1, 1)", domain=(-1, 1), method="erfinv", aten="erfinv")
special_unary("ndtri",    ndtri,     lambda b, g, x, y: g * (y * y * 0.5).exp() * math.sqrt(2.0 * math.pi),
              "the inverse of the standard normal CDF", domain=(0, 1))
special_unary("erfcx",    erfcx,     lambda b, g, x, y: g * (x * y * 2.0 - 2.0 / math.sqrt(math.pi)),
              "exp(x^2) erfc(x)")
special_unary("log_ndtr", log_ndtr,  lambda b, g, x, y: g * (x * x * -0.5 - y).exp() / math.sqrt(2.0 * math.pi),
              "log of the standard normal CDF")
special_binary("zeta",    zeta,      NOT_DIFFERENTIABLE, "Hurwitz zeta: sum over k of (k + q)^-x")
