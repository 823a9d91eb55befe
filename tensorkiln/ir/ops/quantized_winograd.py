"""3x3 8-bit convolutions of stride 1 or 2 as Winograd F(2x2, 3x3) on exact 16-bit products.

`conv2d_u8s8_winograd(x, u, compensation)` computes what `conv2d_u8s8` computes for a 3x3 kernel
with dilation 1 and stride 1 or 2 (attr `stride`; ir/ops/quantized_conv.py): x (N, Hp, Wp, C) uint8
NHWC, padded, C a multiple of 16; compensation (O,) int32; result (N, OH, OW, O) int32 (OH = Hp - 2
at stride 1, (Hp - 3) // 2 + 1 at stride 2). The filters come transformed, as the kernel reads
them (attr n = O). Each 2x2 block of outputs reads an n x n tile d of x (n = 4 at stride 1, 5 at
stride 2), and with the variant's integer matrices G (n x 3), B^T (n x n) and A^T (2 x n):

    U = G g G^T,  V = B^T d B,  scale * y = A^T (sum over c of U[c] * V[c]) A

- stride 1: F(2x2, 3x3) at the points 0, 1, -1 and infinity (winograd_math.py) with G doubled
  ([[-2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]]), so U is integer (within +-1152 for |g| <= 128),
  V within -510..1020 for uint8 d, and the sums are 4y: 16 multiplies per 2x2 outputs where the
  direct sums take 36;
- stride 2: the even taps (0, 2) of each axis as F(2, 2) on the even inputs (0, 2, 4) and the odd
  tap on the odd inputs (1, 3), 5 multiplies per 2 outputs along each axis: 25 per 2x2 outputs
  where the direct sums take 36 (U within +-512, V within +-510, the sums y itself).

Every term is an integer, so the sums are exact, each a 16 x 16-bit product that `vpmaddwd` adds in
pairs. Modular int32 arithmetic gives scale * y exactly while it fits, so C <= WINOGRAD_MAX_CHANNELS.

    u[p, q, k, 2 j + t] = U[q][c = 2 k + t][o = 16 p + j]     (zero past O)

of shape (ceil(O / 16), n * n, C / 2, 32): for each panel of 16 output channels and tile position
q = n row + column, the pairs of input channels of each column side by side, the operand one
`vpmaddwd` multiplies with two channels of V (kernels/templates/winograd_u8s8.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError
from .gradient import NOT_DIFFERENTIABLE
from .movement import window_output_size
from .registry import MappingType, OpKind, TensorType, register
from .winograd_math import cook_toom, winograd_transforms

WINOGRAD_PANEL = 16  # output channels of a panel: two 256-bit vectors of 8 int32 sums
WINOGRAD_CHANNELS = 16  # input channels a vector of the input transform (16 int16 lanes)
# 4 |y| <= 4 * 9 * C * 255 * 128 must stay below 2**31 (stride 1; stride 2 sums y itself)
WINOGRAD_MAX_CHANNELS = (2**31 - 1) // (4 * 9 * 255 * 128) // WINOGRAD_CHANNELS * WINOGRAD_CHANNELS


@dataclass(frozen=True)
class WinogradVariant:
    """The integer transforms of F(2x2, 3x3) at one stride (module docstring)."""

    stride: int
    filter_t: np.ndarray  # G (n, 3)
    input_t: np.ndarray  # B^T (n, n)
    output_t: np.ndarray  # A^T (2, n)
    scale: int  # the sums are scale * y

    @property
    def n(self) -> int:
        """Rows and columns of an input tile."""
        return self.input_t.shape[0]


def _integers(matrix) -> np.ndarray:
    """An exact matrix (winograd_math's Fractions) whose entries are integers, as int64."""
    assert all(v.denominator == 1 for row in matrix for v in row), matrix
    return np.array([[int(v) for v in row] for row in matrix], dtype=np.int64)


def _stride_one() -> WinogradVariant:
    """F(2x2, 3x3) at winograd_math's points, G scaled to integers by the common denominator s of its
    entries (2): the sums are s^2 y."""
    t = winograd_transforms(2)
    s = math.lcm(*(v.denominator for row in t.g for v in row))
    return WinogradVariant(1, _integers([[v * s for v in row] for row in t.g]), _integers(t.bt), _integers(t.at),
                           s * s)


def _stride_two() -> WinogradVariant:
    """Stride 2 along an axis: outputs 0 and 1 read inputs 0..2 and 2..4; the even taps (0, 2) meet
    the even inputs (0, 2, 4) as F(2, 2) at the points 0 and 1, the odd tap meets inputs 1 and 3 as
    two plain products. Its five transformed inputs are F(2, 2)'s three, then inputs 1 and 3."""
    t = cook_toom(2, 2, (Fraction(0), Fraction(1)))
    bt, g, at = _integers(t.bt), _integers(t.g), _integers(t.at)
    input_t = np.zeros((5, 5), dtype=np.int64)
    input_t[:3, 0::2] = bt
    input_t[3, 1] = input_t[4, 3] = 1
    filter_t = np.zeros((5, 3), dtype=np.int64)
    filter_t[:3, 0::2] = g
    filter_t[3:, 1] = 1
    output_t = np.concatenate([at, np.eye(2, dtype=np.int64)], axis=1)
    return WinogradVariant(2, filter_t, input_t, output_t, 1)


VARIANTS = {1: _stride_one(), 2: _stride_two()}


def pack_winograd_u8s8(filters: np.ndarray, stride: int = 1) -> np.ndarray:
    """int8 filters (O, C, 3, 3), C a multiple of 16, as `conv2d_u8s8_winograd`'s u (int16) at `stride`."""
    o, c, kh, kw = filters.shape
    if (kh, kw) != (3, 3) or c % WINOGRAD_CHANNELS or stride not in VARIANTS:
        raise ShapeError(f"conv2d_u8s8_winograd takes 3x3 filters of a multiple of {WINOGRAD_CHANNELS} input "
                         f"channels at stride {' or '.join(map(str, VARIANTS))}, got {filters.shape} at stride "
                         f"{stride}")
    g, n = VARIANTS[stride].filter_t, VARIANTS[stride].n
    transformed = np.einsum("ia,ocab,jb->ijco", g, filters.astype(np.int64), g)  # (n, n, C, O)
    count = -(-o // WINOGRAD_PANEL)
    padded = np.zeros((n * n, c, count * WINOGRAD_PANEL), dtype=np.int16)
    padded[:, :, :o] = transformed.reshape(n * n, c, o)
    # [q, k, t, p, j] -> [p, q, k, j, t]
    return np.ascontiguousarray(padded.reshape(n * n, c // 2, 2, count, WINOGRAD_PANEL).transpose(3, 0, 1, 4, 2)
                                ).reshape(count, n * n, c // 2, 2 * WINOGRAD_PANEL)


def unpack_winograd_u8s8(u: np.ndarray, o: int) -> np.ndarray:
    """The transformed filters (n, n, C, O) int64 that `pack_winograd_u8s8` laid out."""
    count, positions, half, width = u.shape
    panel, n = width // 2, int(round(positions ** 0.5))
    return u.reshape(count, n, n, half, panel, 2).transpose(1, 2, 3, 5, 0, 4).reshape(
        n, n, 2 * half, count * panel)[..., :o].astype(np.int64)


def _infer(types, attrs):
    x, u, compensation = types
    if (x.dtype.name, u.dtype.name, compensation.dtype.name) != ("uint8", "int16", "int32"):
        raise DTypeError(f"conv2d_u8s8_winograd expects uint8 x, int16 u and int32 compensation, got "
                         f"{x.dtype.name}, {u.dtype.name} and {compensation.dtype.name}")
    n, stride = attrs["n"], attrs["stride"]
    if stride not in VARIANTS:
        raise ShapeError(f"conv2d_u8s8_winograd: stride {stride} is not one of {sorted(VARIANTS)}")
    positions = VARIANTS[stride].n ** 2
    if x.ndim != 4 or x.shape[3] % WINOGRAD_CHANNELS or not 0 < x.shape[3] <= WINOGRAD_MAX_CHANNELS or \
            u.shape != (-(-n // WINOGRAD_PANEL), positions, x.shape[3] // 2, 2 * WINOGRAD_PANEL) or \
            compensation.shape != (n,) or min(x.shape[1:3]) < 3:
        raise ShapeError(f"conv2d_u8s8_winograd expects x (N, H, W, C) with H, W >= 3 and C a multiple of "
                         f"{WINOGRAD_CHANNELS} up to {WINOGRAD_MAX_CHANNELS}, u (ceil(O / 16), {positions}, C / 2, "
                         f"32) and compensation (O,) for O = {n} at stride {stride}, got {x.shape}, {u.shape} and "
                         f"{compensation.shape}")
    oh, ow = (window_output_size(size, 3, stride, 1) for size in x.shape[1:3])
    return TensorType((x.shape[0], oh, ow, n), dt.int32)


def _reference(inputs, attrs, out):
    """The transforms above in int64 numpy, tile by tile (exact: the direct sums' values)."""
    x, u, compensation = inputs
    variant = VARIANTS[attrs["stride"]]
    s, n = variant.stride, variant.n
    images, hp, wp, c = x.shape
    oh, ow = (window_output_size(size, 3, s, 1) for size in (hp, wp))
    th, tw = -(-oh // 2), -(-ow // 2)
    # rows and columns past x only reach outputs past the image
    padded = np.zeros((images, 2 * s * (th - 1) + n, 2 * s * (tw - 1) + n, c), dtype=np.int64)
    padded[:, :hp, :wp] = x[:, :padded.shape[1], :padded.shape[2]]
    rows = np.arange(th)[:, None] * 2 * s + np.arange(n)[None, :]  # (th, n)
    cols = np.arange(tw)[:, None] * 2 * s + np.arange(n)[None, :]
    tiles = padded[:, rows[:, None, :, None], cols[None, :, None, :]]  # (N, th, tw, n, n, C)
    b, a = variant.input_t, variant.output_t
    v = np.einsum("ik,nabklc,jl->nabijc", b, tiles, b)
    m = np.einsum("nabijc,ijco->nabijo", v, unpack_winograd_u8s8(u, attrs["n"]))
    scaled = np.einsum("ik,nabklo,jl->nabijo", a, m, a)  # (N, th, tw, 2, 2, O)
    y = (scaled // variant.scale).transpose(0, 1, 3, 2, 4, 5).reshape(images, 2 * th, 2 * tw, -1)[:, :oh, :ow]
    return (y + compensation).astype(np.int32)


register("conv2d_u8s8_winograd", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _infer, _reference, 3,
         backend_only=True, stored_operands=True,
         doc="3x3 convolution of stride 1 or 2 of uint8 NHWC x (padded, channels a multiple of 16) by int8 "
             "filters transformed for Winograd F(2x2, 3x3) (int16), exact int32 sums plus an int32 compensation "
             "per output channel; attrs n, stride",
         gradient=NOT_DIFFERENTIABLE)
