"""compute_at's placement rules (loops/placement.py) on loop nests built by hand.

Each refused case is one the order check alone let through: with the placement
rules switched off, the moved kernel computes other numbers than numpy, so the
refusal is needed. Random legal placements still compute numpy's numbers.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import tensorkiln.loops.producers as producers_module
import tensorkiln.loops.schedule as S
from tensorkiln.driver.build import build
from tensorkiln.loops import expr as E
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import Alloc, For, Kernel, Let, Store, block, iter_stmts
from tensorkiln.loops.program import Program
from tensorkiln.loops.schedule import ScheduleError

F32 = "float32"


pytestmark = pytest.mark.usefixtures("kiln_cache")  # conftest.py


def _run(kernel: Kernel, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Compile `kernel` alone and run it: parameters named in `inputs` are its inputs, the others its outputs."""
    ins = tuple(p for p in kernel.params if p.name in inputs)
    outs = tuple(p for p in kernel.params if p.name not in inputs)
    return list(build(Program("placed_" + kernel.name, (kernel,), ins, outs)).run(*(inputs[p.name] for p in ins)))


def _moved_without_placement_rules(kernel: Kernel, buffer: str, loop: str, monkeypatch) -> Kernel:
    """What compute_at made of `kernel` when it checked only the order of the consumer's reads."""
    with monkeypatch.context() as patch:
        patch.setattr(producers_module, "placement_problems", lambda *args: [])
        return S.compute_at(kernel, buffer, loop)


def _vec(name: str, m: int, scope: str = "global") -> Buffer:
    return Buffer(name, F32, (m,), scope=scope)


def rescaled_sum(m: int) -> Kernel:
    """The row-correction pattern: the producer of c also rescales a running sum s, which a later loop then
    updates in place; the consumer reads c and s.  s = c + (a + 1); out = s * c."""
    out, a = _vec("out", m), _vec("a", m)
    c, s, h = _vec("c", m, "local"), _vec("s", m, "local"), _vec("h", m, "local")
    z, p, j, i = E.Var("z"), E.Var("p"), E.Var("j"), E.Var("i")
    body = Alloc(s, Alloc(h, block(
        For(z, m, Store(s, z, E.Const(1.0, F32))),
        Alloc(c, block(
            For(p, m, block(Store(c, p, E.Load(a, p) * 0.5),
                            Store(s, p, E.Load(s, p) * E.Load(c, p)),
                            Store(h, p, E.Load(a, p) + 1.0))),
            For(j, m, Store(s, j, E.Load(s, j) + E.Load(h, j))),
            For(i, m, Store(out, i, E.Load(s, i) * E.Load(c, i))))))))
    return Kernel("rescaled_sum", (out, a), body)


def side_output_read_between(m: int) -> Kernel:
    """The producer of c also writes h, which a loop between it and the consumer reads.
    out = 2a + 3(a + 1)."""
    out, a = _vec("out", m), _vec("a", m)
    c, h, g = _vec("c", m, "local"), _vec("h", m, "local"), _vec("g", m, "local")
    z, p, j, i = E.Var("z"), E.Var("p"), E.Var("j"), E.Var("i")
    body = Alloc(h, Alloc(g, block(
        For(z, m, Store(h, z, E.Const(0.0, F32))),
        Alloc(c, block(
            For(p, m, block(Store(c, p, E.Load(a, p) * 2.0), Store(h, p, E.Load(a, p) + 1.0))),
            For(j, m, Store(g, j, E.Load(h, j) * 3.0)),
            For(i, m, Store(out, i, E.Load(c, i) + E.Load(g, i))))))))
    return Kernel("side_output", (out, a), body)


def input_updated_between(m: int) -> Kernel:
    """The producer reads s, which a loop between it and the consumer updates in place.  out = 2a + (a + 1)."""
    out, a = _vec("out", m), _vec("a", m)
    c, s = _vec("c", m, "local"), _vec("s", m, "local")
    z, p, j, i = E.Var("z"), E.Var("p"), E.Var("j"), E.Var("i")
    body = Alloc(s, block(
        For(z, m, Store(s, z, E.Load(a, z))),
        Alloc(c, block(
            For(p, m, Store(c, p, E.Load(s, p) * 2.0)),
            For(j, m, Store(s, j, E.Load(s, j) + 1.0)),
            For(i, m, Store(out, i, E.Load(c, i) + E.Load(s, i)))))))
    return Kernel("input_updated", (out, a), body)


