"""SymInt: an int-like size that keeps a symbolic expression and the value seen at trace time.

Arithmetic with ints and SymInts (+ - * // % neg, `sym_min`/`sym_max`,
`prod`) stays symbolic. Everything that needs a concrete answer — `int()`,
`__index__` (slicing, range, numpy), `bool()`, `float()`, and comparisons the
symbols' bounds do not decide — answers from the hint and records a guard in
the SymInt's ShapeEnv (the relation it decided: `s_seq == 7` for int(),
`64*s_seq <= 4096` for a comparison). Code that is not yet symbolic-aware
therefore specializes, with a guard that the compiled program checks on every
new shape, instead of silently baking a constant in.

`str`, `repr` and `format` give the symbolic text, never the hint: a size
forgotten on its way into C source fails to compile loudly, and graph
fingerprints are per symbol, not per value. A SymInt hashes by its expression.
"""
from __future__ import annotations

import operator
from typing import Iterable, Union

import numpy as np

from tensorkiln.loops import expr as E
from tensorkiln.shapes.poly import OpaqueAtom, Poly

IntLike = Union[int, "SymInt"]
_INTS = (int, np.integer)


class SymInt:
    """An integer size: a canonical polynomial over size symbols, its hint and the ShapeEnv it lives in."""

    __slots__ = ("poly", "hint", "env")

    def __init__(self, poly: Poly, hint: int, env):  # env: the ShapeEnv (env.py) that records its guards
        self.poly, self.hint, self.env = poly, int(hint), env

    # ---- making values
    def _make(self, poly: Poly, hint: int) -> IntLike:
        """A SymInt of `poly`, or a plain int when it has no symbols left."""
        return poly.constant_term if poly.is_constant else SymInt(poly, hint, self.env)

    def _other(self, other) -> tuple[Poly, int] | None:
        """(polynomial, hint) of an int or SymInt operand; None for anything else."""
        if isinstance(other, SymInt):
            return other.poly, other.hint
        if isinstance(other, _INTS):  # bool is an int too
            return Poly.constant(int(other)), int(other)
        return None

    def _binary(self, other, poly_op, int_op, reverse: bool = False):
        pair = self._other(other)
        if pair is None:
            if isinstance(other, (float, np.floating)):  # leaves the integers: specialize
                return int_op(other, int(self)) if reverse else int_op(int(self), other)
            return NotImplemented
        poly, hint = pair
        if reverse:
            return self._make(poly_op(poly, self.poly), int_op(hint, self.hint))
        return self._make(poly_op(self.poly, poly), int_op(self.hint, hint))

    def __add__(self, other):
        return self._binary(other, operator.add, operator.add)

    def __radd__(self, other):
        return self._binary(other, operator.add, operator.add, reverse=True)

    def __sub__(self, other):
        return self._binary(other, operator.sub, operator.sub)

    def __rsub__(self, other):
        return self._binary(other, operator.sub, operator.sub, reverse=True)

    def __mul__(self, other):
        return self._binary(other, operator.mul, operator.mul)

    def __rmul__(self, other):
        return self._binary(other, operator.mul, operator.mul, reverse=True)

    def __floordiv__(self, other):
        return self._binary(other, Poly.floordiv, _floordiv)

    def __rfloordiv__(self, other):
        return self._binary(other, Poly.floordiv, _floordiv, reverse=True)

    def __mod__(self, other):
        return self._binary(other, Poly.mod, _mod)

    def __rmod__(self, other):
        return self._binary(other, Poly.mod, _mod, reverse=True)

    def __divmod__(self, other):
        return self // other, self % other

    def __rdivmod__(self, other):
        return other // self, other % self

    def __truediv__(self, other):
        return float(self) / other

    def __rtruediv__(self, other):
        return other / float(self)

    def __neg__(self):
        return self._make(-self.poly, -self.hint)

    def __pos__(self):
        return self

    def __abs__(self):
        return self if self.env.decide(self.poly, ">=", self.hint >= 0) else -self

    # ---- conversions: answer from the hint, guarded
    def __int__(self) -> int:
        self.env.specialize(self)
        return self.hint

    __index__ = __int__

    def __float__(self) -> float:
        return float(int(self))

    def __bool__(self) -> bool:
        return self.env.decide(self.poly, "!=", self.hint != 0)

    # ---- comparisons: decided by the symbols' bounds, else from the hint with a guard
    def _compare(self, other, op: str):
        pair = self._other(other)
        if pair is None:
            return NotImplemented
        poly, hint = pair
        return self.env.decide(self.poly - poly, op, _COMPARE[op](self.hint, hint))

    def __eq__(self, other):
        return self._compare(other, "==")

    def __ne__(self, other):
        return self._compare(other, "!=")

    def __lt__(self, other):
        return self._compare(other, "<")

    def __le__(self, other):
        return self._compare(other, "<=")

    def __gt__(self, other):
        return self._compare(other, ">")

    def __ge__(self, other):
        return self._compare(other, ">=")

    def __hash__(self) -> int:
        return hash(("SymInt", self.poly))

    # ---- text: never the hint
    def __str__(self) -> str:
        return str(self.poly)

    def __repr__(self) -> str:
        return str(self.poly)

    def __format__(self, spec: str) -> str:
        return format(str(self.poly), spec.rstrip("d"))

    # ---- loop IR
    @property
    def symbolic_expr(self) -> E.Expr:
        """The int64 loop-IR expression of this size (symbols as `s_<name>` Vars); see expr.lift."""
        return self.poly.to_expr()

    def same_as(self, other) -> bool:
        """Structural identity (no guard): the same expression."""
        return isinstance(other, SymInt) and other.poly == self.poly


