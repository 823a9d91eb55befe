"""The blocked direct convolution (conv2d_nchwc, kernels/templates/conv_nchwc.py) against the numpy reference.

Channels that are not multiples of the block are zero-padded to it, as a
blocked layout must be; the padded output channels are dropped before the
comparison. Each case compiles one library holding the four layout forms
(blocked or NCHW input, blocked or NCHW output) with a fused epilogue.
"""
from __future__ import annotations


import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.errors import ShapeError
from tensorkiln.kernels.templates.conv_nchwc import nchwc_tile
from tensorkiln.kernels.target import cpu_target
from tensorkiln.ir.ops.contraction import _conv2d_reference
from tensorkiln.frontend.tensor import apply
from tensorkiln.frontend.autodiff.gradcheck import gradcheck

from .disassembly import hottest_block, needs_vector_disassembly

RNG = np.random.default_rng(0)


def block_input(x: np.ndarray, cb: int) -> np.ndarray:
    """x[N, C, H, W] -> [N, ceil(C/cb), H, W, cb], padded channels zero."""
    n, c, h, w = x.shape
    cp = -(-c // cb) * cb
    padded = np.zeros((n, cp, h, w), x.dtype)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, cp // cb, cb, h, w).transpose(0, 1, 3, 4, 2))


def unblock(y: np.ndarray, channels: int) -> np.ndarray:
    """y[N, K/kb, H, W, kb] -> [N, channels, H, W] (padded channels dropped)."""
    n, kblocks, h, w, kb = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, kblocks * kb, h, w)[:, :channels]


