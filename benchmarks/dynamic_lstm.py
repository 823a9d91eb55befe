"""An ONNX LSTM with a symbolic sequence length: one program for many lengths, and per-call time
at every length against the unrolled lowering, a program specialized to the length and ONNX Runtime.

    OMP_WAIT_POLICY=passive python benchmarks/dynamic_lstm.py [--lengths 10] [--samples all|16,64,256]
        [--pairs 4] [--block-seconds 0.4] [--baseline PATH] [--json FILE]

The model (benchmarks/dynamic/lstm.py): one bidirectional ONNX LSTM node (batch 8, hidden 128,
input 64, float32), its input X declared (seq, 8, 64) with the dim_param "seq". tk.onnx.load of it
compiles one tk.scan per direction whose trip count is the run-time sequence length; it is called
once at each of `--lengths` distinct lengths in [2, 300] (odd ones included) and the programs it
compiled are counted. Then, at each sampled length (default: every one of them), per-call time of
that symbolic model against
- unrolled: the importer as it was before the scan (UNROLLED_COMMIT in benchmarks/dynamic/lstm.py: one cell per time
  step, a static program of that length), run in a worker process on a git worktree of that commit
  (made and removed here, or --baseline PATH);
- specialized: this checkout with X's length fixed (tk.onnx.load of a copy whose dim is a number);
- ONNX Runtime (CPUExecutionProvider, all graph optimizations, 2 intra-op threads),
timed in alternating blocks (benchmarks/dynamic/lstm.py's alternating: medians of the blocks and of the per-round
ratios; ratio > 1: the symbolic program is slower), and the ratios of each contender's fastest block
("best": on a machine loaded by other jobs, the block least disturbed; many short blocks, e.g.
`--pairs 20 --block-seconds 0.05`, make it a steadier estimate). Outputs must agree with ONNX
Runtime to 1e-4.
The goal: symbolic / unrolled at most 1.2 at every length.
The machine may be shared: read the ratios measured side by side, not absolute times.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # two processes share the cores: no spinning threads
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tensorkiln as tk  # noqa: E402
from benchmarks.common import machine_summary, print_table, write_json  # noqa: E402
from benchmarks.dynamic.lstm import (Remote, alternating, calls_of, feed, lstm_model, ratio,  # noqa: E402
                                    unrolled_checkout)
from benchmarks.dynamic.ort_peer import ort_session  # noqa: E402

TOLERANCE = 1e-4
GOAL = 1.2  # symbolic / unrolled at every length


def lengths(count: int) -> list[int]:
    """`count` distinct lengths spread over [2, 300], shuffled."""
    values = sorted({int(round(v)) for v in np.geomspace(2, 300, count)})
    while len(values) < count:
        values = sorted(set(values) | {values[-1] - len(values)})
    return [int(v) for v in np.random.default_rng(0).permutation(values)]


def measure(n: int, symbolic, session, baseline: str, scratch: str, pairs: int,
            block_seconds: float) -> tuple[list[str], dict]:
    """One sampled length: the table row and its figures."""
    x = feed(n)
    specialized = tk.onnx.load(lstm_model(n))
    compile_start = time.perf_counter()
    specialized(X=x)
    compile_s = time.perf_counter() - compile_start
    remote = Remote(baseline, n, scratch)
    try:
        want = session.run(None, {"X": x})
        for name, got in (("symbolic", symbolic(X=x)), ("specialized", specialized(X=x)), ("unrolled", [remote.y])):
            error = max(float(np.abs(np.asarray(g) - w).max()) for g, w in zip(got, want))
            assert error < TOLERANCE, f"seq {n}: {name} differs from ONNX Runtime by {error:.2e}"
        times = alternating({"symbolic": calls_of(lambda: symbolic(X=x)), "unrolled": remote.run,
                             "specialized": calls_of(lambda: specialized(X=x)),
                             "ort": calls_of(lambda: session.run(None, {"X": x}))}, pairs, block_seconds)
    finally:
        remote.close()
    med = {k: float(np.median(v)) for k, v in times.items()}
    ratios = {f"symbolic_over_{k}": ratio(times, "symbolic", k) for k in ("unrolled", "specialized", "ort")}
    best = {k: float(np.min(v)) for k, v in times.items()}
    best_ratios = {f"best_symbolic_over_{k}": best["symbolic"] / best[k] for k in ("unrolled", "ort")}
    row = [str(n), *(f"{med[k] * 1e3:.2f}" for k in ("symbolic", "unrolled", "specialized", "ort")),
           *(f"{v:.3f}" for v in ratios.values()), *(f"{v:.3f}" for v in best_ratios.values()),
           f"{remote.compile_seconds:.1f}", f"{compile_s:.1f}"]
    return row, {**{f"{k}_s": v for k, v in med.items()}, **{f"best_{k}_s": v for k, v in best.items()}, **ratios,
                 **best_ratios, "unrolled_compile_s": remote.compile_seconds, "specialized_compile_s": compile_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, default=10)
    parser.add_argument("--samples", default="all", help="lengths to time: 'all' (every length called) or a list")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--block-seconds", type=float, default=0.4, help="the least time one block of calls takes")
    parser.add_argument("--baseline", help="a checkout of the unrolling importer (default: a git worktree made here)")
    parser.add_argument("--json")
    args = parser.parse_args()
    print(machine_summary())
    called = lengths(args.lengths)
    symbolic = tk.onnx.load(lstm_model("seq"))
    start = time.perf_counter()
    for n in called:
        symbolic(X=feed(n))
    seconds = time.perf_counter() - start
    print(f"{args.lengths} sequence lengths in [2, 300]: {symbolic.compile_count} programs, "
          f"{seconds:.1f} s for all calls (compiling included)")
    results = {"lengths": args.lengths, "programs": symbolic.compile_count, "seconds": seconds, "samples": {}}
    samples = sorted(called) if args.samples == "all" else [int(s) for s in args.samples.split(",")]
    session = ort_session(lstm_model("seq"))
    scratch = tempfile.mkdtemp(prefix="tk-dynamic-lstm-")
    rows = []
    with unrolled_checkout(args.baseline) as baseline:
        for n in samples:
            row, figures = measure(n, symbolic, session, baseline, scratch, args.pairs, args.block_seconds)
            print(f"  seq {n}: symbolic / unrolled {figures['symbolic_over_unrolled']:.3f}", flush=True)
            rows.append(row)
            results["samples"][str(n)] = figures
    print()
    print_table(["seq", "symbolic ms", "unrolled ms", "specialized ms", "ONNX Runtime ms", "symbolic / unrolled",
                 "symbolic / specialized", "symbolic / ORT", "best symbolic / unrolled", "best symbolic / ORT",
                 "unrolled compile s", "specialized compile s"], rows)
    print()
    for key in ("symbolic_over_unrolled", "best_symbolic_over_unrolled"):
        worst = max(f[key] for f in results["samples"].values())
        name = key.replace("_over_", " / ").replace("_", " ")
        print(f"worst {name}: {worst:.3f} (goal: at most {GOAL} at every length)")
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
