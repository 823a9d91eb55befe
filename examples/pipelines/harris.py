"""Harris corner response of a float32 image: Sobel gradients, their products summed over 3x3, det - k trace^2.

    python examples/pipelines/harris.py

The hand schedule is Halide's for its harris app: the output in tiles,
vectorized, rows of tiles in parallel; the gradients computed per tile, the
products inlined into the 3x3 sums that read them.
"""
from __future__ import annotations

import numpy as np

import tensorkiln.pipeline as pl

K = 0.04


def algorithm(image: np.ndarray):
    """(output Func, its size [W, H], the Funcs by name) for an (H, W) float32 image."""
    x, y = pl.Var("x"), pl.Var("y")
    inp = pl.Buffer(image, "input")
    g = pl.repeat_edge(inp)
    ix, iy = pl.Func("Ix"), pl.Func("Iy")
    ix[x, y] = ((g[x + 1, y - 1] - g[x - 1, y - 1]) + 2.0 * (g[x + 1, y] - g[x - 1, y])
                + (g[x + 1, y + 1] - g[x - 1, y + 1])) / 12.0
    iy[x, y] = ((g[x - 1, y + 1] - g[x - 1, y - 1]) + 2.0 * (g[x, y + 1] - g[x, y - 1])
                + (g[x + 1, y + 1] - g[x + 1, y - 1])) / 12.0
    ixx, iyy, ixy = pl.Func("Ixx"), pl.Func("Iyy"), pl.Func("Ixy")
    ixx[x, y] = ix[x, y] * ix[x, y]
    iyy[x, y] = iy[x, y] * iy[x, y]
    ixy[x, y] = ix[x, y] * iy[x, y]

    def box(f, name):
        s = pl.Func(name)
        s[x, y] = sum(f[x + i, y + j] for j in (-1, 0, 1) for i in (-1, 0, 1))
        return s

    sxx, syy, sxy = box(ixx, "Sxx"), box(iyy, "Syy"), box(ixy, "Sxy")
    out = pl.Func("harris")
    det = sxx[x, y] * syy[x, y] - sxy[x, y] * sxy[x, y]
    trace = sxx[x, y] + syy[x, y]
    out[x, y] = det - K * trace * trace
    height, width = image.shape
    return out, [width, height], {"Ix": ix, "Iy": iy, "harris": out, "x": x, "y": y}


def hand_schedule(funcs: dict, tile=(256, 32), vector: int = 16) -> None:
    x, y = funcs["x"], funcs["y"]
    xi, yi = pl.Var("xi"), pl.Var("yi")
    funcs["harris"].tile(x, y, xi, yi, tile[0], tile[1]).vectorize(xi, vector).parallel(y)
    funcs["Ix"].compute_at(funcs["harris"], x).vectorize(x, vector)
    funcs["Iy"].compute_at(funcs["harris"], x).vectorize(x, vector)


def reference(image: np.ndarray) -> np.ndarray:
    """numpy in float32 (float64 sums would differ by rounding only)."""
    h, w = image.shape
    p = np.pad(image, 2, mode="edge")

    def g(dx, dy):  # image shifted: g(dx, dy)[y, x] = clamped(x + dx, y + dy), over a 1-pixel border
        return p[2 + dy - 1:2 + dy + h + 1, 2 + dx - 1:2 + dx + w + 1]

    ix = ((g(1, -1) - g(-1, -1)) + np.float32(2) * (g(1, 0) - g(-1, 0)) + (g(1, 1) - g(-1, 1))) / np.float32(12)
    iy = ((g(-1, 1) - g(-1, -1)) + np.float32(2) * (g(0, 1) - g(0, -1)) + (g(1, 1) - g(1, -1))) / np.float32(12)

    def box(a):
        return sum(a[1 + j:1 + j + h, 1 + i:1 + i + w] for j in (-1, 0, 1) for i in (-1, 0, 1))

    sxx, syy, sxy = box(ix * ix), box(iy * iy), box(ix * iy)
    trace = sxx + syy
    return (sxx * syy - sxy * sxy) - np.float32(K) * trace * trace


def main() -> None:
    image = np.random.default_rng(0).random((480, 640), dtype=np.float32)
    out, size, funcs = algorithm(image)
    hand_schedule(funcs)
    result = out.realize(size)
    np.testing.assert_allclose(result, reference(image), rtol=1e-4, atol=1e-6)
    print(f"Harris response of a {image.shape} float32 image matches numpy")


if __name__ == "__main__":
    main()
