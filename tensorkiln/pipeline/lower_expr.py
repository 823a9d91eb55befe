"""Pipeline expressions to loop-IR expressions, with Halide's arithmetic.

int32 (the type of coordinates and of Python ints) is carried in the loop
IR's int64: Halide leaves signed 32-bit overflow undefined, so the wider type
gives the same answers wherever Halide's are defined, and index arithmetic
stays in the one integer type the simplifier reasons about. An int32 value is
narrowed only where it is stored or converted. Every other type keeps its
width, so uint16 arithmetic wraps at 65536 as Halide's does.
"""
from __future__ import annotations

from typing import Callable

from tensorkiln.errors import DTypeError
from tensorkiln.loops import expr as L
from tensorkiln.loops.simplify import simplify
from tensorkiln.pipeline import expr as P
from tensorkiln.pipeline import types as T
from tensorkiln.pipeline.names import RVar, Var

_MATH = {"sqrt": "sqrt", "exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "tanh": "tanh",
         "floor": "floor", "ceil": "ceil", "round": "rint", "abs": "fabs"}
_PLAIN = ("add", "sub", "mul", "min", "max", "lt", "le", "eq", "ne", "and", "or", "bitand", "bitor", "bitxor")


def loop_dtype(t: str) -> str:
    """The loop-IR dtype a pipeline type computes in (int32 -> int64, others unchanged)."""
    return "int64" if t == "int32" else t


def constant(value, t: str) -> L.Expr:
    """A loop-IR constant of pipeline type `t`."""
    return L.Const(value, loop_dtype(t))


class ExprLowering:
    """Lowers expressions; `call(node, args)` turns a Func or Buffer call (args already lowered) into loop IR."""

    def __init__(self, call: Callable[[P.Call, list[L.Expr], dict], L.Expr], extent: Callable[[P.Extent], int]):
        self.call = call
        self.extent = extent

    def __call__(self, e: P.Expr, env: dict[str, L.Expr]) -> L.Expr:
        """`e` with each Var/RVar name replaced by env's loop-IR expression."""
        if isinstance(e, (Var, RVar)):
            return env[e.name]
        if isinstance(e, P.Const):
            return constant(e.value, e.type)
        if isinstance(e, P.Extent):
            return L.const(self.extent(e))
        if isinstance(e, P.Call):
            return self.call(e, [self(a, env) for a in e.args], env)
        if isinstance(e, P.Binary):
            b = self(e.b, env)
            if e.op in ("div", "mod"):
                b = simplify(b)  # folded, so a divisor such as 2*W (an extent) is a constant the bounds can use
            return self.binary(e.op, self(e.a, env), b, e.a.type)
        if isinstance(e, P.Unary):
            return L.Unary(e.op, self(e.x, env))
        if isinstance(e, P.Select):
            return L.Select(self(e.cond, env), self(e.a, env), self(e.b, env))
        if isinstance(e, P.Cast):
            return convert(self(e.x, env), e.x.type, e.type)
        if isinstance(e, P.Math):
            return L.Call(_MATH[e.fn], (self(e.x, env),))
        raise TypeError(f"cannot lower {e!r}")

    @staticmethod
    def binary(op: str, a: L.Expr, b: L.Expr, t: str) -> L.Expr:
        """`a op b` for operands of pipeline type `t`."""
        if op in _PLAIN:
            return L.BinOp(op, a, b)
        if T.is_float(t):
            if op == "div":
                return L.BinOp("div", a, b)
            return L.BinOp("mod", a, b)  # float %: floor modulo, as Halide's (never negative for b > 0)
        if op == "div":
            return euclidean_div(a, b, t)
        if op == "mod":
            return euclidean_mod(a, b, t)
        raise DTypeError(f"unknown operator {op}")


def euclidean_div(a: L.Expr, b: L.Expr, t: str) -> L.Expr:
    """Halide's integer division: the quotient whose remainder is never negative; x/0 = 0."""
    floor = L.BinOp("floordiv", a, b)
    if T.is_uint(t) or (isinstance(b, L.Const) and b.value >= 0):
        return floor  # b > 0: floor division is Euclidean; b == 0: floordiv gives 0
    # b < 0: a = q*b + r with 0 <= r < |b| takes q = -floor(a / -b)
    return L.Select(L.lt(b, L.Const(0, b.dtype)), -L.BinOp("floordiv", a, -b), floor)


def euclidean_mod(a: L.Expr, b: L.Expr, t: str) -> L.Expr:
    """Halide's integer modulo: in [0, |b|) whatever the signs; x % 0 = 0."""
    r = L.BinOp("mod", a, b)
    if T.is_uint(t) or (isinstance(b, L.Const) and b.value >= 0):
        return r
    return L.Select(L.lt(r, L.Const(0, r.dtype)), r - b, r)  # floor modulo has b's sign


def convert(x: L.Expr, source: str, target: str) -> L.Expr:
    """Halide's cast from pipeline type `source` to `target` of an already lowered value."""
    if source == target:
        return x
    if target == "bool":
        return L.Cast(x, "bool") if x.dtype != "bool" else x
    if target == "int32" and not (T.is_int(source) and T.bits(source) < 32) and source != "bool":
        # wrap (or, from a float, truncate) to 32 bits, then carry the value as int64
        return L.Cast(L.Cast(x, "int32"), "int64")
    dtype = loop_dtype(target)
    return x if x.dtype == dtype else L.Cast(x, dtype)
