"""The per-channel epilogue of the int8 convolutions as one vector helper (channel_epilogue.py): the
requantizing chain (scale, bias, activation, output scale, round, zero point, saturate) computed in
512-bit vectors (AVX-512) or 256-bit ones (AVX2) gives the reference interpreter's values bit for bit, over channel counts that are no
multiple of the 16 lanes, dense and depthwise layers, uint8, int8 and float32 outputs; anything else
(a residual operand) keeps the loop-IR epilogue."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.ir.graph import interpret
from tensorkiln.kernels.target import cpu_target
from tensorkiln.kernels.templates.channel_epilogue import channel_epilogue

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

VECTOR = cpu_target().vector_bytes >= 32 and cpu_target().int8_dot != "portable"
HAS_AVX512 = cpu_target().vector_bytes >= 64


@pytest.fixture(params=["avx512", "avx2"])
def epilogue_width(request, monkeypatch):
    """The helper's vector width: the host's 512-bit vectors (skipped without them), or 256-bit AVX2 ones
    (TENSORKILN_VECTOR_BYTES=32: the same sums, the AVX2 epilogue)."""
    if not VECTOR:
        pytest.skip("the vector epilogue needs AVX2 or AVX-512BW")
    if request.param == "avx512" and not HAS_AVX512:
        pytest.skip("this CPU has no 512-bit vectors")
    if request.param == "avx2":
        monkeypatch.setenv("TENSORKILN_VECTOR_BYTES", "32")
    cpu_target.cache_clear()
    yield request.param
    monkeypatch.undo()
    cpu_target.cache_clear()

# (C, H, O, kernel, stride, groups, activation, output, per-channel weights): channels 1, 3, 17, 24, 40 and
# 70 (tails of the 16 lanes), 72 and 33 (8-bit stores of 32 channels and the vectors and tail after them),
# depthwise, stride 2, size-1 planes; output None: the float value is stored; relu6 is a Clip (maximum and
# minimum), a zero point an add after the round
OUTPUTS = {"uint8": (TensorProto.UINT8, np.uint8), "int8": (TensorProto.INT8, np.int8)}
LAYERS = [
    (16, 9, 24, 1, 1, 1, "relu", ("uint8", 0.05, 0), True),
    (3, 7, 17, 3, 2, 1, "relu6", ("uint8", 0.03, 5), True),
    (24, 8, 24, 3, 1, 24, None, ("int8", 0.04, -3), True),
    (40, 5, 40, 3, 2, 40, "relu6", ("uint8", 0.02, 0), False),
    (8, 1, 70, 1, 1, 1, None, None, True),
    (1, 6, 1, 3, 1, 1, "relu", ("uint8", 0.1, 128), False),
    (16, 6, 72, 1, 1, 1, "relu6", ("uint8", 0.03, 2), True),
    (8, 5, 33, 3, 1, 1, None, ("int8", 0.05, 1), False),
]


def _model(rng, layers, residual: bool = False):
    """One QDQ model of independent layers: Conv(DQ(x), DQ(W)) + bias [+ residual] [activation]
    [QuantizeLinear]; a residual here is a graph input (NCHW, read through a permute: the loop-IR
    epilogue)."""
    inits, nodes, inputs, outputs, feeds = [], [], [], [], {}
    for i, (c, h, o, k, stride, groups, activation, output, per_channel) in enumerate(layers):
        scales = rng.uniform(0.001, 0.01, o if per_channel else 1).astype(np.float32)
        inits += [numpy_helper.from_array(np.array(0.05, np.float32), f"sx{i}"),
                  numpy_helper.from_array(np.uint8(120), f"zx{i}"),
                  numpy_helper.from_array(rng.integers(-127, 128, (o, c // groups, k, k)).astype(np.int8), f"w{i}"),
                  numpy_helper.from_array(scales if per_channel else scales.reshape(()), f"sw{i}"),
                  numpy_helper.from_array(np.zeros(o if per_channel else (), np.int8), f"zw{i}"),
                  numpy_helper.from_array(rng.standard_normal((o, 1, 1)).astype(np.float32), f"b{i}"),
                  numpy_helper.from_array(np.array(0.0, np.float32), f"lo{i}"),
                  numpy_helper.from_array(np.array(6.0, np.float32), f"hi{i}")]
        nodes += [helper.make_node("DequantizeLinear", [f"x{i}", f"sx{i}", f"zx{i}"], [f"xd{i}"]),
                  helper.make_node("DequantizeLinear", [f"w{i}", f"sw{i}", f"zw{i}"], [f"wd{i}"], axis=0),
                  helper.make_node("Conv", [f"xd{i}", f"wd{i}"], [f"c{i}"], strides=[stride] * 2,
                                   pads=[k // 2] * 4, group=groups),
                  helper.make_node("Add", [f"c{i}", f"b{i}"], [f"v{i}"])]
        last = f"v{i}"
        oh = (h + 2 * (k // 2) - k) // stride + 1
        if residual:
            nodes += [helper.make_node("DequantizeLinear", [f"r{i}", f"sx{i}", f"zx{i}"], [f"rd{i}"]),
                      helper.make_node("Add", [last, f"rd{i}"], [f"s{i}"])]
            inputs.append(helper.make_tensor_value_info(f"r{i}", TensorProto.UINT8, (1, o, oh, oh)))
            feeds[f"r{i}"] = rng.integers(0, 256, (1, o, oh, oh)).astype(np.uint8)
            last = f"s{i}"
        if activation == "relu":
            nodes.append(helper.make_node("Relu", [last], [f"a{i}"]))
            last = f"a{i}"
        elif activation == "relu6":
            nodes.append(helper.make_node("Clip", [last, f"lo{i}", f"hi{i}"], [f"a{i}"]))
            last = f"a{i}"
        out_type = TensorProto.FLOAT
        if output is not None:
            dtype, scale, zero = output
            out_type, np_type = OUTPUTS[dtype]
            inits += [numpy_helper.from_array(np.array(scale, np.float32), f"sy{i}"),
                      numpy_helper.from_array(np.array(zero, np_type), f"zy{i}")]
            nodes.append(helper.make_node("QuantizeLinear", [last, f"sy{i}", f"zy{i}"], [f"q{i}"]))
            last = f"q{i}"
        nodes.append(helper.make_node("Identity", [last], [f"y{i}"]))
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.UINT8, (1, c, h, h)))
        feeds[f"x{i}"] = rng.integers(0, 256, (1, c, h, h)).astype(np.uint8)
        outputs.append(helper.make_tensor_value_info(f"y{i}", out_type, None))
    graph = helper.make_graph(nodes, "epilogues", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), feeds


def _compiled_and_reference(model, feeds):
    module = tk.onnx.load(model)
    got = module(**feeds)
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    optimized = module.optimized_graph(**feeds)  # the graph the kernels compute, backend ops included
    ordered = [feeds[i.name] for i in model.graph.input]
    return got, interpret(optimized, *ordered), module.report(**feeds).kernels


def test_vector_epilogue_is_the_reference_bit_for_bit(epilogue_width):
    model, feeds = _model(np.random.default_rng(0), LAYERS)
    got, reference, kernels = _compiled_and_reference(model, feeds)
    for index, (out, ref) in enumerate(zip(got, reference)):
        assert out.dtype == ref.dtype
        np.testing.assert_array_equal(out, ref, err_msg=f"layer {index}: {LAYERS[index]}")
    contractions = [k for k in kernels if k.kind == "contraction"]
    assert len(contractions) == len(LAYERS)
    # one output channel: its compensation is a literal, not a buffer, and the loop-IR epilogue stays
    helper = ["tk_channel_epilogue_" in k.loop_ir for k in contractions]
    assert helper == [layer[2] > 1 for layer in LAYERS], [k.nodes for k in contractions]


def _residual_block(rng, c: int, h: int, groups: int, activation: str | None):
    """y = Q(act(conv2(DQ(t)) + b2 + DQ(t))), t = Q(relu(conv1(DQ(x)) + b1)): the second layer's add
    reads the first layer's uint8 output, which the int8 layout keeps channels last."""
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "sx"), numpy_helper.from_array(np.uint8(120), "zx"),
             numpy_helper.from_array(np.array(0.04, np.float32), "st"), numpy_helper.from_array(np.uint8(3), "zt"),
             numpy_helper.from_array(np.array(0.06, np.float32), "sy"), numpy_helper.from_array(np.uint8(9), "zy"),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"), numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xd"])]
    last = "xd"
    for i, g in enumerate((1, groups)):
        inits += [numpy_helper.from_array(rng.integers(-127, 128, (c, c // g, 3, 3)).astype(np.int8), f"w{i}"),
                  numpy_helper.from_array(rng.uniform(0.001, 0.01, c).astype(np.float32), f"sw{i}"),
                  numpy_helper.from_array(np.zeros(c, np.int8), f"zw{i}"),
                  numpy_helper.from_array(rng.standard_normal((c, 1, 1)).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("DequantizeLinear", [f"w{i}", f"sw{i}", f"zw{i}"], [f"wd{i}"], axis=0),
                  helper.make_node("Conv", [last, f"wd{i}"], [f"c{i}"], pads=[1] * 4, group=g),
                  helper.make_node("Add", [f"c{i}", f"b{i}"], [f"v{i}"])]
        if i == 0:
            nodes += [helper.make_node("Relu", ["v0"], ["a0"]), helper.make_node("QuantizeLinear", ["a0", "st", "zt"], ["t"]),
                      helper.make_node("DequantizeLinear", ["t", "st", "zt"], ["td"])]
            last = "td"
    nodes.append(helper.make_node("Add", ["v1", "td"], ["s"]))
    if activation == "relu":
        nodes.append(helper.make_node("Relu", ["s"], ["a"]))
    elif activation == "relu6":
        nodes.append(helper.make_node("Clip", ["s", "lo", "hi"], ["a"]))
    else:
        nodes.append(helper.make_node("Identity", ["s"], ["a"]))
    nodes.append(helper.make_node("QuantizeLinear", ["a", "sy", "zy"], ["y"]))
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.UINT8, (1, c, h, h))],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    feeds = {"x": rng.integers(0, 256, (1, c, h, h)).astype(np.uint8)}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), feeds


@pytest.mark.parametrize("c,h,groups,activation", [(16, 6, 1, "relu"), (24, 5, 24, None), (17, 4, 1, "relu6")])
def test_a_residual_operand_is_read_at_the_output_index(c, h, groups, activation, epilogue_width):
    """A residual block's add: the other operand (the previous layer's uint8 output, dequantized: cast,
    minus its zero point, times its scale) is loaded and widened in the helper, 16 or 8 channels a vector."""
    model, feeds = _residual_block(np.random.default_rng(c), c, h, groups, activation)
    got, reference, kernels = _compiled_and_reference(model, feeds)
    np.testing.assert_array_equal(got[0], reference[0])
    contractions = [k for k in kernels if k.kind == "contraction"]
    assert len(contractions) == 2
    assert all("tk_channel_epilogue_" in k.loop_ir for k in contractions), [k.nodes for k in contractions]


def test_a_residual_read_through_a_permute_keeps_the_loop_ir_epilogue():
    layers = [(16, 6, 16, 3, 1, 1, "relu", ("uint8", 0.05, 0), True)]
    model, feeds = _model(np.random.default_rng(1), layers, residual=True)
    got, reference, kernels = _compiled_and_reference(model, feeds)
    np.testing.assert_array_equal(got[0], reference[0])
    assert not any("tk_channel_epilogue_" in k.loop_ir for k in kernels)


def test_the_portable_path_computes_the_same_values(monkeypatch):
    monkeypatch.setenv("TENSORKILN_INT8_DOT", "portable")
    cpu_target.cache_clear()
    try:
        model, feeds = _model(np.random.default_rng(0), LAYERS[:3])
        got, reference, kernels = _compiled_and_reference(model, feeds)
    finally:
        monkeypatch.undo()
        cpu_target.cache_clear()
    for out, ref in zip(got, reference):
        np.testing.assert_array_equal(out, ref)
    assert not any("tk_channel_epilogue_" in k.loop_ir for k in kernels)


def test_the_chain_is_read_from_the_graph():
    """The recognized steps of a requantizing layer, in order, with its per-channel operands."""
    layer = [(16, 6, 24, 1, 1, 1, "relu6", ("uint8", 0.05, 3), True)]
    model, feeds = _model(np.random.default_rng(2), layer)
    graph = tk.onnx.load(model).optimized_graph(**feeds)
    conv = next(n for n in graph.nodes if n.op == "conv2d_u8s8")
    root = next(n for n in graph.nodes if n.op == "cast" and n.dtype.name == "uint8")
    buffers = {n.id: SimpleNamespace(dtype=n.dtype.name) for n in graph.nodes if n.op == "constant" and n.type.size > 1}
    chain = channel_epilogue(conv, root, buffers)
    assert chain is not None and chain.store_dtype == "uint8"
    ops = [s.op for s in chain.steps]
    assert ops[:2] == ["mul", "add"] and "round" in ops and ops.index("round") > ops.index("div"), ops
    assert len(chain.operands) == sum(s.channel is not None for s in chain.steps) >= 2
    assert channel_epilogue(conv, conv, buffers) is None  # no epilogue
    middle = next(n for n in graph.nodes if n.op == "round")
    buffers[middle.id] = object()  # a middle value stored for another reader: not a private chain
    assert channel_epilogue(conv, root, buffers) is None


def test_int8_activations_between_layers(tmp_path, epilogue_width):
    """A QDQ model with int8 activations (quantize_static, QInt8): each layer's epilogue ends in the cast
    to int8 and the +128 that makes the next layer's uint8 input, or, for the model's output, the
    dequantized float32; every one in the vector helper, bit for bit."""
    torch = pytest.importorskip("torch")
    quantization = pytest.importorskip("onnxruntime.quantization")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 24, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(24, 24, 3, padding=1, groups=24), torch.nn.ReLU(),
                              torch.nn.Conv2d(24, 40, 1)).eval()
    float_path, int8_path = tmp_path / "net.onnx", tmp_path / "net.int8.onnx"
    torch.onnx.export(net, (torch.randn(1, 3, 9, 9),), str(float_path), input_names=["x"], output_names=["y"],
                      dynamo=False)
    rng = np.random.default_rng(3)

    class Images(quantization.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": rng.standard_normal((1, 3, 9, 9)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    quantization.quantize_static(str(float_path), str(int8_path), Images(), per_channel=True,
                                 quant_format=quantization.QuantFormat.QDQ,
                                 activation_type=quantization.QuantType.QInt8)
    model = onnx.load(str(int8_path))
    feeds = {"x": rng.standard_normal((1, 3, 9, 9)).astype(np.float32)}
    got, reference, kernels = _compiled_and_reference(model, feeds)
    np.testing.assert_array_equal(got[0], reference[0])
    contractions = [k for k in kernels if k.kind == "contraction"]
    assert len(contractions) == 3 and all("tk_channel_epilogue_" in k.loop_ir for k in contractions), \
        [k.nodes for k in contractions]


