"""Symbolic bounds inference: the interval an index expression spans while one loop variable runs.

Halide's bounds inference, on loop-IR expressions: `interval(e, v, lo, hi)`
gives expressions (min, max) of `e` over v in [lo, hi], the other variables
held fixed; they may still depend on outer loops, so a stage computed inside
a tile gets a region that moves with the tile. A region ("box") is one
(min, max) pair per dimension; `widen_box` applies `interval` to each.

What cannot be bounded: a product of two varying terms, a division by a
varying value, a float converted to an integer. Those give None, and the
lowering asks the user to clamp the coordinate. A value loaded from memory
(a histogram's bin is an image's pixel) is bounded by its type's range.
"""
from __future__ import annotations

from typing import Optional

from tensorkiln.loops import expr as L
from tensorkiln.loops.simplify import simplify
from tensorkiln.loops.types import int_range, is_int

Interval = tuple[L.Expr, L.Expr]
Box = list[Optional[Interval]]  # per dimension, x first; None: unbounded


def _type_range(dtype: str) -> Optional[Interval]:
    if not is_int(dtype) and dtype != "bool":
        return None
    lo, hi = int_range(dtype)
    return (L.const(lo), L.const(hi))


def interval(e: L.Expr, var: str, lo: L.Expr, hi: L.Expr) -> Optional[Interval]:
    """(min, max) of int64 expression `e` while variable `var` runs over [lo, hi]; None if unbounded."""
    if var not in L.free_vars(e) and not _loads_vary(e, var):
        return (e, e)
    if isinstance(e, L.Var):
        return (lo, hi)
    if isinstance(e, L.Load):
        return _type_range(e.dtype)
    if isinstance(e, L.Cast):
        if not is_int(e.dtype) or not (is_int(e.x.dtype) or e.x.dtype == "bool"):
            return None  # a float converted to an integer: clamp it to bound it
        (src_lo, src_hi), (dst_lo, dst_hi) = int_range(e.x.dtype), int_range(e.dtype)
        if dst_lo <= src_lo and src_hi <= dst_hi:  # widening: the value is kept
            return interval(e.x, var, lo, hi) or _type_range(e.x.dtype)
        return _type_range(e.dtype)  # narrowing wraps anywhere in the target's range
    if isinstance(e, L.Select):
        a, b = interval(e.a, var, lo, hi), interval(e.b, var, lo, hi)
        if a is None or b is None:
            return None
        return (L.minimum(a[0], b[0]), L.maximum(a[1], b[1]))
    if isinstance(e, L.Unary) and e.operator == "neg":
        x = interval(e.x, var, lo, hi)
        return None if x is None else (-x[1], -x[0])
    if isinstance(e, L.BinOp):
        return _binary(e, var, lo, hi)
    return None


def _loads_vary(e: L.Expr, var: str) -> bool:
    return any(isinstance(n, L.Load) and var in L.free_vars(n.index) for n in L.walk(e))


def _binary(e: L.BinOp, var: str, lo: L.Expr, hi: L.Expr) -> Optional[Interval]:
    op = e.operator
    if op in ("floordiv", "mod") and isinstance(e.b, L.Const) and e.b.value > 0:
        if op == "mod":
            return (L.const(0, e.dtype), L.const(e.b.value - 1, e.dtype))
        a = interval(e.a, var, lo, hi)
        return None if a is None else (a[0] // e.b, a[1] // e.b)
    if op == "mul":
        k, x = (e.b, e.a) if isinstance(e.b, L.Const) else (e.a, e.b) if isinstance(e.a, L.Const) else (None, None)
        if k is None:
            return None
        xi = interval(x, var, lo, hi)
        if xi is None:
            return None
        return (xi[0] * k, xi[1] * k) if k.value >= 0 else (xi[1] * k, xi[0] * k)
    a, b = interval(e.a, var, lo, hi), interval(e.b, var, lo, hi)
    if a is None or b is None:
        return None
    if op == "add":
        return (a[0] + b[0], a[1] + b[1])
    if op == "sub":
        return (a[0] - b[1], a[1] - b[0])
    if op == "min":
        return (L.minimum(a[0], b[0]), L.minimum(a[1], b[1]))
    if op == "max":
        return (L.maximum(a[0], b[0]), L.maximum(a[1], b[1]))
    return None


def tighten(e: L.Expr, ranges: dict) -> L.Expr:
    """`e` simplified, with min/max operands that another operand provably dominates dropped.

    Bounds inference makes nests like min(min(a, a + 1), a + 2) (a stencil's
    three taps); comparing operands by their difference reduces that to a, so a
    producer's region inside a tile has a constant extent.
    """
    e = simplify(e, ranges)
    if not isinstance(e, L.BinOp):
        return e
    a, b = tighten(e.a, ranges), tighten(e.b, ranges)
    if e.operator in ("min", "max"):
        diff = simplify(b - a, ranges)
        if isinstance(diff, L.Const):
            return a if (diff.value >= 0) == (e.operator == "min") else b
    if a is e.a and b is e.b:
        return e
    return simplify(L.BinOp(e.operator, a, b), ranges)


def widen_box(box: Box, var: str, lo: L.Expr, hi: L.Expr, ranges: dict) -> Box:
    """The region `box` covers while `var` runs over [lo, hi] (each end simplified with the loop ranges)."""
    out: Box = []
    for dim in box:
        if dim is None:
            out.append(None)
            continue
        low, high = interval(dim[0], var, lo, hi), interval(dim[1], var, lo, hi)
        if low is None or high is None:
            out.append(None)
        else:
            out.append((tighten(low[0], ranges), tighten(high[1], ranges)))
    return out


def union_boxes(boxes: list[Box], ranges: dict) -> Box:
    """The smallest box around all of `boxes` (per dimension: min of mins, max of maxes)."""
    out: Box = list(boxes[0])
    for box in boxes[1:]:
        for d, dim in enumerate(box):
            if out[d] is None or dim is None:
                out[d] = None
            else:
                out[d] = (tighten(L.minimum(out[d][0], dim[0]), ranges),
                          tighten(L.maximum(out[d][1], dim[1]), ranges))
    return out
