"""Bessel functions as primitives: I0, I1 (and exponentially scaled), K0, K1 (and scaled), J0, J1,
Y0, Y1, the spherical j0, and the Airy function Ai.

Each is a scalar algorithm (loops/scalar_c.py: one text, the numpy reference and the generated C),
the Cephes approximations PyTorch uses (aten/src/ATen/native/Math.h), evaluated in double (float32
results are rounded once at the end). A composition would lose accuracy: i0e(x) is not
i0(x) * exp(-|x|) once exp(|x|) overflows (|x| > 709 in float64, > 88 in float32).
"""
from __future__ import annotations

from ...loops.scalar_c import chbevl, cos, exp, fabs, isinf, log, polevl, scalar_function, sin, sqrt
from .gradient import NOT_DIFFERENTIABLE
from .special_bessel_tables import (AIRY_AD, AIRY_AFD, AIRY_AFN, AIRY_AGD, AIRY_AGN, AIRY_AN, I0_A, I0_B, I1_A, I1_B, J0_PP, J0_PQ, J0_QP, J0_QQ, J0_RP, J0_RQ,  # noqa: F401
                                    J1_PP, J1_PQ, J1_QP, J1_QQ, J1_RP, J1_RQ, K0_A, K0_B, K1_A, K1_B, Y0_YP,
                                    Y0_YQ, Y1_YP, Y1_YQ)
from .special_rows import special_unary

SQRT_2_OVER_PI = 0.797884560802865355879892119868763737
TWO_OVER_PI = 0.636619772367581343075535053490057448
PI_OVER_4 = 0.785398163397448309615660845819875721
THREE_PI_OVER_4 = 2.356194490192344928846982537459627163
PI = 3.14159265358979323846
ONE_OVER_SQRT_PI = 5.64189583547756286948e-01
DOUBLE_EPSILON = 2.220446049250313e-16
INFINITY = float("inf")
NAN = float("nan")


@scalar_function
def bessel_i0(x):
    """I0(x), the modified Bessel function of the first kind of order 0 (Cephes i0): exp(|x|) times a
    Chebyshev series of exp(-x) I0(x) on [0, 8], of exp(-x) sqrt(x) I0(x) in 8/x beyond."""
    x = fabs(x)
    if x <= 8.0:
        return exp(x) * chbevl(x / 2.0 - 2.0, I0_A)
    return exp(x) * chbevl(32.0 / x - 2.0, I0_B) / sqrt(x)


@scalar_function
def bessel_i0e(x):
    """exp(-|x|) I0(x) (Cephes i0e): the Chebyshev series of bessel_i0 without its exp(|x|)."""
    x = fabs(x)
    if x <= 8.0:
        return chbevl(x / 2.0 - 2.0, I0_A)
    return chbevl(32.0 / x - 2.0, I0_B) / sqrt(x)


@scalar_function
def bessel_i1(x):
    """I1(x), the modified Bessel function of the first kind of order 1 (Cephes i1), odd in x."""
    z = fabs(x)
    if z <= 8.0:
        out = exp(z) * z * chbevl(z / 2.0 - 2.0, I1_A)
    else:
        out = exp(z) * chbevl(32.0 / z - 2.0, I1_B) / sqrt(z)
    return -out if x < 0.0 else out


@scalar_function
def bessel_i1e(x):
    """exp(-|x|) I1(x) (Cephes i1e), odd in x."""
    z = fabs(x)
    if z <= 8.0:
        out = chbevl(z / 2.0 - 2.0, I1_A) * z
    else:
        out = chbevl(32.0 / z - 2.0, I1_B) / sqrt(z)
    return -out if x < 0.0 else out


@scalar_function
def bessel_k0(x):
    """K0(x), the modified Bessel function of the second kind of order 0 (Cephes k0): on (0, 2] a
    Chebyshev series in x^2 minus log(x/2) I0(x); beyond, exp(-x)/sqrt(x) times one in 8/x.
    +inf at 0, NaN for x < 0."""
    if x == 0.0:
        return INFINITY
    if x < 0.0:
        return NAN
    if x <= 2.0:
        return chbevl(x * x - 2.0, K0_A) - log(0.5 * x) * bessel_i0(x)
    return exp(-x) * chbevl(8.0 / x - 2.0, K0_B) / sqrt(x)


@scalar_function
def bessel_k0e(x):
    """exp(x) K0(x) (Cephes k0e)."""
    if x == 0.0:
        return INFINITY
    if x < 0.0:
        return NAN
    if x <= 2.0:
        return (chbevl(x * x - 2.0, K0_A) - log(0.5 * x) * bessel_i0(x)) * exp(x)
    return chbevl(8.0 / x - 2.0, K0_B) / sqrt(x)


