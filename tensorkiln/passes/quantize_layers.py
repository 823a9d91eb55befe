"""Post-training quantization's graph side: find the layers to quantize, expose their inputs for
calibration, and rewrite them with quantize/dequantize ops.

A quantizable layer is a float matmul whose right operand is a constant 2-D weight (a linear
layer: the weight may be a permuted constant), or a conv2d with groups 1 or depthwise (one input
and one output channel per group, as MobileNet's) and a constant filter. Other grouped
convolutions and products of two activations stay float.

The rewrite spells quantization as the ONNX importer does (importers/onnx/quant.py), so the
qdq_integer pass (qdq_integer.py) finds the result and runs the layer on the integer kernels:

    Q(x)   = cast(min(max(round(x / s) + z, lo), hi), uint8 or int8)
    DQ(q)  = (float(q) - z) * s                     the activation: one scale s, one zero z
    DQ(Wq) = float(Wq) * sw                         the weight: symmetric, sw per output channel

With dynamic activation scales, s and z are scalars computed from each call's x, as ONNX's
DynamicQuantizeLinear defines them (its range widened to hold 0, mapped onto the 256 levels); the
qdq_integer pass takes such run-time scalars as well.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import dtypes as dt
from ..ir.graph import Graph, Node, constant_node, interpret, make_node
from ..ir.ops import Attrs
from ..ir.rewrite import rewrite_graph, with_inputs
from .qdq_conv import is_depthwise_conv

_RANGES = {"uint8": (0, 255), "int8": (-128, 127)}
_WEIGHT_VIEWS = ("permute", "reshape", "cast")  # ops between a weight constant and the layer


@dataclass(frozen=True, eq=False)
class LayerQuantization:
    """How one layer is quantized: its input's scale, zero point and type, and its weight as
    int8 (matmul: (K, N); conv2d: (O, C, KH, KW)) with one scale per output channel (or one)."""

    x_scale: float
    x_zero: int
    x_dtype: str
    weight_q: np.ndarray
    weight_scale: np.ndarray  # (N,) or (O,) per channel; () per tensor
    dynamic: bool = False  # the input's scale and zero computed per call from its range (x_scale, x_zero unused)
    per_token: bool = False  # dynamic, one scale and zero per row of a matmul's input (its last axis' range)


def is_quantizable(node: Node) -> bool:
    """A float matmul by a constant 2-D weight, or a conv2d of groups 1 or depthwise (one input and one
    output channel per group: the direct int8 kernels' two forms) with a constant filter."""
    if node.op not in ("matmul", "conv2d") or node.dtype.name not in ("float32", "float64"):
        return False
    if node.op == "conv2d" and node.attrs["groups"] != 1 and not is_depthwise_conv(node):
        return False
    weight = node.inputs[1]
    return (node.op == "conv2d" or weight.ndim == 2) and weight_constant(weight) is not None


def quantizable_layers(graph: Graph) -> list[Node]:
    """The graph's quantizable layers in graph order (the order that numbers them)."""
    return [node for node in graph.nodes if is_quantizable(node)]


def weight_constant(node: Node) -> Node | None:
    """The constant a weight is read from, through permutes, reshapes and casts; None if it is
    computed from an input."""
    while node.op in _WEIGHT_VIEWS:
        node = node.inputs[0]
    return node if node.op == "constant" else None


def weight_value(layer: Node) -> np.ndarray:
    """The layer's float weight as the product reads it: (K, N) for a matmul, (O, C, KH, KW) for conv2d."""
    return interpret(Graph([], [layer.inputs[1]], "weight"))[0]


def with_extra_outputs(graph: Graph, extra: list[Node]) -> Graph:
    """The graph returning `extra` after its own outputs (calibration reads layer inputs so)."""
    return Graph(graph.inputs, list(graph.outputs) + list(extra), graph.name)


def quantize_node(x: Node, scale: float, zero: int, dtype_name: str) -> Node:
    """Q(x): x rounded onto the 8-bit grid of `scale` and `zero`, saturated, as uint8 or int8."""
    lo, hi = _RANGES[dtype_name]
    where = (x.scope, x.location)
    storage = x.dtype.storage

    def const(value) -> Node:
        return constant_node(np.array(value, storage), x.dtype, x.location)

    scaled = make_node("round", [make_node("div", [x, const(scale)], None, *where)], None, *where)
    shifted = make_node("add", [scaled, const(zero)], None, *where)
    clamped = make_node("minimum", [make_node("maximum", [shifted, const(lo)], None, *where), const(hi)],
                        None, *where)
    return make_node("cast", [clamped], Attrs(dtype=dt.as_dtype(dtype_name)), *where)


def dynamic_quantized(x: Node, dtype_name: str, per_row: bool = False) -> tuple[Node, Node, Node]:
    """(Q(x), scale, zero) with the scale and zero computed from x's range at run time:
    [min(x, 0), max(x, 0)] onto `dtype_name`'s 256 levels (DynamicQuantizeLinear's rule for uint8;
    int8 shifts the levels by 128). A constant x gets scale 1. per_row: one scale and zero per row,
    the range of each row along the last axis (shape (..., 1)); else scalars."""
    lo, hi = _RANGES[dtype_name]
    where = (x.scope, x.location)
    storage = x.dtype.storage

    def const(value) -> Node:
        return constant_node(np.array(value, storage), x.dtype, x.location)

    def op(name: str, *inputs: Node, attrs=None) -> Node:
        return make_node(name, list(inputs), attrs, *where)

    every_axis = Attrs(axes=(x.ndim - 1,), keepdims=True) if per_row else \
        Attrs(axes=tuple(range(x.ndim)), keepdims=False)
    high = op("maximum", op("reduce_max", x, attrs=every_axis), const(0.0))
    low = op("minimum", op("reduce_min", x, attrs=every_axis), const(0.0))
    span = op("sub", high, low)
    empty = op("cast", op("eq", span, const(0.0)), attrs=Attrs(dtype=x.dtype))
    scale = op("div", op("add", span, empty), const(float(hi - lo)))
    zero = op("round", op("minimum", op("maximum", op("sub", const(float(lo)), op("div", low, scale)),
                                        const(float(lo))), const(float(hi))))
    shifted = op("add", op("round", op("div", x, scale)), zero)
    clamped = op("minimum", op("maximum", shifted, const(float(lo))), const(float(hi)))
    return op("cast", clamped, attrs=Attrs(dtype=dt.as_dtype(dtype_name))), scale, zero


def dequantize_node(q: Node, scale, zero, dtype: dt.DType) -> Node:
    """DQ(q) = (float(q) - zero) * scale in `dtype`; zero None leaves the subtraction out (a symmetric weight)."""
    where = (q.scope, q.location)
    real = make_node("cast", [q], Attrs(dtype=dtype), *where)
    if zero is not None:
        zero_node = zero if isinstance(zero, Node) else constant_node(np.array(zero, dtype.storage), dtype, q.location)
        real = make_node("sub", [real, zero_node], None, *where)
    scale_node = scale if isinstance(scale, Node) else constant_node(np.asarray(scale, dtype.storage), dtype,
                                                                     q.location)
    return make_node("mul", [real, scale_node], None, *where)


def quantized_input(x: Node, plan: LayerQuantization, layer: Node) -> Node:
    """DQ(Q(x)) with the plan's activation scale and zero point (computed per call where dynamic)."""
    if plan.dynamic:
        return dequantize_node(*dynamic_quantized(x, plan.x_dtype, plan.per_token and layer.op == "matmul"), layer.dtype)
    return dequantize_node(quantize_node(x, plan.x_scale, plan.x_zero, plan.x_dtype), plan.x_scale, plan.x_zero,
                           layer.dtype)


def quantized_layer(layer: Node, x: Node, plan: LayerQuantization, x_dq: Node | None = None) -> Node:
    """The layer computed on DQ(Q(x)) (or the given x_dq) and DQ(Wq): the form qdq_integer puts on integer
    kernels."""
    dtype = layer.dtype
    if x_dq is None:
        x_dq = quantized_input(x, plan, layer)
    weight = constant_node(np.ascontiguousarray(plan.weight_q, np.int8), dt.int8, layer.location)
    scale = plan.weight_scale
    if layer.op == "conv2d" and scale.ndim == 1:
        scale = scale.reshape(-1, 1, 1, 1)  # one per output channel, broadcast over (O, C, KH, KW)
    w_dq = dequantize_node(weight, scale, None, dtype)
    return make_node(layer.op, [x_dq, w_dq], layer.attrs, layer.scope, layer.location)


def _max_pool_input(x: Node, readers: dict[int, list[Node]]) -> Node | None:
    """y where x = reduce_max(window(pad(y, -inf))) (a max pool) and each step has one reader; else None."""
    if x.op != "reduce_max" or x.inputs[0].op != "window":
        return None
    window = x.inputs[0]
    pad = window.inputs[0]
    if pad.op != "pad" or pad.attrs["value"] != float("-inf"):
        return None
    if any(len(readers.get(node.id, [])) != 1 for node in (window, pad, pad.inputs[0])):
        return None
    return pad.inputs[0]


def quantized_tensors(graph: Graph, layers: list[Node],
                      plans: dict[int, LayerQuantization]) -> dict[int, tuple[LayerQuantization, Node]]:
    """The activations quantized as tensors, by node id: (the plan whose scale they take, a layer reading them).
    `layers`: the graph's quantizable layers (quantizable_layers), which `plans` number.

    A static plan's input x is quantized once, for every op that reads it: the layer, and the others (a
    residual add reading the same activation), so that its producer can store 8-bit values, as a QDQ file's
    producers do. A layer kept in float reads x itself, and then x is quantized for the planned layers alone.
    Where x is a max pool's output, its input y is quantized instead: the pool of DQ(Q(y)) is exactly
    DQ(Q(x)) (Q and DQ never decrease, so they commute with max), and the pool then runs on 8-bit values."""
    readers = graph.users()
    kept_float = {node.id for i, node in enumerate(layers) if i not in plans}
    tensors: dict[int, tuple[LayerQuantization, Node]] = {}
    for index, layer in enumerate(layers):
        plan = plans.get(index)
        x = layer.inputs[0]
        if plan is None or plan.dynamic or x.op == "constant":
            continue
        if any(reader.id in kept_float for reader in readers.get(x.id, [])):
            continue  # read by a layer kept in float as well
        tensors.setdefault(x.id, (plan, layer))
        pooled = _max_pool_input(x, readers)
        if pooled is not None:
            tensors.setdefault(pooled.id, (plan, layer))
    return tensors


def insert_qdq(graph: Graph, plans: dict[int, LayerQuantization]) -> Graph:
    """Rewrite the layers numbered in `plans` (by quantizable_layers' order) with Q/DQ ops, and every reader of
    a statically quantized tensor (`quantized_tensors`) to read it quantized."""
    layers = quantizable_layers(graph)
    order = {node.id: i for i, node in enumerate(layers)}
    tensors = quantized_tensors(graph, layers, plans)
    quantized: dict[int, Node] = {}  # original node id -> DQ(Q(its rewritten value)), made once

    def read(original: Node, rewritten: Node) -> Node:
        if original.id not in tensors:
            return rewritten
        if original.id not in quantized:
            plan, layer = tensors[original.id]
            quantized[original.id] = quantized_input(rewritten, plan, layer)
        return quantized[original.id]

    def visit(node: Node, inputs: list[Node]) -> Node:
        index = order.get(node.id)
        if index is None or index not in plans:
            if index is not None:  # a layer kept in float reads its input in float
                return with_inputs(node, inputs)
            return with_inputs(node, [read(original, new) for original, new in zip(node.inputs, inputs)])
        plan = plans[index]
        if plan.weight_q.shape != node.inputs[1].shape:
            raise ValueError(f"quantized layer {index} ({node.op}, {node.location}) was calibrated with a weight of "
                             f"shape {plan.weight_q.shape}, but this trace's weight is {node.inputs[1].shape}")
        x = node.inputs[0]
        x_dq = read(x, inputs[0]) if x.id in tensors else None
        return quantized_layer(node, inputs[0], plan, x_dq)

    return rewrite_graph(graph, visit)
