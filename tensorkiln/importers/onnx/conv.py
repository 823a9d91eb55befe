"""ONNX convolutions on the conv2d primitive: Conv over 1, 2 or 3 spatial axes (3-D as a sum of
2-D convolutions over the depth taps; groups, dilations, strides, pads, `auto_pad`) and
ConvTranspose over 1, 2 or 3 (F.conv_transpose: zero insertion and a flipped-kernel convolution;
`output_padding`, `output_shape`, `auto_pad`).

`conv_pads` (explicit pads or auto_pad) is shared with pooling.py; `convolution`, the Conv
converter, is reused by quant.py's integer convolutions.
"""
from __future__ import annotations

from ...errors import ShapeError
from ...frontend.tensor import apply
from ...frontend.trace import composite_scope
from ...nn import functional as F
from .registry import converter


def conv_pads(ctx, attrs, spatial, kernel, strides, dilations):
    """(begin, end) padding per spatial axis from pads or auto_pad."""
    n = len(spatial)
    auto = attrs.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if auto in ("NOTSET", ""):
        pads = attrs.get("pads") or [0] * (2 * n)
        return [(pads[i], pads[i + n]) for i in range(n)]
    if auto == "VALID":
        return [(0, 0)] * n
    result = []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        result.append((small, big) if auto == "SAME_UPPER" else (big, small))
    return result


def _conv2d(x, w, pads, strides, dilations, group):
    (pt, pb), (pl, pr) = pads
    return apply("conv2d", [x, w], stride=tuple(strides), padding=(pt, pb, pl, pr),
                 dilation=tuple(dilations), groups=int(group))


def _conv_nd(x, w, pads, strides, dilations, group):
    """Convolution over 1, 2 or 3 spatial axes, built from the conv2d primitive."""
    n = x.ndim - 2
    if n == 1:
        out = _conv2d(x.unsqueeze(2), w.unsqueeze(2), [(0, 0)] + pads, [1] + strides, [1] + dilations, group)
        return out.squeeze(2)
    if n == 2:
        return _conv2d(x, w, pads, strides, dilations, group)
    if n == 3:
        return F.conv3d(x, w, None, list(strides), [tuple(p) for p in pads], list(dilations), int(group))
    raise ShapeError(f"Conv over {n} spatial axes is not supported (1, 2 or 3)")


@converter("Conv")
def convolution(ctx, inputs, attrs):
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    n = x.ndim - 2
    kernel = attrs.get("kernel_shape") or list(w.shape[2:])
    strides = attrs.get("strides") or [1] * n
    dilations = attrs.get("dilations") or [1] * n
    pads = conv_pads(ctx, attrs, x.shape[2:], kernel, strides, dilations)
    with composite_scope("conv2d"):
        out = _conv_nd(x, w.to(x.dtype), pads, list(strides), list(dilations), attrs.get("group", 1))
        if b is not None:
            out = out + b.to(x.dtype).reshape((1, -1) + (1,) * n)
    return out


@converter("ConvTranspose")
def _conv_transpose(ctx, inputs, attrs):
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    n = x.ndim - 2
    if n not in (1, 2, 3):
        raise ctx.unsupported(f"ConvTranspose over {n} spatial axes is not supported (1, 2 or 3)")
    group = attrs.get("group", 1)
    kernel = attrs.get("kernel_shape") or list(w.shape[2:])
    strides = attrs.get("strides") or [1] * n
    dilations = attrs.get("dilations") or [1] * n
    out_pad = attrs.get("output_padding") or [0] * n
    spatial = x.shape[2:]
    auto = attrs.get("auto_pad", "NOTSET")
    pads = attrs.get("pads")
    output_shape = attrs.get("output_shape")
    if output_shape or auto in ("SAME_UPPER", "SAME_LOWER"):
        if not output_shape:
            output_shape = [s * st for s, st in zip(spatial, strides)]
        output_shape = list(output_shape)[-n:]
        pads_be = []
        for i in range(n):
            total = strides[i] * (spatial[i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1 - output_shape[i]
            if auto == "SAME_UPPER":
                pads_be.append((total // 2, total - total // 2))
            else:
                pads_be.append((total - total // 2, total // 2))
    elif auto == "VALID" or not pads:
        pads_be = [(0, 0)] * n
    else:
        pads_be = [(pads[i], pads[i + n]) for i in range(n)]
    with composite_scope("conv_transpose"):
        out = F.conv_transpose(x, w.to(x.dtype), None, list(strides), pads_be, list(out_pad), int(group),
                               list(dilations))
        if b is not None:
            out = out + b.to(out.dtype).reshape((1, -1) + (1,) * n)
    return out
