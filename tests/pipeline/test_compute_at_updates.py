"""compute_at of a Func with update definitions: a scan per output row and a histogram per output tile,
computed inside the consumer's loop over the region bounds inference gives (the update's RDom included)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln.pipeline as pl

RNG = np.random.default_rng(23)


@pytest.mark.parametrize("shape", [(1, 1), (9, 13), (4, 31)])
def test_a_row_scan_computed_per_output_row(shape):
    h, w = shape
    image = RNG.integers(-50, 100, shape).astype(np.int32)
    inp = pl.Buffer(image, "image")
    x, y = pl.Var("x"), pl.Var("y")
    scan = pl.Func("scan")
    scan[x, y] = inp[x, y]
    if w > 1:
        r = pl.RDom(1, w - 1, name="r")
        scan[r.x, y] = scan[r.x - 1, y] + inp[r.x, y]
    out = pl.Func("out")
    out[x, y] = scan[x, y] * 2 - inp[x, y]
    out.parallel(y).vectorize(x, 8)
    scan.compute_at(out, y)
    np.testing.assert_array_equal(out.realize([w, h]), np.cumsum(image, axis=1) * 2 - image)
    text = out.explain([w, h])
    assert f"scan: 1x{w} computed at out.y" in text
    if w > 1:
        assert "scan.update(0): where the pure definition is" in text


@pytest.mark.parametrize("shape,tile", [((13, 21), 4), ((8, 8), 4), ((5, 3), 2)])
def test_a_histogram_per_tile_computed_inside_the_tile(shape, tile):
    h, w = shape
    image = RNG.integers(0, 12, shape, dtype=np.uint8)
    inp = pl.Buffer(image, "image")
    x, y, i, tx, ty = (pl.Var(n) for n in ("x", "y", "i", "tx", "ty"))
    c = pl.repeat_edge(inp)
    r = pl.RDom(0, tile, 0, tile, name="r")
    level = lambda v: pl.cast(pl.Int(32), pl.min(v, 7))           # noqa: E731  (8 bins; bound by the min)
    hist = pl.Func("hist")
    hist[i, tx, ty] = pl.cast(pl.UInt(16), 0)
    hist[level(c[tx * tile + r.x, ty * tile + r.y]), tx, ty] += pl.cast(pl.UInt(16), 1)
    out = pl.Func("out")                                          # how many pixels of my tile share my level
    out[x, y] = hist[level(c[x, y]), x // tile, y // tile]
    xo, yo, xi, yi = pl.Var("xo"), pl.Var("yo"), pl.Var("xi"), pl.Var("yi")
    out.tile(x, y, xo, yo, xi, yi, tile, tile).parallel(yo)
    hist.compute_at(out, xo)
    padded = np.minimum(np.pad(image, ((0, tile), (0, tile)), mode="edge"), 7)
    want = np.empty(shape, np.uint16)
    for yy in range(h):
        for xx in range(w):
            block = padded[yy // tile * tile:][:tile, xx // tile * tile:][:, :tile]
            want[yy, xx] = np.count_nonzero(block == min(image[yy, xx], 7))
    np.testing.assert_array_equal(out.realize([w, h]), want)
    assert "hist: " in out.explain([w, h]).split("storage")[1]


@pytest.mark.parametrize("shape", [(1, 1), (11, 17)])
def test_a_producer_computed_inside_the_consumers_update_loop(shape):
    """Halide's rule: compute_at(f, v) names a loop of f's last stage; here a blurred row inside the
    histogram's scatter over the rows."""
    h, w = shape
    image = RNG.integers(0, 250, shape, dtype=np.uint8)
    inp = pl.Buffer(image, "image")
    x, y, i = pl.Var("x"), pl.Var("y"), pl.Var("i")
    c = pl.repeat_edge(inp)
    row = pl.Func("row")
    row[x, y] = pl.cast(pl.UInt(8), (pl.cast(pl.UInt(16), c[x - 1, y]) + c[x, y] + c[x + 1, y]) / 3)
    r = pl.RDom(0, w, 0, h, name="r")
    hist = pl.Func("hist")
    hist[i] = 0
    hist[pl.cast(pl.Int(32), row[r.x, r.y])] += 1
    with pytest.raises(pl.PipelineError, match=r"hist.update\(0\) has no loop i \(its loops, innermost first: r_x, r_y\)"):
        row.compute_at(hist, i)
    row.compute_at(hist, r.y).vectorize(x, 8)
    padded = np.pad(image.astype(np.uint16), ((0, 0), (1, 1)), mode="edge")
    blurred = ((padded[:, :-2] + padded[:, 1:-1] + padded[:, 2:]) // 3).astype(np.uint8)
    np.testing.assert_array_equal(hist.realize([256]), np.bincount(blurred.ravel(), minlength=256))
    assert f"row: 1x{w} computed at hist.r_y" in hist.explain([256])
