"""Refinements of the fusion policy's first guess, which `partition` (grouping.py) repeats to a fixed point.

- `store_shared`: a computing node that two kernels would inline is stored,
  computed once (unless `cheap_to_recompute`: each reader recomputes it);
- `store_invalid`: a contraction that cannot start its reader's epilogue, and
  row reductions that do not share their kernel's row structure, are stored.

Both only add stored nodes. `collect_members` gives the nodes a kernel computes
and the stored values it reads, from its root.
"""
from __future__ import annotations

from ..ir.graph import Graph, Node
from ..ir.ops.registry import OpKind, get_op
from .fusion_policy import computes, index_only, inlines_arithmetic, is_epilogue, row_reduction_axes


def collect_members(root: Node, stored: set[int]) -> tuple[list[Node], list[Node]]:
    """Members (topological, root last) and stored inputs of the kernel rooted at `root`."""
    members: list[Node] = []
    inputs: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        n, expanded = stack.pop()
        if expanded:
            members.append(n)
            continue
        if n.id in seen:
            continue
        seen.add(n.id)
        if n.id in stored and n is not root:
            inputs.append(n)
            continue
        stack.append((n, True))
        for inp in reversed(n.inputs):
            stack.append((inp, False))
    return members, inputs


def _fusable_contraction(root: Node, contraction: Node, members: list[Node]) -> bool:
    """A contraction may live inside a kernel only as the start of an elementwise epilogue.

    The template computes one element of the contraction at a time and stores the
    root's value at the same flat index, so every node between the two must read
    the contraction's value at that index: elementwise ops whose contraction-side
    operand has their own shape (no broadcast), and reshapes (which keep flat
    indices). A permute, slice or expand on that path would read another element.
    """
    if not (root.kind == OpKind.ELEMENTWISE or root.op == "reshape") or root.type.size != contraction.type.size:
        return False
    # Whether each member depends on the contraction: members are topological, so one pass.
    reaches: dict[int, bool] = {}
    for n in members:
        reaches[n.id] = n is contraction or any(reaches.get(i.id, False) for i in n.inputs)
    depends = lambda n: reaches.get(n.id, False)  # noqa: E731 (outside the kernel: False)

    for n in members:
        if n.kind == OpKind.CONTRACTION and n is not contraction:
            return False
        if n.kind not in (OpKind.ELEMENTWISE, OpKind.SOURCE, OpKind.CONTRACTION, OpKind.MOVEMENT):
            return False  # e.g. a row reduction: a contraction is never part of a row kernel
        if n is contraction or not depends(n) or n.op == "reshape":
            continue
        if n.kind != OpKind.ELEMENTWISE or any(depends(i) and i.shape != n.shape for i in n.inputs):
            return False
    return depends(root)


def _valid_row_group(root: Node, members: list[Node]) -> bool:
    """A kernel with inner row reductions: one row structure shared by every member."""
    reductions = [n for n in members if n.kind == OpKind.REDUCTION and n is not root]
    if not reductions:
        return True
    k = row_reduction_axes(reductions[0])
    full = reductions[0].inputs[0].shape
    if any(row_reduction_axes(r) != k or r.inputs[0].shape != full for r in reductions):
        return False
    row_shape = full[:len(full) - k] + (1,) * k
    if root.kind == OpKind.REDUCTION:
        if row_reduction_axes(root) != k or root.inputs[0].shape != full:
            return False
    elif root.kind != OpKind.ELEMENTWISE or root.shape != full:
        return False
    for n in members:
        if n.kind in (OpKind.CONTRACTION,) or n.kind == OpKind.REDUCTION and not row_reduction_axes(n):
            return False
        if n.kind == OpKind.ELEMENTWISE and n.shape not in (full, row_shape) and not index_only(n):
            return False  # an index-only value (a gather's iota positions) is recomputed where it is read
    return True


def _roots(graph: Graph, stored: set[int]) -> list[Node]:
    return [n for n in graph.nodes if n.id in stored and n.kind != OpKind.SOURCE]


RECOMPUTE_MAX_OPS = 6
# An operand at most this fraction of the value's size is a broadcast (a per-channel statistic):
# its loads stay in cache whichever kernel makes them.
BROADCAST_FRACTION = 8


def cheap_to_recompute(node: Node, stored: set[int]) -> bool:
    """An elementwise value its readers may each recompute instead of loading it from a buffer.

    It reads one stored buffer of its own size (plus small broadcast operands)
    through a few cheap operations: each reader loads that buffer instead of
    this one, so recomputing costs no memory traffic, and storing it would
    cost a write, a read and a kernel (batch norm's x - mean, read by the
    variance and by the normalization).
    """
    if index_only(node):
        return True
    if node.kind != OpKind.ELEMENTWISE:
        return False
    ops, large = 0, set()
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n.id in seen:
            continue
        seen.add(n.id)
        if n is not node and (n.id in stored or n.kind == OpKind.SOURCE):
            if n.type.size * BROADCAST_FRACTION > node.type.size:
                large.add(n.id)
            continue
        if n.kind == OpKind.ELEMENTWISE:
            if not get_op(n.op).cheap:  # one or two instructions per element
                return False
            ops += 1
        elif n.op not in ("reshape", "expand", "permute"):
            return False
        stack.extend(n.inputs)
    return ops <= RECOMPUTE_MAX_OPS and len(large) <= 1


