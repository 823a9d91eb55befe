"""MobileNetV2's inverted residual blocks in bf16: the depthwise tile's shared column loads
(kernels/templates/depthwise_columns.py) and the tiles' vcvtneps2bf16 store
(kernels/templates/bf16_store.py).

Random blocks (odd channel counts, expansion ratios, stride 1 and 2, with and without the
residual, widths that are no multiple of the tile) are compared with the reference interpreter
running the same bf16 graph, on both bf16 paths; the vector store is compared bit for bit with the
scalar store, and its C helper with the reference rounding (subnormal and NaN values included).
"""
from __future__ import annotations

import ctypes
import doctest

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.codegen.c_prelude import c_prelude
from tensorkiln.dtypes import bf16_bits_from_f32
from tensorkiln.kernels.bf16_readers import bf16_depthwise_input
from tensorkiln.kernels.templates import bf16_store, conv_nchwc, depthwise_columns
from tensorkiln.runtime.c_compiler import compile_c

from .dot_paths import HAS_BF16_DOT, bf16_path as path  # noqa: F401  (path: the fixture)

BF16_TOLERANCE = 2e-2  # relative (Frobenius) error of a bf16 result against float32, docs/precision.md


def inverted_residual(rng: np.random.Generator, channels: int, expand: int, stride: int, residual: bool,
                      bias: float = 0.1, out_channels: int | None = None):
    """expand 1x1 + ReLU6 -> depthwise 3x3 (stride, padding 1) + ReLU6 -> project 1x1 (+ x)."""
    wide, out_channels = channels * expand, out_channels or channels
    w1 = tk.tensor((rng.standard_normal((wide, channels, 1, 1)) * 0.3).astype(np.float32))
    b1 = tk.tensor((rng.standard_normal(wide) * bias).astype(np.float32))
    wd = tk.tensor((rng.standard_normal((wide, 1, 3, 3)) * 0.3).astype(np.float32))
    bd = tk.tensor((rng.standard_normal(wide) * bias).astype(np.float32))
    w2 = tk.tensor((rng.standard_normal((out_channels, wide, 1, 1)) * 0.2).astype(np.float32))

    def block(x):
        y = F.conv2d(x, w1, b1).clip(0.0, 6.0)
        y = F.conv2d(y, wd, bd, stride=stride, padding=1, groups=wide).clip(0.0, 6.0)
        y = F.conv2d(y, w2)
        return y + x if residual else y

    return block


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


BLOCKS = [  # (channels, expansion, stride, residual, height, width); blocked layout where the
    # expanded width is 96 or more, NCHW kernels below (the layout pass's choice)
    (16, 6, 1, True, 9, 29),     # a row of two tiles and a tail between the edge pixels
    (24, 6, 2, False, 14, 15),   # stride 2, odd width
    (16, 6, 1, True, 1, 5),      # one row: every kernel row but the middle one clipped
    (32, 3, 2, False, 15, 47),   # wide rows at stride 2: several full tiles
    (8, 3, 1, True, 5, 35),      # 24 expanded channels: the NCHW kernels
]


@pytest.mark.parametrize("block_case", BLOCKS, ids=lambda c: "x".join(map(str, c)))
def test_inverted_residual_blocks_match_the_bf16_reference(path, block_case):
    channels, expand, stride, residual, h, w = block_case
    rng = np.random.default_rng(sum(block_case))
    fn = inverted_residual(rng, channels, expand, stride, residual)
    x = rng.standard_normal((1, channels, h, w)).astype(np.float32)
    f = tk.jit(fn, precision="bf16")
    got = f(x).numpy()
    blocked = channels * expand >= 96  # a blocked depthwise layer reads bf16 storage where the target says so
    assert [k.precision for k in f.report(x).kernels][1] == \
        ("bf16 (widened to fp32)" if blocked and bf16_depthwise_input() else "bf16 operands (fp32 kernel)")
    oracle = tk.jit(fn, precision="bf16", backend="interpreter")(x).numpy()
    assert relative_error(got, oracle) < 2e-3
    assert relative_error(got, tk.jit(fn)(x).numpy()) < BF16_TOLERANCE


def test_random_blocks_with_odd_channel_counts(path):
    """Channel counts the blocks (16 lanes) do not divide take the float32 or NCHW kernels where
    they must; every block still matches the bf16 reference."""
    rng = np.random.default_rng(11)
    for _ in range(3):
        channels, expand = int(rng.integers(3, 21)), int(rng.integers(1, 7))
        stride, residual = int(rng.integers(1, 3)), bool(rng.integers(0, 2))
        h, w = (int(v) for v in rng.integers(1, 24, size=2))
        fn = inverted_residual(rng, channels, expand, stride, residual and stride == 1)
        x = rng.standard_normal((1, channels, h, w)).astype(np.float32)
        got = tk.jit(fn, precision="bf16")(x).numpy()
        oracle = tk.jit(fn, precision="bf16", backend="interpreter")(x).numpy()
        assert relative_error(got, oracle) < 2e-3, (channels, expand, stride, h, w)


