"""ONNX LSTM and GRU with a symbolic sequence length (a `dim_param`): one program for every length,
the scan's trip count read at run time; forward and reverse directions against onnxruntime."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import tensorkiln as tk
from onnx_build import model

from helpers import assert_close

ort = pytest.importorskip("onnxruntime")
FLOAT = TensorProto.FLOAT
BATCH, HIDDEN, INPUT = 3, 8, 5


def _recurrent(op: str, gates: int, direction: str):
    rng = np.random.default_rng(2)
    dirs = 2 if direction == "bidirectional" else 1
    weights = {"W": rng.standard_normal((dirs, gates * HIDDEN, INPUT)).astype(np.float32) * 0.3,
               "R": rng.standard_normal((dirs, gates * HIDDEN, HIDDEN)).astype(np.float32) * 0.3,
               "B": rng.standard_normal((dirs, 2 * gates * HIDDEN)).astype(np.float32) * 0.1}
    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    node = helper.make_node(op, ["X", "W", "R", "B"], outputs, hidden_size=HIDDEN, direction=direction)
    return model([node], [("X", FLOAT, ["seq", BATCH, INPUT])], [(o, FLOAT, None) for o in outputs], weights,
                 opset=14)


@pytest.mark.parametrize("op,gates,direction", [("LSTM", 4, "bidirectional"), ("GRU", 3, "reverse")])
def test_one_program_serves_every_sequence_length(op, gates, direction):
    proto = _recurrent(op, gates, direction)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    module = tk.onnx.load(proto)
    rng = np.random.default_rng(3)
    for seq in (7, 2, 16, 3, 31, 9, 4, 12, 5, 64):
        x = rng.standard_normal((seq, BATCH, INPUT)).astype(np.float32)
        for got, want in zip(module(X=x), session.run(None, {"X": x})):
            assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert module.compile_count == 1 and module.cache_size() == 1
    x = rng.standard_normal((1, BATCH, INPUT)).astype(np.float32)  # one step: a size that specializes
    for got, want in zip(module(X=x), session.run(None, {"X": x})):
        assert_close(got, want, rtol=1e-5, atol=1e-5)
