"""Differential test: random expressions compiled to C must compute what `evaluate` says.

`evaluate` (loops/expr.py) is the reference semantics of the loop IR: floor
division and modulo, wrapping integers, NaN-propagating min/max, float32
rounding after each operation. Here ~120 random expressions (and a few
hand-picked ones) over loop
variables and loaded values are compiled as the kernels of ONE program and
every element is compared with the Python evaluation.
"""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from tensorkiln.codegen.build import build
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import (
    Call, Cast, Const, Expr, Load, Var, evaluate, le, logical_and, logical_not, logical_or, lt, maximum,
    minimum, ne, where,
)
from tensorkiln.loops.ir import For, Kernel, Store
from tensorkiln.loops.program import Program

ROWS, COLS = 6, 10
SIZE = ROWS * COLS
i, j = Var("i"), Var("j")
FLAT = i * COLS + j
iv = Buffer("iv", "int64", (SIZE,))       # ints in [-30, 30]
dv = Buffer("dv", "int32", (SIZE,))       # divisors in +-[0, 7], zero included
fx = Buffer("fx", "float32", (SIZE,))     # floats, some special
bv = Buffer("bv", "int8", (SIZE,))        # int8 values, full range


class ExprMaker:
    """Random expression trees of bounded depth (plain `random`, so one fixed program compiles once)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def pick(self, options):
        return self.rng.choice(options)

    def int64(self, depth: int) -> Expr:
        r = self.rng
        if depth == 0 or r.random() < 0.25:
            return self.pick([lambda: i, lambda: j, lambda: Load(iv, FLAT), lambda: Const(r.randint(-20, 40)),
                              lambda: Cast(Load(dv, FLAT), "int64")])()
        a, b = self.int64(depth - 1), self.int64(depth - 1)
        k = Const(self.pick([-7, -4, -1, 1, 2, 3, 5, 8, 16]))
        return self.pick([
            lambda: a + b, lambda: a - b, lambda: a * b, lambda: a * Const(r.randint(-9, 9)),
            lambda: a // k, lambda: a % k, lambda: a // Cast(Load(dv, FLAT), "int64"),
            lambda: a % Cast(Load(dv, FLAT), "int64"), lambda: minimum(a, b), lambda: maximum(a, b), lambda: -a,
            lambda: where(self.boolean(depth - 1), a, b), lambda: Cast(self.boolean(depth - 1), "int64"),
        ])()

    def int8(self, depth: int) -> Expr:
        if depth == 0 or self.rng.random() < 0.3:
            return self.pick([lambda: Load(bv, FLAT), lambda: Const(self.rng.randint(-128, 127), "int8")])()
        a, b = self.int8(depth - 1), self.int8(depth - 1)
        return self.pick([lambda: a + b, lambda: a * b, lambda: a - b, lambda: -a, lambda: a // b,
                          lambda: a % b, lambda: minimum(a, b)])()

    def float32(self, depth: int) -> Expr:
        r = self.rng
        if depth == 0 or r.random() < 0.25:
            return self.pick([lambda: Load(fx, FLAT), lambda: Cast(i, "float32"),
                              lambda: Const(self.pick([0.0, -0.0, 0.5, 3.0, -1.25, 1e30, float("inf")]), "float32")])()
        a, b = self.float32(depth - 1), self.float32(depth - 1)
        return self.pick([
            lambda: a + b, lambda: a - b, lambda: a * b, lambda: a / b, lambda: a // b, lambda: a % b,
            lambda: minimum(a, b), lambda: maximum(a, b), lambda: -a, lambda: where(self.boolean(depth - 1), a, b),
            lambda: Call(self.pick(["fabs", "floor", "ceil", "trunc", "rint"]), (a,)),
            lambda: Cast(self.int64(depth - 1), "float32"),
        ])()

    def boolean(self, depth: int) -> Expr:
        if depth <= 0 or self.rng.random() < 0.5:
            ints = self.rng.random() < 0.6
            a = self.int64(max(depth - 1, 0)) if ints else self.float32(max(depth - 1, 0))
            b = self.int64(max(depth - 1, 0)) if ints else self.float32(max(depth - 1, 0))
            return self.pick([lt, le, ne])(a, b)
        a, b = self.boolean(depth - 1), self.boolean(depth - 1)
        return self.pick([lambda: logical_and(a, b), lambda: logical_or(a, b), lambda: logical_not(a)])()


def make_program() -> tuple[Program, list[tuple[str, Expr]]]:
    maker = ExprMaker(seed=2024)
    cases: list[tuple[str, Expr]] = []
    for n in range(50):
        cases.append(("int64", maker.int64(4)))
    for n in range(20):
        cases.append(("int8", maker.int8(3)))
    for n in range(40):
        cases.append(("float32", maker.float32(4)))
    for n in range(10):
        cases.append(("bool", maker.boolean(2)))
    # hand-picked: NaN on either side of min/max; min/max against constant bounds and the
    # clamps made of two (each has its own C form), a NaN constant, crossed bounds; int8 corners
    x, zero = Load(fx, FLAT), Const(0.0, "float32")
    six, nan = Const(6.0, "float32"), Const(float("nan"), "float32")
    cases += [("float32", minimum(x, zero)), ("float32", minimum(zero, x)),
              ("float32", maximum(x, zero)), ("float32", maximum(zero, x)),
              ("float32", minimum(maximum(x, zero), six)), ("float32", maximum(minimum(six, x), zero)),
              ("float32", minimum(six, maximum(Const(-1.25, "float32"), x + x))),
              ("float32", minimum(maximum(x, six), zero)), ("float32", maximum(x, nan)),
              ("float32", minimum(nan, maximum(x, zero))),
              ("int8", Load(bv, FLAT) // Const(-1, "int8")), ("int8", -Load(bv, FLAT))]
    outputs, kernels = [], []
    for n, (dtype, expr) in enumerate(cases):
        out = Buffer(f"out{n}", dtype, (SIZE,))
        outputs.append(out)
        # alternate loop kinds so parallel, simd and serial code paths all see random code
        kind = ("serial", "vectorized", "parallel")[n % 3]
        kernels.append(Kernel(f"case{n}", (out, iv, dv, fx, bv), For(i, ROWS, For(j, COLS, Store(out, FLAT, expr)),
                                                                     kind)))
    program = Program("semantics", tuple(kernels), inputs=(iv, dv, fx, bv), outputs=tuple(outputs))
    return program, cases


def same(want, got, dtype: str) -> bool:
    if dtype == "float32":
        want, got = float(want), float(got)
        if math.isnan(want) or math.isnan(got):
            return math.isnan(want) and math.isnan(got)
        return want == got
    return int(want) == int(got)


@pytest.fixture(scope="module")
def compiled():
    program, cases = make_program()
    module = build(program)
    rng = np.random.default_rng(11)
    fx_values = rng.normal(0, 20, SIZE).astype(np.float32)
    fx_values[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-39, 2.5, -7.0]
    fx_values[9::6] = np.nan  # NaN in many places, to exercise NaN propagation
    inputs = {
        "iv": rng.integers(-30, 31, SIZE).astype(np.int64),
        "dv": rng.integers(-7, 8, SIZE).astype(np.int32),
        "fx": fx_values,
        "bv": rng.integers(-128, 128, SIZE).astype(np.int8),
    }
    outputs = module.run(inputs["iv"], inputs["dv"], inputs["fx"], inputs["bv"])
    return cases, inputs, outputs


def test_compiled_code_matches_the_reference_semantics(compiled):
    cases, inputs, outputs = compiled
    failures = []
    with np.errstate(all="ignore"):
        for n, ((dtype, expr), out) in enumerate(zip(cases, outputs)):
            for r in range(ROWS):
                for c in range(COLS):
                    env = {"i": r, "j": c}
                    want = evaluate(expr, env, inputs)
                    got = out[r * COLS + c]
                    if not same(want, got, dtype):
                        failures.append(f"case{n} ({dtype}) at i={r}, j={c}: C {got!r}, reference {want!r}\n"
                                        f"    {expr}")
                        break
    assert not failures, "\n".join(failures[:10])
