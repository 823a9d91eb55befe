"""Winograd convolution (kernels/templates/winograd.py) against the reference, and the rule that picks it.

Compiled layers are forced to F(4x4, 3x3) or F(2x2, 3x3) (`forced_conv_algorithm`)
over shapes that are not multiples of a tile (1, 2, 5, 7, 13, 30), channel
counts 1..64, batches 1 and 3, every padding, and fused epilogues; the
result is compared with the numpy reference interpreter.

Tolerance: the float32 transforms cost accuracy. On random data with 64
channels the largest error relative to the largest output is about 3.6e-6
for m = 4 and 2.1e-6 for m = 2, against 1.0e-6 for a direct float32 sum
(docs/kernels.md); WINOGRAD_FACTOR scales the backend's float32 tolerance
(2e-5, absolute part times the largest output) so that the tests keep a
margin of several times the largest error they see.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln import dtypes as dt
from tensorkiln.ir.graph import constant_node, input_node, make_node
from tensorkiln.loops.buffer import Buffer
from tensorkiln.kernels.templates import conv as conv_module
from tensorkiln.kernels.templates.conv import (
    applicable_conv_algorithms, conv_algorithm, forced_conv_algorithm, winograd_choice,
)
from tensorkiln.kernels.target import CpuTarget
from tensorkiln.kernels.templates.winograd import cook_toom, winograd_plan, winograd_transforms
from tensorkiln.ir.ops import TensorType
from tensorkiln.frontend.tensor import apply

from .compiled import check_compiled

RNG = np.random.default_rng(11)
WINOGRAD_FACTOR = 2.0


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def uses_winograd(f, *args) -> bool:
    return any("wino_scratch" in k.loop_ir for k in f.report(*args).kernels)


def check_winograd(algorithm: str, fn, *args):
    """Compile fn with `algorithm` forced, check it was used and matches the reference."""
    with forced_conv_algorithm(algorithm):
        f = check_compiled(fn, *args, factor=WINOGRAD_FACTOR)
    assert uses_winograd(f, *args)
    return f


# ---- the transforms


@pytest.mark.parametrize("m", [2, 4])
def test_transforms_compute_the_correlation_exactly(m):
    """sum_j AT[i][j] G[j][k] BT[j][l] = [l == i + k]: y = AT[(G g) * (BT d)] is the 1-D correlation."""
    tf = winograd_transforms(m)
    for i in range(m):
        for k in range(tf.r):
            for col in range(tf.n):
                total = sum((tf.at[i][j] * tf.g[j][k] * tf.bt[j][col] for j in range(tf.n)), Fraction(0))
                assert total == (1 if col == i + k else 0)


def test_cook_toom_f2x2_is_lavins():
    """Points 0, 1, -1 and infinity: Lavin and Gray's F(2x2, 3x3), up to the signs of rows 0 and 3."""
    tf = cook_toom(2, 3, [Fraction(0), Fraction(1), Fraction(-1)])
    half = Fraction(1, 2)
    assert tf.at == ((1, 1, 1, 0), (0, 1, -1, 1))
    assert tf.g == ((-1, 0, 0), (half, half, half), (half, -half, half), (0, 0, 1))
    assert tf.bt == ((-1, 0, 1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, -1, 0, 1))


def test_cook_toom_refuses_repeated_points():
    with pytest.raises(ValueError, match="distinct"):
        cook_toom(2, 3, [Fraction(0), Fraction(1), Fraction(1)])


# ---- compiled against the reference

SIZES = [  # (n, c, k, h, w, padding): sizes that are no multiple of a tile
    (1, 1, 4, 1, 1, 1),
    (3, 3, 8, 2, 2, 1),
    (1, 17, 16, 5, 7, 1),
    (3, 17, 5, 7, 5, 0),
    (1, 3, 17, 13, 13, 1),
    (1, 64, 64, 13, 30, 1),
    (3, 16, 24, 30, 13, 0),
    (1, 64, 17, 30, 30, (1, 0)),
]


