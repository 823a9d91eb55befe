"""Train an MLP and a small CNN on scikit-learn's bundled 8x8 digits with compiled training steps.

Each training step (forward, backward and the optimizer update) is one tk.jit
graph compiled to C; parameters, optimizer state and batch-norm statistics are
updated in place after every call. Needs scikit-learn (`pip install -e '.[examples]'`).

    python examples/train_digits.py [--epochs N]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import tensorkiln as tk
import tensorkiln.nn as nn
import tensorkiln.nn.functional as F


def load_data(seed: int = 0):
    """Digits as float32 in [0, 1]: (train_x, train_y, test_x, test_y), a fixed 80/20 split."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    split = int(0.8 * len(x))
    return x[:split], y[:split], x[split:], y[split:]


def mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10))


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),  # 4x4
        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),  # 2x2
        nn.Flatten(), nn.Linear(32 * 2 * 2, 10))


def make_train_step(model: nn.Module, optimizer):
    """The PyTorch way; tk.jit turns all of it into one compiled graph."""
    @tk.jit
    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss
    return train_step


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    model.eval()
    with tk.no_grad():
        predictions = tk.jit(model)(x).argmax(1).numpy()  # parameters bound as constants
    model.train()
    return float((predictions == y).mean())


def train(name: str, model: nn.Module, data, epochs: int, batch_size: int = 64, lr: float = 2e-3,
          seed: int = 0, verbose: bool = True) -> float:
    """Train with AdamW and a cosine schedule; returns the test accuracy."""
    train_x, train_y, test_x, test_y = data
    if name == "cnn":
        train_x, test_x = train_x[:, None], test_x[:, None]
    optimizer = tk.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    schedule = tk.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    step = make_train_step(model, optimizer)
    rng = np.random.default_rng(seed)
    full = len(train_x) // batch_size * batch_size  # whole batches only: one compiled signature
    for epoch in range(epochs):
        start = time.perf_counter()
        order = rng.permutation(len(train_x))[:full]
        losses = [step(train_x[idx], train_y[idx]).item() for idx in order.reshape(-1, batch_size)]
        schedule.step()
        if verbose:
            print(f"{name} epoch {epoch + 1:2d}  loss {np.mean(losses):.4f}  "
                  f"({time.perf_counter() - start:.2f} s)")
    result = accuracy(model, test_x, test_y)
    print(f"{name}: test accuracy {result:.4f}")
    return result


LEARNING_RATES = {"mlp": 1e-2, "cnn": 3e-3}


def main(epochs: int = 30, seed: int = 0, models=("mlp", "cnn")) -> dict[str, float]:
    """Train each model for `epochs`; returns {name: test accuracy}."""
    data = load_data(seed)
    results = {}
    for name in models:
        tk.manual_seed(seed)
        model = mlp() if name == "mlp" else cnn()
        results[name] = train(name, model, data, epochs, lr=LEARNING_RATES[name], seed=seed)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    main(parser.parse_args().epochs)
