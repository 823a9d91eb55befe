"""Direct convolution in channel-blocked layout on bf16 pairs (`conv2d_nchwc_bf16`, precision="bf16").

conv_nchwc.py's register-blocked kernel with bfloat16 operands and float32
sums. In the blocked layout x[N, C/cb, H, W, cb] input channels 2p and 2p + 1
of a pixel are adjacent, so one 32-bit load is a *pair*, and the weight is
packed once, at compile time, as pairs too (passes/conv_bf16_weights.py):

    w[K/kb, C/cb, KH, KW, cb/2, kb, 2]     input channels 2p, 2p+1 of output lane j side by side

`vdpbf16ps` multiplies a broadcast pair by one vector of weight pairs and adds
both products to the kb float32 lanes of an accumulator: a step covers two
input channels, so a tile of T pixels x G channel blocks (`nchwc_tile`, as in
float32) does half the instructions of conv_nchwc.py's::

    parallel for (n, group g of G channel blocks, oy):
      for each tile of T pixels of row oy:
        acc[T][G][kb] = 0
        for icb, r, s, pair p:        acc[i][o] += x[n, icb, .., 2p:2p+2] . w[g*G + o, icb, r, s, p]   (vdpbf16ps)
        y[n, g*G + o, oy, ox0 + i, :] = epilogue(acc[i][o][:])     bias, residual, ReLU in float32; a
                                                                   bfloat16 or float32 store
The tile is a C helper (conv_nchwc_bf16_c.py) where the target has
AVX512-BF16 (`CpuTarget.bf16_dot`) and a block is 16 or 8 lanes; without it,
a block of 8 lanes on a CPU with AVX2 and FMA runs bf16_widened_c.py's
helper (bf16 widened to float32 in registers, two fmas per pair); elsewhere
loop IR that widens each bf16 value to float32 (a shift) and adds the two
products of a pair with `fma`: the same sums as that helper, bit for bit.

The input: where the producer stored the bf16 values (grouping.py keeps a
rounding read only by these kernels in bfloat16: half the bytes) and the
layer has no padding, the kernel reads that buffer in place; otherwise it
first copies the input into a local zero-bordered xpad of bfloat16, as the
float32 kernel does, rounding float32 values as it copies (exact: they hold
bf16 values) and converting an NCHW input into blocks.
"""
from __future__ import annotations

from ...ir.graph import Node
from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import Alloc, For, Let, NativeCall, Pointer, Stmt, Store, block
from ..inline import ValueBuilder
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS
from ..target import cpu_target
from .conv_nchwc import TileAt, TileShape, _padded_copy, nchwc_tile, tile_store
from .conv_nchwc_bf16_c import conv_tile_name, conv_tile_source
from .bf16_widened_c import WIDENED_LANES, widened_conv_tile_name, widened_conv_tile_source

PREFIX = "nb"
NATIVE_LANES = (16, 8)  # the blocks with a vdpbf16ps helper: a zmm or a ymm of float32 lanes
# The widened tile's registers beside its accumulators: each weight vector twice (the raw pairs and one
# widened half), two widened pixels in flight and the mask. Fitted so, ResNet-18's 14x14 and 7x7 layers
# took 4x2 tiles, 1.15-1.2x faster than the float32 budget's 6x2 (`python benchmarks/bf16_convs.py`
# rows of those blocks, one thread, Zen 3 without AVX-512, loaded).
WIDENED_TILE_REGISTERS = dict(weight_copies=2, spare=4)


def stored_bf16_input(root: Node, values: ValueBuilder) -> Buffer | None:
    """The bfloat16 buffer the layer's blocked input widens (x = cast(a stored bf16 value)), or None."""
    x_node = root.inputs[0]
    if x_node.op != "cast" or x_node.ndim != 5 or x_node.inputs[0].dtype.name != "bfloat16":
        return None
    narrow = x_node.inputs[0]
    if narrow.id not in values.buffers or narrow is values.inline_root or narrow.id in values.known:
        return None
    return values.buffers[narrow.id]


