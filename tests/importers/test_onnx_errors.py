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
             helper.make_node("Frobnicate", ["a"], ["b"], name="nz"),
             helper.make_node("StringNormalizer", ["s"], ["t"], name="strings"),
             helper.make_node("LinearRegressor", ["a"], ["c"], name="ml", domain="ai.onnx.ml"),
             helper.make_node("Loop", ["", ""], ["d"], name="loop", body=helper.make_graph([], "b", [], []))]
    m = model(nodes, [("x", F, [2]), ("s", TensorProto.STRING, [2])],
              [("b", TensorProto.INT64, None), ("c", F, None), ("d", F, None)])
    m.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    with pytest.raises(tk.UnsupportedOpError) as info:
        tk.onnx.load(m)
    message = str(info.value)
    for expected in ("'nz'", "Frobnicate", "'strings'", "StringNormalizer", "'ml'", "ai.onnx.ml", "'loop'",
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


def test_a_shape_computed_from_data_runs_in_stages():
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
             helper.make_node("Cast", ["m"], ["n"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["n", "shape"], ["k"]),
             helper.make_node("ConstantOfShape", ["k"], ["y"])]
    m = model(nodes, [("x", F, [3])], [("y", F, None)], {"shape": np.array([1], np.int64)})
    module = tk.onnx.load(m, backend="interpreter")
    assert module(np.array([1, 2, 3], np.float32))[0].shape == (3,)
    assert module(np.array([5, 2, 3], np.float32))[0].shape == (5,)
    assert "ConstantOfShape): on actual values" in module.stages


def test_shape_error_names_the_node():
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")]
    module = tk.onnx.load(model(nodes, [("a", F, [2, 3]), ("b", F, [2, 3])], [("y", F, None)]),
                          backend="interpreter")
    with pytest.raises(tk.ShapeError, match="node 'mm' \\(MatMul"):
        module(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32))


# ---- declared graph-output types ---------------------------------------------------------------------

def test_output_declared_with_another_element_type_is_an_error():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])], [("y", TensorProto.INT64, [2])])
    module = tk.onnx.load(m, backend="interpreter")
    with pytest.raises(tk.onnx.OnnxImportError, match="output 'y' is declared int64 but the model computes float32"):
        module(np.zeros(2, np.float32))


def test_output_declared_with_another_static_shape_warns():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["N", 3])], [("y", F, [5, 3])])
    module = tk.onnx.load(m, backend="interpreter")
    with pytest.warns(tk.onnx.OnnxOutputShapeWarning, match=r"output 'y' is declared with shape \[5, 3\] but the "
                                                            r"model computes \[2, 3\]"):
        y, = module(np.ones((2, 3), np.float32))
    assert y.shape == (2, 3)  # a warning, as ONNX Runtime gives: the computed output is returned
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])], [("y", F, [2, 1])])
    with pytest.warns(tk.onnx.OnnxOutputShapeWarning, match=r"declared with shape \[2, 1\]"):
        tk.onnx.load(m, backend="interpreter")(np.ones(2, np.float32))


def test_symbolic_and_undeclared_output_dimensions_match_any_size(recwarn):
    m = model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["z"])],
              [("x", F, ["N", 3])], [("y", F, ["batch", 3]), ("z", TensorProto.UNDEFINED, None)])
    module = tk.onnx.load(m, backend="interpreter")
    module(np.ones((4, 3), np.float32))
    assert not [w for w in recwarn if issubclass(w.category, tk.onnx.OnnxOutputShapeWarning)]


# ---- function bodies: tensorkiln's own failures are failures, not "unsupported" ------------------------

def _rms_norm():
    """RMSNormalization (opset 23) has no converter: it runs through its function body."""
    return model([helper.make_node("RMSNormalization", ["x", "s"], ["y"], name="rms")],
                 [("x", F, [2, 4]), ("s", F, [4])], [("y", F, [2, 4])], opset=23)


def test_function_body_expands():
    module = tk.onnx.load(_rms_norm(), backend="interpreter")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    y, = module(x, np.ones(4, np.float32))
    np.testing.assert_allclose(y, x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5), rtol=1e-5)


def test_tensorkiln_error_while_expanding_a_function_body_propagates(monkeypatch, tmp_path):
    from tensorkiln.importers.onnx import functions
    from onnx_cases import Case, run_case

    def broken(node, opset):
        raise RuntimeError("a bug in the expansion")
    monkeypatch.setattr(functions, "_default_attributes", broken)
    with pytest.raises(RuntimeError, match="a bug in the expansion"):
        tk.onnx.load(_rms_norm(), backend="interpreter")
    (tmp_path / "model.onnx").write_bytes(_rms_norm().SerializeToString())
    with pytest.raises(RuntimeError):  # the conformance runner counts it as failed, not unsupported
        run_case(Case("node", "rms", str(tmp_path)), "interpreter")


def test_onnx_failing_to_build_a_function_body_is_an_import_error(monkeypatch):
    from tensorkiln.importers.onnx import functions

    def rejected(*args):
        raise onnx.checker.ValidationError("attribute out of range")
    monkeypatch.setattr(functions, "_plain_body", rejected)
    monkeypatch.setattr(functions, "_context_dependent_body", rejected)
    with pytest.raises(tk.onnx.OnnxImportError, match="'rms'.*RMSNormalization.*attribute out of range"):
        tk.onnx.load(_rms_norm(), backend="interpreter")


def test_unsupported_operator_inside_a_function_body_stays_unsupported():
    m = model([helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y"], name="sce")],
              [("x", F, [2, 3]), ("t", TensorProto.INT64, [2])], [("y", F, [])], opset=13)
    with pytest.raises(tk.onnx.UnsupportedModelError, match="'sce'"):
        tk.onnx.load(m, backend="interpreter")


@pytest.mark.parametrize("op, attrs, message", [
    ("ReduceSum", {"axes": ["a", "b"]}, "attribute 'axes' must be of type INTS, got STRINGS"),
    ("Transpose", {"perm": [1.5, 0.5]}, "attribute 'perm' must be of type INTS, got FLOATS"),
    ("LeakyRelu", {"alpha": "big"}, "attribute 'alpha' must be of type FLOAT, got STRING"),
])
def test_an_attribute_of_the_wrong_kind_is_a_clear_error(op, attrs, message):
    """The schema's attribute kinds are checked before any converter reads them (no raw TypeError)."""
    m = model([helper.make_node(op, ["x"], ["y"], name="bad", **attrs)], [("x", F, [2, 3])], [("y", F, None)],
              opset=11 if op == "ReduceSum" else 13)
    with pytest.raises(tk.onnx.OnnxImportError, match=message) as info:
        tk.onnx.load(m)
    assert "'bad'" in str(info.value) and op in str(info.value)
