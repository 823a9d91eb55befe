"""A store into a bfloat16 buffer rounds once: a round_bf16 on top of the stored value (an epilogue's
rounding for bf16 storage, a cast to bfloat16) is dropped from the C, with the same bits. A round_bf16
stored as float32 (bf16 values in float32 storage) has the bits of the bf16 store, widened, also after a
clamp (a ReLU6 epilogue, whose compares GCC once merged with the rounding's NaN test); its C helper is
written only into files that round."""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln.driver.build import build
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Const, Load, Var, call, lt, maximum, minimum, where
from tensorkiln.loops.ir import For, Kernel, Store, block
from tensorkiln.loops.program import Program


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, rounded once to nearest even; a NaN becomes its quiet NaN."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    out = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    out[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return out

SIZE = 77  # not a multiple of the vector width: the tail runs too
x_in = Buffer("x_in", "float32", (SIZE,))
y_in = Buffer("y_in", "float32", (SIZE,))
rounded = Buffer("rounded", "bfloat16", (SIZE,))
selected = Buffer("selected", "bfloat16", (SIZE,))
in_float32 = Buffer("in_float32", "float32", (SIZE,))
clamped = Buffer("clamped", "float32", (SIZE,))
i = Var("i")


def inputs(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Values where rounding twice could differ from once, if it did: halfway cases (even and odd
    last kept bit), a carry into the exponent, denormals, the largest finite, infinities, NaNs."""
    specials = np.array([0x3F808000, 0x3F818000, 0x3F80_7FFF, 0x3FFF_FFFF, 0x7F7F_FFFF, 0x0000_8000, 0x0001_8000,
                         0x0000_0001, 0x807F_FFFF, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0x7F80_0001, 0xFFFF_FFFF,
                         0x8000_0000, 0x0000_0000], dtype=np.uint32).view(np.float32)
    x = np.concatenate([specials, (rng.standard_normal(SIZE - len(specials)) * 100).astype(np.float32)])
    return x, rng.permutation(x)


@pytest.fixture(scope="module")
def module():
    x, y = Load(x_in, i), Load(y_in, i)
    kernel = Kernel("bf16_stores", (rounded, selected, in_float32, clamped, x_in, y_in), For(i, SIZE, block(
        Store(rounded, i, call("round_bf16", x)),
        Store(selected, i, where(lt(x, y), call("round_bf16", x), call("round_bf16", y))),
        Store(in_float32, i, call("round_bf16", x)),
        Store(clamped, i, call("round_bf16", minimum(maximum(x, Const(0.0, "float32")), Const(6.0, "float32")))),
    ), "vectorized"))
    return build(Program("bf16_store_checks", (kernel,), (x_in, y_in), (rounded, selected, in_float32, clamped)))


def test_the_store_rounds_once_in_c(module):
    body = module.source.text.split("bf16_stores", 1)[1]
    assert body.count("tk_f32_to_bf16(") == 2  # one per store
    assert "tk_f32_to_bf16(tk_bf16_to_f32(" not in body


@pytest.mark.parametrize("seed", [0, 1])
def test_bits_equal_a_single_rounding(module, seed):
    x, y = inputs(np.random.default_rng(seed))
    out = dict(zip(("rounded", "selected", "in_float32", "clamped"), module.run(x, y)))
    np.testing.assert_array_equal(out["rounded"].view(np.uint16), bf16_bits(x))
    want = np.where(x < y, bf16_bits(x), bf16_bits(y))
    np.testing.assert_array_equal(out["selected"].view(np.uint16), want)
    np.testing.assert_array_equal(out["in_float32"].view(np.uint32), bf16_bits(x).astype(np.uint32) << 16)
    # the clamp as the C computes it (NaN stays NaN; a -0 passes, as the compares see it equal to 0)
    relu6 = np.where(x < 0, np.float32(0), np.where(x > 6, np.float32(6), x))
    np.testing.assert_array_equal(out["clamped"].view(np.uint32), bf16_bits(relu6).astype(np.uint32) << 16)


def test_a_float32_rounding_stays_in_32_bit_lanes(module):
    body = module.source.text.split("bf16_stores", 1)[1]
    assert "tk_round_bf16(" in body and "tk_bf16_to_f32(tk_f32_to_bf16(" not in body


def test_a_program_without_roundings_has_no_rounding_helper():
    copy = Kernel("copy", (in_float32, x_in), For(i, SIZE, Store(in_float32, i, Load(x_in, i)), "vectorized"))
    text = build(Program("no_rounding", (copy,), (x_in,), (in_float32,))).source.text
    assert "tk_round_bf16" not in text
