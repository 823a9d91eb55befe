"""The direct convolution for few input channels ("shallow", kernels/templates/conv_shallow.py).

Compiled against the numpy reference over shapes whose widths are not whole
vectors or tiles, channel counts that leave a narrower channel tile, strides
1-3, uneven paddings, dilation, groups and fused epilogues; the rule that
picks it, and the layout pass leaving a stem that writes NCHW to it.
"""
from __future__ import annotations


import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.loops.buffer import Buffer
from tensorkiln.kernels.templates.conv import SHALLOW_MAX_CHANNELS, conv_algorithm, forced_conv_algorithm
from tensorkiln.kernels.templates.conv_shallow import shallow_tile
from tensorkiln.kernels.target import cpu_target
from tensorkiln.ir.ops.contraction import _conv2d_reference
from tensorkiln.frontend.tensor import apply

from .disassembly import hottest_block, needs_vector_disassembly

RNG = np.random.default_rng(0)
LANES = cpu_target().vector_bytes // 4

CASES = [  # (n, c, h, w, o, kernel, stride, pad, dilation, groups)
    (1, 3, 37, 45, 20, 7, 2, 3, 1, 1),           # the ResNet stem, small: a partial vector, a channel tail
    (2, 3, 33, 33, 32, 3, 2, 1, 1, 1),           # the MobileNetV2 stem, small; batch 2
    (1, 1, 19, 70, 5, 3, 1, 1, 1, 1),            # one channel, stride 1, several full vectors
    (1, 4, 11, 17, 9, 5, 3, (2, 0, 1, 3), 1, 1),  # stride 3, uneven padding
    (1, 6, 15, 21, 12, 3, 2, 2, 2, 2),           # dilated, two groups of 3 channels
    (2, 2, 9, 9, 7, 1, 2, 0, 1, 1),              # strided 1x1
    (1, 3, 8, 40, 16, 3, (1, 2), 1, 1, 1),       # stride (1, 2)
    (1, 3, 6, 6, 64, 3, 1, 0, 1, 1),             # one 4-pixel row per task
]


def reference(x, w, stride, padding, dilation, groups):
    attrs = {"groups": groups, "stride": stride, "padding": padding, "dilation": dilation}
    return _conv2d_reference([x.astype(np.float64), w.astype(np.float64)], attrs, None)


def pair(v):
    return v if isinstance(v, tuple) else (v, v)


def quad(v):
    return v if isinstance(v, tuple) else (v,) * 4


def uses_shallow(f, *args) -> bool:
    return any("sh_plane" in k.loop_ir for k in f.report(*args).kernels)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)).replace(" ", ""))
