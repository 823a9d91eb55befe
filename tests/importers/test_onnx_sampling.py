"""GridSample and AffineGrid, compiled, against onnxruntime on random shapes and coordinates.

Coordinates reach past [-1, 1] so every padding mode is exercised; one model holds a node per
padding mode (align_corners alternating between the cases), so each case costs one C compile.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import tensorkiln as tk  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_build import model  # noqa: E402
from onnx_ort import check_against_onnxruntime  # noqa: E402

rng = np.random.default_rng(11)
PADDINGS = ["zeros", "border", "reflection"]


def _grid_sample_model(mode: str, x_shape, grid_shape, aligns):
    nodes, outputs = [], []
    for i, (padding, align) in enumerate(zip(PADDINGS, aligns)):
        nodes.append(helper.make_node("GridSample", ["x", "grid"], [f"y{i}"], mode=mode, padding_mode=padding,
                                      align_corners=align))
        outputs.append((f"y{i}", TensorProto.FLOAT, None))
    return model(nodes, [("x", TensorProto.FLOAT, x_shape), ("grid", TensorProto.FLOAT, grid_shape)], outputs,
                 opset=20)


# (mode, input shape, grid shape, align_corners of the zeros/border/reflection nodes): odd sizes,
# size-1 axes (a single row, a single plane), 2 and 3 spatial axes
GRID_CASES = [("linear", (2, 3, 5, 7), (2, 4, 6, 2), (0, 1, 0)), ("nearest", (1, 2, 1, 9), (1, 3, 5, 2), (1, 0, 1)),
              ("cubic", (2, 1, 6, 5), (2, 7, 3, 2), (0, 1, 1)), ("cubic", (1, 2, 3, 4), (1, 5, 2, 2), (1, 0, 0)),
              ("linear", (1, 2, 3, 1, 5), (1, 2, 3, 5, 3), (1, 0, 1))]


@pytest.mark.parametrize("mode,x_shape,grid_shape,aligns", GRID_CASES, ids=str)
def test_grid_sample_matches_onnxruntime(mode, x_shape, grid_shape, aligns):
    x = rng.standard_normal(x_shape).astype(np.float32)
    grid = rng.uniform(-1.6, 1.6, grid_shape).astype(np.float32)
    grid.flat[:4] = [-1.0, 1.0, 0.0, 3.7]  # the corners exactly, the center, and several reflections away
    check_against_onnxruntime(_grid_sample_model(mode, x_shape, grid_shape, aligns), {"x": x, "grid": grid},
                              rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 1, 3, 2, 7]], ids=str)
def test_affine_grid_matches_onnxruntime(size):
    rank = len(size) - 2
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], [f"g{a}"], align_corners=a) for a in (0, 1)]
    m = model(nodes, [("theta", TensorProto.FLOAT, (size[0], rank, rank + 1))],
              [(f"g{a}", TensorProto.FLOAT, None) for a in (0, 1)],
              initializers={"size": np.array(size, np.int64)}, opset=20)
    theta = rng.standard_normal((size[0], rank, rank + 1)).astype(np.float32)
    check_against_onnxruntime(m, {"theta": theta}, rtol=1e-5, atol=1e-6)


def test_grid_sample_with_a_grid_of_the_wrong_shape_names_the_node_and_shapes():
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="warp")
    m = model([node], [("x", TensorProto.FLOAT, (1, 2, 4, 4)), ("grid", TensorProto.FLOAT, (1, 3, 3, 3))],
              [("y", TensorProto.FLOAT, None)], opset=20)
    with pytest.raises(tk.TensorKilnError, match=r"'warp'.*\[1, 2, 4, 4\].*\[1, 3, 3, 3\]"):
        tk.onnx.load(m)(np.zeros((1, 2, 4, 4), np.float32), np.zeros((1, 3, 3, 3), np.float32))
