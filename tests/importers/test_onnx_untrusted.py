"""A model read from disk or the network is untrusted input: empty or header-less models, directories,
external data outside the model's directory, and onnx's own validation errors are all OnnxImportError."""
from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import tensorkiln as tk  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_build import model, single  # noqa: E402
from tensorkiln.tools.run_onnx import main as run_main  # noqa: E402

F = TensorProto.FLOAT
WEIGHTS = np.array([1, 2, 3, 4], np.float32)


# ---- models without a graph, an IR version or an opset ---------------------------------------------

def test_zero_byte_file_is_rejected(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(tk.onnx.OnnxImportError, match="has no graph"):
        tk.onnx.load(str(path))
    with pytest.raises(tk.onnx.OnnxImportError, match="has no graph"):
        tk.onnx.load(b"")


def test_tensorkiln_run_rejects_an_empty_file(tmp_path, capsys):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    assert run_main([str(path), "--repeat", "1"]) == 1
    err = capsys.readouterr().err
    assert "OnnxImportError" in err and "has no graph" in err


def test_graphless_model_is_rejected():
    m = onnx.ModelProto(ir_version=8)
    m.opset_import.append(helper.make_opsetid("", 17))
    with pytest.raises(tk.onnx.OnnxImportError, match="has no graph"):
        tk.onnx.load(m)
    with pytest.raises(tk.onnx.OnnxImportError, match="has no graph"):
        tk.onnx.load(m.SerializeToString())


def test_ir_version_zero_is_rejected():
    m = single("Relu", ["x"], shapes={"x": [2]})
    m.ir_version = 0
    with pytest.raises(tk.onnx.OnnxImportError, match="no IR version"):
        tk.onnx.load(m)


def test_model_without_opset_import_is_rejected():
    m = single("Relu", ["x"], shapes={"x": [2]})
    del m.opset_import[:]
    with pytest.raises(tk.onnx.OnnxImportError, match="imports no opset"):
        tk.onnx.load(m)


def test_model_without_outputs_is_rejected():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])], [])
    with pytest.raises(tk.onnx.OnnxImportError, match="no graph outputs"):
        tk.onnx.load(m)


def test_directory_is_reported_as_a_directory(tmp_path):
    with pytest.raises(tk.onnx.OnnxImportError, match="is a directory"):
        tk.onnx.load(str(tmp_path))
    with pytest.raises(tk.onnx.OnnxImportError, match="does not exist"):
        tk.onnx.load(tmp_path / "missing.onnx")


# ---- external data -------------------------------------------------------------------------------

def _external_model(location: str, offset: int | None = None, length: int | None = None):
    """y = x + w, with w's data in the external file `location`."""
    w = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": offset, "length": length}
    for key, value in entries.items():
        if value is not None:
            entry = w.external_data.add()
            entry.key, entry.value = key, str(value)
    return _with_initializer(w)


