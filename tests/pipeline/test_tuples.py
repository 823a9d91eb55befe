"""Tuple Funcs: `f[x, y] = (a, b)`, `f[x, y][k]`, realize giving a tuple of arrays; values computed in one
loop nest, an update reading every value before writing any (argmax), under several schedules."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln.pipeline as pl
from tensorkiln.errors import DTypeError

RNG = np.random.default_rng(17)


def gradient_pipeline(image: np.ndarray):
    """A Tuple of (dx, dy) of a clamped image, and a consumer reading both values at neighbouring points."""
    x, y = pl.Var("x"), pl.Var("y")
    inp = pl.Buffer(image, "image")
    c = pl.repeat_edge(inp)
    grad = pl.Func("grad")
    grad[x, y] = (c[x + 1, y] - c[x, y], pl.cast(pl.Int(16), c[x, y + 1]) - pl.cast(pl.Int(16), c[x, y]))
    mag = pl.Func("mag")
    mag[x, y] = (grad[x, y][0] * grad[x, y][0] + grad[x - 1, y][0],
                 grad[x, y][1] + grad[x, y - 1][1])
    return mag, grad, x, y


def gradient_reference(image: np.ndarray):
    p = np.pad(image.astype(np.float32), 1, mode="edge")
    dx = p[1:-1, 2:] - p[1:-1, 1:-1]
    dx_left = p[1:-1, 1:-1] - p[1:-1, :-2]
    q = np.pad(image, 2, mode="edge").astype(np.int16)
    dy = q[3:-1, 2:-2] - q[2:-2, 2:-2]
    dy_up = q[2:-2, 2:-2] - q[1:-3, 2:-2]
    return dx * dx + dx_left, dy + dy_up


def inline(grad, mag, x, y):
    pass


def tiled(grad, mag, x, y):
    xi, yi = pl.Var("xi"), pl.Var("yi")
    mag.tile(x, y, xi, yi, 8, 4).vectorize(xi, 4).parallel(y)
    grad.compute_at(mag, x).vectorize(x, 4)


def sliding(grad, mag, x, y):
    yo, yi = pl.Var("yo"), pl.Var("yi")
    mag.split(y, yo, yi, 4).parallel(yo)
    grad.store_at(mag, yo).compute_at(mag, yi)


@pytest.mark.parametrize("schedule", [inline, tiled, sliding])
@pytest.mark.parametrize("shape", [(1, 1), (5, 17), (13, 9)])
def test_tuple_values_match_numpy_under_every_schedule(schedule, shape):
    image = RNG.integers(0, 200, shape).astype(np.float32)
    mag, grad, x, y = gradient_pipeline(image)
    schedule(grad, mag, x, y)
    got = mag.realize([shape[1], shape[0]])
    assert isinstance(got, tuple) and len(got) == 2 and got[1].dtype == np.int16
    want = gradient_reference(image)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_array_equal(got[1], want[1])


def test_argmax_update_reads_every_value_before_writing_any():
    image = RNG.random((7, 23), dtype=np.float32)
    inp = pl.Buffer(image, "image")
    y = pl.Var("y")
    r = pl.RDom(0, 23, name="r")
    best = pl.Func("best")
    best[y] = (pl.cast(pl.Float(32), -1.0), 0)
    better = inp[r.x, y] > best[y][0]
    best[y] = (pl.select(better, inp[r.x, y], best[y][0]), pl.select(better, r.x, best[y][1]))
    best.parallel(y)
    value, index = best.realize([7])
    np.testing.assert_array_equal(value, image.max(axis=1))
    np.testing.assert_array_equal(index, image.argmax(axis=1))
    text = best.explain([7])
    assert "best(y) = {-1.0, 0}" in text and "best_0: float32[7], best_1: int32[7]" in text
    out = (np.empty(7, np.float32), np.empty(7, np.int32))
    assert best.compile([7])(out=out) is out and np.array_equal(out[1], index)


def test_tuple_misuse_is_refused_with_the_fix():
    x = pl.Var("x")
    f = pl.Func("f")
    f[x] = (x, pl.cast(pl.Float(32), x))
    g = pl.Func("g")
    with pytest.raises(DTypeError, match=r"Tuple of 2 values .*f\[\.\.\.\]\[k\]"):
        g[x] = f[x] + 1
    with pytest.raises(DTypeError, match="index it with 0 to 1"):
        f[x][2]
    r = pl.RDom(0, 3)
    with pytest.raises(pl.PipelineError, match="gives 1 value"):
        f[r.x] = f[r.x][0] + 1
    with pytest.raises(DTypeError, match="value 1 type int32, but f value 1 is float32"):
        f[r.x] = (f[r.x][0], f[r.x][0])
