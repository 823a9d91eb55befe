"""Direct 8-bit convolutions on uint8 NHWC activations (`conv2d_u8s8`, `depthwise_u8s8`), fused epilogue.

out[n, i, j, o] = epilogue(sum + compensation[o]), the sums exact in int32
(ir/ops/quantized_conv.py). The work is cut into tasks of a run of output
pixels of one image x a block of output channels, spread over the threads::

    for task in images x pixel runs x channel blocks (parallel):
      tile[pixels x channels] = sums                      # a native helper (conv_u8s8_native.py),
                                                          #   reading x's windows where they lie (or,
                                                          #   for a shallow input, gathered into rows)
      out[n, pixels, channels] = epilogue(tile + comp)    # the fused epilogue (scale, bias, residual,
                                                          #   requantize to uint8 NHWC ...): a vector
                                                          #   helper where it is a per-channel chain
                                                          #   (channel_epilogue.py), else loop IR

The input x is a stored buffer (the op table's `stored_operands`: the
grouping stores it), already padded with the activation's zero point, so the
sums never test a border; a depthwise layer that pads inside the op copies
each task's rows into a padded window first (depthwise_window.py). The
helper is chosen by the target's `int8_dot` (vnni, avx512bw, avx2, portable),
and on AVX2 by the layer's weights (`maddubsw` where
int8_avx2.maddubsw_is_exact holds), as for the u8 x s8 GEMM (gemm_u8s8.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ...errors import UnsupportedOpError
from ...ir.graph import Node
from ...ir.ops.quantized import U8S8_DEPTH_GROUP, U8S8_PANEL_COLUMNS
from ...ir.ops.quantized_conv import depthwise_padding
from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import Alloc, For, NativeCall, Pointer, Stmt, Store, block
from ..inline import ValueBuilder
from ..schedule_defaults import thread_count
from ..target import cpu_target
from .channel_epilogue import AVX2, AVX512, VectorIsa, channel_epilogue, channel_epilogue_source
from .channel_epilogue_avx2 import avx2_source
from .conv_u8s8_native import dense_source, depthwise_source, split_bytes
from .depthwise_window import windowed
from .gemm import PARALLEL_MIN_MACS
from .depthwise_u8s8_tiles import TILE_ISAS, depthwise_tiles
from .int8_avx2 import AVX2, SPLIT, SPLIT_GROUP_BYTES, layer_dot_kind, split_pays

# a task's int32 tile, written by the sums and read back by the epilogue from L1: small enough to live on
# the stack (codegen's STACK_LIMIT_BYTES), not allocated per task
TILE_BYTES = 16 * 1024
COLUMN_BLOCK = 512  # output channels of a task at most
PIXEL_ALIGN = 8  # runs that are no whole rows are multiples of this (the dense tile's height)
DEPTHWISE_LANES = 16  # channels of one depthwise vector
# An AVX2 depthwise task's channels: the requantizing epilogue stores 32 channels at a time
# (channel_epilogue_avx2.py) and 8 at a time past the last 32; tasks of 16 channels (what the estimate,
# blind to that, chose) kept MobileNetV2's depthwise layers on the 8-channel path
AVX2_DEPTHWISE_CHANNELS = 32


DENSE_TILE_PIXELS = 8  # the dense micro-kernel's tile height: pixels of one output row
# pixels of a depthwise tile in the task split's estimate, which only ranks splits: the helpers' tiles are
# 6 (AVX2) or 8 (AVX-512) pixels of one row (depthwise_u8s8_tiles.py), an estimate of those not yet measured
DEPTHWISE_TILE_PIXELS = 4
STEP_OVERHEAD = 2  # cycles of a micro-kernel step besides its sums (the panel's loads, moving the pointers)
EPILOGUE_CYCLES = 6  # cycles per output vector of 16 channels: the tile's reload, requantize and store
TASK_CYCLES = 400  # cycles a task costs beyond its tiles (the call, the tile's setup)


@dataclass(frozen=True)
class TaskShape:
    """What the split needs to know of a direct convolution's output and helper."""

    images: int
    height: int  # output rows
    width: int  # output pixels a row
    channels: int
    lanes: int  # channels a panel (dense, 32) or a vector (depthwise, 16)
    depth_steps: int  # micro-kernel steps per tile and panel: taps x groups of 4 input channels (dense), taps
    tile_pixels: int  # pixels of a micro-kernel tile
    tiles_within_rows: bool  # the dense tile's windows are equally spaced: a tile never crosses a row


