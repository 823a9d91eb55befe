"""BERT-base's fused attention alone (12 heads of 64 sliced from one Q/K/V projection, a padding mask, a
run-time length) per call in two tensorkiln checkouts, in alternating blocks.

    OMP_WAIT_POLICY=passive python benchmarks/dynamic/attention_checkouts.py --checkouts base=PATH,new=PATH
        [--samples 128,384] [--rounds 21] [--causal]

--causal times a decoder's attention instead: `scaled_dot_product_attention(q, k, v, is_causal=True)`
on q, k and v of (1, 12, seq, 64), the length a run-time value.

Each checkout compiles the same function with `tk.jit(..., dynamic=...)` in its own process (one
program for every length); the parent asks each in turn for a block of about 0.4 s of calls at one
length (the order reversed every round) and prints the medians and the median of the per-round
ratios to the first checkout. On a machine shared with other jobs read the ratios, not the times.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkout_turns import compare_in_turns, start_children  # noqa: E402

HEADS, HEAD = 12, 64
BLOCK_SECONDS = 0.4


def attention(x, m):
    """softmax(q k^T / 8 + m) v, q, k and v the column thirds of x (1, seq, 3 * 768), as BERT's layer."""
    n = x.shape[1]
    heads = lambda t: t.reshape(1, n, HEADS, HEAD).transpose(1, 2)  # noqa: E731
    q, k, v = (heads(x[:, :, i * HEADS * HEAD:(i + 1) * HEADS * HEAD]) for i in range(3))
    return ((q @ k.transpose(-1, -2)) * 0.125 + m).softmax(-1) @ v


def causal_attention(q, k, v):
    """A decoder's attention: softmax over the keys up to each query's position."""
    import tensorkiln.nn.functional as F
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def serve(causal: bool) -> None:
    """The child: answer "length calls" lines with the seconds per call of that many calls."""
    import tensorkiln as tk
    if causal:
        f = tk.jit(causal_attention, dynamic={name: {2: "seq"} for name in ("q", "k", "v")})
    else:
        f = tk.jit(attention, dynamic={"x": {1: "seq"}, "m": {3: "seq"}})
    rng = np.random.default_rng(0)
    runs = {}
    print("ready", flush=True)
    for line in sys.stdin:
        n, calls = map(int, line.split())
        if n not in runs:
            if causal:
                args = tuple(rng.standard_normal((1, HEADS, n, HEAD)).astype(np.float32) for _ in range(3))
            else:
                x = rng.standard_normal((1, n, 3 * HEADS * HEAD)).astype(np.float32)
                m = np.zeros((1, 1, 1, n), np.float32)
                m[..., n - n // 4:] = -10000.0
                args = (x, m)
            runs[n] = (lambda args: lambda: f(*args))(args)
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
    parser.add_argument("--causal", action="store_true", help="a decoder's causal attention instead of BERT's")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.causal)
        return
    children = start_children(args.checkouts, __file__, ["--causal"] if args.causal else [])
    compare_in_turns(children, args.samples.split(","), args.rounds, BLOCK_SECONDS, label="seq {key}")

if __name__ == "__main__":
    main()
