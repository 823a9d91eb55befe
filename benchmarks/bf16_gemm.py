"""bf16 GEMM (vdpbf16ps) against tensorkiln's fp32 GEMM and torch.matmul, on the same shapes, in one run.

    python benchmarks/bf16_gemm.py [--threads 2] [--json out.json]

Each case is `x @ W` with W a constant (a linear layer's weight), compiled by
tk.jit twice: with precision="fp32" and with precision="bf16" (operands
rounded to bfloat16, float32 accumulation; W packed once at compile time as
bf16 pairs). torch.matmul in float32 and in bfloat16 (its own CPU kernels)
is the peer. Timed in turns (tensorkiln.tools.timing.interleaved_medians),
medians; figures are GFLOP/s (2 flops per multiply-add). The bf16 result is
checked against a float64 product of the bf16-rounded operands.
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorkiln as tk  # noqa: E402
from common import (benchmark_arguments, bf16_rounded, finish, print_bf16_header, time_bf16_case,  # noqa: E402
                    torch_peer)

# BERT-base's projections at sequence 128, its FFN, and a square case.
SHAPES = [(128, 768, 768), (128, 768, 3072), (128, 3072, 768), (512, 512, 512)]


def main() -> int:
    args = benchmark_arguments(__doc__).parse_args()  # sets OMP_NUM_THREADS before OpenMP loads
    torch = torch_peer(args.threads)
    print_bf16_header("bf16 GEMM", args.threads, "M x K x N", 18)
    rng = np.random.default_rng(0)
    results = []
    for m, k, n in SHAPES:
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = tk.tensor((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
        fp32, bf16 = tk.jit(lambda a: a @ w), tk.jit(lambda a: a @ w, precision="bf16")
        got = bf16(x).numpy()
        want = bf16_rounded(x).astype(np.float64) @ bf16_rounded(w.numpy()).astype(np.float64)
        error = float(np.abs(got - want).max() / np.abs(want).max())
        tx, tw = torch.from_numpy(x), torch.from_numpy(w.numpy())
        bx, bw = tx.to(torch.bfloat16), tw.to(torch.bfloat16)
        fp32(x)
        runs = {"tk bf16": lambda: bf16(x), "tk fp32": lambda: fp32(x), "torch bf16": lambda: torch.matmul(bx, bw),
                "torch fp32": lambda: torch.matmul(tx, tw)}
        results.append({"shape": [m, k, n], **time_bf16_case(f"{m} x {k} x {n}", 18, 2 * m * k * n, runs, error)})
    return finish(args, results, all(r["max_rel_error"] < 1e-3 for r in results))


if __name__ == "__main__":
    sys.exit(main())
