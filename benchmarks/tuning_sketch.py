"""The auto-tuner on kernels without a template (schedule sketches): tuned vs default vs torch, one run.

    python benchmarks/tuning_sketch.py [--trials 32] [--seconds 60] [--json out.json]

Each case is a function whose kernels have no tuned template: BERT-base's
layer norm (batch 1, sequence 128, with the residual add), the softmax of
its attention scores (12 heads, 128 x 128) and the row sums of a
4096 x 1024 matrix. Every sketch workload of the compiled function
(kernels/sketch.py: fuse, tile, unroll, grain, parallel, rfactor over the
default loop nest) is tuned by tensorkiln.tune.tune_workload with at most
--trials candidates and --seconds each, measured in a worker against the
default in turns, into a fresh records file. Then, in this process and in
turns (interleaved_medians, medians of 11 rounds), three functions compute
the same float32 result: tensorkiln untuned ("default"), tensorkiln with the
records ("tuned") and torch 2 threads (its own layer_norm, softmax and sum
kernels). Figures are microseconds per call and ratios; "search speedup" is
the tuner's confirmed default/best ratio (1.00: the default was kept).
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
from tensorkiln.tune import tune_workload  # noqa: E402
from tensorkiln.tune.api import workload_uses  # noqa: E402

from common import machine_summary, print_table, write_json  # noqa: E402


def cases():
    """(name, tensorkiln function, torch function, inputs)."""
    import torch
    rng = np.random.default_rng(0)
    x, r = (rng.standard_normal((1, 128, 768)).astype(np.float32) for _ in range(2))
    gamma, beta = rng.uniform(0.5, 1.5, 768).astype(np.float32), rng.standard_normal(768).astype(np.float32)
    g, b = tk.tensor(gamma), tk.tensor(beta)
    tg, tb = torch.from_numpy(gamma), torch.from_numpy(beta)
    scores = rng.standard_normal((1, 12, 128, 128)).astype(np.float32)
    wide = rng.standard_normal((4096, 1024)).astype(np.float32)
    return [
        ("BERT-base layer norm (x + residual), 128x768", lambda a, c: F.layer_norm(a + c, (768,), g, b),
         lambda a, c: torch.nn.functional.layer_norm(a + c, (768,), tg, tb), [x, r]),
        ("BERT-base attention softmax, 12x128x128", lambda s: F.softmax(s, -1),
         lambda s: torch.softmax(s, -1), [scores]),
        ("row sums, 4096x1024", lambda a: a.sum(axis=1), lambda a: a.sum(dim=1), [wide]),
    ]


def run_case(name, fn, torch_fn, inputs, args) -> dict:
    import torch
    torch.set_num_threads(2)
    with using_configs({}):
        default = tk.jit(fn)
        default(*inputs)
    uses = [w for w in workload_uses(tk.jit(fn), *inputs) if w.startswith("sketch:")]
    start = time.monotonic()
    results = [tune_workload(w, trials=args.trials, seconds=args.seconds) for w in uses]
    seconds = time.monotonic() - start
    tuned = tk.jit(fn)
    want = default(*inputs).numpy()
    assert np.allclose(tuned(*inputs).numpy(), want, rtol=1e-4, atol=1e-4), name
    tensors = [torch.from_numpy(a) for a in inputs]
    assert np.allclose(torch_fn(*tensors).numpy(), want, rtol=1e-3, atol=1e-3), name
    times = interleaved_medians({"default": lambda: default(*inputs), "tuned": lambda: tuned(*inputs),
                                 "torch": lambda: torch_fn(*tensors)}, repeat=50, rounds=11)
    return {"case": name, "times": times, "workloads": uses, "tuning_seconds": seconds,
            "trials": sum(len(r.trials) for r in results),
            "search_speedup": [r.speedup if r.tuned else 1.0 for r in results],
            "best": [r.best_config if r.tuned else "default" for r in results]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--json")
    args = parser.parse_args()
    os.environ["TENSORKILN_TUNING_RECORDS"] = os.path.join(tempfile.mkdtemp(prefix="tk-tuning-"), "records.jsonl")
    print(f"schedule sketches, {machine_summary()}; float32; at most {args.trials} trials and {args.seconds:.0f} s "
          "per workload; us per call are medians of turns; torch: 2 threads")
    rows, results = [], []
    for case in cases():
        r = run_case(*case, args)
        results.append(r)
        t = {k: v * 1e6 for k, v in r["times"].items()}
        rows.append([r["case"], f"{t['default']:.1f}", f"{t['tuned']:.1f}", f"{t['torch']:.1f}",
                     f"{t['default'] / t['tuned']:.2f}", f"{t['torch'] / t['tuned']:.2f}",
                     " ".join(f"{s:.2f}" for s in r["search_speedup"]), f"{r['trials']} / {r['tuning_seconds']:.0f} s"])
        print(f"  {r['case']}: {len(r['workloads'])} sketch workload(s), best {r['best']}", flush=True)
    print_table(["case", "default us", "tuned us", "torch us", "tuned speedup", "torch / tuned", "search speedup",
                 "trials / time"], rows)
    if args.json:
        write_json(args.json, {"cases": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
