"""The bf16 GEMM (kernels/templates/gemm_bf16.py): operands rounded to bf16, float32 accumulation.

Each case runs twice on this machine: with `vdpbf16ps` (the intrinsics tile of codegen/c_native.py,
where the CPU has AVX512-BF16) and with the fallback that widens bf16 to float32, forced through the
target description (TENSORKILN_NO_BF16_DOT=1). The reference rounds the inputs to bf16 and
accumulates in float64.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk

from .disassembly import hottest_block
from .dot_paths import HAS_BF16_DOT, bf16, bf16_path as path  # noqa: F401  (path: the fixture)

RNG = np.random.default_rng(0)


def assert_close_to_reference(result: np.ndarray, expected: np.ndarray, k: int) -> None:
    # float32 sums of k exact products: a few ulps of the sum of magnitudes
    scale = np.sqrt(k) * max(float(np.abs(expected).max()), 1.0)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=2e-6 * scale)


def uses_native_tile(f, *args) -> bool:
    with open(f.report(*args).source_path) as source:
        return "tk_bf16_tile_8x" in source.read()


# (m, k, n): size-1 dimensions, odd depths (a zero-padded last pair), tails of the 8 x 32 tile,
# depths over one K block (partial sums through the output), narrow outputs (the 8 x 16 tile)
SHAPES = [(1, 1, 8), (4, 1, 8), (37, 61, 29), (8, 33, 16), (64, 64, 64), (5, 300, 17), (130, 129, 33),
          (17, 1100, 45), (9, 7, 100)]


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_matmul_by_a_weight(path, m, k, n):
    x = RNG.standard_normal((m, k)).astype(np.float32)
    w = RNG.standard_normal((k, n)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    weight, bias = tk.tensor(w), tk.tensor(b)
    f = tk.jit(lambda x: (x @ weight + bias).relu(), precision="bf16")
    assert_close_to_reference(f(x).numpy(), np.maximum(bf16(x) @ bf16(w) + b, 0), k)
    if m * n * k >= 32 ** 3:  # the GEMM's size (smaller products run the simple nest)
        assert uses_native_tile(f, x) == (path == "vdpbf16ps")


@pytest.mark.parametrize("batch,m,k,n", [(3, 40, 24, 36), (2, 1, 64, 64), (4, 33, 65, 40)])
def test_batched_matmul_of_two_activations(path, batch, m, k, n):
    a = RNG.standard_normal((batch, m, k)).astype(np.float32)
    b = RNG.standard_normal((batch, k, n)).astype(np.float32)
    f = tk.jit(lambda a, b: a @ b, precision="bf16")
    assert_close_to_reference(f(a, b).numpy(), bf16(a) @ bf16(b), k)


def test_transposed_operand_of_a_linear_layer(path):
    x = RNG.standard_normal((2, 24, 96)).astype(np.float32)
    w = RNG.standard_normal((80, 96)).astype(np.float32)
    weight = tk.tensor(w)
    f = tk.jit(lambda x: x @ weight.T, precision="bf16")
    assert_close_to_reference(f(x).numpy(), bf16(x) @ bf16(w).T, 96)


def test_fp32_compiles_keep_the_float32_gemm():
    x = RNG.standard_normal((64, 64)).astype(np.float32)
    weight = tk.tensor(RNG.standard_normal((64, 64)).astype(np.float32))
    assert not uses_native_tile(tk.jit(lambda x: x @ weight), x)


@pytest.mark.skipif(not HAS_BF16_DOT, reason="this CPU has no AVX512-BF16")
def test_the_tile_runs_vdpbf16ps():
    x = RNG.standard_normal((64, 256)).astype(np.float32)
    weight = tk.tensor(RNG.standard_normal((256, 64)).astype(np.float32))
    f = tk.jit(lambda x: x @ weight, precision="bf16")
    block = hottest_block(f.report(x).library_path, "vdpbf16ps")
    assert sum("vdpbf16ps" in line for line in block) >= 16  # 8 rows x 2 vectors per pair of depth steps


def test_explain_report_and_profile_show_each_kernels_precision(path):
    x = RNG.standard_normal((48, 64)).astype(np.float32)
    weight = tk.tensor(RNG.standard_normal((64, 96)).astype(np.float32))
    f = tk.jit(lambda x: (x @ weight).softmax(-1), precision="bf16")
    expected = "bf16 (vdpbf16ps)" if path == "vdpbf16ps" else "bf16 (widened to fp32)"
    precisions = {k.kind: k.precision for k in f.report(x).kernels}
    assert precisions["contraction"] == expected and precisions["row"] == "fp32"
    assert "== precision of each kernel" in f.explain(x) and expected in f.explain(x)
    profile = f.profile(x, repeat=2)
    assert {k.precision for k in profile.kernels} == {expected, "fp32"}
    assert "precision" in str(profile).splitlines()[1] and expected in str(profile)
    fp32 = tk.jit(lambda x: (x @ weight).softmax(-1))
    assert {k.precision for k in fp32.report(x).kernels} == {"fp32"}
