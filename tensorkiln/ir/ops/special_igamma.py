"""The regularized incomplete gamma functions as primitives: igamma P(a, x) and igammac Q(a, x).

PyTorch's algorithms (aten/src/ATen/native/Math.h, from SciPy's gammainc/gammaincc, Cephes' igam and
Boost's Lanczos approximation), as scalar algorithms (loops/scalar_c.py: one text, the numpy
reference and the generated C) evaluated in double: boundary values first, the uniform asymptotic
expansion where a is large and x close to a, else the power series of P or of Q, or Q's continued
fraction, whichever converges without cancellation; P = 1 - Q (and Q = 1 - P) on the other side.
"""
from __future__ import annotations

from ...loops.scalar_c import (erfc, exp, expm1, fabs, isinf, lgamma, log, log1p, pow, scalar_function,
                               sqrt)
from .gradient import NOT_DIFFERENTIABLE
from .special_igamma_tables import IGAM_D, LANCZOS_DENOM, LANCZOS_NUM  # noqa: F401
from .special_rows import special_binary

MACHEP = 1.11022302462515654042e-16
MAXLOG = 7.09782712893383996843e2
EXP1 = 2.718281828459045
LANCZOS_G = 6.024680040776729583740234375
BIG = 4.503599627370496e15
BIGINV = 2.22044604925031308085e-16
PI = 3.14159265358979323846
NAN = float("nan")
INFINITY = float("inf")


@scalar_function
def lanczos_sum_expg_scaled(x):
    """Boost's Lanczos sum, exp(g)-scaled: a ratio of two degree-12 polynomials, evaluated in 1/x
    for |x| > 1 (SciPy's ratevl)."""
    if fabs(x) > 1.0:
        y = 1.0 / x
        num = LANCZOS_NUM[12]
        den = LANCZOS_DENOM[12]
        for i in range(1, 13):
            num = num * y + LANCZOS_NUM[12 - i]
            den = den * y + LANCZOS_DENOM[12 - i]
        return num / den
    num = LANCZOS_NUM[0]
    den = LANCZOS_DENOM[0]
    for i in range(1, 13):
        num = num * x + LANCZOS_NUM[i]
        den = den * x + LANCZOS_DENOM[i]
    return num / den


@scalar_function
def igam_fac(a, x):
    """x^a exp(-x) / Gamma(a), by logarithms away from a ~ x, by the Lanczos form near it."""
    if fabs(a - x) > 0.4 * fabs(a):
        ax = a * log(x) - x - lgamma(a)
        if ax < -MAXLOG:
            return 0.0
        return exp(ax)
    fac = a + LANCZOS_G - 0.5
    res = sqrt(fac / EXP1) / lanczos_sum_expg_scaled(a)
    if a < 200.0 and x < 200.0:
        res *= exp(a - x) * pow(x / fac, a)
    else:
        num = x - a - LANCZOS_G + 0.5
        numfac = num / fac
        res *= exp(a * (log1p(numfac) - numfac) + x * (0.5 - LANCZOS_G) / fac)
    return res


@scalar_function
def igam_series(a, x):
    """P(a, x) by its power series (DLMF 8.11.4)."""
    ax = igam_fac(a, x)
    if ax == 0.0:
        return 0.0
    r = a
    c = 1.0
    ans = 1.0
    for i in range(2000):
        r += 1.0
        c *= x / r
        ans += c
        if c <= MACHEP * ans:
            break
    return ans * ax / a


@scalar_function
def igamc_series(a, x):
    """Q(a, x) by the series of DLMF 8.7.3, which avoids P's cancellation for small x."""
    fac = 1.0
    total = 0.0
    for n in range(1, 2000):
        fac *= -x / n
        term = fac / (a + n)
        total += term
        if fabs(term) <= MACHEP * fabs(total):
            break
    logx = log(x)
    term = -expm1(a * logx - lgamma(1.0 + a))
    return term - exp(a * logx - lgamma(a)) * total


