"""int8 GEMM (matmul_u8s8, vpdpbusd) against fp32 GEMM and ONNX Runtime's MatMulInteger, in one run.

    python benchmarks/int8_gemm.py [--json out.json] [--threads 2]

Each case is a one-node ONNX model with a constant weight, loaded by
tensorkiln (`tk.onnx.load`) and by ONNX Runtime (all graph optimizations,
`threads` intra-op threads): MatMulInteger (uint8 x int8 -> int32) and the
same product as a float32 MatMul. Timed in turns (tensorkiln.tools.timing.
interleaved_medians), medians; figures are GOP/s (2 ops per multiply-add)
and ratios measured in this run. tensorkiln's int32 sums are checked against
numpy's exact int64 product; ONNX Runtime's are not required to match: without
VNNI its u8 x s8 kernel adds pairs of products with vpmaddubsw, which saturates
at 16 bits, and the last column gives the share of its outputs that differ from
the exact sums (full-range random weights: most of them). Shapes: BERT-base's projections at sequence
128 and GPT-2's QKV projection for one decoded token.
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

SHAPES = [(128, 768, 768), (128, 768, 3072), (128, 3072, 768), (1, 768, 2304)]


def _weights(k: int, n: int, integer: bool) -> np.ndarray:
    rng = np.random.default_rng(0)
    if integer:
        return rng.integers(-128, 128, (k, n)).astype(np.int8)
    return rng.standard_normal((k, n)).astype(np.float32)


def _model(m: int, b: np.ndarray):
    """A one-node model: a (m x K) @ the constant b, MatMulInteger for int8 weights, else MatMul."""
    from onnx import TensorProto, helper, numpy_helper
    k, n = b.shape
    if b.dtype == np.int8:
        node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
        a_type, y_type = TensorProto.UINT8, TensorProto.INT32
    else:
        node = helper.make_node("MatMul", ["a", "b"], ["y"])
        a_type, y_type = TensorProto.FLOAT, TensorProto.FLOAT
    graph = helper.make_graph([node], "gemm", [helper.make_tensor_value_info("a", a_type, (m, k))],
                              [helper.make_tensor_value_info("y", y_type, (m, n))], [numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import onnxruntime as ort

    import tensorkiln as tk
    from tensorkiln.kernels.target import cpu_target
    from tensorkiln.tools.timing import interleaved_medians

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    print(f"int8 GEMM, {args.threads} threads, int8 dot product: {cpu_target().int8_dot}; GOP/s (2 ops per MAC), "
          f"medians of turns")
    print(f"{'M x K x N':>18} {'tk int8':>8} {'tk fp32':>8} {'ORT int8':>9} {'ORT fp32':>9} "
          f"{'int8/fp32':>9} {'tk/ORT int8':>11} {'ORT int8 inexact':>16}")
    results = []
    rng = np.random.default_rng(1)
    for m, k, n in SHAPES:
        a8 = rng.integers(0, 256, (m, k)).astype(np.uint8)
        a32 = rng.standard_normal((m, k)).astype(np.float32)
        runs = {}
        for integer, a in ((True, a8), (False, a32)):
            b = _weights(k, n, integer)
            model = _model(m, b)
            module = tk.onnx.load(model)
            session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            tag = "int8" if integer else "fp32"
            if integer:  # tensorkiln's sums are exact; ONNX Runtime's may saturate (vpmaddubsw without VNNI)
                exact = a.astype(np.int64) @ b.astype(np.int64)
                got = module(a=a)
                np.testing.assert_array_equal(got[0] if isinstance(got, (list, tuple)) else got, exact)
                ort_inexact = float(np.mean(session.run(None, {"a": a})[0] != exact))
            runs[f"tk {tag}"] = lambda module=module, a=a: module(a=a)
            runs[f"ORT {tag}"] = lambda session=session, a=a: session.run(None, {"a": a})
        seconds = interleaved_medians(runs)
        gops = {name: 2 * m * k * n / s / 1e9 for name, s in seconds.items()}
        row = {"shape": [m, k, n], "gops": gops, "int8_over_fp32": seconds["tk fp32"] / seconds["tk int8"],
               "tk_over_ort_int8": seconds["ORT int8"] / seconds["tk int8"],
               "ort_int8_inexact_share": ort_inexact}
        results.append(row)
        print(f"{f'{m} x {k} x {n}':>18} {gops['tk int8']:8.1f} {gops['tk fp32']:8.1f} {gops['ORT int8']:9.1f} "
              f"{gops['ORT fp32']:9.1f} {row['int8_over_fp32']:8.2f}x {row['tk_over_ort_int8']:10.2f}x {ort_inexact:16.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "int8_dot": cpu_target().int8_dot, "cases": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
