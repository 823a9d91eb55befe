"""A first direct convolution: one output plane per (image, output channel), accumulated locally.

For each (n, o) the kernel zeroes an OH x OW plane of accumulators, then for
every input channel of o's group and every filter tap adds the tap times the
shifted input plane. Out-of-image taps read zero (the padding) through a
select whose load index is clamped, so the code never reads out of bounds.
"""
from __future__ import annotations

from ...graph import Node
from .. import expr as E
from ..buffer import Buffer
from ..inline import ValueBuilder
from ..ir import Alloc, For, Let, Store, Stmt, block
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS
from ..types import compute_dtype


def conv2d_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """Loop IR computing epilogue(conv2d(x, w)): grouped, strided, dilated, padded.

    `epilogue(index, acc)` gives the stored value of output element `index`
    (n, o, y, x) whose convolution sum is `acc` (default: acc itself).
    """
    if epilogue is None:
        epilogue = lambda index, acc: E.cast(acc, out.value_dtype)  # noqa: E731
    x_node, w_node = root.inputs
    n_img, c_in, h, w = x_node.shape
    c_out, c_group, kh, kw = w_node.shape
    _, _, oh, ow = root.shape
    if n_img * c_out * oh * ow == 0:
        return None
    sh, sw = root.attrs["stride"]
    dh, dw = root.attrs["dilation"]
    pt, _, pl, _ = root.attrs["padding"]
    out_per_group = c_out // root.attrs["groups"]
    dtype = compute_dtype(root.dtype.name)
    zero = E.Const(0.0, dtype)

    no, c, r, s, y, x, p, q = (E.Var(v) for v in ("no", "c", "r", "s", "y", "x", "p", "q"))
    img, o = no // c_out, no % c_out
    channel = (o // out_per_group) * c_group + c
    iy, ix = y * sh + r * dh - pt, x * sw + s * dw - pl
    inside = E.logical_and(E.logical_and(E.ge(iy, 0), E.lt(iy, h)), E.logical_and(E.ge(ix, 0), E.lt(ix, w)))
    clamp = lambda i, size: E.minimum(E.maximum(i, 0), size - 1)  # noqa: E731
    pixel = E.Select(inside, values.value(x_node, [img, channel, clamp(iy, h), clamp(ix, w)]), zero)

    acc = Buffer("acc", dtype, (oh * ow,), scope="local")
    tap = E.Var("tap", dtype)
    accumulate = For(c, E.const(c_group), For(r, E.const(kh), For(s, E.const(kw), block(
        Let(tap, values.value(w_node, [o, c, r, s])),
        For(y, E.const(oh), For(x, E.const(ow), Store(acc, y * ow + x, E.Load(acc, y * ow + x) + tap * pixel),
                                "vectorized"))))))
    plane = Alloc(acc, block(
        For(p, E.const(oh * ow), Store(acc, p, zero), "vectorized"),
        accumulate,
        For(q, E.const(oh * ow), Store(out, no * (oh * ow) + q,
                                       epilogue([img, o, q // ow, q % ow], E.Load(acc, q))),
            "vectorized")))
    work = n_img * c_out * oh * ow * c_group * kh * kw
    parallel = work >= PARALLEL_MIN_ELEMENTS and n_img * c_out > 1
    return For(no, E.const(n_img * c_out), plane, "parallel" if parallel else "serial")
