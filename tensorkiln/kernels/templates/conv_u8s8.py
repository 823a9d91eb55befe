"""Direct 8-bit convolutions on uint8 NHWC activations (`conv2d_u8s8`, `depthwise_u8s8`), fused epilogue.

out[n, i, j, o] = epilogue(sum + compensation[o]), the sums exact in int32
(ir/ops/quantized_conv.py). The work is cut into tasks of a run of output
pixels of one image x a block of output channels, spread over the threads::

    for task in images x pixel runs x channel blocks (parallel):
      tile[pixels x channels] = sums                      # a native helper (conv_u8s8_native.py),
                                                          #   reading x's windows where they lie
      out[n, pixels, channels] = epilogue(tile + comp)    # the fused epilogue (scale, bias, residual,
                                                          #   requantize to uint8 NHWC ...): a vector
                                                          #   helper where it is a per-channel chain
                                                          #   (channel_epilogue.py), else loop IR

The input x is a stored buffer (the op table's `stored_operands`: the
grouping stores it), already padded with the activation's zero point, so the
sums never test a border. The helper is chosen by the target's `int8_dot`
(vnni, avx512bw, portable), as for the u8 x s8 GEMM (gemm_u8s8.py).
"""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.graph import Node
from ...ir.ops.quantized import U8S8_DEPTH_GROUP, U8S8_PANEL_COLUMNS
from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import Alloc, For, NativeCall, Pointer, Stmt, Store, block
from ..inline import ValueBuilder
from ..schedule_defaults import thread_count
from ..target import cpu_target
from .channel_epilogue import channel_epilogue, channel_epilogue_source
from .conv_u8s8_native import dense_source, depthwise_source
from .gemm import PARALLEL_MIN_MACS

# a task's int32 tile, written by the sums and read back by the epilogue from L1: small enough to live on
# the stack (codegen's STACK_LIMIT_BYTES), not allocated per task
TILE_BYTES = 16 * 1024
COLUMN_BLOCK = 512  # output channels of a task at most
PIXEL_ALIGN = 8  # the dense micro-kernel's pixels; the depthwise helper's tiles (4) divide it
DEPTHWISE_LANES = 16  # channels of one depthwise vector