def input_updated_by_consumer(m: int) -> Kernel:
    """The consumer zeroes the next row of s, which the producer reads.  out = 2a."""
    out, a = _vec("out", m), _vec("a", m)
    c, s = _vec("c", m, "local"), _vec("s", m, "local")
    z, p, i = E.Var("z"), E.Var("p"), E.Var("i")
    body = Alloc(s, block(
        For(z, m, Store(s, z, E.Load(a, z))),
        Alloc(c, block(
            For(p, m, Store(c, p, E.Load(s, p) * 2.0)),
            For(i, m, block(Store(out, i, E.Load(c, i)),
                            Store(s, E.minimum(i + 1, m - 1), E.Const(0.0, F32))))))))
    return Kernel("input_updated_by_consumer", (out, a), body)


def repeated_consumer(m: int, outer_kind: str = "serial") -> Kernel:
    """The consumer loop runs inside a loop of 3 iterations; the producer also accumulates a into acc, read after.
    out[g, i] = 2a[i]; total = a."""
    out, total, a = Buffer("out", F32, (3, m)), _vec("total", m), _vec("a", m)
    c, acc = _vec("c", m, "local"), _vec("acc", m, "local")
    z, p, g, i, w = E.Var("z"), E.Var("p"), E.Var("g"), E.Var("i"), E.Var("w")
    body = Alloc(acc, block(
        For(z, m, Store(acc, z, E.Const(0.0, F32))),
        Alloc(c, block(
            For(p, m, block(Store(c, p, E.Load(a, p) * 2.0), Store(acc, p, E.Load(acc, p) + E.Load(a, p)))),
            For(g, 3, For(i, m, Store(out, g * m + i, E.Load(c, i))), outer_kind),
            For(w, m, Store(total, w, E.Load(acc, w)))))))
    return Kernel("repeated_" + outer_kind, (out, total, a), body)


WRONG_BEFORE = [
    (rescaled_sum, lambda a: [(0.5 * a + a + 1) * 0.5 * a],
     "the producer reads s, which `for j in 0..{m}:` \\(passed over by the move\\) writes"),
    (side_output_read_between, lambda a: [2 * a + 3 * (a + 1)],
     "the producer also writes h, which `for j in 0..{m}:` \\(passed over by the move\\) reads"),
    (input_updated_between, lambda a: [2 * a + a + 1],
     "the producer reads s, which `for j in 0..{m}:` \\(passed over by the move\\) writes"),
    (input_updated_by_consumer, lambda a: [2 * a],
     "the producer reads s, which `for i in 0..{m}:` \\(passed over by the move\\) writes"),
    (repeated_consumer, lambda a: [np.tile(2 * a, (3, 1)), a],
     "loop i runs inside `for g in 0..3:`, so the producer would run as often as it does, and it also "
     "writes acc"),
]


@pytest.mark.parametrize("make, expected, reason", WRONG_BEFORE, ids=[c[0].__name__ for c in WRONG_BEFORE])
@pytest.mark.parametrize("m", [1, 7, 33])
def test_a_placement_that_computed_wrong_numbers_is_refused(make, expected, reason, m, monkeypatch):
    kernel = make(m)
    a = np.random.default_rng(m).uniform(0.5, 1.5, m).astype(np.float32)
    want = expected(a.astype(np.float64))
    for got, w in zip(_run(kernel, {"a": a}), want):  # the kernel as written computes numpy's numbers
        np.testing.assert_allclose(got, w, rtol=1e-5)
    with pytest.raises(ScheduleError, match=f"compute_at of c at loop {'i'}: " + reason.format(m=m)):
        S.compute_at(kernel, "c", "i")
    if m > 1:  # with one row some of these moves happen to keep the numbers
        moved = _moved_without_placement_rules(kernel, "c", "i", monkeypatch)
        got = _run(moved, {"a": a})
        assert not all(np.allclose(g, w, rtol=1e-5) for g, w in zip(got, want)), str(moved)


def test_a_parallel_loop_around_the_consumer_is_refused():
    """Its threads would all write the shared buffer (the same values, but at once)."""
    kernel = repeated_consumer(5, "parallel")
    with pytest.raises(ScheduleError, match="loop g around loop i is parallel: its threads would all write c"):
        S.compute_at(kernel, "c", "i")


def _stencil(m: int, n: int, kind: str) -> Kernel:
    """t = 3a, then out row i = t row i + t row i - 1 (clamped), the consumer's loop of kind `kind`."""
    out, a = Buffer("out", F32, (m, n)), Buffer("a", F32, (m, n))
    t = Buffer("t", F32, (m, n), scope="local")
    p, q, i, j = E.Var("p"), E.Var("q"), E.Var("i"), E.Var("j")
    body = Alloc(t, block(
        For(p, m, For(q, n, Store(t, p * n + q, E.Load(a, p * n + q) * 3.0))),
        For(i, m, For(j, n, Store(out, i * n + j, E.Load(t, i * n + j) + E.Load(t, E.maximum(i - 1, 0) * n + j))),
            kind)))
    return Kernel("stencil_" + kind, (out, a), body)