@scalar_function
def bessel_k1(x):
    """K1(x), the modified Bessel function of the second kind of order 1 (Cephes k1)."""
    if x == 0.0:
        return INFINITY
    if x < 0.0:
        return NAN
    if x <= 2.0:
        return log(0.5 * x) * bessel_i1(x) + chbevl(x * x - 2.0, K1_A) / x
    return exp(-x) * chbevl(8.0 / x - 2.0, K1_B) / sqrt(x)


@scalar_function
def bessel_k1e(x):
    """exp(x) K1(x) (Cephes k1e)."""
    if x == 0.0:
        return INFINITY
    if x < 0.0:
        return NAN
    if x <= 2.0:
        return (log(0.5 * x) * bessel_i1(x) + chbevl(x * x - 2.0, K1_A) / x) * exp(x)
    return chbevl(8.0 / x - 2.0, K1_B) / sqrt(x)


@scalar_function
def bessel_j0(x):
    """J0(x), the Bessel function of the first kind of order 0 (Cephes j0, as PyTorch evaluates it):
    on [0, 5] (x^2 - r1)(x^2 - r2) RP(x^2)/RQ(x^2) with r1, r2 the squares of the first two zeros;
    beyond, the asymptotic form sqrt(2/(pi x)) (P cos(x - pi/4) - 5/x Q sin(x - pi/4))."""
    x = fabs(x)
    if x <= 5.0:
        if x < 0.00001:
            return 1.0 - x * x / 4.0
        z = x * x
        return (z - 5.78318596294678452118) * (z - 30.4712623436620863991) * polevl(z, J0_RP) / polevl(z, J0_RQ)
    q = 25.0 / (x * x)
    p = polevl(q, J0_PP) / polevl(q, J0_PQ)
    r = polevl(q, J0_QP) / polevl(q, J0_QQ)
    return (p * cos(x - PI_OVER_4) - 5.0 / x * r * sin(x - PI_OVER_4)) * SQRT_2_OVER_PI / sqrt(x)


@scalar_function
def bessel_j1(x):
    """J1(x), the Bessel function of the first kind of order 1 (Cephes j1), odd in x."""
    sign = -1.0 if x < 0.0 else 1.0
    x = fabs(x)
    if x <= 5.0:
        z = x * x
        return sign * (polevl(z, J1_RP) / polevl(z, J1_RQ) * x * (z - 14.6819706421238932572)
                       * (z - 49.2184563216946036703))
    q = 5.0 / x * (5.0 / x)
    p = polevl(q, J1_PP) / polevl(q, J1_PQ)
    r = polevl(q, J1_QP) / polevl(q, J1_QQ)
    return sign * ((p * cos(x - THREE_PI_OVER_4) - 5.0 / x * r * sin(x - THREE_PI_OVER_4))
                   * SQRT_2_OVER_PI / sqrt(x))


@scalar_function
def bessel_y0(x):
    """Y0(x), the Bessel function of the second kind of order 0 (Cephes y0): on (0, 5]
    YP(x^2)/YQ(x^2) + 2/pi log(x) J0(x); beyond, J0's asymptotic form with sin and cos exchanged.
    -inf at 0, NaN for x < 0."""
    if x <= 5.0:
        if x == 0.0:
            return -INFINITY
        if x < 0.0:
            return NAN
        z = x * x
        return polevl(z, Y0_YP) / polevl(z, Y0_YQ) + TWO_OVER_PI * log(x) * bessel_j0(x)
    q = 25.0 / (x * x)
    p = polevl(q, J0_PP) / polevl(q, J0_PQ)
    r = polevl(q, J0_QP) / polevl(q, J0_QQ)
    return (p * sin(x - PI_OVER_4) + 5.0 / x * r * cos(x - PI_OVER_4)) * SQRT_2_OVER_PI / sqrt(x)


@scalar_function
def bessel_y1(x):
    """Y1(x), the Bessel function of the second kind of order 1 (Cephes y1)."""
    if x <= 5.0:
        if x == 0.0:
            return -INFINITY
        if x <= 0.0:
            return NAN
        z = x * x
        return x * (polevl(z, Y1_YP) / polevl(z, Y1_YQ)) + TWO_OVER_PI * (bessel_j1(x) * log(x) - 1.0 / x)
    q = 5.0 / x * (5.0 / x)
    p = polevl(q, J1_PP) / polevl(q, J1_PQ)
    r = polevl(q, J1_QP) / polevl(q, J1_QQ)
    return (p * sin(x - THREE_PI_OVER_4) + 5.0 / x * r * cos(x - THREE_PI_OVER_4)) * SQRT_2_OVER_PI / sqrt(x)


@scalar_function
def spherical_bessel_j0(x):
    """j0(x) = sin(x)/x, by its Taylor series for |x| < 0.5 (no cancellation, 1 at 0); 0 at +-inf."""
    if isinf(x):
        return 0.0
    if fabs(x) < 0.5:
        z = x * x
        return 1.0 + z * (-1.0 / 6.0 + z * (1.0 / 120.0 + z * (-1.0 / 5040.0 + z * (1.0 / 362880.0 + z * (
            -1.0 / 39916800.0 + z * (1.0 / 6227020800.0))))))
    return sin(x) / x


