"""Quantized convolutions pass their activations channels-last (NHWC) from one to the next.

The direct 8-bit convolutions (qdq_conv.py) compute in NHWC and hand their
result on as `permute(y, NCHW_OF_NHWC)`; the next one reads its input as
`permute(x, NHWC_OF_NCHW)`. Between the two lie elementwise ops: the
epilogue (scale, bias, ReLU), the requantization, the dequantization, a
residual add. This pass moves each such permute past the elementwise ops
that read it:

    f(permute(y, P), b)   ->  permute(f(y, permute(b, P^-1)), P)     b broadcast (bias): folded later,
                                                                       b whole: read transposed once
    permute(permute(y, P), P^-1)  ->  y

so the epilogue fuses into the convolution's kernel and writes uint8 NHWC,
and the next convolution reads that buffer as it is. Poolings and
reductions between them move the permute past themselves too:

    reduce_max(window(pad(permute(y, P))))  ->  permute(maximum over the taps of strided slices
                                                         of pad(y), P)      (channels stay contiguous;
                                                         y = DQ(q): the taps of q, then DQ)
    reduce(permute(y, P), axes, keepdims)   ->  permute(reduce(y, P[axes], keepdims), P)

A value some other op needs in NCHW (the graph's output) is read through
the one permute left in front of it.

Only permutes of values computed from a direct 8-bit convolution move: the
pass changes nothing in a graph without one (float convolutions keep the
layout pass's blocked form, layout.py).
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from ..ir.graph import Graph, Node, make_node
from ..ir.ops import Attrs
from ..ir.ops.registry import OpKind
from ..ir.rewrite import rewrite_graph, with_inputs
from ..shapes.symint import same_shape
from .qdq_conv import NCHW_OF_NHWC, NHWC_OF_NCHW
from .qdq_integer import dequantized

DIRECT_INT8_CONVS = ("conv2d_u8s8", "conv2d_u8s8_winograd", "depthwise_u8s8")
LAYOUT_FREE_REDUCTIONS = ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")  # results do not name axes
WINDOW_REDUCTIONS = {"reduce_max": "maximum", "reduce_min": "minimum"}  # a pooling: the elementwise op of its taps


def keep_int8_channels_last(graph: Graph) -> tuple[Graph, Counter]:
    """Move the NHWC -> NCHW permutes of direct 8-bit convolutions' results past elementwise ops."""
    fired: Counter = Counter()
    channels_last: set[int] = set()  # new nodes holding an NHWC value computed from a direct conv

    def from_direct_conv(node: Node) -> bool:
        """node is permute(y, NCHW_OF_NHWC) of such a y."""
        if node.op != "permute" or tuple(node.attrs["perm"]) != NCHW_OF_NHWC:
            return False
        y = node.inputs[0]
        while y.id not in channels_last and y.op not in DIRECT_INT8_CONVS:
            # the conv's own scale (cast, mul) was built in NHWC by qdq_conv.py
            if y.kind != OpKind.ELEMENTWISE or not y.inputs or y.inputs[0].shape != y.shape:
                return False
            y = y.inputs[0]
        return True

    def visit(node: Node, inputs: list[Node]) -> Node:
        node = with_inputs(node, inputs)
        if node.op == "permute" and node.inputs[0].op == "permute" and from_direct_conv(node.inputs[0]):
            inner = node.inputs[0]
            perm = tuple(inner.attrs["perm"][p] for p in node.attrs["perm"])
            if perm == tuple(range(len(perm))):
                fired["permutes cancelled"] += 1
                return inner.inputs[0]
            return node
        if node.op in WINDOW_REDUCTIONS and (pooled := _channels_last_pool(node, from_direct_conv)) is not None:
            channels_last.add(pooled.inputs[0].id)
            fired[f"{node.op} pooling computed channels-last"] += 1
            return pooled
        if node.op in LAYOUT_FREE_REDUCTIONS and (reduced := _channels_last_reduction(node, from_direct_conv)):
            channels_last.add(reduced.inputs[0].id)
            fired[f"{node.op} computed channels-last"] += 1
            return reduced
        if node.kind != OpKind.ELEMENTWISE or node.ndim != 4:
            return node
        if not any(same_shape(i.shape, node.shape) and from_direct_conv(i) for i in node.inputs):
            return node
        operands = [_channels_last(i, node) for i in node.inputs]
        where = (node.scope, node.location)
        inner = make_node(node.op, operands, node.attrs, *where)
        channels_last.add(inner.id)
        fired[f"{node.op} computed channels-last"] += 1
        return make_node("permute", [inner], Attrs(perm=NCHW_OF_NHWC), *where)

    return rewrite_graph(graph, visit), fired


