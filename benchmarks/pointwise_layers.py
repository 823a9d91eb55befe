"""A model's 1x1 convolutions one by one: tensorkiln's kernel next to OpenVINO's layer, against the FMA peak.

    python benchmarks/pointwise_layers.py [MODEL] [--threads 1] [--rounds 5] [--repeat 20] [--statistic min]
        [--json out.json]

MODEL: mobilenetv2 (default) or resnet18, batch 1, float32 (OpenVINO with the f32 inference hint).
For every ungrouped 1x1 convolution, in the model's order: input and output channels, output
size, stride, whether a residual add is fused; tensorkiln's kernel time (`f.profile`) and its
register tile (the kernel's `tuning:` line: pixels x channel blocks); OpenVINO's layer time
(PERF_COUNT) and its implementation (`exec_type`, e.g. jit_avx2_1x1); both as GFLOP/s and as a
share of one core's FMA peak (benchmarks/stream_kernels.py's probe, times the thread count).
Each round profiles both engines in turns; each layer's median over the rounds is printed
(`--statistic min`: its fastest round, on a machine shared with other jobs the round least slowed
by them: one preempted call moves a round's mean by a whole time slice). Compare ratios: the
absolute figures move with the machine's load.
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
from kernel_profiles import attribute, conv_of  # noqa: E402


def fma_peak_gflops(threads: int) -> float:
    """The FMA probe's GFLOP/s on one core (best of 3 runs), times `threads`."""
    from stream_kernels import StreamKernels
    probe, best = StreamKernels(1024), 0.0
    for _ in range(3):
        start = time.perf_counter()
        flops = probe.fma_flops(2_000_000)
        best = max(best, flops / (time.perf_counter() - start))
    return threads * best / 1e9


def tk_pointwise(kernels) -> list[tuple[int, dict]]:
    """(kernel index, facts) of each kernel whose convolution is an ungrouped 1x1 layer."""
    found = []
    for index, kernel in enumerate(kernels):
        conv = conv_of(kernel)
        if conv is None or attribute(conv[1], "groups") not in (None, "1"):
            continue
        tuning = next((t for t in kernel.tuning if t.startswith("conv:")), "")
        facts = dict(part.split("=", 1) for part in tuning.split(" ", 1)[0].split(":")[1:] if "=" in part)
        if facts.get("kh") != "1" or facts.get("kw") != "1":
            continue
        tile = tuning.split(": ", 1)[1] if ": " in tuning else ""
        pixels = next((p.split("=")[1] for p in tile.split() if p.startswith("pixels=")), "?")
        blocks = next((p.split("=")[1] for p in tile.split() if p.startswith("blocks=")), "?")
        shape = conv[2]
        oh, ow = shape[2], shape[3]
        c, k = int(facts["c"]), int(facts["k"])
        residual = sum(1 for line in kernel.nodes if " = add(" in line) > 1
        found.append((index, {"layer": f"{c}->{k} {oh}x{ow} s{facts['stride'][0]}" + (" +res" if residual else ""),
                              "flops": 2.0 * c * k * oh * ow, "tk_tile": f"{pixels}x{blocks}"}))
    return found


def ov_pointwise(infos, path: str) -> list[tuple[str, str]]:
    """(layer name, exec_type) of OpenVINO's executed 1x1 ungrouped convolutions, in execution order."""
    from bf16_profile import onnx_convolutions
    convs = onnx_convolutions(path)
    found = []
    for info in infos:
        if info.status != info.Status.EXECUTED or "Convolution" not in info.node_type:
            continue
        window, groups, _, _ = convs.get(info.node_name.removesuffix("/WithoutBiases"), (0, 0, 0, 0))
        if window == 1 and groups == 1:
            found.append((info.node_name, info.exec_type))
    return found


