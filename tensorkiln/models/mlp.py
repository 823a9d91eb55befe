"""The 3-layer perceptron of the demo and benchmarks."""
from __future__ import annotations

from .. import nn


class MLP(nn.Module):
    """Linear-ReLU-Linear-ReLU-Linear, 784-512-512-10 by default."""

    def __init__(self, sizes=(784, 512, 512, 10)):
        super().__init__()
        layers = []
        for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b))
            if k < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x.flatten(1))
