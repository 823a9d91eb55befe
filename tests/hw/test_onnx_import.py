"""`tensorkiln accel MODEL.onnx`: layers come from the optimized graph of an imported ONNX model."""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln.tools.cli import main

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _small_cnn(path) -> None:
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
            for n, s in (("W1", (8, 3, 3, 3)), ("W2", (16, 8, 3, 3)), ("FC", (16 * 8 * 8, 10)))]
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]), helper.make_node("Flatten", ["r2"], ["f"]),
             helper.make_node("MatMul", ["f", "FC"], ["y"])]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], init)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def test_accel_reads_layers_from_an_onnx_model(tmp_path, capsys):
    model = tmp_path / "small.onnx"
    _small_cnn(model)
    assert main(["accel", str(model), "--array", "8x8", "--dataflow", "best", "--out", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert text.count("conv2d") == 2 and "matmul" in text
    assert (tmp_path / "out" / "COMPUTE_REPORT.csv").exists()


def test_run_command_prints_outputs_and_latency(tmp_path, capsys):
    model = tmp_path / "small.onnx"
    _small_cnn(model)
    assert main(["run", str(model), "--repeat", "2"]) == 0
    text = capsys.readouterr().out
    assert "output y: shape [1, 10]" in text and "latency" in text


def test_simulate_model_reads_the_optimized_graph():
    import tensorkiln as tk
    import tensorkiln.nn.functional as F
    from tensorkiln import hw, nn

    tk.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10))
    net.eval()
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    with tk.no_grad():
        report = hw.simulate_model(net, x, array=(8, 8), dataflow="os")
    names = [r.layer.name for r in report.results]
    assert len(names) == 2 and names[0].startswith("conv2d") and names[1].startswith("matmul")
    jitted = tk.jit(lambda a: F.relu(a @ a.transpose(-1, -2)))
    assert len(hw.simulate_model(jitted, np.ones((4, 16), np.float32), array=(4, 4)).results) == 1
