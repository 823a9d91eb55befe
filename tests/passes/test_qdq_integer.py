"""The qdq_integer pass: DequantizeLinear -> MatMul / Conv on integers, exact where it applies, and
the cases it must leave in float left there."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import tensorkiln as tk  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def _qdq_matmul_model(x_shape, weights, w_scale, w_zero, w_axis=1):
    """y = Q(DQ(Q(x)) @ DQ(W)): uint8 activations (scale 0.05, zero 7), output scale 0.1, zero 3."""
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "sx"), numpy_helper.from_array(np.uint8(7), "zx"),
             numpy_helper.from_array(weights, "wq"), numpy_helper.from_array(w_scale, "sw"),
             numpy_helper.from_array(w_zero, "zw"), numpy_helper.from_array(np.array(0.1, np.float32), "sy"),
             numpy_helper.from_array(np.uint8(3), "zy")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], axis=w_axis),
             helper.make_node("MatMul", ["xd", "wd"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "sy", "zy"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _run(model, x):
    module = tk.onnx.load(model)
    got = module(x=x)
    ops = [n.op for n in module.optimized_graph(x=x).nodes]
    return (got[0] if isinstance(got, (list, tuple)) else got), ops


@pytest.mark.parametrize("x_shape, n", [((1, 1), 1), ((3, 5), 33), ((2, 4, 17), 8), ((1, 64), 70)])
def test_qdq_matmul_is_exact_on_integers(x_shape, n):
    rng = np.random.default_rng(sum(x_shape) + n)
    k = x_shape[-1]
    weights = rng.integers(-128, 128, (k, n)).astype(np.int8)
    model = _qdq_matmul_model(x_shape, weights, rng.uniform(0.01, 0.02, n).astype(np.float32), np.zeros(n, np.int8))
    x = rng.standard_normal(x_shape).astype(np.float32) * 3
    got, ops = _run(model, x)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert np.max(np.abs(got.astype(np.int32) - want.astype(np.int32))) <= 1  # one output quantum
    assert "matmul_u8s8" in ops and "matmul" not in ops


def test_a_weight_scale_per_row_stays_in_float():
    """A scale per row of W (per input channel) does not factor out of the sums over rows."""
    rng = np.random.default_rng(1)
    weights = rng.integers(-128, 128, (6, 4)).astype(np.int8)
    model = _qdq_matmul_model((2, 6), weights, rng.uniform(0.01, 0.02, 6).astype(np.float32), np.zeros(6, np.int8),
                              w_axis=0)
    x = rng.standard_normal((2, 6)).astype(np.float32)
    got, ops = _run(model, x)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0])
    assert "matmul_integer" not in ops and "matmul_u8s8" not in ops


def test_uint8_weights_beyond_int8_after_their_zero_stay_in_float():
    rng = np.random.default_rng(2)
    weights = np.full((5, 3), 255, np.uint8)  # 255 - 0 does not fit int8
    model = _qdq_matmul_model((2, 5), weights, np.float32(0.01).reshape(()), np.uint8(0))
    x = rng.standard_normal((2, 5)).astype(np.float32)
    got, ops = _run(model, x)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0])
    assert "matmul_integer" not in ops and "matmul_u8s8" not in ops
