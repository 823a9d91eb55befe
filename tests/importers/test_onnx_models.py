"""A small CNN and a small transformer block built with onnx.helper, compiled to C and checked against
onnx's numpy reference evaluator, at two batch sizes (the batch dimension is dynamic)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import tensorkiln as tk  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_build import model  # noqa: E402

F = TensorProto.FLOAT
rng = np.random.default_rng(42)


def w(*shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def small_cnn():
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c1", "g1", "be1", "m1", "v1"], ["n1"], epsilon=1e-5),
        n("Relu", ["n1"], ["r1"]),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "w2"], ["c2"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER", group=2),
        n("Relu", ["c2"], ["r2"]),
        n("GlobalAveragePool", ["r2"], ["g"]),
        n("Flatten", ["g"], ["f"], axis=1),
        n("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
        n("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    inits = {"w1": w(8, 3, 3, 3), "b1": w(8), "g1": 1 + w(8), "be1": w(8), "m1": w(8),
             "v1": np.abs(w(8)) + 0.5, "w2": w(16, 4, 3, 3), "wf": w(10, 16), "bf": w(10)}
    return model(nodes, [("x", F, ["N", 3, 16, 16])], [("probs", F, ["N", 10])], inits, opset=17, name="cnn")


def transformer_block(d=16, heads=2, t=6):
    n = helper.make_node
    dh = d // heads
    mask = np.triu(np.full((t, t), -1e9, np.float32), 1)
    nodes = [
        n("LayerNormalization", ["x", "ln1_s", "ln1_b"], ["h"], axis=-1, epsilon=1e-5),
        n("MatMul", ["h", "wqkv"], ["qkv0"]), n("Add", ["qkv0", "bqkv"], ["qkv"]),
        n("Split", ["qkv"], ["q", "k", "v"], axis=-1, num_outputs=3),
        # (N, T, D) -> (N, T, H, dh) with the batch size read from the input's shape
        n("Shape", ["x"], ["xs"]), n("Slice", ["xs", "zero", "two"], ["nt"]),
        n("Concat", ["nt", "hd"], ["split_shape"], axis=0),
        n("Reshape", ["q", "split_shape"], ["q4"]), n("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        n("Reshape", ["k", "split_shape"], ["k4"]), n("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        n("Reshape", ["v", "split_shape"], ["v4"]), n("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
        n("MatMul", ["qh", "kt"], ["s0"]), n("Mul", ["s0", "scale"], ["s1"]), n("Add", ["s1", "mask"], ["s2"]),
        n("Softmax", ["s2"], ["a"], axis=-1), n("MatMul", ["a", "vh"], ["o4"]),
        n("Transpose", ["o4"], ["o3"], perm=[0, 2, 1, 3]), n("Concat", ["nt", "dd"], ["merge_shape"], axis=0),
        n("Reshape", ["o3", "merge_shape"], ["o"]),
        n("MatMul", ["o", "wo"], ["proj"]), n("Add", ["x", "proj"], ["x1"]),
        n("LayerNormalization", ["x1", "ln2_s", "ln2_b"], ["h2"], axis=-1, epsilon=1e-5),
        n("MatMul", ["h2", "w1"], ["f0"]), n("Add", ["f0", "b1"], ["f1"]), n("Gelu", ["f1"], ["f2"]),
        n("MatMul", ["f2", "w2"], ["f3"]), n("Add", ["x1", "f3"], ["y"]),
    ]
    inits = {"ln1_s": 1 + w(d), "ln1_b": w(d), "wqkv": w(d, 3 * d), "bqkv": w(3 * d),
             "zero": np.array([0], np.int64), "two": np.array([2], np.int64),
             "hd": np.array([heads, dh], np.int64), "dd": np.array([d], np.int64),
             "scale": np.float32(1 / np.sqrt(dh)), "mask": mask, "wo": w(d, d),
             "ln2_s": 1 + w(d), "ln2_b": w(d), "w1": w(d, 4 * d), "b1": w(4 * d), "w2": w(4 * d, d)}
    return model(nodes, [("x", F, ["N", t, d])], [("y", F, ["N", t, d])], inits, opset=20, name="block")


@pytest.mark.parametrize("build, shape", [(small_cnn, (3, 16, 16)), (transformer_block, (6, 16))])
def test_model_compiled_matches_reference(build, shape):
    m = build()
    module = tk.onnx.load(m)
    reference = ReferenceEvaluator(m)
    for batch in (2, 1):
        x = rng.standard_normal((batch,) + shape).astype(np.float32)
        expected = reference.run(None, {"x": x})[0]
        actual = module(x)[0]
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)
    report = module.report(x)
    assert report.backend == "c"
    profile = module.profile(x, repeat=2)  # every kernel of that signature, timed
    assert [k.name for k in profile.kernels] == [k.name for k in report.kernels]


def test_transformer_graph_has_no_shape_ops():
    """The Shape/Slice/Concat chains fold at trace time: the graph holds only compute and movement."""
    module = tk.onnx.load(transformer_block(), backend="interpreter")
    graph = module.graph(np.zeros((2, 6, 16), np.float32))
    assert {node.op for node in graph.nodes} <= {"input", "constant", "reduce_sum", "sub", "mul", "add", "rsqrt",
                                                   "matmul", "slice", "reshape", "permute", "reduce_max", "exp",
                                                   "div", "erf", "expand"}
