"""Optimizers against hand-computed PyTorch updates; state_dict round trips; schedulers."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tensorkiln as tk

G = [np.array([0.5, -1.0, 2.0]), np.array([-0.3, 0.2, 0.1]), np.array([1.0, 1.0, -1.0])]
P0 = np.array([1.0, -2.0, 0.5])


def _run(make_opt, steps=3):
    p = tk.tensor(P0.copy(), requires_grad=True)
    opt = make_opt([p])
    for g in G[:steps]:
        p.grad = tk.tensor(g)
        opt.step()
    return p.numpy(), opt


def _sgd_reference(lr, momentum=0.0, dampening=0.0, wd=0.0, nesterov=False):
    p, buf = P0.copy(), None
    for g in G:
        d = g + wd * p
        if momentum:
            buf = d.copy() if buf is None else momentum * buf + (1 - dampening) * d
            d = d + momentum * buf if nesterov else buf
        p = p - lr * d
    return p


@pytest.mark.parametrize("kwargs", [dict(lr=0.1), dict(lr=0.1, momentum=0.9), dict(lr=0.1, momentum=0.9, dampening=0.3),
                                    dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1)], ids=str)
def test_sgd(kwargs):
    got, _ = _run(lambda ps: tk.optim.SGD(ps, **kwargs))
    ref = _sgd_reference(kwargs["lr"], kwargs.get("momentum", 0), kwargs.get("dampening", 0),
                         kwargs.get("weight_decay", 0), kwargs.get("nesterov", False))
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def _adam_reference(lr, b1, b2, eps, wd, decoupled, amsgrad=False):
    p, m, v, vmax = P0.copy(), np.zeros(3), np.zeros(3), np.zeros(3)
    for t, g in enumerate(G, 1):
        if decoupled:
            p = p * (1 - lr * wd)
        elif wd:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        vmax = np.maximum(vmax, v)
        second = vmax if amsgrad else v
        denom = np.sqrt(second) / math.sqrt(1 - b2 ** t) + eps
        p = p - lr / (1 - b1 ** t) * m / denom
    return p


@pytest.mark.parametrize("cls,kwargs", [
    ("Adam", dict(lr=0.1)), ("Adam", dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1)),
    ("Adam", dict(lr=0.1, amsgrad=True)), ("AdamW", dict(lr=0.1)), ("AdamW", dict(lr=0.05, weight_decay=0.3))], ids=str)
def test_adam(cls, kwargs):
    got, _ = _run(lambda ps: getattr(tk.optim, cls)(ps, **kwargs))
    b1, b2 = kwargs.get("betas", (0.9, 0.999))
    wd = kwargs.get("weight_decay", 0.01 if cls == "AdamW" else 0.0)
    ref = _adam_reference(kwargs["lr"], b1, b2, 1e-8, wd, cls == "AdamW", kwargs.get("amsgrad", False))
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_zero_grad_and_skip_params_without_grad():
    a, b = tk.tensor([1.0], requires_grad=True), tk.tensor([2.0], requires_grad=True)
    opt = tk.optim.SGD([a, b], lr=1.0)
    a.grad = tk.tensor([1.0])
    opt.step()
    assert a.item() == 0.0 and b.item() == 2.0
    opt.zero_grad(set_to_none=False)
    assert a.grad.item() == 0.0
    opt.zero_grad()
    assert a.grad is None


def test_state_dict_round_trip():
    _, opt = _run(lambda ps: tk.optim.Adam(ps, lr=0.1), steps=2)
    state = opt.state_dict()
    assert state["param_groups"][0]["params"] == [0] and set(state["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    p = tk.tensor(P0.copy(), requires_grad=True)
    other = tk.optim.Adam([p], lr=0.5)
    other.load_state_dict(state)
    assert other.param_groups[0]["lr"] == 0.1 and other.state_dict()["state"][0]["step"] == 2
    np.testing.assert_array_equal(other.state_dict()["state"][0]["exp_avg"], state["state"][0]["exp_avg"])


def test_param_groups_and_validation():
    a, b = tk.tensor([1.0], requires_grad=True), tk.tensor([1.0], requires_grad=True)
    opt = tk.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    a.grad, b.grad = tk.tensor([1.0]), tk.tensor([1.0])
    opt.step()
    assert a.item() == pytest.approx(0.9) and b.item() == pytest.approx(0.5)
    with pytest.raises(ValueError):
        tk.optim.SGD([tk.tensor([1.0])], lr=0.1)
    with pytest.raises(ValueError):
        tk.optim.SGD([a], lr=0.1, nesterov=True)


def test_schedulers():
    p = tk.tensor([1.0], requires_grad=True)
    opt = tk.optim.SGD([p], lr=1.0)
    step = tk.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.1)
    lrs = []
    for _ in range(5):
        lrs.append(step.get_last_lr()[0])
        step.step()
    np.testing.assert_allclose(lrs, [1.0, 1.0, 0.1, 0.1, 0.01])
    opt = tk.optim.SGD([p], lr=1.0)
    cosine = tk.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4, eta_min=0.1)
    lrs = []
    for _ in range(5):
        lrs.append(opt.param_groups[0]["lr"])
        cosine.step()
    np.testing.assert_allclose(lrs, [0.1 + 0.9 * (1 + math.cos(math.pi * e / 4)) / 2 for e in range(5)])
    assert opt.param_groups[0].lr_tensor.item() == pytest.approx(opt.param_groups[0]["lr"])
