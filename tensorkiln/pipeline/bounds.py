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

import numpy as np

from tensorkiln.loops import expr as L
from tensorkiln.loops.bounds import Bounds
from tensorkiln.loops.simplify import simplify
from tensorkiln.loops.types import int_range, is_int

Interval = tuple[Optional[L.Expr], Optional[L.Expr]]  # an end is None where it is unbounded
UNBOUNDED: Interval = (None, None)
Box = list[Optional[Interval]]  # per dimension, x first; None: unbounded


def _type_range(dtype: str) -> Interval:
    if not is_int(dtype) and dtype != "bool":
        return UNBOUNDED
    lo, hi = int_range(dtype)
    return (L.const(lo), L.const(hi))


def _op(fn, *xs):
    """fn of the ends `xs`, or None (unbounded) when one of them is."""
    return None if any(x is None for x in xs) else fn(*xs)


def interval(e: L.Expr, var: str, lo: L.Expr, hi: L.Expr) -> Optional[tuple]:
    """(min, max) of int64 expression `e` while variable `var` runs over [lo, hi]; None if unbounded.

    An end may be None alone: clamp(x*y, 0, 255) is bounded although x*y is not."""
    result = _interval(e, var, lo, hi)
    return None if result[0] is None or result[1] is None else result


def _interval(e: L.Expr, var: str, lo: L.Expr, hi: L.Expr) -> Interval:
    """Ends in int64 whatever e's type, so ends of different operands combine."""
    if e.dtype == "int64" or not is_int(e.dtype):
        return _interval_of(e, var, lo, hi)
    if isinstance(e, L.BinOp) and e.operator in ("add", "sub", "mul") and var in L.free_vars(e):
        return _type_range(e.dtype)  # narrow arithmetic wraps: only the type's range is certain
    low, high = _interval_of(e, var, lo, hi)
    return (_op(_index, low), _op(_index, high))


def _index(x: L.Expr) -> L.Expr:
    return x if x.dtype == "int64" else L.Cast(x, "int64")


def _interval_of(e: L.Expr, var: str, lo: L.Expr, hi: L.Expr) -> Interval:
    if var not in L.free_vars(e):
        return (e, e)
    if isinstance(e, L.Var):
        return (lo, hi)
    if isinstance(e, L.Load):
        return _type_range(e.dtype)
    if isinstance(e, L.Cast):
        if not is_int(e.dtype) or not (is_int(e.x.dtype) or e.x.dtype == "bool"):
            return UNBOUNDED  # a float converted to an integer: clamp it to bound it
        (src_lo, src_hi), (dst_lo, dst_hi) = int_range(e.x.dtype), int_range(e.dtype)
        if dst_lo <= src_lo and src_hi <= dst_hi:  # widening: the value is kept
            inner, source = _interval(e.x, var, lo, hi), _type_range(e.x.dtype)
            return (inner[0] if inner[0] is not None else source[0], inner[1] if inner[1] is not None else source[1])
        return _type_range(e.dtype)  # narrowing wraps anywhere in the target's range
    if isinstance(e, L.Select):
        a, b = _interval(e.a, var, lo, hi), _interval(e.b, var, lo, hi)
        return (_op(L.minimum, a[0], b[0]), _op(L.maximum, a[1], b[1]))
    if isinstance(e, L.Unary) and e.operator == "neg":
        x = _interval(e.x, var, lo, hi)
        return (_op(lambda v: -v, x[1]), _op(lambda v: -v, x[0]))
    if isinstance(e, L.BinOp):
        return _binary(e, var, lo, hi)
    return UNBOUNDED


