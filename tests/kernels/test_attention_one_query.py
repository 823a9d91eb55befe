"""Fused attention for one query row (templates/attention_one_query.py): the decode step's kernel.

Checked against numpy (float64 sums) over key counts on both sides of every tile and block boundary,
value widths of one to several register tiles, masks, causal, grouped heads, keys that must be
packed, a run-time key count and a KV cache updated in place as GPT-2's decode step does; and that
it is chosen only where it applies."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.kernels.target import cpu_target
from tensorkiln.kernels.templates.attention_one_query import attention_one_query_blocking

from .compiled import check_compiled
from .test_attention_key_tail import _reference as key_tail_reference

RNG = np.random.default_rng(41)
LANES = cpu_target().vector_bytes // 4  # float32 lanes on this machine


def _reference(q, k, v, visible=None, bias=None):
    """float64 attention (test_attention_key_tail's), a visibility mask as an additive -inf mask."""
    mask = bias if visible is None else np.where(visible, 0.0, -np.inf)
    return key_tail_reference(q, k, v, mask)


def _one_query(f, *args) -> bool:
    """The compiled program's attention kernel is the one-query kernel (its softmax sums a block of keys)."""
    return "block_sum" in f.explain(*args)


def _qkv(b, h, n, d, dv, dtype=np.float32):
    return (RNG.standard_normal((b, h, 1, d)).astype(dtype), RNG.standard_normal((b, h, n, d)).astype(dtype),
            RNG.standard_normal((b, h, n, dv)).astype(dtype))


def test_chosen_for_one_query_and_a_depth_of_whole_vectors():
    assert attention_one_query_blocking(1, 64, 64, "float32").query_block == 1
    assert attention_one_query_blocking(1, 4 * LANES, 7, "float32") is not None
    assert attention_one_query_blocking(2, 64, 64, "float32") is None  # more queries: attention.py's blocks
    assert attention_one_query_blocking(1, LANES + 1, 64, "float32") is None  # a depth tail


def test_the_value_row_is_held_in_as_few_tiles_as_the_registers_allow():
    registers = cpu_target().vector_registers
    budget = 24 if registers >= 32 else 12
    for dv in (1, 5, 64, 100, 200, 400):
        bl = attention_one_query_blocking(1, 64, dv, "float32")
        assert bl.pv_cols <= budget * LANES and bl.dv_padded >= dv and bl.dv_padded % bl.pv_cols == 0
        assert bl.dv_padded - dv < bl.dv_padded // bl.pv_cols * LANES  # less than one vector a tile padded


@pytest.mark.parametrize("n", [1, 9, 63, 65, 300])
@pytest.mark.parametrize("d, dv", [(64, 64), (2 * 8, 5), (128, 200)])
def test_key_counts_and_widths_match_the_reference(n, d, dv):
    d = max(d, LANES) // LANES * LANES
    q, k, v = _qkv(2, 3, n, d, dv)
    f = tk.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v))
    np.testing.assert_allclose(f(q, k, v).numpy(), _reference(q, k, v), rtol=1e-4, atol=1e-5)
    assert _one_query(f, q, k, v)


@pytest.mark.parametrize("causal", [False, True])
def test_against_the_reference_interpreter(causal):
    q, k, v = _qkv(1, 2, 70, 4 * LANES, 48)
    f = check_compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v)
    assert _one_query(f, q, k, v)


def test_masks_bias_and_a_fully_masked_head():
    q, k, v = _qkv(2, 2, 90, 2 * LANES, 32)
    visible = RNG.random((2, 1, 1, 90)) > 0.5
    visible[0, ..., 3] = True
    visible[1] = False  # a batch entry that sees no key: NaN, as the reference
    f = tk.jit(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m))
    got = f(q, k, v, visible).numpy()
    assert np.isnan(got[1]).all()
    np.testing.assert_allclose(got[0], _reference(q, k, v, visible)[0], rtol=1e-4, atol=1e-5)
    bias = RNG.standard_normal((1, 2, 1, 90)).astype(np.float32)
    f = tk.jit(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m))
    np.testing.assert_allclose(f(q, k, v, bias).numpy(), _reference(q, k, v, bias=bias), rtol=1e-4, atol=1e-5)
    assert _one_query(f, q, k, v, bias)


def test_grouped_heads_packed_keys_and_float64():
    q = RNG.standard_normal((1, 4, 1, 2 * LANES)).astype(np.float32)
    k, v = (RNG.standard_normal((1, 2, 75, 2 * LANES)).astype(np.float32) for _ in range(2))
    check_compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), q, k, v)
    kt = np.ascontiguousarray(k.swapaxes(-1, -2))  # keys given transposed: packed by the kernel
    f = check_compiled(lambda q, kt, v: F.scaled_dot_product_attention(q[:, :2], kt.transpose(-2, -1), v), q, kt, v)
    assert _one_query(f, q, kt, v)
    check_compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), *_qkv(1, 2, 33, 16, 8, np.float64))


def test_a_run_time_key_count_and_an_infinite_value():
    f = tk.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), dynamic={"k": {2: "n"}, "v": {2: "n"}})
    for n in (3, 8, 64, 67, 133):
        q, k, v = _qkv(1, 2, n, 2 * LANES, 40)
        v[..., -1, 3] = np.inf
        got, want = f(q, k, v).numpy(), _reference(q, k, v)
        assert np.isinf(want[..., 3]).all() and not np.isnan(got).any()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert _one_query(f, q, k, v)


def test_a_cache_updated_in_place_as_a_decode_step_does():
    """GPT-2's decode step: the new key and value written at `pos`, the keys past it masked."""
    def step(q, k, v, cache_k, cache_v, pos):
        length = cache_k.shape[2]
        slot = (tk.arange(length) == pos).reshape(1, 1, length, 1)
        cache_k, cache_v = tk.where(slot, k, cache_k), tk.where(slot, v, cache_v)
        visible = (tk.arange(length) <= pos).reshape(1, 1, 1, length)
        return F.scaled_dot_product_attention(q, cache_k, cache_v, visible), cache_k, cache_v

    q, k, v = _qkv(1, 3, 1, 64, 64)
    cache_k, cache_v = (RNG.standard_normal((1, 3, 100, 64)).astype(np.float32) for _ in range(2))
    f = tk.jit(step)
    for pos in (0, 41, 99):
        out, new_k, new_v = (t.numpy() for t in f(q, k, v, cache_k, cache_v, np.int64(pos)))
        want_k, want_v = cache_k.copy(), cache_v.copy()
        want_k[:, :, pos], want_v[:, :, pos] = k[:, :, 0], v[:, :, 0]
        visible = (np.arange(100) <= pos).reshape(1, 1, 1, 100)
        np.testing.assert_allclose(out, _reference(q, want_k, want_v, visible), rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(new_k, want_k)


def test_in_bounds_in_a_debug_build():
    q, k, v = _qkv(1, 2, 67, 2 * LANES, 40)
    check_compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v, debug=True)
