"""Lowerings of PyTorch's special functions (torch.special.*, digamma, polygamma, erfinv, i0 ...)
to tensorkiln's primitives, through tk.special."""
from __future__ import annotations

import math

import torch

from ...frontend import special
from ...frontend.functions import where
from ...frontend.tensor import Tensor, as_tensor
from .lowering import _float_of, register_lowering
from .lowering_math import _sign_bit

aten = torch.ops.aten

# ATen operator -> the tk.special function that is exactly it
_SAME = {
    aten.special_i0e: special.i0e,
    aten.special_i1: special.i1,
    aten.special_i1e: special.i1e,
    aten.special_modified_bessel_i0: special.modified_bessel_i0,
    aten.special_modified_bessel_i1: special.modified_bessel_i1,
    aten.special_modified_bessel_k0: special.modified_bessel_k0,
    aten.special_modified_bessel_k1: special.modified_bessel_k1,
    aten.special_scaled_modified_bessel_k0: special.scaled_modified_bessel_k0,
    aten.special_scaled_modified_bessel_k1: special.scaled_modified_bessel_k1,
    aten.special_bessel_j0: special.bessel_j0,
    aten.special_bessel_j1: special.bessel_j1,
    aten.special_bessel_y0: special.bessel_y0,
    aten.special_bessel_y1: special.bessel_y1,
    aten.special_spherical_bessel_j0: special.spherical_bessel_j0,
    aten.special_airy_ai: special.airy_ai,
    aten.special_chebyshev_polynomial_t: special.chebyshev_polynomial_t,
    aten.special_chebyshev_polynomial_u: special.chebyshev_polynomial_u,
    aten.special_chebyshev_polynomial_v: special.chebyshev_polynomial_v,
    aten.special_chebyshev_polynomial_w: special.chebyshev_polynomial_w,
    aten.special_shifted_chebyshev_polynomial_t: special.shifted_chebyshev_polynomial_t,
    aten.special_shifted_chebyshev_polynomial_u: special.shifted_chebyshev_polynomial_u,
    aten.special_shifted_chebyshev_polynomial_v: special.shifted_chebyshev_polynomial_v,
    aten.special_shifted_chebyshev_polynomial_w: special.shifted_chebyshev_polynomial_w,
    aten.special_hermite_polynomial_h: special.hermite_polynomial_h,
    aten.special_hermite_polynomial_he: special.hermite_polynomial_he,
    aten.special_laguerre_polynomial_l: special.laguerre_polynomial_l,
    aten.special_legendre_polynomial_p: special.legendre_polynomial_p,
    aten.special_ndtri: special.ndtri,
    aten.special_erfcx: special.erfcx,
    aten.special_log_ndtr: special.log_ndtr,
    aten.special_zeta: special.zeta,
    aten.igamma: special.gammainc,
    aten.igammac: special.gammaincc,
}
for _packet, _function in _SAME.items():
    register_lowering(*[getattr(_packet, o) for o in _packet.overloads() if not o.endswith("out")])(_function)


@register_lowering(aten.frexp.Tensor)
def frexp(x):
    return special.frexp(x)


@register_lowering(aten.polygamma.default)
def polygamma(n, x):
    return special.polygamma(n, x)


@register_lowering(aten.mvlgamma.default)
def mvlgamma(x, p):
    return special.multigammaln(x, p)


@register_lowering(aten.signbit.default)
def signbit(x):
    """The sign bit: true for negative numbers and -0.0."""
    if x.dtype.is_floating:
        return _sign_bit(x)
    return x < 0 if not x.dtype.is_bool else x.logical_and(x.logical_not())


@register_lowering(aten.angle.default)
def angle(x):
    """The argument of a real number: pi for negative ones, 0 otherwise, NaN kept (a float result)."""
    x = _float_of(x)
    zero = as_tensor(0.0, x.dtype)
    return where(x.isnan(), x, where(x < 0, as_tensor(math.pi, x.dtype), zero))


@register_lowering(aten.logaddexp2.default)
def logaddexp2(a, b):
    """log2(2^a + 2^b) = max + log1p(2^-|a - b|)/ln 2, and a itself where both are the same infinity."""
    a, b = (a if isinstance(a, Tensor) else as_tensor(a)), (b if isinstance(b, Tensor) else as_tensor(b))
    a, b = _float_of(a), _float_of(b)
    larger = a.maximum(b)
    combined = larger + (-(a - b).abs()).exp2().log1p() * (1.0 / math.log(2.0))
    return where(a.isinf().logical_and(a == b), a, combined)
