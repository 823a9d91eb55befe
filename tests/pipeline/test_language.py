"""The language's meaning against numpy: Halide's type rules, wrapping, floor division, select, casts,
boundary conditions and update definitions (each compiled through C)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln.pipeline as pl
from tensorkiln.errors import DTypeError
from tensorkiln.pipeline import types as T

RNG = np.random.default_rng(7)


def test_type_promotion_follows_halide():
    assert T.promote("uint16", "uint16") == "uint16"
    assert T.promote("uint8", "uint16") == "uint16"
    assert T.promote("int16", "uint16") == "int16"       # signed of the greater width
    assert T.promote("uint32", "int8") == "int32"
    assert T.promote("int32", "float32") == "float32"
    assert T.promote("float32", "float64") == "float64"
    x = pl.Var("x")
    b = pl.Buffer(np.zeros((2, 3), np.uint16), "b")
    assert (b[x, 0] + 1).type == "uint16"                 # a Python int takes the expression's type
    assert (b[x, 0] * 0.5).type == "float32"              # a Python float makes float32
    assert (x + 1).type == "int32" and (x * 1.5).type == "float32"
    assert pl.cast(pl.UInt(8), x).type == "uint8" and (b[x, 0] > 3).type == "bool"
    with pytest.raises(DTypeError, match="70000 does not fit in uint16"):
        b[x, 0] + 70000
    with pytest.raises(TypeError, match="no truth value"):
        bool(x < 3)


@pytest.mark.parametrize("shape", [(1, 1), (5, 37), (17, 3)])
def test_uint16_wraps_and_integer_division_floors(shape):
    h, w = shape
    a = RNG.integers(0, 65536, shape, dtype=np.uint16)
    s = RNG.integers(-300, 300, shape, dtype=np.int16)
    x, y = pl.Var("x"), pl.Var("y")
    A, S = pl.Buffer(a, "a"), pl.Buffer(s, "s")
    # five uint16 results side by side in one output row block (one compile)
    f = pl.Func("f")
    k = y / h                                              # which expression, by row block
    yy = y % h
    d = pl.cast(pl.Int(32), S[x, yy])
    choices = [
        A[x, yy] * 3 + 40000,                              # wraps at 65536
        A[x, yy] - A[w - 1 - x, yy],                       # negative differences wrap
        pl.cast(pl.UInt(16), (d - 7) / 4 + 1000),          # floor division of negatives
        pl.cast(pl.UInt(16), d % 7 + (d % -5) * 10 + 100), # Euclidean modulo: never negative
        pl.cast(pl.UInt(16), (d / -3) + 500) + pl.abs(pl.cast(pl.Int(16), d) * 100),  # abs(int16) is uint16
    ]
    expr = choices[-1]
    for n in reversed(range(len(choices) - 1)):
        expr = pl.select(k == n, choices[n], expr)
    f[x, y] = expr
    out = f.realize([w, h * len(choices)]).reshape(len(choices), h, w).astype(np.int64)
    a64, d64 = a.astype(np.int64), s.astype(np.int64)
    np.testing.assert_array_equal(out[0], (a64 * 3 + 40000) % 65536)
    np.testing.assert_array_equal(out[1], (a64 - a64[:, ::-1]) % 65536)
    np.testing.assert_array_equal(out[2], (np.floor_divide(d64 - 7, 4) + 1000) % 65536)
    np.testing.assert_array_equal(out[3], (np.mod(d64, 7) + np.mod(d64, 5) * 10 + 100) % 65536)
    euclid = -np.floor_divide(d64, 3)  # dividing by -3: the quotient whose remainder is >= 0
    wrapped = (d64 * 100 + 32768) % 65536 - 32768  # int16 product wraps before abs
    np.testing.assert_array_equal(out[4], (euclid + 500 + np.abs(wrapped)) % 65536)


def test_float_math_select_clamp_and_casts():
    a = RNG.uniform(-3, 3, (4, 21)).astype(np.float32)
    x, y = pl.Var("x"), pl.Var("y")
    A = pl.Buffer(a, "a")
    f = pl.Func("f")
    v = A[x, y]
    f[x, y] = (pl.select(v > 0, pl.sqrt(v), -v) + pl.clamp(v, -1.0, 1.0) * 2.0 - pl.max(v, 0.5) / pl.min(v, -0.5)
               + pl.cast(pl.Float(32), pl.cast(pl.Int(32), v * 10.0)) + pl.floor(v) * 0.25 + v / 3.0)
    out = f.realize([21, 4])
    ref = (np.where(a > 0, np.sqrt(np.abs(a)), -a) + np.clip(a, -1, 1) * 2 - np.maximum(a, 0.5) / np.minimum(a, -0.5)
           + np.trunc(a * np.float32(10)) + np.floor(a) * 0.25 + a / np.float32(3))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_boundary_conditions_match_numpy_pad():
    img = RNG.integers(0, 256, (9, 14), dtype=np.uint8)
    x, y = pl.Var("x"), pl.Var("y")
    inp = pl.Buffer(img, "img")
    edge, mirror, const = pl.repeat_edge(inp), pl.mirror_image(inp), pl.constant_exterior(inp, 7)
    f = pl.Func("f")
    # three conditions stacked in row blocks, read well outside the image (more than one reflection)
    k, yy = y / 9, y % 9
    f[x, y] = pl.select(k == 0, edge[x - 20, yy + 5], pl.select(k == 1, mirror[x - 20, yy + 15], const[x - 3, yy - 2]))
    out = f.realize([14, 27]).reshape(3, 9, 14)
    pad = 40
    for n, mode, dx, dy in ((0, "edge", -20, 5), (1, "symmetric", -20, 15), (2, "constant", -3, -2)):
        p = np.pad(img, pad, mode=mode, **({"constant_values": 7} if mode == "constant" else {}))
        np.testing.assert_array_equal(out[n], p[pad + dy:pad + dy + 9, pad + dx:pad + dx + 14], err_msg=mode)


def test_update_definitions_histogram_scan_and_columns():
    img = RNG.integers(0, 50, (6, 11), dtype=np.uint8)
    x, y = pl.Var("x"), pl.Var("y")
    inp = pl.Buffer(img, "img")
    r = pl.RDom(0, inp.width(), 0, inp.height())
    hist = pl.Func("hist")
    hist[x] = 0
    hist[pl.cast(pl.Int(32), inp[r.x, r.y])] += 1
    scan = pl.Func("scan")
    s = pl.RDom(1, 63)
    scan[x] = hist[x]
    scan[s.x] = scan[s.x - 1] + hist[s.x]
    colsum = pl.Func("colsum")                            # an update with a pure Var: one sum per column
    c = pl.RDom(0, inp.height())
    colsum[x] = pl.cast(pl.UInt(16), 0)
    colsum[x] = colsum[x] + pl.cast(pl.UInt(16), inp[x, c.x])
    out = pl.Func("out")
    out[x] = scan[x] * 1000 + pl.cast(pl.Int(32), colsum[x % 11])
    result = out.realize([64])
    expected = np.cumsum(np.bincount(img.ravel(), minlength=64)) * 1000 + img.sum(axis=0).astype(np.int64)[np.arange(64) % 11]
    np.testing.assert_array_equal(result, expected)
