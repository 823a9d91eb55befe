"""The auto-tuner on SGEMM and on GEMM shapes of real models: tuned vs default vs numpy, in one run.

    python benchmarks/tuning.py [--trials 64] [--seconds 60] [--strategy evolutionary] [--json out.json]

For each case the tuner (tensorkiln.tune.tune_workload) searches the GEMM
template's space with at most --trials candidates and --seconds of tuning,
every candidate measured in a worker subprocess against the default in
turns, into a fresh records file. Then, in this process and in turns
(tensorkiln.tools.timing.interleaved_medians, medians), three functions
compute the same float32 product: tensorkiln with the analytic blocking
("default"), tensorkiln with the tuned one ("tuned"), and numpy's matmul
(OpenBLAS, all threads). Figures are GFLOP/s (2 flops per multiply-add) and
ratios, plus the fraction of the machine's FMA peak measured by
benchmarks/kernels.py's probe. A case whose search found nothing faster
keeps the default (tuned = default).

TVM MetaSchedule is not measured here (see docs/tuning.md).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import tensorkiln as tk  # noqa: E402
from tensorkiln.kernels.templates.gemm import gemm_workload  # noqa: E402
from tensorkiln.kernels.tuned import using_configs  # noqa: E402
from tensorkiln.tools.timing import interleaved_medians  # noqa: E402
from tensorkiln.tune import tune_workload  # noqa: E402

from common import machine_summary, print_table, write_json  # noqa: E402

# name, M, N, K, B constant (a layer's weights, laid out in panels at compile time)
CASES = [
    ("SGEMM 1024", 1024, 1024, 1024, False),
    ("SGEMM 2048", 2048, 2048, 2048, False),
    ("BERT-base FFN in (128x768 @ 768x3072, weights)", 128, 3072, 768, True),
    ("BERT-base FFN out (128x3072 @ 3072x768, weights)", 128, 768, 3072, True),
    ("ResNet-18 layer3 3x3 as GEMM (196x2304 @ 2304x256)", 196, 256, 2304, False),
]


def compiled(m: int, n: int, k: int, panels: bool, b: np.ndarray, table: dict):
    """x @ B compiled under these configurations (B a constant when `panels`); a callable of x."""
    with using_configs(table):
        if panels:
            weights = tk.tensor(b)
            fn = tk.jit(lambda x: x @ weights)
            fn(np.zeros((m, k), np.float32))
            return fn
        fn = tk.jit(lambda x, y: x @ y)
        fn(np.zeros((m, k), np.float32), b)
        return lambda x: fn(x, b)


def run_case(name: str, m: int, n: int, k: int, panels: bool, args) -> dict:
    key = gemm_workload(m, n, k, "float32", panels)
    start = time.monotonic()
    result = tune_workload(key, trials=args.trials, seconds=args.seconds, strategy=args.strategy)
    tuning_seconds = time.monotonic() - start
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    default = compiled(m, n, k, panels, b, {})
    tuned = compiled(m, n, k, panels, b, {key: result.best_config} if result.tuned else {})
    want = a.astype(np.float64) @ b
    for fn in (default, tuned):
        assert np.abs(fn(a).numpy() - want).max() <= 1e-5 * k, name
    medians = interleaved_medians({"default": lambda: default(a), "tuned": lambda: tuned(a),
                                   "numpy": lambda: a @ b}, repeat=22, rounds=11)
    gflops = {who: 2 * m * n * k / s / 1e9 for who, s in medians.items()}
    return {"case": name, "workload": key, "trials": len(result.trials), "tuning_seconds": tuning_seconds,
            "tuned": result.tuned, "best_config": result.best_config, "default_config": result.default_config,
            "failed_trials": len(result.failures), "gflops": gflops, "cost_model": result.cost_model,
            "search_ratio": result.best_seconds / result.default_seconds,
            "convergence": [best / result.default_seconds for _, best in result.convergence()]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--strategy", default="evolutionary")
    parser.add_argument("--cases", nargs="*", type=int, help="indices into CASES (default: all)")
    parser.add_argument("--json")
    args = parser.parse_args()
    from kernels import measure_limits
    peak = measure_limits(5)["peak_gflops"]
    os.environ["TENSORKILN_TUNING_RECORDS"] = os.path.join(tempfile.mkdtemp(prefix="tk-tuning-"), "records.jsonl")
    print(f"auto-tuner, {machine_summary()}; FMA peak {peak:.0f} GFLOP/s; float32; at most {args.trials} trials and "
          f"{args.seconds:.0f} s of tuning per case ({args.strategy}); GFLOP/s are medians of turns")
    rows, results = [], []
    for index, case in enumerate(CASES):
        if args.cases and index not in args.cases:
            continue
        r = run_case(*case, args)
        results.append(r)
        g = r["gflops"]
        rows.append([r["case"], f"{g['default']:.0f}", f"{g['tuned']:.0f}", f"{g['numpy']:.0f}",
                     f"{g['tuned'] / g['default']:.2f}", f"{g['tuned'] / g['numpy']:.2f}",
                     f"{g['default'] / g['numpy']:.2f}", f"{g['tuned'] / peak:.0%}",
                     f"{1 / r['search_ratio']:.2f}", f"{r['trials']} / {r['tuning_seconds']:.0f} s"])
        print(f"  {r['case']}: best {r['best_config']} (default {r['default_config']}), "
              f"{r['failed_trials']} failed, cost model: {r['cost_model']}", flush=True)
    print_table(["case", "default", "tuned", "numpy", "tuned/default", "tuned/numpy", "default/numpy", "of peak",
                 "search speedup", "trials / time"], rows)
    print("search speedup: default time / best time as the tuner confirmed it (worker, in turns); 1.00: the "
          "default was kept")
    improvements = [r["gflops"]["tuned"] / r["gflops"]["default"] for r in results]
    if improvements:
        print(f"median improvement over the default: {statistics.median(improvements):.2f}x")
    if args.json:
        write_json(args.json, {"peak_gflops": peak, "cases": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
