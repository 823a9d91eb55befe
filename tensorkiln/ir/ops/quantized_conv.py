"""Direct 8-bit convolutions in channels-last layout: the backend ops quantized convolutions run on.

The qdq_integer pass (passes/qdq_conv.py) puts a quantized conv2d on one of these, its activation
as uint8 NHWC with the border already padded with the activation's zero point:

`conv2d_u8s8(x, panels, compensation)` (groups 1): x (N, Hp, Wp, C) uint8; the weight as the
u8 x s8 GEMM's panels (ir/ops/quantized.py) of the (K, O) matrix whose row (r * KW + s) * C + c
holds tap (r, s) of input channel c, K = KH * KW * C rounded up to a multiple of 4 (the extra rows
zero), so a window of the NHWC input is the GEMM's row of A; compensation (O,) int32, added to every
output (minus the zero point times each filter's sum). With C a multiple of 4 the kernel reads the
windows where they lie; a shallow input (C = 3: an image) is gathered a few windows at a time into
rows of K bytes, which wastes no multiply-adds on channels padded to 4 (the qdq pass pads C to a
multiple of 4 where that costs no more, as for 1x1 layers: `compact_depth_pays`).
Result (N, OH, OW, O) int32:

    y[n, i, j, o] = sum over r, s, c of x[n, i*sh + r*dh, j*sw + s*dw, c] * W[r, s, c, o] + comp[o]

`depthwise_u8s8(x, weights, compensation)` (one input channel per output channel): x (N, H, W, C)
uint8, weights (KH, KW, C) int32 (int8 values, widened once at compile time), compensation (C,).
Its optional attrs `padding` (top, bottom, left, right) and `pad_value` (0-255, the activation's zero
point) pad x inside the op: the kernel copies the rows a task reads into a padded window of its own
channels, so the whole padded image is never written (absent: x is already padded).

Both sums are exact in int32 (no saturation), as ONNX's ConvInteger.
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError
from .gradient import NOT_DIFFERENTIABLE
from .movement import window_output_size, window_view
from .quantized import U8S8_DEPTH_GROUP, U8S8_PANEL_COLUMNS, pack_u8s8_panels, unpack_u8s8_panels
from .registry import MappingType, OpKind, TensorType, register


def whole_groups(count: int) -> int:
    """`count` rounded up to whole groups of 4 (the bytes of one u8 x s8 step)."""
    return -(-count // U8S8_DEPTH_GROUP) * U8S8_DEPTH_GROUP


def conv_u8s8_depth(kernel: tuple[int, int], channels: int) -> int:
    """The depth K of `conv2d_u8s8`'s matrix: KH * KW * C rounded up to whole groups of 4."""
    return whole_groups(kernel[0] * kernel[1] * channels)


def compact_depth_pays(kernel: tuple[int, int], channels: int) -> bool:
    """Whether x keeps its C channels (windows gathered into rows of KH * KW * C bytes) rather than C
    rounded up to a multiple of 4: true where that leaves fewer groups of 4 to sum (C = 3 at 7x7: 37
    groups, not 49)."""
    return conv_u8s8_depth(kernel, channels) < conv_u8s8_depth(kernel, whole_groups(channels))


def conv_u8s8_matrix(filters: np.ndarray, x_channels: int | None = None) -> np.ndarray:
    """int8 filters (O, C, KH, KW) as the (K, O) matrix `conv2d_u8s8` multiplies by, for an x of
    `x_channels` channels (C rounded up to a multiple of 4 where absent; the extra channels meet zero
    weights)."""
    o, c, kh, kw = filters.shape
    x_channels = whole_groups(c) if x_channels is None else x_channels
    if x_channels < c:
        raise ShapeError(f"conv2d_u8s8: an input of {x_channels} channels cannot hold filters of {c}")
    taps = np.zeros((kh, kw, x_channels, o), dtype=np.int8)
    taps[:, :, :c, :] = filters.transpose(2, 3, 1, 0)
    matrix = np.zeros((conv_u8s8_depth((kh, kw), x_channels), o), dtype=np.int8)
    matrix[:kh * kw * x_channels] = taps.reshape(kh * kw * x_channels, o)
    return matrix


def pack_conv_u8s8(filters: np.ndarray, x_channels: int | None = None) -> np.ndarray:
    """int8 filters (O, C, KH, KW) as `conv2d_u8s8` panels for an x of `x_channels` channels."""
    return pack_u8s8_panels(conv_u8s8_matrix(filters, x_channels))


def depthwise_padding(attrs) -> tuple[int, int, int, int]:
    """A depthwise_u8s8's (top, bottom, left, right) padding inside the op: zeros where absent."""
    return tuple(attrs.get("padding", (0, 0, 0, 0)))


def _output_hw(x: TensorType, kernel, attrs, op: str, padding=(0, 0, 0, 0)) -> tuple[int, int]:
    stride, dilation = attrs["stride"], attrs["dilation"]
    if min(stride) < 1 or min(dilation) < 1:
        raise ShapeError(f"{op}: stride {list(stride)} and dilation {list(dilation)} must be positive")
    if len(padding) != 4 or min(padding) < 0:
        raise ShapeError(f"{op}: padding {list(padding)} must be four sizes (top, bottom, left, right), none "
                         f"negative")
    _, hp, wp, _ = x.shape
    hp, wp = hp + padding[0] + padding[1], wp + padding[2] + padding[3]
    if hp < dilation[0] * (kernel[0] - 1) + 1 or wp < dilation[1] * (kernel[1] - 1) + 1:
        raise ShapeError(f"{op}: kernel {kernel[0]}x{kernel[1]} (dilation {list(dilation)}) is larger than "
                         f"the padded input {x.shape}")
    return (window_output_size(hp, kernel[0], stride[0], dilation[0]),
            window_output_size(wp, kernel[1], stride[1], dilation[1]))


