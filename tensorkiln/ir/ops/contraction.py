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
from .gradient import place, sum_to
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


# ---- gradients ----------------------------------------------------------------------------

def _matmul_gradient(g, inputs, out, attrs, needs, build):
    a, b = inputs
    ga = sum_to(build, build.apply("matmul", [g, b.transpose(-1, -2)]), a.shape) if needs[0] else None
    gb = sum_to(build, build.apply("matmul", [a.transpose(-1, -2), g]), b.shape) if needs[1] else None
    return ga, gb


def _conv2d_gradient(g, inputs, out, attrs, needs, build):
    """Input: a transposed convolution (stride-dilated gradient, flipped and transposed weight);
    weight: windows of the padded input contracted with the gradient, per group."""
    x, w = inputs
    (sh, sw), (pt, pb, pl, pr) = attrs["stride"], attrs["padding"]
    (dh, dw), groups = attrs["dilation"], attrs["groups"]
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    og = o // groups
    oh, ow = g.shape[2], g.shape[3]
    hp, wp = h + pt + pb, wd + pl + pr
    gx = gw = None
    if needs[0]:
        gd = place(build, g, 2, 0, sh, (oh - 1) * sh + 1) if sh > 1 else g
        gd = place(build, gd, 3, 0, sw, (ow - 1) * sw + 1) if sw > 1 else gd
        ph, pw = dh * (kh - 1), dw * (kw - 1)
        wt = build.apply("permute", [w.reshape(groups, og, cg, kh, kw)], perm=(0, 2, 1, 3, 4))
        wt = wt.reshape(groups * cg, og, kh, kw)
        wt = build.apply("slice", [wt], starts=(0, 0, kh - 1, kw - 1), stops=(groups * cg, og, -1, -1),
                    steps=(1, 1, -1, -1))  # flip the kernel
        # The full correlation pads gd by (ph, pw) and crops the forward padding off the result;
        # where that crop only removes padding, the convolution's own (smaller) padding does both at
        # once, so no padded copy of the gradient and no slice remain for the backend.
        crop = (ph - pt, h + ph - gd.shape[2] - (ph - pt), pw - pl, wd + pw - gd.shape[3] - (pw - pl))
        if min(crop) >= 0:
            gx = build.apply("conv2d", [gd, wt], stride=(1, 1), padding=crop, dilation=(dh, dw), groups=groups)
        else:
            gd = build.apply("pad", [gd], pads=((0, 0), (0, 0), (ph, hp - gd.shape[2]), (pw, wp - gd.shape[3])),
                        value=0.0)
            gx = build.apply("conv2d", [gd, wt], stride=(1, 1), padding=(0, 0, 0, 0), dilation=(dh, dw), groups=groups)
            if pt or pb or pl or pr:
                gx = build.apply("slice", [gx], starts=(0, 0, pt, pl), stops=(n, c, pt + h, pl + wd), steps=(1, 1, 1, 1))
    if needs[1]:
        xp = x
        if pt or pb or pl or pr:
            xp = build.apply("pad", [x], pads=((0, 0), (0, 0), (pt, pb), (pl, pr)), value=0.0)
        win = build.apply("window", [xp], kernel=(kh, kw), stride=(sh, sw), dilation=(dh, dw))  # (N,C,OH,OW,kh,kw)
        p, k = oh * ow, kh * kw
        # Transposed product (cg*k, n*p) @ (n*p, og): the windows, a gather with divisions by the
        # kernel size, are the left operand, which the GEMM packs a few rows at a time with scalar
        # loads; as the right operand they were packed by vector gathers, three times slower.
        a = build.apply("permute", [win.reshape(n, groups, cg, p, k)], perm=(1, 2, 4, 0, 3)).reshape(
            groups, cg * k, n * p)
        b = build.apply("permute", [g.reshape(n, groups, og, p)], perm=(1, 0, 3, 2)).reshape(groups, n * p, og)
        gwt = build.apply("matmul", [a, b]).reshape(groups, cg, kh, kw, og)
        gw = build.apply("permute", [gwt], perm=(0, 4, 1, 2, 3)).reshape(o, cg, kh, kw)
    return gx, gw


register("matmul", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _matmul_infer, _matmul_reference, 2,
         doc="(..., M, K) @ (..., K, N), batch dims broadcast",
         gradient=_matmul_gradient)
register("conv2d", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _conv2d_infer, _conv2d_reference, 2,
         doc="(N, C, H, W) * (O, C/groups, KH, KW); attrs stride, padding (top, bottom, left, right), dilation, groups",
         gradient=_conv2d_gradient)