def task_split(images: int, pixels: int, channels: int, lanes: int, macs: int, threads: int) -> tuple[int, int]:
    """(pixels, channels) of a task: a tile of at most TILE_BYTES, channels a multiple of `lanes`;
    with several threads and enough work, runs shortened until every thread has about four tasks."""
    nb = min(-(-channels // lanes) * lanes, COLUMN_BLOCK)
    run = max(PIXEL_ALIGN, TILE_BYTES // (4 * nb) // PIXEL_ALIGN * PIXEL_ALIGN)
    run = min(run, -(-pixels // PIXEL_ALIGN) * PIXEL_ALIGN)

    def tasks(run: int, nb: int) -> int:
        return images * -(-pixels // run) * -(-channels // nb)

    if threads > 1 and macs >= PARALLEL_MIN_MACS:
        while tasks(run, nb) < 4 * threads and run > PIXEL_ALIGN:
            run = max(PIXEL_ALIGN, run // 2 // PIXEL_ALIGN * PIXEL_ALIGN)
        while tasks(run, nb) < 2 * threads and nb > lanes:
            nb = max(lanes, nb // 2 // lanes * lanes)
    return run, nb


def _input_buffer(root: Node, values: ValueBuilder) -> Buffer:
    x = root.inputs[0]
    if x.id not in values.buffers:  # grouping stores it (stored_operands); anything else is a bug here
        raise UnsupportedOpError(f"{root.op}: its input must be a stored buffer")
    return values.buffers[x.id]


def _tasks(root: Node, out: Buffer, values: ValueBuilder, epilogue, lanes: int, macs: int, call) -> Stmt | None:
    """The parallel loop over tasks: `call(image, p0, pixels, c0, channels, tile, nb)` fills the tile,
    then the epilogue stores it."""
    comp_node = root.inputs[2]
    n, oh, ow, channels = root.shape
    pixels = oh * ow
    if n == 0 or pixels == 0 or channels == 0:
        return None
    threads = thread_count()
    run, nb = task_split(n, pixels, channels, lanes, macs, threads)
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
    chain = _vector_epilogue(root, out, values) if epilogue is not None else None
    if chain is not None:
        first = (image * pixels + p0) * channels + c0  # the task's first output (a residual's too)
        write = NativeCall(chain.function, (
            Pointer(tile, E.const(0)), E.const(nb), Pointer(values.buffers[comp_node.id], c0),
            *(Pointer(b, c0) for b in chain.operands), *(Pointer(b, first) for b in chain.side_buffers),
            Pointer(out, first), E.const(channels), task_pixels, task_cols), writes=(out.name,),
            source=channel_epilogue_source(chain))
    else:
        write = For(r, task_pixels, For(c, task_cols, store(c), "vectorized"))
    tasks = n * runs * col_tasks
    parallel = threads > 1 and tasks > 1 and macs >= PARALLEL_MIN_MACS
    fill = call(image, p0, task_pixels, c0, task_cols, tile, nb)
    return For(task, E.const(tasks), Alloc(tile, block(fill, write)), "parallel" if parallel else "serial")


def _vector_epilogue(root: Node, out: Buffer, values: ValueBuilder):
    """The epilogue as channel_epilogue.py's vector helper, or None (loop IR): AVX-512BW targets only,
    the output stored in the root's own dtype (not, say, as bf16)."""
    target = cpu_target()
    if target.vector_bytes < 64 or target.int8_dot == "portable" or root.inputs[2].id not in values.buffers or \
            values.inline_root is None or out.dtype != values.inline_root.dtype.name:
        return None
    return channel_epilogue(root, values.inline_root, values.buffers)


def conv_u8s8_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """Loop IR computing out = epilogue(conv + compensation) for a `conv2d_u8s8` node."""
    x_node, panels_node, _ = root.inputs
    _, hp, wp, c4 = x_node.shape
    kh, kw = root.attrs["kernel"]
    (sh, sw), (dh, dw) = root.attrs["stride"], root.attrs["dilation"]
    depth = panels_node.shape[1]
    x, panels = _input_buffer(root, values), values.buffers[panels_node.id]
    kind = cpu_target().int8_dot
    macs = root.type.size * kh * kw * c4
    nr = U8S8_PANEL_COLUMNS

    def call(image, p0, pixels, c0, cols, tile, nb) -> Stmt:
        args = (Pointer(x, image * (hp * wp * c4)), Pointer(panels, (c0 // nr) * (depth * nr * U8S8_DEPTH_GROUP)),
                Pointer(tile, E.const(0)), E.const(nb), p0, pixels, (cols + (nr - 1)) // nr,
                *(E.const(v) for v in (root.shape[2], wp, c4, sh, sw, dh, dw, kh, kw)))
        return NativeCall(f"tk_conv_u8s8_{kind}", args, writes=(tile.name,), source=dense_source(kind))

    return _tasks(root, out, values, epilogue, nr, macs, call)


def depthwise_u8s8_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """Loop IR computing out = epilogue(depthwise conv + compensation) for a `depthwise_u8s8` node."""
    x_node, weights_node, _ = root.inputs
    _, hp, wp, cin = x_node.shape
    kh, kw, _ = weights_node.shape
    (sh, sw), (dh, dw) = root.attrs["stride"], root.attrs["dilation"]
    x, weights = _input_buffer(root, values), values.buffers[weights_node.id]
    kind = cpu_target().int8_dot
    macs = root.type.size * kh * kw

    def call(image, p0, pixels, c0, cols, tile, nb) -> Stmt:
        args = (Pointer(x, image * (hp * wp * cin)), Pointer(weights, E.const(0)), Pointer(tile, E.const(0)),
                E.const(nb), p0, pixels, c0, cols,
                *(E.const(v) for v in (root.shape[2], wp, cin, sh, sw, dh, dw, kh, kw)))
        return NativeCall(f"tk_depthwise_u8s8_{kind}", args, writes=(tile.name,), source=depthwise_source(kind))

    return _tasks(root, out, values, epilogue, DEPTHWISE_LANES, macs, call)
