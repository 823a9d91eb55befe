"""ONNX quantization operators against onnx's reference evaluator, interpreted and compiled to C."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import tensorkiln as tk  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

ONNX_TYPES = {np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8,
              np.dtype(np.int16): TensorProto.INT16, np.dtype(np.int32): TensorProto.INT32,
              np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}
QUANT_TYPES = [np.int8, np.uint8]


def _model(op: str, feeds: dict, constants: dict, attrs: dict | None = None, n_outputs: int = 1,
           opset: int = 21):
    """A one-node model: `feeds` are graph inputs, `constants` initializers, in the op's input order."""
    node = helper.make_node(op, list(feeds) + list(constants), [f"y{i}" for i in range(n_outputs)], **(attrs or {}))
    graph = helper.make_graph(
        [node], "quant",
        [helper.make_tensor_value_info(n, ONNX_TYPES[a.dtype], a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.UNDEFINED, None) for i in range(n_outputs)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds: dict, backend: str = "interpreter") -> None:
    want = ReferenceEvaluator(model).run(None, feeds)
    got = tk.onnx.load(model, backend=backend)(**feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w) if w.dtype.kind in "iu" else np.testing.assert_allclose(g, w, 1e-6)


def _ints(rng, dtype, shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


@pytest.mark.parametrize("dtype", QUANT_TYPES)
@pytest.mark.parametrize("granularity", ["tensor", "axis", "blocked"])
def test_quantize_and_dequantize_linear(dtype, granularity):
    rng = np.random.default_rng(len(granularity))
    x = (rng.standard_normal((2, 6, 5)) * 40).astype(np.float32)
    x[0, 0, :3] = [0.5, 1.5, -2.5]  # ties round to even
    if granularity == "tensor":
        scale, attrs = np.float32(0.37), {}
        zero = np.asarray(_ints(rng, dtype, ()) // 4, dtype)
    elif granularity == "axis":
        scale, attrs = rng.uniform(0.1, 1.0, 6).astype(np.float32), {"axis": 1}
        zero = _ints(rng, dtype, (6,)) // 4
    else:
        scale, attrs = rng.uniform(0.1, 1.0, (2, 6, 2)).astype(np.float32), {"axis": -1, "block_size": 3}
        zero = _ints(rng, dtype, (2, 6, 2)) // 4
    _check(_model("QuantizeLinear", {"x": x}, {"s": scale, "z": zero}, dict(attrs)), {"x": x})
    q = _ints(rng, dtype, x.shape)
    _check(_model("DequantizeLinear", {"q": q}, {"s": scale, "z": zero}, dict(attrs)), {"q": q})


def test_quantize_without_zero_point_and_dequantize_int32():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 4)) * 300).astype(np.float32)
    _check(_model("QuantizeLinear", {"x": x}, {"s": np.float32(0.5)}, {"output_dtype": TensorProto.INT8}),
           {"x": x})
    _check(_model("QuantizeLinear", {"x": x}, {"s": np.float32(2.0)}), {"x": x})  # uint8 by default
    q = rng.integers(-2**20, 2**20, (3, 4)).astype(np.int32)
    _check(_model("DequantizeLinear", {"q": q}, {"s": np.float32(0.01)}), {"q": q})
    half = np.float16(0.25)
    _check(_model("DequantizeLinear", {"q": q}, {"s": half}), {"q": q})  # the output takes the scale's type


def test_dynamic_quantize_linear():
    rng = np.random.default_rng(2)
    for x in (rng.standard_normal((4, 5)).astype(np.float32) * 3, np.abs(rng.standard_normal((3, 3))).astype(np.float32),
              np.zeros((2, 2), np.float32)):
        _check(_model("DynamicQuantizeLinear", {"x": x}, {}, n_outputs=3), {"x": x})


@pytest.mark.parametrize("dtype", QUANT_TYPES)
def test_matmul_integer_with_row_and_column_zero_points(dtype):
    rng = np.random.default_rng(3)
    a, b = _ints(rng, dtype, (4, 9)), _ints(rng, dtype, (9, 5))
    za, zb = _ints(rng, dtype, (4,)), _ints(rng, dtype, (5,))
    model = _model("MatMulInteger", {"a": a, "b": b}, {"za": za, "zb": zb})
    want = (a.astype(np.int32) - za[:, None]) @ (b.astype(np.int32) - zb)  # the spec's per-row a_zero_point
    np.testing.assert_array_equal(tk.onnx.load(model, backend="interpreter")(a=a, b=b)[0], want)
    _check(_model("MatMulInteger", {"a": a, "b": b}, {"za": za[:1].reshape(()), "zb": zb}), {"a": a, "b": b})


@pytest.mark.parametrize("dtype", QUANT_TYPES)
def test_qlinear_matmul(dtype):
    rng = np.random.default_rng(4)
    a, b = _ints(rng, dtype, (2, 3, 16)), _ints(rng, dtype, (16, 6))
    consts = {"sa": np.float32(0.02), "za": _ints(rng, dtype, ()), "b": b, "sb": np.float32(0.03),
              "zb": _ints(rng, dtype, ()), "sy": np.float32(0.5), "zy": _ints(rng, dtype, ())}
    model = _model("QLinearMatMul", {"a": a}, consts)
    _check(model, {"a": a})
    _check(model, {"a": a}, backend="c")


@pytest.mark.parametrize("dtype", QUANT_TYPES)
def test_conv_integer_and_qlinear_conv(dtype):
    rng = np.random.default_rng(5)
    x, w = _ints(rng, dtype, (1, 3, 7, 6)), _ints(rng, np.int8, (4, 3, 3, 3))
    attrs = {"pads": [1, 1, 1, 1], "strides": [2, 1]}
    conv = _model("ConvInteger", {"x": x}, {"w": w, "zx": _ints(rng, dtype, ())}, dict(attrs))
    _check(conv, {"x": x})
    consts = {"sx": np.float32(0.05), "zx": _ints(rng, dtype, ()), "w": w,
              "sw": rng.uniform(0.01, 0.05, 4).astype(np.float32), "zw": np.zeros(4, np.int8),
              "sy": np.float32(0.7), "zy": _ints(rng, dtype, ()), "bias": rng.integers(-500, 500, 4).astype(np.int32)}
    model = _model("QLinearConv", {"x": x}, consts, dict(attrs))
    _check(model, {"x": x})
    _check(model, {"x": x}, backend="c")


def test_unsupported_quantized_type_is_named():
    x = np.ones((2, 2), np.float32)
    model = _model("QuantizeLinear", {"x": x}, {"s": np.float32(1.0)}, {"output_dtype": TensorProto.FLOAT8E4M3FN})
    with pytest.raises(tk.UnsupportedOpError, match="FLOAT8E4M3FN"):
        tk.onnx.load(model)(x=x)
