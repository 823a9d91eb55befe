"""3x3 int8 convolutions of stride 1 and 2 on Winograd F(2x2, 3x3) with exact 16-bit products
(conv2d_u8s8_winograd): the op's reference against the direct sums, the AVX2 helpers against both,
at the extremes of the integer ranges, with odd planes, channel blocks and threads."""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln import dtypes as dt
from tensorkiln.errors import DTypeError, ShapeError
from tensorkiln.ir.ops import Attrs, TensorType, infer_type
from tensorkiln.ir.ops.quantized_conv import _conv_u8s8_reference, pack_conv_u8s8
from tensorkiln.ir.ops.quantized_winograd import (VARIANTS, WINOGRAD_MAX_CHANNELS, _reference, pack_winograd_u8s8,
                                                  unpack_winograd_u8s8)
from tensorkiln.kernels.target import cpu_target
from tensorkiln.kernels.templates.conv import forced_conv_algorithm
from tensorkiln.kernels.templates.winograd_u8s8 import SCRATCH_BYTES, _scratch, task_split, winograd_u8s8_applies

from .dot_paths import INT8_PATHS, random_ints
from .test_conv_u8s8 import _layer, _run, _sums

HAS_AVX2 = cpu_target().int8_dot != "portable"
needs_avx2 = pytest.mark.skipif(not HAS_AVX2, reason="the Winograd helper needs AVX2")

# (N, C, H, W, O): odd and even planes (a last tile row or column past the image), a plane of 2 x 2
# outputs, channels past a panel of 16, several panels, two images
SHAPES = [(1, 16, 4, 4, 16), (2, 32, 7, 9, 20), (1, 48, 12, 11, 33), (1, 16, 3, 8, 100), (1, 64, 5, 6, 64),
          (1, 96, 9, 9, 130)]


def _direct(x: np.ndarray, filters: np.ndarray, comp: np.ndarray, stride: int) -> np.ndarray:
    attrs = Attrs(kernel=(3, 3), stride=(stride, stride), dilation=(1, 1), n=filters.shape[0])
    return _conv_u8s8_reference([x, pack_conv_u8s8(filters), comp], attrs, None)


@pytest.mark.parametrize("stride", sorted(VARIANTS))
@pytest.mark.parametrize("shape", SHAPES)
def test_reference_gives_the_direct_sums(shape, stride):
    n, c, h, w, o = shape
    rng = np.random.default_rng(sum(shape) + stride)
    x = random_ints(rng, np.uint8, (n, h + 2, w + 2, c))
    filters = random_ints(rng, np.int8, (o, c, 3, 3))
    comp = rng.integers(-5000, 5000, o).astype(np.int32)
    got = _reference([x, pack_winograd_u8s8(filters, stride), comp], Attrs(n=o, stride=stride), None)
    np.testing.assert_array_equal(got, _direct(x, filters, comp, stride))


def test_transformed_filters_round_trip_and_stay_within_int16():
    rng = np.random.default_rng(3)
    filters = random_ints(rng, np.int8, (37, 32, 3, 3))
    filters[0] = -128  # the largest transformed magnitude: 3 * 3 * 128
    u = pack_winograd_u8s8(filters)
    assert u.shape == (3, 16, 16, 32) and u.dtype == np.int16
    transformed = unpack_winograd_u8s8(u, 37)
    assert np.abs(transformed).max() == 1152 and not u[2, :, :, 2 * 5:].any()  # channels past 37: zero
    g = np.array([[-2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]])  # winograd_math's G at 0, 1, -1, infinity, doubled
    np.testing.assert_array_equal(VARIANTS[1].filter_t, g)
    np.testing.assert_array_equal(transformed[:, :, 7, 36], g @ filters[36, 7].astype(np.int64) @ g.T)
    strided = unpack_winograd_u8s8(pack_winograd_u8s8(filters, 2), 37)  # stride 2: 5 x 5 positions within +-512
    assert strided.shape == (5, 5, 32, 37) and np.abs(strided).max() == 512


def _layers(rng, shapes, stride: int = 1, **extra) -> list[dict]:
    return [dict(_layer(rng, np.uint8, n, c, h, w, o, 3, stride, 1, 1, 1, per_channel=i % 2 == 0), **extra)
            for i, (n, c, h, w, o) in enumerate(shapes)]


