"""Orthogonal polynomials P_n(x) as two-operand primitives: Chebyshev T, U, V, W (and shifted to
[0, 1]), Hermite H and He, Laguerre L, Legendre P.

The degree n is an operand (a tensor, of x's dtype), truncated to an integer as PyTorch's cast does;
a negative or non-finite degree gives 0. Each algorithm is PyTorch's (aten/src/ATen/native/Math.h):
the three-term recurrence up to n (stopped early once it turns NaN), closed forms at x = +-1 (or
0 and 1 when shifted), and for large n inside (-1, 1) the trigonometric form (T_n(cos t) = cos(n t)
...), which does not lose accuracy as the recurrence does. One scalar text is the numpy reference
and the C (loops/scalar_c.py), evaluated in double. All twelve share one three-term recurrence (its
per-family coefficients in `three_term_recurrence`), and the eight Chebyshev polynomials one body
(`chebyshev`, by kind), plain or shifted.
"""
from __future__ import annotations

import numpy as np

from ...loops import expr as E
from ...loops.scalar_c import acos, cos, fabs, fma, fmod, isfinite, isnan, scalar_function, sin, trunc
from .gradient import NOT_DIFFERENTIABLE
from .elementwise import FLOAT_ONLY, binary
from .special_rows import special_math_function

# Degrees PyTorch's int64 cast cannot hold give its out-of-range result, a negative degree.
LARGEST_DEGREE = 9.2e18
NAN = float("nan")


# The families of the shared three-term recurrence (`three_term_recurrence`'s `family`)
CHEBYSHEV, HERMITE_H, HERMITE_HE, LAGUERRE, LEGENDRE = 0.0, 1.0, 2.0, 3.0, 4.0
# The four kinds of Chebyshev polynomials (`chebyshev`'s `kind`)
KIND_T, KIND_U, KIND_V, KIND_W = 0.0, 1.0, 2.0, 3.0


@scalar_function(native=True)
def degree(n):
    """n truncated to an integer as PyTorch's int64 cast does, or -1 where that cast gives a negative
    degree (n negative, not finite, or past int64)."""
    n = trunc(n)
    if not isfinite(n) or n < 0.0 or n > LARGEST_DEGREE:
        return -1.0
    return n


@scalar_function(native=True)
def three_term_recurrence(family, x, first, n):
    """P_n(x) for n >= 1 from P_0 = 1 and P_1 = first by the family's three-term recurrence
    P_{k+1} = (A_k x + B_k) P_k - C_k P_{k-1}, each step rounded as PyTorch's; stopped once it turns
    NaN (it stays NaN)."""
    p = 1.0
    q = first
    for k in range(1, int(n)):
        if isnan(q):
            break
        if family == CHEBYSHEV:  # A = 2, B = 0, C = 1 (all four kinds)
            r = (x + x) * q - p
        elif family == HERMITE_H:  # A = 2, B = 0, C = 2k; as PyTorch's compiled kernel rounds it
            r = fma(x + x, q, -((k + k) * p))
        elif family == HERMITE_HE:  # A = 1, B = 0, C = k
            r = fma(x, q, -(k * p))
        elif family == LAGUERRE:  # A = -1/(k+1), B = (2k+1)/(k+1), C = k/(k+1)
            r = (((k + k) + (1.0 - x)) * q - k * p) / (k + 1)
        else:  # LEGENDRE: A = (2k+1)/(k+1), B = 0, C = k/(k+1)
            r = ((k + k + 1) * x * q - k * p) / (k + 1)
        p = q
        q = r
    return q


@scalar_function(native=True)
def chebyshev_at_end(kind, y, n):
    """The kind's closed form at y = 1 (T 1, U n+1, V 1, W 2n+1) or, for y <= 0, at y = -1
    (T (-1)^n, U (-1)^n (n+1), V (-1)^n (2n+1), W (-1)^n)."""
    sign = 1.0 if y > 0.0 or fmod(n, 2.0) == 0.0 else -1.0
    if kind == KIND_T:
        return sign
    if kind == KIND_U:
        return sign * (n + 1.0)
    if kind == KIND_V:
        return 1.0 if y > 0.0 else sign * (n + n + 1.0)
    return n + n + 1.0 if y > 0.0 else sign


