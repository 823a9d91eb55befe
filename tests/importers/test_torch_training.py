"""Training through torch.compile(backend="tensorkiln"): AOTAutograd's forward and backward graphs compiled.

A torch training loop (nn.Module, torch.optim) gives eager PyTorch's losses over
20 steps, within float32 rounding (rtol 1e-4: tensorkiln sums in another order,
and the differences grow a little from step to step).
"""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import tensorkiln as tk  # noqa: E402
from tensorkiln.importers.torch import STATS, TorchFallbackWarning  # noqa: E402


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(12, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.head = torch.nn.Linear(32, 5)

    def forward(self, x):
        return self.head(torch.nn.functional.gelu(self.norm(self.embed(x))).softmax(-1) * 4.0)


def _losses(model, compiled, optimizer, batches):
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(compiled(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_a_training_loop_gives_eagers_losses():
    torch.manual_seed(0)
    model = Classifier()
    reference = copy.deepcopy(model)
    batches = [(torch.randn(16, 12), torch.randint(0, 5, (16,))) for _ in range(20)]
    torch._dynamo.reset()
    before = STATS["tensorkiln_calls"]
    compiled_losses = _losses(model, torch.compile(model, backend="tensorkiln"),
                              torch.optim.AdamW(model.parameters(), lr=1e-2), batches)
    assert STATS["tensorkiln_calls"] - before >= 40  # forward and backward of every step
    eager_losses = _losses(reference, reference, torch.optim.AdamW(reference.parameters(), lr=1e-2), batches)
    torch.testing.assert_close(compiled_losses, eager_losses, rtol=1e-4, atol=1e-5)
    assert eager_losses[-1] < eager_losses[0]  # it learns
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


class ConvNet(torch.nn.Module):
    """Every backward op a CNN needs: strided, padded, grouped convolutions, max pooling (its ties after
    ReLU routed as PyTorch's indices say), average and adaptive average pooling."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(2, 4, 3, padding=1, stride=2)
        self.c2 = torch.nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=2)
        self.fc = torch.nn.Linear(4 * 2 * 2, 3)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(self.c1(x).relu(), 3, 2, 1)
        x = torch.nn.functional.avg_pool2d(self.c2(x), 2, 1, ceil_mode=True)
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(x, (2, 2)).flatten(1))


def test_a_cnn_trains_as_in_eager_pytorch():
    torch.manual_seed(0)
    model = ConvNet()
    reference = copy.deepcopy(model)
    batches = [(torch.randn(3, 2, 9, 9), torch.randint(0, 3, (3,))) for _ in range(6)]
    torch._dynamo.reset()
    compiled_losses = _losses(model, torch.compile(model, backend="tensorkiln"),
                              torch.optim.SGD(model.parameters(), lr=0.1), batches)
    eager_losses = _losses(reference, reference, torch.optim.SGD(reference.parameters(), lr=0.1), batches)
    torch.testing.assert_close(compiled_losses, eager_losses, rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_max_pool_gradients_follow_pytorchs_indices_on_ties():
    torch._dynamo.reset()
    x = torch.tensor([[[[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]]], requires_grad=True)
    pool = torch.compile(lambda t: torch.nn.functional.max_pool2d(t, 2, 1).sum(), backend="tensorkiln")
    pool(x).backward()
    y = x.detach().clone().requires_grad_()
    torch.nn.functional.max_pool2d(y, 2, 1).sum().backward()
    torch.testing.assert_close(x.grad, y.grad)  # each window's gradient goes to one of its tied maxima


class Pool3d(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.nn.functional.max_pool3d(self.linear(x), 2).sum()


def test_an_unlowered_backward_op_is_named():
    torch._dynamo.reset()
    compiled = torch.compile(Pool3d(), backend="tensorkiln")
    with pytest.raises(Exception, match="max_pool3d_with_indices_backward") as info:
        compiled(torch.randn(1, 2, 4, 4, 4)).backward()
    assert "UnsupportedOpError" in repr(info.value) or isinstance(info.value, tk.UnsupportedOpError)


def test_an_unlowered_backward_op_falls_back_with_the_option():
    torch._dynamo.reset()
    model = Pool3d()
    compiled = torch.compile(model, backend="tensorkiln", options={"fallback": True})
    x = torch.randn(1, 2, 4, 4, 4)
    with pytest.warns(TorchFallbackWarning, match="backward graph"):
        compiled(x).backward()
    grad = model.linear.weight.grad.clone()
    model.zero_grad()
    model(x).backward()
    torch.testing.assert_close(grad, model.linear.weight.grad, rtol=1e-4, atol=1e-5)
