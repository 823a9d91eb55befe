"""A bidirectional ONNX LSTM through tensorkiln against ONNX Runtime, timed in turns in one run.

    python benchmarks/onnx_lstm.py [--threads 2] [--seq 32] [--batch 8] [--input 64] [--hidden 128]
                                   [--rounds 5] [--repeat 200] [--json out.json]

One LSTM node (ai.onnx opset 14, direction bidirectional, bias, float32 weights as initializers, X the
only input) as docs/onnx.md describes it: tensorkiln unrolls the sequence into one compiled graph
(`tk.onnx.load`, C backend); ONNX Runtime runs the same file with IOBinding, its intra-op threads set to
--threads. Outputs are checked against each other first; prints each median (ms), the ratio and
tensorkiln's kernel count.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def lstm_model(seq: int, batch: int, size: int, hidden: int):
    """(ONNX model bytes, X): a bidirectional LSTM with random weights."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)
    weights = {"W": rand(2, 4 * hidden, size), "R": rand(2, 4 * hidden, hidden), "B": rand(2, 8 * hidden)}
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=hidden,
                            direction="bidirectional")
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, batch, size])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("Y", "Y_h", "Y_c")],
        [numpy_helper.from_array(array, name) for name, array in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    return model, rand(seq, batch, size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--input", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=200, help="timed calls of each, over all rounds")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before OpenMP loads; ONNX Runtime's threads follow it
    import tempfile

    import numpy as np
    import onnx
    import tensorkiln as tk
    from common import machine_summary, write_json
    from tensorkiln.tools.bench_common import onnxruntime_runner
    from tensorkiln.tools.timing import interleaved_medians

    model, x = lstm_model(args.seq, args.batch, args.input, args.hidden)
    path = os.path.join(tempfile.mkdtemp(prefix="tensorkiln-lstm-"), "lstm.onnx")
    onnx.save(model, path)
    ours = tk.onnx.load(path, backend="c")
    ours_out = ours(X=x)
    report = ours.report(X=x)
    theirs, _ = onnxruntime_runner(path, [x])
    np.testing.assert_allclose(ours_out[0], theirs(), rtol=1e-4, atol=1e-5)
    medians = interleaved_medians({"tensorkiln": lambda: ours(X=x), "onnxruntime": theirs},
                                  repeat=args.repeat, rounds=args.rounds)
    kernels = len(report.kernels)
    print(f"bidirectional LSTM, seq {args.seq}, batch {args.batch}, input {args.input}, hidden {args.hidden}; "
          f"float32, {args.threads} thread(s), medians of {args.rounds} rounds in turns; {machine_summary()}")
    print(f"  tensorkiln   {medians['tensorkiln'] * 1e3:8.3f} ms  ({kernels} kernels)")
    print(f"  onnxruntime  {medians['onnxruntime'] * 1e3:8.3f} ms  (IOBinding)")
    print(f"  onnxruntime / tensorkiln: {medians['onnxruntime'] / medians['tensorkiln']:.2f}x")
    if args.json:
        write_json(args.json, {"threads": args.threads, "precision": "fp32", "kernels": kernels,
                               "tensorkiln_s": medians["tensorkiln"], "onnxruntime_s": medians["onnxruntime"]})


if __name__ == "__main__":
    main()
