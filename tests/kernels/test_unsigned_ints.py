"""uint16, uint32 and uint64 tensors compiled to C, against numpy's own arithmetic on those types.

Arithmetic wraps as numpy's does (uint16 is computed in C's `int` and cast back, uint32/uint64 in
their own types), comparisons see values above the signed range, and casts round-trip.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk

RNG = np.random.default_rng(2024)
SHAPES = [((3, 17), (17,)), ((1, 5), (4, 1)), ((2, 1, 9), (1, 3, 1))]  # size-1 axes, odd widths, broadcasts


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_unsigned_arithmetic_and_comparisons_match_numpy(dtype, shapes):
    info = np.iinfo(dtype)
    a = RNG.integers(0, info.max, shapes[0], dtype=dtype, endpoint=True)
    b = RNG.integers(1, info.max, shapes[1], dtype=dtype, endpoint=True)
    a.flat[0], b.flat[0] = info.max, 1  # the top value and the wraparound of max + 1

    @tk.jit
    def fn(x, y):
        return (x + y, x - y, x * y, x // y, x % y, x < y, x >= y, x == y, tk.maximum(x, y), tk.minimum(x, y),
                x & y, x | y, x ^ y, x.to(tk.float64), -x)

    got = fn(a, b)
    assert fn.report(a, b).backend == "c"
    with np.errstate(all="ignore"):
        expected = (a + b, a - b, a * b, a // b, a % b, a < b, a >= b, a == b, np.maximum(a, b), np.minimum(a, b),
                    a & b, a | b, a ^ b, a.astype(np.float64), (0 - a).astype(dtype))
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == tk.tensor(e).dtype, f"output {i}"
        np.testing.assert_array_equal(g.numpy(), e, err_msg=f"output {i}")


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_float_to_unsigned_casts_truncate_and_saturate(dtype):
    top = float(np.iinfo(dtype).max)
    x = np.array([0.0, 0.9, 7.5, 1e3, top * 0.5, top * 4.0, -3.0, np.nan], np.float64)

    def cast(v):
        return v.to(getattr(tk, dtype))

    compiled, reference = tk.jit(cast), tk.jit(cast, backend="interpreter")
    expected = np.array([0, 0, 7, 1000, int(top * 0.5), np.iinfo(dtype).max, 0, 0], dtype=dtype)
    np.testing.assert_array_equal(compiled(x).numpy(), expected)
    np.testing.assert_array_equal(reference(x).numpy(), expected)
    assert compiled.report(x).backend == "c"


def test_unsigned_promotion_follows_the_table():
    assert tk.promote_types(tk.uint16, tk.int16) is tk.int32
    assert tk.promote_types(tk.uint32, tk.int8) is tk.int64
    assert tk.promote_types(tk.uint16, tk.uint64) is tk.uint64
    assert tk.promote_types(tk.uint32, tk.float32) is tk.float32
    assert tk.tensor(np.zeros(2, np.uint32)).dtype is tk.uint32
