"""The in-place rewrite: stores that keep the input's value are skipped, their test hoisted."""
from __future__ import annotations

from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Const, Load, Var, eq, logical_not, where
from tensorkiln.loops.in_place import skip_unchanged_stores
from tensorkiln.loops.ir import For, If, Kernel, Store
from tensorkiln.loops.program import Program

ROWS, COLS = 4, 8
r, c = Var("r"), Var("c")
old = Buffer("old", "float32", (ROWS * COLS,))
new = Buffer("new", "float32", (ROWS * COLS,))
row = Buffer("row", "float32", (COLS,))
pos = Buffer("pos", "int64", (1,))
AT = r * COLS + c


def _program(value, inner_kind: str = "vectorized") -> Program:
    body = For(r, ROWS, For(c, COLS, Store(new, AT, value), inner_kind), "parallel")
    kernel = Kernel("update", (new, old, row, pos), body)
    return Program("p", (kernel,), inputs=(old, row, pos), outputs=(new,))


def _body(program: Program):
    return program.kernels[0].body


def test_select_of_the_old_value_becomes_a_store_under_a_hoisted_if():
    at_pos = eq(r, Load(pos, Const(0)))
    body = _body(skip_unchanged_stores(_program(where(at_pos, Load(row, c), Load(old, AT))), [("new", "old")]))
    # for r: if r == pos: for c: new[...] = row[c]   (the test left the c loop: it does not use c)
    assert isinstance(body, For) and body.var.name == "r"
    assert isinstance(body.body, If) and body.body.cond == at_pos
    inner = body.body.then
    assert isinstance(inner, For) and inner.var.name == "c" and inner.kind == "vectorized"
    assert inner.body == Store(new, AT, Load(row, c))


def test_the_mirror_select_negates_the_test():
    at_pos = eq(r, Load(pos, Const(0)))
    body = _body(skip_unchanged_stores(_program(where(at_pos, Load(old, AT), Load(row, c))), [("new", "old")]))
    assert body.body.cond == logical_not(at_pos)
    assert body.body.then.body == Store(new, AT, Load(row, c))


def test_a_test_that_depends_on_the_inner_loop_stays_inside_it():
    on_diagonal = eq(c, r)
    body = _body(skip_unchanged_stores(_program(where(on_diagonal, Load(row, c), Load(old, AT))), [("new", "old")]))
    assert isinstance(body.body, For) and body.body.body == If(on_diagonal, Store(new, AT, Load(row, c)))


def test_stores_that_do_not_keep_the_old_value_are_unchanged():
    at_pos = eq(r, Load(pos, Const(0)))
    shifted = Load(old, (AT + 1) % (ROWS * COLS))  # another element of the input: not "unchanged"
    for value in (where(at_pos, Load(row, c), shifted), Load(old, AT) + Load(row, c)):
        program = _program(value)
        assert skip_unchanged_stores(program, [("new", "old")]).kernels[0] is program.kernels[0]
    program = _program(where(at_pos, Load(row, c), Load(old, AT)))
    assert skip_unchanged_stores(program, [("new", "row")]).kernels[0] is program.kernels[0]
