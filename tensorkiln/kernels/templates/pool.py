"""Pooling: a max/min/sum reduction over 2-D sliding windows, from a copied plane.

Pooling is composed as reduce(window(pad(x))) (max_pool2d, avg_pool2d's sum).
Lowered as a generic reduction, every tap of every output pays the padding
test, a clamped gather with the window stride, and NaN bookkeeping. Here,
for each plane (all leading axes), in parallel::

    alloc plane[SW][HP x WP / SW]        # plane.py: the rows and columns the windows reach,
    plane = x[...] with its padding      # in column phases; the pad's border is filled once,
                                         # not tested per element
    for y in OH: for x in OW (vectorized):
        acc = combine over the KH x KW taps of plane[s*dw % sw][y*sh + r*dh, x + s*dw // sw]
        out[..., y, x] = acc

The column phases make each tap's loads contiguous along x for any stride.
Max and min propagate NaN like numpy. A NaN-aware tap (replace the
accumulator when the tap is larger or NaN, and never replace a NaN) costs
four vector instructions where a plain one costs one, so the plane is first
scanned for NaN (one compare per element, a quarter of the taps of a 3x3
stride-2 pool): a plane without NaN, the usual case, takes the plain taps.
"""
from __future__ import annotations

import numpy as np

from ...ir.graph import Node
from ...loops import expr as E
from ...loops.buffer import Buffer
from ..inline import ValueBuilder, delinearize
from ...loops.ir import Alloc, Assign, For, If, Let, Stmt, Store, block
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS
from ..run_time_choice import loop_kind, parallel_when, threads_if
from ...loops.types import compute_dtype
from .plane import fill_plane, phased_plane
from ...shapes import prod

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
    src, pads, fill = _unpadded(window.inputs[0], compute_dtype(root.dtype.name))
    kh, kw = window.attrs["kernel"]
    sh, sw = window.attrs["stride"]
    dh, dw = window.attrs["dilation"]
    lead = src.shape[:-2]
    oh, ow = window.shape[-4], window.shape[-3]
    planes = prod(lead) if lead else 1
    dtype = compute_dtype(root.dtype.name)

    plane, y, x = E.Var("pl_plane"), E.Var("pl_y"), E.Var("pl_x")
    buf = phased_plane("pl_buf", dtype, (oh, ow), (kh, kw), (sh, sw), (dh, dw))
    lead_index = delinearize(plane, lead) if lead else []
    copy = fill_plane(buf, lambda iy, ix: E.cast(values.value(src, lead_index + [iy, ix]), dtype),
                      src.shape[-2:], pads, fill, "pl")
    acc = E.Var("pl_acc", dtype)

    def taps(nan_aware: bool) -> Stmt:
        steps: list[Stmt] = []
        for r in range(kh):
            for s in range(kw):
                tap = buf.tap(y, x, r, s, (sh, sw), (dh, dw))
                steps.append(Let(acc, tap) if not steps else Assign(acc, _combine(root.op, acc, tap, nan_aware)))
        steps.append(Store(out, (plane * oh + y) * ow + x, E.cast(acc, out.value_dtype)))
        return For(y, E.const(oh), For(x, E.const(ow), block(*steps), "vectorized"))

    compute = taps(nan_aware=False) if root.op == "reduce_sum" else _unless_nan(buf, taps)
    work = planes * (buf.hp * buf.wp + oh * ow * kh * kw)
    choice = parallel_when(work, planes, PARALLEL_MIN_ELEMENTS)  # per call for run-time sizes
    return For(plane, E.const(planes), Alloc(buf.buffer, block(*copy, compute)), loop_kind(choice),
               threads_if(choice))


def _unpadded(src: Node, dtype: str) -> tuple[Node, tuple[int, int], E.Expr]:
    """(the plane's source, its top and left padding, the padding value): a constant pad of the two
    window axes is filled into the plane's border instead of being tested per element."""
    if src.op == "pad" and all(p == (0, 0) for p in src.attrs["pads"][:-2]) and \
            all(lo >= 0 and hi >= 0 for lo, hi in src.attrs["pads"][-2:]):
        (pt, _), (pl, _) = src.attrs["pads"][-2:]
        return src.inputs[0], (pt, pl), E.Const(float(src.attrs["value"]), dtype)
    return src, (0, 0), E.Const(0.0, dtype)


def _unless_nan(buf, taps) -> Stmt:
    """The plain taps where the plane holds no NaN, else the NaN-aware ones."""
    nans, q = E.Var("pl_nans", buf.buffer.value_dtype), E.Var("pl_scan")
    value = E.Load(buf.buffer, q)
    one, zero = E.Const(1.0, nans.dtype), E.Const(0.0, nans.dtype)
    scan = For(q, E.const(buf.buffer.size), Assign(nans, nans + E.where(E.ne(value, value), one, zero)), "vectorized")
    return block(Let(nans, zero), scan, If(E.eq(nans, zero), taps(False), taps(True)))


def _combine(op: str, acc: E.Expr, tap: E.Expr, nan_aware: bool) -> E.Expr:
    if op == "reduce_sum":
        return acc + tap
    better = E.gt(tap, acc) if op == "reduce_max" else E.lt(tap, acc)
    return E.where(E.logical_or(better, E.ne(tap, tap)) if nan_aware else better, tap, acc)
