"""Lowerings of PyTorch's special functions (torch.special.*, digamma, polygamma, erfinv, i0 ...)
to tensorkiln's primitives, through tk.special."""
from __future__ import annotations

import torch

from ...frontend import special
from .lowering import register_lowering

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
}
for _packet, _function in _SAME.items():
    register_lowering(*[getattr(_packet, o) for o in _packet.overloads() if not o.endswith("out")])(_function)
