"""An ONNX LSTM compiled as one scan over time vs the unrolled lowering vs ONNX Runtime.

    python benchmarks/onnx_lstm_scan.py [--seqs 16 64 256] [--baseline PATH] [--json out.json]

The model: one bidirectional LSTM node (batch 8, hidden 128, input 64, float32)
at each sequence length. Three contenders, timed in turns (alternating blocks,
medians) in one run:

- scan: this checkout, where the recurrence is one tk.scan per direction (a C
  loop over time calling the cell's kernels);
- unrolled: the same model through the importer as it was before the scan
  (commit UNROLLED_COMMIT, which unrolls one cell per time step); it runs in a
  worker process on a `git worktree` of that commit (made and removed by this
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
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

# Two processes share two cores here: OpenMP threads that spin between calls would steal the other's
# cores (100x slower blocks on a loaded machine), so both wait passively, as `make test` runs them.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
BATCH, HIDDEN, INPUT = 8, 128, 64
UNROLLED_COMMIT = "2352ee2"  # the last commit whose ONNX importer unrolled RNN/GRU/LSTM over time
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the worker imports the baseline checkout's tensorkiln (TK_BASELINE_TREE), everything else this one's
sys.path.insert(0, os.environ.get("TK_BASELINE_TREE", ROOT) if "--worker" in sys.argv else ROOT)


def lstm_model(seq: int, path: str) -> dict:
    """Write the bidirectional LSTM model to `path`; returns a feed for it."""
    from onnx import TensorProto, helper, numpy_helper, save
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
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), path)
    return {"X": rng.standard_normal((seq, BATCH, INPUT)).astype(np.float32)}


def gate_flops(seq: int) -> float:
    return 2.0 * seq * BATCH * 2 * 4 * HIDDEN * (INPUT + HIDDEN)


# ---- the worker: one model loaded by a given checkout, timing blocks on request ---------------------
def worker(model: str) -> None:
    """Load `model` with the tensorkiln on sys.path, report the compile time, then answer
    `run N` lines with the seconds N calls took (`quit` ends)."""
    import tensorkiln as tk
    assert os.path.dirname(os.path.dirname(os.path.abspath(tk.__file__))) == os.path.abspath(
        os.environ["TK_BASELINE_TREE"]), f"the worker imported {tk.__file__}"
    x = np.load(model + ".x.npy")
    start = time.perf_counter()
    module = tk.onnx.load(model)
    module(X=x)
    print(json.dumps({"compile_seconds": time.perf_counter() - start}), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        calls = int(line.split()[1])
        start = time.perf_counter()
        for _ in range(calls):
            module(X=x)
        print(time.perf_counter() - start, flush=True)


class Remote:
    """A worker process running another checkout's tensorkiln."""

    def __init__(self, tree: str, model: str, cache: str):
        env = dict(os.environ, PYTHONPATH=tree, TK_BASELINE_TREE=tree, TENSORKILN_CACHE=cache,
                   TENSORKILN_VERBOSE="0")
        self.process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", model],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd="/")
        self.compile_seconds = json.loads(self.process.stdout.readline())["compile_seconds"]

    def run(self, calls: int) -> float:
        self.process.stdin.write(f"run {calls}\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.write("quit\n")
        self.process.stdin.flush()
        self.process.wait()


def alternating(blocks: dict, pairs: int, min_block_seconds: float = 0.4) -> dict[str, float]:
    """Median seconds per call of each contender; blocks of calls taken in turns, order reversed each round.
    `blocks[name](calls)` runs `calls` calls and returns their seconds."""
    times: dict[str, list[float]] = {name: [] for name in blocks}
    order = list(blocks)
    for index in range(pairs):
        for name in (order if index % 2 == 0 else order[::-1]):
            time.sleep(0.2)
            first = max(blocks[name](1), 1e-6)
            calls = max(1, int(np.ceil(min_block_seconds / first)))
            times[name].append(blocks[name](calls) / calls)
    return {name: float(np.median(t)) for name, t in times.items()}


def measure(seq: int, baseline: str, scratch: str, pairs: int) -> dict:
    import onnxruntime as ort
    import tensorkiln as tk
    path = os.path.join(scratch, f"lstm{seq}.onnx")
    feed = lstm_model(seq, path)
    np.save(path + ".x.npy", feed["X"])
    os.environ["TENSORKILN_CACHE"] = os.path.join(scratch, f"cache-scan-{seq}")  # a cold compile
    start = time.perf_counter()
    module = tk.onnx.load(path)
    module(**feed)
    scan_compile = time.perf_counter() - start
    remote = Remote(baseline, path, os.path.join(scratch, f"cache-unrolled-{seq}"))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    ours, theirs, unrolled = module(**feed), session.run(None, feed), None
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)

    def timed(fn):
        def block(calls: int) -> float:
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            return time.perf_counter() - start
        return block

    try:
        medians = alternating({"scan": timed(lambda: module(**feed)), "unrolled": remote.run,
                               "onnxruntime": timed(lambda: session.run(None, feed))}, pairs)
        unrolled = remote.compile_seconds
    finally:
        remote.close()
    flops = gate_flops(seq)
    return {"seq": seq, "scan_compile_s": scan_compile, "unrolled_compile_s": unrolled,
            **{f"{k}_ms": v * 1e3 for k, v in medians.items()},
            **{f"{k}_gflops": flops / v / 1e9 for k, v in medians.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqs", type=int, nargs="*", default=[16, 64, 256])
    parser.add_argument("--pairs", type=int, default=6, help="rounds of alternating blocks")
    parser.add_argument("--baseline", help="a checkout of the unrolling importer (default: a git worktree of "
                                           f"{UNROLLED_COMMIT} made for this run)")
    parser.add_argument("--json")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return 0
    from benchmarks.common import machine_summary, print_table, write_json
    from benchmarks.kernels import measure_limits
    scratch = tempfile.mkdtemp(prefix="tk-lstm-")
    baseline = args.baseline
    if baseline is None:
        baseline = os.path.join(scratch, "main")
        subprocess.check_call(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", baseline, UNROLLED_COMMIT])
    try:
        peak = measure_limits(5)["peak_gflops"]
        rows = [measure(seq, baseline, scratch, args.pairs) for seq in args.seqs]
    finally:
        if args.baseline is None:
            subprocess.call(["git", "-C", ROOT, "worktree", "remove", "--force", baseline])
    print(f"ONNX LSTM, bidirectional, batch {BATCH}, hidden {HIDDEN}, input {INPUT}, float32; {machine_summary()}")
    print(f"peak FMA {peak:.0f} GFLOP/s; unrolled = the importer of {UNROLLED_COMMIT} ({baseline}); ONNX Runtime 2 threads, "
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
