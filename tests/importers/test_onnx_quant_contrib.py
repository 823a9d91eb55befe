"""ONNX Runtime's quantization operators (com.microsoft: QLinearAdd, QGemm, QLinearSoftmax, ...):
each one-node model agrees with ONNX Runtime within one quantum (float outputs to float rounding),
compiled agrees with the reference interpreter exactly, and models in ONNX Runtime's QOperator
format run on the integer kernels."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
quantization = pytest.importorskip("onnxruntime.quantization")

from onnx import TensorProto, helper  # noqa: E402

import tensorkiln as tk  # noqa: E402
from tensorkiln.errors import UnsupportedOpError  # noqa: E402
from tensorkiln.ir.ops.weight_only import dequantize, unpack_weight_only  # noqa: E402
from helpers import ort_int8_reduce_range, residual_cnn  # noqa: E402

MS = "com.microsoft"
TYPES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.float32: TensorProto.FLOAT,
         np.int32: TensorProto.INT32, np.bool_: TensorProto.BOOL}


def _model(op: str, inputs: dict[str, np.ndarray], constants: dict[str, np.ndarray], order: list[str],
           out_type, **attrs):
    """A one-node model: `inputs` are graph inputs, `constants` initializers, `order` the node's inputs
    ("" for an omitted one)."""
    node = helper.make_node(op, order, ["y"], domain=MS, **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, TYPES[v.dtype.type], v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", out_type, None)],
        [onnx.numpy_helper.from_array(v, k) for k, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def _check(model, inputs: dict[str, np.ndarray], quantum: float = 1.0, exact: bool = True) -> np.ndarray:
    """tensorkiln compiled == its interpreter (`exact`; else within one quantum: a float sum's order may
    move a value across a rounding tie; float outputs to float rounding), and within `quantum` of ONNX
    Runtime."""
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    got = _first(tk.onnx.load(model)(**inputs))
    oracle = _first(tk.onnx.load(model, backend="interpreter", opt_level=0)(**inputs))
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    if got.dtype.kind == "f":  # a float output: the compiled sums' order against numpy's
        np.testing.assert_allclose(got, oracle, rtol=1e-5, atol=1e-5)
    elif exact:
        np.testing.assert_array_equal(got, oracle)
    else:
        assert np.max(np.abs(got.astype(np.float64) - oracle.astype(np.float64))) <= 1
    assert np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))) <= quantum
    return got


def _first(outputs) -> np.ndarray:
    return np.asarray(outputs[0] if isinstance(outputs, (list, tuple)) else outputs)


def _q(rng, shape, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


def _scale(value: float) -> np.ndarray:
    return np.array(value, np.float32)


def _zero(dtype, value: int) -> np.ndarray:
    return np.array(value, dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("b_shape", [(3, 5, 7), (7,), (3, 1, 7)])
def test_binary_ops(op, dtype, b_shape):
    rng = np.random.default_rng(hash((op, b_shape)) % 2**32)
    a, b = _q(rng, (3, 5, 7), dtype), _q(rng, b_shape, dtype)
    zero = 128 if dtype == np.uint8 else 0
    constants = {"sa": _scale(0.02), "za": _zero(dtype, zero + 3), "sb": _scale(0.031), "zb": _zero(dtype, zero - 5),
                 "sc": _scale(0.05 if op == "QLinearAdd" else 0.3), "zc": _zero(dtype, zero + 1)}
    model = _model(op, {"a": a, "b": b}, constants, ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"],
                   TYPES[dtype])
    _check(model, {"a": a, "b": b})


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op, attrs", [("QLinearLeakyRelu", {"alpha": 0.1}), ("QLinearSigmoid", {}),
                                       ("QLinearSoftmax", {"opset": 13, "axis": -1}),
                                       ("QLinearSoftmax", {"opset": 12, "axis": 1}),
                                       ("QLinearGlobalAveragePool", {"channels_last": 0}),
                                       ("QLinearGlobalAveragePool", {"channels_last": 1}),
                                       ("QLinearAveragePool", {"kernel_shape": [3, 3], "strides": [2, 2],
                                                               "pads": [1, 1, 1, 1]}),
                                       ("QLinearAveragePool", {"kernel_shape": [2, 2], "channels_last": 1,
                                                               "count_include_pad": 1, "pads": [0, 0, 1, 1]})])
def test_unary_ops(op, attrs, dtype):
    rng = np.random.default_rng(len(op) + len(attrs))
    x = _q(rng, (2, 6, 5, 7), dtype)
    zero = 128 if dtype == np.uint8 else 0
    y_scale, y_zero = (1 / 256, 0 if dtype == np.uint8 else -128) if op == "QLinearSoftmax" else (0.04, zero - 7)
    constants = {"sx": _scale(0.05), "zx": _zero(dtype, zero + 4), "sy": _scale(y_scale), "zy": _zero(dtype, y_zero)}
    model = _model(op, {"x": x}, constants, ["x", "sx", "zx", "sy", "zy"], TYPES[dtype], **attrs)
    # sums (pools, means, softmax) and exp compiled in C round differently from numpy's
    _check(model, {"x": x}, exact=op == "QLinearLeakyRelu")


@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_mean_is_its_definition(keepdims):
    """QLinearReduceMean (no CPU kernel in ONNX Runtime): dequantize, mean, quantize, in numpy."""
    rng = np.random.default_rng(keepdims)
    x = _q(rng, (2, 6, 5, 7), np.uint8)
    constants = {"sx": _scale(0.05), "zx": _zero(np.uint8, 132), "sy": _scale(0.01), "zy": _zero(np.uint8, 120)}
    model = _model("QLinearReduceMean", {"x": x}, constants, ["x", "sx", "zx", "sy", "zy"], TensorProto.UINT8,
                   axes=[1, -1], keepdims=keepdims)
    got = _first(tk.onnx.load(model)(x=x))
    mean = ((x.astype(np.float32) - 132) * np.float32(0.05)).astype(np.float64).mean((1, 3), keepdims=bool(keepdims))
    want = np.clip(np.rint(mean / 0.01) + 120, 0, 255)
    assert got.shape == want.shape and np.max(np.abs(got - want)) <= 1


def test_concat_and_where():
    rng = np.random.default_rng(3)
    a, b = _q(rng, (2, 3, 4), np.uint8), _q(rng, (2, 5, 4), np.uint8)
    constants = {"sy": _scale(0.03), "zy": _zero(np.uint8, 120), "sa": _scale(0.02), "za": _zero(np.uint8, 128),
                 "sb": _scale(0.05), "zb": _zero(np.uint8, 100)}
    model = _model("QLinearConcat", {"a": a, "b": b}, constants, ["sy", "zy", "a", "sa", "za", "b", "sb", "zb"],
                   TensorProto.UINT8, axis=1)
    _check(model, {"a": a, "b": b})
    condition = rng.integers(0, 2, size=(2, 1, 4)).astype(np.bool_)
    x, y = _q(rng, (2, 3, 4), np.int8), _q(rng, (3, 1), np.int8)
    constants = {"sx": _scale(0.02), "zx": _zero(np.int8, 3), "sy": _scale(0.05), "zy": _zero(np.int8, -2),
                 "sz": _scale(0.04), "zz": _zero(np.int8, 1)}
    model = _model("QLinearWhere", {"c": condition, "x": x, "w": y}, constants,
                   ["c", "x", "sx", "zx", "w", "sy", "zy", "sz", "zz"], TensorProto.INT8)
    _check(model, {"c": condition, "x": x, "w": y})


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 1)])
@pytest.mark.parametrize("quantized_output", [False, True])
def test_qgemm(trans_a, trans_b, quantized_output):
    rng = np.random.default_rng(trans_a * 2 + quantized_output)
    m, k, n = 5, 19, 11
    a = _q(rng, (k, m) if trans_a else (m, k), np.uint8)
    b = rng.integers(-64, 64, size=(n, k) if trans_b else (k, n)).astype(np.int8)
    constants = {"sa": _scale(0.02), "za": _zero(np.uint8, 131), "b": b,
                 "sb": rng.uniform(0.001, 0.01, n).astype(np.float32), "zb": np.zeros(n, np.int8),
                 "c": rng.integers(-2000, 2000, n).astype(np.int32)}
    order = ["a", "sa", "za", "b", "sb", "zb", "c"]
    if quantized_output:
        constants.update(sy=_scale(0.2), zy=_zero(np.uint8, 128))
        order += ["sy", "zy"]
    model = _model("QGemm", {"a": a}, constants, order, TensorProto.UINT8 if quantized_output else TensorProto.FLOAT,
                   transA=trans_a, transB=trans_b, alpha=0.75)
    got = _check(model, {"a": a}, 1.0 if quantized_output else 1e-3)
    module = tk.onnx.load(model)
    assert "matmul_u8s8" in [node.op for node in module.optimized_graph(a=a).nodes]
    if not quantized_output:  # exact int32 sums: the float result is the product's own, to float rounding
        a_t = (a.T if trans_a else a).astype(np.int64) - 131
        b_t = (b.T if trans_b else b).astype(np.int64)
        exact = (a_t @ b_t + constants["c"]) * (0.02 * constants["sb"].astype(np.float64) * 0.75)
        np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)


def test_dynamic_quantize_matmul_and_matmul_integer_to_float():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 16)).astype(np.float32)
    # 7-bit weights: ONNX Runtime's u8 x s8 sums saturate on full-range ones without VNNI
    b = rng.integers(-64, 64, size=(16, 9)).astype(np.int8)
    constants = {"b": b, "sb": rng.uniform(0.01, 0.02, 9).astype(np.float32), "bias": rng.standard_normal(9).astype(
        np.float32)}
    model = _model("DynamicQuantizeMatMul", {"x": x}, constants, ["x", "b", "sb", "", "bias"], TensorProto.FLOAT)
    _check(model, {"x": x}, 1e-4)
    a = _q(rng, (6, 16), np.uint8)
    constants = {"b": b, "sa": _scale(0.03), "sb": constants["sb"], "za": _zero(np.uint8, 120),
                 "bias": constants["bias"]}
    model = _model("MatMulIntegerToFloat", {"a": a}, constants, ["a", "b", "sa", "sb", "za", "", "bias"],
                   TensorProto.FLOAT)
    got = _check(model, {"a": a}, 1e-4)
    exact = (a.astype(np.int64) - 120) @ b.astype(np.int64) * (0.03 * constants["sb"].astype(np.float64)) + \
        constants["bias"]
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)


def test_contrib_quantize_and_dequantize_linear():
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((4, 6)) * 3).astype(np.float32)
    constants = {"s": rng.uniform(0.01, 0.05, 6).astype(np.float32), "z": rng.integers(-5, 5, 6).astype(np.int8)}
    q = _check(_model("QuantizeLinear", {"x": x}, constants, ["x", "s", "z"], TensorProto.INT8, axis=1), {"x": x})
    _check(_model("DequantizeLinear", {"q": q}, constants, ["q", "s", "z"], TensorProto.FLOAT, axis=1), {"q": q}, 1e-6)


def test_wrong_types_and_unknown_contrib_ops_are_named():
    a = np.zeros((2, 3), np.int32)
    model = _model("QLinearAdd", {"a": a, "b": a}, {"s": _scale(0.1)}, ["a", "s", "", "b", "s", "", "s"],
                   TensorProto.INT32)
    with pytest.raises(UnsupportedOpError, match=r"QLinearAdd.*int32"):
        tk.onnx.load(model)(a=a, b=a)
    x = np.zeros((2, 3), np.float32)
    model = _model("FusedMatMulActivation", {"x": x}, {}, ["x"], TensorProto.FLOAT)
    with pytest.raises(UnsupportedOpError, match=r"com\.microsoft::FusedMatMulActivation.*not supported"):
        tk.onnx.load(model)


class _Calibration(quantization.CalibrationDataReader):
    def __init__(self, batches):
        self.batches = iter(batches)

    def get_next(self):
        return next(self.batches, None)


def _residual_net():
    """A convolution stem, a residual block (QLinearAdd), global pooling and a classifier (QGemm)."""
    return residual_cnn(8, 5)


class _Attention(torch.nn.Module):
    """Scaled dot-product attention and a residual: QLinearMatMul, QLinearMul, QLinearSoftmax, QLinearAdd."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)

    def forward(self, x):
        q, k, v = self.qkv(x).split(16, -1)
        weights = torch.softmax((q @ k.transpose(1, 2)) * 0.25, -1)
        return x + weights @ v