@pytest.mark.parametrize("algorithm", ["winograd4", "winograd2"])
@pytest.mark.parametrize("case", SIZES, ids=lambda c: "n{}c{}k{}_{}x{}_p{}".format(*c))
def test_winograd_bias_relu(algorithm, case):
    n, c, k, h, w, pad = case
    x, wt, bias = rand(n, c, h, w), rand(k, c, 3, 3), rand(k)
    check_winograd(algorithm, lambda x, wt, b: F.conv2d(x, wt, b, padding=pad).relu(), x, wt, bias)


@pytest.mark.parametrize("algorithm", ["winograd4", "winograd2"])
def test_winograd_residual_epilogue(algorithm):
    x, wt, bias = rand(3, 16, 13, 7), rand(20, 16, 3, 3), rand(20)
    res = rand(3, 20, 13, 7)
    check_winograd(algorithm, lambda x, wt, b, r: (F.conv2d(x, wt, b, padding=1) + r).relu(), x, wt, bias, res)


@pytest.mark.parametrize("algorithm", ["winograd4", "winograd2"])
@pytest.mark.parametrize("pads", [(0, 2, 1, 0), (2, 0, 0, 2), (1, 1, 2, 0)], ids=str)
def test_winograd_asymmetric_padding(algorithm, pads):
    """conv2d padding (top, bottom, left, right), as ONNX models give it."""
    x, wt = rand(2, 8, 11, 9), rand(12, 8, 3, 3)
    fn = lambda x, wt: apply("conv2d", [x, wt], stride=(1, 1), padding=pads, dilation=(1, 1), groups=1)  # noqa: E731
    check_winograd(algorithm, fn, x, wt)


def test_winograd_weights_as_constants_and_batch():
    """Weights baked in as constants (a model's case), a batch of 3 spread over chunks of tile rows."""
    w, b = tk.tensor(rand(32, 32, 3, 3)), tk.tensor(rand(32))
    check_winograd("winograd4", lambda x: F.conv2d(x, w, b, padding=1).relu(), rand(3, 32, 29, 31))


def test_winograd_in_debug_mode_reads_and_writes_in_bounds():
    """Debug builds check every access the interval analysis cannot prove in range."""
    x, wt = rand(2, 5, 7, 6), rand(6, 5, 3, 3)
    for algorithm in ("winograd4", "winograd2"):
        with forced_conv_algorithm(algorithm):
            f = check_compiled(lambda x, wt: F.conv2d(x, wt, padding=1), x, wt, debug=True,
                               factor=WINOGRAD_FACTOR)
        assert uses_winograd(f, x, wt)


def test_winograd_chunks_on_two_threads(monkeypatch):
    """The plan for two threads (chunks shared by workers) computes the same result."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    x, wt = rand(3, 16, 30, 30), rand(16, 16, 3, 3)
    node = _conv_node((3, 16, 30, 30), (16, 16, 3, 3))
    assert winograd_plan(node, 4).workers == 2
    check_winograd("winograd4", lambda x, wt: F.conv2d(x, wt, padding=1), x, wt)


def test_winograd_gemm_rows_cut_among_many_threads(monkeypatch):
    """On 7 threads the 16 GEMMs of F(2x2) do not divide among them: each is cut by rows, and the
    micro-kernel reads its row chunk's panels of U in place (transformed in the kernel or given)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    x, wt = rand(1, 16, 10, 10), rand(64, 16, 3, 3)
    check_winograd("winograd2", lambda x, wt: F.conv2d(x, wt, padding=1).relu(), x, wt)
    w_const = tk.tensor(wt)
    check_winograd("winograd2", lambda x: F.conv2d(x, w_const, padding=1).relu(), x)


def test_forcing_winograd_leaves_other_layers_alone():
    """A forced algorithm applies only where it can: grouped, strided or 5x5 layers keep their rule."""
    cases = [(rand(1, 16, 12, 12), rand(16, 8, 3, 3), dict(padding=1, groups=2)),
             (rand(1, 16, 12, 12), rand(16, 16, 3, 3), dict(padding=1, stride=2)),
             (rand(1, 16, 12, 12), rand(16, 16, 5, 5), dict(padding=2))]
    for x, wt, kwargs in cases:
        with forced_conv_algorithm("winograd4"):
            f = check_compiled(lambda x, wt: F.conv2d(x, wt, **kwargs), x, wt, factor=10)
        assert not uses_winograd(f, x, wt)