def block_weight(w: np.ndarray, cb: int, kb: int) -> np.ndarray:
    """w[K, C, KH, KW] -> [ceil(K/kb), ceil(C/cb), KH, KW, cb, kb], padded with zeros."""
    k, c, kh, kw = w.shape
    kp, cp = -(-k // kb) * kb, -(-c // cb) * cb
    padded = np.zeros((kp, cp, kh, kw), w.dtype)
    padded[:k, :c] = w
    return np.ascontiguousarray(padded.reshape(kp // kb, kb, cp // cb, cb, kh, kw).transpose(0, 2, 4, 5, 3, 1))


def reference(x, w, stride, padding, dilation):
    attrs = {"groups": 1, "stride": stride, "padding": padding, "dilation": dilation}
    return _conv2d_reference([x.astype(np.float64), w.astype(np.float64)], attrs, None)


def check_four_forms(x, bias, xb, wb, kb, conv, want, relu6=False):
    """Compile the four layout forms of one conv2d_nchwc in one library (blocked or NCHW input, blocked or
    NCHW output, bias and activation epilogues) and compare each with `want`, the NCHW reference."""
    n, k, h, w = x.shape[0], want.shape[1], x.shape[2], x.shape[3]
    kp = wb.shape[0] * kb
    biasb = block_input(np.pad(bias, (0, kp - k)).reshape(1, kp, 1, 1), kb)
    x_plain = np.ascontiguousarray(xb.transpose(0, 1, 4, 2, 3).reshape(n, -1, h, w))  # padded channels

    def four_forms(xb, x_plain, wb, biasb):
        blocked = apply("conv2d_nchwc", [xb, wb], out_layout="nchwc", **conv)
        from_plain = apply("conv2d_nchwc", [x_plain, wb], out_layout="nchwc", **conv)
        to_plain = apply("conv2d_nchwc", [xb, wb], out_layout="nchw", **conv)
        plain = apply("conv2d_nchwc", [x_plain, wb], out_layout="nchw", **conv)
        bias_plain = biasb.permute(0, 1, 4, 2, 3).reshape(1, kp, 1, 1)
        first = (blocked + biasb).clip(0.0, 6.0) if relu6 else (blocked + biasb).relu()
        return first, from_plain, (to_plain + bias_plain).relu(), plain * 2.0

    f = tk.jit(four_forms)
    outs = [o.numpy() for o in f(xb, x_plain, wb, biasb)]
    assert f.report(xb, x_plain, wb, biasb).backend == "c"
    with_bias = want + bias.reshape(1, k, 1, 1)
    tol = dict(rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    np.testing.assert_allclose(unblock(outs[0], k), np.clip(with_bias, 0, 6 if relu6 else None), **tol)
    np.testing.assert_allclose(unblock(outs[1], k), want, **tol)
    np.testing.assert_allclose(outs[2][:, :k], np.maximum(with_bias, 0), **tol)
    np.testing.assert_allclose(outs[3][:, :k], 2 * want, **tol)


LANES = cpu_target().vector_bytes // 4
CASES = [  # (n, c, h, w, k, kernel, stride, pad, dilation, cb, kb)
    (1, 1, 5, 5, 16, 3, 1, 1, 1, 1, LANES),
    (1, 3, 13, 13, 17, 7, 2, 3, 1, 1, LANES),       # the stem: NCHW read as one-channel blocks
    (3, 17, 7, 7, 17, 3, 1, 1, 1, 8, 8),            # odd channels padded to blocks of 8
    (1, 64, 30, 30, 64, 3, 2, 1, 1, LANES, LANES),  # a strided layer, tiles with a tail
    (2, 64, 13, 13, 32, 1, 1, 0, 1, LANES, LANES),  # 1x1 read where it lies
    (1, 64, 13, 13, 32, 1, 2, 0, 1, LANES, LANES),  # 1x1 strided: the copy keeps every other pixel
    (1, 32, 13, 5, 16, 1, 2, 1, 1, 16, 16),         # 1x1 padded
    (3, 16, 13, 13, 16, 3, 1, 2, 2, 16, 16),        # dilated
    (1, 17, 1, 1, 3, 1, 1, 0, 1, 16, 4),            # a 1x1 image
    (1, 8, 30, 7, 16, 5, 1, (0, 3, 2, 1), 1, 8, 8),  # uneven padding
    (1, 64, 7, 7, 64, 3, 1, 1, 1, LANES, LANES),    # 7x7 pixels, many channel blocks per tile
    (1, 24, 9, 7, 2 * LANES, 3, 1, 1, 1, 8, 2 * LANES),  # one output block twice this CPU's width
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)).replace(" ", ""))
def test_conv2d_nchwc_matches_reference(case):
    n, c, h, w, k, kernel, stride, pad, dilation, cb, kb = case
    padding = pad if isinstance(pad, tuple) else (pad,) * 4
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    wt = RNG.standard_normal((k, c, kernel, kernel)).astype(np.float32)
    bias = RNG.standard_normal(k).astype(np.float32)
    conv = dict(stride=(stride, stride), padding=padding, dilation=(dilation, dilation))
    want = reference(x, wt, (stride, stride), padding, (dilation, dilation))
    check_four_forms(x, bias, block_input(x, cb), block_weight(wt, cb, kb), kb, conv, want)


@pytest.mark.parametrize("plain_in,pad,stride", [(False, 0, 1), (False, 2, 2), (True, 1, 2), (True, 0, 2)])
def test_every_access_is_in_bounds(plain_in, pad, stride):
    """Debug builds check every load and store the interval analysis cannot prove in range."""
    x = RNG.standard_normal((2, 16, 7, 9)).astype(np.float32)
    wt = RNG.standard_normal((16, 16, 3, 3)).astype(np.float32)
    xin, wb = x if plain_in else block_input(x, 8), tk.tensor(block_weight(wt, 8, 8))
    f = tk.jit(lambda x: apply("conv2d_nchwc", [x, wb], stride=(stride, stride),
                               padding=(pad,) * 4, dilation=(1, 1), out_layout="nchwc"), debug=True)
    got = unblock(f(xin).numpy(), 16)
    want = reference(x, wt, (stride, stride), (pad,) * 4, (1, 1))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_residual_epilogue_in_blocked_layout():
    """conv + bias + residual + ReLU is one kernel, the residual read in blocked layout."""
    x = RNG.standard_normal((2, 16, 9, 9)).astype(np.float32)
    wt = RNG.standard_normal((32, 16, 3, 3)).astype(np.float32)
    res = RNG.standard_normal((2, 32, 9, 9)).astype(np.float32)
    bias = RNG.standard_normal(32).astype(np.float32)
    xb, wb, resb = block_input(x, 16), block_weight(wt, 16, 16), block_input(res, 16)
    biasb = block_input(bias.reshape(1, 32, 1, 1), 16)
    f = tk.jit(lambda xb, wb, resb, biasb: (apply("conv2d_nchwc", [xb, wb], stride=(1, 1), padding=(1, 1, 1, 1),
                                                  dilation=(1, 1), out_layout="nchwc") + biasb + resb).relu())
    got = f(xb, wb, resb, biasb).numpy()
    kernels = f.report(xb, wb, resb, biasb).kernels
    assert len(kernels) == 1 and kernels[0].kind == "contraction"
    want = np.maximum(reference(x, wt, (1, 1), (1, 1, 1, 1), (1, 1)) + bias.reshape(1, 32, 1, 1) + res, 0)
    np.testing.assert_allclose(unblock(got, 32), want, rtol=1e-4, atol=1e-4)


def test_tile_fits_the_registers():
    target = cpu_target()
    for kblocks in (1, 2, 3, 4, 8, 32):
        for ow in (1, 5, 7, 13, 14, 56, 112):
            tile = nchwc_tile(kblocks, LANES, ow, "float32", tasks_per_block=ow)
            assert kblocks % tile.blocks == 0 and 1 <= tile.pixels <= ow
            assert tile.pixels * tile.blocks + tile.blocks + 1 <= target.vector_registers
    if target.vector_registers >= 32:
        assert nchwc_tile(4, 16, 56, "float32", tasks_per_block=56) == nchwc_tile(8, 16, 28, "float32", 28)


@needs_vector_disassembly
def test_inner_loop_is_register_blocked_fma():
    """Accumulators stay in vector registers: the library holds a straight run of T*G FMAs."""
    x = RNG.standard_normal((1, 4, 28, 28, LANES)).astype(np.float32)
    wb = tk.tensor(RNG.standard_normal((4, 4, 3, 3, LANES, LANES)).astype(np.float32))
    f = tk.jit(lambda x: apply("conv2d_nchwc", [x, wb], stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1),
                               out_layout="nchwc"))
    f(x)
    tile = nchwc_tile(4, LANES, 28, "float32", tasks_per_block=28)
    hot = hottest_block(f.report(x).library_path or "", "vfmadd231ps")
    fmas = [line for line in hot if "vfmadd231ps" in line]
    assert len(fmas) >= tile.pixels * tile.blocks
    assert all("zmm" in line or "ymm" in line for line in fmas)
    assert not any("(%rsp)" in line for line in hot), "accumulators or weights spilled to the stack"
    assert any("vbroadcastss" in line or "1to" in line for line in hot)


def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 2, 5, 5, 2)), rng.standard_normal((2, 2, 3, 3, 2, 4))
    conv = dict(stride=(2, 1), padding=(1, 0, 1, 1), dilation=(1, 1))
    assert gradcheck(lambda x, w: apply("conv2d_nchwc", [x, w], out_layout="nchwc", **conv), x, w)
    assert gradcheck(lambda x, w: apply("conv2d_nchwc", [x, w], out_layout="nchw", **conv),
                     rng.standard_normal((1, 4, 5, 5)), w)


