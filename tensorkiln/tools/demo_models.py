"""The demo models, written with tk.nn.functional: an MLP, a small CNN and a transformer block.

Each builder returns (function, weights, example inputs) with weights drawn
from a seeded generator, so every run computes the same numbers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..frontend import creation
from ..nn import functional as F
from ..frontend.tensor import Tensor


@dataclass
class DemoModel:
    """A model function with its weights and one example input batch."""

    name: str
    description: str
    forward: Callable[..., Tensor]
    inputs: tuple
    params: dict = field(default_factory=dict)  # the weights by name, for other implementations of the model


def _init(rng: np.random.Generator, *shape: int) -> Tensor:
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    return creation.tensor(rng.standard_normal(shape) / math.sqrt(fan_in), dtype="float32")


def mlp(batch: int = 64, sizes=(784, 512, 512, 10), seed: int = 0) -> DemoModel:
    """A 3-layer perceptron with ReLU."""
    rng = np.random.default_rng(seed)
    layers = [(_init(rng, o, i), creation.zeros(o)) for i, o in zip(sizes[:-1], sizes[1:])]

    def forward(x: Tensor) -> Tensor:
        for k, (w, b) in enumerate(layers):
            x = F.linear(x, w, b)
            if k < len(layers) - 1:
                x = F.relu(x)
        return x

    x = creation.randn(batch, sizes[0], seed=seed + 1)
    return DemoModel("mlp", f"MLP {'-'.join(map(str, sizes))}, batch {batch}", forward, (x,), {"layers": layers})


def cnn(batch: int = 8, seed: int = 0) -> DemoModel:
    """conv-bn-relu-pool twice, then a linear classifier, on 1x28x28 images."""
    rng = np.random.default_rng(seed)
    channels = [(1, 16), (16, 32)]
    blocks = []
    for cin, cout in channels:
        blocks.append(dict(
            w=_init(rng, cout, cin, 3, 3), b=creation.zeros(cout),
            gamma=creation.tensor(1.0 + 0.1 * rng.standard_normal(cout), dtype="float32"),
            beta=creation.tensor(0.1 * rng.standard_normal(cout), dtype="float32"),
            mean=creation.tensor(0.1 * rng.standard_normal(cout), dtype="float32"),
            var=creation.tensor(1.0 + 0.1 * rng.random(cout), dtype="float32")))
    fc_w, fc_b = _init(rng, 10, 32 * 7 * 7), creation.zeros(10)

    def forward(x: Tensor) -> Tensor:
        for p in blocks:
            x = F.conv2d(x, p["w"], p["b"], padding=1)
            x = F.batch_norm(x, p["mean"], p["var"], p["gamma"], p["beta"])
            x = F.max_pool2d(F.relu(x), 2)
        return F.linear(x.flatten(1), fc_w, fc_b)

    x = creation.randn(batch, 1, 28, 28, seed=seed + 1)
    return DemoModel("cnn", f"CNN 2x(conv3x3-bn-relu-pool) + linear, batch {batch}", forward, (x,),
                     {"blocks": blocks, "fc_w": fc_w, "fc_b": fc_b})


def transformer_block(batch: int = 2, seq: int = 64, dim: int = 128, heads: int = 4, seed: int = 0) -> DemoModel:
    """One pre-norm transformer encoder block: multi-head attention and a GELU MLP."""
    rng = np.random.default_rng(seed)
    p = dict(ln1_w=creation.ones(dim), ln1_b=creation.zeros(dim), ln2_w=creation.ones(dim),
             ln2_b=creation.zeros(dim), qkv_w=_init(rng, 3 * dim, dim), qkv_b=creation.zeros(3 * dim),
             out_w=_init(rng, dim, dim), out_b=creation.zeros(dim), fc1_w=_init(rng, 4 * dim, dim),
             fc1_b=creation.zeros(4 * dim), fc2_w=_init(rng, dim, 4 * dim), fc2_b=creation.zeros(dim))
    head_dim = dim // heads

    def forward(x: Tensor) -> Tensor:
        b, s, _ = x.shape
        h = F.layer_norm(x, (dim,), p["ln1_w"], p["ln1_b"])
        qkv = F.linear(h, p["qkv_w"], p["qkv_b"]).reshape(b, s, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        x = x + F.linear(attn.transpose(1, 2).reshape(b, s, dim), p["out_w"], p["out_b"])
        h = F.layer_norm(x, (dim,), p["ln2_w"], p["ln2_b"])
        return x + F.linear(F.gelu(F.linear(h, p["fc1_w"], p["fc1_b"])), p["fc2_w"], p["fc2_b"])

    x = creation.randn(batch, seq, dim, seed=seed + 1)
    return DemoModel("transformer", f"encoder block d={dim} heads={heads} seq={seq}, batch {batch}",
                     forward, (x,), dict(p, heads=heads))


def all_models() -> list[DemoModel]:
    """The models `tensorkiln demo` runs."""
    return [mlp(), cnn(), transformer_block()]