def _with_initializer(w):
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "ext",
                              [helper.make_tensor_value_info("x", F, [4])],
                              [helper.make_tensor_value_info("y", F, [4])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _save(m, path) -> str:
    path.write_bytes(m.SerializeToString())
    return str(path)


def _run(module) -> np.ndarray:
    return module(np.zeros(4, np.float32))[0]


@pytest.fixture
def layout(tmp_path):
    """tmp/secret.bin (outside) and tmp/model/ (the model's directory) with weights.bin inside."""
    (tmp_path / "model").mkdir()
    (WEIGHTS * 100).tofile(tmp_path / "secret.bin")
    np.concatenate([np.zeros(2, np.float32), WEIGHTS]).tofile(tmp_path / "model" / "weights.bin")
    return tmp_path


def test_external_data_inside_the_model_directory_loads(layout):
    path = _save(_external_model("weights.bin", offset=8, length=16), layout / "model" / "m.onnx")
    np.testing.assert_array_equal(_run(tk.onnx.load(path, backend="interpreter")), WEIGHTS)


def test_external_data_saved_by_onnx_loads(tmp_path):
    m = _with_initializer(numpy_helper.from_array(WEIGHTS, "w"))
    onnx.save_model(m, str(tmp_path / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.data", size_threshold=0)
    np.testing.assert_array_equal(_run(tk.onnx.load(str(tmp_path / "m.onnx"), backend="interpreter")), WEIGHTS)


@pytest.mark.parametrize("location, message", [
    ("../secret.bin", "may not contain '..'"),
    ("sub/../../secret.bin", "may not contain '..'"),
    ("ABSOLUTE", "must be a path relative"),
    ("link.bin", "leads outside"),
    ("missing.bin", "does not exist"),
    (".", "not a regular file"),
])
def test_external_data_escaping_the_model_directory_is_rejected(layout, location, message):
    os.symlink(layout / "secret.bin", layout / "model" / "link.bin")
    if location == "ABSOLUTE":
        location = str(layout / "secret.bin")
    path = _save(_external_model(location), layout / "model" / "m.onnx")
    with pytest.raises(tk.onnx.OnnxImportError, match=message):
        tk.onnx.load(path, backend="interpreter")


def test_symlink_inside_the_model_directory_is_followed(layout):
    os.symlink("weights.bin", layout / "model" / "alias.bin")
    path = _save(_external_model("alias.bin", offset=8), layout / "model" / "m.onnx")
    np.testing.assert_array_equal(_run(tk.onnx.load(path, backend="interpreter")), WEIGHTS)


@pytest.mark.parametrize("offset, length, message", [(1000, None, "offset 1000 is past the end"),
                                                      (8, 1000, "length 1000 at offset 8 is past the end"),
                                                      (-1, None, "is negative"), ("x", None, "not an integer")])
def test_external_data_ranges_are_checked(layout, offset, length, message):
    path = _save(_external_model("weights.bin", offset=offset, length=length), layout / "model" / "m.onnx")
    with pytest.raises(tk.onnx.OnnxImportError, match=message):
        tk.onnx.load(path, backend="interpreter")


def test_in_memory_model_reads_no_external_data_without_base_dir(layout, monkeypatch):
    monkeypatch.chdir(layout)  # secret.bin is right here: it must not be read relative to the working directory
    m = _external_model("secret.bin")
    for source in (m, m.SerializeToString()):
        with pytest.raises(tk.onnx.OnnxImportError, match="base_dir="):
            tk.onnx.load(source, backend="interpreter")


def test_in_memory_model_reads_external_data_under_base_dir(layout, monkeypatch):
    monkeypatch.chdir(layout)
    m = _external_model("weights.bin", offset=8)
    for source in (m, m.SerializeToString()):
        module = tk.onnx.load(source, base_dir=layout / "model", backend="interpreter")
        np.testing.assert_array_equal(_run(module), WEIGHTS)
    assert m.graph.initializer[0].data_location == TensorProto.EXTERNAL  # the caller's proto is left alone
    with pytest.raises(tk.onnx.OnnxImportError, match="may not contain '..'"):
        tk.onnx.load(_external_model("../secret.bin"), base_dir=layout / "model", backend="interpreter")
    os.symlink(layout / "secret.bin", layout / "model" / "link.bin")
    with pytest.raises(tk.onnx.OnnxImportError, match="leads outside"):
        tk.onnx.load(_external_model("link.bin"), base_dir=str(layout / "model"), backend="interpreter")
    with pytest.raises(tk.onnx.OnnxImportError, match="not a directory"):
        tk.onnx.load(m, base_dir=layout / "nowhere", backend="interpreter")


def test_external_constant_attribute_is_checked_too(layout, monkeypatch):
    monkeypatch.chdir(layout)
    value = numpy_helper.from_array(np.zeros(4, np.float32), "c")
    value.ClearField("raw_data")
    value.data_location = TensorProto.EXTERNAL
    entry = value.external_data.add()
    entry.key, entry.value = "location", "secret.bin"
    m = model([helper.make_node("Constant", [], ["y"], value=value)], [], [("y", F, [4])])
    with pytest.raises(tk.onnx.OnnxImportError, match="base_dir="):
        tk.onnx.load(m, backend="interpreter")


# ---- onnx's validation errors ------------------------------------------------------------------------

def test_onnx_validation_error_in_a_converter_is_an_import_error(monkeypatch):
    from tensorkiln.importers.onnx.registry import CONVERTERS

    def invalid(ctx, inputs, attrs):
        raise onnx.checker.ValidationError("bad node")
    monkeypatch.setitem(CONVERTERS, "Relu", invalid)
    module = tk.onnx.load(single("Relu", ["x"], shapes={"x": [2]}), backend="interpreter")
    with pytest.raises(tk.onnx.OnnxImportError, match="Relu.*ValidationError: bad node"):
        module(np.zeros(2, np.float32))


def test_onnx_validation_error_while_loading_is_an_import_error(monkeypatch):
    from onnx import inliner
    f = helper.make_function("local", "F", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                             [helper.make_opsetid("", 17)])
    m = model([helper.make_node("F", ["x"], ["y"], domain="local")], [("x", F, [2])], [("y", F, [2])])
    m.opset_import.append(helper.make_opsetid("local", 1))
    m.functions.append(f)
    np.testing.assert_array_equal(tk.onnx.load(m, backend="interpreter")(np.array([-1, 1], np.float32))[0], [0, 1])

    def invalid(model):
        raise onnx.checker.ValidationError("bad function")
    monkeypatch.setattr(inliner, "inline_local_functions", invalid)
    with pytest.raises(tk.onnx.OnnxImportError, match="bad function"):
        tk.onnx.load(m, backend="interpreter")
