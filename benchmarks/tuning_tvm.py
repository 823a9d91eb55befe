"""The auto-tuner against TVM MetaSchedule at the same trial count: one SGEMM and one convolution, one run.

    python benchmarks/tuning_tvm.py [--trials 32] [--size 512 1024] [--json out.json]
    python benchmarks/tuning_tvm.py --smoke      # 8 trials of a 512 GEMM each: minutes, not hours
    python benchmarks/tuning_tvm.py --full       # 32 trials each of SGEMM 512 and 1024, no convolution


For each case both tuners get `--trials` measured candidates: tensorkiln's
(tk.tune: evolutionary search with its cost model, candidates timed in a
worker against the default in turns) and MetaSchedule's (`tune_tir` with
max_trials_global = --trials, its evolutionary search, XGBoost cost model,
a local builder with one worker process and a local runner, no RPC; target
llvm -mcpu=znver4 with this machine's cores). MetaSchedule's defaults are
sized for a large machine (one build process per core, an evolutionary
population of 512 ranked over 4 generations before the first measurement):
on 2 loaded cores that alone took tens of minutes, so the population and
its first unmeasured sample are cut to what `--trials` can use (named in
the output); both tuners' tasks (the TE functions, tensorkiln's traced
function) are made before either clock starts.
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


def search_settings(trials: int) -> dict:
    """MetaSchedule's evolutionary search sized for `trials` measurements (its population, the unmeasured
    sample it starts from, generations), with a one-process local builder and a local runner."""
    return {"population_size": max(64, 4 * trials), "init_min_unmeasured": max(16, trials),
            "genetic_num_iters": 2 if trials <= 16 else 4, "num_trials_per_iter": min(trials, 16),
            "builder_workers": 1}


def tvm_tuned(tvm, ms, prim_func, trials: int):
    """MetaSchedule's best build of `prim_func` after `trials` trials, and the tuning seconds."""
    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": os.cpu_count() or 1})
    settings = search_settings(trials)
    strategy = ms.search_strategy.EvolutionarySearch(population_size=settings["population_size"],
                                                     init_min_unmeasured=settings["init_min_unmeasured"],
                                                     genetic_num_iters=settings["genetic_num_iters"])
    # generous timeouts: on a loaded machine one LLVM build of a candidate took minutes of wall time
    builder = ms.builder.LocalBuilder(max_workers=settings["builder_workers"], timeout_sec=900)
    runner = ms.runner.LocalRunner(timeout_sec=300, evaluator_config=ms.runner.EvaluatorConfig(
        number=3, repeat=1, min_repeat_ms=20))
    start = time.monotonic()
    work_dir = tempfile.mkdtemp(prefix="tk-metaschedule-")  # kept: its logs say why a candidate failed
    database = ms.tune_tir(prim_func, target, work_dir, max_trials_global=trials,
                           num_trials_per_iter=settings["num_trials_per_iter"], builder=builder, runner=runner,
                           strategy=strategy, num_tuning_cores=os.cpu_count() or 1, seed=0)
    schedule = ms.tir_integration.compile_tir(database, prim_func, target)
    seconds = time.monotonic() - start
    note(f"TVM tuned in {seconds:.0f} s")
    if schedule is None:
        raise NoSchedule(f"MetaSchedule measured no valid candidate in {trials} trials and {seconds:.0f} s "
                         f"(build or run errors: {work_dir}/logs)")
    return tvm.compile(schedule.mod, target=target)["main"], seconds


class NoSchedule(RuntimeError):
    """MetaSchedule ended without one candidate that built and ran."""


