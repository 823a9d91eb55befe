"""Image pipelines (tensorkiln.pipeline) against Halide 21 and numpy, 2 threads, in one run.

    python benchmarks/pipelines.py [--quick] [--only blur] [--calls 61] [--json out.json]

For each example of examples/pipelines/: tensorkiln with the hand schedule
(Halide's own schedule for that app, written the same way), with
auto_schedule (cost model, no timing search), numpy (the example's
reference), and, for every example but the histogram equalization, Halide
21 (pip `halide`, JIT for the host, HL_NUM_THREADS=2) with the same
algorithm and schedule (the bilateral grid and the local Laplacian (8
pyramid levels, 8 intensity levels) with Halide's own app schedules: the
grid unrolls the channel inside the vectorized x, the Laplacian reorders a
pyramid's storage and folds the output pyramid to 4 rows by hand). Outputs are checked against each other first (the uint16 blur
bit for bit). Times are medians of alternating calls (each peer in turn,
into a reused output), so a load that comes and goes hits every peer alike;
the blur is also given as a fraction of STREAM copy bandwidth (bytes that
must move: the input read once, the output written once).
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("HL_NUM_THREADS", "2")
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # idle OpenMP threads must not spin while Halide's run

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples", "pipelines"))

import bilateral_grid  # noqa: E402
import blur  # noqa: E402
import harris  # noqa: E402
import histogram_equalize  # noqa: E402
import local_laplacian  # noqa: E402
import unsharp  # noqa: E402
from common import interleaved_seconds, machine_summary, print_table, write_json  # noqa: E402

import tensorkiln.pipeline as pl  # noqa: E402


# ---------------------------------------------------------------- Halide versions (same algorithm, same schedule)


def halide_blur(image: np.ndarray, hl, vector: int = 16):
    x, y, xi, yi = hl.Var("x"), hl.Var("y"), hl.Var("xi"), hl.Var("yi")
    inp = hl.Buffer(image)
    bx, by = hl.Func("blur_x"), hl.Func("blur_y")
    bx[x, y] = (inp[x, y] + inp[x + 1, y] + inp[x + 2, y]) / 3
    by[x, y] = (bx[x, y] + bx[x, y + 1] + bx[x, y + 2]) / 3
    by.tile(x, y, xi, yi, 256, 32).vectorize(xi, vector).parallel(y)
    bx.compute_at(by, x).vectorize(x, vector)
    return by, (image.shape[1] - 2, image.shape[0] - 2), hl.UInt(16), inp


def halide_unsharp(image: np.ndarray, hl, vector: int = 16):
    x, y, xi, yi = hl.Var("x"), hl.Var("y"), hl.Var("xi"), hl.Var("yi")
    inp = hl.Buffer(image)
    clamped = hl.BoundaryConditions.repeat_edge(inp)
    bx, by, sharpen = hl.Func("blur_x"), hl.Func("blur_y"), hl.Func("sharpen")
    w = [hl.f32(v) for v in unsharp.WEIGHTS]
    bx[x, y] = w[0] * clamped[x - 2, y] + w[1] * clamped[x - 1, y] + w[2] * clamped[x, y] \
        + w[3] * clamped[x + 1, y] + w[4] * clamped[x + 2, y]
    by[x, y] = w[0] * bx[x, y - 2] + w[1] * bx[x, y - 1] + w[2] * bx[x, y] + w[3] * bx[x, y + 1] + w[4] * bx[x, y + 2]
    sharpen[x, y] = clamped[x, y] + hl.f32(unsharp.AMOUNT) * (clamped[x, y] - by[x, y])
    sharpen.tile(x, y, xi, yi, 256, 32).vectorize(xi, vector).parallel(y)
    by.compute_at(sharpen, x).vectorize(x, vector)
    bx.compute_at(sharpen, x).vectorize(x, vector)
    return sharpen, (image.shape[1], image.shape[0]), hl.Float(32), inp


def halide_harris(image: np.ndarray, hl, vector: int = 16):
    x, y, xi, yi = hl.Var("x"), hl.Var("y"), hl.Var("xi"), hl.Var("yi")
    inp = hl.Buffer(image)
    g = hl.BoundaryConditions.repeat_edge(inp)
    ix, iy = hl.Func("Ix"), hl.Func("Iy")
    two, twelve = hl.f32(2.0), hl.f32(12.0)
    ix[x, y] = ((g[x + 1, y - 1] - g[x - 1, y - 1]) + two * (g[x + 1, y] - g[x - 1, y])
                + (g[x + 1, y + 1] - g[x - 1, y + 1])) / twelve
    iy[x, y] = ((g[x - 1, y + 1] - g[x - 1, y - 1]) + two * (g[x, y + 1] - g[x, y - 1])
                + (g[x + 1, y + 1] - g[x + 1, y - 1])) / twelve
    ixx, iyy, ixy = hl.Func("Ixx"), hl.Func("Iyy"), hl.Func("Ixy")
    ixx[x, y] = ix[x, y] * ix[x, y]
    iyy[x, y] = iy[x, y] * iy[x, y]
    ixy[x, y] = ix[x, y] * iy[x, y]

    def box(f, name):
        s = hl.Func(name)
        terms = [f[x + i, y + j] for j in (-1, 0, 1) for i in (-1, 0, 1)]
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        s[x, y] = total
        return s

    sxx, syy, sxy = box(ixx, "Sxx"), box(iyy, "Syy"), box(ixy, "Sxy")
    out = hl.Func("harris")
    det = sxx[x, y] * syy[x, y] - sxy[x, y] * sxy[x, y]
    trace = sxx[x, y] + syy[x, y]
    out[x, y] = det - hl.f32(harris.K) * trace * trace
    out.tile(x, y, xi, yi, 256, 32).vectorize(xi, vector).parallel(y)
    ix.compute_at(out, x).vectorize(x, vector)
    iy.compute_at(out, x).vectorize(x, vector)
    return out, (image.shape[1], image.shape[0]), hl.Float(32), inp


def halide_bilateral_grid(image: np.ndarray, hl, vector: int = 8):
    """The same grid, blurs and trilinear lookup, with Halide's own CPU schedule (apps/bilateral_grid)."""
    x, y, z, c = hl.Var("x"), hl.Var("y"), hl.Var("z"), hl.Var("c")
    inp = hl.Buffer(image)
    clamped = hl.BoundaryConditions.repeat_edge(inp)
    bg = bilateral_grid
    s = bg.S_SIGMA
    f = hl.f32
    r = hl.RDom([(0, s), (0, s)], "r")
    val = hl.clamp(clamped[x * s + r.x - s // 2, y * s + r.y - s // 2], f(0.0), f(1.0))
    zi = hl.clamp(hl.cast(hl.Int(32), val * f(1.0 / bg.R_SIGMA) + f(0.5)), 0, bg.BINS)
    histogram = hl.Func("histogram")
    histogram[x, y, z, c] = f(0.0)
    histogram[x, y, zi, c] = histogram[x, y, zi, c] + hl.select(c == 0, val, f(1.0))
    blurz, blurx, blury = hl.Func("blurz"), hl.Func("blurx"), hl.Func("blury")
    blurz[x, y, z, c] = (histogram[x, y, z - 2, c] + histogram[x, y, z - 1, c] * f(4.0) + histogram[x, y, z, c] * f(6.0)
                         + histogram[x, y, z + 1, c] * f(4.0) + histogram[x, y, z + 2, c])
    blurx[x, y, z, c] = (blurz[x - 2, y, z, c] + blurz[x - 1, y, z, c] * f(4.0) + blurz[x, y, z, c] * f(6.0)
                         + blurz[x + 1, y, z, c] * f(4.0) + blurz[x + 2, y, z, c])
    blury[x, y, z, c] = (blurx[x, y - 2, z, c] + blurx[x, y - 1, z, c] * f(4.0) + blurx[x, y, z, c] * f(6.0)
                         + blurx[x, y + 1, z, c] * f(4.0) + blurx[x, y + 2, z, c])
    v = hl.clamp(inp[x, y], f(0.0), f(1.0))
    zv = v * f(1.0 / bg.R_SIGMA)
    zint = hl.clamp(hl.cast(hl.Int(32), zv), 0, bg.BINS - 1)
    zf = zv - hl.cast(hl.Float(32), zint)
    xf = hl.cast(hl.Float(32), x % s) / f(s)
    yf = hl.cast(hl.Float(32), y % s) / f(s)
    xi, yi = x / s, y / s
    lerp = bilateral_grid.lerp
    interpolated = hl.Func("interpolated")
    interpolated[x, y, c] = lerp(
        lerp(lerp(blury[xi, yi, zint, c], blury[xi + 1, yi, zint, c], xf),
             lerp(blury[xi, yi + 1, zint, c], blury[xi + 1, yi + 1, zint, c], xf), yf),
        lerp(lerp(blury[xi, yi, zint + 1, c], blury[xi + 1, yi, zint + 1, c], xf),
             lerp(blury[xi, yi + 1, zint + 1, c], blury[xi + 1, yi + 1, zint + 1, c], xf), yf), zf)
    out = hl.Func("bilateral_grid")
    out[x, y] = interpolated[x, y, 0] / interpolated[x, y, 1]
    # Halide's apps/bilateral_grid CPU schedule
    histogram.compute_at(blurz, y)
    histogram.update(0).reorder(c, r.x, r.y, x, y).unroll(c)
    blurz.compute_root().reorder(c, z, x, y).parallel(y).vectorize(x, vector).unroll(c)
    blurx.compute_root().reorder(c, x, y, z).parallel(z).vectorize(x, vector).unroll(c)
    blury.compute_root().reorder(c, x, y, z).parallel(z).vectorize(x, vector).unroll(c)
    out.compute_root().parallel(y).vectorize(x, vector)
    return out, (image.shape[1], image.shape[0]), hl.Float(32), inp


def halide_local_laplacian(image: np.ndarray, hl, pyramid_levels: int = 8, vector: int = 8):
    """The same pyramids, remapping and collapse, with Halide's own CPU schedule (apps/local_laplacian)."""
    ll = local_laplacian
    J, K, f = pyramid_levels, ll.LEVELS, hl.f32
    x, y, k, yo = hl.Var("x"), hl.Var("y"), hl.Var("k"), hl.Var("yo")
    inp = hl.Buffer(image)
    gray = hl.Func("gray")
    gray[x, y] = hl.BoundaryConditions.repeat_edge(inp)[x, y]

    def lerp(a, b, w):
        return a + w * (b - a)

    def down(g, rest):
        dx, dy = hl.Func(), hl.Func()
        dx[(x, y, *rest)] = (g[(2 * x - 1, y, *rest)] + f(3.0) * (g[(2 * x, y, *rest)] + g[(2 * x + 1, y, *rest)])
                             + g[(2 * x + 2, y, *rest)]) / f(8.0)
        dy[(x, y, *rest)] = (dx[(x, 2 * y - 1, *rest)] + f(3.0) * (dx[(x, 2 * y, *rest)] + dx[(x, 2 * y + 1, *rest)])
                             + dx[(x, 2 * y + 2, *rest)]) / f(8.0)
        return dy

    def up(g, rest):
        ux, uy = hl.Func(), hl.Func()
        ux[(x, y, *rest)] = lerp(g[(x / 2 - 1 + 2 * (x % 2), y, *rest)], g[(x / 2, y, *rest)], f(0.75))
        uy[(x, y, *rest)] = lerp(ux[(x, y / 2 - 1 + 2 * (y % 2), *rest)], ux[(x, y / 2, *rest)], f(0.75))
        return uy

    remap = hl.Func("remap")
    fx = hl.cast(hl.Float(32), x) / f(ll.LUT_STEP)
    remap[x] = f(ll.ALPHA) * fx * hl.exp(-fx * fx / f(2.0))
    level = hl.cast(hl.Float(32), k) * f(1.0 / (K - 1))
    index = hl.clamp(hl.cast(hl.Int(32), gray[x, y] * f((K - 1) * ll.LUT_STEP)), 0, (K - 1) * ll.LUT_STEP)
    g_pyr = [hl.Func("g_pyramid_0")]
    g_pyr[0][x, y, k] = f(ll.BETA) * (gray[x, y] - level) + level + remap[index - ll.LUT_STEP * k]
    in_pyr = [hl.Func("in_pyramid_0")]
    in_pyr[0][x, y] = gray[x, y]
    for j in range(1, J):
        g_pyr.append(hl.Func(f"g_pyramid_{j}"))
        g_pyr[j][x, y, k] = down(g_pyr[j - 1], (k,))[x, y, k]
        in_pyr.append(hl.Func(f"in_pyramid_{j}"))
        in_pyr[j][x, y] = down(in_pyr[j - 1], ())[x, y]
    l_pyr = [hl.Func(f"l_pyramid_{j}") for j in range(J)]
    l_pyr[J - 1][x, y, k] = g_pyr[J - 1][x, y, k]
    for j in range(J - 2, -1, -1):
        l_pyr[j][x, y, k] = g_pyr[j][x, y, k] - up(g_pyr[j + 1], (k,))[x, y, k]
    out_l = []
    for j in range(J):
        position = in_pyr[j][x, y] * f(K - 1)
        li = hl.clamp(hl.cast(hl.Int(32), position), 0, K - 2)
        lf = position - hl.cast(hl.Float(32), li)
        out_l.append(hl.Func(f"out_l_pyramid_{j}"))
        out_l[j][x, y] = (f(1.0) - lf) * l_pyr[j][x, y, li] + lf * l_pyr[j][x, y, li + 1]
    out_g = [hl.Func(f"out_g_pyramid_{j}") for j in range(J)]
    out_g[J - 1][x, y] = out_l[J - 1][x, y]
    for j in range(J - 2, -1, -1):
        out_g[j][x, y] = up(out_g[j + 1], ())[x, y] + out_l[j][x, y]
    out = hl.Func("local_laplacian")
    out[x, y] = out_g[0][x, y]
    # Halide's apps/local_laplacian CPU schedule
    remap.compute_root()
    out.split(y, yo, y, 64).parallel(yo).vectorize(x, vector)
    gray.compute_root().parallel(y, 32).vectorize(x, vector)
    for j in range(1, J):
        if j < 5:
            in_pyr[j].compute_root().parallel(y, 32).vectorize(x, vector)
            g_pyr[j].compute_root().reorder_storage(x, k, y).reorder(k, y).parallel(y, 8).vectorize(x, vector)
            out_g[j].store_at(out, yo).compute_at(out, y).fold_storage(y, 4).vectorize(x, vector)
        else:
            in_pyr[j].compute_root()
            g_pyr[j].compute_root().parallel(k)
            out_g[j].compute_root()
    out_g[0].compute_at(out, y).vectorize(x, vector)
    return out, (image.shape[1], image.shape[0]), hl.Float(32), inp


HALIDE = {"blur": halide_blur, "unsharp": halide_unsharp, "harris": halide_harris,
          "bilateral_grid": halide_bilateral_grid, "local_laplacian": halide_local_laplacian}


# ---------------------------------------------------------------- runs


def cases(quick: bool):
    rng = np.random.default_rng(0)
    scale = 4 if quick else 1
    yield "blur", blur, rng.integers(0, 65536, (4800 // scale + 2, 6400 // scale + 2), dtype=np.uint16)
    yield "unsharp", unsharp, rng.random((2048 // scale, 3072 // scale), dtype=np.float32)
    yield "harris", harris, rng.random((2048 // scale, 3072 // scale), dtype=np.float32)
    yield "histogram_equalize", histogram_equalize, rng.integers(0, 256, (2048 // scale, 3072 // scale),
                                                                 dtype=np.uint8)
    yield "bilateral_grid", bilateral_grid, rng.random((1536 // scale, 2560 // scale), dtype=np.float32)
    # 8 pyramid levels; numpy computes each level over the region the next reads, 3 s a call at this size
    yield "local_laplacian", local_laplacian, rng.random((512 // scale, 768 // scale), dtype=np.float32)


def same(a: np.ndarray, b: np.ndarray, name: str, peer: str) -> None:
    if np.issubdtype(a.dtype, np.integer):
        if not np.array_equal(a, b):
            raise AssertionError(f"{name}: {peer} differs from tensorkiln")
    else:
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-4, err_msg=f"{name}: {peer}")


def run_case(name: str, example, image: np.ndarray, calls: int, hl) -> dict:
    out, size, funcs = example.algorithm(image)
    example.hand_schedule(funcs)
    hand = out.compile(size)
    hand_out = hand()
    reference = example.reference(image)
    same(hand_out, reference, name, "numpy")
    fns = [lambda: hand(out=hand_out), lambda: example.reference(image)]
    labels = ["tensorkiln hand", "numpy"]
    auto_out_func, _, _ = example.algorithm(image)
    pl.auto_schedule(auto_out_func, size)
    auto = auto_out_func.compile(size)
    auto_out = auto()
    same(hand_out, auto_out, name, "auto_schedule")
    fns.append(lambda: auto(out=auto_out))
    labels.append("tensorkiln auto")
    if hl is not None and name in HALIDE:
        func, (w, h), htype, _ = HALIDE[name](image, hl)
        func.compile_jit(hl.get_jit_target_from_environment())
        result = hl.Buffer(htype, [w, h])
        func.realize(result)
        same(hand_out, np.asarray(result), name, "Halide")
        fns.append(lambda: func.realize(result))
        labels.append("Halide 21")
    seconds = interleaved_seconds(fns, calls, quantile=50)
    row = {"example": name, "shape": list(image.shape), "dtype": str(image.dtype)}
    row.update({label: s for label, s in zip(labels, seconds)})
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--only", help="run one example (blur, unsharp, harris, histogram_equalize, ...)")
    parser.add_argument("--calls", type=int, help="alternating calls per peer (default 15, 5 with --quick)")
    args = parser.parse_args()
    try:
        import halide as hl
    except ImportError:
        hl = None
        print("halide is not installed (pip install halide, the 'bench' extra): Halide columns left out")
    from kernels import measure_limits
    limits = measure_limits(3)
    calls = args.calls or (5 if args.quick else 15)
    rows = [run_case(name, example, image, calls, hl) for name, example, image in cases(args.quick)
            if args.only in (None, name)]
    print(f"# image pipelines, 2 threads: {machine_summary()}")
    print(f"# STREAM copy {limits['copy_gbs']:.1f} GB/s; medians of {calls} alternating calls each")
    table = []
    for r in rows:
        hand = r["tensorkiln hand"]
        halide, auto = r.get("Halide 21"), r.get("tensorkiln auto")
        table.append([r["example"], "x".join(map(str, r["shape"])) + " " + r["dtype"], f"{hand * 1e3:.2f}",
                      f"{auto * 1e3:.2f}" if auto else "-", f"{halide * 1e3:.2f}" if halide else "-",
                      f"{r['numpy'] * 1e3:.1f}", f"{hand / halide:.2f}" if halide else "-",
                      f"{auto / hand:.2f}" if auto else "-", f"{r['numpy'] / hand:.1f}"])
        if r["example"] == "blur":
            moved = 2 * image_bytes(r["shape"], r["dtype"])
            r["stream_fraction"] = moved / hand / (limits["copy_gbs"] * 1e9)
            if halide:
                r["halide_stream_fraction"] = moved / halide / (limits["copy_gbs"] * 1e9)
    print_table(["example", "input", "hand ms", "auto ms", "Halide ms", "numpy ms", "hand/Halide", "auto/hand",
                 "numpy/hand"], table)
    for r in rows:
        if "stream_fraction" in r:
            print(f"blur: tensorkiln at {r['stream_fraction']:.0%} of STREAM copy"
                  + (f", Halide at {r['halide_stream_fraction']:.0%}" if "halide_stream_fraction" in r else ""))
    if args.json:
        write_json(args.json, {"machine": machine_summary(), "limits": limits, "rows": rows})


def image_bytes(shape, dtype) -> int:
    return int(np.prod(shape)) * np.dtype(dtype).itemsize


if __name__ == "__main__":
    main()
