"""The AVX2 int8 steps against each other: `maddubsw` (vpmaddubsw on unwidened bytes) and the exact widened one.

    python benchmarks/int8_maddubsw.py [--threads 1] [--json out.json]

Each case is one layer compiled twice on the `avx2` path (TENSORKILN_INT8_DOT=avx2 on an AVX-512 CPU):
once with 7-bit weights (|w| <= 64, as a quantizer's reduce_range writes them), which pass
int8_avx2.maddubsw_is_exact, and once with the same weights but one pair pushed past the bound, which
keeps the widened vpmaddwd step. Everything else (shapes, activations, epilogue) is the same, so the
ratio is the step's. Layers: ResNet-18's 3x3 convolutions at 56x56 and 14x14, MobileNetV2's 1x1 at
112x112 (QLinearConv models through `tk.onnx.load`) and BERT-base's projection (`matmul_integer`).
Timed in turns, medians of the CPU time per call (int8_convs.py's: with one thread, the time the call
computed, which a machine shared with other jobs inflates much less than wall time); the outputs of
the GEMM are checked against numpy.

    python benchmarks/int8_maddubsw.py --models [--threads 2]

times whole models instead, in one set of turns: ResNet-18 and MobileNetV2 quantized twice by
ONNX Runtime's quantize_static (8-bit weights: the widened step in every dense layer; 7-bit,
reduce_range: the maddubsw step in every dense layer), each file run by tensorkiln and by OpenVINO
(its default settings), on this CPU's own int8 path.

    python benchmarks/int8_maddubsw.py --pairs [--reduce-range]

counts instead, for the QDQ models `tensorkiln bench --precision int8` quantizes (ResNet-18 and
MobileNetV2, ONNX Runtime's quantize_static, per-channel weights; --reduce-range: 7-bit), the dense
layers (groups 1) whose weights pass maddubsw_is_exact and the share of weight pairs past the bound.
"""
from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import benchmark_arguments, write_json  # noqa: E402
from int8_convs import _cpu_medians  # noqa: E402
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


def pair_counts(reduce_range: bool) -> None:
    """Print, per QDQ model, its dense layers that pass the rule and the share of pairs past it."""
    import logging

    import onnx
    from onnx import numpy_helper

    from tensorkiln.ir.ops.quantized_conv import pack_conv_u8s8
    from tensorkiln.kernels.templates.int8_avx2 import maddubsw_is_exact, saturating_pairs
    from tensorkiln.tools.bench import build
    from tensorkiln.tools.bench_int8 import quantized_onnx
    logging.getLogger().setLevel(logging.ERROR)
    folder = tempfile.mkdtemp(prefix="tensorkiln-int8-pairs-")
    for name in ("resnet18", "mobilenetv2"):
        model, inputs = build(name, 1)
        _, path = quantized_onnx(name, model, inputs, folder, reduce_range=reduce_range)
        graph = onnx.load(path).graph
        weights = [numpy_helper.to_array(i) for i in graph.initializer]
        dense = [w for w in weights if w.dtype == np.int8 and w.ndim == 4 and w.shape[1] > 1]
        passing, past, total = 0, 0, 0
        for w in dense:
            panels = pack_conv_u8s8(w)
            passing += maddubsw_is_exact(panels)
            saturating = saturating_pairs(panels)
            past += int(np.count_nonzero(saturating))
            total += saturating.size
        print(f"{name}{' (reduce_range)' if reduce_range else ''}: {passing} of {len(dense)} dense layers pass; "
              f"{100 * past / total:.1f}% of weight pairs past the bound")