def _qlinear_block(rng, c: int, o: int, h: int, output: str):
    """ONNX Runtime's QOperator form: t = QLinearConv(x) (uint8), y = QLinearAdd(QLinearConv(t), t) in
    `output`'s type: each QLinearConv requantizes its int32 sums in float64 (onnx's reference), a chain of
    float64 steps; the add reads the first layer's output as a side value."""
    np_type = OUTPUTS[output][1]
    zero = 128 if output == "uint8" else 0
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "sx"), numpy_helper.from_array(np.uint8(120), "zx"),
             numpy_helper.from_array(np.array(0.04, np.float32), "st"), numpy_helper.from_array(np.uint8(3), "zt"),
             numpy_helper.from_array(np.array(0.03, np.float32), "su"), numpy_helper.from_array(np_type(zero - 2), "zu"),
             numpy_helper.from_array(np.array(0.06, np.float32), "sy"), numpy_helper.from_array(np_type(zero + 5), "zy")]
    for i, (cin, cout) in enumerate(((c, o), (o, o))):
        inits += [numpy_helper.from_array(rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8), f"w{i}"),
                  numpy_helper.from_array(rng.uniform(0.001, 0.01, cout).astype(np.float32), f"sw{i}"),
                  numpy_helper.from_array(np.zeros(cout, np.int8), f"zw{i}"),
                  numpy_helper.from_array(rng.integers(-3000, 3000, cout).astype(np.int32), f"b{i}")]
    ms = "com.microsoft"
    nodes = [helper.make_node("QLinearConv", ["x", "sx", "zx", "w0", "sw0", "zw0", "st", "zt", "b0"], ["t"], pads=[1] * 4),
             helper.make_node("QLinearConv", ["t", "st", "zt", "w1", "sw1", "zw1", "su", "zu", "b1"], ["u"], pads=[1] * 4),
             helper.make_node("QLinearAdd", ["u", "su", "zu", "t", "st", "zt", "sy", "zy"], ["y"], domain=ms)]
    if output == "int8":  # the add's operands share a type: the first layer's output as int8 too
        nodes[1:] = [helper.make_node("QLinearConv", ["t", "st", "zt", "w1", "sw1", "zw1", "su", "zu", "b1"], ["u"],
                                      pads=[1] * 4),
                     helper.make_node("QLinearAdd", ["u", "su", "zu", "u", "su", "zu", "sy", "zy"], ["y"], domain=ms)]
    graph = helper.make_graph(nodes, "qoperator", [helper.make_tensor_value_info("x", TensorProto.UINT8, (1, c, h, h))],
                              [helper.make_tensor_value_info("y", OUTPUTS[output][0], None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ms, 1)])
    return model, {"x": rng.integers(0, 256, (1, c, h, h)).astype(np.uint8)}


@pytest.mark.parametrize("c,o,h,output", [(16, 24, 6, "uint8"), (8, 33, 5, "int8"), (3, 70, 4, "uint8")])
def test_qlinear_conv_requantizes_in_float64_lanes(c, o, h, output, epilogue_width):
    """QLinearConv's float64 requantization runs in the helper (two vectors of doubles a vector of sums),
    the reference interpreter's values bit for bit."""
    model, feeds = _qlinear_block(np.random.default_rng(c + o), c, o, h, output)
    got, reference, kernels = _compiled_and_reference(model, feeds)
    np.testing.assert_array_equal(got[0], reference[0])
    contractions = [k for k in kernels if k.kind == "contraction"]
    assert len(contractions) == 2
    assert all("tk_channel_epilogue_" in k.loop_ir for k in contractions), [k.nodes for k in contractions]
