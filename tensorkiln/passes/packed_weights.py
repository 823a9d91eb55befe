"""Packed GEMM weights: a matmul by a constant matrix becomes `matmul_packed(x, panels)` with
B's micro-panels laid out here, once (ir/ops/gemm_panels.py).

The GEMM otherwise copies B into micro-panels on every call: for a linear
layer at batch 64 (784 x 512 weights) that copy is ~15% of the kernel,
since each weight is used only 64 times per call. With the panels given, the
micro-kernel reads them in place. Matmuls that the GEMM rule
(`blis_gemm_applies` in kernels/templates/matmul.py) runs as BLIS are packed,
and so are the matrix-vector products below it (`panel_order_applies`),
which then stream B panel by panel; the panel width NR is the one the GEMM
uses on this machine, so both share one packed copy. With precision="bf16" both
kinds get the bf16 pairs (`matmul_bf16_packed`): the GEMM's, or the
matrix-vector helper's (kernels/templates/weight_only.py).

Panels of one weight are shared by every graph compiled from it in this
process (prefill and decode graphs of one model, or each batch size): they
are kept by the weight's digest for as long as some graph holds them.
"""
from __future__ import annotations

import hashlib
import weakref
from collections import Counter

from ..ir.graph import Graph, Node, make_node
from ..ir.ops import Attrs
from .. import dtypes as dt
from ..ir.ops.gemm_panels import pack_bf16_pairs, pack_panels
from ..ir.ops.registry import ConstantValue, TensorType
from ..ir.rewrite import rewrite_graph, with_inputs
from ..kernels.templates.gemm import analytic_gemm_blocking
from ..kernels.templates.gemm_bf16 import holds_bf16_values
from ..kernels.templates.matmul import blis_gemm_applies, panel_order_applies
from ..loops.types import compute_dtype

_PANELS: "weakref.WeakValueDictionary[tuple[str, int], ConstantValue]" = weakref.WeakValueDictionary()


def pack_matmul_weights(graph: Graph) -> tuple[Graph, Counter]:
    """Replace each matmul by a constant 2-D matrix that runs as a BLIS GEMM or in panel order by
    matmul_packed."""
    fired: Counter = Counter()

    def visit(node: Node, inputs: list[Node]) -> Node:
        node = with_inputs(node, inputs)
        if node.op != "matmul" or node.inputs[1].op != "constant" or node.inputs[1].ndim != 2:
            return node
        dtype = compute_dtype(node.dtype.name)
        if dtype != node.dtype.name or not (blis_gemm_applies(node, dtype) or panel_order_applies(node)):
            return node
        a, b = node.inputs
        k, n = b.shape
        nr = analytic_gemm_blocking(max(node.type.size // n, 1), n, k, dtype).nr  # tuning keeps a panel's tile
        if a.op == "cast" and holds_bf16_values(a) and holds_bf16_values(b):  # a widening from bf16
            # precision="bf16": half the bytes, packed once; the GEMM's pairs, or (too few rows for the
            # GEMM) the same pairs read by the matrix-vector helper, whose vectors hold 16 columns
            fired["matmul -> matmul_bf16_packed"] += 1
            pairs_nr = nr if blis_gemm_applies(node, dtype) or nr % 16 == 0 else 16
            return make_node("matmul_bf16_packed", [a, _bf16_pairs_node(b, pairs_nr)], Attrs(n=n, k=k), node.scope,
                             node.location)
        fired["matmul -> matmul_packed"] += 1
        return make_node("matmul_packed", [a, _panels_node(b, nr)], Attrs(n=n), node.scope, node.location)

    return rewrite_graph(graph, visit), fired


def _bf16_pairs_node(b: Node, nr: int) -> Node:
    """A bfloat16 constant of b's bf16 pairs (gemm_panels.pack_bf16_pairs), shared like `_panels_node`'s."""
    source = b.attrs["value"].digest
    value = _PANELS.get((source, -nr))
    if value is None:
        digest = hashlib.sha1(f"gemm bf16 pairs {nr} of {source}".encode()).hexdigest()
        value = ConstantValue(pack_bf16_pairs(b.attrs["value"].array, nr), digest)
        _PANELS[(source, -nr)] = value
    ttype = TensorType(tuple(value.array.shape), dt.bfloat16)
    return Node("constant", (), Attrs(value=value, type=ttype), ttype, (), b.location)


def _panels_node(b: Node, nr: int) -> Node:
    """A constant node of b's panels, shared with earlier graphs that packed the same weight.

    Its digest is derived from b's (packing is a fixed function of B and NR), so the
    panels of a large model are not hashed again for the compiled-graph cache.
    """
    source = b.attrs["value"].digest
    value = _PANELS.get((source, nr))
    if value is None:
        digest = hashlib.sha1(f"gemm panels {nr} of {source}".encode()).hexdigest()
        value = ConstantValue(pack_panels(b.attrs["value"].array, nr), digest)
        _PANELS[(source, nr)] = value
    ttype = TensorType(tuple(value.array.shape), b.dtype)
    return Node("constant", (), Attrs(value=value, type=ttype), ttype, (), b.location)
