"""Winograd weights at compile time: a conv2d with constant weights that runs as Winograd becomes
`conv2d_winograd(x, U)` with U = G w G^T computed here, once, and laid out as
the A panels of the kernel's GEMMs (which then read it in place).

The kernel would otherwise transform its weights on every call (about 10%
of a 128-channel layer at batch 1, more with more channels). Which layers
run as Winograd is the convolution rule's decision (`winograd_choice` in
kernels/templates/conv.py, or an algorithm forced by `forced_conv_algorithm`, or a tuning
record of the layer: conv_choice.py),
so this pass changes where the transform happens, never which algorithm
runs. Weights that are graph inputs (training) keep the in-kernel transform.
"""
from __future__ import annotations

from collections import Counter

from ..ir.graph import Graph, Node, constant_node, make_node
from ..ir.ops import Attrs
from ..ir.ops.winograd_math import transform_weights, weight_panels
from ..ir.rewrite import rewrite_graph, with_inputs
from ..kernels.templates.conv_choice import tuned_winograd_algorithm
from ..kernels.templates.winograd import winograd_plan


def transform_winograd_weights(graph: Graph) -> tuple[Graph, Counter]:
    """Replace each constant-weight conv2d that the rule runs as Winograd by conv2d_winograd."""
    fired: Counter = Counter()

    def visit(node: Node, inputs: list[Node]) -> Node:
        node = with_inputs(node, inputs)
        if node.op != "conv2d" or node.inputs[1].op != "constant" or any(d == 0 for d in node.shape):
            return node
        algorithm = tuned_winograd_algorithm(node)
        if algorithm is None:
            return node
        m = int(algorithm[len("winograd"):])
        x, w = node.inputs
        mr = winograd_plan(node, m).gemm.mr  # U is laid out as the A panels of the kernel's GEMMs
        u = constant_node(weight_panels(transform_weights(w.attrs["value"].array, m), mr), w.dtype, w.location)
        fired[f"conv2d -> conv2d_winograd (F({m}x{m}, 3x3))"] += 1
        attrs = Attrs(m=m, padding=tuple(node.attrs["padding"]), out_channels=node.shape[1])
        return make_node("conv2d_winograd", [x, u], attrs, node.scope, node.location)

    return rewrite_graph(graph, visit), fired
