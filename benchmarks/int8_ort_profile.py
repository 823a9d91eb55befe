"""Per-layer profile of an int8 CNN: tensorkiln's kernels against ONNX Runtime's own node profile, one QDQ file.

    python benchmarks/int8_ort_profile.py [mobilenetv2 | resnet18] [--threads 1] [--rounds 4] [--layers]
        [--json out.json]

The QDQ file is the one `tensorkiln bench --precision int8` runs (tools/bench_int8.py: ONNX Runtime's
quantize_static, per-channel int8 weights, uint8 activations). tensorkiln runs it through `tk.onnx.load`
and times each kernel with `profile()`; ONNX Runtime runs it with SessionOptions.enable_profiling (each
node's kernel time), on the same thread count. Rounds alternate between the two engines, so a machine
shared with other jobs slows both alike; each kernel's or node's median over the rounds is summed by
what the time is spent on:

    dense conv / depthwise conv     tensorkiln's int8 convolutions with their fused epilogues
    conv (QLinearConv) / conv (Conv) ONNX Runtime's: it runs some convolutions in float (between a
                                    residual's DequantizeLinear and QuantizeLinear)
    glue (...)                      quantize, dequantize, padding, layout changes, pooling, adds
    classifier                      the final linear layer

`--layers` prints the convolutions side by side in program order (both engines run them in the
model's order, one kernel or node each). Profiling adds a fixed cost per node or kernel: compare the
sums and the layers, not whole calls.
"""
from __future__ import annotations

import collections
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def tk_category(kernel) -> str:
    ops = " ".join(kernel.ops)
    if "depthwise_u8s8" in ops:
        return "depthwise conv"
    if "conv2d_u8s8" in ops:
        return "dense conv"
    if "linear" in kernel.name or "matmul" in ops:
        return "classifier"
    return "glue (quantize, pad, layout, pool)"


def ort_category(op: str) -> str:
    if op in ("QLinearConv", "Conv", "ConvInteger"):
        return f"conv ({op})"
    if op in ("QGemm", "Gemm", "MatMul", "QLinearMatMul"):
        return "classifier"
    return f"glue ({op})"


def main() -> int:
    from common import benchmark_arguments, finish
    parser = benchmark_arguments(__doc__, threads=1)
    parser.add_argument("model", nargs="?", default="mobilenetv2", choices=("mobilenetv2", "resnet18"))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=20, help="calls a round profiles in each engine")
    parser.add_argument("--layers", action="store_true", help="print the convolutions side by side")
    args = parser.parse_args()
    import onnxruntime as ort
    import tensorkiln as tk
    from tensorkiln.tools.bench import build
    from tensorkiln.tools.bench_int8 import quantized_onnx

    folder = tempfile.mkdtemp(prefix="tensorkiln-int8-profile-")
    model, inputs = build(args.model, 1)
    _, path = quantized_onnx(args.model, model, inputs, folder)
    x = inputs[0].numpy()
    module = tk.onnx.load(path)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    options.enable_profiling, options.log_severity_level = True, 3
    options.profile_file_prefix = os.path.join(folder, "ort")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x}
    for _ in range(3):
        module(x)
        session.run(None, feed)
    tk_times, tk_kinds = collections.defaultdict(list), {}
    for _ in range(args.rounds):
        for kernel in module.profile(x, repeat=args.repeat).kernels:
            tk_times[kernel.name].append(kernel.seconds)
            tk_kinds[kernel.name] = tk_category(kernel)
        for _ in range(args.repeat):
            session.run(None, feed)
    ort_times, ort_ops = collections.defaultdict(list), {}
    for event in json.load(open(session.end_profiling())):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            name = event["name"][:-len("_kernel_time")]
            ort_times[name].append(event["dur"] * 1e-6)
            ort_ops[name] = event["args"].get("op_name", "?")
    tk_ms = {n: float(np.median(v)) * 1e3 for n, v in tk_times.items()}
    ort_ms = {n: float(np.median(v[3:] or v)) * 1e3 for n, v in ort_times.items()}  # past the warm-up calls
    sums = {"tensorkiln": collections.defaultdict(float), "onnxruntime": collections.defaultdict(float)}
    for name, ms in tk_ms.items():
        sums["tensorkiln"][tk_kinds[name]] += ms
    for name, ms in ort_ms.items():
        sums["onnxruntime"][ort_category(ort_ops[name])] += ms
    print(f"{args.model} int8, {args.threads} thread(s), medians of {args.rounds} rounds (ms, summed by class)")
    for engine, classes in sums.items():
        row = ", ".join(f"{k} {v:.2f}" for k, v in sorted(classes.items(), key=lambda kv: -kv[1]))
        print(f"  {engine}: {sum(classes.values()):.2f} in all: {row}")
    if args.layers:
        ours = [(n, ms, tk_kinds[n]) for n, ms in tk_ms.items() if tk_kinds[n] in ("dense conv", "depthwise conv")]
        theirs = [(n, ms, ort_ops[n]) for n, ms in ort_ms.items() if ort_ops[n] in ("QLinearConv", "Conv")]
        print(f"  convolutions side by side ({len(ours)} kernels, {len(theirs)} nodes): tk ms, ORT ms, ratio")
        for (name, ms, kind), (node, theirs_ms, op) in zip(ours, theirs):
            print(f"  {ms:7.3f} {theirs_ms:7.3f} {theirs_ms / ms:5.2f}x  {kind:14s} {name[:24]:24s} {op:11s} "
                  f"{node[-48:]}")
    return finish(args, {"tensorkiln": tk_ms, "onnxruntime": ort_ms},
                  sums={k: dict(v) for k, v in sums.items()})


if __name__ == "__main__":
    sys.exit(main())
