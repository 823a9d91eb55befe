"""Depthwise int8 convolutions that pad inside the op: each task copies its rows and channels into a padded
window (kernels/templates/depthwise_window.py). Exact against integer sums in numpy on every int8 path, with
asymmetric pads, zero points away from 0, strides, dilation, odd planes and windows too large for the stack."""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln import dtypes as dt
from tensorkiln.errors import ShapeError
from tensorkiln.ir.ops import Attrs, TensorType, infer_type
from tensorkiln.ir.ops.quantized_conv import _depthwise_u8s8_reference
from tensorkiln.kernels.target import INT8_DOT_KINDS
from tensorkiln.kernels.templates.depthwise_window import window_rows

from .dot_paths import int8_path, random_ints  # noqa: F401  (int8_path: the fixture)
from .test_conv_u8s8 import _run

# (C, H, W, kernel, stride, dilation, ONNX pads (top, left, bottom, right)): 3x3 and 5x5, strides 1 and 2,
# dilation 2, pads on one side only, channels no multiple of 8 or 16, more than a task's channel block,
# a plane of one pixel, and a wide plane whose windows go to the heap
LAYERS = [
    (19, 9, 8, 3, 1, 1, (1, 1, 1, 1)),
    (40, 7, 7, 3, 2, 1, (1, 1, 1, 1)),
    (24, 15, 17, 3, 2, 1, (0, 0, 1, 1)),
    (5, 6, 6, 5, 1, 2, (4, 3, 2, 1)),
    (33, 11, 13, 5, 1, 1, (2, 2, 2, 2)),
    (16, 1, 1, 3, 1, 1, (1, 1, 1, 1)),
    (144, 13, 14, 3, 1, 1, (1, 0, 1, 2)),
    (64, 9, 150, 3, 1, 1, (1, 1, 1, 1)),
]


def _sums(x: np.ndarray, zero: int, w: np.ndarray, stride: int, dilation: int, pads) -> np.ndarray:
    """The exact int64 sums of the depthwise conv2d(x - zero, w), NCHW, zeros past the border (after the
    shift): pads (top, left, bottom, right)."""
    top, left, bottom, right = pads
    xp = np.pad(x.astype(np.int64) - zero, ((0, 0), (0, 0), (top, bottom), (left, right)))
    _, c, h, wd = xp.shape
    k = w.shape[2]
    oh, ow = (h - dilation * (k - 1) - 1) // stride + 1, (wd - dilation * (k - 1) - 1) // stride + 1
    out = np.zeros((1, c, oh, ow), np.int64)
    for r in range(k):
        for s in range(k):
            taps = xp[:, :, r * dilation:r * dilation + (oh - 1) * stride + 1:stride,
                      s * dilation:s * dilation + (ow - 1) * stride + 1:stride]
            out += taps * w[:, 0, r, s].astype(np.int64).reshape(1, c, 1, 1)
    return out


def test_padded_depthwise_layers_are_exact_on_every_path(int8_path):
    rng = np.random.default_rng(30 + INT8_DOT_KINDS.index(int8_path))
    layers = []
    for c, h, w, k, stride, dilation, pads in LAYERS:
        layers.append(dict(x=random_ints(rng, np.uint8, (1, c, h, w)), w=random_ints(rng, np.int8, (c, 1, k, k)),
                           zero=int(rng.integers(100, 160)), x_scale=0.05,
                           w_scale=rng.uniform(0.001, 0.01, c).astype(np.float32), stride=stride, padding=0,
                           pads=list(pads), dilation=dilation, groups=c))
    got, ops, module, reference = _run(layers)
    assert ops.count("depthwise_u8s8") == len(layers) and "pad" not in ops, ops  # no padded copy is stored
    for index, (layer, out, ref) in enumerate(zip(layers, got, reference)):
        scale = (np.float32(layer["x_scale"]) * layer["w_scale"]).astype(np.float32).reshape(-1, 1, 1)
        want = _sums(layer["x"], layer["zero"], layer["w"], layer["stride"], layer["dilation"],
                     layer["pads"]).astype(np.float32) * scale
        np.testing.assert_array_equal(out, want, err_msg=f"layer {index} {LAYERS[index]}, {int8_path}")
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * max(np.abs(ref).max(), 1))


def test_the_op_pads_with_its_pad_value_in_the_reference():
    rng = np.random.default_rng(7)
    x, w = random_ints(rng, np.uint8, (1, 4, 5, 3)), random_ints(rng, np.int8, (3, 3, 3)).astype(np.int32)
    comp = np.arange(3, dtype=np.int32)
    attrs = Attrs(stride=(1, 1), dilation=(1, 1), padding=(1, 0, 2, 1), pad_value=131)
    assert infer_type("depthwise_u8s8", [TensorType(x.shape, dt.uint8), TensorType(w.shape, dt.int32),
                                         TensorType(comp.shape, dt.int32)], attrs).shape == (1, 3, 6, 3)
    padded = np.pad(x, ((0, 0), (1, 0), (2, 1), (0, 0)), constant_values=131)
    plain = _depthwise_u8s8_reference([padded, w, comp], Attrs(stride=(1, 1), dilation=(1, 1)), None)
    np.testing.assert_array_equal(_depthwise_u8s8_reference([x, w, comp], attrs, None), plain)


def test_bad_padding_is_refused_naming_the_op():
    types = [TensorType((1, 4, 4, 8), dt.uint8), TensorType((3, 3, 8), dt.int32), TensorType((8,), dt.int32)]
    with pytest.raises(ShapeError, match="depthwise_u8s8: padding"):
        infer_type("depthwise_u8s8", types, Attrs(stride=(1, 1), dilation=(1, 1), padding=(1, -1, 0, 0)))
    with pytest.raises(ShapeError, match="pad_value"):
        infer_type("depthwise_u8s8", types, Attrs(stride=(1, 1), dilation=(1, 1), padding=(1, 1, 1, 1),
                                                  pad_value=256))


def test_a_window_holds_the_rows_of_its_longest_run():
    # runs of 10 pixels (0-9, 10-19, 20-23) in rows of 4 span 3, 3 and 1 output rows; stride 2, 3 taps
    assert window_rows(10, 24, 4, 2, 1, 3) == (3 - 1) * 2 + 3
    assert window_rows(7, 24, 4, 2, 1, 3) == (3 - 1) * 2 + 3  # 14-20: rows 3-5
    assert window_rows(8, 16, 4, 1, 1, 3) == 4  # whole rows: 2 output rows + 2
    assert window_rows(5, 3, 3, 1, 2, 3) == 5  # a run longer than the image: 1 row + 2 x dilation 2
