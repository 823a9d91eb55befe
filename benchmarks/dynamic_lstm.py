"""An ONNX LSTM with a symbolic sequence length: one program for many lengths, and per-call time
against a program specialized to one length and ONNX Runtime.

    OMP_WAIT_POLICY=passive python benchmarks/dynamic_lstm.py [--lengths 10] [--samples 16,64,256]
        [--pairs 5] [--json FILE]

The model: one bidirectional ONNX LSTM node (batch 8, hidden 128, input 64, float32), its input X
declared (seq, 8, 64) with the dim_param "seq". tk.onnx.load of it compiles one tk.scan per
direction whose trip count is the run-time sequence length; it is called once at each of `--lengths`
distinct lengths in [2, 300] (odd ones included) and the programs it compiled are counted. Then, at
each sampled length, per-call time of that symbolic model against the same model with X's length
fixed (a static program of that length: tk.onnx.load of a copy whose dim is a number) and ONNX
Runtime (CPUExecutionProvider, all graph optimizations, 2 intra-op threads), timed in alternating
blocks (tools/timing.alternating_blocks: medians of the blocks and of the per-round ratios; ratio > 1:
the symbolic program is slower). Outputs must agree with ONNX Runtime to 1e-4.
The machine may be shared: read the ratios measured side by side, not absolute times.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tensorkiln as tk  # noqa: E402
from benchmarks.common import machine_summary, print_table, write_json  # noqa: E402
from tensorkiln.tools.timing import alternating_blocks  # noqa: E402

BATCH, HIDDEN, INPUT = 8, 128, 64
TOLERANCE = 1e-4


def lstm_model(seq):
    """The bidirectional LSTM model; `seq` is X's first dimension: a dim_param name or a number."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    weights = {"W": rng.standard_normal((2, 4 * HIDDEN, INPUT)) * 0.1,
               "R": rng.standard_normal((2, 4 * HIDDEN, HIDDEN)) * 0.1,
               "B": rng.standard_normal((2, 8 * HIDDEN)) * 0.1}
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=HIDDEN,
                            direction="bidirectional")
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, (seq, BATCH, INPUT))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("Y", "Y_h", "Y_c")],
        [numpy_helper.from_array(a.astype(np.float32), n) for n, a in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def lengths(count: int) -> list[int]:
    """`count` distinct lengths spread over [2, 300], shuffled."""
    values = sorted({int(round(v)) for v in np.geomspace(2, 300, count)})
    while len(values) < count:
        values = sorted(set(values) | {values[-1] - len(values)})
    return [int(v) for v in np.random.default_rng(0).permutation(values)]


def feed(seq: int) -> np.ndarray:
    return np.random.default_rng(seq).standard_normal((seq, BATCH, INPUT)).astype(np.float32)


def _ratio(times: dict, a: str, b: str) -> float:
    return float(np.median([x / y for x, y in zip(times[a], times[b])]))


def main() -> None:
    import onnxruntime as ort
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, default=10)
    parser.add_argument("--samples", default="16,64,256")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    print(machine_summary())
    proto = lstm_model("seq")
    symbolic = tk.onnx.load(copy.deepcopy(proto))
    start = time.perf_counter()
    for n in lengths(args.lengths):
        symbolic(X=feed(n))
    seconds = time.perf_counter() - start
    print(f"{args.lengths} sequence lengths in [2, 300]: {symbolic.compile_count} programs, "
          f"{seconds:.1f} s for all calls (compiling included)")
    results = {"lengths": args.lengths, "programs": symbolic.compile_count, "seconds": seconds, "samples": {}}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    rows = []
    for n in [int(s) for s in args.samples.split(",")]:
        x = feed(n)
        specialized = tk.onnx.load(lstm_model(n))
        compile_start = time.perf_counter()
        specialized(X=x)
        compile_s = time.perf_counter() - compile_start
        want = session.run(None, {"X": x})
        for got in (symbolic(X=x), specialized(X=x)):
            error = max(float(np.abs(np.asarray(g) - w).max()) for g, w in zip(got, want))
            assert error < TOLERANCE, f"seq {n}: differs from ONNX Runtime by {error:.2e}"
        times = alternating_blocks({"symbolic": lambda: symbolic(X=x), "specialized": lambda: specialized(X=x),
                                    "ort": lambda: session.run(None, {"X": x})}, pairs=args.pairs)
        med = {k: float(np.median(v)) for k, v in times.items()}
        rows.append([str(n), f"{med['symbolic'] * 1e3:.2f}", f"{med['specialized'] * 1e3:.2f}",
                     f"{med['ort'] * 1e3:.2f}", f"{_ratio(times, 'symbolic', 'specialized'):.3f}",
                     f"{_ratio(times, 'symbolic', 'ort'):.3f}", f"{compile_s:.1f}"])
        results["samples"][str(n)] = {**{f"{k}_s": v for k, v in med.items()},
                                      "symbolic_over_specialized": _ratio(times, "symbolic", "specialized"),
                                      "symbolic_over_ort": _ratio(times, "symbolic", "ort"),
                                      "specialized_compile_s": compile_s}
    print()
    print_table(["seq", "symbolic ms", "specialized ms", "ONNX Runtime ms", "symbolic / specialized",
                 "symbolic / ORT", "specialized compile s"], rows)
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