def _check_sums(layers, got):
    for index, (layer, out) in enumerate(zip(layers, got)):
        scale = (np.float32(layer["x_scale"]) * layer["w_scale"]).astype(np.float32).reshape(-1, 1, 1)
        np.testing.assert_array_equal(out, _sums(layer).astype(np.float32) * scale, err_msg=f"layer {index}")


@needs_avx2
@pytest.mark.parametrize("stride", sorted(VARIANTS))
@pytest.mark.parametrize("threads", ["1", "2"])
def test_compiled_layers_are_exact(monkeypatch, threads, stride):
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    layers = _layers(np.random.default_rng(int(threads) + 10 * stride), SHAPES, stride)
    with forced_conv_algorithm("winograd2"):
        got, ops, module, _ = _run(layers)
    assert ops.count("conv2d_u8s8_winograd") == len(layers), ops
    precisions = {k.precision for k in module.report(**{f"x{i}": l["x"] for i, l in enumerate(layers)}).kernels
                  if k.kind == "contraction"}
    assert precisions == {"int8 (winograd, avx2)"}, precisions
    _check_sums(layers, got)


@needs_avx2
def test_extreme_values_and_the_most_channels_are_exact():
    """Inputs 0 or 255 and weights -128 or 127 where they make the sums largest, up to
    WINOGRAD_MAX_CHANNELS input channels: every transformed value at its bound, 4y just within int32."""
    rng = np.random.default_rng(9)
    layers = _layers(rng, [(1, WINOGRAD_MAX_CHANNELS, 4, 5, 16), (1, 64, 6, 6, 24)])
    layers += _layers(rng, [(1, WINOGRAD_MAX_CHANNELS, 5, 6, 16), (1, 64, 9, 8, 24)], stride=2)
    for layer in layers:
        layer["x"] = np.where(rng.random(layer["x"].shape) < 0.5, 0, 255).astype(np.uint8)
        layer["w"][:] = np.where(rng.random(layer["w"].shape) < 0.5, -128, 127)
        layer["zero"] = 0
    for layer in layers[::2]:
        layer["x"][:] = 255  # every product of a filter of -128s at its largest
        layer["w"][0] = -128
    with forced_conv_algorithm("winograd2"):
        got, ops, _, _ = _run(layers)
    assert ops.count("conv2d_u8s8_winograd") == 4, ops
    _check_sums(layers, got)


@needs_avx2
def test_requantized_output_and_int8_activations_match_the_reference():
    """bias, ReLU and QuantizeLinear fused after the Winograd sums; an int8 activation (shifted to uint8 by
    +128, its zero point with it) and a run of rows split over several tasks."""
    rng = np.random.default_rng(4)
    layers = _layers(rng, [(1, 32, 14, 14, 48), (1, 16, 9, 7, 16)])
    for layer in layers:
        layer.update(bias=rng.standard_normal(layer["w"].shape[0]).astype(np.float32), output=(0.4, 3))
    layers += _layers(rng, [(1, 32, 14, 13, 40)], stride=2, bias=rng.standard_normal(40).astype(np.float32),
                      output=(0.4, 3))
    signed = _layer(rng, np.int8, 1, 32, 8, 8, 32, 3, 1, 1, 1, 1, per_channel=True)
    with forced_conv_algorithm("winograd2"):
        got, ops, _, reference = _run(layers + [signed])
    assert ops.count("conv2d_u8s8_winograd") == 4, ops
    for out, ref in zip(got[:3], reference[:3]):
        assert out.dtype == np.uint8
        np.testing.assert_array_equal(out, ref)
    _check_sums([signed], got[3:])


