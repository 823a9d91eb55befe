"""The bf16 blocked direct convolution (conv2d_nchwc_bf16, kernels/templates/conv_nchwc_bf16.py).

Each case runs with `vdpbf16ps` (where the CPU has AVX512-BF16) and with the loop IR that widens bf16
to float32 (TENSORKILN_NO_BF16_DOT=1). The op is compared with a float64 convolution of the same
bf16 values; whole precision="bf16" graphs with the reference interpreter running the same bf16 graph,
and with float32 within the bf16 tolerance. A target without AVX512-BF16 keeps the float32 blocked
kernel on the rounded operands (passes/conv_bf16_weights.py), so the graph tests on the widened path
ask for the pairs kernel (`PAIRS_WITHOUT_BF16_DOT`), and one test checks that default.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.frontend.tensor import apply
from tensorkiln.kernels import bf16_readers
from tensorkiln.passes import conv_bf16_weights
from tensorkiln.passes.conv_bf16_weights import conv_weight_pairs

from .test_conv_nchwc import block_input, block_weight, reference, unblock
from .dot_paths import HAS_BF16_DOT, bf16, bf16_path

RNG = np.random.default_rng(3)
BF16_TOLERANCE = 2e-2  # relative (Frobenius) error of a bf16 result against float32, docs/precision.md


@pytest.fixture
def path(bf16_path, monkeypatch):
    """bf16_path, with graphs sent to the pairs kernel on the widened path too."""
    monkeypatch.setattr(conv_bf16_weights, "PAIRS_WITHOUT_BF16_DOT", True)
    return bf16_path


def expected_precision(path: str) -> str:
    return "bf16 (vdpbf16ps)" if path == "vdpbf16ps" else "bf16 (widened to fp32)"


def pairs_constant(wb: np.ndarray) -> tk.Tensor:
    """A blocked float32 weight as the bfloat16 pairs constant the kernel reads."""
    return tk.tensor(tk.dtypes.f32_from_bf16_bits(conv_weight_pairs(wb))).to(tk.bfloat16)


CASES = [  # (n, c, h, w, k, kernel, stride, pad, dilation, cb, kb)
    (1, 2, 5, 5, 16, 3, 1, 1, 1, 2, 16),             # one channel pair per block
    (2, 24, 9, 13, 24, 3, 1, 1, 1, 8, 8),            # blocks of 8 lanes (a ymm tile), a tail tile
    (1, 32, 13, 13, 32, 1, 2, 0, 1, 16, 16),         # 1x1 strided: the copy keeps every other pixel
    (1, 16, 1, 1, 16, 1, 1, 0, 1, 16, 16),           # a 1x1 image
    (1, 16, 11, 7, 32, 3, 2, 2, 2, 16, 16),          # dilated and strided
    (1, 16, 9, 6, 8, 5, 1, (0, 3, 2, 1), 1, 16, 8),  # uneven padding
    (1, 6, 7, 7, 12, 3, 1, 1, 1, 6, 4),              # 4 lanes: no helper, the widening loop IR
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)).replace(" ", ""))
def test_conv2d_nchwc_bf16_matches_reference(path, case):
    n, c, h, w, k, kernel, stride, pad, dilation, cb, kb = case
    padding = pad if isinstance(pad, tuple) else (pad,) * 4
    x = bf16(RNG.standard_normal((n, c, h, w))).astype(np.float32)
    wt = bf16(RNG.standard_normal((k, c, kernel, kernel))).astype(np.float32)
    bias = RNG.standard_normal(k).astype(np.float32)
    pairs = pairs_constant(block_weight(wt, cb, kb))
    conv = dict(stride=(stride, stride), padding=padding, dilation=(dilation, dilation))
    kp = pairs.shape[0] * kb
    biasb = block_input(np.pad(bias, (0, kp - k)).reshape(1, kp, 1, 1), kb)
    xb = block_input(x, cb)
    x_plain = np.ascontiguousarray(xb.transpose(0, 1, 4, 2, 3).reshape(n, -1, h, w))

    def forms(xb, x_plain, biasb):
        blocked = (apply("conv2d_nchwc_bf16", [xb, pairs], out_layout="nchwc", **conv) + biasb).relu()
        to_plain = apply("conv2d_nchwc_bf16", [x_plain, pairs], out_layout="nchw", **conv)
        return blocked, to_plain

    f = tk.jit(forms)
    blocked, to_plain = (o.numpy() for o in f(xb, x_plain, biasb))
    report = f.report(xb, x_plain, biasb)
    assert report.backend == "c"
    native = path == "vdpbf16ps" and kb in (8, 16)
    assert {kernel.precision for kernel in report.kernels} == {expected_precision("vdpbf16ps" if native else "w")}
    want = reference(x, wt, (stride, stride), padding, (dilation, dilation))
    # float32 sums of exact products (bf16 x bf16): a few ulps of the sum of magnitudes
    scale = reference(np.abs(x), np.abs(wt), (stride, stride), padding, (dilation, dilation)).max()
    tol = dict(rtol=1e-5, atol=1e-6 * max(scale, 1.0))
    np.testing.assert_allclose(unblock(blocked, k), np.maximum(want + bias.reshape(1, k, 1, 1), 0), **tol)
    np.testing.assert_allclose(to_plain[:, :k], want, **tol)


def test_the_op_rejects_what_it_cannot_compute():
    pairs = tk.tensor(np.zeros((1, 1, 3, 3, 8, 16, 2), np.float32)).to(tk.bfloat16)
    with pytest.raises(tk.errors.ShapeError, match="groups=1"):
        apply("conv2d_nchwc_bf16", [tk.tensor(np.zeros((1, 1, 5, 5, 16), np.float32)), pairs], stride=(1, 1),
              padding=(1,) * 4, dilation=(1, 1), out_layout="nchwc", groups=16)
    with pytest.raises(tk.errors.ShapeError, match="input channels"):
        apply("conv2d_nchwc_bf16", [tk.tensor(np.zeros((1, 2, 5, 5, 8), np.float32)), pairs], stride=(1, 1),
              padding=(1,) * 4, dilation=(1, 1), out_layout="nchwc")
    with pytest.raises(tk.errors.DTypeError, match="bfloat16 weight pairs"):
        apply("conv2d_nchwc_bf16", [tk.tensor(np.zeros((1, 1, 5, 5, 16), np.float32)),
                                    tk.tensor(np.zeros((1, 1, 3, 3, 8, 16, 2), np.float32))],
              stride=(1, 1), padding=(1,) * 4, dilation=(1, 1), out_layout="nchwc")


def convolution_chain(channels: tuple[int, ...], size: tuple[int, int], strides: tuple[int, ...]):
    """A chain of 3x3 convolutions with bias, ReLU and a residual add on the last, random weights."""
    weights = [tk.tensor((RNG.standard_normal((k, c, 3, 3)) * np.sqrt(2.0 / (9 * c))).astype(np.float32))
               for c, k in zip(channels, channels[1:])]
    biases = [tk.tensor(RNG.standard_normal(w.shape[0]).astype(np.float32) * 0.1) for w in weights]

    def chain(x):
        for w, b, s in zip(weights, biases, strides):
            y = F.conv2d(x, w, b, stride=s, padding=1)
            x = (y + x).relu() if y.shape == x.shape else y.relu()
        return x

    x = RNG.standard_normal((1, channels[0]) + size).astype(np.float32)
    return chain, x


# (channels, image size, strides): odd channel counts (blocks of 8), stride-2 layers, an image of one row
CHAINS = [((16, 32, 32, 48), (9, 7), (1, 2, 1)),
          ((8, 24, 24, 40), (1, 11), (1, 1, 2))]


@pytest.mark.parametrize("channels,size,strides", CHAINS)
def test_a_bf16_chain_matches_the_bf16_reference_and_float32(path, channels, size, strides):
    chain, x = convolution_chain(channels, size, strides)
    f = tk.jit(chain, precision="bf16")
    got = f(x).numpy()
    kernels = f.report(x).kernels
    convs = [k for k in kernels if "conv2d_nchwc_bf16" in " ".join(map(str, k.nodes))]
    assert convs and all(k.precision == expected_precision(path) for k in convs)
    oracle = tk.jit(chain, precision="bf16", backend="interpreter")(x).numpy()
    fp32 = tk.jit(chain)(x).numpy()
    # the same bf16 graph: equal up to the order of float32 additions, which can tip a rounding to bf16
    np.testing.assert_allclose(got, oracle, rtol=2e-2, atol=2e-2 * np.abs(oracle).max())
    assert np.linalg.norm(got - oracle) / np.linalg.norm(oracle) < 2e-3
    assert np.linalg.norm(got - fp32) / np.linalg.norm(fp32) < BF16_TOLERANCE


def test_activations_between_bf16_convolutions_are_stored_as_bf16(monkeypatch):
    """A convolution's epilogue stores the rounded activation that only the next bf16 convolution
    reads as bfloat16 (half the bytes); a residual block's output, read by the add too, stays float32
    and the convolution rounds it as it copies: no rounding kernel in between."""
    weights = [tk.tensor((RNG.standard_normal((32, 32, 3, 3)) * 0.1).astype(np.float32)) for _ in range(3)]

    def block(x):
        y = F.conv2d(F.conv2d(x, weights[0], padding=1).relu(), weights[1], padding=1)
        x = (x + y).relu()  # read by the last convolution and its residual add
        return F.conv2d(x, weights[2], padding=1) + x

    monkeypatch.setattr(conv_bf16_weights, "PAIRS_WITHOUT_BF16_DOT", True)
    x = RNG.standard_normal((1, 32, 10, 12)).astype(np.float32)
    f = tk.jit(block, precision="bf16")
    got = f(x).numpy()
    kernels = f.report(x).kernels
    assert [k.precision for k in kernels if k.kind == "contraction"] == [expected_precision("vdpbf16ps"
                                                                                            if HAS_BF16_DOT else "")] * 3
    assert "bf16[" in str(kernels[0].nodes[-1]) and "f32[" in str(kernels[1].nodes[-1])
    assert all(k.kind == "contraction" for k in kernels)  # no rounding kernels
    oracle = tk.jit(block, precision="bf16", backend="interpreter")(x).numpy()
    assert np.linalg.norm(got - oracle) / np.linalg.norm(oracle) < 2e-3


def test_fp32_compiles_keep_the_float32_kernel():
    chain, x = convolution_chain((16, 32, 32), (8, 8), (1, 1))
    report = tk.jit(chain).report(x)
    assert not any("conv2d_nchwc_bf16" in " ".join(map(str, k.nodes)) for k in report.kernels)
    assert {k.precision for k in report.kernels} == {"fp32"}


@pytest.mark.skipif(not HAS_BF16_DOT, reason="this CPU has no AVX512-BF16")
def test_the_tile_runs_vdpbf16ps():
    from .disassembly import hottest_block
    chain, x = convolution_chain(*CHAINS[0])
    f = tk.jit(chain, precision="bf16")
    block = hottest_block(f.report(x).library_path, "vdpbf16ps")
    assert sum("vdpbf16ps" in line for line in block) >= 8


@pytest.mark.parametrize("channels,expand,stride,bf16_input", [(24, 6, 1, False), (40, 3, 2, True)])
def test_an_inverted_residual_block_keeps_bf16_activations(path, monkeypatch, channels, expand, stride, bf16_input):
    """MobileNetV2's block: the depthwise convolution stores its output as bf16 for the projection; its
    input is float32 (rounded values), or, with BF16_DEPTHWISE_INPUT, bf16 stored by the expanding
    1x1 convolution and read where it lies, each load widened to float32."""
    monkeypatch.setattr(bf16_readers, "BF16_DEPTHWISE_INPUT", bf16_input)
    wide = channels * expand
    w1 = tk.tensor((RNG.standard_normal((wide, channels, 1, 1)) * 0.2).astype(np.float32))
    wd = tk.tensor((RNG.standard_normal((wide, 1, 3, 3)) * 0.3).astype(np.float32))
    w2 = tk.tensor((RNG.standard_normal((channels, wide, 1, 1)) * 0.1).astype(np.float32))

    def block(x):
        y = F.conv2d(x, w1).clip(0.0, 6.0)
        y = F.conv2d(y, wd, stride=stride, padding=1, groups=wide).clip(0.0, 6.0)
        y = F.conv2d(y, w2)
        return y + x if stride == 1 else y

    x = RNG.standard_normal((1, channels, 15, 13)).astype(np.float32)
    f = tk.jit(block, precision="bf16")
    got = f(x).numpy()
    kernels = f.report(x).kernels
    depthwise = "bf16 (widened to fp32)" if bf16_input else "bf16 operands (fp32 kernel)"
    assert [k.precision for k in kernels] == [expected_precision(path), depthwise, expected_precision(path)]
    assert ("bf16[" in str(kernels[0].nodes[-1])) == bf16_input and "bf16[" in str(kernels[1].nodes[-1])
    oracle = tk.jit(block, precision="bf16", backend="interpreter")(x).numpy()
    fp32 = tk.jit(block)(x).numpy()
    assert np.linalg.norm(got - oracle) / np.linalg.norm(oracle) < 2e-3
    assert np.linalg.norm(got - fp32) / np.linalg.norm(fp32) < BF16_TOLERANCE




# (channels, expansion, stride, image size): residual blocks, a stride-2 block without one, odd sizes
BLOCKS = [(24, 6, 1, (15, 13)), (16, 3, 2, (9, 11)), (40, 6, 1, (7, 7)), (8, 6, 2, (1, 5))]


@pytest.mark.parametrize("channels,expand,stride,size", BLOCKS)
def test_without_bf16_dot_the_1x1_layers_keep_the_float32_blocked_kernel(no_bf16_dot, channels, expand, stride,
                                                                         size):
    """No vdpbf16ps: the 1x1 layers of an inverted residual block run the float32 blocked kernel on the
    rounded operands (faster than widening pairs), and the result is the bf16 graph's."""
    wide = channels * expand
    w1 = tk.tensor((RNG.standard_normal((wide, channels, 1, 1)) * 0.2).astype(np.float32))
    wd = tk.tensor((RNG.standard_normal((wide, 1, 3, 3)) * 0.3).astype(np.float32))
    w2 = tk.tensor((RNG.standard_normal((channels, wide, 1, 1)) * 0.1).astype(np.float32))
    b1 = tk.tensor(RNG.standard_normal(wide).astype(np.float32) * 0.1)

    def block(x):
        y = F.conv2d(x, w1, b1).clip(0.0, 6.0)
        y = F.conv2d(y, wd, stride=stride, padding=1, groups=wide).clip(0.0, 6.0)
        y = F.conv2d(y, w2)
        return y + x if stride == 1 else y

    x = RNG.standard_normal((1, channels) + size).astype(np.float32)
    f = tk.jit(block, precision="bf16")
    got = f(x).numpy()
    kernels = f.report(x).kernels
    assert not any("conv2d_nchwc_bf16" in " ".join(map(str, k.nodes)) for k in kernels)
    contractions = [k for k in kernels if k.kind == "contraction"]
    assert len(contractions) == 3 and contractions[2].precision == "bf16 operands (fp32 kernel)"
    oracle = tk.jit(block, precision="bf16", backend="interpreter")(x).numpy()
    fp32 = tk.jit(block)(x).numpy()
    np.testing.assert_allclose(got, oracle, rtol=2e-2, atol=2e-2 * np.abs(oracle).max())
    assert np.linalg.norm(got - oracle) / np.linalg.norm(oracle) < 2e-3
    assert np.linalg.norm(got - fp32) / np.linalg.norm(fp32) < BF16_TOLERANCE