@scalar_function
def airy_ai(x):
    """Ai(x), the Airy function of the first kind (Cephes airy, as PyTorch evaluates it): for
    x < -2.09 the oscillating asymptotic form in z = 1/zeta, zeta = 2/3 (-x)^(3/2); for x >= 2.09
    the decaying one, exp(-zeta) AN/AD; between, the Maclaurin series of its two parts f and g.
    0 past x = 103.892 (underflow), NaN at +-inf."""
    if isinf(x):
        return NAN
    if x > 103.892:
        return 0.0
    if x < -2.09:
        zeta = -2.0 * x * sqrt(-x) / 3.0
        z = 1.0 / zeta
        afn = polevl(z * z, AIRY_AFN)
        afd = polevl(z * z, AIRY_AFD)
        agn = polevl(z * z, AIRY_AGN)
        agd = polevl(z * z, AIRY_AGD)
        t = zeta + 0.25 * PI
        return ONE_OVER_SQRT_PI / sqrt(sqrt(-x)) * (sin(t) * (1.0 + z * z * afn / afd) - cos(t) * (z * agn / agd))
    if x >= 2.09:
        zeta = 2.0 * x * sqrt(x) / 3.0
        an = polevl(1.0 / zeta, AIRY_AN)
        ad = polevl(1.0 / zeta, AIRY_AD)
        return ONE_OVER_SQRT_PI * (an / ad) / (2.0 * sqrt(sqrt(x)) * exp(zeta))
    f = 1.0
    g = x
    k = 1.0
    m = 1.0
    n = x
    t = 1.0
    z = x * x * x
    while t > DOUBLE_EPSILON:
        m *= z
        k += 1.0
        m /= k
        n *= z
        k += 1.0
        n /= k
        m /= k
        f += m
        k += 1.0
        n /= k
        g += n
        t = fabs(m / f)
    return 0.355028053887817239260 * f - 0.258819403792806798405 * g


def _where_zero(build, x, at_zero: float, elsewhere):
    """`elsewhere`, and `at_zero` where x == 0 (a removable singularity of the formula)."""
    return build.apply("where", [x == 0, build.constant(at_zero, x.dtype), elsewhere])


def _i0e_gradient(build, g, x, y):
    """i0e' = i1e - sign(x) i0e."""
    return g * (build.apply("i1e", [x]) - x.sign() * y)


def _i1_gradient(build, g, x, y):
    """i1' = i0 - i1/x, 1/2 at 0."""
    return g * _where_zero(build, x, 0.5, build.apply("i0", [x]) - y / x)


def _i1e_gradient(build, g, x, y):
    """i1e' = i0e - i1e (sign(x) + 1/x), 1/2 at 0."""
    return g * _where_zero(build, x, 0.5, build.apply("i0e", [x]) - y * (x.sign() + 1.0 / x))


#             name                   algorithm             gradient
special_unary("i0",                  bessel_i0,            lambda b, g, x, y: g * b.apply("i1", [x]),
              "I0, modified Bessel function of the first kind", method="i0", aten="i0")
special_unary("i0e",                 bessel_i0e,           _i0e_gradient, "exp(-|x|) I0(x)")
special_unary("i1",                  bessel_i1,            _i1_gradient, "I1, modified Bessel function of the first kind")
special_unary("i1e",                 bessel_i1e,           _i1e_gradient, "exp(-|x|) I1(x)")
special_unary("bessel_k0",           bessel_k0,            NOT_DIFFERENTIABLE, "K0, modified Bessel function of the second kind")
special_unary("bessel_k0e",          bessel_k0e,           NOT_DIFFERENTIABLE, "exp(x) K0(x)")
special_unary("bessel_k1",           bessel_k1,            NOT_DIFFERENTIABLE, "K1, modified Bessel function of the second kind")
special_unary("bessel_k1e",          bessel_k1e,           NOT_DIFFERENTIABLE, "exp(x) K1(x)")
special_unary("bessel_j0",           bessel_j0,            NOT_DIFFERENTIABLE, "J0, Bessel function of the first kind")
special_unary("bessel_j1",           bessel_j1,            NOT_DIFFERENTIABLE, "J1, Bessel function of the first kind")
special_unary("bessel_y0",           bessel_y0,            NOT_DIFFERENTIABLE, "Y0, Bessel function of the second kind")
special_unary("bessel_y1",           bessel_y1,            NOT_DIFFERENTIABLE, "Y1, Bessel function of the second kind")
special_unary("spherical_bessel_j0", spherical_bessel_j0,  NOT_DIFFERENTIABLE, "sin(x)/x, 1 at 0")
special_unary("airy_ai",             airy_ai,              NOT_DIFFERENTIABLE, "Ai, Airy function of the first kind")
