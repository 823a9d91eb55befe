"""Rebuilding graphs: nodes are immutable, so a pass maps old nodes to new ones in topological order."""
from __future__ import annotations

from typing import Callable

from .graph import Graph, Node, make_node


def with_inputs(node: Node, inputs: list[Node]) -> Node:
    """`node` with new inputs (the node itself when nothing changed)."""
    if all(a is b for a, b in zip(node.inputs, inputs)):
        return node
    return make_node(node.op, inputs, node.attrs, node.scope, node.location)


def rewrite_graph(graph: Graph, visit: Callable[[Node, list[Node]], Node]) -> Graph:
    """Rebuild `graph` bottom-up: visit(node, new_inputs) returns the node's replacement."""
    mapping: dict[int, Node] = {}
    for node in graph.nodes:
        new_inputs = [mapping[i.id] for i in node.inputs]
        mapping[node.id] = node if node.op == "input" else visit(node, new_inputs)
    return Graph(graph.inputs, [mapping[n.id] for n in graph.outputs], graph.name)
