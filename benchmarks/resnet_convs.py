"""ResNet-18's convolution layers inside the model, tensorkiln against ONNX Runtime, stage by stage.

    python benchmarks/resnet_convs.py [--rounds N] [--calls N] [--batch B] [--json out/resnet_convs.json]

Both frameworks run the whole model (batch 1, 224x224, eval mode, imported
from the same PyTorch module: tensorkiln with `tk.from_torch`, ONNX Runtime
from a `torch.onnx` export) and time each of their kernels with their own
profilers: `tk.from_torch(...).profile(...)` and ONNX Runtime's
`enable_profiling`. A convolution kernel of either includes what it fused
(batch norm, residual add, ReLU), and tensorkiln's layout conversions are
counted where they happen (inside its convolution kernels), so the sums
compare like with like. Kernels are grouped by the stage of their output
(stem 64x112x112, layer1 64x56x56, layer2 128x28x28, layer3 256x14x14,
layer4 512x7x7), which needs no matching of layer names between the two.

The machine is shared and its speed drifts, so the two are measured in
alternating rounds (each round: `--calls` calls of each framework, a pause
between), and each stage's median over the rounds is reported. Threads: as
many as OpenMP uses for tensorkiln (OMP_NUM_THREADS, default all cores), the
same for ONNX Runtime's intra-op pool.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STAGES = {(64, 112): "stem", (64, 56): "layer1", (128, 28): "layer2", (256, 14): "layer3", (512, 7): "layer4"}
CONV_OPS = ("conv2d", "conv2d_nchwc", "conv2d_winograd")


def _stage(shape: tuple[int, ...]) -> str | None:
    """The stage of an output of shape (N, C, H, W) or blocked (N, C/c, H, W, c)."""
    channels = shape[1] * shape[4] if len(shape) == 5 else shape[1]
    return STAGES.get((channels, shape[2])) if len(shape) >= 4 else None


def tensorkiln_stages(program, arrays, calls: int) -> dict[str, float]:
    """Seconds per call of tensorkiln's convolution kernels, summed per stage."""
    profile = program.profile(*arrays, repeat=calls)
    kernels = program.report(*arrays).kernels
    totals: dict[str, float] = defaultdict(float)
    for timing, info in zip(profile.kernels, kernels):
        conv = next((line for line in info.nodes
                     if re.search(r"= (%s)\(" % "|".join(CONV_OPS), line)), None)
        if conv is None:
            continue
        shape = tuple(int(d) for d in re.search(r": \w+\[([\d,]+)\]", conv).group(1).split(","))
        stage = _stage(shape)
        if stage is not None:
            totals[stage] += timing.seconds
    return dict(totals)


def onnxruntime_stages(path: str, feed: dict, calls: int, threads: int) -> dict[str, float]:
    """Seconds per call of ONNX Runtime's convolution nodes, summed per stage (one profiled session)."""
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.enable_profiling = True
    options.intra_op_num_threads = threads
    options.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="tensorkiln-ort-"), "profile")
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    for _ in range(3):
        session.run(None, feed)
    for _ in range(calls):
        session.run(None, feed)
    with open(session.end_profiling()) as f:
        events = json.load(f)
    totals: dict[str, float] = defaultdict(float)
    per_node: dict[tuple[str, tuple[int, ...]], list[float]] = defaultdict(list)
    for event in events:
        args = event.get("args", {})
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time"):
            continue
        if "Conv" not in args.get("op_name", ""):
            continue
        shapes = [list(s.values())[0] for s in args.get("output_type_shape", [])]
        if shapes:
            per_node[(event["name"], tuple(shapes[0]))].append(event["dur"] * 1e-6)
    for (_, shape), durations in per_node.items():
        stage = _stage(shape)
        if stage is not None:
            totals[stage] += float(np.mean(durations[-calls:]))  # the warm-up calls dropped
    return dict(totals)


def measure(rounds: int, calls: int, batch: int) -> dict:
    import torch
    from tensorkiln.tools.bench import build
    from tensorkiln.importers.torch import from_torch
    from tensorkiln.kernels.schedule_defaults import thread_count
    model, inputs = build("resnet18", batch)
    program = from_torch(model, inputs)
    arrays = [t.numpy() for t in inputs]
    program(*arrays)
    path = os.path.join(tempfile.mkdtemp(prefix="tensorkiln-bench-"), "resnet18.onnx")
    torch.onnx.export(model, inputs, path, dynamo=False)
    import onnxruntime
    names = [i.name for i in onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).get_inputs()]
    feed = dict(zip(names, arrays))
    threads = thread_count()
    samples: dict[str, dict[str, list[float]]] = {"tensorkiln": defaultdict(list), "onnxruntime": defaultdict(list)}
    for _ in range(rounds):
        for name, stages in (("tensorkiln", lambda: tensorkiln_stages(program, arrays, calls)),
                             ("onnxruntime", lambda: onnxruntime_stages(path, feed, calls, threads))):
            for stage, seconds in stages().items():
                samples[name][stage].append(seconds)
            time.sleep(0.3)
    result = {"threads": threads, "batch": batch, "rounds": rounds, "stages": {}}
    for stage in STAGES.values():
        tk_s, ort_s = samples["tensorkiln"].get(stage), samples["onnxruntime"].get(stage)
        if tk_s and ort_s:
            result["stages"][stage] = {"tensorkiln_ms": 1e3 * float(np.median(tk_s)),
                                       "onnxruntime_ms": 1e3 * float(np.median(ort_s))}
    tk_total = [sum(v[i] for v in samples["tensorkiln"].values()) for i in range(rounds)]
    ort_total = [sum(v[i] for v in samples["onnxruntime"].values()) for i in range(rounds)]
    result["total"] = {"tensorkiln_ms": 1e3 * float(np.median(tk_total)),
                       "onnxruntime_ms": 1e3 * float(np.median(ort_total)),
                       "round_ratios": [o / t for o, t in zip(ort_total, tk_total)]}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    from benchmarks.common import machine_summary, write_json
    result = measure(args.rounds, args.calls, args.batch)
    print(f"# ResNet-18 convolutions in the model (batch {args.batch}, {result['threads']} threads): "
          f"{machine_summary()}\n")
    print("| stage | tensorkiln ms | ONNX Runtime ms | ONNX Runtime / tensorkiln |\n|---|---|---|---|")
    for stage, row in result["stages"].items():
        print(f"| {stage} | {row['tensorkiln_ms']:.3f} | {row['onnxruntime_ms']:.3f} | "
              f"{row['onnxruntime_ms'] / row['tensorkiln_ms']:.2f} |")
    total = result["total"]
    ratios = total["round_ratios"]
    print(f"| all convolutions | {total['tensorkiln_ms']:.3f} | {total['onnxruntime_ms']:.3f} | "
          f"{total['onnxruntime_ms'] / total['tensorkiln_ms']:.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f}) |")
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
