"""Symbolic sizes: compilations, memory and latency of one program for many batch sizes.

    OMP_WAIT_POLICY=passive python benchmarks/dynamic_shapes.py [--sizes 100] [--pairs 6]
        [--latency-sizes 7,64,333] [--parts compiles,latency] [--json FILE]

Two functions, float32 (fp32 everywhere, 2 threads):
- `small`: ((x * 2 + b).relu() - 0.5).sum(-1), x of shape (batch, 256);
- `mlp`: softmax(relu(x @ W1 + b1) @ W2), x (batch, 256), W1 256 x 512, W2 512 x 10.

Part 1, each mode in a fresh process with an empty compile cache, the function called once at
each of `--sizes` batch sizes (2, 3, ..., spread to 400): the programs compiled, the seconds all
the calls took (tracing and compiling included) and the memory the process grew by (RSS),
for tk.jit(dynamic=False) (one program per size, today's behaviour), tk.jit() (automatic dynamic)
and tk.jit(dynamic={"x": {0: "batch"}}).

Part 2, at three batch sizes: per-call latency of the symbolic program (its sizes read per call)
against a program specialized to that size, and against the peers numpy (OpenBLAS) and PyTorch
eager, timed in alternating blocks (tools/timing.alternating_blocks: the median of the
blocks; ratios above 1 mean the symbolic program is slower than the other); the MLP's GFLOP/s
against the machine's peak FMA rate (benchmarks/kernels.py's measure_limits). The machine is
shared, so read ratios, not absolute times.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import machine_summary, print_table, write_json  # noqa: E402

WIDTH, HIDDEN, CLASSES = 256, 512, 10
MODES = {"static": False, "automatic": None, "symbolic": {"x": {0: "batch"}}}


def batch_sizes(count: int) -> list[int]:
    """`count` distinct batch sizes from 2 to about 400, odd ones included."""
    return sorted({int(round(v)) for v in np.linspace(2, 400, count)} | set(range(2, 2 + count // 10)))[:count]


def make_function(name: str, dynamic):
    """The benchmark function `name` compiled with tk.jit(dynamic=...), and its numpy reference."""
    import tensorkiln as tk
    rng = np.random.default_rng(0)
    if name == "small":
        b = rng.standard_normal(WIDTH).astype(np.float32)
        tb = tk.tensor(b)
        return (tk.jit(lambda x: ((x * 2 + tb).relu() - 0.5).sum(-1), dynamic=dynamic),
                lambda x: (np.maximum(x * 2 + b, 0) - 0.5).sum(-1))
    w1 = (rng.standard_normal((WIDTH, HIDDEN)) / 16).astype(np.float32)
    b1 = rng.standard_normal(HIDDEN).astype(np.float32)
    w2 = (rng.standard_normal((HIDDEN, CLASSES)) / 16).astype(np.float32)
    t1, tb1, t2 = tk.tensor(w1), tk.tensor(b1), tk.tensor(w2)

    def mlp(x):
        return ((x @ t1 + tb1).relu() @ t2).softmax(-1)

    def reference(x):
        logits = np.maximum(x @ w1 + b1, 0) @ w2
        e = np.exp(logits - logits.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    return tk.jit(mlp, dynamic=dynamic), reference


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def compile_run(name: str, mode: str, count: int) -> dict:
    """Part 1 in this process: the function called at `count` sizes."""
    import time
    f, reference = make_function(name, MODES[mode])
    rng = np.random.default_rng(1)
    before = _rss_bytes()
    start = time.perf_counter()
    worst = 0.0
    for n in batch_sizes(count):
        x = rng.standard_normal((n, WIDTH)).astype(np.float32)
        worst = max(worst, float(np.abs(f(x).numpy() - reference(x)).max()))
    return {"compiles": f.compile_count, "seconds": time.perf_counter() - start,
            "rss_growth_mib": (_rss_bytes() - before) / 2 ** 20, "max_abs_error": worst}


def compile_figures(count: int) -> dict:
    """Part 1, each (function, mode) in a fresh process with an empty compile cache."""
    results = {}
    for name in ("small", "mlp"):
        for mode in MODES:
            with tempfile.TemporaryDirectory(prefix="tk-dyn-cache-") as cache:
                env = {**os.environ, "TENSORKILN_CACHE": cache, "TENSORKILN_VERBOSE": "0"}
                out = subprocess.run([sys.executable, __file__, "--child", name, mode, str(count)], env=env,
                                     capture_output=True, text=True, check=True)
            results[f"{name}/{mode}"] = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"  .. {name} {mode}: {results[f'{name}/{mode}']}", file=sys.stderr, flush=True)
    return results


def latency_figures(sizes: list[int], pairs: int) -> dict:
    """Part 2: symbolic program vs specialized program vs numpy and torch eager, in alternating blocks."""
    import torch
    from tensorkiln.tools.timing import alternating_blocks
    from benchmarks.kernels import measure_limits
    torch.set_num_threads(2)
    peak = measure_limits(3)["peak_gflops"]
    rows = {}
    for name in ("small", "mlp"):
        symbolic, reference = make_function(name, {"x": {0: "batch"}})
        symbolic(np.ones((sizes[0] + 1, WIDTH), np.float32))  # traced at another size first: the program is symbolic
        torch_fn = _torch_version(name)
        for n in sizes:
            static, _ = make_function(name, False)
            x = np.random.default_rng(n).standard_normal((n, WIDTH)).astype(np.float32)
            tx = torch.from_numpy(x)
            assert np.allclose(symbolic(x).numpy(), reference(x), atol=1e-4)
            with torch.no_grad():
                runs = {"symbolic": lambda: symbolic(x), "specialized": lambda: static(x),
                        "numpy": lambda: reference(x), "torch eager": lambda: torch_fn(tx)}
                blocks = alternating_blocks(runs, pairs)
            medians = {k: float(np.median(v)) for k, v in blocks.items()}
            ratios = [s / t for s, t in zip(blocks["symbolic"], blocks["specialized"])]
            flops = 2 * n * (WIDTH * HIDDEN + HIDDEN * CLASSES) if name == "mlp" else 0
            rows[f"{name} batch {n}"] = {
                **{f"{k}_us": v * 1e6 for k, v in medians.items()},
                "symbolic_over_specialized": float(np.median(ratios)),
                "programs": symbolic.compile_count,
                "symbolic_gflops": flops / medians["symbolic"] / 1e9 if flops else None,
                "peak_gflops": peak}
    return rows


def _torch_version(name: str):
    import torch
    rng = np.random.default_rng(0)
    if name == "small":
        b = torch.from_numpy(rng.standard_normal(WIDTH).astype(np.float32))
        return lambda x: (torch.relu(x * 2 + b) - 0.5).sum(-1)
    w1 = torch.from_numpy((rng.standard_normal((WIDTH, HIDDEN)) / 16).astype(np.float32))
    b1 = torch.from_numpy(rng.standard_normal(HIDDEN).astype(np.float32))
    w2 = torch.from_numpy((rng.standard_normal((HIDDEN, CLASSES)) / 16).astype(np.float32))
    return lambda x: torch.softmax(torch.relu(x @ w1 + b1) @ w2, -1)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(compile_run(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, default=100, help="batch sizes each function is called at")
    parser.add_argument("--pairs", type=int, default=6, help="rounds of alternating blocks per latency row")
    parser.add_argument("--latency-sizes", default="7,64,333", help="batch sizes of the latency rows")
    parser.add_argument("--parts", default="compiles,latency", help="which parts to run (comma-separated)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    print(f"machine: {machine_summary()} (shared with other jobs: read the ratios)\n")
    compiles, latency = {}, {}
    if "compiles" in args.parts:
        compiles = compile_figures(args.sizes)
        print(f"Part 1: called at {args.sizes} batch sizes (2..400), fresh compile cache, float32\n")
        print_table(["function / mode", "programs", "seconds (all calls)", "RSS growth MiB", "max abs error"],
                    [[k, v["compiles"], f"{v['seconds']:.1f}", f"{v['rss_growth_mib']:.1f}",
                      f"{v['max_abs_error']:.1e}"] for k, v in compiles.items()])
    if "latency" in args.parts:
        latency = latency_figures([int(s) for s in args.latency_sizes.split(",")], args.pairs)
        print_latency(latency)
    if args.json:
        write_json(args.json, {"compiles": compiles, "latency": latency, "machine": machine_summary()})
    return 0


def print_latency(latency: dict) -> None:
    """Part 2's table."""
    print("\nPart 2: per-call latency (median of alternating blocks), float32, 2 threads\n")
    print_table(["function", "symbolic us", "specialized us", "numpy us", "torch eager us", "symbolic/specialized",
                 "GFLOP/s (% of peak)"],
                [[k, f"{v['symbolic_us']:.1f}", f"{v['specialized_us']:.1f}", f"{v['numpy_us']:.1f}",
                  f"{v['torch eager_us']:.1f}", f"{v['symbolic_over_specialized']:.2f}",
                  f"{v['symbolic_gflops']:.1f} ({100 * v['symbolic_gflops'] / v['peak_gflops']:.1f}%)"
                  if v["symbolic_gflops"] else "-"] for k, v in latency.items()])


if __name__ == "__main__":
    sys.exit(main())
