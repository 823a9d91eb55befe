"""Partition a graph into kernels: which values are stored in buffers, which are inlined.

Every node whose value is materialized (stored to a buffer) is the root of one
kernel; the kernel computes the root from its materialized inputs and inlines
every other node in between as index arithmetic and arithmetic expressions.
So an elementwise chain with its reshapes and transposes becomes one loop
nest, and a reduction absorbs the elementwise producers that feed it.

`should_materialize` is the fusion policy; it is kept apart from the
mechanics so the graph optimizer can refine it without touching lowering.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..graph import Graph, Node
from ..ops.registry import OpKind

# Movement ops through which one producer element feeds many consumer elements:
# inlining a computing producer across them would recompute it per copy.
REPLICATING_OPS = frozenset({"expand", "window", "take", "gather"})


@dataclass
class KernelGroup:
    """One kernel: the nodes it inlines (topological, root last) and the buffers it reads."""

    root: Node
    nodes: list[Node]
    inputs: list[Node]
    kind: str  # "injective" | "reduction" | "contraction"
    name: str

    @property
    def node_ids(self) -> set[int]:
        return {n.id for n in self.nodes}


def _computes(node: Node) -> bool:
    """True for a node that does arithmetic (not a pure index remapping)."""
    return node.kind not in (OpKind.MOVEMENT, OpKind.SOURCE)


def _inlines_arithmetic(node: Node, stored: set[int]) -> bool:
    """True if inlining `node` would inline arithmetic (not just index remapping of buffers)."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n.id in seen or (n.id in stored and n is not node):
            continue
        seen.add(n.id)
        if _computes(n):
            return True
        if n.kind == OpKind.MOVEMENT:
            stack.extend(n.inputs)
    return False


def should_materialize(node: Node, users: list[Node], is_output: bool, stored: set[int]) -> bool:
    """The fusion policy: store this node's value in a buffer rather than inline it.

    `stored` holds the ids of the producers already chosen to be materialized
    (decisions are made in topological order).
    """
    if node.kind == OpKind.SOURCE:
        return True
    if is_output or node.kind in (OpKind.REDUCTION, OpKind.CONTRACTION):
        return True
    if not _inlines_arithmetic(node, stored):
        return False  # pure index arithmetic over buffers: always inline
    if len(users) > 1:
        return True  # computed once, read by several kernels
    for user in users:
        if user.kind == OpKind.CONTRACTION:
            return True  # a GEMM reads each operand element many times
        if user.op in REPLICATING_OPS and user.inputs[0] is node:
            return True  # would be recomputed for every copy
    return False


def _kind(root: Node) -> str:
    if root.kind == OpKind.CONTRACTION:
        return "contraction"
    if root.kind == OpKind.REDUCTION:
        return "reduction"
    return "injective"


def _kernel_name(nodes: list[Node], index: int) -> str:
    ops: list[str] = []
    for n in nodes:
        label = n.scope[0].split(":")[0] if n.scope else n.op
        if label not in ops and n.op not in ("reshape", "expand", "permute") or label == n.op and not ops:
            if label not in ops:
                ops.append(label)
    return f"k{index}_" + "_".join(ops[:4])


def partition(graph: Graph, fuse: bool = True) -> list[KernelGroup]:
    """Split a graph into kernels, in an order that respects their dependences.

    fuse=False materializes every computing op (one kernel each; movement ops
    are still index arithmetic): the unfused baseline of opt_level 0.
    """
    users = graph.users()
    outputs = {n.id for n in graph.outputs}
    stored: set[int] = set()
    for n in graph.nodes:
        if should_materialize(n, users[n.id], n.id in outputs, stored) or (not fuse and _computes(n)):
            stored.add(n.id)
    groups = []
    for node in graph.nodes:
        if node.id not in stored or node.kind == OpKind.SOURCE:
            continue
        members: list[Node] = []
        inputs: list[Node] = []
        seen: set[int] = set()

        def visit(n: Node, is_root: bool = False) -> None:
            if n.id in seen:
                return
            seen.add(n.id)
            if n.id in stored and not is_root:
                inputs.append(n)
                return
            for inp in n.inputs:
                visit(inp)
            members.append(n)

        visit(node, is_root=True)
        groups.append(KernelGroup(node, members, inputs, _kind(node), _kernel_name(members, len(groups))))
    return groups
