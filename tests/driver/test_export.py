"""Exported C libraries (tensorkiln/driver/export.py): built with gcc, run from C with no Python in the
process, and compared bit for bit with the Python call of the same compiled graph."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.driver.export import ExportError
from tensorkiln.frontend.trace import mark_mutable
from tensorkiln.runtime.export_format import ExportFormatError

pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("gcc") is None,
                                reason="needs make and gcc")


def _no_python_env() -> dict[str, str]:
    """The environment of the C program: nothing of Python's, the same OpenMP settings as this process."""
    keep = ("PATH", "HOME", "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "LANG")
    return {k: os.environ[k] for k in keep if k in os.environ}


def run_example(directory: Path, inputs: list[np.ndarray], target: str = "run") -> list[bytes]:
    """`make <target>` in the exported directory with the inputs as raw files; the output files' bytes."""
    names = []
    for i, array in enumerate(inputs):
        path = directory / f"in{i}.bin"
        np.ascontiguousarray(array).tofile(path)
        names.append(path.name)
    for old in directory.glob("output*.bin"):
        old.unlink()
    done = subprocess.run(["make", "-s", target, f"ARGS={' '.join(names)}", "CC=gcc"], cwd=directory,
                          env=_no_python_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    count = len(list(directory.glob("output*.bin")))
    return [(directory / f"output{i}.bin").read_bytes() for i in range(count)]


def mixed_function(weight: np.ndarray):
    """A matmul with a bias and ReLU, a row reduction, a gather by caller indices and a comparison."""
    w = tk.tensor(weight)

    def model(x, idx):
        y = (x @ w + 0.5).relu()
        picked = x[idx].sum(1)
        return y, x.sum(1) * 2.0, picked, x > 0
    return model


@pytest.mark.parametrize("seed", [0, 1])
def test_example_c_matches_the_python_call_bit_for_bit(tmp_path, seed):
    rng = np.random.default_rng(seed)
    rows, inner, cols = (int(v) for v in rng.choice([1, 3, 17, 33], size=3))  # size 1 and vector tails
    x = rng.standard_normal((rows, inner)).astype(np.float32)
    idx = rng.integers(-rows, rows, size=5).astype(np.int64)
    f = tk.jit(mixed_function(rng.standard_normal((inner, cols)).astype(np.float32)))
    with tk.no_grad():
        expected = [np.asarray(t.numpy()) for t in f(x, idx)]
    exported = f.export(tmp_path / "out", x, idx, name="mixed")
    assert exported.embedded and exported.shared_library.exists() and exported.static_library.exists()
    shared = run_example(tmp_path / "out", [x, idx])
    static = run_example(tmp_path / "out", [x, idx], "static")
    assert shared == static == [e.tobytes() for e in expected]
    assert [o.name for o in exported.manifest.outputs] == ["output0", "output1", "output2", "output3"]
    assert [i.name for i in exported.manifest.inputs] == ["x", "idx"]


def test_the_library_needs_only_libc_libm_and_openmp(tmp_path):
    x = np.ones((4, 8), np.float32)
    f = tk.jit(lambda a: (a * 2.0).exp().sum(0))
    with_omp = f.export(tmp_path / "omp", x, name="expsum")
    without = f.export(tmp_path / "plain", x, name="expsum", openmp=False)
    needed = {}
    for key, exported in (("omp", with_omp), ("plain", without)):
        done = subprocess.run(["readelf", "-d", str(exported.shared_library)], capture_output=True, text=True)
        needed[key] = {line.split("[")[1].rstrip("]") for line in done.stdout.splitlines() if "(NEEDED)" in line}
    libc = {"libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2"}  # glibc's loader: thread-local error text
    assert needed["omp"] <= libc | {"libgomp.so.1"} and "libgomp.so.1" in needed["omp"]
    assert needed["plain"] <= libc
    expected = np.exp(x * 2.0).sum(0)
    for exported in (with_omp, without):
        (out,) = run_example(exported.directory, [x])
        np.testing.assert_allclose(np.frombuffer(out, np.float32), expected, rtol=1e-6)


def test_weights_beside_the_library_are_checked(tmp_path):
    rng = np.random.default_rng(3)
    w = tk.tensor(rng.standard_normal((7, 5)).astype(np.float32))
    f = tk.jit(lambda a: a @ w)
    x = rng.standard_normal((2, 7)).astype(np.float32)
    with tk.no_grad():
        expected = f(x).numpy()
    exported = f.export(tmp_path / "out", x, name="side", weights="file")
    weights = tmp_path / "out" / "side.weights"
    assert not exported.embedded and weights.exists()
    assert run_example(exported.directory, [x]) == [expected.tobytes()]
    assert np.array_equal(tk.load_compiled(exported.directory)(x)[0], expected)
    image = bytearray(weights.read_bytes())
    image[40] ^= 1  # the recorded digest: weights of another export
    weights.write_bytes(bytes(image))
    with pytest.raises(tk.TensorKilnError, match="holds other weights"):
        tk.load_compiled(exported.directory)
    weights.write_bytes(bytes(image[:-4]))
    with pytest.raises(tk.TensorKilnError, match="hold .* bytes, the library needs"):
        tk.load_compiled(exported.directory)
    weights.unlink()
    with pytest.raises(ExportFormatError, match="weights file .* is missing"):
        tk.load_compiled(exported.directory)


def test_onnx_export_command(tmp_path, capsys):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from tensorkiln.tools.cli import main

    w = np.random.default_rng(4).standard_normal((4, 9)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Tanh", ["y"], ["z"])], "net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "tanh-net.onnx"
    path.write_bytes(proto.SerializeToString())
    assert main(["export", str(path), "-o", str(tmp_path / "out")]) == 1
    assert "dynamic dimensions" in capsys.readouterr().err
    assert main(["export", str(path), "-o", str(tmp_path / "out"), "--input", "x=3x4"]) == 0
    assert "exported tanh_net" in capsys.readouterr().out
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    expected = tk.onnx.load(str(path))(x)[0]
    exported = tk.load_compiled(tmp_path / "out")(x)[0]
    # the loaded model's N is a size symbol (one program for every N), the export's is 3: the same
    # values up to the order of the GEMM's sums
    np.testing.assert_allclose(exported, expected, rtol=1e-6, atol=1e-6)
    assert run_example(tmp_path / "out", [x]) == [exported.tobytes()]


def test_export_refuses_what_it_cannot_export(tmp_path):
    x = np.ones((2, 2), np.float32)
    f = tk.jit(lambda a: a + 1.0)
    with pytest.raises(ExportFormatError, match="C identifier"):
        f.export(tmp_path / "out", x, name="not a name")
    with pytest.raises(ExportError, match="weights must be one of"):
        f.export(tmp_path / "out", x, weights="inline")
    interpreted = tk.jit(lambda a: a + 1.0, backend="interpreter")
    with pytest.raises(ExportError, match="not compiled to C"):
        interpreted.export(tmp_path / "out", x)
    scale = tk.ones(2)
    mark_mutable(scale)  # read anew on every call: a graph input the library would not have
    with pytest.raises(ExportError, match="state"):
        tk.jit(lambda a: a * scale).export(tmp_path / "out", np.ones(2, np.float32))


def test_the_exported_kernels_count_every_failure():
    from tensorkiln.codegen.c_api import LibraryApi, kernels_source
    api = LibraryApi("m", (), (), (), 64, bytes(32), True, 0)
    with pytest.raises(ValueError, match="no single tk_fail"):
        kernels_source(api, "int main(void) { return 0; }\n")
