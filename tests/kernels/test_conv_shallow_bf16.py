"""The bf16 shallow convolution (conv2d_shallow_bf16, kernels/templates/conv_shallow_bf16.py): the RGB stem
on pairs of neighbouring taps.

Each case runs with `vdpbf16ps` (where the CPU has AVX512-BF16) and with the loop IR that widens bf16 to
float32 (TENSORKILN_NO_BF16_DOT=1). The op is compared with a float64 convolution of the same bf16
values; whole precision="bf16" graphs with the reference interpreter running the same bf16 graph, and
with float32 within the bf16 tolerance.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.frontend.tensor import apply
from tensorkiln.ir.ops.backend_shallow_bf16 import shallow_weight_from_pairs
from tensorkiln.kernels.target import cpu_target
from tensorkiln.passes import shallow_bf16_weights
from tensorkiln.passes.shallow_bf16_weights import shallow_weight_pairs

from .dot_paths import bf16, bf16_path


@pytest.fixture
def path(bf16_path, monkeypatch):
    """bf16_path, with stems sent to the tap pairs on the widened path too (PAIRS_WITHOUT_BF16_DOT)."""
    monkeypatch.setattr(shallow_bf16_weights, "PAIRS_WITHOUT_BF16_DOT", True)
    return bf16_path
from .test_conv_nchwc import reference

RNG = np.random.default_rng(11)
BF16_TOLERANCE = 2e-2  # relative (Frobenius) error of a bf16 result against float32, docs/precision.md


def expected_precision(path: str) -> str:
    return "bf16 (vdpbf16ps)" if path == "vdpbf16ps" else "bf16 (widened to fp32)"


def pairs_constant(w: np.ndarray) -> tk.Tensor:
    """A float32 weight as the bfloat16 tap-pairs constant the kernel reads."""
    return tk.tensor(tk.dtypes.f32_from_bf16_bits(shallow_weight_pairs(w))).to(tk.bfloat16)


CASES = [  # (n, c, h, w, k, (kh, kw), stride, padding, dilation, groups)
    (1, 3, 37, 41, 64, (7, 7), 2, 3, 1, 1),               # the stem: odd KW, a partial last vector
    (2, 3, 9, 35, 10, (3, 3), 1, 1, 1, 1),                 # stride 1: a pair plane of shifted columns
    (1, 2, 11, 50, 7, (5, 4), 3, (0, 2, 1, 3), 1, 1),      # stride 3 (three column phases), uneven padding
    (1, 4, 13, 19, 6, (3, 3), (1, 2), 2, 2, 2),            # dilated, two groups
    (1, 1, 7, 7, 3, (1, 1), 1, 0, 1, 1),                   # 1x1: one tap, its pair half zero
    (1, 3, 6, 4, 5, (7, 7), 2, 3, 1, 1),                   # an output row narrower than one vector
    (1, 3, 40, 70, 16, (2, 6), 2, 0, (1, 3), 1),           # even KW, dilated columns, many pixel vectors
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)).replace(" ", ""))
def test_conv2d_shallow_bf16_matches_a_float64_reference(path, case):
    n, c, h, w, k, (kh, kw), stride, pad, dilation, groups = case
    stride = stride if isinstance(stride, tuple) else (stride, stride)
    dilation = dilation if isinstance(dilation, tuple) else (dilation, dilation)
    padding = pad if isinstance(pad, tuple) else (pad,) * 4
    x = bf16(RNG.standard_normal((n, c, h, w))).astype(np.float32)
    wt = bf16(RNG.standard_normal((k, c // groups, kh, kw))).astype(np.float32)
    bias = RNG.standard_normal((1, k, 1, 1)).astype(np.float32)
    pairs = pairs_constant(wt)
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups, kernel_width=kw)
    f = tk.jit(lambda x, b: (apply("conv2d_shallow_bf16", [x, pairs], **attrs) + b).relu())
    got = f(x, bias).numpy()
    report = f.report(x, bias)
    assert report.backend == "c"
    assert [kernel.precision for kernel in report.kernels] == [expected_precision(path)]
    want = reference64(x, wt, stride, padding, dilation, groups)
    scale = reference64(np.abs(x), np.abs(wt), stride, padding, dilation, groups).max()
    # float32 sums of exact products (bf16 x bf16): a few ulps of the sum of magnitudes
    np.testing.assert_allclose(got, np.maximum(want + bias, 0), rtol=1e-5, atol=1e-6 * max(scale, 1.0))


def reference64(x, w, stride, padding, dilation, groups):
    """conv2d in float64, per group."""
    cg, kg = w.shape[1], w.shape[0] // groups
    return np.concatenate([reference(x[:, g * cg:(g + 1) * cg], w[g * kg:(g + 1) * kg], stride, padding, dilation)
                           for g in range(groups)], axis=1)


def test_the_pairs_hold_the_weight_and_a_zero_tap_after_an_odd_width():
    w = bf16(RNG.standard_normal((4, 3, 5, 7))).astype(np.float32)
    pairs = shallow_weight_pairs(w)
    assert pairs.shape == (4, 3, 5, 4, 2) and pairs.dtype == np.uint16
    assert not pairs[..., 3, 1].any()
    np.testing.assert_array_equal(shallow_weight_from_pairs(pairs, 7), w)


def test_the_op_rejects_what_it_cannot_compute():
    x = tk.tensor(np.zeros((1, 3, 8, 8), np.float32))
    pairs = tk.tensor(np.zeros((4, 3, 3, 2, 2), np.float32)).to(tk.bfloat16)
    conv = dict(stride=(1, 1), padding=(1,) * 4, dilation=(1, 1), groups=1)
    with pytest.raises(tk.errors.ShapeError, match="ceil"):
        apply("conv2d_shallow_bf16", [x, pairs], kernel_width=5, **conv)
    with pytest.raises(tk.errors.DTypeError, match="bfloat16 weight pairs"):
        apply("conv2d_shallow_bf16", [x, tk.tensor(np.zeros((4, 3, 3, 2, 2), np.float32))], kernel_width=3, **conv)
    with pytest.raises(tk.errors.ShapeError, match="input channels"):
        apply("conv2d_shallow_bf16", [tk.tensor(np.zeros((1, 2, 8, 8), np.float32)), pairs], kernel_width=3, **conv)


def stem(in_channels: int, size: tuple[int, int]):
    """A ResNet stem: 7x7 stride-2 convolution, bias, ReLU, 3x3 stride-2 max pool; random weights."""
    w = tk.tensor((RNG.standard_normal((16, in_channels, 7, 7)) * 0.1).astype(np.float32))
    b = tk.tensor(RNG.standard_normal(16).astype(np.float32))

    def fn(x):
        return F.max_pool2d(F.conv2d(x, w, b, stride=2, padding=3).relu(), 3, stride=2, padding=1)

    return fn, RNG.standard_normal((2, in_channels) + size).astype(np.float32)


@pytest.mark.parametrize("in_channels,size", [(3, (45, 38)), (1, (17, 64))])
def test_a_bf16_stem_runs_on_tap_pairs_and_matches_the_bf16_reference(path, in_channels, size):
    fn, x = stem(in_channels, size)
    f = tk.jit(fn, precision="bf16")
    got = f(x).numpy()
    convs = [k for k in f.report(x).kernels if "conv2d_shallow_bf16" in " ".join(map(str, k.nodes))]
    assert len(convs) == 1 and convs[0].precision == expected_precision(path)
    oracle = tk.jit(fn, precision="bf16", backend="interpreter")(x).numpy()
    fp32 = tk.jit(fn)(x).numpy()
    np.testing.assert_allclose(got, oracle, rtol=1e-4, atol=1e-5 * np.abs(oracle).max())
    assert np.linalg.norm(got - fp32) / np.linalg.norm(fp32) < BF16_TOLERANCE


def test_fp32_compiles_keep_the_float32_shallow_kernel():
    fn, x = stem(3, (20, 20))
    report = tk.jit(fn).report(x)
    assert not any("conv2d_shallow_bf16" in " ".join(map(str, k.nodes)) for k in report.kernels)
    assert {k.precision for k in report.kernels} == {"fp32"}


def test_the_input_gradient_is_that_of_conv2d_by_the_weight_the_pairs_hold():
    wt = bf16(RNG.standard_normal((4, 3, 3, 5))).astype(np.float32)
    x_np = RNG.standard_normal((1, 3, 9, 11)).astype(np.float32)
    conv = dict(stride=(2, 1), padding=(1, 2, 0, 1), dilation=(1, 1), groups=1)
    x = tk.tensor(x_np, requires_grad=True)
    apply("conv2d_shallow_bf16", [x, pairs_constant(wt)], kernel_width=5, **conv).sum().backward()
    x_ref = tk.tensor(x_np, requires_grad=True)
    apply("conv2d", [x_ref, tk.tensor(wt)], **conv).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), x_ref.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_without_bf16_dot_the_stem_keeps_the_float32_shallow_kernel(monkeypatch):
    """No vdpbf16ps: the stem runs the float32 shallow kernel on the rounded operands (faster than
    widening tap pairs), and the result is the bf16 graph's."""
    monkeypatch.setenv("TENSORKILN_NO_BF16_DOT", "1")
    cpu_target.cache_clear()
    try:
        w = tk.tensor((RNG.standard_normal((32, 3, 3, 3)) * 0.3).astype(np.float32))
        b = tk.tensor(RNG.standard_normal(32).astype(np.float32) * 0.1)
        stem = lambda x: F.conv2d(x, w, b, stride=2, padding=1).clip(0.0, 6.0)  # noqa: E731
        x = RNG.standard_normal((1, 3, 33, 29)).astype(np.float32)
        f = tk.jit(stem, precision="bf16")
        got = f(x).numpy()
        kernels = f.report(x).kernels
        assert not any("conv2d_shallow_bf16" in " ".join(map(str, k.nodes)) for k in kernels)
        assert [k.precision for k in kernels if k.kind == "contraction"] == ["bf16 operands (fp32 kernel)"]
        oracle = tk.jit(stem, precision="bf16", backend="interpreter")(x).numpy()
        assert np.linalg.norm(got - oracle) / np.linalg.norm(oracle) < 1e-5
    finally:
        monkeypatch.undo()
        cpu_target.cache_clear()
