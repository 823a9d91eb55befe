"""Hand-built kernels, compiled as ONE program (one compiler call), run against numpy.

Each test checks one output of the shared program, so a failure names the
kernel that is wrong while the module still compiles only once.
"""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln.driver.build import build
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Cast, Const, Load, Var, call, lt, maximum, minimum, where
from tensorkiln.loops.ir import Alloc, Assign, For, If, Kernel, Let, Store, block
from tensorkiln.loops.program import Program

F32 = "float32"
M, N, K = 10, 12, 9  # matmul sizes: not multiples of the tiles, so the tails run
TM, TN = 4, 8
BIG = 5000  # elements in a local buffer too large for the stack

i, j, k = Var("i"), Var("j"), Var("k")
io, jo, ii, jj = Var("io"), Var("jo"), Var("ii"), Var("jj")


def f32(v: float) -> Const:
    return Const(v, F32)


# ---- buffers: inputs, outputs and one arena temp

a = Buffer("a", F32, (5, 7))
bias = Buffer("bias", F32, (7,))
col = Buffer("col", F32, (5,))
ma = Buffer("ma", F32, (M, K))
mb = Buffer("mb", F32, (K, N))
h_in = Buffer("h_in", "float16", (64,))
bf_in = Buffer("bf_in", "bfloat16", (64,))
f_in = Buffer("f_in", F32, (64,))
num = Buffer("num", "int32", (40,))
den = Buffer("den", "int32", (40,))
small = Buffer("small", "int8", (16,))
big_in = Buffer("big_in", F32, (BIG,))

add_row = Buffer("add_row", F32, (5, 7))
add_col = Buffer("add_col", F32, (5, 7))
row_sums = Buffer("row_sums", F32, (5,))
row_max = Buffer("row_max", F32, (5,))
mc = Buffer("mc", F32, (M, N))
math_out = Buffer("math_out", F32, (5, 7))
h_out = Buffer("h_out", "float16", (64,))
h_from_f = Buffer("h_from_f", "float16", (64,))
bf_out = Buffer("bf_out", "bfloat16", (64,))
bf_as_f = Buffer("bf_as_f", F32, (64,))
quot = Buffer("quot", "int32", (40,))
rem = Buffer("rem", "int32", (40,))
wrapped = Buffer("wrapped", "int8", (16,))
big_sum = Buffer("big_sum", F32, (1,))
clamped = Buffer("clamped", F32, (5, 7))
twice = Buffer("twice", F32, (5, 7))
temp = Buffer("temp", F32, (5, 7))  # arena: written by one kernel, read by the next
exp = Buffer("exp", F32, (5, 7))  # named like the libm function it calls


