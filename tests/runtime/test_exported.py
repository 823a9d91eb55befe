"""tk.load_compiled (tensorkiln/runtime/exported.py): an exported directory back in Python, its manifest
treated as untrusted input."""
from __future__ import annotations

import json
import shutil
import threading

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.runtime.export_format import ExportFormatError, model_name_from, read_manifest
from tensorkiln.runtime.exported import IncompatibleCPUError
from tensorkiln.runtime.module import KernelError

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a C compiler to export")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A small model exported once: (directory, the jitted function, an input)."""
    rng = np.random.default_rng(0)
    w = tk.tensor(rng.standard_normal((9, 5)).astype(np.float32))
    f = tk.jit(lambda x, idx: ((x @ w).softmax(-1), x[idx]))
    x = rng.standard_normal((3, 9)).astype(np.float32)
    idx = np.array([2, -1, 0, 1], np.int32)
    directory = tmp_path_factory.mktemp("export") / "out"
    f.export(directory, x, idx, name="small")
    return directory, f, (x, idx)


def _edited(tmp_path, directory, edit) -> str:
    """A copy of the exported directory whose manifest `edit` changed."""
    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)
    path = copy / "small.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return copy


def test_loaded_model_matches_the_compiled_function(exported):
    directory, f, (x, idx) = exported
    model = tk.load_compiled(directory)
    with tk.no_grad():
        expected = [t.numpy() for t in f(x, idx)]
    outputs = model(x, idx)
    assert all(np.array_equal(a, b) for a, b in zip(outputs, expected))
    assert [s.name for s in model.inputs] == ["x", "idx"] and model.outputs[0].shape == (3, 5)
    with pytest.raises(tk.DTypeError, match="expects float32"):
        model(x.astype(np.float64), idx)
    with pytest.raises(tk.ShapeError, match=r"expects shape \[3, 9\]"):
        model(x[:2], idx)
    with pytest.raises(KernelError, match="index 7 .* out of range for an axis of size 3"):
        model(x, np.array([0, 7, 0, 0], np.int32))
    np.testing.assert_array_equal(model(np.asfortranarray(x), idx)[0], expected[0])  # made C-contiguous


def test_several_threads_run_their_own_models(exported):
    directory, f, (x, idx) = exported
    models = [tk.load_compiled(directory, num_threads=1) for _ in range(3)]
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(x.shape).astype(np.float32) for _ in models]
    expected = [models[0](a, idx)[0] for a in inputs]
    results: list = [None] * len(models)

    def work(k: int) -> None:
        results[k] = [models[k](inputs[k], idx)[0] for _ in range(20)]
    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(models))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(r, expected[k]) for k in range(len(models)) for r in results[k])


def test_a_directory_for_another_cpu_is_refused(tmp_path, exported):
    copy = _edited(tmp_path, exported[0], lambda d: d["target"]["cpu_features"].append("avx1024"))
    with pytest.raises(IncompatibleCPUError, match="this CPU lacks avx1024"):
        tk.load_compiled(copy)


def test_an_export_survives_another_tensorkiln_version(tmp_path, exported):
    directory, _, (x, idx) = exported
    copy = _edited(tmp_path, directory, lambda d: d.update(tensorkiln_version="99.0"))
    assert np.array_equal(tk.load_compiled(copy)(x, idx)[1], x[idx])


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(format="other"), "'format' must be"),
    (lambda d: d.update(format_version=2), "format_version"),
    (lambda d: d.update(name="../evil"), "C identifier"),
    (lambda d: d.update(library="/usr/lib/libc.so.6"), "'library' must be"),
    (lambda d: d["inputs"][0].update(dtype="complex64"), "is not a dtype"),
    (lambda d: d["inputs"][0].update(shape=[3, "9"]), "shape must be a list"),
    (lambda d: d["inputs"][0].update(shape=[3, 8]), "manifest's inputs .* are not the library's"),
    (lambda d: d["outputs"][0].update(dtype="uint8"), "manifest's outputs .* are not the library's"),
    (lambda d: d["inputs"][0].update(name="y"), "input 0 of the library is not"),
    (lambda d: d["outputs"].pop(), "outputs .* are not the library's"),
    (lambda d: d["weights"].update(storage="file", file="../x.weights"), "'weights.file' must"),
    (lambda d: d["target"].update(cpu_features="avx2"), "cpu_features"),
    (lambda d: d.clear(), "'format' must be"),
])
def test_a_malformed_manifest_is_refused_with_the_field_named(tmp_path, exported, edit, message):
    with pytest.raises(ExportFormatError, match=message):
        tk.load_compiled(_edited(tmp_path, exported[0], edit))


def test_unreadable_directories_are_refused(tmp_path, exported):
    with pytest.raises(ExportFormatError, match="not a directory"):
        tk.load_compiled(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ExportFormatError, match="expected one NAME.json"):
        tk.load_compiled(tmp_path / "empty")
    copy = tmp_path / "copy"
    shutil.copytree(exported[0], copy)
    (copy / "small.json").write_text("{not json")
    with pytest.raises(ExportFormatError, match="cannot read the manifest"):
        read_manifest(copy / "small.json")
    shutil.copy(exported[0] / "small.json", copy / "small.json")
    (copy / "libsmall.so").unlink()
    (copy / "libsmall.so").symlink_to("/bin/true")
    with pytest.raises(ExportFormatError, match="not a regular file"):
        tk.load_compiled(copy)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "uint8", "bool"])
def test_storage_dtypes_pass_through_unchanged(tmp_path, dtype):
    rng = np.random.default_rng(2)
    tk_dtype = getattr(tk, dtype if dtype != "bool" else "bool_")
    f = tk.jit(lambda a: (a.float() * 3.0 + 1.0).to(tk_dtype) if dtype != "bool" else a.float() > 0.0)
    x = tk.tensor(rng.standard_normal((5, 3)).astype(np.float32)).to(tk_dtype)
    with tk.no_grad():
        expected = f(x)
    f.export(tmp_path / "out", x, name=f"conv_{dtype}")
    model = tk.load_compiled(tmp_path / "out")
    out = model(x._value)[0]
    assert out.dtype == expected._value.dtype and np.array_equal(out, expected._value)


def test_model_names_made_from_text():
    assert model_name_from("resnet-18.v1") == "resnet_18_v1"
    assert model_name_from("3d") == "m_3d" and model_name_from("int") == "int_model"
    assert model_name_from("<lambda>") == "_lambda_"