def task_cost(shape: TaskShape, p0: int, pixels: int, channels: int) -> float:
    """Estimated cycles of one task: its tiles' steps over every panel, its epilogue and its overhead.

    A dense task's pixels split at row ends into tiles of equal height (conv_u8s8_native.py), so a run
    that starts or ends mid-row pays for short tiles; that is what makes whole-row runs cheaper."""
    panels = -(-channels // shape.lanes)
    tiles = 0
    if shape.tiles_within_rows:
        t = 0
        while t < pixels:
            left = min(shape.width - (p0 + t) % shape.width, pixels - t)
            count = -(-left // shape.tile_pixels)
            tiles += count * (2 * -(-left // count) + STEP_OVERHEAD)
            t += left
    else:
        count = -(-pixels // shape.tile_pixels)
        tiles = count * (2 * shape.tile_pixels + STEP_OVERHEAD)
    return panels * shape.depth_steps * tiles + pixels * -(-channels // 16) * EPILOGUE_CYCLES + TASK_CYCLES


def makespan(shape: TaskShape, run: int, nb: int, threads: int) -> float:
    """Estimated cycles until the last thread is done, the tasks (image, run, channel block) handed out
    as OpenMP's static schedule does: contiguous chunks whose sizes differ by at most one."""
    pixels = shape.height * shape.width
    runs, col_tasks = -(-pixels // run), -(-shape.channels // nb)
    known: dict[tuple[int, int, int], float] = {}  # a task's cost depends on where in a row it starts

    def cost(p0: int, c0: int) -> float:
        count, channels = min(run, pixels - p0), min(nb, shape.channels - c0)
        key = (p0 % shape.width, count, channels)
        if key not in known:
            known[key] = task_cost(shape, p0, count, channels)
        return known[key]

    image = [cost(p * run, c * nb) for p in range(runs) for c in range(col_tasks)]
    costs = np.tile(np.asarray(image), shape.images)
    share, extra = divmod(len(costs), threads)
    sizes = [share + (thread < extra) for thread in range(min(threads, len(costs)))]
    ends = np.cumsum(sizes)
    totals = np.concatenate(([0.0], np.cumsum(costs)))
    return float(np.max(totals[ends] - totals[ends - np.asarray(sizes)]))


def _run_lengths(shape: TaskShape, longest: int) -> list[int]:
    """Candidate runs of at most `longest` pixels: whole output rows where a row fits (a dense tile
    never crosses a row, so a run that ends mid-row leaves short tiles), else multiples of 8."""
    pixels = shape.height * shape.width
    if pixels <= longest:
        candidates = {pixels}
    else:
        candidates = set()
    if shape.width <= longest:
        candidates |= {rows * shape.width for rows in range(1, min(shape.height, longest // shape.width) + 1)}
    aligned = longest // PIXEL_ALIGN * PIXEL_ALIGN
    while aligned >= PIXEL_ALIGN:
        candidates.add(aligned)
        aligned = aligned // 2 // PIXEL_ALIGN * PIXEL_ALIGN
    return sorted(candidates)


@lru_cache(maxsize=256)  # a model repeats its layer shapes (MobileNetV2's blocks): estimate each once
def task_split(shape: TaskShape, macs: int, threads: int, channels: int | None = None) -> tuple[int, int]:
    """(pixels, channels) of a task: a tile of at most TILE_BYTES, channels a multiple of the lanes, chosen
    to finish soonest (makespan) over the threads; with one thread, or too little work to share, the
    same estimate picks the cheapest tiling. Ties go to fewer tasks, then to more channels a task (a
    pixel's bytes read together). `channels`: the task's channels fixed (at most the layer's), only the
    run of pixels chosen."""
    if threads <= 1 or macs < PARALLEL_MIN_MACS:
        threads = 1
    lanes = shape.lanes
    widest = min(-(-shape.channels // lanes) * lanes, COLUMN_BLOCK)
    best: tuple[float, int, int, int] | None = None
    blocks = range(lanes, widest + 1, lanes) if channels is None else (min(channels, widest),)
    for nb in blocks:
        longest = TILE_BYTES // (4 * nb)
        if longest < 1:
            break
        for run in _run_lengths(shape, longest):
            tasks = shape.images * -(-(shape.height * shape.width) // run) * -(-shape.channels // nb)
            key = (makespan(shape, run, nb, threads), tasks, -nb, run)
            if best is None or key[:3] < best[:3]:
                best = key
    assert best is not None  # nb = lanes always gives a run of at least one pixel
    return best[3], -best[2]


def input_buffer(root: Node, values: ValueBuilder) -> Buffer:
    x = root.inputs[0]
    if x.id not in values.buffers:  # grouping stores it (stored_operands); anything else is a bug here
        raise UnsupportedOpError(f"{root.op}: its input must be a stored buffer")
    return values.buffers[x.id]


def parallel_tasks(root: Node, out: Buffer, values: ValueBuilder, epilogue, split: tuple[int, int], macs: int,
                   call) -> Stmt | None:
    """The parallel loop over tasks of `split` = (pixels, channels) at most: `call(image, p0, pixels, c0,
    channels, tile, nb)` fills the tile, then the epilogue stores it."""
    comp_node = root.inputs[2]
    n, oh, ow, channels = root.shape
    pixels = oh * ow
    if n == 0 or pixels == 0 or channels == 0:
        return None
    threads = thread_count()
    run, nb = split
    runs, col_tasks = -(-pixels // run), -(-channels // nb)
    task, r = E.Var("qc_task"), E.Var("qc_r")
    image = task // (runs * col_tasks)
    p0 = (task // col_tasks) % runs * run
    c0 = task % col_tasks * nb
    task_pixels = E.minimum(E.const(run), pixels - p0) if pixels % run else E.const(run)
    task_cols = E.const(channels) if col_tasks == 1 else \
        E.minimum(E.const(nb), channels - c0) if channels % nb else E.const(nb)
    tile = Buffer("qc_tile", "int32", (run * nb,), scope="local")
    pixel = p0 + r

    def store(c: E.Expr) -> Stmt:
        acc = E.Load(tile, r * nb + c) + values.value(comp_node, [c0 + c])
        index = [image, pixel // ow, pixel % ow, c0 + c]
        stored = E.cast(acc, out.value_dtype) if epilogue is None else epilogue(index, acc)
        return Store(out, (image * pixels + pixel) * channels + c0 + c, stored)

    c = E.Var("qc_c")
    isa = _epilogue_isa()
    chain = _vector_epilogue(root, out, values) if epilogue is not None and isa is not None else None
    if chain is not None:
        first = (image * pixels + p0) * channels + c0  # the task's first output (a residual's too)
        write = NativeCall(chain.function, (
            Pointer(tile, E.const(0)), E.const(nb), Pointer(values.buffers[comp_node.id], c0),
            *(Pointer(b, c0) for b in chain.operands), *(Pointer(b, first) for b in chain.side_buffers),
            Pointer(out, first), E.const(channels), task_pixels, task_cols), writes=(out.name,),
            source=avx2_source(chain) if isa is AVX2 else channel_epilogue_source(chain, isa))
    else:
        write = For(r, task_pixels, For(c, task_cols, store(c), "vectorized"))
    tasks = n * runs * col_tasks
    parallel = threads > 1 and tasks > 1 and macs >= PARALLEL_MIN_MACS
    fill = call(image, p0, task_pixels, c0, task_cols, tile, nb)
    return For(task, E.const(tasks), Alloc(tile, block(fill, write)), "parallel" if parallel else "serial")


def _epilogue_isa() -> VectorIsa | None:
    """The vector width of the epilogue helper: 512 bits (AVX-512BW), 256 (AVX2 and FMA), or None: loop IR
    (no vector helper, or the portable int8 path, whose tests check that loop IR computes the same)."""
    target = cpu_target()
    if target.int8_dot == "portable":
        return None
    return AVX512 if target.vector_bytes >= 64 else AVX2 if target.vector_bytes >= 32 else None


def _vector_epilogue(root: Node, out: Buffer, values: ValueBuilder):
    """The epilogue as channel_epilogue.py's vector helper, or None (loop IR): the output stored in the
    root's own dtype (not, say, as bf16)."""
    if root.inputs[2].id not in values.buffers or values.inline_root is None or \
            out.dtype != values.inline_root.dtype.name:
        return None
    return channel_epilogue(root, values.inline_root, values.buffers)


def conv_u8s8_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """Loop IR computing out = epilogue(conv + compensation) for a `conv2d_u8s8` node."""
    x_node, panels_node, _ = root.inputs
    _, hp, wp, cin = x_node.shape
    kh, kw = root.attrs["kernel"]
    (sh, sw), (dh, dw) = root.attrs["stride"], root.attrs["dilation"]
    depth = panels_node.shape[1]  # groups of 4 bytes: KH * KW * cin rounded up
    x, panels = input_buffer(root, values), values.buffers[panels_node.id]
    kind = layer_dot_kind(cpu_target().int8_dot, panels_node)
    # split the activations into 16-bit pairs first where that pays and the windows leave no input row or
    # column unread (a strided 1x1 layer would split four pixels to read one)
    covered = (kh - 1) * dh + 1 >= sh and (kw - 1) * dw + 1 >= sw
    if kind == AVX2 and covered and split_pays(depth, root.shape[3], root.shape[1] * root.shape[2]):
        kind = SPLIT
    macs = root.type.size * depth * U8S8_DEPTH_GROUP
    nr = U8S8_PANEL_COLUMNS
    # windows whose channels are no whole groups of 4 are gathered into rows first (conv_u8s8_native.py)
    gathered = cin % U8S8_DEPTH_GROUP != 0

    def call(image, p0, pixels, c0, cols, tile, nb) -> Stmt:
        args = (Pointer(x, image * (hp * wp * cin)), Pointer(panels, (c0 // nr) * (depth * nr * U8S8_DEPTH_GROUP)),
                Pointer(tile, E.const(0)), E.const(nb), p0, pixels, cols,
                *(E.const(v) for v in (root.shape[2], wp, cin, sh, sw, dh, dw, kh, kw)))
        buffers: list[Buffer] = []  # the helper's scratch, allocated around the call
        if gathered:
            buffers.append(Buffer("qc_rows", "uint8", (DENSE_TILE_PIXELS * depth * U8S8_DEPTH_GROUP,), scope="local"))
        if kind == SPLIT:  # the exact AVX2 step's activations, split into 16-bit pairs
            size = DENSE_TILE_PIXELS * depth * SPLIT_GROUP_BYTES if gathered else \
                split_bytes(task_run, root.shape[2], root.shape[1], wp, cin, sh, dh, kh, hp)
            buffers.append(Buffer("qc_split", "uint8", (size,), scope="local"))
        name = f"tk_conv_u8s8_gathered_{kind}" if gathered else f"tk_conv_u8s8_{kind}"
        stmt: Stmt = NativeCall(name, (*args, *(Pointer(b, E.const(0)) for b in buffers)),
                                writes=(tile.name, *(b.name for b in buffers)), source=dense_source(kind))
        for b in buffers:
            stmt = Alloc(b, stmt)
        return stmt

    shape = TaskShape(*root.shape[:3], root.shape[3], nr, depth, DENSE_TILE_PIXELS, True)
    split = task_split(shape, macs, thread_count())
    task_run = split[0]  # the longest run of output pixels a task sums
    return parallel_tasks(root, out, values, epilogue, split, macs, call)


def depthwise_u8s8_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """Loop IR computing out = epilogue(depthwise conv + compensation) for a `depthwise_u8s8` node; with a
    `padding` attr each task sums a padded window of its rows and channels (depthwise_window.py)."""
    x_node, weights_node, _ = root.inputs
    _, h, w, cin = x_node.shape
    kh, kw, _ = weights_node.shape
    (sh, sw), (dh, dw) = root.attrs["stride"], root.attrs["dilation"]
    padding = depthwise_padding(root.attrs)
    x, weights = input_buffer(root, values), values.buffers[weights_node.id]
    kind = cpu_target().int8_dot
    macs = root.type.size * kh * kw
    name, source = depthwise_tiles(kind, kw, sw, dw) if kind in TILE_ISAS else \
        (f"tk_depthwise_u8s8_{kind}", depthwise_source(kind))

    def sums(src: Buffer, src_offset, taps: Buffer, tile: Buffer, nb: int, p0, pixels, j0, cols, wp: int,
             ld: int) -> Stmt:
        args = (Pointer(src, src_offset), Pointer(taps, E.const(0)), Pointer(tile, E.const(0)), E.const(nb), p0,
                pixels, j0, cols, *(E.const(v) for v in (root.shape[2], wp, ld, sh, sw, dh, dw, kh, kw)))
        return NativeCall(name, args, writes=(tile.name,), source=source)

    def call(image, p0, pixels, c0, cols, tile, nb) -> Stmt:
        if not any(padding):  # x is padded already: the helper reads the image where it lies
            return sums(x, image * (h * w * cin), weights, tile, nb, p0, pixels, c0, cols, w, cin)
        geometry = dict(h=h, w=w, cin=cin, oh=root.shape[1], ow=root.shape[2], kh=kh, kw=kw, sh=sh, dh=dh,
                        padding=padding, pad_value=root.attrs.get("pad_value", 0))
        return windowed(x, image * (h * w * cin), weights, p0, pixels, c0, cols, nb, tile.shape[0] // nb, geometry,
                        lambda window, taps, p0_in, wp: sums(window, E.const(0), taps, tile, nb, p0_in, pixels,
                                                             E.const(0), cols, wp, nb))

    split = TaskShape(*root.shape[:3], root.shape[3], DEPTHWISE_LANES, kh * kw, DEPTHWISE_TILE_PIXELS, False)
    channels = AVX2_DEPTHWISE_CHANNELS if kind == "avx2" else None
    return parallel_tasks(root, out, values, epilogue, task_split(split, macs, thread_count(), channels), macs, call)
