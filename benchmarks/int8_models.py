"""Quantized models: tensorkiln's int8 kernels against ONNX Runtime and OpenVINO on the same int8 ONNX file.

    python benchmarks/int8_models.py [resnet18 mobilenetv2 bert] [--json out.json] [--threads 2] [--reduce-range]
                                     [--format QDQ|QOperator]

Each model (the ones `tensorkiln bench` builds, batch 1; BERT-base at
sequence 128) is exported to ONNX and quantized by ONNX Runtime the way its
users do: ResNet-18 and MobileNetV2 with `quantize_static` (QDQ, per-channel
int8 weights, uint8 activations, calibrated on 4 random images: the timing
does not depend on the calibration), BERT with `quantize_dynamic` (int8
weights, MatMulInteger). The same file is run by tensorkiln (`tk.onnx.load`),
ONNX Runtime (IOBinding, all graph optimizations) and OpenVINO (default
settings), timed in turns (interleaved_medians), medians in ms; tensorkiln's
fp32 run of the float file is the baseline its int8 speed-up is measured
against. The last column is the largest difference of tensorkiln's int8
output from ONNX Runtime's on the same model.

With --format QOperator the CNNs are quantized to ONNX Runtime's QOperator form instead (QLinearConv,
and com.microsoft's QLinearAdd, QLinearGlobalAveragePool and QGemm: the form of the ONNX Model Zoo's
int8 models); tensorkiln converts those operators to the graph a QDQ model has.

With --reduce-range the weights are quantized to 7 bits (ONNX Runtime's `reduce_range`, its advice
for CPUs without VNNI), so ONNX Runtime's AVX2 sums are exact too, and on an AVX2 CPU every dense
layer of tensorkiln passes int8_avx2.maddubsw_is_exact (its `maddubsw` step).

With --cpu-time, a second table gives the medians of the CPU time of a call
(the process's, all its threads: with one thread, the time the call computed,
which a machine shared with other jobs inflates much less than wall time,
since time spent waiting for a core is not counted), timed in turns as well.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter

import numpy as np

MODELS = ("resnet18", "mobilenetv2", "bert")


def cpu_medians(runs: dict, rounds: int = 5, calls: int = 10) -> dict[str, float]:
    """Median process CPU seconds per call of each of `runs`, blocks of `calls` calls taken in turns."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            fn()
            for _ in range(calls):
                start = time.process_time()
                fn()
                times[name].append(time.process_time() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--json")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cpu-time", action="store_true", help="also the CPU time per call, in turns")
    parser.add_argument("--reduce-range", action="store_true", help="7-bit weights (quantizer's reduce_range)")
    parser.add_argument("--format", choices=("QDQ", "QOperator"), default="QDQ",
                        help="the form quantize_static writes the CNNs in")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import logging
    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's advice on pre-processing

    import tensorkiln as tk
    from tensorkiln.kernels.target import cpu_target
    from tensorkiln.tools.bench import build
    from tensorkiln.tools.bench_common import onnxruntime_runner, openvino_runner
    from tensorkiln.tools.bench_int8 import quantized_onnx
    from tensorkiln.tools.timing import interleaved_medians

    print(f"int8 models, batch 1, {args.threads} threads, int8 dot product {cpu_target().int8_dot}"
          f"{', 7-bit weights (reduce_range)' if args.reduce_range else ''}, CNNs in {args.format} form; "
          "medians of turns in ms")
    print(f"{'model':>12} {'tk int8':>8} {'ORT int8':>9} {'OV int8':>8} {'tk fp32':>8} "
          f"{'ORT/tk':>7} {'OV/tk':>6} {'fp32/int8':>9} {'max |tk - ORT|':>15}")
    results = {}
    folder = tempfile.mkdtemp(prefix="tensorkiln-int8-")
    for name in args.models:
        model, inputs = build(name, 1)
        arrays = [t.numpy() for t in inputs]
        float_path, int8_path = quantized_onnx(name, model, inputs, folder, reduce_range=args.reduce_range,
                                               quant_format=args.format)
        names = [i.name for i in __import__("onnx").load(int8_path, load_external_data=False).graph.input]
        feeds = dict(zip(names, arrays))
        tk_int8, tk_fp32 = tk.onnx.load(int8_path), tk.onnx.load(float_path)
        ort_run, _ = onnxruntime_runner(int8_path, arrays)
        engines = {"tk int8": lambda: tk_int8(**feeds), "ORT int8": ort_run, "tk fp32": lambda: tk_fp32(**feeds)}
        try:
            engines["OV int8"], _ = openvino_runner(int8_path, arrays, None)  # its default settings
        except Exception as err:  # OpenVINO reads no com.microsoft operator: that row shows "-"
            print(f"{'':>12} OpenVINO cannot run {name}'s int8 file: {str(err).strip().splitlines()[-1][:150]}")
        first = lambda out: out[0] if isinstance(out, (list, tuple)) else out  # noqa: E731
        difference = float(np.max(np.abs(first(tk_int8(**feeds)) - ort_run())))
        ms = {k: v * 1e3 for k, v in interleaved_medians(engines).items()}
        kinds = Counter(k.precision for k in tk_int8.report(**feeds).kernels if k.kind == "contraction")
        results[name] = {"ms": ms, "max_abs_difference_from_ort": difference, "tk_kernels": dict(kinds)}
        _row(name, ms, difference)
        print(f"{'':>12} tk contractions: " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())))
        if args.cpu_time:
            cpu = {k: v * 1e3 for k, v in cpu_medians(engines).items()}
            results[name]["cpu_ms"] = cpu
            _row(f"{name} (CPU)", cpu, difference)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "int8_dot": cpu_target().int8_dot, "format": args.format,
                       "models": results}, f, indent=1)
    return 0


def _row(name: str, ms: dict[str, float], difference: float) -> None:
    ov = f"{ms['OV int8']:8.2f}" if "OV int8" in ms else f"{'-':>8}"
    ov_ratio = f"{ms['OV int8'] / ms['tk int8']:5.2f}x" if "OV int8" in ms else f"{'-':>6}"
    print(f"{name:>12} {ms['tk int8']:8.2f} {ms['ORT int8']:9.2f} {ov} {ms['tk fp32']:8.2f} "
          f"{ms['ORT int8'] / ms['tk int8']:6.2f}x {ov_ratio} "
          f"{ms['tk fp32'] / ms['tk int8']:8.2f}x {difference:15.3g}")


if __name__ == "__main__":
    raise SystemExit(main())
