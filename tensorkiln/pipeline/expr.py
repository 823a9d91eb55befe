"""Expressions of the pipeline language: trees that Python operators build, typed by Halide's rules.

`x + 1`, `f[x - 1, y]`, `pl.select(a > b, a, b)` build nodes of this module;
the lowering (lower.py) turns them into loop-IR expressions. Every node has a
`type` (types.py). Arithmetic keeps Halide's meaning: integers wrap at their
width, integer `/` rounds toward negative infinity and `%` is never negative
(Euclidean: the divisor's sign does not matter), division by zero gives 0.
`==` builds a comparison, so nodes hash by identity.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

from tensorkiln.errors import DTypeError
from tensorkiln.pipeline import types as T

Number = Union[int, float, bool]

MATH_FUNCTIONS = ("sqrt", "exp", "log", "sin", "cos", "tanh", "floor", "ceil", "round", "abs")


class Expr:
    """A node of a pipeline expression."""

    type: str

    def __add__(self, o): return binary("add", self, o)
    def __radd__(self, o): return binary("add", o, self)
    def __sub__(self, o): return binary("sub", self, o)
    def __rsub__(self, o): return binary("sub", o, self)
    def __mul__(self, o): return binary("mul", self, o)
    def __rmul__(self, o): return binary("mul", o, self)
    def __truediv__(self, o): return binary("div", self, o)
    def __rtruediv__(self, o): return binary("div", o, self)
    def __floordiv__(self, o): return _floor_div(self, o)
    def __rfloordiv__(self, o): return _floor_div(o, self)
    def __mod__(self, o): return binary("mod", self, o)
    def __rmod__(self, o): return binary("mod", o, self)
    def __lt__(self, o): return binary("lt", self, o)
    def __le__(self, o): return binary("le", self, o)
    def __gt__(self, o): return binary("lt", o, self)
    def __ge__(self, o): return binary("le", o, self)
    def __eq__(self, o): return binary("eq", self, o)  # type: ignore[override]
    def __ne__(self, o): return binary("ne", self, o)  # type: ignore[override]
    def __and__(self, o): return _bitwise("and", self, o)
    def __rand__(self, o): return _bitwise("and", o, self)
    def __or__(self, o): return _bitwise("or", self, o)
    def __ror__(self, o): return _bitwise("or", o, self)
    def __xor__(self, o): return _bitwise("xor", self, o)
    def __neg__(self): return Unary("neg", self, self.type)
    def __invert__(self): return Unary("not", self, "bool") if self.type == "bool" else _bitwise("xor", self, -1)
    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise TypeError("a pipeline expression has no truth value while the pipeline is defined; "
                        "use pl.select(cond, a, b) instead of if/and/or")

    def __str__(self) -> str:
        return format_expr(self)

    __repr__ = __str__


@dataclass(eq=False, repr=False)
class Const(Expr):
    """A literal of a given type."""

    value: Number
    type: str


@dataclass(eq=False, repr=False)
class Call(Expr):
    """`target[args]`: a Func or an input Buffer read at a point."""

    target: object  # Func or Buffer (func.py); both have name, type and dimensions
    args: tuple[Expr, ...]
    component: Optional[int] = None  # which value of a Tuple Func: `f[x, y][1]`

    @property
    def type(self) -> str:  # type: ignore[override]
        if self.component is None:
            return self.target.type  # type: ignore[attr-defined]  (a Tuple Func refuses, naming the fix)
        return self.target.types[self.component]  # type: ignore[attr-defined]

    def __getitem__(self, k: int) -> "Call":
        """Value k of a Tuple Func at this point."""
        types = getattr(self.target, "types", None)
        if types is None or len(types) < 2 or self.component is not None:
            raise DTypeError(f"{self.target.name}(...)[{k}]: only a Tuple Func's call has values to index")  # type: ignore[attr-defined]
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(types):
            raise DTypeError(f"{self.target.name} is a Tuple of {len(types)} values; index it with 0 to "  # type: ignore[attr-defined]
                             f"{len(types) - 1}, got {k!r}")
        return Call(self.target, self.args, k)


@dataclass(eq=False, repr=False)
class Binary(Expr):
    """A binary operator on two operands of one type (lowering inserts no conversion)."""

    op: str
    a: Expr
    b: Expr

    @property
    def type(self) -> str:  # type: ignore[override]
        return "bool" if self.op in ("lt", "le", "eq", "ne", "and", "or") else self.a.type


@dataclass(eq=False, repr=False)
class Unary(Expr):
    """neg or not."""

    op: str
    x: Expr
    type: str


@dataclass(eq=False, repr=False)
class Select(Expr):
    """`cond ? a : b`."""

    cond: Expr
    a: Expr
    b: Expr

    @property
    def type(self) -> str:  # type: ignore[override]
        return self.a.type


@dataclass(eq=False, repr=False)
class Cast(Expr):
    """Conversion to `type`: integers wrap, float to integer truncates (and saturates)."""

    type: str
    x: Expr


@dataclass(eq=False, repr=False)
class Math(Expr):
    """A float math function (sqrt, exp, ...)."""

    fn: str
    x: Expr

    @property
    def type(self) -> str:  # type: ignore[override]
        return self.x.type


@dataclass(eq=False, repr=False)
class Extent(Expr):
    """The extent of dimension `dim` of an input Buffer: known when the pipeline is compiled."""

    buffer: object
    dim: int
    type: str = "int32"

    def __index__(self) -> int:
        return int(self.buffer.shape_xy()[self.dim])  # type: ignore[attr-defined]

    __int__ = __index__


# ---------------------------------------------------------------- construction


def as_expr(value: "Expr | Number", like: "Expr | None" = None) -> Expr:
    """`value` as an expression; a Python number takes the type `like` gives it (Halide's rule)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, (np.generic,)) and not isinstance(value, (np.integer, np.floating, np.bool_)):
        raise TypeError(f"cannot use {value!r} in a pipeline expression")
    t = T.literal_type(value, like.type) if like is not None else T.default_literal_type(value)
    if T.is_float(t):
        return Const(float(value), t)
    return Const(bool(value) if t == "bool" else int(value), t)


def cast(t: object, x: "Expr | Number") -> Expr:
    """`pl.cast(type, x)`: x converted to type (integers wrap; float to integer truncates toward zero)."""
    t = T.check_type(t)
    x = as_expr(x)
    return x if x.type == t else Cast(t, x)


def _operands(a: "Expr | Number", b: "Expr | Number") -> tuple[Expr, Expr]:
    """Both operands as expressions of one type, by Halide's promotion rules."""
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        a = as_expr(a)
    if not isinstance(a, Expr):
        b = as_expr(b)
        a = as_expr(a, b)
    elif not isinstance(b, Expr):
        b = as_expr(b, a)
    t = T.promote(a.type, b.type)
    return cast(t, a), cast(t, b)


def binary(op: str, a: "Expr | Number", b: "Expr | Number") -> Expr:
    """`a op b` after promotion; `div` of integers floors, of floats divides."""
    a, b = _operands(a, b)
    if a.type == "bool" and op in ("add", "sub", "mul", "div", "mod", "min", "max"):
        raise DTypeError(f"{op} of bool expressions {a} and {b}: cast them to an integer type first")
    return Binary(op, a, b)


def _floor_div(a: "Expr | Number", b: "Expr | Number") -> Expr:
    a, b = _operands(a, b)
    q = binary("div", a, b)
    return Math("floor", q) if T.is_float(q.type) else q


def _bitwise(op: str, a: "Expr | Number", b: "Expr | Number") -> Expr:
    a, b = _operands(a, b)
    if a.type == "bool":
        if op == "xor":
            return Binary("ne", a, b)
        return Binary(op, a, b)
    if not T.is_int(a.type):
        raise DTypeError(f"bitwise {op} needs integer or bool operands, got {a.type}")
    return Binary("bit" + op, a, b)


def select(cond: "Expr | Number", a: "Expr | Number", b: "Expr | Number") -> Expr:
    """`pl.select(cond, a, b)`: a where cond holds, else b (a and b promoted to one type)."""
    cond = as_expr(cond)
    if cond.type != "bool":
        raise DTypeError(f"select needs a bool condition, got {cond.type}: {cond}")
    a, b = _operands(a, b)
    return Select(cond, a, b)


def minimum(a: "Expr | Number", b: "Expr | Number") -> Expr:
    """`pl.min(a, b)`."""
    return binary("min", a, b)


def maximum(a: "Expr | Number", b: "Expr | Number") -> Expr:
    """`pl.max(a, b)`."""
    return binary("max", a, b)


def clamp(x: "Expr | Number", lo: "Expr | Number", hi: "Expr | Number") -> Expr:
    """`pl.clamp(x, lo, hi)`: max(min(x, hi), lo), with lo and hi in x's type."""
    x = as_expr(x)
    lo_e, hi_e = cast(x.type, as_expr(lo, x)), cast(x.type, as_expr(hi, x))
    return maximum(minimum(x, hi_e), lo_e)


def math_function(fn: str, x: "Expr | Number") -> Expr:
    """A float math function; an integer argument is converted to float32 first (as Halide does)."""
    x = as_expr(x)
    if fn == "abs" and not T.is_float(x.type):
        # Halide's abs of a signed integer is the unsigned type of its width: abs(int16(-32768)) = 32768
        unsigned = x.type if T.is_uint(x.type) else f"uint{T.bits(x.type)}"
        return cast(unsigned, select(x < 0, -x, x)) if unsigned != x.type else x
    if not T.is_float(x.type):
        x = cast("float32", x)
    return Math(fn, x)


# ---------------------------------------------------------------- printing


_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "lt": "<", "le": "<=", "eq": "==",
            "ne": "!=", "and": "&&", "or": "||", "bitand": "&", "bitor": "|", "bitxor": "^"}


