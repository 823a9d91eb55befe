"""A linear layer's GEMM (x @ w.T, w an input [N, K]): B packed by 8 x 8 register transposes against the
element-wise gather of loop IR, in turns in one process, on BERT-base's and GPT-2's projection shapes.

    python benchmarks/gemm_transposed_pack.py [--threads 2] [--rounds 9] [--json out.json]

Both builds are the same BLIS GEMM (default blocking) but for how each task packs B's micro-panels
(kernels/templates/gemm_transposed_pack.py); the loop-IR build is compiled with the helper switched
off. Weights rotate over 8 copies (more than L2 holds, as a model's weights arrive from memory). Each
round times a block of calls of each build, the order alternating; the table gives the medians in ms,
GFLOP/s (2 flops a multiply-add) and the median of the rounds' ratios (loop-IR time / helper time). With
`--threads 1` the time is the process's CPU time, which waiting for a core on a shared host does not
inflate; with more threads, the wall clock. float32 throughout.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from common import benchmark_arguments, finish, machine_summary, print_table  # noqa: E402

SHAPES = [  # (name, M, K, N): M tokens through a K -> N projection
    ("BERT-base FFN up, 128 tokens", 128, 768, 3072),
    ("BERT-base FFN down, 128 tokens", 128, 3072, 768),
    ("BERT-base Q/K/V/out, 128 tokens", 128, 768, 768),
    ("GPT-2 FFN up, 32 tokens", 32, 768, 3072),
]
COPIES = 8


def builds(m: int, k: int, n: int, x, weights):
    """(helper build, loop-IR build) of x @ w.T, each compiled in a fresh cache."""
    import tensorkiln as tk
    from tensorkiln.kernels.templates import gemm
    made = []
    original = gemm.transposed_pack
    for helper in (True, False):
        os.environ["TENSORKILN_CACHE"] = tempfile.mkdtemp(prefix="tk-transposed-pack-")
        gemm.transposed_pack = original if helper else (lambda *args, **kwargs: None)
        try:
            fn = tk.jit(lambda a, b: a @ b.T)
            fn(x, weights[0])
        finally:
            gemm.transposed_pack = original
        made.append(fn)
    return made


def main() -> int:
    parser = benchmark_arguments(__doc__)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    import numpy as np
    clock = time.process_time if args.threads == 1 else time.perf_counter
    print(machine_summary())
    print(f"{args.threads} thread(s), {'CPU time' if args.threads == 1 else 'wall clock'}, float32, "
          f"medians of {args.rounds} rounds in turns")
    rng = np.random.default_rng(0)
    rows, results = [], []
    for name, m, k, n in SHAPES:
        x = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        weights = [rng.uniform(-1, 1, (n, k)).astype(np.float32) for _ in range(COPIES)]
        helper, loop_ir = builds(m, k, n, x, weights)
        want = x.astype(np.float64) @ weights[1].T.astype(np.float64)
        for fn in (helper, loop_ir):
            assert np.max(np.abs(fn(x, weights[1]).numpy() - want)) < 1e-3 * np.sqrt(k), name
        calls = max(COPIES, int(0.2 / max(2 * m * n * k / 1e11, 1e-5)) // COPIES * COPIES)

        def block(fn):
            start = clock()
            for i in range(calls):
                fn(x, weights[i % COPIES])
            return (clock() - start) / calls

        block(helper), block(loop_ir)  # warm: every weight copy touched, the threads started
        times = {"helper": [], "loop IR": []}
        ratios = []
        for r in range(args.rounds):
            order = ("helper", "loop IR") if r % 2 == 0 else ("loop IR", "helper")
            got = {label: block(helper if label == "helper" else loop_ir) for label in order}
            for label, seconds in got.items():
                times[label].append(seconds)
            ratios.append(got["loop IR"] / got["helper"])
        ms = {label: float(np.median(t)) * 1e3 for label, t in times.items()}
        flops = 2.0 * m * n * k
        ratio = float(np.median(ratios))
        rows.append([name, f"{m}x{k}x{n}", f"{ms['loop IR']:.3f}", f"{ms['helper']:.3f}",
                     f"{flops / ms['loop IR'] / 1e6:.1f}", f"{flops / ms['helper'] / 1e6:.1f}",
                     f"{ratio:.3f}x ({min(ratios):.2f}-{max(ratios):.2f})"])
        results.append({"shape": name, "m": m, "k": k, "n": n, "loop_ir_ms": ms["loop IR"], "helper_ms": ms["helper"],
                        "speedup": ratio})
    print_table(["shape", "M x K x N", "loop IR ms", "helper ms", "loop IR GFLOP/s", "helper GFLOP/s",
                 "loop IR / helper (range)"], rows)
    return finish(args, results)


if __name__ == "__main__":
    sys.exit(main())
