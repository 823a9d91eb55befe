"""Float ONNX models quantized by tensorkiln (tk.quantize of tk.onnx.load) against the same models quantized by
ONNX Runtime's quantize_static: accuracy against the float model, and speed, in turns in one run.

    python benchmarks/ptq_onnx_models.py [resnet18 mobilenetv2] [--threads 2] [--rounds 8] [--json out.json]

Each model (`tensorkiln bench`'s, seeded weights, batch 1) is exported to a float ONNX file. ONNX
Runtime's `quantize_static` writes its QDQ file (per-channel int8 weights, uint8 activations, min-max
on the calibration batches), and `tk.quantize(tk.onnx.load(float file), the same batches)` quantizes
the float file in tensorkiln (min-max, per-channel weights, uint8 activations: the same scheme), once
with 8-bit weights and once with 7-bit ones (`weight_bits=7`, what ONNX Runtime's reduce_range writes
for CPUs without VNNI, where it lets every dense layer sum with `vpmaddubsw`). On a
fresh input, the error is each int8 output's largest difference from the float model's output,
relative to that output's largest value. Timed in turns (interleaved_medians; ms, medians): the
tk.quantize modules, ONNX Runtime's QDQ file run by tensorkiln, by ONNX Runtime (IOBinding) and by
OpenVINO (defaults), and tensorkiln's float32 run of the float file. The peers are skipped where not
installed.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

CALIBRATION_BATCHES = 8


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["resnet18", "mobilenetv2"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--json")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    import tensorkiln as tk
    from common import machine_summary, print_table, write_json
    from tensorkiln.tools.bench import build
    from tensorkiln.tools.bench_common import onnxruntime_runner, openvino_runner
    from tensorkiln.tools.timing import interleaved_medians
    logging.getLogger().setLevel(logging.ERROR)  # ONNX Runtime's quantizer's advice on pre-processing
    torch.set_num_threads(args.threads)
    print(machine_summary())
    print(f"{args.threads} threads, batch 1, ms (medians of {args.rounds} rounds in turns); error: max |int8 - float| "
          f"/ max |float| on a fresh input")
    rows, results = [], {}
    for name in args.models:
        model, inputs = build(name, 1)
        folder = tempfile.mkdtemp(prefix="tk-ptq-onnx-")
        float_path, qdq_path = os.path.join(folder, f"{name}.onnx"), os.path.join(folder, f"{name}.qdq.onnx")
        torch.onnx.export(model, inputs, float_path, dynamo=False, input_names=["x"])
        rng = np.random.default_rng(0)
        shape = tuple(inputs[0].shape)
        batches = [rng.standard_normal(shape).astype(np.float32) for _ in range(CALIBRATION_BATCHES)]
        from onnxruntime import quantization as q

        class Batches(q.CalibrationDataReader):
            def __init__(self):
                self.batches = iter([{"x": b} for b in batches])

            def get_next(self):
                return next(self.batches, None)

        q.quantize_static(float_path, qdq_path, Batches(), quant_format=q.QuantFormat.QDQ, per_channel=True)
        float_module = tk.onnx.load(float_path)
        ours = tk.quantize(float_module, batches)
        # ONNX Runtime's advice for CPUs without VNNI (reduce_range): weights in [-63, 63], so on AVX2 every
        # dense layer sums byte pairs with vpmaddubsw (exact for such weights), at some cost in accuracy
        ours7 = tk.quantize(float_module, batches, weight_bits=7)
        qdq = tk.onnx.load(qdq_path)
        x = rng.standard_normal(shape).astype(np.float32)
        want = float_module(x)[0]
        runs = {"tk.quantize": lambda: ours(x), "tk.quantize, 7-bit weights": lambda: ours7(x),
                "ORT QDQ file in tk": lambda: qdq(x), "tk fp32": lambda: float_module(x)}
        outputs = {"tk.quantize": ours(x)[0], "tk.quantize, 7-bit weights": ours7(x)[0], "ORT QDQ file in tk": qdq(x)[0]}
        for peer in ("onnxruntime", "openvino"):
            try:
                run, _ = onnxruntime_runner(qdq_path, [x]) if peer == "onnxruntime" else \
                    openvino_runner(qdq_path, [x], None)
            except ImportError:
                continue
            label = "ORT QDQ file in ONNX Runtime" if peer == "onnxruntime" else "ORT QDQ file in OpenVINO"
            runs[label] = run
            out = run()
            outputs[label] = np.asarray(out[0] if isinstance(out, (list, tuple)) else out)
        times = interleaved_medians(runs, repeat=10 * args.rounds, rounds=args.rounds)
        scale = float(np.max(np.abs(want)))
        for label, seconds in times.items():
            error = "-" if label not in outputs else f"{np.max(np.abs(outputs[label].reshape(want.shape) - want)) / scale:.4f}"
            rows.append([name, label, f"{seconds * 1e3:.2f}", error])
            results.setdefault(name, {})[label] = {"ms": seconds * 1e3, "error": None if error == "-" else float(error)}
    print_table(["model", "run", "ms", "error vs float"], rows)
    if args.json:
        write_json(args.json, {"threads": args.threads, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
