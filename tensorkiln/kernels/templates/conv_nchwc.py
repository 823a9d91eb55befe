"""Direct convolution in channel-blocked layout (NCHW[x]c), register-blocked as oneDNN's AVX-512 kernels.

`conv2d_nchwc` reads x[N, C/cb, H, W, cb] and w[K/kb, C/cb, KH, KW, cb, kb]
and writes y[N, K/kb, OH, OW, kb], kb being one vector of output channels
(16 float32 on AVX-512, 8 on AVX2). Nothing is packed: each output tile is
a few pixels of one output row times a few blocks of output channels, held
in vector registers for the whole reduction::

    xpad = x with a zero border (only for a padded layer, or an input in NCHW)
    parallel for (n, group g of G channel blocks, oy):
      for each tile of T pixels ox0 .. ox0+T-1 of row oy:
        acc[T][G][kb] = 0                                     T*G vector registers
        for icb, r, s, ic:                                    input block, taps, channel in the block
          wvec[o][:] = w[g*G + o, icb, r, s, ic, :]           G vector loads
          for i < T (unrolled): for o < G (unrolled): for j < kb (vectorized):
            acc[i][o][j] = fma(x[n, icb, oy*sh + r*dh, (ox0+i)*sw + s*dw, ic],   one broadcast per pixel
                               wvec[o][j], acc[i][o][j])
        y[n, g*G + o, oy, ox0 + i, :] = epilogue(acc[i][o][:])                   contiguous stores

So a step is G weight loads, T broadcasts and T*G FMAs on registers
(tests/kernels/test_conv_nchwc.py reads the inner loop back with objdump).
Two details make GCC emit exactly that: the weights go through the small
local `wvec` (else it folds the weight load into every FMA, T loads per
vector), and each step's offsets are named once (`x_at`, `w_at`), so the
pixel loads are one base register plus constant displacements. The tile
(T, G) is chosen per layer (`nchwc_tile`); a row whose width T does not
divide ends with one narrower tile, unless the tile runs along the whole
plane (a 1x1 layer, or a small tile: conv_plane.py). With input blocks of one channel (an RGB
stem) the taps are the innermost loop and GCC unrolls them, keeping a
broadcast per tap and the epilogue's constants live: the tile leaves
registers for those (`tile_leaves`, epilogue_registers.py). Only the rule's
tile is chosen again (the kernel's `tuning:` comment names the rule's tile before
that check); a tuned record's tile runs as it was measured.

Padding: the input is first copied once into a local xpad[N, C/cb, Hp, Wp, cb]
whose border is zero (rows wholly in the margin and the left and right
margins are zero-filled, the interior copied), so the hot loop never tests a
border. The copy also converts an NCHW input (x[N, C, H, W], the start of a
chain) into blocks, and for a strided 1x1 layer keeps only the pixels it
reads. An unpadded layer whose input is already a blocked buffer reads it
where it lies. At the end of a chain (out_layout "nchw") each lane j is
stored to channel kb*block + j of an NCHW output instead.

Depthwise (groups = channels; weight w[C/kb, 1, KH, KW, 1, kb]): output
block b lane j reads input block b lane j, so a step is one tap: a weight
vector and, per pixel, an input vector (not a broadcast) and one FMA; the
tile is one channel block of as many pixels as registers hold
(`depthwise_tile`). Lanes stay full on any plane size, which the NCHW
depthwise template (vectorized along a row of 7-28 pixels) cannot do. With
so little work per input element, a padded copy of the whole input through
memory would cost as much as the convolution, so a blocked input is read
where it lies and the taps outside the image are skipped instead: each
output row runs over the kernel rows that fall inside the image, and the
few edge pixels of a row (1 on each side for a 3x3 kernel with padding 1)
are one-pixel tiles over the columns they can read; the other pixels never
meet the border (`_tap_range`). An NCHW input (the start of a chain) is
converted to blocks by each task (a band of output rows of one channel
block), which copies the padded rows it reads into a local buffer.
(MobileNetV2's stride-2 depthwise layers: ~25% faster than through the
band copies, whose 17 rows of 112 pixels did not stay in L1.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...ir.graph import Node
from ...loops import expr as E
from ...loops.buffer import Buffer
from ..inline import ValueBuilder
from ...loops.ir import Alloc, For, If, Let, Stmt, Store, block
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS, thread_count
from ..run_time_choice import loop_kind, parallel_when, threads_if
from ...loops.types import compute_dtype, itemsize
from ...shapes.symint import hint_of, is_symbolic
from ..target import cpu_target
from .depthwise_columns import depthwise_columns_tile, depthwise_row_update
from .epilogue_registers import epilogue_registers
from .bf16_store import bf16_tile_store, uses_vector_store
from .conv_plane import is_pointwise_plane, is_window_plane, plane_chunks, plane_tiles
from .plane import as_expr, is_run_time, run_time_min

PREFIX = "nc"


@dataclass(frozen=True)
class TileAt:
    """Where a tile's lane stands: image, group, output row, first pixel, and the lane loops (pixel, block, lane).

    `plane_width` > 0: the plane is tiled as one row (conv_plane.py), oy is 0 and ox0 + i counts the
    pixels of the plane, a row of `plane_width` pixels being one image row.
    """
    img: E.Expr
    grp: E.Expr
    oy: E.Expr
    ox0: E.Expr
    i: E.Var
    o: E.Var
    j: E.Var
    plane_width: int = 0


@dataclass(frozen=True)
class TileShape:
    """A tile of `pixels` x `g_blocks` blocks of `kb` channels in an output of `kblocks` blocks, oh x ow."""
    pixels: int
    g_blocks: int
    kb: int
    kblocks: int
    oh: object
    ow: object


def tile_store(out: Buffer, acc: Buffer, lanes: Callable[[Stmt], Stmt], epilogue: Callable, blocked_out: bool,
               at: TileAt, shape: TileShape) -> Stmt:
    """Store accumulators `acc` (slot (i*g_blocks + o)*kb + j) through `epilogue` into `out`.

    A blocked output (NCHWc) keeps lane j in block kblock; the end of a chain writes plain NCHW,
    lane j being channel kblock*kb + j. bf16 blocks of 16 convert with vcvtneps2bf16 (bf16_store.py).
    """
    img, oy, ox0, i, o, j = at.img, at.oy, at.ox0, at.i, at.o, at.j
    kb, kblocks, oh, ow = shape.kb, shape.kblocks, shape.oh, shape.ow
    slot = (i * shape.g_blocks + o) * kb + j
    kblock = at.grp * shape.g_blocks + o
    # the epilogue reads its other operands at the pixel's (row, column); the stores are linear in both
    y, x = ((ox0 + i) // at.plane_width, (ox0 + i) % at.plane_width) if at.plane_width else (oy, ox0 + i)
    if blocked_out:
        out_index = [img, kblock, y, x, j]
        flat = (((img * kblocks + kblock) * oh + oy) * ow + ox0 + i) * kb + j
    else:
        out_index = [img, kblock * kb + j, y, x]
        flat = ((img * (kblocks * kb) + kblock * kb + j) * oh + oy) * ow + ox0 + i
    value = epilogue(out_index, E.Load(acc, slot))
    if blocked_out and uses_vector_store(out, kb):  # the epilogue in place, then vcvtneps2bf16
        out_at = (((img * kblocks + kblock) * oh + oy) * ow + ox0) * kb
        return bf16_tile_store(out, acc, lanes, slot, value, o, shape.g_blocks, shape.pixels, out_at)
    return lanes(Store(out, flat, value))


@dataclass(frozen=True)
class NchwcTile:
    """Register tile of the blocked convolution: `pixels` output pixels x `blocks` output-channel blocks."""

    pixels: int
    blocks: int


def channel_block(channels: int) -> int | None:
    """The channel block for `channels` on this CPU: one vector of float32 (or half of one), or None."""
    lanes = cpu_target().vector_bytes // 4
    for kb in (lanes, lanes // 2):
        if kb >= 4 and channels % kb == 0:
            return kb
    return None


L2_BYTES_PER_CYCLE = 32  # sustained L2 -> L1 bandwidth of one core, about half the peak on recent x86


def weight_vectors_in_registers(vector_registers: int) -> int:
    """How many weight vectors of a step GCC keeps in registers in the loop-IR tile.

    With 16 vector registers (AVX2) two: with three or more (a 4 x 3 tile of an output of 24
    channels) it reads every weight vector from memory again in each pixel's FMA, T loads per
    vector instead of one, even where the tile leaves registers free (2 x 3). With 32 (AVX-512) it
    keeps them all: the same C built for skylake-avx512 holds no weight operand in memory.
    (objdump; tests/kernels/test_conv_plane.py checks the rule's tile on the host.)
    """
    return 2 if vector_registers <= 16 else vector_registers


def nchwc_tile(kblocks: int, kb: int, ow: int, dtype: str = "float32", tasks_per_block: int = 0,
               threads: int = 0, weight_copies: int = 1, spare: int = 1, loop_ir: bool = True) -> NchwcTile:
    """The tile (T pixels, G channel blocks) that needs the fewest cycles per useful FMA on this CPU.

    Registers must hold the T*G*v accumulators, the G*v weight vectors of a
    step and one broadcast (v vectors per channel block): past that GCC
    spills or reloads the weights for every pixel. A step (one input channel
    of one tap) issues T*G*v FMAs, T + G*v loads, and streams G*v weight
    vectors from L2 (a layer's weights rarely fit in L1); with two FMA and
    two load ports it takes max(FMAs/2, loads/2, L2 bytes / 32) cycles. A row
    is full tiles plus one narrower tail tile, counted too; the
    (image, channel group, row) tasks are shared by the threads, so an
    uneven share costs what the idle thread waits. Ties go to wider tiles
    (each weight vector reused by more pixels).

    A loop-IR tile (`loop_ir`: not a hand-written helper) of more weight vectors than GCC keeps
    in registers (`weight_vectors_in_registers`) counts a load per vector and pixel.

    `weight_copies` and `spare`: a tile that holds each weight vector more than once (bf16_widened_c.py:
    the raw pairs and one widened half) or needs more than one register beside the accumulators and
    weights (a broadcast) says so, and the tiles are fitted to what is left.

    A run-time task count (a symbolic batch or height) and a run-time row width are weighed at their
    trace-time hints: they only rank tiles, every tile is correct at every size (a run-time row ends
    in tail tiles chosen per call, `_row_tiles`), so the choice records no guard.
    """
    tasks_per_block, ow = hint_of(tasks_per_block), hint_of(ow)
    target = cpu_target()
    v = max(1, -(-kb * itemsize(dtype) // target.vector_bytes))
    threads = threads or thread_count()
    kept = weight_vectors_in_registers(target.vector_registers) if loop_ir else target.vector_registers

    def cycles(t: int, g: int) -> float:
        weight_loads = g * v if g * v <= kept else t * g * v
        return max(t * g * v / 2, (t + weight_loads) / 2, g * v * target.vector_bytes / L2_BYTES_PER_CYCLE) \
            if t else 0.0

    best, best_score = NchwcTile(1, 1), None
    for g in range(1, kblocks + 1):
        if kblocks % g or weight_copies * g * v + spare + 1 > target.vector_registers:
            continue
        for t in range(1, ow + 1):
            if t * g * v + weight_copies * g * v + spare > target.vector_registers:
                break
            full, tail = divmod(ow, t)
            per_row = (full * cycles(t, g) + cycles(tail, g)) / (ow * g * v)
            tasks = (kblocks // g) * max(tasks_per_block, 1)
            balance = tasks / (-(-tasks // threads) * threads) if tasks_per_block else 1.0
            score = (per_row / balance, -t)
            if best_score is None or score < best_score:
                best, best_score = NchwcTile(t, g), score
    return best


def tile_leaves(tile: NchwcTile, kb: int, dtype: str, reserved: int) -> bool:
    """Whether `tile`'s accumulators, a step's weight vectors and a broadcast fit beside `reserved` registers."""
    target = cpu_target()
    v = max(1, -(-kb * itemsize(dtype) // target.vector_bytes))
    return (tile.pixels + 1) * tile.blocks * v + 1 + reserved <= target.vector_registers


DEPTHWISE_BAND_ROWS = 8  # output rows per depthwise task at most (its input copy: 10 rows at stride 1)
DEPTHWISE_TASKS_PER_THREAD = 8  # bands short enough that the tasks still balance among the threads


def depthwise_band(planes: int, oh: int, threads: int | None = None) -> int:
    """Output rows per task of a depthwise layer with `planes` (image, channel block) planes of `oh` rows."""
    threads = threads or thread_count()
    return max(1, min(DEPTHWISE_BAND_ROWS, oh, planes * oh // (DEPTHWISE_TASKS_PER_THREAD * threads)))


def depthwise_tile(ow: int, kw: int = 3) -> NchwcTile:
    """The tile of a depthwise layer: one channel block, as many pixels as registers allow.

    There is no input channel to reuse a load across: a tile shares its KW
    weight vectors of a kernel row among its pixels and each input column among
    the pixels and taps that read it (depthwise_columns.py); the accumulators,
    the weights and a loaded column must stay in registers.
    """
    # a run-time width ranks tiles at its hint: every tile is correct at every width (`_row_tiles`)
    return NchwcTile(depthwise_columns_tile(hint_of(ow), kw, cpu_target().vector_registers), 1)


def _blocked_buffer_input(root: Node, values: ValueBuilder) -> bool:
    """The layer's input is a blocked buffer (not an NCHW tensor, not an inlined expression)."""
    return _input_buffer(root, values) is not None


def _input_buffer(root: Node, values: ValueBuilder) -> Buffer | None:
    """The blocked buffer holding the layer's input, or None. With precision="bf16" a depthwise
    layer's input may widen a stored bfloat16 value (grouping.py stores it so: half the bytes);
    the kernel reads that buffer, each load widening a value to float32 exactly. Where the widened
    value is itself stored (float32 holding rounded values: a target without AVX512-BF16), the kernel
    reads that buffer in place, as a float32 layer would."""
    x_node = root.inputs[0]
    widens = x_node.op == "cast" and x_node.inputs[0].dtype.name == "bfloat16"
    if _is_depthwise(root) and widens and x_node.id not in values.buffers:
        x_node = x_node.inputs[0]
    if (x_node.ndim == 5 and x_node.id in values.buffers and x_node is not values.inline_root
            and x_node.id not in values.known):
        return values.buffers[x_node.id]
    return None


def _reads_in_place(root: Node, values: ValueBuilder) -> bool:
    """The kernel reads its blocked input where it lies, no copy: an unpadded layer, or a
    depthwise one (whose taps outside the image are skipped, `_tap_range`)."""
    source = _input_buffer(root, values)
    if source is None or (DEPTHWISE_WIDENS_IN_ROWS and _is_depthwise(root) and source.dtype == "bfloat16"):
        return False
    return not any(root.attrs["padding"]) or _is_depthwise(root)


# A depthwise layer reading bfloat16 storage widens each input element once, as it copies the rows of
# its band (9 loads of each element follow), rather than at each of its 9 taps read in place.
DEPTHWISE_WIDENS_IN_ROWS = True


def _tap_range(out_at: E.Expr | int, stride: int, pad: int, dilation: int, taps: int,
               size: int) -> tuple[E.Expr, E.Expr]:
    """(first tap, count) of the taps t whose input out_at*stride + t*dilation - pad lies in [0, size)."""
    def ceil_div(a: E.Expr | int) -> E.Expr | int:
        return a if dilation == 1 else -(-a // dilation) if isinstance(a, int) else (a + (dilation - 1)) // dilation
    start, stop = pad - out_at * stride, size + pad - out_at * stride
    if isinstance(out_at, int):
        first, last = max(0, ceil_div(start)), min(taps, ceil_div(stop))
        return E.const(first), E.const(max(0, last - first))
    first = E.maximum(E.const(0), ceil_div(start))
    return first, E.maximum(E.const(0), E.minimum(E.const(taps), ceil_div(stop)) - first)


def _input_blocks(root: Node) -> tuple[int, int]:
    """(blocks, channels per block) of the input as the kernel reads it.

    A groups-1 layer's weight blocks the input channels (C/cb, cb); a
    depthwise one reads channel block b, lane j for output block b, lane j,
    so its input is blocked as its output.
    """
    if root.inputs[1].ndim == 7:  # conv2d_nchwc_bf16's pairs (K/kb, C/cb, KH, KW, cb/2, kb, 2)
        return root.inputs[1].shape[1], 2 * root.inputs[1].shape[4]
    kblocks, cblocks, _, _, cb, kb = root.inputs[1].shape
    return (kblocks, kb) if _is_depthwise(root) else (cblocks, cb)


def _is_depthwise(root: Node) -> bool:
    return root.attrs.get("groups", 1) > 1


def _padded_copy(root: Node, values: ValueBuilder, xpad: Buffer, hp: int, wp: int,
                 sample: tuple[int, int] = (1, 1)) -> Stmt:
    """xpad[n, icb, yy, xx, c] = x[n, icb, yy*sy - pt, xx*sx - pl, c] inside the image, 0 in the margins.

    An NCHW input is read as x[n, icb*cb + c, y, x]: the copy is also the conversion to blocks.
    `sample` (sy, sx) > 1 keeps every sy-th row and sx-th column only (a strided 1x1 layer reads
    no others). Rows wholly in the margin and the left and right margins are zero-filled, the
    rest copied: no selects.
    """
    n_img = root.inputs[0].shape[0]
    cblocks, cb = _input_blocks(root)
    row = E.Var(f"{PREFIX}_row")
    plane = row // hp
    body = _padded_row(root, values, xpad, row * (wp * cb), plane // cblocks, plane % cblocks, row % hp,
                       hp, wp, sample)
    choice = parallel_when(n_img * cblocks * hp * wp * cb, 2, PARALLEL_MIN_ELEMENTS)  # per call if run-time
    return For(row, E.const(n_img * cblocks * hp), body, loop_kind(choice), threads_if(choice))


def _padded_row(root: Node, values: ValueBuilder, buf: Buffer, base: E.Expr, img: E.Expr, icb: E.Expr,
                yy: E.Expr, hp: int, wp: int, sample: tuple[int, int] = (1, 1)) -> Stmt:
    """buf[base + xx*cb + c] = padded input row yy of (image, input block icb): zeros in the margins."""
    x_node = root.inputs[0]
    h, w = x_node.shape[2], x_node.shape[3]
    _, cb = _input_blocks(root)
    pt, _, pl, _ = root.attrs["padding"]
    sy, sx = sample
    zero = E.Const(0.0, buf.value_dtype)
    q = E.Var(f"{PREFIX}_q")
    # padded rows [y_lo, y_hi) and columns [x_lo, x_hi) come from inside the image
    # (with run-time sizes the bounds are computed per call: comparing them would guard on parities)
    y_lo, y_hi = -(-pt // sy), run_time_min(hp, (h + pt + sy - 1) // sy)
    x_lo, x_hi = -(-pl // sx), run_time_min(wp, (w + pl + sx - 1) // sx)
    c = q % cb
    y, col = yy * sy - pt, (x_lo + q // cb) * sx - pl
    element = values.value(x_node, [img, icb, y, col, c] if x_node.ndim == 5 else [img, icb * cb + c, y, col])
    inside = block(*(s for s in (
        For(q, E.const(x_lo * cb), Store(buf, base + q, zero), "vectorized") if x_lo else None,
        For(q, as_expr((x_hi - x_lo) * cb), Store(buf, base + x_lo * cb + q, element), "vectorized"),
        For(q, as_expr((wp - x_hi) * cb), Store(buf, base + x_hi * cb + q, zero), "vectorized")
        if is_run_time(x_hi, wp) or x_hi < wp else None) if s is not None))
    margin = For(q, E.const(wp * cb), Store(buf, base + q, zero), "vectorized")
    if not is_run_time(y_hi, hp) and (y_lo, y_hi) == (0, hp):
        return inside
    return If(E.logical_and(E.ge(yy, y_lo), E.lt(yy, as_expr(y_hi))), inside, margin)


def _row_tiles(tile_code, ox_tile: E.Var, x_first, x_stop, t_full: int) -> list[Stmt]:
    """The tiles of output pixels [x_first, x_stop) of a row: whole tiles of `t_full` pixels, then the tail.

    A run-time width leaves a tail of 0..t_full-1 pixels known per call: it is covered by one tile of
    each power of two its count holds (`if (tail % 8 >= 4)` a 4-pixel tile, ...), widest first, so the
    tail's pixels still share their weight loads and the loop IR keeps static tile sizes.
    """
    tiles: list[Stmt] = []
    full, tail = (x_stop - x_first) // t_full, (x_stop - x_first) % t_full
    if is_symbolic(full) or full:
        first = ox_tile * t_full + E.const(x_first) if is_symbolic(x_first) or x_first else ox_tile * t_full
        tiles.append(For(ox_tile, E.const(full), tile_code(t_full, first)))
    if not is_symbolic(tail):
        if tail:
            tiles.append(tile_code(tail, E.const(x_first + full * t_full)))
        return tiles
    count, first = E.const(tail), E.const(x_first + full * t_full)
    bit = 1 << (t_full - 1).bit_length()
    while bit > 1:
        bit //= 2
        wider = count - count % (2 * bit)  # pixels of this tail that the wider tiles took
        tiles.append(If(E.ge(count % (2 * bit), bit), tile_code(bit, first + wider)))
    return tiles


def _is_zero(e: E.Expr) -> bool:
    return isinstance(e, E.Const) and e.value == 0


def _weight(values: ValueBuilder, w_node: Node, flat: E.Expr, *index: E.Expr) -> E.Expr:
    """Weight element: a load at `flat` from its buffer, else its inlined expression at `index`."""
    buf = values.buffers.get(w_node.id)
    if buf is not None and w_node is not values.inline_root and w_node.id not in values.known:
        return E.Load(buf, flat)
    return values.value(w_node, list(index))


def conv2d_nchwc_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None, tile: NchwcTile | None = None,
                      groups_inner: bool = False, rule_tile: bool = True) -> Stmt | None:
    """Loop IR computing epilogue(conv2d_nchwc(x, w)); see the module docstring.

    `epilogue(index, acc)` gives the stored value of output element `index`
    ((n, k-block, oy, ox, lane), or (n, channel, oy, ox) for out_layout "nchw")
    whose convolution sum is `acc`. tile: the register tile (default `nchwc_tile`'s);
    groups_inner: number the tasks (image, row, channel group) rather than (image, group, row),
    so that neighbouring tasks share input rows rather than weights (not for depthwise layers).
    rule_tile: `tile` is the rule's, which may be chosen again: along the plane where that tile is small
    (conv_plane.py: `is_window_plane`), or where it leaves too few registers (below); a tuned record's
    tile (False) runs as it was measured.
    """
    if epilogue is None:
        epilogue = lambda index, acc: E.cast(acc, out.value_dtype)  # noqa: E731
    if any(d == 0 for d in root.shape):
        return None
    x_node, w_node = root.inputs
    n_img, h, w = x_node.shape[0], x_node.shape[2], x_node.shape[3]
    kblocks, cblocks, kh, kw, cb, kb = w_node.shape
    oh, ow = root.shape[2], root.shape[3]
    blocked_out = root.attrs["out_layout"] == "nchwc"
    sh, sw = root.attrs["stride"]
    dh, dw = root.attrs["dilation"]
    pt, _, pl, _ = root.attrs["padding"]
    dtype = compute_dtype(root.dtype.name)
    depthwise = _is_depthwise(root)
    # a 1x1 layer of stride 1 tiles its plane as one row of oh*ow pixels (conv_plane.py)
    plane = is_pointwise_plane(kh, kw, (sh, sw), depthwise, oh, ow)
    window_plane = False  # another layer whose plane tile is small: each pixel reads at its own offset
    if (tile is None or rule_tile) and not (plane or depthwise or is_symbolic(oh) or is_symbolic(ow)):
        plane_tile = nchwc_tile(kblocks, kb, oh * ow, dtype, tasks_per_block=n_img * oh)
        if is_window_plane(depthwise, _input_blocks(root)[1], oh, ow, plane_tile.pixels):
            plane = window_plane = True
            tile = plane_tile
    if tile is None:
        tile = depthwise_tile(ow, kw) if depthwise else nchwc_tile(
            kblocks, kb, oh * ow if plane else ow, dtype, tasks_per_block=n_img * oh)
    if rule_tile and not depthwise and _input_blocks(root)[1] == 1:
        # Input blocks of one channel (an RGB stem): the KW taps are the innermost loop. GCC unrolls
        # them, keeping a broadcast per tap live (neighbouring pixels share input columns), and
        # holds the epilogue's constants in registers through the reduction (epilogue_registers.py):
        # a tile that does not leave room for both is chosen again.
        reserved = kw - 1 + epilogue_registers(epilogue, 5 if blocked_out else 4, dtype)
        if not tile_leaves(tile, kb, dtype, reserved):
            tile = nchwc_tile(kblocks, kb, ow, dtype, tasks_per_block=n_img * oh, spare=1 + reserved)
    t_full, g_blocks = tile.pixels, tile.blocks
    if not (1 <= t_full and 1 <= g_blocks <= kblocks and kblocks % g_blocks == 0):
        raise ValueError(f"conv2d_nchwc: tile of {t_full} pixels x {g_blocks} channel blocks does not divide "
                         f"the layer's {kblocks} output blocks of {kb} channels")
    groups = kblocks // g_blocks
    in_blocks, in_cb = _input_blocks(root)
    v = lambda name: E.Var(f"{PREFIX}_{name}")  # noqa: E731

    # Input rows/columns some output reads, in padded coordinates.
    sample = (1, 1)
    if kh == kw == 1 and not depthwise and not _reads_in_place(root, values):
        # A 1x1 layer reads only every sh-th row and sw-th column: its copy keeps just those
        # (a quarter of a stride-2 input), and the kernel then runs with stride 1.
        sample, (sh, sw) = (sh, sw), (1, 1)
    hp = (oh - 1) * sh + (kh - 1) * dh + 1
    wp = (ow - 1) * sw + (kw - 1) * dw + 1
    # A depthwise layer does 9 multiply-adds per input element, too few to pay for a copy of the
    # whole input through memory: a blocked input is read in place (skipping the taps outside
    # the image); an NCHW one is blocked band by band, each task copying the padded input rows
    # its band of output rows reads (a task per output row, copying its KH rows, read every
    # input row KH times: ~1.6x slower on 112x112).
    in_place = _reads_in_place(root, values)
    task_rows = depthwise and not in_place
    band = depthwise_band(n_img * kblocks, oh) if task_rows else 1
    # Read in place, a padded depthwise layer skips the taps outside the image: per output row
    # the rows, per edge pixel the columns (`_tap_range`); buffers with a margin need no test.
    clip_rows = in_place and depthwise and (pt > 0 or (oh - 1) * sh + (kh - 1) * dh - pt >= h)
    clip_cols = in_place and depthwise and (pl > 0 or (ow - 1) * sw + (kw - 1) * dw - pl >= w)
    shift_y, shift_x = (pt, pl) if in_place else (0, 0)  # buffer coordinates = padded ones - shift
    if in_place:
        xpad, source, rows, cols = None, _input_buffer(root, values), h, w
    elif task_rows:
        rows = (band - 1) * sh + (kh - 1) * dh + 1
        xpad, source, cols = None, Buffer(f"{PREFIX}_rows", dtype, (rows * wp * kb,), scope="local"), wp
    else:
        xpad = Buffer(f"{PREFIX}_xpad", dtype, (n_img * in_blocks * hp * wp * in_cb,), scope="local")
        source, rows, cols = xpad, hp, wp

    task, ox_tile, icb, r, s, ic = v("task"), v("tx"), v("icb"), v("r"), v("s"), v("ic")
    i, o, j, q, band_row = v("i"), v("o"), v("j"), v("q"), v("band_row")
    x_at, w_at = v("x_at"), v("w_at")
    bands = -(-oh // band)  # tasks per image and channel group: bands of output rows
    if plane:  # chunks of the plane's full tiles (conv_plane.py); the last chunk adds the tail tile
        full_tiles, tail_pixels = divmod(oh * ow, t_full)
        # a run-time batch counts at its hint: the chunks only balance the threads, any count is correct
        bands, per_chunk = plane_chunks(full_tiles, hint_of(n_img) * groups, thread_count())
    img = task // (groups * bands)
    grp = (task // bands) % groups
    oy = (task % bands) * band + band_row if task_rows else task % oh
    if groups_inner and not task_rows:
        grp, oy = task % groups, (task // groups) % oh
    chunk = (task // groups) % bands if groups_inner else task % bands
    if plane:
        oy = E.const(0)
    w_block = cblocks * kh * kw * cb * kb  # weight elements of one output-channel block

    def tile_code(pixels: int, ox0: E.Expr, s_range: tuple[E.Expr, E.Expr] | None = None) -> Stmt:
        acc = Buffer(f"{PREFIX}_acc", dtype, (pixels * g_blocks * kb,), scope="local")
        # The G weight vectors of one step are loaded once into `wvec` (registers after
        # GCC's scalar replacement) and reused by the T pixels; left in the FMA, GCC
        # would load them again for every pixel.
        wvec = Buffer(f"{PREFIX}_w", dtype, (g_blocks * kb,), scope="local")
        slot = (i * g_blocks + o) * kb + j
        kblock = grp * g_blocks + o
        lanes = lambda stmt: For(i, E.const(pixels), For(o, E.const(g_blocks), For(  # noqa: E731
            j, E.const(kb), stmt, "vectorized"), "unrolled"), "unrolled")
        # fma: one rounding per step, and C compiled as -std=c99 contracts nothing by itself
        if depthwise:  # one tap per step: lane j of input block grp meets lane j of its weights
            (r0, r_count), (s0, s_count) = row_taps, s_range or (E.const(0), E.const(kw))
            tap_r, tap_s = (r if _is_zero(r0) else r0 + r), (s if _is_zero(s0) else s0 + s)
            first_row = band_row * sh + tap_r * dh if task_rows else \
                (img * kblocks + grp) * rows + oy * sh + tap_r * dh - shift_y
        if depthwise and s_range is None:  # every tap inside: each input column loaded once per row
            row_w = (grp * kh + tap_r) * kw * kb
            update_row = depthwise_row_update(
                source, x_at, lambda s_, j_: _weight(values, w_node, w_at + s_ * kb + j_, grp, 0, tap_r, s_, 0, j_),
                acc, pixels, kw, kb, sw, dw, PREFIX)
            reduce = For(r, r_count, block(Let(x_at, (first_row * cols + ox0 * sw - shift_x) * kb),
                                           Let(w_at, row_w), update_row))
        elif depthwise:
            step_offsets = block(
                Let(x_at, (first_row * cols + ox0 * sw + tap_s * dw - shift_x) * kb),
                Let(w_at, ((grp * kh + tap_r) * kw + tap_s) * kb))
            load_w = For(j, E.const(kb), Store(
                wvec, j, _weight(values, w_node, w_at + j, grp, 0, tap_r, tap_s, 0, j)), "vectorized")
            update = E.call("fma", E.Load(source, x_at + i * (sw * kb) + j), E.Load(wvec, j), E.Load(acc, slot))
            reduce = For(r, r_count, For(s, s_count, Alloc(wvec, block(
                step_offsets, load_w, lanes(Store(acc, slot, update))))))
        else:
            # Each step's input and weight offsets are named once (x_at, w_at), so the loads of the
            # unrolled pixels and blocks are base + constant: one address register, displacements.
            # (a window plane's tile may cross rows: its pixels' offsets go with the loads, not in x_at)
            step_offsets = block(
                Let(x_at, (((img * cblocks + icb) * rows + r * dh) * cols + s * dw) * cb + ic) if window_plane else
                Let(x_at, (((img * cblocks + icb) * rows + oy * sh + r * dh) * cols + ox0 * sw + s * dw) * cb + ic),
                Let(w_at, ((((grp * g_blocks) * cblocks + icb) * kh + r) * kw + s) * cb * kb + ic * kb))
            load_w = For(o, E.const(g_blocks), For(j, E.const(kb), Store(
                wvec, o * kb + j, _weight(values, w_node, w_at + o * w_block + j, kblock, icb, r, s, ic, j)),
                "vectorized"), "unrolled")
            pixel = ox0 + i  # in a window plane: pixel (y, x) of the plane reads from row y*sh, column x*sw
            pixel_at = (pixel // ow * (sh * cols) + pixel % ow * sw) * cb if window_plane else i * (sw * cb)
            update = E.call("fma", E.Load(source, x_at + pixel_at), E.Load(wvec, o * kb + j), E.Load(acc, slot))
            reduce = For(icb, E.const(cblocks), For(r, E.const(kh), For(s, E.const(kw), For(
                ic, E.const(cb), Alloc(wvec, block(step_offsets, load_w, lanes(Store(acc, slot, update))))))))
        store = tile_store(out, acc, lanes, epilogue, blocked_out, TileAt(img, grp, oy, ox0, i, o, j,
                                                                          ow if plane else 0),
                           TileShape(pixels, g_blocks, kb, kblocks, oh, ow))
        zero = For(q, E.const(pixels * g_blocks * kb), Store(acc, q, E.Const(0.0, dtype)), "vectorized")
        return Alloc(acc, block(zero, reduce, store))

    row_taps = _tap_range(oy, sh, pt, dh, kh, h) if clip_rows else (E.const(0), E.const(kh))
    # Pixels [x_first, x_stop) read only inside the image; those before and after are edge
    # pixels, one-pixel tiles over the columns they can read.
    x_first, x_stop = 0, ow
    if clip_cols:
        x_first = min(ow, -(-pl // sw))
        x_stop = max(x_first, min(ow, -(-(w + pl - (kw - 1) * dw) // sw)))
    row: list[Stmt] = [tile_code(1, E.const(ox), _tap_range(ox, sw, pl, dw, kw, w)) for ox in range(x_first)]
    row += plane_tiles(tile_code, ox_tile, chunk, bands, per_chunk, full_tiles, tail_pixels, t_full) if plane \
        else _row_tiles(tile_code, ox_tile, x_first, x_stop, t_full)
    edge = E.Var(f"{PREFIX}_edge")
    if is_symbolic(ow) and is_symbolic(ow - x_stop):
        row.append(For(edge, E.const(ow - x_stop), tile_code(1, E.const(x_stop) + edge, _tap_range(
            E.const(x_stop) + edge, sw, pl, dw, kw, w))))
    else:  # a fixed number of edge pixels (one, for a padding of one), each its own tile
        row += [tile_code(1, E.const(x_stop + ox), _tap_range(E.const(x_stop + ox) if is_symbolic(x_stop)
                                                              else x_stop + ox, sw, pl, dw, kw, w))
                for ox in range(int(ow - x_stop))]
    tasks = n_img * groups * bands
    work = n_img * groups * oh * ow * kb * g_blocks * (1 if depthwise else cblocks * cb) * kh * kw
    choice = parallel_when(work, tasks, PARALLEL_MIN_ELEMENTS)  # per call for run-time sizes
    if task_rows:
        first = (task % bands) * (band * sh)  # the band's first padded input row
        count = E.const(rows) if oh % band == 0 else E.minimum(E.const(rows), hp - first)
        fill = For(r, count, _padded_row(root, values, source, r * (wp * kb), img, grp, first + r, hp, wp))
        out_rows = E.const(band) if oh % band == 0 else E.minimum(E.const(band), oh - (task % bands) * band)
        row = [Alloc(source, block(fill, For(band_row, out_rows, block(*row))))]
    nest: Stmt = For(task, E.const(tasks), block(*row), loop_kind(choice), threads_if(choice))
    if xpad is None:
        return nest
    return Alloc(xpad, block(_padded_copy(root, values, xpad, hp, wp, sample), nest))
