"""`tensorkiln bench --precision int8`: one int8 ONNX file run by tensorkiln and the int8 peers, in turns.

The model (bench.py's `build`, seeded weights) is exported to ONNX and
quantized by ONNX Runtime's quantizer the way its users do: the CNNs with
`quantize_static` (QDQ, per-channel int8 weights, uint8 activations,
calibrated on a few random inputs; the timing does not depend on the
calibration), BERT and the MLP with `quantize_dynamic` (int8 weights,
MatMulInteger after DynamicQuantizeLinear). That one file is run by
tensorkiln (`tk.onnx.load`: the integer kernels), ONNX Runtime (IOBinding)
and OpenVINO (its default settings), and tensorkiln's fp32 run of the float
file ("tensorkiln-fp32") is measured in the same turns.

Agreement: the int8 runs are compared with the int8 file's exact answer (a
quantized model's answer is its own, not the float model's): tensorkiln's
reference interpreter (numpy) running the imported graph. ONNX Runtime's
integer GEMMs are exact on a CPU with VNNI; on AVX2 alone they sum byte
pairs with `vpmaddubsw`, whose 16-bit sums saturate, and its outputs move
by several quanta (the table says so). tensorkiln-fp32 is compared with
PyTorch eager, as in every bench.
"""
from __future__ import annotations

import os
import tempfile
import time
from typing import Callable

import numpy as np

from ..onnx import load as load_onnx
from .bench_common import agreement, onnxruntime_runner, openvino_runner, timed_first

INT8_MODELS = ("resnet18", "mobilenetv2", "bert", "mlp")
STATIC_QDQ = ("resnet18", "mobilenetv2")  # quantize_static (QDQ); the others quantize_dynamic
INT8_PEERS = ("onnxruntime", "openvino")
# int8 runs of one file agree with ONNX Runtime's to about one output quantum; relative to the largest
# output that is below 1e-2 for 8-bit outputs, and OpenVINO's requantization may round differently
INT8_TOLERANCE = 3e-2
CALIBRATION_BATCHES = 4


def quantized_onnx(name: str, model, inputs: tuple, folder: str, reduce_range: bool = False,
                   quant_format: str = "QDQ") -> tuple[str, str]:
    """(float ONNX path, int8 ONNX path) of one model, quantized by ONNX Runtime's quantizer; `reduce_range`:
    7-bit weights, its advice for CPUs without VNNI; `quant_format`: the statically quantized models' form,
    "QDQ" or "QOperator" (QLinearConv, and com.microsoft's QLinearAdd, QGemm, ...)."""
    import torch
    from onnxruntime import quantization as q
    float_path, int8_path = os.path.join(folder, f"{name}.onnx"), os.path.join(folder, f"{name}.int8.onnx")
    torch.onnx.export(model, inputs, float_path, dynamo=False)
    if name not in STATIC_QDQ:
        q.quantize_dynamic(float_path, int8_path, weight_type=q.QuantType.QInt8, reduce_range=reduce_range)
        return float_path, int8_path
    import onnx
    input_name = onnx.load(float_path, load_external_data=False).graph.input[0].name
    shape = tuple(inputs[0].shape)

    class RandomInputs(q.CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.batches = iter([{input_name: rng.standard_normal(shape).astype(np.float32)}
                                 for _ in range(CALIBRATION_BATCHES)])

        def get_next(self):
            return next(self.batches, None)

    q.quantize_static(float_path, int8_path, RandomInputs(), quant_format=getattr(q.QuantFormat, quant_format),
                      per_channel=True, reduce_range=reduce_range)
    return float_path, int8_path


def exact_int8_output(path: str, arrays: list[np.ndarray]) -> np.ndarray:
    """The first output of the int8 file as its operators define it: the reference interpreter's."""
    out = load_onnx(path, backend="interpreter")(*arrays)
    return np.asarray(out[0] if isinstance(out, (list, tuple)) else out)


def check_int8_model(name: str) -> None:
    """SystemExit, saying why, where `--precision int8` cannot run `name` here."""
    if name not in INT8_MODELS:
        raise SystemExit(f"--precision int8 runs {', '.join(INT8_MODELS)} (ONNX Runtime's quantizer on the "
                         f"exported model); {name!r} is not one of them")
    try:
        import onnxruntime.quantization  # noqa: F401  (the quantizer writes the int8 file)
    except ImportError:
        raise SystemExit("--precision int8 quantizes the model with ONNX Runtime's quantizer: "
                         "pip install 'tensorkiln[bench]'") from None


def measure_int8(name: str, model, inputs: tuple, peers: list[str], repeat: int, rounds: int, timer,
                 progress: Callable[[str], None] = lambda message: None) -> dict:
    """Rows of tensorkiln (int8), tensorkiln-fp32 and the int8 peers on one model (a torch module in eval
    mode and its example inputs, as bench.build gives them), timed in turns."""
    import logging

    import torch  # optional dependency, as for every bench
    check_int8_model(name)
    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's advice on pre-processing
    arrays = [t.numpy() for t in inputs]
    with torch.no_grad():
        reference = model(*inputs).numpy()
    progress(f"{name}: exporting and quantizing with ONNX Runtime's quantizer")
    float_path, int8_path = quantized_onnx(name, model, inputs, tempfile.mkdtemp(prefix="tensorkiln-bench-int8-"))
    runs, rows, outputs = {}, {}, {}

    def first(out):
        out = out[0] if isinstance(out, (list, tuple)) else out
        return out.numpy() if hasattr(out, "numpy") else np.array(out)

    for framework, path in (("tensorkiln", int8_path), ("tensorkiln-fp32", float_path)):
        progress(f"{name}: compiling tensorkiln ({'int8' if path == int8_path else 'fp32'})")
        start = time.perf_counter()
        module = load_onnx(path)
        run = (lambda module=module: module(*arrays))
        rows[framework] = {"compile_s": time.perf_counter() - start + timed_first(run)}
        runs[framework], outputs[framework] = run, first(run())
    for peer in INT8_PEERS:
        if peer not in peers:
            continue
        try:
            run, seconds = onnxruntime_runner(int8_path, arrays) if peer == "onnxruntime" else \
                openvino_runner(int8_path, arrays, None)
        except ImportError:
            progress(f"{peer} is not installed: skipped")
            continue
        rows[peer] = {"compile_s": seconds + timed_first(run)}
        runs[peer], outputs[peer] = run, first(run())
    exact = exact_int8_output(int8_path, arrays)
    for framework in rows:
        if framework == "tensorkiln-fp32":
            rows[framework].update(agreement(outputs[framework], reference, "tensorkiln"))
        else:
            result = agreement(outputs[framework], exact, framework)
            result["agrees"] = result["max_rel_error"] <= INT8_TOLERANCE
            rows[framework].update(result)
    progress(f"{name}: measuring {', '.join(runs)} in turns")
    for framework, latency in timer(runs, repeat, rounds).items():
        rows[framework]["latency_s"] = latency
    return rows
