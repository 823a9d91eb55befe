"""A straight-through estimator with tk.Function: binarize weights in the forward pass (sign),
pass the gradient through unchanged in the backward pass, and train a tiny classifier with it.

    python examples/straight_through.py
"""
from __future__ import annotations

import numpy as np

import tensorkiln as tk
import tensorkiln.nn.functional as F


class SignSTE(tk.Function):
    """Forward: sign(x). Backward: the identity, clipped to |x| <= 1 (the usual STE)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sign()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return tk.where(x.abs() <= 1, grad, 0.0)


def main(steps: int = 200, seed: int = 0) -> float:
    """Train a linear classifier with binary (+1/-1) weights on two Gaussian blobs; returns accuracy."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.normal(-1, 0.7, (100, 4)), rng.normal(1, 0.7, (100, 4))]).astype(np.float32)
    y = np.array([0] * 100 + [1] * 100)
    xs, ys = tk.tensor(x), tk.tensor(y)
    w = tk.tensor(rng.normal(0, 0.1, (4, 2)).astype(np.float32), requires_grad=True)
    opt = tk.optim.SGD([w], lr=0.05)
    for step in range(steps):
        logits = xs @ SignSTE.apply(w)
        loss = F.cross_entropy(logits, ys)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}")
    with tk.no_grad():
        accuracy = float(((xs @ w.sign()).argmax(1).numpy() == y).mean())
    print(f"binary weights {w.sign().numpy().tolist()}  accuracy {accuracy:.3f}")
    return accuracy


if __name__ == "__main__":
    main()