def test_shape_errors_name_the_blocks():
    x = tk.tensor(np.zeros((1, 2, 5, 5, 8), np.float32))
    w = tk.tensor(np.zeros((1, 2, 3, 3, 16, 8), np.float32))
    with pytest.raises(ShapeError, match="weight blocks input channels as 2x16, input has 2x8"):
        apply("conv2d_nchwc", [x, w], stride=(1, 1), padding=(0,) * 4, dilation=(1, 1), out_layout="nchwc")
    with pytest.raises(ShapeError, match="out_layout"):
        apply("conv2d_nchwc", [x, tk.tensor(np.zeros((1, 2, 3, 3, 8, 8), np.float32))], stride=(1, 1),
              padding=(0,) * 4, dilation=(1, 1), out_layout="nhwc")


# ---- depthwise (groups = channels): weight [C/kb, 1, KH, KW, 1, kb], input blocked as the output

def block_depthwise_weight(w: np.ndarray, kb: int) -> np.ndarray:
    """w[C, 1, KH, KW] -> [ceil(C/kb), 1, KH, KW, 1, kb], padded with zeros."""
    return block_weight(w, 1, kb)


def depthwise_reference(x, w, stride, padding, dilation):
    attrs = {"groups": x.shape[1], "stride": stride, "padding": padding, "dilation": dilation}
    return _conv2d_reference([x.astype(np.float64), w.astype(np.float64)], attrs, None)


