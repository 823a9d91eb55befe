"""What `tensorkiln bench`'s model and GPT-2 measurements share: output agreement, peers' settings."""
from __future__ import annotations

import os
import time
from typing import Callable

import numpy as np

TOLERANCE = 1e-3  # max |difference| relative to the largest |output| of PyTorch eager


def agreement(output, reference: np.ndarray) -> dict:
    """max |output - reference| relative to the reference's scale, and whether that is within TOLERANCE.

    Shapes must be equal: a wrong shape that merely broadcasts against the reference
    (a (1, n) row for an (m, n) result, a scalar) disagrees, with an infinite error.
    """
    output = output.numpy() if hasattr(output, "numpy") else np.asarray(output)
    reference = np.asarray(reference)
    if output.shape != reference.shape:
        return {"max_rel_error": float("inf"), "agrees": False}
    if not reference.size:
        return {"max_rel_error": 0.0, "agrees": True}  # nothing to differ (and .max() of nothing fails)
    difference = np.abs(output.astype(np.float64) - reference.astype(np.float64))
    error = float(difference.max()) / max(1.0, float(np.abs(reference.astype(np.float64)).max()))
    return {"max_rel_error": error, "agrees": error <= TOLERANCE}


def onnx_session_options():
    """ONNX Runtime's session options: intra-op threads as OMP_NUM_THREADS says (set by --threads)."""
    import onnxruntime  # optional dependency: only the onnxruntime peer needs it
    options = onnxruntime.SessionOptions()
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit():
        options.intra_op_num_threads = int(threads)
    return options


def timed_first(fn: Callable) -> float:
    """Seconds of one call (a first call: compilation included)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
