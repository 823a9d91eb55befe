"""torch.compile(model, backend="tensorkiln"): real models against eager PyTorch, recompiles, unsupported ops.

Tolerance (float32 logits): rtol 1e-4, atol 1e-4 (docs/pytorch.md). Compiled models are shared through
module-scoped fixtures: Dynamo's tracing costs seconds per model.
"""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import numpy as np  # noqa: E402

import tensorkiln as tk  # noqa: E402
from tensorkiln.importers.torch import STATS, TorchFallbackWarning, tensorkiln_backend  # noqa: E402

import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the model helpers sit next to this file
from tensorkiln.tools import torch_reference as tm  # noqa: E402
import torch_ops_models as zoo  # noqa: E402

RTOL, ATOL = 1e-4, 1e-4


def assert_close(actual, expected):
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_close(a, e)
        return
    assert isinstance(actual, torch.Tensor)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=RTOL, atol=ATOL)


def compiled_run(model, *inputs, **options):
    """(compiled module, its output, eager output); asserts tensorkiln (not eager PyTorch) ran the graph."""
    compiled = torch.compile(model, backend="tensorkiln", options=options or None)
    with torch.no_grad():
        expected = model(*inputs)
        before = STATS["tensorkiln_calls"]
        actual = compiled(*inputs)
        assert STATS["tensorkiln_calls"] > before
    return compiled, actual, expected


@pytest.fixture(scope="module")
def resnet():
    torch._dynamo.reset()
    return compiled_run(tm.resnet18(), tm.image())


@pytest.fixture(scope="module")
def bert():
    model = tm.bert_encoder()
    return (model,) + compiled_run(model, *tm.bert_inputs())


def test_backend_is_registered_by_name():
    assert "tensorkiln" in torch._dynamo.list_backends()
    from torch._dynamo.backends.registry import lookup_backend
    assert lookup_backend("tensorkiln") is tensorkiln_backend


def test_resnet18_matches_eager(resnet):
    _, actual, expected = resnet
    assert expected.abs().max() > 1e-2  # logits, not a degenerate near-zero output
    assert_close(actual, expected)


def test_mobilenet_v2_matches_eager():
    _, actual, expected = compiled_run(tm.mobilenet_v2(), tm.image())
    assert_close(actual, expected)


def test_bert_encoder_matches_eager(bert):
    _, _, actual, expected = bert
    assert_close(actual, expected)


def test_recompile_on_new_shape(bert):
    model, compiled, _, _ = bert
    compiles = STATS["compiles"]
    for batch, seq in ((1, 8), (3, 12)):  # Dynamo recompiles (dynamic shapes); tensorkiln specializes per shape
        inputs = tm.bert_inputs(batch, seq, seed=batch)
        with torch.no_grad():
            assert_close(compiled(*inputs), model(*inputs))
    assert STATS["compiles"] >= compiles + 2


def test_static_shapes_recompile():
    model = zoo.seeded(zoo.Convolutions)
    compiled = torch.compile(model, backend="tensorkiln", dynamic=False)
    for shape in ((1, 4, 9, 11), (2, 4, 12, 10)):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            assert_close(compiled(x), model(x))


@pytest.mark.parametrize("name", ["Elementwise", "Movement", "Reductions", "Attention"])
def test_op_coverage(name):
    cls = getattr(zoo, name)
    inputs = getattr(zoo, f"{name.lower()}_inputs")()
    _, actual, expected = compiled_run(zoo.seeded(cls), *inputs)
    assert_close(actual, expected)


class Unsupported(torch.nn.Module):
    def forward(self, x):
        y = torch.histc(x, 4).sum() + torch.relu(x)
        return torch.fft.rfft(y).abs().sum() + torch.histc(y, 4)


def test_unsupported_ops_are_listed_all_at_once():
    compiled = torch.compile(Unsupported(), backend="tensorkiln")
    with torch.no_grad(), pytest.raises(tk.UnsupportedOpError) as info:
        compiled(torch.randn(3, 4))
    message = str(info.value)
    assert "aten.histc.default" in message and "aten._fft_r2c.default" in message
    assert "histc, histc_1" in message  # every node using the op is named
    assert "relu" not in message


class Spectrum(torch.nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x.relu()).abs()  # complex values: refused


def test_unsupported_ops_fall_back_to_eager_with_an_option():
    model, inputs = Spectrum(), (torch.randn(3, 8),)
    compiled = torch.compile(model, backend="tensorkiln", options={"fallback": True})
    with torch.no_grad(), pytest.warns(TorchFallbackWarning, match="aten._fft_r2c.default"):
        actual = compiled(*inputs)
    with torch.no_grad():
        assert_close(actual, model(*inputs))


def test_unknown_option_is_refused():
    compiled = torch.compile(zoo.seeded(zoo.Reductions), backend="tensorkiln", options={"fallbak": True})
    with pytest.raises(Exception, match="fallbak"):
        compiled(*zoo.reductions_inputs())


def test_grad_mode_compiles_the_backward_graph_too():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    compiled = torch.compile(model, backend="tensorkiln")
    x = torch.randn(2, 4)
    before = STATS["tensorkiln_calls"]
    out = compiled(x)
    out.sum().backward()
    assert STATS["tensorkiln_calls"] >= before + 2  # the forward and the backward graph
    weight_grad = model[0].weight.grad.clone()
    model.zero_grad()
    model(x).sum().backward()
    assert_close(weight_grad, model[0].weight.grad)
    with torch.no_grad():
        assert_close(compiled(x), model(x))


def test_weights_changed_in_place_recompile():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
    compiled = torch.compile(model, backend="tensorkiln")
    x = torch.randn(2, 4)
    with torch.no_grad():
        first = compiled(x)
        model[0].bias.add_(10.0)
        second = compiled(x)
        assert_close(second, model(x))
    assert not torch.allclose(first, second)


def test_backend_callable_directly():
    model = zoo.seeded(zoo.Reductions)
    compiled = torch.compile(model, backend=tensorkiln_backend)
    (x,) = zoo.reductions_inputs()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", TorchFallbackWarning)
        assert_close(compiled(x), model(x))


class Mixed(torch.nn.Module):
    """Compiled parts around unsupported ops: a linear layer, an FFT and a log-cumulative-sum-exp."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        spectrum = torch.fft.rfft(self.linear(x).relu()).abs()
        return (spectrum * 2 + 1).sum(-1), torch.logcumsumexp(x, -1) + x


def test_fallback_compiles_the_parts_around_unsupported_ops():
    torch._dynamo.reset()
    model, x = Mixed(), torch.randn(3, 8)
    compiled = torch.compile(model, backend="tensorkiln", options={"fallback": True})
    before = dict(STATS)
    with torch.no_grad(), pytest.warns(TorchFallbackWarning, match="logcumsumexp") as record:
        actual = compiled(x)
    message = str(record[0].message)
    assert "_fft_r2c" in message and "compiled part(s)" in message
    assert STATS["compiles"] - before.get("compiles", 0) >= 2  # the linear layer's part and the sum's
    with torch.no_grad():
        for got, want in zip(actual, model(x)):
            assert_close(got, want)
        calls = STATS["partitioned_calls"]
        compiled(torch.randn(3, 8))
    assert STATS["partitioned_calls"] == calls + 1
