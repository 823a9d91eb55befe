"""Pooling: a max/min/sum reduction over 2-D sliding windows, from a copied plane.

Pooling is composed as reduce(window(pad(x))) (max_pool2d, avg_pool2d's sum).
Lowered as a generic reduction, every tap of every output pays the padding
test, a clamped gather with the window stride, and NaN bookkeeping. Here,
for each plane (all leading axes), in parallel::

    alloc plane[SW][HP x WP / SW]        # plane.py: the rows and columns the windows reach,
    plane = src[...]                     # in column phases (padding computed once per element)
    for y in OH: for x in OW (vectorized):
        acc = combine over the KH x KW taps of plane[s*dw % sw][y*sh + r*dh, x + s*dw // sw]
        out[..., y, x] = acc

The column phases make each tap's loads contiguous along x for any stride. Max
and min propagate NaN like numpy: a tap replaces the accumulator when it is
larger (smaller) or NaN, and nothing replaces a NaN accumulator.
"""
from __future__ import annotations

import numpy as np

from ...graph import Node
from .. import expr as E
from ..buffer import Buffer
from ..inline import ValueBuilder, delinearize
from ..ir import Alloc, Assign, For, Let, Stmt, Store, block
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS
from ..types import compute_dtype
from .plane import fill_plane, phased_plane

POOL_OPS = ("reduce_max", "reduce_min", "reduce_sum")


def pool_window(root: Node) -> Node | None:
    """The 2-D window node that reduction `root` reduces whole, or None."""
    if root.op not in POOL_OPS or not root.inputs or root.inputs[0].op != "window":
        return None
    window = root.inputs[0]
    if len(window.attrs["kernel"]) != 2 or window.inputs[0].ndim < 2:
        return None
    ndim = window.ndim
    if tuple(sorted(root.attrs["axes"])) != (ndim - 2, ndim - 1):
        return None
    if compute_dtype(root.dtype.name) not in ("float32", "float64") or root.type.size == 0:
        return None
    return window


def pool_body(root: Node, out: Buffer, values: ValueBuilder) -> Stmt | None:
    """Loop IR of reduce(window(src)) over the two window axes, or None where it does not apply."""
    window = pool_window(root)
    if window is None:
        return None
    src = window.inputs[0]
    kh, kw = window.attrs["kernel"]
    sh, sw = window.attrs["stride"]
    dh, dw = window.attrs["dilation"]
    lead = src.shape[:-2]
    oh, ow = window.shape[-4], window.shape[-3]
    planes = int(np.prod(lead, dtype=np.int64)) if lead else 1
    dtype = compute_dtype(root.dtype.name)

    plane, y, x = E.Var("pl_plane"), E.Var("pl_y"), E.Var("pl_x")
    buf = phased_plane("pl_buf", dtype, (oh, ow), (kh, kw), (sh, sw), (dh, dw))
    lead_index = delinearize(plane, lead) if lead else []
    # the window's input is already padded (pad op): the copy reads it whole, no border to fill
    copy = fill_plane(buf, lambda iy, ix: E.cast(values.value(src, lead_index + [iy, ix]), dtype),
                      src.shape[-2:], (0, 0), E.Const(0.0, dtype), "pl")
    acc = E.Var("pl_acc", dtype)
    steps: list[Stmt] = []
    for r in range(kh):
        for s in range(kw):
            tap = buf.tap(y, x, r, s, (sh, sw), (dh, dw))
            steps.append(Let(acc, tap) if not steps else Assign(acc, _combine(root.op, acc, tap)))
    steps.append(Store(out, (plane * oh + y) * ow + x, E.cast(acc, out.value_dtype)))
    compute = For(y, E.const(oh), For(x, E.const(ow), block(*steps), "vectorized"))
    work = planes * (buf.hp * buf.wp + oh * ow * kh * kw)
    kind = "parallel" if work >= PARALLEL_MIN_ELEMENTS and planes > 1 else "serial"
    return For(plane, E.const(planes), Alloc(buf.buffer, block(*copy, compute)), kind)


def _combine(op: str, acc: E.Expr, tap: E.Expr) -> E.Expr:
    if op == "reduce_sum":
        return acc + tap
    better = E.gt(tap, acc) if op == "reduce_max" else E.lt(tap, acc)
    return E.where(E.logical_or(better, E.ne(tap, tap)), tap, acc)
