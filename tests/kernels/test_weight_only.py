"""Weight-only matmuls (kernels/templates/weight_only.py): int8 / int4 weights with group scales, and
bf16 weights in the matrix-vector helper, dequantized in registers with float32 sums.

The reference dequantizes the same integers with the same scales (ir/ops/weight_only.py) and sums in
float64 (int4: times the rows of A quantized to int8 per group, as the kernels do); the kernels differ
from it only by the order of float32 additions. Each case runs with the AVX-512 helpers, the AVX2 ones
(the target described with 256-bit vectors) and the portable C ones (16-byte vectors); int4 also with
vpmaddubsw for vpdpbusd.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.driver.options import CompileOptions
from tensorkiln.errors import ShapeError
from tensorkiln.ir.ops import REGISTRY, TensorType, infer_type
from tensorkiln.ir.ops.weight_only import (dequantize, grid_group, int4_offset_groups, int4_steps, pack_weight_only,
                                           quantize_groups, quantize_rows, unpack_weight_only)
from tensorkiln.kernels.target import INT8_DOT_KINDS, cpu_target
from tensorkiln.kernels.templates import stream_prefetch
from tensorkiln.kernels.templates.stream_prefetch import StreamPrefetch
from tensorkiln.kernels.templates.weight_only import bf16_matvec_kind
from tensorkiln.passes.weight_only import WeightOnlySpec, weight_only_spec
from tensorkiln import dtypes as dt
from tensorkiln.ir.ops import Attrs

from .dot_paths import bf16, vector_path as kind  # noqa: F401  (kind: the fixture)

RNG = np.random.default_rng(0)


def assert_close(result: np.ndarray, expected: np.ndarray, k: int) -> None:
    """float32 sums of k products of float32 numbers: a few ulps of the sum of magnitudes."""
    scale = np.sqrt(max(k, 1)) * max(float(np.abs(expected).max()), 1.0)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=4e-6 * scale)


def dequantized(w: np.ndarray, bits: int, group: int | None) -> np.ndarray:
    q, scales = quantize_groups(w, bits, min(group or w.shape[0], w.shape[0]))
    return dequantize(q, scales, min(group or w.shape[0], w.shape[0])).astype(np.float64)


def quantized_rows(x: np.ndarray, bits: int, group: int | None) -> np.ndarray:
    """x as the kernel multiplies it: float32 for int8 weights, int8 per row and group for int4."""
    if bits == 8:
        return x.astype(np.float64)
    group = min(group, x.shape[-1])
    a_q, scales = quantize_rows(x, group)
    return a_q.astype(np.float64) * np.repeat(scales, group, axis=-1)[..., :x.shape[-1]]


def expected_product(x: np.ndarray, w: np.ndarray, bits: int, group: int | None) -> np.ndarray:
    return quantized_rows(x, bits, group) @ dequantized(w, bits, group)


# (rows, k, n): one row (decoding) and a few, a depth of one, depths that are not a multiple of the
# group (a short last group) or of the two chains, columns past the last whole panel of 32, and many
# rows (a prefill: 4-row tiles, a 1-3 row remainder, several row blocks of 32; from 8 rows a task, int8's
# avx2 float tiles over dequantized blocks of 128 depths: 6-row tiles and each 1-5 row remainder, a last
# part block of depths, groups that straddle the blocks)
SHAPES = [(1, 1, 4096), (1, 100, 77), (3, 257, 130), (2, 65, 96), (1, 768, 161), (5, 31, 200), (37, 129, 65),
          (70, 64, 64), (8, 128, 33), (29, 300, 40), (11, 130, 100), (16, 256, 32), (9, 1, 4096), (10, 70, 70),
          (31, 110, 40)]


@pytest.mark.parametrize("precision,bits,group", [("int8w", 8, None), ("int4w", 4, 32), ("int4w-g64", 4, 64),
                                                  ("int8w-g32", 8, 32), ("int8w-g48", 8, 48)])
def test_matmul_by_quantized_weight(kind, precision, bits, group):
    """Every shape of SHAPES in one compiled graph (one C compile)."""
    if kind == "portable" and "-g" in precision:
        pytest.skip("the portable helper with the default groups: the group loop is the same")
    xs = [RNG.standard_normal((m, k)).astype(np.float32) for m, k, n in SHAPES]
    ws = [RNG.standard_normal((k, n)).astype(np.float32) for m, k, n in SHAPES]
    f = tk.jit(lambda *xs: tuple(x @ tk.tensor(w) for x, w in zip(xs, ws)), precision=precision)
    for x, w, result in zip(xs, ws, f(*xs)):
        assert_close(result.numpy(), expected_product(x, w, bits, group), x.shape[1])
    kernels = f.report(*xs).kernels
    assert {kernel.precision for kernel in kernels} == {f"int{bits}w"}
    if bits == 8:  # the variant the target asks for, in every kernel
        assert all(f"native tk_w8_matmul_{kind}(" in kernel.loop_ir for kernel in kernels)


@pytest.mark.parametrize("precision,bits", [("int8w", 8), ("int4w", 4)])
def test_linear_layer_batch_and_epilogue(kind, precision, bits):
    """A transposed weight (folded to a constant first), batch axes folded into the rows, and the bias
    and activation fused after the helper."""
    x = RNG.standard_normal((2, 3, 96)).astype(np.float32)
    w = RNG.standard_normal((80, 96)).astype(np.float32)  # (out, in), as nn.Linear holds it
    b = RNG.standard_normal(80).astype(np.float32)
    f = tk.jit(lambda x: (x @ tk.tensor(w).permute(1, 0) + tk.tensor(b)).relu(), precision=precision)
    want = np.maximum(expected_product(x, w.T.copy(), bits, 32 if bits == 4 else None) + b, 0)
    assert_close(f(x).numpy(), want, 96)
    assert len(f.report(x).kernels) == 1  # the epilogue fused


def test_interpreter_runs_the_same_quantized_graph():
    x = RNG.standard_normal((1, 200)).astype(np.float32)
    w = RNG.standard_normal((200, 90)).astype(np.float32)
    compiled = tk.jit(lambda x: x @ tk.tensor(w), precision="int4w")(x).numpy()
    interpreted = tk.jit(lambda x: x @ tk.tensor(w), precision="int4w", backend="interpreter")(x).numpy()
    assert_close(compiled, interpreted.astype(np.float64), 200)
    assert not np.allclose(interpreted, x @ w, rtol=1e-4)  # quantized: not the float product


def test_small_and_activation_products_stay_float():
    x = RNG.standard_normal((1, 16)).astype(np.float32)
    w = RNG.standard_normal((16, 16)).astype(np.float32)  # 256 weights: below weight_only.MIN_WEIGHTS
    y = RNG.standard_normal((16, 300)).astype(np.float32)
    f = tk.jit(lambda x, y: (x @ tk.tensor(w)) @ y, precision="int8w")
    np.testing.assert_allclose(f(x, y).numpy(), x @ w @ y, rtol=1e-4, atol=1e-4)
    assert all(k.precision == "fp32" for k in f.report(x, y).kernels)


@pytest.mark.parametrize("bits,group", [(8, 7), (8, 50), (4, 32), (4, 5)])
def test_quantization_grid(bits, group):
    """Integers in range, each weight within half a step of its group's grid, the packing lossless."""
    k, n = 50, 45
    w = RNG.standard_normal((k, n)).astype(np.float32)
    w[:, 3] = 0.0  # a column of zeros: scale 0, no division by it
    q, scales = quantize_groups(w, bits, group)
    low, high = (-127, 127) if bits == 8 else (-8, 7)
    assert q.min() >= low and q.max() <= high and scales.shape == (-(-k // group), n)
    steps = np.repeat(np.abs(scales), group, axis=0)[:k]
    error = np.abs(dequantize(q, scales, group) - w)
    # int4 maps the largest magnitude to -8: a weight of the other sign beyond 7 steps is clipped to 7
    rounded = q != high if bits == 4 else np.ones_like(q, dtype=bool)
    assert np.all(error[rounded] <= steps[rounded] / 2 + 1e-6) and np.all(error <= steps + 1e-6)
    assert np.all(q[:, 3] == 0) and np.all(scales[:, 3] == 0)
    panels, scale_panels = pack_weight_only(q, scales, bits, group)
    if bits == 4:  # each group padded to whole steps of 4 depths
        assert panels.shape == (2, int4_steps(k, group), 64) and int4_steps(k, group) == -(-k // group) * -(-group // 4)
    q_back, scales_back = unpack_weight_only(panels, scale_panels, bits, k, n, group)
    np.testing.assert_array_equal(q_back, q)
    np.testing.assert_array_equal(scales_back, scales)


@pytest.mark.parametrize("bits,low,high", [(8, -15, 15), (8, -127, 127), (4, -8, 7)])
def test_a_weight_stored_quantized_keeps_its_integers(bits, low, high):
    """Groups that already are integers times one scale (a model's own quantized weight, dequantized) are
    kept as they are: the weight the kernel multiplies by is the model's, bit for bit; blocks that are
    not (random ones mixed in) get the usual grid."""
    k, n, group = 96, 40, 32
    q = RNG.integers(low, high + 1, (k, n)).astype(np.float32)
    scales = RNG.uniform(1e-3, 1e-2, (k // group, n)).astype(np.float32)
    w = (q * np.repeat(scales, group, axis=0)).astype(np.float32)
    w[:group, :5] = RNG.standard_normal((group, 5))  # five blocks of no grid
    q_kept, scales_kept = quantize_groups(w, bits, group)
    weight = dequantize(q_kept, scales_kept, group)
    np.testing.assert_array_equal(weight[:, 5:], w[:, 5:])
    np.testing.assert_array_equal(weight[group:], w[group:])
    assert not np.array_equal(weight[:group, :5], w[:group, :5])  # quantized as usual, within half a step
    assert np.all(np.abs(weight[:group, :5] - w[:group, :5]) <= np.abs(scales_kept[0, :5]) + 1e-6)


def test_the_block_size_of_a_stored_grid_is_found():
    k, n = 320, 24
    q = RNG.integers(-15, 16, (k, n)).astype(np.float32)
    for block in (64, 32):
        scales = RNG.uniform(1e-3, 1e-2, (k // block, n)).astype(np.float32)
        w = (q * np.repeat(scales, block, axis=0)).astype(np.float32)
        w[:, 7] = 0.0  # a column of zeros is on every grid
        assert grid_group(w, -127, 127) == block
    assert grid_group(RNG.standard_normal((k, n)).astype(np.float32), -127, 127) is None


def test_asymmetric_int4_grids_are_held_as_int4_plus_group_offsets():
    """Groups of q - zero point (16 consecutive integers, not all within [-8, 7]) times a scale: q in
    [-8, 7] plus an integer offset per group, (q + offset) * scale the weight exactly; a symmetric grid
    or a float weight needs no offset."""
    k, n, group = 80, 36, 16
    groups = -(-k // group)
    zeros = RNG.integers(0, 16, (groups, n))
    q = RNG.integers(0, 16, (k, n)) - np.repeat(zeros, group, axis=0)[:k]
    scales = RNG.uniform(1e-3, 1e-2, (groups, n)).astype(np.float32)
    w = (q.astype(np.float32) * np.repeat(scales, group, axis=0)[:k]).astype(np.float32)
    q4, scales4, offsets = int4_offset_groups(w, group)
    assert q4.min() >= -8 and q4.max() <= 7
    weight = (q4.astype(np.float32) + np.repeat(offsets, group, axis=0)[:k]) * np.repeat(scales4, group, axis=0)[:k]
    np.testing.assert_array_equal(weight.astype(np.float32), w)
    assert int4_offset_groups(np.clip(q, -8, 7) * np.float32(0.01), group) is None
    assert int4_offset_groups(RNG.standard_normal((k, n)).astype(np.float32), group) is None


@pytest.mark.parametrize("int4_path", ["vnni", "avx512bw", "avx2", "portable"])
def test_int4_integer_sums(monkeypatch, int4_path):
    """int4 weights x int8 rows on each integer dot product: groups that are no multiple of the 4-depth
    step (padded), a short last group, one group per column, a group of 20 (the rows' quantizer: two
    8-float vectors and a scalar tail), a row of zeros, an outlier in a group."""
    best = cpu_target().int8_dot
    if INT8_DOT_KINDS.index(int4_path) < INT8_DOT_KINDS.index(best):
        pytest.skip(f"this CPU has no {int4_path}")
    if int4_path in ("avx512bw", "avx2", "portable"):
        monkeypatch.setenv("TENSORKILN_INT8_DOT", int4_path)
    cpu_target.cache_clear()
    cases = [(2, 70, 64, 5), (1, 130, 70, 7), (6, 67, 65, 32), (1, 96, 64, 96), (3, 200, 40, 64),
             (2, 100, 64, 20)]  # >= 4096 weights
    xs = [RNG.standard_normal((m, k)).astype(np.float32) for m, k, n, g in cases]
    xs[0][1] = 0.0  # a row of zeros: scale 0, no division by it
    xs[1][0, 3] = 1e4  # an outlier: the rest of its group rounds to few levels, as the reference does
    ws = [RNG.standard_normal((k, n)).astype(np.float32) for m, k, n, g in cases]
    try:  # the groups differ per case: one graph (one C compile) per group size
        results = []
        for x, w, (m, k, n, g) in zip(xs, ws, cases):
            f = tk.jit(lambda x: x @ tk.tensor(w), precision=f"int4w-g{g}")
            results.append(f(x).numpy())
            assert any(f"native tk_w4_matmul_{int4_path}(" in kernel.loop_ir for kernel in f.report(x).kernels)
    finally:
        monkeypatch.undo()
        cpu_target.cache_clear()
    for x, w, result, (m, k, n, g) in zip(xs, ws, results, cases):
        assert_close(result, expected_product(x, w, 4, g), k)
    assert np.all(results[0][1] == 0.0)


@pytest.mark.parametrize("int4_path", ["avx2", "portable"])
def test_int4_sums_at_their_bound(monkeypatch, int4_path):
    """Every stored weight nibble 15 and every row value +-127: the largest pair sums, which the avx2
    helper adds over eight steps in 16-bit lanes (8 x 2 x 15 x 127 = 30480; a group of 128 depths
    is 32 steps), are exact."""
    if INT8_DOT_KINDS.index(int4_path) < INT8_DOT_KINDS.index(cpu_target().int8_dot):
        pytest.skip(f"this CPU has no {int4_path}")
    monkeypatch.setenv("TENSORKILN_INT8_DOT", int4_path)
    cpu_target.cache_clear()
    x = np.ones((3, 128), np.float32)  # 5120 weights: the pass quantizes from 4096
    x[1] = -1.0
    x[2, ::2] = -1.0
    w = np.full((128, 40), -0.4375, np.float32)  # q = 7, stored 15: the group's extreme 0.5 is q = -8
    w[0] = 0.5
    try:
        f = tk.jit(lambda x: x @ tk.tensor(w), precision="int4w-g128")
        result = f(x).numpy()
        assert any(f"native tk_w4_matmul_{int4_path}(" in kernel.loop_ir for kernel in f.report(x).kernels)
    finally:
        monkeypatch.undo()
        cpu_target.cache_clear()
    assert_close(result, expected_product(x, w, 4, 128), 128)
    np.testing.assert_allclose(result[:2], [[0.5 - 127 * 0.4375] * 40, [127 * 0.4375 - 0.5] * 40], rtol=1e-5)


def test_rows_quantized_per_group():
    """quantize_rows: symmetric int8 per row and group, the largest magnitude at +-127, each value within
    half a step; a short last group; a group of zeros."""
    x = RNG.standard_normal((3, 70)).astype(np.float32)
    x[2, 32:64] = 0.0
    a_q, scales = quantize_rows(x, 32)
    assert a_q.dtype == np.int8 and a_q.shape == (3, 70) and scales.shape == (3, 3)
    assert scales[2, 1] == 0 and np.all(a_q[2, 32:64] == 0)
    steps = np.repeat(scales, 32, axis=-1)[:, :70]
    assert np.all(np.abs(a_q * steps - x) <= steps / 2 * (1 + 1e-5) + 1e-12)
    assert np.all(np.abs(a_q).reshape(3, -1)[:, :64].reshape(3, 2, 32).max(-1)[[0, 1, 2], [0, 0, 0]] == 127)


@pytest.mark.parametrize("path", ["dpbf16", "widened", "avx2", "portable"])
def test_bf16_matrix_vector(monkeypatch, path):
    """precision="bf16" with too few rows for the bf16 GEMM: bf16 weights in the matrix-vector helper
    (odd depths: a zero-padded last pair), each variant of it: vdpbf16ps, widened in 512-bit vectors,
    in 256-bit halves (AVX2), plain C."""
    if path == "dpbf16" and not cpu_target().bf16_dot:
        pytest.skip("this CPU has no AVX512-BF16")
    if path == "widened" and cpu_target().vector_bytes < 64:
        pytest.skip("this CPU has no 512-bit vectors")
    if path == "avx2" and not cpu_target().fma256:
        pytest.skip("this CPU has no AVX2 with FMA")
    if path == "widened":
        monkeypatch.setenv("TENSORKILN_NO_BF16_DOT", "1")
    if path in ("avx2", "portable"):
        monkeypatch.setenv("TENSORKILN_VECTOR_BYTES", "32" if path == "avx2" else "16")
    cpu_target.cache_clear()
    assert bf16_matvec_kind() == {"widened": "avx512"}.get(path, path)
    shapes = [(1, 100, 77), (3, 257, 130), (2, 65, 96), (1, 768, 161), (1, 1, 4096)]
    xs = [RNG.standard_normal((m, k)).astype(np.float32) for m, k, n in shapes]
    ws = [RNG.standard_normal((k, n)).astype(np.float32) for m, k, n in shapes]
    try:
        f = tk.jit(lambda *xs: tuple(x @ tk.tensor(w) + 1.0 for x, w in zip(xs, ws)), precision="bf16")
        results = [r.numpy() for r in f(*xs)]
        precisions = {k.precision for k in f.report(*xs).kernels}
    finally:
        monkeypatch.undo()
        cpu_target.cache_clear()
    for x, w, result in zip(xs, ws, results):
        assert_close(result, bf16(x) @ bf16(w) + 1.0, x.shape[1])
    assert precisions == {{"dpbf16": "bf16 (matvec, vdpbf16ps)"}.get(path, "bf16 (matvec, widened to fp32)")}


def test_precision_strings():
    assert weight_only_spec("int8w") == WeightOnlySpec(8, None)
    assert weight_only_spec("int4w") == WeightOnlySpec(4, 32)
    assert weight_only_spec("int4w-g128") == WeightOnlySpec(4, 128)
    assert weight_only_spec("bf16") is None and weight_only_spec("int3w") is None
    for bad in ("int4w-g0", "int4w-g", "int8", "int16w"):
        with pytest.raises(ValueError, match="int8w"):
            CompileOptions(precision=bad)


def test_bad_operands_are_named():
    attrs = Attrs(n=40, k=64, group=32)
    good = [TensorType((1, 64), dt.float32), TensorType((2, 64, 32), dt.int8), TensorType((2, 2, 32), dt.float32)]
    assert infer_type("matmul_int8w", good, attrs).shape == (1, 40)
    with pytest.raises(ShapeError, match="matmul_int8w"):
        infer_type("matmul_int8w", [TensorType((1, 63), dt.float32)] + good[1:], attrs)
    with pytest.raises(ShapeError, match="matmul_int4w"):  # int4 panels are 16 bytes wide
        infer_type("matmul_int4w", [good[0], TensorType((2, 64, 32), dt.uint8), good[2]], attrs)
    assert REGISTRY["matmul_int4w"].backend_only


@pytest.mark.parametrize("ahead", [None, StreamPrefetch("nta", 64), StreamPrefetch("t0", 8192)])
def test_weight_stream_prefetch(monkeypatch, ahead):
    """The avx2 helpers prefetch the weight stream as the target describes (stream_prefetch.py), clamped
    to the stream's last byte, or not at all: the same sums every way."""
    if not cpu_target().fma256 or cpu_target().int8_dot == "portable":
        pytest.skip("this CPU has no AVX2 with FMA")
    monkeypatch.setattr(stream_prefetch, "WEIGHT_STREAM_PREFETCH", ahead)
    monkeypatch.setenv("TENSORKILN_VECTOR_BYTES", "32")
    monkeypatch.setenv("TENSORKILN_INT8_DOT", "avx2")
    cpu_target.cache_clear()
    x = RNG.standard_normal((1, 300)).astype(np.float32)
    w = RNG.standard_normal((300, 70)).astype(np.float32)
    try:
        for precision, bits, group in (("int8w", 8, None), ("int4w", 4, 32)):
            f = tk.jit(lambda x: x @ tk.tensor(w), precision=precision)
            assert_close(f(x).numpy(), expected_product(x, w, bits, group), 300)
            with open(f.report(x).source_path) as generated:
                source = generated.read()
            assert (f"+ {ahead.distance} < (uintptr_t)(last)" in source) if ahead else "__builtin_prefetch" not in source
    finally:
        monkeypatch.undo()
        cpu_target.cache_clear()
