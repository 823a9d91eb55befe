"""tk.quantize on Hugging Face architectures: each PyTorch model quantized to int8 and compared with its float self.

    python benchmarks/ptq_hf_models.py [--size tiny] [--samples 4] [--method minmax] [--json FILE]

Every architecture of tensorkiln/tools/hf_zoo.py (seeded random weights, float32) is quantized by
`tk.quantize(model, calibration)`: text models calibrated on `--samples` batches of random token
ids (dicts of keyword arguments, as a tokenizer gives them), the others on random inputs of the
example's shape; then run on a fresh input. The table gives the largest error of the floating-point
outputs relative to each output's largest float value (PyTorch eager, float32), the end-to-end SQNR
of tk.quantize's report, and how many of the compiled kernels run on integers. Accuracy only: no
timing.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import machine_summary, print_table, write_json  # noqa: E402
import tensorkiln as tk  # noqa: E402
from tensorkiln.tools import hf_zoo  # noqa: E402


def measure(name: str, size: str, count: int, method: str) -> dict:
    """The relative error, SQNR and int8 kernel count of one architecture quantized, or the error raised."""
    model, args, kwargs = hf_zoo.ARCHITECTURES[name].build(size)
    calibration = hf_zoo.random_batches(args, kwargs, count, 0)
    test = hf_zoo.random_batches(args, kwargs, 1, 1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = tk.quantize(model, calibration, method=method)
        got = hf_zoo.tensors_of(hf_zoo._as_torch(hf_zoo.call(program, test)))
        with torch.no_grad():
            want = hf_zoo.tensors_of(hf_zoo.call(model, test))
        kernels = hf_zoo.call(program.report, test).kernels
    error = hf_zoo.max_relative_error([g.numpy() for g in got], want)
    report = program.quantization_report()
    return {"relative_error": error, "sqnr_db": report.end_to_end_sqnr_db, "quantized_layers": sum(l.quantized for l in
                                                                                        report.layers),
            "int8_kernels": sum(k.precision.startswith("int8") for k in kernels), "kernels": len(kernels)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="tiny", choices=tuple(hf_zoo.SIZES))
    parser.add_argument("--samples", type=int, default=4, help="calibration batches")
    parser.add_argument("--method", default="minmax")
    parser.add_argument("--json")
    args = parser.parse_args()
    print(f"tk.quantize on Hugging Face architectures ({args.size} size, random weights, {args.samples} "
          f"calibration batches, method {args.method}); {machine_summary()}")
    rows, results = [], {}
    for name, arch in hf_zoo.ARCHITECTURES.items():
        try:
            result = measure(name, args.size, args.samples, args.method)
            rows.append([name, arch.kind, f"{result['relative_error']:.2e}", f"{result['sqnr_db']:.1f}",
                         str(result["quantized_layers"]), f"{result['int8_kernels']} of {result['kernels']}"])
        except Exception as err:  # the table reports the failure and goes on
            result = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:100]}"}
            rows.append([name, arch.kind, result["error"], "", "", ""])
        results[name] = result
        print(f"  .. {name}", file=sys.stderr, flush=True)
    print_table(["model", "kind", "max rel. error", "SQNR dB", "int8 layers", "int8 kernels"], rows)
    if args.json:
        write_json(args.json, {"size": args.size, "samples": args.samples, "method": args.method, "models": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
