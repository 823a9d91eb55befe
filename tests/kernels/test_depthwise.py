"""The depthwise convolution template (templates/depthwise.py) against the reference interpreter.

Planes of odd sizes, strides, dilations, asymmetric padding, kernels from 1x1 to 7x7,
fused epilogues and the debug build (bounds checks on every load of the padded plane).
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F

from .compiled import check_compiled

RNG = np.random.default_rng(11)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


CASES = [  # (n, c, h, w, k, stride, padding, dilation)
    (1, 2, 1, 1, 1, 1, 0, 1),
    (1, 3, 1, 7, 3, 1, 1, 1),
    (2, 5, 7, 13, 3, 1, 1, 1),
    (1, 4, 30, 31, 3, 2, 1, 1),
    (1, 6, 13, 5, 5, 2, 2, 1),
    (3, 2, 17, 17, 3, 1, 2, 2),
    (1, 3, 12, 9, 7, 3, 3, 1),
    (1, 8, 8, 8, 3, 1, 0, 1),
    (1, 2, 9, 9, 3, 2, 0, 1),   # stride leaves the last row and column unread
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "n{}c{}h{}w{}k{}s{}p{}d{}".format(*c))
def test_depthwise_matches_reference(case):
    n, c, h, w, k, stride, pad, dil = case
    x, wt, bias = rand(n, c, h, w), rand(c, 1, k, k), rand(c)
    fn = lambda x, wt, bias: F.conv2d(x, wt, bias, stride=stride, padding=pad, dilation=dil, groups=c).relu()  # noqa: E731
    f = check_compiled(fn, x, wt, bias, factor=10)
    assert any("dw_pad" in kern.loop_ir for kern in f.report(x, wt, bias).kernels)


def test_depthwise_asymmetric_padding_and_residual():
    x, wt = rand(2, 4, 11, 10), rand(4, 1, 3, 3)
    res = rand(2, 4, 10, 10)
    fn = lambda x, wt, res: F.conv2d(F.pad(x, (2, 0, 1, 0)), wt, groups=4) + res  # noqa: E731
    check_compiled(fn, x, wt, res, factor=10)


def test_depthwise_fused_input_producer_and_debug_bounds():
    """The input's producer (here x * 2 + 1) is inlined into the plane copy; the debug build checks every index."""
    x, wt = rand(1, 6, 9, 14), rand(6, 1, 3, 3)
    check_compiled(lambda x, wt: F.conv2d(x * 2.0 + 1.0, wt, stride=2, padding=1, groups=6), x, wt,
                   factor=10, debug=True)


def test_depthwise_float64():
    x, wt = rand(1, 3, 10, 10, dtype=np.float64), rand(3, 1, 3, 3, dtype=np.float64)
    check_compiled(lambda x, wt: F.conv2d(x, wt, padding=1, groups=3), x, wt, factor=10)


def test_depthwise_constant_weights_under_eval():
    conv = tk.nn.Conv2d(8, 8, 3, padding=1, groups=8)
    conv.eval()
    x = rand(1, 8, 15, 15)
    with tk.no_grad():
        got = tk.jit(conv)(x).numpy()
        want = conv(tk.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# MobileNetV2's depthwise layers and odd neighbours: channels 1-96, planes 1x1 to 112x112,
# strides 1 and 2 (the copy runs one column phase at a time, zeroing only the border).
MOBILENET_LIKE = [  # (c, h, w, stride)
    (1, 1, 1, 1), (3, 5, 5, 2), (17, 7, 7, 1), (17, 13, 13, 2), (32, 30, 30, 2),
    (3, 1, 7, 2), (96, 13, 5, 1), (96, 7, 13, 2), (32, 112, 112, 1), (3, 112, 112, 2),
]


@pytest.mark.parametrize("case", MOBILENET_LIKE, ids=lambda c: "c{}h{}w{}s{}".format(*c))
@pytest.mark.parametrize("epilogue", ["relu6", "residual"])
def test_depthwise_mobilenet_shapes(case, epilogue):
    c, h, w, stride = case
    x, wt, bias = rand(1, c, h, w), rand(c, 1, 3, 3), rand(c)
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    res = rand(1, c, oh, ow)

    def fn(x, wt, bias, res):
        y = F.conv2d(x, wt, bias, stride=stride, padding=1, groups=c)
        return y.clamp(0.0, 6.0) if epilogue == "relu6" else y + res
    check_compiled(fn, x, wt, bias, res, factor=10)


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_depthwise_padding_wider_than_the_plane(stride):
    """Padding of 2 on a 1- and 2-column plane: whole phases are border, zeroed row by row."""
    for w in (1, 2):
        x, wt = rand(1, 3, 4, w), rand(3, 1, 5, 5)
        check_compiled(lambda x, wt: F.conv2d(x, wt, stride=stride, padding=2, groups=3), x, wt,
                       factor=10, debug=True)