def _binary(e: L.BinOp, var: str, lo: L.Expr, hi: L.Expr) -> Interval:
    op = e.operator
    b_const = e.b if isinstance(e.b, L.Const) else None
    if op in ("floordiv", "mod") and b_const is not None and b_const.value > 0:
        if op == "mod":
            return (L.const(0, e.dtype), L.const(b_const.value - 1, e.dtype))
        a = _interval(e.a, var, lo, hi)
        return (_op(lambda v: v // b_const, a[0]), _op(lambda v: v // b_const, a[1]))
    if op == "mul":
        k, x = (e.b, e.a) if isinstance(e.b, L.Const) else (e.a, e.b) if isinstance(e.a, L.Const) else (None, None)
        if k is None:
            return UNBOUNDED
        xi = _interval(x, var, lo, hi)
        scaled = (_op(lambda v: v * k, xi[0]), _op(lambda v: v * k, xi[1]))
        return scaled if k.value >= 0 else (scaled[1], scaled[0])
    a, b = _interval(e.a, var, lo, hi), _interval(e.b, var, lo, hi)
    if op == "add":
        return (_op(lambda u, v: u + v, a[0], b[0]), _op(lambda u, v: u + v, a[1], b[1]))
    if op == "sub":
        return (_op(lambda u, v: u - v, a[0], b[1]), _op(lambda u, v: u - v, a[1], b[0]))
    if op == "min":  # the smaller of two maxima bounds it above even when one is unbounded
        high = b[1] if a[1] is None else a[1] if b[1] is None else L.minimum(a[1], b[1])
        return (_op(L.minimum, a[0], b[0]), high)
    if op == "max":
        low = b[0] if a[0] is None else a[0] if b[0] is None else L.maximum(a[0], b[0])
        return (low, _op(L.maximum, a[1], b[1]))
    return UNBOUNDED


def tighten(e: L.Expr, ranges: dict) -> L.Expr:
    """`e` simplified, with min/max operands that another operand provably dominates dropped.

    Bounds inference makes nests like min(min(a, a + 1), a + 2) (a stencil's
    three taps); comparing operands by their difference reduces that to a, so a
    producer's region inside a tile has a constant extent. Nested mins (maxes)
    are flattened and each operand is kept once: a region that is the union of
    the regions of several readers, each from a level below it (a pyramid),
    would otherwise repeat the level below's bound once per reader, and the
    bound would grow exponentially with the pyramid's depth.
    """
    return simplify(_Tightener(ranges).visit(e), ranges)


GRID_POINTS = 4096  # a difference of operands over at most this many points of its loops is decided by evaluation


class _Tightener:
    """One bottom-up pass (memoized: shared subtrees are visited once); a min/max nest is flattened before
    anything is simplified, so the operands are compared as the union made them."""

    def __init__(self, ranges: dict):
        self.ranges = ranges
        self.memo: dict[L.Expr, L.Expr] = {}

    def visit(self, e: L.Expr) -> L.Expr:
        found = self.memo.get(e)
        if found is not None:
            return found
        if isinstance(e, L.BinOp) and e.operator in ("min", "max"):
            a, b = (simplify(self.visit(x), self.ranges) for x in (e.a, e.b))
            if self._dominates(a, b, e.operator):  # whole operands first: min(m + 1, m) is m, m = min(u, v)
                result = a
            elif self._dominates(b, a, e.operator):
                result = b
            else:
                result = self._extremum(e.operator, _operands(a, e.operator) + _operands(b, e.operator))
        else:
            children = tuple(self.visit(c) for c in e.children)
            changed = any(c is not old for c, old in zip(children, e.children))
            result = e.with_children(children) if changed else e
        self.memo[e] = result
        return result

    def _extremum(self, op: str, operands: list[L.Expr]) -> L.Expr:
        """min (max) of `operands`, each kept once and only if no other one is always at most (least) it."""
        kept: list[L.Expr] = []
        for x in dict.fromkeys(operands):  # structurally equal operands once, in order
            if any(self._dominates(k, x, op) for k in kept):
                continue
            kept = [k for k in kept if not self._dominates(x, k, op)] + [x]
        out = kept[0]
        for x in kept[1:]:
            out = L.BinOp(op, out, x)
        return simplify(out, self.ranges) if len(kept) > 1 else out  # the simplifier's own min/max rules

    def _dominates(self, a: L.Expr, b: L.Expr, op: str) -> bool:
        """True when op(a, b) == a everywhere in the loop ranges (a <= b for min, a >= b for max)."""
        diff = simplify(b - a, self.ranges)
        low, high = _difference_range(diff, self.ranges)
        return low >= 0 if op == "min" else high <= 0


def _operands(e: L.Expr, op: str) -> list[L.Expr]:
    """The operands of a nest of `op` (min or max) applications; [e] when e is not one."""
    if isinstance(e, L.BinOp) and e.operator == op:
        return _operands(e.a, op) + _operands(e.b, op)
    return [e]


def _difference_range(diff: L.Expr, ranges: dict) -> tuple[float, float]:
    """Bounds of an integer expression: its value if constant, else exact over the grid of its loop
    variables when that is small (interval arithmetic cannot see that 2*(y//4) - y//2 is 0 or -1), else
    interval arithmetic."""
    if isinstance(diff, L.Const):
        return diff.value, diff.value
    low, high = Bounds(ranges)(diff)
    if low >= 0 or high <= 0:
        return low, high
    names = sorted(L.free_vars(diff))
    if not names or any(n not in ranges for n in names):
        return low, high
    size = 1
    for n in names:
        size *= ranges[n][1] - ranges[n][0] + 1
    if size > GRID_POINTS:
        return low, high
    axes = np.meshgrid(*[np.arange(ranges[n][0], ranges[n][1] + 1, dtype=np.int64) for n in names],
                       indexing="ij")
    values = _evaluate_grid(diff, dict(zip(names, axes)))
    if values is None:
        return low, high
    return int(values.min()), int(values.max())


_GRID_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum}


def _evaluate_grid(e: L.Expr, env: dict[str, np.ndarray]) -> Optional[np.ndarray]:
    """An int64 index expression at every point of a grid, or None if it uses an operation not handled here."""
    if isinstance(e, L.Const) and e.dtype == "int64":
        return np.int64(e.value)
    if isinstance(e, L.Var):
        return env[e.name]
    if isinstance(e, L.BinOp) and e.dtype == "int64":
        a, b = _evaluate_grid(e.a, env), _evaluate_grid(e.b, env)
        if a is None or b is None:
            return None
        if e.operator in _GRID_OPS:
            return _GRID_OPS[e.operator](a, b)
        if e.operator in ("floordiv", "mod") and isinstance(e.b, L.Const) and e.b.value > 0:
            return a // b if e.operator == "floordiv" else a % b  # floor division and modulo, as the loop IR's
    return None


def widen_box(box: Box, var: str, lo: L.Expr, hi: L.Expr, ranges: dict) -> Box:
    """The region `box` covers while `var` runs over [lo, hi] (each end simplified with the loop ranges)."""
    out: Box = []
    for dim in box:
        if dim is None or var not in L.free_vars(dim[0]) | L.free_vars(dim[1]):
            out.append(dim)  # already simplified when it was made: simplifying again costs, on deep stencils
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
