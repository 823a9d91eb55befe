"""GPT-2 with a symbolic prompt length and a symbolic KV-cache length: few programs, the specialized
programs' answers, and no length past the position table."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.errors import ShapeError
from tensorkiln.models import GPT2Config, GPT2LMHeadModel

CONFIG = GPT2Config(vocab_size=64, n_positions=48, n_embd=32, n_layer=1, n_head=2)
RNG = np.random.default_rng(5)


@pytest.fixture(scope="module")
def model():
    tk.manual_seed(0)
    m = GPT2LMHeadModel(CONFIG)
    m.eval()
    return m


def _relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_prefill_over_many_prompt_lengths(model):
    with tk.no_grad():
        prefill = tk.jit(model, dynamic={"input_ids": {1: "seq"}})
        for n in (9, 17, 30, 41, 48):
            ids = RNG.integers(0, CONFIG.vocab_size, (1, n))
            logits = prefill(ids).numpy()
            if n == 48:
                assert _relative_error(logits, tk.jit(model, dynamic=False)(ids).numpy()) < 1e-5
            else:
                assert _relative_error(logits, model(tk.tensor(ids)).numpy()) < 1e-5  # eager: the references
        assert prefill.compile_count <= 3
        with pytest.raises(ShapeError, match="prompt of 49 positions is longer than the model's 48"):
            prefill(RNG.integers(0, CONFIG.vocab_size, (1, 49)))


def test_decode_step_over_growing_kv_lengths(model):
    head_dim = CONFIG.n_embd // CONFIG.n_head
    with tk.no_grad():
        step = tk.jit(model.decode_step)  # automatic dynamic: the cache length becomes a symbol
        for length in (10, 16, 27, 40):
            caches = [RNG.standard_normal((1, CONFIG.n_head, length, head_dim)).astype(np.float32)
                      for _ in range(2 * CONFIG.n_layer)]
            token, pos = np.array([[3]]), np.array(length - 2, dtype=np.int64)
            logits, new = step(token, pos, [c.copy() for c in caches])
            expected, expected_caches = model.decode_step(tk.tensor(token), tk.tensor(pos),
                                                          [tk.tensor(c) for c in caches])
            assert _relative_error(logits.numpy(), expected.numpy()) < 1e-5
            for got, want in zip(new, expected_caches):
                np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
        assert step.compile_count <= 3  # a static first program, then symbolic ones
