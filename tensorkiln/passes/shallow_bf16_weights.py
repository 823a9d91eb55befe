"""bf16 shallow convolutions: with precision="bf16", an NCHW conv2d that the float32 path runs as
"shallow" (few input channels: the RGB stem; kernels/templates/conv_shallow.py) and whose operands hold
bf16 values becomes `conv2d_shallow_bf16`, its constant weight laid out here, once, as pairs of
neighbouring taps of a kernel row:

    pairs[k, c, r, p, t] = bf16(w[k, c, r, 2p + t])      t = 0, 1; zero past the last tap (odd KW)

(ir/ops/backend_shallow_bf16.py). Such a layer has no pairs of input channels for `vdpbf16ps`; the
kernel (kernels/templates/conv_shallow_bf16.py) pairs the input's columns instead.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from .. import dtypes as dt
from ..ir.graph import Graph, Node, make_node
from ..ir.ops import Attrs
from ..ir.rewrite import rewrite_graph, with_inputs
from ..kernels.target import cpu_target
from ..kernels.templates import conv as conv_templates
from ..kernels.templates.conv_choice import tuned_nchw_algorithm
from ..kernels.templates.gemm_bf16 import holds_bf16_values, is_bf16_rounding
from .conv_bf16_weights import packed_weight_node
from ..loops.buffer import Buffer


# The stem on tap pairs measured 4.6x faster than the float32 shallow kernel on the rounded operands
# (ResNet-18's 7x7 stride-2 stem, one thread: `python benchmarks/bf16_convs.py`); off, bf16 compiles
# keep the float32 kernel there (the benchmark's "bf16, fp32 shallow kernel").
BF16_SHALLOW = True
# Without vdpbf16ps (`CpuTarget.bf16_dot`) the pairs kernel widens every value and the float32 shallow
# kernel on the rounded operands is faster: MobileNetV2 in bf16 took 0.94-0.95x its time with it, on an
# AVX2 host, one thread, two runs in turns as the change went in (docs/performance.md). Set, the tap
# pairs run there all the same (the tests run the widening kernel through graphs).
PAIRS_WITHOUT_BF16_DOT = False


def shallow_weight_pairs(w: np.ndarray) -> np.ndarray:
    """w[K, C/groups, KH, KW] as bf16 bits [K, C/groups, KH, ceil(KW/2), 2], a zero tap after an odd KW."""
    k, cg, kh, kw = w.shape
    padded = np.zeros((k, cg, kh, kw + kw % 2), np.float32)
    padded[..., :kw] = w
    return np.ascontiguousarray(dt.bf16_bits_from_f32(padded).reshape(k, cg, kh, -(-kw // 2), 2))


def runs_shallow_in_bf16(node: Node) -> bool:
    """An NCHW conv2d that runs as "shallow" with a constant weight and an input holding bf16 values."""
    if not BF16_SHALLOW or node.op != "conv2d" or node.dtype is not dt.float32 or node.ndim != 4:
        return False
    if not (cpu_target().bf16_dot or PAIRS_WITHOUT_BF16_DOT):
        return False
    if node.type.size == 0:
        return False
    x, w = node.inputs
    if not all(isinstance(d, int) for d in x.shape + node.shape):
        return False  # run-time sizes: the float32 shallow kernel handles them
    if w.op != "constant" or not holds_bf16_values(w) or not (is_bf16_rounding(x) or holds_bf16_values(x)):
        return False
    algorithm = tuned_nchw_algorithm(node) or conv_templates.conv_algorithm(node, Buffer("probe", "float32", node.shape))
    return algorithm == "shallow"


def pack_shallow_bf16_weights(graph: Graph) -> tuple[Graph, Counter]:
    """Replace each conv2d that `runs_shallow_in_bf16` by conv2d_shallow_bf16 with its weight's pairs."""
    fired: Counter = Counter()

    def visit(node: Node, inputs: list[Node]) -> Node:
        node = with_inputs(node, inputs)
        if not runs_shallow_in_bf16(node):
            return node
        x, w = node.inputs
        fired["conv2d -> conv2d_shallow_bf16"] += 1
        attrs = dict(node.attrs.items(), kernel_width=w.shape[3])
        return make_node("conv2d_shallow_bf16", [x, _pairs_node(w)], Attrs(attrs), node.scope, node.location)

    return rewrite_graph(graph, visit), fired


def _pairs_node(w: Node) -> Node:
    """A bfloat16 constant of w's tap pairs."""
    return packed_weight_node(w, shallow_weight_pairs, "shallow bf16 pairs")


__all__ = ["pack_shallow_bf16_weights", "runs_shallow_in_bf16", "shallow_weight_pairs"]
