"""Local Laplacian filter (Paris, Hasinoff and Kautz 2011) of a grey float32 image, as in Halide's app.

    python examples/pipelines/local_laplacian.py

Edge-aware detail enhancement by pyramids:

1. the image's intensity is remapped at K levels (a lookup table: detail
   around each level scaled by alpha, the rest by beta), and of each remapped
   image a Gaussian pyramid is built, then its Laplacian pyramid (each level
   minus the next one upsampled);
2. a Gaussian pyramid of the input says, at each level and pixel, which two
   of the K levels the pixel's intensity falls between; the output's
   Laplacian pyramid interpolates between those two;
3. the output's Laplacian pyramid is collapsed (upsample and add, coarsest
   first).

Pyramids use Halide's kernels: downsample by [1 3 3 1] / 8 in x then y,
upsample by linear interpolation at 3/4 and 1/4. Every level is a Func over
an unbounded domain (the input repeats its edges), so the numpy reference
computes each level over the region the next one reads, as bounds
inference does.
"""
from __future__ import annotations

import numpy as np

import tensorkiln.pipeline as pl

LEVELS = 8          # K: intensity levels the remapping is computed at
ALPHA = 1.0         # detail amplification (the remap's weight)
BETA = 1.0          # the image's own intensity outside the detail band
LUT_STEP = 256      # lookup entries per intensity level


def lerp(a, b, w):
    return a + w * (b - a)


def downsample(f, name: str, x, y, rest=()):
    """f at half resolution: [1 3 3 1] / 8 along x, then along y."""
    downx, downy = pl.Func(f"{name}_dx"), pl.Func(f"{name}_dy")
    downx[(x, y, *rest)] = (f[(2 * x - 1, y, *rest)] + 3.0 * (f[(2 * x, y, *rest)] + f[(2 * x + 1, y, *rest)])
                            + f[(2 * x + 2, y, *rest)]) / 8.0
    downy[(x, y, *rest)] = (downx[(x, 2 * y - 1, *rest)] + 3.0 * (downx[(x, 2 * y, *rest)]
                            + downx[(x, 2 * y + 1, *rest)]) + downx[(x, 2 * y + 2, *rest)]) / 8.0
    return downy


def upsample(f, name: str, x, y, rest=()):
    """f at double resolution: each point between its two nearest coarse points, 3/4 of the nearer."""
    upx, upy = pl.Func(f"{name}_ux"), pl.Func(f"{name}_uy")
    upx[(x, y, *rest)] = lerp(f[(x / 2 - 1 + 2 * (x % 2), y, *rest)], f[(x / 2, y, *rest)], 0.75)
    upy[(x, y, *rest)] = lerp(upx[(x, y / 2 - 1 + 2 * (y % 2), *rest)], upx[(x, y / 2, *rest)], 0.75)
    return upy


