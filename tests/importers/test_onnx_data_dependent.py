"""Operators whose output shapes depend on data (NonZero, Unique, Compress, NonMaxSuppression, a TopK or
Reshape fed by computed values), in the middle of graphs: run as compiled stages, checked against
onnxruntime with random inputs."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorkiln as tk

ort = pytest.importorskip("onnxruntime")
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, initializers=None, opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                              [numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds_list):
    module = tk.onnx.load(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feeds in feeds_list:
        ours = module(**feeds)
        theirs = session.run(None, feeds)
        for a, b in zip(ours, theirs):
            assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert module.report(**feeds_list[0]).backend == "c"
    return module


def test_nonzero_between_compiled_segments():
    nodes = [helper.make_node("Sub", ["x", "t"], ["d"]), helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("NonZero", ["r"], ["nz"]), helper.make_node("Transpose", ["nz"], ["idx"]),
             helper.make_node("GatherND", ["x", "idx"], ["picked"]), helper.make_node("Exp", ["picked"], ["y"])]
    model = _model(nodes, [("x", F, [4, 5]), ("t", F, [])], [("y", F), ("nz", I64)])
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((4, 5)).astype(np.float32), "t": np.array(v, np.float32)} for v in (-0.5, 0.3, 9.0)]
    module = _check(model, feeds)
    assert "NonZero): on actual values" in module.stages
    assert module.stages.count("compiled segment") == 2


@pytest.mark.parametrize("sort", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_unique_sorted_or_by_first_occurrence(sort, axis):
    attrs = {"sorted": sort} if axis is None else {"sorted": sort, "axis": axis}
    nodes = [helper.make_node("Floor", ["x"], ["f"]),
             helper.make_node("Unique", ["f"], ["y", "indices", "inverse", "counts"], **attrs)]
    model = _model(nodes, [("x", F, [6, 3])], [("y", F), ("indices", I64), ("inverse", I64), ("counts", I64)],
                   opset=11)
    rng = np.random.default_rng(1)
    base = rng.integers(0, 3, (3, 3)).astype(np.float32)
    x = np.concatenate([base, base[::-1]], 0) + 0.25  # repeated rows and values
    _check(model, [{"x": x}, {"x": rng.integers(0, 4, (6, 3)).astype(np.float32)}])


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_compress_by_a_computed_condition(axis):
    extra = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("Greater", ["c", "zero"], ["cond"]),
             helper.make_node("Compress", ["x", "cond"], ["y"], **extra), helper.make_node("Neg", ["y"], ["z"])]
    length = 12 if axis is None else (3 if axis == 0 else 4)
    model = _model(nodes, [("x", F, [3, 4]), ("c", F, [length])], [("z", F)], {"zero": np.zeros((), np.float32)})
    rng = np.random.default_rng(2)
    _check(model, [{"x": rng.standard_normal((3, 4)).astype(np.float32),
                    "c": rng.standard_normal(length).astype(np.float32)} for _ in range(3)])


@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression_matches_onnxruntime(center):
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "threshold"], ["sel"],
                              center_point_box=center)]
    model = _model(nodes, [("boxes", F, [2, 20, 4]), ("scores", F, [2, 3, 20])], [("sel", I64)],
                   {"limit": np.array([4], np.int64), "iou": np.array([0.4], np.float32),
                    "threshold": np.array([0.2], np.float32)}, opset=11)
    rng = np.random.default_rng(3 + center)
    feeds = []
    for _ in range(3):
        corners = rng.uniform(0, 10, (2, 20, 2)).astype(np.float32)
        sizes = rng.uniform(1, 4, (2, 20, 2)).astype(np.float32)
        boxes = np.concatenate([corners, corners + sizes], -1) if not center else \
            np.concatenate([corners, sizes], -1)
        scores = rng.uniform(0, 1, (2, 3, 20)).astype(np.float32)
        scores[0, 0, :4] = 0.5  # ties: the lower box index first
        feeds.append({"boxes": boxes, "scores": scores})
    _check(model, feeds)


def test_topk_with_a_computed_k():
    nodes = [helper.make_node("Size", ["mask"], ["n"]), helper.make_node("ReduceSum", ["mask"], ["s"], keepdims=1),
             helper.make_node("Cast", ["s"], ["k"], to=I64), helper.make_node("TopK", ["x", "k"], ["v", "i"]),
             helper.make_node("Mul", ["v", "v"], ["y"])]
    model = _model(nodes, [("x", F, [2, 7]), ("mask", F, [5])], [("y", F), ("i", I64)])
    rng = np.random.default_rng(4)
    _check(model, [{"x": rng.standard_normal((2, 7)).astype(np.float32),
                    "mask": (rng.random(5) > p).astype(np.float32)} for p in (0.2, 0.5, 0.8)])


def test_errors_name_the_node():
    nodes = [helper.make_node("Compress", ["x", "cond"], ["y"], axis=0, name="squeeze_rows")]
    model = _model(nodes, [("x", F, [2, 3]), ("cond", TensorProto.BOOL, [5])], [("y", F)])
    with pytest.raises(tk.ShapeError, match="squeeze_rows.*condition has 5 elements"):
        tk.onnx.load(model)(x=np.ones((2, 3), np.float32), cond=np.ones(5, bool))
