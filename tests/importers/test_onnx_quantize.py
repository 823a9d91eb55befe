"""tk.quantize on a float ONNX model from tk.onnx.load: quantized onto the int8 kernels by tensorkiln's own
calibration, called as the module is, its layers named by the ONNX nodes reading their weights."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensorkiln as tk  # noqa: E402
from tensorkiln.importers.onnx.quantize import QuantizedOnnxModule  # noqa: E402

RNG = np.random.default_rng(20261129)


def _cnn(width: int = 12, classes: int = 5) -> bytes:
    """image -> Conv 3x3 -> Relu -> Conv 3x3 (no name: labelled "#2 Conv") -> Relu -> GlobalAveragePool
    -> Flatten -> Gemm (transB) -> logits."""
    weights = {"w1": RNG.standard_normal((width, 3, 3, 3)).astype(np.float32) * 0.3,
               "b1": RNG.standard_normal(width).astype(np.float32) * 0.1,
               "w2": RNG.standard_normal((width, width, 3, 3)).astype(np.float32) * 0.1,
               "w3": RNG.standard_normal((classes, width)).astype(np.float32) * 0.3,
               "b3": RNG.standard_normal(classes).astype(np.float32) * 0.1}
    nodes = [helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], name="stem/conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="stem/relu"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="body/relu"),
             helper.make_node("GlobalAveragePool", ["r2"], ["pooled"], name="pool"),
             helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"),
             helper.make_node("Gemm", ["flat", "w3", "b3"], ["logits"], name="head/gemm", transB=1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                                           ["batch", 3, 10, 10])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _images(batch: int = 4) -> np.ndarray:
    return RNG.standard_normal((batch, 3, 10, 10)).astype(np.float32)


def test_a_float_onnx_model_is_quantized_onto_the_int8_kernels():
    model = tk.onnx.load(_cnn())
    calibration = [_images() for _ in range(4)]  # one array per sample: the model has one input
    quantized = tk.quantize(model, calibration, method="percentile")
    assert isinstance(quantized, QuantizedOnnxModule)
    x = _images()
    want = model(x)[0]
    got = quantized(x)[0]
    assert np.max(np.abs(got - want)) <= 0.05 * np.max(np.abs(want))
    np.testing.assert_array_equal(quantized(image=x, return_dict=True)["logits"], got)  # called as the module is
    precisions = [k.precision for k in quantized.report(x).kernels]
    assert sum(p.startswith("int8") for p in precisions) == 3, precisions  # two convolutions and the Gemm
    report = quantized.quantization_report()
    assert [layer.name for layer in report.layers] == ["stem/conv", "#2 Conv", "head/gemm"]
    assert all(layer.quantized for layer in report.layers)
    assert model(x)[0] is not got and np.array_equal(model(x)[0], want)  # the float module is unchanged


def test_samples_by_input_name_and_layers_kept_float_by_node_name():
    model = tk.onnx.load(_cnn())
    calibration = [{"image": _images()} for _ in range(3)]
    quantized = tk.quantize(model, calibration, keep_float=["head/gemm"])
    report = quantized.quantization_report()
    assert not report.layer("head/gemm").quantized and report.layer("stem/conv").quantized
    x = _images(2)  # another batch size than the calibration's: compiled again, quantized alike
    want = model(x)[0]
    assert np.max(np.abs(quantized(x)[0] - want)) <= 0.05 * np.max(np.abs(want))
    with pytest.raises(ValueError, match="head/gem.*matches no quantizable layer.*stem/conv"):
        tk.quantize(model, calibration, keep_float="head/gem")
    with pytest.raises(TypeError, match="has no input 'pixels'"):
        tk.quantize(model, [{"pixels": _images()}])
