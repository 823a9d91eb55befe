"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, compiled, against onnxruntime on random shapes."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import tensorkiln as tk  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_build import model  # noqa: E402
from onnx_ort import check_against_onnxruntime  # noqa: E402

rng = np.random.default_rng(7)


def _loss_model(op, shape, reduction, ignore_index, weighted, log_prob):
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    inputs = ["x", "t"] + (["w"] if weighted else [])
    outputs = ["loss"] + (["log_prob"] if log_prob else [])
    node = helper.make_node(op, inputs, outputs, **attrs)
    target_shape = (shape[0],) + shape[2:]
    ins = [("x", TensorProto.FLOAT, shape), ("t", TensorProto.INT64, target_shape)]
    if weighted:
        ins.append(("w", TensorProto.FLOAT, (shape[1],)))
    outs = [(o, TensorProto.FLOAT, None) for o in outputs]
    return model([node], ins, outs, opset=13)


# (shape, reduction, ignore_index, weighted): size-1 dims, odd sizes, spatial axes, a negative ignore_index
LOSS_CASES = [((3, 5), "mean", None, False), ((1, 7, 3), "sum", 2, True), ((4, 1, 2, 3), "none", None, True),
              ((5, 6, 9), "mean", -1, True), ((2, 3, 1, 17), "mean", 0, False)]


@pytest.mark.parametrize("op", ["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"])
@pytest.mark.parametrize("shape,reduction,ignore_index,weighted", LOSS_CASES)
def test_losses_match_onnxruntime(op, shape, reduction, ignore_index, weighted):
    x = rng.standard_normal(shape).astype(np.float32)
    target = rng.integers(0, shape[1], (shape[0],) + shape[2:]).astype(np.int64)
    if ignore_index is not None:  # some positions ignored (an ignore_index outside [0, C) included)
        target[rng.random(target.shape) < 0.3] = ignore_index
        target.flat[0] = ignore_index
        target.flat[-1] = 0 if ignore_index != 0 else shape[1] - 1
    feeds = {"x": x, "t": target}
    if weighted:
        feeds["w"] = rng.random(shape[1]).astype(np.float32) + 0.1
    log_prob = op == "SoftmaxCrossEntropyLoss" and reduction != "sum"
    check_against_onnxruntime(_loss_model(op, shape, reduction, ignore_index, weighted, log_prob), feeds,
                              rtol=1e-5, atol=1e-5)


def test_loss_with_a_target_of_the_wrong_shape_names_the_node_and_shapes():
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["loss"], name="ce")
    m = model([node], [("x", TensorProto.FLOAT, (3, 5)), ("t", TensorProto.INT64, (4,))],
              [("loss", TensorProto.FLOAT, None)], opset=13)
    with pytest.raises(tk.TensorKilnError, match=r"'ce'.*\[4\].*\[3, 5\]"):
        tk.onnx.load(m)(np.zeros((3, 5), np.float32), np.zeros(4, np.int64))
