"""Quantized matmuls and convolutions run on integers: matmul(DQ(x_q), DQ(W_q)) becomes
scale * float(matmul_integer(x_q, W_q) - c), and conv2d(DQ(x_q), DQ(W_q)) a direct integer convolution.

A QDQ model (ONNX Runtime's `quantize_static` / `quantize_dynamic` in QDQ
form) keeps its quantized tensors as int8/uint8 and dequantizes them right
before each MatMul, Gemm or Conv; the importer writes DequantizeLinear as
`(float(q) - zero) * scale`, and ConvInteger / QLinearConv / MatMulInteger of
other forms as products of `float(q) - zero` (importers/onnx/quant.py). With
a per-tensor activation scale sx and zero zx, and a constant weight W_q with
one scale sw per output column or channel (or one in all) and zero zw:

    (float(x_q) - zx) sx @ (float(W_q) - zw) sw
        = float(x_q @ (W_q - zw) - zx * colsum(W_q - zw)) * sx sw

so the product is exact in int32 on matmul_integer (and then the u8 x s8
GEMM: int8_weights.py), the column-sum term and the scales are constants
folded now, and the rest is an epilogue; a QuantizeLinear after it fuses as
well. A convolution (groups 1 or depthwise) is the same sum over the windows
of x_q padded with zx, whose padding then contributes nothing, as zeros do to
the float convolution: it runs as a direct convolution on uint8 channels-last
activations (qdq_conv.py), no window copied. This pass runs before constant
folding, which would otherwise turn DQ(W_q) into a float weight and lose the
integers.

A matmul's activation may also have one zero and scale per row, computed at
run time (per-token dynamic quantization, shape (..., M, 1)): zx colsum(W) and
sx then broadcast over the row in the same epilogue.

Left as they are: a weight zero that takes W_q - zw out of int8's range, a
per-row weight scale, a per-channel activation scale, a non-constant weight,
grouped convolutions other than depthwise ones.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from .. import dtypes as dt
from ..ir.graph import Graph, Node, constant_node, make_node
from ..ir.ops import Attrs
from ..ir.rewrite import rewrite_graph, with_inputs
from .pattern import constant_array
from .qdq_conv import direct_conv_applies, direct_conv_op, direct_integer_conv

EIGHT_BIT = ("int8", "uint8")


def integer_qdq_products(graph: Graph) -> tuple[Graph, Counter]:
    """Rewrite each matmul and conv2d of dequantized 8-bit operands (the weight a constant) on matmul_integer."""
    fired: Counter = Counter()

    def visit(node: Node, inputs: list[Node]) -> Node:
        node = with_inputs(node, inputs)
        if node.op not in ("matmul", "conv2d") or node.dtype.name not in ("float32", "float64"):
            return node
        x = dequantized(node.inputs[0], runtime=True)
        if x is None or not (_scalar(x[1]) and _scalar(x[2]) or node.op == "matmul" and _per_row(x)):
            return node  # the activation needs one zero and one scale (known, or computed: dynamic), or a
            # matmul's one per row computed at run time (per-token): each factors out of its row's sums
        if node.op == "matmul":
            w = _dequantized_weight(node.inputs[1]) if node.inputs[1].ndim == 2 else None
            if w is None or w[0].shape[0] != x[0].shape[-1]:
                return node
            fired["matmul(DQ, DQ) -> matmul_integer"] += 1
            return _integer_product(node, x[0], x, w)
        w = _dequantized_filter(node.inputs[1]) if direct_conv_applies(node) else None
        if w is None:
            return node
        fired[f"conv2d(DQ, DQ) -> {direct_conv_op(node)}"] += 1
        xq, x_zero = _as_uint8(x[0], x[1], (node.scope, node.location)) if x[0].dtype.name == "int8" else x[:2]
        return direct_integer_conv(node, xq, x_zero, x[2], *w)

    return rewrite_graph(graph, visit), fired


def _integer_product(node: Node, columns: Node, x, w) -> Node:
    """float(columns @ W - zx colsum(W)) * sx sw, in node's dtype: columns (..., K) int8/uint8, W (K, N).
    zx and sx are constants, or scalars computed at run time (dynamic quantization)."""
    (_, x_zero, x_scale), (weights, w_scale) = x, w
    where = (node.scope, node.location)
    acc = make_node("matmul_integer", [columns, constant_node(weights, dt.int8, node.location)], None, *where)
    column_sums = weights.astype(np.int64).sum(axis=0)
    if isinstance(x_zero, Node):
        zero = make_node("cast", [x_zero], Attrs(dtype=dt.int32), *where)
        term = make_node("mul", [zero, constant_node(column_sums.astype(np.int32), dt.int32, node.location)],
                         None, *where)
        acc = make_node("sub", [acc, term], None, *where)
    elif int(np.rint(x_zero.reshape(-1)[0])):
        column_term = (int(np.rint(x_zero.reshape(-1)[0])) * column_sums).astype(np.int32)
        acc = make_node("sub", [acc, constant_node(column_term, dt.int32, node.location)], None, *where)
    storage = node.dtype.storage
    w_scale = w_scale.astype(storage).reshape(-1)
    w_scale = w_scale.reshape(()) if w_scale.size == 1 else w_scale
    if isinstance(x_scale, Node):
        x_scale = x_scale if x_scale.dtype == node.dtype else \
            make_node("cast", [x_scale], Attrs(dtype=node.dtype), *where)
        scale = make_node("mul", [x_scale, constant_node(w_scale, node.dtype, node.location)], None, *where)
    else:
        scale = constant_node((x_scale.reshape(-1)[0].astype(storage) * w_scale).astype(storage), node.dtype,
                              node.location)
    real = make_node("cast", [acc], Attrs(dtype=node.dtype), *where)
    return make_node("mul", [real, scale], None, *where)


def _as_uint8(xq: Node, zero, where) -> tuple[Node, object]:
    """int8 x_q and its zero point shifted by +128 into uint8 (a wrapping cast and add: exact)."""
    shift = constant_node(np.array(128, np.uint8), dt.uint8, where[1])
    shifted = make_node("add", [make_node("cast", [xq], Attrs(dtype=dt.uint8), *where), shift], None, *where)
    if isinstance(zero, Node):
        return shifted, make_node("add", [zero, constant_node(np.array(128, zero.dtype.storage), zero.dtype,
                                                                 where[1])], None, *where)
    return shifted, zero.astype(np.float64) + 128


def _scalar(value) -> bool:
    return value.ndim == 0 if isinstance(value, Node) else value.size == 1


def _per_row(x: tuple[Node, object, object]) -> bool:
    """Zero and scale computed at run time, one per row of q (shape q.shape[:-1] + (1,)), or scalars."""
    q, zero, scale = x
    row = tuple(q.shape[:-1]) + (1,)
    return all(isinstance(v, Node) and (v.ndim == 0 or tuple(v.shape) == row) for v in (zero, scale))


def dequantized(node: Node, runtime: bool = False) -> tuple[Node, object, object] | None:
    """(q, zero, scale) of node = (float(q) - zero) * scale with q 8-bit and the zero and scale known
    constants (no zero: 0; no scale: 1, an integer product's operand); None for anything else.
    runtime=True: a zero or scale that is not known may be a node computed at run time, a scalar or
    one per row (shape (..., 1)); the caller checks its shape against q's."""
    def value(n: Node):
        found = known(n)
        runtime_value = runtime and n.dtype.is_floating and (n.ndim == 0 or n.shape[-1] == 1)
        return n if found is None and runtime_value else found

    one = np.ones((), node.dtype.storage)
    pairs = list(zip(node.inputs, node.inputs[::-1])) if node.op == "mul" else []
    for shifted, scale in [(a, value(b)) for a, b in pairs] + [(node, one)]:
        if scale is None:
            continue
        zero = np.zeros((), np.float32)
        if shifted.op == "sub":
            shifted, zero = shifted.inputs[0], value(shifted.inputs[1])
        if zero is None or shifted.op != "cast" or shifted.inputs[0].dtype.name not in EIGHT_BIT:
            continue
        return shifted.inputs[0], zero, scale
    return None


def _dequantized_weight(node: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """(W_q - zw as int8, its scale) of a dequantized constant weight, perhaps transposed (Gemm's transB).

    The zero point, whatever its layout, is subtracted into the integers here; the scale must be one
    per column of the product (or one in all) to factor out of the sums.
    """
    transposed = node.op == "permute" and tuple(node.attrs["perm"]) == (1, 0)
    found = dequantized(node.inputs[0] if transposed else node)
    if found is None or found[0].op != "constant" or found[0].ndim != 2:
        return None
    q, zero, scale = found
    rows, cols = q.shape
    if np.broadcast_shapes(zero.shape, q.shape) != q.shape:
        return None
    shifted = constant_array(q).astype(np.int64) - np.rint(zero).astype(np.int64)
    if shifted.size and (shifted.min() < -128 or shifted.max() > 127):
        return None
    if transposed:  # W_q is stored (N, K): a scale per row of it is one per column of the product
        if scale.size != 1 and scale.shape != (rows, 1):
            return None
        shifted = shifted.T
    elif scale.size != 1 and scale.shape not in ((cols,), (1, cols)):
        return None
    return np.ascontiguousarray(shifted.astype(np.int8)), scale.reshape(-1)


def _dequantized_filter(node: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """(W_q - zw as an int8 (C*KH*KW, O) matrix, its scale per output channel) of a dequantized
    constant conv2d filter (O, C, KH, KW)."""
    found = dequantized(node)
    if found is None or found[0].op != "constant":
        return None
    q, zero, scale = found
    o = q.shape[0]
    if np.broadcast_shapes(zero.shape, q.shape) != q.shape or \
            scale.size != 1 and scale.shape not in ((o,), (o, 1, 1, 1)):
        return None
    shifted = constant_array(q).astype(np.int64) - np.rint(zero).astype(np.int64)
    if shifted.size and (shifted.min() < -128 or shifted.max() > 127):
        return None
    return np.ascontiguousarray(shifted.reshape(o, -1).T.astype(np.int8)), scale.reshape(-1)


def known(node: Node) -> np.ndarray | None:
    """The value of a constant, or of casts and reshapes of one (the importer's `zero.to(float32)`,
    a scalar scale's reshape), else None."""
    if node.op == "constant":
        return constant_array(node)
    if node.op in ("cast", "reshape"):
        inner = known(node.inputs[0])
        if inner is None:
            return None
        if node.op == "reshape":
            return inner.reshape(node.shape)
        return dt.to_compute(dt.to_storage(inner, node.dtype), node.dtype)
    return None
