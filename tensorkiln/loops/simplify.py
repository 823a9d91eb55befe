"""The expression simplifier: declarative rewrite rules applied bottom-up to a fixed point.

Each rule is one line: the identity it encodes, a pattern, and a rewrite
function (see pattern.py). Rules whose identity needs a side condition
("if 0 <= b < k") take `ctx`, the interval analysis of bounds.py built from
the loop variables' ranges, and return None when the condition is not proven.

Integer sums are kept in one canonical affine form, `c1*t1 + c2*t2 + ... + c0`
with the largest coefficient first (so `i*64 + j`), where the terms are
variables or non-affine subtrees. Rearranging sums is exact even when integer
arithmetic wraps (it is a ring), but the division rules are not, so they also
require the interval analysis to show the numerator does not wrap.

Every rule is checked by tests/loops/test_simplify.py on random expressions
and random variable values: simplified == original.
"""
from __future__ import annotations

import math
from typing import Mapping, Optional

from tensorkiln.loops.bounds import Bounds
from tensorkiln.loops.expr import (BINARY_OPS, BinOp, Const, Expr, Load, Unary, Var, const, evaluate, format_expr,
                                   is_size_var, walk, wrap_int)
from tensorkiln.loops.expr_eval import _binary
from tensorkiln.loops.pattern import Pat, Rule
from tensorkiln.loops.types import int_range, is_int, is_unsigned

X, Y = Pat.var("x"), Pat.var("y")
XI = Pat.var("x", kind="int")  # x, restricted to integer dtypes
XB = Pat.var("x", kind="bool")
C, C1, C2 = Pat.cvar("c"), Pat.cvar("c1"), Pat.cvar("c2")
K, K1, K2 = Pat.cvar("k", kind="int"), Pat.cvar("k1", kind="int"), Pat.cvar("k2", kind="int")
A, B = Pat.var("a"), Pat.var("b")
AI, BI = Pat.var("a", kind="int"), Pat.var("b", kind="int")


def _zero(like: Expr) -> Const:
    return Const(0, like.dtype)


def _true() -> Const:
    return Const(True, "bool")


def _false() -> Const:
    return Const(False, "bool")


# ---------------------------------------------------------------- affine form

LinearForm = tuple[dict[Expr, int], int]


def linear_form(expr: Expr) -> LinearForm:
    """Split an integer expression into ({term: coefficient}, constant); non-affine parts are terms."""
    if isinstance(expr, Const):
        return {}, int(expr.value)
    if isinstance(expr, BinOp) and expr.operator in ("add", "sub"):
        terms, c0 = linear_form(expr.a)
        other, c1 = linear_form(expr.b)
        sign = 1 if expr.operator == "add" else -1
        terms = dict(terms)
        for term, coeff in other.items():
            terms[term] = terms.get(term, 0) + sign * coeff
        return terms, c0 + sign * c1
    if isinstance(expr, Unary) and expr.operator == "neg":
        terms, c0 = linear_form(expr.x)
        return {t: -c for t, c in terms.items()}, -c0
    if isinstance(expr, BinOp) and expr.operator == "mul":
        left, right = linear_form(expr.a), linear_form(expr.b)
        if not left[0]:
            left, right = right, left
        if not right[0]:  # one side is a constant: scale the other
            scale = right[1]
            return {t: c * scale for t, c in left[0].items()}, left[1] * scale
    return {expr: 1}, 0


def _balanced(value: int, dtype: str) -> int:
    """`value` wrapped to `dtype`'s width, as a signed number even for unsigned types.

    Sums are exact modulo 2^bits, so a coefficient may be named by either
    representative: for uint8, -1 (255) keeps `x - y` a subtraction instead of
    `x + y*255`, and `x - 3` instead of `x + 253`.
    """
    value = wrap_int(value, dtype)
    if is_unsigned(dtype) and value > int_range(dtype)[1] // 2:
        value -= int_range(dtype)[1] + 1
    return value


