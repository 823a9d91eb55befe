"""Schedule primitives: each keeps the computed values (compiled before/after on random data), illegal ones are refused.

Shapes are not multiples of any factor (1, 7, 33, 127), so every tail runs.
Each case compiles one program holding the kernel before and after the
schedule, writing two different outputs.
"""
from __future__ import annotations

import doctest

import numpy as np
import pytest

import tensorkiln.loops.schedule as S
import tensorkiln.loops.tensorize as tensorize_module
import tensorkiln.loops.producers as producers_module
from tensorkiln.driver.build import build
from tensorkiln.loops import expr as E
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import Alloc, Assign, For, Kernel, Let, Store, block
from tensorkiln.loops.program import Program
from tensorkiln.loops.schedule import Schedule, ScheduleError, Step

F32 = "float32"


pytestmark = pytest.mark.usefixtures("kiln_cache")  # conftest.py


def test_doctests():
    """The before/after IR in every primitive's docstring is what the primitive produces."""
    result = doctest.testmod(S, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 10 and result.failed == 0
    result = doctest.testmod(tensorize_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
    result = doctest.testmod(producers_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 3 and result.failed == 0


# ---- kernels, parameterized by the name of their output (two copies go into one program)


def elementwise(m: int, n: int, out_name: str) -> Kernel:
    out, a, b = Buffer(out_name, F32, (m, n)), Buffer("a", F32, (m, n)), Buffer("b", F32, (n,))
    i, j = E.Var("i"), E.Var("j")
    body = For(i, m, For(j, n, Store(out, i * n + j, E.Load(a, i * n + j) * 2.0 + E.Load(b, j))))
    return Kernel("ew_" + out_name, (out, a, b), body)


def matmul(m: int, n: int, k: int, out_name: str) -> Kernel:
    """out[i, j] accumulates in the output buffer: the k loop is a reduction axis."""
    out, a, b = Buffer(out_name, F32, (m, n)), Buffer("a", F32, (m, k)), Buffer("b", F32, (k, n))
    i, j, kk = E.Var("i"), E.Var("j"), E.Var("k")
    body = For(i, m, For(j, n, block(
        Store(out, i * n + j, E.Const(0.0, F32)),
        For(kk, k, Store(out, i * n + j, E.Load(out, i * n + j) + E.Load(a, i * k + kk) * E.Load(b, kk * n + j))))))
    return Kernel("mm_" + out_name, (out, a, b), body)


def rowsum(m: int, n: int, out_name: str) -> Kernel:
    out, a = Buffer(out_name, F32, (m,)), Buffer("a", F32, (m, n))
    i, j, acc = E.Var("i"), E.Var("j"), E.Var("acc", F32)
    body = For(i, m, block(Let(acc, E.Const(0.0, F32)), For(j, n, Assign(acc, acc + E.Load(a, i * n + j))),
                           Store(out, i, acc)))
    return Kernel("rs_" + out_name, (out, a), body)


def rowmax(m: int, n: int, out_name: str) -> Kernel:
    out, a = Buffer(out_name, F32, (m,)), Buffer("a", F32, (m, n))
    i, j, acc = E.Var("i"), E.Var("j"), E.Var("acc", F32)
    body = For(i, m, block(Let(acc, E.Const(-np.inf, F32)),
                           For(j, n, Assign(acc, E.maximum(acc, E.Load(a, i * n + j)))), Store(out, i, acc)))
    return Kernel("rm_" + out_name, (out, a), body)


def producer(m: int, n: int, out_name: str) -> Kernel:
    """t = exp(a) in a local buffer, then out[i, j] = t[i, j] + t[i, max(j - 1, 0)] (a sliding window)."""
    out, a = Buffer(out_name, F32, (m, n)), Buffer("a", F32, (m, n))
    t = Buffer("t", F32, (m, n), scope="local")
    p, q, i, j = E.Var("p"), E.Var("q"), E.Var("i"), E.Var("j")
    body = Alloc(t, block(
        For(p, m, For(q, n, Store(t, p * n + q, E.call("exp", E.Load(a, p * n + q))))),
        For(i, m, For(j, n, Store(out, i * n + j, E.Load(t, i * n + j) + E.Load(t, i * n + E.maximum(j - 1, 0)))))))
    return Kernel("pc_" + out_name, (out, a), body)


def stencil_rows(m: int, n: int, out_name: str) -> Kernel:
    """Consumer row i reads producer rows i and i - 1: compute_at is legal (earlier rows are done)."""
    out, a = Buffer(out_name, F32, (m, n)), Buffer("a", F32, (m, n))
    t = Buffer("t", F32, (m, n), scope="local")
    p, q, i, j = E.Var("p"), E.Var("q"), E.Var("i"), E.Var("j")
    body = Alloc(t, block(
        For(p, m, For(q, n, Store(t, p * n + q, E.Load(a, p * n + q) * 3.0))),
        For(i, m, For(j, n, Store(out, i * n + j, E.Load(t, i * n + j) + E.Load(t, E.maximum(i - 1, 0) * n + j))))))
    return Kernel("st_" + out_name, (out, a), body)


def packed_gemm(kc: int, mr: int, nr: int, out_name: str) -> Kernel:
    c, ap, bp = Buffer(out_name, F32, (mr, nr)), Buffer("ap", F32, (kc, mr)), Buffer("bp", F32, (kc, nr))
    p, i, j, q = E.Var("p"), E.Var("i"), E.Var("j"), E.Var("q")
    body = block(For(q, mr * nr, Store(c, q, E.Const(0.0, F32))),
                 For(p, kc, For(i, mr, For(j, nr, Store(c, i * nr + j, E.Load(c, i * nr + j)
                                                        + E.Load(ap, p * mr + i) * E.Load(bp, p * nr + j))))))
    return Kernel("pg_" + out_name, (c, ap, bp), body)


def run_both(make, schedule, *, rtol=2e-5):
    """Compile make('before') and schedule(make('after')) into one program and compare the outputs."""
    before, after = make("before"), schedule(make("after"))
    inputs = {}
    for kernel in (before, after):
        for p in kernel.params[1:]:
            inputs[p.name] = p
    outs = (before.params[0], after.params[0])
    program = Program("sched_test", (before, after), tuple(inputs.values()), outs)
    module = build(program)
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(-1, 1, b.shape).astype(np.float32) for b in inputs.values()]
    results = [np.empty(b.shape, np.float32) for b in outs]
    module(*arrays, *results)
    np.testing.assert_allclose(results[1], results[0], rtol=rtol, atol=rtol * 10)
    return after


SHAPES = [(1, 1), (7, 33), (33, 7), (127, 33)]


@pytest.mark.parametrize("m,n", SHAPES)
def test_split_tile_reorder_fuse_vectorize_parallel(m, n):
    sched = Schedule([Step("tile", ("i", "j", 4, 8)), Step("vectorize", ("j_i",)), Step("parallel", ("i_o",))])
    after = run_both(lambda o: elementwise(m, n, o), sched.apply)
    assert "vectorized" in str(after) and "parallel" in str(after)
    run_both(lambda o: elementwise(m, n, o), lambda k: S.fuse(S.reorder(k, "j", "i"), "j", "i"))
    run_both(lambda o: elementwise(m, n, o), lambda k: S.vectorize(S.split(S.split(k, "j", 3), "j_i", 2), "j_i_i"))


@pytest.mark.parametrize("m,n", SHAPES)
def test_unroll_and_pack(m, n):
    run_both(lambda o: elementwise(m, n, o), lambda k: S.unroll(S.split(k, "j", 4), "j_i"))
    run_both(lambda o: elementwise(m, n, o), lambda k: S.pack(S.pack(k, "a", "i"), "b", "i"))


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 33, 5), (33, 7, 127), (20, 127, 33)])
def test_matmul_schedules(m, n, k):
    """cache_write + rfactor + vectorize; reorder i/j; pack a transposed tile of b."""
    def local_acc(kernel):
        kernel = S.cache_write(kernel, kernel.params[0].name, "k")
        kernel = S.rfactor(kernel, "k", 8)
        return S.parallel(S.vectorize(kernel, "k_i"), "i")
    run_both(lambda o: matmul(m, n, k, o), local_acc, rtol=1e-4)
    run_both(lambda o: matmul(m, n, k, o), lambda kern: S.pack(S.reorder(kern, "j", "i"), "b", "j"), rtol=1e-4)


