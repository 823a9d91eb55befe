"""bf16 GEMMs and attention on the float32 templates, where the target has no bf16 dot product.

With precision="bf16" the precision pass rounds each operand of a matmul to bf16
(passes/precision.py: cast(cast(x, bfloat16), float32)), and a GEMM or an attention
whose operands all hold bf16 values runs on bf16 pairs (kernels/templates/gemm_bf16.py,
attention_bf16.py). That pays where the CPU multiplies the pairs itself
(`CpuTarget.bf16_dot`: AVX512-BF16's `vdpbf16ps`). Elsewhere (an AVX2 host, or
`TENSORKILN_NO_BF16_DOT=1`) the pairs kernels widen every bf16 value in software, and
the float32 templates on the same rounded operands compute the same products,
accumulated in float32, faster: BERT-base's linear layers and attention measured
slower in bf16 than in float32 on an AVX2 host (docs/precision.md, "bf16 at float32
speed without AVX512-BF16").

So on such a target this pass writes each rounded operand of a matmul as
`round_bf16(x)` (ir/ops/backend_bf16.py: the same values, kept in float32), which the
bf16 templates do not take for bf16 storage:

- a linear layer's constant weight was rounded at compile time; the packed_weights pass
  then lays it out as the float32 GEMM's panels (`matmul_packed`), read in place;
- its activation is rounded where it is computed (`round_bf16` fused into the producer's
  epilogue: a linear layer's bias add, GELU) or, where its unrounded value is stored anyway
  (a post-norm layer norm's output, which the residual reads too), while the GEMM packs
  it (kernels/bf16_storage.py);
- attention's q, k and v are rounded in the epilogues of their projections (of the one projection
  they are slices of), and the float32
  attention kernel (kernels/templates/attention.py) computes the products on them, the
  softmax in float32 as the graph says (its probabilities are not rounded).

The convolutions left in NCHW after the layout pass (`conv2d`: ResNet-18's strided 1x1 layer of
its second stage, the RGB stems) get the same rounding, after that pass (`round_conv_operands`), so
the implicit-GEMM ones run the float32 GEMM too; the blocked and Winograd convolutions keep the
precision pass's casts, which their own rules read (passes/conv_bf16_weights.py, kernels/grouping.py).

A matrix-vector product by a weight (too few rows for the GEMM: decoding, a classifier)
keeps its bf16 operands: the bf16 matrix-vector helper reads half the weight's bytes
(kernels/templates/weight_only.py), the figure that matters there. `PAIRS_WITHOUT_BF16_DOT`
sends every matmul to the pairs kernels all the same (their tests run the widening path
through graphs).
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

from .. import dtypes as dt
from ..ir.graph import Graph, Node, make_node
from ..ir.ops import Attrs
from ..ir.ops.registry import OpKind
from ..ir.rewrite import rewrite_graph, with_inputs
from ..kernels.target import cpu_target
from ..kernels.templates.matmul import panel_order_applies

PAIRS_WITHOUT_BF16_DOT = False  # a target without vdpbf16ps runs the float32 GEMM and attention

_REORDERING = ("reshape", "permute")  # what the precision pass puts between a rounding's two casts
# Rounded before these instead (the same values): a slice of one product (GPT-2's q, k and v of one
# projection) is then rounded in that product's epilogue, once, not by a kernel per slice.
_HOISTED = _REORDERING + ("slice",)


def fp32_kernels_for_bf16() -> bool:
    """Whether bf16 matmuls and attention run on the float32 templates on this target."""
    return not (cpu_target().bf16_dot or PAIRS_WITHOUT_BF16_DOT)


def narrowed_value(operand: Node) -> tuple[Node, list[Node]] | None:
    """(x, the reshapes and transposes after its narrowing, first to last) when `operand` is the
    precision pass's rounding cast(moves(cast(x, bfloat16)), float32) of a float32 x, else None."""
    if operand.op != "cast" or operand.dtype is not dt.float32:
        return None
    moves, node = [], operand.inputs[0]
    while node.op in _REORDERING and node.dtype is dt.bfloat16:
        moves.append(node)
        node = node.inputs[0]
    if node.op != "cast" or node.dtype is not dt.bfloat16 or node.inputs[0].dtype is not dt.float32:
        return None
    return node.inputs[0], moves[::-1]