def build_linear(terms: Mapping[Expr, int], constant: int, dtype: str) -> Expr:
    """The canonical expression for a linear form: largest coefficient first, constant last.

    When every coefficient is negative a positive constant leads (`10 - i*4`,
    not `i*-4 + 10`), and otherwise a leading negative term is negated (`-i - j`).
    """
    items = [(t, _balanced(c, dtype)) for t, c in terms.items()]
    items = [(t, c) for t, c in items if c != 0]
    items.sort(key=lambda tc: (-abs(tc[1]), tc[1] < 0, format_expr(tc[0])))  # positive first on ties
    constant = _balanced(constant, dtype)
    _, type_hi = int_range(dtype)
    if any(abs(c) > type_hi for _, c in items):  # -2**63 has no positive counterpart: keep it plain
        result: Optional[Expr] = None
        for term, coeff in items:
            piece = BinOp("mul", term, Const(coeff, dtype))
            result = piece if result is None else BinOp("add", result, piece)
        return result if constant == 0 else BinOp("add", result, Const(constant, dtype))

    def magnitude(term: Expr, coeff: int) -> Expr:
        return term if abs(coeff) == 1 else BinOp("mul", term, Const(abs(coeff), dtype))

    result = None
    if items and items[0][1] < 0 and constant > 0:
        result, constant = Const(constant, dtype), 0
    for term, coeff in items:
        piece = magnitude(term, coeff)
        if result is None:
            result = piece if coeff > 0 else Unary("neg", piece)
        else:
            result = BinOp("add" if coeff > 0 else "sub", result, piece)
    if result is None:
        return Const(wrap_int(constant, dtype), dtype)
    if constant > 0:
        return BinOp("add", result, Const(constant, dtype))
    if constant < 0:
        return BinOp("sub", result, Const(-constant, dtype)) if -constant <= type_hi \
            else BinOp("add", result, Const(constant, dtype))
    return result


def _exact(ctx: Bounds, expr: Expr) -> bool:
    """True when the interval analysis shows `expr` is computed without wrapping."""
    return ctx(expr) != tuple(int_range(expr.dtype))


# ---------------------------------------------------------------- rewrite functions


def fold_binary(e: Expr) -> Optional[Expr]:
    """c1 op c2 -> the constant it computes."""
    return Const(_binary(e.op, e.a.value, e.b.value, e.a.dtype), e.dtype)


def fold_unary(e: Expr) -> Optional[Expr]:
    """-c, not c, cast(c) -> constant (casting NaN or infinity to an integer is left to C)."""
    try:
        return Const(evaluate(e, {}), e.dtype)
    except (ValueError, OverflowError):
        return None


def canonical_sum(e: Expr) -> Optional[Expr]:
    """Rewrite an integer sum/product-by-constant to the canonical affine form."""
    terms, constant = linear_form(e)
    result = build_linear(terms, constant, e.dtype)
    return None if result == e else result


def recombine_div_mod(e: Expr) -> Optional[Expr]:
    """m*k*(x//k) + m*(x%k) -> m*x, wherever the pair appears in a sum."""
    terms, constant = linear_form(e)
    for term, coeff in terms.items():
        if not (term.op == "floordiv" and isinstance(term.b, Const) and term.b.value > 0):
            continue
        k = term.b.value
        partner = BinOp("mod", term.a, term.b)
        m = terms.get(partner, 0)
        if m == 0 or coeff != m * k:
            continue
        rest = {t: c for t, c in terms.items() if t != term and t != partner}
        inner, inner_c = linear_form(term.a)
        for t, c in inner.items():
            rest[t] = rest.get(t, 0) + m * c
        return build_linear(rest, constant + m * inner_c, e.dtype)
    return None


