"""fuse(inner, outer, fused): two adjacent loops become one; checked when written and when lowered,
replayable as data, and the result never changes."""
from __future__ import annotations

import json

import numpy as np
import pytest

import blur
import tensorkiln.pipeline as pl

RNG = np.random.default_rng(5)


def tiles_fused(funcs, tile=(8, 4), vector=4):
    x, y = funcs["x"], funcs["y"]
    xi, yi, t = pl.Var("xi"), pl.Var("yi"), pl.Var("t")
    funcs["blur_y"].tile(x, y, xi, yi, *tile).fuse(x, y, t).parallel(t).vectorize(xi, vector)
    funcs["blur_x"].compute_at(funcs["blur_y"], t)


def rows_fused(funcs, tile=None, vector=None):  # the whole image as one loop, split again for threads
    x, y = funcs["x"], funcs["y"]
    xy, xo = pl.Var("xy"), pl.Var("xo")
    funcs["blur_y"].fuse(x, y, xy).split(xy, xo, x, 16).parallel(xo)
    funcs["blur_x"].compute_root().fuse(x, y, xy).vectorize(xy, 8)


@pytest.mark.parametrize("schedule", [tiles_fused, rows_fused])
@pytest.mark.parametrize("shape,tile", [((3, 3), (8, 4)), ((19, 37), (8, 4)), ((26, 11), (5, 3))])
def test_fused_loops_compute_what_numpy_does(schedule, shape, tile):
    image = RNG.integers(0, 65536, shape, dtype=np.uint16)
    out, size, funcs = blur.algorithm(image)
    schedule(funcs, tile)
    np.testing.assert_array_equal(out.realize(size), blur.reference(image))


def test_fuse_shows_one_loop_and_replays_as_data():
    image = RNG.integers(0, 65536, (23, 37), dtype=np.uint16)
    out, size, funcs = blur.algorithm(image)
    tiles_fused(funcs)
    text = out.explain(size)
    assert ".fuse(x, y, t)" in text and "for blur_y_s0_t in 0..30 (parallel)" in text   # 5 x 6 tiles
    assert "blur_x: 6x8 computed at blur_y.t" in text
    data = json.loads(json.dumps(pl.schedule_data(out)))
    fresh, _, _ = blur.algorithm(image)
    pl.apply_schedule(fresh, data)
    assert fresh.explain(size) == text


def test_fuse_refuses_loops_that_are_not_adjacent_or_a_taken_name():
    image = RNG.integers(0, 65536, (10, 12), dtype=np.uint16)
    out, size, funcs = blur.algorithm(image)
    x, y = funcs["x"], funcs["y"]
    xi, yi = pl.Var("xi"), pl.Var("yi")
    out.tile(x, y, xi, yi, 4, 4)
    with pytest.raises(pl.ScheduleStepError, match="x must be the loop just outside xi"):
        out.fuse(xi, x, pl.Var("t"))
    with pytest.raises(pl.ScheduleStepError, match="the name yi is already a loop"):
        out.fuse(x, y, yi)
    with pytest.raises(pl.ScheduleStepError, match="no loop q"):
        out.fuse(pl.Var("q"), y, pl.Var("t"))
    out.fuse(xi, yi, pl.Var("i"))                  # inner loops of one tile: 16 points in one loop
    np.testing.assert_array_equal(out.realize(size), blur.reference(image))


def test_an_update_fuses_its_reduction_loops():
    image = RNG.integers(0, 16, (7, 9), dtype=np.uint8)
    inp = pl.Buffer(image, "img")
    i = pl.Var("i")
    r = pl.RDom(0, 9, 0, 7, name="r")
    hist = pl.Func("hist")
    hist[i] = 0
    hist[pl.cast(pl.Int(32), inp[r.x, r.y])] += 1
    hist.update(0).fuse(r.x, r.y, pl.Var("rr"))
    assert "for hist_s1_rr in 0..63" in hist.explain([16])
    np.testing.assert_array_equal(hist.realize([16]), np.bincount(image.ravel(), minlength=16))
