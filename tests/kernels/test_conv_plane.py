"""1x1 stride-1 blocked convolutions tiled along the whole plane (kernels/templates/conv_plane.py).

Tiles that cross image rows, chunks of a plane's tiles as tasks (even and uneven), the tail tile
in the last chunk, and an epilogue reading a residual at each pixel's (row, column): each against
the numpy reference, on odd plane sizes and odd channel counts, with debug builds checking every
access the interval analysis cannot prove in range.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.frontend.tensor import apply
from tensorkiln.kernels.templates import conv_choice, conv_nchwc
from tensorkiln.kernels.templates.conv_choice import ConvConfig, ConvShape, analytic_conv_config, tile_legal
from tensorkiln.kernels.target import CpuTarget
from tensorkiln.kernels.templates.conv_nchwc import nchwc_tile, weight_vectors_in_registers
from tensorkiln.kernels.templates.conv_plane import (CHUNKS_PER_THREAD, is_pointwise_plane, is_window_plane,
                                                     plane_chunks,
                                                     tile_row_pixels)

from .disassembly import hottest_block, needs_vector_disassembly
from .test_conv_nchwc import LANES, block_input, block_weight, check_four_forms, reference, unblock

RNG = np.random.default_rng(7)


@pytest.fixture
def fresh_cache(monkeypatch, tmp_path):
    """A compile cache of the test's own: a kernel built under a patched rule is neither taken from
    nor left for another compile of the same graph."""
    monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path))

PLANES = [  # (n, c, h, w, k): odd planes (one pixel, rows of 3 and 7, 13x11), odd channel counts
    (1, 17, 1, 1, 13),
    (2, 24, 5, 3, 16),
    (1, 40, 7, 7, 24),
    (1, 19, 13, 11, 40),
    (3, 8, 6, 9, 3 * LANES),
]


@pytest.mark.parametrize("case", PLANES, ids=lambda c: "x".join(map(str, c)))
def test_pointwise_plane_matches_reference(case):
    """The four layout forms (blocked or NCHW in and out) with bias and activation epilogues."""
    n, c, h, w, k = case
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    wt = RNG.standard_normal((k, c, 1, 1)).astype(np.float32)
    bias = RNG.standard_normal(k).astype(np.float32)
    conv = dict(stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1))
    want = reference(x, wt, (1, 1), (0, 0, 0, 0), (1, 1))
    check_four_forms(x, bias, block_input(x, 8), block_weight(wt, 8, 8), 8, conv, want, relu6=True)


def test_padded_pointwise_plane_matches_reference():
    """A padded 1x1 layer of stride 1 reads its zero-bordered copy, whose plane is the output's."""
    n, c, h, w, k = 2, 13, 6, 5, 11
    padding = (1, 0, 2, 1)
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    wt = RNG.standard_normal((k, c, 1, 1)).astype(np.float32)
    bias = RNG.standard_normal(k).astype(np.float32)
    conv = dict(stride=(1, 1), padding=padding, dilation=(1, 1))
    want = reference(x, wt, (1, 1), padding, (1, 1))
    check_four_forms(x, bias, block_input(x, 8), block_weight(wt, 8, 8), 8, conv, want)