def test_unknown_algorithm_is_refused():
    with pytest.raises(ValueError, match="unknown convolution algorithm"):
        with forced_conv_algorithm("fft"):
            pass


# ---- the rule

ZEN5 = CpuTarget(vector_bytes=64, vector_registers=32, l1d=48 << 10, l2=1 << 20, l3=32 << 20)


def _conv_node(x_shape, w_shape, stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1,
               dtype=dt.float32):
    x = input_node("x", 0, TensorType(tuple(x_shape), dtype))
    w = input_node("w", 1, TensorType(tuple(w_shape), dtype))
    return make_node("conv2d", [x, w], dict(stride=stride, padding=padding, dilation=dilation, groups=groups))


def _algorithm(node) -> str:
    return conv_algorithm(node, Buffer("out", node.dtype.name, node.shape))


@pytest.fixture
def zen5(monkeypatch):
    """The rule's cache sizes of the machine its thresholds were measured on (1 MiB L2, 32 MiB L3)."""
    monkeypatch.setattr(conv_module, "cpu_target", lambda: ZEN5)


AVX2 = CpuTarget(vector_bytes=32, vector_registers=16, l1d=32 << 10, l2=1 << 20, l3=32 << 20)
ZEN4 = CpuTarget(vector_bytes=64, vector_registers=32, l1d=32 << 10, l2=1 << 20, l3=32 << 20, bf16_dot=True,
                 full_rate_bytes=32)


@pytest.mark.parametrize("target,channels,size,batch,expected", [
    # Zen 5, AVX-512 (benchmarks/conv_algorithms.py): Winograd wins on layers 1-2, on layer 3 at batch 8 only
    (ZEN5, 64, 56, 1, "winograd4"), (ZEN5, 64, 56, 8, "winograd4"),
    (ZEN5, 128, 28, 1, "winograd4"), (ZEN5, 128, 28, 8, "winograd4"),
    (ZEN5, 256, 14, 1, "gemm_rows"), (ZEN5, 256, 14, 8, "winograd2"),
    (ZEN5, 512, 7, 1, "gemm_rows"), (ZEN5, 512, 7, 8, "gemm_rows"),
    # Zen 4, AVX2: with 16 vector registers F(4x4)'s 6x6 transform tiles spill, so F(2x2) wherever
    # Winograd applies; with 8-lane vectors the 256x14x14 layer's 4 MiB U pays already at batch 1
    (AVX2, 64, 56, 1, "winograd2"), (AVX2, 64, 56, 8, "winograd2"),
    (AVX2, 128, 28, 1, "winograd2"), (AVX2, 128, 28, 8, "winograd2"),
    (AVX2, 256, 14, 1, "winograd2"), (AVX2, 256, 14, 8, "winograd2"),
    (AVX2, 512, 7, 1, "gemm_rows"), (AVX2, 512, 7, 8, "gemm_rows"),
    # Zen 4, AVX-512 run in 256-bit halves: the direct convolution multiply-adds at the AVX2 rate, so
    # the 256x14x14 layer's U pays at batch 1 as with 32-byte vectors (F(4x4) where the output is large)
    (ZEN4, 64, 56, 1, "winograd4"), (ZEN4, 128, 28, 1, "winograd4"),
    (ZEN4, 256, 14, 1, "winograd2"), (ZEN4, 512, 7, 1, "gemm_rows"),
])
def test_rule_on_resnet18_3x3_layers(monkeypatch, target, channels, size, batch, expected):
    """The rule's choice on ResNet-18's 3x3 layers, as measured on each target."""
    monkeypatch.setattr(conv_module, "cpu_target", lambda: target)
    node = _conv_node((batch, channels, size, size), (channels, channels, 3, 3))
    assert _algorithm(node) == expected