def algorithm(image: np.ndarray, pyramid_levels: int = 8):
    """(output Func, its size [W, H], the Funcs by name) for an (H, W) float32 image in [0, 1]."""
    J, K = pyramid_levels, LEVELS
    x, y, k = pl.Var("x"), pl.Var("y"), pl.Var("k")
    inp = pl.Buffer(image, "input")
    gray = pl.Func("gray")
    gray[x, y] = pl.repeat_edge(inp)[x, y]

    remap = pl.Func("remap")                              # the detail curve, a lookup table
    fx = pl.cast(pl.Float(32), x) / float(LUT_STEP)
    remap[x] = ALPHA * fx * pl.exp(-fx * fx / 2.0)

    g_pyramid = [pl.Func("g_pyramid_0")]                  # the processed images' Gaussian pyramids
    level = pl.cast(pl.Float(32), k) * (1.0 / (K - 1))
    index = pl.clamp(pl.cast(pl.Int(32), gray[x, y] * float((K - 1) * LUT_STEP)), 0, (K - 1) * LUT_STEP)
    g_pyramid[0][x, y, k] = BETA * (gray[x, y] - level) + level + remap[index - LUT_STEP * k]
    for j in range(1, J):
        g_pyramid.append(pl.Func(f"g_pyramid_{j}"))
        g_pyramid[j][x, y, k] = downsample(g_pyramid[j - 1], f"g_down_{j}", x, y, (k,))[x, y, k]

    l_pyramid = [pl.Func(f"l_pyramid_{j}") for j in range(J)]   # ... and their Laplacian pyramids
    l_pyramid[J - 1][x, y, k] = g_pyramid[J - 1][x, y, k]
    for j in range(J - 2, -1, -1):
        l_pyramid[j][x, y, k] = g_pyramid[j][x, y, k] - upsample(g_pyramid[j + 1], f"g_up_{j}", x, y, (k,))[x, y, k]

    in_pyramid = [pl.Func("in_pyramid_0")]                # the input's Gaussian pyramid
    in_pyramid[0][x, y] = gray[x, y]
    for j in range(1, J):
        in_pyramid.append(pl.Func(f"in_pyramid_{j}"))
        in_pyramid[j][x, y] = downsample(in_pyramid[j - 1], f"in_down_{j}", x, y)[x, y]

    out_l_pyramid = []                                    # the output's Laplacian pyramid: between two levels
    for j in range(J):
        position = in_pyramid[j][x, y] * float(K - 1)
        li = pl.clamp(pl.cast(pl.Int(32), position), 0, K - 2)
        lf = position - pl.cast(pl.Float(32), li)
        out_l_pyramid.append(pl.Func(f"out_l_pyramid_{j}"))
        out_l_pyramid[j][x, y] = (1.0 - lf) * l_pyramid[j][x, y, li] + lf * l_pyramid[j][x, y, li + 1]

    out_g_pyramid = [pl.Func(f"out_g_pyramid_{j}") for j in range(J)]   # collapsed, coarsest first
    out_g_pyramid[J - 1][x, y] = out_l_pyramid[J - 1][x, y]
    for j in range(J - 2, -1, -1):
        out_g_pyramid[j][x, y] = (upsample(out_g_pyramid[j + 1], f"out_up_{j}", x, y)[x, y]
                                  + out_l_pyramid[j][x, y])
    out = pl.Func("local_laplacian")
    out[x, y] = out_g_pyramid[0][x, y]
    height, width = image.shape
    funcs = {"gray": gray, "remap": remap, "g_pyramid": g_pyramid, "in_pyramid": in_pyramid,
             "out_g_pyramid": out_g_pyramid, "local_laplacian": out, "x": x, "y": y, "k": k}
    return out, [width, height], funcs


def hand_schedule(funcs: dict, vector: int = 16) -> None:
    """Every pyramid level at the root, in parallel strips of 8 rows, vectorized; the lookup table and the
    grey image at the root; the pyramids' up- and downsampling inlined into the levels.

    Halide's own schedule for the app (benchmarks/pipelines.py) computes the output's pyramid per output
    row, stored per strip, and slides its window down the rows; here a coarser level's rows move by a
    varying step (y // 2), so the window does not slide and every output row would recompute its rows of
    each level: computing each level once, at the root, took 0.71x the time of that schedule
    (512 x 768, 2 threads), and 16 float32 lanes (one AVX-512 register) 0.91x the time of 8.
    """
    x, y, k = funcs["x"], funcs["y"], funcs["k"]
    funcs["remap"].compute_root()
    funcs["local_laplacian"].parallel(y, 8).vectorize(x, vector)
    funcs["gray"].compute_root().parallel(y, 32).vectorize(x, vector)
    for j in range(1, len(funcs["g_pyramid"])):
        funcs["in_pyramid"][j].compute_root().parallel(y, 8).vectorize(x, vector)
        funcs["g_pyramid"][j].compute_root().reorder(k, y).parallel(y, 8).vectorize(x, vector)
        funcs["out_g_pyramid"][j].compute_root().parallel(y, 8).vectorize(x, vector)


# ---------------------------------------------------------------- numpy reference

