"""A quantized convolution as a direct 8-bit convolution on uint8 channels-last activations.

qdq_integer.py calls `direct_integer_conv` for conv2d(DQ(x_q), DQ(W_q)) whose
activation has one zero point zx and scale sx (constants in a static QDQ
model, scalars computed at run time after DynamicQuantizeLinear) and whose
filter is constant with one scale per output channel. With x_q as
uint8 (an int8 one shifted by +128 first, zx with it):

    conv(x_q - zx, W) = conv(pad(x_q, zx), W) - zx * sum(W[o])

so the activation is padded with zx (its border then contributes nothing, as
zeros do to the float convolution; a zero point known only at run time fills
the border by a select; a depthwise layer's constant zx is the op's
`pad_value`, its kernel padding a window per task), the sums are exact in int32 on
`conv2d_u8s8` (groups 1; `conv2d_u8s8_winograd` for the 3x3 layers of stride
1 or 2 where that pays) or `depthwise_u8s8` (one input channel per output channel),
the filter sums are a constant per output channel folded into the op's
compensation (or, for a run-time zx, subtracted after it), and the scale
sx * sw[o] is a constant (or a run-time product) the epilogue multiplies by. The op reads x_q channels-last (NHWC), so the result is
permuted back to NCHW; int8_layout.py then moves those permutes past the
epilogues, so that a chain of quantized convolutions passes uint8 NHWC from
one to the next without a transpose.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..ir.graph import Node, constant_node, make_node
from ..ir.ops import Attrs
from ..ir.ops.quantized_conv import compact_depth_pays, pack_conv_u8s8, whole_groups
from ..ir.ops.quantized_winograd import pack_winograd_u8s8
from ..kernels.templates.winograd_u8s8 import winograd_u8s8_applies

NHWC_OF_NCHW = (0, 2, 3, 1)  # permute of an NCHW tensor to NHWC
NCHW_OF_NHWC = (0, 3, 1, 2)  # and back


def is_depthwise_conv(node: Node) -> bool:
    """A conv2d with one input and one output channel per group (and more than one group)."""
    groups = node.attrs["groups"]
    return groups > 1 and node.inputs[1].shape[1] == 1 and node.shape[1] == groups == node.inputs[0].shape[1]


def direct_conv_applies(node: Node) -> bool:
    """The layer is one the direct kernels run: groups 1 or depthwise, 4-D."""
    return node.ndim == 4 and (node.attrs["groups"] == 1 or is_depthwise_conv(node))


def direct_conv_op(node: Node) -> str:
    """The op a quantized conv2d that `direct_conv_applies` to runs on: `depthwise_u8s8`,
    `conv2d_u8s8_winograd` (a 3x3 layer of stride 1 or 2 where winograd_u8s8.py says it pays) or
    `conv2d_u8s8`."""
    if node.attrs["groups"] != 1:
        return "depthwise_u8s8"
    o, c, kh, kw = node.inputs[1].shape
    if winograd_u8s8_applies(c, o, (kh, kw), node.attrs["stride"], node.attrs["dilation"], 1, node.shape[2:]):
        return "conv2d_u8s8_winograd"
    return "conv2d_u8s8"


def direct_integer_conv(node: Node, xq: Node, x_zero, x_scale, weights: np.ndarray, w_scale: np.ndarray) -> Node:
    """conv2d as a direct integer convolution of uint8 xq (NCHW) and the int8 (C/groups*KH*KW, O) matrix
    `weights` (zero points subtracted), scaled by x_scale * w_scale: a float NCHW result in node's dtype.
    x_zero and x_scale are constants, or scalar nodes computed at run time (dynamic quantization): then
    the border is filled with the zero point by a select, and its cost is subtracted after the sums."""
    where = (node.scope, node.location)
    o, cg, kh, kw = node.inputs[1].shape
    filters = weights.T.reshape(o, cg, kh, kw)
    filter_sums = filters.astype(np.int64).sum(axis=(1, 2, 3))
    dynamic = isinstance(x_zero, Node)
    zero = 0 if dynamic else int(np.rint(x_zero.reshape(-1)[0]))
    compensation = (-zero * filter_sums).astype(np.int32)
    pt, pb, pl, pr = node.attrs["padding"]
    n, c, h, w = xq.shape
    depthwise = direct_conv_op(node) == "depthwise_u8s8"
    # channels up to whole groups of 4 (zero weights), unless the kernel gathers the windows of a shallow
    # input into rows of KH * KW * C bytes, which sums fewer groups (an RGB stem)
    compact = not depthwise and compact_depth_pays((kh, kw), c)
    extra = 0 if depthwise or compact else whole_groups(c) - c
    x = make_node("permute", [xq], Attrs(perm=NHWC_OF_NCHW), *where)
    # a depthwise layer with a constant zero point pads inside its kernel (a window per task), so the
    # padded image is never stored; the others read a padded copy
    padded_inside = depthwise and not dynamic and bool(pt or pb or pl or pr)
    if (pt or pb or pl or pr or extra) and not padded_inside:
        x = make_node("pad", [x], Attrs(pads=((0, 0), (pt, pb), (pl, pr), (0, extra)), value=zero), *where)
    if dynamic and (pt or pb or pl or pr):  # the border holds the zero point, known only at run time
        border = np.ones((1, h + pt + pb, w + pl + pr, 1), dtype=bool)
        border[:, pt:pt + h, pl:pl + w, :] = False
        fill = make_node("cast", [x_zero], Attrs(dtype=dt.uint8), *where)
        x = make_node("where", [constant_node(border, dt.bool_, node.location), fill, x], None, *where)
    geometry = dict(stride=tuple(node.attrs["stride"]), dilation=tuple(node.attrs["dilation"]))
    if padded_inside:
        geometry.update(padding=(pt, pb, pl, pr), pad_value=zero)
    comp = constant_node(compensation, dt.int32, node.location)
    if depthwise:
        widened = np.ascontiguousarray(filters[:, 0].transpose(1, 2, 0).astype(np.int32))  # (KH, KW, C)
        acc = make_node("depthwise_u8s8", [x, constant_node(widened, dt.int32, node.location), comp],
                        Attrs(geometry), *where)
    elif direct_conv_op(node) == "conv2d_u8s8_winograd":
        stride = geometry["stride"][0]
        u = constant_node(pack_winograd_u8s8(filters, stride), dt.int16, node.location)
        acc = make_node("conv2d_u8s8_winograd", [x, u, comp], Attrs(n=o, stride=stride), *where)
    else:
        panels = constant_node(pack_conv_u8s8(filters, c + extra), dt.int8, node.location)
        acc = make_node("conv2d_u8s8", [x, panels, comp], Attrs(kernel=(kh, kw), n=o, **geometry), *where)
    if dynamic:  # - zx * sum(W[o]), per output channel (the last axis), at run time
        zero_i32 = make_node("cast", [x_zero], Attrs(dtype=dt.int32), *where)
        term = make_node("mul", [zero_i32, constant_node(filter_sums.astype(np.int32), dt.int32, node.location)],
                         None, *where)
        acc = make_node("sub", [acc, term], None, *where)
    storage = node.dtype.storage
    w_scale = w_scale.astype(storage).reshape(-1)
    if isinstance(x_scale, Node):
        x_scale = x_scale if x_scale.dtype == node.dtype else \
            make_node("cast", [x_scale], Attrs(dtype=node.dtype), *where)
        scale = make_node("mul", [x_scale, constant_node(w_scale.reshape(()) if w_scale.size == 1 else w_scale,
                                                         node.dtype, node.location)], None, *where)
    else:
        scale = (x_scale.reshape(-1)[0].astype(storage) * w_scale).astype(storage)
        scale = constant_node(scale.reshape(()) if scale.size == 1 else scale, node.dtype, node.location)
    real = make_node("mul", [make_node("cast", [acc], Attrs(dtype=node.dtype), *where), scale], None, *where)
    return make_node("permute", [real], Attrs(perm=NCHW_OF_NHWC), *where)
