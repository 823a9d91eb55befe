"""bf16 convolution weights: with precision="bf16", a blocked convolution (`conv2d_nchwc`, groups 1)
whose operands hold bf16 values becomes `conv2d_nchwc_bf16`, its constant weight laid out here, once,
as the bf16 pairs `vdpbf16ps` multiplies:

    pairs[kb_, cb_, r, s, p, j, t] = bf16(w[kb_, cb_, r, s, 2p + t, j])      t = 0, 1

(input channels 2p and 2p + 1 of output lane j side by side: half the bytes of the float32 weight, one
vector of 16 lanes x 2 channels per step; kernels/templates/conv_nchwc_bf16.py). Input blocks of an
odd channel count (the 3-channel stem, read as blocks of one channel) and depthwise layers keep the
float32 template.

Only where the target multiplies bf16 pairs itself (`CpuTarget.bf16_dot`, AVX512-BF16). Elsewhere the
pairs kernel widens every value and splits each weight vector's pairs again, and the float32 blocked
kernel on the same rounded operands computes the same sums faster: 1.13-1.68x on MobileNetV2's
inverted residual blocks on an AVX2 host, one thread, as the change went in (`python
benchmarks/bf16_convs.py --threads 1`: "bf16" against "bf16, pairs kernel"; docs/precision.md). `PAIRS_WITHOUT_BF16_DOT` sends those layers to
the widening pairs kernel all the same (the tests run it through graphs).
"""
from __future__ import annotations

import hashlib
from collections import Counter
from typing import Callable

import numpy as np

from .. import dtypes as dt
from ..ir.graph import Graph, Node, make_node
from ..ir.ops import Attrs
from ..ir.ops.registry import ConstantValue, TensorType
from ..ir.rewrite import rewrite_graph, with_inputs
from ..kernels.target import cpu_target
from ..kernels.templates.gemm_bf16 import holds_bf16_values, is_bf16_rounding

PAIRS_WITHOUT_BF16_DOT = False  # a target without vdpbf16ps keeps the float32 blocked kernel


def conv_weight_pairs(w: np.ndarray) -> np.ndarray:
    """Blocked weight w[K/kb, C/cb, KH, KW, cb, kb] (cb even) as bf16 bits [K/kb, C/cb, KH, KW, cb/2, kb, 2]."""
    kblocks, cblocks, kh, kw, cb, kb = w.shape
    split = np.asarray(w, np.float32).reshape(kblocks, cblocks, kh, kw, cb // 2, 2, kb)
    return np.ascontiguousarray(dt.bf16_bits_from_f32(np.ascontiguousarray(split.transpose(0, 1, 2, 3, 4, 6, 5))))


def runs_in_bf16(node: Node) -> bool:
    """A blocked convolution the bf16 kernel computes: groups 1, a constant weight and an input that
    hold bf16 values, input channels blocked in pairs, and a target that multiplies bf16 pairs."""
    if node.op != "conv2d_nchwc" or node.attrs.get("groups", 1) != 1 or node.dtype is not dt.float32:
        return False
    if not (cpu_target().bf16_dot or PAIRS_WITHOUT_BF16_DOT):
        return False
    x, w = node.inputs
    return (w.op == "constant" and w.shape[4] % 2 == 0 and holds_bf16_values(w)
            and (is_bf16_rounding(x) or holds_bf16_values(x)))


def pack_conv_bf16_weights(graph: Graph) -> tuple[Graph, Counter]:
    """Replace each blocked convolution that `runs_in_bf16` by conv2d_nchwc_bf16 with its weight's pairs."""
    fired: Counter = Counter()

    def visit(node: Node, inputs: list[Node]) -> Node:
        node = with_inputs(node, inputs)
        if not runs_in_bf16(node):
            return node
        x, w = node.inputs
        fired["conv2d_nchwc -> conv2d_nchwc_bf16"] += 1
        return make_node("conv2d_nchwc_bf16", [x, _pairs_node(w)], node.attrs, node.scope, node.location)

    return rewrite_graph(graph, visit), fired


def _pairs_node(w: Node) -> Node:
    """A bfloat16 constant of w's pairs."""
    return packed_weight_node(w, conv_weight_pairs, "conv bf16 pairs")


def packed_weight_node(w: Node, pack: Callable[[np.ndarray], np.ndarray], packing: str) -> Node:
    """A bfloat16 constant of `pack(w)`; its digest derived from w's and the `packing`'s name (packing is
    a fixed function of w, so equal weights share one packed constant)."""
    source = w.attrs["value"].digest
    digest = hashlib.sha1(f"{packing} of {source}".encode()).hexdigest()
    value = ConstantValue(pack(w.attrs["value"].array), digest)
    ttype = TensorType(tuple(value.array.shape), dt.bfloat16)
    return Node("constant", (), Attrs(value=value, type=ttype), ttype, (), w.location)


__all__ = ["PAIRS_WITHOUT_BF16_DOT", "conv_weight_pairs", "pack_conv_bf16_weights", "packed_weight_node", "runs_in_bf16"]
