"""One training step (forward + backward + AdamW update) of the digits MLP and CNN, batch 64:
compiled tensorkiln (one tk.jit graph) vs eager tensorkiln, and PyTorch eager / torch.compile
when torch is importable (skipped cleanly otherwise). Prints median times and ratios.

    python benchmarks/training.py
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorkiln as tk  # noqa: E402
import tensorkiln.nn.functional as F  # noqa: E402
from common import machine_summary, median_seconds, print_table  # noqa: E402
from train_digits import cnn, mlp  # noqa: E402

BATCH = 64


def tensorkiln_steps(build, x, y):
    """(eager step, compiled step) on two identical models."""
    def make(model, opt):
        def step():
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        return step
    tk.manual_seed(0)
    eager_model = build()
    tk.manual_seed(0)
    compiled_model = build()
    eager = make(eager_model, tk.optim.AdamW(eager_model.parameters(), lr=1e-3))
    compiled_fn = tk.jit(make(compiled_model, tk.optim.AdamW(compiled_model.parameters(), lr=1e-3)))
    return eager, compiled_fn


def torch_steps(name, x, y):
    """(eager, torch.compile) steps of the same architecture, or None when torch is missing."""
    try:
        import torch
    except ImportError:
        return None
    tnn = torch.nn
    if name == "mlp":
        model = tnn.Sequential(tnn.Flatten(), tnn.Linear(64, 128), tnn.ReLU(), tnn.Dropout(0.1), tnn.Linear(128, 10))
    else:
        model = tnn.Sequential(tnn.Conv2d(1, 16, 3, padding=1, bias=False), tnn.BatchNorm2d(16), tnn.ReLU(),
                               tnn.MaxPool2d(2), tnn.Conv2d(16, 32, 3, padding=1, bias=False), tnn.BatchNorm2d(32),
                               tnn.ReLU(), tnn.MaxPool2d(2), tnn.Flatten(), tnn.Linear(128, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        loss = torch.nn.functional.cross_entropy(model(tx), ty)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    try:
        compiled = torch.compile(step, dynamic=False)
        compiled()
    except Exception as err:  # no working inductor toolchain: report eager only
        print(f"torch.compile unavailable: {err}")
        compiled = None
    return step, compiled


def main() -> None:
    print(machine_summary())
    rng = np.random.default_rng(0)
    rows = []
    for name, build in (("mlp", mlp), ("cnn", cnn)):
        shape = (BATCH, 8, 8) if name == "mlp" else (BATCH, 1, 8, 8)
        x = rng.random(shape, dtype=np.float32)
        y = rng.integers(0, 10, BATCH)
        eager, compiled = tensorkiln_steps(build, tk.tensor(x), tk.tensor(y))
        compiled()  # trace and compile once
        t_eager = median_seconds(eager, repeat=21, warmup=3)
        t_compiled = median_seconds(compiled, repeat=51, warmup=5)
        row = [name, f"{t_eager * 1e3:.2f}", f"{t_compiled * 1e3:.2f}", f"{t_eager / t_compiled:.1f}x"]
        peers = torch_steps(name, x, y)
        if peers is None:
            row += ["n/a (torch not installed)", "n/a"]
        else:
            t_torch = median_seconds(peers[0], repeat=21, warmup=3)
            row.append(f"{t_torch * 1e3:.2f} ({t_torch / t_compiled:.2f}x)")
            if peers[1] is not None:
                t_tc = median_seconds(peers[1], repeat=21, warmup=3)
                row.append(f"{t_tc * 1e3:.2f} ({t_tc / t_compiled:.2f}x)")
            else:
                row.append("n/a")
        rows.append(row)
    print_table(["model (batch 64)", "tk eager ms", "tk compiled ms", "eager/compiled", "torch eager ms (/tk)",
                 "torch.compile ms (/tk)"], rows)


if __name__ == "__main__":
    main()
