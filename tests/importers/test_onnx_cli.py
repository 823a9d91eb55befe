"""`tensorkiln run MODEL.onnx` (tensorkiln/tools/run_onnx.py)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from tensorkiln.tools.run_onnx import main  # noqa: E402
from onnx_build import single  # noqa: E402


def test_run_prints_outputs_and_latency(tmp_path, capsys):
    path = tmp_path / "relu.onnx"
    path.write_bytes(single("Relu", ["x"], shapes={"x": ["N", 4]}).SerializeToString())
    x = np.array([[-1, 2, -3, 4]], np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main([str(path), "--input", f"x={tmp_path / 'x.npy'}", "--repeat", "3", "--backend", "interpreter"]) == 0
    out = capsys.readouterr().out
    assert "output y0: shape [1, 4] float32 sum 6" in out
    assert "latency: median" in out and "compile:" in out


def test_run_fills_random_inputs_and_reports_errors(tmp_path, capsys):
    path = tmp_path / "relu.onnx"
    path.write_bytes(single("Relu", ["x"], shapes={"x": ["N", 4]}).SerializeToString())
    assert main([str(path), "--repeat", "1"]) == 0
    assert "input  x: shape [1, 4] float32 (random)" in capsys.readouterr().out
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert main([str(bad)]) == 1
    assert "OnnxImportError" in capsys.readouterr().err


def test_run_takes_any_dynamic_extent_and_writes_outputs(tmp_path, capsys):
    path = tmp_path / "relu.onnx"
    path.write_bytes(single("Relu", ["x"], shapes={"x": ["N", 4]}).SerializeToString())
    out = tmp_path / "outputs"
    assert main([str(path), "--input-shape", "x=7x4", "--output-dir", str(out), "--repeat", "1"]) == 0
    assert "input  x: shape [7, 4] float32 (random)" in capsys.readouterr().out
    written = np.load(out / "y0.npy")
    assert written.shape == (7, 4) and (written >= 0).all()
    assert main([str(path), "--input-shape", "x=7x5", "--repeat", "1"]) == 1  # the static 4 must hold
    assert "expects shape ['?', 4]" in capsys.readouterr().err
    assert main([str(path), "--input-shape", "z=1"]) == 2
    with pytest.raises(SystemExit, match="NAME=SHAPE"):
        main([str(path), "--input-shape", "x=7xq"])