def profile(name: str, rounds: int, repeat: int, threads: int, statistic: str = "median") -> dict:
    import numpy as np
    import openvino
    from tensorkiln.importers.torch import from_torch
    from tensorkiln.tools.bench import build

    model, inputs = build(name, 1)
    arrays = [t.numpy() for t in inputs]
    ours = from_torch(model, inputs)
    ours(*arrays)
    layers = tk_pointwise(ours.report(*arrays).kernels)
    path = os.path.join(tempfile.mkdtemp(prefix="tk-pointwise-"), f"{name}.onnx")
    import torch
    torch.onnx.export(model, inputs, path, dynamo=False)
    compiled = openvino.Core().compile_model(path, "CPU", {"PERF_COUNT": True, "INFERENCE_NUM_THREADS": threads,
                                                            "INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    feed = {k: np.ascontiguousarray(a) for k, a in enumerate(arrays)}
    request.infer(feed)
    ov_layers = ov_pointwise(request.get_profiling_info(), path)
    if len(ov_layers) != len(layers):
        raise SystemExit(f"{name}: {len(layers)} tensorkiln 1x1 kernels but {len(ov_layers)} OpenVINO 1x1 layers")
    tk_times: list[list[float]] = [[] for _ in layers]
    ov_times: list[list[float]] = [[] for _ in layers]
    for _ in range(rounds):
        timed = ours.profile(*arrays, repeat=repeat).kernels
        for slot, (index, _) in enumerate(layers):
            tk_times[slot].append(timed[index].seconds)
        sums = {layer: 0.0 for layer, _ in ov_layers}
        for _ in range(repeat):
            request.infer(feed)
            for info in request.get_profiling_info():
                if info.node_name in sums and info.status == info.Status.EXECUTED:
                    sums[info.node_name] += info.real_time.total_seconds()
        for slot, (layer, _) in enumerate(ov_layers):
            ov_times[slot].append(sums[layer] / repeat)
    pick = statistics.median if statistic == "median" else min
    rows = []
    for slot, (_, facts) in enumerate(layers):
        rows.append(dict(facts, tk_ms=pick(tk_times[slot]) * 1e3, ov_ms=pick(ov_times[slot]) * 1e3,
                         ov_exec_type=ov_layers[slot][1]))
    return {"layers": rows}


def main() -> int:
    parser = benchmark_arguments(__doc__, threads=1)
    parser.add_argument("model", nargs="?", default="mobilenetv2", choices=("mobilenetv2", "resnet18"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--statistic", choices=("median", "min"), default="median")
    args = parser.parse_args()
    torch_peer(args.threads)
    peak = fma_peak_gflops(args.threads)
    result = profile(args.model, args.rounds, args.repeat, args.threads, args.statistic)
    result["fma_peak_gflops"] = peak
    rows = []
    for r in result["layers"]:
        tk_rate, ov_rate = r["flops"] / r["tk_ms"] / 1e6, r["flops"] / r["ov_ms"] / 1e6
        rows.append([r["layer"], r["tk_tile"], f"{r['tk_ms']:.3f}", f"{100 * tk_rate / peak:.0f}%",
                     f"{r['ov_ms']:.3f}", f"{100 * ov_rate / peak:.0f}%", r["ov_exec_type"],
                     f"{r['ov_ms'] / r['tk_ms']:.2f}x"])
    tk_total = sum(r["tk_ms"] for r in result["layers"])
    ov_total = sum(r["ov_ms"] for r in result["layers"])
    rows.append(["total", "", f"{tk_total:.3f}", "", f"{ov_total:.3f}", "", "", f"{ov_total / tk_total:.2f}x"])
    print(f"\n{args.model}, batch 1, float32, {args.threads} threads: 1x1 convolutions, {args.statistic}s of {args.rounds} "
          f"rounds; FMA peak {peak:.1f} GFLOP/s")
    print_table(["layer", "tk tile", "tk ms", "tk %peak", "OV ms", "OV %peak", "OV exec_type", "OV/tk"], rows)
    return finish(args, result, rounds=args.rounds)


if __name__ == "__main__":
    sys.exit(main())
