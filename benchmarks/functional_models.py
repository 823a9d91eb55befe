"""Models for the graph-optimizer benchmark, written with tk.nn.functional and seeded random weights.

- ResNet-18 (torchvision's layout: 7x7 stem, 4 stages of 2 basic blocks, batch norm after every conv)
- a BERT-base encoder layer (hidden 768, 12 heads, intermediate 3072, post-norm, GELU)
"""
from __future__ import annotations

import math

import numpy as np

import tensorkiln as tk
import tensorkiln.nn.functional as F


class _Weights:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def conv(self, out_c: int, in_c: int, k: int) -> tk.Tensor:
        return tk.tensor(self.rng.standard_normal((out_c, in_c, k, k)) * math.sqrt(2.0 / (in_c * k * k)),
                         dtype="float32")

    def linear(self, out_f: int, in_f: int) -> tk.Tensor:
        return tk.tensor(self.rng.standard_normal((out_f, in_f)) / math.sqrt(in_f), dtype="float32")

    def bn(self, c: int) -> tuple:
        r = self.rng
        return tuple(tk.tensor(v, dtype="float32") for v in (
            0.1 * r.standard_normal(c), 1.0 + 0.1 * r.random(c), 1.0 + 0.1 * r.standard_normal(c), 0.1 * r.standard_normal(c)))

    def vector(self, n: int, scale: float = 0.02, base: float = 0.0) -> tk.Tensor:
        return tk.tensor(base + scale * self.rng.standard_normal(n), dtype="float32")


def resnet18(num_classes: int = 1000, seed: int = 0):
    """A function computing ResNet-18 logits from an (N, 3, 224, 224) batch."""
    w = _Weights(seed)
    stem = (w.conv(64, 3, 7), w.bn(64))
    stages = []
    in_c = 64
    for out_c, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        blocks = []
        for b in range(2):
            s = stride if b == 0 else 1
            down = (w.conv(out_c, in_c, 1), w.bn(out_c)) if (s != 1 or in_c != out_c) else None
            blocks.append(dict(stride=s, c1=w.conv(out_c, in_c, 3), bn1=w.bn(out_c),
                               c2=w.conv(out_c, out_c, 3), bn2=w.bn(out_c), down=down))
            in_c = out_c
        stages.append(blocks)
    fc_w, fc_b = w.linear(num_classes, 512), w.vector(num_classes)

    def bn(x, p):
        mean, var, gamma, beta = p
        return F.batch_norm(x, mean, var, gamma, beta)

    def forward(x):
        x = F.relu(bn(F.conv2d(x, stem[0], stride=2, padding=3), stem[1]))
        x = F.max_pool2d(x, 3, 2, 1)
        for blocks in stages:
            for p in blocks:
                out = F.relu(bn(F.conv2d(x, p["c1"], stride=p["stride"], padding=1), p["bn1"]))
                out = bn(F.conv2d(out, p["c2"], padding=1), p["bn2"])
                shortcut = x if p["down"] is None else bn(F.conv2d(x, p["down"][0], stride=p["stride"]), p["down"][1])
                x = F.relu(out + shortcut)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return F.linear(x, fc_w, fc_b)

    return forward


def bert_layer(hidden: int = 768, heads: int = 12, intermediate: int = 3072, seed: int = 0):
    """A function computing one BERT encoder layer on (N, seq, hidden) activations."""
    w = _Weights(seed)
    p = dict(q=w.linear(hidden, hidden), k=w.linear(hidden, hidden), v=w.linear(hidden, hidden),
             qb=w.vector(hidden), kb=w.vector(hidden), vb=w.vector(hidden), o=w.linear(hidden, hidden), ob=w.vector(hidden),
             ln1w=w.vector(hidden, base=1.0), ln1b=w.vector(hidden), i=w.linear(intermediate, hidden),
             ib=w.vector(intermediate), out=w.linear(hidden, intermediate), outb=w.vector(hidden),
             ln2w=w.vector(hidden, base=1.0), ln2b=w.vector(hidden))
    head_dim = hidden // heads

    def split(t, b, s):
        return t.reshape(b, s, heads, head_dim).transpose(1, 2)

    def forward(x):
        b, s, _ = x.shape
        q = split(F.linear(x, p["q"], p["qb"]), b, s)
        k = split(F.linear(x, p["k"], p["kb"]), b, s)
        v = split(F.linear(x, p["v"], p["vb"]), b, s)
        attn = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, hidden)
        x = F.layer_norm(x + F.linear(attn, p["o"], p["ob"]), (hidden,), p["ln1w"], p["ln1b"], eps=1e-12)
        h = F.gelu(F.linear(x, p["i"], p["ib"]))
        return F.layer_norm(x + F.linear(h, p["out"], p["outb"]), (hidden,), p["ln2w"], p["ln2b"], eps=1e-12)

    return forward
