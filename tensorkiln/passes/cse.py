"""Common-subexpression elimination: nodes with the same op, inputs and attributes are one node.

Constants compare by content (their attrs hash the array's digest), so two
copies of the same weight or literal merge too.
"""
from __future__ import annotations

from collections import Counter

from ..ir.graph import Graph, Node
from ..ir.rewrite import with_inputs, rewrite_graph


def eliminate_common_subexpressions(graph: Graph) -> tuple[Graph, Counter]:
    """Merge structurally identical nodes."""
    seen: dict[tuple, Node] = {}
    fired: Counter = Counter()

    def visit(node: Node, inputs: list[Node]) -> Node:
        node = with_inputs(node, inputs)
        key = (node.op, tuple(i.id for i in node.inputs), node.attrs, node.type)
        existing = seen.get(key)
        if existing is not None:
            fired[node.op] += 1
            return existing
        seen[key] = node
        return node

    return rewrite_graph(graph, visit), fired
