"""Winograd's minimal filtering transforms F(m x m, 3 x 3), in exact arithmetic, and on arrays.

The matrices (Cook-Toom construction) are used by the loop template
(kernels/templates/winograd.py) to write the input and output transforms out
with their constant coefficients, and by the graph's `conv2d_winograd` op,
whose weights operand is the transformed weights U = G g G^T computed once at
compile time (`transform_weights`), laid out as the A panels of the kernel's
GEMMs (`weight_panels`).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

from .gemm_panels import pack_panels, unpack_panels

Matrix = tuple[tuple[Fraction, ...], ...]

# Finite interpolation points per output tile size m (the point at infinity is added).
WINOGRAD_POINTS: dict[int, tuple[Fraction, ...]] = {
    2: (Fraction(0), Fraction(1), Fraction(-1)),
    4: (Fraction(0), Fraction(1), Fraction(-1), Fraction(1, 2), Fraction(-2)),
}


@dataclass(frozen=True)
class WinogradTransforms:
    """The matrices of F(m x m, r x r): Y = AT [(G g G^T) * (BT d BT^T)] AT^T, in exact arithmetic."""

    m: int
    r: int
    at: Matrix  # m x n: output transform
    g: Matrix  # n x r: weight transform
    bt: Matrix  # n x n: input transform

    @property
    def n(self) -> int:
        """Input tile size m + r - 1."""
        return self.m + self.r - 1


def _poly_coefficients(roots: Sequence[Fraction], n: int) -> tuple[Fraction, ...]:
    """Coefficients (x^0 first, padded to n) of the monic polynomial with these roots."""
    coeffs = [Fraction(1)]
    for root in roots:
        shifted = [Fraction(0)] + coeffs  # x * p(x)
        coeffs = [hi - root * lo for hi, lo in zip(shifted, coeffs + [Fraction(0)])]
    return tuple(coeffs + [Fraction(0)] * (n - len(coeffs)))


def cook_toom(m: int, r: int, points: Sequence[Fraction]) -> WinogradTransforms:
    """F(m, r) from m + r - 2 distinct finite points and the point at infinity.

    The correlation y = A^T [(G g) * (B^T d)] is the transpose of the linear
    convolution that evaluates both factors at the points (A, G: Vandermonde
    rows p^i; infinity: the leading coefficient) and interpolates the product
    (B^T: Lagrange polynomials, with the Lagrange denominators moved into G).
    """
    n = m + r - 1
    if len(points) != n - 1 or len(set(points)) != n - 1:
        raise ValueError(f"F({m}, {r}) needs {n - 1} distinct finite points, got {points}")
    unit = lambda size, at: tuple(Fraction(int(i == at)) for i in range(size))  # noqa: E731
    at = tuple(tuple(p ** i for p in points) + (Fraction(int(i == m - 1)),) for i in range(m))
    g_rows, bt_rows = [], []
    for j, p in enumerate(points):
        others = [q for k, q in enumerate(points) if k != j]
        denominator = Fraction(1)
        for q in others:
            denominator *= p - q
        g_rows.append(tuple(p ** k / denominator for k in range(r)))
        bt_rows.append(_poly_coefficients(others, n))
    g_rows.append(unit(r, r - 1))
    bt_rows.append(_poly_coefficients(points, n))
    return WinogradTransforms(m, r, at, tuple(g_rows), tuple(bt_rows))


def winograd_transforms(m: int) -> WinogradTransforms:
    """F(m x m, 3 x 3) at the points of WINOGRAD_POINTS."""
    return cook_toom(m, 3, WINOGRAD_POINTS[m])


def _as_array(matrix: Matrix) -> np.ndarray:
    return np.array([[float(v) for v in row] for row in matrix], dtype=np.float64)


def transform_weights(w: np.ndarray, m: int) -> np.ndarray:
    """U[i*n + j, c, k] = (G w[k, c] G^T)[i, j] for 3x3 weights w[K, C, 3, 3] (float64 math, w's dtype out)."""
    g = _as_array(winograd_transforms(m).g)
    u = np.einsum("ir,kcrs,js->ijck", g, w.astype(np.float64), g, optimize=True)
    n = m + 2
    return np.ascontiguousarray(u.reshape(n * n, w.shape[1], w.shape[0])).astype(w.dtype)


def weight_panels(u: np.ndarray, mr: int) -> np.ndarray:
    """U[e, c, k] (n^2 x C x K) as the GEMM's A panels P[e, p, c, i] = U[e, c, p*mr + i], zero past K.

    The n^2 GEMMs of a Winograd convolution compute M[e] = U[e]^T V[e]: A is
    U[e]^T (K x C), whose micro-panels are mr consecutive output channels for
    each input channel. Laid out so, the micro-kernel reads U in place.
    """
    return pack_panels(u, mr)  # U[e] (C x K) is A^T, so A's row panels are its column panels


def transform_from_panels(panels: np.ndarray, k: int) -> np.ndarray:
    """The U[e, c, k] (n^2 x C x K) that `weight_panels` laid out as `panels`."""
    return unpack_panels(panels, k)


def weight_transform_inverse(m: int) -> np.ndarray:
    """pinv(G) (3 x n, float64): G has full column rank, so pinv(G) G = I and w = pinv(G) U pinv(G)^T."""
    return np.linalg.pinv(_as_array(winograd_transforms(m).g))


def weights_from_transform(u: np.ndarray, m: int) -> np.ndarray:
    """The 3x3 weights w[K, C, 3, 3] whose transform is U."""
    g_inverse = weight_transform_inverse(m)
    n = m + 2
    u4 = u.astype(np.float64).reshape(n, n, u.shape[1], u.shape[2])
    w = np.einsum("ri,ijck,sj->kcrs", g_inverse, u4, g_inverse, optimize=True)
    return np.ascontiguousarray(w).astype(u.dtype)