@scalar_function(native=True)
def chebyshev(kind, y, n, trig_above, end_y):
    """The kind's polynomial of degree n (an integer >= 0) at y, not at +-1: for n > trig_above and
    |y| < 1 the trigonometric form (y = cos t: T cos(n t), U sin((n+1) t)/sin t, V cos((n+1/2) t)/cos(t/2),
    W sin((n+1/2) t)/sin(t/2)), where V's and W's divide by zero the closed form at end_y (as PyTorch);
    else the recurrence from P_1 = y, 2y, 2y - 1 or 2y + 1."""
    if n > trig_above and fabs(y) < 1.0:
        t = acos(y)
        if kind == KIND_T:
            return cos(n * t)
        if kind == KIND_U:
            if sin(t) != 0.0:
                return sin((n + 1.0) * t) / sin(t)
            return (n + 1.0) * cos((n + 1.0) * t) / y
        if kind == KIND_V:
            if sin(t / 2.0) != 1.0:
                return cos((n + 0.5) * t) / cos(t / 2.0)
            return chebyshev_at_end(kind, end_y, n)
        if cos(t / 2.0) != 1.0:
            return sin((n + 0.5) * t) / sin(t / 2.0)
        return chebyshev_at_end(kind, end_y, n)
    if n == 0.0:
        return 1.0
    if kind == KIND_T:
        first = y
    elif kind == KIND_U:
        first = y + y
    elif kind == KIND_V:
        first = y + y - 1.0
    else:
        first = y + y + 1.0
    return three_term_recurrence(CHEBYSHEV, y, first, n)


@scalar_function(native=True)
def chebyshev_polynomial(kind, x, n, trig_above):
    """The kind's polynomial: the closed forms at x = +-1, else `chebyshev` at x."""
    n = degree(n)
    if n < 0.0:
        return 0.0
    if fabs(x) == 1.0:
        return chebyshev_at_end(kind, x, n)
    return chebyshev(kind, x, n, trig_above, x)


@scalar_function(native=True)
def shifted_chebyshev_polynomial(kind, x, n, trig_above):
    """The kind's polynomial at 2x - 1, as PyTorch's shifted ones: the closed forms at x = 1 and x = 0
    (where 2x - 1 is exactly +-1), else `chebyshev` at 2x - 1 with the closed form at -1 standing in
    where the trigonometric form divides by zero."""
    n = degree(n)
    if n < 0.0:
        return 0.0
    if x == 1.0 or x == 0.0:
        return chebyshev_at_end(kind, x + x - 1.0, n)
    return chebyshev(kind, x + x - 1.0, n, trig_above, -1.0)


@scalar_function(native=True)
def chebyshev_t(x, n):
    """T_n(x): T_0 = 1, T_1 = x, T_k = 2x T_{k-1} - T_{k-2}; cos(n acos x) for n > 6 and |x| < 1."""
    return chebyshev_polynomial(KIND_T, x, n, 6.0)


@scalar_function(native=True)
def chebyshev_u(x, n):
    """U_n(x): U_0 = 1, U_1 = 2x, T's recurrence; sin((n+1) t)/sin t (x = cos t) for n > 8, |x| < 1."""
    return chebyshev_polynomial(KIND_U, x, n, 8.0)


@scalar_function(native=True)
def chebyshev_v(x, n):
    """V_n(x): V_0 = 1, V_1 = 2x - 1, T's recurrence; cos((n+1/2) t)/cos(t/2) for n > 8, |x| < 1."""
    return chebyshev_polynomial(KIND_V, x, n, 8.0)


@scalar_function(native=True)
def chebyshev_w(x, n):
    """W_n(x): W_0 = 1, W_1 = 2x + 1, T's recurrence; sin((n+1/2) t)/sin(t/2) for n > 8, |x| < 1."""
    return chebyshev_polynomial(KIND_W, x, n, 8.0)


@scalar_function(native=True)
def shifted_chebyshev_t(x, n):
    """T*_n(x) = T_n(2x - 1), PyTorch's algorithm on [0, 1] (trigonometric form for n > 6)."""
    return shifted_chebyshev_polynomial(KIND_T, x, n, 6.0)


@scalar_function(native=True)
def shifted_chebyshev_u(x, n):
    """U*_n(x) = U_n(2x - 1) (trigonometric form for n > 6)."""
    return shifted_chebyshev_polynomial(KIND_U, x, n, 6.0)


@scalar_function(native=True)
def shifted_chebyshev_v(x, n):
    """V*_n(x) = V_n(2x - 1) (trigonometric form for n > 6)."""
    return shifted_chebyshev_polynomial(KIND_V, x, n, 6.0)


@scalar_function(native=True)
def shifted_chebyshev_w(x, n):
    """W*_n(x) = W_n(2x - 1) (trigonometric form for n > 4)."""
    return shifted_chebyshev_polynomial(KIND_W, x, n, 4.0)


@scalar_function(native=True)
def hermite_h(x, n):
    """H_n(x), the physicists' Hermite polynomial: H_0 = 1, H_1 = 2x, H_{k+1} = 2x H_k - 2k H_{k-1}.
    (PyTorch's NaN past degree 128 in float32, 512 in float64 is the op's, not this function's.)"""
    n = degree(n)
    if n < 0.0:
        return 0.0
    if n == 0.0:
        return 1.0
    return three_term_recurrence(HERMITE_H, x, x + x, n)