def note(text: str) -> None:
    """A progress line on stderr with the time of day (a slow phase is visible while it runs)."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def sgemm_case(tvm, ms, n: int, trials: int, rounds: int = 11) -> dict:
    from tvm import te
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    A, B = te.placeholder((n, n), "float32", name="A"), te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    prim_func = te.create_prim_func([A, B, C])
    f = tk.jit(lambda x, y: x @ y)
    f.report(a, b)  # traced and compiled untuned before the clock starts, as TVM's task is made before its own
    note(f"SGEMM {n}: TVM MetaSchedule, {trials} trials")
    tvm_fn, tvm_seconds = tvm_tuned(tvm, ms, prim_func, trials)
    dev = tvm.cpu()
    ta, tb = tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev)
    tc = tvm.runtime.tensor(np.zeros((n, n), np.float32), dev)

    note(f"SGEMM {n}: tensorkiln, {trials} trials")
    start = time.monotonic()
    result = tk.tune(f, a, b, trials=trials)
    tk_seconds = time.monotonic() - start
    note(f"tensorkiln tuned in {tk_seconds:.0f} s")
    f(a, b)
    want = a.astype(np.float64) @ b
    tvm_fn(ta, tb, tc)
    for got in (f(a, b).numpy(), tc.numpy()):
        assert np.abs(got - want).max() <= 1e-5 * n
    times = interleaved_medians({"tensorkiln": lambda: f(a, b), "tvm": lambda: tvm_fn(ta, tb, tc),
                                 "peer": lambda: a @ b}, repeat=10, rounds=rounds)
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


def print_case(c: dict, trials: int) -> None:
    """One case's line as soon as it is measured."""
    t = c["times"]
    print(f"{c['case']}: tensorkiln {t['tensorkiln'] * 1e3:.2f} ms, TVM {t['tvm'] * 1e3:.2f} ms, {c['peer']} "
          f"{t['peer'] * 1e3:.2f} ms; tk/TVM speed ratio at {trials} trials each {t['tvm'] / t['tensorkiln']:.2f}; "
          f"tuning {c['tk_tuning_seconds']:.0f} s (tk), {c['tvm_tuning_seconds']:.0f} s (TVM)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--size", type=int, nargs="+", default=[1024], help="SGEMM sizes, one case each")
    parser.add_argument("--skip-conv", action="store_true")
    parser.add_argument("--smoke", action="store_true",
                        help="8 trials of a 512 GEMM for each tuner, no convolution, 5 rounds of turns")
    parser.add_argument("--full", action="store_true",
                        help="32 trials of SGEMM 512 and of SGEMM 1024 for each tuner, no convolution")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.smoke:
        args.trials, args.size, args.skip_conv = 8, [512], True
    elif args.full:
        args.trials, args.size, args.skip_conv = 32, [512, 1024], True
    found, reason = tvm_or_reason()
    if found is None:
        print(f"tuning_tvm: skipped: {reason}")
        return 0
    tvm, ms = found
    os.environ["TENSORKILN_TUNING_RECORDS"] = os.path.join(tempfile.mkdtemp(prefix="tk-tuning-"), "records.jsonl")
    settings = search_settings(args.trials)
    print(f"tensorkiln's tuner against TVM {tvm.__version__} MetaSchedule, {args.trials} trials each; "
          f"{machine_summary()}; float32; ms per call are medians of turns")
    print(f"MetaSchedule: evolutionary population {settings['population_size']}, first sample "
          f"{settings['init_min_unmeasured']} unmeasured, {settings['genetic_num_iters']} generations, "
          f"{settings['num_trials_per_iter']} per round, local builder with {settings['builder_workers']} process")
    cases = []
    try:
        for size in args.size:
            cases.append(sgemm_case(tvm, ms, size, args.trials, rounds=5 if args.smoke else 11))
            print_case(cases[-1], args.trials)  # at once: a later, larger case may not finish
        if not args.skip_conv:
            cases.append(conv_case(tvm, ms, args.trials))
    except NoSchedule as err:
        print(f"tuning_tvm: no TVM figure: {err}")
        return 1
    rows = []
    for c in cases:
        t = c["times"]
        rows.append([c["case"], f"{t['tensorkiln'] * 1e3:.2f}", f"{t['tvm'] * 1e3:.2f}",
                     f"{c['peer']}: {t['peer'] * 1e3:.2f}", f"{t['tvm'] / t['tensorkiln']:.2f}",
                     f"{t['peer'] / t['tensorkiln']:.2f}", f"{c['tk_trials']} / {c['tk_tuning_seconds']:.0f} s",
                     f"{c['tvm_trials']} / {c['tvm_tuning_seconds']:.0f} s"])
    print_table(["case", "tensorkiln ms", "TVM ms", "peer ms", "TVM / tk", "peer / tk", "tk trials / time",
                 "TVM trials / time"], rows)
    for c in cases:
        t = c["times"]
        print(f"{c['case']}: tk/TVM speed ratio at {args.trials} trials each: {t['tvm'] / t['tensorkiln']:.2f} "
              "(TVM's time over tensorkiln's; above 1: tensorkiln faster)")
    if args.json:
        write_json(args.json, {"trials": args.trials, "cases": cases})
    return 0


if __name__ == "__main__":
    sys.exit(main())
