"""The auto-tuner against TVM MetaSchedule at the same trial count: one SGEMM and one convolution, one run.

    python benchmarks/tuning_tvm.py [--trials 32] [--size 1024] [--json out.json]

For each case both tuners get `--trials` measured candidates: tensorkiln's
(tk.tune: evolutionary search with its cost model, candidates timed in a
worker against the default in turns) and MetaSchedule's (`tune_tir` with
max_trials_global = --trials, its evolutionary search, XGBoost cost model
and local runner; target llvm -mcpu=znver4 with this machine's cores).
Then, in this process and in turns (interleaved_medians), the three compiled
functions run the same float32 computation: tensorkiln tuned, TVM tuned and
numpy (matmul: OpenBLAS, all threads; the convolution: tensorkiln untuned,
there being no numpy convolution worth naming). Figures are milliseconds
per call (medians) and ratios; tuning wall time is reported for both.

Needs apache-tvm (pip install tensorkiln[tvm]); without it the benchmark says
so and exits 0. The tvm-ffi pin of that extra matters: apache-tvm 0.27 with
apache-tvm-ffi 0.1.15 crashes in ToJSONGraph when MetaSchedule saves a module.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import tensorkiln as tk  # noqa: E402
import tensorkiln.nn.functional as F  # noqa: E402
from tensorkiln.kernels.tuned import using_configs  # noqa: E402
from tensorkiln.tools.timing import interleaved_medians  # noqa: E402

from common import machine_summary, print_table, write_json  # noqa: E402


def tvm_or_reason():
    """(the tvm module, its MetaSchedule) or (None, why not)."""
    try:
        import tvm
        from tvm.s_tir import meta_schedule
    except ImportError as err:
        return None, f"apache-tvm is not installed ({err}); pip install tensorkiln[tvm]"
    if tvm.support.libinfo().get("USE_LLVM") in (None, "OFF"):
        return None, "this apache-tvm was built without LLVM: no CPU target"
    return (tvm, meta_schedule), ""


def tvm_tuned(tvm, ms, prim_func, trials: int):
    """MetaSchedule's best build of `prim_func` after `trials` trials, and the tuning seconds."""
    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": os.cpu_count() or 1})
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as work_dir:
        database = ms.tune_tir(prim_func, target, work_dir, max_trials_global=trials,
                               num_trials_per_iter=min(trials, 16))
        schedule = ms.tir_integration.compile_tir(database, prim_func, target)
    seconds = time.monotonic() - start
    return tvm.compile(schedule.mod, target=target)["main"], seconds


def sgemm_case(tvm, ms, n: int, trials: int) -> dict:
    from tvm import te
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    A, B = te.placeholder((n, n), "float32", name="A"), te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    tvm_fn, tvm_seconds = tvm_tuned(tvm, ms, te.create_prim_func([A, B, C]), trials)
    dev = tvm.cpu()
    ta, tb = tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev)
    tc = tvm.runtime.tensor(np.zeros((n, n), np.float32), dev)

    f = tk.jit(lambda x, y: x @ y)
    start = time.monotonic()
    result = tk.tune(f, a, b, trials=trials)
    tk_seconds = time.monotonic() - start
    f(a, b)
    want = a.astype(np.float64) @ b
    tvm_fn(ta, tb, tc)
    for got in (f(a, b).numpy(), tc.numpy()):
        assert np.abs(got - want).max() <= 1e-5 * n
    times = interleaved_medians({"tensorkiln": lambda: f(a, b), "tvm": lambda: tvm_fn(ta, tb, tc),
                                 "peer": lambda: a @ b}, repeat=10, rounds=11)
    return {"case": f"SGEMM {n}", "peer": "numpy", "times": times, "tk_trials": result.trials,
            "tvm_trials": trials, "tk_tuning_seconds": tk_seconds, "tvm_tuning_seconds": tvm_seconds}


