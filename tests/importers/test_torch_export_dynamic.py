"""tk.from_torch keeps torch.export's dynamic dimensions symbolic: one program serves many sizes."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorkiln as tk  # noqa: E402


class Heads(torch.nn.Module):
    """Attention over heads of a linear layer, reshaped with the input's own (dynamic) sizes."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.linear(x).view(b, s, 4, 4).transpose(1, 2)
        a = torch.softmax(q @ q.transpose(-1, -2) / 2.0, dim=-1) @ q
        return a.transpose(1, 2).reshape(b, s * 4, 4).sum(1) + x.shape[1]  # a size used as a value


@pytest.fixture(scope="module")
def program():
    torch.manual_seed(0)
    model = Heads().eval()
    batch, seq = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=512)
    imported = tk.from_torch(model, (torch.randn(2, 8, 16),), dynamic_shapes={"x": {0: batch, 1: seq}})
    return model, imported


def _check(model, imported, shape):
    x = torch.randn(*shape)
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(imported(x).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_one_program_serves_several_sizes(program):
    model, imported = program
    for shape in [(2, 5, 16), (3, 7, 16), (2, 9, 16), (3, 11, 16)]:
        _check(model, imported, shape)
    assert imported.jit.cache_size() <= 2  # size classes of the kernels may add one; not one per size
    assert "s" in imported.explain(torch.randn(3, 7, 16)).split("== size symbols and guards")[1][:200]


def test_a_dimension_of_size_one_traces_static(program):
    model, imported = program
    _check(model, imported, (1, 6, 16))  # tensorkiln never makes 1 a symbol: its own static program


def test_sizes_outside_the_exported_range_are_refused(program):
    _, imported = program
    with pytest.raises(tk.ShapeError, match="outside the range"):
        imported(torch.randn(2, 513, 16))
    with pytest.raises(tk.ShapeError, match=r"\* = dynamic"):
        imported(torch.randn(2, 8, 15))


def test_a_size_used_as_a_value_is_read_at_run_time():
    f = tk.jit(lambda x: x.sum(1) + x.shape[1], dynamic={"x": {1: "n"}})
    for n in (8, 13, 21):  # (the reduction kernel has one size class below 8)
        x = np.ones((2, n), np.float32)
        np.testing.assert_allclose(f(x).numpy(), np.full(2, 2.0 * n))
    assert f.cache_size() == 1
