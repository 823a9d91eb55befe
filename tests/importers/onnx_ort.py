"""Run a model through tensorkiln's compiled C path and through onnxruntime, and compare."""
from __future__ import annotations

import numpy as np

import tensorkiln as tk


def run_onnxruntime(model, feeds: dict) -> list:
    """The outputs of onnxruntime's CPU provider."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def check_against_onnxruntime(model, feeds: dict, rtol: float = 1e-5, atol: float = 1e-6,
                              backend: str = "c") -> list:
    """Both runtimes' outputs agree in shape, dtype and value; asserts the C backend ran. Returns ours."""
    module = tk.onnx.load(model, backend=backend)
    ours = module(**feeds)
    theirs = run_onnxruntime(model, feeds)
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape, f"output {i}: shape {a.shape}, onnxruntime {b.shape}"
        assert a.dtype == b.dtype, f"output {i}: dtype {a.dtype}, onnxruntime {b.dtype}"
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {i}")
    if backend == "c":
        report = module.report(**feeds)
        assert report.backend == "c", report.fallback_reason
    return ours
