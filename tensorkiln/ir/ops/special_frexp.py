"""frexp as two primitives: x = mantissa * 2^exponent with 0.5 <= |mantissa| < 1 (C's frexp).

The exponent is floor(log2|x|) + 1, corrected by one where log2 rounded across an integer; the
mantissa is x scaled by 2^-exponent (ldexp: exact). 0, infinities and NaN have exponent 0 and are
their own mantissa, as C's frexp answers. Scalar algorithms (loops/scalar_c.py) in double, which
holds every float32 exactly (subnormals too).
"""
from __future__ import annotations

from ...loops.scalar_c import fabs, floor, isfinite, ldexp, log2, scalar_function
from .gradient import NOT_DIFFERENTIABLE
from .special_rows import special_unary


@scalar_function
def frexp_exponent(x):
    """The binary exponent e of x = m 2^e, 0.5 <= |m| < 1; 0 for 0, infinities and NaN."""
    if x == 0.0 or not isfinite(x):
        return 0.0
    e = floor(log2(fabs(x))) + 1.0
    m = ldexp(fabs(x), int(-e))
    if m >= 1.0:
        e += 1.0
    elif m < 0.5:
        e -= 1.0
    return e


@scalar_function
def frexp_mantissa(x):
    """The mantissa m of x = m 2^e, 0.5 <= |m| < 1, sign of x; x itself for 0, infinities and NaN."""
    if x == 0.0 or not isfinite(x):
        return x
    return ldexp(x, int(-frexp_exponent(x)))


def _mantissa_gradient(build, g, x, y):
    """d mantissa / dx = 2^-exponent (piecewise constant scale), as PyTorch's."""
    return g * (-build.apply("frexp_exponent", [x])).exp2()


special_unary("frexp_mantissa", frexp_mantissa, _mantissa_gradient, "frexp's mantissa, 0.5 <= |m| < 1")
special_unary("frexp_exponent", frexp_exponent, NOT_DIFFERENTIABLE,
              "frexp's exponent (integer-valued, in x's float dtype)")
