"""tk.quantize on the digits CNN: test accuracy per calibration method against float, and latency
float vs int8 (tensorkiln fp32, tensorkiln int8, PyTorch eager fp32 on the same weights).

    python benchmarks/ptq_accuracy.py [--epochs 30] [--calibration 256] [--pairs 8] [--threads 2] [--json out.json]
                                      [--weight-bits 8]

The CNN of examples/train_digits.py (conv 3x3 16 - BN - ReLU - pool - conv 3x3 32 - BN - ReLU - pool
- linear 10; 8x8 images) is trained in tensorkiln for `--epochs` on scikit-learn's digits (80/20
split, seed 0), then quantized by tk.quantize with each method on `--calibration` training
images (batches of 32): int8 per-channel weights (`--weight-bits 7`: 7-bit, which an AVX2 CPU sums
without widening), uint8 activations; its three layers run on the
u8 x s8 GEMM. Accuracy is on the 360 test images; the goal is a loss of at most 0.5 points per
method. Latency: batch 1 and batch 64, medians of alternating blocks (tools/timing.alternating_blocks,
the order reversed every round) on a machine that may be shared, so ratios mean more than times;
ops/s counts 2 per multiply-add of the three layers, set against the peak fp32 FMA rate measured
by benchmarks/kernels.py's probe (int8 VNNI does 4 multiply-adds per fp32 lane, so its peak is 4x).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

# Set before any OpenMP runtime loads: the thread count, and idle workers that sleep instead of
# spinning (tensorkiln's and PyTorch's thread pools take turns on the cores).
_early = argparse.ArgumentParser(add_help=False)
_early.add_argument("--threads", type=int, default=2)
THREADS = _early.parse_known_args()[0].threads
os.environ["OMP_NUM_THREADS"] = str(THREADS)
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import tensorkiln as tk  # noqa: E402
from tensorkiln.tools.timing import alternating_blocks  # noqa: E402

from common import machine_summary, print_table, write_json  # noqa: E402
from train_digits import LEARNING_RATES, cnn, load_data, train  # noqa: E402

METHODS = ("minmax", "percentile", "kl", "mse")
GOAL_POINTS = 0.5
MACS_PER_IMAGE = 8 * 8 * 16 * 9 + 4 * 4 * 32 * 16 * 9 + 128 * 10  # the two convolutions and the linear layer


def accuracy(fn, x: np.ndarray, y: np.ndarray, batch: int = 90) -> float:
    predictions = np.concatenate([fn(x[i:i + batch]).numpy().argmax(1) for i in range(0, len(x), batch)])
    return float((predictions == y).mean())


def torch_twin(model):
    """The same CNN in PyTorch (eager, fp32, eval) with the trained weights."""
    import torch
    twin = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(16, 32, 3, padding=1, bias=False), torch.nn.BatchNorm2d(32),
        torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(128, 10))
    state = {k: torch.from_numpy(np.array(v.numpy())) for k, v in model.state_dict().items()}
    twin.load_state_dict(state, strict=False)
    return twin.eval()


def latency(model, quantized, images: np.ndarray, pairs: int) -> dict:
    """Median seconds per call of float, int8 and PyTorch eager at this batch, in alternating blocks."""
    import torch
    float_fn = tk.jit(model)
    twin = torch_twin(model)
    x_torch = torch.from_numpy(images)
    torch.set_num_threads(THREADS)

    def torch_call():
        with torch.no_grad():
            return twin(x_torch)

    with tk.no_grad():
        runs = {"tensorkiln fp32": lambda: float_fn(images), "tensorkiln int8": lambda: quantized(images),
                "PyTorch eager fp32": torch_call}
        for run in runs.values():
            run()
        blocks = alternating_blocks(runs, pairs)
    return {name: float(np.median(seconds)) for name, seconds in blocks.items()}


def peak_fma_gflops() -> float:
    from kernels import measure_limits
    return measure_limits(3)["peak_gflops"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--calibration", type=int, default=256)
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2, help="threads of every engine (OMP_NUM_THREADS)")
    parser.add_argument("--json")
    parser.add_argument("--weight-bits", type=int, default=8, help="tk.quantize's weight_bits")
    args = parser.parse_args()
    print(machine_summary())
    tk.manual_seed(0)
    data = load_data(0)
    model = cnn()
    train("cnn", model, data, args.epochs, lr=LEARNING_RATES["cnn"], verbose=False)
    train_x, _, test_x, test_y = data
    train_x, test_x = train_x[:, None], test_x[:, None]
    model.eval()
    calibration = [train_x[i:i + 32] for i in range(0, min(args.calibration, len(train_x)), 32)]
    with tk.no_grad():
        float_accuracy = accuracy(tk.jit(model), test_x, test_y)
    results = {"float_accuracy": float_accuracy, "methods": {}}
    rows = [["float (fp32)", f"{100 * float_accuracy:.2f}", "", "", ""]]
    quantized = {}
    for method in METHODS:
        qf = tk.quantize(model, calibration, method=method, weight_bits=args.weight_bits)
        quantized[method] = qf
        acc = accuracy(qf, test_x, test_y)
        drop = 100 * (float_accuracy - acc)
        report = qf.quantization_report()
        results["methods"][method] = {"accuracy": acc, "drop_points": drop,
                                      "end_to_end_sqnr_db": report.end_to_end_sqnr_db}
        rows.append([f"int8 {method}", f"{100 * acc:.2f}", f"{drop:+.2f}", f"{report.end_to_end_sqnr_db:.1f}",
                     "yes" if drop <= GOAL_POINTS else "NO"])
    print(f"\ndigits CNN, {args.epochs} epochs, {len(test_x)} test images, {sum(len(c) for c in calibration)} "
          f"calibration images, {args.weight_bits}-bit weights; goal: at most {GOAL_POINTS} points lost")
    print_table(["model", "test accuracy %", "points lost", "output SQNR dB (calibration)", "goal met"], rows)
    print(quantized["minmax"].quantization_report())
    kinds = [k.precision for k in quantized["minmax"].report(test_x[:1]).kernels]
    print(f"int8 kernels: {sum(k.startswith('int8') for k in kinds)} of {len(kinds)} ({', '.join(sorted(set(kinds)))})")

    peak = peak_fma_gflops()
    print(f"\nlatency, {THREADS} thread(s) (median of {args.pairs} alternating blocks; a shared machine: compare "
          "the ratios), "
          f"peak fp32 FMA {peak:.0f} GFLOP/s")
    rows, results["latency"] = [], {}
    for batch in (1, 64):
        images = np.ascontiguousarray(test_x[:batch])
        times = latency(model, quantized["minmax"], images, args.pairs)
        results["latency"][batch] = times
        for name, seconds in times.items():
            ops = 2 * MACS_PER_IMAGE * batch / seconds / 1e9
            share = ops / (4 * peak if "int8" in name else peak)
            rows.append([str(batch), name, f"{seconds * 1e6:.1f}", f"{times['tensorkiln fp32'] / seconds:.2f}",
                         f"{ops:.2f}", f"{100 * share:.2f}"])
    print_table(["batch", "run", "us per call", "speed vs tensorkiln fp32", "GOP/s", "% of peak"], rows)
    results["peak_fma_gflops"] = peak
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
