"""Constant folding: a node whose inputs are all constants is evaluated at compile time.

Folding must not blow up memory: a broadcast of a scalar to a large shape
stays an `expand` of the scalar (it costs nothing at run time), so a node is
folded only when its result is not much larger than its inputs. Runtime calls
(collectives, messages) are never folded: they communicate on every call.
"""
from __future__ import annotations

from collections import Counter

from ..ir.graph import Graph, Node, constant_node, evaluate
from ..ir.ops.registry import OpKind, get_op
from ..ir.rewrite import with_inputs, rewrite_graph
from ..shapes import is_symbolic

MAX_GROWTH_ELEMENTS = 4096  # a folded result may exceed its inputs' total size by at most this much


def fold_constants(graph: Graph) -> tuple[Graph, Counter]:
    """Replace all-constant subgraphs by their values."""
    fired: Counter = Counter()

    def visit(node: Node, inputs: list[Node]) -> Node:
        node = with_inputs(node, inputs)
        if node.kind in (OpKind.SOURCE, OpKind.CONTROL) or get_op(node.op).runtime_call is not None \
                or (not node.inputs and node.kind != OpKind.ELEMENTWISE):  # (iota: a function of its index)
            # a runtime call (a collective, a message) happens at run time, on every call; so does control
            # flow (a loop over constants may not end)
            return node
        if not all(i.op == "constant" for i in node.inputs):
            return node
        if any(is_symbolic(d) for d in node.type.shape):  # a size symbol: its value comes with each call
            return node
        if any(is_symbolic(v) for v in node.attrs.values()):  # e.g. an iota starting at a size symbol
            return node
        input_size = sum(i.type.size for i in node.inputs)
        if node.type.size > input_size + MAX_GROWTH_ELEMENTS:
            return node
        value = evaluate(node.op, node.attrs, [i.attrs["value"].array for i in node.inputs],
                         [i.type for i in node.inputs], node.type)
        fired[node.op] += 1
        return constant_node(value, node.dtype, node.location)

    return rewrite_graph(graph, visit), fired
