"""Interval analysis: the smallest and largest value an integer expression can take.

Given the range of every loop variable (i in [0, extent)), `Bounds` computes
an inclusive interval [lo, hi] for each integer expression, with -inf/+inf
where nothing is known. The simplifier uses it to prove side conditions
(0 <= b < k in `(a*k + b)//k -> a + b//k`), and the C backend uses it to emit
plain `/` and `%` where operands are provably non-negative, and to skip
bounds checks that can never fail.
"""
from __future__ import annotations

import math
from typing import Mapping

from tensorkiln.loops.expr import SIZE_VAR_RANGE, BinOp, Cast, Const, Expr, Load, Select, Unary, Var, is_size_var
from tensorkiln.loops.types import int_range, is_bool, is_int

INF = math.inf
Interval = tuple[float, float]  # inclusive; ints, or +-inf when unbounded
UNKNOWN: Interval = (-INF, INF)


def _mul(a: float, b: float) -> float:
    # 0 * inf is 0 here: a zero-width factor pins the product, whatever the other side.
    return 0 if a == 0 or b == 0 else a * b


def _floordiv(a: float, k: float) -> float:
    """floor(a / k) for k > 0, either possibly infinite (a finite a over an infinite k: 0 or -1)."""
    if math.isinf(a):
        return a
    if math.isinf(k):
        return 0 if a >= 0 else -1
    return a // k


