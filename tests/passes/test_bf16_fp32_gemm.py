"""bf16 matmuls and attention on the float32 templates where the target has no bf16 dot product
(passes/bf16_fp32_gemm.py), against the bf16 reference: operands rounded to bf16, float32 sums.

The target without `vdpbf16ps` is this host where it has none, and `TENSORKILN_NO_BF16_DOT=1`
elsewhere (the `no_bf16_dot` fixture), so the same cases run on every machine; with AVX512-BF16 the
pass leaves the graph to the pairs kernels (tests/kernels/test_gemm_bf16.py, test_attention_bf16.py).
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln import dtypes as dt
from tensorkiln import models
from tensorkiln.ir.graph import constant_node, make_node
from tensorkiln.ir.ops import REGISTRY, Attrs
from tensorkiln.kernels.target import cpu_target
from tensorkiln.passes import bf16_fp32_gemm

RNG = np.random.default_rng(11)
FP32_KERNEL = "bf16 operands (fp32 kernel)"




def bf16(a: np.ndarray) -> np.ndarray:
    """`a` rounded to bf16 (nearest even), as float64."""
    return dt.f32_from_bf16_bits(dt.bf16_bits_from_f32(np.asarray(a, np.float32))).astype(np.float64)


def assert_close(result: np.ndarray, expected: np.ndarray, k: int) -> None:
    """float32 sums of k exact products of bf16 numbers: a few ulps of the sum of magnitudes."""
    scale = np.sqrt(k) * max(float(np.abs(expected).max()), 1.0)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=2e-6 * scale)


def kernel_ops(kernel) -> list[str]:
    """The ops of the graph nodes one kernel computes."""
    return [line.split("=", 1)[-1].strip().split("(")[0] for line in kernel.nodes]


def graph_ops(f, *args) -> list[str]:
    """The ops of every kernel of f's compiled graph, in order (a node inlined twice counted twice)."""
    return [op for kernel in f.report(*args).kernels for op in kernel_ops(kernel)]


def test_round_bf16_is_the_cast_round_trip():
    ties = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 3.0e-39, -1e-45, np.inf, -np.inf, np.nan,
                     3.4e38, 65504.0, 0.0, -0.0], np.float32)
    x = np.concatenate([ties, RNG.standard_normal(500).astype(np.float32) * 10.0 ** RNG.integers(-30, 30, 500)])
    op = REGISTRY["round_bf16"]
    got = op.reference([x], Attrs(), None)
    want = dt.f32_from_bf16_bits(dt.bf16_bits_from_f32(x))
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert op.gradient is REGISTRY["cast"].gradient  # straight through, as the cast pair it stands for
    with pytest.raises(tk.DTypeError, match="round_bf16 rounds float32"):
        make_node("round_bf16", [constant_node(np.ones(3), dt.float64)], Attrs())


