"""Shallow convolution on bf16 column pairs (`conv2d_shallow_bf16`, precision="bf16"): the RGB stem.

conv_shallow.py's kernel (vectors of output pixels, NCHW in and out, contiguous
row stores) with bfloat16 operands and float32 sums. A layer with 3 input
channels has no pairs of channels for `vdpbf16ps`; it pairs neighbouring taps
of a kernel row instead: taps 2p and 2p + 1 of output pixel ox read padded
columns sw*ox + 2p*dw and that + dw. The input is copied once into a *pair
plane* of bf16 where those two columns are adjacent:

    pair (chan, row, phase f, u) = (padded[row, sw*u + f], padded[row, sw*u + f + dw])

for the column phases f = 2p*dw mod sw that some tap pair uses (one for the
stride-2 stem: the pair plane is then the padded row itself). Pixel ox's pair
p is at u = ox + 2p*dw // sw, so the pairs of 16 consecutive pixels are one
contiguous vector for any stride. The weight was laid out at compile time as
tap pairs w[K, C/groups, KH, ceil(KW/2), 2] (passes/shallow_bf16_weights.py;
an odd KW gets a zero last tap, whose input column the plane holds as a finite
zero or pixel)::

    plane = pair plane of x, zero-padded                      (parallel over rows)
    offset[step] = where step (c, r, p) reads, relative to a tile's first pixel
    parallel for (n, oy, group g, channel tile):
      for each tile of T vectors of 16 pixels ox0 .. of row oy:
        acc[G][T][16] = sum over steps of vdpbf16ps(pairs of the pixels, broadcast tap pair of channel o)
        y[n, o0 + o, oy, ox0 + 16 i + j] = epilogue(acc[o][i][j])      contiguous stores, float32 epilogue

The tile (G, T) is conv_shallow.py's `shallow_tile`: a step is T vector loads,
G broadcasts and G*T `vdpbf16ps`, so the same register budget. The tile is
a C helper of intrinsics (conv_shallow_bf16_c.py) where the target has
AVX512-BF16 (`CpuTarget.bf16_dot`); without it, with AVX2 and FMA and vectors
of 8 lanes, bf16_widened_c.py's helper widens the pairs in registers; elsewhere
loop IR widens each bf16 value to float32 and adds the two products of a pair
with `fma`, in the order `vdpbf16ps` adds them (the same sums as that helper). A row's last vector is computed whole and only its
pixels in the row are stored; the plane's rows are wide enough for its loads.
"""
from __future__ import annotations

from ...ir.graph import Node
from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import Alloc, For, If, Let, NativeCall, Pointer, Stmt, Store, block
from ..inline import ValueBuilder
from ..run_time_choice import loop_kind, parallel_when, threads_if
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS
from ..target import cpu_target
from .conv_shallow import shallow_tile
from .bf16_widened_c import WIDENED_LANES, widened_shallow_tile_name, widened_shallow_tile_source
from .conv_shallow_bf16_c import LANES, shallow_tile_name, shallow_tile_source

PREFIX = "sb"


