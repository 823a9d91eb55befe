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


class VideoNet(torch.nn.Module):
    """A 3-d CNN: strided, padded, grouped 3-d convolutions, a transposed one, 3-d max pooling (ties after
    ReLU), average and adaptive average pooling, replication padding."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv3d(2, 4, 3, padding=1, stride=(1, 2, 2))
        self.c2 = torch.nn.Conv3d(4, 4, (2, 3, 3), padding=(0, 2, 1), dilation=(1, 2, 1), groups=2)
        self.up = torch.nn.ConvTranspose3d(4, 2, 2, stride=(1, 2, 1))
        self.fc = torch.nn.Linear(2 * 2 * 2 * 2, 3)

    def forward(self, x):
        x = torch.nn.functional.max_pool3d(self.c1(x).relu(), 2, 1, 1)
        x = torch.nn.functional.avg_pool3d(self.c2(x), (1, 2, 2), 1, ceil_mode=True)
        x = self.up(torch.nn.functional.pad(x, (1, 0, 0, 1, 1, 1), mode="replicate"))
        return self.fc(torch.nn.functional.adaptive_avg_pool3d(x, 2).flatten(1))


def test_a_3d_cnn_trains_as_in_eager_pytorch():
    torch.manual_seed(0)
    model = VideoNet()
    reference = copy.deepcopy(model)
    batches = [(torch.randn(2, 2, 5, 8, 8), torch.randint(0, 3, (2,))) for _ in range(4)]
    torch._dynamo.reset()
    compiled_losses = _losses(model, torch.compile(model, backend="tensorkiln"),
                              torch.optim.SGD(model.parameters(), lr=0.1), batches)
    eager_losses = _losses(reference, reference, torch.optim.SGD(reference.parameters(), lr=0.1), batches)
    torch.testing.assert_close(compiled_losses, eager_losses, rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def _same_gradients(fn, *inputs):
    torch._dynamo.reset()
    ours = [t.clone().requires_grad_() for t in inputs]
    theirs = [t.clone().requires_grad_() for t in inputs]
    torch.compile(fn, backend="tensorkiln")(*ours).backward()
    fn(*theirs).backward()
    for a, b in zip(ours, theirs):
        assert not torch.isnan(a.grad).any()
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode,padding", [("bilinear", "zeros"), ("nearest", "border"), ("bicubic", "reflection")])
def test_grid_sample_gradients_match_eager(mode, padding):
    torch.manual_seed(1)
    weights = torch.randn(2, 3, 4, 3)
    _same_gradients(lambda x, grid: (torch.nn.functional.grid_sample(
        x, grid, mode=mode, padding_mode=padding, align_corners=False) * weights).sum(),
        torch.randn(2, 3, 5, 6), torch.rand(2, 4, 3, 2) * 2.6 - 1.3)


@pytest.mark.parametrize("p", [0.5, 1.0, 2.0, 3.0, float("inf")])
def test_distance_gradients_follow_pytorch_at_zero_distance(p):
    torch.manual_seed(2)
    x1, x2 = torch.randn(4, 3), torch.randn(5, 3)
    x2[1] = x1[2]  # a zero distance: PyTorch defines its gradient as 0
    x2[2, 0] = x1[1, 0]
    weights = torch.randn(4, 5)
    _same_gradients(lambda a, b: (torch.cdist(a, b, p=p) * weights).sum(), x1, x2)
    rows = torch.randn(5, 3)
    rows[3] = rows[1]
    _same_gradients(lambda a: (torch.nn.functional.pdist(a, p=p) * torch.arange(10.0)).sum(), rows)


class Unlowered(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.nn.functional.max_pool3d(self.linear(x), 2).sum()


@pytest.fixture
def without_max_pool3d_backward(monkeypatch):
    """A backward op with no lowering: the 3-d max pool's, taken out of the table for the test."""
    from tensorkiln.importers.torch.lowering import LOWERINGS
    monkeypatch.delitem(LOWERINGS, torch.ops.aten.max_pool3d_with_indices_backward.default)


def test_an_unlowered_backward_op_is_named(without_max_pool3d_backward):
    torch._dynamo.reset()
    compiled = torch.compile(Unlowered(), backend="tensorkiln")
    with pytest.raises(Exception, match="max_pool3d_with_indices_backward") as info:
        compiled(torch.randn(1, 2, 4, 4, 4)).backward()
    assert "UnsupportedOpError" in repr(info.value) or isinstance(info.value, tk.UnsupportedOpError)


def test_an_unlowered_backward_op_falls_back_with_the_option(without_max_pool3d_backward):
    torch._dynamo.reset()
    model = Unlowered()
    compiled = torch.compile(model, backend="tensorkiln", options={"fallback": True})
    x = torch.randn(1, 2, 4, 4, 4)
    with pytest.warns(TorchFallbackWarning, match="backward graph"):
        compiled(x).backward()
    grad = model.linear.weight.grad.clone()
    model.zero_grad()
    model(x).backward()
    torch.testing.assert_close(grad, model.linear.weight.grad, rtol=1e-4, atol=1e-5)