def recombine_runtime_div_mod(ctx: Bounds, e: Expr) -> Optional[Expr]:
    """(x//k)*(k*m) + (x%k)*m -> x*m for a divisor k known only at run time (a size symbol), never 0.

    A row index delinearized over symbolic sizes and linearized again has this form; the
    product's second factor is matched by its linear form (k*m, m*k, k*c*m' ...)."""
    terms, constant = linear_form(e)
    for term, coeff in terms.items():
        if not (isinstance(term, BinOp) and term.operator == "mul"):
            continue
        for quotient, factor in ((term.a, term.b), (term.b, term.a)):
            if not (isinstance(quotient, BinOp) and quotient.operator == "floordiv"
                    and not isinstance(quotient.b, Const)):
                continue
            k = quotient.b
            lo, hi = ctx(k)
            if lo <= 0 <= hi:  # x//0 and x%0 are 0: the identity needs k != 0
                continue
            partner = BinOp("mod", quotient.a, k)
            m = terms.get(partner, 0)
            k_terms, k_constant = linear_form(k)
            f_terms, f_constant = linear_form(factor)
            scaled = {t: c * m for t, c in k_terms.items()}
            if m == 0 or {t: c * coeff for t, c in f_terms.items()} != scaled or f_constant * coeff != k_constant * m:
                continue
            rest = {t: c for t, c in terms.items() if t != term and t != partner}
            inner, inner_c = linear_form(quotient.a)
            for t, c in inner.items():
                rest[t] = rest.get(t, 0) + m * c
            return build_linear(rest, constant + m * inner_c, e.dtype)
    return None


def recombine_nested_div_mod(e: Expr) -> Optional[Expr]:
    """m*q*(x//(j*q)) + m*((x//j)%q) -> m*(x//j), wherever the pair appears in a sum.

    A row index split over several axes delinearizes to `x//(j*q)` and
    `(x//j)%q` (nested quotients are folded into one), so this undoes one axis
    at a time; the last step is the plain rule above. Both identities hold for
    floor division by positive constants, whatever the range of x.
    """
    terms, constant = linear_form(e)
    for term, m in terms.items():
        if not (term.op == "mod" and isinstance(term.b, Const) and term.b.value > 0):
            continue
        inner = term.a
        if not (inner.op == "floordiv" and isinstance(inner.b, Const) and inner.b.value > 0):
            continue
        product = inner.b.value * term.b.value
        if product > int_range(inner.dtype)[1]:
            continue
        outer = BinOp("floordiv", inner.a, Const(product, inner.dtype))
        if terms.get(outer, 0) != m * term.b.value:
            continue
        rest = {t: c for t, c in terms.items() if t != term and t != outer}
        rest[inner] = rest.get(inner, 0) + m
        return build_linear(rest, constant, e.dtype)
    return None


def recombine_mod_div_mod(e: Expr) -> Optional[Expr]:
    """m*j*((x%k)//j) + m*(x%j) -> m*(x%k) when j divides k, wherever the pair appears in a sum.

    The other order of splitting a remainder: (x%k)//j and x%j are the two
    digits of x%k, as (x//j)%q and x%j are of x%(j*q).
    """
    terms, constant = linear_form(e)
    for term, coeff in terms.items():
        if not (term.op == "floordiv" and isinstance(term.b, Const) and term.b.value > 0):
            continue
        inner, j = term.a, term.b.value
        if not (inner.op == "mod" and isinstance(inner.b, Const) and inner.b.value > 0 and inner.b.value % j == 0):
            continue
        partner = BinOp("mod", inner.a, term.b)
        m = terms.get(partner, 0)
        if m == 0 or coeff != m * j:
            continue
        rest = {t: c for t, c in terms.items() if t != term and t != partner}
        rest[inner] = rest.get(inner, 0) + m
        return build_linear(rest, constant, e.dtype)
    return None