_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
            ">": operator.gt, ">=": operator.ge}


def _floordiv(a: int, b: int) -> int:
    return a // b if b else 0


def _mod(a: int, b: int) -> int:
    return a % b if b else 0


# ---- helpers that keep sizes symbolic -----------------------------------------------------------
def is_symbolic(value) -> bool:
    """True for a SymInt (a size that is not a plain int)."""
    return isinstance(value, SymInt)


def has_symbols(shape: Iterable) -> bool:
    """True when any dimension of `shape` is a SymInt."""
    return any(isinstance(d, SymInt) for d in shape)


def prod(values: Iterable[IntLike]) -> IntLike:
    """The product of sizes; symbolic when any is (np.prod would convert them to int64)."""
    result: IntLike = 1
    for v in values:
        result = result * (v if isinstance(v, SymInt) else int(v))
    return result


def _pick(op: str, a: IntLike, b: IntLike) -> IntLike:
    if not isinstance(a, SymInt) and not isinstance(b, SymInt):
        return min(int(a), int(b)) if op == "min" else max(int(a), int(b))
    sym = a if isinstance(a, SymInt) else b
    pa, pb = sym._other(a)[0], sym._other(b)[0]
    lo, hi = sym.env.interval(pa - pb)
    if hi <= 0:  # a <= b always
        return a if op == "min" else b
    if lo >= 0:
        return b if op == "min" else a
    hint = min(sym._other(a)[1], sym._other(b)[1]) if op == "min" else max(sym._other(a)[1], sym._other(b)[1])
    return sym._make(Poly.atom(OpaqueAtom(op, pa, pb)), hint)


def sym_min(a: IntLike, b: IntLike) -> IntLike:
    """min(a, b) without a guard: symbolic when the bounds do not decide it."""
    return _pick("min", a, b)


def sym_max(a: IntLike, b: IntLike) -> IntLike:
    """max(a, b) without a guard: symbolic when the bounds do not decide it."""
    return _pick("max", a, b)


def hint_of(value: IntLike) -> int:
    """The concrete value seen at trace time, without a guard (for heuristics that then guard a range)."""
    return value.hint if isinstance(value, SymInt) else int(value)


def same_shape(a: Iterable[IntLike], b: Iterable[IntLike]) -> bool:
    """Shapes equal at every size, without a guard: equal ints, structurally equal SymInts (a SymInt
    is never the same as an int, which it only equals at some sizes)."""
    a, b = tuple(a), tuple(b)
    return len(a) == len(b) and all(x.same_as(y) if isinstance(x, SymInt) else
                                    not isinstance(y, SymInt) and int(x) == int(y) for x, y in zip(a, b))


def upper_bound(value: IntLike) -> int:
    """The largest value a size can take within its symbols' bounds (itself for an int), without a guard:
    for the loop-variable ranges that interval analysis proves things with."""
    if not isinstance(value, SymInt):
        return int(value)
    hi = value.env.interval(value.poly)[1]
    return int(min(hi, 2 ** 62))


def size_expr(value: IntLike) -> E.Expr:
    """An int64 loop-IR expression of a size (a Const for a plain int)."""
    return value.symbolic_expr if isinstance(value, SymInt) else E.Const(int(value))
