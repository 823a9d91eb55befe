"""Integer matmuls by constant weights run on the u8 x s8 GEMM: `matmul_integer(a, W)` becomes
`matmul_u8s8(a as uint8, W's panels, compensation)`, the panels packed once, here.

`vpdpbusd` multiplies unsigned by signed bytes, so the operands are brought
to that form, exactly, with the cost folded into a per-column int32
compensation computed now:

- A int8: A + 128 is its uint8 form (a cast that wraps, then +128 that wraps:
  the byte's top bit flipped), and A @ W = (A + 128) @ W - 128 * colsum(W);
- W uint8 whose values are all at most 127 is the same matrix as int8; a
  uint8 W with larger values is left to the plain integer loop nest
  (kernels/templates/matmul_integer.py).

Zero points are not this pass's business: the importers subtract them as
ops around matmul_integer, which constant folding turns into a column-sum
vector the epilogue subtracts (weights' zero points then cost nothing at run
time either).
"""
from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np

from .. import dtypes as dt
from ..ir.graph import Graph, Node, constant_node, make_node
from ..ir.ops import Attrs
from ..ir.ops.quantized import pack_u8s8_panels
from ..ir.ops.registry import ConstantValue, TensorType
from ..ir.rewrite import rewrite_graph, with_inputs
from .pattern import constant_array

SIGNED_SHIFT = 128  # int8 -> uint8: x + 128


def pack_int8_weights(graph: Graph) -> tuple[Graph, Counter]:
    """Replace each matmul_integer by a constant int8-representable matrix with matmul_u8s8."""
    fired: Counter = Counter()

    def visit(node: Node, inputs: list[Node]) -> Node:
        node = with_inputs(node, inputs)
        if node.op != "matmul_integer" or node.inputs[1].op != "constant":
            return node
        a, b = node.inputs
        weights = constant_array(b)
        if weights.dtype == np.uint8 and weights.size and int(weights.max()) > 127:
            fired["matmul_integer kept (uint8 weights above 127)"] += 1
            return node
        weights = weights.astype(np.int8)
        column_sums = weights.astype(np.int64).sum(axis=0)
        if a.dtype.name == "int8":
            compensation = (-SIGNED_SHIFT * column_sums).astype(np.int32)
            a = make_node("cast", [a], Attrs(dtype=dt.uint8), node.scope, node.location)
            shift = constant_node(np.array(SIGNED_SHIFT, dtype=np.uint8), dt.uint8, node.location)
            a = make_node("add", [a, shift], None, node.scope, node.location)
        else:
            compensation = np.zeros(weights.shape[1], dtype=np.int32)
        fired["matmul_integer -> matmul_u8s8"] += 1
        return make_node("matmul_u8s8", [a, _panels_node(b, weights), constant_node(compensation, dt.int32)],
                         Attrs(n=int(weights.shape[1])), node.scope, node.location)

    return rewrite_graph(graph, visit), fired


def _panels_node(b: Node, weights: np.ndarray) -> Node:
    """A constant node of W's u8 x s8 panels; its digest derived from W's (packing is a fixed function)."""
    digest = hashlib.sha1(f"u8s8 panels of {b.attrs['value'].digest}".encode()).hexdigest()
    value = ConstantValue(pack_u8s8_panels(weights), digest)
    ttype = TensorType(tuple(value.array.shape), dt.int8)
    return Node("constant", (), Attrs(value=value, type=ttype), ttype, (), b.location)