def _channels_last(x: Node, like: Node) -> Node:
    """Operand x of the NCHW elementwise op `like`, as the operand of its NHWC form."""
    where = (like.scope, like.location)
    if x.op == "permute" and tuple(x.attrs["perm"]) == NCHW_OF_NHWC:
        return x.inputs[0]
    if x.ndim == 0:
        return x
    if x.ndim < 4:  # broadcast from the right: (C, 1, 1) is (1, C, 1, 1)
        x = make_node("reshape", [x], Attrs(shape=(1,) * (4 - x.ndim) + x.shape), *where)
    return make_node("permute", [x], Attrs(perm=NHWC_OF_NCHW), *where)


def _channels_last_pool(node: Node, from_direct_conv) -> Node | None:
    """A max or min pooling, reduce(window(pad?(x)), last two axes), of x = permute(y, NCHW_OF_NHWC) from a
    direct conv, as the maximum (minimum) of its KH x KW taps, each a strided slice of pad(y): NHWC, so a
    pooling reads whole rows of channels. None for anything else."""
    window = node.inputs[0]
    if window.op != "window" or window.ndim != 6 or tuple(node.attrs["axes"]) != (4, 5) or node.attrs["keepdims"]:
        return None
    x = window.inputs[0]
    pads = ((0, 0),) * 4
    if x.op == "pad":
        pads, value, x = x.attrs["pads"], x.attrs["value"], x.inputs[0]
        if pads[0] != (0, 0) or pads[1] != (0, 0):
            return None
    if not from_direct_conv(x):
        return None
    where = (node.scope, node.location)
    y = x.inputs[0]
    found = dequantized(y)
    integers = found is not None and found[0].shape == y.shape and np.all(found[2] > 0) and \
        _first_operand_chain(y, found[0]) is not None
    if integers:  # pool the 8-bit values, then dequantize: max and min commute with (q - zero) * scale > 0
        q = found[0]
        info = np.iinfo(q.dtype.storage)
        value, y = info.min if node.op == "reduce_max" else info.max, q
    if any(p != (0, 0) for p in pads):
        y = make_node("pad", [y], Attrs(pads=((0, 0), pads[2], pads[3], (0, 0)), value=value), *where)
    n, c, oh, ow = node.shape
    (kh, kw), (sh, sw), (dh, dw) = window.attrs["kernel"], window.attrs["stride"], window.attrs["dilation"]
    result = None
    for r in range(kh):
        for s in range(kw):
            tap = make_node("slice", [y], Attrs(starts=(0, r * dh, s * dw, 0),
                                                stops=(n, r * dh + (oh - 1) * sh + 1, s * dw + (ow - 1) * sw + 1, c),
                                                steps=(1, sh, sw, 1)), *where)
            result = tap if result is None else make_node(WINDOW_REDUCTIONS[node.op], [result, tap], None, *where)
    if integers:
        for step in reversed(_first_operand_chain(x.inputs[0], found[0])):  # the dequantization, on the result
            result = make_node(step.op, [result, *step.inputs[1:]], step.attrs, step.scope, step.location)
    return make_node("permute", [result], Attrs(perm=NCHW_OF_NHWC), *where)


def _first_operand_chain(y: Node, q: Node) -> list[Node] | None:
    """The elementwise ops from y down to q through first operands (y first), whose other operands are
    scalars; None where y is not such a chain on q."""
    chain = []
    while y is not q:
        if y.kind != OpKind.ELEMENTWISE or not y.inputs or any(i.ndim for i in y.inputs[1:]):
            return None
        chain.append(y)
        y = y.inputs[0]
    return chain


def _channels_last_reduction(node: Node, from_direct_conv) -> Node | None:
    """reduce(permute(y, P), axes, keepdims=True) of y from a direct conv as permute(reduce(y, P[axes]), P)."""
    x = node.inputs[0]
    if not node.attrs["keepdims"] or not from_direct_conv(x):
        return None
    perm = tuple(x.attrs["perm"])
    axes = tuple(sorted(perm[a] for a in node.attrs["axes"]))
    where = (node.scope, node.location)
    inner = make_node(node.op, [x.inputs[0]], Attrs({**dict(node.attrs), "axes": axes}), *where)
    return make_node("permute", [inner], Attrs(perm=perm), *where)