class PairPlane:
    """Geometry of the pair plane: per (image, channel), HP rows of `phases` column phases of WQ pairs."""

    def __init__(self, root: Node, lanes: int) -> None:
        x_node, pairs = root.inputs
        _, _, kh, self.tap_pairs, _ = pairs.shape
        oh, ow = root.shape[2:]
        sh, self.sw = root.attrs["stride"]
        dh, self.dw = root.attrs["dilation"]
        self.hp = (oh - 1) * sh + (kh - 1) * dh + 1
        starts = [2 * p * self.dw for p in range(self.tap_pairs)]  # pair p's first column, from pixel 0's
        self.phases = sorted({s % self.sw for s in starts})
        self.shifts = [s // self.sw for s in starts]
        self.wq = -(-ow // lanes) * lanes + max(self.shifts)  # the row's last vector is loaded whole
        self.row_pairs = len(self.phases) * self.wq
        self.channel_pairs = self.hp * self.row_pairs

    def offset(self, c: int, row: int, p: int) -> int:
        """Pairs from a tile's first pixel (channel 0, row 0) to step (c, row, p)."""
        slot = self.phases.index(2 * p * self.dw % self.sw)
        return c * self.channel_pairs + row * self.row_pairs + slot * self.wq + self.shifts[p]


def _copy_rows(root: Node, values: ValueBuilder, plane: PairPlane, buf: Buffer) -> Stmt:
    """Fill the pair plane, parallel over (image, channel, row): each phase's column pairs, zero outside
    the image.

    Element t of pair u of a phase holds column sw*u + phase + t*dw. Where sw = 2 dw (the stride-2
    stem) that is column phase + dw*e of the phase's element e = 2u + t: the phase is one run of
    contiguous stores (a plain copy of the padded row for dw = 1); otherwise each t is a run of stores
    two elements apart.
    """
    x_node = root.inputs[0]
    n_img, c_in, h, w = x_node.shape
    pt, _, pl, _ = root.attrs["padding"]
    v = lambda name: E.Var(f"{PREFIX}_{name}")  # noqa: E731
    row, e = v("row"), v("e")
    index, yy = row // plane.hp, row % plane.hp
    img, ch = index // c_in, index % c_in
    start = 2 * row * plane.row_pairs  # the row's first bf16 element
    zero = E.Const(0.0, "float32")  # a store into bfloat16 rounds (exact: 0 and bf16 values)

    def run(at: int, count: int, step: int, first: int, col_step: int) -> tuple[list[Stmt], list[Stmt]]:
        """(image row, margin row) stores of elements at + step*e, e < count, holding image column
        first + col_step*e (zero outside the image)."""
        lo = min(max(0, -(first // col_step) if first < 0 else 0), count)
        hi = min(max(lo, -(-(w - first) // col_step)), count)

        def stores(begin: int, end: int, value=None) -> list[Stmt]:
            if end <= begin:
                return []
            return [For(e, E.const(end - begin), Store(buf, start + at + step * (e + begin), zero if value is None
                                                       else value(e + begin)), "vectorized")]

        copy = stores(lo, hi, lambda i: values.value(x_node, [img, ch, yy - pt, first + col_step * i]))
        return stores(0, lo) + copy + stores(hi, count), stores(0, count)

    runs = []
    for slot, phase in enumerate(plane.phases):
        at = 2 * slot * plane.wq
        if plane.sw == 2 * plane.dw:
            runs.append(run(at, 2 * plane.wq, 1, phase - pl, plane.dw))
        else:
            runs += [run(at + t, plane.wq, 2, phase + t * plane.dw - pl, plane.sw) for t in (0, 1)]
    inside = [stmt for image_row, _ in runs for stmt in image_row]
    margin = [stmt for _, margin_row in runs for stmt in margin_row]
    rows_in = max(min(h, plane.hp - pt), 0)
    if rows_in == 0:
        body = block(*margin)
    elif (pt, pt + rows_in) == (0, plane.hp):
        body = block(*inside)
    else:
        body = If(E.logical_and(E.ge(yy, pt), E.lt(yy, pt + rows_in)), block(*inside), block(*margin))
    rows = n_img * c_in * plane.hp
    choice = parallel_when(rows * plane.row_pairs * 2, 2, PARALLEL_MIN_ELEMENTS)
    return For(row, E.const(rows), body, loop_kind(choice), threads_if(choice))


def uses_native_tile() -> bool:
    """The tile runs on the vdpbf16ps helper (else the widening loop IR)."""
    return cpu_target().bf16_dot


def uses_widened_tile(lanes: int) -> bool:
    """Without AVX512-BF16, vectors of `lanes` pixels run on the AVX2 helper that widens bf16 in registers."""
    target = cpu_target()
    return not target.bf16_dot and target.fma256 and lanes == WIDENED_LANES


def shallow_bf16_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """Loop IR computing epilogue(conv2d_shallow_bf16(x, pairs)); see the module docstring.

    `epilogue(index, acc)` gives the stored value of output element (n, k, oy, ox) whose sum is `acc`.
    """
    if epilogue is None:
        epilogue = lambda index, acc: E.cast(acc, out.value_dtype)  # noqa: E731
    if any(d == 0 for d in root.shape):
        return None
    x_node, w_node = root.inputs
    n_img, c_in = x_node.shape[:2]
    c_out, c_group, kh, tap_pairs, _ = w_node.shape
    oh, ow = root.shape[2:]
    groups = root.attrs["groups"]
    og = c_out // groups
    sh, _ = root.attrs["stride"]
    dh, _ = root.attrs["dilation"]
    native = uses_native_tile()
    target = cpu_target()
    lanes = LANES if native else max(1, target.vector_bytes // 4)
    widened = not native and uses_widened_tile(lanes)
    tile = shallow_tile(og, ow, lanes, target.vector_registers, tasks_per_tile_row=n_img * oh * groups)
    tiles_per_group = -(-og // tile.channels)
    plane = PairPlane(root, lanes)
    steps = c_group * kh * tap_pairs
    buf = Buffer(f"{PREFIX}_plane", "bfloat16", (2 * n_img * c_in * plane.channel_pairs,), scope="local")
    weights = values.buffers[w_node.id]

    v = lambda name: E.Var(f"{PREFIX}_{name}")  # noqa: E731
    task, ox_tile, step, i, o, j, q = (v(n) for n in ("task", "tx", "step", "i", "o", "j", "q"))
    x_at, w_at = v("x_at"), v("w_at")
    # Channel tiles innermost: consecutive tasks read the same input rows (still in L1).
    img = task // (oh * groups * tiles_per_group)
    oy = (task // (groups * tiles_per_group)) % oh
    grp = (task // tiles_per_group) % groups
    ctile = task % tiles_per_group
    o0 = grp * og + ctile * tile.channels
    # The steps' offsets as a table (one flat reduction loop, as in conv_shallow.py), filled once per call.
    offsets = Buffer(f"{PREFIX}_offsets", "int64", (steps,), scope="local")
    fill_offsets = [Store(offsets, E.const((c * kh + r) * tap_pairs + p), E.const(plane.offset(c, r * dh, p)))
                    for c in range(c_group) for r in range(kh) for p in range(tap_pairs)]

    def tile_code(channels: int, vectors: int, ox0: E.Expr, last_width: int) -> Stmt:
        """`channels` output channels from o0 x `vectors` vectors of pixels from ox0; the last vector
        stores its first `last_width` pixels only (the end of a row)."""
        acc = Buffer(f"{PREFIX}_acc", "float32", (channels * vectors * lanes,), scope="local")
        x_base = (img * c_in + grp * c_group) * plane.channel_pairs + oy * sh * plane.row_pairs + ox0  # in pairs
        if native or widened:
            name, text = (shallow_tile_name(channels, vectors), shallow_tile_source(channels, vectors)) if native \
                else (widened_shallow_tile_name(channels, vectors), widened_shallow_tile_source(channels, vectors))
            products: Stmt = NativeCall(name, (
                Pointer(buf, 2 * x_base), Pointer(weights, 2 * o0 * steps), Pointer(acc, E.const(0)),
                Pointer(offsets, E.const(0)), E.const(steps)), source=text)
        else:
            slot = (o * vectors + i) * lanes + j
            lanes_of = lambda stmt: For(o, E.const(channels), For(i, E.const(vectors), For(  # noqa: E731
                j, E.const(lanes), stmt, "vectorized"), "unrolled"), "unrolled")
            pair = x_at + i * lanes + j
            updates = [Store(acc, slot, E.call("fma", E.Load(buf, 2 * pair + t),
                                               E.Load(weights, 2 * (w_at + o * steps) + t), E.Load(acc, slot)))
                       for t in (0, 1)]  # the order vdpbf16ps adds a pair's products in
            zero = For(q, E.const(channels * vectors * lanes), Store(acc, q, E.Const(0.0, "float32")), "vectorized")
            products = block(zero, For(step, E.const(steps), block(
                Let(x_at, x_base + E.Load(offsets, step)), Let(w_at, o0 * steps + step), lanes_of(block(*updates)))))

        def stored(vector: E.Expr) -> Stmt:
            """The store of lane j of vector `vector` of channel o."""
            ox = ox0 + vector * lanes + j
            flat = ((img * c_out + o0 + o) * oh + oy) * ow + ox
            return Store(out, flat, epilogue([img, o0 + o, oy, ox], E.Load(acc, (o * vectors + vector) * lanes + j)))

        full = For(o, E.const(channels), For(i, E.const(vectors if last_width == lanes else vectors - 1), For(
            j, E.const(lanes), stored(i), "vectorized"), "unrolled"), "unrolled")
        last = For(o, E.const(channels), For(j, E.const(last_width), stored(E.const(vectors - 1)), "vectorized"),
                   "unrolled")
        store = full if last_width == lanes else (block(full, last) if vectors > 1 else last)
        return Alloc(acc, block(products, store))

    def row_code(channels: int) -> Stmt:
        """The tiles of one output row: full tiles, then one of the remaining (partly used) vectors."""
        span = tile.vectors * lanes
        full, rest = divmod(ow, span)
        parts: list[Stmt] = []
        if full:
            parts.append(For(ox_tile, E.const(full), tile_code(channels, tile.vectors, ox_tile * span, lanes)))
        if rest:
            parts.append(tile_code(channels, -(-rest // lanes), E.const(full * span), rest % lanes or lanes))
        return block(*parts)

    full_tiles, last = divmod(og, tile.channels)
    body = row_code(tile.channels)
    if last:
        body = If(E.lt(ctile, full_tiles), body, row_code(last)) if full_tiles else row_code(last)
    tasks = n_img * oh * groups * tiles_per_group
    choice = parallel_when(n_img * c_out * oh * ow * steps * 2, tasks, PARALLEL_MIN_ELEMENTS)
    nest = For(task, E.const(tasks), body, loop_kind(choice), threads_if(choice))
    return Alloc(offsets, Alloc(buf, block(*fill_offsets, _copy_rows(root, values, plane, buf), nest)))


__all__ = ["PairPlane", "shallow_bf16_body", "uses_native_tile", "uses_widened_tile"]
