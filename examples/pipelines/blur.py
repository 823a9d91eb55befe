"""The two-stage 3x3 box blur of a uint16 image, Halide's first example.

    python examples/pipelines/blur.py

The algorithm says what each pixel is; the schedule says how the loops run:
the output in 256 x 32 tiles, rows of tiles in parallel, the horizontal blur
computed per tile (34 rows for 32 output rows), both vectorized. uint16
arithmetic wraps and integer division floors, as in Halide, so the numpy
reference computes modulo 65536 too.
"""
from __future__ import annotations

import numpy as np

import tensorkiln.pipeline as pl


def algorithm(image: np.ndarray):
    """(output Func, its size [W, H], the Funcs by name) for a (H + 2, W + 2) uint16 image."""
    x, y = pl.Var("x"), pl.Var("y")
    inp = pl.Buffer(image, "input")
    blur_x, blur_y = pl.Func("blur_x"), pl.Func("blur_y")
    blur_x[x, y] = (inp[x, y] + inp[x + 1, y] + inp[x + 2, y]) / 3
    blur_y[x, y] = (blur_x[x, y] + blur_x[x, y + 1] + blur_x[x, y + 2]) / 3
    height, width = image.shape
    return blur_y, [width - 2, height - 2], {"blur_x": blur_x, "blur_y": blur_y, "x": x, "y": y}


def hand_schedule(funcs: dict, tile=(256, 32), vector: int = 16) -> None:
    """Halide's classic schedule: tiles, vectorized, parallel rows, blur_x computed per tile."""
    x, y = funcs["x"], funcs["y"]
    xi, yi = pl.Var("xi"), pl.Var("yi")
    funcs["blur_y"].tile(x, y, xi, yi, tile[0], tile[1]).vectorize(xi, vector).parallel(y)
    funcs["blur_x"].compute_at(funcs["blur_y"], x).vectorize(x, vector)


def reference(image: np.ndarray) -> np.ndarray:
    """numpy: the same sums, wrapping at 2**16, floor-divided by 3."""
    a = image.astype(np.uint32)
    bx = (a[:, :-2] + a[:, 1:-1] + a[:, 2:]) % 65536 // 3
    return ((bx[:-2] + bx[1:-1] + bx[2:]) % 65536 // 3).astype(np.uint16)


def main() -> None:
    image = np.random.default_rng(0).integers(0, 65536, (482, 642), dtype=np.uint16)
    out, size, funcs = algorithm(image)
    hand_schedule(funcs)
    print(out.explain(size))
    result = out.realize(size)
    assert np.array_equal(result, reference(image))
    print(f"blur of a {image.shape} uint16 image matches numpy")


if __name__ == "__main__":
    main()