@scalar_function
def igam_asymptotic(a, x, sign):
    """P (sign -1) or Q (sign +1) by the uniform asymptotic expansion for large a (DLMF 8.12.3/4):
    erfc of eta sqrt(a/2) plus a series in eta and 1/a with the IGAM_D coefficients."""
    lam = x / a
    sigma = (x - a) / a
    if lam > 1.0:
        eta = sqrt(-2.0 * (log1p(sigma) - sigma))
    elif lam < 1.0:
        eta = -sqrt(-2.0 * (log1p(sigma) - sigma))
    else:
        eta = 0.0
    res = 0.5 * erfc(sign * eta * sqrt(a / 2.0))
    total = 0.0
    afac = 1.0
    absoldterm = INFINITY
    for k in range(25):
        ck = IGAM_D[25 * k]
        etapow = 1.0
        for n in range(1, 25):
            etapow = etapow * eta
            ckterm = IGAM_D[25 * k + n] * etapow
            ck += ckterm
            if fabs(ckterm) < MACHEP * fabs(ck):
                break
        term = ck * afac
        absterm = fabs(term)
        if absterm > absoldterm:
            break
        total += term
        if absterm < MACHEP * fabs(total):
            break
        absoldterm = absterm
        afac /= a
    return res + sign * exp(-0.5 * a * eta * eta) * total / sqrt(2.0 * PI * a)


@scalar_function
def igamc_continued_fraction(a, x):
    """Q(a, x) by its continued fraction (DLMF 8.9.2), rescaled when the convergents grow large."""
    ax = igam_fac(a, x)
    if ax == 0.0:
        return 0.0
    y = 1.0 - a
    z = x + y + 1.0
    c = 0.0
    pkm2 = 1.0
    qkm2 = x
    pkm1 = x + 1.0
    qkm1 = z * x
    ans = pkm1 / qkm1
    for i in range(2000):
        c += 1.0
        y += 1.0
        z += 2.0
        yc = y * c
        pk = pkm1 * z - pkm2 * yc
        qk = qkm1 * z - qkm2 * yc
        if qk != 0.0:
            r = pk / qk
            t = fabs((ans - r) / r)
            ans = r
        else:
            t = 1.0
        pkm2 = pkm1
        pkm1 = pk
        qkm2 = qkm1
        qkm1 = qk
        if fabs(pk) > BIG:
            pkm2 *= BIGINV
            pkm1 *= BIGINV
            qkm2 *= BIGINV
            qkm1 *= BIGINV
        if t <= MACHEP:
            break
    return ans * ax


@scalar_function
def igammac(a, x):
    """Q(a, x) = Gamma(a, x) / Gamma(a), the regularized upper incomplete gamma function."""
    if x < 0.0 or a < 0.0:
        return NAN
    if a == 0.0:
        return 0.0 if x > 0.0 else NAN
    if x == 0.0:
        return 1.0
    if isinf(a):
        return NAN if isinf(x) else 1.0
    if isinf(x):
        return 0.0
    absxma_a = fabs(x - a) / a
    if a > 20.0 and a < 200.0 and absxma_a < 0.3:
        return igam_asymptotic(a, x, 1.0)
    if a > 200.0 and absxma_a < 4.5 / sqrt(a):
        return igam_asymptotic(a, x, 1.0)
    if x > 1.1:
        if x < a:
            return 1.0 - igam_series(a, x)
        return igamc_continued_fraction(a, x)
    if x <= 0.5:
        if -0.4 / log(x) < a:
            return 1.0 - igam_series(a, x)
        return igamc_series(a, x)
    if x * 1.1 < a:
        return 1.0 - igam_series(a, x)
    return igamc_series(a, x)


@scalar_function
def igamma(a, x):
    """P(a, x) = gamma(a, x) / Gamma(a), the regularized lower incomplete gamma function."""
    if x < 0.0 or a < 0.0:
        return NAN
    if a == 0.0:
        return 1.0 if x > 0.0 else NAN
    if x == 0.0:
        return 0.0
    if isinf(a):
        return NAN if isinf(x) else 0.0
    if isinf(x):
        return 1.0
    absxma_a = fabs(x - a) / a
    if a > 20.0 and a < 200.0 and absxma_a < 0.3:
        return igam_asymptotic(a, x, -1.0)
    if a > 200.0 and absxma_a < 4.5 / sqrt(a):
        return igam_asymptotic(a, x, -1.0)
    if x > 1.0 and x > a:
        return 1.0 - igammac(a, x)
    return igam_series(a, x)


# PyTorch differentiates igamma and igammac only in x (not implemented in a): no gradient here.
special_binary("igamma",  igamma,  NOT_DIFFERENTIABLE, "regularized lower incomplete gamma P(a, x)")
special_binary("igammac", igammac, NOT_DIFFERENTIABLE, "regularized upper incomplete gamma Q(a, x)")