def uses_native_tile(kb: int) -> bool:
    """The tile runs on the vdpbf16ps helper (else the widening loop IR)."""
    return cpu_target().bf16_dot and kb in NATIVE_LANES


def uses_widened_tile(kb: int) -> bool:
    """Without AVX512-BF16, the tile runs on the AVX2 helper that widens bf16 in registers (else loop IR)."""
    target = cpu_target()
    return not target.bf16_dot and target.fma256 and kb == WIDENED_LANES


def conv2d_nchwc_bf16_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """Loop IR computing epilogue(conv2d_nchwc_bf16(x, w)); see the module docstring.

    `epilogue(index, acc)` gives the stored value of output element `index`
    ((n, k-block, oy, ox, lane), or (n, channel, oy, ox) for out_layout "nchw").
    """
    if epilogue is None:
        epilogue = lambda index, acc: E.cast(acc, out.value_dtype)  # noqa: E731
    if any(d == 0 for d in root.shape):
        return None
    x_node, w_node = root.inputs
    n_img = x_node.shape[0]
    kblocks, cblocks, kh, kw, pairs, kb, _ = w_node.shape
    cb = 2 * pairs
    oh, ow = root.shape[2], root.shape[3]
    blocked_out = root.attrs["out_layout"] == "nchwc"
    sh, sw = root.attrs["stride"]
    dh, dw = root.attrs["dilation"]
    native, widened = uses_native_tile(kb), uses_widened_tile(kb)
    tile = nchwc_tile(kblocks, kb, ow, "float32", tasks_per_block=n_img * oh, loop_ir=not (native or widened),
                      **(WIDENED_TILE_REGISTERS if widened else {}))
    t_full, g_blocks = tile.pixels, tile.blocks
    groups = kblocks // g_blocks
    v = lambda name: E.Var(f"{PREFIX}_{name}")  # noqa: E731

    in_place = stored_bf16_input(root, values) if not any(root.attrs["padding"]) else None
    sample = (1, 1)
    if kh == kw == 1 and in_place is None:  # the copy keeps only the pixels a strided 1x1 layer reads
        sample, (sh, sw) = (sh, sw), (1, 1)
    hp = (oh - 1) * sh + (kh - 1) * dh + 1
    wp = (ow - 1) * sw + (kw - 1) * dw + 1
    if in_place is not None:
        xpad, source, rows, cols = None, in_place, x_node.shape[2], x_node.shape[3]
    else:
        xpad = Buffer(f"{PREFIX}_xpad", "bfloat16", (n_img * cblocks * hp * wp * cb,), scope="local")
        source, rows, cols = xpad, hp, wp
    weights = values.buffers[w_node.id]

    task, ox_tile, i, o, j = v("task"), v("tx"), v("i"), v("o"), v("j")
    img = task // (groups * oh)
    grp = (task // oh) % groups
    oy = task % oh
    w_block = cblocks * kh * kw * cb * kb  # weight elements of one output-channel block
    x_block, x_row, x_col, x_pixel = rows * cols * cb, dh * cols * cb, dw * cb, sw * cb

    def tile_code(pixels: int, ox0: E.Expr) -> Stmt:
        acc = Buffer(f"{PREFIX}_acc", "float32", (pixels * g_blocks * kb,), scope="local")
        slot = (i * g_blocks + o) * kb + j
        x_at = ((img * cblocks * rows + oy * sh) * cols + ox0 * sw) * cb  # channel 0 of the tile's first pixel
        w_at = grp * g_blocks * w_block
        lanes = lambda stmt: For(i, E.const(pixels), For(o, E.const(g_blocks), For(  # noqa: E731
            j, E.const(kb), stmt, "vectorized"), "unrolled"), "unrolled")
        if native or widened:
            name, text = (conv_tile_name(pixels, g_blocks, kb, x_pixel), conv_tile_source(pixels, g_blocks, kb, x_pixel)) \
                if native else (widened_conv_tile_name(pixels, g_blocks, x_pixel),
                                widened_conv_tile_source(pixels, g_blocks, x_pixel))
            products: Stmt = NativeCall(name, (
                Pointer(source, x_at), Pointer(weights, w_at), Pointer(acc, E.const(0)), E.const(cblocks),
                E.const(kh), E.const(kw), E.const(pairs), E.const(x_block), E.const(x_row), E.const(x_col),
                E.const(w_block)), source=text)
        else:
            products = _widened_products(source, weights, acc, lanes, pixels, (x_at, w_at), (cblocks, kh, kw, pairs),
                                         (x_block, x_row, x_col, x_pixel), (g_blocks, kb, w_block), slot)
        store = tile_store(out, acc, lanes, epilogue, blocked_out, TileAt(img, grp, oy, ox0, i, o, j),
                           TileShape(pixels, g_blocks, kb, kblocks, oh, ow))
        return Alloc(acc, block(products, store))

    row: list[Stmt] = []
    full, tail = divmod(ow, t_full)
    if full:
        row.append(For(ox_tile, E.const(full), tile_code(t_full, ox_tile * t_full)))
    if tail:
        row.append(tile_code(tail, E.const(full * t_full)))
    tasks = n_img * groups * oh
    work = n_img * groups * oh * ow * kb * g_blocks * cblocks * cb * kh * kw
    kind = "parallel" if work >= PARALLEL_MIN_ELEMENTS and tasks > 1 else "serial"
    nest: Stmt = For(task, E.const(tasks), block(*row), kind)
    if xpad is None:
        return nest
    return Alloc(xpad, block(_padded_copy(root, values, xpad, hp, wp, sample), nest))


def _widened_products(source: Buffer, weights: Buffer, acc: Buffer, lanes, pixels: int,
                      at: tuple[E.Expr, E.Expr], extents: tuple[int, int, int, int],
                      x_strides: tuple[int, int, int, int], blocks: tuple[int, int, int], slot: E.Expr) -> Stmt:
    """acc = the tile's sums in loop IR: each bf16 value widened to float32 (a bf16 load is one), the two
    channels of a pair added with fma in the order vdpbf16ps adds them (for a CPU without AVX512-BF16)."""
    x_at, w_at = at
    cblocks, kh, kw, pairs = extents
    x_block, x_row, x_col, x_pixel = x_strides
    g_blocks, kb, w_block = blocks
    v = lambda name: E.Var(f"{PREFIX}_{name}")  # noqa: E731
    icb, r, s, p, o, j, q, step_x, step_w = v("icb"), v("r"), v("s"), v("p"), v("o"), v("j"), v("q"), v("xs"), v("ws")
    i = v("i")
    wvec = Buffer(f"{PREFIX}_w", "float32", (g_blocks * kb * 2,), scope="local")
    offsets = block(Let(step_x, x_at + icb * x_block + r * x_row + s * x_col + p * 2),
                    Let(step_w, w_at + (((icb * kh + r) * kw + s) * pairs + p) * (2 * kb)))
    load_w = For(o, E.const(g_blocks), For(q, E.const(2 * kb), Store(
        wvec, o * (2 * kb) + q, E.Load(weights, step_w + o * w_block + q)), "vectorized"), "unrolled")
    updates = [Store(acc, slot, E.call("fma", E.Load(source, step_x + i * x_pixel + t),
                                       E.Load(wvec, (o * kb + j) * 2 + t), E.Load(acc, slot))) for t in (0, 1)]
    zero = For(q, E.const(pixels * g_blocks * kb), Store(acc, q, E.Const(0.0, "float32")), "vectorized")
    reduce = For(icb, E.const(cblocks), For(r, E.const(kh), For(s, E.const(kw), For(p, E.const(pairs), Alloc(
        wvec, block(offsets, load_w, lanes(block(*updates))))))))
    return block(zero, reduce)


__all__ = ["NATIVE_LANES", "conv2d_nchwc_bf16_body", "stored_bf16_input", "uses_native_tile", "uses_widened_tile"]
