"""PyTorch's random ops through the torch.compile backend: tensorkiln's Philox numbers with PyTorch's
distributions (statistics at bounds that cannot fail by chance), new numbers every call, torch.manual_seed
reproducibility, training-mode dropout; shapes and dtypes as eager PyTorch gives them."""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tensorkiln.importers.torch import STATS  # noqa: E402

F = torch.nn.functional
N = (64, 129)  # 8256 numbers a draw: a mean's standard error is 0.011 standard deviations


def _draws(x, p):
    """Every random op family on x (uniform in [0, 1)) and the probability tensor p."""
    return {
        "rand": torch.rand(N[0], N[1]),
        "randn": torch.randn(N, dtype=torch.float64),
        "rand_like": torch.rand_like(x),
        "randn_like": torch.randn_like(x),
        "randint_like": torch.randint_like(x, 3, 10),
        "randint": torch.randint(0, 7, N),
        "uniform": torch.empty_like(x).uniform_(-2.0, 6.0),
        "normal_": torch.empty_like(x).normal_(1.5, 3.0),
        "normal": torch.normal(x, 0.5),
        "exponential": torch.empty_like(x).exponential_(4.0),
        "geometric": torch.empty_like(x).geometric_(0.25),
        "log_normal": torch.empty_like(x).log_normal_(0.0, 0.5),
        "cauchy": torch.empty_like(x).cauchy_(1.0, 2.0),
        "bernoulli": torch.bernoulli(p),
        "bernoulli_p": torch.empty_like(x).bernoulli_(0.3),
        "dropout": F.dropout(x + 1.0, 0.2, training=True),
        "rrelu": F.rrelu(x - 0.5, 0.1, 0.3, training=True),
    }


# name -> (mean, variance) of the distribution (None: not checked), for x uniform and p = 0.7 everywhere
MOMENTS = {
    "rand": (0.5, 1 / 12), "randn": (0.0, 1.0), "rand_like": (0.5, 1 / 12), "randn_like": (0.0, 1.0),
    "randint_like": (6.0, (7 ** 2 - 1) / 12), "randint": (3.0, (7 ** 2 - 1) / 12), "uniform": (2.0, 64 / 12),
    "normal_": (1.5, 9.0), "normal": (0.5, 0.25 + 1 / 12), "exponential": (0.25, 1 / 16),
    "geometric": (4.0, 0.75 / 0.25 ** 2), "log_normal": (math.exp(0.125), (math.exp(0.25) - 1) * math.exp(0.25)),
    "bernoulli": (0.7, 0.21), "bernoulli_p": (0.3, 0.21), "dropout": (1.5, None),
}


def _run_twice():
    torch._dynamo.reset()
    compiled = torch.compile(_draws, backend="tensorkiln", dynamic=False)
    x = torch.rand(N)
    p = torch.full(N, 0.7)
    with torch.no_grad():
        before = STATS["tensorkiln_calls"]
        torch.manual_seed(123)
        first = compiled(x, p)
        second = compiled(x, p)
        torch.manual_seed(123)
        again = compiled(x, p)
        assert STATS["tensorkiln_calls"] >= before + 3, "the graph did not run in tensorkiln"
        expected = _draws(x, p)
    return x, first, second, again, expected


@pytest.fixture(scope="module")
def runs():
    return _run_twice()


def test_shapes_and_dtypes_are_eager_pytorchs(runs):
    _, first, _, _, expected = runs
    for name, value in first.items():
        assert value.shape == expected[name].shape and value.dtype == expected[name].dtype, name


def test_moments_match_the_distributions(runs):
    _, first, _, _, _ = runs
    for name, (mean, variance) in MOMENTS.items():
        values = first[name].double()
        # 8 standard errors of the mean, 15% of the variance: far outside chance at this count
        assert abs(values.mean().item() - mean) < 8 * math.sqrt(variance or 1.0) / math.sqrt(values.numel()), name
        if variance is not None:
            assert abs(values.var().item() / variance - 1) < 0.15, name
    assert first["randint"].min() == 0 and first["randint"].max() == 6
    assert first["randint_like"].min() == 3 and first["randint_like"].max() == 9
    assert first["geometric"].min() >= 1 and torch.equal(first["geometric"], first["geometric"].round())
    assert abs(first["cauchy"].median().item() - 1.0) < 0.1  # the Cauchy has no mean: its median


def test_dropout_and_rrelu_apply_one_mask(runs):
    x, first, _, _, _ = runs
    kept = first["dropout"] != 0
    assert abs(kept.double().mean().item() - 0.8) < 0.02
    torch.testing.assert_close(first["dropout"][kept], (x + 1.0)[kept] / 0.8)
    negative = x < 0.5
    slope = first["rrelu"][negative] / (x - 0.5)[negative]
    assert slope.min() >= 0.1 - 1e-6 and slope.max() <= 0.3 + 1e-6
    torch.testing.assert_close(first["rrelu"][~negative], (x - 0.5)[~negative])


def test_every_call_draws_new_numbers_and_manual_seed_repeats_them(runs):
    _, first, second, again, _ = runs
    for name in first:
        assert not torch.equal(first[name], second[name]), name
        assert torch.equal(first[name], again[name]), name


def test_native_dropout_in_training_returns_its_mask():
    def f(x):
        return torch.ops.aten.native_dropout(x, 0.4, True), torch.ops.aten.native_dropout(x, 0.4, False)

    torch._dynamo.reset()
    x = torch.randn(33, 65)
    with torch.no_grad():
        (out, mask), (same, ones) = torch.compile(f, backend="tensorkiln", dynamic=False)(x)
    assert mask.dtype == torch.bool and abs(mask.double().mean().item() - 0.6) < 0.05
    torch.testing.assert_close(out, torch.where(mask, x / 0.6, 0.0))
    torch.testing.assert_close(same, x)
    assert ones.all()


def test_a_model_in_train_mode_runs_its_dropout_compiled():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(0.5), torch.nn.Linear(32, 4)).train()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="tensorkiln")
    x = torch.randn(8, 16)
    with torch.no_grad():
        before = STATS["tensorkiln_calls"]
        a, b = compiled(x), compiled(x)
        assert STATS["tensorkiln_calls"] == before + 2
        model.eval()
        torch.testing.assert_close(torch.compile(model, backend="tensorkiln")(x), model(x), rtol=1e-5, atol=1e-5)
    assert not torch.equal(a, b)


def test_randperm_is_a_permutation_that_changes_per_call():
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x[torch.randperm(x.shape[0])], backend="tensorkiln", dynamic=False)
    x = torch.arange(37.0)
    with torch.no_grad():
        a, b = compiled(x), compiled(x)
    assert torch.equal(a.sort().values, x) and torch.equal(b.sort().values, x)
    assert not torch.equal(a, b)
