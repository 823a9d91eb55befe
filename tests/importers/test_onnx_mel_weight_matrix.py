"""ONNX MelWeightMatrix (importers/onnx/constants.py) against onnx's reference implementation: filter
banks from initializers and from graph inputs (specialized per value), and a band past the spectrum."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tensorkiln as tk
from onnx_build import model

INT64, FLOAT = TensorProto.INT64, TensorProto.FLOAT
NAMES = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")


def _mel_model(values=None, output_datatype=None):
    """One MelWeightMatrix node; its five inputs initializers when `values` is given, else graph inputs."""
    attrs = {} if output_datatype is None else {"output_datatype": output_datatype}
    node = helper.make_node("MelWeightMatrix", list(NAMES), ["w"], **attrs)
    types = (INT64, INT64, INT64, FLOAT, FLOAT)
    if values is not None:
        inits = {n: np.asarray(v, np.int64 if t == INT64 else np.float32) for n, t, v in zip(NAMES, types, values)}
        return model([node], [], [("w", TensorProto.UNDEFINED, None)], inits)
    return model([node], [(n, t, []) for n, t in zip(NAMES, types)], [("w", TensorProto.UNDEFINED, None)])


def _first(outputs) -> np.ndarray:
    return np.asarray(outputs[0] if isinstance(outputs, (list, tuple)) else outputs)


def _feed(values):
    return {n: np.asarray(v, np.int64 if i < 3 else np.float32) for i, (n, v) in enumerate(zip(NAMES, values))}


@pytest.mark.parametrize("values", [(8, 16, 8192, 0.0, 4096.0), (5, 256, 16000, 80.0, 7600.0),
                                    (40, 512, 22050, 20.0, 8000.0), (3, 33, 1000, 10.0, 400.0)])
def test_filter_banks_match_the_reference(values):
    want = ReferenceEvaluator(_mel_model(values)).run(None, {})[0]
    got = _first(tk.onnx.load(_mel_model(values))())
    assert got.shape == want.shape == (values[1] // 2 + 1, values[0])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_graph_inputs_are_specialized_per_value():
    module = tk.onnx.load(_mel_model())
    for values in ((8, 16, 8192, 0.0, 4096.0), (6, 64, 8000, 100.0, 3000.0)):
        want = ReferenceEvaluator(_mel_model()).run(None, _feed(values))[0]
        np.testing.assert_allclose(_first(module(**_feed(values))), want, rtol=1e-6, atol=1e-7)
    assert module.compile_count == 2


def test_output_datatype():
    got = _first(tk.onnx.load(_mel_model((8, 16, 8192, 0.0, 4096.0), output_datatype=TensorProto.DOUBLE))())
    assert got.dtype == np.float64


def test_a_band_past_the_spectrum_is_an_error():
    with pytest.raises(Exception, match="MelWeightMatrix.*frequency bins"):
        tk.onnx.load(_mel_model((8, 16, 8000, 0.0, 7900.0)))()