def reference(image: np.ndarray, pyramid_levels: int = 8) -> np.ndarray:
    """numpy, float32: every level computed over the region (a box, with its origin) the levels above read."""
    J, K, f32 = pyramid_levels, LEVELS, np.float32
    h, w = image.shape
    out_box = [((0, w - 1), (0, h - 1))]                  # the output's pyramid: level j over out_box[j]
    for _ in range(1, J):
        (x0, x1), (y0, y1) = out_box[-1]
        out_box.append(((x0 // 2 - 1, x1 // 2 + 1), (y0 // 2 - 1, y1 // 2 + 1)))
    box = [None] * J                                      # every other level j over box[j] (hull of reads)
    for j in range(J - 1, -1, -1):
        parts = [out_box[j]]
        if j > 0:
            (x0, x1), (y0, y1) = out_box[j - 1]
            parts.append(((x0 // 2 - 1, x1 // 2 + 1), (y0 // 2 - 1, y1 // 2 + 1)))
        if j < J - 1:
            (x0, x1), (y0, y1) = box[j + 1]
            parts.append(((2 * x0 - 1, 2 * x1 + 2), (2 * y0 - 1, 2 * y1 + 2)))
        box[j] = ((min(p[0][0] for p in parts), max(p[0][1] for p in parts)),
                  (min(p[1][0] for p in parts), max(p[1][1] for p in parts)))

    def coords(b):
        (x0, x1), (y0, y1) = b
        return np.arange(x0, x1 + 1), np.arange(y0, y1 + 1)

    def down(arr, b, nb):
        xs, ys = coords(nb)
        bx0 = b[0][0]
        dx = (arr[..., :, 2 * xs - 1 - bx0] + f32(3) * (arr[..., :, 2 * xs - bx0] + arr[..., :, 2 * xs + 1 - bx0])
              + arr[..., :, 2 * xs + 2 - bx0]) / f32(8)
        by0 = b[1][0]
        return (dx[..., 2 * ys - 1 - by0, :] + f32(3) * (dx[..., 2 * ys - by0, :] + dx[..., 2 * ys + 1 - by0, :])
                + dx[..., 2 * ys + 2 - by0, :]) / f32(8)

    def up(arr, b, nb):
        xs, ys = coords(nb)
        bx0, by0 = b[0][0], b[1][0]
        near, far = xs // 2 - bx0, xs // 2 - 1 + 2 * (xs % 2) - bx0
        ux = arr[..., :, far] + f32(0.75) * (arr[..., :, near] - arr[..., :, far])
        near, far = ys // 2 - by0, ys // 2 - 1 + 2 * (ys % 2) - by0
        return ux[..., far, :] + f32(0.75) * (ux[..., near, :] - ux[..., far, :])

    xs, ys = coords(box[0])
    gray = image[np.clip(ys, 0, h - 1)[:, None], np.clip(xs, 0, w - 1)[None, :]].astype(f32)
    lut_x = np.arange(-(K - 1) * LUT_STEP, (K - 1) * LUT_STEP + 1)
    fx = lut_x.astype(f32) / f32(LUT_STEP)
    lut = f32(ALPHA) * fx * np.exp(-fx * fx / f32(2)).astype(f32)
    levels = np.arange(K, dtype=f32)[:, None, None] * f32(1 / (K - 1))
    index = np.clip((gray * f32((K - 1) * LUT_STEP)).astype(np.int32), 0, (K - 1) * LUT_STEP)
    g = [f32(BETA) * (gray[None] - levels) + levels
         + lut[index[None] - LUT_STEP * np.arange(K)[:, None, None] + (K - 1) * LUT_STEP]]
    inp = [gray]
    for j in range(1, J):
        g.append(down(g[j - 1], box[j - 1], box[j]))
        inp.append(down(inp[j - 1], box[j - 1], box[j]))

    def crop(arr, b, nb):                                 # arr over b, cut to nb
        return arr[..., nb[1][0] - b[1][0]:nb[1][1] - b[1][0] + 1, nb[0][0] - b[0][0]:nb[0][1] - b[0][0] + 1]

    out = None
    for j in range(J - 1, -1, -1):
        lap = crop(g[j], box[j], out_box[j])
        if j < J - 1:
            lap = lap - up(g[j + 1], box[j + 1], out_box[j])
        position = crop(inp[j], box[j], out_box[j]) * f32(K - 1)
        li = np.clip(position.astype(np.int32), 0, K - 2)
        lf = position - li.astype(f32)
        rows, cols = np.indices(li.shape)
        out_l = (f32(1) - lf) * lap[li, rows, cols] + lf * lap[li + 1, rows, cols]
        out = out_l if out is None else up(out, out_box[j + 1], out_box[j]) + out_l
    return out


def main() -> None:
    image = np.random.default_rng(0).random((240, 320), dtype=np.float32)
    out, size, funcs = algorithm(image, pyramid_levels=5)
    hand_schedule(funcs)
    result = out.realize(size)
    np.testing.assert_allclose(result, reference(image, pyramid_levels=5), rtol=2e-4, atol=1e-4)
    print(f"local Laplacian of a {image.shape} float32 image matches numpy")


if __name__ == "__main__":
    main()
