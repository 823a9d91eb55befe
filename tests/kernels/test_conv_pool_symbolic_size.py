"""Convolutions and pooling with a run-time image height and width (and batch): one or two programs
for many image sizes, equal to the reference.

The reference is eager execution (the numpy interpreter). Sizes include odd ones and strides of 2,
so rows end in tail tiles chosen per call and pooled planes have odd edges.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn as nn
import tensorkiln.nn.functional as F

from helpers import random_conv2d

SIZES = [(2, 16, 16), (3, 17, 23), (2, 21, 14), (4, 19, 31)]  # (batch, height, width)


class SmallCnn(nn.Module):
    """conv + batch norm + relu, max pool, a strided conv, depthwise and pointwise convs, a padded
    average pool, a global mean and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.norm = nn.BatchNorm2d(16)
        self.down = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.depthwise = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.pointwise = nn.Conv2d(32, 32, 1)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.norm(self.stem(x))), 2)
        x = F.relu(self.down(x))
        x = F.relu(self.pointwise(F.relu(self.depthwise(x)))) + x
        x = F.avg_pool2d(x, 3, stride=2, padding=1)
        return self.head(x.mean((2, 3)))


def _images(batch: int, channels: int, h: int, w: int) -> np.ndarray:
    return np.random.default_rng(batch * 1000 + h * 37 + w).standard_normal((batch, channels, h, w)).astype(np.float32)


def test_a_cnn_with_symbolic_batch_height_and_width_takes_at_most_two_programs():
    tk.manual_seed(0)
    net = SmallCnn()
    net.norm.running_mean = tk.tensor(np.linspace(-0.5, 0.5, 16).astype(np.float32))
    net.eval()
    f = tk.jit(net, dynamic={"x": {0: "batch", 2: "h", 3: "w"}})
    with tk.no_grad():
        for batch, h, w in SIZES:
            x = tk.tensor(_images(batch, 3, h, w))
            np.testing.assert_allclose(f(x).numpy(), net(x).numpy(), rtol=1e-4, atol=1e-5)
        assert f.compile_count <= 2
        assert "specialized by a guard" not in f.explain(x)  # no size pinned to one value


@pytest.mark.parametrize("seed", range(3))
def test_random_conv_and_pool_layers_with_a_symbolic_image_size(seed):
    rng = np.random.default_rng(seed)
    conv, kernel = random_conv2d(rng, seed)

    def layer(x):  # windows clipped by the padding: the pool's divisors are computed per call
        return F.avg_pool2d(F.relu(conv(x)), 3, stride=2, padding=1, count_include_pad=seed % 2 == 0)

    f = tk.jit(layer, dynamic={"x": {0: "batch", 2: "h", 3: "w"}})
    with tk.no_grad():
        for batch, h, w in [(2, 13, 17), (3, 21, 12), (2, 16, 25)]:
            x = tk.tensor(_images(batch, conv.in_channels, h, w))
            np.testing.assert_allclose(f(x).numpy(), layer(x).numpy(), rtol=1e-4, atol=1e-5)
        assert f.compile_count <= 2


def test_a_size_outside_a_guard_compiles_a_new_program_never_a_wrong_answer():
    tk.manual_seed(2)
    conv = nn.Conv2d(8, 16, 3, padding=1)
    f = tk.jit(lambda x: F.max_pool2d(F.relu(conv(x)), 2), dynamic={"x": {0: "batch", 2: "h", 3: "w"}})
    with tk.no_grad():
        for batch, h, w in [(2, 30, 34), (2, 33, 29), (2, 3, 2), (3, 31, 27)]:  # 3x2: a smaller size class
            x = tk.tensor(_images(batch, 8, h, w))
            np.testing.assert_allclose(f(x).numpy(), F.max_pool2d(F.relu(conv(x)), 2).numpy(),
                                       rtol=1e-4, atol=1e-5)
        assert 2 <= f.compile_count <= 3
