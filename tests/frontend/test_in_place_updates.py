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


# ---- donated arguments: an output written into an argument's array ------------------------------

def _cache_update(value, cache, pos):
    """A KV cache written at one position: where(position == pos, value, cache)."""
    slot = tk.arange(cache.shape[1]).reshape(1, -1, 1) == pos
    return tk.where(slot, value, cache), (value * 2.0).sum()


def _cache_inputs(seed=0):
    rng = np.random.default_rng(seed)
    value = rng.standard_normal((3, 1, 5)).astype(np.float32)
    cache = rng.standard_normal((3, 7, 5)).astype(np.float32)
    return value, cache


def _expected(value, cache, pos):
    want = cache.copy()
    want[:, pos] = value[:, 0]
    return want, np.float32((value * 2.0).sum())


def test_a_donated_cache_is_updated_in_its_own_array():
    step = tk.jit(_cache_update, donate_argnums=1)
    for pos in (0, 4, 6):
        value, cache = _cache_inputs(pos)
        want, want_sum = _expected(value, cache, pos)
        new, total = step(value, cache, np.int64(pos))
        assert np.shares_memory(new.numpy(), cache)
        np.testing.assert_array_equal(new.numpy(), want)
        np.testing.assert_allclose(total.numpy(), want_sum, rtol=1e-5)
    # the kernel stores the one row only: the where became a store under an `if`
    lines = [line.strip() for line in step.report(value, cache, np.int64(0)).kernels[0].loop_ir.splitlines()]
    stores = [line for line in lines if line.startswith("out0[")]
    assert stores and not any("where(" in line for line in stores)
    assert any(line.startswith("if ") for line in lines)


def test_a_donated_array_read_after_the_update_is_not_overwritten():
    @tk.jit(donate_argnums=1)
    def f(value, cache, pos):
        new, _ = _cache_update(value, cache, pos)
        return new, cache.sum()  # the old values are read after the new ones are computed

    value, cache = _cache_inputs()
    before = cache.copy()
    new, total = f(value, cache, np.int64(3))
    np.testing.assert_array_equal(new.numpy(), _expected(value, before, 3)[0])
    np.testing.assert_allclose(total.numpy(), before.sum(), rtol=1e-5)


def test_without_donation_the_argument_is_left_alone():
    step = tk.jit(_cache_update)
    value, cache = _cache_inputs()
    before = cache.copy()
    new, _ = step(value, cache, np.int64(2))
    assert not np.shares_memory(new.numpy(), cache)
    np.testing.assert_array_equal(cache, before)
    np.testing.assert_array_equal(new.numpy(), _expected(value, before, 2)[0])


def test_a_read_only_donated_array_gets_a_fresh_output_with_its_old_values():
    step = tk.jit(_cache_update, donate_argnums=(1,))
    value, cache = _cache_inputs()
    cache.flags.writeable = False
    for pos in (1, 5):
        new, _ = step(value, cache, np.int64(pos))
        assert not np.shares_memory(new.numpy(), cache)
        np.testing.assert_array_equal(new.numpy(), _expected(value, cache, pos)[0])


def test_donated_lists_and_outputs_that_are_not_elementwise():
    @tk.jit(donate_argnums=0)
    def f(caches, value):
        a, b = caches
        return [tk.where(a > 0, value, a), b.flip(1), a + 1]

    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((4, 6)).astype(np.float32) for _ in range(2))
    value = rng.standard_normal((4, 6)).astype(np.float32)
    want = [np.where(a > 0, value, a), b[:, ::-1], a + 1]
    got = f([a.copy(), b.copy()], value)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)


def test_donate_argnums_must_be_positions():
    import pytest
    with pytest.raises(ValueError, match="donate_argnums"):
        tk.jit(_cache_update, donate_argnums=(-1,))