def test_shallow_matches_reference(case):
    n, c, h, w, o, k, stride, pad, dilation, groups = case
    stride, dilation, padding = pair(stride), pair(dilation), quad(pad)
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    wt = RNG.standard_normal((o, c // groups, k, k)).astype(np.float32)
    bias = RNG.standard_normal(o).astype(np.float32)
    conv = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    want = reference(x, wt, stride, padding, dilation, groups)
    res = RNG.standard_normal(want.shape).astype(np.float32)

    def relu6(x, wt, bias):
        return (apply("conv2d", [x, wt], **conv) + bias.reshape(1, -1, 1, 1)).clamp(0, 6)

    def residual(x, wt, res):
        return (apply("conv2d", [x, wt], **conv) + res).relu()

    tol = dict(rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    with forced_conv_algorithm("shallow"):
        f = tk.jit(relu6)
        got = f(x, wt, bias).numpy()
        g = tk.jit(residual)
        got_res = g(x, wt, res).numpy()
    assert uses_shallow(f, x, wt, bias) and uses_shallow(g, x, wt, res)
    np.testing.assert_allclose(got, np.clip(want + bias.reshape(1, -1, 1, 1), 0, 6), **tol)
    np.testing.assert_allclose(got_res, np.maximum(want + res, 0), **tol)


def test_float64_and_every_access_in_bounds():
    """float64 (half the lanes per vector) in a debug build, which checks every load and store."""
    x = RNG.standard_normal((1, 3, 13, 29))
    wt = RNG.standard_normal((10, 3, 3, 3))
    f = tk.jit(lambda x, wt: F.conv2d(x, wt, stride=2, padding=(1, 2)), debug=True)
    with forced_conv_algorithm("shallow"):
        got = f(x, wt).numpy()
    assert uses_shallow(f, x, wt)
    np.testing.assert_allclose(got, reference(x, wt, (2, 2), (1, 1, 2, 2), (1, 1), 1), rtol=1e-9, atol=1e-9)


def test_rule_picks_shallow_for_few_input_channels():
    def node(c, o=32, k=3, groups=1, stride=2, padding=1):
        f = tk.jit(lambda x, w: F.conv2d(x, w, stride=stride, padding=padding, groups=groups))
        x, w = np.zeros((1, c, 64, 64), np.float32), np.zeros((o, c // groups, k, k), np.float32)
        conv = next(n for n in f.graph(x, w).nodes if n.op == "conv2d")
        return conv_algorithm(conv, Buffer("out", "float32", conv.shape))

    assert node(3) == "shallow" and node(3, k=7) == "shallow" and node(SHALLOW_MAX_CHANNELS - 1) == "shallow"
    assert node(3, k=1) == "shallow"  # strided, padded 1x1
    assert node(3, k=1, stride=1, padding=0) == "gemm"  # a plain GEMM
    assert node(SHALLOW_MAX_CHANNELS) != "shallow"
    assert node(12, groups=4) == "shallow"  # 3 input channels per group
    assert node(3, o=2) == "direct"  # too few output channels for any register tile


def test_a_stem_writing_nchw_stays_off_the_blocked_layout():
    """A stem alone (its reader is a pooling window) runs the shallow kernel in NCHW; a stem whose
    output feeds a blocked chain keeps its output blocked."""
    w1 = tk.tensor((RNG.standard_normal((32, 3, 7, 7)) * 0.1).astype(np.float32))
    w2 = tk.tensor((RNG.standard_normal((64, 32, 3, 3)) * 0.1).astype(np.float32))
    x = RNG.standard_normal((1, 3, 64, 64)).astype(np.float32)

    def alone(x):
        return F.max_pool2d(F.conv2d(x, w1, stride=2, padding=3).relu(), 3, 2, 1)

    def chained(x):
        return F.conv2d(F.conv2d(x, w1, stride=2, padding=3).relu(), w2, stride=2, padding=1)

    f, g = tk.jit(alone), tk.jit(chained)
    assert [n.op for n in f.optimized_graph(x).nodes if n.op.startswith("conv")] == ["conv2d"]
    assert uses_shallow(f, x)
    stem = next(n for n in g.optimized_graph(x).nodes if n.op.startswith("conv"))
    assert stem.op == "conv2d_nchwc" and stem.attrs["out_layout"] == "nchwc"
    for fn, compiled in ((alone, f), (chained, g)):
        want = fn(tk.tensor(x)).numpy()
        np.testing.assert_allclose(compiled(x).numpy(), want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_tile_fits_the_registers():
    registers = cpu_target().vector_registers
    for channels in (1, 3, 5, 16, 32, 64):
        for width in (1, 7, 16, 28, 56, 112, 150):
            tile = shallow_tile(channels, width, LANES, registers, tasks_per_tile_row=width)
            assert 1 <= tile.channels <= channels and tile.vectors >= 1
            assert tile.channels * tile.vectors + tile.vectors + 1 <= registers


@needs_vector_disassembly
def test_inner_loop_is_register_blocked_fma():
    """Accumulators stay in vector registers: the hot loop holds G*T FMAs and no stack traffic."""
    x = RNG.standard_normal((1, 3, 64, 8 * LANES)).astype(np.float32)
    wt = RNG.standard_normal((32, 3, 3, 3)).astype(np.float32)
    f = tk.jit(lambda x, wt: F.conv2d(x, wt, stride=2, padding=1))
    f(x, wt)
    assert uses_shallow(f, x, wt)
    hot = hottest_block(f.report(x, wt).library_path or "", "vfmadd")
    tile = shallow_tile(32, 4 * LANES, LANES, cpu_target().vector_registers, tasks_per_tile_row=32)
    fmas = [line for line in hot if "vfmadd" in line]
    assert len(fmas) >= tile.channels * tile.vectors
    assert all("zmm" in line or "ymm" in line for line in fmas)
    # a vector register to or from the stack is a spilled accumulator (a loop bound reloaded into a general
    # register, as GCC does where the integer registers run short, is not)
    assert not any("(%rsp)" in line and "mm" in line for line in hot), "accumulators spilled to the stack"