@pytest.mark.parametrize("m,n", SHAPES)
def test_rfactor_min_max_and_sum(m, n):
    run_both(lambda o: rowmax(m, n, o), lambda k: S.vectorize(S.rfactor(k, "j", 4), "j_i"))
    run_both(lambda o: rowsum(m, n, o), lambda k: S.parallel(S.vectorize(S.rfactor(k, "j", 16), "j_i"), "i"))


@pytest.mark.parametrize("m,n", SHAPES)
def test_compute_inline_and_at(m, n):
    run_both(lambda o: producer(m, n, o), lambda k: S.compute_inline(k, "t"))
    run_both(lambda o: producer(m, n, o), lambda k: S.compute_at(k, "t", "i"))
    run_both(lambda o: stencil_rows(m, n, o), lambda k: S.compute_at(k, "t", "i"))


@pytest.mark.parametrize("kc", [1, 7, 33])
def test_tensorize_gemm_microkernel(kc):
    after = run_both(lambda o: packed_gemm(kc, 8, 32, o), lambda k: S.tensorize(k, "p", "gemm_update_8x32_float32"),
                     rtol=1e-4)
    assert "unrolled" in str(after)


def test_tensorize_sum5():
    def make(o):
        out, a = Buffer(o, F32, (7,)), Buffer("a", F32, (7, 5))
        i, j = E.Var("i"), E.Var("j")
        return Kernel("s5_" + o, (out, a), For(i, 7, block(Store(out, i, E.Const(0.0, F32)), For(
            j, 5, Store(out, i, E.Load(out, i) + E.Load(a, i * 5 + j))))))
    after = run_both(make, lambda k: S.tensorize(k, "j", "sum5"))
    assert "for j" not in str(after)


