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
from common import (benchmark_arguments, bf16_rounded, finish, print_bf16_header, time_bf16_case,  # noqa: E402
                    torch_peer)

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
    torch = torch_peer(args.threads)
    print_bf16_header("fused attention", args.threads, "case", 26)
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
        runs = {"tk bf16": lambda: bf16(q, k, v), "tk fp32": lambda: fp32(q, k, v),
                "torch bf16": lambda: sdpa(bq, bk, bv, is_causal=causal),
                "torch fp32": lambda: sdpa(tq, tk_, tv, is_causal=causal)}
        results.append({"case": name, **time_bf16_case(name, 26, 4 * b * h * n * n * d, runs, error)})
    return finish(args, results, all(r["max_rel_error"] < 1e-2 for r in results))


if __name__ == "__main__":
    sys.exit(main())
