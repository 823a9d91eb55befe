"""Every simplifier rule, checked by a machine: simplified == original on random inputs.

For each rule in RULES there is a generator of expressions of the rule's
shape (SHAPES, keyed by the rule's identity: a new rule without a shape fails
`test_every_rule_has_a_shape`). Hypothesis draws expressions and variable
values inside the loop ranges; the simplified expression must evaluate to the
same value, and the rule must actually fire on some of its shapes.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tensorkiln.loops.expr import (
    BinOp, Cast, Const, Expr, Select, Unary, Var, eq, evaluate, free_vars, le, logical_and, logical_not,
    logical_or, lt, maximum, minimum, ne, where,
)
from tensorkiln.loops.simplify import RULES, build_linear, linear_form, simplify
from tensorkiln.loops.types import int_range

RANGES = {"i": (0, 7), "j": (0, 15), "k": (0, 63), "n": (-20, 20)}
INT_VARS = [Var(name) for name in RANGES]
FLOAT_VARS = [Var("x", "float32"), Var("y", "float32")]
BOOL_VARS = [Var("p", "bool"), Var("q", "bool")]
FLOAT_VALUES = [0.0, -0.0, 1.5, -2.25, 3.0, float("inf"), float("-inf"), float("nan"), 1e-30, 7.0]


# ---------------------------------------------------------------- expression strategies


def small_consts(lo: int = -12, hi: int = 70) -> st.SearchStrategy[Expr]:
    return st.integers(lo, hi).map(Const)


def divisors() -> st.SearchStrategy[int]:
    return st.integers(-6, 24).filter(lambda v: v != 0)


def int_exprs(max_leaves: int = 10) -> st.SearchStrategy[Expr]:
    leaves = st.one_of(st.sampled_from(INT_VARS), small_consts())

    def extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        pairs = st.tuples(children, children)
        return st.one_of(
            pairs.map(lambda t: t[0] + t[1]),
            pairs.map(lambda t: t[0] - t[1]),
            st.tuples(children, st.integers(-9, 9)).map(lambda t: t[0] * t[1]),
            pairs.map(lambda t: t[0] * t[1]),
            st.tuples(children, divisors()).map(lambda t: t[0] // t[1]),
            st.tuples(children, divisors()).map(lambda t: t[0] % t[1]),
            pairs.map(lambda t: minimum(t[0], t[1])),
            pairs.map(lambda t: maximum(t[0], t[1])),
            children.map(lambda a: -a),
            st.tuples(children, children, children).map(lambda t: where(lt(t[0], t[1]), t[2], t[0])),
        )

    return st.recursive(leaves, extend, max_leaves=max_leaves)


def float_exprs() -> st.SearchStrategy[Expr]:
    leaves = st.one_of(st.sampled_from(FLOAT_VARS), st.sampled_from(FLOAT_VALUES).map(lambda v: Const(v, "float32")))

    def extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        pairs = st.tuples(children, children)
        return st.one_of(
            pairs.map(lambda t: t[0] + t[1]), pairs.map(lambda t: t[0] * t[1]),
            pairs.map(lambda t: t[0] - t[1]), pairs.map(lambda t: t[0] / t[1]),
            pairs.map(lambda t: minimum(t[0], t[1])), children.map(lambda a: -a),
        )

    return st.recursive(leaves, extend, max_leaves=6)


def bool_exprs() -> st.SearchStrategy[Expr]:
    comparisons = st.tuples(st.sampled_from([lt, le, eq, ne]), int_exprs(4), int_exprs(4)).map(
        lambda t: t[0](t[1], t[2]))
    leaves = st.one_of(st.sampled_from(BOOL_VARS), st.booleans().map(lambda b: Const(b, "bool")), comparisons)

    def extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        pairs = st.tuples(children, children)
        return st.one_of(pairs.map(lambda t: logical_and(*t)), pairs.map(lambda t: logical_or(*t)),
                         children.map(logical_not))

    return st.recursive(leaves, extend, max_leaves=5)


def any_exprs() -> st.SearchStrategy[Expr]:
    return st.one_of(int_exprs(), float_exprs(), bool_exprs())


def linear_combos() -> st.SearchStrategy[Expr]:
    """a*c1 + b*c2 + c0 with small terms: the shape division rules act on."""
    terms = st.lists(st.tuples(st.one_of(st.sampled_from(INT_VARS), int_exprs(3)), st.integers(-24, 48)),
                     min_size=1, max_size=3)
    return st.tuples(terms, st.integers(-30, 60)).map(
        lambda t: sum((term * c for term, c in t[0]), Const(t[1])))


def scaled_combos() -> st.SearchStrategy[tuple[Expr, int]]:
    """(g*a + g*b*c + r, g*m): every coefficient shares the factor g with the divisor."""
    def make(t):
        g, (a, ca), (b, cb), r, m = t
        return (a * (g * ca) + b * (g * cb) + r, g * m)

    term = st.tuples(st.sampled_from(INT_VARS), st.integers(-5, 9))
    return st.tuples(st.integers(2, 8), term, term, st.integers(-20, 40), st.integers(1, 6)).map(make)


K_POS = st.integers(1, 40)


SHAPES: dict[str, st.SearchStrategy[Expr]] = {
    "c1 op c2 -> c": st.one_of(
        st.tuples(st.sampled_from(["add", "sub", "mul", "min", "max", "lt", "le", "eq", "ne"]),
                  st.integers(-100, 100), st.integers(-100, 100)).map(lambda t: BinOp(t[0], Const(t[1]), Const(t[2]))),
        st.tuples(st.sampled_from(["floordiv", "mod"]), st.integers(-100, 100), divisors()).map(
            lambda t: BinOp(t[0], Const(t[1]), Const(t[2]))),
        st.tuples(st.sampled_from(["add", "sub", "mul", "div", "min", "max", "floordiv", "mod", "lt", "eq"]),
                  st.sampled_from(FLOAT_VALUES), st.sampled_from(FLOAT_VALUES)).map(
            lambda t: BinOp(t[0], Const(t[1], "float32"), Const(t[2], "float32"))),
        st.tuples(st.sampled_from(["and", "or", "eq", "ne"]), st.booleans(), st.booleans()).map(
            lambda t: BinOp(t[0], Const(t[1], "bool"), Const(t[2], "bool"))),
    ),
    "-c, not c -> c": st.one_of(
        st.integers(-100, 100).map(lambda v: -Const(v)),
        st.sampled_from(FLOAT_VALUES).map(lambda v: -Const(v, "float32")),
        st.booleans().map(lambda b: logical_not(Const(b, "bool"))),
    ),
    "cast(c) -> c": st.one_of(
        st.tuples(st.integers(-300, 300), st.sampled_from(["float32", "float64", "uint8", "int8", "int16", "int32",
                                                           "bool"])).map(
            lambda t: Cast(Const(t[0]), t[1])),
        st.tuples(st.floats(-1000, 1000), st.sampled_from(["int32", "int64", "float64", "bool"])).map(
            lambda t: Cast(Const(t[0], "float32"), t[1])),
    ),
    "where(true, a, b) -> a": st.tuples(int_exprs(), int_exprs()).map(
        lambda t: Select(Const(True, "bool"), t[0], t[1])),
    "where(false, a, b) -> b": st.tuples(int_exprs(), int_exprs()).map(
        lambda t: Select(Const(False, "bool"), t[0], t[1])),
    "x + 0 -> x  (integers: for floats -0.0 + 0 is 0.0)": st.one_of(
        int_exprs().map(lambda x: x + 0), int_exprs().map(lambda x: 0 + x), float_exprs().map(lambda x: x + 0.0)),
    "x - 0 -> x": st.one_of(int_exprs().map(lambda x: x - 0), float_exprs().map(lambda x: x - 0.0)),
    "x * 1 -> x": st.one_of(int_exprs().map(lambda x: x * 1), float_exprs().map(lambda x: 1.0 * x)),
    "x / 1 -> x": float_exprs().map(lambda x: x / 1.0),
    "x // 1 -> x  (integers)": int_exprs().map(lambda x: x // 1),
    "x % 1 -> 0  (integers)": int_exprs().map(lambda x: x % 1),
    "min(x, x) -> x": st.one_of(int_exprs().map(lambda x: minimum(x, x)), float_exprs().map(lambda x: minimum(x, x))),
    "max(x, x) -> x": st.one_of(int_exprs().map(lambda x: maximum(x, x)), float_exprs().map(lambda x: maximum(x, x))),
    "where(c, x, x) -> x": st.tuples(bool_exprs(), st.one_of(int_exprs(), float_exprs())).map(
        lambda t: Select(t[0], t[1], t[1])),
    "-(-x) -> x": st.one_of(int_exprs(), float_exprs()).map(lambda x: Unary("neg", Unary("neg", x))),
    "not not x -> x": bool_exprs().map(lambda x: logical_not(logical_not(x))),
    "cast(x) to x's own dtype -> x": st.one_of(int_exprs().map(lambda x: Cast(x, "int64")),
                                               float_exprs().map(lambda x: Cast(x, "float32"))),
    "x * 0 -> 0  (integers)": int_exprs().map(lambda x: x * 0),
    "x - x -> 0  (integers)": int_exprs().map(lambda x: x - x),
    "x == x -> true, x <= x -> true  (integers, bool)": st.one_of(
        int_exprs().map(lambda x: eq(x, x)), int_exprs().map(lambda x: le(x, x)),
        float_exprs().map(lambda x: le(x, x))),
    "x != x -> false, x < x -> false  (integers, bool)": st.one_of(
        int_exprs().map(lambda x: ne(x, x)), int_exprs().map(lambda x: lt(x, x)),
        float_exprs().map(lambda x: ne(x, x))),
    "x and true -> x": bool_exprs().map(lambda x: logical_and(x, Const(True, "bool"))),
    "x and false -> false": bool_exprs().map(lambda x: logical_and(Const(False, "bool"), x)),
    "x or true -> true": bool_exprs().map(lambda x: logical_or(x, Const(True, "bool"))),
    "x or false -> x": bool_exprs().map(lambda x: logical_or(x, Const(False, "bool"))),
    "x and x -> x, x or x -> x": bool_exprs().flatmap(
        lambda x: st.sampled_from([logical_and(x, x), logical_or(x, x)])),
    "x // k -> 0 if 0 <= x < k": st.tuples(st.one_of(st.sampled_from(INT_VARS), int_exprs(4)), K_POS).map(
        lambda t: t[0] // t[1]),
    "x % k -> x if 0 <= x < k": st.tuples(st.one_of(st.sampled_from(INT_VARS), int_exprs(4)), K_POS).map(
        lambda t: t[0] % t[1]),
    "min(a, b) -> a if a <= b": st.tuples(int_exprs(4), int_exprs(4)).map(lambda t: minimum(*t)),
    "max(a, b) -> a if a >= b": st.tuples(int_exprs(4), int_exprs(4)).map(lambda t: maximum(*t)),
    "a < b -> true/false if the ranges decide": st.tuples(
        st.sampled_from([lt, le, eq, ne]), int_exprs(4), int_exprs(4)).map(lambda t: t[0](t[1], t[2])),
    "(x // k1) // k2 -> x // (k1*k2)": st.tuples(int_exprs(6), divisors(), divisors()).map(
        lambda t: (t[0] // t[1]) // t[2]),
    "(x % k1) % k2 -> x % k2 if k2 divides k1": st.one_of(
        st.tuples(int_exprs(6), st.integers(1, 8), st.integers(1, 6)).map(lambda t: (t[0] % (t[1] * t[2])) % t[2]),
        st.tuples(int_exprs(6), divisors(), divisors()).map(lambda t: (t[0] % t[1]) % t[2])),
    "(a*k + b) // k -> a + b//k": st.tuples(linear_combos(), st.integers(2, 16)).map(lambda t: t[0] // t[1]),
    "(a*k + b) % k -> b % k": st.tuples(linear_combos(), st.integers(2, 16)).map(lambda t: t[0] % t[1]),
    "(g*a + r) // (g*b) -> (a + r//g) // b": scaled_combos().map(lambda t: t[0] // t[1]),
    "(g*a + r) % (g*b) -> g*((a + r//g) % b) + r%g": scaled_combos().map(lambda t: t[0] % t[1]),
    "(x//k)*k*m + (x%k)*m -> x*m": st.tuples(int_exprs(5), st.integers(1, 12), st.integers(-4, 5), int_exprs(3)).map(
        lambda t: (t[0] // t[1]) * (t[1] * t[2]) + t[3] + (t[0] % t[1]) * t[2]),
    "(x//k)*(k*m) + (x%k)*m -> x*m for a run-time k != 0": st.tuples(
        int_exprs(5), st.sampled_from([INT_VARS[0] + 1, INT_VARS[1] + 2, INT_VARS[3] * INT_VARS[3] + 1, INT_VARS[0]]), st.integers(-4, 5), int_exprs(3)).map(
        lambda t: (t[0] // t[1]) * (t[1] * t[2]) + t[3] + (t[0] % t[1]) * t[2]),
    "(x//(j*q))*q*m + ((x//j)%q)*m -> (x//j)*m": st.tuples(
        int_exprs(5), st.integers(1, 8), st.integers(1, 8), st.integers(-4, 5), int_exprs(3)).map(
        lambda t: (t[0] // (t[1] * t[2])) * (t[2] * t[3]) + t[4] + ((t[0] // t[1]) % t[2]) * t[3]),
    "((x%k)//j)*j*m + (x%j)*m -> (x%k)*m if j divides k": st.tuples(
        int_exprs(5), st.integers(1, 8), st.integers(1, 8), st.integers(-4, 5), int_exprs(3)).map(
        lambda t: (t[0] % (t[1] * t[2])) // t[1] * (t[1] * t[3]) + t[4] + (t[0] % t[1]) * t[3]),
    "sum of c*term + c0, largest coefficient first": st.one_of(linear_combos(), int_exprs()),
}


# One expression per rule on which it must fire: run first by every rule's test (hypothesis @example),
# so "the rule fired" is certain and the random shapes only add coverage.
i, j, k, n = INT_VARS
x, y = FLOAT_VARS
p, q = BOOL_VARS
FIRES: dict[str, Expr] = {
    "c1 op c2 -> c": Const(7) // Const(-2),
    "-c, not c -> c": -Const(3),
    "cast(c) -> c": Cast(Const(300), "int8"),
    "where(true, a, b) -> a": Select(Const(True, "bool"), i, j),
    "where(false, a, b) -> b": Select(Const(False, "bool"), i, j),
    "x + 0 -> x  (integers: for floats -0.0 + 0 is 0.0)": minimum(i, n) + 0,
    "x - 0 -> x": x - 0.0,
    "x * 1 -> x": x * 1.0,
    "x / 1 -> x": x / 1.0,
    "x // 1 -> x  (integers)": minimum(i, n) // 1,
    "x % 1 -> 0  (integers)": n % 1,
    "min(x, x) -> x": minimum(x, x),
    "max(x, x) -> x": maximum(x, x),
    "where(c, x, x) -> x": Select(p, x, x),
    "-(-x) -> x": Unary("neg", Unary("neg", x)),
    "not not x -> x": logical_not(logical_not(p)),
    "cast(x) to x's own dtype -> x": Cast(n, "int64"),
    "x * 0 -> 0  (integers)": minimum(i, n) * 0,
    "x - x -> 0  (integers)": minimum(i, n) - minimum(i, n),
    "x == x -> true, x <= x -> true  (integers, bool)": eq(n, n),
    "x != x -> false, x < x -> false  (integers, bool)": lt(n, n),
    "x and true -> x": logical_and(p, Const(True, "bool")),
    "x and false -> false": logical_and(p, Const(False, "bool")),
    "x or true -> true": logical_or(p, Const(True, "bool")),
    "x or false -> x": logical_or(p, Const(False, "bool")),
    "x and x -> x, x or x -> x": logical_and(p, p),
    "x // k -> 0 if 0 <= x < k": j // 16,
    "x % k -> x if 0 <= x < k": j % 16,
    "min(a, b) -> a if a <= b": minimum(i, j + 7),
    "max(a, b) -> a if a >= b": maximum(k + 8, i),
    "a < b -> true/false if the ranges decide": lt(i, Const(8)),
    "(x // k1) // k2 -> x // (k1*k2)": (n // 3) // 4,
    "(x % k1) % k2 -> x % k2 if k2 divides k1": (n % 12) % 4,
    "(a*k + b) // k -> a + b//k": (n * 8 + j) // 8,
    "(a*k + b) % k -> b % k": (n * 8 + j) % 8,
    "(g*a + r) // (g*b) -> (a + r//g) // b": (n * 4 + 2) // 8,
    "(g*a + r) % (g*b) -> g*((a + r//g) % b) + r%g": (n * 4 + 2) % 8,
    "(x//k)*k*m + (x%k)*m -> x*m": (n // 4) * 4 + n % 4,
    "(x//k)*(k*m) + (x%k)*m -> x*m for a run-time k != 0": (n // (i + 1)) * ((i + 1) * 48) + n % (i + 1) * 48,
    "(x//(j*q))*q*m + ((x//j)%q)*m -> (x//j)*m": (n // 12) * 12 + (n // 3) % 4 * 3,
    "((x%k)//j)*j*m + (x%j)*m -> (x%k)*m if j divides k": (n % 12) // 3 * 3 + n % 3,
    "sum of c*term + c0, largest coefficient first": j + i * 3 - 2,
}


# ---------------------------------------------------------------- checking values


def environments() -> st.SearchStrategy[dict]:
    ints = {name: st.integers(lo, hi) for name, (lo, hi) in RANGES.items()}
    floats = {v.name: st.sampled_from(FLOAT_VALUES) for v in FLOAT_VARS}
    bools = {v.name: st.booleans() for v in BOOL_VARS}
    return st.fixed_dictionaries({**ints, **floats, **bools})


def same(a, b) -> bool:
    """Equal values, with NaN equal to NaN and -0.0 distinct from 0.0."""
    if isinstance(a, float) or isinstance(b, float):
        a, b = float(a), float(b)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b


CORNERS = [
    {**{name: lo for name, (lo, hi) in RANGES.items()}, "x": 0.0, "y": -0.0, "p": False, "q": False},
    {**{name: hi for name, (lo, hi) in RANGES.items()}, "x": float("nan"), "y": 1.5, "p": True, "q": True},
]


def check_same_values(original: Expr, simplified: Expr, envs: list[dict]) -> None:
    assert simplified.dtype == original.dtype
    assert free_vars(simplified) <= free_vars(original)
    for env in envs + CORNERS:
        want, got = evaluate(original, env), evaluate(simplified, env)
        assert same(want, got), f"{original}  ->  {simplified}\n  at {env}: {want} != {got}"


def test_every_rule_has_a_shape_and_an_example():
    missing = [rule.identity for rule in RULES if rule.identity not in SHAPES or rule.identity not in FIRES]
    assert not missing, f"rules without a test shape or example: {missing}"


@pytest.mark.parametrize("rule", RULES, ids=[r.identity for r in RULES])
def test_rule_preserves_value(rule):
    fired = []

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(expr=SHAPES[rule.identity], envs=st.lists(environments(), min_size=4, max_size=4))
    @example(expr=FIRES[rule.identity], envs=[])
    def check(expr, envs):
        trace: list[str] = []
        simplified = simplify(expr, RANGES, trace)
        if rule.identity in trace:
            fired.append(expr)
        check_same_values(expr, simplified, envs)

    check()
    assert fired, f"rule {rule.identity!r} did not fire on its example"


@settings(max_examples=200, deadline=None)
@given(expr=any_exprs(), envs=st.lists(environments(), min_size=6, max_size=6))
def test_random_expressions_keep_their_value(expr, envs):
    check_same_values(expr, simplify(expr, RANGES), envs)


def small_int_exprs(dtype: str) -> st.SearchStrategy[Expr]:
    """Expressions over variables of a narrow integer type that range over the whole type (they wrap)."""
    lo, hi = int_range(dtype)
    leaves = st.one_of(st.sampled_from([Var("a", dtype), Var("b", dtype)]), st.integers(lo, hi).map(
        lambda v: Const(v, dtype)))
    nonzero = st.integers(lo, hi).filter(lambda v: v != 0).map(lambda v: Const(v, dtype))

    def extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        pairs = st.tuples(children, children)
        return st.one_of(
            pairs.map(lambda t: t[0] + t[1]), pairs.map(lambda t: t[0] - t[1]), pairs.map(lambda t: t[0] * t[1]),
            st.tuples(children, nonzero).map(lambda t: t[0] // t[1]),
            st.tuples(children, nonzero).map(lambda t: t[0] % t[1]),
            pairs.map(lambda t: minimum(t[0], t[1])), pairs.map(lambda t: maximum(t[0], t[1])),
            children.map(lambda a: -a),
            st.tuples(children, children, children).map(lambda t: where(lt(t[0], t[1]), t[2], t[0])),
        )

    return st.recursive(leaves, extend, max_leaves=8)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16"])
def test_small_integer_expressions_keep_their_value(dtype):
    lo, hi = int_range(dtype)

    @settings(max_examples=150, deadline=None)
    @given(expr=small_int_exprs(dtype), values=st.lists(st.tuples(st.integers(lo, hi), st.integers(lo, hi)),
                                                        min_size=4, max_size=4))
    def check(expr, values):
        simplified = simplify(expr, RANGES)
        assert simplified.dtype == dtype
        for a, b in values + [(lo, hi), (hi, lo), (0, 1)]:
            want, got = evaluate(expr, {"a": a, "b": b}), evaluate(simplified, {"a": a, "b": b})
            assert want == got, f"{expr}  ->  {simplified}\n  at a={a}, b={b}: {want} != {got}"

    check()


def test_unsigned_sums_keep_subtraction():
    a, b = Var("a", "uint8"), Var("b", "uint8")
    assert str(simplify(a - b)) == "a - b"  # not a + b*255: equal modulo 256, but slower and unreadable
    assert str(simplify(a - Const(3, "uint8"))) == "a - 3"


@settings(max_examples=200, deadline=None)
@given(expr=int_exprs())
def test_simplify_is_idempotent(expr):
    once = simplify(expr, RANGES)
    assert simplify(once, RANGES) == once


@settings(max_examples=200, deadline=None)
@given(expr=linear_combos())
def test_linear_form_round_trips(expr):
    terms, constant = linear_form(expr)
    rebuilt = build_linear(terms, constant, "int64")
    assert linear_form(rebuilt) == ({t: c for t, c in terms.items() if c}, constant)


# ---------------------------------------------------------------- the forms a reader relies on


@pytest.mark.parametrize("expr, expected", [
    ((i * 16 + j) // 16, "i"),
    ((i * 16 + j) % 16, "j"),
    ((i * 16 + j) // 16 * 16 + (i * 16 + j) % 16, "i*16 + j"),
    (((k // 8) * 8 + k % 8) * 4, "k*4"),
    (j * 2 + i * 64 + 3 - j, "i*64 + j + 3"),
    ((i * 64 + j * 4 + k // 16) // 4, "i*16 + j"),
    ((k * 4 + 2) // 8, "k//2"),
    ((k // 4) // 2, "k//8"),
    (minimum(j, 16), "j"),
    (maximum(i - 8, 0), "0"),
    (lt(k, 64), "true"),
    (n // 4 * 4 + n % 4, "n"),
    (k // 16 * 128 + k // 2 % 8 * 16 + k % 2 * 8, "k*8"),  # a row index delinearized over three axes
    (k // 8 * 64 + k % 8 // 2 * 16 + k % 2 * 8, "k*8"),
    (-(i - j) * 2, "j*2 - i*2"),
])
def test_canonical_forms(expr, expected):
    assert str(simplify(expr, RANGES)) == expected


def test_division_by_a_negative_constant_is_left_alone():
    assert str(simplify((i * 4 + j) // -4, RANGES)) == "(i*4 + j)//-4"


def test_unbounded_variables_block_range_rules():
    m = Var("m")  # no range: could be anything
    assert str(simplify(m % 8, RANGES)) == "m%8"
    assert str(simplify((m * 8 + 3) // 8, RANGES)) == "(m*8 + 3)//8"


def test_trace_names_the_rules_that_fired():
    trace: list[str] = []
    simplify((i * 8 + j) // 8, {"i": (0, 3), "j": (0, 7)}, trace)
    assert "(a*k + b) // k -> a + b//k" in trace
    assert "x // k -> 0 if 0 <= x < k" in trace
