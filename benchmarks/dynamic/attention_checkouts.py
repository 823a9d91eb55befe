"""BERT-base's fused attention alone (12 heads of 64 sliced from one Q/K/V projection, a padding mask, a
run-time length) per call in two tensorkiln checkouts, in alternating blocks.

    OMP_WAIT_POLICY=passive python benchmarks/dynamic/attention_checkouts.py --checkouts base=PATH,new=PATH
        [--samples 128,384] [--rounds 21]

Each checkout compiles the same function with `tk.jit(..., dynamic=...)` in its own process (one
program for every length); the parent asks each in turn for a block of about 0.4 s of calls at one
length (the order reversed every round) and prints the medians and the median of the per-round
ratios to the first checkout. On a machine shared with other jobs read the ratios, not the times.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

HEADS, HEAD = 12, 64
BLOCK_SECONDS = 0.4


def attention(x, m):
    """softmax(q k^T / 8 + m) v, q, k and v the column thirds of x (1, seq, 3 * 768), as BERT's layer."""
    n = x.shape[1]
    heads = lambda t: t.reshape(1, n, HEADS, HEAD).transpose(1, 2)  # noqa: E731
    q, k, v = (heads(x[:, :, i * HEADS * HEAD:(i + 1) * HEADS * HEAD]) for i in range(3))
    return ((q @ k.transpose(-1, -2)) * 0.125 + m).softmax(-1) @ v


def serve() -> None:
    """The child: answer "length calls" lines with the seconds per call of that many calls."""
    import tensorkiln as tk
    f = tk.jit(attention, dynamic={"x": {1: "seq"}, "m": {3: "seq"}})
    rng = np.random.default_rng(0)
    runs = {}
    print("ready", flush=True)
    for line in sys.stdin:
        n, calls = map(int, line.split())
        if n not in runs:
            x = rng.standard_normal((1, n, 3 * HEADS * HEAD)).astype(np.float32)
            m = np.zeros((1, 1, 1, n), np.float32)
            m[..., n - n // 4:] = -10000.0
            runs[n] = (lambda x, m: lambda: f(x, m))(x, m)
            runs[n]()
        start = time.perf_counter()
        for _ in range(calls):
            runs[n]()
        print((time.perf_counter() - start) / calls, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkouts", required="--serve" not in sys.argv, help="name=path,name=path (the first is the base)")
    parser.add_argument("--samples", default="128,384")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    children = {}
    for spec in args.checkouts.split(","):
        name, tree = spec.split("=", 1)
        env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
        children[name] = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve"], env=env,
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tree)
        if children[name].stdout.readline().strip() != "ready":
            raise RuntimeError(f"{name} ({tree}): the child did not start")

    def ask(name: str, n: int, calls: int) -> float:
        children[name].stdin.write(f"{n} {calls}\n")
        children[name].stdin.flush()
        return float(children[name].stdout.readline())

    names = list(children)
    try:
        for n in [int(s) for s in args.samples.split(",")]:
            first = min(ask(name, n, 1) for name in names)
            calls = max(1, int(BLOCK_SECONDS / first))
            times: dict[str, list[float]] = {name: [] for name in names}
            for round_index in range(args.rounds):
                for name in names if round_index % 2 == 0 else names[::-1]:
                    time.sleep(0.05)
                    times[name].append(ask(name, n, calls))
            for name in names:
                ratio = float(np.median([a / b for a, b in zip(times[name], times[names[0]])]))
                print(f"seq {n}  {name:>8}: {np.median(times[name]) * 1e3:8.3f} ms  {name} / {names[0]} {ratio:.3f}")
    finally:
        for child in children.values():
            child.stdin.close()
            child.wait()


if __name__ == "__main__":
    main()
