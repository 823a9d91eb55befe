"""Bilateral filter by the bilateral grid (Chen, Paris and Durand 2007), as in Halide's app.

    python examples/pipelines/bilateral_grid.py

1. A coarse 3-D grid (x/8, y/8, intensity/0.1) with two channels: each
   pixel adds its value and a count to the cell its intensity falls in (an
   update definition over an 8x8 RDom per cell, whose z coordinate is data);
2. the grid blurred along z, x and y (5-tap binomial);
3. each pixel reads the blurred grid at its position and intensity,
   trilinearly, and divides value by count.

Bounds inference works on integers: a float converted to an integer (the
intensity bin) is clamped to the bins so the grid's region is known; for
values in [0, 1] the clamp changes nothing.
"""
from __future__ import annotations

import numpy as np

import tensorkiln.pipeline as pl

S_SIGMA = 8
R_SIGMA = 0.1
BINS = int(round(1 / R_SIGMA))  # intensity bins 0..BINS


def lerp(a, b, w):
    return a + w * (b - a)


def algorithm(image: np.ndarray):
    """(output Func, its size [W, H], the Funcs by name) for an (H, W) float32 image in [0, 1]."""
    x, y, z, c = pl.Var("x"), pl.Var("y"), pl.Var("z"), pl.Var("c")
    inp = pl.Buffer(image, "input")
    clamped = pl.repeat_edge(inp)

    r = pl.RDom(0, S_SIGMA, 0, S_SIGMA, name="r")
    val = pl.clamp(clamped[x * S_SIGMA + r.x - S_SIGMA // 2, y * S_SIGMA + r.y - S_SIGMA // 2], 0.0, 1.0)
    zi = pl.clamp(pl.cast(pl.Int(32), val * (1.0 / R_SIGMA) + 0.5), 0, BINS)
    histogram = pl.Func("histogram")
    histogram[x, y, z, c] = 0.0
    histogram[x, y, zi, c] += pl.select(c == 0, val, 1.0)

    blurz, blurx, blury = pl.Func("blurz"), pl.Func("blurx"), pl.Func("blury")
    blurz[x, y, z, c] = (histogram[x, y, z - 2, c] + histogram[x, y, z - 1, c] * 4.0 + histogram[x, y, z, c] * 6.0
                         + histogram[x, y, z + 1, c] * 4.0 + histogram[x, y, z + 2, c])
    blurx[x, y, z, c] = (blurz[x - 2, y, z, c] + blurz[x - 1, y, z, c] * 4.0 + blurz[x, y, z, c] * 6.0
                         + blurz[x + 1, y, z, c] * 4.0 + blurz[x + 2, y, z, c])
    blury[x, y, z, c] = (blurx[x, y - 2, z, c] + blurx[x, y - 1, z, c] * 4.0 + blurx[x, y, z, c] * 6.0
                         + blurx[x, y + 1, z, c] * 4.0 + blurx[x, y + 2, z, c])

    v = pl.clamp(inp[x, y], 0.0, 1.0)
    zv = v * (1.0 / R_SIGMA)
    zint = pl.clamp(pl.cast(pl.Int(32), zv), 0, BINS - 1)
    zf = zv - pl.cast(pl.Float(32), zint)
    xf = pl.cast(pl.Float(32), x % S_SIGMA) / S_SIGMA
    yf = pl.cast(pl.Float(32), y % S_SIGMA) / S_SIGMA
    xi, yi = x / S_SIGMA, y / S_SIGMA
    interpolated = pl.Func("interpolated")
    interpolated[x, y, c] = lerp(
        lerp(lerp(blury[xi, yi, zint, c], blury[xi + 1, yi, zint, c], xf),
             lerp(blury[xi, yi + 1, zint, c], blury[xi + 1, yi + 1, zint, c], xf), yf),
        lerp(lerp(blury[xi, yi, zint + 1, c], blury[xi + 1, yi, zint + 1, c], xf),
             lerp(blury[xi, yi + 1, zint + 1, c], blury[xi + 1, yi + 1, zint + 1, c], xf), yf), zf)
    out = pl.Func("bilateral_grid")
    out[x, y] = interpolated[x, y, 0] / interpolated[x, y, 1]
    height, width = image.shape
    funcs = {"histogram": histogram, "blurz": blurz, "blurx": blurx, "blury": blury, "bilateral_grid": out,
             "x": x, "y": y, "z": z, "c": c}
    return out, [width, height], funcs


def hand_schedule(funcs: dict, vector: int = 16) -> None:
    """Halide's CPU schedule: the grid per row of blurz, the blurs at the root, parallel and vectorized.

    (Halide unrolls c inside the vectorized x; here a vectorized loop must be innermost, so c moves out.)
    """
    x, y, z, c = funcs["x"], funcs["y"], funcs["z"], funcs["c"]
    funcs["histogram"].compute_at(funcs["blurz"], y)
    funcs["blurz"].compute_root().reorder(x, c, z, y).parallel(y).vectorize(x, 8)
    funcs["blurx"].compute_root().reorder(x, c, y, z).parallel(z).vectorize(x, 8)
    funcs["blury"].compute_root().reorder(x, c, y, z).parallel(z).vectorize(x, 8)
    funcs["bilateral_grid"].parallel(y).vectorize(x, vector)


def reference(image: np.ndarray) -> np.ndarray:
    """numpy, float32, the same grid."""
    h, w = image.shape
    f32 = np.float32
    gx0, gy0, gz0 = -2, -2, -2
    nx, ny, nz = (w - 1) // S_SIGMA + 6, (h - 1) // S_SIGMA + 6, BINS + 5
    hist = np.zeros((2, nz, ny, nx), np.float32)
    gy, gx, ry, rx = np.meshgrid(np.arange(ny) + gy0, np.arange(nx) + gx0, np.arange(S_SIGMA), np.arange(S_SIGMA),
                                 indexing="ij")
    py = np.clip(gy * S_SIGMA + ry - S_SIGMA // 2, 0, h - 1)
    px = np.clip(gx * S_SIGMA + rx - S_SIGMA // 2, 0, w - 1)
    val = np.clip(image[py, px], f32(0), f32(1))
    zi = np.clip((val * f32(1 / R_SIGMA) + f32(0.5)).astype(np.int32), 0, BINS)
    cells = (zi - gz0, gy - gy0, gx - gx0)
    np.add.at(hist[0], cells, val)
    np.add.at(hist[1], cells, f32(1))
    taps = (f32(1), f32(4), f32(6), f32(4), f32(1))

    def blur(a, axis):
        n = a.shape[axis] - 4
        out = sum(t * np.take(a, np.arange(k, k + n), axis=axis) for k, t in enumerate(taps))
        return out

    b = blur(blur(blur(hist, 1), 3), 2)  # z, x, y: grid origin moves to (0, 0, 0)
    yy, xx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    v = np.clip(image, f32(0), f32(1))
    zv = v * f32(1 / R_SIGMA)
    zint = np.clip(zv.astype(np.int32), 0, BINS - 1)
    zf = zv - zint.astype(np.float32)
    xf = (xx % S_SIGMA).astype(np.float32) / f32(S_SIGMA)
    yf = (yy % S_SIGMA).astype(np.float32) / f32(S_SIGMA)
    xi, yi = xx // S_SIGMA, yy // S_SIGMA

    def at(ch, dx, dy, dz):
        return b[ch, zint + dz, yi + dy, xi + dx]

    def interp(ch):
        lo = lerp(lerp(at(ch, 0, 0, 0), at(ch, 1, 0, 0), xf), lerp(at(ch, 0, 1, 0), at(ch, 1, 1, 0), xf), yf)
        hi = lerp(lerp(at(ch, 0, 0, 1), at(ch, 1, 0, 1), xf), lerp(at(ch, 0, 1, 1), at(ch, 1, 1, 1), xf), yf)
        return lerp(lo, hi, zf)

    return interp(0) / interp(1)


def main() -> None:
    image = np.random.default_rng(0).random((240, 320), dtype=np.float32)
    out, size, funcs = algorithm(image)
    hand_schedule(funcs)
    result = out.realize(size)
    np.testing.assert_allclose(result, reference(image), rtol=2e-4, atol=1e-5)
    print(f"bilateral grid of a {image.shape} float32 image matches numpy")


if __name__ == "__main__":
    main()
