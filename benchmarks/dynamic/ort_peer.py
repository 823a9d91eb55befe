"""ONNX Runtime as the dynamic-shape benchmarks' peer: one session for every size, IOBinding per size.

The session is the peer at its strongest on this 2-core machine: CPUExecutionProvider, all graph
optimizations, 2 intra-op threads. `bound_runner` binds one size's inputs and outputs once (as
tensorkiln reuses its output arrays), so a timed call copies nothing.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

THREADS = 2


def ort_session(model):
    """An InferenceSession of `model` (an onnx ModelProto or a path) at the settings above."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    source = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def bound_runner(session, feed: dict[str, np.ndarray]) -> tuple[Callable[[], list[np.ndarray]], list[np.ndarray]]:
    """(run, outputs): `run()` computes `feed` into the preallocated `outputs` through IOBinding."""
    first = session.run(None, feed)  # the output shapes at this size
    binding = session.io_binding()
    inputs = {name: np.ascontiguousarray(array) for name, array in feed.items()}
    for name, array in inputs.items():
        binding.bind_cpu_input(name, array)
    outputs = [np.empty_like(o) for o in first]
    for meta, out in zip(session.get_outputs(), outputs):
        binding.bind_output(meta.name, "cpu", 0, out.dtype, out.shape, out.ctypes.data)

    def run() -> list[np.ndarray]:
        session.run_with_iobinding(binding)
        return outputs
    return run, outputs
