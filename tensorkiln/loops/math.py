"""Math functions of the loop IR: what a `Call` may name, how it evaluates, how C spells it.

One row per function, like tinygrad's `code_for_op`: its arity, its value on
numpy scalars (the reference semantics of `loops.expr.evaluate`) and its C
spelling per float type. Codegen reads the spelling from here, so a new
function is one row. An op table row (ir/ops) that needs a function libm has
and this table lacks registers it with `math_function(...)` beside the op.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Mapping

import numpy as np

from ..dtypes import bf16_bits_from_f32, f32_from_bf16_bits


@dataclass(frozen=True)
class MathFunction:
    """One math function of float arguments."""

    name: str
    arity: int
    evaluate: Callable[..., object]  # numpy float scalars (one dtype) -> a number
    c: Mapping[str, str]  # float dtype -> C expression with {args}
    source: tuple[str, ...] = ()  # C definitions the spelling calls, each emitted once per file
    # Fixed (argument dtypes, result dtype) of a function that is not float -> same float (a counter-based
    # random number: integer seed and counter in, a float out); None: float arguments of one dtype, its result
    signature: tuple[tuple[str, ...], str] | None = None


MATH_FUNCTIONS: dict[str, MathFunction] = {}


def math_function(name: str, arity: int, evaluate: Callable[..., object],
                  c: Mapping[str, str] | None = None, source: tuple[str, ...] = (),
                  signature: tuple[tuple[str, ...], str] | None = None) -> MathFunction:
    """Add a math function; `c` defaults to libm's names (`{name}f` for float32, `{name}` for float64).

    A function libm lacks brings its C definitions as `source`: pieces the C backend writes once into
    each file that calls it, in any order (a piece that calls another declares its prototype).

    Registering the same function again with the same arity is allowed (two ops may share one).
    """
    spelling = dict(c) if c is not None else {"float32": f"{name}f({{args}})", "float64": f"{name}({{args}})"}
    function = MathFunction(name, arity, evaluate, spelling, source, signature)
    known = MATH_FUNCTIONS.get(name)
    if known is not None and (known.arity, dict(known.c), known.source, known.signature) != \
            (arity, spelling, source, signature):
        raise ValueError(f"math function {name!r} defined twice, differently")
    MATH_FUNCTIONS.setdefault(name, function)
    return MATH_FUNCTIONS[name]


def _fma(a, b, c):
    """a*b + c with one rounding (exact rational arithmetic, then the operands' float type)."""
    if not all(np.isfinite([a, b, c])):
        return a * b + c
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    return type(a)(float(exact)) if isinstance(a, np.float64) else np.float32(float(exact))


def _round_bf16(x) -> np.float32:
    return f32_from_bf16_bits(bf16_bits_from_f32(np.array([x], dtype=np.float32)))[0]


def _erf(x):
    return type(x)(math.erf(float(x)))


# libm functions, spelled {name}f / {name}
for _name, _arity, _numpy in [
        ("exp2", 1, np.exp2), ("expm1", 1, np.expm1), ("log", 1, np.log), ("log2", 1, np.log2),
        ("log1p", 1, np.log1p), ("sqrt", 1, np.sqrt), ("sinh", 1, np.sinh), ("cosh", 1, np.cosh),
        ("sin", 1, np.sin), ("cos", 1, np.cos), ("tan", 1, np.tan), ("asin", 1, np.arcsin),
        ("acos", 1, np.arccos), ("atan", 1, np.arctan), ("fabs", 1, np.fabs), ("floor", 1, np.floor),
        ("ceil", 1, np.ceil), ("trunc", 1, np.trunc), ("rint", 1, np.rint), ("pow", 2, np.power),
        ("atan2", 2, np.arctan2), ("fmod", 2, np.fmod), ("fma", 3, _fma)]:
    math_function(_name, _arity, _numpy)
del _name, _arity, _numpy

# float32 versions that vectorize (codegen/c_prelude.py: branch-free, so `omp simd` loops stay vector)
math_function("exp", 1, np.exp, {"float32": "tk_expf({args})", "float64": "exp({args})"})
math_function("tanh", 1, np.tanh, {"float32": "tk_tanhf({args})", "float64": "tanh({args})"})
math_function("erf", 1, _erf, {"float32": "tk_erff({args})", "float64": "erf({args})"})
math_function("rsqrt", 1, lambda x: type(x)(1) / np.sqrt(x),
              {"float32": "(1.0f / sqrtf({args}))", "float64": "(1.0 / sqrt({args}))"})
# float32 -> float32 rounded through a 16-bit storage type (a cast to it that is not stored)
math_function("round_f16", 1, lambda x: np.float32(np.float16(x)),
              {"float32": "tk_f16_to_f32(tk_f32_to_f16({args}))"})
# float32 -> float32 rounded to bf16 in 32-bit lanes (the bits of tk_bf16_to_f32(tk_f32_to_bf16(x)));
# written only into files that round, so a float32 program's C does not carry it
_ROUND_BF16_C = r"""
/* tk_bf16_to_f32(tk_f32_to_bf16(f)), the same bits (checked over all 2^32 floats), kept in 32-bit
 * lanes. In an `omp simd` loop it is 9 vector operations, and it holds at most two constants in
 * registers (0x7fff and the final mask; the kept bit and the quiet bit come from shifts):
 * a convolution's 6 x 2 tile of accumulators, its two weight vectors and a broadcast pixel take 15
 * of AVX2's 16 ymm registers, and GCC keeps the constants of an epilogue in registers across the
 * whole loop nest. With four constants (the kept bit as `>> 16 & 1`, the quiet bit as `| 0x400000`)
 * it fed the second weight vector from memory to each of its 6 FMAs instead, about 1.3x the float32
 * layer's time on 3x3 and 1x1 layers alike. The NaN test is an explicit unordered compare used as a
 * lane mask: as a select on f != f, GCC merged it with the compares of a clamp before it. */
static inline float tk_round_bf16(float f)
{
    const uint32_t bits = tk_f32_to_bits(f);
    const uint32_t kept = (bits << 15) >> 31;                         /* bit 16, the last kept bit */
    const uint32_t rounded = bits + 0x7fffu + kept;                   /* to nearest even */
    const uint32_t nan = 0u - (uint32_t)__builtin_isunordered(f, f);  /* all ones in a NaN lane */
    const uint32_t quiet = bits | ((nan >> 31) << 22);                /* NaN: keep it a quiet NaN */
    return tk_bits_to_f32(((quiet & nan) | (rounded & ~nan)) & 0xffff0000u);
}
"""
math_function("round_bf16", 1, _round_bf16, {"float32": "tk_round_bf16({args})"}, source=(_ROUND_BF16_C,))
