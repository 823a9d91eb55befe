"""Injective kernels that read a transposed operand run in tiles, the operand's tile copied first
(kernels/transposed.py): same results as numpy for any shape, tails included."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk


@pytest.mark.parametrize("shape", [(1024, 512), (777, 301), (130, 200), (64, 65)])
def test_a_transposed_sum_matches_numpy(shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape[::-1]).astype(np.float32)
    f = tk.jit(lambda x, y: x * 2.0 + y.T)
    np.testing.assert_allclose(f(a, b).numpy(), a * 2.0 + b.T, rtol=1e-6)


@pytest.mark.parametrize("perm", [(0, 2, 1), (2, 1, 0), (1, 2, 0)])
def test_batched_permutes_match_numpy(perm):
    x = np.random.default_rng(1).standard_normal((3, 97, 130)).astype(np.float32)
    f = tk.jit(lambda t: t.permute(*perm) + 1.0)
    np.testing.assert_allclose(f(x).numpy(), x.transpose(perm) + 1.0, rtol=1e-6)


def test_the_transposed_operand_is_copied_tile_by_tile():
    a = np.ones((512, 256), np.float32)
    f = tk.jit(lambda x, y: x + y.T)
    text = f.explain(a, np.ones((256, 512), np.float32))
    assert "in_y_pack" in text  # the copy of y's tile, in y's own order
    contiguous = tk.jit(lambda x, y: x + y)
    assert "_pack" not in contiguous.explain(a, a)


def test_a_gathered_operand_beside_a_transposed_one():
    """A gather's index reads memory, so its step is unknown at compile time: the kernel still compiles."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((256, 128), dtype=np.float32)
    table = rng.standard_normal((50, 256), dtype=np.float32)
    ids = rng.integers(0, 50, 128).astype(np.int64)
    f = tk.jit(lambda x, t, i: x.T + t[i])
    np.testing.assert_allclose(f(a, table, ids).numpy(), a.T + table[ids], rtol=1e-6)
