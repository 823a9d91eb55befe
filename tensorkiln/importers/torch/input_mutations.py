"""In-place writes to graph inputs: the new values become outputs, written back after the call.

A graph that updates its inputs in place (a key/value cache's `index_copy_`, a
step counter's `add_`: transformers' StaticCache in every decode step) is
traced under functionalization, which computes each updated input as a new
value and ends the graph with `copy_(input, new_value)`. tensorkiln values
are immutable, so `split_input_writes` removes those trailing copies and
returns the new values as extra outputs; the caller copies them into the
caller's tensors (`torch.Tensor.copy_`, which casts and broadcasts as the
removed node would have) after the compiled call. The result is the eager
module's, tensor for tensor.
"""
from __future__ import annotations

import torch

from ...errors import UnsupportedOpError

_COPY = torch.ops.aten.copy_.default


def split_input_writes(gm: torch.fx.GraphModule) -> list[int]:
    """Rewrite `gm` (traced with functionalize(remove="mutations")) so that, instead of writing its inputs
    with trailing `copy_` nodes, it returns `(outputs, [new values])`; returns the positions, among the
    placeholders, of the inputs written (in the order of the new values)."""
    graph = gm.graph
    _write_through_aliases(graph)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    writes = [n for n in graph.nodes if n.op == "call_function" and n.target is _COPY
              and isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "placeholder"]
    if not writes:
        return []
    for node in writes:
        later_readers = [u for u in node.args[0].users if u is not node and _after(node, u)]
        if later_readers or node.users:
            # functionalization writes inputs back only at the end; anything else would need its order kept
            raise UnsupportedOpError(f"the graph writes input {node.args[0].name} in place ({node.name}) and "
                                     f"reads it afterwards ({', '.join(u.name for u in later_readers or node.users)})")
    output = next(n for n in graph.nodes if n.op == "output")
    new_values = [node.args[1] for node in writes]
    positions = [placeholders.index(node.args[0]) for node in writes]
    output.args = ((output.args[0], new_values),)
    for node in writes:
        graph.erase_node(node)
    graph.lint()
    gm.recompile()
    return positions


def _write_through_aliases(graph: torch.fx.Graph) -> None:
    """`copy_(alias(input), value)` (instance norm's running-statistics update) writes the input itself."""
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is _COPY and isinstance(node.args[0], torch.fx.Node):
            alias = node.args[0]
            if alias.target is torch.ops.aten.alias.default and alias.args[0].op == "placeholder" \
                    and len(alias.users) == 1:
                node.args = (alias.args[0],) + tuple(node.args[1:])
                graph.erase_node(alias)


def _after(node: torch.fx.Node, other: torch.fx.Node) -> bool:
    """True when `other` comes after `node` in its graph."""
    current = node.next
    while current.op != "root":
        if current is other:
            return True
        current = current.next
    return False


def write_back(targets: list[torch.Tensor], new_values: list[torch.Tensor]) -> None:
    """Copy each new value into the caller's tensor it replaces (the removed `copy_` nodes, in order)."""
    for target, value in zip(targets, new_values):
        target.copy_(value)
