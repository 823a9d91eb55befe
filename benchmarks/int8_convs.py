"""The direct int8 convolutions alone: ResNet-18's and MobileNetV2's layer shapes as single QDQ layers.

    python benchmarks/int8_convs.py [--threads 1] [--json out.json]

Each layer is one ONNX model, Conv(DQ(x_q), DQ(W_q)) + bias, ReLU and
QuantizeLinear (uint8 activations, per-channel int8 weights), run by
tensorkiln (conv2d_u8s8 / depthwise_u8s8, or conv2d_u8s8_winograd for a 3x3
layer of stride 1 or 2 on an AVX2 CPU, with the fused requantizing epilogue; such a
layer is also timed on the direct kernel, `forced_conv_algorithm("direct")`,
the "direct" column) and by ONNX Runtime (IOBinding-free session run, all graph
optimizations: its QLinearConv) in turns; medians of the CPU time per call
(the process's, so a shared machine's waiting is not counted; with one
thread, the time the call computed). tensorkiln's figure includes the call,
the padded copy of the input and the epilogue. G multiply-adds/s compare with
the peak of one 512-bit `vpdpbusd` (64 multiply-adds) per cycle: 64 x the
clock in GHz per thread.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import benchmark_arguments, write_json  # noqa: E402

# (name, C, H, O, kernel, stride, groups): batch 1, square planes, padding kernel // 2
LAYERS = [
    ("resnet stem 7x7/2", 3, 224, 64, 7, 2, 1),
    ("resnet layer1 3x3", 64, 56, 64, 3, 1, 1),
    ("resnet layer2 3x3", 128, 28, 128, 3, 1, 1),
    ("resnet layer3 3x3", 256, 14, 256, 3, 1, 1),
    ("resnet layer4 3x3", 512, 7, 512, 3, 1, 1),
    ("resnet layer2 3x3/2", 64, 56, 128, 3, 2, 1),
    ("resnet layer3 3x3/2", 128, 28, 256, 3, 2, 1),
    ("resnet layer4 3x3/2", 256, 14, 512, 3, 2, 1),
    ("resnet down 1x1/2", 256, 14, 512, 1, 2, 1),
    ("mobilenet 1x1 16->96", 16, 112, 96, 1, 1, 1),
    ("mobilenet 1x1 144->24", 144, 56, 24, 1, 1, 1),
    ("mobilenet dw 3x3 96/2", 96, 112, 96, 3, 2, 96),
    ("mobilenet dw 3x3 144", 144, 56, 144, 3, 1, 144),
]


def _model(c, h, o, k, stride, groups, rng):
    from onnx import TensorProto, helper, numpy_helper
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "sx"), numpy_helper.from_array(np.uint8(128), "zx"),
             numpy_helper.from_array(rng.integers(-127, 128, (o, c // groups, k, k)).astype(np.int8), "wq"),
             numpy_helper.from_array(rng.uniform(0.001, 0.01, o).astype(np.float32), "sw"),
             numpy_helper.from_array(np.zeros(o, np.int8), "zw"),
             numpy_helper.from_array(rng.standard_normal((o, 1, 1)).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(0.05, np.float32), "sy"), numpy_helper.from_array(np.uint8(0), "zy")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["c"], strides=[stride] * 2, pads=[k // 2] * 4, group=groups),
             helper.make_node("Add", ["c", "b"], ["cb"]), helper.make_node("Relu", ["cb"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["y"])]
    graph = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.UINT8, (1, c, h, h))],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _cpu_medians(runs: dict, rounds: int = 7, calls: int = 20) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            fn()
            start = time.process_time()
            for _ in range(calls):
                fn()
            times[name].append((time.process_time() - start) / calls)
    return {name: float(np.median(t)) for name, t in times.items()}


def main() -> int:
    args = benchmark_arguments(__doc__, threads=1).parse_args()  # sets OMP_NUM_THREADS before OpenMP loads
    import onnxruntime as ort

    import tensorkiln as tk
    from tensorkiln.kernels.templates.conv import forced_conv_algorithm

    rng = np.random.default_rng(0)
    print(f"direct int8 convolutions, batch 1, {args.threads} threads; medians of CPU ms per call, in turns")
    print(f"{'layer':>24} {'tk ms':>7} {'ORT ms':>7} {'ORT/tk':>7} {'tk GMAC/s':>10} {'direct ms':>10}")
    results = {}
    for name, c, h, o, k, stride, groups in LAYERS:
        model = _model(c, h, o, k, stride, groups, rng)
        x = rng.integers(0, 256, (1, c, h, h)).astype(np.uint8)
        module = tk.onnx.load(model)
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        want = session.run(None, {"x": x})[0]
        got = module(x=x)
        got = got[0] if isinstance(got, (list, tuple)) else got
        difference = int(np.max(np.abs(got.astype(np.int32) - want.astype(np.int32))))
        runs = {"tk": lambda: module(x=x), "ORT": lambda: session.run(None, {"x": x})}
        if "conv2d_u8s8_winograd" in [n.op for n in module.optimized_graph(x=x).nodes]:
            direct = tk.onnx.load(model)
            with forced_conv_algorithm("direct"):
                same = direct(x=x)
            same = same[0] if isinstance(same, (list, tuple)) else same
            assert np.array_equal(same, got), name  # both sums exact: the same outputs
            runs["direct"] = lambda: direct(x=x)
        seconds = _cpu_medians(runs)
        oh = (h + 2 * (k // 2) - k) // stride + 1
        macs = oh * oh * o * (c // groups) * k * k
        results[name] = {"ms": {n: s * 1e3 for n, s in seconds.items()}, "macs": macs,
                         "max_quanta_from_ort": difference}
        print(f"{name:>24} {seconds['tk'] * 1e3:7.3f} {seconds['ORT'] * 1e3:7.3f} "
              f"{seconds['ORT'] / seconds['tk']:6.2f}x {macs / seconds['tk'] / 1e9:10.1f} "
              f"{seconds['direct'] * 1e3 if 'direct' in seconds else float('nan'):10.3f}   (|tk - ORT| <= "
              f"{difference} quanta)")
    if args.json:
        write_json(args.json, {"threads": args.threads, "layers": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
