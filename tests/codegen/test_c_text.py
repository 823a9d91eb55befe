"""The shape of the generated C: pragmas, reductions, parameters, comments, debug checks (no compiler)."""
from __future__ import annotations

import pytest

from tensorkiln.codegen.c import generate_c
from tensorkiln.codegen.c_expr import format_c_const
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Const, Load, Var, maximum, minimum
from tensorkiln.loops.ir import Assign, For, Kernel, Let, Store, block
from tensorkiln.loops.program import Program

i, j, k = Var("i"), Var("j"), Var("k")
acc = Var("acc", "float32")
x = Buffer("x", "float32", (4, 8))
y = Buffer("y", "float32", (4, 8))
s = Buffer("s", "float32", (4,))


def c_of(*kernels: Kernel, inputs=(x,), outputs=(y,), debug=False, temps=()) -> str:
    return generate_c(Program("t", kernels, inputs, outputs, temps=temps), debug=debug).text


def function(text: str, name: str) -> str:
    start = text.index(f"static void kernel_{name}(")
    return text[start:text.index("\n}\n", start) + 2]


def test_parameters_are_restrict_and_const_when_only_read():
    text = c_of(Kernel("copy", (y, x), For(i, 32, Store(y, i, Load(x, i)))))
    assert "static void kernel_copy(float *restrict y, const float *restrict x)" in text
    assert "TK_EXPORT int tk_entry(void *const *args, void *arena)" in text
    assert "const float *x = (const float *)args[0];" in text


def test_kernel_comment_names_graph_nodes():
    text = c_of(Kernel("relu_3", (y, x), For(i, 32, Store(y, i, Load(x, i))), comment="%3 = relu(%2)  */ tricky"))
    assert " *   %3 = relu(%2)  * / tricky" in text  # a comment can never close early


def test_parallel_loops_collapse_and_inner_loops_vectorize():
    body = For(i, 4, For(j, 8, Store(y, i * 8 + j, Load(x, i * 8 + j)), "parallel"), "parallel")
    fn = function(c_of(Kernel("k2", (y, x), body)), "k2")
    assert "#pragma omp parallel for collapse(2)" in fn
    body = For(i, 4, For(j, 8, Store(y, i * 8 + j, Load(x, i * 8 + j)), "vectorized"), "parallel")
    fn = function(c_of(Kernel("k1", (y, x), body)), "k1")
    assert "#pragma omp parallel for\n" in fn and "#pragma omp simd\n" in fn


def test_dependent_extent_prevents_collapse():
    body = For(i, 4, For(j, minimum(Const(8), i + 1), Store(y, i * 8 + j, Load(x, i * 8 + j)), "parallel"),
               "parallel")
    fn = function(c_of(Kernel("tri", (y, x), body)), "tri")
    assert "collapse" not in fn
    assert "parallel loop inside a parallel/simd region: runs serially" in fn


@pytest.mark.parametrize("update, clause", [
    (acc + Load(x, i * 8 + j), "reduction(+:acc)"),
    (maximum(acc, Load(x, i * 8 + j)), "reduction(max:acc)"),
    (Load(x, i * 8 + j) * acc, "reduction(*:acc)"),
])
def test_accumulators_become_reduction_clauses(update, clause):
    body = For(i, 4, block(Let(acc, Const(0.0, "float32")), For(j, 8, Assign(acc, update), "vectorized"),
                           Store(s, i, acc)), "parallel")
    fn = function(c_of(Kernel("red", (s, x), body), outputs=(s,)), "red")
    assert f"#pragma omp simd {clause}" in fn
    assert "float acc = 0.0f;" in fn


def test_a_carried_scalar_that_is_not_a_reduction_keeps_the_loop_serial():
    body = For(i, 4, block(Let(acc, Const(0.0, "float32")),
                           For(j, 8, Assign(acc, acc * 0.5 + Load(x, i * 8 + j)), "vectorized"),
                           Store(s, i, acc)), "parallel")
    fn = function(c_of(Kernel("ema", (s, x), body), outputs=(s,)), "ema")
    assert "omp simd" not in fn
    assert "vectorized loop left serial: scalar acc is carried across iterations" in fn