def residual_conv(x, wt, res, stride: int, debug: bool = True):
    """(got, want) of conv 1x1 + residual, blocked in and out, in one kernel (the residual in its epilogue)."""
    k = wt.shape[0]
    xb, wb, resb = block_input(x, 8), tk.tensor(block_weight(wt, 8, 8)), block_input(res, 8)
    f = tk.jit(lambda xb, resb: apply("conv2d_nchwc", [xb, wb], stride=(stride, stride), padding=(0, 0, 0, 0),
                                      dilation=(1, 1), out_layout="nchwc") + resb, debug=debug)
    got = unblock(f(xb, resb).numpy(), k)
    assert len(f.report(xb, resb).kernels) == 1
    return got, reference(x, wt, (stride, stride), (0, 0, 0, 0), (1, 1)) + res


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("chunks", [1, 2, 3, 5])
def test_residual_in_chunks_matches_reference(monkeypatch, fresh_cache, stride, chunks):
    """Uneven chunks of tiles (the last one shorter, with the tail tile) and a residual read per pixel;
    stride 2 keeps row tiles (its plane is not the input's) and must be unaffected."""
    def forced(full: int, other: int, threads: int) -> tuple[int, int]:
        per = max(1, -(-full // chunks))
        return max(1, -(-full // per)), per if full else 0
    monkeypatch.setattr(conv_nchwc, "plane_chunks", forced)
    n, c, h, w, k = 2, 21, 9, 7, 19
    oh, ow = -(-h // stride), -(-w // stride)
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    wt = RNG.standard_normal((k, c, 1, 1)).astype(np.float32)
    res = RNG.standard_normal((n, k, oh, ow)).astype(np.float32)
    got, want = residual_conv(x, wt, res, stride)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pixels,blocks,order", [(3, 1, "groups"), (7, 1, "rows"), (2, 3, "groups"), (13, 1, "rows")])
def test_configured_tiles_and_orders(monkeypatch, fresh_cache, pixels, blocks, order):
    """A tuned tile and task order on a plane: tiles wider than an image row, tasks numbered groups first."""
    monkeypatch.setattr(conv_choice, "conv_config", lambda root: ConvConfig("nchwc", pixels, blocks, order))
    n, c, h, w, k = 1, 16, 5, 6, 3 * 8
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    wt = RNG.standard_normal((k, c, 1, 1)).astype(np.float32)
    res = RNG.standard_normal((n, k, h, w)).astype(np.float32)
    got, want = residual_conv(x, wt, res, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_symbolic_batch_is_one_program_without_guards():
    """The chunks of a plane count a run-time batch at its hint: no guard on the batch, every size right."""
    wb = tk.tensor(RNG.standard_normal((3, 2, 1, 1, 8, 8)).astype(np.float32))
    wb2 = tk.tensor(RNG.standard_normal((4, 3, 1, 1, 8, 8)).astype(np.float32))

    def net(x):
        y = apply("conv2d_nchwc", [x, wb], stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                  out_layout="nchwc").relu()
        return apply("conv2d_nchwc", [y, wb2], stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                     out_layout="nchwc") + 1.0

    symbolic, specialized = tk.jit(net, dynamic={"x": {0: "batch"}}), tk.jit(net, dynamic=False)
    for n in (2, 3, 5):
        x = tk.tensor(RNG.standard_normal((n, 2, 7, 9, 8)).astype(np.float32))
        np.testing.assert_allclose(symbolic(x).numpy(), specialized(x).numpy(), rtol=1e-5, atol=1e-5)
    assert symbolic.compile_count == 1
    assert "guards: none" in symbolic.explain(x)


@needs_vector_disassembly
def test_rule_tile_keeps_the_weights_in_registers(fresh_cache):
    """An output of three channel blocks (MobileNetV2's 24 channels on AVX2): the rule's tile leaves
    no FMA reading a weight vector from memory (a tile of three blocks would, nchwc_tile)."""
    x = RNG.standard_normal((1, 2, 14, 14, LANES)).astype(np.float32)
    wb = tk.tensor(RNG.standard_normal((3, 2, 1, 1, LANES, LANES)).astype(np.float32))
    f = tk.jit(lambda x: apply("conv2d_nchwc", [x, wb], stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                               out_layout="nchwc"))
    f(x)
    fmas = [line for line in hottest_block(f.report(x).library_path or "", "vfmadd231ps") if "vfmadd231ps" in line]
    assert fmas and not any("(" in line for line in fmas), "\n".join(fmas)


def test_weight_vectors_kept_follow_the_register_file(monkeypatch):
    """Three weight vectors cost a load per pixel with 16 registers, not with 32 (AVX-512)."""
    assert weight_vectors_in_registers(16) == 2 and weight_vectors_in_registers(32) == 32
    wide = CpuTarget(vector_bytes=64, vector_registers=32, l1d=48 * 1024, l2=2 << 20, l3=32 << 20)
    narrow = CpuTarget(vector_bytes=32, vector_registers=16, l1d=32 * 1024, l2=1 << 20, l3=32 << 20)
    monkeypatch.setattr(conv_nchwc, "cpu_target", lambda: wide)
    assert nchwc_tile(3, 16, 56, tasks_per_block=56, threads=1).blocks == 3
    monkeypatch.setattr(conv_nchwc, "cpu_target", lambda: narrow)
    assert nchwc_tile(3, 8, 56, tasks_per_block=56, threads=1).blocks == 1
    assert nchwc_tile(3, 8, 56, tasks_per_block=56, threads=1, loop_ir=False).blocks == 3  # a C helper's tile


def test_which_layers_tile_the_plane():
    assert is_pointwise_plane(1, 1, (1, 1), False, 7, 7)
    assert not is_pointwise_plane(1, 1, (2, 2), False, 7, 7)  # strided: its plane is not the input's
    assert not is_pointwise_plane(3, 3, (1, 1), False, 7, 7)
    assert not is_pointwise_plane(1, 1, (1, 1), True, 7, 7)  # depthwise keeps its own tiles
    assert tile_row_pixels(1, 1, (1, 1), False, 7, 7) == 49 and tile_row_pixels(3, 3, (1, 1), False, 7, 7) == 7


def test_plane_chunks_cover_every_tile_once():
    for full in (0, 1, 5, 8, 9, 32, 2090):
        for other in (1, 2, 3, 9, 20):
            for threads in (1, 2, 4, 16):
                chunks, per = plane_chunks(full, other, threads)
                if full == 0:
                    assert (chunks, per) == (1, 0)
                else:  # every chunk holds at least one tile, and together they hold all
                    assert (chunks - 1) * per < full <= chunks * per
                if threads == 1 or (other >= CHUNKS_PER_THREAD * threads and other % threads == 0):
                    assert chunks == 1  # nothing to balance: one task per plane keeps its weights hot
    assert plane_chunks(8, 20, 2) == (1, 8)  # MobileNetV2's 160 channels of 7x7: 20 groups, one chunk each
    assert plane_chunks(522, 9, 2) == (2, 261)  # 9 channel groups on 2 threads: 18 tasks, not 9
    assert plane_chunks(224, 3, 2) == (4, 56)  # 3 groups: 12 tasks, not 9


def test_rule_tile_spans_rows_on_a_small_plane():
    """A 1x1 layer's tile may be wider than its row; a 3x3 layer's may not."""
    pointwise = ConvShape(1, 64, 7, 7, 64, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), True)
    config = analytic_conv_config(pointwise)
    assert tile_legal(pointwise, config.pixels, config.blocks)
    assert tile_legal(pointwise, 13, 1)  # 13 accumulators, a weight vector and a broadcast: wider than a row
    square = ConvShape(1, 64, 7, 7, 64, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), True)
    assert not tile_legal(square, 8, 1)


# ---- window layers (3x3, strided, dilated) tiled along the plane: each pixel at its own offset

AVX2 = CpuTarget(vector_bytes=32, vector_registers=16, l1d=32 << 10, l2=1 << 20, l3=32 << 20)
AVX512 = CpuTarget(vector_bytes=64, vector_registers=32, l1d=48 << 10, l2=1 << 20, l3=32 << 20)

WINDOW_LAYERS = [  # (n, c, h, w, k, kernel, stride, padding, dilation): odd planes, tiles crossing rows
    (1, 64, 7, 7, 64, 3, 1, (1, 1, 1, 1), 1),
    (2, 24, 9, 5, 13, 3, 1, (1, 1, 1, 1), 1),
    (1, 16, 14, 14, 32, 3, 2, (1, 1, 1, 1), 1),
    (1, 13, 11, 13, 16, 3, 2, (0, 2, 1, 0), 1),
    (1, 16, 13, 9, 27, 3, 1, (2, 2, 2, 2), 2),
    (1, 8, 6, 11, 32, 5, 1, (0, 3, 2, 1), 1),
    (2, 16, 12, 12, 16, 1, 2, (0, 0, 0, 0), 1),
    (1, 16, 1, 3, 16, 3, 1, (1, 1, 1, 1), 1),
]


@pytest.mark.parametrize("case", WINDOW_LAYERS, ids=lambda c: "x".join(map(str, c[:7])))
def test_window_plane_matches_reference(monkeypatch, fresh_cache, case):
    """The four layout forms with 8-lane blocks on a 16-register target, where every layer here tiles
    its plane (checked: tiles of 5-6 pixels): the tiles cross rows, and each pixel
    reads at its own input offset."""
    monkeypatch.setattr(conv_nchwc, "cpu_target", lambda: AVX2)
    n, c, h, w, k, size, stride, padding, dilation = case
    oh = (h + padding[0] + padding[1] - dilation * (size - 1) - 1) // stride + 1
    ow = (w + padding[2] + padding[3] - dilation * (size - 1) - 1) // stride + 1
    tile = nchwc_tile(-(-k // 8), 8, oh * ow, tasks_per_block=n * oh)
    assert is_window_plane(False, 8, oh, ow, tile.pixels)
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    wt = RNG.standard_normal((k, c, size, size)).astype(np.float32)
    bias = RNG.standard_normal(k).astype(np.float32)
    conv = dict(stride=(stride, stride), padding=padding, dilation=(dilation, dilation))
    want = reference(x, wt, (stride, stride), padding, (dilation, dilation))
    check_four_forms(x, bias, block_input(x, 8), block_weight(wt, 8, 8), 8, conv, want)


def test_window_plane_in_debug_build(monkeypatch, fresh_cache):
    """Bounds-checked: every pixel offset of a tile crossing rows stays in the padded copy."""
    monkeypatch.setattr(conv_nchwc, "cpu_target", lambda: AVX2)
    x = RNG.standard_normal((1, 16, 7, 7)).astype(np.float32)
    wt = RNG.standard_normal((32, 16, 3, 3)).astype(np.float32)
    xb, wb = block_input(x, 8), tk.tensor(block_weight(wt, 8, 8))
    f = tk.jit(lambda xb: apply("conv2d_nchwc", [xb, wb], stride=(1, 1), padding=(1, 1, 1, 1),
                                dilation=(1, 1), out_layout="nchwc"), debug=True)
    got = unblock(f(xb).numpy(), 32)
    np.testing.assert_allclose(got, reference(x, wt, (1, 1), (1, 1, 1, 1), (1, 1)), rtol=1e-4, atol=1e-4)
    with open(f.report(xb).source_path) as source:  # the plane's tiles: a step's offset names no tile
        steps = [line for line in source if "nc_x_at =" in line]
    assert steps and not any("nc_tx" in line for line in steps)


@pytest.mark.parametrize("target,kb,plane", [(AVX2, 8, True), (AVX512, 16, False)])
def test_window_plane_rule_by_target(monkeypatch, target, kb, plane):
    """ResNet-18's 512-channel 7x7 layer: 16 registers give a plane tile of 5 pixels (window plane),
    32 give 14 pixels, more address registers than a loop has: tiled by row, as before."""
    monkeypatch.setattr(conv_nchwc, "cpu_target", lambda: target)
    tile = nchwc_tile(512 // kb, kb, 49, tasks_per_block=7)
    assert is_window_plane(False, kb, 7, 7, tile.pixels) is plane
    assert not is_window_plane(True, kb, 7, 7, tile.pixels)  # depthwise keeps its own tiles
    assert not is_window_plane(False, 1, 7, 7, tile.pixels)  # one-channel input blocks (a stem)
