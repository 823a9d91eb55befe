"""Per-layer profile of the int8 CNNs: tensorkiln's kernels against OpenVINO's PERF_COUNT layers.

    python benchmarks/int8_layer_profile.py [resnet18 mobilenetv2] [--threads 1] [--top 12] [--json out.json]

The QDQ models of benchmarks/int8_models.py (ONNX Runtime's quantize_static, per-channel int8
weights, uint8 activations, batch 1) run in tensorkiln (`model.profile(...)`: each kernel's time in a
timing build) and in OpenVINO with PERF_COUNT=YES (its default precision, int8 for these layers;
each executed layer's real time), each layer's median over `--repeat` calls. Both are
grouped by what the time is spent on:

    dense conv kxk / dense conv 1x1 / depthwise conv   the int8 convolutions and their fused epilogues
    other                                              pooling, the residual adds, the classifier,
                                                       layout changes, quantize / dequantize

then each convolution with OpenVINO's time for the same layer beside it, and tensorkiln's slowest
kernels are listed with their multiply-adds, G multiply-adds/s and the
share of the int8 peak they reach (`--peak`, G multiply-adds/s per thread: by default measured at the
start of the run, one thread issuing only 512-bit `vpdpbusd` (64 multiply-adds each), timed in its CPU
time; about 234 on this Zen 4, one instruction a cycle: its 512-bit integer operations take both 256-bit
halves of the vector unit), and bytes moved (input, weights and output once) per second, which says whether a layer is bound by compute or by memory. A machine shared with other jobs
inflates every time: compare the two engines' shares, and rerun on a quiet machine for times.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CATEGORIES = ("dense conv kxk", "dense conv 1x1", "depthwise conv", "other")  # OpenVINO's: no kxk / 1x1


# one thread's int8 peak, measured: chains of independent 512-bit vpdpbusd (64 multiply-adds each), timed in the
# thread's CPU time, which a machine shared with other jobs does not inflate
_PEAK_SOURCE = r"""
#include <immintrin.h>
#include <stdint.h>
int32_t tk_vpdpbusd_chains(int64_t iterations)
{
    __m512i acc[12];
    __m512i x = _mm512_set1_epi32(0x01010101), w = _mm512_set1_epi32(0x02020202);
    for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_epi32(i);
    for (int64_t k = 0; k < iterations; k++) {
        for (int i = 0; i < 12; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], x, w);
        __asm__ volatile("" : "+v"(x));  /* one more step each time: the loop is not folded */
    }
    int32_t sum = 0;
    for (int i = 0; i < 12; i++) sum += _mm512_reduce_add_epi32(acc[i]);
    return sum;
}
"""


def measured_int8_peak(iterations: int = 20_000_000) -> float | None:
    """G multiply-adds/s of one thread issuing only 512-bit vpdpbusd (the best of 5 timings), or None
    where the CPU has no AVX512-VNNI."""
    import ctypes
    import time
    from tensorkiln.kernels.target import cpu_target
    from tensorkiln.runtime.c_compiler import compile_c
    if cpu_target().int8_dot != "vnni":
        return None
    library = ctypes.CDLL(compile_c(_PEAK_SOURCE, extra_flags=("-mavx512vnni",)).path)
    chains = library.tk_vpdpbusd_chains
    chains.argtypes, chains.restype = [ctypes.c_int64], ctypes.c_int32
    best = float("inf")
    for _ in range(5):
        start = time.thread_time()
        chains(iterations)
        best = min(best, time.thread_time() - start)
    return iterations * 12 * 64 / best / 1e9


def tensorkiln_layers(module, feeds: dict, repeat: int) -> list[dict]:
    """Each kernel: name, category, ms, multiply-adds and bytes (the convolutions)."""
    from tensorkiln.ir.graph import node_names
    graph = module.optimized_graph(**feeds)
    by_name = {name: node for node, name in ((n, node_names(graph)[n.id]) for n in graph.nodes)}
    # one call per profile, `repeat` profiles: each kernel's median, which a shared machine's preemptions
    # (a kernel now and then waiting for a core) move much less than the mean
    profiles = [module.profile(**feeds, repeat=1) for _ in range(repeat)]
    medians = {k.name: float(np.median([p.kernels[i].seconds for p in profiles]))
               for i, k in enumerate(profiles[0].kernels)}
    kernels = {k.name: k for k in module.report(**feeds).kernels}
    layers = []
    for timed in profiles[0].kernels:
        info = kernels[timed.name]
        conv = None
        for line in info.nodes:
            match = re.match(r"\s*(%\d+) = (conv2d_u8s8|conv2d_u8s8_winograd|depthwise_u8s8)\(", line)
            if match:
                conv = by_name.get(match.group(1))
        layer = dict(name=timed.name, ms=medians[timed.name] * 1e3, category="other", macs=0, bytes=0,
                     ops=timed.ops[:6])
        if conv is not None:
            x, weights = conv.inputs[0], conv.inputs[1]
            # the multiply-adds of the direct sums (Winograd's transformed filters do fewer)
            kh, kw = conv.attrs["kernel"] if conv.op == "conv2d_u8s8" else \
                (3, 3) if conv.op == "conv2d_u8s8_winograd" else weights.shape[:2]
            depth = kh * kw if conv.op == "depthwise_u8s8" else x.shape[-1] * kh * kw
            out = int(np.prod(conv.shape))
            layer.update(macs=out * depth, bytes=x.type.size + weights.type.size * weights.dtype.itemsize + out,
                         category="depthwise conv" if conv.op == "depthwise_u8s8" else
                         "dense conv 1x1" if (kh, kw) == (1, 1) else "dense conv kxk",
                         shape=f"{kh}x{kw}{' winograd' if conv.op == 'conv2d_u8s8_winograd' else ''}, "
                               f"{x.shape[-1]} -> {conv.shape[-1]}, {conv.shape[1]}x{conv.shape[2]}")
        layers.append(layer)
    return layers


def openvino_layers(path: str, arrays: list[np.ndarray], threads: int, repeat: int) -> list[dict]:
    """Each executed OpenVINO layer: name, type, exec type, category and median ms over the calls
    (PERF_COUNT)."""
    import openvino
    core = openvino.Core()
    compiled = core.compile_model(path, "CPU", {"PERF_COUNT": "YES", "INFERENCE_NUM_THREADS": threads})
    request = compiled.create_infer_request()
    feed = {k: np.ascontiguousarray(a) for k, a in enumerate(arrays)}
    request.infer(feed)
    times: dict[str, list[float]] = defaultdict(list)
    kinds: dict[str, tuple[str, str]] = {}
    for _ in range(repeat):
        request.infer(feed)
        for info in request.profiling_info:
            if info.status.name != "EXECUTED":
                continue
            times[info.node_name].append(info.real_time.total_seconds() * 1e3)
            kinds[info.node_name] = (info.node_type, info.exec_type)
    layers = []
    for name, samples in times.items():
        node_type, exec_type = kinds[name]
        category = "other"
        if node_type == "Convolution":
            category = "depthwise conv" if "dw" in exec_type else "dense conv"
        elif node_type == "GroupConvolution":
            category = "depthwise conv"
        layers.append(dict(name=name, type=node_type, exec_type=exec_type, ms=float(np.median(samples)),
                           category=category))
    return layers


def _print_side_by_side(tk_layers: list[dict], ov_layers: list[dict], peak: float) -> None:
    """Each convolution with OpenVINO's time for the same layer beside it: both engines run the model's
    convolutions in its order, so the i-th convolution kernel of one is the i-th of the other (printed
    only when the counts agree)."""
    tk_convs = [l for l in tk_layers if l["category"] != "other"]
    ov_convs = [l for l in ov_layers if l["category"] != "other"]
    if len(tk_convs) != len(ov_convs):
        print(f"(convolutions: tensorkiln {len(tk_convs)}, OpenVINO {len(ov_convs)}: not paired)")
        return
    print(f"each convolution, in the model's order:\n{'layer':<30} {'tk ms':>7} {'% peak':>7} {'OV ms':>7} "
          f"{'tk / OV':>8}  OpenVINO's kernel")
    for mine, theirs in zip(tk_convs, ov_convs):
        rate = mine["macs"] / (mine["ms"] * 1e-3) / 1e9
        print(f"{mine.get('shape', '')[:30]:<30} {mine['ms']:7.3f} {100 * rate / peak:6.1f}% {theirs['ms']:7.3f} "
              f"{mine['ms'] / theirs['ms']:7.2f}x  {theirs['exec_type']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["resnet18", "mobilenetv2"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--peak", type=float, default=None,
                        help="int8 peak, G multiply-adds/s per thread (default: measured, 512-bit vpdpbusd)")
    parser.add_argument("--json")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import logging
    logging.getLogger().setLevel(logging.ERROR)
    import tensorkiln as tk
    from tensorkiln.tools.bench import build
    from tensorkiln.tools.bench_int8 import quantized_onnx

    per_thread = args.peak or measured_int8_peak()
    if per_thread is None:
        parser.error("no AVX512-VNNI on this CPU: give its int8 peak with --peak")
    peak = per_thread * args.threads
    print(f"int8 per-layer profile, batch 1, {args.threads} threads; int8 peak {peak:.0f} G multiply-adds/s; "
          f"each layer's median ms over {args.repeat} calls")
    folder = tempfile.mkdtemp(prefix="tensorkiln-int8-profile-")
    results = {}
    for name in args.models:
        model, inputs = build(name, 1)
        arrays = [t.numpy() for t in inputs]
        _, int8_path = quantized_onnx(name, model, inputs, folder)
        module = tk.onnx.load(int8_path)
        names = [i.name for i in __import__("onnx").load(int8_path, load_external_data=False).graph.input]
        feeds = dict(zip(names, arrays))
        module(**feeds)
        tk_layers = tensorkiln_layers(module, feeds, args.repeat)
        ov_layers = openvino_layers(int8_path, arrays, args.threads, args.repeat)
        tk_total, ov_total = sum(l["ms"] for l in tk_layers), sum(l["ms"] for l in ov_layers)
        print(f"\n{name}: tensorkiln {len(tk_layers)} kernels {tk_total:.2f} ms, OpenVINO {len(ov_layers)} "
              f"layers {ov_total:.2f} ms (sums of per-layer medians)")
        print(f"{'category':<16} {'tk ms':>8} {'tk %':>6} {'OV ms':>8} {'OV %':>6} {'tk / OV':>8}")
        for category in ("dense conv", "depthwise conv", "other"):
            tk_ms = sum(l["ms"] for l in tk_layers if l["category"].startswith(category))
            ov_ms = sum(l["ms"] for l in ov_layers if l["category"] == category)
            print(f"{category:<16} {tk_ms:8.3f} {100 * tk_ms / tk_total:5.1f}% {ov_ms:8.3f} "
                  f"{100 * ov_ms / ov_total:5.1f}% {tk_ms / ov_ms if ov_ms else float('nan'):7.2f}x")
        split = {c: sum(l["ms"] for l in tk_layers if l["category"] == c) for c in CATEGORIES[:2]}
        print("  tensorkiln's dense convolutions: " + ", ".join(f"{c[11:]} {ms:.3f} ms" for c, ms in split.items()))
        print(f"tensorkiln's {args.top} slowest kernels:")
        print(f"{'kernel':<34} {'layer':<28} {'ms':>7} {'GMAC/s':>7} {'% peak':>7} {'GB/s':>6}")
        for layer in sorted(tk_layers, key=lambda l: -l["ms"])[:args.top]:
            rate = layer["macs"] / (layer["ms"] * 1e-3) / 1e9 if layer["macs"] else 0.0
            gbs = layer["bytes"] / (layer["ms"] * 1e-3) / 1e9 if layer["bytes"] else 0.0
            print(f"{layer['name'][:34]:<34} {layer.get('shape', ', '.join(layer['ops'][:3]))[:28]:<28} "
                  f"{layer['ms']:7.3f} {rate:7.1f} {100 * rate / peak:6.1f}% {gbs:6.1f}")
        print(f"OpenVINO's {args.top} slowest layers:")
        for layer in sorted(ov_layers, key=lambda l: -l["ms"])[:args.top]:
            print(f"  {layer['name'][:48]:<48} {layer['type'][:18]:<18} {layer['exec_type'][:30]:<30} "
                  f"{layer['ms']:7.3f}")
        _print_side_by_side(tk_layers, ov_layers, peak)
        results[name] = {"tensorkiln": tk_layers, "openvino": ov_layers}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "peak_gmacs": peak, "models": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
