"""Full sums run their outer blocks on threads and combine them in block order
(kernels/parallel_blocks.py): the same bits as one thread."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk


@pytest.mark.parametrize("reduce", [lambda t: t.sum(), lambda t: (t * t).mean(), lambda t: (t.exp() - t).sum()])
def test_threads_give_one_threads_bits(monkeypatch, reduce):
    x = np.random.default_rng(0).standard_normal((300, 1001)).astype(np.float32)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    threaded = tk.jit(reduce)
    text = threaded.explain(x)
    result = threaded(x).numpy()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    single = tk.jit(reduce)(x).numpy()
    assert result.tobytes() == single.tobytes()
    expected = float(np.asarray(reduce(tk.tensor(x.astype(np.float64))).numpy()))
    np.testing.assert_allclose(float(result), expected, rtol=1e-5)
    assert "(parallel)" in text


def test_a_small_reduction_stays_on_one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    x = np.ones(1000, np.float32)
    f = tk.jit(lambda t: t.sum())
    assert "(parallel)" not in f.explain(x)
    assert f(x).item() == 1000.0