def _conv_u8s8_infer(types, attrs):
    x, panels, compensation = types
    if (x.dtype.name, panels.dtype.name, compensation.dtype.name) != ("uint8", "int8", "int32"):
        raise DTypeError(f"conv2d_u8s8 expects uint8 x, int8 panels and int32 compensation, got "
                         f"{x.dtype.name}, {panels.dtype.name} and {compensation.dtype.name}")
    kh, kw = attrs["kernel"]
    n_out = attrs["n"]
    nr = U8S8_PANEL_COLUMNS
    if x.ndim != 4 or panels.ndim != 3 or \
            panels.shape[1:] != (conv_u8s8_depth((kh, kw), x.shape[3]) // U8S8_DEPTH_GROUP, U8S8_DEPTH_GROUP * nr) or \
            not (panels.shape[0] - 1) * nr < n_out <= panels.shape[0] * nr or compensation.shape != (n_out,):
        raise ShapeError(f"conv2d_u8s8 expects x (N, H, W, C), panels (ceil(O / 32), ceil(KH * KW * C / 4), 128) "
                         f"and compensation (O,) for a {kh}x{kw} kernel and O = {n_out}, got {x.shape}, "
                         f"{panels.shape} and {compensation.shape}")
    oh, ow = _output_hw(x, (kh, kw), attrs, "conv2d_u8s8")
    return TensorType((x.shape[0], oh, ow, n_out), dt.int32)


def _windows(x: np.ndarray, kernel, attrs) -> np.ndarray:
    """(N, OH, OW, KH, KW, C) int64 windows of an NHWC array."""
    nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2)).astype(np.int64)
    return window_view(nchw, tuple(kernel), attrs["stride"], attrs["dilation"]).transpose(0, 2, 3, 4, 5, 1)


def _conv_u8s8_reference(inputs, attrs, out):
    x, panels, compensation = inputs
    kh, kw = attrs["kernel"]
    matrix = unpack_u8s8_panels(panels, kh * kw * x.shape[3], attrs["n"]).astype(np.int64)  # without zero rows
    windows = _windows(x, (kh, kw), attrs)
    n, oh, ow = windows.shape[:3]
    sums = windows.reshape(n, oh, ow, -1) @ matrix
    return (sums + compensation).astype(np.int32)


def _depthwise_u8s8_infer(types, attrs):
    x, weights, compensation = types
    if (x.dtype.name, weights.dtype.name, compensation.dtype.name) != ("uint8", "int32", "int32"):
        raise DTypeError(f"depthwise_u8s8 expects uint8 x, int32 weights and int32 compensation, got "
                         f"{x.dtype.name}, {weights.dtype.name} and {compensation.dtype.name}")
    if x.ndim != 4 or weights.ndim != 3 or weights.shape[2] != x.shape[3] or compensation.shape != (x.shape[3],):
        raise ShapeError(f"depthwise_u8s8 expects x (N, H, W, C), weights (KH, KW, C) and compensation (C,), "
                         f"got {x.shape}, {weights.shape} and {compensation.shape}")
    if not 0 <= attrs.get("pad_value", 0) <= 255:
        raise ShapeError(f"depthwise_u8s8: pad_value {attrs['pad_value']} is no uint8 value")
    oh, ow = _output_hw(x, weights.shape[:2], attrs, "depthwise_u8s8", depthwise_padding(attrs))
    return TensorType((x.shape[0], oh, ow, x.shape[3]), dt.int32)


def _depthwise_u8s8_reference(inputs, attrs, out):
    x, weights, compensation = inputs
    pt, pb, pl, pr = depthwise_padding(attrs)
    x = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=attrs.get("pad_value", 0))
    windows = _windows(x, weights.shape[:2], attrs)  # (N, OH, OW, KH, KW, C)
    sums = (windows * weights.astype(np.int64)).sum(axis=(3, 4))
    return (sums + compensation).astype(np.int32)


register("conv2d_u8s8", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _conv_u8s8_infer, _conv_u8s8_reference, 3,
         backend_only=True, stored_operands=True,
         doc="direct convolution of uint8 NHWC x (padded) by int8 filters in u8 x s8 panels (depth "
             "KH * KW * C rounded up to a multiple of 4), plus an int32 compensation per output channel; "
             "attrs kernel, stride, dilation, n",
         gradient=NOT_DIFFERENTIABLE)
register("depthwise_u8s8", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _depthwise_u8s8_infer,
         _depthwise_u8s8_reference, 3, backend_only=True, stored_operands=True,
         doc="depthwise convolution of uint8 NHWC x by int8 weights (KH, KW, C) widened to int32, plus an "
             "int32 compensation per channel; attrs stride, dilation, optional padding (top, bottom, left, "
             "right) with pad_value (x is padded inside the op; absent: x is already padded)",
         gradient=NOT_DIFFERENTIABLE)
