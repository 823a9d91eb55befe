"""Convolutions and pooling with a run-time batch: one program for every batch size, equal to the reference.

The reference is eager execution (the numpy interpreter); the program specialized to one size
(`dynamic=False`) must agree too. Layer shapes are drawn at random (odd channel counts, strides,
padding, groups), and batch sizes include odd ones.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn as nn
import tensorkiln.nn.functional as F

from helpers import random_conv2d

BATCHES = (2, 7, 3, 16, 5)


class SmallCnn(nn.Module):
    """A stem (few input channels), a strided conv, depthwise and pointwise convs, a residual,
    max and average pooling, a global mean and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.down = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.depthwise = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.pointwise = nn.Conv2d(32, 32, 1)
        self.body = nn.Conv2d(32, 32, 3, padding=1)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.stem(x)), 2)
        x = F.relu(self.down(x))
        x = F.relu(self.pointwise(F.relu(self.depthwise(x))))
        x = F.relu(self.body(x)) + x
        x = F.avg_pool2d(x, 2)
        return self.head(x.mean((2, 3)))


def _images(batch: int, channels: int = 3, size: int = 16) -> np.ndarray:
    return np.random.default_rng(batch).standard_normal((batch, channels, size, size)).astype(np.float32)


def test_a_cnn_with_a_symbolic_batch_is_one_program_equal_to_the_reference():
    tk.manual_seed(0)
    net = SmallCnn()
    net.eval()
    symbolic = tk.jit(net, dynamic={"x": {0: "batch"}})
    with tk.no_grad():
        for batch in BATCHES:
            x = _images(batch)
            got = symbolic(tk.tensor(x)).numpy()
            np.testing.assert_allclose(got, net(tk.tensor(x)).numpy(), rtol=1e-4, atol=1e-5)
        assert symbolic.compile_count == 1
        assert "guards: none" in symbolic.explain(tk.tensor(x))
        specialized = tk.jit(net, dynamic=False)
        np.testing.assert_allclose(symbolic(tk.tensor(x)).numpy(), specialized(tk.tensor(x)).numpy(),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_random_conv_layers_with_a_symbolic_batch(seed):
    rng = np.random.default_rng(seed)
    conv, kernel = random_conv2d(rng, seed)
    size = int(rng.integers(kernel + 2, 15))

    def layer(x):
        return F.max_pool2d(F.relu(conv(x)), 2, ceil_mode=True)

    symbolic = tk.jit(layer, dynamic={"x": {0: "batch"}})
    with tk.no_grad():
        for batch in (3, 2, 9):
            x = _images(batch, conv.in_channels, size)
            np.testing.assert_allclose(symbolic(tk.tensor(x)).numpy(), layer(tk.tensor(x)).numpy(),
                                       rtol=1e-4, atol=1e-5)
    assert symbolic.compile_count == 1


def test_mean_over_symbolic_axes_is_computed_per_call():
    f = tk.jit(lambda x: x.mean((1,)) + x.mean(), dynamic={"x": {0: "rows", 1: "cols"}})
    # one size class of the reductions (rows of at least 8 elements): the count pins nothing
    for rows, cols in [(3, 9), (2, 17), (9, 8), (4, 31)]:
        x = np.random.default_rng(rows * cols).standard_normal((rows, cols)).astype(np.float32)
        np.testing.assert_allclose(f(x).numpy(), x.mean(1) + x.mean(), rtol=1e-5, atol=1e-6)
    assert f.compile_count == 1


def test_symbolic_image_sizes_are_never_a_wrong_answer():
    """Image sizes that are not yet symbolic in every template specialize with a guard: correct
    results at every size, whatever the number of programs."""
    tk.manual_seed(1)
    net = SmallCnn()
    net.eval()
    f = tk.jit(net, dynamic={"x": {0: "batch", 2: "h", 3: "w"}})
    with tk.no_grad():
        for batch, h, w in [(2, 16, 16), (3, 20, 24), (2, 17, 33)]:
            x = np.random.default_rng(h * w).standard_normal((batch, 3, h, w)).astype(np.float32)
            np.testing.assert_allclose(f(tk.tensor(x)).numpy(), net(tk.tensor(x)).numpy(), rtol=1e-4, atol=1e-5)