def format_expr(e: Expr) -> str:
    """Halide-like text: `(blur_x(x, y - 1) + blur_x(x, y))/uint16(3)`."""
    if isinstance(e, Const):
        return str(e.value) if e.type in ("int32", "float32", "bool") else f"{e.type}({e.value})"
    if isinstance(e, Call):
        text = f"{e.target.name}({', '.join(format_expr(a) for a in e.args)})"  # type: ignore[attr-defined]
        return text if e.component is None else f"{text}[{e.component}]"
    if isinstance(e, Binary):
        if e.op in ("min", "max"):
            return f"{e.op}({format_expr(e.a)}, {format_expr(e.b)})"
        return f"({format_expr(e.a)} {_SYMBOLS[e.op]} {format_expr(e.b)})"
    if isinstance(e, Unary):
        return f"{'-' if e.op == 'neg' else '!'}{format_expr(e.x)}"
    if isinstance(e, Select):
        return f"select({format_expr(e.cond)}, {format_expr(e.a)}, {format_expr(e.b)})"
    if isinstance(e, Cast):
        return f"{e.type}({format_expr(e.x)})"
    if isinstance(e, Math):
        return f"{e.fn}({format_expr(e.x)})"
    if isinstance(e, Extent):
        return f"{e.buffer.name}.extent({e.dim})"  # type: ignore[attr-defined]
    name = getattr(e, "name", None)
    if name is not None:
        return name
    raise TypeError(f"not a pipeline expression: {e!r}")


def walk(e: Expr):
    """Every node of `e`, parents first."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def children(e: Expr) -> tuple[Expr, ...]:
    """The direct operands of a node."""
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, (Unary, Cast, Math)):
        return (e.x,)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    return ()