def test_a_direct_convolution_on_bf16_pairs_is_weighed_at_the_whole_vector_width(monkeypatch):
    """With bf16 operands the blocked kernel multiplies pairs (vdpbf16ps, twice an FMA's work): on the Zen 4
    target the 256x14x14 layer keeps it, where its float32 form goes to Winograd F(2x2)."""
    monkeypatch.setattr(conv_module, "cpu_target", lambda: ZEN4)
    rng = np.random.default_rng(3)
    weights = rng.standard_normal((256, 256, 3, 3)).astype(np.float32)
    rounded = (weights.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    x = input_node("x", 0, TensorType((1, 256, 14, 14), dt.float32))
    x_bf16 = make_node("cast", [make_node("cast", [x], dict(dtype=dt.bfloat16))], dict(dtype=dt.float32))
    attrs = dict(stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    bf16_conv = make_node("conv2d", [x_bf16, constant_node(rounded, dt.float32)], attrs)
    float_conv = make_node("conv2d", [x, constant_node(weights, dt.float32)], attrs)
    assert conv_module.bf16_operands(bf16_conv) and not conv_module.bf16_operands(float_conv)
    assert winograd_choice(bf16_conv) is None
    assert winograd_choice(float_conv) == "winograd2"


@pytest.mark.parametrize("kwargs,w_shape", [
    (dict(stride=(2, 2)), (64, 64, 3, 3)),
    (dict(dilation=(2, 2), padding=(2, 2, 2, 2)), (64, 64, 3, 3)),
    (dict(groups=2), (64, 32, 3, 3)),
    (dict(groups=64), (64, 1, 3, 3)),
    (dict(padding=(0, 0, 0, 0)), (64, 64, 1, 1)),
    (dict(padding=(2, 2, 2, 2)), (64, 64, 5, 5)),
    (dict(padding=(0, 0, 0, 0), stride=(2, 2)), (64, 64, 1, 1)),
])
def test_rule_never_picks_winograd_off_3x3_stride_1(zen5, kwargs, w_shape):
    node = _conv_node((8, 64, 56, 56), w_shape, **kwargs)
    assert winograd_choice(node) is None
    assert not _algorithm(node).startswith("winograd")
    applicable = applicable_conv_algorithms(node, Buffer("out", "float32", node.shape))
    assert not any(a.startswith("winograd") for a in applicable)


def test_rule_needs_channels_pixels_and_float32(zen5):
    assert winograd_choice(_conv_node((1, 8, 56, 56), (64, 8, 3, 3))) is None  # few input channels
    assert winograd_choice(_conv_node((1, 64, 7, 7), (64, 64, 3, 3))) is None  # 49 pixels
    assert winograd_choice(_conv_node((8, 64, 7, 7), (64, 64, 3, 3))) == "winograd2"  # 392 pixels, small U
    assert winograd_choice(_conv_node((1, 64, 56, 56), (64, 64, 3, 3), dtype=dt.float64)) is None


# ---- weights transformed at compile time (passes/winograd_weights.py)

@pytest.mark.parametrize("algorithm", ["winograd4", "winograd2"])
@pytest.mark.parametrize("case", SIZES[1:], ids=lambda c: "n{}c{}k{}_{}x{}_p{}".format(*c))
def test_constant_weights_are_transformed_at_compile_time(algorithm, case):
    n, c, k, h, w, pad = case
    wt, bias = tk.tensor(rand(k, c, 3, 3)), tk.tensor(rand(k))
    f = check_winograd(algorithm, lambda x: F.conv2d(x, wt, bias, padding=pad).relu(), rand(n, c, h, w))
    x = rand(n, c, h, w)
    fired = {name for s in f.report(x).passes if s.name == "winograd_weights" for name in s.fired}
    assert fired == {f"conv2d -> conv2d_winograd (F({algorithm[-1]}x{algorithm[-1]}, 3x3))"}
    assert not any("wino_taps" in kernel.loop_ir for kernel in f.report(x).kernels)  # no weight transform


def test_transformed_weights_in_debug_mode_read_in_bounds():
    wt = tk.tensor(rand(6, 5, 3, 3))
    for algorithm in ("winograd4", "winograd2"):
        with forced_conv_algorithm(algorithm):
            f = check_compiled(lambda x: F.conv2d(x, wt, padding=1), rand(2, 5, 7, 6), debug=True,
                               factor=WINOGRAD_FACTOR)
        assert uses_winograd(f, rand(2, 5, 7, 6))


def test_weight_inputs_keep_the_in_kernel_transform():
    """Weights that are inputs (training) cannot be transformed ahead: the kernel does it."""
    x, wt = rand(1, 16, 20, 20), rand(16, 16, 3, 3)
    f = check_winograd("winograd4", lambda x, wt: F.conv2d(x, wt, padding=1), x, wt)
    assert any("wino_taps" in kernel.loop_ir for kernel in f.report(x, wt).kernels)


@pytest.mark.parametrize("m", [2, 4])
def test_conv2d_winograd_op_is_the_convolution_of_its_weights(m):
    from tensorkiln.ir.ops import get_op
    from tensorkiln.ir.ops.winograd_math import (transform_from_panels, transform_weights, weight_panels,
                                              weights_from_transform)
    x, wt = rand(2, 3, 9, 7), rand(5, 3, 3, 3)
    u = transform_weights(wt, m)
    assert u.shape == ((m + 2) ** 2, 3, 5)
    np.testing.assert_allclose(weights_from_transform(u, m), wt, atol=1e-5)
    panels = weight_panels(u, 4)
    assert panels.shape == ((m + 2) ** 2, 2, 3, 4)
    assert panels[3, 1, 2, 0] == u[3, 2, 4] and not panels[:, 1, :, 1:].any()  # zeros past K
    np.testing.assert_array_equal(transform_from_panels(panels, 5), u)
    pads = (1, 0, 2, 1)
    got = get_op("conv2d_winograd").reference([x, panels], {"m": m, "padding": pads, "out_channels": 5}, None)
    want = get_op("conv2d").reference([x, wt], {"groups": 1, "stride": (1, 1), "padding": pads,
                                                "dilation": (1, 1)}, None)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_conv2d_winograd_refuses_mismatched_weights():
    x = input_node("x", 0, TensorType((1, 4, 8, 8), dt.float32))
    u = input_node("u", 1, TensorType((36, 1, 3, 8), dt.float32))  # 3 input channels, x has 4
    with pytest.raises(tk.ShapeError, match="conv2d_winograd"):
        make_node("conv2d_winograd", [x, u], {"m": 4, "padding": (1, 1, 1, 1), "out_channels": 8})
    with pytest.raises(tk.ShapeError, match="tile size"):
        make_node("conv2d_winograd", [x, u], {"m": 3, "padding": (1, 1, 1, 1), "out_channels": 8})
    u = input_node("u", 1, TensorType((36, 2, 4, 8), dt.float32))
    with pytest.raises(tk.ShapeError, match="K = 8"):  # two panels of 8 hold 9-16 output channels
        make_node("conv2d_winograd", [x, u], {"m": 4, "padding": (1, 1, 1, 1), "out_channels": 8})


@pytest.mark.parametrize("m", [2, 4])
def test_conv2d_winograd_gradients_and_float64(m):
    from tensorkiln.ir.ops.winograd_math import transform_weights, weight_panels
    from tensorkiln.frontend.autodiff.gradcheck import gradcheck
    x = RNG.standard_normal((2, 3, 6, 5))
    # panels of 3 rows for 4 output channels: a register tile of any height, zeros past K
    u = weight_panels(transform_weights(RNG.standard_normal((4, 3, 3, 3)), m), 3)
    conv = lambda a, b: apply("conv2d_winograd", [a, b], m=m, padding=(1, 0, 1, 2), out_channels=4)  # noqa: E731
    assert gradcheck(conv, x, u)
    check_compiled(conv, x, u)  # float64 through the Winograd template
