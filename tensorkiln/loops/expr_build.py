"""Building and walking expressions: constructors for what Python's operators cannot spell, and traversal.

`==` on expressions is structural equality, so comparisons, min/max, the
logical operators, `where`, math calls and casts are built by the functions
here (`lt(i, n)`, `where(c, a, b)`); an operand that is a Python number takes
the other operand's dtype (`lift`).
"""
from __future__ import annotations

from tensorkiln.loops.expr_nodes import (BinOp, Call, Cast, Const, Expr, Number, Select, Unary, Var, lift,
                                        symbolic_expr)
from tensorkiln.loops.types import INDEX_DTYPE


def const(value: Number, dtype: str = INDEX_DTYPE) -> Expr:
    """A constant of `dtype`; a symbolic size (tensorkiln.shapes) gives its expression instead."""
    sized = symbolic_expr(value)
    if sized is not None:
        return sized if dtype == INDEX_DTYPE else Cast(sized, dtype)
    return Const(value, dtype)


def _pair(a: "Expr | Number", b: "Expr | Number") -> tuple[Expr, Expr]:
    if isinstance(a, Expr):
        return a, lift(b, a)
    if isinstance(b, Expr):
        return lift(a, b), b
    raise TypeError("at least one operand must be an expression")


def minimum(a: "Expr | Number", b: "Expr | Number") -> Expr:
    """min(a, b)."""
    return BinOp("min", *_pair(a, b))


def maximum(a: "Expr | Number", b: "Expr | Number") -> Expr:
    """max(a, b)."""
    return BinOp("max", *_pair(a, b))


def lt(a: "Expr | Number", b: "Expr | Number") -> Expr:
    """a < b."""
    return BinOp("lt", *_pair(a, b))


def le(a: "Expr | Number", b: "Expr | Number") -> Expr:
    """a <= b."""
    return BinOp("le", *_pair(a, b))


def gt(a: "Expr | Number", b: "Expr | Number") -> Expr:
    """a > b, spelled b < a."""
    x, y = _pair(a, b)
    return BinOp("lt", y, x)


def ge(a: "Expr | Number", b: "Expr | Number") -> Expr:
    """a >= b, spelled b <= a."""
    x, y = _pair(a, b)
    return BinOp("le", y, x)


def eq(a: "Expr | Number", b: "Expr | Number") -> Expr:
    """a == b (as an expression)."""
    return BinOp("eq", *_pair(a, b))


def ne(a: "Expr | Number", b: "Expr | Number") -> Expr:
    """a != b (as an expression)."""
    return BinOp("ne", *_pair(a, b))


def logical_and(a: Expr, b: Expr) -> Expr:
    """a and b (bool operands)."""
    return BinOp("and", *_pair(a, b))


def logical_or(a: Expr, b: Expr) -> Expr:
    """a or b (bool operands)."""
    return BinOp("or", *_pair(a, b))


def logical_not(a: Expr) -> Expr:
    """not a (bool operand)."""
    return Unary("not", a)


def where(cond: Expr, a: "Expr | Number", b: "Expr | Number") -> Expr:
    """a if cond else b."""
    return Select(cond, *_pair(a, b))


def call(fn: str, *args: Expr) -> Expr:
    """A math function call, e.g. call("exp", x)."""
    return Call(fn, tuple(args))


def cast(x: Expr, dtype: str) -> Expr:
    """Convert x to `dtype` (a no-op node is not created when dtypes already match)."""
    return x if x.dtype == dtype else Cast(x, dtype)


# ---- traversal


def walk(expr: Expr):
    """Yield every node of `expr`, parents before children."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children))


def free_vars(expr: Expr) -> set[str]:
    """Names of the variables `expr` reads."""
    return {node.name for node in walk(expr) if isinstance(node, Var)}
