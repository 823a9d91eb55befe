"""BERT with a symbolic sequence length: at most two programs over every length up to the position
table (one for length 1, which specializes, one for the rest), each call equal to the eager model.

The sizes cross every threshold a kernel decides from: the GEMM's short M (< 4 rows), the row
kernels' and attention's parallel thresholds, the attention's one query block, the slice of the
position table to its whole length. Each is a run-time choice in the one program, not a size class."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.models.bert import BertConfig, BertModel

CONFIG = BertConfig(vocab_size=100, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=256, max_position_embeddings=160)


@pytest.fixture(scope="module")
def model():
    tk.manual_seed(1)
    m = BertModel(CONFIG)
    m.eval()
    return m


def test_every_length_is_served_by_at_most_two_programs(model):
    rng = np.random.default_rng(4)
    with tk.no_grad():
        f = tk.jit(model, dynamic={"input_ids": {1: "seq"}})
        for length in (1, 37, 2, 3, 160, 7, 97, 64, 130, 1):
            ids = rng.integers(0, CONFIG.vocab_size, (1, length))
            got = f(ids).numpy()
            want = model(tk.tensor(ids)).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert f.cache_size() == 2 and f.compile_count == 2
        symbolic = [e for entries in f._symbolic.values() for e in entries]
        assert len(symbolic) == 1
        guards = [g.text for g in symbolic[0].shape_env.guards]
        assert guards == ["seq <= 160"], guards  # the position table's length, nothing else
