"""Partition a graph into kernels: which values are stored in buffers, which are inlined.

Every node whose value is materialized (stored to a buffer) is the root of one
kernel; the kernel computes the root from its materialized inputs and inlines
every other node in between as index arithmetic and arithmetic expressions.
So an elementwise chain with its reshapes and transposes becomes one loop
nest, and a reduction absorbs the elementwise producers that feed it.

The fusion policy, whether one node is stored, is fusion_policy.py's
`materialize_reason`, kept apart from these mechanics so the graph optimizer
can refine it without touching lowering; `partition` refines its first guess
to a fixed point (group_refinement.py) and makes one `KernelGroup` per stored
node.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.graph import Graph, Node, format_node, node_names
from ..ir.ops.registry import OpKind
from .bf16_storage import rounded_input, unstore_packed_roundings
from .fusion_policy import computes, index_only, inline_depth, inline_size, materialize_reason
from .group_refinement import collect_members, store_invalid, store_shared
from .templates.attention import attention_parts, safe_softmax_guard

# The longest chain of ops one kernel inlines (its root's inline depth). Lowering expands the
# chain into one expression, and the loop-IR simplifier, the C printer and the C compiler walk
# that expression recursively: without a bound, a 10,000-op elementwise chain becomes a
# 10,000-deep expression (a RecursionError in Python, a pathological expression for cc). A
# chain past the bound is cut by storing the value that would exceed it, which costs one
# write and one read per cut: negligible next to 64 ops of arithmetic per element. Models
# inline far shorter chains (at most 13 in the zoo and the demo models: a transformer block), so the
# bound never cuts them (tests/kernels/test_deep_graphs.py compares their groupings).
MAX_INLINE_DEPTH = 64
# The most ops one kernel's expression may hold (its root's inline size). An inlined value that
# its reader uses twice (x * x, a concat of x with x) is copied into the reader's expression, so
# a chain of such readers doubles the expression at every step: `x = x * x + x` ten times is
# 3^10 ops, which took the simplifier minutes. A value whose expression would pass the bound is
# stored, which keeps every expression within a few times the bound. Models' largest kernels
# hold under a hundred (tests/kernels/test_deep_graphs.py compares their groupings).
MAX_INLINE_SIZE = 256


@dataclass
class KernelGroup:
    """One kernel: the nodes it inlines (topological, root last) and the buffers it reads."""

    root: Node
    nodes: list[Node]
    inputs: list[Node]
    kind: str  # "injective" | "reduction" | "contraction" | "row" | "attention" | "control"
    name: str
    reason: str = ""  # why the root is materialized (stored in a buffer) rather than inlined

    @property
    def node_ids(self) -> set[int]:
        return {n.id for n in self.nodes}


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


def attention_kernels(graph: Graph, users: dict[int, list[Node]]) -> dict[int, set[int]]:
    """P @ V matmul id -> ids of the nodes one fused-attention kernel computes (scores, softmax).

    Applies where softmax(x) @ v has x computed elementwise from q @ k^T and none of the
    intermediates (scores, weights) is read anywhere else: then the seq x seq matrix
    need not exist (kernels/templates/attention.py).
    """
    found = {}
    for root in graph.nodes:
        parts = attention_parts(root)
        if parts is None:
            continue
        first, x, p = parts
        inside: set[int] = set()
        masks: set[int] = set()  # index-only operands (a causal mask of iotas): computed inside, shared or not
        stack = [p]
        while stack:  # the nodes between the first matmul and the softmax output
            n = stack.pop()
            if n.id in inside or n.kind == OpKind.SOURCE:  # constants and inputs stay buffers
                continue
            inside.add(n.id)
            if n is not first:
                stack.extend(i for i in n.inputs if i.shape == x.shape or i.kind == OpKind.REDUCTION)
                masks.update(i.id for i in n.inputs if i.shape != x.shape and i.kind != OpKind.SOURCE
                             and i.kind != OpKind.REDUCTION and index_only(i))
        guarded = safe_softmax_guard(p)
        if guarded is not None:  # the guard's test of x is the kernel's zero row sum: computed inside
            inside.update(n.id for n in guarded[1])
        private = all(all(u.id in inside or u is root for u in users[n]) for n in inside)
        inside |= masks
        short = len(inside) <= MAX_INLINE_DEPTH  # the template inlines all of it into one expression
        if private and short and all(graph_node.id not in inside for graph_node in graph.outputs):
            found[root.id] = inside
    return found


def partition(graph: Graph, fuse: bool = True) -> list[KernelGroup]:
    """Split a graph into kernels, in an order that respects their dependences.

    fuse=False materializes every computing op (one kernel each; movement ops
    are still index arithmetic): the unfused baseline of opt_level 0.
    """
    users = graph.users()
    outputs = {n.id for n in graph.outputs}
    stored: set[int] = set()
    why: dict[int, str] = {}  # root id -> why it is materialized
    depth: dict[int, int] = {}  # node id -> inline_depth when the node was decided
    size: dict[int, int] = {}  # node id -> inline_size when the node was decided
    for n in graph.nodes:
        reason = materialize_reason(n, users[n.id], n.id in outputs, stored, users)
        if reason is None and not fuse and computes(n):
            reason = "unfused (opt_level 0: every computing op is its own kernel)"
        depth[n.id] = inline_depth(n, stored, depth)
        size[n.id] = inline_size(n, stored, size)
        if reason is None and depth[n.id] > MAX_INLINE_DEPTH:
            reason = f"ends a chain of {MAX_INLINE_DEPTH} inlined ops (bounds the kernel's expression depth)"
        if reason is None and size[n.id] > MAX_INLINE_SIZE:
            reason = f"its expression would hold over {MAX_INLINE_SIZE} ops (an input read twice is copied)"
        if reason is not None:
            stored.add(n.id)
            why[n.id] = reason
    # Refinements below only add stored nodes, which shortens chains; fused attention, which
    # un-stores its inside nodes, is only taken where that inside is short.
    attention = attention_kernels(graph, users) if fuse else {}
    for root_id, inside in attention.items():
        stored.add(root_id)
        stored -= inside
        why[root_id] = "the end of a fused attention (softmax(q @ k^T) @ v)"
    fixed = set(attention)
    # Refine to a fixed point: first, a computing node inlined into two kernels would be
    # computed twice, so it is stored; then (only once that is settled) a contraction must head
    # its kernel's epilogue and row reductions must share their kernel's row structure.
    while True:
        before = set(stored)
        if store_shared(graph, stored):
            reason = "inlined into several kernels otherwise (computed once instead)"
        elif store_invalid(graph, stored, users, fixed):
            reason = "its reader's kernel cannot hold it (a contraction's epilogue or a row structure ends here)"
        else:
            break
        for node_id in stored - before:
            why.setdefault(node_id, reason)
    unstore_packed_roundings(graph, stored, users)
    groups = []
    for node in graph.nodes:
        if node.id not in stored or node.kind == OpKind.SOURCE or node.op == "result":
            continue  # a result is stored by its control-flow node's kernel
        members, inputs = collect_members(node, stored)
        contraction = next((n for n in members if n.kind == OpKind.CONTRACTION), None)
        inner_reductions = any(n.kind == OpKind.REDUCTION and n is not node for n in members)
        kind = "contraction" if contraction is not None else ("row" if inner_reductions else _kind(node))
        if node.id in attention:
            kind = "attention"
        if node.kind == OpKind.CONTROL:
            kind = "control"
        groups.append(KernelGroup(node, members, inputs, kind, _kernel_name(members, len(groups)),
                                  why.get(node.id, "")))
    for rounding in (g for found in companion_roundings(groups).values() for g in found):
        rounding.reason += ("; a bf16 rounding of its input, which the input's kernel stores as a second output "
                            "where it writes that input by plain stores (kernels/companion.py)")
    return groups


def companion_roundings(groups: list[KernelGroup]) -> dict[int, list[KernelGroup]]:
    """Root id of a kernel's output x -> the kernels that only round x to bf16, whose stores x's kernel
    makes as it stores x where it writes x by loop-IR stores (kernels/companion.py)."""
    roots = {g.root.id for g in groups}
    found: dict[int, list[KernelGroup]] = {}
    for group in groups:
        x = _rounded_output(group)
        if x is not None and x.id in roots:
            found.setdefault(x.id, []).append(group)
    return found


def _rounded_output(group: KernelGroup) -> Node | None:
    """x when `group` computes only x's bf16 rounding (in float32) from x's buffer, else None."""
    if group.kind != "injective" or len(group.inputs) != 1 or group.root.dtype.name != "float32":
        return None
    x = group.inputs[0]
    if rounded_input(group.root) is not x or x.kind == OpKind.SOURCE:
        return None
    # one-operand elementwise ops at x's index: the element of the rounding needs only x's element
    if not all(n.kind == OpKind.ELEMENTWISE and len(n.inputs) == 1 and n.shape == x.shape for n in group.nodes):
        return None
    return x


def format_grouping(graph: Graph, groups: list[KernelGroup]) -> str:
    """The grouping as text: per kernel its name, kind, why its root is stored, its buffers read
    and the graph nodes it computes (inlined ones included), in the graph printer's SSA names."""
    names = node_names(graph)
    lines = []
    for group in groups:
        reads = ", ".join(names[n.id] for n in group.inputs) or "nothing"
        lines.append(f"{group.name} ({group.kind}): stores {names[group.root.id]}, {group.reason or 'materialized'}; "
                     f"reads {reads}")
        lines += ["  " + format_node(n, names) for n in group.nodes if n.kind != OpKind.SOURCE]
    return "\n".join(lines)
