"""The int8_layout pass: quantized convolutions pass uint8 NHWC from one to the next (through epilogues,
residual adds, max pooling and a global mean), within one output quantum of ONNX Runtime, and a graph
without direct int8 convolutions is left as it is. A downsampling block (a strided 3x3 branch and a 1x1
shortcut joined by an add): the shortcut's convolution requantizes in its own kernel and the add joins the
3x3 convolution's epilogue."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
quantization = pytest.importorskip("onnxruntime.quantization")

import tensorkiln as tk  # noqa: E402
from tensorkiln.passes.int8_layout import keep_int8_channels_last  # noqa: E402
from helpers import ort_int8_reduce_range  # noqa: E402

SHAPE = (1, 3, 17, 15)


class _Block(torch.nn.Module):
    """A ResNet / MobileNetV2-like chain: stem, max pool, residual block, depthwise and a strided layer,
    global average pool."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 20, 3, stride=2, padding=1)
        self.pool = torch.nn.MaxPool2d(3, stride=2, padding=1)
        self.a = torch.nn.Conv2d(20, 20, 3, padding=1)
        self.b = torch.nn.Conv2d(20, 20, 3, padding=1)
        self.depthwise = torch.nn.Conv2d(20, 20, 3, padding=1, groups=20)
        self.down = torch.nn.Conv2d(20, 36, 1, stride=2)

    def forward(self, x):
        x = self.pool(torch.relu(self.stem(x)))
        x = torch.relu(x + self.b(torch.relu(self.a(x))))
        x = self.down(torch.clamp(self.depthwise(x), 0, 6))
        return x.mean((2, 3), keepdim=True)


class _Calibration(quantization.CalibrationDataReader):
    def __init__(self, batches):
        self.batches = iter(batches)

    def get_next(self):
        return next(self.batches, None)


@pytest.fixture(scope="module")
def quantized_chain(tmp_path_factory):
    torch.manual_seed(3)
    folder = tmp_path_factory.mktemp("int8_layout")
    float_path, path = folder / "chain.onnx", folder / "chain.int8.onnx"
    torch.onnx.export(_Block().eval(), (torch.randn(*SHAPE),), str(float_path), input_names=["x"],
                      output_names=["y"], dynamo=False)
    batches = [{"x": np.random.default_rng(i).standard_normal(SHAPE).astype(np.float32)} for i in range(4)]
    quantization.quantize_static(str(float_path), str(path), _Calibration(batches), per_channel=True,
                                 quant_format=quantization.QuantFormat.QDQ, reduce_range=ort_int8_reduce_range())
    return path


def _output_quantum(path) -> float:
    model = onnx.load(str(path))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    last = [n for n in model.graph.node if n.op_type == "DequantizeLinear"][-1]
    return float(np.max(inits[last.input[1]]))


def test_a_quantized_chain_stays_channels_last_and_matches_onnx_runtime(quantized_chain):
    x = np.random.default_rng(11).standard_normal(SHAPE).astype(np.float32)
    want = ort.InferenceSession(str(quantized_chain), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    module = tk.onnx.load(str(quantized_chain))
    got = module(x=x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    assert np.max(np.abs(got - want)) <= _output_quantum(quantized_chain) * 1.001
    ops = Counter(n.op for n in module.optimized_graph(x=x).nodes)
    assert ops["conv2d_u8s8"] == 4 and ops["depthwise_u8s8"] == 1 and ops["conv2d"] == 0, ops
    # one permute into NHWC (the model's input) and one out of it (the pooled output); none between layers
    assert ops["permute"] == 2 and ops["window"] == 0, ops


def test_the_pass_leaves_a_graph_without_int8_convolutions_alone():
    weights = tk.tensor(np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32))

    def f(x):
        y = tk.nn.functional.conv2d(x, weights, padding=1).relu()
        return tk.nn.functional.max_pool2d(y.permute(0, 2, 3, 1).permute(0, 3, 1, 2), 2) + 1

    graph = tk.jit(f).graph(np.ones((1, 3, 6, 6), np.float32))
    rewritten, fired = keep_int8_channels_last(graph)
    assert not fired and str(rewritten) == str(graph)


DOWNSAMPLE_SHAPE = (1, 13, 11, 9)


class _Downsample(torch.nn.Module):
    """ResNet's basic block with a stride and a shortcut convolution; odd channels and planes."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(13, 37, 3, stride=2, padding=1)
        self.b = torch.nn.Conv2d(37, 37, 3, padding=1)
        self.shortcut = torch.nn.Conv2d(13, 37, 1, stride=2)

    def forward(self, x):
        return torch.relu(self.b(torch.relu(self.a(x))) + self.shortcut(x))


@pytest.fixture(scope="module")
def quantized_block(tmp_path_factory):
    torch.manual_seed(5)
    folder = tmp_path_factory.mktemp("int8_downsample")
    float_path, path = folder / "block.onnx", folder / "block.int8.onnx"
    torch.onnx.export(_Downsample().eval(), (torch.randn(*DOWNSAMPLE_SHAPE),), str(float_path), input_names=["x"],
                      output_names=["y"], dynamo=False)
    batches = [{"x": np.random.default_rng(i).standard_normal(DOWNSAMPLE_SHAPE).astype(np.float32)} for i in range(4)]
    quantization.quantize_static(str(float_path), str(path), _Calibration(batches), per_channel=True,
                                 quant_format=quantization.QuantFormat.QDQ, reduce_range=ort_int8_reduce_range())
    return path


def test_the_shortcut_add_fuses_into_a_convolution_and_matches_onnx_runtime(quantized_block):
    x = np.random.default_rng(2).standard_normal(DOWNSAMPLE_SHAPE).astype(np.float32)
    want = ort.InferenceSession(str(quantized_block), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    module = tk.onnx.load(str(quantized_block))
    got = module(x=x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    assert np.max(np.abs(got - want)) <= _output_quantum(quantized_block) * 1.001
    kernels = module.report(x=x).kernels
    convolutions = [k for k in kernels if any("conv2d_u8s8(" in line for line in k.nodes)]
    assert len(convolutions) == 3
    # every convolution's kernel requantizes (no int32 sums stored for a separate add kernel)
    assert all(any("round(" in line for line in k.nodes) for k in convolutions), [k.nodes for k in convolutions]
    joined = [k for k in convolutions if sum(" add(" in line for line in k.nodes) >= 3]
    assert joined, "the shortcut's add is in no convolution's kernel"