# (m, k, n): size-1 rows and depths, odd sizes (tails of every tile), a depth over one K block
SHAPES = [(1, 1, 8), (4, 1, 8), (37, 61, 29), (8, 33, 16), (64, 64, 64), (130, 129, 33), (17, 1100, 45)]


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_matmul_by_a_weight_runs_the_fp32_gemm(no_bf16_dot, m, k, n):
    x = RNG.standard_normal((m, k)).astype(np.float32)
    w = RNG.standard_normal((k, n)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    weight, bias = tk.tensor(w), tk.tensor(b)
    fn = lambda x: (x @ weight + bias).relu()  # noqa: E731
    f = tk.jit(fn, precision="bf16")
    expected = np.maximum(bf16(x) @ bf16(w) + b, 0)
    assert_close(f(x).numpy(), expected, k)
    assert_close(tk.jit(fn, precision="bf16", backend="interpreter")(x).numpy(), expected, k)
    if m * n * k >= 32 ** 3:  # the GEMM's size: float32 panels of the rounded weight, no pairs
        ops = graph_ops(f, x)
        assert "matmul_packed" in ops and "round_bf16" in ops and "cast" not in ops
        assert [k.precision for k in f.report(x).kernels if k.kind == "contraction"] == [FP32_KERNEL]
        assert len(f.report(x).kernels) == 1  # the input is rounded while the GEMM packs it


def test_matrix_vector_products_keep_the_bf16_weights(no_bf16_dot):
    x = RNG.standard_normal((1, 256)).astype(np.float32)
    w = RNG.standard_normal((256, 64)).astype(np.float32)
    weight = tk.tensor(w)
    f = tk.jit(lambda x: x @ weight, precision="bf16")
    assert_close(f(x).numpy(), bf16(x) @ bf16(w), 256)
    assert "matmul_bf16_packed" in graph_ops(f, x)  # half the weight's bytes (the matrix-vector helper)


@pytest.mark.parametrize("batch,m,k,n", [(3, 40, 24, 36), (2, 1, 64, 64), (4, 33, 65, 40)])
def test_batched_matmul_of_two_activations(no_bf16_dot, batch, m, k, n):
    a = RNG.standard_normal((batch, m, k)).astype(np.float32)
    b = RNG.standard_normal((batch, k, n)).astype(np.float32)
    f = tk.jit(lambda a, b: (a * 2) @ (b + 1), precision="bf16")
    assert_close(f(a, b).numpy(), bf16(a * 2) @ bf16(b + 1), k)
    assert "cast" not in graph_ops(f, a, b)


def attention_reference(q, k, v, causal: bool) -> np.ndarray:
    """softmax(q k^T / sqrt(d)) v in float64 on q, k, v rounded to bf16, the probabilities unrounded."""
    q, k, v = bf16(q), bf16(k), bf16(v)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        scores = np.where(np.tri(*scores.shape[-2:], dtype=bool), scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 1, False), (2, 1, 7, 7, 3, True), (1, 3, 33, 33, 17, False),
                                   (1, 2, 130, 70, 24, True), (1, 1, 1, 33, 64, False)])
def test_attention_runs_the_fp32_kernel_on_rounded_operands(no_bf16_dot, shape):
    b, h, length, source, d, causal = shape
    q = RNG.standard_normal((b, h, length, d)).astype(np.float32)
    k = RNG.standard_normal((b, h, source, d)).astype(np.float32)
    v = RNG.standard_normal((b, h, source, d)).astype(np.float32)
    if causal:
        k, v = k[:, :, :length], v[:, :, :length]
    f = tk.jit(lambda q, k, v: F.scaled_dot_product_attention(q * 1.5, k, v, is_causal=causal), precision="bf16")
    got = f(q, k, v).numpy()
    want = attention_reference(q * 1.5, k, v, causal)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(float(np.abs(want).max()), 1.0))
    attention = [k for k in f.report(q, k, v).kernels if k.kind == "attention"]
    assert len(attention) == 1 and attention[0].precision == FP32_KERNEL


