"""Composite ops differentiate through their primitives: checked against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.frontend.autodiff.gradcheck import gradcheck

CASES = {
    "softmax": (lambda x: F.softmax(x, -1), [(3, 5)]),
    "log_softmax": (lambda x: F.log_softmax(x, 0), [(4, 3)]),
    "gelu": (lambda x: F.gelu(x), [(3, 4)]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [(3, 4)]),
    "silu": (lambda x: F.silu(x), [(5,)]),
    "softplus": (lambda x: F.softplus(x), [(5,)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (4,), w, b), [(3, 4), (4,), (4,)]),
    "batch_norm_train": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), [(4, 3, 2, 2), (3,), (3,)]),
    "mean_var": (lambda x: x.var(1) + x.mean(0).sum(), [(3, 4)]),
    "mse": (lambda x, y: F.mse_loss(x, y), [(3, 4), (3, 4)]),
    "linear": (lambda x, w, b: F.linear(x, w, b), [(2, 5), (3, 5), (3,)]),
    "avg_pool": (lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), [(1, 2, 6, 5)]),
    "max_pool": (lambda x: F.max_pool2d(x, 2), [(2, 2, 4, 6)]),
    "max_pool_overlap": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1), [(1, 2, 5, 5)]),
    "adaptive_avg_pool": (lambda x: F.adaptive_avg_pool2d(x, (2, 3)), [(1, 2, 5, 7)]),
    "normalize": (lambda x: F.normalize(x, dim=1), [(3, 4)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_composite(name, rng):
    fn, shapes = CASES[name]
    assert gradcheck(fn, *[rng.standard_normal(s) for s in shapes])


def test_attention_with_causal_mask(rng):
    q, k, v = (rng.standard_normal((2, 3, 4)) for _ in range(3))
    assert gradcheck(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), q, k, v)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy(smoothing, rng):
    target = np.array([0, 3, 1, 3])
    assert gradcheck(lambda x: F.cross_entropy(x, tk.tensor(target), label_smoothing=smoothing),
                     rng.standard_normal((4, 5)))
    weight = tk.tensor(rng.uniform(0.5, 2, 5), tk.float64)
    assert gradcheck(lambda x: F.cross_entropy(x, tk.tensor(target), weight=weight), rng.standard_normal((4, 5)))


def test_embedding_gradient_skips_padding_row():
    table = tk.tensor(np.arange(12.0).reshape(4, 3), requires_grad=True)
    F.embedding(tk.tensor([[0, 2], [2, 1]]), table, padding_idx=1).sum().backward()
    np.testing.assert_allclose(table.grad.numpy(), [[1] * 3, [0] * 3, [2] * 3, [0] * 3])


def test_dropout_gradient_matches_mask(rng):
    x = tk.tensor(rng.standard_normal((50,)), requires_grad=True)
    seed = tk.tensor(7, tk.int64)
    y = F.dropout(x, 0.5, True, seed=seed)
    assert seed.item() == 8  # advanced per call
    y.sum().backward()
    kept = y.numpy() != 0
    np.testing.assert_allclose(x.grad.numpy(), np.where(kept, 2.0, 0.0))
    assert 10 < kept.sum() < 40
