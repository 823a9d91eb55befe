"""A quantized convolution as a direct 8-bit convolution on uint8 channels-last activations.

qdq_integer.py calls `direct_integer_conv` for conv2d(DQ(x_q), DQ(W_q)) whose
activation has one constant zero point zx and scale sx (a static QDQ model)
and whose filter is constant with one scale per output channel. With x_q as
uint8 (an int8 one shifted by +128 first, zx with it):

    conv(x_q - zx, W) = conv(pad(x_q, zx), W) - zx * sum(W[o])

so the activation is padded with zx (its border then contributes nothing, as
zeros do to the float convolution), the sums are exact in int32 on
`conv2d_u8s8` (groups 1) or `depthwise_u8s8` (one input channel per output
channel), the filter sums are a constant per output channel folded into the
op's compensation, and the scale sx * sw[o] is a constant the epilogue
multiplies by. The op reads x_q channels-last (NHWC), so the result is
permuted back to NCHW; int8_layout.py then moves those permutes past the
epilogues, so that a chain of quantized convolutions passes uint8 NHWC from
one to the next without a transpose.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..ir.graph import Node, constant_node, make_node
from ..ir.ops import Attrs
from ..ir.ops.quantized import U8S8_DEPTH_GROUP
from ..ir.ops.quantized_conv import pack_conv_u8s8

NHWC_OF_NCHW = (0, 2, 3, 1)  # permute of an NCHW tensor to NHWC
NCHW_OF_NHWC = (0, 3, 1, 2)  # and back


def is_depthwise_conv(node: Node) -> bool:
    """A conv2d with one input and one output channel per group (and more than one group)."""
    groups = node.attrs["groups"]
    return groups > 1 and node.inputs[1].shape[1] == 1 and node.shape[1] == groups == node.inputs[0].shape[1]


def direct_conv_applies(node: Node, zero, scale) -> bool:
    """The activation's zero point and scale are known constants and the layer is one the direct
    kernels run: groups 1 or depthwise, 4-D."""
    known = not isinstance(zero, Node) and not isinstance(scale, Node)
    return known and node.ndim == 4 and (node.attrs["groups"] == 1 or is_depthwise_conv(node))


def direct_integer_conv(node: Node, xq: Node, x_zero: np.ndarray, x_scale: np.ndarray, weights: np.ndarray,
                        w_scale: np.ndarray) -> Node:
    """conv2d as a direct integer convolution of uint8 xq (NCHW) and the int8 (C/groups*KH*KW, O) matrix
    `weights` (zero points subtracted), scaled by x_scale * w_scale: a float NCHW result in node's dtype."""
    where = (node.scope, node.location)
    o, cg, kh, kw = node.inputs[1].shape
    filters = weights.T.reshape(o, cg, kh, kw)
    zero = int(np.rint(x_zero.reshape(-1)[0]))
    compensation = (-zero * filters.astype(np.int64).sum(axis=(1, 2, 3))).astype(np.int32)
    pt, pb, pl, pr = node.attrs["padding"]
    c = xq.shape[1]
    depthwise = node.attrs["groups"] != 1
    extra = 0 if depthwise else -c % U8S8_DEPTH_GROUP  # channels up to whole groups of 4 (zero weights)
    x = make_node("permute", [xq], Attrs(perm=NHWC_OF_NCHW), *where)
    if pt or pb or pl or pr or extra:
        x = make_node("pad", [x], Attrs(pads=((0, 0), (pt, pb), (pl, pr), (0, extra)), value=zero), *where)
    geometry = dict(stride=tuple(node.attrs["stride"]), dilation=tuple(node.attrs["dilation"]))
    comp = constant_node(compensation, dt.int32, node.location)
    if depthwise:
        widened = np.ascontiguousarray(filters[:, 0].transpose(1, 2, 0).astype(np.int32))  # (KH, KW, C)
        acc = make_node("depthwise_u8s8", [x, constant_node(widened, dt.int32, node.location), comp],
                        Attrs(geometry), *where)
    else:
        panels = constant_node(pack_conv_u8s8(filters), dt.int8, node.location)
        acc = make_node("conv2d_u8s8", [x, panels, comp], Attrs(kernel=(kh, kw), n=o, **geometry), *where)
    storage = node.dtype.storage
    scale = (x_scale.reshape(-1)[0].astype(storage) * w_scale.astype(storage).reshape(-1)).astype(storage)
    scale = constant_node(scale.reshape(()) if scale.size == 1 else scale, node.dtype, node.location)
    real = make_node("mul", [make_node("cast", [acc], Attrs(dtype=node.dtype), *where), scale], None, *where)
    return make_node("permute", [real], Attrs(perm=NCHW_OF_NHWC), *where)
