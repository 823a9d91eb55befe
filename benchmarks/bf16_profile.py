"""Where the time goes in bf16: tensorkiln's kernels next to OpenVINO's layers, grouped, per model.

    python benchmarks/bf16_profile.py [MODEL ...] [--threads 2] [--rounds 5] [--repeat 20] [--statistic min]
        [--precision bf16|fp32] [--json out.json]

MODEL: resnet18, mobilenetv2, bert (default: all three; `tensorkiln bench`'s models at batch 1).
tensorkiln compiles the model with precision="bf16" (`tk.from_torch`; `--precision fp32`: float32)
and `f.profile` times each kernel; OpenVINO compiles the same model exported to ONNX with its
defaults (bf16 on a CPU with AVX512-BF16; with `--precision fp32`, the f32 inference hint) and
PERF_COUNT=YES, and `get_profiling_info()` times each of its layers. Both sides
are grouped into the same coarse classes (stem, Winograd, direct 3x3, 1x1 with an activation or
linear, depthwise by stride, GEMM, attention, normalization, elementwise, layout/copies, ...) and each class's median over `--rounds`
rounds is printed as ms and share, the two frameworks' rounds taken in turns so that a loaded
machine slows both alike. A per-kernel profile adds a timer call per kernel to tensorkiln's
figures and OpenVINO's counters add theirs: compare the classes, not the totals, with the
end-to-end ratio of benchmarks/alternating.py. `--statistic min` prints each class's fastest round
instead of the median (on a machine shared with other jobs, the round least slowed by them).
"""
from __future__ import annotations

import os
import re
import statistics
import sys
import tempfile
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from common import benchmark_arguments, finish, print_table, torch_peer  # noqa: E402
from kernel_profiles import algorithm_of, attribute, conv_of  # noqa: E402

MODELS = ("resnet18", "mobilenetv2", "bert")


def conv_class(window: int, groups: int, first: bool, winograd: bool = False, stride: int = 1,
               activated: bool = True) -> str:
    """The coarse class of one convolution, the same words for both frameworks: depthwise layers by
    stride, 1x1 layers by whether an activation follows (an inverted residual block's expansion)
    or not (its linear projection, with the residual add where there is one)."""
    if first:
        return "conv stem (first layer)"
    if groups != 1:
        return f"conv depthwise s{stride}"
    if winograd:
        return "conv 3x3 winograd"
    if window == 1:
        return "conv 1x1 + activation" if activated else "conv 1x1 linear (+residual)"
    return f"conv {window}x{window} direct"


ACTIVATIONS = ("relu", "clip", "clamp", "minimum", "maximum", "gelu", "sigmoid", "tanh")


def tk_class(kernel, first_conv: bool) -> str:
    """The coarse class of one tensorkiln kernel (KernelInfo: its graph nodes and loop IR)."""
    ops = [line.split("=", 1)[1].split("(", 1)[0].strip() for line in kernel.nodes if "=" in line]
    conv = conv_of(kernel)
    if conv is not None:
        op, args, _ = conv
        padding = (attribute(args, "padding") or "(0").strip("()").split(",")[0]
        stride = (attribute(args, "stride") or "(1").strip("()").split(",")[0]
        return conv_class(2 * int(padding) + 1, int(attribute(args, "groups") or "1"), first_conv,
                          algorithm_of(kernel, op) == "winograd", int(stride),
                          any(op.startswith(ACTIVATIONS) for op in ops))
    if "exp" in ops and any(op.startswith("matmul") for op in ops):
        return "attention"  # the fused kernel: q k^T, softmax, P V
    if any(op.startswith("matmul") for op in ops):
        return "matmul / linear"
    if "window" in ops:
        return "pooling"
    if any(op.startswith("reduce") or op in ("mean", "var") for op in ops):
        return "reduce / normalization"
    if any(op in ("gather", "take", "embedding") for op in ops):
        return "gather / embedding"
    if ops and all(op in ("reshape", "transpose", "cast", "pad", "slice", "concat", "broadcast_to") for op in ops):
        return "layout / copies"
    return "elementwise"


OV_CLASSES = [  # (pattern on "<layer type> <implementation>", class); the first that matches
    (r"^FullyConnected", "matmul / linear"),  # a MatMul by a constant weight
    (r"^MatMul|ScaledDotProductAttention|Softmax", "attention"),  # products of two activations
    (r"MVN|Normalize|Reduce", "reduce / normalization"),
    (r"Pool", "pooling"),
    (r"Gather", "gather / embedding"),
    (r"Reorder|Transpose|Reshape|Concat|Split|StridedSlice|Convert|Broadcast", "layout / copies"),
]


def onnx_convolutions(path: str) -> dict[str, tuple[int, int, int, bool]]:
    """ONNX node name -> (window, groups, stride, followed by an activation) of every Conv of the
    exported model."""
    import onnx
    nodes = onnx.load(path).graph.node
    readers: dict[str, list[str]] = defaultdict(list)
    for node in nodes:
        for name in node.input:
            readers[name].append(node.op_type.lower())
    convs = {}
    for node in nodes:
        if node.op_type == "Conv":
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            activated = any(r.startswith(ACTIVATIONS) for r in readers[node.output[0]])
            convs[node.name] = (int(attrs.get("kernel_shape", [1])[0]), int(attrs.get("group", 1)),
                                int(attrs.get("strides", [1])[0]), activated)
    return convs


