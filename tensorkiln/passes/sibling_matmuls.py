"""Sibling matmuls: products of one value by several constant matrices become one product by the
matrices side by side, each old result a slice of the new one.

    q = x @ Wq + bq;  k = x @ Wk + bk;  v = x @ Wv + bv
 -> qkv = x @ [Wq Wk Wv] + [bq bk bv];  q = qkv[..., :n];  k = qkv[..., n:2n];  v = qkv[..., 2n:]

A transformer layer's query, key and value projections read the same normalized
activations: as three GEMMs they are three kernels, three parallel regions
(each wakes the other threads and ends in a barrier) and three passes over A.
One GEMM of N = 3n does the same multiply-adds in one region and reads A once;
at a short sequence (16 tokens: 16-row GEMMs) the regions' start and end are a
visible part of the layer. The consumers (BERT's head split, reshape and
permute) read their slice of the product: the attention kernel takes the
slices as index expressions, so nothing is copied.

A sibling is merged only when nothing but movement (reshape, permute, slice...)
reads its result, after an optional bias add by a constant vector: an
elementwise consumer (an activation) would otherwise lose its place in the
GEMM's epilogue, since a slice stands between them. The biases merge too, so
they stay the merged GEMM's epilogue. Siblings with a bias and without one are
merged in separate groups.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..ir.graph import Graph, Node, constant_node, make_node
from ..ir.ops import Attrs, get_op
from ..ir.ops.registry import OpKind
from ..ir.rewrite import rewrite_graph, with_inputs


@dataclass(frozen=True)
class Sibling:
    """One matmul of a group: the node, and the bias add that ends it (None: no bias)."""

    matmul: Node
    bias_add: Node | None

    @property
    def result(self) -> Node:
        """The value the rest of the graph reads: the bias add's, else the product's."""
        return self.bias_add if self.bias_add is not None else self.matmul


def merge_sibling_matmuls(graph: Graph) -> tuple[Graph, Counter]:
    """Merge groups of matmuls that multiply one value by constant 2-D matrices (module docstring)."""
    users = graph.users()
    groups = _sibling_groups(graph, users)
    fired: Counter = Counter()
    if not groups:
        return graph, fired
    group_of = {s.result.id: (index, position) for index, group in enumerate(groups)
                for position, s in enumerate(group)}
    merged: dict[int, Node] = {}  # group index -> the merged result (built on first use)
    rewritten: dict[int, Node] = {}  # old node id -> its replacement, for the merged node's operand

    def visit(node: Node, inputs: list[Node]) -> Node:
        new = with_inputs(node, inputs)
        rewritten[node.id] = new
        if node.id not in group_of:
            return new
        index, position = group_of[node.id]
        group = groups[index]
        if index not in merged:
            x = rewritten[group[position].matmul.id].inputs[0]  # visited: this result reads it
            merged[index] = _merged_product(x, group)
            fired[f"{len(group)} matmuls -> 1 matmul + slices"] += 1
        return _column_slice(merged[index], group, position, node)

    return rewrite_graph(graph, visit), fired


def _sibling_groups(graph: Graph, users: dict[int, list[Node]]) -> list[list[Sibling]]:
    """Groups of at least two mergeable siblings, per shared left operand and per bias or none."""
    by_operand: dict[tuple, list[Sibling]] = {}
    for node in graph.nodes:
        sibling = _as_sibling(node, users)
        if sibling is not None:
            key = (node.inputs[0].id, sibling.bias_add is not None, node.dtype.name)
            by_operand.setdefault(key, []).append(sibling)
    return [group for group in by_operand.values() if len(group) >= 2]


def _as_sibling(node: Node, users: dict[int, list[Node]]) -> Sibling | None:
    """`node` as a mergeable matmul: a product by a constant matrix whose result (after an optional
    bias add) only movement reads."""
    if node.op != "matmul" or node.inputs[1].op != "constant" or node.inputs[1].ndim != 2:
        return None
    if node.inputs[0].op == "constant" or node.inputs[0].dtype != node.inputs[1].dtype:
        return None
    readers = users.get(node.id, [])
    bias_add = readers[0] if len(readers) == 1 and _bias_of(readers[0], node) is not None else None
    result = bias_add if bias_add is not None else node
    readers = users.get(result.id, [])
    if not readers or not all(get_op(r.op).kind is OpKind.MOVEMENT for r in readers):
        return None  # a graph output, or an elementwise reader that would leave the GEMM's epilogue
    return Sibling(node, bias_add)


def _bias_of(add: Node, product: Node) -> Node | None:
    """The constant vector that `add` adds to `product` along its last axis, or None."""
    if add.op != "add" or add.type != product.type or len(add.inputs) != 2:
        return None
    other = add.inputs[1] if add.inputs[0] is product else add.inputs[0] if add.inputs[1] is product else None
    if other is None or other.op != "constant" or other.dtype != product.dtype or other.ndim < 1:
        return None
    n = product.shape[-1]
    if other.shape[-1] != n or any(d != 1 for d in other.shape[:-1]):
        return None
    return other


def _merged_product(x: Node, group: list[Sibling]) -> Node:
    """x @ [W1 W2 ...] (+ [b1 b2 ...]) for the group's matrices (and biases) side by side."""
    first = group[0].matmul
    weights = np.concatenate([s.matmul.inputs[1].attrs["value"].array for s in group], axis=1)
    product = make_node("matmul", [x, constant_node(weights, first.inputs[1].dtype, first.inputs[1].location)],
                        first.attrs, first.scope, first.location)
    if group[0].bias_add is None:
        return product
    biases = np.concatenate([np.asarray(_bias_of(s.bias_add, s.matmul).attrs["value"].array).reshape(-1)
                             for s in group])
    bias = constant_node(biases, product.dtype, group[0].bias_add.location)
    return make_node("add", [product, bias], None, group[0].bias_add.scope, group[0].bias_add.location)


def _column_slice(merged: Node, group: list[Sibling], position: int, old: Node) -> Node:
    """The columns of `merged` that sibling `position` computed, in its place."""
    start = sum(s.matmul.shape[-1] for s in group[:position])
    stop = start + group[position].matmul.shape[-1]
    ndim = merged.ndim
    attrs = Attrs(starts=(0,) * (ndim - 1) + (start,), stops=tuple(merged.shape[:-1]) + (stop,),
                  steps=(1,) * ndim)
    return make_node("slice", [merged], attrs, old.scope, old.location)
