"""Autodiff inside tk.jit: backward graphs compiled to C, and compiled training steps with in-place updates."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn as nn
import tensorkiln.nn.functional as F


def _mlp_loss(x, w1, b1, w2):
    h = (x @ w1 + b1).tanh()
    return F.log_softmax(h @ w2, -1).sum() * -0.1 + (w1 * w1).sum() * 0.01


def test_compiled_gradients_equal_eager(rng):
    args = [tk.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((5, 4), (4, 6), (6,), (6, 3))]
    grad_fn = tk.grad(_mlp_loss, argnums=(1, 2, 3))
    compiled = tk.jit(grad_fn)
    eager = grad_fn(*args)
    got = compiled(*args)
    assert compiled.report(*args).backend == "c"
    for e, g in zip(eager, got):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=2e-5, atol=2e-5)


def test_compiled_conv_and_pool_gradients(rng):
    x = tk.tensor(rng.standard_normal((2, 2, 6, 6)).astype(np.float32))
    w = tk.tensor(rng.standard_normal((4, 1, 3, 3)).astype(np.float32))

    def loss(x, w):
        y = F.conv2d(x, w, stride=1, padding=1, groups=2).relu()
        return F.max_pool2d(y, 2).sum() + F.avg_pool2d(y, 3, stride=2).sum()

    fn = tk.grad(loss, argnums=(0, 1))
    compiled = tk.jit(fn)
    for e, g in zip(fn(x, w), compiled(x, w)):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-4, atol=1e-4)
    assert compiled.report(x, w).backend == "c"


# No conv bias before batch norm: its true gradient is 0, and Adam would amplify rounding noise.
def _model():
    tk.manual_seed(3)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Dropout(0.2), nn.Linear(4 * 3 * 3, 5))


def _step(model, opt):
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step


@pytest.mark.parametrize("make_opt", [lambda p: tk.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True,
                                                             weight_decay=1e-3),
                                      lambda p: tk.optim.AdamW(p, lr=0.01)], ids=["sgd", "adamw"])
def test_compiled_training_step_matches_eager(make_opt, rng):
    x = tk.tensor(rng.standard_normal((8, 1, 6, 6)).astype(np.float32))
    y = tk.tensor(rng.integers(0, 5, 8))
    eager_model, compiled_model = _model(), _model()
    eager_opt, compiled_opt = make_opt(eager_model.parameters()), make_opt(compiled_model.parameters())
    eager_step, compiled_step = _step(eager_model, eager_opt), tk.jit(_step(compiled_model, compiled_opt))
    for _ in range(3):
        le, lc = eager_step(x, y), compiled_step(x, y)
        np.testing.assert_allclose(lc.numpy(), le.numpy(), rtol=1e-5, atol=1e-5)
    assert compiled_step.report(x, y).backend == "c"
    assert compiled_step.cache_size() == 1
    for (name, a), b in zip(eager_model.state_dict().items(), compiled_model.state_dict().values()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    for a, b in zip(eager_model.parameters(), compiled_model.parameters()):  # .grad written back too
        np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert compiled_model[1].num_batches_tracked.item() == 3
    # one graph: inputs are x, y and the state; outputs the loss and the written-back tensors
    graph = compiled_step.graph(x, y)
    assert len(graph.outputs) > 1 + len(list(compiled_model.parameters()))


def test_scheduler_changes_reach_the_compiled_step():
    w = tk.tensor([1.0, 2.0], requires_grad=True)
    opt = tk.optim.SGD([w], lr=1.0)
    sched = tk.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)

    @tk.jit
    def step(x):
        loss = (w * x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    x = tk.tensor([1.0, 1.0])
    step(x)
    np.testing.assert_allclose(w.numpy(), [0.0, 1.0])
    sched.step()
    step(x)
    np.testing.assert_allclose(w.numpy(), [-0.5, 0.5])
    assert step.cache_size() == 1


def test_grad_accumulation_without_zero_grad_matches_eager():
    def make():
        return tk.tensor([1.0, -1.0], requires_grad=True)
    we, wc = make(), make()

    def accumulate(w):
        def fn(x):
            (w * w * x).sum().backward()
            return w.grad
        return fn
    eager, compiled = accumulate(we), tk.jit(accumulate(wc))
    x = tk.tensor([1.0, 2.0])
    for _ in range(3):
        np.testing.assert_allclose(compiled(x).numpy(), eager(x).numpy())
    np.testing.assert_allclose(wc.grad.numpy(), [6.0, -12.0])


def test_eval_module_under_no_grad_binds_parameters_as_constants(rng):
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm2d(8) if False else nn.ReLU(), nn.Linear(8, 3)).eval()
    x = tk.tensor(rng.standard_normal((2, 4)).astype(np.float32))
    with tk.no_grad():
        f = tk.jit(model)
        np.testing.assert_allclose(f(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
        assert len(f.graph(x).inputs) == 1  # parameters are constants
        with tk.no_grad():
            model[0].weight.data = model[0].weight * 2  # a later update retraces
        np.testing.assert_allclose(f(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_batch_norm_module_running_stats_under_jit(rng):
    bn_eager, bn_jit = nn.BatchNorm2d(3), nn.BatchNorm2d(3)
    x = tk.tensor(rng.standard_normal((4, 3, 2, 2)).astype(np.float32))
    f = tk.jit(bn_jit)
    for _ in range(2):
        np.testing.assert_allclose(f(x).numpy(), bn_eager(x).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bn_jit.running_var.numpy(), bn_eager.running_var.numpy(), rtol=1e-6)
    np.testing.assert_allclose(bn_jit.running_mean.numpy(), bn_eager.running_mean.numpy(), atol=1e-7)
    assert bn_jit.num_batches_tracked.item() == 2


def test_failed_trace_restores_eager_state():
    w = tk.tensor([1.0], requires_grad=True)

    @tk.jit
    def broken(x):
        with tk.no_grad():
            w.sub_(x)
        raise ValueError("boom")

    with pytest.raises(ValueError):
        broken(tk.tensor([1.0]))
    assert not w.is_traced and w.item() == 1.0
