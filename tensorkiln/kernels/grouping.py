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

from ..ir.graph import Graph, Node, format_node, node_names
from ..ir.ops.registry import MappingType, OpKind, get_op
from .templates.attention import attention_parts, safe_softmax_guard
from .bf16_storage import bf16_storage_reason, read_rounded_by_gemms, rounded_input, unstore_packed_roundings
from .target import cpu_target
from .templates.gemm_bf16 import PACKING_CONTRACTIONS, is_bf16_rounding

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


def replicates(node: Node) -> bool:
    """A movement op through which one producer element feeds many consumer elements (one-to-many):
    inlining a computing producer across it would recompute the producer per copy."""
    return node.kind == OpKind.MOVEMENT and get_op(node.op).mapping == MappingType.ONE_TO_MANY


def reindexes(node: Node) -> bool:
    """A movement op that reads each element at most once (reorganize, shuffle: reshape, permute,
    slice, pad, concat)."""
    return get_op(node.op).mapping in (MappingType.REORGANIZE, MappingType.SHUFFLE)


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


def index_only(node: Node) -> bool:
    """The value is computed from element indices alone: iotas (operand-free elementwise ops) and
    scalar constants, through cheap elementwise and movement ops (a causal mask of a symbolic length).
    Its readers recompute it: it reads no memory."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n.id in seen:
            continue
        seen.add(n.id)
        if n.op == "constant" and n.type.size == 1:
            continue
        if n.kind == OpKind.ELEMENTWISE and not get_op(n.op).cheap:
            return False
        if n.kind not in (OpKind.ELEMENTWISE, OpKind.MOVEMENT) or (n.kind == OpKind.MOVEMENT and not n.inputs):
            return False
        stack.extend(n.inputs)
    return True


def effective_readers(node: Node, users_of: dict[int, list[Node]]) -> list[tuple[Node, Node]]:
    """(reader, the value it reads) for each non-reindexing op reached from `node` through
    reshape/permute/slice/pad/concat, which read each element at most once."""
    found, stack, seen = [], [node], set()
    while stack:
        n = stack.pop()
        for user in users_of.get(n.id, []):
            if reindexes(user):
                if user.id not in seen:
                    seen.add(user.id)
                    stack.append(user)
            else:
                found.append((user, n))
    return found


def should_materialize(node: Node, users: list[Node], is_output: bool, stored: set[int],
                       users_of: dict[int, list[Node]] | None = None) -> bool:
    """First guess of the fusion policy: store this node's value in a buffer rather than inline it.

    `stored` holds the producers already chosen (decisions are made in
    topological order). `partition` then refines the guess: a computing node
    that ends up inlined into two kernels is stored after all.
    """
    return materialize_reason(node, users, is_output, stored, users_of) is not None


def materialize_reason(node: Node, users: list[Node], is_output: bool, stored: set[int],
                       users_of: dict[int, list[Node]] | None = None) -> str | None:
    """Why `should_materialize` stores this node (a short phrase), or None when it is inlined."""
    if node.kind == OpKind.SOURCE:
        return "a source"
    if node.kind == OpKind.CONTROL:  # its kernel writes every result (kernels/control.py)
        return "a result of a control-flow op" if node.op == "result" else "a control-flow op"
    if any(u.kind == OpKind.CONTROL for u in users):
        return "an operand of a control-flow op"  # its sub-programs read whole buffers
    if is_output:
        return "a graph output"
    if any(get_op(u.op).runtime_call is not None for u in users):
        return "the operand of a runtime call"  # the runtime reads whole buffers (a collective)
    if any(get_op(u.op).stored_operands for u in users):
        return "an operand read in place"  # a native kernel reads it through a pointer
    if node.kind == OpKind.REDUCTION:
        # softmax and layer norm: row reductions fuse with their elementwise readers into one kernel
        if row_reduction_axes(node) and users and all(u.kind == OpKind.ELEMENTWISE for u in users):
            return None
        return "a reduction"
    if users_of is not None and node.kind in (OpKind.ELEMENTWISE, OpKind.CONTRACTION) and len(users) > 1 and \
            any(_read_in_bf16(u, users_of, lambda r: r.op in CONV_ROUNDING_READERS) for u in users):
        return "read by a bf16 convolution (which rounds it as it copies) and by other ops"
    if users_of is not None and read_rounded_by_gemms(node, users, users_of):
        return "read by GEMMs (which round it as they pack it) and by other ops"
    if node.kind == OpKind.CONTRACTION:
        # An epilogue (bias, activation, residual, scaling, cast) fuses into the contraction's store.
        return None if _has_epilogue(node, users, users_of or {}) else "a contraction without an epilogue"
    if not _inlines_arithmetic(node, stored):
        return None  # pure index arithmetic over buffers: always inline
    bf16 = bf16_storage_reason(node, users, stored, users_of or {})
    if bf16 is not None:
        return bf16 or None
    rounded = rounded_input(node)
    if rounded is not None and users and all(u.op in ROUNDING_READERS for u in users):
        if rounded.kind == OpKind.SOURCE or rounded.id in stored or not _inlines_arithmetic(rounded, stored):
            return None  # precision="bf16": the GEMM rounds a stored operand while packing it, a conv as it copies
        if is_bf16_rounding(node) and node.inputs[0].id in stored and all(reads_bf16_storage(u) for u in users):
            return None  # the convolution reads the bf16 value where it is stored
    if users_of is not None and _stored_as_bf16(node, users, users_of, stored):
        return "a bf16 operand of conv2d_nchwc_bf16 (stored as bfloat16: half the bytes)"
    if node.kind == OpKind.ELEMENTWISE and users_of is not None:
        # Look through reshapes and transposes: a bias add feeding q.reshape(...).transpose(...)
        # @ k is stored itself, and the reindexing is done by the GEMM's loads.
        for reader, value in effective_readers(node, users_of):
            if reader.kind == OpKind.CONTRACTION:
                return f"an operand of {reader.op} (through reindexing)"
            if replicates(reader) and reader.inputs[0] is value:
                return f"replicated by {reader.op} (through reindexing)"
    if index_only(node) and not any(u.kind == OpKind.CONTRACTION for u in users):
        return None  # a function of the index alone (iota): computing it costs less than loading it
    for user in users:
        if user.kind == OpKind.CONTRACTION:
            return f"an operand of {user.op}"  # a GEMM reads each operand element many times
        if replicates(user) and user.inputs[0] is node:
            return f"replicated by {user.op}"  # would be recomputed for every copy
        if user.kind == OpKind.ELEMENTWISE and user.shape != node.shape and not _per_row(node, stored):
            return f"broadcast by {user.op}"  # recomputed for every copy
        if len(users) > 1 and (user.kind == OpKind.MOVEMENT or
                               user.kind == OpKind.REDUCTION and not row_reduction_axes(user)):
            return f"read by {len(users)} ops, one of them {user.op}"
    return None


# Contractions that read a bf16 rounding of their input from bfloat16 storage (or round a stored
# float32 value while copying it): the producer's epilogue then stores the rounded value as bfloat16.
BF16_STORAGE_READERS = frozenset({"conv2d_nchwc_bf16"})


# A blocked depthwise layer reads its input from bfloat16 storage too: the expanding 1x1 layer before
# it stores half the bytes, and the depthwise kernel widens each element once, copying the rows of its
# band (conv_nchwc.py). Widened at each of its 9 taps instead it measured slower than float32 storage;
# widened in the copy, 1.0-1.06x faster on MobileNetV2's blocks (`python benchmarks/bf16_convs.py`).
# That store converts each vector with vcvtneps2bf16 (bf16_store.py); without AVX512-BF16 it is
# integer arithmetic per lane, and the expanding layer storing bf16 measured about 2x its float32 time
# (docs/precision.md), so there the depthwise input stays float32 (rounded values, rounded as the
# depthwise kernel copies them). None: from the target (`CpuTarget.bf16_dot`); True or False forces it.
BF16_DEPTHWISE_INPUT: bool | None = None


def bf16_depthwise_input() -> bool:
    """Whether a blocked depthwise convolution reads its input from bfloat16 storage on this target."""
    return cpu_target().bf16_dot if BF16_DEPTHWISE_INPUT is None else BF16_DEPTHWISE_INPUT


def reads_bf16_storage(node: Node) -> bool:
    """`node` reads a bf16 rounding of its input from a bfloat16 buffer: the bf16 direct convolution
    (as pairs), or, where `bf16_depthwise_input`, a blocked depthwise one."""
    depthwise = node.op == "conv2d_nchwc" and node.attrs.get("groups", 1) > 1
    return node.op in BF16_STORAGE_READERS or (depthwise and bf16_depthwise_input())
# Contractions that read each operand element about once, into a packed panel or a padded copy:
# a rounding of a stored value read only by them is computed there, not stored first.
CONV_ROUNDING_READERS = BF16_STORAGE_READERS | {"conv2d", "conv2d_winograd", "conv2d_shallow_bf16"}
ROUNDING_READERS = PACKING_CONTRACTIONS | CONV_ROUNDING_READERS | {"conv2d_nchwc"}


def _read_in_bf16(node: Node, users_of: dict[int, list[Node]], readers_ok=None) -> bool:
    """`node` = cast(x, bfloat16) whose only reader widens it back for readers that `readers_ok`
    accepts (default: `reads_bf16_storage`)."""
    readers_ok = readers_ok or reads_bf16_storage
    if node.op != "cast" or node.dtype.name != "bfloat16":
        return False
    users = users_of.get(node.id, [])
    if len(users) != 1 or not is_bf16_rounding(users[0]):
        return False
    readers = users_of.get(users[0].id, [])
    return bool(readers) and all(readers_ok(u) for u in readers)


def _stored_as_bf16(node: Node, users: list[Node], users_of: dict[int, list[Node]], stored: set[int]) -> bool:
    """`node` = cast(x, bfloat16) whose only reader widens it back for bf16 convolutions alone, x computed
    in the producer's kernel (a convolution's epilogue) and read by nothing else: storing the bf16 value
    instead of x halves the bytes. An x read elsewhere too (a residual block's output) is stored as
    float32 anyway; the convolution then rounds it as it copies."""
    if not _read_in_bf16(node, users_of):
        return False
    x = node.inputs[0]
    return (len(users_of.get(x.id, [])) == 1 and x.kind != OpKind.SOURCE and x.id not in stored
            and _inlines_arithmetic(x, stored))


def row_reduction_axes(node: Node) -> int:
    """k if `node` reduces the trailing k axes of its input with keepdims (a row reduction), else 0."""
    if node.op not in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod") or not node.attrs["keepdims"]:
        return 0
    ndim = node.inputs[0].ndim
    axes = node.attrs["axes"]
    k = len(axes)
    if not k or axes != tuple(range(ndim - k, ndim)) or any(d == 0 for d in node.inputs[0].shape):
        return 0
    return k


def _per_row(node: Node, stored: set[int]) -> bool:
    """A value computed once per row from row reductions (layer norm's rsqrt(var + eps))."""
    stack, seen, found = [node], set(), False
    while stack:
        n = stack.pop()
        if n.id in seen:
            continue
        seen.add(n.id)
        if n.kind == OpKind.REDUCTION and n.id not in stored and row_reduction_axes(n):
            found = found or n.shape == node.shape
            continue
        if n.kind == OpKind.SOURCE or n.id in stored:
            if n.type.size > 1 and n.shape != node.shape:
                return False
            continue
        if n.kind != OpKind.ELEMENTWISE or n.shape != node.shape:
            return False
        stack.extend(n.inputs)
    return found


def _has_epilogue(node: Node, users: list[Node], users_of: dict[int, list[Node]]) -> bool:
    """The contraction's readers are epilogue ops, possibly after reshapes: one op (a bias add), or
    several elementwise ops at the same index (GELU reads its input three times). Where those end up
    in different kernels, `partition` stores the contraction after all."""
    while len(users) == 1 and users[0].op == "reshape":
        node, users = users[0], users_of.get(users[0].id, [])
    if len(users) == 1:
        return is_epilogue(users[0], node)
    return bool(users) and all(u.op != "reshape" and is_epilogue(u, node) for u in users)


def is_epilogue(user: Node, contraction: Node) -> bool:
    """An elementwise op reading the contraction's result at the same index, or a reshape of it
    (a reshape keeps every element at its flat index, so ops after it can still be an epilogue)."""
    if user.op == "reshape":
        return True
    return user.kind == OpKind.ELEMENTWISE and user.shape == contraction.shape


def inline_depth(node: Node, stored: set[int], depth: dict[int, int]) -> int:
    """Length of the longest chain of inlined ops ending at `node` if it were inlined too.

    `depth` holds the value for every input already decided (0 for a stored one), so
    the graph is walked once in topological order, never recursively.
    """
    return 1 + max((0 if i.id in stored else depth[i.id] for i in node.inputs), default=0)


def inline_size(node: Node, stored: set[int], size: dict[int, int]) -> int:
    """Ops in `node`'s expression if it were inlined: itself, and each inlined input's expression
    once per time `node` reads it (a stored input is a load: 0)."""
    return 1 + sum(0 if i.id in stored else size[i.id] for i in node.inputs)


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


def _collect(root: Node, stored: set[int]) -> tuple[list[Node], list[Node]]:
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


def _store_shared(graph: Graph, stored: set[int]) -> bool:
    """Store computing nodes that several kernels would inline; True if any was added.

    A value cheap to recompute (`cheap_to_recompute`) is left inlined in each of them.
    """
    owners: dict[int, int] = {}
    shared = set()
    cheap: dict[int, bool] = {}  # cheap_to_recompute of each node, for this `stored`
    for root in _roots(graph, stored):
        members, _ = _collect(root, stored)
        for n in members:
            if n is not root and (_computes(n) or _inlines_arithmetic(n, stored)):
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


def _store_invalid(graph: Graph, stored: set[int], users: dict[int, list[Node]],
                   fixed: set[int] = frozenset()) -> bool:
    """Store contractions and row reductions a kernel cannot hold; True if any was added.

    Kernels rooted in `fixed` (fused attention) are left as they are."""
    added = set()
    roots = [r for r in _roots(graph, stored) if r.id not in fixed]
    outputs = {n.id for n in graph.outputs}
    for root in roots:  # contractions first: storing one may make a row kernel valid
        members, _ = _collect(root, stored)
        unfused = [n for n in members
                   if n is not root and n.kind == OpKind.CONTRACTION and not _fusable_contraction(root, n, members)]
        quantized = _quantized_branch_ends(unfused, users, stored | outputs)
        added |= {n.id for n in quantized} if quantized else {_epilogue_end(n, users, stored | outputs).id
                                                              for n in unfused}
    if not added:
        for root in roots:
            members, _ = _collect(root, stored)
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
        members, _ = _collect(node, stop)
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
    members, _ = _collect(end, {n for n in stop if n != end.id})
    return end if _fusable_contraction(end, contraction, members) else contraction


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
        if reason is None and not fuse and _computes(n):
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
        if _store_shared(graph, stored):
            reason = "inlined into several kernels otherwise (computed once instead)"
        elif _store_invalid(graph, stored, users, fixed):
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
        members, inputs = _collect(node, stored)
        contraction = next((n for n in members if n.kind == OpKind.CONTRACTION), None)
        inner_reductions = any(n.kind == OpKind.REDUCTION and n is not node for n in members)
        kind = "contraction" if contraction is not None else ("row" if inner_reductions else _kind(node))
        if node.id in attention:
            kind = "attention"
        if node.kind == OpKind.CONTROL:
            kind = "control"
        groups.append(KernelGroup(node, members, inputs, kind, _kernel_name(members, len(groups)),
                                  why.get(node.id, "")))
    return groups


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
