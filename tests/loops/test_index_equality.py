"""Index equality over run-time sizes: every `provably_equal` is true on random values, and the
KV-cache write's load and store indices are proven equal."""
from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tensorkiln.loops.expr import Const, Expr, Var, evaluate, maximum
from tensorkiln.loops.index_equality import index_form, loop_extents, provably_equal
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import Block, For, Store

r, c, h = Var("r"), Var("c"), Var("h")
kv, n = Var("s_kv"), Var("s_n")


def _values(extents: dict[str, Expr], rng: random.Random, symbols=("s_kv", "s_n")) -> dict[str, int]:
    """Random symbol values >= 1, then a random value of each loop variable inside its extent."""
    values = {s: rng.choice([1, 2, 3, 7, 13, 64, rng.randint(1, 300)]) for s in symbols}
    for name, extent in extents.items():
        values[name] = rng.randrange(max(int(evaluate(extent, values)), 1))
    return values


def _always_equal(a: Expr, b: Expr, extents: dict[str, Expr], trials: int = 300) -> bool:
    rng = random.Random(0)
    for _ in range(trials):
        values = _values(extents, rng)
        if evaluate(a, values) != evaluate(b, values):
            return False
    return True


def test_the_flattened_kv_cache_index_equals_the_row_index():
    heads, head_dim = 12, 64
    extents = {"r": kv * heads, "c": Const(head_dim)}
    store = r * head_dim + c
    load = (r % kv) * head_dim + c + ((r // kv) % heads) * (kv * head_dim)
    assert provably_equal(load, store, extents)
    assert _always_equal(load, store, extents)


def test_equality_needs_the_loop_bound():
    """With r < 13*kv the head index (r // kv) % 12 wraps: not equal, and not proven."""
    load = (r % kv) * 64 + c + ((r // kv) % 12) * (kv * 64)
    extents = {"r": kv * 13, "c": Const(64)}
    assert not provably_equal(load, r * 64 + c, extents)
    assert not _always_equal(load, r * 64 + c, extents, trials=2000)
    assert not provably_equal(load, r * 64 + c, {})  # r unbounded


def test_products_of_symbols_and_loop_variables():
    extents = {"h": Const(3), "r": kv * n}
    a = h * (kv * n) + (r // n) * n + r % n
    b = r + n * kv * h
    assert provably_equal(a, b, extents) and _always_equal(a, b, extents)
    assert index_form(a, extents) == index_form(b, extents)


def test_nested_quotients_by_run_time_sizes():
    extents = {"r": kv * n * 5}
    a = (r // kv) // n
    b = r // (n * kv)
    assert provably_equal(a, b, extents) and _always_equal(a, b, extents)
    # (r // kv) % n * kv + r % kv == r % (kv*n)
    a, b = (r // kv) % n * kv + r % kv, r % (kv * n)
    assert provably_equal(a, b, extents) and _always_equal(a, b, extents)


def test_a_divisor_that_may_be_zero_proves_nothing():
    x = Var("x")
    assert not provably_equal((r // x) * x + r % x, r, {"r": kv, "x": Const(4)})


def test_loop_extents_leaves_out_a_name_bound_twice():
    buf = Buffer("b", "float32", (100,))
    body = For(r, kv, For(c, 4, Store(buf, r * 4 + c, Const(0.0, "float32"))))
    again = For(r, n, Store(buf, r, Const(1.0, "float32")))
    assert loop_extents(body) == {"r": kv, "c": Const(4)}
    assert loop_extents(Block((body, again))) == {"c": Const(4)}


# ---------------------------------------------------------------- soundness on random indices

LEAVES = [r, c, kv, n, Const(1), Const(2), Const(3), Const(5), Const(12)]
DIVISORS = [kv, n, Const(2), Const(3), kv * 2, kv * n, n + 1]


def _indices(depth: int = 3) -> st.SearchStrategy[Expr]:
    def extend(children):
        pairs = st.tuples(children, children)
        return st.one_of(
            pairs.map(lambda t: t[0] + t[1]),
            pairs.map(lambda t: t[0] - t[1]),
            pairs.map(lambda t: t[0] * t[1]),
            st.tuples(children, st.sampled_from(DIVISORS)).map(lambda t: t[0] // t[1]),
            st.tuples(children, st.sampled_from(DIVISORS)).map(lambda t: t[0] % t[1]),
            pairs.map(lambda t: maximum(t[0], t[1])),
        )
    return st.recursive(st.sampled_from(LEAVES), extend, max_leaves=8)


EXTENTS = {"r": kv * 3, "c": n * 2}


@settings(max_examples=300, deadline=None)
@given(_indices(), _indices())
def test_a_proof_of_equality_is_never_wrong(a, b):
    if provably_equal(a, b, EXTENTS):
        assert _always_equal(a, b, EXTENTS, trials=60)


@settings(max_examples=300, deadline=None)
@given(_indices())
def test_an_index_is_proven_equal_to_its_canonical_rewrites(a):
    """`a` against `a` rearranged (a sum in the other order, a quotient and remainder recombined):
    proven whenever `a` has a form."""
    if index_form(a, EXTENTS) is not None:
        assert provably_equal(a, (a + r) - r, EXTENTS)
        assert provably_equal((a // kv) * kv + a % kv, a, EXTENTS)
        assert provably_equal(a % (kv * 2) // kv * kv + a % kv, a % (kv * 2), EXTENTS)