@scalar_function(native=True)
def hermite_he(x, n):
    """He_n(x), the probabilists' Hermite polynomial: He_0 = 1, He_1 = x, He_{k+1} = x He_k - k He_{k-1}."""
    n = degree(n)
    if n < 0.0:
        return 0.0
    if n == 0.0:
        return 1.0
    return three_term_recurrence(HERMITE_HE, x, x, n)


@scalar_function(native=True)
def laguerre_l(x, n):
    """L_n(x): L_0 = 1, L_1 = 1 - x, (k+1) L_{k+1} = (2k + 1 - x) L_k - k L_{k-1}; 1 at x = 0."""
    n = degree(n)
    if n < 0.0:
        return 0.0
    if x == 0.0 or n == 0.0:
        return 1.0
    return three_term_recurrence(LAGUERRE, x, 1.0 - x, n)


@scalar_function(native=True)
def legendre_p(x, n):
    """P_n(x): P_0 = 1, P_1 = x, (k+1) P_{k+1} = (2k+1) x P_k - k P_{k-1}; +-1 at x = +-1."""
    n = degree(n)
    if n < 0.0:
        return 0.0
    if fabs(x) == 1.0:
        return chebyshev_at_end(KIND_T, x, n)  # P_n(+-1) = T_n(+-1) = (+-1)^n
    if n == 0.0:
        return 1.0
    return three_term_recurrence(LEGENDRE, x, x, n)


# PyTorch's Hermite polynomials are NaN past these degrees (getHermitianLimit in Math.h)
HERMITE_LIMITS = {"float32": 128.0, "float64": 512.0}


def _past_hermite_limit(n, limit: float):
    """trunc(n) > limit for a degree PyTorch's cast keeps (finite, within int64)."""
    return (n >= limit + 1.0) & (n <= LARGEST_DEGREE)


def _lower(fn, hermite: bool):
    """The call; for the Hermite polynomials NaN past PyTorch's degree limit for the dtype."""
    def lower(args, node):
        value = E.call(fn.name, *args)
        if not hermite:
            return value
        x, n = args
        limit = HERMITE_LIMITS.get(x.dtype, 1024.0)
        past = E.logical_and(E.ge(n, E.Const(limit + 1.0, x.dtype)), E.le(n, E.Const(LARGEST_DEGREE, x.dtype)))
        return E.Select(past, E.Const(NAN, x.dtype), value)
    return lower


def _hermite_reference(fn):
    def reference(x, n):
        out = fn.reference(x, n)
        past = _past_hermite_limit(np.asarray(n), HERMITE_LIMITS.get(out.dtype.name, 1024.0))
        return np.where(past, NAN, out).astype(out.dtype)
    return reference


def _polynomial(name: str, fn, doc: str, hermite: bool = False) -> None:
    special_math_function(fn)
    reference = _hermite_reference(fn) if hermite else fn.reference
    binary(name, reference, FLOAT_ONLY, _lower(fn, hermite), NOT_DIFFERENTIABLE, doc=doc + "; n truncated")


_polynomial("chebyshev_polynomial_t",         chebyshev_t,         "Chebyshev T_n(x)")
_polynomial("chebyshev_polynomial_u",         chebyshev_u,         "Chebyshev U_n(x)")
_polynomial("chebyshev_polynomial_v",         chebyshev_v,         "Chebyshev V_n(x)")
_polynomial("chebyshev_polynomial_w",         chebyshev_w,         "Chebyshev W_n(x)")
_polynomial("shifted_chebyshev_polynomial_t", shifted_chebyshev_t, "T_n(2x - 1)")
_polynomial("shifted_chebyshev_polynomial_u", shifted_chebyshev_u, "U_n(2x - 1)")
_polynomial("shifted_chebyshev_polynomial_v", shifted_chebyshev_v, "V_n(2x - 1)")
_polynomial("shifted_chebyshev_polynomial_w", shifted_chebyshev_w, "W_n(2x - 1)")
_polynomial("hermite_polynomial_h",           hermite_h,           "physicists' Hermite H_n(x), NaN past n = 128 "
                                                                   "(float32) or 512", hermite=True)
_polynomial("hermite_polynomial_he",          hermite_he,          "probabilists' Hermite He_n(x), NaN past n = "
                                                                   "128 (float32) or 512", hermite=True)
_polynomial("laguerre_polynomial_l",          laguerre_l,          "Laguerre L_n(x)")
_polynomial("legendre_polynomial_p",          legendre_p,          "Legendre P_n(x)")