@pytest.mark.skipif(not HAS_BF16_DOT, reason="this CPU has no AVX512-BF16")
def test_the_vector_store_uses_vcvtneps2bf16_and_matches_the_scalar_store(monkeypatch, tmp_path):
    """The same block with the vector store and with the scalar one: the same bits."""
    rng = np.random.default_rng(5)
    fn = inverted_residual(rng, 16, 6, 1, False)
    x = rng.standard_normal((1, 16, 6, 20)).astype(np.float32)
    outputs = []
    for vector in (True, False):
        monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path / str(vector)))  # compiled anew
        # conv_nchwc's tile_store (which the bf16 template shares) makes the choice
        monkeypatch.setattr(conv_nchwc, "uses_vector_store",
                            bf16_store.uses_vector_store if vector else (lambda out, kb: False))
        f = tk.jit(fn, precision="bf16")
        source = open(f.report(x).source_path).read()
        assert (bf16_store.CONVERT + "(" in source) == vector
        outputs.append(f(x).numpy())
    np.testing.assert_array_equal(outputs[0].view(np.uint32), outputs[1].view(np.uint32))


@pytest.mark.skipif(not HAS_BF16_DOT, reason="this CPU has no AVX512-BF16")
def test_the_conversion_helper_rounds_every_kind_of_value_as_the_reference(tmp_path):
    """tk_f32_to_bf16_vectors on subnormal values (which vcvtneps2bf16 flushes), NaNs, infinities,
    ties and values that round up to infinity: the bits of the scalar tk_f32_to_bf16 (a NaN keeps
    its sign), and of the reference rounding for every number."""
    special = np.array([0.0, -0.0, 1e-39, -3e-40, 1.4e-45, 1.1754942e-38, np.inf, -np.inf, np.nan,
                        -np.nan, 3.4028235e38, -3.4e38, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 65504.0,
                        np.float32(1e-39) * 3], np.float32)
    rng = np.random.default_rng(8)
    values = np.concatenate([special, rng.standard_normal(16 * 5).astype(np.float32) * np.float32(1e-38),
                             rng.standard_normal(16 * 4).astype(np.float32)])
    values = np.concatenate([values, rng.standard_normal(-len(values) % 16).astype(np.float32)])
    source = "\n".join([c_prelude(), bf16_store.CONVERT_SOURCE,
                        "void convert(const float *src, uint16_t *dst, int64_t vectors) "
                        "{ tk_f32_to_bf16_vectors(src, 16, dst, vectors); }",
                        "void convert_scalar(const float *src, uint16_t *dst, int64_t n) "
                        "{ for (int64_t i = 0; i < n; ++i) dst[i] = tk_f32_to_bf16(src[i]); }"])
    library = ctypes.CDLL(compile_c(source, cache=tmp_path).path)
    out, scalar = np.zeros(len(values), np.uint16), np.zeros(len(values), np.uint16)
    pointer = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    library.convert(pointer(values), pointer(out), ctypes.c_int64(len(values) // 16))
    library.convert_scalar(pointer(values), pointer(scalar), ctypes.c_int64(len(values)))
    np.testing.assert_array_equal(out, scalar)
    numbers = ~np.isnan(values)
    np.testing.assert_array_equal(out[numbers], bf16_bits_from_f32(values[numbers]))


def test_column_taps_and_tiles():
    assert doctest.testmod(depthwise_columns).failed == 0
    for pixels, kw, stride, dilation in [(5, 3, 1, 1), (4, 3, 2, 1), (3, 5, 1, 2), (1, 3, 2, 1)]:
        columns = depthwise_columns.column_taps(pixels, kw, stride, dilation)
        pairs = [(i, s) for _, readers in columns for i, s in readers]
        assert sorted(pairs) == [(i, s) for i in range(pixels) for s in range(kw)]  # each product once
        assert all(c == i * stride + s * dilation for c, readers in columns for i, s in readers)
        for i in range(pixels):  # each accumulator meets its taps in order
            assert [s for _, readers in columns for p, s in readers if p == i] == list(range(kw))
    for ow in (1, 7, 14, 28, 56, 112, 113):
        t = depthwise_columns.depthwise_columns_tile(ow, 3, 32)
        assert 1 <= t <= 27 and -(-ow // t) == -(-ow // 27)  # as few tiles as registers allow, even
