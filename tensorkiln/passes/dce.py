"""Dead-code elimination: keep only nodes that an output depends on.

A Graph is built from its outputs, so unreachable nodes are dropped by
rebuilding it; this pass makes that visible in the statistics.
"""
from __future__ import annotations

from collections import Counter

from ..ir.graph import Graph


def eliminate_dead_code(graph: Graph) -> tuple[Graph, Counter]:
    """Drop nodes no output depends on (graph inputs always stay)."""
    rebuilt = Graph(graph.inputs, graph.outputs, graph.name)
    kept = {n.id for n in rebuilt.nodes}
    return rebuilt, Counter(n.op for n in graph.nodes if n.id not in kept)
