"""A B stored transposed (x @ w.T, a linear layer's weight) packed by 8 x 8 register transposes: exact
copies on random shapes with every tail, and the loop-IR pack where the target has no 256-bit shuffles."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.kernels.target import cpu_target
from tensorkiln.kernels.templates.gemm_transposed_pack import PACK_FUNCTION

RNG = np.random.default_rng(20261129)


def _c_source(fn, *args) -> str:
    with open(fn.report(*args).source_path) as source:
        return source.read()


def _random_shapes(count: int):
    for _ in range(count):
        m, n, k = (int(x) for x in RNG.integers(33, 160, 3))  # above 32^3 multiply-adds: the BLIS GEMM
        yield m, n, k


@pytest.mark.parametrize("seed", range(3))
def test_linear_layer_products_are_exact_sums(seed):
    """Odd M, N and K: panels cut by N (zeros past it), depths not a multiple of 8 (the scalar steps)."""
    for m, n, k in _random_shapes(3):
        x = RNG.uniform(-1, 1, (m, k)).astype(np.float32)
        w = RNG.uniform(-1, 1, (n, k)).astype(np.float32)
        fn = tk.jit(lambda a, b: a @ b.T)
        out = fn(x, w).numpy()
        np.testing.assert_allclose(out, x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5, atol=1e-5 * np.sqrt(k))
        if cpu_target().fma256:
            assert PACK_FUNCTION in _c_source(fn, x, w)


def test_a_strided_batched_transposed_b():
    """B a slice of a wider [batch, N, K + 3] array (ld = K + 3) shared by a batch of A."""
    m, n, k = 45, 70, 100
    x = RNG.standard_normal((2, m, k)).astype(np.float32)
    w = RNG.standard_normal((2, n, k + 3)).astype(np.float32)
    fn = tk.jit(lambda a, b: a @ b[:, :, 1:k + 1].transpose(1, 2))
    want = x.astype(np.float64) @ w[:, :, 1:k + 1].transpose(0, 2, 1).astype(np.float64)
    np.testing.assert_allclose(fn(x, w).numpy(), want, rtol=1e-5, atol=1e-4)


def test_a_plain_b_and_a_target_without_256_bit_vectors_keep_the_loop_ir_pack(monkeypatch):
    x = RNG.standard_normal((64, 96)).astype(np.float32)
    w = RNG.standard_normal((80, 96)).astype(np.float32)
    plain = tk.jit(lambda a, b: a @ b)
    assert PACK_FUNCTION not in _c_source(plain, x, w.T.copy())
    monkeypatch.setenv("TENSORKILN_VECTOR_BYTES", "16")
    cpu_target.cache_clear()
    try:
        narrow = tk.jit(lambda a, b: a @ b.T)
        out = narrow(x, w).numpy()
        source = _c_source(narrow, x, w)
    finally:
        monkeypatch.undo()
        cpu_target.cache_clear()
    assert PACK_FUNCTION not in source
    np.testing.assert_allclose(out, x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5, atol=1e-4)
