"""Contraction primitives: batched matmul, 2-D convolution, and 2-D convolution in blocked layout.

These are the ops that kernel templates (tiled GEMM, implicit-GEMM and
Winograd convolution, the direct blocked convolution) implement; everything
else fuses around them.
"""
from __future__ import annotations

import numpy as np

from ...errors import DTypeError, ShapeError
from .elementwise import broadcast_shapes
from .movement import window_output_size, window_view
from .registry import MappingType, OpKind, TensorType, register


def _matmul_infer(types, attrs):
    a, b = types
    if a.dtype != b.dtype:
        raise DTypeError(f"operand dtypes differ ({a.dtype.name}, {b.dtype.name})")
    if a.dtype.is_bool:
        raise DTypeError("matmul of booleans is not defined")
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError("matmul operands must have rank >= 2 (the front-end lifts vectors)")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"inner dimensions differ: {a.shape[-1]} vs {b.shape[-2]}")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return TensorType(batch + (a.shape[-2], b.shape[-1]), a.dtype)


def _matmul_reference(inputs, attrs, out):
    return np.matmul(inputs[0], inputs[1])


def conv2d_output_hw(h: int, w: int, kernel, stride, padding, dilation) -> tuple[int, int]:
    """Output height and width of a convolution; padding is (top, bottom, left, right)."""
    pt, pb, pl, pr = padding
    return (window_output_size(h + pt + pb, kernel[0], stride[0], dilation[0]),
            window_output_size(w + pl + pr, kernel[1], stride[1], dilation[1]))


def _conv2d_infer(types, attrs):
    x, w = types
    groups = attrs["groups"]
    if x.dtype != w.dtype:
        raise DTypeError(f"input and weight dtypes differ ({x.dtype.name}, {w.dtype.name})")
    if not x.dtype.is_floating:
        raise DTypeError(f"conv2d expects floating operands, got {x.dtype.name}")
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeError("conv2d expects input (N, C, H, W) and weight (O, C/groups, KH, KW)")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if groups < 1 or c % groups or o % groups:
        raise ShapeError(f"groups={groups} must divide input channels {c} and output channels {o}")
    if cg != c // groups:
        raise ShapeError(f"weight expects {cg * groups} input channels, input has {c}")
    stride, padding, dilation = attrs["stride"], attrs["padding"], attrs["dilation"]
    if min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise ShapeError("stride and dilation must be positive, padding non-negative")
    if h + padding[0] + padding[1] < dilation[0] * (kh - 1) + 1 or \
            wd + padding[2] + padding[3] < dilation[1] * (kw - 1) + 1:
        raise ShapeError(f"kernel {kh}x{kw} (dilation {list(dilation)}) is larger than the padded input")
    oh, ow = conv2d_output_hw(h, wd, (kh, kw), stride, padding, dilation)
    return TensorType((n, o, oh, ow), x.dtype)


def _conv2d_reference(inputs, attrs, out):
    x, w = inputs
    groups = attrs["groups"]
    pt, pb, pl, pr = attrs["padding"]
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    win = window_view(np.ascontiguousarray(xp), (kh, kw), attrs["stride"], attrs["dilation"])
    oh, ow = win.shape[2:4]
    win = win.reshape(n, groups, cg, oh, ow, kh, kw)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    result = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True)
    return result.reshape(n, o, oh, ow).astype(x.dtype, copy=False)


register("matmul", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _matmul_infer, _matmul_reference, 2,
         doc="(..., M, K) @ (..., K, N), batch dims broadcast")
register("conv2d", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _conv2d_infer, _conv2d_reference, 2,
         doc="(N, C, H, W) * (O, C/groups, KH, KW); attrs stride, padding (top, bottom, left, right), dilation, groups")
