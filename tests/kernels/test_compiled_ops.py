"""Every primitive op, compiled to C, against the reference interpreter.

Several ops share one compiled graph (a tuple of outputs) to keep the number
of C compiler runs, and so the suite's time, small.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.ir.ops import REGISTRY, OpKind
import tensorkiln.nn.functional as F

from .compiled import check_compiled

RNG = np.random.default_rng(1234)


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# Every one-operand primitive of the op table, through its method, on inputs inside its domain.
UNARY = [op for op in REGISTRY.values() if op.arity == 1 and op.method and op.kind == OpKind.ELEMENTWISE]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_unary_float_ops(dtype):
    x = tk.tensor(randn(3, 17) * 3, dtype=dtype)
    positive = tk.tensor(np.abs(randn(3, 17)) + 0.1, dtype=dtype)
    unit = tk.tensor(np.tanh(randn(3, 17)) * 0.95, dtype=dtype)

    def inside(op, x, p, u):
        low, high = op.domain
        return x if low is None else u if high is not None else p

    def fn(x, p, u):
        return tuple(getattr(inside(op, x, p, u), op.method)() for op in UNARY) + (
            p.reciprocal(), x.softplus(), x.silu())
    check_compiled(fn, x, positive, unit)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64"])
def test_integer_ops(dtype):
    info = np.iinfo(dtype)  # the type's full range: arithmetic wraps, as numpy's does
    a = tk.tensor(RNG.integers(info.min, info.max, (4, 9), dtype=dtype, endpoint=True), dtype=dtype)
    b = tk.tensor(RNG.integers(1, 7, (9,)), dtype=dtype)

    def fn(a, b):
        return (a + b, a - b, a * b, a // b, a % b, -a, a.abs(), a.sign(), a.relu(), tk.maximum(a, b),
                tk.minimum(a, b), a < b, a == b, a >= b, a.sum(1), a.max(0).values, a.argmax(1), a.prod(0),
                a.to(tk.float32) / 3)
    check_compiled(fn, a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_binary_broadcasting(dtype):
    a = tk.tensor(randn(2, 1, 5), dtype=dtype)
    b = tk.tensor(randn(3, 1), dtype=dtype)
    c = tk.tensor(np.abs(randn(5)) + 0.5, dtype=dtype)

    def fn(a, b, c):
        return (a + b, a - b, a * b, a / c, c ** b, tk.maximum(a, b), tk.minimum(a, b), a // c, a % c,
                a > b, a != b, tk.where(a > b, a, b), a * 2.5 + 1)
    check_compiled(fn, a, b, c)


def test_bool_ops_and_casts():
    a = RNG.random((4, 6)) > 0.5
    b = RNG.random((6,)) > 0.5
    x = randn(4, 6) * 100

    def fn(a, b, x):
        return (a & b, a | b, a ^ b, ~a, a.any(1), a.all(0), a.sum(), x.to(tk.int8), x.to(tk.int32), x.to(tk.bool),
                a.to(tk.float32), x.to(tk.float16), x.to(tk.bfloat16), x.to(tk.int64).to(tk.float64),
                x.to(tk.uint8), x.to(tk.int16), a.to(tk.uint8), x.to(tk.int16).to(tk.uint8))
    check_compiled(fn, a, b, x)


def test_cast_saturates_and_nan():
    x = np.array([np.nan, np.inf, -np.inf, 1e10, -1e10, 3.7, -3.7, 0.0], dtype=np.float32)
    check_compiled(lambda x: (x.to(tk.int32), x.to(tk.int8), x.to(tk.int64), x.to(tk.uint8), x.to(tk.int16)), x)


@pytest.mark.parametrize("dims,keep", [(None, False), (0, True), (1, False), ((0, 2), False), (-1, True)])
def test_reductions(dims, keep):
    x = tk.tensor(randn(3, 4, 5))

    def fn(x):
        return (x.sum(dims, keepdim=keep), x.amax(dims, keepdim=keep), x.amin(dims, keepdim=keep),
                x.prod(dims, keepdim=keep), x.mean(dims, keepdim=keep), x.var(dims, keepdim=keep))
    check_compiled(fn, x)


def test_argmax_argmin_and_nan():
    x = randn(4, 7)
    x[1, 3] = np.nan
    x[2, :] = 1.0  # ties: first index wins
    check_compiled(lambda x: (x.argmax(1), x.argmin(0), x.argmax(), x.amax(1), x.amin(1)), x)


def test_reductions_with_empty_axes():
    x = np.zeros((3, 0), np.float32)
    check_compiled(lambda x: (x.sum(1), x.prod(1), x.sum(0)), x)


def test_movement_ops():
    x = tk.tensor(randn(2, 3, 4))

    def fn(x):
        return (x.reshape(4, 6), x.permute(2, 0, 1), x.transpose(0, 2).reshape(-1), x[:, ::-1, 1:3],
                x[1, :, ::2], x[..., None, -1], x.expand(5, 2, 3, 4) * 1, F.pad(x, (1, 2, 0, 1), value=-1.0),
                tk.cat([x, x * 2], 1), tk.stack([x, x], 0), x.flip((0, 2)), x.repeat(2, 1, 1),
                F.pad(x, (2, 1), mode="reflect"), F.pad(x, (1, 1), mode="replicate"))
    check_compiled(fn, x)


def test_take_gather_and_indexing():
    data = randn(5, 6)
    idx = np.array([[0, 4], [-1, 2]], dtype=np.int64)
    along = RNG.integers(0, 6, (5, 3))

    def fn(d, i, g):
        return (tk.Tensor(d).index_select(1, tk.tensor([5, 0, 2])), d[i], d[:, [1, 3]], d.gather(1, g),
                F.embedding(i, d))
    check_compiled(lambda d, i, g: fn(d, i, g), tk.tensor(data), tk.tensor(idx), tk.tensor(along))


@pytest.mark.parametrize("a_shape,b_shape", [((5, 7), (7, 3)), ((7,), (7, 3)), ((5, 7), (7,)),
                                              ((2, 1, 4, 6), (3, 6, 5)), ((1, 1), (1, 1)), ((3, 0), (0, 4))])
def test_matmul(a_shape, b_shape):
    check_compiled(lambda a, b: (a @ b, a @ b * 2 + 1), randn(*a_shape), randn(*b_shape))


def test_matmul_transposed_and_integer():
    a, b = randn(6, 9), randn(4, 9)
    check_compiled(lambda a, b: (a @ b.T, F.linear(a, b), b.T.T @ a.T), a, b)
    ai = RNG.integers(-5, 5, (3, 4)).astype(np.int32)
    check_compiled(lambda a: a @ a.T, ai)


@pytest.mark.parametrize("kwargs", [dict(), dict(padding=1), dict(stride=2, padding=(1, 0)),
                                    dict(dilation=2, padding=2), dict(groups=2, padding=1),
                                    dict(padding="same")])
def test_conv2d(kwargs):
    groups = kwargs.get("groups", 1)
    x, w, b = randn(2, 4, 7, 6), randn(6, 4 // groups, 3, 3), randn(6)
    check_compiled(lambda x, w, b: F.conv2d(x, w, b, **kwargs), x, w, b)


def test_depthwise_conv_and_pools():
    x, w = randn(1, 3, 9, 8), randn(3, 1, 3, 3)

    def fn(x, w):
        return (F.conv2d(x, w, groups=3, stride=2), F.max_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 2),
                F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), F.adaptive_avg_pool2d(x, (4, 3)),
                F.max_pool2d(x, 2, ceil_mode=True))
    check_compiled(fn, x, w)


def test_composites():
    x = randn(3, 8, 16)
    w, b = randn(16), randn(16)
    target = RNG.integers(0, 16, (3, 8))

    def fn(x, w, b, t):
        logits = x.reshape(-1, 16)
        return (F.softmax(x, -1), F.log_softmax(x, 1), F.layer_norm(x, (16,), w, b), F.gelu(x),
                F.gelu(x, approximate="tanh"), F.cross_entropy(logits, t.reshape(-1)),
                F.cross_entropy(logits, t.reshape(-1), label_smoothing=0.1, reduction="sum"))
    check_compiled(fn, x, w, b, target)


@pytest.mark.parametrize("causal", [False, True])
def test_attention(causal):
    q, k, v = randn(2, 3, 5, 8), randn(2, 3, 7, 8), randn(2, 3, 7, 4)
    check_compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v)


def test_non_contiguous_and_zero_size_inputs():
    base = randn(6, 8)
    strided = base[::2, 1::3]  # a non-contiguous view
    transposed = base.T
    check_compiled(lambda a, b: (a * 2, b.sum(0)), strided, transposed)
    check_compiled(lambda a: (a + 1, a.sum(1)), np.zeros((0, 3), np.float32))


def test_identity_constant_and_duplicate_outputs():
    x = randn(3)
    check_compiled(lambda x: (x, x, tk.ones(2) * 3, x * 2, x * 2), x)


def test_zero_dim_inputs_and_16_bit_casts_round():
    x = np.array(0.5478, dtype=np.float32)
    check_compiled(lambda x: (x * 2, x.to(tk.bfloat16).to(tk.float32), x.to(tk.float16).to(tk.float32)), x)
    v = RNG.standard_normal(50).astype(np.float32)
    check_compiled(lambda v: (v.to(tk.bfloat16).to(tk.float32) * 3, v.to(tk.float16).to(tk.float64)), v)


def test_distribution_rules_do_not_cancel_catastrophically():
    x = np.array([1.0000001, 2.0], dtype=np.float32)
    out = tk.jit(lambda x: (x - 1.0) * 1e8)(x).numpy()
    np.testing.assert_allclose(out, (x - np.float32(1.0)) * np.float32(1e8), rtol=1e-6)


def test_bitwise_integer_ops():
    a = RNG.integers(-100, 100, (3, 5)).astype(np.int32)
    b = RNG.integers(-100, 100, (5,)).astype(np.int32)
    check_compiled(lambda a, b: (a & b, a | b, a ^ b, a.to(tk.int8) & 7), a, b)


@pytest.mark.parametrize("dtype", ["uint8", "int16"])
def test_bitwise_small_integer_ops(dtype):
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, (3, 5), dtype=dtype, endpoint=True)
    b = RNG.integers(info.min, info.max, (5,), dtype=dtype, endpoint=True)
    check_compiled(lambda a, b: (a & b, a | b, a ^ b, a ^ -1, (a & 7) + b), a, b)


def test_zero_dim_constant_outputs():
    check_compiled(lambda x: (x + 1, tk.tensor(2.5), tk.tensor(3) * 2), np.ones(3, np.float32))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_float_remainder_edge_cases_match_numpy(dtype):
    """x % y with infinite, zero, NaN and signed operands: numpy's remainder, also compiled."""
    x = np.array([-4.0, 7.0, 5.0, 4.0, -1.0, 3.0, -1.0, 3.0, np.inf, -np.inf, np.nan, 2.0, 0.0, -0.0], dtype)
    y = np.array([2.0, -1.0, 5.0, -2.0, np.inf, np.inf, -np.inf, -np.inf, 2.0, 3.0, 1.0, np.nan, -2.0, 2.0], dtype)
    f = tk.jit(lambda a, b: a % b)
    got = f(x, y).numpy()
    with np.errstate(all="ignore"):
        want = np.remainder(x, y)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # the sign of a zero remainder too
    assert f.report(x, y).backend == "c"
