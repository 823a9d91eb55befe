"""tk.special: PyTorch's torch.special functions over tensorkiln tensors.

Each is a primitive of the op table (ir/ops/special_*.py) or a short composition of primitives,
named as torch.special names it. Integer operands compute in float32, as in PyTorch.
"""
from __future__ import annotations

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
