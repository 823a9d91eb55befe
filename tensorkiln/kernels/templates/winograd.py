"""Winograd convolution F(m x m, 3 x 3) for stride-1, undilated, ungrouped float32 layers.

Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks" (2016):
an m x m block of outputs of a 3x3 correlation is computed from the
n x n input tile d around it (n = m + 2) as

    Y = A^T [ (G g G^T) * (B^T d B) ] A          (* elementwise)

with n^2 multiplications instead of 9 m^2 (36 instead of 144 for m = 4).
Summed over the input channels, the n^2 elementwise products become n^2
independent GEMMs, one per position e = (i, j) of the transformed tile::

    U[e][c][k] = (G g[k, c] G^T)[e]              weights:      n^2 x C x K
    V[e][c][t] = (B^T d[c, t] B)[e]              input tiles:  n^2 x C x T
    M[e][k][t] = sum_c U[e][c][k] V[e][c][t]     blis_gemm, batch n^2
    out[k, tile t] = epilogue(A^T M[., k, t] A)  only the outputs inside the image

The GEMMs pack nothing: U is stored as their A operand's micro-panels
(U[e][k // MR][c][k % MR], `ir/ops/winograd_math.py: weight_panels`) and V's
rows of T tiles are B micro-panels NR tiles wide with a depth stride of T
(`gemm.Panels`), so the micro-kernel reads both where the transforms put
them. (Packing U and V for every chunk cost about a third of the GEMM time,
and made a 128-channel layer's 2.4 MB U stream through the caches once per
chunk.)

The tiles are processed in chunks of whole tile rows (of all images, so a
chunk may span images; `WinogradPlan`), each chunk's V and M a few MiB, so
the scratch stays bounded for any batch. One kernel does it all:

    alloc scratch:                       U, then per worker: strips, V, M
      U = weight transform               for c (parallel), k (vectorized)
      for worker (parallel, or one):     a worker's chunks one after another
        for chunk:
          strips = input rows of the chunk's tile rows, zero-padded (the only selects)
          V = input transform            for c: t (vectorized over the chunk's tiles)
          M = n^2 GEMMs                  blis_gemm: A = U[e]^T (K x C), B = V[e], both read in place
          out = output transform         for k: t (vectorized) into a staging buffer,
                                         then rows x columns (vectorized) with the epilogue

With one worker (fewer chunks than threads) the loops inside a chunk are
the parallel ones instead. Each transform is two small matrix products
per tile written out with their constant coefficients (zeros skipped, +-1
as an add or a subtraction, the others as an fma), vectorized over the
chunk's tiles. Constant weights are transformed at compile time (the
pass passes/winograd_weights.py turns the conv2d into `conv2d_winograd(x,
U)`, whose template is `winograd_given_body`); weights that are inputs are
transformed by the kernel on every call (about 2% of a 64-channel layer,
10% of a 128-channel one at batch 1). Either way each chunk's GEMMs read all
of U, which is what limits Winograd to layers whose U is small (conv.py:
`winograd_choice`).

The transform matrices come from the Cook-Toom construction at the
interpolation points of `WINOGRAD_POINTS` plus the point at infinity
(`cook_toom`); tests/kernels/test_winograd.py checks the 1-D identity in
exact arithmetic. For F(4x4, 3x3) the points {0, 1, -1, 1/2, -2} give about
half the float32 error of Lavin's {0, 1, -1, 2, -2} (as Barabasz et al.,
"Error analysis and improving the accuracy of Winograd convolution", found):
measured on random data with 64 channels, the largest error relative to
the largest output is 3.6e-6 for m = 4, 2.1e-6 for m = 2 and 1.0e-6 for a
direct float32 sum (docs/kernels.md).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Callable, Sequence

from ...ir.graph import Node
from ...loops import expr as E
from ...loops.buffer import Buffer
from ..inline import ValueBuilder
from ...loops.ir import Alloc, For, If, Let, Stmt, Store, block
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS, thread_count
from ...ir.ops.winograd_math import WINOGRAD_POINTS, Matrix, WinogradTransforms, cook_toom, winograd_transforms  # noqa: F401
from .gemm import GemmBlocking, Panels, analytic_gemm_blocking, blis_gemm, gemm_blocking

Epilogue = Callable[[list, E.Expr], E.Expr]
PREFIX = "wino"  # names of the kernel's buffers and loops


def combine(coeffs: Sequence[Fraction], terms: Sequence[E.Expr], dtype: str) -> E.Expr:
    """sum(c * t) with the zero coefficients left out, +-1 as an add/subtract, the others as an fma.

    The +1 terms come first, so a sum starts with a plain value where it can.
    """
    pairs = sorted(((c, t) for c, t in zip(coeffs, terms) if c != 0), key=lambda ct: ct[0] != 1)
    total: E.Expr | None = None
    for c, term in pairs:
        scaled = term if c == 1 else -term if c == -1 else E.Const(float(c), dtype) * term
        if total is None:
            total = scaled
        elif c == 1:
            total = total + term
        elif c == -1:
            total = total - term
        else:
            total = E.call("fma", E.Const(float(c), dtype), term, total)
    return total if total is not None else E.Const(0.0, dtype)


def _odd_lines(size: int) -> int:
    """`size` floats rounded up to an odd number of 64-byte cache lines.

    The transforms touch all n^2 matrices of U, V or M at once, a matrix
    apart: with a power-of-two distance (64 x 64 weights, 28 x 28 tiles ...)
    all n^2 streams fall into one cache set and evict each other; an odd
    number of lines spreads them over n^2 different sets.
    """
    lines = -(-size // 16)
    return (lines + 1 - lines % 2) * 16


def _var(name: str) -> E.Var:
    return E.Var(f"{PREFIX}_{name}")


def _parallel_if(work: int, iterations: int) -> str:
    return "parallel" if work >= PARALLEL_MIN_ELEMENTS and iterations > 1 else "serial"


def _tile_transform(tf_left: Matrix, tf_right: Matrix, tile: list[list[E.Expr]], dtype: str, name: str,
                    store: Callable[[int, int, E.Expr], Stmt]) -> list[Stmt]:
    """Statements storing Y = L X R^T for a tile X of scalars: store(i, j, Y[i, j]).

    L X comes first, one Let per element, then the stores of Y over those
    Lets. (Interleaving them row by row, to keep fewer values live, measured
    5% slower: GCC schedules the whole tile better.)
    """
    lets: list[Stmt] = []
    stores: list[Stmt] = []
    for i, left_row in enumerate(tf_left):
        half: list[E.Expr] = []
        for s in range(len(tile[0])):
            var = E.Var(f"{PREFIX}_{name}{i}_{s}", dtype)
            lets.append(Let(var, combine(left_row, [tile[r][s] for r in range(len(tile))], dtype)))
            half.append(var)
        stores += [store(i, j, combine(right_row, half, dtype)) for j, right_row in enumerate(tf_right)]
    return lets + stores


@dataclass(frozen=True)
class WinogradPlan:
    """How one convolution is computed: tile size, and the chunks of tile rows the threads share.

    Tile rows are numbered q = image*TH + ty over all images. A chunk is R
    consecutive tile rows; rows past the last (q >= Q) are zeros that are
    never written back. With `workers` > 1 the workers run whole chunks in
    parallel (each with its own scratch, every loop inside serial); with one
    worker the chunks run in turn and the loops inside a chunk are parallel.

    Within a chunk, tile row rr holds the tiles t = rr*P + tx, tx < P, with
    a pitch P = TW + 1: the input strips of a chunk's rows lie side by side
    (P*m columns each), so tile t always starts at column t*m and one
    vectorized loop runs over all the chunk's tiles. The extra tile per row
    covers the 2 columns the row's last tile reaches past its m; it is
    computed and dropped, as are the tiles from R*P up to `chunk_tiles`
    (a multiple of the GEMM's NR).
    """

    n_img: int
    c_in: int
    c_out: int
    h: int
    w: int
    oh: int
    ow: int
    m: int
    pt: int
    pl: int
    rows_per_chunk: int
    chunk_tiles: int
    workers: int
    chunks_per_worker: int
    gemm: GemmBlocking

    @property
    def n(self) -> int:
        """Input tile size m + 2."""
        return self.m + 2

    @property
    def th(self) -> int:
        """Tile rows per image."""
        return -(-self.oh // self.m)

    @property
    def tw(self) -> int:
        """Tiles per tile row."""
        return -(-self.ow // self.m)

    @property
    def pitch(self) -> int:
        """P: tiles per row within a chunk, one more than TW."""
        return self.tw + 1

    @property
    def tile_rows(self) -> int:
        """Q: tile rows of all images."""
        return self.n_img * self.th

    @property
    def chunks(self) -> int:
        return self.workers * self.chunks_per_worker

    @property
    def strip_width(self) -> int:
        """Columns of one input strip line: the chunk's rows side by side, zeros for the extra tiles."""
        return self.chunk_tiles * self.m + 2

    @property
    def u_stride(self) -> int:
        """Floats between the matrices U[e] (C x K in MR-row panels), for U transformed in the kernel."""
        return _odd_lines(_round_up(self.c_out, self.gemm.mr) * self.c_in)

    @property
    def v_stride(self) -> int:
        """Floats between the matrices V[e] (C x chunk tiles)."""
        return _odd_lines(self.c_in * self.chunk_tiles)

    @property
    def m_stride(self) -> int:
        """Floats between the matrices M[e] (K x chunk tiles)."""
        return _odd_lines(self.c_out * self.chunk_tiles)


CHUNK_BYTES = 8 << 20  # V and M of one chunk at most (measured best of 1-16 MiB: fewer chunks read U fewer times)
MAX_CHUNK_OUTPUTS = 4096  # outputs of one channel in a chunk (m^2 * chunk tiles): its staging buffer is 16 KiB
CHUNK_OVERHEAD_TILES = 4  # cost of starting a chunk (U streamed through the caches once more), in tiles of work
INNER_PARALLEL_EFFICIENCY = 0.8  # threads sharing the loops of one chunk, against whole chunks per thread


def winograd_plan(root: Node, m: int, threads: int | None = None) -> WinogradPlan:
    """The plan for conv2d node `root` with F(m x m, 3 x 3) on `threads` threads.

    A chunk's tile count is rounded up to the GEMM's register tile NR (so
    V is whole B panels and the transforms' vector loops have no remainder; the
    extra tiles are zeros). Among the chunk sizes whose V and M fit in
    CHUNK_BYTES (at least one tile row), the one that computes the fewest
    tiles in all (padding rows, the extra tile per row, rounding to NR, a
    share of idle workers, and CHUNK_OVERHEAD_TILES per chunk: estimates)
    wins. Where there are at least as many chunks as threads, each thread
    runs whole chunks.
    """
    n_img, c_in, h, w = root.inputs[0].shape
    c_out = root.shape[1]
    pt, _, pl, _ = root.attrs["padding"]
    oh, ow = root.shape[2:]
    threads = threads or thread_count()
    q, pitch = n_img * -(-oh // m), -(-ow // m) + 1
    nr = analytic_gemm_blocking(c_out, q * pitch, c_in, root.dtype.name).nr  # the tile is never tuned here
    most_tiles = max(CHUNK_BYTES // ((m + 2) ** 2 * (c_in + c_out) * 4), nr)
    best = None
    for rows in range(1, q + 1):
        tiles = _round_up(rows * pitch, nr)
        if rows > 1 and (tiles > most_tiles or tiles * m * m > MAX_CHUNK_OUTPUTS):
            break
        chunks = -(-q // rows)
        workers = threads if threads > 1 and chunks >= threads else 1
        per_worker = -(-chunks // workers)
        cost = per_worker * (tiles + CHUNK_OVERHEAD_TILES)  # per thread, in tiles of work
        if workers < threads:  # the loops inside a chunk are shared, with a fork and a join each
            cost = cost / (threads * INNER_PARALLEL_EFFICIENCY)
        if best is None or cost < best[0]:
            best = (cost, rows, tiles, workers, per_worker)
    _, rows, tiles, workers, per_worker = best
    gemm = gemm_blocking(c_out, tiles, c_in, root.dtype.name, panels_given=True)
    return WinogradPlan(n_img, c_in, c_out, h, w, oh, ow, m, pt, pl, rows, tiles, workers, per_worker, gemm)


def _round_up(x: int, k: int) -> int:
    return -(-x // k) * k


@dataclass(frozen=True)
class _Region:
    """A part of the kernel's scratch buffer, `offset` floats in."""

    buffer: Buffer
    offset: E.Expr | int

    def load(self, index: E.Expr) -> E.Expr:
        return E.Load(self.buffer, index + self.offset)

    def store(self, index: E.Expr, value: E.Expr) -> Stmt:
        return Store(self.buffer, index + self.offset, value)


def winograd_conv(root: Node, out: Buffer, values: ValueBuilder, epilogue: Epilogue, m: int) -> Stmt:
    """Loop IR of epilogue(conv2d(x, w)) by F(m x m, 3 x 3) (see the module docstring).

    All temporaries live in one scratch buffer: U, then per worker its input
    strips, V and M. One allocation of one size per call is reused from the
    heap, while several large ones freed together leave more free memory at
    the heap's top than glibc keeps, so it returns them to the system and
    every call page-faults them in again (measured: up to 3x slower).
    """
    x_node, w_node = root.inputs
    plan = winograd_plan(root, m)
    given = root.op == "conv2d_winograd"  # w_node is U itself, transformed at compile time
    if given and w_node.shape[3] != plan.gemm.mr:  # U laid out for another register tile (built by hand)
        mr = w_node.shape[3]
        plan = replace(plan, gemm=replace(plan.gemm, mr=mr, mc=max(plan.gemm.mc // mr, 1) * mr))
    tf = winograd_transforms(m)
    dtype = root.dtype.name  # float32 (the rule's choice), or float64 (a conv2d_winograd built by hand)
    e_count = plan.n * plan.n
    mr, nr = plan.gemm.mr, plan.gemm.nr
    inner = "serial" if plan.workers > 1 else None  # None: parallel where the work pays for it
    u_size = 0 if given else e_count * plan.u_stride
    strips_size = _odd_lines(plan.c_in * plan.n * plan.strip_width)
    v_size, m_size = e_count * plan.v_stride, e_count * plan.m_stride
    per_worker = strips_size + v_size + m_size
    scratch = Buffer(f"{PREFIX}_scratch", dtype, (u_size + plan.workers * per_worker,), scope="local")
    worker, step = _var("worker"), _var("step")
    base = u_size + worker * per_worker if plan.workers > 1 else u_size
    chunk = worker * plan.chunks_per_worker + step if plan.workers > 1 else step
    u, strips = _Region(scratch, 0), _Region(scratch, base)
    v, mm = _Region(scratch, base + strips_size), _Region(scratch, base + strips_size + v_size)
    # The GEMMs read U and V where they lie: both are written in the micro-kernel's panels.
    a_value, a_panels = None, Panels(scratch, plan.c_in * mr, mr, batch_stride=plan.u_stride)
    if given:
        u_panels = w_node.shape[1] * plan.c_in * mr
        if w_node.id in values.buffers:
            a_panels = Panels(values.buffers[w_node.id], plan.c_in * mr, mr, batch_stride=u_panels)
        else:  # U computed in this kernel's prologue: packed from its values
            a_panels = None
            a_value = lambda e, k, c: values.value(w_node, [e, k // mr, c, k % mr])  # noqa: E731
    gemm = blis_gemm(
        scratch, dtype, e_count, plan.c_out, plan.chunk_tiles, plan.c_in, a_value, None,
        out_index=lambda e, k, t: e * plan.m_stride + k * plan.chunk_tiles + t + mm.offset,
        epilogue=lambda e, k, t, acc: acc, blocking=plan.gemm, prefix=PREFIX, a_panels=a_panels,
        b_panels=Panels(scratch, nr, plan.chunk_tiles, v.offset, plan.v_stride))
    one_chunk = block(_fill_strips(strips, x_node, values, plan, chunk, inner, dtype),
                      _input_transform(v, strips, tf, plan, inner, dtype),
                      gemm,
                      _output_transform(out, mm, tf, plan, chunk, epilogue, inner, dtype))
    if plan.chunks * plan.rows_per_chunk - plan.tile_rows >= plan.rows_per_chunk:
        one_chunk = If(E.lt(chunk * plan.rows_per_chunk, plan.tile_rows), one_chunk)  # a chunk of padding only
    chunks: Stmt = For(step, E.const(plan.chunks_per_worker), one_chunk)
    if plan.workers > 1:
        chunks = For(worker, E.const(plan.workers), chunks, "parallel")
    if given:
        return Alloc(scratch, chunks)
    return Alloc(scratch, block(_weight_transform(u, w_node, values, tf, plan, dtype), chunks))


def winograd_given_body(root: Node, out: Buffer, values: ValueBuilder, epilogue: Epilogue | None = None) -> Stmt:
    """The template of `conv2d_winograd(x, U)`: winograd_conv without the weight transform."""
    if epilogue is None:
        epilogue = lambda index, acc: E.cast(acc, out.value_dtype)  # noqa: E731
    return winograd_conv(root, out, values, epilogue, root.attrs["m"])


def _kind(inner: str | None, work: int, iterations: int) -> str:
    """The kind of a loop inside a chunk: `inner` when given, else parallel where the work pays for it."""
    return inner if inner is not None else _parallel_if(work, iterations)


TAP_BLOCK = 256  # output channels per block of the weight transform (its 9 x block staging buffer: 9 KiB)


def _weight_transform(u: _Region, w_node: Node, values: ValueBuilder, tf: WinogradTransforms, plan: WinogradPlan,
                      dtype: str) -> Stmt:
    """U[e][k // MR][c][k % MR] = (G g[k, c] G^T)[e]: for c (parallel), blocks of k, panels, k in a panel (vectorized).

    U is written as the GEMM's A panels (MR output channels for each input
    channel, zero past K), which the micro-kernel reads in place. The 9 taps
    of g[k, c] are first copied tap by tap into `taps[tap][k]`: one strided
    load per loop (GCC 12 does not vectorize a loop with several loads that
    share a stride), then the transform reads contiguous rows.
    """
    c, kb, kp, i, tap, kk = _var("uc"), _var("ukb"), _var("ukp"), _var("ui"), _var("utap"), _var("ukk")
    mr = plan.gemm.mr
    padded = _round_up(plan.c_out, mr)
    block_size = min(padded, max(TAP_BLOCK // mr, 1) * mr)
    taps = Buffer(f"{PREFIX}_taps", dtype, (9 * block_size,), scope="local")
    count = E.const(block_size) if padded % block_size == 0 else \
        E.minimum(E.const(block_size), padded - kb * block_size)
    k = kb * block_size + kk
    if padded == plan.c_out:
        tap_value = values.value(w_node, [k, c, tap // 3, tap % 3])
    else:  # zeros in the lanes past K
        tap_value = E.Select(E.lt(k, plan.c_out), values.value(
            w_node, [E.minimum(k, plan.c_out - 1), c, tap // 3, tap % 3]), E.Const(0.0, dtype))
    stage = For(tap, E.const(9), For(kk, count, Store(taps, tap * block_size + kk, tap_value), "vectorized"))
    g = [[E.Load(taps, (r * 3 + s) * block_size + kp * mr + i) for s in range(3)] for r in range(3)]
    at = (kb * (block_size // mr) + kp) * (plan.c_in * mr) + c * mr + i
    stmts = _tile_transform(tf.g, tf.g, g, dtype, "g",
                            lambda row, col, value: u.store((row * plan.n + col) * plan.u_stride + at, value))
    transform = For(kp, count // mr, For(i, E.const(mr), block(*stmts), "vectorized"))
    blocks = For(kb, E.const(-(-padded // block_size)), Alloc(taps, block(stage, transform)))
    work = plan.n * plan.n * plan.c_out * plan.c_in
    return For(c, E.const(plan.c_in), blocks, _parallel_if(work, plan.c_in))


def _tile_row(plan: WinogradPlan, chunk: E.Expr, rr: E.Expr) -> tuple[E.Expr, E.Expr, E.Expr]:
    """(valid, image, ty) of row rr of a chunk; past the last row, image and ty are those of the last."""
    q = chunk * plan.rows_per_chunk + rr
    valid = E.lt(q, plan.tile_rows)
    q = E.minimum(q, plan.tile_rows - 1)
    return valid, q // plan.th, q % plan.th


def _fill_strips(strips: _Region, x_node: Node, values: ValueBuilder, plan: WinogradPlan, chunk: E.Expr,
                 inner: str | None, dtype: str) -> Stmt:
    """strips[c][r][rr*P*m + x] = input[image, c, ty*m + r - pt, x - pl] for tile row rr of the chunk.

    Zero outside the image, on rows past the last and in the 2 columns past
    the last row, so the transforms read no selects and nothing undefined.
    Whether a line lies in the image is one test per line; within it the
    padding columns are stored as zeros and the image's columns copied as
    they are (a test and a clamped index per element cost as much as the
    input transform).
    """
    c, r, rr, x = _var("sc"), _var("sr"), _var("srow"), _var("sx")
    valid, img, ty = _tile_row(plan, chunk, rr)
    iy = ty * plan.m + r - plan.pt
    row_inside = E.logical_and(valid, E.logical_and(E.ge(iy, 0), E.lt(iy, plan.h)))
    line = (c * plan.n + r) * plan.strip_width
    segment = plan.pitch * plan.m
    start = line + rr * segment
    zero = E.Const(0.0, dtype)

    def zeros(offset: E.Expr, count: int) -> list[Stmt]:
        return [For(x, E.const(count), strips.store(offset + x, zero), "vectorized")] if count > 0 else []

    left = min(plan.pl, segment)
    middle = max(0, min(plan.pl + plan.w, segment) - left)
    copy = [For(x, E.const(middle), strips.store(start + left + x, values.value(
        x_node, [img, c, iy, x + (left - plan.pl)])), "vectorized")] if middle else []
    image_line = block(*zeros(start, left), *copy, *zeros(start + left + middle, segment - left - middle))
    rows = For(rr, E.const(plan.rows_per_chunk), If(row_inside, image_line, block(*zeros(start, segment))))
    used = plan.rows_per_chunk * segment
    tail = For(x, E.const(plan.strip_width - used), strips.store(line + used + x, zero), "vectorized")
    kind = _kind(inner, plan.c_in * plan.n * plan.strip_width, plan.c_in)
    return For(c, E.const(plan.c_in), For(r, E.const(plan.n), block(rows, tail)), kind)


def _input_transform(v: _Region, strips: _Region, tf: WinogradTransforms, plan: WinogradPlan, inner: str | None,
                     dtype: str) -> Stmt:
    """V[(i*n + j)][c][t] = (B^T d B)[i, j] for the n x n tile d of chunk tile t, vectorized over t.

    Row c of V[e] holds the chunk's tiles, so NR consecutive tiles are a B
    micro-panel of the GEMM (depth stride T), read in place.
    """
    c, t, corner = _var("vc"), _var("vt"), _var("vcorner")
    # corner: where tile t's top-left input element lies in the scratch buffer
    at_corner = Let(corner, strips.offset + c * (plan.n * plan.strip_width) + t * plan.m)
    tile = [[E.Load(strips.buffer, corner + (r * plan.strip_width + s)) for s in range(plan.n)]
            for r in range(plan.n)]
    stmts = _tile_transform(tf.bt, tf.bt, tile, dtype, "b", lambda i, j, value: v.store(
        (i * plan.n + j) * plan.v_stride + c * plan.chunk_tiles + t, value))
    tiles = For(t, E.const(plan.chunk_tiles), block(at_corner, *stmts), "vectorized")
    kind = _kind(inner, plan.n * plan.n * plan.c_in * plan.chunk_tiles, plan.c_in)
    return For(c, E.const(plan.c_in), tiles, kind)


def _output_transform(out: Buffer, mm: _Region, tf: WinogradTransforms, plan: WinogradPlan, chunk: E.Expr,
                      epilogue: Epilogue, inner: str | None, dtype: str) -> Stmt:
    """out[image, k, y, x] = epilogue(A^T M A) for the outputs inside the image, one channel at a time.

    The chunk's tiles are transformed, vectorized over tiles, into a staging
    buffer laid out as the strips (m rows of the chunk's rows side by side:
    stores m apart); then each output row is written with the epilogue in
    one contiguous, vectorized pass that drops the columns and rows past
    the image.
    """
    k, t, rr, a, x = _var("ok"), _var("ot"), _var("orow"), _var("oa"), _var("ox")
    width = plan.chunk_tiles * plan.m
    staged = Buffer(f"{PREFIX}_staged", dtype, (plan.m * width,), scope="local")
    tile = [[mm.load((i * plan.n + j) * plan.m_stride + k * plan.chunk_tiles + t) for j in range(plan.n)]
            for i in range(plan.n)]
    stmts = _tile_transform(tf.at, tf.at, tile, dtype, "a",
                            lambda a_, b_, value: Store(staged, a_ * width + t * plan.m + b_, value))
    transform = For(t, E.const(plan.chunk_tiles), block(*stmts), "vectorized")
    _, img, ty = _tile_row(plan, chunk, rr)
    y = ty * plan.m + a
    value = epilogue([img, k, y, x], E.Load(staged, a * width + rr * (plan.pitch * plan.m) + x))
    row_count = E.const(plan.m) if plan.oh % plan.m == 0 else E.minimum(E.const(plan.m), plan.oh - ty * plan.m)
    tile_rows = E.const(plan.rows_per_chunk)
    if plan.chunks * plan.rows_per_chunk > plan.tile_rows:  # the last chunk has padding rows
        tile_rows = E.minimum(tile_rows, plan.tile_rows - chunk * plan.rows_per_chunk)
    write = For(rr, tile_rows, For(a, row_count, For(x, E.const(plan.ow), Store(
        out, ((img * plan.c_out + k) * plan.oh + y) * plan.ow + x, value), "vectorized")))
    kind = _kind(inner, plan.n * plan.n * plan.c_out * plan.chunk_tiles, plan.c_out)
    return For(k, E.const(plan.c_out), Alloc(staged, block(transform, write)), kind)
