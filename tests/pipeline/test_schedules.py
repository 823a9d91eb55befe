"""Schedules change how a pipeline runs, never what it computes: the blur under many schedules, odd sizes
and tails included, against numpy; illegal steps are refused with the reason; schedules replay as data."""
from __future__ import annotations

import json

import numpy as np
import pytest

import blur
import tensorkiln.pipeline as pl

RNG = np.random.default_rng(3)


def tiled(f, tile=(16, 8), vector=8):
    x, y = f["x"], f["y"]
    xi, yi = pl.Var("xi"), pl.Var("yi")
    f["blur_y"].tile(x, y, xi, yi, *tile).vectorize(xi, vector).parallel(y)
    f["blur_x"].compute_at(f["blur_y"], x).vectorize(x, vector)


def rows(f):  # blur_x per output row: a window of 3 rows each time
    x, y = f["x"], f["y"]
    f["blur_y"].split(y, y, pl.Var("yi"), 4).parallel(y).vectorize(x, 8)
    f["blur_x"].compute_at(f["blur_y"], pl.Var("yi")).vectorize(x, 4)


def root(f):
    x, y = f["x"], f["y"]
    f["blur_x"].compute_root().unroll(x, 2).parallel(y)
    f["blur_y"].reorder(y, x).vectorize(y, 4)           # y innermost: columns


def nested(f):  # blur_x at the tile's inner row loop, inside the parallel tile rows
    x, y = f["x"], f["y"]
    xi, yi, xo, yo = pl.Var("xi"), pl.Var("yi"), pl.Var("xo"), pl.Var("yo")
    f["blur_y"].tile(x, y, xo, yo, xi, yi, 8, 5).parallel(yo).unroll(xi, 2)
    f["blur_x"].compute_at(f["blur_y"], yi)


def sliding_root(f):  # stored whole, computed row by row: each row after the first computes one new row
    x, y = f["x"], f["y"]
    f["blur_y"].vectorize(x, 8)
    f["blur_x"].store_root().compute_at(f["blur_y"], y).vectorize(x, 4)


def sliding_strips(f):  # Halide's sliding window inside parallel strips of rows
    x, y = f["x"], f["y"]
    yo, yi = pl.Var("yo"), pl.Var("yi")
    f["blur_y"].split(y, yo, yi, 4).parallel(yo).vectorize(x, 8)
    f["blur_x"].store_at(f["blur_y"], yo).compute_at(f["blur_y"], yi).vectorize(x, 8)


SCHEDULES = {"default": lambda f: None, "tiled": tiled, "tiled_tails": lambda f: tiled(f, (7, 3), 4),
             "rows": rows, "root": root, "nested": nested, "sliding_root": sliding_root,
             "sliding_strips": sliding_strips}


@pytest.mark.parametrize("name", list(SCHEDULES))
@pytest.mark.parametrize("shape", [(3, 3), (19, 37)])
def test_blur_under_every_schedule_matches_numpy(name, shape):
    image = RNG.integers(0, 65536, shape, dtype=np.uint16)
    out, size, funcs = blur.algorithm(image)
    SCHEDULES[name](funcs)
    np.testing.assert_array_equal(out.realize(size), blur.reference(image))


def test_explain_shows_the_loop_nest_each_schedule_makes():
    image = RNG.integers(0, 65536, (34, 66), dtype=np.uint16)
    out, size, funcs = blur.algorithm(image)
    before = out.explain(size)
    assert "blur_x: inline" in before and "alloc" not in before
    tiled(funcs)
    after = out.explain(size)
    assert "compute_at(blur_y, x)" in after and ".split(x, x, xi, 16)" in after
    assert "alloc blur_x: uint16[10, 16]" in after          # a 16 x 8 tile needs 10 rows of blur_x
    assert "for blur_y_s0_y in 0..4 (parallel)" in after and "(vectorized)" in after


def test_store_at_slides_the_window_and_refuses_sharing_across_threads():
    image = RNG.integers(0, 65536, (23, 37), dtype=np.uint16)
    out, size, funcs = blur.algorithm(image)
    sliding_strips(funcs)
    nest = out.explain(size, fold_storage=False).split("loop nest:")[1]
    assert "alloc blur_x: uint16[6, 35]" in nest.split("for blur_y_s0_yi")[0]   # a strip of 4 rows needs 6
    assert "where(blur_y_s0_yi == 0" in nest                                     # first row: 3; then 1 new row
    out, size, funcs = blur.algorithm(image)
    funcs["blur_y"].parallel(funcs["y"])
    funcs["blur_x"].store_root().compute_at(funcs["blur_y"], funcs["y"])
    with pytest.raises(pl.PipelineError, match="stored outside the parallel loop y"):
        out.realize(size)


def test_schedule_is_replayable_data():
    image = RNG.integers(0, 65536, (21, 30), dtype=np.uint16)
    out, size, funcs = blur.algorithm(image)
    tiled(funcs, (8, 4))
    data = json.loads(json.dumps(pl.schedule_data(out)))
    text = out.explain(size)
    fresh, _, _ = blur.algorithm(image)
    pl.apply_schedule(fresh, data)
    assert fresh.explain(size).split("loop nest:")[1] == text.split("loop nest:")[1]


def test_illegal_steps_are_refused_with_the_reason():
    image = RNG.integers(0, 65536, (10, 12), dtype=np.uint16)
    out, size, f = blur.algorithm(image)
    x, y = f["x"], f["y"]
    with pytest.raises(pl.ScheduleStepError, match="no loop q"):
        out.split(pl.Var("q"), x, pl.Var("xi"), 4)
    with pytest.raises(pl.ScheduleStepError, match="factor must be a positive integer"):
        out.vectorize(x, 0)
    with pytest.raises(pl.ScheduleStepError, match="already a loop"):
        out.split(x, y, pl.Var("xi"), 4)
    with pytest.raises(pl.PipelineError, match="has no loop zz"):
        f["blur_x"].compute_at(out, pl.Var("zz"))
    out2, size2, g = blur.algorithm(image)
    out2.vectorize(g["y"], 4)                             # y is not innermost: the loop primitive refuses
    with pytest.raises(pl.PipelineError, match="cannot vectorize loop y_v: it contains loop"):
        out2.realize(size2)


def test_a_scatter_update_cannot_run_in_parallel():
    img = RNG.integers(0, 9, (5, 7), dtype=np.uint8)
    inp = pl.Buffer(img, "img")
    x = pl.Var("x")
    r = pl.RDom(0, 7, 0, 5)
    hist = pl.Func("hist")
    hist[x] = 0
    hist[pl.cast(pl.Int(32), inp[r.x, r.y])] += 1
    hist.update(0).parallel(r.y)
    with pytest.raises(pl.PipelineError, match="cannot parallelize loop r.*_y: it scatters into hist"):
        hist.realize([16])