# ResNet-18's stage-3 3x3 convolution (256 channels at 14x14, batch 1, padding 1)
CONV = dict(n=1, c=256, h=14, w=14, k=256, r=3)


def conv_case(tvm, ms, trials: int) -> dict:
    from tvm import te, topi
    n, c, h, w, k, r = (CONV[f] for f in ("n", "c", "h", "w", "k", "r"))
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (n, c, h, w)).astype(np.float32)
    wt = rng.uniform(-1, 1, (k, c, r, r)).astype(np.float32)
    X, W = te.placeholder((n, c, h, w), "float32", name="X"), te.placeholder((k, c, r, r), "float32", name="W")
    Y = topi.nn.conv2d_nchw(X, W, 1, 1, 1)
    tvm_fn, tvm_seconds = tvm_tuned(tvm, ms, te.create_prim_func([X, W, Y]), trials)
    dev = tvm.cpu()
    tx, tw = tvm.runtime.tensor(x, dev), tvm.runtime.tensor(wt, dev)
    ty = tvm.runtime.tensor(np.zeros((n, k, h, w), np.float32), dev)

    weights = tk.tensor(wt)

    def layer(inp):
        return F.conv2d(inp, weights, padding=1)
    with using_configs({}):
        untuned = tk.jit(layer)
        untuned(x)
    f = tk.jit(layer)
    start = time.monotonic()
    result = tk.tune(f, x, trials=trials)
    tk_seconds = time.monotonic() - start
    f(x)
    tvm_fn(tx, tw, ty)
    want = untuned(x).numpy()
    for got in (f(x).numpy(), ty.numpy()):
        assert np.abs(got - want).max() <= 1e-3 * np.sqrt(c * r * r), "convolutions disagree"
    times = interleaved_medians({"tensorkiln": lambda: f(x), "tvm": lambda: tvm_fn(tx, tw, ty),
                                 "peer": lambda: untuned(x)}, repeat=20, rounds=11)
    return {"case": f"conv 3x3 {c}->{k} at {h}x{w}", "peer": "tensorkiln untuned", "times": times,
            "tk_trials": result.trials, "tvm_trials": trials, "tk_tuning_seconds": tk_seconds,
            "tvm_tuning_seconds": tvm_seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--skip-conv", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    found, reason = tvm_or_reason()
    if found is None:
        print(f"tuning_tvm: skipped: {reason}")
        return 0
    tvm, ms = found
    os.environ["TENSORKILN_TUNING_RECORDS"] = os.path.join(tempfile.mkdtemp(prefix="tk-tuning-"), "records.jsonl")
    print(f"tensorkiln's tuner against TVM {tvm.__version__} MetaSchedule, {args.trials} trials each; "
          f"{machine_summary()}; float32; ms per call are medians of turns")
    cases = [sgemm_case(tvm, ms, args.size, args.trials)]
    if not args.skip_conv:
        cases.append(conv_case(tvm, ms, args.trials))
    rows = []
    for c in cases:
        t = c["times"]
        rows.append([c["case"], f"{t['tensorkiln'] * 1e3:.2f}", f"{t['tvm'] * 1e3:.2f}",
                     f"{c['peer']}: {t['peer'] * 1e3:.2f}", f"{t['tvm'] / t['tensorkiln']:.2f}",
                     f"{t['peer'] / t['tensorkiln']:.2f}", f"{c['tk_trials']} / {c['tk_tuning_seconds']:.0f} s",
                     f"{c['tvm_trials']} / {c['tvm_tuning_seconds']:.0f} s"])
    print_table(["case", "tensorkiln ms", "TVM ms", "peer ms", "TVM / tk", "peer / tk", "tk trials / time",
                 "TVM trials / time"], rows)
    if args.json:
        write_json(args.json, {"trials": args.trials, "cases": cases})
    return 0


if __name__ == "__main__":
    sys.exit(main())
