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

from .. import dtypes as dt
from ..ir.graph import Graph, Node, make_node
from ..ir.ops import Attrs
from ..ir.ops.registry import ConstantValue, TensorType
from ..ir.ops.weight_only import (INT4_OFFSET, grid_group, int4_offset_groups, pack_weight_only, pack_zero_points,
                                  quantize_groups)
from ..ir.rewrite import rewrite_graph, with_inputs

DEFAULT_INT4_GROUP = 32  # llama.cpp's Q4_0 block
MIN_WEIGHTS = 4096  # elements of the smallest weight worth quantizing (packed_weights.PANEL_MIN_WEIGHTS too)
_SPEC = re.compile(r"^int(8|4)w(?:-g([1-9][0-9]*))?$")
_QUANTIZED: "weakref.WeakValueDictionary[tuple, ConstantValue]" = weakref.WeakValueDictionary()
_SYMMETRIC: set[tuple] = set()  # (weight digest, bits, group) quantized with no zero points


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
        panels, scales, zeros = _quantized_nodes(b, spec.bits, group)
        operands = [a, panels, scales] + ([] if zeros is None else [zeros])
        # zero points: an asymmetric int4 grid (ONNX MatMulNBits blocks), held as the kernel's zero points
        fired[f"matmul -> {spec.op}" + ("" if zeros is None else " with zero points")] += 1
        return make_node(spec.op, operands, Attrs(n=n, k=k, group=group), node.scope, node.location)

    return rewrite_graph(graph, visit), fired


def _quantized_nodes(b: Node, bits: int, group: int) -> tuple[Node, Node, Node | None]:
    """Constant nodes of b's integer panels, scale panels and (an asymmetric int4 grid, else None) the
    blocks' zero points, shared with earlier graphs of the same weight.

    Their digests derive from b's (quantizing is a fixed function of the weight, bits and group), so a
    large model's weights are not hashed again for the compiled-graph cache.
    """
    source = b.attrs["value"].digest
    keys = [(source, bits, group, part) for part in ("q", "scales", "zeros")]
    values = [_QUANTIZED.get(key) for key in keys]
    plain = (source, bits, group) in _SYMMETRIC
    if values[0] is None or values[1] is None or (values[2] is None and not plain):
        weight = b.attrs["value"].array
        offsets = int4_offset_groups(weight, group) if bits == 4 else None
        q, scales = quantize_groups(weight, bits, group) if offsets is None else offsets[:2]
        arrays = [*pack_weight_only(q, scales, bits, group),
                  None if offsets is None else pack_zero_points(INT4_OFFSET - offsets[2])]
        values = [None if array is None else
                  ConstantValue(array, hashlib.sha1(f"int{bits}w {part} g{group} of {source}".encode()).hexdigest())
                  for array, (_, _, _, part) in zip(arrays, keys)]
        for key, value in zip(keys, values):
            if value is not None:
                _QUANTIZED[key] = value
        if offsets is None:
            _SYMMETRIC.add((source, bits, group))
    nodes = []
    for value in values:
        if value is None:
            nodes.append(None)
            continue
        ttype = TensorType(tuple(value.array.shape), dt.from_numpy_dtype(value.array.dtype))
        nodes.append(Node("constant", (), Attrs(value=value, type=ttype), ttype, (), b.location))
    return nodes[0], nodes[1], nodes[2]
