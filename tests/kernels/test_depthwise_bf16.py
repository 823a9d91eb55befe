"""Depthwise convolutions in bf16 between 1x1 layers (MobileNetV2's inverted residual block): the expanding
layer stores its rounded output as bfloat16, the depthwise kernel widens it as it copies its rows
(conv_nchwc.py) and stores its own rounded output as bfloat16 for the projection.

Checked against a float64 reference that rounds to bf16 where the precision rule does, and against the
reference interpreter's bf16 graph, over random shapes: channel counts of one or several blocks of 8 and
16, odd planes, a plane of one row, stride 2, padding 1 and 2 (a 5x5 window)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.kernels import bf16_readers
from tensorkiln.kernels.target import cpu_target
from tensorkiln.passes import conv_bf16_weights

from .dot_paths import bf16, bf16_path as path  # noqa: F401  (path: the fixture)

RNG = np.random.default_rng(23)

# (input channels, expanded channels, height, width, window, stride)
BLOCKS = [(8, 48, 9, 7, 3, 1), (16, 32, 1, 11, 3, 2), (24, 144, 13, 13, 3, 2), (8, 16, 6, 10, 5, 1)]


def weights(c: int, e: int, window: int):
    scale = lambda fan_in: np.sqrt(1.5 / fan_in)  # noqa: E731  (activations keep their size)
    w1 = RNG.standard_normal((e, c, 1, 1)) * scale(c)
    wd = RNG.standard_normal((e, 1, window, window)) * scale(window * window)
    w2 = RNG.standard_normal((c, e, 1, 1)) * scale(e)
    bias = RNG.standard_normal(e) * 0.1
    return [a.astype(np.float32) for a in (w1, wd, w2, bias)]


def block_function(w1, wd, w2, bias, stride: int):
    t1, td, t2, tb = (tk.tensor(a) for a in (w1, wd, w2, bias))
    pad = wd.shape[-1] // 2

    def block(x):
        y = F.conv2d(x, t1).clip(0.0, 6.0)
        y = F.conv2d(y, td, tb, stride=stride, padding=pad, groups=wd.shape[0]).clip(0.0, 6.0)
        return F.conv2d(y, t2)

    return block


def depthwise64(x: np.ndarray, w: np.ndarray, bias: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """A depthwise convolution in float64: x[N, C, H, W], w[C, 1, K, K]."""
    n, c, h, width = x.shape
    k = w.shape[-1]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (width + 2 * pad - k) // stride + 1
    out = np.zeros((n, c, oh, ow)) + bias[None, :, None, None]
    for r in range(k):
        for s in range(k):
            window = xp[:, :, r:r + stride * (oh - 1) + 1:stride, s:s + stride * (ow - 1) + 1:stride]
            out += window * w[None, :, 0, r, s, None, None]
    return out


def reference(x, w1, wd, w2, bias, stride: int) -> np.ndarray:
    """The block in float64, its contractions' operands rounded to bf16 as the precision rule says."""
    y = np.einsum("nchw,ec->nehw", bf16(x), bf16(w1[:, :, 0, 0])).clip(0.0, 6.0)
    y = depthwise64(bf16(y), bf16(wd), bias.astype(np.float64), stride, wd.shape[-1] // 2).clip(0.0, 6.0)
    return np.einsum("nehw,ce->nchw", bf16(y), bf16(w2[:, :, 0, 0]))


@pytest.mark.parametrize("c,e,h,w,window,stride", BLOCKS)
def test_depthwise_block_matches_float64_and_the_bf16_graph(path, c, e, h, w, window, stride):
    w1, wd, w2, bias = weights(c, e, window)
    block = block_function(w1, wd, w2, bias, stride)
    x = RNG.standard_normal((1, c, h, w)).astype(np.float32)
    f = tk.jit(block, precision="bf16")
    got = f(x).numpy()
    want = reference(x, w1, wd, w2, bias, stride)
    # float32 sums can tip a rounding to bf16 of an intermediate: 2^-8 of it, through one more layer
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 4e-3
    oracle = tk.jit(block, precision="bf16", backend="interpreter")(x).numpy()
    assert np.linalg.norm(got - oracle) / np.linalg.norm(oracle) < 2e-3
    fp32 = tk.jit(block)(x).numpy()
    assert np.linalg.norm(got - fp32) / np.linalg.norm(fp32) < 2e-2


def test_the_depthwise_layer_reads_and_writes_bf16_storage(monkeypatch, tmp_path):
    """Between 1x1 layers on bf16 pairs (on a target without vdpbf16ps, asked for by
    PAIRS_WITHOUT_BF16_DOT) the depthwise layer reads and writes bfloat16 (its input as bf16: the
    choice for AVX512-BF16, asked for by BF16_DEPTHWISE_INPUT)."""
    monkeypatch.setattr(conv_bf16_weights, "PAIRS_WITHOUT_BF16_DOT", True)
    monkeypatch.setattr(bf16_readers, "BF16_DEPTHWISE_INPUT", True)
    monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path))  # compiled anew: the switch is no cache key
    w1, wd, w2, bias = weights(16, 96, 3)
    block = block_function(w1, wd, w2, bias, 1)
    x = RNG.standard_normal((1, 16, 14, 14)).astype(np.float32)
    kernels = tk.jit(block, precision="bf16").report(x).kernels
    depthwise = [k for k in kernels if any("groups=96" in n for n in k.nodes)]
    assert len(depthwise) == 1
    signature = depthwise[0].loop_ir.splitlines()[0]  # kernel name(output, inputs...)
    assert signature.count("bfloat16[") == 2, signature  # its output and its input
    assert all(k.kind == "contraction" for k in kernels)  # no rounding kernel in between