def _scaled_ceiling(x: float, numerator: int, denominator: int) -> float:
    """ceil(numerator * x / denominator) for a possibly infinite x (numerator >= 0, denominator > 0)."""
    if math.isinf(x):
        return x if numerator else 0
    return -((-numerator * int(x)) // denominator)


def _constant(e: Expr) -> int | None:
    return int(e.value) if isinstance(e, Const) else None


def _ceiling_form(expr: BinOp) -> tuple[Expr, int, int] | None:
    """(x, c, d) when expr is x - (x * c) // d with 0 <= c <= d and d > 0: the simplifier's spelling of
    ceil((d - c) * x / d) (a ceiling division -(-x // k) becomes x - x * (k - 1) // k)."""
    b = expr.b
    if not (isinstance(b, BinOp) and b.operator == "floordiv" and isinstance(b.a, BinOp) and b.a.operator == "mul"):
        return None
    d = _constant(b.b)
    for x, c in ((b.a.a, _constant(b.a.b)), (b.a.b, _constant(b.a.a))):
        if x == expr.a and c is not None and d is not None and 0 <= c <= d and d > 0:
            return x, c, d
    return None


class Bounds:
    """Interval analysis over integer expressions, memoized for one set of variable ranges."""

    def __init__(self, ranges: Mapping[str, tuple[int, int]] | None = None):
        """`ranges` maps a variable name to its inclusive (lo, hi); unlisted variables are unbounded."""
        self.ranges = dict(ranges or {})
        self._cache: dict[Expr, Interval] = {}

    def __call__(self, expr: Expr) -> Interval:
        """Inclusive interval of values `expr` can take."""
        found = self._cache.get(expr)
        if found is None:
            found = self._compute(expr)
            self._cache[expr] = found
        return found

    def within(self, expr: Expr, lo: float, hi: float) -> bool:
        """True when every value of `expr` provably lies in [lo, hi]."""
        a, b = self(expr)
        return a >= lo and b <= hi

    def _compute(self, expr: Expr) -> Interval:
        dtype = expr.dtype
        if not (is_int(dtype) or is_bool(dtype)):
            return UNKNOWN
        type_lo, type_hi = int_range(dtype)
        if isinstance(expr, Const):
            return (int(expr.value), int(expr.value))
        if isinstance(expr, Var):
            lo, hi = self.ranges.get(expr.name, SIZE_VAR_RANGE if is_size_var(expr.name) else (type_lo, type_hi))
            return (max(lo, type_lo), min(hi, type_hi))
        if isinstance(expr, BinOp):
            result = self._binop(expr)
        elif isinstance(expr, Unary):
            lo, hi = self(expr.x)
            result = (0, 1) if expr.operator == "not" else (-hi, -lo)
        elif isinstance(expr, Select):
            (alo, ahi), (blo, bhi) = self(expr.a), self(expr.b)
            result = (min(alo, blo), max(ahi, bhi))
        elif isinstance(expr, Cast):
            result = self(expr.x) if (is_int(expr.x.dtype) or is_bool(expr.x.dtype)) else UNKNOWN
            if is_bool(dtype):
                result = (0, 1)
        elif isinstance(expr, Load):
            result = (type_lo, type_hi)
        else:
            result = UNKNOWN
        lo, hi = result
        # A result outside the dtype's range means the arithmetic may wrap: then we know nothing.
        if lo < type_lo or hi > type_hi:
            return (type_lo, type_hi)
        return (lo, hi)

    def _binop(self, expr: BinOp) -> Interval:
        op = expr.operator
        (alo, ahi), (blo, bhi) = self(expr.a), self(expr.b)
        if op == "add":
            return (alo + blo, ahi + bhi)
        if op == "sub":
            ceiling = _ceiling_form(expr)
            if ceiling is not None:  # x - x*c//d = ceil((d - c) x / d): non-decreasing in x
                x, c, d = ceiling
                xlo, xhi = self(x)
                return (_scaled_ceiling(xlo, d - c, d), _scaled_ceiling(xhi, d - c, d))
            return (alo - bhi, ahi - blo)
        if op == "mul":
            corners = [_mul(x, y) for x in (alo, ahi) for y in (blo, bhi)]
            return (min(corners), max(corners))
        if op == "min":
            return (min(alo, blo), min(ahi, bhi))
        if op == "max":
            return (max(alo, blo), max(ahi, bhi))
        if op == "floordiv" and blo > 0:  # floor(a / b) rises with a, and moves with b away from 0
            return (min(_floordiv(alo, blo), _floordiv(alo, bhi)), max(_floordiv(ahi, blo), _floordiv(ahi, bhi)))
        if op == "mod" and blo == bhi and blo > 0:
            k = int(blo)
            if alo >= 0 and ahi < k:
                return (alo, ahi)
            return (0, k - 1)  # floor modulo by k > 0 is always in [0, k)
        if op == "mod" and blo > 0:  # by a positive run-time divisor: in [0, b), and at most a when a >= 0
            return (0, min(bhi - 1, ahi) if alo >= 0 else bhi - 1)
        if op in ("lt", "le", "eq", "ne", "and", "or"):
            return self._truth(expr, (alo, ahi), (blo, bhi))
        return UNKNOWN

    def _truth(self, expr: BinOp, a: Interval, b: Interval) -> Interval:
        """(1, 1) when provably true, (0, 0) when provably false, else (0, 1)."""
        (alo, ahi), (blo, bhi) = a, b
        op = expr.operator
        if op == "lt":
            decided = True if ahi < blo else (False if alo >= bhi else None)
        elif op == "le":
            decided = True if ahi <= blo else (False if alo > bhi else None)
        elif op == "eq":
            decided = True if (alo == ahi == blo == bhi) else (False if ahi < blo or bhi < alo else None)
        elif op == "ne":
            decided = False if (alo == ahi == blo == bhi) else (True if ahi < blo or bhi < alo else None)
        elif op == "and":
            decided = True if (alo == 1 and blo == 1) else (False if ahi == 0 or bhi == 0 else None)
        else:  # or
            decided = True if (alo == 1 or blo == 1) else (False if ahi == 0 and bhi == 0 else None)
        if decided is None:
            return (0, 1)
        return (1, 1) if decided else (0, 0)


def loop_range(extent: int) -> tuple[int, int]:
    """Inclusive range of a loop variable running over [0, extent)."""
    return (0, max(int(extent) - 1, 0))
