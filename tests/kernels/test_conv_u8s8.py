"""The direct int8 convolutions: conv2d of dequantized 8-bit values runs as conv2d_u8s8 (groups 1) or
depthwise_u8s8 on each int8 dot-product path, exact against integer sums computed in numpy."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.errors import DTypeError, ShapeError
from tensorkiln.ir.graph import interpret
from tensorkiln.ir.ops import Attrs, TensorType, infer_type
from tensorkiln import dtypes as dt
from tensorkiln.ir.ops.quantized_conv import compact_depth_pays, conv_u8s8_matrix, pack_conv_u8s8
from tensorkiln.ir.ops.quantized import unpack_u8s8_panels
from tensorkiln.kernels.target import INT8_DOT_KINDS

from .dot_paths import avx2_int8_path, int8_path, random_ints  # noqa: F401  (fixtures)


# (N, C, H, W, O, kernel, stride, padding, dilation, groups): size-1 dims, channels that are no multiple
# of 4 / 16 / 32, odd planes, stride 2, dilation, padding, size-1 spatial, depthwise (groups = C = O), rows
# wider than a depthwise tile of 6 pixels and no multiple of it, depthwise kernels of even and odd height
# (the AVX2 helper sums kernel rows in pairs, an odd last row alone)
LAYERS = [
    (1, 1, 1, 1, 1, 1, 1, 0, 1, 1),
    (2, 3, 11, 13, 16, 3, 1, 1, 1, 1),
    (1, 9, 7, 5, 33, 3, 2, 1, 1, 1),
    (1, 20, 9, 9, 70, 1, 2, 0, 1, 1),
    (1, 8, 10, 10, 17, 3, 1, 2, 2, 1),
    (1, 64, 5, 6, 64, 3, 1, 1, 1, 1),
    (1, 7, 1, 1, 9, 3, 1, 1, 1, 1),
    (1, 19, 9, 8, 19, 3, 1, 1, 1, 19),
    (2, 40, 7, 7, 40, 3, 2, 1, 1, 40),
    (1, 16, 1, 1, 16, 3, 1, 1, 1, 16),
    (1, 5, 6, 6, 5, 5, 1, 2, 2, 5),
    (1, 24, 15, 17, 24, 3, 1, 1, 1, 24),
    (1, 12, 13, 13, 12, 3, 2, 1, 1, 12),
    (1, 10, 6, 7, 10, 2, 1, 0, 1, 10),
    (1, 16, 9, 9, 16, 4, 2, 1, 1, 16),
    (1, 9, 8, 8, 9, 1, 1, 0, 1, 9),
]


def _integer_conv(xq: np.ndarray, zero: int, w: np.ndarray, stride, padding, dilation, groups) -> np.ndarray:
    """The exact int64 sums of conv2d(xq - zero, w) (NCHW, padding with zeros after the shift)."""
    x = np.pad(xq.astype(np.int64) - zero, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    per_group = o // groups
    for r in range(kh):
        for s in range(kw):
            taps = x[:, :, r * dilation:r * dilation + (oh - 1) * stride + 1:stride,
                     s * dilation:s * dilation + (ow - 1) * stride + 1:stride]
            for g in range(groups):
                out[:, g * per_group:(g + 1) * per_group] += np.einsum(
                    "nchw,oc->nohw", taps[:, g * cg:(g + 1) * cg], w[g * per_group:(g + 1) * per_group, :, r, s])
    return out


def _qdq_conv_layers(layers: list[dict]):
    """One ONNX model of independent layers, y_i = Conv(DQ(x_i), DQ(W_i)) [+ bias, ReLU, QuantizeLinear], as
    a QDQ model writes them: x_i an input of its own 8-bit type, per-tensor or per-channel weight scales.
    Each layer: x, w, zero, x_scale, w_scale, stride, padding, dilation, groups [, bias, output (scale, zero),
    pads (ONNX's top, left, bottom, right: in place of padding on every side)]."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    inits, nodes, inputs, outputs = [], [], [], []
    for i, layer in enumerate(layers):
        x_q, w_scale = layer["x"], layer["w_scale"]
        scalar = w_scale.size == 1
        inits += [numpy_helper.from_array(np.array(layer["x_scale"], np.float32), f"sx{i}"),
                  numpy_helper.from_array(np.array(layer["zero"], x_q.dtype), f"zx{i}"),
                  numpy_helper.from_array(layer["w"], f"wq{i}"),
                  numpy_helper.from_array(w_scale.reshape(()) if scalar else w_scale, f"sw{i}"),
                  numpy_helper.from_array(np.zeros(() if scalar else w_scale.shape, np.int8), f"zw{i}")]
        nodes += [helper.make_node("DequantizeLinear", [f"x{i}", f"sx{i}", f"zx{i}"], [f"xd{i}"]),
                  helper.make_node("DequantizeLinear", [f"wq{i}", f"sw{i}", f"zw{i}"], [f"wd{i}"], axis=0),
                  helper.make_node("Conv", [f"xd{i}", f"wd{i}"], [f"c{i}"], strides=[layer["stride"]] * 2,
                                   pads=layer.get("pads", [layer["padding"]] * 4), dilations=[layer["dilation"]] * 2,
                                   group=layer["groups"])]
        last, out_type = f"c{i}", TensorProto.FLOAT
        if layer.get("bias") is not None:
            inits.append(numpy_helper.from_array(layer["bias"].reshape(-1, 1, 1), f"b{i}"))
            nodes += [helper.make_node("Add", [last, f"b{i}"], [f"cb{i}"]),
                      helper.make_node("Relu", [f"cb{i}"], [f"r{i}"])]
            last = f"r{i}"
        if layer.get("output") is not None:
            inits += [numpy_helper.from_array(np.array(layer["output"][0], np.float32), f"sy{i}"),
                      numpy_helper.from_array(np.array(layer["output"][1], np.uint8), f"zy{i}")]
            nodes.append(helper.make_node("QuantizeLinear", [last, f"sy{i}", f"zy{i}"], [f"q{i}"]))
            last, out_type = f"q{i}", TensorProto.UINT8
        nodes.append(helper.make_node("Identity", [last], [f"y{i}"]))
        x_type = TensorProto.UINT8 if x_q.dtype == np.uint8 else TensorProto.INT8
        inputs.append(helper.make_tensor_value_info(f"x{i}", x_type, x_q.shape))
        outputs.append(helper.make_tensor_value_info(f"y{i}", out_type, None))
    graph = helper.make_graph(nodes, "qconv", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _run(layers: list[dict]):
    """(tensorkiln's outputs, the optimized graph's ops, the module, the reference interpreter's outputs of
    the traced graph)."""
    module = tk.onnx.load(_qdq_conv_layers(layers))
    feeds = {f"x{i}": layer["x"] for i, layer in enumerate(layers)}
    got = module(**feeds)
    expected = interpret(module.graph(**feeds), *feeds.values())
    return list(got), [n.op for n in module.optimized_graph(**feeds).nodes], module, expected


def _layer(rng, x_dtype, n, c, h, w, o, k, stride, padding, dilation, groups, per_channel) -> dict:
    zero = int(rng.integers(-20, 20)) + (128 if x_dtype == np.uint8 else 0)
    return dict(x=random_ints(rng, x_dtype, (n, c, h, w)), w=random_ints(rng, np.int8, (o, c // groups, k, k)), zero=zero,
                x_scale=0.05, w_scale=rng.uniform(0.001, 0.01, o if per_channel else 1).astype(np.float32),
                stride=stride, padding=padding, dilation=dilation, groups=groups)


def _sums(layer: dict) -> np.ndarray:
    return _integer_conv(layer["x"], layer["zero"], layer["w"], layer["stride"], layer["padding"],
                         layer["dilation"], layer["groups"])


@pytest.mark.parametrize("x_dtype", [np.uint8, np.int8])
def test_direct_int8_convolution_is_exact_on_every_path(int8_path, x_dtype):
    rng = np.random.default_rng(INT8_DOT_KINDS.index(int8_path) + (x_dtype == np.int8))
    layers = [_layer(rng, x_dtype, *shape, per_channel=i % 2 == 0) for i, shape in enumerate(LAYERS)]
    got, ops, module, reference = _run(layers)
    dense = ops.count("conv2d_u8s8") + ops.count("conv2d_u8s8_winograd")
    assert dense == sum(l["groups"] == 1 for l in layers) and "conv2d" not in ops, ops
    assert ops.count("depthwise_u8s8") == sum(l["groups"] > 1 for l in layers)
    # on AVX2 a layer whose weights vpmaddubsw sums exactly (the 1 x 1 x 1 one) takes that step, and the 3x3
    # stride-1 layer of 64 channels Winograd F(2x2, 3x3)
    assert ops.count("conv2d_u8s8_winograd") == (int8_path == "avx2"), ops
    kinds = {f"int8 ({int8_path})"} | ({"int8 (maddubsw)", "int8 (winograd, avx2)"} if int8_path == "avx2" else set())
    precisions = {k.precision for k in module.report(**{f"x{i}": l["x"] for i, l in enumerate(layers)}).kernels
                  if k.kind == "contraction"}
    assert f"int8 ({int8_path})" in precisions and precisions <= kinds, precisions
    for index, (layer, out, ref) in enumerate(zip(layers, got, reference)):
        scale = (np.float32(layer["x_scale"]) * layer["w_scale"]).astype(np.float32).reshape(-1, 1, 1)
        want = _sums(layer).astype(np.float32) * scale  # the epilogue: float(sum) * (sx * sw), in float32
        np.testing.assert_array_equal(out, want, err_msg=f"layer {index}, {int8_path}")
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * max(np.abs(ref).max(), 1))


# output channels around the 16-column half of a 32-column panel: a last panel of at most 16 channels in use
# leaves its other half unsummed (int8_avx2.py), which neither epilogue may read
HALF_PANEL_CHANNELS = (15, 16, 17, 47, 48, 49)


def test_a_last_panel_of_at_most_sixteen_channels_is_exact_on_every_path(int8_path):
    rng = np.random.default_rng(11 + INT8_DOT_KINDS.index(int8_path))
    layers = [_layer(rng, np.uint8, 1, 5 + i, 6, 7, o, 1 + 2 * (i % 2), 1, i % 2, 1, 1, per_channel=True)
              for i, o in enumerate(HALF_PANEL_CHANNELS)]
    layers[0]["w"] = (layers[0]["w"] // 2).astype(np.int8)  # 7-bit weights: on AVX2, the maddubsw step
    for layer in layers[3:]:  # requantized to uint8: the vector epilogue helper reads the tile
        layer.update(bias=rng.standard_normal(layer["w"].shape[0]).astype(np.float32), output=(0.5, 3))
    got, ops, module, reference = _run(layers)
    assert ops.count("conv2d_u8s8") == len(layers), ops
    for index, (layer, out, ref) in enumerate(zip(layers[:3], got, reference)):
        scale = (np.float32(layer["x_scale"]) * layer["w_scale"]).astype(np.float32).reshape(-1, 1, 1)
        np.testing.assert_array_equal(out, _sums(layer).astype(np.float32) * scale,
                                      err_msg=f"{HALF_PANEL_CHANNELS[index]} channels, {int8_path}")
    for index, (out, ref) in enumerate(zip(got[3:], reference[3:])):
        assert out.dtype == np.uint8
        np.testing.assert_array_equal(out, ref, err_msg=f"{HALF_PANEL_CHANNELS[index + 3]} channels, {int8_path}")


def test_requantizing_epilogue_fuses_into_the_convolution_and_writes_uint8():
    """bias, ReLU and QuantizeLinear (round half to even, saturate) in the convolution's kernel, dense and
    depthwise."""
    rng = np.random.default_rng(5)
    layers = []
    for c, o, groups in ((12, 24, 1), (12, 12, 12)):
        layer = _layer(rng, np.uint8, 1, c, 9, 9, o, 3, 1, 1, 1, groups, per_channel=True)
        layer.update(x_scale=0.02, bias=rng.standard_normal(o).astype(np.float32), output=(0.03, 4))
        layers.append(layer)
    got, ops, module, reference = _run(layers)
    kernels = module.report(**{f"x{i}": l["x"] for i, l in enumerate(layers)}).kernels
    fused = [k for k in kernels if k.kind == "contraction"]
    assert len(fused) == 2 and all(k.precision.startswith("int8") for k in fused), kernels
    assert all("round" in " ".join(k.nodes) and "uint8" in " ".join(k.nodes) for k in fused), kernels
    for layer, out, ref in zip(layers, got, reference):
        real = np.maximum(_sums(layer).astype(np.float32) * (np.float32(0.02) * layer["w_scale"]).reshape(-1, 1, 1)
                          + layer["bias"].reshape(-1, 1, 1), 0)
        want = np.clip(np.rint(real / np.float32(0.03)) + 4, 0, 255)
        assert out.dtype == np.uint8
        assert np.abs(out.astype(np.int32) - want).max() <= 1  # the float epilogue's rounding: one quantum
        assert np.abs(out.astype(np.int32) - ref.astype(np.int32)).max() <= 1


def test_grouped_convolutions_other_than_depthwise_stay_in_float():
    layer = _layer(np.random.default_rng(2), np.uint8, 1, 8, 6, 6, 4, 3, 1, 1, 1, 2, per_channel=False)
    got, ops, _, reference = _run([layer])
    assert "conv2d_u8s8" not in ops and "depthwise_u8s8" not in ops
    np.testing.assert_allclose(got[0], reference[0], rtol=1e-5, atol=1e-5)


def test_filters_are_laid_out_tap_major_with_channels_in_groups_of_four():
    rng = np.random.default_rng(4)
    filters = random_ints(rng, np.int8, (37, 6, 3, 2))  # 6 channels: padded to 8
    matrix = conv_u8s8_matrix(filters)
    assert matrix.shape == (3 * 2 * 8, 37)
    assert matrix[(2 * 2 + 1) * 8 + 5, 36] == filters[36, 5, 2, 1] and not matrix[6:8].any()
    np.testing.assert_array_equal(unpack_u8s8_panels(pack_conv_u8s8(filters), 48, 37), matrix)


def test_a_shallow_input_keeps_its_channels_and_the_depth_is_rounded_up_once():
    rng = np.random.default_rng(6)
    filters = random_ints(rng, np.int8, (5, 3, 7, 7))  # an RGB stem
    matrix = conv_u8s8_matrix(filters, 3)
    assert matrix.shape == (148, 5) and not matrix[147:].any()  # 7 * 7 * 3 = 147 rows and one of zeros
    assert matrix[(4 * 7 + 6) * 3 + 2, 4] == filters[4, 2, 4, 6]
    assert compact_depth_pays((7, 7), 3) and compact_depth_pays((3, 3), 6)
    assert not compact_depth_pays((1, 1), 3) and not compact_depth_pays((3, 3), 8)  # no group saved


# (C, H, W, O, kernel, stride, padding, dilation): inputs whose channels are no multiple of 4, gathered into
# rows: an RGB stem (7x7, stride 2), runs of C bytes a tap (dilation 2), one channel, a row of one pixel
SHALLOW_LAYERS = [(3, 23, 21, 40, 7, 2, 3, 1), (3, 9, 10, 16, 3, 1, 2, 2), (1, 6, 7, 5, 5, 1, 2, 1),
                  (2, 1, 9, 33, 3, 2, 1, 1), (6, 5, 5, 8, 3, 1, 0, 1)]


def test_shallow_inputs_are_gathered_and_exact_on_every_path(int8_path):
    rng = np.random.default_rng(21 + INT8_DOT_KINDS.index(int8_path))
    layers = [_layer(rng, np.uint8, 1, c, h, w, o, k, stride, padding, dilation, 1, per_channel=True)
              for c, h, w, o, k, stride, padding, dilation in SHALLOW_LAYERS]
    layers[-1].update(bias=rng.standard_normal(8).astype(np.float32), output=(0.5, 3))  # requantized to uint8
    module = tk.onnx.load(_qdq_conv_layers(layers))
    feeds = {f"x{i}": layer["x"] for i, layer in enumerate(layers)}
    convs = [n for n in module.optimized_graph(**feeds).nodes if n.op == "conv2d_u8s8"]
    assert sorted(n.inputs[0].shape[3] for n in convs) == sorted(shape[0] for shape in SHALLOW_LAYERS)
    got, reference = list(module(**feeds)), interpret(module.graph(**feeds), *feeds.values())
    for index, (layer, out) in enumerate(zip(layers[:-1], got)):
        scale = (np.float32(layer["x_scale"]) * layer["w_scale"]).astype(np.float32).reshape(-1, 1, 1)
        np.testing.assert_array_equal(out, _sums(layer).astype(np.float32) * scale,
                                      err_msg=f"layer {SHALLOW_LAYERS[index]}, {int8_path}")
    assert got[-1].dtype == np.uint8
    np.testing.assert_array_equal(got[-1], reference[-1])


def test_bad_operands_are_refused_with_the_shapes():
    x, panels, comp = (TensorType((1, 5, 5, 6), dt.uint8), TensorType((1, 18, 128), dt.int8),
                       TensorType((32,), dt.int32))
    attrs = Attrs(kernel=(3, 3), n=32, stride=(1, 1), dilation=(1, 1))
    with pytest.raises(ShapeError, match=r"ceil\(KH \* KW \* C / 4\).*got \(1, 5, 5, 6\), \(1, 18, 128\)"):
        infer_type("conv2d_u8s8", [x, panels, comp], attrs)  # 18 groups is 8 channels' depth, not 6's (14)
    assert infer_type("conv2d_u8s8", [x, TensorType((1, 14, 128), dt.int8), comp], attrs).shape == (1, 3, 3, 32)
    with pytest.raises(DTypeError, match="uint8"):
        infer_type("conv2d_u8s8", [TensorType((1, 5, 5, 8), dt.int8), panels, comp], attrs)
    with pytest.raises(ShapeError, match="larger than the padded input"):
        infer_type("depthwise_u8s8", [TensorType((1, 2, 2, 8), dt.uint8), TensorType((3, 3, 8), dt.int32),
                                      TensorType((8,), dt.int32)], Attrs(stride=(1, 1), dilation=(1, 1)))


def test_a_debug_build_compiles_the_vector_helpers_and_agrees(monkeypatch):
    """TENSORKILN_DEBUG=1 (UBSan, bounds checks) targets the CPU the kernels were chosen for: its
    intrinsics (here the int8 helpers of this CPU's dot-product path) compile and give the same values."""
    rng = np.random.default_rng(8)
    layers = [_layer(rng, np.uint8, 1, c, h, w, o, k, stride, padding, dilation, 1, per_channel=True)
              for c, h, w, o, k, stride, padding, dilation in SHALLOW_LAYERS[:2]]
    release, _, _, _ = _run(layers)
    monkeypatch.setenv("TENSORKILN_DEBUG", "1")
    debug, _, module, _ = _run(layers)
    source = open(module.report(**{f"x{i}": l["x"] for i, l in enumerate(layers)}).source_path).read()
    assert "tk_conv_u8s8_gathered_" in source and "tk_check" in source  # the helpers, with debug checks
    for a, b in zip(debug, release):
        np.testing.assert_array_equal(a, b)


def test_a_module_with_an_int8_gemm_and_convolution_holds_each_helper_once(int8_path):
    """Both helpers carry the AVX2 row split: one program with a ConvInteger and a MatMulInteger compiles
    and both are exact."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(60 + INT8_DOT_KINDS.index(int8_path))
    x, w = random_ints(rng, np.uint8, (1, 8, 9, 9)), random_ints(rng, np.int8, (24, 8, 3, 3))
    a, b = random_ints(rng, np.uint8, (5, 40)), random_ints(rng, np.int8, (40, 33))
    graph = helper.make_graph(
        [helper.make_node("ConvInteger", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
         helper.make_node("MatMulInteger", ["a", "b"], ["z"])], "int8_pair",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape),
         helper.make_tensor_value_info("a", TensorProto.UINT8, a.shape)],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None),
         helper.make_tensor_value_info("z", TensorProto.INT32, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    module = tk.onnx.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    y, z = module(x=x, a=a)
    ops = [n.op for n in module.optimized_graph(x=x, a=a).nodes]
    assert "matmul_u8s8" in ops and any(op.startswith("conv2d_u8s8") for op in ops), ops
    np.testing.assert_array_equal(y, _integer_conv(x, 0, w, 1, 1, 1, 1))
    np.testing.assert_array_equal(z, a.astype(np.int64) @ b.astype(np.int64))


# (n, c, h, w, o, k, stride, padding, dilation, the AVX2 split expected)
SPLIT_LAYERS = [(1, 64, 6, 7, 64, 1, 1, 0, 1, True), (2, 32, 9, 8, 64, 3, 2, 1, 1, True),
                (1, 64, 8, 8, 64, 1, 2, 0, 1, False), (1, 3, 17, 15, 64, 7, 2, 3, 1, True),
                (1, 32, 9, 9, 72, 3, 1, 2, 2, True), (1, 16, 6, 6, 96, 1, 1, 0, 1, False)]


@pytest.mark.parametrize("layer_shape", SPLIT_LAYERS, ids=lambda s: "x".join(map(str, s[:-1])))
def test_avx2_splits_the_windows_of_deep_wide_and_covering_layers_only(avx2_int8_path, layer_shape):
    """On AVX2 a layer of at least 16 depth groups and 64 channels whose windows read every input pixel sums
    on activations split into 16-bit pairs first (`split_avx2`, gathered too: the 7x7 stem); a strided 1x1
    layer or a shallow one widens them at every step; all exact."""
    *shape, split = layer_shape
    rng = np.random.default_rng(sum(shape))
    layer = _layer(rng, np.uint8, *shape, groups=1, per_channel=True)
    got, ops, module, _ = _run([layer])
    assert "conv2d_u8s8" in ops, ops
    scale = (np.float32(layer["x_scale"]) * layer["w_scale"]).astype(np.float32).reshape(-1, 1, 1)
    np.testing.assert_array_equal(got[0], _sums(layer).astype(np.float32) * scale)
    source = open(module.report(x0=layer["x"]).source_path).read()
    assert ("tk_conv_u8s8_split_avx2(" in source or "tk_conv_u8s8_gathered_split_avx2(" in source) == split