def runs_on_fp32_kernels(node: Node) -> bool:
    """A float32 matmul the float32 templates compute on its rounded operands: every one but a
    matrix-vector product by a constant weight (the bf16 matrix-vector helper's)."""
    if node.op != "matmul" or node.dtype is not dt.float32:
        return False
    weight = node.inputs[1]
    return not (weight.op == "constant" and weight.ndim == 2 and panel_order_applies(node))


def round_for_fp32_kernels(graph: Graph) -> tuple[Graph, Counter]:
    """On a target without bf16 dot products, write the rounded operands of matmuls as round_bf16
    (module docstring); elsewhere the graph is returned as it is."""
    def operands(node: Node) -> range:
        fp32 = node.kind == OpKind.CONTRACTION and runs_on_fp32_kernels(node)
        return range(len(node.inputs)) if fp32 else range(0)
    return _rounding_pass(graph, operands, "operand rounded in float32 (round_bf16)")


def round_conv_operands(graph: Graph) -> tuple[Graph, Counter]:
    """On a target without bf16 dot products, write the rounded input of each `conv2d` (NCHW, after the
    layout pass) as round_bf16, for the float32 implicit GEMM (module docstring)."""
    def operands(node: Node) -> range:
        return range(1) if node.op == "conv2d" and node.dtype is dt.float32 else range(0)
    return _rounding_pass(graph, operands, "conv2d input rounded in float32 (round_bf16)")


def _rounding_pass(graph: Graph, operands: Callable[[Node], range], label: str) -> tuple[Graph, Counter]:
    """Rewrite the operands `operands(node)` of every node that are the precision pass's rounding as
    round_bf16 (`_float32_roundings`), counting them under `label`; only on a target without bf16 dots."""
    fired: Counter = Counter()
    if not fp32_kernels_for_bf16():
        return graph, fired
    plain = _float32_roundings()

    def visit(node: Node, inputs: list[Node]) -> Node:
        node = with_inputs(node, inputs)
        chosen = operands(node)
        new_inputs = [plain(x) if k in chosen else x for k, x in enumerate(node.inputs)]
        changed = sum(a is not b for a, b in zip(node.inputs, new_inputs))
        if not changed:
            return node
        fired[label] += changed
        return with_inputs(node, new_inputs)

    return rewrite_graph(graph, visit), fired


def _float32_roundings() -> Callable[[Node], Node]:
    """A function writing an operand that is the precision pass's rounding of x as round_bf16(x) (through
    the same reshapes and transposes), one round_bf16 per x; other operands are returned as they are."""
    rounded: dict[int, Node] = {}  # x id -> round_bf16(x), shared by every operand rounding x

    def plain(operand: Node) -> Node:
        found = narrowed_value(operand)
        if found is None:
            return operand
        x, moves = found
        while x.op in _HOISTED and x.inputs[0].kind != OpKind.SOURCE:  # round where x's input is computed
            moves.insert(0, x)
            x = x.inputs[0]
        if x.id not in rounded:
            rounded[x.id] = make_node("round_bf16", [x], Attrs(), x.scope, x.location)
        value = rounded[x.id]
        for move in moves:
            value = make_node(move.op, [value], move.attrs, move.scope, move.location)
        return value

    return plain


__all__ = ["PAIRS_WITHOUT_BF16_DOT", "fp32_kernels_for_bf16", "narrowed_value", "round_conv_operands",
           "round_for_fp32_kernels", "runs_on_fp32_kernels"]