@pytest.mark.parametrize("net, shape, contrib", [(_residual_net, (2, 3, 10, 10), {"QLinearAdd", "QGemm"}),
                                                 (_Attention, (2, 6, 16), {"QLinearSoftmax", "QLinearAdd"})])
def test_qoperator_models_agree_with_onnx_runtime(tmp_path, net, shape, contrib):
    """quantize_static's QOperator format: the same quantized values as ONNX Runtime's, up to one
    quantum, on the integer kernels."""
    torch.manual_seed(0)
    float_path, path = tmp_path / "f.onnx", tmp_path / "q.onnx"
    torch.onnx.export(net().eval(), (torch.randn(*shape),), str(float_path), input_names=["x"],
                      output_names=["y"], dynamo=False)
    batches = [{"x": np.random.default_rng(i).standard_normal(shape).astype(np.float32)} for i in range(4)]
    quantization.quantize_static(str(float_path), str(path), _Calibration(batches), per_channel=True,
                                 quant_format=quantization.QuantFormat.QOperator,
                                 reduce_range=ort_int8_reduce_range())
    model = onnx.load(str(path))
    assert contrib <= {n.op_type for n in model.graph.node if n.domain == MS}
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    quantum = float(inits[[n for n in model.graph.node if n.op_type == "DequantizeLinear"][-1].input[1]])
    x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    module = tk.onnx.load(str(path))
    got = _first(module(x=x))
    assert np.max(np.abs(got - want)) <= quantum * 1.001
    ops = [n.op for n in module.optimized_graph(x=x).nodes]
    assert "conv2d" not in ops and any("u8s8" in op for op in ops), ops


