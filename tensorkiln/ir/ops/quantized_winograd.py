"""The 3x3 stride-1 8-bit convolution as Winograd F(2x2, 3x3) on exact 16-bit products.

`conv2d_u8s8_winograd(x, u, compensation)` computes what `conv2d_u8s8` computes for a 3x3 kernel
with stride and dilation 1 (ir/ops/quantized_conv.py): x (N, Hp, Wp, C) uint8 NHWC, padded, C a
multiple of 16; compensation (O,) int32; result (N, Hp - 2, Wp - 2, O) int32. The filters come
transformed, as the kernel reads them (attr n = O):

    U = G' g G'^T,   G' = [[2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]]   (2G of F(2x2, 3x3))

of each filter g (3x3, one input and one output channel): 16 integers within +-1152 (|g| <= 128),
so int16. Each 2x2 block of outputs reads a 4x4 tile d of x; V = B^T d B (integers within
-510..1020 for uint8 d), and

    4 * y = A^T (sum over c of U[c] * V[c]) A,   B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0],
                                                       [0, 1, 0, -1]],  A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]

Every term is an integer, so the sums are exact: 16 multiplies per 2x2 outputs where the direct
sums take 36, each a 16 x 16-bit product that `vpmaddwd` adds in pairs (|U V| <= 1152 * 1020).
Modular int32 arithmetic gives 4y exactly while |4y| fits, so C <= WINOGRAD_MAX_CHANNELS.

    u[p, q, k, 2 j + t] = U[q][c = 2 k + t][o = 16 p + j]     (zero past O)

of shape (ceil(O / 16), 16, C / 2, 32): for each panel of 16 output channels and tile position
q = 4 row + column, the pairs of input channels of each column side by side, the operand one
`vpmaddwd` multiplies with two channels of V (kernels/templates/winograd_u8s8.py).
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError
from .gradient import NOT_DIFFERENTIABLE
from .registry import MappingType, OpKind, TensorType, register

WINOGRAD_PANEL = 16  # output channels of a panel: two 256-bit vectors of 8 int32 sums
WINOGRAD_CHANNELS = 16  # input channels a vector of the input transform (16 int16 lanes)
# 4 |y| <= 4 * 9 * C * 255 * 128 must stay below 2**31
WINOGRAD_MAX_CHANNELS = (2**31 - 1) // (4 * 9 * 255 * 128) // WINOGRAD_CHANNELS * WINOGRAD_CHANNELS

FILTER_T = np.array([[2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]], dtype=np.int64)  # G' = 2G
INPUT_T = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.int64)  # B^T
OUTPUT_T = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.int64)  # A^T


def pack_winograd_u8s8(filters: np.ndarray) -> np.ndarray:
    """int8 filters (O, C, 3, 3), C a multiple of 16, as `conv2d_u8s8_winograd`'s u (int16)."""
    o, c, kh, kw = filters.shape
    if (kh, kw) != (3, 3) or c % WINOGRAD_CHANNELS:
        raise ShapeError(f"conv2d_u8s8_winograd takes 3x3 filters of a multiple of {WINOGRAD_CHANNELS} input "
                         f"channels, got {filters.shape}")
    transformed = np.einsum("ia,ocab,jb->ijco", FILTER_T, filters.astype(np.int64), FILTER_T)  # (4, 4, C, O)
    count = -(-o // WINOGRAD_PANEL)
    padded = np.zeros((16, c, count * WINOGRAD_PANEL), dtype=np.int16)
    padded[:, :, :o] = transformed.reshape(16, c, o)
    # [q, k, t, p, j] -> [p, q, k, j, t]
    return np.ascontiguousarray(padded.reshape(16, c // 2, 2, count, WINOGRAD_PANEL).transpose(3, 0, 1, 4, 2)
                                ).reshape(count, 16, c // 2, 2 * WINOGRAD_PANEL)


def unpack_winograd_u8s8(u: np.ndarray, n: int) -> np.ndarray:
    """The transformed filters (4, 4, C, O) int64 that `pack_winograd_u8s8` laid out."""
    count, _, half, width = u.shape
    panel = width // 2
    return u.reshape(count, 4, 4, half, panel, 2).transpose(1, 2, 3, 5, 0, 4).reshape(
        4, 4, 2 * half, count * panel)[..., :n].astype(np.int64)


def _infer(types, attrs):
    x, u, compensation = types
    if (x.dtype.name, u.dtype.name, compensation.dtype.name) != ("uint8", "int16", "int32"):
        raise DTypeError(f"conv2d_u8s8_winograd expects uint8 x, int16 u and int32 compensation, got "
                         f"{x.dtype.name}, {u.dtype.name} and {compensation.dtype.name}")
    n = attrs["n"]
    if x.ndim != 4 or x.shape[3] % WINOGRAD_CHANNELS or not 0 < x.shape[3] <= WINOGRAD_MAX_CHANNELS or \
            u.shape != (-(-n // WINOGRAD_PANEL), 16, x.shape[3] // 2, 2 * WINOGRAD_PANEL) or \
            compensation.shape != (n,) or min(x.shape[1:3]) < 3:
        raise ShapeError(f"conv2d_u8s8_winograd expects x (N, H, W, C) with H, W >= 3 and C a multiple of "
                         f"{WINOGRAD_CHANNELS} up to {WINOGRAD_MAX_CHANNELS}, u (ceil(O / 16), 16, C / 2, 32) "
                         f"and compensation (O,) for O = {n}, got {x.shape}, {u.shape} and {compensation.shape}")
    return TensorType((x.shape[0], x.shape[1] - 2, x.shape[2] - 2, n), dt.int32)


def _reference(inputs, attrs, out):
    """The transforms above in int64 numpy, tile by tile (exact: the direct sums' values)."""
    x, u, compensation = inputs
    n, hp, wp, c = x.shape
    oh, ow = hp - 2, wp - 2
    th, tw = -(-oh // 2), -(-ow // 2)
    padded = np.zeros((n, 2 * th + 2, 2 * tw + 2, c), dtype=np.int64)  # rows and columns past x: unread outputs
    padded[:, :hp, :wp] = x
    rows = np.arange(th)[:, None] * 2 + np.arange(4)[None, :]  # (th, 4)
    cols = np.arange(tw)[:, None] * 2 + np.arange(4)[None, :]
    tiles = padded[:, rows[:, None, :, None], cols[None, :, None, :]]  # (N, th, tw, 4, 4, C)
    v = np.einsum("ik,nabklc,jl->nabijc", INPUT_T, tiles, INPUT_T)
    m = np.einsum("nabijc,ijco->nabijo", v, unpack_winograd_u8s8(u, attrs["n"]))
    y4 = np.einsum("ik,nabklo,jl->nabijo", OUTPUT_T, m, OUTPUT_T)  # (N, th, tw, 2, 2, O)
    y = (y4 // 4).transpose(0, 1, 3, 2, 4, 5).reshape(n, 2 * th, 2 * tw, -1)[:, :oh, :ow]
    return (y + compensation).astype(np.int32)


register("conv2d_u8s8_winograd", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _infer, _reference, 3,
         backend_only=True, stored_operands=True,
         doc="3x3 stride-1 convolution of uint8 NHWC x (padded, channels a multiple of 16) by int8 filters "
             "transformed for Winograd F(2x2, 3x3) (int16), exact int32 sums plus an int32 compensation per "
             "output channel; attr n",
         gradient=NOT_DIFFERENTIABLE)