def test_one_projection_for_q_k_and_v(no_bf16_dot):
    """Sibling linear layers merge into one GEMM, rounded once in its epilogue; attention reads the slices."""
    x = RNG.standard_normal((2, 24, 64)).astype(np.float32)
    ws = [tk.tensor((RNG.standard_normal((64, 64)) / 8).astype(np.float32)) for _ in range(3)]
    heads = lambda t: t.reshape(2, 24, 4, 16).transpose(1, 2)  # noqa: E731

    def attend(x):
        q, k, v = (heads(x @ w) for w in ws)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    f = tk.jit(attend, precision="bf16")
    got = f(x).numpy()
    reference = tk.jit(attend, precision="bf16", backend="interpreter")(x).numpy()
    # a float32 sum in another order can tip the bf16 rounding of q, k or v (2^-8 relative) here and there
    assert np.linalg.norm(got - reference) / np.linalg.norm(reference) < 1e-3
    kernels = f.report(x).kernels
    assert [k.kind for k in kernels] == ["contraction", "attention"]
    assert kernel_ops(kernels[0])[-1] == "round_bf16" and "round_bf16" not in kernel_ops(kernels[1])


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_transformers_have_no_rounding_kernels(no_bf16_dot, name):
    tk.manual_seed(0)
    if name == "bert":
        model = models.BertModel(models.BertConfig(vocab_size=100, hidden_size=48, num_hidden_layers=1,
                                                   num_attention_heads=3, intermediate_size=96,
                                                   max_position_embeddings=32))
    else:
        model = models.GPT2LMHeadModel(models.GPT2Config(vocab_size=50, n_positions=32, n_embd=48, n_layer=1,
                                                         n_head=3))
    model.eval()
    ids = RNG.integers(0, 50, (2, 13))
    with tk.no_grad():
        f = tk.jit(model, precision="bf16")
        out = f(ids).numpy()
        reference = tk.jit(model, precision="bf16", backend="interpreter")(ids).numpy()
        fp32 = tk.jit(model)
        fp32(ids)
    kernels = f.report(ids).kernels
    # float32's kernels: the roundings join epilogues and packing, and split no layer norm
    assert len(kernels) == len(fp32.report(ids).kernels)
    only_rounding = [k.name for k in kernels
                     if set(kernel_ops(k)) <= {"round_bf16", "reshape", "permute", "slice"}]
    assert not only_rounding
    assert {k.precision for k in kernels if k.kind in ("contraction", "attention")} == {FP32_KERNEL}
    assert np.linalg.norm(out - reference) / np.linalg.norm(reference) < 1e-3  # a tipped rounding or two


def test_the_pairs_kernels_where_asked(no_bf16_dot, monkeypatch):
    monkeypatch.setattr(bf16_fp32_gemm, "PAIRS_WITHOUT_BF16_DOT", True)
    x = RNG.standard_normal((64, 64)).astype(np.float32)
    weight = tk.tensor(RNG.standard_normal((64, 64)).astype(np.float32))
    f = tk.jit(lambda x: x @ weight, precision="bf16")
    assert "round_bf16" not in graph_ops(f, x) and "matmul_bf16_packed" in graph_ops(f, x)
    assert [k.precision for k in f.report(x).kernels] == ["bf16 (widened to fp32)"]


@pytest.mark.skipif(not cpu_target().bf16_dot, reason="this CPU has no AVX512-BF16")
def test_a_target_with_bf16_dot_products_keeps_the_pairs():
    x = RNG.standard_normal((64, 64)).astype(np.float32)
    weight = tk.tensor(RNG.standard_normal((64, 64)).astype(np.float32))
    f = tk.jit(lambda x: x @ weight, precision="bf16")
    assert "round_bf16" not in graph_ops(f, x)
    assert [k.precision for k in f.report(x).kernels] == ["bf16 (vdpbf16ps)"]


def test_a_run_time_length(no_bf16_dot):
    """GPT-2 with a symbolic sequence length: the prefill's GEMMs and the decode step's matrix-vector
    products, one program per shape class, each as the bf16 reference interpreter computes it."""
    tk.manual_seed(0)
    model = models.GPT2LMHeadModel(models.GPT2Config(vocab_size=50, n_positions=64, n_embd=64, n_layer=1,
                                                     n_head=4))
    model.eval()
    with tk.no_grad():
        f = tk.jit(model, precision="bf16", dynamic={"input_ids": {1: "seq"}})
        oracle = tk.jit(model, precision="bf16", backend="interpreter")
        for length in (1, 5, 40):
            ids = RNG.integers(0, 50, (1, length))
            got, want = f(ids).numpy(), oracle(ids).numpy()
            assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-3