DEPTHWISE_CASES = [  # (n, c, h, w, kernel, stride, pad, dilation, kb)
    (1, 16, 7, 7, 3, 1, 1, 1, LANES),
    (1, 32, 28, 28, 3, 2, 1, 1, LANES),           # strided, rows with a tail tile
    (2, 24, 13, 9, 3, 1, 1, 1, 8),                # half-vector blocks, two images
    (1, 17, 5, 6, 5, 1, 2, 1, 8),                 # channels padded to the block, 5x5
    (1, 16, 9, 11, 3, 2, (0, 1, 1, 0), 1, 16),    # uneven padding (TF "same" with stride 2)
    (1, 16, 12, 12, 3, 1, 2, 2, 16),              # dilated
    (1, 8, 1, 1, 3, 1, 1, 1, 8),                  # a 1x1 image
    (1, 32, 13, 13, 3, 1, 1, 1, 8),               # tasks of several output rows, a shorter last band
    (2, 16, 21, 21, 3, 2, 1, 1, 8),               # strided bands over two images
]


@pytest.mark.parametrize("case", DEPTHWISE_CASES, ids=lambda c: "x".join(map(str, c)).replace(" ", ""))
def test_depthwise_nchwc_matches_reference(case):
    n, c, h, w, kernel, stride, pad, dilation, kb = case
    padding = pad if isinstance(pad, tuple) else (pad,) * 4
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    wt = RNG.standard_normal((c, 1, kernel, kernel)).astype(np.float32)
    bias = RNG.standard_normal(c).astype(np.float32)
    wb = block_depthwise_weight(wt, kb)
    conv = dict(stride=(stride, stride), padding=padding, dilation=(dilation, dilation), groups=wb.shape[0] * kb)
    want = depthwise_reference(x, wt, (stride, stride), padding, (dilation, dilation))
    check_four_forms(x, bias, block_input(x, kb), wb, kb, conv, want, relu6=True)


