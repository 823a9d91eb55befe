"""Histogram equalization of a uint8 image: a histogram (an update over an RDom), its running sum, a lookup.

    python examples/pipelines/histogram_equalize.py

`hist[x] = 0` then `hist[image[r.x, r.y]] += 1` over every pixel r: an update
definition whose coordinate is a pixel's value, so bounds inference gives
hist the region [0, 255] from the type. The cumulative sum is a scan (each
bin reads the one before it), and the output reads it at each pixel's value.
"""
from __future__ import annotations

import numpy as np

import tensorkiln.pipeline as pl


def algorithm(image: np.ndarray):
    """(output Func, its size [W, H], the Funcs by name) for an (H, W) uint8 image."""
    x, y, i = pl.Var("x"), pl.Var("y"), pl.Var("i")
    inp = pl.Buffer(image, "input")
    r = pl.RDom(0, inp.width(), 0, inp.height(), name="r")
    hist = pl.Func("hist")
    hist[i] = 0
    hist[pl.cast(pl.Int(32), inp[r.x, r.y])] += 1
    cdf = pl.Func("cdf")
    b = pl.RDom(1, 255, name="b")
    cdf[i] = hist[i]
    cdf[b.x] = cdf[b.x - 1] + hist[b.x]
    pixels = inp.width() * inp.height()
    out = pl.Func("equalized")
    out[x, y] = pl.cast(pl.UInt(8), cdf[pl.cast(pl.Int(32), inp[x, y])] * 255 / pixels)
    height, width = image.shape
    return out, [width, height], {"hist": hist, "cdf": cdf, "equalized": out, "x": x, "y": y, "i": i}


def hand_schedule(funcs: dict, vector: int = 32) -> None:
    """The histogram and its sum at the root (serial: a scatter and a scan); the lookup parallel and vectorized."""
    x, y = funcs["x"], funcs["y"]
    funcs["hist"].compute_root()
    funcs["cdf"].compute_root()
    funcs["equalized"].vectorize(x, vector).parallel(y)


def reference(image: np.ndarray) -> np.ndarray:
    cdf = np.cumsum(np.bincount(image.ravel(), minlength=256))
    return (cdf[image] * 255 // image.size).astype(np.uint8)


def main() -> None:
    image = np.random.default_rng(0).integers(0, 200, (480, 640), dtype=np.uint8)
    out, size, funcs = algorithm(image)
    hand_schedule(funcs)
    print(out.explain(size))
    assert np.array_equal(out.realize(size), reference(image))
    print(f"histogram equalization of a {image.shape} uint8 image matches numpy")


if __name__ == "__main__":
    main()
