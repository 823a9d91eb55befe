"""Differential test: random expressions compiled to C must compute what `evaluate` says.

`evaluate` (loops/expr.py) is the reference semantics of the loop IR: floor
division and modulo, wrapping integers, NaN-propagating min/max, float32
rounding after each operation. Here ~160 random expressions (and a few
hand-picked ones) over loop
variables and loaded values are compiled as the kernels of ONE program and
every element is compared with the Python evaluation.
"""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from tensorkiln.driver.build import build
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import (
    BinOp, Call, Cast, Const, Expr, Load, Var, evaluate, le, logical_and, logical_not, logical_or, lt, maximum,
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
ub = Buffer("ub", "uint8", (SIZE,))       # uint8 values, full range
sv = Buffer("sv", "int16", (SIZE,))       # int16 values, full range
SMALL_INTS = {"int8": bv, "uint8": ub, "int16": sv}  # C computes these in int: results must wrap back


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

    def small_int(self, dtype: str, depth: int) -> Expr:
        """An int8, uint8 or int16 expression over the full range of the type."""
        info = np.iinfo(dtype)
        if depth == 0 or self.rng.random() < 0.3:
            others = [name for name in SMALL_INTS if name != dtype]
            return self.pick([lambda: Load(SMALL_INTS[dtype], FLAT),
                              lambda: Const(self.rng.randint(int(info.min), int(info.max)), dtype),
                              lambda: Cast(Load(SMALL_INTS[self.pick(others)], FLAT), dtype)])()
        a, b = self.small_int(dtype, depth - 1), self.small_int(dtype, depth - 1)
        return self.pick([lambda: a + b, lambda: a * b, lambda: a - b, lambda: -a, lambda: a // b,
                          lambda: a % b, lambda: minimum(a, b), lambda: maximum(a, b),
                          lambda: BinOp(self.pick(["bitand", "bitor", "bitxor"]), a, b),
                          lambda: where(self.pick([lt, le, ne])(a, b), a, b)])()

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
    for dtype in SMALL_INTS:
        for n in range(20):
            cases.append((dtype, maker.small_int(dtype, 3)))
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
              ("int8", Load(bv, FLAT) // Const(-1, "int8")), ("int8", -Load(bv, FLAT)),
              ("int16", Load(sv, FLAT) // Const(-1, "int16")), ("int16", -Load(sv, FLAT)),
              ("uint8", -Load(ub, FLAT)), ("uint8", Load(ub, FLAT) - Const(1, "uint8")),
              ("uint8", Load(ub, FLAT) + Const(200, "uint8")), ("uint8", Load(ub, FLAT) // Const(7, "uint8")),
              ("uint8", Load(ub, FLAT) % Const(7, "uint8")), ("uint8", Cast(Load(bv, FLAT), "uint8")),
              ("int8", Cast(Load(ub, FLAT), "int8")), ("int64", Cast(Load(ub, FLAT), "int64")),
              ("float32", Cast(Load(ub, FLAT), "float32")), ("bool", lt(Load(ub, FLAT), Const(128, "uint8")))]
    outputs, kernels = [], []
    for n, (dtype, expr) in enumerate(cases):
        out = Buffer(f"out{n}", dtype, (SIZE,))
        outputs.append(out)
        # alternate loop kinds so parallel, simd and serial code paths all see random code
        kind = ("serial", "vectorized", "parallel")[n % 3]
        kernels.append(Kernel(f"case{n}", (out, iv, dv, fx, bv, ub, sv),
                              For(i, ROWS, For(j, COLS, Store(out, FLAT, expr)), kind)))
    program = Program("semantics", tuple(kernels), inputs=(iv, dv, fx, bv, ub, sv), outputs=tuple(outputs))
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
        "ub": rng.integers(0, 256, SIZE).astype(np.uint8),
        "sv": rng.integers(-32768, 32768, SIZE).astype(np.int16),
    }
    inputs["ub"][:4] = [0, 1, 254, 255]  # the corners of the unsigned range
    inputs["sv"][:4] = [-32768, -1, 0, 32767]
    outputs = module.run(*(inputs[b.name] for b in (iv, dv, fx, bv, ub, sv)))
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
