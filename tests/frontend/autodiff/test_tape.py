"""The eager autodiff API: backward, .grad, no_grad, detach, tk.grad, tk.Function, higher order."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk


def test_backward_accumulates_and_sums_branches():
    x = tk.tensor([1.0, 2.0], requires_grad=True)
    y = x * x + x.exp()  # x used on two branches
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([1.0, 2.0]) + np.exp([1.0, 2.0]), rtol=1e-6)
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([1.0, 2.0]) + np.exp([1.0, 2.0]) + 3, rtol=1e-6)


def test_backward_with_gradient_and_nonscalar_error():
    x = tk.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="scalar"):
        y.backward()
    y.backward(tk.tensor([1.0, 0.0, -1.0]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 0.0, -2.0])


def test_retain_graph():
    x = tk.tensor(2.0, requires_grad=True)
    y = x * x
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.item() == 8.0
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_no_grad_and_enable_grad():
    x = tk.tensor([1.0], requires_grad=True)
    with tk.no_grad():
        assert not (x * 2).requires_grad
        with tk.enable_grad():
            assert (x * 2).requires_grad
    assert (x * 2).requires_grad

    @tk.no_grad()
    def f(t):
        return t * 2
    assert not f(x).requires_grad
    assert tk.is_grad_enabled()


def test_detach_cuts_the_tape():
    x = tk.tensor([3.0], requires_grad=True)
    y = x * x.detach()  # d/dx = x (the detached factor is a constant)
    assert not x.detach().requires_grad and x.detach() is not x
    y.sum().backward()
    assert x.grad.item() == 3.0


def test_leaf_properties_and_inplace_rules():
    x = tk.tensor([1.0], requires_grad=True)
    y = x * 2
    assert x.is_leaf and not y.is_leaf and y.grad_fn is not None
    with pytest.raises(RuntimeError, match="leaf"):
        x.add_(1)
    with tk.no_grad():
        x.add_(1)
    assert x.item() == 2.0
    x.data = tk.tensor([5.0])
    assert x.item() == 5.0 and x.requires_grad
    with pytest.raises(RuntimeError, match="floating"):
        tk.tensor([1, 2]).requires_grad_()


def test_nondifferentiable_outputs():
    x = tk.tensor([1.0, 3.0, 2.0], requires_grad=True)
    assert not (x > 1).requires_grad and not x.argmax().requires_grad


def test_functional_grad_and_value_and_grad():
    f = lambda a, b: (a * b).sum() + (a ** 2).sum()  # noqa: E731
    a, b = tk.tensor([1.0, 2.0]), tk.tensor([3.0, 4.0])
    ga, gb = tk.grad(f, argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ga.numpy(), [5.0, 8.0])
    np.testing.assert_allclose(gb.numpy(), [1.0, 2.0])
    value, g = tk.value_and_grad(f)(a, b)
    assert value.item() == 16.0 and not value.requires_grad
    np.testing.assert_allclose(g.numpy(), [5.0, 8.0])
    assert a.grad is None  # functional: nothing accumulated
    assert tk.grad(lambda t: (t * 0 + 1).sum() * 0 + tk.tensor(1.0))(a).numpy().tolist() == [0.0, 0.0]


def test_grad_of_grad():
    d2 = tk.grad(tk.grad(lambda x: (x ** 3).sum()))(tk.tensor(2.0, dtype=tk.float64))
    assert d2.item() == pytest.approx(12.0)
    d3 = tk.grad(tk.grad(tk.grad(lambda x: (x.exp() * x).sum())))(tk.tensor(0.5, dtype=tk.float64))
    assert d3.item() == pytest.approx(np.exp(0.5) * 3.5)


def test_backward_create_graph():
    x = tk.tensor([1.5], dtype=tk.float64, requires_grad=True)
    y = (x ** 3).sum()
    y.backward(create_graph=True)
    g = x.grad
    x.grad = None
    g.sum().backward()
    assert x.grad.item() == pytest.approx(6 * 1.5)


class StraightThroughRound(tk.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        return (x * scale).round() / scale

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        assert x.shape == grad.shape
        return grad, None


def test_custom_function():
    x = tk.tensor([0.2, 0.7, 1.4], requires_grad=True)
    y = StraightThroughRound.apply(x, 2.0)
    np.testing.assert_allclose(y.numpy(), [0.0, 0.5, 1.5])
    (y * tk.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0, 3.0])
    with tk.no_grad():
        assert not StraightThroughRound.apply(x, 2.0).requires_grad


def test_clone_is_differentiable():
    x = tk.tensor([2.0], requires_grad=True)
    (x.clone() * 3).sum().backward()
    assert x.grad.item() == 3.0
