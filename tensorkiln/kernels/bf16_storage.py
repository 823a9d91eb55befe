"""Where precision="bf16" stores bf16: the grouping rules for the precision pass's roundings.

The precision pass writes each rounded operand as cast(cast(x, bfloat16), float32)
(passes/precision.py). Stored as it is written, the rounding is a float32 buffer of bf16 values:
twice the bytes its readers need, and often a kernel of its own that only rounds. These rules
store the bf16 value instead, where every reader is a kernel that reads its operands through
their expressions (the GEMMs, which pack them as bf16 pairs, and fused attention: the
contractions of PACKING_CONTRACTIONS):

- a narrowing cast(x, bfloat16) whose readers (through reshapes and transposes) are all such
  roundings is stored, as a bfloat16 buffer, when x is computed: the kernel computing x (a
  GEMM's epilogue, a layer norm) writes half the bytes, and the widening is a free load;
- the widening cast(., float32) of a stored bf16 value, or the rounding of a stored float32 one,
  is never stored: its readers widen (exact: a bf16 number is a float32 one) or round as they load;
- after the refinements of grouping.partition, a stored narrowing whose x ended up stored
  anyway (a layer norm's output that a residual add reads too) is dropped again: the GEMMs
  round x while packing it, which costs no pass of its own. So is a stored `round_bf16(x)`
  (the float32 rounding that passes/bf16_fp32_gemm.py writes for the float32 templates);
  and an x with other readers that such a rounding's GEMMs read is stored from the start
  (`read_rounded_by_gemms`), as float32 would store it for them: left inlined, its
  expression would run on into the kernels of the layers after it.

A graph without bfloat16 casts (precision="fp32") meets none of these rules.
"""
from __future__ import annotations

from ..ir.graph import Graph, Node
from ..ir.ops.registry import MappingType, OpKind, get_op
from .templates.gemm_bf16 import PACKING_CONTRACTIONS, is_bf16_rounding


def is_narrowing(node: Node) -> bool:
    """cast(x, bfloat16) of a float32 x."""
    return node.op == "cast" and node.dtype.name == "bfloat16" and node.inputs[0].dtype.name == "float32"


def is_widening(node: Node) -> bool:
    """cast(x, float32) of a bfloat16 x."""
    return node.op == "cast" and node.dtype.name == "float32" and node.inputs[0].dtype.name == "bfloat16"


def rounded_input(node: Node) -> Node | None:
    """x when `node` rounds it to bf16 and holds the result in float32 (cast(cast(x, bfloat16), float32)
    or round_bf16(x)), else None."""
    if is_bf16_rounding(node):
        return node.inputs[0].inputs[0]
    return node.inputs[0] if node.op == "round_bf16" else None


# The readers that round a stored float32 value as they read it once per use, packing or copying it: the
# GEMMs, and the NCHW convolutions (implicit GEMM, or a copy of the input) that the float32 templates run
# on a round_bf16 input where the target has no bf16 dot products (passes/bf16_fp32_gemm.py).
FP32_ROUNDING_READERS = PACKING_CONTRACTIONS | {"conv2d"}


def read_rounded_by_gemms(node: Node, users: list[Node], users_of: dict[int, list[Node]]) -> bool:
    """`node` has several readers, one of them a round_bf16 read only by GEMMs (through reindexing): a
    post-norm layer norm's output, read by the next layer's projections and by its residual add. Stored
    as it is, in float32, the GEMMs round it as they pack it, and the residual reads it unrounded."""
    return len(users) > 1 and any(
        u.op == "round_bf16" and (readers := _readers_through_reindexing(u, users_of))
        and all(r.op in FP32_ROUNDING_READERS for r in readers) for u in users)


def _reads_through_expressions(widening: Node, users_of: dict[int, list[Node]]) -> bool:
    """Every reader of `widening` is a contraction that reads its operands through expressions."""
    readers = users_of.get(widening.id, [])
    return bool(readers) and all(u.op in PACKING_CONTRACTIONS for u in readers)


def _readers_through_reindexing(node: Node, users_of: dict[int, list[Node]]) -> list[Node]:
    """The readers of `node` past reshapes, transposes and slices (which read each element at most once)."""
    found, stack = [], [node]
    while stack:
        n = stack.pop()
        for user in users_of.get(n.id, []):
            if get_op(user.op).mapping in (MappingType.REORGANIZE, MappingType.SHUFFLE):
                stack.append(user)
            else:
                found.append(user)
    return found


