"""The precision rule: which ops compute with bf16 operands when compiling with precision="bf16".

The rule, stated once (docs/precision.md explains it):

- Contractions, the ops of kind CONTRACTION in the op table (matmul and conv2d,
  and so the linear layers, batched matmuls, convolutions and the two products
  of attention), take their float32 operands rounded to bfloat16 (nearest
  even) and accumulate in float32. Their result is float32.
- Every other op computes in float32 as written: elementwise ops, reductions
  (softmax's and layer norm's statistics, sums, means, norms), losses, and the
  epilogues fused into a contraction (bias, activation, residual).
- The probabilities of an attention (softmax(q k^T) @ v) stay float32: they
  are a softmax output, and the fused attention kernel computes them inside
  itself, so only q, k and v are rounded.
- float64 operands are left as they are.

Rounding is written into the graph, so the reference interpreter computes
exactly what the compiled code does and stays the oracle: a constant operand
(a weight) is rounded here, once, at compile time; any other operand x becomes
cast(cast(x, bfloat16), float32), which the kernels compute while they read or
pack it (kernels/templates/gemm_bf16.py packs it as bf16 bits for `vdpbf16ps`).
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from .. import dtypes as dt
from ..ir.graph import Graph, Node, constant_node, make_node
from ..ir.ops import Attrs
from ..ir.ops.registry import OpKind
from ..ir.rewrite import rewrite_graph, with_inputs
from ..kernels.templates.attention_match import attention_parts
from ..kernels.templates.gemm_bf16 import holds_bf16_values, is_bf16_rounding


_REORDERING = ("reshape", "permute")  # movement ops that keep every element: a rounding commutes with them


def computes_in_bf16(node: Node) -> bool:
    """True for the ops the rule gives bf16 operands: float32 contractions."""
    return node.kind == OpKind.CONTRACTION and node.dtype is dt.float32


def rounded_operands(node: Node) -> tuple[int, ...]:
    """Positions of `node`'s operands that the rule rounds to bf16 (attention keeps its probabilities)."""
    if not computes_in_bf16(node):
        return ()
    if node.op == "matmul" and attention_parts(node) is not None:
        return (1,)  # P @ V of an attention: only V
    return tuple(range(len(node.inputs)))


def round_to_bf16(graph: Graph) -> tuple[Graph, Counter]:
    """Round the operands of the contractions to bfloat16 as the rule above says."""
    fired: Counter = Counter()
    rounded: dict[int, Node] = {}  # operand id -> its rounding, shared by every contraction reading it

    def rounding(x: Node) -> Node:
        if x.op == "constant" and x.dtype is dt.float32:
            fired["weight rounded to bf16"] += 1
            value = dt.f32_from_bf16_bits(dt.bf16_bits_from_f32(np.asarray(x.attrs["value"].array)))
            return constant_node(value, dt.float32, x.location)
        if holds_bf16_values(x) or x.dtype is not dt.float32:
            return x
        fired["operand rounded to bf16"] += 1
        # Round before the reshapes and transposes that lead to the operand (the same values): the
        # kernel computing their input (a linear layer's epilogue) can then store the bf16 value.
        moves = []
        while x.op in _REORDERING and x.inputs[0].kind != OpKind.SOURCE:
            moves.append(x)
            x = x.inputs[0]
        narrow = make_node("cast", [x], Attrs(dtype=dt.bfloat16), x.scope, x.location)
        for move in reversed(moves):
            narrow = make_node(move.op, [narrow], move.attrs, move.scope, move.location)
        return make_node("cast", [narrow], Attrs(dtype=dt.float32), narrow.scope, narrow.location)

    def visit(node: Node, inputs: list[Node]) -> Node:
        node = with_inputs(node, inputs)
        positions = rounded_operands(node)
        if not positions:
            return node
        new_inputs = list(node.inputs)
        for p in positions:
            x = node.inputs[p]
            if x.id not in rounded:
                rounded[x.id] = rounding(x)
            new_inputs[p] = rounded[x.id]
        return with_inputs(node, new_inputs)

    return rewrite_graph(graph, visit), fired


__all__ = ["computes_in_bf16", "is_bf16_rounding", "round_to_bf16", "rounded_operands"]
