"""Quantized ONNX models (ONNX Runtime's quantize_static in QDQ form, quantize_dynamic) run on the
int8 GEMM, within one output quantum of ONNX Runtime on the same model."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
quantization = pytest.importorskip("onnxruntime.quantization")

import tensorkiln as tk  # noqa: E402
from helpers import ort_int8_reduce_range  # noqa: E402

FEATURES, HIDDEN, CLASSES = 37, 64, 10
REDUCE_RANGE = ort_int8_reduce_range()  # 7-bit weights where ONNX Runtime's int8 GEMMs would saturate


class _Calibration(quantization.CalibrationDataReader):
    def __init__(self, batches):
        self.batches = iter(batches)

    def get_next(self):
        return next(self.batches, None)


def _inputs(seed: int, rows: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, FEATURES)).astype(np.float32)


@pytest.fixture(scope="module")
def float_model(tmp_path_factory):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(),
                                torch.nn.Linear(HIDDEN, CLASSES)).eval()
    path = tmp_path_factory.mktemp("int8") / "mlp.onnx"
    torch.onnx.export(model, (torch.randn(5, FEATURES),), str(path), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}}, dynamo=False)
    return path


def _output_quantum(path) -> float:
    """The scale of the last DequantizeLinear (the model's output), or 0 when it has none."""
    model = onnx.load(str(path))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    last = [n for n in model.graph.node if n.op_type == "DequantizeLinear"][-1]
    return float(np.max(inits[last.input[1]]))


def _compare(path, tolerance: float) -> None:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    module = tk.onnx.load(str(path))
    for rows in (1, 5, 18):
        x = _inputs(rows, rows)
        want = session.run(None, {"x": x})[0]
        got = module(x=x)
        got = got[0] if isinstance(got, (list, tuple)) else got
        assert np.max(np.abs(np.asarray(got) - want)) <= tolerance, rows
        ops = [n.op for n in module.optimized_graph(x=x).nodes]
        assert ops.count("matmul_u8s8") == 2 and "matmul" not in ops, ops


@pytest.mark.parametrize("per_channel", [False, True])
def test_qdq_static_model_runs_on_int8_within_one_quantum(float_model, tmp_path, per_channel):
    path = tmp_path / "qdq.onnx"
    quantization.quantize_static(str(float_model), str(path), _Calibration([{"x": _inputs(i, 8)} for i in range(8)]),
                                 quant_format=quantization.QuantFormat.QDQ, per_channel=per_channel,
                                 reduce_range=REDUCE_RANGE)
    _compare(path, _output_quantum(path) * 1.001)


def test_dynamic_quantized_model_runs_on_int8(float_model, tmp_path):
    path = tmp_path / "dynamic.onnx"
    quantization.quantize_dynamic(str(float_model), str(path), weight_type=quantization.QuantType.QInt8,
                                  reduce_range=REDUCE_RANGE)
    # no output quantization: the float outputs agree up to float rounding of the scales
    _compare(path, 1e-5)


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory):
    """Convolutions with padding, stride, a channel count that is no multiple of the panel, and a
    depthwise layer."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 9, 3, stride=2), torch.nn.ReLU(),
                                torch.nn.Conv2d(9, 9, 3, groups=9, padding=1)).eval()
    path = tmp_path_factory.mktemp("int8") / "convs.onnx"
    torch.onnx.export(model, (torch.randn(2, 3, 11, 13),), str(path), input_names=["x"], output_names=["y"],
                      dynamo=False)
    return path


@pytest.mark.parametrize("form", ["QDQ", "QOperator"])
def test_quantized_convolutions_run_on_int8_like_onnx_runtime(conv_model, tmp_path, form):
    """QDQ Conv and QLinearConv become direct int8 convolutions (the depthwise one too), per-channel weights."""
    path = tmp_path / "q.onnx"
    calibration = _Calibration([{"x": np.random.default_rng(i).standard_normal((2, 3, 11, 13)).astype(np.float32)}
                                for i in range(4)])
    quantization.quantize_static(str(conv_model), str(path), calibration, per_channel=True,
                                 quant_format=getattr(quantization.QuantFormat, form), reduce_range=REDUCE_RANGE)
    x = np.random.default_rng(9).standard_normal((2, 3, 11, 13)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    module = tk.onnx.load(str(path))
    got = module(x=x)
    assert np.max(np.abs((got[0] if isinstance(got, (list, tuple)) else got) - want)) <= _output_quantum(path) * 1.001
    ops = [n.op for n in module.optimized_graph(x=x).nodes]
    assert ops.count("conv2d_u8s8") == 2 and ops.count("depthwise_u8s8") == 1 and "conv2d" not in ops, ops


def test_conv_integer_runs_on_int8(conv_model, tmp_path):
    """ConvInteger with the activation's zero point computed at run time (DynamicQuantizeLinear): the
    direct convolutions, the border filled with the zero point by a select."""
    path = tmp_path / "dynamic.onnx"
    quantization.quantize_dynamic(str(conv_model), str(path), op_types_to_quantize=["Conv"],
                                  weight_type=quantization.QuantType.QInt8, reduce_range=REDUCE_RANGE)
    x = np.random.default_rng(10).standard_normal((2, 3, 11, 13)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    module = tk.onnx.load(str(path))
    got = module(x=x)
    np.testing.assert_allclose(got[0] if isinstance(got, (list, tuple)) else got, want, rtol=1e-5, atol=1e-5)
    ops = [n.op for n in module.optimized_graph(x=x).nodes]
    assert ops.count("conv2d_u8s8") == 2 and ops.count("depthwise_u8s8") == 1 and "conv2d" not in ops, ops