def _pack(values: np.ndarray, bits: int) -> np.ndarray:
    """Rows of `bits`-bit values packed into bytes, lowest bits first (MatMulNBits' layout)."""
    per_byte = 8 // bits
    padded = np.zeros(values.shape[:-1] + (-(-values.shape[-1] // per_byte) * per_byte,), np.uint8)
    padded[..., :values.shape[-1]] = values
    shifts = (np.arange(per_byte) * bits).astype(np.uint8)
    return (padded.reshape(values.shape[:-1] + (-1, per_byte)) << shifts).sum(-1).astype(np.uint8)


@pytest.mark.parametrize("bits, block, packed_zeros, k", [(4, 32, True, 96), (4, 32, False, 70), (4, 128, True, 200),
                                                         (8, 32, True, 64), (8, 16, False, 40)])
def test_matmul_nbits_agrees_with_onnx_runtime(bits, block, packed_zeros, k):
    """Weight blocks as ONNX Runtime's MatMulNBitsQuantizer writes them (B (N, blocks, block * bits / 8), the
    last block padded when K is no multiple of it; zero points packed like B, or implied): the float
    product by the dequantized weight, as ONNX Runtime's own kernel computes it."""
    rng = np.random.default_rng(bits + k)
    n, blocks = 24, -(-k // block)
    q = rng.integers(0, 1 << bits, size=(n, blocks * block)).astype(np.uint8)
    constants = {"b": _pack(q, bits).reshape(n, blocks, block * bits // 8),
                 "s": rng.uniform(0.01, 0.05, n * blocks).astype(np.float32)}
    order = ["a", "b", "s"]
    zeros = np.full((n, blocks), 1 << (bits - 1), np.uint8)
    if packed_zeros:
        zeros = rng.integers(0, 1 << bits, size=(n, blocks)).astype(np.uint8)
        constants["z"] = _pack(zeros, bits).reshape(-1)
        order.append("z")
    model = _model("MatMulNBits", {"a": np.zeros((2, 3, k), np.float32)}, constants, order, TensorProto.FLOAT,
                   K=k, N=n, bits=bits, block_size=block)
    a = rng.standard_normal((2, 3, k)).astype(np.float32)
    got = _check(model, {"a": a}, quantum=1e-4, exact=False)
    weight = (q[:, :k].astype(np.float64) - np.repeat(zeros, block, 1)[:, :k]) * \
        np.repeat(constants["s"].reshape(n, blocks), block, 1)[:, :k]
    np.testing.assert_allclose(got, a @ weight.T, rtol=1e-5, atol=1e-5)


def test_matmul_nbits_hand_packed_two_bit_blocks():
    """2-bit values, four a byte, lowest bits first; float zero points; a bias."""
    rng = np.random.default_rng(7)
    k, n, block = 48, 5, 16
    q = rng.integers(0, 4, size=(n, k)).astype(np.uint8)
    packed = (q.reshape(n, -1, 4) << np.array([0, 2, 4, 6], np.uint8)).sum(-1).astype(np.uint8)
    scales = rng.uniform(0.1, 0.5, (n, k // block)).astype(np.float32)
    zeros = rng.uniform(0, 3, (n, k // block)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    a = rng.standard_normal((4, k)).astype(np.float32)
    constants = {"b": packed.reshape(n, k // block, block // 4), "s": scales, "z": zeros, "bias": bias}
    model = _model("MatMulNBits", {"a": a}, constants, ["a", "b", "s", "z", "", "bias"], TensorProto.FLOAT,
                   K=k, N=n, bits=2, block_size=block)
    got = _first(tk.onnx.load(model)(a=a))
    weight = (q.astype(np.float32) - np.repeat(zeros, block, 1)) * np.repeat(scales, block, 1)
    np.testing.assert_allclose(got, a @ weight.T + bias, rtol=1e-5, atol=1e-5)


def test_matmul_nbits_refuses_what_it_cannot_read():
    a = np.zeros((2, 32), np.float32)
    constants = {"b": np.zeros((4, 1, 16), np.uint8), "s": np.ones(4, np.float32)}
    model = _model("MatMulNBits", {"a": a}, constants, ["a", "b", "s"], TensorProto.FLOAT, K=32, N=4, bits=3,
                   block_size=32)
    with pytest.raises(UnsupportedOpError, match="bits=3"):
        tk.onnx.load(model)(a=a)
    model = _model("MatMulNBits", {"a": a}, constants, ["a", "b", "s"], TensorProto.FLOAT, K=32, N=5, bits=4,
                   block_size=32)
    with pytest.raises(UnsupportedOpError, match=r"MatMulNBits.*N=5"):
        tk.onnx.load(model)(a=a)


@pytest.mark.parametrize("precision", ["int8w-g32", "int8w"])
def test_matmul_nbits_blocks_run_on_the_int8_weight_kernel_as_they_are(precision):
    """precision="int8w-g<block>", or "int8w", which finds the blocks: the weight-only kernel keeps the
    model's own integers (q - zero point) and block scales, so the product is the float one's, at one
    byte a weight."""
    rng = np.random.default_rng(12)
    k, n, block = 256, 96, 32
    q = rng.integers(0, 16, size=(n, k)).astype(np.uint8)
    zeros = rng.integers(0, 16, size=(n, k // block)).astype(np.uint8)
    constants = {"b": _pack(q, 4).reshape(n, k // block, block // 2),
                 "s": rng.uniform(0.01, 0.05, n * (k // block)).astype(np.float32), "z": _pack(zeros, 4).reshape(-1)}
    a = rng.standard_normal((1, k)).astype(np.float32)
    model = _model("MatMulNBits", {"a": a}, constants, ["a", "b", "s", "z"], TensorProto.FLOAT, K=k, N=n, bits=4,
                   block_size=block)
    exact = _first(tk.onnx.load(model)(a=a))
    module = tk.onnx.load(model, precision=precision)
    np.testing.assert_allclose(_first(module(a=a)), exact, rtol=1e-5, atol=1e-5)
    assert [kernel.precision for kernel in module.report(a=a).kernels] == ["int8w"]
    graph = module.optimized_graph(a=a)
    node = next(node for node in graph.nodes if node.op == "matmul_int8w")
    panels, scale_panels = (x.attrs["value"].array for x in node.inputs[1:])
    q_kept, scales_kept = unpack_weight_only(panels, scale_panels, 8, k, n, block)
    scales = np.repeat(constants["s"].reshape(n, -1).T, block, 0)
    want = (q.T.astype(np.float32) - np.repeat(zeros.T, block, 0)) * scales
    np.testing.assert_array_equal(dequantize(q_kept, scales_kept, block), want.astype(np.float32))



def test_asymmetric_matmul_nbits_blocks_on_the_int4_kernel():
    """precision="int4w-g<block>": q - zero point held as int4 plus each block's offset (whose share is a
    small float matmul of A's block sums); A quantized to int8 per block, as ONNX Runtime's
    accuracy_level 4 does, so within that quantization's error of the exact product."""
    rng = np.random.default_rng(13)
    k, n, block = 200, 96, 32  # K no multiple of the block: the last block's sum is padded
    blocks = -(-k // block)
    q = rng.integers(0, 16, size=(n, blocks * block)).astype(np.uint8)
    zeros = rng.integers(0, 16, size=(n, blocks)).astype(np.uint8)
    constants = {"b": _pack(q, 4).reshape(n, blocks, block // 2),
                 "s": rng.uniform(0.01, 0.05, n * blocks).astype(np.float32), "z": _pack(zeros, 4).reshape(-1)}
    a = rng.standard_normal((3, k)).astype(np.float32)
    model = _model("MatMulNBits", {"a": a}, constants, ["a", "b", "s", "z"], TensorProto.FLOAT, K=k, N=n, bits=4,
                   block_size=block)
    exact = _first(tk.onnx.load(model)(a=a))
    module = tk.onnx.load(model, precision=f"int4w-g{block}")
    got = _first(module(a=a))
    assert np.max(np.abs(got - exact)) <= 0.03 * np.max(np.abs(exact))
    oracle = _first(tk.onnx.load(model, backend="interpreter", precision=f"int4w-g{block}")(a=a))
    np.testing.assert_allclose(got, oracle, rtol=1e-4, atol=1e-4 * np.max(np.abs(exact)))
    assert "int4w" in [kernel.precision for kernel in module.report(a=a).kernels]


def _as_float_lstms(model):
    """The model with each DynamicQuantizeLSTM an ONNX LSTM on its weights dequantized in numpy."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type != "DynamicQuantizeLSTM":
            continue
        weights = []
        for value, scale, zero in ((node.input[1], node.input[8], node.input[9]),
                                   (node.input[2], node.input[10], node.input[11])):
            scale, zero = inits[scale], inits[zero].astype(np.float32)
            shape = (scale.shape[0], 1, scale.shape[1]) if scale.ndim == 2 else (-1, 1, 1)
            dequantized = (inits[value].astype(np.float32) - zero.reshape(shape)) * scale.reshape(shape)
            model.graph.initializer.append(onnx.numpy_helper.from_array(
                np.ascontiguousarray(dequantized.transpose(0, 2, 1)), value + "_float"))
            weights.append(value + "_float")
        inputs = [node.input[0], *weights, *node.input[3:8]]
        while inputs and not inputs[-1]:
            inputs.pop()
        node.op_type, node.domain = "LSTM", ""
        del node.input[:]
        node.input.extend(inputs)
    return model


@pytest.mark.parametrize("bidirectional, per_channel", [(False, False), (True, True)])
def test_dynamic_quantize_lstm_is_the_lstm_of_its_dequantized_weights(tmp_path, bidirectional, per_channel):
    """quantize_dynamic writes LSTMs as DynamicQuantizeLSTM (int8 W and R, transposed, a scale per
    direction or per gate row): the float LSTM of those weights, as ONNX Runtime's float LSTM computes
    it (ONNX Runtime's own DynamicQuantizeLSTM also quantizes the activations as it goes)."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(16, 32, num_layers=2, bidirectional=bidirectional).eval()
    float_path, path = tmp_path / "f.onnx", tmp_path / "q.onnx"
    torch.onnx.export(lstm, (torch.randn(7, 3, 16),), str(float_path), input_names=["x"], output_names=["y"],
                      dynamo=False)
    quantization.quantize_dynamic(str(float_path), str(path), weight_type=quantization.QuantType.QInt8,
                                  per_channel=per_channel)
    model = onnx.load(str(path))
    assert [n.op_type for n in model.graph.node].count("DynamicQuantizeLSTM") == 2
    x = np.random.default_rng(3).standard_normal((7, 3, 16)).astype(np.float32)
    want = ort.InferenceSession(_as_float_lstms(model).SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(_first(tk.onnx.load(model)(x=x)), want, rtol=1e-4, atol=1e-5)
