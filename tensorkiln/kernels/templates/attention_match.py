"""Fused attention in the graph: softmax(x(q @ k^T)) @ v, the softmax's guard, and a causal mask.

`attention_parts` finds the pattern that kernels/templates/attention.py
computes in one kernel (the grouping asks it which nodes that kernel takes);
`causal_mask` finds a lower-triangular condition among the score's elementwise
operations, which the kernel turns into an index comparison and a skip of the
key blocks past the diagonal.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.graph import Node
from ...shapes import is_symbolic
from ...shapes.symint import IntLike


def attention_parts(root: Node) -> tuple[Node, Node, Node] | None:
    """(first matmul, softmax input, softmax output) when `root` is softmax(x(q @ k^T)) @ v, else None.

    The softmax may carry PyTorch's safe-softmax guard (`where(all(x == -inf), 0, softmax(x))`, rows
    with every key masked give 0 instead of NaN): the output is then that `where`, and the kernel
    writes 0 for a row whose sum of exponentials is 0, which happens exactly for such rows."""
    if root.op != "matmul" or root.dtype.name not in ("float32", "float64"):
        return None
    p = root.inputs[0]
    guarded = safe_softmax_guard(p)
    if guarded is not None:
        p = guarded[0]
    if p.op != "div":
        return None
    e, s = p.inputs
    if e.op != "exp" or s.op != "reduce_sum" or s.inputs[0] is not e or not _last_axis(s):
        return None
    sub = e.inputs[0]
    if sub.op != "sub":
        return None
    x, m = sub.inputs
    if m.op != "reduce_max" or m.inputs[0] is not x or not _last_axis(m):
        return None
    first = _first_matmul(x)
    if first is None or first.shape[:-2] != root.shape[:-2]:
        return None
    if guarded is not None:
        if guarded[2] is not x:
            return None
        return first, x, root.inputs[0]
    return first, x, p


def safe_softmax_guard(p: Node) -> tuple[Node, list[Node], Node] | None:
    """(the softmax inside, the guard's nodes, the x it tests) when p is where(all(x == -inf), 0, softmax)."""
    if p.op != "where":
        return None
    condition, zero, inner = p.inputs
    if inner.op != "div" or inner.shape != p.shape or not _is_zero(zero):
        return None
    guard = [condition]
    if condition.op != "not" or condition.inputs[0].op != "reduce_max" or not _last_axis(condition.inputs[0]):
        return None
    guard.append(condition.inputs[0])
    finite = condition.inputs[0].inputs[0]  # x != -inf, as ne or not(eq)
    guard.append(finite)
    if finite.op == "not" and finite.inputs[0].op == "eq":
        finite = finite.inputs[0]
        guard.append(finite)
    elif finite.op != "ne":
        return None
    x, minus_inf = finite.inputs
    if not _is_minus_inf(minus_inf):
        return None
    return inner, guard, x


def _is_zero(node: Node) -> bool:
    if node.op == "expand":
        node = node.inputs[0]
    return node.op == "constant" and not node.attrs["value"].array.any()


def _last_axis(r: Node) -> bool:
    return r.attrs["keepdims"] and r.attrs["axes"] == (r.inputs[0].ndim - 1,) and r.inputs[0].shape[-1] > 0


def _first_matmul(x: Node) -> Node | None:
    """The matmul that x is computed from elementwise (same shape all the way), if any."""
    node = x
    while True:
        if node.op == "matmul":
            return node if node.shape == x.shape else None
        candidates = [i for i in node.inputs if i.shape == x.shape and i.op not in ("constant", "input")]
        if node.kind.value != "elementwise" or node.shape != x.shape or len(candidates) != 1:
            return None
        node = candidates[0]


# ---------------------------------------------------------------- causal masks


@dataclass(frozen=True)
class CausalMask:
    """A condition `key <= query + offset` in the scores: a constant lower-triangular array, or a
    comparison of two iotas (a symbolic length's mask), whose offset may then be a size symbol.

    skippable: masked scores are -inf in the softmax input itself (no other
    term can make them finite or NaN), so key blocks past the diagonal
    contribute exactly nothing and are skipped.
    """

    mask: Node
    offset: IntLike
    skippable: bool


def causal_mask(x: Node, first: Node) -> CausalMask | None:
    """The lower-triangular condition of a `where` in x's expression, if there is one.

    Only a condition used nowhere else in x's expression and indexed by
    (query, key) qualifies (it is then replaced by an index comparison).
    """
    length, source = x.shape[-2:]
    nodes = _expression_nodes(x, first)
    for node in nodes:
        if node.op != "where" or node.shape != x.shape:
            continue
        cond = node.inputs[0]
        if cond.dtype.name != "bool" or cond.ndim < 2 or cond.shape[-2:] != (length, source) \
                or any(size != 1 for size in cond.shape[:-2]):
            continue
        if any(cond in other.inputs for other in nodes if other is not node) or cond in node.inputs[1:]:
            continue
        if cond.op == "constant":
            offset = _tril_offset(cond.attrs["value"].array.reshape(length, source))
        else:
            offset = _iota_offset(cond)
        if offset is not None:
            return CausalMask(cond, offset, _masks_to_minus_inf(x, node))
    return None


# key <= query + offset, from a comparison of (left, right) with the key's sequence on the side given,
# and what the comparison adds to the offset: key < query + c is key <= query + c - 1
_COMPARISONS = {"le": ("left", 0), "lt": ("left", -1), "ge": ("right", 0), "gt": ("right", -1)}


def _iota_offset(cond: Node) -> IntLike | None:
    """k with cond[..., i, j] == (j <= i + k) when cond compares a key iota with a query iota, or None."""
    if cond.op not in _COMPARISONS:
        return None
    side, shift = _COMPARISONS[cond.op]
    keys, queries = cond.inputs if side == "left" else cond.inputs[::-1]
    length, source = cond.shape[-2:]
    key_start, query_start = _sequence_start(keys, -1, source), _sequence_start(queries, -2, length)
    if key_start is None or query_start is None:
        return None
    return query_start - key_start + shift


def _sequence_start(node: Node, axis: int, size: IntLike) -> IntLike | None:
    """s when node's element at index (..., i, j) is s + (j for axis -1, i for axis -2): an integer iota
    of step 1 and `size` elements, reshaped to lie along that axis."""
    if node.ndim < -axis or not _same_size(node.shape[axis], size) \
            or any(d != 1 for k, d in enumerate(node.shape) if k != node.ndim + axis):
        return None
    while node.op == "reshape":
        node = node.inputs[0]
    if node.op != "iota" or node.dtype.category != 1 or node.attrs["step"] != 1:
        return None
    return node.attrs["start"]


def _same_size(a: IntLike, b: IntLike) -> bool:
    """a and b are one size (the same polynomial), asked without recording a guard."""
    return a.same_as(b) if is_symbolic(a) else (not is_symbolic(b) and a == b)


def _expression_nodes(x: Node, first: Node) -> list[Node]:
    """The nodes of x's elementwise expression at x's shape (down to the first matmul), x first."""
    seen, order, stack = set(), [], [x]
    while stack:
        node = stack.pop()
        if node.id in seen or node is first or node.shape != x.shape or node.kind.value != "elementwise":
            continue
        seen.add(node.id)
        order.append(node)
        stack.extend(node.inputs)
    return order


def _tril_offset(mask: np.ndarray) -> int | None:
    """k with mask == tril(ones, k), i.e. mask[i, j] == (j <= i + k), or None."""
    length, source = mask.shape
    counts = mask.sum(axis=1)
    candidates = {int(c) - 1 - r for r, c in enumerate(counts) if 0 < c < source} or {source - 1, -length}
    for k in sorted(candidates):
        if np.array_equal(mask, np.tri(length, source, k, dtype=bool)):
            return k
    return None


def _is_minus_inf(node: Node) -> bool:
    return node.op == "constant" and node.type.size == 1 and node.attrs["value"].array.reshape(-1)[0] == -np.inf


def _masks_to_minus_inf(x: Node, where: Node) -> bool:
    """x is a chain of where(cond, inner, -inf) ending at `where`: a masked score is -inf in x."""
    node = x
    while node.op == "where" and node.shape == x.shape and _is_minus_inf(node.inputs[2]):
        if node is where:
            return True
        node = node.inputs[1]
    return False
