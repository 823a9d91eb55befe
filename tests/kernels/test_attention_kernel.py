"""Fused attention with an online softmax: same numbers as the reference, no seq x seq buffer."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F

from .compiled import check_compiled

RNG = np.random.default_rng(3)


def _qkv(b=2, h=3, length=9, source=13, d=8, dv=5):
    return (RNG.standard_normal((b, h, length, d)).astype(np.float32),
            RNG.standard_normal((b, h, source, d)).astype(np.float32),
            RNG.standard_normal((b, h, source, dv)).astype(np.float32))


def _kinds(f, *args):
    return [k.kind for k in f.report(*args).kernels]


@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_matches_reference(causal):
    q, k, v = _qkv()
    f = check_compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v)
    assert _kinds(f, q, k, v) == ["attention"]


def test_masks_and_scale():
    q, k, v = _qkv()
    bool_mask = RNG.random((9, 13)) > 0.3
    bool_mask[:, 0] = True  # every query sees at least one key
    float_mask = RNG.standard_normal((1, 3, 9, 13)).astype(np.float32)
    f = check_compiled(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m, scale=0.3), q, k, v, bool_mask)
    assert "attention" in _kinds(f, q, k, v, bool_mask)
    check_compiled(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m), q, k, v, float_mask)


def test_fully_masked_row_is_nan_like_the_reference():
    q, k, v = _qkv(b=1, h=1, length=3, source=4)
    mask = np.ones((3, 4), bool)
    mask[1] = False
    out = tk.jit(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m))(q, k, v, mask).numpy()
    assert np.isnan(out[0, 0, 1]).all() and np.isfinite(out[0, 0, [0, 2]]).all()


def test_no_seq_by_seq_buffer():
    q, k, v = _qkv(b=1, h=2, length=256, source=256, d=16, dv=16)
    f = tk.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2.0)
    f(q, k, v)
    report = f.report(q, k, v)
    assert report.arena_bytes < 256 * 256 * 4  # the score matrix alone would need 512 KiB


def test_not_fused_when_the_weights_are_used_elsewhere():
    q, k, v = _qkv()

    def fn(q, k, v):
        weights = F.softmax(q @ k.transpose(-2, -1), -1)
        return weights @ v, weights.sum(-1)

    f = check_compiled(fn, q, k, v)
    assert "attention" not in _kinds(f, q, k, v)


def test_constant_full_shape_mask():
    q, k, v = _qkv()
    mask = tk.tensor(RNG.random((2, 3, 9, 13)) > 0.2)  # captured: a constant of the scores' shape
    f = check_compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, mask), q, k, v)
    assert _kinds(f, q, k, v) == ["attention"]


# ---- the blocked kernel over odd shapes: blocks of queries and keys that do not divide the
# sequence, head dims that are not a whole number of vectors, seq_q != seq_k

ODD_SHAPES = [  # (batch, heads, seq_q, seq_k, head_dim, value_dim)
    (1, 1, 1, 1, 1, 1),
    (1, 2, 1, 33, 64, 64),      # one query (decoding) over a key tail
    (2, 1, 7, 7, 3, 3),
    (1, 3, 33, 33, 17, 17),
    (1, 2, 127, 127, 80, 80),
    (1, 1, 1000, 1000, 64, 64),
    (1, 2, 33, 127, 64, 17),    # more keys than queries, value dim != head dim
    (1, 1, 127, 7, 17, 80),     # more queries than keys
    (1, 1, 49, 130, 128, 128),  # value rows wider than one register tile
]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", ODD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_odd_shapes(shape, causal):
    b, h, length, source, d, dv = shape
    q, k, v = _qkv(b, h, length, source, d, dv)
    f = check_compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v)
    assert _kinds(f, q, k, v) == ["attention"]


def test_causal_with_a_mask_and_a_float_bias():
    q, k, v = _qkv(1, 2, 70, 90, 16, 16)
    bool_mask = RNG.random((70, 90)) > 0.3
    bool_mask[:, 0] = True
    bias = RNG.standard_normal((70, 90)).astype(np.float32)
    for mask in (bool_mask, bias):
        f = check_compiled(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m, is_causal=True),
                           q, k, v, mask)
        assert _kinds(f, q, k, v, mask) == ["attention"]


def test_float64_and_strided_operands():
    q, k, v = (a.astype(np.float64) for a in _qkv(1, 2, 50, 70, 24, 8))
    check_compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v)
    # keys given transposed and values as a slice: the kernel packs what it cannot read in place
    kt = np.ascontiguousarray(k.swapaxes(-1, -2)).astype(np.float32)
    wide = np.concatenate([v, v], -1).astype(np.float32)
    f = check_compiled(lambda q, kt, wide: F.scaled_dot_product_attention(
        q, kt.transpose(-2, -1), wide[..., 3:11]), q.astype(np.float32), kt, wide)
    assert _kinds(f, q.astype(np.float32), kt, wide) == ["attention"]


def test_grouped_query_attention_and_shared_keys():
    q = RNG.standard_normal((1, 4, 40, 16)).astype(np.float32)
    k, v = (RNG.standard_normal((1, 2, 60, 16)).astype(np.float32) for _ in range(2))
    check_compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
                   q, k, v)
    shared_k, shared_v = k[0, 0], v[0, 0]  # one key/value set broadcast over every head
    check_compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, shared_k, shared_v)


@pytest.mark.parametrize("offset", [-3, 2])
def test_shifted_causal_mask(offset):
    """A constant lower-triangular mask with an offset is recognised like is_causal."""
    q, k, v = _qkv(1, 2, 60, 80, 16, 16)
    mask = np.tri(60, 80, offset, dtype=bool)
    mask[:3, 0] = True  # no row fully masked (a -3 offset would mask the first three)
    f = check_compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, tk.tensor(mask)), q, k, v)
    assert _kinds(f, q, k, v) == ["attention"]
    tri = np.tri(60, 80, offset, dtype=bool)
    check_compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, tk.tensor(tri)), q, k, v)


@pytest.mark.parametrize("shape", [ODD_SHAPES[1], ODD_SHAPES[3], ODD_SHAPES[6], ODD_SHAPES[7]],
                         ids=lambda s: "x".join(map(str, s)))
def test_odd_shapes_stay_in_bounds(shape):
    """Debug builds check every load and store the interval analysis cannot prove in range."""
    b, h, length, source, d, dv = shape
    q, k, v = _qkv(b, h, length, source, d, dv)
    check_compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v, debug=True)


def _safe_attention(q, k, v, m):
    """PyTorch's safe softmax (a row with every key masked gives 0, not NaN) written out, then @ v."""
    x = tk.where(m, q @ k.transpose(-1, -2) * 0.5, float("-inf"))
    weights = F.softmax(x, -1)
    return tk.where((x != float("-inf")).any(-1, keepdim=True).logical_not(), 0.0, weights) @ v


@pytest.mark.parametrize("shape", [(1, 1, 3, 4), (2, 3, 70, 67)])
def test_a_safe_softmax_guard_is_fused_and_gives_zero_rows(shape):
    b, h, length, source = shape
    q, k, v = _qkv(b, h, length, source)
    mask = RNG.random((length, source)) > 0.4
    mask[1] = False  # a query that sees no key
    scores = np.where(mask, q @ k.swapaxes(-1, -2) * 0.5, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights = np.nan_to_num(weights / weights.sum(-1, keepdims=True), nan=0.0)
    f = tk.jit(_safe_attention)
    np.testing.assert_allclose(f(q, k, v, mask).numpy(), weights @ v, rtol=1e-5, atol=1e-6)
    assert "attention" in _kinds(f, q, k, v, mask)
