"""A graph's fingerprint: a digest of everything about it that compiled code depends on.

Used as the graph's part of the compiled-graph cache key (runtime/graph_cache.py):
every node's op, inputs (by position), attributes, type and composite scope,
with constants by content digest. The user's source locations are left out
(they only appear in comments, so a graph traced from another line reuses the
entry and its comments name the first).
"""
from __future__ import annotations

import hashlib

import numpy as np

from .graph import Graph
from .ops.control import SubGraph
from .ops.registry import ConstantValue


def _attr_text(value) -> str:
    """A text that differs whenever the attribute's value differs (reprs of floats are exact)."""
    if isinstance(value, ConstantValue):
        return f"const:{value.digest}"
    if isinstance(value, SubGraph):
        return f"graph:{fingerprint(value.graph)}"
    if isinstance(value, np.ndarray):
        return f"array:{ConstantValue(value).digest}"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_attr_text(v) for v in value) + ")"
    return repr(value)


def fingerprint(graph: Graph) -> str:
    """sha256 of the graph's structure, attributes, types and constants (not its source locations)."""
    position = {node.id: k for k, node in enumerate(graph.nodes)}
    scopes: dict[str, str] = {}  # composite ids come from a process-wide counter: renumber them

    def scope_text(tag: str) -> str:
        name, _, _ = tag.rpartition(":")
        return scopes.setdefault(tag, f"{name}:{len(scopes)}")

    h = hashlib.sha256(f"{graph.name}\n".encode())
    for node in graph.nodes:
        inputs = ",".join(str(position[n.id]) for n in node.inputs)
        attrs = ";".join(f"{k}={_attr_text(v)}" for k, v in node.attrs.items())
        scope = "/".join(scope_text(tag) for tag in node.scope)
        h.update(f"{node.op}({inputs}){{{attrs}}}:{node.type}[{scope}]\n".encode())
    h.update(("in:" + ",".join(str(position[n.id]) for n in graph.inputs)).encode())
    h.update(("out:" + ",".join(str(position[n.id]) for n in graph.outputs)).encode())
    return h.hexdigest()


__all__ = ["fingerprint"]