@pytest.mark.parametrize("seed", range(6))
def test_random_post_norm_blocks_match_the_bf16_reference(no_bf16_dot, seed):
    """Random sizes (odd ones included) of a post-norm block: a value read rounded by GEMMs and unrounded
    by a residual add, GELU rounded in its GEMM's epilogue, a transposed weight, a batched product."""
    rng = np.random.default_rng(seed)
    rows, width, hidden = (int(v) for v in rng.integers(1, 70, 3))
    x = rng.standard_normal((2, rows, width)).astype(np.float32)
    w1 = tk.tensor((rng.standard_normal((width, hidden)) / np.sqrt(width)).astype(np.float32))
    w2 = tk.tensor((rng.standard_normal((width, hidden)) / np.sqrt(hidden)).astype(np.float32))

    def block(x):
        h = F.layer_norm(x * 1.25, (width,))
        y = F.layer_norm(h + F.gelu(h @ w1) @ w2.T, (width,))
        return y + (y @ y.transpose(1, 2)) @ h / width

    f = tk.jit(block, precision="bf16")
    got = f(x).numpy()
    want = tk.jit(block, precision="bf16", backend="interpreter")(x).numpy()
    assert {k.precision for k in f.report(x).kernels if k.kind in ("contraction", "attention")} == {FP32_KERNEL}
    # float32 sums in another order can tip a bf16 rounding of the next operand (one bf16 ulp, 2^-8, here
    # and there); float32 itself is about 2e-3 away
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * max(float(np.abs(want).max()), 1.0))
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 5e-4
    assert not [k.name for k in f.report(x).kernels if set(kernel_ops(k)) <= {"round_bf16", "reshape", "permute"}]


# (channels, filters, kernel, stride, padding, size): strided 1x1 (ResNet-18's shortcut), a padded 3x3,
# the RGB stem, odd sizes
CONVS = [(64, 128, 1, 2, 0, 28), (16, 24, 3, 1, 1, 9), (3, 16, 7, 2, 3, 33), (5, 12, 1, 1, 0, 13)]


@pytest.mark.parametrize("c,k,size,stride,padding,hw", CONVS)
def test_nchw_convolutions_run_the_fp32_templates(no_bf16_dot, c, k, size, stride, padding, hw):
    """A convolution left in NCHW (a single layer here) takes its input as round_bf16, so an implicit GEMM
    runs the float32 GEMM, not the pairs one."""
    x = RNG.standard_normal((1, c, hw, hw)).astype(np.float32)
    w = (RNG.standard_normal((k, c, size, size)) / np.sqrt(c * size * size)).astype(np.float32)
    weight = tk.tensor(w)
    fn = lambda x: F.conv2d(x, weight, stride=stride, padding=padding).relu()  # noqa: E731
    f = tk.jit(fn, precision="bf16")
    got = f(x).numpy()
    want = tk.jit(fn, precision="bf16", backend="interpreter")(x).numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-6
    kernels = f.report(x).kernels
    assert [k.precision for k in kernels] == [FP32_KERNEL] and "round_bf16" in kernel_ops(kernels[0])


def test_layer_norm_output_rounded_in_its_kernel_for_a_gemm_reading_a_in_place(no_bf16_dot):
    """A layer norm's output read rounded by a projection and unrounded by the residual add: its kernel also
    writes the rounded copy, so the float32 GEMM reads its A rows in place instead of packing them (every
    thread and column block would pack and round them again)."""
    rows, width, hidden = 64, 96, 160
    x = RNG.standard_normal((1, rows, width)).astype(np.float32)
    w1 = tk.tensor((RNG.standard_normal((width, hidden)) / np.sqrt(width)).astype(np.float32))
    w2 = tk.tensor((RNG.standard_normal((width, hidden)) / np.sqrt(hidden)).astype(np.float32))

    def block(x):
        h = F.layer_norm(x * 1.25, (width,))
        return h + F.gelu(h @ w1) @ w2.T

    f = tk.jit(block, precision="bf16")
    got = f(x).numpy()
    want = tk.jit(block, precision="bf16", backend="interpreter")(x).numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 5e-4
    gemms = [k for k in f.report(x).kernels if k.kind == "contraction"]
    assert len(gemms) == 2 and not [k.name for k in gemms if "apack" in k.loop_ir]
    assert not [k.name for k in f.report(x).kernels if set(kernel_ops(k)) <= {"round_bf16", "reshape", "permute"}]
