"""A row kernel (layer norm) over the sum of gathers whose positions are iotas or broadcast constants,
at a symbolic length: BERT's embeddings (word, position `arange(seq)`, token type 0) as one kernel.

The positions are computed from the element index where the gather reads them (index-only values),
so the row structure holds although they are not of the row's shape.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F


def _embeddings(vocab: int, positions: int, hidden: int, seed: int):
    rng = np.random.default_rng(seed)
    tables = [rng.standard_normal(shape).astype(np.float32)
              for shape in ((vocab, hidden), (positions, hidden), (2, hidden))]

    def embed(ids):
        n = ids.shape[1]
        word, position, token_type = (tk.tensor(t) for t in tables)
        pos = tk.arange(n).reshape(1, n)
        zeros = tk.tensor(np.zeros((), np.int64)).expand(ids.shape[0], n)
        return F.layer_norm(word[ids] + position[pos] + token_type[zeros], (hidden,))

    def reference(ids: np.ndarray) -> np.ndarray:
        x = tables[0][ids] + tables[1][np.arange(ids.shape[1])][None] + tables[2][0]
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    return embed, reference


@pytest.mark.parametrize("hidden, seed", [(64, 0), (37, 1)])
def test_embedding_sum_and_layer_norm_is_one_row_kernel_at_every_length(hidden, seed):
    rng = np.random.default_rng(seed)
    embed, reference = _embeddings(vocab=50, positions=40, hidden=hidden, seed=seed)
    f = tk.jit(embed, dynamic={"ids": {1: "seq"}})
    for seq in (5, 17, 2, 33, 9):
        ids = rng.integers(0, 50, (1, seq))
        np.testing.assert_allclose(f(ids).numpy(), reference(ids), rtol=1e-4, atol=1e-5)
    assert f.compile_count == 1
    kernels = f.report(ids).kernels
    assert len(kernels) == 1 and kernels[0].kind == "row", [(k.name, k.kind) for k in kernels]


def test_embeddings_with_symbolic_batch_and_length_equal_the_reference():
    rng = np.random.default_rng(2)
    embed, reference = _embeddings(vocab=50, positions=40, hidden=24, seed=2)
    f = tk.jit(embed, dynamic={"ids": {0: "batch", 1: "seq"}})
    for batch, seq in [(2, 5), (3, 17), (2, 2), (5, 33)]:
        ids = rng.integers(0, 50, (batch, seq))
        np.testing.assert_allclose(f(ids).numpy(), reference(ids), rtol=1e-4, atol=1e-5)
    assert f.compile_count == 1
