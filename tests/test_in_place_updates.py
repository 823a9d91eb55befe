"""A compiled training step writes new parameters and optimizer state into their own arrays.

No allocation or per-parameter Python work per call, PyTorch's semantics (an
optimizer step updates parameters in place), and never a stale constant:
another jitted function that baked the old weights in retraces.
"""
from __future__ import annotations

import numpy as np

import tensorkiln as tk
import tensorkiln.nn.functional as F


def _model_and_step(opt_class=tk.optim.Adam):
    tk.manual_seed(0)
    model = tk.nn.Sequential(tk.nn.Linear(8, 16), tk.nn.ReLU(), tk.nn.Linear(16, 3))
    opt = opt_class(model.parameters(), lr=0.05)
    x = tk.tensor(np.random.default_rng(1).standard_normal((32, 8)).astype(np.float32))
    y = tk.tensor(np.random.default_rng(2).integers(0, 3, 32))

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return model, opt, step


def test_parameters_are_updated_in_their_own_arrays():
    model, _, step = _model_and_step()
    compiled = tk.jit(step)
    compiled()
    arrays = [p._value for p in model.parameters()]
    before = [a.copy() for a in arrays]
    compiled()
    assert all(p._value is a for p, a in zip(model.parameters(), arrays))
    assert any(not np.array_equal(a, b) for a, b in zip(arrays, before))
    entry = next(iter(compiled._cache.values()))
    assert entry.compiled._in_place  # the update kernels write in place


def test_in_place_steps_match_eager_steps():
    for opt_class in (tk.optim.SGD, tk.optim.Adam, tk.optim.AdamW):
        eager_model, _, eager_step = _model_and_step(opt_class)
        model, _, step = _model_and_step(opt_class)
        compiled = tk.jit(step)
        for _ in range(5):
            want, got = eager_step().numpy(), compiled().numpy()
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        for p, q in zip(model.parameters(), eager_model.parameters()):
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-5)


def test_a_function_that_baked_the_weights_in_sees_the_update():
    """The weights are folded at compile time (weight * 2 is a new constant): only the write
    count tells that the parameter's array holds new values."""
    model, _, step = _model_and_step()
    weight = model[0].weight
    x = np.ones((4, 8), np.float32)
    with tk.no_grad():
        infer = tk.jit(lambda x: x @ (weight * 2.0).T)
        first = infer(x).numpy()
    compiled = tk.jit(step)
    compiled()
    compiled()
    with tk.no_grad():
        again = infer(x).numpy()
    np.testing.assert_allclose(again, x @ (weight.numpy() * 2.0).T, rtol=1e-5, atol=1e-5)
    assert not np.allclose(again, first)


def test_read_only_parameter_arrays_are_not_written():
    model, _, step = _model_and_step(tk.optim.SGD)
    compiled = tk.jit(step)
    compiled()
    weight = model[0].weight
    frozen = weight._value.copy()
    frozen.flags.writeable = False
    weight._value = frozen
    compiled()
    assert weight._value is not frozen and not np.array_equal(weight.numpy(), frozen)


def test_output_arrays_are_recycled_only_when_nobody_holds_them():
    f = tk.jit(lambda x: (x * 2).exp())
    x = np.random.default_rng(0).random((300, 300)).astype(np.float32)
    first = f(x)
    assert f.report(x).backend == "c"
    kept = first.numpy().copy()
    second = f(x + 1)  # `first` is still held: a new array, `first` untouched
    assert second._value is not first._value
    np.testing.assert_array_equal(first.numpy(), kept)
    second_id = id(second._value)  # (the array stays alive, held for recycling: ids cannot collide)
    del second
    third = f(x)  # `second` was dropped: its array is written again
    assert id(third._value) == second_id
    np.testing.assert_allclose(third.numpy(), np.exp(2 * x), rtol=1e-6)
    view = third.numpy()[:10]  # a view keeps the array alive
    del third
    fourth = f(x + 2)
    assert id(fourth._value) != second_id
    np.testing.assert_allclose(view, np.exp(2 * x[:10]), rtol=1e-6)