def test_the_rule_takes_wide_3x3_layers_of_stride_1_and_2_on_avx2_only(monkeypatch):
    wide = dict(channels_in=64, channels_out=64, kernel=(3, 3), stride=(1, 1), dilation=(1, 1), groups=1,
                out_hw=(56, 56))
    for kind in INT8_PATHS:  # the int8 dot-product kinds this CPU can be told to use
        monkeypatch.setenv("TENSORKILN_INT8_DOT", kind)
        cpu_target.cache_clear()
        try:
            assert winograd_u8s8_applies(**wide) is (kind == "avx2"), kind
        finally:
            cpu_target.cache_clear()
    if "avx2" not in INT8_PATHS:
        return
    monkeypatch.setenv("TENSORKILN_INT8_DOT", "avx2")
    cpu_target.cache_clear()
    try:
        assert winograd_u8s8_applies(**{**wide, "stride": (2, 2)})
        # a 7x7 output (16 tiles) pays for the 16-bit filters at stride 1, not at stride 2 (min_tiles)
        assert winograd_u8s8_applies(**{**wide, "out_hw": (7, 7)})
        assert winograd_u8s8_applies(**{**wide, "stride": (2, 2), "out_hw": (14, 14)})
        for change in (dict(stride=(3, 3)), dict(stride=(1, 2)), dict(dilation=(2, 2)), dict(kernel=(1, 1)),
                       dict(channels_in=24), dict(channels_in=8), dict(channels_out=8), dict(groups=2),
                       dict(out_hw=(1, 9)), dict(stride=(2, 2), out_hw=(7, 7))):
            assert not winograd_u8s8_applies(**{**wide, **change}), change
        with forced_conv_algorithm("winograd2"):  # any size, as the tests of the kernels want
            assert winograd_u8s8_applies(**{**wide, "stride": (2, 2), "out_hw": (1, 1)})
        with forced_conv_algorithm("direct"):
            assert not winograd_u8s8_applies(**wide)
    finally:
        cpu_target.cache_clear()


@pytest.mark.parametrize("layer", [(1, 56, 56, 64, 64), (1, 28, 28, 128, 128), (1, 14, 14, 256, 256),
                                   (1, 7, 7, 512, 512), (2, 5, 9, 16, 200), (1, 3, 3, 1024, 16)])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("positions", [16, 25])
def test_task_split_is_whole_row_pairs_and_panels_within_the_scratch(layer, threads, positions):
    images, oh, ow, c, o = layer
    rows, nb = task_split(images, oh, ow, c, o, threads, positions)
    assert (rows % 2 == 0 or rows == oh) and 0 < rows <= oh and nb % 16 == 0 and 0 < nb < o + 16, (rows, nb)
    v, m, tile = _scratch(-(-rows // 2) * -(-ow // 2), positions, c, nb, rows * ow)
    assert 2 * v + 4 * (m + tile) <= SCRATCH_BYTES or (rows, nb) == (2, 16), (rows, nb)


def test_bad_operands_are_refused_with_the_shapes():
    u = TensorType((1, 16, 8, 32), dt.int16)
    comp = TensorType((16,), dt.int32)
    one = Attrs(n=16, stride=1)
    with pytest.raises(ShapeError, match="multiple of 16"):
        infer_type("conv2d_u8s8_winograd", [TensorType((1, 6, 6, 8), dt.uint8), u, comp], one)
    with pytest.raises(ShapeError, match=r"u \(ceil\(O / 16\), 16, C / 2, 32\)"):
        infer_type("conv2d_u8s8_winograd", [TensorType((1, 6, 6, 32), dt.uint8), u, comp], one)
    with pytest.raises(ShapeError, match=r"u \(ceil\(O / 16\), 25, C / 2, 32\)"):  # stride 2: 5 x 5 positions
        infer_type("conv2d_u8s8_winograd", [TensorType((1, 6, 6, 16), dt.uint8), u, comp], Attrs(n=16, stride=2))
    with pytest.raises(ShapeError, match="stride 3"):
        infer_type("conv2d_u8s8_winograd", [TensorType((1, 6, 6, 16), dt.uint8), u, comp], Attrs(n=16, stride=3))
    with pytest.raises(DTypeError, match="int16 u"):
        infer_type("conv2d_u8s8_winograd", [TensorType((1, 6, 6, 16), dt.uint8), TensorType((1, 16, 8, 32), dt.int8),
                                            comp], one)
    with pytest.raises(ShapeError, match="3x3 filters"):
        pack_winograd_u8s8(np.zeros((4, 16, 1, 1), np.int8))
    assert infer_type("conv2d_u8s8_winograd", [TensorType((2, 6, 7, 16), dt.uint8), u, comp],
                      one).shape == (2, 4, 5, 16)
    assert infer_type("conv2d_u8s8_winograd", [TensorType((2, 6, 7, 16), dt.uint8), TensorType((1, 25, 8, 32), dt.int16),
                                               comp], Attrs(n=16, stride=2)).shape == (2, 2, 3, 16)
