"""tk.nn modules: registration, PyTorch names and state_dict keys, modes, initialization, forward semantics."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn as nn
import tensorkiln.nn.functional as F
from tensorkiln.nn import init


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.bn = nn.BatchNorm2d(2)
        self.blocks = nn.ModuleList([nn.Linear(8, 4), nn.Linear(4, 3, bias=False)])
        self.register_buffer("scale", tk.ones(1), persistent=False)

    def forward(self, x):
        x = self.bn(self.conv(x)).relu().flatten(1)
        for block in self.blocks:
            x = block(x)
        return x * self.scale


def test_registration_and_state_dict_keys():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == [
        "conv.weight", "conv.bias", "bn.weight", "bn.bias", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight"]
    assert list(net.state_dict()) == [
        "conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
        "bn.num_batches_tracked", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight"]
    assert [n for n, _ in net.named_buffers()] == ["scale", "bn.running_mean", "bn.running_var",
                                                    "bn.num_batches_tracked"]
    assert len(list(net.children())) == 3 and len(list(net.modules())) == 6
    assert all(p.requires_grad and isinstance(p, tk.Tensor) for p in net.parameters())


def test_state_dict_round_trip_and_numpy_load(rng):
    a, b = Net(), Net()
    x = tk.tensor(rng.standard_normal((2, 1, 4, 4)).astype(np.float32))
    a(x)  # updates running stats
    b.load_state_dict({k: v.numpy() for k, v in a.state_dict().items()})  # as from a torch state_dict
    a.eval(), b.eval()
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    assert b.bn.num_batches_tracked.item() == 1
    with pytest.raises(KeyError, match="missing"):
        b.load_state_dict({"conv.weight": a.conv.weight.numpy()})
    with pytest.raises(ValueError, match="shape"):
        b.load_state_dict({**a.state_dict(), "conv.bias": np.zeros(5)})
    assert b.load_state_dict({"conv.bias": np.zeros(2)}, strict=False).missing_keys


def test_train_eval_and_to():
    net = Net().eval()
    assert not net.training and not net.bn.training
    net.train()
    assert net.blocks[0].training
    net.to(tk.float64)
    assert net.conv.weight.dtype == tk.float64 and net.bn.num_batches_tracked.dtype == tk.int64
    assert net(tk.randn(1, 1, 4, 4, dtype=tk.float64)).dtype == tk.float64


def test_default_initialization_bounds():
    tk.manual_seed(0)
    lin = nn.Linear(50, 20)
    bound = 1 / math.sqrt(50)
    assert np.abs(lin.weight.numpy()).max() <= bound and np.abs(lin.bias.numpy()).max() <= bound
    assert np.abs(lin.weight.numpy()).max() > 0.8 * bound
    conv = nn.Conv2d(4, 6, 3, groups=2)
    assert conv.weight.shape == (6, 2, 3, 3) and np.abs(conv.weight.numpy()).max() <= 1 / math.sqrt(18)
    w = tk.empty(200, 100)
    init.xavier_uniform_(w)
    assert np.abs(w.numpy()).max() <= math.sqrt(6 / 300)
    init.kaiming_normal_(w, nonlinearity="relu")
    assert abs(w.numpy().std() - math.sqrt(2 / 100)) < 0.01
    init.zeros_(w)
    assert not w.numpy().any()
    init.ones_(lin.bias)
    assert (lin.bias.numpy() == 1).all() and lin.bias.requires_grad


def test_batchnorm_train_and_eval(rng):
    bn = nn.BatchNorm2d(3, momentum=0.5)
    v = rng.standard_normal((4, 3, 2, 2)) * 2 + 1
    out = bn(tk.tensor(v.astype(np.float32))).numpy()
    mu, var = v.mean((0, 2, 3)), v.var((0, 2, 3))
    np.testing.assert_allclose(out, (v - mu.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.5 * mu, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.5 + 0.5 * v.var((0, 2, 3), ddof=1), rtol=1e-5)
    bn.eval()
    out = bn(tk.tensor(v.astype(np.float32))).numpy()
    rm, rv = bn.running_mean.numpy(), bn.running_var.numpy()
    np.testing.assert_allclose(out, (v - rm.reshape(1, 3, 1, 1)) / np.sqrt(rv.reshape(1, 3, 1, 1) + 1e-5),
                               rtol=1e-4, atol=1e-4)


def test_dropout_seeded_and_identity_in_eval():
    tk.manual_seed(1)
    a = nn.Dropout(0.5)
    tk.manual_seed(1)
    b = nn.Dropout(0.5)
    x = tk.ones(1000)
    ya, yb = a(x), b(x)
    np.testing.assert_array_equal(ya.numpy(), yb.numpy())
    assert set(np.unique(ya.numpy())) <= {0.0, 2.0} and 400 < (ya.numpy() == 0).sum() < 600
    assert not np.array_equal(a(x).numpy(), ya.numpy())  # a fresh mask per call
    assert a.eval()(x) is x


def test_layers_forward(rng):
    x = tk.tensor(rng.standard_normal((2, 3, 4, 4)).astype(np.float32))
    assert nn.MaxPool2d(2)(x).shape == (2, 3, 2, 2) and nn.AvgPool2d(2)(x).shape == (2, 3, 2, 2)
    assert nn.AdaptiveAvgPool2d(1)(x).shape == (2, 3, 1, 1) and nn.Flatten()(x).shape == (2, 48)
    ln = nn.LayerNorm(4)
    np.testing.assert_allclose(ln(x).numpy(), F.layer_norm(x, (4,)).numpy())
    emb = nn.Embedding(10, 3, padding_idx=0)
    assert not emb.weight.numpy()[0].any() and emb(tk.tensor([[1, 0]])).shape == (1, 2, 3)
    for act, ref in [(nn.ReLU(), np.maximum(x.numpy(), 0)), (nn.Tanh(), np.tanh(x.numpy())),
                     (nn.Sigmoid(), 1 / (1 + np.exp(-x.numpy()))), (nn.SiLU(), x.numpy() / (1 + np.exp(-x.numpy())))]:
        np.testing.assert_allclose(act(x).numpy(), ref, rtol=1e-5, atol=1e-6)
    assert nn.GELU()(x).shape == x.shape
    seq = nn.Sequential(nn.Flatten(), nn.Linear(48, 5))
    assert seq(x).shape == (2, 5) and len(seq) == 2 and isinstance(seq[1], nn.Linear)


def _mha_reference(q, k, v, w, b, wo, bo, heads, mask=None):
    """numpy multi-head attention in (L, N, E) layout with a boolean 'not allowed' mask."""
    e = q.shape[-1]
    d = e // heads
    qp, kp, vp = q @ w[:e].T + b[:e], k @ w[e:2 * e].T + b[e:2 * e], v @ w[2 * e:].T + b[2 * e:]
    def split(t):  # noqa: E306
        return t.reshape(t.shape[0], t.shape[1], heads, d).transpose(1, 2, 0, 3)
    s = split(qp) @ split(kp).transpose(0, 1, 3, 2) / np.sqrt(d)
    if mask is not None:
        s = np.where(mask, -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = (p @ split(vp)).transpose(2, 0, 1, 3).reshape(q.shape[0], q.shape[1], e)
    return out @ wo.T + bo, p.mean(1)


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention(batch_first, rng):
    mha = nn.MultiheadAttention(8, 2, batch_first=batch_first)
    assert [n for n, _ in mha.named_parameters()] == ["in_proj_weight", "in_proj_bias", "out_proj.weight",
                                                     "out_proj.bias"]
    with tk.no_grad():
        mha.in_proj_bias.data = tk.tensor(rng.standard_normal(24).astype(np.float32))
    q = rng.standard_normal((5, 3, 8)).astype(np.float32)
    k = rng.standard_normal((4, 3, 8)).astype(np.float32)
    mask = np.triu(np.ones((5, 4), bool), 1)
    args = [tk.tensor(t.transpose(1, 0, 2) if batch_first else t) for t in (q, k, k)]
    out, weights = mha(*args, attn_mask=tk.tensor(mask))
    ref_out, ref_w = _mha_reference(q, k, k, mha.in_proj_weight.numpy(), mha.in_proj_bias.numpy(),
                                    mha.out_proj.weight.numpy(), mha.out_proj.bias.numpy(), 2, mask)
    got = out.numpy().transpose(1, 0, 2) if batch_first else out.numpy()
    np.testing.assert_allclose(got, ref_out, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(weights.numpy(), ref_w, rtol=1e-4, atol=1e-6)
    out.sum().backward()
    assert mha.in_proj_weight.grad.shape == (24, 8)


def test_module_grads_match_finite_differences(rng):
    from tensorkiln.frontend.autodiff.gradcheck import gradcheck
    lin = nn.Linear(3, 2).double()
    assert gradcheck(lambda w, b, x: F.linear(x, w, b).tanh(), lin.weight.numpy(), lin.bias.numpy(),
                     rng.standard_normal((4, 3)))
