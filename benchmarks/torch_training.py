"""Training step time through torch.compile: tensorkiln against eager PyTorch and Inductor, in one run.

    python benchmarks/torch_training.py [--steps 30] [--rounds 5] [--json FILE]

One model (an MLP block as in a transformer: Linear 256->1024, GELU, Linear
1024->256, LayerNorm, a 10-class head; batch 64; AdamW) is trained by each
framework from the same weights: eager PyTorch, `torch.compile` with Inductor
(default settings), and `torch.compile(backend="tensorkiln")` (AOTAutograd's
forward and backward graphs compiled to C). Each framework's compile time (the
first steps) is measured apart; then the step time (zero_grad, forward, loss,
backward, optimizer step) is measured in turns, `--rounds` blocks of `--steps`
steps per framework, and reported as the median step. The losses of the three
are checked to agree. Figures are float32 and include the optimizer step, which
runs eagerly in all three. Against the machine's peak: the matmul FLOPs of a step
(forward and the two backward products) per second over the peak FMA rate.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import machine_summary, print_table, write_json  # noqa: E402
from benchmarks.kernels import measure_limits  # noqa: E402

BATCH, WIDTH, HIDDEN, CLASSES = 64, 256, 1024, 10


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(WIDTH, HIDDEN)
        self.down = torch.nn.Linear(HIDDEN, WIDTH)
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.head = torch.nn.Linear(WIDTH, CLASSES)

    def forward(self, x):
        return self.head(self.norm(x + self.down(torch.nn.functional.gelu(self.up(x)))))


def step_flops() -> float:
    forward = 2 * BATCH * (WIDTH * HIDDEN * 2 + WIDTH * CLASSES)
    return 3 * forward  # the backward pass computes two products per forward one


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.manual_seed(0)
    base = Block()
    batches = [(torch.randn(BATCH, WIDTH), torch.randint(0, CLASSES, (BATCH,))) for _ in range(8)]
    runs = {}
    for name, backend in (("eager PyTorch", None), ("torch.compile inductor (default)", "inductor"),
                          ("tensorkiln", "tensorkiln")):
        model = copy.deepcopy(base)
        forward = model if backend is None else torch.compile(model, backend=backend)
        runs[name] = (model, forward, torch.optim.AdamW(model.parameters(), lr=1e-3), [])

    def make_step(model, forward, optimizer, losses):
        counter = [0]

        def step():
            x, y = batches[counter[0] % len(batches)]
            counter[0] += 1
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(forward(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return step

    steps = {name: make_step(*run) for name, run in runs.items()}
    compile_seconds = {}
    for name, step in steps.items():
        start = time.perf_counter()
        step()
        step()
        compile_seconds[name] = time.perf_counter() - start
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            for _ in range(args.steps):
                start = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - start)
    losses = {name: run[3] for name, run in runs.items()}
    agree = all(np.allclose(losses[n], losses["eager PyTorch"], rtol=1e-3, atol=1e-4) for n in losses)
    peak = measure_limits(3)["peak_gflops"]
    eager = float(np.median(times["eager PyTorch"]))
    rows, results = [], {}
    for name in steps:
        median = float(np.median(times[name]))
        gflops = step_flops() / median / 1e9
        results[name] = {"step_ms": median * 1e3, "first_two_steps_s": compile_seconds[name],
                         "vs_eager": eager / median, "gflops": gflops, "of_peak": gflops / peak}
        rows.append([name, f"{median * 1e3:.2f}", f"{eager / median:.2f}x", f"{gflops:.1f}",
                     f"{gflops / peak:.1%}", f"{compile_seconds[name]:.1f}"])
    print(f"training step, batch {BATCH}, {WIDTH}->{HIDDEN}->{WIDTH} MLP block + LayerNorm + head, AdamW, "
          f"float32; {machine_summary()}; peak {peak:.0f} GFLOP/s")
    print_table(["framework", "step ms (median)", "vs eager", "GFLOP/s", "of peak", "first 2 steps s"], rows)
    print(f"losses agree: {agree} (after {len(losses['eager PyTorch'])} steps each)")
    if args.json:
        write_json(args.json, {"results": results, "peak_gflops": peak, "losses_agree": agree})
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
