"""What the graph optimizer buys, measured: kernels, intermediate traffic, arena size and latency per opt level.

    python benchmarks/graph_optimizer.py [--json out/graph_optimizer.json] [--calls N]

For each model (the demo CNN, a BERT-base encoder layer at seq 128, ResNet-18 at
batch 1): kernels launched and bytes of intermediate memory traffic without
fusion (opt_level 0) and with it (opt_level 2), the arena planned for the
intermediates against the naive sum and the lower bound (the largest total of
tensors live at one moment), and the latency at opt_level 0, 2 and 3, and at
opt_level 2 without the layout pass ("O2 NCHW only": every convolution on the
NCHW templates), with the number of convolutions the layout pass blocked.
The levels are called in turn and the lower decile of each one's times
reported (common.interleaved_seconds): other processes only ever add time.
"""
from __future__ import annotations

import argparse
import os
import sys
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorkiln as tk  # noqa: E402
from common import interleaved_seconds, machine_summary, print_table, write_json  # noqa: E402
from functional_models import bert_layer, resnet18  # noqa: E402
from tensorkiln.tools.demo_models import cnn  # noqa: E402


def intermediate_traffic(compiled_graph) -> int:
    """Bytes each kernel reads from and writes to intermediate buffers (temps), summed."""
    program = compiled_graph.lowered.program
    temps = {t.name for t in program.temps}
    return sum(p.nbytes for k in program.kernels for p in k.params if p.name in temps)


def measure(name: str, fn, inputs, calls: int) -> dict:
    row = {"model": name}
    compiled = {}
    for level in (0, 2, 3):
        f = tk.jit(fn, opt_level=level)
        f(*inputs)
        compiled[f"O{level}"] = f
        entry = next(iter(f._cache.values())).compiled
        report = entry.report
        row[f"kernels_O{level}"] = len(report.kernels)
        row[f"traffic_O{level}"] = intermediate_traffic(entry)
        if level == 2:
            row.update(arena=report.arena_bytes, naive=report.naive_bytes, lower_bound=report.lower_bound_bytes,
                       compile_s=report.compile_seconds)
            layout = next((p.fired for p in report.passes if p.name == "layout"), {})
            row["blocked_convs"] = layout.get("conv2d -> conv2d_nchwc", 0)
    # O2 without the layout pass (every conv2d on conv.py's NCHW templates): what blocking buys
    with mock.patch("tensorkiln.passes.layout.blocked_conv_choice", lambda node: None):
        f = tk.jit(fn, opt_level=2)
        f(*inputs)
        compiled["O2 NCHW"] = f
    # called in turn, so a machine shared with other processes slows every level alike
    seconds = interleaved_seconds([lambda f=f: f(*inputs) for f in compiled.values()], calls)
    for key, t in zip(compiled, seconds):
        row[f"latency_{key.replace(' ', '_')}"] = t
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("--calls", type=int, default=30, help="calls of each level, in turn")
    args = parser.parse_args()
    print(f"machine: {machine_summary()}\n")
    rng = np.random.default_rng(0)
    demo = cnn()
    models = [
        ("demo CNN (batch 8)", demo.forward, demo.inputs),
        ("BERT-base layer (seq 128)", bert_layer(), (rng.standard_normal((1, 128, 768)).astype(np.float32),)),
        ("ResNet-18 (batch 1)", resnet18(), (rng.standard_normal((1, 3, 224, 224)).astype(np.float32),)),
    ]
    rows = [measure(name, fn, inputs, args.calls) for name, fn, inputs in models]
    mb = lambda b: f"{b / 2**20:.1f} MiB"  # noqa: E731
    print_table(["model", "kernels O0 -> O2", "intermediate traffic O0 -> O2", "arena / naive / lower bound",
                 "arena / lower bound", "latency O0", "O2", "O3", "O2 NCHW only", "blocked convs"],
                [[r["model"], f"{r['kernels_O0']} -> {r['kernels_O2']}", f"{mb(r['traffic_O0'])} -> {mb(r['traffic_O2'])}",
                  f"{mb(r['arena'])} / {mb(r['naive'])} / {mb(r['lower_bound'])}",
                  f"{r['arena'] / max(r['lower_bound'], 1):.3f}x",
                  f"{r['latency_O0'] * 1e3:.1f} ms", f"{r['latency_O2'] * 1e3:.1f} ms", f"{r['latency_O3'] * 1e3:.1f} ms",
                  f"{r['latency_O2_NCHW'] * 1e3:.1f} ms", str(r["blocked_convs"])]
                 for r in rows])
    if args.json:
        write_json(args.json, {r["model"]: r for r in rows})


if __name__ == "__main__":
    main()
