"""Weight-only quantization: with precision="int8w" or "int4w", each matmul by a constant float32
(K, N) weight becomes `matmul_int8w` / `matmul_int4w` (ir/ops/weight_only.py), its weight quantized
here, once, at compile time; the activations stay float32.

The precision string names the scheme: "int8w" (one scale per output column, unless a group size
is given), "int4w" (groups of DEFAULT_INT4_GROUP depths), and either with "-g<size>" for groups
of that many depths along K ("int4w-g128", "int8w-g64"). A weight smaller than
MIN_WEIGHTS elements stays float32: reading it costs nothing next to the model's large layers.

The quantized panels of one weight are shared by every graph compiled from it in this process
(a model's prefill and decode step), as the float panels are (packed_weights.py).
"""
from __future__ import annotations

import hashlib
import re
import weakref
from collections import Counter
from dataclasses import dataclass

import numpy as np

from .. import dtypes as dt
from ..ir.graph import Graph, Node, constant_node, make_node
from ..ir.ops import Attrs
from ..ir.ops.registry import ConstantValue, TensorType
from ..ir.ops.weight_only import grid_group, int4_offset_groups, pack_weight_only, quantize_groups
from ..ir.rewrite import rewrite_graph, with_inputs

DEFAULT_INT4_GROUP = 32  # llama.cpp's Q4_0 block
MIN_WEIGHTS = 4096  # elements of the smallest weight worth quantizing (packed_weights.PANEL_MIN_WEIGHTS too)
_SPEC = re.compile(r"^int(8|4)w(?:-g([1-9][0-9]*))?$")
_QUANTIZED: "weakref.WeakValueDictionary[tuple, ConstantValue]" = weakref.WeakValueDictionary()


@dataclass(frozen=True)
class WeightOnlySpec:
    """How weights are quantized: bits (8 or 4) and group size along K (None: one group per column)."""

    bits: int
    group: int | None

    @property
    def op(self) -> str:
        return f"matmul_int{self.bits}w"


def weight_only_spec(precision: str) -> WeightOnlySpec | None:
    """The scheme a precision string names, or None for a precision that is not weight-only."""
    match = _SPEC.match(precision) if isinstance(precision, str) else None
    if match is None:
        return None
    bits = int(match.group(1))
    group = int(match.group(2)) if match.group(2) else (DEFAULT_INT4_GROUP if bits == 4 else None)
    return WeightOnlySpec(bits, group)


def quantize_matmul_weights(graph: Graph, spec: WeightOnlySpec) -> tuple[Graph, Counter]:
    """Replace each float32 matmul by a constant 2-D weight of at least MIN_WEIGHTS elements."""
    fired: Counter = Counter()

    def visit(node: Node, inputs: list[Node]) -> Node:
        node = with_inputs(node, inputs)
        if node.op != "matmul" or node.inputs[1].op != "constant" or node.inputs[1].ndim != 2:
            return node
        a, b = node.inputs
        k, n = b.shape
        if node.dtype.name != "float32" or a.dtype.name != "float32" or b.dtype.name != "float32" or \
                k * n < MIN_WEIGHTS:
            return node
        # no group asked for (int8w): per column, unless the weight is a stored grid of blocks (an ONNX
        # MatMulNBits weight), whose blocks then keep their integers and scales
        group = min(spec.group or grid_group(b.attrs["value"].array, -127, 127) or k, k)
        offsets = int4_offset_groups(b.attrs["value"].array, group) if spec.bits == 4 else None
        if offsets is not None:  # an asymmetric int4 grid: q in [-8, 7] plus each group's offset
            fired[f"matmul -> {spec.op} + group offsets"] += 1
            return _with_offsets(node, a, *offsets, group)
        panels, scales = _quantized_nodes(b, spec.bits, group)
        fired[f"matmul -> {spec.op}"] += 1
        return make_node(spec.op, [a, panels, scales], Attrs(n=n, k=k, group=group), node.scope, node.location)

    return rewrite_graph(graph, visit), fired


def _with_offsets(node: Node, a: Node, q: np.ndarray, scales: np.ndarray, offsets: np.ndarray, group: int) -> Node:
    """a @ W for W = (q + offset) * scale per group: matmul_int4w by (q, scales) plus the offsets' share,
    sum over groups g of (the sum of a's depths in g) * offset[g] * scale[g], a matmul by a (G, N) constant."""
    k, n = q.shape
    where = (node.scope, node.location)
    arrays = pack_weight_only(q, scales, 4, group)
    panels, scale_panels = (constant_node(x, dt.from_numpy_dtype(x.dtype), node.location) for x in arrays)
    product = make_node("matmul_int4w", [a, panels, scale_panels], Attrs(n=n, k=k, group=group), *where)
    groups = offsets.shape[0]
    sums = a
    if groups * group != k:  # the last group's missing depths add nothing
        pads = ((0, 0),) * (a.ndim - 1) + ((0, groups * group - k),)
        sums = make_node("pad", [sums], Attrs(pads=pads, value=0.0), *where)
    sums = make_node("reshape", [sums], Attrs(shape=a.shape[:-1] + (groups, group)), *where)
    sums = make_node("reduce_sum", [sums], Attrs(axes=(a.ndim,), keepdims=False), *where)
    shares = constant_node((offsets * scales).astype(np.float32), dt.float32, node.location)
    return make_node("add", [product, make_node("matmul", [sums, shares], None, *where)], None, *where)


def _quantized_nodes(b: Node, bits: int, group: int) -> tuple[Node, Node]:
    """Constant nodes of b's integer panels and scale panels, shared with earlier graphs of the same weight.

    Their digests derive from b's (quantizing is a fixed function of the weight, bits and group), so a
    large model's weights are not hashed again for the compiled-graph cache.
    """
    source = b.attrs["value"].digest
    keys = [(source, bits, group, part) for part in ("q", "scales")]
    values = [_QUANTIZED.get(key) for key in keys]
    if any(v is None for v in values):
        q, scales = quantize_groups(b.attrs["value"].array, bits, group)
        arrays = pack_weight_only(q, scales, bits, group)
        values = [ConstantValue(array, hashlib.sha1(f"int{bits}w {part} g{group} of {source}".encode()).hexdigest())
                  for array, (_, _, _, part) in zip(arrays, keys)]
        for key, value in zip(keys, values):
            _QUANTIZED[key] = value
    nodes = []
    for value in values:
        ttype = TensorType(tuple(value.array.shape), dt.from_numpy_dtype(value.array.dtype))
        nodes.append(Node("constant", (), Attrs(value=value, type=ttype), ttype, (), b.location))
    return nodes[0], nodes[1]
