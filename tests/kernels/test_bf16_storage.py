"""precision="bf16" stores its rounded operands as bf16 (kernels/bf16_storage.py): no kernel only rounds,
the producers of the GEMMs' and attention's operands write bfloat16 buffers, the readers widen exactly,
and the results stay those of the reference interpreter running the same bf16 graph.

These are the rules of the bf16 pairs kernels' operands; on a CPU without AVX512-BF16 the matmuls go to
the float32 templates instead (passes/bf16_fp32_gemm.py, tested in tests/passes/test_bf16_fp32_gemm.py),
so here the pairs kernels are asked for on every target."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln import models
from tensorkiln.kernels.target import cpu_target
from tensorkiln.passes import bf16_fp32_gemm

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def pairs_kernels(monkeypatch):
    monkeypatch.setattr(bf16_fp32_gemm, "PAIRS_WITHOUT_BF16_DOT", True)
MOVEMENT_AND_CASTS = {"cast", "reshape", "permute", "slice"}
ATTENTION_TOLERANCE = 2.0 ** -8  # the fused kernel rounds its probabilities for P V (test_attention_bf16.py)


def kernel_ops(f, *args) -> list[list[str]]:
    return [[line.split("=", 1)[-1].strip().split("(")[0] for line in k.nodes] for k in f.report(*args).kernels]


def bf16_roots(f, *args) -> int:
    """How many kernels store a value as bf16 because its readers read it rounded."""
    return sum(": stores " in line and "stored as bf16" in line and not line.startswith(" ")
               for line in f.explain(*args).splitlines())


def relative_error(a: np.ndarray, reference: np.ndarray) -> float:
    return float(np.linalg.norm(a - reference) / np.linalg.norm(reference))


def test_small_bert_has_no_rounding_kernels():
    config = models.BertConfig(vocab_size=100, hidden_size=48, num_hidden_layers=1, num_attention_heads=3,
                               intermediate_size=96, max_position_embeddings=32)
    tk.manual_seed(0)
    model = models.BertModel(config)
    model.eval()
    ids = RNG.integers(0, 100, (2, 13))
    with tk.no_grad():
        f = tk.jit(model, precision="bf16")
        out = f(ids).numpy()
        reference = tk.jit(model, precision="bf16", backend="interpreter")(ids).numpy()
    ops = kernel_ops(f, ids)
    assert not [o for o in ops if set(o) <= MOVEMENT_AND_CASTS], "a kernel that only rounds or reindexes"
    # per layer at least: q, k and v by their linear layers' epilogues, and GELU's output
    assert bf16_roots(f, ids) >= 4 * config.num_hidden_layers
    assert relative_error(out, reference) < ATTENTION_TOLERANCE


def test_gpt2_prefill_layer_norm_and_gelu_store_bf16():
    config = models.GPT2Config(vocab_size=50, n_positions=32, n_embd=48, n_layer=1, n_head=3)
    tk.manual_seed(0)
    model = models.GPT2LMHeadModel(config)
    model.eval()
    ids = RNG.integers(0, 50, (1, 11))
    with tk.no_grad():
        f = tk.jit(model, precision="bf16")
        out = f(ids).numpy()
        reference = tk.jit(model, precision="bf16", backend="interpreter")(ids).numpy()
    assert not [o for o in kernel_ops(f, ids) if set(o) <= MOVEMENT_AND_CASTS]
    # per layer: both layer norms before a linear layer and GELU's output
    assert bf16_roots(f, ids) >= 3 * config.n_layer
    assert relative_error(out, reference) < ATTENTION_TOLERANCE


def test_a_rounding_read_by_a_gemm_and_by_float32_ops():
    """Where the rounded value's input is stored anyway (a residual reads it), the GEMM rounds it as it
    packs it: no bf16 copy, no kernel of its own; float32 readers see the unrounded value."""
    x = RNG.standard_normal((37, 24)).astype(np.float32)
    w = RNG.standard_normal((24, 24)).astype(np.float32)

    def block(x):
        h = F.layer_norm(x, (24,))
        return h + (h @ tk.tensor(w)).relu()

    f = tk.jit(block, precision="bf16")
    out = f(x).numpy()
    reference = tk.jit(block, precision="bf16", backend="interpreter")(x).numpy()
    np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-5)
    assert bf16_roots(f, x) == 0
    assert len(f.report(x).kernels) == 2  # the layer norm, then the GEMM with its epilogue


def test_linear_layers_that_store_bf16_stay_gemms():
    """A linear layer whose epilogue stores bf16 runs its whole depth in one block (a bf16 output holds
    no partial sums), on the bf16 GEMM, also past the depth block it would otherwise take."""
    x = RNG.standard_normal((40, 1000)).astype(np.float32)
    y = RNG.standard_normal((40, 768)).astype(np.float32)
    wq = tk.tensor(RNG.standard_normal((1000, 64)).astype(np.float32) / 30)
    wk, wv = (tk.tensor(RNG.standard_normal((768, 64)).astype(np.float32) / 30) for _ in range(2))

    def heads(t):
        return t.reshape(40, 2, 32).transpose(0, 1)

    def attention(x, y):
        return F.scaled_dot_product_attention(heads(x @ wq), heads(y @ wk), heads(y @ wv))

    f = tk.jit(attention, precision="bf16")
    out = f(x, y).numpy()
    reference = tk.jit(attention, precision="bf16", backend="interpreter")(x, y).numpy()
    assert relative_error(out, reference) < ATTENTION_TOLERANCE
    kernels = f.report(x, y).kernels
    gemm = "bf16 (vdpbf16ps)" if cpu_target().bf16_dot else "bf16 (widened to fp32)"
    assert [k.precision for k in kernels if k.kind == "contraction"] == [gemm] * 3  # not the matrix-vector helper
    assert bf16_roots(f, x, y) == 3


def test_one_query_attention_reads_keys_and_values_stored_as_bf16():
    """A decode step's attention (one query row per head) over keys and values a GEMM stored as bf16:
    the one-query kernel widens them as it packs them."""
    q = RNG.standard_normal((1, 2, 1, 32)).astype(np.float32)
    y = RNG.standard_normal((70, 768)).astype(np.float32)
    wk, wv = (tk.tensor(RNG.standard_normal((768, 64)).astype(np.float32) / 30) for _ in range(2))

    def heads(t):
        return t.reshape(1, 70, 2, 32).transpose(1, 2)

    def attention(q, y):
        return F.scaled_dot_product_attention(q, heads(y @ wk), heads(y @ wv))

    f = tk.jit(attention, precision="bf16")
    out = f(q, y).numpy()
    reference = tk.jit(attention, precision="bf16", backend="interpreter")(q, y).numpy()
    assert relative_error(out, reference) < 1e-5  # the probabilities stay float32 in this kernel
    assert "block_sum" in f.explain(q, y)  # attention_one_query.py's softmax
    assert bf16_roots(f, q, y) == 2
