"""How the direct int8 convolutions cut their work into tasks (conv_u8s8.task_split): every split stays
within the tile, balances the threads on the layers that used to leave one idle, and computes the same
exact sums whichever way it cuts."""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln.kernels.templates.conv import forced_conv_algorithm
from tensorkiln.kernels.templates.conv_u8s8 import (
    DENSE_TILE_PIXELS, DEPTHWISE_TILE_PIXELS, TILE_BYTES, TaskShape, makespan, task_split)

from .dot_paths import int8_path  # noqa: F401  (the fixture)
from .test_conv_u8s8 import _layer, _run, _sums


def _dense(height: int, width: int, channels: int, depth_steps: int, images: int = 1) -> TaskShape:
    return TaskShape(images, height, width, channels, 32, depth_steps, DENSE_TILE_PIXELS, True)


def test_every_split_fits_the_tile_and_covers_the_channels_in_lanes():
    rng = np.random.default_rng(0)
    for _ in range(60):
        dense = rng.random() < 0.5
        shape = TaskShape(int(rng.integers(1, 3)), int(rng.integers(1, 40)), int(rng.integers(1, 160)),
                          int(rng.integers(1, 700)), 32 if dense else 16, int(rng.integers(1, 300)),
                          DENSE_TILE_PIXELS if dense else DEPTHWISE_TILE_PIXELS, dense)
        for threads in (1, 2, 3):
            run, nb = task_split(shape, 1 << 30, threads)
            assert 1 <= run <= shape.height * shape.width and nb % shape.lanes == 0, (shape, run, nb)
            assert run * nb * 4 <= TILE_BYTES, (shape, run, nb)
            assert nb < shape.channels + shape.lanes, (shape, nb)  # no block wider than the channels need


@pytest.mark.parametrize("height, channels, steps", [(56, 64, 144), (28, 128, 288), (14, 256, 576), (7, 512, 1152)])
def test_two_threads_get_equal_shares_of_resnet_layers(height, channels, steps):
    """The deep layers were split into 7 or 13 tasks (one thread idle for a task's time); now within 3%."""
    shape = _dense(height, height, channels, steps)
    run, nb = task_split(shape, 1 << 30, 2)
    alone = makespan(shape, *task_split(shape, 1 << 30, 1), 1)
    assert makespan(shape, run, nb, 2) <= 1.03 * alone / 2, (run, nb)


def test_runs_are_whole_rows_where_rows_are_short():
    """A dense tile stays within a row: runs of whole rows leave no short tiles (28 = 7 + 7 + 7 + 7)."""
    for height, channels in ((28, 128), (14, 256), (7, 512), (7, 160)):
        run, _ = task_split(_dense(height, height, channels, 288), 1 << 30, 2)
        assert run % height == 0, (height, channels, run)


def test_split_work_gives_the_exact_sums_with_two_threads(monkeypatch, int8_path):
    """Whole-row runs, runs across rows (rows wider than a tile), several channel blocks and images, on
    every int8 dot-product path."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    rng = np.random.default_rng(7 + len(int8_path))
    shapes = [(1, 64, 7, 7, 130, 3, 1, 1, 1, 1), (2, 36, 14, 14, 70, 3, 1, 1, 1, 1),
              (1, 8, 3, 150, 40, 3, 1, 1, 1, 1), (1, 48, 13, 13, 48, 3, 2, 1, 1, 48),
              (1, 96, 9, 9, 96, 3, 1, 1, 1, 96)]
    layers = [_layer(rng, np.uint8, *shape, per_channel=True) for shape in shapes]
    with forced_conv_algorithm("direct"):  # the direct kernels' split (not Winograd's, winograd_u8s8.py)
        got, ops, _, _ = _run(layers)
    assert ops.count("conv2d_u8s8") == 3 and ops.count("depthwise_u8s8") == 2, ops
    for index, (layer, out) in enumerate(zip(layers, got)):
        scale = (np.float32(layer["x_scale"]) * layer["w_scale"]).astype(np.float32).reshape(-1, 1, 1)
        np.testing.assert_array_equal(out, _sums(layer).astype(np.float32) * scale, err_msg=f"layer {index}, {int8_path}")


@pytest.mark.parametrize("channels, expected", [(144, 32), (32, 32), (16, 16), (40, 32)])
def test_a_fixed_channel_block_leaves_only_the_run_to_choose(channels, expected):
    """AVX2 depthwise tasks take 32 channels (the epilogue's store width), or the layer's channels rounded
    up to the lanes where it has fewer; the run still fits the tile."""
    shape = TaskShape(1, 56, 56, channels, 16, 9, DEPTHWISE_TILE_PIXELS, False)
    for threads in (1, 2):
        run, nb = task_split(shape, 1 << 30, threads, 32)
        assert nb == expected and 1 <= run and run * nb * 4 <= TILE_BYTES, (run, nb)