def ov_class(info, convs: dict[str, tuple[int, int, int, bool]], first_conv: str) -> str:
    """The coarse class of one OpenVINO layer (a ProfilingInfo); its convolutions looked up in the ONNX model."""
    if "Convolution" in info.node_type:
        name = info.node_name.removesuffix("/WithoutBiases")
        window, groups, stride, activated = convs.get(name, (3, 1, 1, True))
        return conv_class(window, groups, name == first_conv, "winograd" in info.exec_type, stride, activated)
    text = f"{info.node_type} {info.exec_type}"
    for pattern, name in OV_CLASSES:
        if re.search(pattern, text):
            return name
    return "elementwise"


def profile_model(name: str, rounds: int, repeat: int, statistic: str = "median", precision: str = "bf16") -> dict:
    """Grouped per-class median ms of both frameworks, and the top layers of each."""
    import numpy as np
    import openvino
    import torch
    from tensorkiln.importers.torch import from_torch
    from tensorkiln.tools.bench import build

    model, inputs = build(name, 1)
    arrays = [t.numpy() for t in inputs]
    ours = from_torch(model, inputs, precision=precision)
    ours(*arrays)
    report = ours.report(*arrays)
    path = os.path.join(tempfile.mkdtemp(prefix="tk-bf16-profile-"), f"{name}.onnx")
    torch.onnx.export(model, inputs, path, dynamo=False)
    config = {"PERF_COUNT": True, "INFERENCE_NUM_THREADS": int(os.environ["OMP_NUM_THREADS"])}
    if precision == "fp32":
        config["INFERENCE_PRECISION_HINT"] = "f32"
    compiled = openvino.Core().compile_model(path, "CPU", config)
    request = compiled.create_infer_request()
    feed = {k: np.ascontiguousarray(a) for k, a in enumerate(arrays)}
    request.infer(feed)
    convs = onnx_convolutions(path)
    first_ov = next(iter(convs), "")
    first_tk = next((i for i, k in enumerate(report.kernels) if conv_of(k)), -1)
    tk_rounds, ov_rounds = [], []
    for _ in range(rounds):
        profile = ours.profile(*arrays, repeat=repeat)
        grouped: dict[str, float] = defaultdict(float)
        for index, (info, timed) in enumerate(zip(report.kernels, profile.kernels)):
            grouped[tk_class(info, index == first_tk)] += timed.seconds
        tk_rounds.append(grouped)
        per_call: list[dict[str, float]] = []
        for _ in range(repeat):
            request.infer(feed)
            one: dict[str, float] = defaultdict(float)
            for info in request.get_profiling_info():
                if info.status == info.Status.EXECUTED:
                    one[ov_class(info, convs, first_ov)] += info.real_time.total_seconds()
            per_call.append(one)
        ov_rounds.append({key: statistics.fmean(call.get(key, 0.0) for call in per_call)
                          for key in set().union(*per_call)})
    classes = sorted(set().union(*tk_rounds, *ov_rounds))
    pick = statistics.median if statistic == "median" else min
    summary = lambda rs, key: pick(r.get(key, 0.0) for r in rs) * 1e3  # noqa: E731
    table = {key: {"tensorkiln_ms": summary(tk_rounds, key), "openvino_ms": summary(ov_rounds, key)} for key in classes}
    return {"classes": table, "tensorkiln_kernels": len(report.kernels),
            "openvino_layers": sum(1 for i in request.get_profiling_info() if i.status == i.Status.EXECUTED)}


def main() -> int:
    parser = benchmark_arguments(__doc__, threads=2)
    parser.add_argument("models", nargs="*", default=list(MODELS), help=", ".join(MODELS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--statistic", choices=("median", "min"), default="median")
    parser.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    args = parser.parse_args()
    torch_peer(args.threads)  # the reference models (and the ONNX export)
    results = {}
    for name in args.models:
        result = profile_model(name, args.rounds, args.repeat, args.statistic, args.precision)
        results[name] = result
        table = result["classes"]
        tk_total = sum(r["tensorkiln_ms"] for r in table.values())
        ov_total = sum(r["openvino_ms"] for r in table.values())
        print(f"\n{name}, batch 1, {args.threads} threads: tensorkiln {args.precision} ({result['tensorkiln_kernels']} kernels) "
              f"against OpenVINO {'f32' if args.precision == 'fp32' else 'default'} ({result['openvino_layers']} executed layers); "
              f"{args.statistic}s of {args.rounds} rounds, ms per call")
        rows = [[key, f"{r['tensorkiln_ms']:.3f}", f"{100 * r['tensorkiln_ms'] / tk_total:.0f}%",
                 f"{r['openvino_ms']:.3f}", f"{100 * r['openvino_ms'] / ov_total:.0f}%",
                 f"{r['openvino_ms'] / r['tensorkiln_ms']:.2f}x" if r["tensorkiln_ms"] > 0 else "-"]
                for key, r in sorted(table.items(), key=lambda kv: -kv[1]["tensorkiln_ms"])]
        rows.append(["total", f"{tk_total:.3f}", "", f"{ov_total:.3f}", "", f"{ov_total / tk_total:.2f}x"])
        print_table(["class", "tk ms", "tk %", "OV ms", "OV %", "OV/tk"], rows)
    return finish(args, results, rounds=args.rounds)


if __name__ == "__main__":
    sys.exit(main())
