"""Depthwise convolution (one input and one output channel per group) over a zero-padded plane.

For each (image, channel) plane, in parallel::

    alloc pad[SW][HP x WP / SW]              # plane.py: the padded plane in column phases
    pad = x[img, ch] with zero padding       # contiguous copies, only the border zeroed
    let w_rs = weight[ch, 0, r, s]           # the KH x KW taps, once per plane
    for y in OH: for x in OW (vectorized):
        acc = sum over r, s of w_rs * pad[s*dw % sw][y*sh + r*dh, x + s*dw // sw]   (unrolled, fma)
        out[img, ch, y, x] = epilogue(acc)

Every tap is a plain load, contiguous along x for any stride, so the x loop
becomes vector FMAs. The padded plane is at most a few hundred KiB and stays
in L2 while its output rows are computed.
"""
from __future__ import annotations

from ...ir.graph import Node
from ...loops import expr as E
from ...loops.buffer import Buffer
from ..inline import ValueBuilder
from ...loops.ir import Alloc, For, Let, Stmt, Store, block
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS
from ..run_time_choice import loop_kind, parallel_when, threads_if
from ...loops.types import compute_dtype
from .plane import fill_plane, phased_plane


def depthwise_body(root: Node, out: Buffer, values: ValueBuilder, epilogue) -> Stmt:
    """Loop IR of epilogue(depthwise conv2d) for NCHW input, weight [C, 1, KH, KW] (see the module docstring)."""
    x_node, w_node = root.inputs
    n_img, channels, h, w = x_node.shape
    _, _, kh, kw = w_node.shape
    _, _, oh, ow = root.shape
    sh, sw = root.attrs["stride"]
    dh, dw = root.attrs["dilation"]
    pt, _, pl, _ = root.attrs["padding"]
    dtype = compute_dtype(root.dtype.name)
    plane, y, x = E.Var("dw_plane"), E.Var("dw_y"), E.Var("dw_x")
    img, ch = plane // channels, plane % channels
    pad = phased_plane("dw_pad", dtype, (oh, ow), (kh, kw), (sh, sw), (dh, dw))
    fill = fill_plane(pad, lambda iy, ix: E.cast(values.value(x_node, [img, ch, iy, ix]), dtype),
                      (h, w), (pt, pl), E.Const(0.0, dtype), "dw")

    taps = [(r, s, E.Var(f"dw_w{r}_{s}", dtype)) for r in range(kh) for s in range(kw)]
    weights = [Let(var, E.cast(values.value(w_node, [ch, E.const(0), E.const(r), E.const(s)]), dtype))
               for r, s, var in taps]
    acc: E.Expr | None = None
    for r, s, var in taps:
        tap = pad.tap(y, x, r, s, (sh, sw), (dh, dw))
        acc = var * tap if acc is None else E.call("fma", var, tap, acc)
    pixel = Store(out, (plane * oh + y) * ow + x, epilogue([img, ch, y, x], acc))
    compute = For(y, E.const(oh), For(x, E.const(ow), pixel, "vectorized"))
    body = Alloc(pad.buffer, block(*fill, *weights, compute))
    work = n_img * channels * oh * ow * kh * kw
    choice = parallel_when(work, n_img * channels, PARALLEL_MIN_ELEMENTS)  # per call for run-time sizes
    return For(plane, E.const(n_img * channels), body, loop_kind(choice), threads_if(choice))

