"""Fused attention on bf16 operands (kernels/templates/attention_bf16.py) against a float64 reference.

The reference computes softmax(q k^T * scale + mask) v in float64 on q, k and v rounded to bf16, as the
precision pass rounds them. The kernel also rounds each probability to bf16 for P V (a relative error
of at most 2^-9 per probability), so an output may differ from the reference by 2^-9 times the sum of
|p v| over its keys: the tests allow 2^-8 of it, plus float32 rounding. Each case runs with
`vdpbf16ps` and with the fallback that widens bf16 to float32 (TENSORKILN_NO_BF16_DOT=1).
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.kernels.target import cpu_target

from .dot_paths import HAS_BF16_DOT, bf16, bf16_path as path  # noqa: F401  (path: the fixture)

RNG = np.random.default_rng(17)
LANES = cpu_target().vector_bytes // 4  # float32 lanes: a depth of whole vectors takes the one-query kernel


def reference(q, k, v, mask=None, causal=False, scale=None) -> tuple[np.ndarray, np.ndarray]:
    """(softmax(q k^T * scale + mask) v, sum over keys of |p v|) in float64 on bf16-rounded operands;
    k and v may have fewer heads than q (grouped-query attention)."""
    q, k, v = bf16(q), bf16(k), bf16(v)
    if k.ndim == q.ndim and k.shape[-3] != q.shape[-3]:
        repeat = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, repeat, axis=-3), np.repeat(v, repeat, axis=-3)
    scores = q @ np.swapaxes(k, -1, -2) * (scale if scale is not None else 1 / np.sqrt(q.shape[-1]))
    length, source = scores.shape[-2:]
    if causal:
        scores = np.where(np.tri(length, source, dtype=bool), scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p @ v, p @ np.abs(v)


# the kernel each path names; "host": this CPU's default, the float32 kernel on rounded operands where it
# has no AVX512-BF16 (passes/bf16_fp32_gemm.py; its probabilities unrounded, well inside the bound)
PRECISION = {"vdpbf16ps": "bf16 (vdpbf16ps)", "widened": "bf16 (widened to fp32)",
             "host": "bf16 (vdpbf16ps)" if HAS_BF16_DOT else "bf16 operands (fp32 kernel)"}


def check(f, args, expected: tuple[np.ndarray, np.ndarray], path: str) -> None:
    """f(*args) is within the probabilities' rounding of the reference, from one bf16 attention kernel (one
    query row: attention_one_query.py's float32 kernel on the rounded operands, on every path)."""
    out = f(*args).numpy()
    want, magnitude = expected
    bound = 2.0 ** -8 * magnitude + 1e-5 * max(float(np.abs(want).max()), 1.0)
    excess = np.abs(out - want) - bound
    worst = np.unravel_index(excess.argmax(), out.shape)
    assert excess.max() <= 0, f"worst excess over the bound {excess.max():.3g} at {worst}"
    kernels = f.report(*args).kernels
    attention = [k for k in kernels if k.kind == "attention"]
    assert len(attention) == 1
    one_query = args[0].shape[-2] == 1 and args[0].shape[-1] % LANES == 0
    assert attention[0].precision == ("bf16 operands (fp32 kernel)" if one_query else PRECISION[path])


def qkv(b, h, length, source, d, dv, kv_heads=None):
    kv_heads = kv_heads or h
    return (RNG.standard_normal((b, h, length, d)).astype(np.float32),
            RNG.standard_normal((b, kv_heads, source, d)).astype(np.float32),
            RNG.standard_normal((b, kv_heads, source, dv)).astype(np.float32))


# (batch, heads, seq_q, seq_k, head_dim, value_dim, causal): size-1 dims, one query (decoding), odd
# lengths and head dims (an odd depth pads its last pair), value widths that are not a whole tile,
# query and key blocks with tails
SHAPES = [
    (1, 1, 1, 1, 1, 1, False),
    (1, 2, 1, 33, 64, 64, True),
    (2, 1, 7, 7, 3, 3, True),
    (1, 3, 33, 33, 17, 17, False),
    (1, 1, 130, 70, 24, 40, True),
    (1, 1, 67, 131, 80, 48, False),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s[:6])) + ("-causal" if s[6] else ""))
def test_shapes(path, shape):
    *dims, causal = shape
    q, k, v = qkv(*dims)
    f = tk.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), precision="bf16")
    check(f, (q, k, v), reference(q, k, v, causal=causal), path)


def test_masks_and_scale(path):
    q, k, v = qkv(1, 2, 40, 75, 16, 16)
    bool_mask = RNG.random((40, 75)) > 0.3
    bool_mask[:, 0] = True  # every query sees a key
    bias = RNG.standard_normal((1, 2, 40, 75)).astype(np.float32)
    for mask, causal in ((bool_mask, False), (bias, True)):
        f = tk.jit(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m, is_causal=causal, scale=0.3),
                   precision="bf16")
        check(f, (q, k, v, mask), reference(q, k, v, mask, causal, scale=0.3), path)


def test_grouped_query_attention():
    q, k, v = qkv(1, 4, 50, 60, 16, 16, kv_heads=2)
    f = tk.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
               precision="bf16")
    check(f, (q, k, v), reference(q, k, v, causal=True), "host")


def test_symbolic_length():
    """One program for every length (a run-time key count and causal diagonal), on bf16 pairs."""
    f = tk.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), precision="bf16",
               dynamic={"q": {2: "seq"}, "k": {2: "seq"}, "v": {2: "seq"}})
    for n in (70, 129):  # several query blocks of 64, a last key block of 6 or 1
        q, k, v = qkv(1, 2, n, n, 24, 24)
        check(f, (q, k, v), reference(q, k, v, causal=True), "host")
    assert f.compile_count == 1


def test_keys_and_values_sliced_from_one_projection(path):
    """K and V as column slices of one matmul's result: a static program, its arena sized at compile time."""
    y = RNG.standard_normal((40, 96)).astype(np.float32)
    w = tk.tensor((RNG.standard_normal((96, 128)) / 10).astype(np.float32))
    heads = lambda t: t.reshape(40, 2, 32).transpose(0, 1)  # noqa: E731

    def attend(y):
        kv = y @ w
        return F.scaled_dot_product_attention(heads(kv[:, :64]), heads(kv[:, :64]), heads(kv[:, 64:]))

    f = tk.jit(attend, precision="bf16")
    got = f(y).numpy()
    assert f.report(y).arena_bytes > 0 and "sizes:" not in open(f.report(y).source_path).read()
    want = attend(tk.tensor(y)).numpy()
    np.testing.assert_allclose(got, want, rtol=3e-2, atol=3e-2 * np.abs(want).max())


def test_fp32_stays_on_the_fp32_kernel():
    q, k, v = qkv(1, 2, 20, 20, 16, 16)
    f = tk.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v))
    f(q, k, v)
    assert [k.precision for k in f.report(q, k, v).kernels] == ["fp32"]


def test_an_infinite_value_in_the_last_key_row_stays_infinite(path):
    """An odd key count pairs the last key with one past the length: that key's value is a zero in the
    pack, not the last key's row at probability 0 (0 * inf would be NaN where the softmax gives inf)."""
    f = tk.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), precision="bf16")
    for n in (7, 33, 71):
        q, k, v = qkv(1, 2, 9, n, 16, 16)
        v[:, :, -1, 3] = np.inf
        got = f(q, k, v).numpy()
        assert np.isposinf(got[..., 3]).all() and np.isfinite(np.delete(got, 3, axis=-1)).all()
        assert f.report(q, k, v).kernels[0].precision == PRECISION[path]
