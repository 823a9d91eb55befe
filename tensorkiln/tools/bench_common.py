"""What `tensorkiln bench`'s model and GPT-2 measurements share: output agreement, peers' settings."""
from __future__ import annotations

import os
import time
from typing import Callable

import numpy as np

TOLERANCE = 1e-3  # max |difference| relative to the largest |output| of PyTorch eager
# A framework that computes in bf16 (8 significant bits) is held to bf16's precision, not float32's;
# tensorkiln with int8 / int4 weights (precision "int8w" / "int4w", any group size) to theirs.
PEER_TOLERANCE = {"openvino": 3e-2, "openvino-bf16": 3e-2, "tensorkiln-bf16": 3e-2, "tensorkiln-int8w": 3e-2,
                  "tensorkiln-int4w": 1e-1}


def tensorkiln_held_to(precision: str) -> str:
    """The PEER_TOLERANCE name tensorkiln's output is held to at `precision`: "tensorkiln-int4w" for
    "int4w-g128", "tensorkiln" at fp32."""
    if precision == "fp32":
        return "tensorkiln"
    return "tensorkiln-" + precision.split("-", 1)[0]
ONNX_FILE_PEERS = ("onnxruntime", "openvino", "openvino-f32", "openvino-bf16")
OPENVINO_HINTS = {"openvino": None, "openvino-f32": "f32", "openvino-bf16": "bf16"}  # INFERENCE_PRECISION_HINT


def agreement(output, reference: np.ndarray, framework: str = "") -> dict:
    """max |output - reference| relative to the reference's scale, and whether that is within the
    framework's tolerance (TOLERANCE, or PEER_TOLERANCE for a peer computing in lower precision).

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
    return {"max_rel_error": error, "agrees": error <= PEER_TOLERANCE.get(framework, TOLERANCE)}


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


def onnxruntime_runner(path: str, arrays: list[np.ndarray]) -> tuple[Callable[[], np.ndarray], float]:
    """ONNX Runtime at its strongest on CPU: IOBinding with inputs and outputs bound once to numpy arrays
    (as tensorkiln reuses its output arrays), so a timed call copies nothing; (run, session start seconds)."""
    import onnxruntime  # optional dependency: only the onnxruntime peer needs it
    start = time.perf_counter()
    session = onnxruntime.InferenceSession(path, onnx_session_options(), providers=["CPUExecutionProvider"])
    seconds = time.perf_counter() - start
    feed = {i.name: a for i, a in zip(session.get_inputs(), arrays)}
    first = session.run(None, feed)  # the output shapes, to bind arrays of them
    binding = session.io_binding()
    for name, array in feed.items():
        binding.bind_cpu_input(name, np.ascontiguousarray(array))
    outputs = [np.empty_like(o) for o in first]
    for meta, out in zip(session.get_outputs(), outputs):
        binding.bind_output(meta.name, "cpu", 0, out.dtype, out.shape, out.ctypes.data)

    def run() -> np.ndarray:
        session.run_with_iobinding(binding)
        return outputs[0]
    return run, seconds


def openvino_runner(path: str, arrays: list[np.ndarray], hint: str | None) -> tuple[Callable[[], np.ndarray], float]:
    """OpenVINO on CPU: its default settings (hint None: on a CPU with AVX512-BF16 it computes in bf16)
    or INFERENCE_PRECISION_HINT=hint ("f32", "bf16"); intra-op threads as OMP_NUM_THREADS says;
    (run, compile seconds)."""
    import openvino  # optional dependency: only the openvino peers need it
    config = {}
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit():
        config["INFERENCE_NUM_THREADS"] = int(threads)
    if hint is not None:
        config["INFERENCE_PRECISION_HINT"] = hint
    start = time.perf_counter()
    compiled = openvino.Core().compile_model(path, "CPU", config)
    request = compiled.create_infer_request()
    feed = {k: np.ascontiguousarray(a) for k, a in enumerate(arrays)}
    request.infer(feed, share_inputs=True, share_outputs=True)
    seconds = time.perf_counter() - start

    def run() -> np.ndarray:
        request.infer(feed, share_inputs=True, share_outputs=True)
        return request.get_output_tensor(0).data
    return run, seconds


def openvino_default_precision(path: str) -> str:
    """The precision OpenVINO's default settings compute `path` in on this CPU ("bf16" where it has
    AVX512-BF16 or AMX, else "f32"): its INFERENCE_PRECISION_HINT after compiling."""
    import openvino  # optional dependency: only the openvino peers need it
    hint = openvino.Core().compile_model(path, "CPU", {}).get_property("INFERENCE_PRECISION_HINT")
    return hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)  # an openvino.Type: "f32"


def onnx_peers(path: str, arrays: list[np.ndarray], peers: list[str], progress: Callable[[str], None],
               record: Callable[[str, Callable, float], None]) -> None:
    """Record every installed ONNX-file peer asked for (ONNX_FILE_PEERS) on one model."""
    for peer in ONNX_FILE_PEERS:
        if peer not in peers:
            continue
        try:
            if peer == "onnxruntime":
                run, seconds = onnxruntime_runner(path, arrays)
            else:
                run, seconds = openvino_runner(path, arrays, OPENVINO_HINTS[peer])
        except ImportError:
            progress(f"{peer} is not installed: skipped")
            continue
        record(peer, run, seconds)


def compile_max_autotune(model):
    """torch.compile at its strongest for inference: weights frozen into the graph (inductor's freezing)
    and mode="max-autotune" (GEMM templates chosen by timing); freezing is switched on around each call,
    for the first one, which compiles."""
    import torch  # optional dependency
    import torch._inductor.config as inductor_config

    compiled = torch.compile(model, mode="max-autotune", dynamic=False)

    def frozen(*inputs):
        previous = inductor_config.freezing
        inductor_config.freezing = True  # read when the first call compiles
        try:
            with torch.no_grad():
                return compiled(*inputs)
        finally:
            inductor_config.freezing = previous
    return frozen
