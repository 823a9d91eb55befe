"""Fused attention in bf16 (vdpbf16ps pairs) against the float32 kernel and torch's SDPA, in one run.

    python benchmarks/bf16_attention.py [--threads 2] [--json out.json]

Each case is F.scaled_dot_product_attention(q, k, v) compiled by tk.jit with
precision="fp32" and "bf16" (kernels/templates/attention_bf16.py); the peer is
torch.nn.functional.scaled_dot_product_attention in float32 and in bfloat16.
Timed in turns (tensorkiln.tools.timing.interleaved_medians), medians; figures
are GFLOP/s (the two products, 2 flops per multiply-add; a causal case counts
the full matrix). The bf16 result is checked against a float64 attention of
the bf16-rounded operands (its probabilities are rounded to bf16 for P V).
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorkiln as tk  # noqa: E402
import tensorkiln.nn.functional as F  # noqa: E402
from tensorkiln.tools.timing import interleaved_medians  # noqa: E402
from common import benchmark_arguments, bf16_dot_text, bf16_rounded, write_json  # noqa: E402

# (name, batch, heads, sequence, head dim, causal): BERT-base's and GPT-2 small's attention at 128 tokens
CASES = [("BERT-base, seq 128", 1, 12, 128, 64, False), ("GPT-2 prefill, 128 tokens", 1, 12, 128, 64, True),
         ("seq 512, causal", 1, 12, 512, 64, True)]


def _bf16(a: np.ndarray) -> np.ndarray:
    return bf16_rounded(a).astype(np.float64)


def _reference(q, k, v, causal: bool) -> np.ndarray:
    q, k, v = _bf16(q), _bf16(k), _bf16(v)
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tri(s.shape[-2], s.shape[-1], dtype=bool), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def main() -> int:
    args = benchmark_arguments(__doc__).parse_args()  # sets OMP_NUM_THREADS before OpenMP loads
    import torch  # the peer; optional, like every benchmark's peers
    torch.set_num_threads(args.threads)
    print(f"fused attention, {args.threads} threads, vdpbf16ps: {bf16_dot_text()}; "
          f"GFLOP/s, medians of turns")
    print(f"{'case':>26} {'tk bf16':>8} {'tk fp32':>8} {'torch bf16':>10} {'torch fp32':>10} {'bf16/fp32':>9} "
          f"{'max rel err':>11}")
    rng = np.random.default_rng(0)
    results = []
    for name, b, h, n, d, causal in CASES:
        q, k, v = (rng.standard_normal((b, h, n, d)).astype(np.float32) for _ in range(3))
        fn = lambda q, k, v, causal=causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
        fp32, bf16 = tk.jit(fn), tk.jit(fn, precision="bf16")
        want = _reference(q, k, v, causal)
        error = float(np.abs(bf16(q, k, v).numpy() - want).max() / np.abs(want).max())
        fp32(q, k, v)
        tq, tk_, tv = (torch.from_numpy(a) for a in (q, k, v))
        bq, bk, bv = (t.to(torch.bfloat16) for t in (tq, tk_, tv))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        seconds = interleaved_medians({"tk bf16": lambda: bf16(q, k, v), "tk fp32": lambda: fp32(q, k, v),
                                       "torch bf16": lambda: sdpa(bq, bk, bv, is_causal=causal),
                                       "torch fp32": lambda: sdpa(tq, tk_, tv, is_causal=causal)},
                                      repeat=20, rounds=5)
        gflops = {key: 4 * b * h * n * n * d / s / 1e9 for key, s in seconds.items()}
        print(f"{name:>26} {gflops['tk bf16']:8.1f} {gflops['tk fp32']:8.1f} {gflops['torch bf16']:10.1f} "
              f"{gflops['torch fp32']:10.1f} {seconds['tk fp32'] / seconds['tk bf16']:8.2f}x {error:11.1e}")
        results.append({"case": name, "gflops": gflops, "bf16_over_fp32": seconds["tk fp32"] / seconds["tk bf16"],
                        "max_rel_error": error})
    if args.json:
        write_json(args.json, {"threads": args.threads, "results": results})
    return 0 if all(r["max_rel_error"] < 1e-2 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