def test_without_bf16_dot_the_block_stays_in_float32_storage(monkeypatch, tmp_path):
    """On a target without vdpbf16ps (the 1x1 layers on the float32 blocked kernel) the depthwise
    layer's input and output are float32 holding bf16-rounded values, each rounded in the epilogue
    of the kernel that computes it, with no rounding kernel between the layers; the numbers are the
    bf16 reference's."""
    monkeypatch.setenv("TENSORKILN_NO_BF16_DOT", "1")
    monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path))
    cpu_target.cache_clear()
    try:
        assert not bf16_readers.bf16_depthwise_input()
        w1, wd, w2, bias = weights(16, 96, 3)
        block = block_function(w1, wd, w2, bias, 2)
        x = RNG.standard_normal((1, 16, 15, 13)).astype(np.float32)
        f = tk.jit(block, precision="bf16")
        got = f(x).numpy()
        kernels = f.report(x).kernels
    finally:
        monkeypatch.undo()
        cpu_target.cache_clear()
    depthwise = [k for k in kernels if any("groups=96" in n for n in k.nodes)]
    assert len(depthwise) == 1 and "bfloat16[" not in depthwise[0].loop_ir.splitlines()[0]
    assert "round_bf16" in depthwise[0].loop_ir  # its output rounded as it is stored
    assert all(k.kind == "contraction" for k in kernels)
    oracle = tk.jit(block, precision="bf16", backend="interpreter")(x).numpy()
    assert np.linalg.norm(got - oracle) / np.linalg.norm(oracle) < 2e-3


@pytest.mark.parametrize("stride", [1, 2])
def test_without_bf16_dot_the_depthwise_layer_reads_its_input_in_place(monkeypatch, tmp_path, stride):
    """The expanding layer stores its rounded output as float32 (a target without vdpbf16ps): the
    depthwise layer reads that buffer in place, as the float32 program's does, copying no rows; its
    loop nest is the float32 one but for the rounding of its output."""
    monkeypatch.setenv("TENSORKILN_NO_BF16_DOT", "1")
    monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path))
    cpu_target.cache_clear()
    try:
        w1, wd, w2, bias = weights(16, 96, 3)
        block = block_function(w1, wd, w2, bias, stride)
        x = RNG.standard_normal((1, 16, 17, 11)).astype(np.float32)
        nests = {}
        for precision in ("fp32", "bf16"):
            kernels = tk.jit(block, precision=precision).report(x).kernels
            depthwise = [k for k in kernels if any("groups=96" in n for n in k.nodes)]
            assert len(depthwise) == 1
            nests[precision] = [line for line in depthwise[0].loop_ir.splitlines()[1:]  # past the signature
                                if not line.lstrip().startswith("#")]  # and the graph nodes
    finally:
        monkeypatch.undo()
        cpu_target.cache_clear()
    assert not any("_rows" in line for line in nests["bf16"])
    unrounded = [line.replace("round_bf16(", "(") for line in nests["bf16"]]
    assert len(unrounded) == len(nests["fp32"])
    assert sum(a != b for a, b in zip(unrounded, nests["fp32"])) <= sum("round_bf16" in l for l in nests["bf16"])
