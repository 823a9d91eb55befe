"""shift_left and shift_right: reference and compiled C against shifts of Python integers, every count.

Counts cover the whole range of the rule: negative, zero, in range, the bit width and beyond
(ONNX's BitShift: 0 for such a left shift, the sign fill for a right one).
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.frontend.tensor import apply

RNG = np.random.default_rng(99)
DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64"]


def _python_shift(value: int, count: int, bits: int, signed: bool, left: bool) -> int:
    """The rule on Python integers (unbounded, so wrapping is written out)."""
    if not 0 <= count < bits:
        return 0 if left or value >= 0 else -1
    result = (value << count) % (1 << bits) if left else value >> count
    if signed and result >= 1 << (bits - 1):
        result -= 1 << bits
    return result


def _expected(a: np.ndarray, counts: np.ndarray, left: bool) -> np.ndarray:
    a, counts = np.broadcast_arrays(a, counts)
    info = np.iinfo(a.dtype)
    flat = [_python_shift(int(v), int(c), info.bits, info.min < 0, left) for v, c in zip(a.flat, counts.flat)]
    return np.array(flat, dtype=object).astype(a.dtype).reshape(a.shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", [((3, 13), (13,)), ((1, 7), (5, 1))], ids=str)
def test_shifts_match_python_integers_for_every_count(dtype, shapes):
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, shapes[0], dtype=dtype, endpoint=True)
    low = -3 if info.min < 0 else 0
    counts = RNG.integers(low, info.bits + 4, shapes[1]).astype(dtype)
    counts.flat[:3] = [0, info.bits - 1, info.bits]  # the edges of the range

    def shifts(x, n):
        return apply("shift_left", [x, n]), apply("shift_right", [x, n])

    compiled, reference = tk.jit(shifts), tk.jit(shifts, backend="interpreter")
    for runner in (compiled, reference):
        left, right = runner(a, counts)
        np.testing.assert_array_equal(left.numpy(), _expected(a, counts, left=True))
        np.testing.assert_array_equal(right.numpy(), _expected(a, counts, left=False))
    assert compiled.report(a, counts).backend == "c"


def test_shifts_refuse_floats_naming_the_op():
    x = tk.tensor(np.ones(3, np.float32))
    with pytest.raises(tk.DTypeError, match="shift_left"):
        apply("shift_left", [x, x])


BITCASTS = [("float32", "int32"), ("int32", "float32"), ("float32", "uint32"), ("uint32", "float32"),
            ("float64", "int64"), ("int64", "float64"), ("float64", "uint64"), ("uint64", "float64"),
            ("int8", "uint8"), ("uint16", "int16"), ("bool", "uint8")]


def _bit_patterns(dtype: str, shape) -> np.ndarray:
    """Random values of `dtype` with its special values first: for floats -0, +-inf, NaN, subnormals."""
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if dtype.startswith("float"):
        values = RNG.standard_normal(shape).astype(dtype) * 1e3
        tiny = np.finfo(dtype).smallest_subnormal
        values.flat[:6] = [-0.0, np.inf, -np.inf, np.nan, tiny, -tiny][:values.size]
        return values
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("source,target", BITCASTS)
def test_bitcast_keeps_every_bit(source, target):
    x = _bit_patterns(source, (3, 7) if source != "int32" else ())  # a 0-d tensor too

    def reinterpret(v):
        return apply("bitcast", [v], dtype=getattr(tk, target if target != "bool" else "bool"))

    compiled, reference = tk.jit(reinterpret), tk.jit(reinterpret, backend="interpreter")
    for runner in (compiled, reference):
        got = runner(x).numpy()
        assert got.dtype == np.dtype(target)
        assert got.shape == x.shape
        np.testing.assert_array_equal(got.reshape(-1).view(np.uint8), x.reshape(-1).view(np.uint8))  # bytes: NaNs too
    assert compiled.report(x).backend == "c"


@pytest.mark.parametrize("source,target,message", [
    ("float32", "int64", "differ in width"), ("float16", "int16", "float16"), ("uint8", "bool", "only 0 and 1")])
def test_bitcast_refusals_name_the_types(source, target, message):
    x = tk.tensor(np.zeros(3, source))
    with pytest.raises(tk.DTypeError, match=message):
        apply("bitcast", [x], dtype=getattr(tk, target))
