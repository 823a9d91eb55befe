"""GPT-2's decode step with a symbolic KV-cache length writes its caches in place: one program over
many lengths, the eager step's answers, and no kernel that reads the old caches to copy them."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.models import GPT2Config, GPT2LMHeadModel

CONFIG = GPT2Config(vocab_size=64, n_positions=64, n_embd=32, n_layer=2, n_head=2)
HEAD_DIM = CONFIG.n_embd // CONFIG.n_head
CACHES = 2 * CONFIG.n_layer
KV = tk.Dim("kv", max=CONFIG.n_positions)


@pytest.fixture(scope="module")
def model():
    tk.manual_seed(3)
    m = GPT2LMHeadModel(CONFIG)
    m.eval()
    return m


def _caches(length: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal((1, CONFIG.n_head, length, HEAD_DIM)).astype(np.float32) for _ in range(CACHES)]


def _symbolic_step(model):
    return tk.jit(model.decode_step, donate_argnums=2, dynamic={f"caches_{i}": {2: KV} for i in range(CACHES)})


def _check_against_eager(model, step, length: int, rng: np.random.Generator) -> None:
    caches = _caches(length, rng)
    token = rng.integers(0, CONFIG.vocab_size, (1, 1))
    pos = np.array(rng.integers(0, length), dtype=np.int64)
    donated = [c.copy() for c in caches]
    logits, new = step(token, pos, donated)
    want, want_caches = model.decode_step(tk.tensor(token), tk.tensor(pos), [tk.tensor(c) for c in caches])
    np.testing.assert_allclose(logits.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
    for got, expected, array in zip(new, want_caches, donated):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
        assert np.shares_memory(got.numpy(), array)  # written into the donated array


def test_one_program_writes_the_caches_in_place_at_every_length(model):
    rng = np.random.default_rng(11)
    with tk.no_grad():
        step = _symbolic_step(model)
        for length in (5, 2, 17, 9, 33, 64, 24):
            _check_against_eager(model, step, length, rng)
        assert step.cache_size() == 1
        source = open(step.report(np.array([[1]]), np.array(3), _caches(7, rng)).source_path).read()
        assert "s_kv" in source
        # the old caches are never read: every cache kernel stores the new row only
        assert not any(f"in_caches_{i}[" in source for i in range(CACHES))
        _check_against_eager(model, step, 1, rng)  # a cache of one position: a size that specializes


def test_the_symbolic_step_equals_the_specialized_one(model):
    rng = np.random.default_rng(12)
    length = 23
    token, pos = np.array([[7]]), np.array(length - 1, dtype=np.int64)
    caches = _caches(length, rng)
    with tk.no_grad():
        symbolic, specialized = _symbolic_step(model), tk.jit(model.decode_step, donate_argnums=2, dynamic=False)
        symbolic(token, pos, _caches(length + 6, rng))  # compiled at another length
        got, got_caches = symbolic(token, pos, [c.copy() for c in caches])
        want, want_caches = specialized(token, pos, [c.copy() for c in caches])
        assert specialized.report(token, pos, caches).source_path != symbolic.report(token, pos, caches).source_path
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(got_caches, want_caches):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
