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
from ..ir.graph import Graph, Node, make_node
from ..ir.ops import Attrs
from ..ir.ops.registry import ConstantValue, TensorType
from ..ir.ops.weight_only import grid_group, int4_offset_groups, pack_weight_only, quantize_groups
from ..ir.rewrite import rewrite_graph, with_inputs

DEFAULT_INT4_GROUP = 32  # llama.cpp's Q4_0 block
MIN_WEIGHTS = 4096  # elements of the smallest weight worth quantizing (packed_weights.PANEL_MIN_WEIGHTS too)
_SPEC = re.compile(r"^int(8|4)w(?:-g([1-9][0-9]*))?$")
_QUANTIZED: "weakref.WeakValueDictionary[tuple, ConstantValue]" = weakref.WeakValueDictionary()
_WITHOUT_SHARES: set[tuple] = set()  # (weight digest, bits, group) quantized with no group offsets


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
        panels, scales, shares = _quantized_nodes(b, spec.bits, group)
        product = make_node(spec.op, [a, panels, scales], Attrs(n=n, k=k, group=group), node.scope, node.location)
        if shares is None:
            fired[f"matmul -> {spec.op}"] += 1
            return product
        fired[f"matmul -> {spec.op} + group offsets"] += 1  # an asymmetric int4 grid
        return _plus_offsets(product, a, shares, group)

    return rewrite_graph(graph, visit), fired


def _plus_offsets(product: Node, a: Node, shares: Node, group: int) -> Node:
    """product + the offsets' share of a @ W for W = (q + offset) * scale per group: the sum over groups g of
    (the sum of a's depths in g) * offset[g] * scale[g], a matmul by the (G, N) constant `shares`."""
    k = a.shape[-1]
    where = (product.scope, product.location)
    groups = shares.shape[0]
    sums = a
    if groups * group != k:  # the last group's missing depths add nothing
        pads = ((0, 0),) * (a.ndim - 1) + ((0, groups * group - k),)
        sums = make_node("pad", [sums], Attrs(pads=pads, value=0.0), *where)
    sums = make_node("reshape", [sums], Attrs(shape=a.shape[:-1] + (groups, group)), *where)
    sums = make_node("reduce_sum", [sums], Attrs(axes=(a.ndim,), keepdims=False), *where)
    return make_node("add", [product, make_node("matmul", [sums, shares], None, *where)], None, *where)


def _quantized_nodes(b: Node, bits: int, group: int) -> tuple[Node, Node, Node | None]:
    """Constant nodes of b's integer panels, scale panels and (an asymmetric int4 grid, else None) the
    offsets' shares, shared with earlier graphs of the same weight.

    Their digests derive from b's (quantizing is a fixed function of the weight, bits and group), so a
    large model's weights are not hashed again for the compiled-graph cache.
    """
    source = b.attrs["value"].digest
    keys = [(source, bits, group, part) for part in ("q", "scales", "shares")]
    values = [_QUANTIZED.get(key) for key in keys]
    plain = (source, bits, group) in _WITHOUT_SHARES
    if values[0] is None or values[1] is None or (values[2] is None and not plain):
        weight = b.attrs["value"].array
        offsets = int4_offset_groups(weight, group) if bits == 4 else None
        q, scales = quantize_groups(weight, bits, group) if offsets is None else offsets[:2]
        arrays = [*pack_weight_only(q, scales, bits, group),
                  None if offsets is None else (offsets[2] * offsets[1]).astype(np.float32)]
        values = [None if array is None else
                  ConstantValue(array, hashlib.sha1(f"int{bits}w {part} g{group} of {source}".encode()).hexdigest())
                  for array, (_, _, _, part) in zip(arrays, keys)]
        for key, value in zip(keys, values):
            if value is not None:
                _QUANTIZED[key] = value
        if offsets is None:
            _WITHOUT_SHARES.add((source, bits, group))
    nodes = []
    for value in values:
        if value is None:
            nodes.append(None)
            continue
        ttype = TensorType(tuple(value.array.shape), dt.from_numpy_dtype(value.array.dtype))
        nodes.append(Node("constant", (), Attrs(value=value, type=ttype), ttype, (), b.location))
    return nodes[0], nodes[1], nodes[2]
