"""Patterns over expression trees, and rewrite rules built from them.

A `Pat` describes a tree shape: `X + 0` matches an addition whose right (or,
the op being commutative, left) operand is the constant 0, binding the other
operand to the name "x". A `Rule` pairs a pattern with a rewrite function
that receives the bindings it names as keyword arguments (and `ctx`, the
interval analysis, when it asks for it) and returns a replacement or None (no change).
The simplifier is a list of such rules; see simplify.py.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Callable, Optional

from tensorkiln.loops.expr import COMMUTATIVE_OPS, Const, Expr, Number
from tensorkiln.loops.types import is_bool, is_float, is_int


@dataclass(frozen=True)
class Pat:
    """A tree pattern: a wildcard, a constant, or an operator node with child patterns.

    ops: operator names this node matches (None: any expression, children ignored)
    children: patterns for the operands, in order (commutative ops also try them swapped);
        None: operands of any number and shape
    name: bind the matched expression to this name (a repeated name must match equal trees)
    const: match only `Const` nodes; with `value` set, only that value
    kind: restrict the matched dtype: "int", "float" or "bool"
    """

    ops: Optional[frozenset[str]] = None
    children: Optional[tuple["Pat", ...]] = None
    name: Optional[str] = None
    const: bool = False
    value: Optional[Number] = None
    kind: Optional[str] = None

    # ---- constructors

    @staticmethod
    def var(name: str, kind: Optional[str] = None) -> "Pat":
        """Any expression, bound to `name`."""
        return Pat(name=name, kind=kind)

    @staticmethod
    def cvar(name: str, kind: Optional[str] = None) -> "Pat":
        """Any constant, bound to `name`."""
        return Pat(name=name, const=True, kind=kind)

    @staticmethod
    def lit(value: Number) -> "Pat":
        """The constant `value` (of any dtype)."""
        return Pat(const=True, value=value)

    @staticmethod
    def node(ops: "str | frozenset[str] | set[str]", *children: "Pat | Number", name: Optional[str] = None,
             kind: Optional[str] = None) -> "Pat":
        """An operator node: one op name or a set of them."""
        op_set = frozenset({ops}) if isinstance(ops, str) else frozenset(ops)
        child_pats = tuple(_as_pat(c) for c in children) if children else None
        return Pat(ops=op_set, children=child_pats, name=name, kind=kind)

    def named(self, name: str) -> "Pat":
        """This pattern, binding the whole match to `name`."""
        return Pat(self.ops, self.children, name, self.const, self.value, self.kind)

    # ---- operators build patterns the way they build expressions

    def __add__(self, other: "Pat | Number") -> "Pat":
        return Pat.node("add", self, other)

    def __sub__(self, other: "Pat | Number") -> "Pat":
        return Pat.node("sub", self, other)

    def __mul__(self, other: "Pat | Number") -> "Pat":
        return Pat.node("mul", self, other)

    def __truediv__(self, other: "Pat | Number") -> "Pat":
        return Pat.node("div", self, other)

    def __floordiv__(self, other: "Pat | Number") -> "Pat":
        return Pat.node("floordiv", self, other)

    def __mod__(self, other: "Pat | Number") -> "Pat":
        return Pat.node("mod", self, other)

    def __neg__(self) -> "Pat":
        return Pat.node("neg", self)

    # ---- matching

    def may_match_op(self, op: str) -> bool:
        """Whether an expression whose op is `op` can match this pattern at all (its root alone)."""
        if self.const:
            return op == "const"
        return self.ops is None or op in self.ops

    def match(self, expr: Expr) -> Optional[dict[str, Expr]]:
        """Bindings if `expr` matches this pattern, else None."""
        bindings: dict[str, Expr] = {}
        return bindings if self._match(expr, bindings) else None

    def _match(self, expr: Expr, bindings: dict[str, Expr]) -> bool:
        if self.kind is not None and not _has_kind(expr.dtype, self.kind):
            return False
        if self.const:
            if not isinstance(expr, Const):
                return False
            if self.value is not None and not _same_literal(expr, self.value):
                return False
        elif self.ops is not None:
            if expr.op not in self.ops:
                return False
            if self.children is not None:
                if len(expr.children) != len(self.children) or not self._match_children(expr, bindings):
                    return False
        if self.name is not None:
            bound = bindings.get(self.name)
            if bound is None:
                bindings[self.name] = expr
            elif bound != expr:
                return False
        return True

    def _match_children(self, expr: Expr, bindings: dict[str, Expr]) -> bool:
        orders = [expr.children]
        if expr.op in COMMUTATIVE_OPS:
            orders.append(expr.children[::-1])
        for children in orders:
            trial = dict(bindings)
            if all(p._match(c, trial) for p, c in zip(self.children, children)):
                bindings.clear()
                bindings.update(trial)
                return True
        return False


def _same_literal(const: Const, value: Number) -> bool:
    """Const equals the literal: same number, bool only for bool, and -0.0 is not 0."""
    if isinstance(value, bool) != is_bool(const.dtype) or const.value != value:
        return False
    if isinstance(const.value, float) and const.value == 0:
        return math.copysign(1.0, const.value) == math.copysign(1.0, float(value))
    return True


def _as_pat(value: "Pat | Number") -> Pat:
    return value if isinstance(value, Pat) else Pat.lit(value)


def _has_kind(dtype: str, kind: str) -> bool:
    return {"int": is_int, "float": is_float, "bool": is_bool}[kind](dtype)


@dataclass(frozen=True)
class Rule:
    """One rewrite: `identity` says what it does ("x*1 -> x"), `pattern` where, `rewrite` how."""

    identity: str
    pattern: Pat
    rewrite: Callable[..., Optional[Expr]]
    wanted: frozenset[str] = field(init=False)  # the names the rewrite function takes

    def __post_init__(self) -> None:
        object.__setattr__(self, "wanted", frozenset(inspect.signature(self.rewrite).parameters))

    def apply(self, expr: Expr, ctx: object) -> Optional[Expr]:
        """The rewritten expression, or None when the pattern or the side condition fails."""
        bindings = self.pattern.match(expr)
        if bindings is None:
            return None
        # Pass only what the function asks for, so it can ignore bindings it does not need.
        arguments = {name: value for name, value in bindings.items() if name in self.wanted}
        if "ctx" in self.wanted:
            arguments["ctx"] = ctx
        return self.rewrite(**arguments)
