"""Unsharp mask of a float32 image: a separable 5-tap Gaussian, then the image pushed away from it.

    python examples/pipelines/unsharp.py

Edges repeat outside the image (pl.repeat_edge). The hand schedule is
Halide's for this app: the output tiled and vectorized, rows of tiles in
parallel, both blurs computed per tile.
"""
from __future__ import annotations

import numpy as np

import tensorkiln.pipeline as pl

WEIGHTS = (1 / 16, 4 / 16, 6 / 16, 4 / 16, 1 / 16)
AMOUNT = 1.5


def algorithm(image: np.ndarray):
    """(output Func, its size [W, H], the Funcs by name) for an (H, W) float32 image."""
    x, y = pl.Var("x"), pl.Var("y")
    inp = pl.Buffer(image, "input")
    clamped = pl.repeat_edge(inp)
    blur_x, blur_y, sharpen = pl.Func("blur_x"), pl.Func("blur_y"), pl.Func("sharpen")
    blur_x[x, y] = sum(w * clamped[x + k - 2, y] for k, w in enumerate(WEIGHTS))
    blur_y[x, y] = sum(w * blur_x[x, y + k - 2] for k, w in enumerate(WEIGHTS))
    sharpen[x, y] = clamped[x, y] + AMOUNT * (clamped[x, y] - blur_y[x, y])
    height, width = image.shape
    return sharpen, [width, height], {"blur_x": blur_x, "blur_y": blur_y, "sharpen": sharpen, "x": x, "y": y}


def hand_schedule(funcs: dict, tile=(256, 32), vector: int = 16) -> None:
    x, y = funcs["x"], funcs["y"]
    xi, yi = pl.Var("xi"), pl.Var("yi")
    funcs["sharpen"].tile(x, y, xi, yi, tile[0], tile[1]).vectorize(xi, vector).parallel(y)
    funcs["blur_y"].compute_at(funcs["sharpen"], x).vectorize(x, vector)
    funcs["blur_x"].compute_at(funcs["sharpen"], x).vectorize(x, vector)


def reference(image: np.ndarray) -> np.ndarray:
    """numpy, float32, the taps added in the same order."""
    p = np.pad(image, 2, mode="edge")
    h, w = image.shape
    bx = sum(np.float32(wt) * p[:, k:k + w] for k, wt in enumerate(WEIGHTS))
    by = sum(np.float32(wt) * bx[k:k + h] for k, wt in enumerate(WEIGHTS))
    return image + np.float32(AMOUNT) * (image - by)


def main() -> None:
    image = np.random.default_rng(0).random((480, 640), dtype=np.float32)
    out, size, funcs = algorithm(image)
    hand_schedule(funcs)
    result = out.realize(size)
    np.testing.assert_allclose(result, reference(image), rtol=1e-5, atol=1e-5)
    print(f"unsharp mask of a {image.shape} float32 image matches numpy")


if __name__ == "__main__":
    main()