def _split(x: Expr, k: int) -> tuple[Expr, Expr]:
    """x = k*Q + R with every coefficient of R in [0, k)."""
    terms, constant = linear_form(x)
    q = {t: c // k for t, c in terms.items()}
    r = {t: c % k for t, c in terms.items()}
    return build_linear(q, constant // k, x.dtype), build_linear(r, constant % k, x.dtype)


def split_quotient(ctx: Bounds, x: Expr, k: Const) -> Optional[Expr]:
    """(a*k + b)//k -> a + b//k, when the numerator does not wrap."""
    if k.value <= 1 or not _exact(ctx, x):
        return None
    quotient, remainder = _split(x, k.value)
    if quotient == _zero(x) or not _exact(ctx, remainder):
        return None
    return BinOp("add", quotient, BinOp("floordiv", remainder, k))


def split_remainder(ctx: Bounds, x: Expr, k: Const) -> Optional[Expr]:
    """(a*k + b)%k -> b%k, when the numerator does not wrap."""
    if k.value <= 1 or not _exact(ctx, x):
        return None
    quotient, remainder = _split(x, k.value)
    if quotient == _zero(x) or not _exact(ctx, remainder):
        return None
    return BinOp("mod", remainder, k)


def _common_factor(x: Expr, k: int) -> tuple[int, dict[Expr, int], int]:
    terms, constant = linear_form(x)
    g = k
    for c in terms.values():
        g = math.gcd(g, c)
    return (g if terms else 1), terms, constant


def divide_common_factor(ctx: Bounds, x: Expr, k: Const) -> Optional[Expr]:
    """(g*a + r)//(g*b) -> (a + r//g)//b for g > 1 dividing every coefficient and k."""
    g, terms, constant = _common_factor(x, k.value)
    if g <= 1 or k.value <= 0 or not _exact(ctx, x):
        return None
    reduced = build_linear({t: c // g for t, c in terms.items()}, constant // g, x.dtype)
    return BinOp("floordiv", reduced, Const(k.value // g, x.dtype))


def modulo_common_factor(ctx: Bounds, x: Expr, k: Const) -> Optional[Expr]:
    """(g*a + r)%(g*b) -> g*((a + r//g)%b) + r%g for g > 1 dividing every coefficient and k."""
    g, terms, constant = _common_factor(x, k.value)
    if g <= 1 or k.value <= 0 or not _exact(ctx, x):
        return None
    reduced = build_linear({t: c // g for t, c in terms.items()}, constant // g, x.dtype)
    inner = BinOp("mod", reduced, Const(k.value // g, x.dtype))
    return build_linear({inner: g}, constant % g, x.dtype)


def nested_floordiv(x: Expr, k1: Const, k2: Const) -> Optional[Expr]:
    """(x//k1)//k2 -> x//(k1*k2) for k1, k2 > 0."""
    product = k1.value * k2.value
    lo, hi = int_range(x.dtype)
    if k1.value <= 0 or k2.value <= 0 or product > hi:
        return None
    return BinOp("floordiv", x, Const(product, x.dtype))


def nested_mod(x: Expr, k1: Const, k2: Const) -> Optional[Expr]:
    """(x%k1)%k2 -> x%k2 when k2 divides k1 (both > 0)."""
    if k1.value <= 0 or k2.value <= 0 or k1.value % k2.value:
        return None
    return BinOp("mod", x, k2)


def quotient_is_zero(ctx: Bounds, x: Expr, k: Const) -> Optional[Expr]:
    """x//k -> 0 when 0 <= x < k."""
    return _zero(x) if ctx.within(x, 0, k.value - 1) else None


def remainder_is_x(ctx: Bounds, x: Expr, k: Const) -> Optional[Expr]:
    """x%k -> x when 0 <= x < k."""
    return x if ctx.within(x, 0, k.value - 1) else None


def decided_min(ctx: Bounds, a: Expr, b: Expr) -> Optional[Expr]:
    """min(a, b) -> a when a <= b everywhere (b when b <= a)."""
    (alo, ahi), (blo, bhi) = ctx(a), ctx(b)
    if ahi <= blo:
        return a
    if bhi <= alo:
        return b
    return None


def decided_max(ctx: Bounds, a: Expr, b: Expr) -> Optional[Expr]:
    """max(a, b) -> a when a >= b everywhere (b when b >= a)."""
    (alo, ahi), (blo, bhi) = ctx(a), ctx(b)
    if alo >= bhi:
        return a
    if blo >= ahi:
        return b
    return None


def decided_comparison(ctx: Bounds, e: Expr) -> Optional[Expr]:
    """a < b (<=, ==, !=) -> true/false when the ranges of a and b decide it."""
    if not (is_int(e.a.dtype) or e.a.dtype == "bool"):
        return None
    lo, hi = ctx(e)
    if lo == hi:
        return Const(bool(lo), "bool")
    return None


# ---------------------------------------------------------------- the rules

RULES: list[Rule] = [
    # ** constant folding **
    Rule("c1 op c2 -> c", Pat.node(BINARY_OPS, C1, C2, name="e"), fold_binary),
    Rule("-c, not c -> c", Pat.node({"neg", "not"}, C, name="e"), fold_unary),
    Rule("cast(c) -> c", Pat.node("cast", C, name="e"), fold_unary),
    Rule("where(true, a, b) -> a", Pat.node("where", Pat.lit(True), A, B), lambda a, b: a),
    Rule("where(false, a, b) -> b", Pat.node("where", Pat.lit(False), A, B), lambda a, b: b),
    # ** self folding **
    Rule("x + 0 -> x  (integers: for floats -0.0 + 0 is 0.0)", XI + 0, lambda x: x),
    Rule("x - 0 -> x", X - 0, lambda x: x),
    Rule("x * 1 -> x", X * 1, lambda x: x),
    Rule("x / 1 -> x", X / 1, lambda x: x),
    Rule("x // 1 -> x  (integers)", XI // 1, lambda x: x),
    Rule("x % 1 -> 0  (integers)", XI % 1, lambda x: _zero(x)),
    Rule("min(x, x) -> x", Pat.node("min", X, X), lambda x: x),
    Rule("max(x, x) -> x", Pat.node("max", X, X), lambda x: x),
    Rule("where(c, x, x) -> x", Pat.node("where", Pat.var("c"), X, X), lambda c, x: x),
    Rule("-(-x) -> x", -(-X), lambda x: x),
    Rule("not not x -> x", Pat.node("not", Pat.node("not", X)), lambda x: x),
    Rule("cast(x) to x's own dtype -> x", Pat.node("cast", X, name="e"),
         lambda e, x: x if x.dtype == e.dtype else None),
    # ** zero folding (integers only: NaN * 0 is NaN) **
    Rule("x * 0 -> 0  (integers)", XI * 0, lambda x: _zero(x)),
    Rule("x - x -> 0  (integers)", XI - XI, lambda x: _zero(x)),
    Rule("x == x -> true, x <= x -> true  (integers, bool)", Pat.node({"eq", "le"}, X, X),
         lambda x: None if not (is_int(x.dtype) or x.dtype == "bool") else _true()),
    Rule("x != x -> false, x < x -> false  (integers, bool)", Pat.node({"ne", "lt"}, X, X),
         lambda x: None if not (is_int(x.dtype) or x.dtype == "bool") else _false()),
    # ** boolean folding **
    Rule("x and true -> x", Pat.node("and", XB, True), lambda x: x),
    Rule("x and false -> false", Pat.node("and", XB, False), lambda x: _false()),
    Rule("x or true -> true", Pat.node("or", XB, True), lambda x: _true()),
    Rule("x or false -> x", Pat.node("or", XB, False), lambda x: x),
    Rule("x and x -> x, x or x -> x", Pat.node({"and", "or"}, X, X), lambda x: x),
    # ** ranges decide (loop variables: x in [0, extent)) **
    Rule("x // k -> 0 if 0 <= x < k", XI // K, quotient_is_zero),
    Rule("x % k -> x if 0 <= x < k", XI % K, remainder_is_x),
    Rule("min(a, b) -> a if a <= b", Pat.node("min", AI, BI), decided_min),
    Rule("max(a, b) -> a if a >= b", Pat.node("max", AI, BI), decided_max),
    Rule("a < b -> true/false if the ranges decide", Pat.node({"lt", "le", "eq", "ne"}, A, B, name="e"),
         decided_comparison),
    # ** division and modulo by a constant **
    Rule("(x // k1) // k2 -> x // (k1*k2)", (XI // K1) // K2, nested_floordiv),
    Rule("(x % k1) % k2 -> x % k2 if k2 divides k1", (XI % K1) % K2, nested_mod),
    Rule("(a*k + b) // k -> a + b//k", XI // K, split_quotient),
    Rule("(a*k + b) % k -> b % k", XI % K, split_remainder),
    Rule("(g*a + r) // (g*b) -> (a + r//g) // b", XI // K, divide_common_factor),
    Rule("(g*a + r) % (g*b) -> g*((a + r//g) % b) + r%g", XI % K, modulo_common_factor),
    # ** canonical affine form **
    Rule("(x//k)*k*m + (x%k)*m -> x*m", Pat.node({"add", "sub"}, A, B, name="e", kind="int"),
         recombine_div_mod),
    Rule("(x//k)*(k*m) + (x%k)*m -> x*m for a run-time k != 0", Pat.node({"add", "sub"}, A, B, name="e", kind="int"),
         recombine_runtime_div_mod),
    Rule("(x//(j*q))*q*m + ((x//j)%q)*m -> (x//j)*m", Pat.node({"add", "sub"}, A, B, name="e", kind="int"),
         recombine_nested_div_mod),
    Rule("((x%k)//j)*j*m + (x%j)*m -> (x%k)*m if j divides k", Pat.node({"add", "sub"}, A, B, name="e", kind="int"),
         recombine_mod_div_mod),
    Rule("sum of c*term + c0, largest coefficient first", Pat.node({"add", "sub", "mul", "neg"}, name="e", kind="int"),
         canonical_sum),
]


_RULES_BY_OP: dict[str, tuple[Rule, ...]] = {}


def rules_for(op: str) -> tuple[Rule, ...]:
    """The rules whose pattern's root can match an expression of `op`, in RULES' order: a node tries only
    these (the simplifier visits hundreds of thousands of nodes when it lowers an image pipeline, and most
    of the rules' roots are one or two ops)."""
    found = _RULES_BY_OP.get(op)
    if found is None:
        found = _RULES_BY_OP[op] = tuple(rule for rule in RULES if rule.pattern.may_match_op(op))
    return found


class _Simplifier:
    """One simplification run: memoized, and safe against rewrite cycles."""

    def __init__(self, ctx: Bounds, trace: Optional[list[str]]):
        self.ctx = ctx
        self.trace = trace
        self.memo: dict[Expr, Expr] = {}
        self.active: set[Expr] = set()

    def visit(self, expr: Expr) -> Expr:
        # Recursive on purpose: an expression is as deep as the chain of graph ops its kernel
        # inlines, which fusion bounds (kernels/grouping.py, MAX_INLINE_DEPTH), unlike a graph.
        found = self.memo.get(expr)
        if found is not None:
            return found
        if expr in self.active:  # a rewrite led back to an expression being simplified: stop
            return expr
        self.active.add(expr)
        node = expr.with_children(tuple(self.visit(c) for c in expr.children))
        result = node
        for rule in rules_for(node.op):
            out = rule.apply(node, self.ctx)
            if out is not None and out != node:
                if self.trace is not None:
                    self.trace.append(rule.identity)
                result = self.visit(out)
                break
        self.active.discard(expr)
        self.memo[expr] = result
        return result


def simplify(expr: Expr, ranges: Mapping[str, tuple[int, int]] | None = None,
             trace: Optional[list[str]] = None) -> Expr:
    """Simplify `expr`; `ranges` gives each loop variable's inclusive (lo, hi).

    When `trace` is a list, the identity of every rule that fired is appended to it.
    """
    return _Simplifier(Bounds(ranges), trace).visit(expr)


def index_step(index: Expr, var: str, env: dict[str, int]) -> int | None:
    """How much `index` grows when `var` grows by one from `env`; with a symbolic size (tensorkiln/shapes)
    in it, the step when it is one constant, else None (unknown: nothing is decided from the hint).
    An index that reads memory (a gather's) has no step known at compile time: None."""
    if any(isinstance(x, Load) for x in walk(index)):
        return None
    if any(isinstance(x, Var) and is_size_var(x.name) for x in walk(index)):
        step = simplify(_substitute_var(index, var, const(1)) - _substitute_var(index, var, const(0)))
        return int(step.value) if isinstance(step, Const) else None
    at = lambda v: evaluate(index, {**env, var: v})  # noqa: E731
    return int(at(1)) - int(at(0))


def _substitute_var(e: Expr, name: str, value: Expr) -> Expr:
    if isinstance(e, Var):
        return value if e.name == name else e
    children = e.children
    return e.with_children(tuple(_substitute_var(c, name, value) for c in children)) if children else e