# ---- refusals


def test_refuses_parallel_or_vectorized_reduction_axis():
    with pytest.raises(ScheduleError, match=r"cannot parallelize loop k: it is a reduction axis.*o\[i\*4 \+ j\]"):
        S.parallel(matmul(4, 4, 4, "o"), "k")
    with pytest.raises(ScheduleError, match="cannot vectorize loop j: it is a reduction axis.*acc"):
        S.vectorize(rowsum(4, 4, "o"), "j")
    with pytest.raises(ScheduleError, match="cannot vectorize loop i: it contains loop"):
        S.vectorize(elementwise(4, 4, "o"), "i")


def test_refuses_dependence():
    out, a = Buffer("o", F32, (9,)), Buffer("a", F32, (9,))
    i = E.Var("i")
    prefix = Kernel("prefix", (out, a), For(i, 9, Store(out, i, E.Load(out, E.maximum(i - 1, 0)) + E.Load(a, i))))
    with pytest.raises(ScheduleError, match="written and read at another index"):
        S.parallel(prefix, "i")


def test_refuses_reorder_across_dependence_and_imperfect_nest():
    out, a = Buffer("o", F32, (4, 4)), Buffer("a", F32, (4, 4))
    i, j = E.Var("i"), E.Var("j")
    dep = Kernel("dep", (out, a), For(i, 4, For(j, 4, Store(
        out, i * 4 + j, E.Load(out, E.maximum(i - 1, 0) * 4 + E.minimum(j + 1, 3)) + 1.0))))
    with pytest.raises(ScheduleError, match="reorder of j, i: o is written and read at another index"):
        S.reorder(dep, "j", "i")
    with pytest.raises(ScheduleError, match="not perfectly nested"):
        S.reorder(matmul(4, 4, 4, "o"), "k", "i")
    with pytest.raises(ScheduleError, match="extent of loop j_i .* uses loop j_o"):
        S.reorder(S.split(elementwise(4, 10, "o"), "j", 4), "j_i", "j_o")


