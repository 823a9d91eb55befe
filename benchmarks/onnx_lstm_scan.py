"""An ONNX LSTM compiled as one scan over time vs the unrolled lowering vs ONNX Runtime.

    python benchmarks/onnx_lstm_scan.py [--seqs 16 64 256] [--baseline PATH] [--json out.json]

The model: one bidirectional LSTM node (batch 8, hidden 128, input 64, float32)
at each sequence length (benchmarks/dynamic/lstm.py). Three contenders, timed in
turns (alternating blocks, medians) in one run:

- scan: this checkout, where the recurrence is one tk.scan per direction (a C
  loop over time calling the cell's kernels);
- unrolled: the same model through the importer as it was before the scan
  (UNROLLED_COMMIT in benchmarks/dynamic/lstm.py, which unrolls one cell per time step); it runs in
  a worker process on a `git worktree` of that commit (made and removed by this
  script, or --baseline PATH) and times blocks on request, so its blocks
  alternate with the others';
- ONNX Runtime: CPUExecutionProvider, all graph optimizations, 2 intra-op
  threads (its strongest setting on this 2-core machine).

Both tensorkiln processes run with OMP_WAIT_POLICY=passive (set here unless given).

Compile time is the wall time of tk.onnx.load plus the first call with an empty
compile cache (trace, passes, C generation, the C compiler); per-call latency
is the median of the alternating blocks. GFLOP/s count the gate matmuls
(2 * 4H * (I + H) per batch entry, step and direction) and are compared with
the machine's peak FMA rate measured by benchmarks/kernels.py's probe.
(benchmarks/dynamic_lstm.py compares the same contenders with one symbolic-length program.)
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

# Two processes share two cores here: OpenMP threads that spin between calls would steal the other's
# cores (100x slower blocks on a loaded machine), so both wait passively, as `make test` runs them.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.dynamic.lstm import (BATCH, HIDDEN, INPUT, UNROLLED_COMMIT, Remote, alternating,  # noqa: E402
                                    calls_of, feed, gate_flops, lstm_model, unrolled_checkout)
from benchmarks.dynamic.ort_peer import ort_session  # noqa: E402


def measure(seq: int, baseline: str, scratch: str, pairs: int) -> dict:
    import tensorkiln as tk
    x = feed(seq)
    os.environ["TENSORKILN_CACHE"] = os.path.join(scratch, f"cache-scan-{seq}")  # a cold compile
    start = time.perf_counter()
    module = tk.onnx.load(lstm_model(seq))
    module(X=x)
    scan_compile = time.perf_counter() - start
    remote = Remote(baseline, seq, scratch)
    session = ort_session(lstm_model(seq))
    ours, theirs = module(X=x), session.run(None, {"X": x})
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(remote.y, theirs[0], rtol=1e-3, atol=1e-4)
    try:
        times = alternating({"scan": calls_of(lambda: module(X=x)), "unrolled": remote.run,
                             "onnxruntime": calls_of(lambda: session.run(None, {"X": x}))}, pairs)
    finally:
        remote.close()
    medians = {name: float(np.median(t)) for name, t in times.items()}
    flops = gate_flops(seq)
    return {"seq": seq, "scan_compile_s": scan_compile, "unrolled_compile_s": remote.compile_seconds,
            **{f"{k}_ms": v * 1e3 for k, v in medians.items()},
            **{f"{k}_gflops": flops / v / 1e9 for k, v in medians.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqs", type=int, nargs="*", default=[16, 64, 256])
    parser.add_argument("--pairs", type=int, default=6, help="rounds of alternating blocks")
    parser.add_argument("--baseline", help="a checkout of the unrolling importer (default: a git worktree of "
                                           f"{UNROLLED_COMMIT} made for this run)")
    parser.add_argument("--json")
    args = parser.parse_args()
    from benchmarks.common import machine_summary, print_table, write_json
    from benchmarks.kernels import measure_limits
    scratch = tempfile.mkdtemp(prefix="tk-lstm-")
    with unrolled_checkout(args.baseline) as baseline:
        peak = measure_limits(5)["peak_gflops"]
        rows = [measure(seq, baseline, scratch, args.pairs) for seq in args.seqs]
    print(f"ONNX LSTM, bidirectional, batch {BATCH}, hidden {HIDDEN}, input {INPUT}, float32; {machine_summary()}")
    print(f"peak FMA {peak:.0f} GFLOP/s; unrolled = the importer of {UNROLLED_COMMIT}; ONNX Runtime 2 threads, "
          "ORT_ENABLE_ALL; medians of alternating blocks")
    print_table(["seq", "compile scan s", "compile unrolled s", "scan ms", "unrolled ms", "ORT ms",
                 "unrolled/scan", "ORT/scan", "scan % of peak"],
                [[r["seq"], f"{r['scan_compile_s']:.2f}", f"{r['unrolled_compile_s']:.2f}", f"{r['scan_ms']:.3f}",
                  f"{r['unrolled_ms']:.3f}", f"{r['onnxruntime_ms']:.3f}",
                  f"{r['unrolled_ms'] / r['scan_ms']:.2f}", f"{r['onnxruntime_ms'] / r['scan_ms']:.2f}",
                  f"{100 * r['scan_gflops'] / peak:.1f}"] for r in rows])
    if args.json:
        write_json(args.json, {"machine": machine_summary(), "peak_gflops": peak, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
