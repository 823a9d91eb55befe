"""Dtypes, storage conversion (bfloat16 rounding) and the type-promotion rule of tensorkiln/dtypes.py."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorkiln as tk
from tensorkiln import dtypes as dt

from helpers import ALL_DTYPES, assert_close, stored

B, U8, I8, I16, I32, I64, F16, BF16, F32, F64 = (tk.bool, tk.uint8, tk.int8, tk.int16, tk.int32, tk.int64,
                                                 tk.float16, tk.bfloat16, tk.float32, tk.float64)
ORDER = (B, U8, I8, I16, I32, I64, F16, BF16, F32, F64)

# The full tensor-tensor promotion table (row dtype with column dtype), written out by hand from the
# rule in the dtypes.py docstring: bool < integer < floating; the wider type of the higher category;
# float16 with bfloat16 gives float32; uint8 with int8 gives int16 (tests/test_small_int_dtypes.py
# checks every pair against torch.promote_types).
PROMOTION_TABLE = {
    #       bool  uint8 int8  int16 int32 int64 f16   bf16  f32   f64
    B:    (B,    U8,   I8,   I16,  I32,  I64,  F16,  BF16, F32,  F64),
    U8:   (U8,   U8,   I16,  I16,  I32,  I64,  F16,  BF16, F32,  F64),
    I8:   (I8,   I16,  I8,   I16,  I32,  I64,  F16,  BF16, F32,  F64),
    I16:  (I16,  I16,  I16,  I16,  I32,  I64,  F16,  BF16, F32,  F64),
    I32:  (I32,  I32,  I32,  I32,  I32,  I64,  F16,  BF16, F32,  F64),
    I64:  (I64,  I64,  I64,  I64,  I64,  I64,  F16,  BF16, F32,  F64),
    F16:  (F16,  F16,  F16,  F16,  F16,  F16,  F16,  F32,  F32,  F64),
    BF16: (BF16, BF16, BF16, BF16, BF16, BF16, F32,  BF16, F32,  F64),
    F32:  (F32,  F32,  F32,  F32,  F32,  F32,  F32,  F32,  F32,  F64),
    F64:  (F64,  F64,  F64,  F64,  F64,  F64,  F64,  F64,  F64,  F64),
}

# Tensor dtype combined with a weak Python scalar: (bool scalar, int scalar, float scalar).
SCALAR_TABLE = {
    B:    (B,    I64,  F32),
    U8:   (U8,   U8,   F32),
    I8:   (I8,   I8,   F32),
    I16:  (I16,  I16,  F32),
    I32:  (I32,  I32,  F32),
    I64:  (I64,  I64,  F32),
    F16:  (F16,  F16,  F16),
    BF16: (BF16, BF16, BF16),
    F32:  (F32,  F32,  F32),
    F64:  (F64,  F64,  F64),
}
SCALARS = (True, 3, 0.5)


def test_table_is_symmetric_and_complete():
    assert set(PROMOTION_TABLE) == set(ALL_DTYPES)
    for i, a in enumerate(ORDER):
        for j, b in enumerate(ORDER):
            assert PROMOTION_TABLE[a][j] == PROMOTION_TABLE[b][i]


@pytest.mark.parametrize("a", ORDER, ids=lambda d: d.name)
@pytest.mark.parametrize("b", ORDER, ids=lambda d: d.name)
def test_promote_types_table(a, b):
    expected = PROMOTION_TABLE[a][ORDER.index(b)]
    assert tk.promote_types(a, b) == expected
    x, y = tk.zeros(2, dtype=a), tk.ones(1, dtype=b)
    # Ops that accept every dtype show the promoted dtype in their result.
    assert tk.maximum(x, y).dtype == expected
    assert tk.where(tk.tensor([True, False]), x, y).dtype == expected
    assert tk.cat([x, y]).dtype == expected
    assert (x == y).dtype == tk.bool
    if not (a.is_bool and b.is_bool):
        assert (x + y).dtype == expected
        assert (x * y).dtype == expected


@pytest.mark.parametrize("a", ORDER, ids=lambda d: d.name)
@pytest.mark.parametrize("scalar", SCALARS, ids=["bool", "int", "float"])
def test_weak_scalar_table(a, scalar):
    expected = SCALAR_TABLE[a][SCALARS.index(scalar)]
    assert dt.result_type([a], [dt.scalar_category(scalar)]) == expected
    x = tk.ones(3, dtype=a)
    assert tk.maximum(x, scalar).dtype == expected
    assert tk.where(tk.tensor([True, False, True]), x, scalar).dtype == expected
    assert (x < scalar).dtype == tk.bool
    if not (a.is_bool and isinstance(scalar, bool)):
        assert (x + scalar).dtype == expected
        assert (scalar + x).dtype == expected
        assert (scalar * x).dtype == expected


def test_promote_types_is_associative_over_many():
    assert tk.promote_types(I8, F16, BF16) == F32
    assert tk.promote_types(U8, I8, I16) == I16 and tk.promote_types(B, U8, I8) == I16
    assert tk.promote_types(B, B, I8) == I8
    assert tk.promote_types(I64, BF16, F16) == F32


def test_scalars_only():
    assert dt.result_type([], [1]) == tk.int64
    assert dt.result_type([], [2]) == tk.float32
    assert dt.result_type([], [0]) == tk.bool
    assert dt.result_type([], [0, 1, 2]) == tk.float32
    assert tk.tensor(3).dtype == tk.int64
    assert tk.tensor(3.0).dtype == tk.float32
    assert tk.tensor(True).dtype == tk.bool


def test_weak_scalar_wraps_within_category():
    # docs/dtypes.md: int8_tensor + 1000 stays int8, wrapping as in C.
    x = tk.tensor(np.array([1, 100], dtype=np.int8))
    y = x + 1000
    assert y.dtype == tk.int8
    np.testing.assert_array_equal(y.numpy(), (np.array([1, 100]) + 1000).astype(np.int8))


def test_float16_scalar_is_rounded_to_float16():
    x = tk.tensor(np.array([1.0], dtype=np.float16))
    y = x * 0.1
    assert y.dtype == tk.float16
    assert y.numpy()[0] == np.float16(np.float32(np.float16(0.1)))


def test_float_only_ops_compute_ints_in_float32():
    i = tk.tensor([1, 2, 3])
    for out in (i / 2, 2 / i, i / i, i.exp(), i.sqrt(), i.sigmoid(), i.mean(), i.var(), i.softmax(0),
                i.log(), i.sin(), i.tanh(), i.erf()):
        assert out.dtype == tk.float32
    assert tk.tensor([True]).exp().dtype == tk.float32
    assert tk.tensor(np.array([1], np.int8)).sum().dtype == tk.int64
    assert tk.tensor([True, True]).sum().dtype == tk.int64
    assert tk.tensor([True, True]).prod().dtype == tk.int64
    assert tk.tensor(np.array([1], np.int32)).prod().dtype == tk.int64
    assert tk.tensor([1.0], dtype=tk.float16).sum().dtype == tk.float16
    assert (tk.tensor([1.0], dtype=tk.float64) / 2).dtype == tk.float64


# ---- DType objects and spellings ----------------------------------------------------------

@pytest.mark.parametrize("spelling, expected", [
    ("float32", F32), ("torch.float32", F32), ("float", F32), ("f32", F32), (float, F32),
    (np.float32, F32), (np.dtype("float32"), F32), ("double", F64), ("f64", F64), (np.float64, F64),
    ("float16", F16), ("half", F16), (np.float16, F16), ("bfloat16", BF16), ("torch.bfloat16", BF16),
    ("int8", I8), (np.int8, I8), ("int32", I32), ("int", I32), ("int64", I64), ("long", I64),
    ("uint8", U8), ("torch.uint8", U8), (np.uint8, U8), ("byte", U8), ("int16", I16), ("torch.int16", I16),
    ("short", I16), (np.int16, I16), (tk.short, I16),
    (int, I64), (np.int64, I64), ("bool", B), ("bool_", B), (bool, B), (np.bool_, B),
    (tk.float, F32), (tk.double, F64), (tk.half, F16), (tk.long, I64), (tk.int, I32), (tk.bool, B),
    (tk.bool_, B),
])
def test_as_dtype_spellings(spelling, expected):
    assert dt.as_dtype(spelling) is expected
    assert tk.zeros(1, dtype=spelling).dtype is expected


@pytest.mark.parametrize("bad", ["float8", "complex64", np.complex64, object, "torch.quint8"])
def test_as_dtype_rejects_unknown(bad):
    with pytest.raises(TypeError):
        dt.as_dtype(bad)


@pytest.mark.parametrize("np_dtype, expected", [
    (np.uint8, U8), (np.uint16, tk.uint16), (np.uint32, tk.uint32), (np.uint64, tk.uint64), (np.int16, I16),
    (np.float16, F16), (np.float32, F32), (np.float64, F64), (np.bool_, B), (np.int8, I8),
])
def test_from_numpy_dtype(np_dtype, expected):
    assert dt.from_numpy_dtype(np_dtype) is expected
    assert tk.tensor(np.zeros(2, dtype=np_dtype)).dtype is expected


def test_from_numpy_dtype_rejects_complex_and_strings():
    with pytest.raises(TypeError):
        dt.from_numpy_dtype(np.complex128)
    with pytest.raises(TypeError):
        tk.tensor(np.array(["a"]))


@pytest.mark.parametrize("d", ALL_DTYPES, ids=lambda d: d.name)
def test_dtype_properties(d):
    assert sum([d.is_bool, d.is_integer, d.is_floating]) == 1
    assert d.itemsize == (1 if d.is_bool else d.bits // 8)
    assert repr(d) == f"tk.{d.name}"
    assert d.compute == (F32 if d in (F16, BF16) else d)
    t = tk.zeros(2, 3, dtype=d)
    assert t._value.dtype == d.storage
    assert t.type.nbytes == 6 * d.itemsize
    assert str(t.type) == f"{d.short}[2,3]"


def test_dtypes_are_hashable_and_compare_by_identity_of_fields():
    assert len({*ALL_DTYPES}) == 10
    assert F16 != BF16 and F16.bits == BF16.bits


def test_finfo_identities():
    assert dt.finfo_min(F32) == -np.inf and dt.finfo_max(BF16) == np.inf
    assert dt.finfo_min(I8) == -128 and dt.finfo_max(I8) == 127
    assert dt.finfo_min(U8) == 0 and dt.finfo_max(U8) == 255
    assert dt.finfo_min(I16) == -32768 and dt.finfo_max(I16) == 32767
    assert dt.finfo_min(B) is False and dt.finfo_max(B) is True


# ---- bfloat16 storage -----------------------------------------------------------------------

def _bf16_reference(x: float) -> float:
    """Round a float32 value to bfloat16 with round-half-to-even, written from the definition."""
    if math.isnan(x) or math.isinf(x) or x == 0.0:
        return x
    e = max(math.floor(math.log2(abs(x))), -126)
    ulp = 2.0 ** (e - 7)
    q = x / ulp
    r = math.floor(q)
    diff = q - r
    if diff > 0.5 or (diff == 0.5 and r % 2 == 1):
        r += 1
    value = math.copysign(r * ulp, x)  # a value that rounds to zero keeps its sign
    return math.copysign(math.inf, x) if abs(value) >= 2.0 ** 128 else value


@given(st.floats(width=32, allow_nan=True, allow_infinity=True))
def test_bfloat16_rounding_matches_definition(x):
    bits = dt.bf16_bits_from_f32(np.array([x], dtype=np.float32))
    assert bits.dtype == np.uint16
    got = float(dt.f32_from_bf16_bits(bits)[0])
    want = _bf16_reference(float(np.float32(x)))
    if math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == want and math.copysign(1, got) == math.copysign(1, want)


def test_bfloat16_ties_round_to_even():
    one = 1.0
    values = np.array([one + 2 ** -8, one + 3 * 2 ** -8, -(one + 2 ** -8), 3.4028235e38, 1.0 + 2 ** -9],
                      dtype=np.float32)
    got = tk.tensor(values, dtype=tk.bfloat16).numpy()
    np.testing.assert_array_equal(got, np.array([1.0, 1.0 + 2 ** -6, -1.0, np.inf, 1.0], dtype=np.float32))


def test_bfloat16_special_values():
    values = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-45], dtype=np.float32)
    t = tk.tensor(values, dtype=tk.bfloat16)
    assert t._value.dtype == np.uint16
    out = t.numpy()
    assert out.dtype == np.float32
    assert np.isnan(out[0]) and out[1] == np.inf and out[2] == -np.inf
    assert out[3] == 0 and np.signbit(out[3]) and not np.signbit(out[4])
    assert out[5] == _bf16_reference(float(np.float32(1e-40)))
    assert out[6] == 0 and np.signbit(out[6])  # the smallest negative subnormal rounds to -0.0


def test_storage_roundtrip_every_dtype():
    data = np.array([-3.75, -1.0, 0.0, 0.5, 2.25, 100.0])
    for d in ALL_DTYPES:
        t = tk.tensor(data, dtype=d)
        assert t.dtype is d
        expected = np.trunc(data) if d.is_integer else (data != 0 if d.is_bool else data)
        assert_close(t, expected, d)


@pytest.mark.parametrize("d", [F16, BF16], ids=lambda d: d.name)
def test_16_bit_arithmetic_runs_in_float32_and_rounds_once(d, rng):
    a = rng.uniform(-4, 4, 200)
    b = rng.uniform(-4, 4, 200)
    ta, tb = tk.tensor(a, dtype=d), tk.tensor(b, dtype=d)
    fa, fb = stored(a, d).astype(np.float32), stored(b, d).astype(np.float32)
    for got, exact in (((ta + tb), fa + fb), ((ta * tb), fa * fb), ((ta / tb), fa / fb),
                       (ta.exp(), np.exp(fa)), ((ta - tb).abs(), np.abs(fa - fb))):
        assert got.dtype is d
        np.testing.assert_array_equal(got.numpy(), stored(exact, d).astype(np.float32))


# ---- casts ------------------------------------------------------------------------------------

def test_cast_float_to_int_truncates_and_saturates():
    x = tk.tensor(np.array([-2.7, -0.5, 0.5, 2.7, 1e10, -1e10, np.inf, -np.inf, np.nan]))
    np.testing.assert_array_equal(x.to(tk.int8).numpy(), [-2, 0, 0, 2, 127, -128, 127, -128, 0])
    np.testing.assert_array_equal(x.to(tk.int32).numpy(),
                                  [-2, 0, 0, 2, 2 ** 31 - 1, -2 ** 31, 2 ** 31 - 1, -2 ** 31, 0])
    assert x.to(tk.int64).numpy()[3] == 2


def test_cast_float_to_small_ints_saturates():
    x = tk.tensor(np.array([-2.7, -0.5, 0.5, 255.9, 256.0, 1e10, -1e10, np.inf, -np.inf, np.nan]))
    np.testing.assert_array_equal(x.to(tk.uint8).numpy(), [0, 0, 0, 255, 255, 255, 0, 255, 0, 0])
    np.testing.assert_array_equal(x.to(tk.int16).numpy(),
                                  [-2, 0, 0, 255, 256, 32767, -32768, 32767, -32768, 0])


def test_cast_int_to_narrower_int_wraps():
    x = tk.tensor([300, -129, 127, 70000])
    for d in (tk.int8, tk.uint8, tk.int16):
        np.testing.assert_array_equal(x.to(d).numpy(), np.array([300, -129, 127, 70000]).astype(d.storage))


def test_cast_to_bool_is_nonzero():
    x = tk.tensor([0.0, -0.0, 0.1, np.nan, -3.0])
    np.testing.assert_array_equal(x.bool().numpy(), [False, False, True, True, True])
    np.testing.assert_array_equal(tk.tensor([0, 2, -1]).bool().numpy(), [False, True, True])


@pytest.mark.parametrize("src", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("dst", ALL_DTYPES, ids=lambda d: d.name)
def test_cast_matrix(src, dst):
    data = np.array([0.0, 1.0, -2.0, 3.0, 100.0, -100.0])
    x = tk.tensor(data, dtype=src)
    y = x.to(dst)
    assert y.dtype is dst and y.shape == (6,)
    values = stored(data, src)
    if dst.is_bool:
        expected = values != 0
    elif dst.is_integer and src.is_floating:  # float -> int saturates (docs/dtypes.md)
        info = np.iinfo(dst.storage)
        expected = np.clip(np.asarray(values), info.min, info.max).astype(np.int64).astype(dst.storage)
    elif dst.is_integer:  # int -> int wraps
        expected = np.asarray(values).astype(np.int64).astype(dst.storage)
    else:
        expected = stored(np.asarray(values, dtype=np.float64), dst)
    assert_close(y, expected, dst)
    assert x.to(src) is x  # a no-op cast returns the tensor itself


def test_cast_method_spellings():
    x = tk.tensor([1.5, -2.5])
    assert x.float().dtype is F32 and x.double().dtype is F64 and x.half().dtype is F16
    assert x.bfloat16().dtype is BF16 and x.int().dtype is I32 and x.long().dtype is I64
    assert x.bool().dtype is B and x.astype("float64").dtype is F64 and x.to(np.int8).dtype is I8
    assert x.byte().dtype is U8 and x.short().dtype is I16
    assert x.type_as(tk.zeros(1, dtype=tk.int8)).dtype is I8