def store_shared(graph: Graph, stored: set[int]) -> bool:
    """Store computing nodes that several kernels would inline; True if any was added.

    A value cheap to recompute (`cheap_to_recompute`) is left inlined in each of them.
    """
    owners: dict[int, int] = {}
    shared = set()
    cheap: dict[int, bool] = {}  # cheap_to_recompute of each node, for this `stored`
    for root in _roots(graph, stored):
        members, _ = collect_members(root, stored)
        for n in members:
            if n is not root and (computes(n) or inlines_arithmetic(n, stored)):
                if owners.setdefault(n.id, root.id) != root.id:
                    if n.id not in cheap:
                        cheap[n.id] = cheap_to_recompute(n, stored)
                    if not cheap[n.id]:
                        shared.add(n.id)
    if not shared:
        return False
    # Store the last shared node: its producers may then belong to it alone. A shared node
    # that is not inlined into it (not one of its producers through values not stored) stays
    # shared whatever becomes of those producers, so it is stored in the same round, and so
    # on, latest first: the same nodes, in a few rounds instead of one round per node.
    position = {n.id: i for i, n in enumerate(graph.nodes)}
    by_id = {n.id: n for n in graph.nodes}
    feeding: set[int] = set()  # the nodes inlined into a node stored this round
    for node_id in sorted(shared, key=position.__getitem__, reverse=True):
        if node_id in feeding:
            continue
        stored.add(node_id)
        stack = list(by_id[node_id].inputs)
        while stack:
            n = stack.pop()
            if n.id in feeding or n.id in stored:
                continue
            feeding.add(n.id)
            stack.extend(n.inputs)
    return True


def store_invalid(graph: Graph, stored: set[int], users: dict[int, list[Node]],
                   fixed: set[int] = frozenset()) -> bool:
    """Store contractions and row reductions a kernel cannot hold; True if any was added.

    Kernels rooted in `fixed` (fused attention) are left as they are."""
    added = set()
    roots = [r for r in _roots(graph, stored) if r.id not in fixed]
    outputs = {n.id for n in graph.outputs}
    for root in roots:  # contractions first: storing one may make a row kernel valid
        members, _ = collect_members(root, stored)
        unfused = [n for n in members
                   if n is not root and n.kind == OpKind.CONTRACTION and not _fusable_contraction(root, n, members)]
        quantized = _quantized_branch_ends(unfused, users, stored | outputs)
        added |= {n.id for n in quantized} if quantized else {_epilogue_end(n, users, stored | outputs).id
                                                              for n in unfused}
    if not added:
        for root in roots:
            members, _ = collect_members(root, stored)
            if not _valid_row_group(root, members):
                added |= {n.id for n in members if n.kind == OpKind.REDUCTION and n is not root}
    added -= stored
    stored |= added
    return bool(added)


def _quantized_branch_ends(contractions: list[Node], users: dict[int, list[Node]], stop: set[int]) -> list[Node]:
    """Where two quantized branches join (an int8 residual block's shortcut convolution), the 8-bit values
    to store so the largest contraction keeps the join in its epilogue: every other contraction's own
    epilogue up to its first 8-bit value (its requantization), fused into it, the join then reading that
    value as a residual. Empty (store as before) unless each of those branches has such a value."""
    if len(contractions) < 2:
        return []
    keep = max(contractions, key=lambda n: sum(x.type.size for x in n.inputs))
    ends = []
    for contraction in contractions:
        if contraction is keep:
            continue
        node = contraction
        while node.dtype.name not in ("int8", "uint8"):
            readers = users.get(node.id, [])
            if len(readers) != 1 or readers[0].id in stop or not is_epilogue(readers[0], node):
                return []
            node = readers[0]
        members, _ = collect_members(node, stop)
        if node is contraction or not _fusable_contraction(node, contraction, members):
            return []
        ends.append(node)
    return ends


def _epilogue_end(contraction: Node, users: dict[int, list[Node]], stop: set[int]) -> Node:
    """The node to store when a contraction cannot join its reader's kernel: the end of its
    epilogue chain (each node the only reader of the one before: bias, reshape, residual add),
    so the epilogue still fuses into the contraction and the reader (a layer norm's row kernel,
    a softmax) starts from there. The contraction itself when the chain is empty."""
    node = end = contraction
    while True:
        readers = users.get(node.id, [])
        if len(readers) != 1:
            break
        nxt = readers[0]
        if nxt.id in stop or (nxt.op != "reshape" and not is_epilogue(nxt, node)):
            break  # a stored node heads its own kernel already
        node = nxt
        if node.op != "reshape":
            end = node
    if end is contraction:
        return contraction
    members, _ = collect_members(end, {n for n in stop if n != end.id})
    return end if _fusable_contraction(end, contraction, members) else contraction