def test_refuses_bad_arguments():
    k = elementwise(4, 4, "o")
    with pytest.raises(ScheduleError, match="no loop 'x'"):
        S.split(k, "x", 2)
    with pytest.raises(ScheduleError, match="factor must be a positive integer"):
        S.split(k, "i", 0)
    with pytest.raises(ScheduleError, match="unknown schedule primitive"):
        Step("spilt", ("i", 2))
    with pytest.raises(ScheduleError, match="schedule step 1 vectorize\\('i'\\)"):
        Schedule([Step("split", ("j", 2)), Step("vectorize", ("i",))]).apply(k)
    with pytest.raises(ScheduleError, match="does not match intrinsic"):
        S.tensorize(k, "j", "sum5")
    with pytest.raises(ScheduleError, match="no allocated"):
        S.compute_inline(k, "a")


def test_refuses_compute_at_reading_later_rows():
    out, a = Buffer("o", F32, (5, 3)), Buffer("a", F32, (5, 3))
    t = Buffer("t", F32, (5, 3), scope="local")
    p, q, i, j = E.Var("p"), E.Var("q"), E.Var("i"), E.Var("j")
    body = Alloc(t, block(For(p, 5, For(q, 3, Store(t, p * 3 + q, E.Load(a, p * 3 + q)))),
                          For(i, 5, For(j, 3, Store(out, i * 3 + j, E.Load(t, E.minimum(i + 1, 4) * 3 + j))))))
    with pytest.raises(ScheduleError, match="later producer iterations write"):
        S.compute_at(Kernel("ahead", (out, a), body), "t", "i")


def test_refuses_rfactor_of_non_reduction_and_cache_write_of_moving_index():
    with pytest.raises(ScheduleError, match="exactly one outer scalar"):
        S.rfactor(elementwise(4, 4, "o"), "j", 2)
    with pytest.raises(ScheduleError, match="changes inside the loop"):
        S.cache_write(elementwise(4, 4, "o"), "o", "j")


def test_schedule_json_round_trip(tmp_path):
    sched = Schedule([Step("tile", ("i", "j", 4, 8)), Step("vectorize", ("j_i",))])
    path = tmp_path / "s.json"
    path.write_text(sched.to_json())
    again = Schedule.from_json(path.read_text())
    assert again == sched
    assert str(again.apply(elementwise(9, 9, "o"))) == str(sched.apply(elementwise(9, 9, "o")))


@pytest.mark.parametrize("m,n", SHAPES)
def test_split_shift_inwards_and_named_loops(m, n):
    """Equal blocks, the last moved back to end at the extent: the same result for any extent."""
    after = run_both(lambda o: elementwise(m, n, o),
                     lambda k: S.vectorize(S.split(k, "j", 4, tail="shift_inwards", outer="jo", inner="jv"), "jv"))
    assert "for jv in 0.." + str(min(4, n)) + " (vectorized)" in str(after)
    renamed = S.split(elementwise(m, n, "o"), "j", 3, outer="j", inner="j_in")  # outer keeps the loop's name
    assert "for j in" in str(renamed) and "for j_in in" in str(renamed)


def test_split_shift_inwards_refuses_recomputing_an_accumulation():
    with pytest.raises(ScheduleError, match="shift_inwards.*recomputes points"):
        S.split(matmul(4, 4, 5, "o"), "k", 2, tail="shift_inwards")
    with pytest.raises(ScheduleError, match="already used"):
        S.split(elementwise(4, 4, "o"), "j", 2, outer="i")
    with pytest.raises(ScheduleError, match="tail must be one of"):
        S.split(elementwise(4, 4, "o"), "j", 2, tail="guard")


def test_refuses_parallel_scatter():
    """A store at an index read from memory may hit one element from two iterations."""
    out, a = Buffer("o", F32, (4,)), Buffer("a", "int64", (9,))
    i = E.Var("i")
    scatter = Kernel("scatter", (out, a), For(i, 9, Store(out, E.Load(a, i), E.Load(out, E.Load(a, i)) + 1.0)))
    with pytest.raises(ScheduleError, match="scatters into o"):
        S.parallel(scatter, "i")
