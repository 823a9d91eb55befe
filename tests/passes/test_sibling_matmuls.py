"""Sibling matmuls merged into one (passes/sibling_matmuls.py): which products merge, and the merged
graphs, compiled, against numpy, at odd sizes and at a run-time length."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.passes import pipeline
from tensorkiln.passes.bf16_fp32_gemm import fp32_kernels_for_bf16

RNG = np.random.default_rng(7)


def rand(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def fired(f, *args) -> int:
    """How many groups the pass merged in f's program for `args`."""
    return sum(v for s in f.report(*args).passes if s.name == "sibling_matmuls" for v in s.fired.values())


def heads(t, seq: int, n_heads: int):
    return t.reshape(1, seq, n_heads, t.shape[-1] // n_heads).permute(0, 2, 1, 3)


def attention_layer(weights, biases, n_heads: int):
    """Q, K, V projections of one input, split into heads, and softmax attention: the transformer
    layer's pattern, as a function of x (1, seq, k)."""
    def layer(x):
        seq = x.shape[1]
        q, k, v = (heads(x @ w + b, seq, n_heads) for w, b in zip(weights, biases))
        out = (q @ k.transpose(-1, -2) * 0.25).softmax(-1) @ v
        return out.permute(0, 2, 1, 3).reshape(1, seq, -1)
    return layer


def attention_numpy(x, weights, biases, n_heads: int) -> np.ndarray:
    """The same layer in float64 numpy: the reference."""
    seq = x.shape[1]
    q, k, v = ((x.astype(np.float64) @ w + b).reshape(1, seq, n_heads, -1).transpose(0, 2, 1, 3)
               for w, b in zip(weights, biases))
    scores = q @ k.transpose(0, 1, 3, 2) * 0.25
    p = np.exp(scores - scores.max(-1, keepdims=True))
    out = (p / p.sum(-1, keepdims=True)) @ v
    return out.transpose(0, 2, 1, 3).reshape(1, seq, -1)


def test_the_pass_runs_at_level_2_before_the_weights_are_packed():
    names = [name for name, _ in pipeline(2)]
    assert "sibling_matmuls" in names and "sibling_matmuls" not in [name for name, _ in pipeline(1)]
    assert names.index("sibling_matmuls") < names.index("packed_weights")
    # bf16: where the float32 templates compute its matmuls (the pairs attention cannot read slices yet)
    bf16_names = [name for name, _ in pipeline(2, precision="bf16")]
    assert ("sibling_matmuls" in bf16_names) == fp32_kernels_for_bf16()


@pytest.mark.parametrize("k, n, n_heads", [(37, 30, 3), (64, 48, 4), (100, 96, 2)])
def test_projections_merge_and_match_numpy_at_run_time_lengths(k, n, n_heads):
    weights, biases = [rand(k, n) * 0.2 for _ in range(3)], [rand(n) for _ in range(3)]
    layer = attention_layer([tk.tensor(w) for w in weights], [tk.tensor(b) for b in biases], n_heads)
    with tk.no_grad():
        f = tk.jit(layer, dynamic={"x": {1: "seq"}})
        for seq in (21, 16, 5, 33, 2):
            x = rand(1, seq, k)
            np.testing.assert_allclose(f(x).numpy(), attention_numpy(x, weights, biases, n_heads), rtol=1e-4,
                                       atol=1e-4)
        assert fired(f, rand(1, 9, k)) == 1
        assert f.compile_count == 1


def test_unequal_widths_and_no_bias_merge_with_their_columns_in_order():
    w1, w2, w3 = rand(24, 40), rand(24, 17), rand(24, 9)
    tw = [tk.tensor(w) for w in (w1, w2, w3)]

    def f(x):
        return tuple((x @ w).reshape(-1) for w in tw)

    x = rand(13, 24)
    with tk.no_grad():
        g = tk.jit(f)
        for got, w in zip(g(x), (w1, w2, w3)):
            np.testing.assert_allclose(got.numpy(), (x.astype(np.float64) @ w).reshape(-1), rtol=1e-4, atol=1e-4)
        assert fired(g, x) == 1


def test_biased_and_unbiased_siblings_merge_in_separate_groups():
    ws = [rand(20, 12) for _ in range(4)]
    b = rand(12)
    tw, tb = [tk.tensor(w) for w in ws], tk.tensor(b)

    def f(x):
        biased = [(x @ w + tb).reshape(-1) for w in tw[:2]]
        plain = [(x @ w).reshape(-1) for w in tw[2:]]
        return tuple(biased + plain)

    x = rand(7, 20)
    with tk.no_grad():
        g = tk.jit(f)
        got = g(x)
        for i, w in enumerate(ws):
            want = x.astype(np.float64) @ w + (b if i < 2 else 0)
            np.testing.assert_allclose(got[i].numpy(), want.reshape(-1), rtol=1e-4, atol=1e-4)
        assert fired(g, x) == 2


def test_products_read_by_elementwise_ops_or_returned_stay_apart():
    """An activation stays in its GEMM's epilogue; a result the function returns is no slice."""
    w1, w2 = tk.tensor(rand(16, 32)), tk.tensor(rand(16, 32))
    x = rand(9, 16)
    with tk.no_grad():
        activations = tk.jit(lambda x: ((x @ w1).relu(), (x @ w2).tanh()))
        activations(x)
        assert fired(activations, x) == 0
        returned = tk.jit(lambda x: (x @ w1, x @ w2))
        returned(x)
        assert fired(returned, x) == 0
        different_inputs = tk.jit(lambda x, y: ((x @ w1).reshape(-1), (y @ w2).reshape(-1)))
        different_inputs(x, x + 1)
        assert fired(different_inputs, x, x + 1) == 0
