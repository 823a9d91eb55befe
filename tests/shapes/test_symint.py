"""SymInt and ShapeEnv: symbolic arithmetic, guards on every conversion, decisions from the bounds."""
from __future__ import annotations

import operator

from hypothesis import given, settings
from hypothesis import strategies as st

from tensorkiln.shapes import ShapeEnv, SymInt, prod, sym_max, sym_min
from tensorkiln.shapes.poly import Poly


def _symbol(hint: int = 7, name: str = "seq", env: ShapeEnv | None = None) -> SymInt:
    env = env or ShapeEnv()
    return env.symbol(name, hint, ("x", 0, 0))


def test_arithmetic_stays_symbolic_and_text_never_shows_the_hint():
    s = _symbol(7)
    t = (s * 64 + 3 - 3) // 64
    assert t.same_as(s) and str(t) == "seq"
    assert str(4 * s * 2) == "8*seq" and repr(s + 1) == "seq + 1" and f"{s * 3}" == "3*seq"
    assert "7" not in str(s * 5 + s) and str(s * 5 + s) == "6*seq"
    assert s - s == 0 and isinstance(s - s, int)
    assert prod([s, 4, s]).same_as(s * s * 4) and (s * 6) % 3 == 0
    assert hash(s * 2) == hash(2 * s)
    assert sym_min(s, 1) == 1 and sym_max(s, 1).same_as(s)  # decided by the bound s >= 2
    assert not s.env.guards


def test_every_conversion_records_a_guard():
    s = _symbol(7)
    env = s.env
    assert int(s) == 7 and [g.text for g in env.guards] == ["seq == 7"]
    u = _symbol(5, "batch")
    assert (u * 64 <= 4096) is True and u.env.guards[-1].text == "64*batch <= 4096"
    assert float(_symbol(3).env.symbol("n", 3, ("y", 1, 0))) == 3.0
    v = _symbol(9, "v")
    assert list(range(v)) == list(range(9)) and v.env.guards[-1].text == "v == 9"
    w = _symbol(4, "w")
    assert (w > 10) is False and w.env.guards[-1].text == "w <= 10"


def test_decisions_the_bounds_make_record_no_guard():
    s = _symbol(3)
    assert s >= 2 and s != 0 and s != 1 and bool(s) and s == s and s * 2 > s and max(s, 1).same_as(s)
    assert not s.env.guards


def test_a_guard_pins_the_symbol_for_later_questions():
    s = _symbol(7)
    int(s)
    assert s == 7 and s < 8 and len(s.env.guards) == 1 and s.env.specialized() == {"seq": 7}


def test_guards_are_checked_against_new_values():
    s = _symbol(12)
    assert (s > 8) is True
    env = s.env
    assert env.check({"seq": 30}) and not env.check({"seq": 8})


# ---- polynomials: every operation agrees with integer arithmetic at random values -----------------
OPS = [operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod]


@settings(max_examples=150, deadline=None)
@given(data=st.data(), values=st.fixed_dictionaries({"a": st.integers(2, 50), "b": st.integers(2, 50)}))
def test_polynomials_evaluate_like_integers(data, values):
    env = ShapeEnv()
    env.symbol("a", 2, ("x", 0, 0))
    env.symbol("b", 2, ("x", 0, 1))
    ops = data.draw(st.lists(st.tuples(st.sampled_from(OPS), st.integers(1, 9)), max_size=6))
    sym: object = env.symbol("a", 2, ("x", 0, 0))
    concrete = values["a"]
    for op, k in ops:
        operand, value = (env.symbol("b", 2, ("x", 0, 1)), values["b"]) if k % 3 == 0 and op not in (
            operator.floordiv, operator.mod) else (k, k)
        sym, concrete = op(sym, operand), op(concrete, value)
    got = sym.poly.evaluate(values) if isinstance(sym, SymInt) else sym
    assert got == concrete
    assert not env.guards  # arithmetic never asks for a concrete value


def test_opaque_atoms_evaluate_with_floor_semantics():
    env = ShapeEnv()
    s = env.symbol("s", 5, ("x", 0, 0))
    t = env.symbol("t", 3, ("x", 0, 1))
    for expr, check in [(s // t, lambda v: v["s"] // v["t"]), (s % t, lambda v: v["s"] % v["t"]),
                        (-(-s // 4), lambda v: -(-v["s"] // 4)), (sym_min(s, t) + 1, lambda v: min(v["s"], v["t"]) + 1)]:
        for values in ({"s": 7, "t": 3}, {"s": 2, "t": 9}, {"s": 40, "t": 6}):
            assert expr.poly.evaluate(values) == check(values)
    assert Poly.constant(0).is_constant
