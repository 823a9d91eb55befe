"""Col2Im, compiled, against onnxruntime (1 and 2 spatial axes) and onnx's reference (3 axes, where
onnxruntime 1.23 disagrees with the standard): odd sizes, strides, dilations, pads."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import tensorkiln as tk  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_build import model  # noqa: E402
from onnx_ort import check_against_onnxruntime  # noqa: E402

rng = np.random.default_rng(17)


def _blocks(image, block, dilations, pads, strides):
    r = len(image)
    return [(i + pads[a] + pads[a + r] - (k - 1) * d - 1) // s + 1
            for a, (i, k, d, s) in enumerate(zip(image, block, dilations, strides))]


def _col2im_model(n, c, image, block, dilations, pads, strides, name="c2i"):
    length = int(np.prod(_blocks(image, block, dilations, pads, strides)))
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], name=name, dilations=dilations, pads=pads,
                            strides=strides)
    inits = {"image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    return model([node], [("x", TensorProto.FLOAT, (n, c * int(np.prod(block)), length))],
                 [("y", TensorProto.FLOAT, None)], inits, opset=18), (n, c * int(np.prod(block)), length)


# (N, C, image, block, dilations, pads, strides)
CASES = [(2, 3, [5, 7], [2, 3], [1, 1], [0, 1, 1, 0], [1, 2]), (1, 1, [9, 4], [3, 1], [2, 1], [1, 0, 2, 0], [2, 1]),
         (1, 2, [11], [3], [1], [2, 1], [3]), (1, 1, [3, 4, 5], [2, 2, 3], [1, 1, 2], [0] * 6, [1, 2, 1])]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_col2im_matches_onnxruntime(case):
    m, shape = _col2im_model(*case)
    x = rng.standard_normal(shape).astype(np.float32)
    if len(case[2]) < 3:
        check_against_onnxruntime(m, {"x": x}, rtol=1e-5, atol=1e-5)
        return
    from onnx.reference import ReferenceEvaluator
    module = tk.onnx.load(m)
    np.testing.assert_allclose(module(x)[0], ReferenceEvaluator(m).run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert module.report(x).backend == "c"


def test_col2im_with_the_wrong_column_count_names_the_node_and_shapes():
    m, shape = _col2im_model(1, 1, [4, 4], [2, 2], [1, 1], [0] * 4, [1, 1])
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 8
    with pytest.raises(tk.TensorKilnError, match=r"'c2i'.*\[1, 4, 8\]"):
        tk.onnx.load(m)(np.zeros((1, 4, 8), np.float32))