@pytest.mark.parametrize("plain_in,pad,stride", [(False, 0, 1), (False, 1, 2), (True, 1, 1)])
def test_depthwise_accesses_are_in_bounds(plain_in, pad, stride):
    x = RNG.standard_normal((2, 16, 7, 9)).astype(np.float32)
    wt = RNG.standard_normal((16, 1, 3, 3)).astype(np.float32)
    xin, wb = x if plain_in else block_input(x, 8), tk.tensor(block_depthwise_weight(wt, 8))
    f = tk.jit(lambda x: apply("conv2d_nchwc", [x, wb], stride=(stride, stride), padding=(pad,) * 4,
                               dilation=(1, 1), out_layout="nchwc", groups=16), debug=True)
    got = unblock(f(xin).numpy(), 16)
    np.testing.assert_allclose(got, depthwise_reference(x, wt, (stride, stride), (pad,) * 4, (1, 1)),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("band", [2, 3, 5])
def test_depthwise_bands_read_and_write_in_bounds(monkeypatch, band):
    """Tasks of `band` output rows (the last one shorter; an NCHW input, blocked band by band) with
    bounds checks on every access."""
    monkeypatch.setattr("tensorkiln.kernels.templates.conv_nchwc.depthwise_band", lambda planes, oh: min(band, oh))
    x = RNG.standard_normal((1, 8, 11, 6 + band)).astype(np.float32)  # a shape of its own per band
    wt = RNG.standard_normal((8, 1, 3, 3)).astype(np.float32)
    wb = tk.tensor(block_depthwise_weight(wt, 8))
    for stride in (1, 2):
        f = tk.jit(lambda x: apply("conv2d_nchwc", [x, wb], stride=(stride, stride), padding=(1, 1, 1, 1),
                                   dilation=(1, 1), out_layout="nchwc", groups=8), debug=True)
        got = unblock(f(x).numpy(), 8)
        np.testing.assert_allclose(got, depthwise_reference(x, wt, (stride, stride), (1,) * 4, (1, 1)),
                                   rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("h,w,kernel,stride,pad,dilation", [
    (7, 9, 3, 1, (1, 1, 1, 1), 1),
    (8, 8, 3, 2, (1, 1, 1, 1), 1),      # stride 2: no right edge pixel
    (9, 11, 3, 2, (0, 1, 1, 0), 1),     # uneven padding
    (1, 1, 5, 1, (2, 2, 2, 2), 1),      # every pixel an edge pixel, every row clipped
    (3, 4, 3, 1, (4, 4, 5, 5), 1),      # rows and columns wholly in the margin: only the bias
    (12, 10, 3, 2, (2, 2, 2, 2), 2),    # dilated and strided
    (6, 30, 3, 1, (1, 1, 1, 1), 1),     # full tiles, a tail tile and the edges in one row
])
def test_depthwise_in_place_skips_taps_outside_the_image(h, w, kernel, stride, pad, dilation):
    """A blocked input is read where it lies; the taps in the padding are skipped (bounds checks on)."""
    x = RNG.standard_normal((2, 16, h, w)).astype(np.float32)
    wt = RNG.standard_normal((16, 1, kernel, kernel)).astype(np.float32)
    wb = tk.tensor(block_depthwise_weight(wt, 8))
    conv = dict(stride=(stride, stride), padding=pad, dilation=(dilation, dilation))
    f = tk.jit(lambda x: apply("conv2d_nchwc", [x, wb], out_layout="nchwc", groups=16, **conv) + 1.0, debug=True)
    xb = block_input(x, 8)
    assert "nc_rows" not in f.report(xb).kernels[0].loop_ir  # no copy of the input
    want = depthwise_reference(x, wt, (stride, stride), pad, (dilation, dilation)) + 1.0
    np.testing.assert_allclose(unblock(f(xb).numpy(), 16), want, rtol=1e-4, atol=1e-4)


def test_depthwise_band_rule():
    from tensorkiln.kernels.templates.conv_nchwc import DEPTHWISE_BAND_ROWS, depthwise_band
    assert depthwise_band(2, 112, threads=2) == DEPTHWISE_BAND_ROWS  # MobileNetV2's 32x112x112: 28 tasks
    assert depthwise_band(60, 7, threads=2) == 7  # 960 channels of 7 rows: one band per plane
    assert depthwise_band(1, 7, threads=2) == 1  # too few rows to share: one row per task


def test_depthwise_gradient_matches_finite_differences():
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((2, 2, 5, 5, 4)), rng.standard_normal((2, 1, 3, 3, 1, 4))
    conv = dict(stride=(2, 1), padding=(1, 0, 1, 1), dilation=(1, 1), groups=8)
    assert gradcheck(lambda x, w: apply("conv2d_nchwc", [x, w], out_layout="nchwc", **conv), x, w)
    assert gradcheck(lambda x, w: apply("conv2d_nchwc", [x, w], out_layout="nchw", **conv),
                     rng.standard_normal((1, 8, 5, 5)), w)


def test_depthwise_shape_errors():
    x = tk.tensor(np.zeros((1, 2, 5, 5, 8), np.float32))
    with pytest.raises(ShapeError, match="depthwise"):  # groups must equal the channels
        apply("conv2d_nchwc", [x, tk.tensor(np.zeros((2, 1, 3, 3, 1, 8), np.float32))], stride=(1, 1),
              padding=(0,) * 4, dilation=(1, 1), out_layout="nchwc", groups=8)
    with pytest.raises(ShapeError, match="input has 2x8"):  # input blocked otherwise than the output
        apply("conv2d_nchwc", [x, tk.tensor(np.zeros((1, 1, 3, 3, 1, 16), np.float32))], stride=(1, 1),
              padding=(0,) * 4, dilation=(1, 1), out_layout="nchwc", groups=16)
