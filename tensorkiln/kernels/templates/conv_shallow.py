"""Direct convolution for layers with few input channels (the RGB stem), NCHW in and out.

A layer with 3 input channels has a reduction of C*KH*KW = 27 (3x3) to 147
(7x7) per output: an implicit GEMM spends as much on packing the im2col
panel as on its FMAs, and the channel-blocked kernel (conv_nchwc.py), which
vectorizes over output channels, must transpose every accumulator to store
an NCHW output. This kernel vectorizes over output pixels instead, so its
stores are contiguous rows of the NCHW output::

    plane[n, c] = x[n, c] zero-padded, in `stride` column phases      (plane.py; parallel over rows)
    offset[step] = where step (c, r, s) reads, relative to a tile's first pixel   (once per call)
    parallel for (n, oy, group g, channel tile):
      for each tile of T vectors of V pixels ox0 .. ox0 + T*V - 1 of row oy:
        acc[G][T][V] = 0                                          G*T vector registers
        for step < Cg*KH*KW:                                      input channel of the group, taps
          xv[i][:] = plane[base(n, g, oy, ox0) + offset[step] + i*V + :]
                                                                  T contiguous vector loads
          for o < G (unrolled): for i < T (unrolled): for j < V (vectorized):
            acc[o][i][j] = fma(w[o0 + o][step], xv[i][j], acc[o][i][j])   one broadcast per channel
        y[n, o0 + o, oy, ox0 + i*V + j] = epilogue(acc[o][i][j])             contiguous stores

A step is T vector loads, G broadcasts and G*T FMAs on registers, as many
per load as the blocked kernel's; the column phases make the T loads
contiguous for any stride. The input vectors go through the small local
`xv` so GCC loads each once (left in the FMA it would load them again for
every channel). The reduction is one flat loop over a table of offsets:
with nested (c, r, s) loops GCC unrolled a 3-tap s loop, ran out of
registers and reloaded the input vectors for every channel (3x3 layers
1.6x slower), and computing c, r, s by div/mod per step made 7x7 layers
1.25x slower. A row whose width is not a whole number of tiles ends with a
tile of fewer vectors; a row's last vector is computed whole and only its
pixels in the row are stored (a 12-lane vector loop compiled to code 3x
slower than a full vector), so its loads may read up to V - 1 columns past
the row (the plane buffer ends with V zeros for the last one). Output
channels that do not fill the last tile get a narrower one.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.graph import Node
from ...loops import expr as E
from ...loops.buffer import Buffer
from ..inline import ValueBuilder
from ...loops.ir import Alloc, For, If, Let, Stmt, Store, block
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS, thread_count
from ..run_time_choice import loop_kind, parallel_when, threads_if
from ...loops.types import compute_dtype, itemsize
from ...shapes.symint import hint_of, is_symbolic
from .plane import PhasedPlane, fill_plane_row
from ..target import cpu_target

PREFIX = "sh"
FMA_LATENCY = 4  # cycles: each accumulator waits for its previous step's FMA


@dataclass(frozen=True)
class ShallowTile:
    """Register tile: `channels` output channels x `vectors` vectors of output pixels."""

    channels: int
    vectors: int


def shallow_tile(out_channels: int, width: int, lanes: int, registers: int, tasks_per_tile_row: int = 0,
                 threads: int = 0) -> ShallowTile:
    """The tile (G channels, T pixel vectors) with the fewest cycles per useful FMA.

    Registers hold the G*T accumulators, the T input vectors of a step and
    one broadcast weight. A step issues G*T FMAs and T + G loads; with two
    FMA and two load ports and an FMA latency of FMA_LATENCY cycles (every
    accumulator is updated once per step) it takes
    max(G*T/2, (T + G)/2, FMA_LATENCY) cycles. Rows end with narrower tiles
    and the channels with a narrower channel tile, all counted; the
    (image, row, channel tile) tasks are shared by the threads, so an uneven
    share costs what the idle thread waits. Ties go to larger tiles.
    A run-time task count (a symbolic batch or height) is weighed at its trace-time hint: the
    balance only ranks tiles, so it records no guard.
    """
    tasks_per_tile_row, width = hint_of(tasks_per_tile_row), hint_of(width)  # a run-time width ranks at its hint
    threads = threads or thread_count()
    vectors_per_row = -(-width // lanes)  # the last one partly used

    def cycles(g: int, t: int) -> float:
        return max(g * t / 2, (t + g) / 2, FMA_LATENCY) if g and t else 0.0

    def row_cycles(g: int, t: int) -> float:
        full, rest = divmod(vectors_per_row, t)
        return full * cycles(g, t) + cycles(g, rest)

    useful = out_channels * width / lanes  # vector FMAs per step that compute output pixels
    best, best_score = ShallowTile(1, 1), None
    for g in range(1, out_channels + 1):
        for t in range(1, vectors_per_row + 1):
            if g * t + t + 1 > registers:
                break
            full, rest = divmod(out_channels, g)
            total = full * row_cycles(g, t) + row_cycles(rest, t)
            tasks = -(-out_channels // g) * max(tasks_per_tile_row, 1)
            balance = tasks / (-(-tasks // threads) * threads) if tasks_per_tile_row else 1.0
            score = (total / useful / balance, -g * t)
            if best_score is None or score < best_score:
                best, best_score = ShallowTile(g, t), score
    return best


def with_sizes(rule: ShallowTile, channels: int, vectors: int) -> ShallowTile:
    """The rule's tile with a tuned configuration's non-zero sizes in place of its own."""
    return ShallowTile(channels or rule.channels, vectors or rule.vectors)


def shallow_tile_fits(tile: ShallowTile, out_channels: int, width: int, lanes: int, registers: int) -> bool:
    """The tile's accumulators, a step's input vectors and one broadcast fit the registers (shallow_tile's
    own bound), and it is no larger than the layer's channels and row of vectors."""
    g, t = tile.channels, tile.vectors
    return 1 <= g <= out_channels and 1 <= t <= -(-hint_of(width) // lanes) and g * t + t + 1 <= registers


def _weight(values: ValueBuilder, w_node: Node, flat: E.Expr, *index: E.Expr) -> E.Expr:
    """Weight element: a load at `flat` from its buffer, else its inlined expression at `index`."""
    buf = values.buffers.get(w_node.id)
    if buf is not None and w_node is not values.inline_root and w_node.id not in values.known:
        return E.Load(buf, flat)
    return values.value(w_node, list(index))


def _planes(root: Node, values: ValueBuilder, dtype: str, lanes: int) -> tuple[PhasedPlane, Stmt]:
    """The zero-padded input planes in column phases, one per (image, channel), and their copy.

    A row's last vector of pixels is computed whole (only its pixels in the
    row are stored), so its loads reach up to lanes - 1 columns past a
    plane row: into the next row or plane, or into `lanes` zeros after the
    last one.
    """
    x_node, w_node = root.inputs
    n_img, c_in, h, w = x_node.shape
    kh, kw = w_node.shape[2:]
    oh, ow = root.shape[2:]
    sh, sw = root.attrs["stride"]
    dh, dw = root.attrs["dilation"]
    pt, _, pl, _ = root.attrs["padding"]
    hp = (oh - 1) * sh + (kh - 1) * dh + 1
    wp = (ow - 1) * sw + (kw - 1) * dw + 1
    wq = -(-wp // sw)
    size = n_img * c_in * sw * hp * wq
    buf = Buffer(f"{PREFIX}_plane", dtype, (size + lanes,), scope="local")
    plane = PhasedPlane(buf, hp, wp, sw)
    row = E.Var(f"{PREFIX}_row")
    index, yy = row // hp, row % hp
    img, ch = index // c_in, index % c_in
    fill = fill_plane_row(plane, index * (sw * hp * wq), yy,
                          lambda iy, ix: E.cast(values.value(x_node, [img, ch, iy, ix]), dtype),
                          (h, w), (pt, pl), E.Const(0.0, dtype), PREFIX)
    choice = parallel_when(size, 2, PARALLEL_MIN_ELEMENTS)  # per call for run-time sizes
    q = E.Var(f"{PREFIX}_slack")
    slack = For(q, E.const(lanes), Store(buf, size + q, E.Const(0.0, dtype)), "vectorized")
    return plane, block(For(row, E.const(n_img * c_in * hp), fill, loop_kind(choice), threads_if(choice)), slack)


def shallow_conv_body(root: Node, out: Buffer, values: ValueBuilder, epilogue,
                      sizes: tuple[int, int] = (0, 0)) -> Stmt | None:
    """Loop IR computing epilogue(conv2d(x, w)) for NCHW x and w[K, C/groups, KH, KW]; see the module docstring.

    `epilogue(index, acc)` gives the stored value of output element
    (n, k, oy, ox) whose convolution sum is `acc`. sizes: a tuned tile's (channels, vectors), 0 for the
    rule's (conv_choice.ConvConfig's shallow sizes).
    """
    if any(d == 0 for d in root.shape):
        return None
    x_node, w_node = root.inputs
    n_img, c_in = x_node.shape[:2]
    c_out, c_group, kh, kw = w_node.shape
    oh, ow = root.shape[2:]
    groups = root.attrs["groups"]
    og = c_out // groups
    sh, sw = root.attrs["stride"]
    dh, dw = root.attrs["dilation"]
    dtype = compute_dtype(root.dtype.name)
    target = cpu_target()
    lanes = max(1, target.vector_bytes // itemsize(dtype))
    tile = with_sizes(shallow_tile(og, ow, lanes, target.vector_registers, tasks_per_tile_row=n_img * oh * groups),
                      *sizes)
    tiles_per_group = -(-og // tile.channels)
    plane, copy = _planes(root, values, dtype, lanes)
    plane_size = plane.sw * plane.hp * plane.wq
    taps = c_group * kh * kw

    v = lambda name: E.Var(f"{PREFIX}_{name}")  # noqa: E731
    task, ox_tile, step, i, o, j, q = (v(n) for n in ("task", "tx", "step", "i", "o", "j", "q"))
    x_at, w_at = v("x_at"), v("w_at")
    # Channel tiles innermost: consecutive tasks read the same input rows (still in L1).
    img = task // (oh * groups * tiles_per_group)
    oy = (task // (groups * tiles_per_group)) % oh
    grp = (task // tiles_per_group) % groups
    ctile = task % tiles_per_group
    o0 = grp * og + ctile * tile.channels
    # Step (c, r, s) of the reduction reads the planes at a fixed offset from the tile's first
    # pixel; the offsets are tabulated once per call, so the reduction is one flat loop with no
    # div/mod. Nested c, r, s loops instead let GCC unroll a short s loop (3 taps) and then
    # reload the input vectors for every channel, which made 3x3 layers 1.6x slower.
    offsets = Buffer(f"{PREFIX}_offsets", "int64", (taps,), scope="local")
    c, r, s = step // (kh * kw), step // kw % kh, step % kw
    fill_offsets = For(step, E.const(taps), Store(
        offsets, step, c * plane_size + plane.at(s * dw % sw, r * dh, s * dw // sw)))

    def tile_code(channels: int, vectors: int, ox0: E.Expr, last_width: int | E.Expr) -> Stmt:
        """One tile: `channels` output channels from o0 x `vectors` vectors of pixels from ox0, whose
        last vector stores its first `last_width` pixels only (the end of a row; a run-time count
        at the end of a row of run-time width)."""
        acc = Buffer(f"{PREFIX}_acc", dtype, (channels * vectors * lanes,), scope="local")
        xv = Buffer(f"{PREFIX}_x", dtype, (vectors * lanes,), scope="local")
        # Each step's offsets are named once: the loads of the unrolled vectors and channels are
        # then one base register plus constant displacements.
        x_base = (img * c_in + grp * c_group) * plane_size + plane.at(0, oy * sh, ox0)
        step_offsets = block(Let(x_at, x_base + E.Load(offsets, step)), Let(w_at, o0 * taps + step))
        load_x = For(i, E.const(vectors), For(j, E.const(lanes), Store(
            xv, i * lanes + j, E.Load(plane.buffer, x_at + i * lanes + j)), "vectorized"), "unrolled")
        weight = _weight(values, w_node, w_at + o * taps, o0 + o, c, r, s)

        def lanes_of(stmt: Stmt, count: int) -> Stmt:
            """stmt over channels o < channels, vectors i < count and lanes j < lanes."""
            return For(o, E.const(channels), For(i, E.const(count), For(
                j, E.const(lanes), stmt, "vectorized"), "unrolled"), "unrolled")

        def stored(vector: E.Expr) -> Stmt:
            """The store of lane j of vector `vector` of channel o."""
            ox = ox0 + vector * lanes + j
            flat = ((img * c_out + o0 + o) * oh + oy) * ow + ox
            return Store(out, flat, epilogue([img, o0 + o, oy, ox], E.Load(acc, (o * vectors + vector) * lanes + j)))

        slot = (o * vectors + i) * lanes + j
        # fma: one rounding per step, and C compiled as -std=c99 contracts nothing by itself
        update = E.call("fma", E.cast(weight, dtype), E.Load(xv, i * lanes + j), E.Load(acc, slot))
        reduce = For(step, E.const(taps), Alloc(xv, block(
            step_offsets, load_x, lanes_of(Store(acc, slot, update), vectors))))
        if isinstance(last_width, int) and last_width == lanes:
            store = lanes_of(stored(i), vectors)
        else:  # the row's last vector: only its first last_width pixels are in the row
            width = last_width if isinstance(last_width, E.Expr) else E.const(last_width)
            last = For(o, E.const(channels), For(j, width, stored(E.const(vectors - 1)),
                                                 "vectorized"), "unrolled")
            store = block(lanes_of(stored(i), vectors - 1), last) if vectors > 1 else last
        zero = For(q, E.const(channels * vectors * lanes), Store(acc, q, E.Const(0.0, dtype)), "vectorized")
        return Alloc(acc, block(zero, reduce, store))

    def row_code(channels: int) -> Stmt:
        """The tiles of one output row: full tiles, then one of the remaining (partly used) vectors."""
        span = tile.vectors * lanes
        full, rest = ow // span, ow % span
        parts: list[Stmt] = []
        if is_symbolic(full) or full:
            parts.append(For(ox_tile, E.const(full), tile_code(channels, tile.vectors, ox_tile * span, lanes)))
        if is_symbolic(rest):  # a run-time row: its last 0..span-1 pixels one vector at a time
            first, left = E.const(full * span), E.const(rest) - ox_tile * lanes
            parts.append(For(ox_tile, E.const((rest + lanes - 1) // lanes), tile_code(
                channels, 1, first + ox_tile * lanes, E.minimum(E.const(lanes), left))))
        elif rest:
            parts.append(tile_code(channels, -(-rest // lanes), E.const(full * span), rest % lanes or lanes))
        return block(*parts)

    full_tiles, last = divmod(og, tile.channels)
    body = row_code(tile.channels)
    if last:
        body = If(E.lt(ctile, full_tiles), body, row_code(last)) if full_tiles else row_code(last)
    tasks = n_img * oh * groups * tiles_per_group
    work = n_img * c_out * oh * ow * taps
    choice = parallel_when(work, tasks, PARALLEL_MIN_ELEMENTS)  # per call for run-time sizes
    nest = For(task, E.const(tasks), body, loop_kind(choice), threads_if(choice))
    return Alloc(offsets, Alloc(plane.buffer, block(fill_offsets, copy, nest)))
