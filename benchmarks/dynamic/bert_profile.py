"""Where BERT-base ONNX (symbolic batch and sequence axes) spends its time, per part of a layer, in
tensorkiln and in ONNX Runtime, with each GEMM's GFLOP/s against the FMA peak measured in the same run.

    python benchmarks/dynamic/bert_profile.py [--samples 128,384] [--rounds 2]

tensorkiln's per-kernel `profile()` of the symbolic program and ONNX Runtime's own profile
(SessionOptions.enable_profiling: each node's kernel time) are taken in turns, `rounds` times at
each length; the table gives the medians in ms per call, grouped into the parts of an encoder layer
(Q/K/V projection, attention, output projection, FFN up with GELU, FFN down, layer norms) and
summed over the 12 layers. The peak is the compute probe of stream_kernels.py (independent FMA
chains in registers, one thread) times 2 cores, taken between the profiles: on a machine shared
with other jobs it reads the share of the cores this process got, so GFLOP/s / peak stays
comparable while the absolute numbers move. Run it with OpenMP's default wait policy, as users do:
with OMP_WAIT_POLICY=passive every kernel's time includes waking the sleeping threads (tens of us
each, most of a layer norm's time at 16 tokens).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds benchmarks/
PARTS = ("qkv", "attention", "attn_out", "ffn_up", "ffn_down", "layer_norm", "other")
HIDDEN, INTERMEDIATE, LAYERS, THREADS = 768, 3072, 12, 2


def part_flops(seq: int) -> dict[str, float]:
    """Multiply-add flops of each part over the 12 layers at batch 1 and `seq` tokens."""
    gemm = lambda k, n: 2.0 * seq * k * n * LAYERS  # noqa: E731
    return {"qkv": gemm(HIDDEN, 3 * HIDDEN), "attention": 4.0 * seq * seq * HIDDEN * LAYERS,
            "attn_out": gemm(HIDDEN, HIDDEN), "ffn_up": gemm(HIDDEN, INTERMEDIATE),
            "ffn_down": gemm(INTERMEDIATE, HIDDEN)}


def tk_parts(profile) -> dict[str, float]:
    """ms per call of each part from tensorkiln's kernel profile (kernels in program order: a packed
    GEMM after the FFN's GELU kernel is the FFN's down projection, any other plain one is Q/K/V)."""
    parts: dict[str, float] = collections.defaultdict(float)
    previous = ""
    for k in profile.kernels:
        name = k.name
        if k.kind == "attention":
            part = "attention"
        elif "layer_norm" in name:
            part = "layer_norm"
        elif "matmul_packed" in name and "gelu" in name:
            part = "ffn_up"
        elif "matmul_packed" in name and "permute" in name:
            part = "attn_out"
        elif "matmul_packed" in name:
            part = "ffn_down" if previous == "ffn_up" else "qkv"
        else:
            part = "other"
        parts[part] += k.seconds * 1e3
        previous = part
    return parts


def ort_part(node: str, op: str) -> str:
    """The part of a layer an ONNX Runtime node (exported names: /layers.N/attention/query/MatMul) belongs to."""
    if re.search(r"/(query|key|value)/", node):
        return "qkv"
    if "/attn_out/" in node:
        return "attn_out"
    if "/intermediate/" in node or op == "BiasGelu":
        return "ffn_up"
    if "/output/" in node:
        return "ffn_down"
    if op in ("LayerNormalization", "SkipLayerNormalization"):
        return "layer_norm"
    return "attention" if "/attention/" in node else "other"


def ort_parts(path: str, feed: dict, calls: int, folder: str) -> dict[str, float]:
    """ms per call of each part from ONNX Runtime's profile of `calls` calls (after one untimed)."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    session.run(None, feed)  # warm, then profile only the timed calls
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(folder, "ort")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    for _ in range(calls + 1):
        session.run(None, feed)
    with open(session.end_profiling()) as f:
        events = json.load(f)
    parts: dict[str, float] = collections.defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            parts[ort_part(e["name"], e["args"].get("op_name", ""))] += e["dur"] / 1e3 / (calls + 1)
    return parts


def fma_peak(probe) -> float:
    """GFLOP/s of the two cores by the one-thread FMA probe (best of 3 runs of ~0.1 s)."""
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        flops = probe.fma_flops(2_000_000)
        best = max(best, flops / (time.perf_counter() - start))
    return THREADS * best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", default="128,384")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=5, help="calls per profile")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    import tensorkiln as tk
    from benchmarks.common import machine_summary, print_table
    from benchmarks.dynamic.bert_onnx import export_bert, inputs
    from benchmarks.stream_kernels import StreamKernels
    print(machine_summary())
    folder = tempfile.mkdtemp(prefix="tk-bert-profile-")
    path = export_bert(folder)
    model, probe = tk.onnx.load(path), StreamKernels(1024)
    for n in [int(s) for s in args.samples.split(",")]:
        ids, mask = inputs(1, n)
        model(ids, mask)
        tk_runs, ort_runs, peaks = collections.defaultdict(list), collections.defaultdict(list), []
        for _ in range(args.rounds):
            peaks.append(fma_peak(probe))
            for part, ms in tk_parts(model.profile(ids, mask, repeat=args.calls)).items():
                tk_runs[part].append(ms)
            peaks.append(fma_peak(probe))
            for part, ms in ort_parts(path, {"input_ids": ids, "attention_mask": mask}, args.calls, folder).items():
                ort_runs[part].append(ms)
        peak, flops = float(np.median(peaks)), part_flops(n)
        med = lambda runs, part: float(np.median(runs[part])) if runs.get(part) else 0.0  # noqa: E731
        rows = []
        for part in PARTS:
            a, b = med(tk_runs, part), med(ort_runs, part)
            rate = lambda ms: f"{flops[part] / ms / 1e6:.0f} ({flops[part] / ms / 1e6 / peak:.0%})" \
                if part in flops and ms > 0 else "-"  # noqa: E731
            rows.append([part, f"{a:.2f}", f"{b:.2f}", f"{a - b:+.2f}", rate(a), rate(b)])
        ta, tb = sum(med(tk_runs, p) for p in PARTS), sum(med(ort_runs, p) for p in PARTS)
        rows.append(["total", f"{ta:.2f}", f"{tb:.2f}", f"{ta - tb:+.2f}", "", ""])
        print(f"\nseq {n}, batch 1, {THREADS} threads; FMA peak of the 2 cores in this run {peak:.0f} GFLOP/s "
              f"(medians of {args.rounds} rounds, ms per call summed over the {LAYERS} layers)")
        print_table(["part", "tensorkiln ms", "ORT ms", "tk - ORT ms", "tk GFLOP/s (of peak)",
                     "ORT GFLOP/s (of peak)"], rows)


if __name__ == "__main__":
    main()
