"""ONNX DeformConv over 2 spatial axes: a convolution whose kernel taps are moved by learned offsets.

Tap k of output pixel (i, j) reads the input at (i * stride - pad + k_h * dilation + dy,
j * stride - pad + k_w * dilation + dx), bilinearly interpolated with zeros outside (GridSample's
sampling in pixel coordinates, `sample_points`), scaled by the optional mask. The sampled columns
(N, C * kH * kW, oH * oW) then meet the weights in one matmul per group, as an im2col
convolution does. Offsets and masks apply per offset group of input channels.
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import ShapeError
from ...frontend.functions import concat, matmul
from ...frontend.tensor import Tensor, as_tensor
from .registry import converter
from ...nn.sampling import sample_points


def _base_positions(out: int, kernel: int, stride: int, pad: int, dilation: int) -> np.ndarray:
    """(kernel, out) undeformed coordinates along one axis: tap k of output i sits at i*stride - pad + k*dilation."""
    return (np.arange(out)[None, :] * stride - pad + np.arange(kernel)[:, None] * dilation).astype(np.float64)


def deform_conv2d(x: Tensor, w: Tensor, offset: Tensor, bias: Tensor | None, mask: Tensor | None,
                  strides: list[int], pads: list[int], dilations: list[int], group: int, offset_group: int) -> Tensor:
    """DeformConv of x (N, C, H, W) by w (oC, C / group, kH, kW) at offsets (N, G * 2 * kH * kW, oH, oW)."""
    n, c = x.shape[0], x.shape[1]
    kh, kw = w.shape[2], w.shape[3]
    oh, ow = offset.shape[2], offset.shape[3]
    taps, points = kh * kw, oh * ow
    compute = dt.promote_types(x.dtype.compute, dt.float32)
    rows = _base_positions(oh, kh, strides[0], pads[0], dilations[0])  # (kH, oH)
    cols = _base_positions(ow, kw, strides[1], pads[1], dilations[1])  # (kW, oW)
    # (kH, kW, oH, oW) -> (taps * points,), tap-major as the offsets are laid out
    base_y = np.broadcast_to(rows[:, None, :, None], (kh, kw, oh, ow)).reshape(-1)
    base_x = np.broadcast_to(cols[None, :, None, :], (kh, kw, oh, ow)).reshape(-1)
    moves = offset.to(compute).reshape((n, offset_group, taps, 2, points))
    per_group = c // offset_group
    columns = []
    for g in range(offset_group):
        move = moves.narrow(1, g, 1).squeeze(1)  # (N, taps, 2, points)
        dy = move.narrow(2, 0, 1).reshape((n, taps * points))
        dx = move.narrow(2, 1, 1).reshape((n, taps * points))
        y = dy + as_tensor(base_y.astype(compute.storage))
        xx = dx + as_tensor(base_x.astype(compute.storage))
        channels = x.to(compute).narrow(1, g * per_group, per_group)
        sampled = sample_points(channels, [y, xx], "linear", "zeros", True).reshape((n, per_group, taps, points))
        if mask is not None:
            scale = mask.to(compute).reshape((n, offset_group, taps, points)).narrow(1, g, 1)
            sampled = sampled * scale
        columns.append(sampled)
    cols_all = concat(columns, 1) if len(columns) > 1 else columns[0]  # (N, C, taps, points)
    out_channels, in_per_group = w.shape[0], c // group
    weights = w.to(compute).reshape((group, out_channels // group, in_per_group * taps))
    outputs = []
    for q in range(group):
        slab = cols_all.narrow(1, q * in_per_group, in_per_group).reshape((n, 1, in_per_group * taps, points))
        outputs.append(matmul(weights.narrow(0, q, 1), slab).squeeze(1))  # (N, oC / group, points)
    out = concat(outputs, 1) if group > 1 else outputs[0]
    if bias is not None:
        out = out + bias.to(compute).reshape((1, -1, 1))
    return out.reshape((n, out_channels, oh, ow)).to(x.dtype)


@converter("DeformConv")
def _deform_conv(ctx, inputs, attrs):
    x, w, offset = inputs[:3]
    bias = inputs[3] if len(inputs) > 3 else None
    mask = inputs[4] if len(inputs) > 4 else None
    where_ = f"node '{ctx.name}' (DeformConv)"
    if x.ndim != 4:
        raise ctx.unsupported(f"DeformConv over {x.ndim - 2} spatial axes (2 are supported)")
    group, offset_group = attrs.get("group", 1), attrs.get("offset_group", 1)
    strides = list(attrs.get("strides") or [1, 1])
    pads = list(attrs.get("pads") or [0, 0, 0, 0])
    dilations = list(attrs.get("dilations") or [1, 1])
    n, c, h, wd = x.shape
    kh, kw = (w.shape[2], w.shape[3]) if w.ndim == 4 else (0, 0)
    oh = (h + pads[0] + pads[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    shapes = f"X {list(x.shape)}, W {list(w.shape)}, offset {list(offset.shape)}"
    if w.ndim != 4 or c != w.shape[1] * group or w.shape[0] % group or c % offset_group:
        raise ShapeError(f"{where_}: {shapes} do not fit group={group}, offset_group={offset_group}")
    if tuple(offset.shape) != (n, offset_group * 2 * kh * kw, oh, ow):
        raise ShapeError(f"{where_}: {shapes}: offset must be {[n, offset_group * 2 * kh * kw, oh, ow]}")
    if mask is not None and tuple(mask.shape) != (n, offset_group * kh * kw, oh, ow):
        raise ShapeError(f"{where_}: mask {list(mask.shape)} must be {[n, offset_group * kh * kw, oh, ow]}")
    if bias is not None and tuple(bias.shape) != (w.shape[0],):
        raise ShapeError(f"{where_}: bias {list(bias.shape)} must be [{w.shape[0]}]")
    return deform_conv2d(x, w, offset, bias, mask, strides, pads, dilations, group, offset_group)
