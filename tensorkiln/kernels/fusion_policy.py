"""The fusion policy: whether one node's value is stored in a buffer or inlined into its readers.

`materialize_reason` is the first guess, made node by node in topological
order; `partition` (grouping.py) then refines it to a fixed point
(group_refinement.py). The policy is kept apart from those mechanics so the
graph optimizer can refine it without touching lowering. The facts it reads
of a node and its readers are here too: movement ops that replicate or
reindex, row reductions, a contraction's epilogue, values computed from
indices alone, and how deep and large an inlined expression grows.
"""
from __future__ import annotations

from ..ir.graph import Node
from ..ir.ops.registry import MappingType, OpKind, get_op
from .bf16_readers import CONV_ROUNDING_READERS, ROUNDING_READERS, read_in_bf16, reads_bf16_storage
from .bf16_storage import a_operand_of_gemm, bf16_storage_reason, read_rounded_by_gemms, rounded_input
from .templates.gemm_bf16 import is_bf16_rounding


def replicates(node: Node) -> bool:
    """A movement op through which one producer element feeds many consumer elements (one-to-many):
    inlining a computing producer across it would recompute the producer per copy."""
    return node.kind == OpKind.MOVEMENT and get_op(node.op).mapping == MappingType.ONE_TO_MANY


def reindexes(node: Node) -> bool:
    """A movement op that reads each element at most once (reorganize, shuffle: reshape, permute,
    slice, pad, concat)."""
    return get_op(node.op).mapping in (MappingType.REORGANIZE, MappingType.SHUFFLE)


def computes(node: Node) -> bool:
    """True for a node that does arithmetic (not a pure index remapping)."""
    return node.kind not in (OpKind.MOVEMENT, OpKind.SOURCE)


def inlines_arithmetic(node: Node, stored: set[int]) -> bool:
    """True if inlining `node` would inline arithmetic (not just index remapping of buffers)."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n.id in seen or (n.id in stored and n is not node):
            continue
        seen.add(n.id)
        if computes(n):
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
            any(read_in_bf16(u, users_of, lambda r: r.op in CONV_ROUNDING_READERS) for u in users):
        return "read by a bf16 convolution (which rounds it as it copies) and by other ops"
    if users_of is not None and read_rounded_by_gemms(node, users, users_of):
        return "read by GEMMs (which round it as they pack it) and by other ops"
    if node.kind == OpKind.CONTRACTION:
        # An epilogue (bias, activation, residual, scaling, cast) fuses into the contraction's store.
        return None if _has_epilogue(node, users, users_of or {}) else "a contraction without an epilogue"
    if not inlines_arithmetic(node, stored):
        return None  # pure index arithmetic over buffers: always inline
    bf16 = bf16_storage_reason(node, users, stored, users_of or {})
    if bf16 is not None:
        return bf16 or None
    rounded = rounded_input(node)
    if rounded is not None and users and all(u.op in ROUNDING_READERS for u in users):
        if rounded.kind == OpKind.SOURCE or rounded.id in stored or not inlines_arithmetic(rounded, stored):
            if users_of is not None and a_operand_of_gemm(node, users_of):
                return "the rounded A of a float32 GEMM (read in place where stored, packed to round it)"
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


def _stored_as_bf16(node: Node, users: list[Node], users_of: dict[int, list[Node]], stored: set[int]) -> bool:
    """`node` = cast(x, bfloat16) whose only reader widens it back for bf16 convolutions alone, x computed
    in the producer's kernel (a convolution's epilogue) and read by nothing else: storing the bf16 value
    instead of x halves the bytes. An x read elsewhere too (a residual block's output) is stored as
    float32 anyway; the convolution then rounds it as it copies."""
    if not read_in_bf16(node, users_of):
        return False
    x = node.inputs[0]
    return (len(users_of.get(x.id, [])) == 1 and x.kind != OpKind.SOURCE and x.id not in stored
            and inlines_arithmetic(x, stored))


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