FP32_GEMMS = frozenset({"matmul", "matmul_packed"})  # the float32 templates, which read a row-major A in place


def a_operand_of_gemm(node: Node, users_of: dict[int, list[Node]]) -> bool:
    """A float32 GEMM reads `node` = round_bf16(x), x computed by a kernel, (through reshapes and permutes)
    as its A operand, whose rows the template reads where they lie (templates/gemm_a_reads.py) when they
    are a buffer. Rounded while loaded, A is packed instead, by every thread and column block (BERT-base's
    layer-norm-fed projections took 1.16-1.18x their float32 time so); stored, the rounding is one more
    output of x's kernel. A graph input x is still rounded while packing: storing it would cost a
    kernel of its own."""
    if node.op != "round_bf16" or node.inputs[0].kind == OpKind.SOURCE:
        return False
    chain, stack = {node.id}, [node]
    while stack:
        for user in users_of.get(stack.pop().id, []):
            if user.op == "reshape" or get_op(user.op).mapping == MappingType.SHUFFLE:
                chain.add(user.id)  # a permuted A is read in place too, in pieces (gemm_a_reads.a_row_piece)
                stack.append(user)
            elif user.op in FP32_GEMMS and user.inputs[0].id in chain:
                return True
    return False


def _computed(node: Node, stored: set[int]) -> bool:
    """node's value needs arithmetic (it is not a buffer, or a reindexing of one)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n.kind == OpKind.SOURCE or n.id in stored:
            continue
        if n.kind != OpKind.MOVEMENT:
            return True
        stack.extend(n.inputs)
    return False


def _unrounded(node: Node, stored: set[int]) -> Node:
    """What a widening's operand reads: past reshapes and transposes, and past a narrowing that is not
    stored (the precision pass's rounding of a buffer, which the reader computes as it loads it)."""
    while node.kind == OpKind.MOVEMENT and len(node.inputs) == 1 and node.id not in stored:
        node = node.inputs[0]
    return node.inputs[0] if is_narrowing(node) and node.id not in stored else node


def bf16_storage_reason(node: Node, users: list[Node], stored: set[int],
                        users_of: dict[int, list[Node]]) -> str | None:
    """For fusion_policy.materialize_reason: why `node` is stored as bf16 (a phrase), "" where the rules
    above inline it, None where they say nothing (the other rules decide)."""
    if is_widening(node) and not _computed(_unrounded(node.inputs[0], stored), stored) \
            and _reads_through_expressions(node, users_of):
        return ""  # a buffer (or a reindexing of one) rounded, or a bf16 one widened, as it is loaded
    if is_narrowing(node) and _computed(node.inputs[0], stored):
        readers = _readers_through_reindexing(node, users_of)
        if readers and all(is_widening(r) and _reads_through_expressions(r, users_of) for r in readers):
            return f"stored as bf16 (read widened by {users_of[readers[0].id][0].op})"
    return None


def unstore_packed_roundings(graph: Graph, stored: set[int], users_of: dict[int, list[Node]]) -> None:
    """Drop the stored narrowings whose float32 input is stored too, where every reader is a widening
    read by GEMMs only: those round it while packing it (the last rule of the module docstring)."""
    outputs = {n.id for n in graph.outputs}
    for node in graph.nodes:
        if node.id not in stored or node.id in outputs:
            continue
        if node.op == "round_bf16":
            x = node.inputs[0]
            readers = _readers_through_reindexing(node, users_of)
            if (x.id in stored or x.kind == OpKind.SOURCE) and readers and not a_operand_of_gemm(node, users_of) \
                    and all(r.op in FP32_ROUNDING_READERS and r.id not in outputs for r in readers):
                stored.discard(node.id)
            continue
        if not is_narrowing(node):
            continue
        x = node.inputs[0]
        if x.id not in stored and x.kind != OpKind.SOURCE:
            continue
        readers = _readers_through_reindexing(node, users_of)
        if readers and all(is_widening(r) and r.id not in stored and r.id not in outputs
                           and _reads_through_expressions(r, users_of) for r in readers):
            stored.discard(node.id)


__all__ = ["FP32_ROUNDING_READERS", "a_operand_of_gemm", "bf16_storage_reason", "is_narrowing", "is_widening",
           "read_rounded_by_gemms", "rounded_input", "unstore_packed_roundings"]
