"""The int8 GEMM: matmul_integer by constant weights runs as matmul_u8s8 on each int8 dot-product path
(vpdpbusd, AVX-512BW widening, portable C), exact against the numpy reference, epilogue fused."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.errors import DTypeError, ShapeError
from tensorkiln.frontend.functions import matmul_integer
from tensorkiln.ir.ops.quantized import pack_u8s8_panels, unpack_u8s8_panels
from tensorkiln.kernels.target import INT8_DOT_KINDS

from .compiled import check_compiled
from .disassembly import needs_vector_disassembly
from .dot_paths import INT8_PATHS as AVAILABLE, avx2_int8_path, int8_path, random_ints  # noqa: F401  (fixtures)

# (M, K, N): size-1 dims, K not a multiple of 4, N not a multiple of the 32-column panel, M tails of the 8-row tile
SHAPES = [(1, 1, 1), (1, 64, 96), (3, 5, 7), (9, 33, 31), (37, 130, 65), (70, 256, 200)]


def _kernel_ops(f, *args) -> list[str]:
    return [k.name for k in f.report(*args).kernels]


@pytest.mark.parametrize("a_dtype", [np.uint8, np.int8])
def test_int8_gemm_is_exact_on_every_path(int8_path, a_dtype):
    rng = np.random.default_rng(INT8_DOT_KINDS.index(int8_path))
    for m, k, n in SHAPES:
        a, w = random_ints(rng, a_dtype, (m, k)), random_ints(rng, np.int8, (k, n))
        weights = tk.tensor(w)
        f = check_compiled(lambda x: matmul_integer(x, weights), a)
        assert f(a).numpy().dtype == np.int32
        np.testing.assert_array_equal(f(a).numpy(), a.astype(np.int64) @ w.astype(np.int64))
        assert any("matmul_u8s8" in name for name in _kernel_ops(f, a)), int8_path


def test_a_last_panel_of_at_most_sixteen_columns_is_exact_on_every_path(int8_path):
    """Columns around the 16-column half of a panel: a last panel of at most 16 columns in use leaves its
    other half unsummed on AVX2, which the epilogue never reads."""
    rng = np.random.default_rng(21 + INT8_DOT_KINDS.index(int8_path))
    for m, k, n in ((9, 20, 15), (3, 7, 16), (17, 36, 17), (8, 64, 47), (5, 12, 48), (11, 9, 49)):
        a, w = random_ints(rng, np.uint8, (m, k)), random_ints(rng, np.int8, (k, n))
        if n == 16:
            w //= 2  # 7-bit weights: on AVX2, the maddubsw step
        weights = tk.tensor(w)
        f = check_compiled(lambda x: matmul_integer(x, weights), a)
        np.testing.assert_array_equal(f(a).numpy(), a.astype(np.int64) @ w.astype(np.int64), err_msg=f"N = {n}")


def test_the_largest_products_and_pair_sums_are_exact_on_every_path(int8_path):
    """Activations at 255 against weights at -128 and 127 (the pair sums that overflow 16 bits), depths around
    the AVX2 row split's vector of 8 groups (7, 8, 9, 17 groups: the split's vector and scalar loops) and
    rows over several tasks of 32."""
    rng = np.random.default_rng(40 + INT8_DOT_KINDS.index(int8_path))
    for m, k, n in ((5, 28, 33), (40, 32, 16), (33, 36, 64), (70, 68, 40)):
        a = np.where(rng.random((m, k)) < 0.8, 255, rng.integers(0, 256, (m, k))).astype(np.uint8)
        w = rng.choice(np.array([-128, 127, -127, 1, 0], np.int8), (k, n))
        weights = tk.tensor(w)
        f = check_compiled(lambda x: matmul_integer(x, weights), a)
        np.testing.assert_array_equal(f(a).numpy(), a.astype(np.int64) @ w.astype(np.int64), err_msg=f"{m}x{k}x{n}")

@pytest.mark.parametrize("m, k, n, split", [(19, 64, 64, True), (19, 60, 64, False), (19, 64, 63, False),
                                            (45, 200, 130, True), (4, 64, 64, True), (3, 64, 64, False)])
def test_avx2_splits_the_rows_of_deep_and_wide_gemms_only(avx2_int8_path, m, k, n, split):
    """On AVX2 a GEMM of at least 16 depth groups, 64 columns and 4 rows sums rows split into 16-bit pairs
    first (`split_avx2`); shallower, narrower or shorter ones widen them at every step; both exact."""
    rng = np.random.default_rng(k + n)
    a, w = random_ints(rng, np.uint8, (m, k)), random_ints(rng, np.int8, (k, n))
    weights = tk.tensor(w)
    f = check_compiled(lambda x: matmul_integer(x, weights), a)
    np.testing.assert_array_equal(f(a).numpy(), a.astype(np.int64) @ w.astype(np.int64))
    source = open(f.report(a).source_path).read()
    assert ("tk_gemm_u8s8_split_avx2(" in source) == split and ("tk_gemm_u8s8_avx2(" in source) != split

def test_dequantizing_epilogue_fuses_into_the_gemm(int8_path):
    """scale * (A @ W - zero compensation) + bias, as a quantized linear layer: one kernel."""
    rng = np.random.default_rng(7)
    a, w = random_ints(rng, np.uint8, (2, 5, 77)), random_ints(rng, np.int8, (77, 45))
    scales = rng.uniform(0.001, 0.01, 45).astype(np.float32)
    bias = rng.standard_normal(45).astype(np.float32)
    weights, column_sums = tk.tensor(w), tk.tensor(w.astype(np.int32).sum(0))

    def layer(x):
        acc = matmul_integer(x, weights) - column_sums * 3  # activation zero point 3
        return (acc.to(tk.float32) * tk.tensor(scales) + tk.tensor(bias)).relu()

    f = check_compiled(layer, a)
    assert len(f.report(a).kernels) == 1
    expected = np.maximum(((a.astype(np.int64) - 3) @ w.astype(np.int64)) * scales + bias, 0)
    np.testing.assert_allclose(f(a).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_uint8_weights_within_int8_range_use_the_gemm_and_larger_ones_the_loop_nest():
    rng = np.random.default_rng(3)
    a = random_ints(rng, np.uint8, (6, 40))
    for high, op in ((128, "matmul_u8s8"), (256, "matmul_integer")):
        w = rng.integers(0, high, (40, 19)).astype(np.uint8)
        weights = tk.tensor(w)
        f = check_compiled(lambda x: matmul_integer(x, weights), a)
        np.testing.assert_array_equal(f(a).numpy(), a.astype(np.int64) @ w.astype(np.int64))
        assert any(op in name for name in _kernel_ops(f, a))


def test_computed_right_operands_run_on_the_integer_loop_nest():
    rng = np.random.default_rng(4)
    a, b = random_ints(rng, np.int8, (3, 4, 9)), random_ints(rng, np.uint8, (9, 5))
    f = check_compiled(lambda x, y: matmul_integer(x, y), a, b)
    np.testing.assert_array_equal(f(a, b).numpy(), a.astype(np.int64) @ b.astype(np.int64))


def test_panels_hold_the_matrix():
    rng = np.random.default_rng(5)
    for k, n in ((1, 1), (5, 33), (64, 64)):
        w = random_ints(rng, np.int8, (k, n))
        panels = pack_u8s8_panels(w)
        assert panels.shape == (-(-n // 32), -(-k // 4), 128)
        np.testing.assert_array_equal(unpack_u8s8_panels(panels, k, n), w)


def test_bad_operands_name_the_op_and_shapes():
    with pytest.raises(DTypeError, match="matmul_integer"):
        matmul_integer(tk.tensor(np.zeros((2, 3), np.float32)), tk.tensor(np.zeros((3, 2), np.int8)))
    with pytest.raises(ShapeError, match=r"matmul_integer.*\(2, 3\).*\(4, 2\)"):
        matmul_integer(tk.tensor(np.zeros((2, 3), np.uint8)), tk.tensor(np.zeros((4, 2), np.int8)))


@needs_vector_disassembly
def test_vnni_path_runs_vpdpbusd():
    if "vnni" not in AVAILABLE:
        pytest.skip("this CPU has no AVX512-VNNI")
    from .disassembly import hottest_block
    a, w = np.ones((16, 64), np.uint8), np.ones((64, 64), np.int8)
    weights = tk.tensor(w)
    f = tk.jit(lambda x: matmul_integer(x, weights))
    f(a)
    assert sum("vpdpbusd" in line for line in hottest_block(f.report(a).library_path or "", "vpdpbusd")) >= 16
