"""The AVX2 int8 steps against each other: `maddubsw` (vpmaddubsw on unwidened bytes) and the exact widened one.

    python benchmarks/int8_maddubsw.py [--threads 1] [--json out.json]

Each case is one layer compiled twice on the `avx2` path (TENSORKILN_INT8_DOT=avx2 on an AVX-512 CPU):
once with 7-bit weights (|w| <= 64, as a quantizer's reduce_range writes them), which pass
int8_avx2.maddubsw_is_exact, and once with the same weights but one pair pushed past the bound, which
keeps the widened vpmaddwd step. Everything else (shapes, activations, epilogue) is the same, so the
ratio is the step's. Layers: ResNet-18's 3x3 convolutions at 56x56 and 14x14, MobileNetV2's 1x1 at
112x112 (QLinearConv models through `tk.onnx.load`) and BERT-base's projection (`matmul_integer`).
Timed in turns (interleaved_medians); the outputs of the 7-bit case are checked against numpy.
"""
from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import benchmark_arguments, write_json  # noqa: E402
from int8_dot_paths import _conv_model  # noqa: E402

CONVS = {"resnet 3x3 64x56x56": (1, 64, 56, 56, 64, 3, 1), "resnet 3x3 256x14x14": (1, 256, 14, 14, 256, 3, 1),
         "mobilenet 1x1 16->96 112x112": (1, 16, 112, 112, 96, 1, 1)}
GEMM = (128, 768, 768)


def _weights(kind: str, shape: tuple[int, ...], rng) -> np.ndarray:
    """7-bit weights with the depth last, or the same with the first pair of depths at (127, 2): past the
    bound."""
    w = rng.integers(-64, 65, shape).astype(np.int8)
    if kind == "avx2":
        w.reshape(-1, shape[-1])[0, :2] = (127, 2)  # depths 0 and 1 of the first column
    return w


def main() -> int:
    args = benchmark_arguments(__doc__, threads=1).parse_args()  # sets OMP_NUM_THREADS before OpenMP loads
    os.environ["TENSORKILN_INT8_DOT"] = "avx2"
    import onnx
    from onnx import numpy_helper

    import tensorkiln as tk
    from tensorkiln.frontend.functions import matmul_integer
    from tensorkiln.tools.timing import interleaved_medians

    folder = tempfile.mkdtemp(prefix="tensorkiln-int8-maddubsw-")
    print(f"AVX2 int8 steps, {args.threads} thread(s); medians of turns; maddubsw's speed against the widened step")
    results = {}
    for name, shape in [*CONVS.items(), (f"gemm {GEMM[0]}x{GEMM[1]}x{GEMM[2]}", GEMM)]:
        rng = np.random.default_rng(0)
        runs = {}
        for kind in ("maddubsw", "avx2"):
            wrng = np.random.default_rng(1)
            if name.startswith("gemm"):
                m, k, n = shape
                inputs = {"x": rng.integers(0, 256, (m, k)).astype(np.uint8)}
                w = _weights(kind, (n, k), wrng).T.copy()
                weights = tk.tensor(w)
                f = tk.jit(lambda x, weights=weights: matmul_integer(x, weights))
                got = f(**inputs).numpy()
                want = inputs["x"].astype(np.int64) @ w.astype(np.int64)
                np.testing.assert_array_equal(got, want, err_msg=f"{name} ({kind})")
            else:
                model = _conv_model(*shape)
                n_, c, h, wd, o, k, groups = shape
                init = next(i for i in model.graph.initializer if i.name == "w")
                init.CopyFrom(numpy_helper.from_array(_weights(kind, (o, k, k, c), wrng).transpose(0, 3, 1, 2)
                                                      .copy(), "w"))
                path = os.path.join(folder, f"{name.replace(' ', '_')}_{kind}.onnx")
                onnx.save(model, path)
                f = tk.onnx.load(path)
                inputs = {"x": rng.integers(0, 256, shape[:4]).astype(np.uint8)}
                f(**inputs)
            report = f.report(**inputs).kernels
            precisions = {kn.precision for kn in report if kn.kind == "contraction"}
            assert precisions == {f"int8 ({kind})"}, (name, kind, precisions)
            runs[kind] = (lambda f=f, inputs=inputs: f(**inputs))
        medians = interleaved_medians(runs)
        results[name] = {kind: s * 1e3 for kind, s in medians.items()}
        print(f"{name:<30} maddubsw {medians['maddubsw'] * 1e3:8.3f} ms  avx2 {medians['avx2'] * 1e3:8.3f} ms  "
              f"({medians['avx2'] / medians['maddubsw']:.2f}x)")
    if args.json:
        write_json(args.json, {"threads": args.threads, "ms": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
