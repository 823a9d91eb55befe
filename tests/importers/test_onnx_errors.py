"""Unsupported operators are listed all at once; malformed models give a clear TensorKilnError."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import tensorkiln as tk  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_build import model, single  # noqa: E402

F = TensorProto.FLOAT


def test_every_unsupported_op_listed_at_once():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("NonZero", ["a"], ["b"], name="nz"),
             helper.make_node("StringNormalizer", ["s"], ["t"], name="strings"),
             helper.make_node("LinearRegressor", ["a"], ["c"], name="ml", domain="ai.onnx.ml"),
             helper.make_node("Loop", ["", ""], ["d"], name="loop", body=helper.make_graph([], "b", [], []))]
    m = model(nodes, [("x", F, [2]), ("s", TensorProto.STRING, [2])],
              [("b", TensorProto.INT64, None), ("c", F, None), ("d", F, None)])
    m.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    with pytest.raises(tk.UnsupportedOpError) as info:
        tk.onnx.load(m)
    message = str(info.value)
    for expected in ("'nz'", "NonZero", "'strings'", "StringNormalizer", "'ml'", "ai.onnx.ml", "'loop'",
                     "opset 17", "input 's'", "STRING"):
        assert expected in message, expected
    assert "'ok'" not in message
    assert len(info.value.items) == 5


def test_unsupported_dtype_is_reported():
    with pytest.raises(tk.UnsupportedOpError, match="UINT32"):
        tk.onnx.load(single("Relu", ["x"], dtype=TensorProto.UINT32))
    with pytest.raises(tk.UnsupportedOpError, match="attribute to: element type UINT16"):
        tk.onnx.load(single("Cast", ["x"], {"to": TensorProto.UINT16}))


def test_bad_bytes():
    with pytest.raises(tk.onnx.OnnxImportError, match="not a readable ONNX model"):
        tk.onnx.load(b"\x08\x07garbage\xff\xff\xff")
    assert issubclass(tk.onnx.OnnxImportError, tk.TensorKilnError)


def test_missing_file(tmp_path):
    with pytest.raises(tk.onnx.OnnxImportError, match="does not exist"):
        tk.onnx.load(str(tmp_path / "nope.onnx"))


def test_truncated_file(tmp_path):
    path = tmp_path / "cut.onnx"
    data = single("Relu", ["x"], shapes={"x": [3]}).SerializeToString()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(tk.onnx.OnnxImportError):
        tk.onnx.load(str(path))


def test_dangling_node_input():
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")]
    with pytest.raises(tk.onnx.OnnxImportError, match="'adder'.*'ghost'"):
        tk.onnx.load(model(nodes, [("x", F, [2])], [("y", F, None)]))


def test_missing_output():
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    with pytest.raises(tk.onnx.OnnxImportError, match="graph output 'z'"):
        tk.onnx.load(model(nodes, [("x", F, [2])], [("z", F, None)]))


def test_nodes_out_of_order_are_accepted():
    nodes = [helper.make_node("Relu", ["a"], ["y"]), helper.make_node("Neg", ["x"], ["a"])]
    module = tk.onnx.load(model(nodes, [("x", F, [2])], [("y", F, None)]), backend="interpreter")
    np.testing.assert_array_equal(module(np.array([1, -1], np.float32))[0], [0, 1])


def test_wrong_input_shape():
    module = tk.onnx.load(single("Relu", ["x"], shapes={"x": ["N", 3]}), backend="interpreter")
    with pytest.raises(tk.ShapeError, match=r"expects shape \['\?', 3\], got \[2, 4\]"):
        module(np.zeros((2, 4), np.float32))


def test_data_dependent_shape_is_a_clear_error():
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
             helper.make_node("Cast", ["m"], ["n"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["n", "shape"], ["k"]),
             helper.make_node("ConstantOfShape", ["k"], ["y"])]
    m = model(nodes, [("x", F, [3])], [("y", F, None)], {"shape": np.array([1], np.int64)})
    module = tk.onnx.load(m, backend="interpreter")
    with pytest.raises(tk.UnsupportedOpError, match="ConstantOfShape.*must be known when the model is compiled"):
        module(np.array([1, 2, 3], np.float32))


def test_shape_error_names_the_node():
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")]
    module = tk.onnx.load(model(nodes, [("a", F, [2, 3]), ("b", F, [2, 3])], [("y", F, None)]),
                          backend="interpreter")
    with pytest.raises(tk.ShapeError, match="node 'mm' \\(MatMul"):
        module(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32))
