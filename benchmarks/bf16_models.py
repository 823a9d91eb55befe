"""tensorkiln bf16 against OpenVINO's default on whole models, in turns, by CPU time as well as wall time.

    python benchmarks/bf16_models.py [MODEL ...] [--threads 1] [--rounds 9] [--calls 5] [--json out.json]

MODEL: resnet18, mobilenetv2, bert (`tensorkiln bench`'s models at batch 1; default all three).
Each model is compiled by tensorkiln with precision="bf16" and "fp32" (`tk.from_torch`) and by
OpenVINO from its ONNX export with its default settings (bf16 on a CPU with AVX512-BF16; `tensorkiln
bench`'s runner). Then `--rounds` rounds each run `--calls` calls of every framework in turn. On a
machine shared with other jobs the wall time mostly measures the waits for a core; with `--threads 1`
the process's CPU time (time.process_time) counts only the time the call ran, so the ratios of CPU
times compare the code even on a loaded machine (with more threads it counts the OpenMP runtime's
spinning as well). Printed: medians of ms per call, and OpenVINO / framework (above 1: faster than
OpenVINO). Precision: bf16 (tensorkiln bf16, OpenVINO default), fp32 (tensorkiln fp32).
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from common import benchmark_arguments, finish, print_table, torch_peer  # noqa: E402

MODELS = ("resnet18", "mobilenetv2", "bert")


def runners(name: str) -> dict:
    """Framework -> a call of one batch-1 inference of `name`."""
    import torch
    from tensorkiln.importers.torch import from_torch
    from tensorkiln.tools.bench import build
    from tensorkiln.tools.bench_common import openvino_runner

    model, inputs = build(name, 1)
    arrays = [t.numpy() for t in inputs]
    calls = {}
    for precision in ("bf16", "fp32"):
        compiled = from_torch(model, inputs, precision=precision)
        compiled(*arrays)
        calls[f"tensorkiln {precision}"] = lambda compiled=compiled: compiled(*arrays)
    path = os.path.join(tempfile.mkdtemp(prefix="tk-bf16-models-"), f"{name}.onnx")
    torch.onnx.export(model, inputs, path, dynamo=False)
    calls["openvino default"], _ = openvino_runner(path, arrays, None)
    return calls


def in_turns(calls: dict, rounds: int, per_round: int) -> dict[str, dict[str, float]]:
    """Framework -> medians over the rounds of CPU and wall seconds per call."""
    cpu: dict[str, list[float]] = {k: [] for k in calls}
    wall: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(rounds):
        for framework, call in calls.items():
            start_cpu, start_wall = time.process_time(), time.perf_counter()
            for _ in range(per_round):
                call()
            cpu[framework].append((time.process_time() - start_cpu) / per_round)
            wall[framework].append((time.perf_counter() - start_wall) / per_round)
    return {k: {"cpu_s": statistics.median(cpu[k]), "wall_s": statistics.median(wall[k])} for k in calls}


def main() -> int:
    parser = benchmark_arguments(__doc__, threads=1)
    parser.add_argument("models", nargs="*", default=list(MODELS), help=", ".join(MODELS))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=5, help="calls per framework per round")
    args = parser.parse_args()
    torch_peer(args.threads)
    results = {}
    rows = []
    for name in args.models:
        figures = in_turns(runners(name), args.rounds, args.calls)
        results[name] = figures
        ov = figures["openvino default"]
        for framework, f in figures.items():
            rows.append([f"{name} {framework}", f"{f['cpu_s'] * 1e3:.2f}", f"{ov['cpu_s'] / f['cpu_s']:.2f}x",
                         f"{f['wall_s'] * 1e3:.2f}", f"{ov['wall_s'] / f['wall_s']:.2f}x"])
    print(f"\nbatch 1, {args.threads} thread(s), medians of {args.rounds} rounds of {args.calls} calls in turns")
    print_table(["model, framework", "CPU ms", "OV / it (CPU)", "wall ms", "OV / it (wall)"], rows)
    return finish(args, results, rounds=args.rounds)


if __name__ == "__main__":
    sys.exit(main())
