"""Training-mode dropout and uniform draws: tensorkiln's Philox in generated C against PyTorch's generators.

    OMP_WAIT_POLICY=passive python benchmarks/random_numbers.py [--rows 256] [--cols 4096] [--pairs 8] [--json FILE]

Peers, each at its default (strongest CPU) settings, float32, in the same run:
eager PyTorch (`F.dropout(x, 0.1, training=True)` and `torch.rand`: its CPU
Mersenne twister, all threads it wants), torch.compile with Inductor (default
settings: its own generator in generated C++) and torch.compile with tensorkiln
(Philox4x32-10). Blocks of calls run in turns, order reversed every round
(tools/timing.alternating_blocks); the table prints median times, the ratio to
eager PyTorch, and the bytes each call moves against the machine's copy bandwidth
measured in the same run (numpy copying an array of the same size), the limit of
a kernel that reads and writes memory once. The numbers differ between the three
(three generators); their distributions are the same.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import machine_summary, print_table, write_json  # noqa: E402
from tensorkiln.tools.timing import alternating_blocks  # noqa: E402
import tensorkiln  # noqa: E402,F401  (registers the "tensorkiln" backend)

F = torch.nn.functional


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    x = torch.randn(args.rows, args.cols)

    def dropout(t):
        return F.dropout(t, 0.1, training=True)

    def uniform(t):
        return torch.rand(t.shape)

    source, target = x.numpy().copy(), np.empty_like(x.numpy())
    results = {}
    with torch.no_grad():
        for name, fn, moved in (("dropout", dropout, 2 * x.numel() * 4), ("rand", uniform, x.numel() * 4)):
            runs = {"eager PyTorch": lambda fn=fn: fn(x),
                    "torch.compile Inductor": lambda c=torch.compile(fn): c(x),
                    "torch.compile tensorkiln": lambda c=torch.compile(fn, backend="tensorkiln"): c(x),
                    "numpy copy (bandwidth)": lambda: np.copyto(target, source)}
            for run in runs.values():
                run()  # compile outside the timed blocks
            blocks = alternating_blocks(runs, pairs=args.pairs)
            medians = {k: float(np.median(v)) for k, v in blocks.items()}
            bandwidth = 2 * x.numel() * 4 / medians["numpy copy (bandwidth)"]
            results[name] = {"seconds": medians, "bytes": moved, "copy_bandwidth_bytes_per_s": bandwidth}
            rows = [[k, f"{s * 1e3:.2f} ms", f"{medians['eager PyTorch'] / s:.2f}x",
                     f"{moved / s / 1e9:.1f} GB/s", f"{moved / s / bandwidth:.0%}"]
                    for k, s in medians.items() if k != "numpy copy (bandwidth)"]
            print(f"\n{name}: float32 [{args.rows}, {args.cols}], median of {args.pairs} alternating blocks; "
                  f"copy bandwidth {bandwidth / 1e9:.1f} GB/s")
            print_table(["framework", "time", "vs eager", "bytes moved/s", "of copy bandwidth"], rows)
    print(f"\n{machine_summary()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
