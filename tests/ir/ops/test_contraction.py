"""Contractions (tensorkiln/ir/ops/contraction.py): matmul against numpy, conv2d against naive nested loops."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorkiln as tk
import tensorkiln.nn.functional as F

from helpers import COMPOSITE_FACTOR, FLOAT_DTYPES, assert_close, make_tensor

MATMUL_SHAPES = [
    ((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((1, 1), (1, 1)),
    ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)), ((2, 1, 2, 3), (4, 3, 2)), ((4, 2, 3), (4, 3, 1)),
    ((0, 3), (3, 2)), ((2, 0), (0, 3)), ((3,), (2, 3, 4)), ((2, 2, 3), (3,)), ((1, 5, 3), (7, 3, 2)),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + (tk.uint8, tk.int8, tk.int16, tk.int32, tk.int64),
                         ids=lambda d: d.name)
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul(shapes, dtype, rng):
    sa, sb = shapes
    a, av = make_tensor(rng, sa, dtype, -2, 2, "transpose")
    b, bv = make_tensor(rng, sb, dtype, -2, 2, "strided")
    expected = np.matmul(av.astype(np.float64), bv.astype(np.float64)) if dtype.is_floating else \
        np.matmul(av.astype(dtype.storage), bv.astype(dtype.storage))
    for out in (a @ b, a.matmul(b), tk.matmul(a, b)):
        assert out.dtype is dtype
        # float16/bfloat16: products accumulate in float32 and round once
        assert_close(out, expected, dtype, factor=2.0)


def test_matmul_with_numpy_operands_and_promotion():
    a = np.arange(6.0).reshape(2, 3)
    t = tk.tensor(np.ones((3, 2), np.float32))
    assert (a @ t).dtype is tk.float64
    assert_close(a @ t, a @ np.ones((3, 2)), tk.float64)
    assert_close(t.T @ a.T, np.ones((2, 3)) @ a.T, tk.float64)
    out = tk.tensor([[1, 2]], dtype=tk.int32) @ tk.tensor([[0.5], [0.25]], dtype=tk.float16)
    assert out.dtype is tk.float16 and out.item() == 1.0


def test_matmul_errors_name_shapes():
    with pytest.raises(tk.ShapeError, match=r"matmul: inner dimensions differ: 3 vs 4 \(operands: f32\[2,3\], f32\[4,5\]\)"):
        tk.zeros(2, 3) @ tk.zeros(4, 5)
    with pytest.raises(tk.ShapeError, match="must not be scalars"):
        tk.zeros(()) @ tk.zeros(3)
    with pytest.raises(tk.ShapeError, match="cannot be broadcast"):
        tk.zeros(2, 2, 3) @ tk.zeros(3, 3, 4)
    with pytest.raises(tk.DTypeError, match="booleans"):
        tk.zeros(2, 2, dtype=tk.bool) @ tk.zeros(2, 2, dtype=tk.bool)


@given(data=st.data(), m=st.integers(0, 4), k=st.integers(0, 4), n=st.integers(0, 4),
       batch_a=st.lists(st.integers(1, 3), max_size=2), batch_b=st.lists(st.integers(1, 3), max_size=2))
def test_matmul_random_batches(data, m, k, n, batch_a, batch_b):
    # make the batch shapes broadcastable by putting 1 where they differ
    ra, rb = list(reversed(batch_a)), list(reversed(batch_b))
    for i in range(min(len(ra), len(rb))):
        if ra[i] != rb[i]:
            rb[i] = 1
    sa, sb = tuple(reversed(ra)) + (m, k), tuple(reversed(rb)) + (k, n)
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    a, av = make_tensor(rng, sa, tk.float64)
    b, bv = make_tensor(rng, sb, tk.float64)
    assert_close(a @ b, av @ bv, tk.float64)


# ---- conv2d ---------------------------------------------------------------------------------------

def naive_conv2d(x, w, bias=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """PyTorch's conv2d (cross-correlation) by its definition, in nested loops over float64.

    padding is (top, bottom, left, right).
    """
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    pt, pb, pl, pr = padding
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    oh = (h + pt + pb - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pl + pr - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    per_group = o // groups
    for b in range(n):
        for oc in range(o):
            g = oc // per_group
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for ic in range(cg):
                        for u in range(kh):
                            for v in range(kw):
                                acc += (xp[b, g * cg + ic, i * stride[0] + u * dilation[0], j * stride[1] + v * dilation[1]]
                                        * w[oc, ic, u, v])
                    out[b, oc, i, j] = acc + (bias[oc] if bias is not None else 0.0)
    return out


CONV_CASES = [
    # (x shape, w shape, stride, padding, dilation, groups, bias)
    ((1, 1, 5, 5), (1, 1, 3, 3), 1, 0, 1, 1, False),
    ((2, 3, 6, 5), (4, 3, 3, 2), 1, 1, 1, 1, True),
    ((2, 4, 7, 7), (6, 2, 3, 3), 2, 1, 1, 2, True),
    ((1, 2, 8, 9), (2, 2, 2, 3), (2, 3), (1, 2), (2, 1), 1, False),
    ((1, 4, 5, 5), (4, 1, 3, 3), 1, 1, 1, 4, True),           # depthwise
    ((3, 2, 4, 4), (5, 2, 1, 1), 1, 0, 1, 1, True),           # 1x1
    ((1, 1, 3, 3), (1, 1, 3, 3), 1, 0, 1, 1, False),          # output 1x1
    ((1, 2, 5, 6), (3, 2, 3, 3), 1, "same", 1, 1, False),
    ((1, 2, 5, 6), (3, 2, 2, 4), 1, "same", (2, 1), 1, True),  # even kernels: more padding at the end
    ((1, 2, 5, 6), (3, 2, 3, 3), 1, "valid", 1, 1, False),
    ((0, 2, 5, 5), (3, 2, 3, 3), 1, 0, 1, 1, False),          # empty batch
]


def _torch_padding(padding, kernel, dilation):
    if padding == "valid":
        return 0, 0, 0, 0
    if padding == "same":
        pads = []
        for k, d in zip(kernel, dilation):
            total = d * (k - 1)
            pads += [total // 2, total - total // 2]
        return tuple(pads)
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    return ph, ph, pw, pw


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0]}*{c[1]}-s{c[2]}-p{c[3]}-d{c[4]}-g{c[5]}")
def test_conv2d_against_naive_loops(case, dtype, rng):
    xs, ws, stride, padding, dilation, groups, with_bias = case
    x, xv = make_tensor(rng, xs, dtype, -1, 1, "transpose")
    w, wv = make_tensor(rng, ws, dtype, -1, 1)
    b, bv = make_tensor(rng, (ws[0],), dtype, -1, 1) if with_bias else (None, None)
    out = F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
    expected = naive_conv2d(xv, wv, bv, pair(stride), _torch_padding(padding, ws[2:], pair(dilation)),
                            pair(dilation), groups)
    assert out.dtype is dtype
    assert_close(out, expected, dtype, factor=COMPOSITE_FACTOR if dtype.bits == 16 else 2.0)


def test_conv2d_unbatched_and_numpy_inputs(rng):
    x = rng.normal(size=(2, 5, 5)).astype(np.float32)
    w = rng.normal(size=(3, 2, 3, 3)).astype(np.float32)
    out = F.conv2d(x, w, padding=1)
    assert out.shape == (3, 5, 5)
    assert_close(out, naive_conv2d(x[None], w, padding=(1, 1, 1, 1))[0], tk.float32)


def test_conv2d_weight_and_bias_are_cast_to_input_dtype(rng):
    x = tk.tensor(rng.normal(size=(1, 1, 4, 4)), dtype=tk.float16)
    w = tk.tensor(rng.normal(size=(1, 1, 2, 2)))  # float64
    assert F.conv2d(x, w).dtype is tk.float16
    assert F.conv2d(x, w, tk.ones(1)).dtype is tk.float16  # a float32 bias does not widen the output


def test_conv2d_errors():
    x = tk.zeros(1, 4, 5, 5)
    with pytest.raises(tk.ShapeError, match=r"conv2d: weight expects 3 input channels, input has 4 \(operands: f32\[1,4,5,5\], f32\[2,3,3,3\]\)"):
        F.conv2d(x, tk.zeros(2, 3, 3, 3))
    with pytest.raises(tk.ShapeError, match="groups=3 must divide"):
        F.conv2d(x, tk.zeros(3, 1, 3, 3), groups=3)
    with pytest.raises(tk.ShapeError, match="larger than the padded input"):
        F.conv2d(x, tk.zeros(2, 4, 7, 7))
    with pytest.raises(tk.ShapeError, match="padding='same' needs stride 1"):
        F.conv2d(x, tk.zeros(2, 4, 3, 3), stride=2, padding="same")
    with pytest.raises(tk.DTypeError, match="floating"):
        F.conv2d(tk.zeros(1, 1, 3, 3, dtype=tk.int32), tk.zeros(1, 1, 1, 1, dtype=tk.int32))
    with pytest.raises(tk.ShapeError, match="weight must be"):
        F.conv2d(x, tk.zeros(4, 3, 3))
    with pytest.raises(ValueError, match="padding must be"):
        F.conv2d(x, tk.zeros(2, 4, 3, 3), padding="full")


# ---- linear --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("x_shape", [(5,), (2, 5), (3, 2, 5), (0, 5)])
def test_linear(x_shape, dtype, rng):
    x, xv = make_tensor(rng, x_shape, dtype, -1, 1, "transpose")
    w, wv = make_tensor(rng, (4, 5), dtype, -1, 1)
    b, bv = make_tensor(rng, (4,), dtype, -1, 1)
    assert_close(F.linear(x, w, b), xv @ wv.T + bv, dtype, factor=COMPOSITE_FACTOR)
    assert_close(F.linear(x, w), xv @ wv.T, dtype, factor=2.0)
