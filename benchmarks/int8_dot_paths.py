"""The int8 kernels on every dot-product path this CPU has, against each other, in one run.

    python benchmarks/int8_dot_paths.py [--threads 1] [--json out.json]

The u8 x s8 GEMM (`matmul_integer` by a constant int8 weight: BERT-base's
projection at sequence 128 and GPT-2's QKV projection for one token), a
direct 3x3 convolution (a quantized ResNet-18 layer, 64 channels at 56x56)
and a depthwise one (MobileNetV2's, 144 channels at 56x56), both through
`tk.onnx.load` of a QLinearConv model, are compiled once per
`int8_dot` path the CPU allows (kernels/target.py: vnni, avx512bw, avx2,
portable; TENSORKILN_INT8_DOT forces the slower ones), checked equal to the
first path's result, and timed in turns (interleaved_medians). Printed:
each path's median and its speed relative to the portable C path.
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import benchmark_arguments, write_json  # noqa: E402

GEMMS = [(128, 768, 768), (1, 768, 2304)]
CONV = (1, 64, 56, 56, 64, 3, 1)  # N, C, H, W, O, K, groups
DEPTHWISE = (1, 144, 56, 56, 144, 3, 144)


def _conv_model(n: int, c: int, h: int, w: int, o: int, k: int, groups: int):
    """A QLinearConv (uint8 activations, per-channel int8 weights, padding k // 2)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a, name) for name, a in [
        ("xs", np.array(0.02, np.float32)), ("xz", np.array(128, np.uint8)),
        ("w", rng.integers(-127, 128, (o, c // groups, k, k)).astype(np.int8)),
        ("ws", rng.uniform(0.001, 0.01, o).astype(np.float32)), ("wz", np.zeros(o, np.int8)),
        ("ys", np.array(0.05, np.float32)), ("yz", np.array(128, np.uint8))]]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"],
                            pads=[k // 2] * 4, group=groups)
    graph = helper.make_graph([node], "qconv", [helper.make_tensor_value_info("x", TensorProto.UINT8, (n, c, h, w))],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, (n, o, h, w))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def main() -> int:
    args = benchmark_arguments(__doc__, threads=1).parse_args()  # sets OMP_NUM_THREADS before OpenMP loads
    import tempfile

    import onnx

    import tensorkiln as tk
    from tensorkiln.frontend.functions import matmul_integer
    from tensorkiln.kernels.target import INT8_DOT_KINDS, _cpu_flags, cpu_target, int8_dot_kind
    from tensorkiln.tools.timing import interleaved_medians

    paths = INT8_DOT_KINDS[INT8_DOT_KINDS.index(int8_dot_kind(_cpu_flags())):]
    rng = np.random.default_rng(1)
    folder = tempfile.mkdtemp(prefix="tensorkiln-int8-paths-")
    cases = {f"gemm {m}x{k}x{n}": (m, k, n) for m, k, n in GEMMS}
    cases["qlinearconv 64x56x56 3x3"] = CONV
    cases["depthwise 144x56x56 3x3"] = DEPTHWISE
    print(f"int8 kernels per dot-product path, {args.threads} thread(s); medians of turns; "
          f"speed relative to portable C")
    results = {}
    for name, shape in cases.items():
        if name.startswith("gemm"):
            m, k, n = shape
            a = rng.integers(0, 256, (m, k)).astype(np.uint8)
            weights = tk.tensor(rng.integers(-128, 128, (k, n)).astype(np.int8))
            inputs = {"x": a}

            def build():
                return tk.jit(lambda x: matmul_integer(x, weights))
        else:
            inputs = {"x": rng.integers(0, 256, shape[:4]).astype(np.uint8)}
            conv_path = os.path.join(folder, f"qconv_groups{shape[-1]}.onnx")
            onnx.save(_conv_model(*shape), conv_path)

            def build(conv_path=conv_path):
                return tk.onnx.load(conv_path)
        runs, first = {}, None
        for path in paths:
            os.environ["TENSORKILN_INT8_DOT"] = path
            cpu_target.cache_clear()
            f = build()
            out = np.asarray(f(**inputs).numpy() if hasattr(f(**inputs), "numpy") else f(**inputs))
            if first is None:
                first = out
            np.testing.assert_array_equal(out, first, err_msg=f"{name}: {path} differs from {paths[0]}")
            runs[path] = (lambda f=f: f(**inputs))
        os.environ.pop("TENSORKILN_INT8_DOT", None)
        cpu_target.cache_clear()
        medians = interleaved_medians(runs)
        results[name] = {p: s * 1e3 for p, s in medians.items()}
        base = medians.get("portable")
        row = "  ".join(f"{p} {s * 1e3:8.3f} ms ({base / s:5.2f}x)" for p, s in medians.items())
        print(f"{name:<26} {row}")
    if args.json:
        write_json(args.json, {"threads": args.threads, "paths": list(paths), "ms": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
