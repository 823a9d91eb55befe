"""Optimizing inside control flow: each branch and loop body is optimized by the same pipeline.

A control-flow node (cond, while_loop, scan: ir/ops/control.py) is an opaque
boundary to every other pass: no rule matches it, folding leaves it alone (a
loop over constants may not end) and CSE merges only nodes with the same
sub-graph objects. This pass runs the pipeline of the same opt level inside each
of its sub-graphs, whose inputs and outputs keep their types, so nothing moves
across the boundary.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

from ..ir.graph import Graph, Node, make_node
from ..ir.ops.control import CONTROL_OPS, SubGraph
from ..ir.rewrite import rewrite_graph, with_inputs


def has_control_flow(graph: Graph) -> bool:
    """True when some node of the graph holds sub-graphs."""
    return any(n.op in CONTROL_OPS for n in graph.nodes)


def optimize_sub_graphs(graph: Graph, optimize_one: Callable[[Graph], Graph]) -> tuple[Graph, Counter]:
    """The graph with every control-flow node's sub-graphs replaced by optimize_one(sub-graph)."""
    fired: Counter = Counter()

    def visit(node: Node, inputs: list[Node]) -> Node:
        node = with_inputs(node, inputs)
        if node.op not in CONTROL_OPS:
            return node
        changes = {}
        for key, value in node.attrs.items():
            if isinstance(value, SubGraph):
                changes[key] = SubGraph(optimize_one(value.graph))
            elif isinstance(value, tuple) and value and all(isinstance(v, SubGraph) for v in value):
                changes[key] = tuple(SubGraph(optimize_one(v.graph)) for v in value)
        fired[f"{node.op} sub-graphs"] += 1
        return make_node(node.op, inputs, node.attrs.replace(**changes), node.scope, node.location)

    return rewrite_graph(graph, visit), fired


__all__ = ["optimize_sub_graphs"]