def test_unrolled_loops_and_floor_division_spelling():
    idx = Buffer("idx", "int64", (8,))
    body = For(i, 4, For(j, 8, Store(y, i * 8 + j, Load(x, (i * 8 + j) // 3 + Load(idx, j) // 2)), "unrolled"))
    fn = function(c_of(Kernel("u", (y, x, idx), body), inputs=(x, idx)), "u")
    assert "#pragma GCC unroll 8" in fn
    assert "x[i * 2 + (i * 2 + j) / 3 + tk_floordiv_int64(idx[j], 2)]" in fn
    # (i*2 + j) is provably non-negative: plain C division; idx[j] may be negative: floor needs the helper


def test_debug_mode_checks_only_unproven_accesses():
    idx = Buffer("idx", "int64", (32,))
    body = For(i, 32, Store(y, i, Load(x, Load(idx, i)) + Load(x, i)), "vectorized")
    text = c_of(Kernel("gather", (y, x, idx), body), inputs=(x, idx), debug=True)
    fn = function(text, "gather")
    assert 'x[tk_checked_index(idx[i], 32, "gather", "x")]' in fn
    assert "x[i]" in fn and "idx[i]" in fn  # i in [0, 32): no check needed
    assert "omp simd" not in fn and "simd off in debug mode" in fn


def test_debug_mode_guards_stores():
    body = For(i, 40, Store(y, i, Const(1.0, "float32")))
    fn = function(c_of(Kernel("over", (y,), body), inputs=(), debug=True), "over")
    assert 'if (tk_in_bounds(i, 32, "over", "y", "store")) {' in fn


def test_names_that_are_c_keywords_are_renamed():
    out = Buffer("double", "float32", (4,))
    body = For(Var("int"), 4, Store(out, Var("int"), Const(0.0, "float32")))
    text = c_of(Kernel("k", (out,), body), inputs=(), outputs=(out,))
    assert "for (int64_t int_ = 0; int_ < 4; int_++)" in text
    assert "double_[int_] = 0.0f;" in text


def test_names_of_libm_functions_are_renamed_and_collisions_refused():
    from tensorkiln.loops.expr import call
    from tensorkiln.loops.ir import LoopIRError
    out = Buffer("exp", "float64", (4,))
    body = For(Var("floor"), 4, Store(out, Var("floor"), call("exp", Const(1.0, "float64"))))
    text = c_of(Kernel("k", (out,), body), inputs=(), outputs=(out,))
    assert "exp_[floor_] = exp(1.0);" in text
    twin = Buffer("exp_", "float64", (4,))
    with pytest.raises(LoopIRError, match="would both be 'exp_'"):
        c_of(Kernel("k", (out, twin), body), inputs=(), outputs=(out, twin))


def test_arena_temps_get_fixed_offsets():
    t = Buffer("t", "float32", (32,))
    k1 = Kernel("a", (t, x), For(i, 32, Store(t, i, Load(x, i))))
    k2 = Kernel("b", (y, t), For(i, 32, Store(y, i, Load(t, i) * 2.0)))
    text = c_of(k1, k2, temps=(t,))
    assert "float *t = (float *)((char *)arena + 0);" in text
    assert text.index("kernel_a(t, x);") < text.index("kernel_b(y, t);")
    assert "return 128;" in text  # tk_arena_bytes


@pytest.mark.parametrize("value, dtype, literal", [
    (0.1, "float32", "0.1f"), (1.0, "float32", "1.0f"), (1e-45, "float32", "1e-45f"),
    (float("inf"), "float32", "INFINITY"), (float("-inf"), "float64", "-INFINITY"), (float("nan"), "float32", "NAN"),
    (0.1, "float64", "0.1"), (-(2**63), "int64", "INT64_MIN"), (2**40, "int64", "INT64_C(1099511627776)"),
    (True, "bool", "true"),
])
def test_constants_read_back_exactly(value, dtype, literal):
    assert format_c_const(value, dtype) == literal


def test_int64_arithmetic_of_literals_is_done_in_64_bits():
    big = Buffer("big", "int64", (1,))
    value = Const(100000) * Const(100000)  # folded by the simplifier; spelled with a cast without it
    program = Program("t", (Kernel("k", (big,), Store(big, Const(0), value)),), inputs=(), outputs=(big,))
    assert "big[0] = 10000000000;" not in generate_c(program).text
    assert "INT64_C(10000000000)" in generate_c(program).text
    assert "(int64_t)100000 * 100000" in generate_c(program, simplify=False).text
