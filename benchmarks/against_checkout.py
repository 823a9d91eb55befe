"""This tree against another checkout of tensorkiln (a commit before a change), whole models in turns.

    OMP_WAIT_POLICY=passive python benchmarks/against_checkout.py BASELINE [MODEL ...] [--threads 2]
        [--pairs 16] [--calls 20] [--precision fp32|bf16|int8] [--kernel INDEX] [--cpu-time] [--json FILE]

BASELINE is the root of the other checkout (e.g. `git worktree add /tmp/base main`); MODEL any of
`tensorkiln bench`'s models at batch 1 (default: resnet18 mobilenetv2). Each tree runs in a worker
process of its own (both import a package named tensorkiln), compiles the models
(`tk.from_torch`) and then, on request, times a block of `--calls` calls and answers the median.
The blocks run in turns, the order reversed every pair, so that a shared machine's drifting speed
slows both alike; a row prints the median of the per-pair ratios (baseline time / this tree's
time: above 1 means this tree is faster) with their range. `--kernel INDEX` times that kernel of
the program instead (`f.profile`, its mean over `--calls` calls per block; the two trees must
number their kernels alike). `--precision int8` runs the QDQ file `tensorkiln bench --precision int8`
runs (ONNX Runtime's `quantize_static`, written once by this tree, `tools/bench_int8.py`) through
`tk.onnx.load` in both trees. `--cpu-time` times a call by its process's CPU time (all its threads)
instead of the wall clock: with one thread, what the call computed, which time spent waiting for a
core on a machine shared with other jobs does not inflate.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def worker(models: list[str], precision: str, folder: str, clock: str) -> None:
    """Compile the models with the tensorkiln on sys.path, then answer "MODEL CALLS KERNEL" lines with
    the median call (KERNEL -1) or the kernel's mean time."""
    import numpy as np
    import torch
    import tensorkiln as tk
    from tensorkiln.importers.torch import from_torch
    from tensorkiln.tools.bench import build
    programs = {}
    for name in models:
        if precision == "int8":  # the QDQ file and its inputs, written by main()
            module = tk.onnx.load(os.path.join(folder, f"{name}.int8.onnx"))
            count = len([f for f in os.listdir(folder) if f.startswith(f"{name}.input") and f.endswith(".npy")])
            arrays = [np.load(os.path.join(folder, f"{name}.input{i}.npy")) for i in range(count)]
            program = lambda *a, module=module: module(*a)  # noqa: E731
            program.profile = lambda *a, repeat, module=module: module.profile(*a, repeat=repeat)
        else:
            model, inputs = build(name, 1)
            arrays = [t.numpy() for t in inputs]
            program = from_torch(model, inputs, precision=precision)
        for _ in range(3):
            program(*arrays)
        programs[name] = (program, arrays)
    print("ready", flush=True)
    for line in sys.stdin:
        name, calls, kernel = line.split()
        program, arrays = programs[name]
        if int(kernel) >= 0:
            print(program.profile(*arrays, repeat=int(calls)).kernels[int(kernel)].seconds, flush=True)
            continue
        seconds = []
        now = time.process_time if clock == "cpu" else time.perf_counter
        for _ in range(int(calls)):
            start = now()
            program(*arrays)
            seconds.append(now() - start)
        print(statistics.median(seconds), flush=True)


def quantized_files(models: list[str]) -> str:
    """A folder holding each model's QDQ file (`tensorkiln bench --precision int8`'s) and its inputs."""
    import numpy as np
    from tensorkiln.tools.bench import build
    from tensorkiln.tools.bench_int8 import quantized_onnx
    folder = tempfile.mkdtemp(prefix="tensorkiln-checkout-int8-")
    for name in models:
        model, inputs = build(name, 1)
        quantized_onnx(name, model, inputs, folder)  # writes {name}.int8.onnx there
        for i, tensor in enumerate(inputs):  # every input: BERT-base takes its ids and its attention mask
            np.save(os.path.join(folder, f"{name}.input{i}.npy"), tensor.numpy())
    return folder


def start(tree: str, models: list[str], precision: str, folder: str, clock: str) -> subprocess.Popen:
    """A worker importing tensorkiln from `tree`."""
    env = dict(os.environ, PYTHONPATH=tree)
    process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", ",".join(models), precision,
                                folder, clock],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tree)
    if process.stdout.readline().strip() != "ready":
        raise SystemExit(f"the worker of {tree} did not start")
    return process


def block(process: subprocess.Popen, name: str, calls: int, kernel: int) -> float:
    process.stdin.write(f"{name} {calls} {kernel}\n")
    process.stdin.flush()
    return float(process.stdout.readline())


def main() -> int:
    from common import benchmark_arguments, finish
    parser = benchmark_arguments(__doc__, threads=2)
    parser.add_argument("baseline", help="root of the other checkout")
    parser.add_argument("models", nargs="*", default=["resnet18", "mobilenetv2"])
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--precision", choices=("fp32", "bf16", "int8"), default="fp32")
    parser.add_argument("--kernel", type=int, default=-1, help="time this kernel (its index) instead of the call")
    parser.add_argument("--cpu-time", action="store_true", help="a call's process CPU time, not wall time")
    args = parser.parse_args()
    trees = {"baseline": os.path.abspath(args.baseline), "this tree": ROOT}
    folder = quantized_files(args.models) if args.precision == "int8" else ""
    clock = "cpu" if args.cpu_time else "wall"
    workers = {label: start(tree, args.models, args.precision, folder, clock) for label, tree in trees.items()}
    results = {}
    for name in args.models:
        times: dict[str, list[float]] = {label: [] for label in trees}
        for pair in range(args.pairs):
            for label in (list(trees) if pair % 2 == 0 else list(reversed(trees))):
                times[label].append(block(workers[label], name, args.calls, args.kernel))
        ratios = [b / t for b, t in zip(times["baseline"], times["this tree"])]
        results[name] = {"baseline_ms": statistics.median(times["baseline"]) * 1e3,
                         "this_tree_ms": statistics.median(times["this tree"]) * 1e3,
                         "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
        r = results[name]
        what = f"{name} kernel {args.kernel}" if args.kernel >= 0 else name
        print(f"{what}: baseline {r['baseline_ms']:.2f} ms, this tree {r['this_tree_ms']:.2f} ms, baseline / this "
              f"tree {r['ratio_median']:.3f}x (pairs {r['ratio_min']:.2f}-{r['ratio_max']:.2f}), {args.pairs} pairs "
              f"of {args.calls} calls, {args.threads} threads{', CPU time' if args.cpu_time else ''}", flush=True)
    for process in workers.values():
        process.stdin.close()
        process.wait()
    return finish(args, results, pairs=args.pairs)


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--worker":
        worker(sys.argv[2].split(","), sys.argv[3], sys.argv[4], sys.argv[5])
        sys.exit(0)
    sys.path.insert(0, HERE)
    sys.exit(main())