def test_a_parallel_consumer_reads_only_its_own_iterations_rows():
    S.compute_at(_stencil(6, 5, "serial"), "t", "i")  # earlier rows are done when a serial loop reads them
    with pytest.raises(ScheduleError, match="iteration i reads t\\[.*\\], which other producer iterations write "
                                            "\\(loop i is parallel\\)"):
        S.compute_at(_stencil(6, 5, "parallel"), "t", "i")


def test_a_let_of_the_producer_does_not_hide_one_the_consumer_reads():
    """The producer's `x` moves into the consumer's body, where the consumer reads the x declared around it."""
    m = 6
    out, a = _vec("out", m), _vec("a", m)
    t = _vec("t", m, "local")
    p, i = E.Var("p"), E.Var("i")
    x = E.Var("x", F32)
    producer = For(p, m, block(Let(x, E.Load(a, p) * 2.0), Store(t, p, x)))
    body = block(Let(x, E.Const(10.0, F32)),
                 Alloc(t, block(producer, For(i, m, Store(out, i, E.Load(t, i) + x)))))
    kernel = Kernel("shadow", (out, a), body)
    moved = S.compute_at(kernel, "t", "i")
    lets = [s.var.name for s in iter_stmts(moved.body) if isinstance(s, Let)]
    assert lets[0] == "x" and len(set(lets)) == 2
    a_in = np.random.default_rng(0).uniform(-1, 1, m).astype(np.float32)
    np.testing.assert_allclose(_run(moved, {"a": a_in})[0], a_in * 2 + 10, rtol=1e-6)


def _random_legal_case(rng: random.Random) -> tuple[Kernel, str, list, str]:
    """A producer of t (with, at random, a side output nothing else touches), at random an independent loop
    between it and the consumer, and a consumer reading row i (and, when serial, row i - 1) of t."""
    m, n = rng.choice((1, 2, 7, 13)), rng.choice((1, 3, 17, 33))
    kind = rng.choice(("serial", "parallel", "unrolled" if m <= 16 else "serial"))
    side, between, previous = rng.random() < 0.5, rng.random() < 0.5, kind != "parallel" and rng.random() < 0.5
    out, a = Buffer("out", F32, (m, n)), Buffer("a", F32, (m, n))
    extra = Buffer("extra", F32, (m, n))
    t, u = Buffer("t", F32, (m, n), scope="local"), Buffer("u", F32, (m, n), scope="local")
    p, q, k, i, j = (E.Var(v) for v in "pqkij")
    made = [Store(t, p * n + q, E.call("exp", E.Load(a, p * n + q)) * 2.0)]
    if side:
        made.append(Store(extra, p * n + q, E.Load(a, p * n + q) - 1.0))
    read = E.Load(t, i * n + j)
    if previous:
        read = read + E.Load(t, E.maximum(i - 1, 0) * n + j) * 0.5
    if between:
        read = read + E.Load(u, i * n + j)
    stmts = [For(p, m, For(q, n, block(*made)))]
    if between:
        stmts.append(For(k, m * n, Store(u, k, E.Load(a, k) * E.Load(a, k))))
    stmts.append(For(i, m, For(j, n, Store(out, i * n + j, read)), kind))
    body = Alloc(u, Alloc(t, block(*stmts)))
    params = (out, extra, a) if side else (out, a)
    av = np.random.default_rng(m * 100 + n).uniform(-1, 1, (m, n)).astype(np.float32)
    x = av.astype(np.float64)
    tv = np.exp(x) * 2
    want = tv + (np.concatenate([tv[:1], tv[:-1]]) * 0.5 if previous else 0) + (x * x if between else 0)
    expected = [want, x - 1] if side else [want]
    return Kernel("legal", params, body), kind, [av, expected], f"m={m} n={n} {kind} side={side} " \
        f"between={between} previous={previous}"


def test_random_legal_placements_compute_numpys_numbers():
    rng = random.Random(7)
    for _ in range(8):
        kernel, _, (a, expected), what = _random_legal_case(rng)
        moved = S.compute_at(kernel, "t", "i")
        (consumer,) = [s for s in iter_stmts(moved.body) if isinstance(s, For) and s.var.name == "i"]
        assert any(isinstance(s, Store) and s.buffer.name == "t" for s in iter_stmts(consumer.body)), what
        for got, want in zip(_run(moved, {"a": a}), expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)
