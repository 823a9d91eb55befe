"""DeformConv, compiled, against onnxruntime: groups, offset groups, masks, strides, pads, dilations."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import tensorkiln as tk  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_build import model  # noqa: E402
from onnx_ort import check_against_onnxruntime  # noqa: E402

rng = np.random.default_rng(41)
F = TensorProto.FLOAT


def _out(size, k, stride, pad_lo, pad_hi, dilation):
    return (size + pad_lo + pad_hi - (k - 1) * dilation - 1) // stride + 1


# (N, C, H, W, oC, kH, kW, group, offset_group, strides, pads, dilations, with bias and mask)
CASES = [(1, 2, 5, 6, 3, 3, 3, 1, 1, [1, 1], [1, 1, 1, 1], [1, 1], False),
         (2, 4, 7, 5, 4, 2, 3, 2, 2, [2, 1], [0, 1, 1, 0], [1, 2], True),
         (1, 3, 4, 4, 3, 1, 2, 3, 1, [1, 2], [0, 0, 0, 0], [1, 1], True)]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_deform_conv_matches_onnxruntime(case):
    n, c, h, w, oc, kh, kw, group, offset_group, strides, pads, dilations, extras = case
    oh, ow = _out(h, kh, strides[0], pads[0], pads[2], dilations[0]), _out(w, kw, strides[1], pads[1], pads[3],
                                                                             dilations[1])
    inputs = [("x", F, (n, c, h, w)), ("w", F, (oc, c // group, kh, kw)),
              ("offset", F, (n, offset_group * 2 * kh * kw, oh, ow))]
    if extras:
        inputs += [("b", F, (oc,)), ("mask", F, (n, offset_group * kh * kw, oh, ow))]
    node = helper.make_node("DeformConv", [name for name, _, _ in inputs], ["y"], group=group,
                            offset_group=offset_group, strides=strides, pads=pads, dilations=dilations)
    m = model([node], inputs, [("y", F, None)], opset=19)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, _, shape in inputs}
    feeds["offset"] *= 2.0  # taps move by up to a few pixels, some outside the input
    check_against_onnxruntime(m, feeds, rtol=1e-4, atol=1e-5)


def test_deform_conv_with_offsets_of_the_wrong_shape_names_the_node():
    node = helper.make_node("DeformConv", ["x", "w", "offset"], ["y"], name="dcn")
    m = model([node], [("x", F, (1, 1, 4, 4)), ("w", F, (1, 1, 3, 3)), ("offset", F, (1, 9, 2, 2))],
              [("y", F, None)], opset=19)
    with pytest.raises(tk.TensorKilnError, match=r"'dcn'.*offset must be \[1, 18, 2, 2\]"):
        tk.onnx.load(m)(np.zeros((1, 1, 4, 4), np.float32), np.zeros((1, 1, 3, 3), np.float32),
                        np.zeros((1, 9, 2, 2), np.float32))
