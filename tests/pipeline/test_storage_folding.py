"""Storage folding: a producer stored outside the loop it is computed in keeps only its window's rows, in a
circle of a power-of-two extent; the results equal numpy's and the unfolded schedule's."""
from __future__ import annotations

import numpy as np
import pytest

import blur
import tensorkiln.pipeline as pl

RNG = np.random.default_rng(11)


def strips(funcs, strip: int, vector: int):
    x, y = funcs["x"], funcs["y"]
    yo, yi = pl.Var("yo"), pl.Var("yi")
    funcs["blur_y"].split(y, yo, yi, strip).parallel(yo).vectorize(x, vector)
    funcs["blur_x"].store_at(funcs["blur_y"], yo).compute_at(funcs["blur_y"], yi).vectorize(x, vector)


def whole(funcs, strip: int, vector: int):
    funcs["blur_y"].vectorize(funcs["x"], vector)
    funcs["blur_x"].store_root().compute_at(funcs["blur_y"], funcs["y"])


@pytest.mark.parametrize("schedule", [strips, whole])
@pytest.mark.parametrize("shape,strip,vector", [((3, 3), 4, 8), ((4, 17), 1, 4), ((19, 37), 4, 8),
                                                ((30, 9), 7, 16), ((45, 33), 16, 8)])
def test_folded_blur_matches_numpy_and_the_unfolded_buffer(schedule, shape, strip, vector):
    image = RNG.integers(0, 65536, shape, dtype=np.uint16)
    out, size, funcs = blur.algorithm(image)
    schedule(funcs, strip, vector)
    folded = out.realize(size)
    np.testing.assert_array_equal(folded, blur.reference(image))
    np.testing.assert_array_equal(folded, out.compile(size, fold_storage=False)())


def test_explain_shows_the_fold_and_the_bytes_it_saves():
    image = RNG.integers(0, 65536, (23, 37), dtype=np.uint16)
    out, size, funcs = blur.algorithm(image)
    strips(funcs, 4, 8)
    folded, unfolded = out.explain(size), out.explain(size, fold_storage=False)
    assert "alloc blur_x: uint16[4, 35]" in folded           # a 3-row window rounds up to 4 slots
    assert "& 3)*35" in folded                                # row r lives in slot r & 3
    assert "blur_x: 4x35 stored at blur_y.yo, 280 bytes, folded in dimension 1: 4 of 6 (unfolded: 420 bytes)" \
        in folded
    assert "alloc blur_x: uint16[6, 35]" in unfolded and "& 3" not in unfolded
    assert "420 bytes in buffers" in unfolded


def test_a_five_row_window_folds_to_eight_and_a_func_with_updates_is_not_folded():
    h, w = 29, 21
    image = RNG.random((h, w), dtype=np.float32)
    x, y, yo, yi = pl.Var("x"), pl.Var("y"), pl.Var("yo"), pl.Var("yi")
    inp = pl.Buffer(image, "image")
    clamped = pl.repeat_edge(inp)
    row = pl.Func("row")
    row[x, y] = clamped[x, y] * 2.0
    out = pl.Func("out")
    out[x, y] = row[x, y - 2] + row[x, y - 1] + row[x, y] + row[x, y + 1] + row[x, y + 2]
    out.split(y, yo, yi, 8).parallel(yo)
    row.store_at(out, yo).compute_at(out, yi)
    padded = np.pad(image, 2, mode="edge")[:, 2:-2] * np.float32(2)
    reference = sum(padded[k:k + h] for k in range(5))
    np.testing.assert_allclose(out.realize([w, h]), reference, rtol=1e-6)
    assert "row: 8x21 stored at out.yo" in out.explain([w, h])          # 12 rows per strip, 5 per window

    counts = pl.Func("counts")                    # an update reads the Func itself: stays whole
    counts[x, y] = pl.cast(pl.Int(32), clamped[x, y] * 4.0)
    r = pl.RDom(1, w - 1, name="r")
    counts[r.x, y] = counts[r.x - 1, y] + counts[r.x, y]
    total = pl.Func("total")
    total[x, y] = counts[x, y - 1] + counts[x, y]
    total.split(y, yo, yi, 4).parallel(yo)
    counts.store_at(total, yo).compute_at(total, yi)
    scan = np.cumsum((np.pad(image, ((1, 0), (0, 0)), mode="edge") * 4).astype(np.int32), axis=1)
    np.testing.assert_array_equal(total.realize([w, h]), scan[:-1] + scan[1:])
    assert "folded" not in total.explain([w, h])