def model_turns() -> dict:
    """Median ms (wall, and CPU time of all threads) of tensorkiln and OpenVINO on each model's 8-bit and 7-bit
    QDQ files, each in one set of turns."""
    import logging

    import onnx

    import tensorkiln as tk
    from tensorkiln.tools.bench import build
    from tensorkiln.tools.bench_common import openvino_runner
    from tensorkiln.tools.bench_int8 import quantized_onnx
    from tensorkiln.tools.timing import interleaved_medians
    logging.getLogger().setLevel(logging.ERROR)
    folder = tempfile.mkdtemp(prefix="tensorkiln-int8-models-")
    results = {}
    for name in ("resnet18", "mobilenetv2"):
        model, inputs = build(name, 1)
        arrays = [t.numpy() for t in inputs]
        runs = {}
        for bits, reduce in (("8-bit", False), ("7-bit", True)):
            sub = os.path.join(folder, bits)
            os.makedirs(sub, exist_ok=True)
            _, path = quantized_onnx(name, model, inputs, sub, reduce_range=reduce)
            feeds = dict(zip([i.name for i in onnx.load(path, load_external_data=False).graph.input], arrays))
            module = tk.onnx.load(path)
            kinds = sorted({k.precision for k in module.report(**feeds).kernels if k.kind == "contraction"})
            print(f"{name} {bits}: tensorkiln's contractions {', '.join(kinds)}")
            runs[f"tk {bits}"] = (lambda module=module, feeds=feeds: module(**feeds))
            runs[f"OV {bits}"] = openvino_runner(path, arrays, None)[0]
        ms = {k: v * 1e3 for k, v in interleaved_medians(runs).items()}
        cpu = {k: v * 1e3 for k, v in _cpu_medians(runs, rounds=5, calls=5).items()}
        results[name] = {"ms": ms, "cpu_ms": cpu}
        for label, times in (("wall", ms), ("CPU", cpu)):
            print(f"{name:<12} {label:<4} " + "  ".join(f"{k} {v:7.2f}" for k, v in times.items()) +
                  f"   tk 8-bit / 7-bit {times['tk 8-bit'] / times['tk 7-bit']:.2f}x   OV / tk: 8-bit "
                  f"{times['OV 8-bit'] / times['tk 8-bit']:.2f}x, 7-bit {times['OV 7-bit'] / times['tk 7-bit']:.2f}x")
    return results


def main() -> int:
    parser = benchmark_arguments(__doc__, threads=1)
    parser.add_argument("--pairs", action="store_true", help="count the layers that pass the rule instead")
    parser.add_argument("--reduce-range", action="store_true", help="with --pairs: 7-bit weights")
    parser.add_argument("--models", action="store_true", help="time whole models, 8-bit and 7-bit weights")
    args = parser.parse_args()  # sets OMP_NUM_THREADS before OpenMP loads
    if args.pairs:
        pair_counts(args.reduce_range)
        return 0
    if args.models:
        results = model_turns()
        if args.json:
            write_json(args.json, {"threads": args.threads, "ms": results})
        return 0
    os.environ["TENSORKILN_INT8_DOT"] = "avx2"
    import onnx
    from onnx import numpy_helper

    import tensorkiln as tk
    from tensorkiln.frontend.functions import matmul_integer
    from tensorkiln.kernels.target import cpu_target
    if cpu_target().int8_dot != "avx2":
        print("this CPU has no AVX2: no maddubsw step to time")
        return 0

    folder = tempfile.mkdtemp(prefix="tensorkiln-int8-maddubsw-")
    print(f"AVX2 int8 steps, {args.threads} thread(s); medians of CPU ms per call, in turns; maddubsw's speed "
          f"against the widened step")
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
        medians = _cpu_medians(runs, rounds=9)
        results[name] = {kind: s * 1e3 for kind, s in medians.items()}
        print(f"{name:<30} maddubsw {medians['maddubsw'] * 1e3:8.3f} ms  avx2 {medians['avx2'] * 1e3:8.3f} ms  "
              f"({medians['avx2'] / medians['maddubsw']:.2f}x)")
    if args.json:
        write_json(args.json, {"threads": args.threads, "ms": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
