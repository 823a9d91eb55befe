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
