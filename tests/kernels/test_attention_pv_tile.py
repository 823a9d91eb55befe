"""The P V tile of the fused attention (templates/attention.py `pv_tile_vectors`): values padded to no
more vectors than needed, on 8- and 16-lane targets, and the kernel's numbers at those head sizes."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.kernels.templates.attention_blocking import attention_blocking, pv_tile_vectors

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("budget, lanes", [(12, 8), (24, 16)], ids=["16 registers", "32 registers"])
@pytest.mark.parametrize("dv", [8, 16, 24, 40, 64, 80, 96, 128, 256])
def test_the_tile_pads_the_values_no_more_than_any_other_width(budget, lanes, dv):
    vectors = -(-dv // lanes)
    width = pv_tile_vectors(vectors, budget)
    padded = lambda w: -(-vectors // w) * w  # noqa: E731
    assert 1 <= width <= budget // 4
    assert min(8, budget // width) * width <= budget  # accumulators fit the budget
    assert padded(width) == min(padded(w) for w in range(min(2, vectors), budget // 4 + 1))


def test_bert_heads_on_eight_lanes_are_not_padded(monkeypatch):
    """dv = 64 in 8 lanes: two 2-vector chunks of 6 rows, not three 3-vector chunks padded to 72."""
    monkeypatch.setenv("TENSORKILN_VECTOR_BYTES", "32")
    from tensorkiln.kernels import target
    target.cpu_target.cache_clear()
    try:
        bl = attention_blocking(384, 64, "float32")
    finally:
        monkeypatch.delenv("TENSORKILN_VECTOR_BYTES")
        target.cpu_target.cache_clear()
    assert (bl.pv_rows, bl.pv_cols, bl.dv_padded) == (6, 16, 64)
    assert bl.query_block % bl.pv_rows == 0


def _attention(q, k, v, m):
    return ((q @ k.transpose(-1, -2)) * 0.125 + m).softmax(-1) @ v


@pytest.mark.parametrize("dv", [64, 80])
def test_run_time_lengths_with_a_padding_mask_match_the_reference(dv):
    f = tk.jit(_attention, dynamic={"q": {2: "seq"}, "k": {2: "seq"}, "v": {2: "seq"}, "m": {3: "seq"}})
    for n in (17, 70, 131):
        q, k = (RNG.standard_normal((1, 3, n, 64)).astype(np.float32) for _ in range(2))
        v = RNG.standard_normal((1, 3, n, dv)).astype(np.float32)
        m = np.zeros((1, 1, 1, n), np.float32)
        m[..., n - n // 4:] = -10000.0
        s = (q.astype(np.float64) @ k.swapaxes(-1, -2)) * 0.125 + m
        e = np.exp(s - s.max(-1, keepdims=True))
        expected = (e / e.sum(-1, keepdims=True)) @ v
        np.testing.assert_allclose(f(q, k, v, m).numpy(), expected, rtol=1e-4, atol=1e-5)
        assert [kernel.kind for kernel in f.report(q, k, v, m).kernels] == ["attention"]
    assert f.compile_count == 1