def kernels() -> list[Kernel]:
    ks = []
    # elementwise add with broadcasting, by index arithmetic: bias over rows, col over columns
    ks.append(Kernel("add_row_bias", (add_row, a, bias), For(i, 5, For(j, 7, Store(
        add_row, i * 7 + j, Load(a, i * 7 + j) + Load(bias, j)), "vectorized"), "parallel"),
        comment="add(a, bias[None, :])"))
    ks.append(Kernel("add_col_bias", (add_col, a, col), For(i, 5, For(j, 7, Store(
        add_col, i * 7 + j, Load(a, i * 7 + j) + Load(col, i)), "parallel"), "parallel"),
        comment="add(a, col[:, None])  (collapsed parallel loops)"))
    # row sum and row max: a scalar accumulator reduced across a simd loop
    acc, best = Var("acc", F32), Var("best", F32)
    ks.append(Kernel("row_sum", (row_sums, a), For(i, 5, block(
        Let(acc, f32(0.0)),
        For(j, 7, Assign(acc, acc + Load(a, i * 7 + j)), "vectorized"),
        Store(row_sums, i, acc)), "parallel"), comment="sum(a, dim=1)"))
    ks.append(Kernel("row_max", (row_max, a), For(i, 5, block(
        Let(best, f32(float("-inf"))),
        For(j, 7, Assign(best, maximum(best, Load(a, i * 7 + j))), "vectorized"),
        Store(row_max, i, best))), comment="amax(a, dim=1)"))
    # a tiled matmul with a stack-allocated accumulator tile and min() tails
    tile = Buffer("tile", F32, (TM, TN), scope="local")
    rows = minimum(Const(TM), M - io * TM)
    cols = minimum(Const(TN), N - jo * TN)
    kk = Var("kk")
    tiled = For(io, (M + TM - 1) // TM, For(jo, (N + TN - 1) // TN, Alloc(tile, block(
        For(ii, TM, For(jj, TN, Store(tile, ii * TN + jj, f32(0.0)), "vectorized")),
        For(kk, K, For(ii, rows, For(jj, cols, Store(
            tile, ii * TN + jj,
            Load(tile, ii * TN + jj) + Load(ma, (io * TM + ii) * K + kk) * Load(mb, kk * N + jo * TN + jj)),
            "vectorized"))),
        For(ii, rows, For(jj, cols, Store(mc, (io * TM + ii) * N + jo * TN + jj, Load(tile, ii * TN + jj)))),
    ))), "parallel")
    ks.append(Kernel("matmul_tiled", (mc, ma, mb), tiled, comment="matmul(ma, mb), 4x8 tiles"))
    # math functions in a parallel + vectorized nest
    v = Load(a, i * 7 + j)
    value = (call("tanh", v) * call("exp", -v) + call("sqrt", call("fabs", v)) + call("erf", v)
             + call("rsqrt", call("fabs", v) + 1.0) + call("pow", call("fabs", v), f32(1.5)))
    ks.append(Kernel("math_mix", (math_out, a), For(i, 5, For(j, 7, Store(math_out, i * 7 + j, value),
                                                             "vectorized"), "parallel")))
    # float16 / bfloat16 storage: loads widen to float32, stores round to nearest even
    ks.append(Kernel("half_ops", (h_out, h_from_f, bf_out, bf_as_f, h_in, bf_in, f_in), For(i, 64, block(
        Store(h_out, i, Load(h_in, i) * 2.0),
        Store(h_from_f, i, Load(f_in, i)),
        Store(bf_out, i, Load(f_in, i)),
        Store(bf_as_f, i, Load(bf_in, i)),
    ), "vectorized")))
    # integer floor division / modulo with negative operands, and int8 wrap-around
    ks.append(Kernel("int_ops", (quot, rem, num, den), For(i, 40, block(
        Store(quot, i, Load(num, i) // Load(den, i)),
        Store(rem, i, Load(num, i) % Load(den, i))))))
    ks.append(Kernel("int8_wrap", (wrapped, small), For(i, 16, Store(
        wrapped, i, Load(small, i) * Const(3, "int8") + Const(100, "int8")))))
    # a local buffer too large for the stack: goes to the heap
    scratch = Buffer("scratch", F32, (BIG,), scope="local")
    total = Var("total", F32)
    ks.append(Kernel("heap_scratch", (big_sum, big_in), Alloc(scratch, block(
        For(i, BIG, Store(scratch, i, Load(big_in, i) * 0.5), "vectorized"),
        Let(total, f32(0.0)),
        For(i, BIG, Assign(total, total + Load(scratch, BIG - 1 - i))),
        Store(big_sum, Const(0), total)))))
    # If and select: clamp to [-0.5, 0.5] two ways
    x = Load(a, i * 7 + j)
    ks.append(Kernel("clamp", (clamped, a), For(i, 5, For(j, 7, If(
        lt(x, f32(-0.5)), Store(clamped, i * 7 + j, f32(-0.5)),
        Store(clamped, i * 7 + j, where(lt(f32(0.5), x), f32(0.5), x)))))))
    # producer -> arena temp -> consumer
    ks.append(Kernel("produce", (temp, a), For(i, 35, Store(temp, i, Load(a, i) + 1.0), "vectorized")))
    ks.append(Kernel("consume", (twice, temp), For(i, 35, Store(
        twice, i, Load(temp, i) * Cast(Const(2), F32)), "vectorized")))
    ks.append(Kernel("exp", (exp, a), For(i, 35, Store(exp, i, call("exp", Load(a, i))), "vectorized")))
    return ks


INPUTS = (a, bias, col, ma, mb, h_in, bf_in, f_in, num, den, small, big_in)
OUTPUTS = (add_row, add_col, row_sums, row_max, mc, math_out, h_out, h_from_f, bf_out, bf_as_f, quot, rem,
           wrapped, big_sum, clamped, twice, exp)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """Reference float32 -> bfloat16 bits, round to nearest even (NaN stays NaN)."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


@pytest.fixture(scope="module")
def run():
    """Compile the program once and run it on fixed random inputs."""
    rng = np.random.default_rng(7)
    program = Program("codegen_checks", tuple(kernels()), INPUTS, OUTPUTS, temps=(temp,))
    module = build(program)
    specials = np.array([0.0, -0.0, 1.0, -1.0, 65504.0, 65520.0, 1e5, 6e-8, 3e-5, 1e-10, np.inf, -np.inf, np.nan,
                         0.1, 1.0 / 3.0, 2.0 ** -14], dtype=np.float32)
    f_values = np.concatenate([specials, rng.normal(0, 100, 48).astype(np.float32)])
    all_halves = rng.integers(0, 2**16, 64, dtype=np.uint16).view(np.float16)
    numerators = rng.integers(-50, 50, 40).astype(np.int32)
    denominators = rng.choice(np.array([-7, -3, -1, 1, 2, 5, 9], dtype=np.int32), 40)
    inputs = {
        "a": rng.normal(size=(5, 7)).astype(np.float32),
        "bias": rng.normal(size=7).astype(np.float32),
        "col": rng.normal(size=5).astype(np.float32),
        "ma": rng.normal(size=(M, K)).astype(np.float32),
        "mb": rng.normal(size=(K, N)).astype(np.float32),
        "h_in": all_halves,
        "bf_in": rng.integers(0, 2**16, 64, dtype=np.uint16),
        "f_in": f_values,
        "num": numerators,
        "den": denominators,
        "small": rng.integers(-128, 128, 16).astype(np.int8),
        "big_in": rng.normal(size=BIG).astype(np.float32),
    }
    outputs = module.run(*(inputs[b.name] for b in INPUTS))
    return inputs, dict(zip((b.name for b in OUTPUTS), outputs)), module


def test_one_compiler_call_builds_every_kernel(run):
    _, _, module = run
    text = module.source.text
    assert text.count("static void ") == len(kernels())
    assert "#pragma omp parallel for collapse(2)" in text
    assert "reduction(+:acc)" in text


def test_broadcast_adds(run):
    x, out, _ = run
    np.testing.assert_array_equal(out["add_row"], x["a"] + x["bias"][None, :])
    np.testing.assert_array_equal(out["add_col"], x["a"] + x["col"][:, None])


def test_row_reductions_with_a_scalar_accumulator(run):
    x, out, _ = run
    np.testing.assert_allclose(out["row_sums"], x["a"].sum(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["row_max"], x["a"].max(axis=1))


def test_tiled_matmul(run):
    x, out, _ = run
    np.testing.assert_allclose(out["mc"], x["ma"] @ x["mb"], rtol=1e-5, atol=1e-5)


def test_math_functions(run):
    x, out, _ = run
    v = x["a"].astype(np.float64)
    from math import erf
    want = (np.tanh(v) * np.exp(-v) + np.sqrt(np.abs(v)) + np.vectorize(erf)(v)
            + 1.0 / np.sqrt(np.abs(v) + 1.0) + np.abs(v) ** 1.5)
    np.testing.assert_allclose(out["math_out"], want, rtol=2e-6, atol=2e-6)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_float16_load_and_store_round_trip(run):
    x, out, _ = run
    want = (x["h_in"].astype(np.float32) * 2.0).astype(np.float16)
    np.testing.assert_array_equal(out["h_out"].view(np.uint16)[~np.isnan(want)],
                                  want.view(np.uint16)[~np.isnan(want)])
    assert np.isnan(out["h_out"][np.isnan(want)]).all()
    want = x["f_in"].astype(np.float16)  # numpy rounds to nearest even
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(out["h_from_f"].view(np.uint16)[finite], want.view(np.uint16)[finite])
    assert np.isnan(out["h_from_f"][~finite]).all()


def test_bfloat16_load_and_store_round_trip(run):
    x, out, _ = run
    np.testing.assert_array_equal(out["bf_out"], bf16_bits(x["f_in"]))
    want = (x["bf_in"].astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(out["bf_as_f"].view(np.uint32), want.view(np.uint32))


def test_integer_floor_division_and_wrap_around(run):
    x, out, _ = run
    np.testing.assert_array_equal(out["quot"], x["num"] // x["den"])
    np.testing.assert_array_equal(out["rem"], x["num"] % x["den"])
    want = (x["small"].astype(np.int64) * 3 + 100).astype(np.int8)  # wraps like int8 arithmetic
    np.testing.assert_array_equal(out["wrapped"], want)


def test_heap_allocated_local_buffer(run):
    x, out, module = run
    assert "tk_alloc(" in module.source.text
    np.testing.assert_allclose(out["big_sum"][0], (x["big_in"] * 0.5).sum(), rtol=1e-4)


def test_if_and_select(run):
    x, out, _ = run
    np.testing.assert_array_equal(out["clamped"], np.clip(x["a"], -0.5, 0.5))


def test_buffer_named_like_a_libm_function(run):
    x, out, _ = run
    np.testing.assert_allclose(out["exp"], np.exp(x["a"]), rtol=1e-6)


def test_intermediate_in_the_arena(run):
    x, out, module = run
    assert module.signature.arena_bytes >= temp.nbytes
    np.testing.assert_array_equal(out["twice"], (x["a"] + 1.0) * 2.0)
