"""Selects in generated C: branch-free where both operands are safe to evaluate, and bool loads
read as bytes, so loops that select on a stored mask (dropout) vectorize."""
from __future__ import annotations

from pathlib import Path

import numpy as np

import tensorkiln as tk
import tensorkiln.nn.functional as F


def _source(f, *args) -> str:
    return Path(f.report(*args).source_path).read_text()


def test_select_on_a_stored_mask_is_branch_free_and_right():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((64, 100), dtype=np.float32), rng.standard_normal((64, 100), dtype=np.float32)

    def fn(x, y):
        keep = x * y > 0.1  # read by two kernels below: stored as a bool buffer
        return (tk.where(keep, x.relu() * 1.5, 0.0) @ y.T, tk.where(keep, y, -x).sum(-1))
    f = tk.jit(fn)
    got = f(x, y)
    want = tk.jit(fn, backend="interpreter")(x, y)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-4)
    text = _source(f, x, y)
    assert "tk_select_float32(" in text and "(const uint8_t *)" in text


def test_a_padding_select_keeps_its_clamped_load_and_is_right():
    x = np.random.default_rng(1).standard_normal((1, 3, 9, 9)).astype(np.float32)
    w = np.random.default_rng(2).standard_normal((3, 3, 3, 3)).astype(np.float32)
    fn = lambda x, w: F.conv2d(x, w, padding=2, dilation=2)  # noqa: E731
    np.testing.assert_allclose(tk.jit(fn)(x, w).numpy(), tk.jit(fn, backend="interpreter")(x, w).numpy(),
                               rtol=1e-4, atol=1e-4)


def test_debug_builds_keep_the_ternary():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    f = tk.jit(lambda x: tk.where(x > 5, x, 0.0), debug=True)
    np.testing.assert_array_equal(f(x).numpy(), np.where(x > 5, x, 0))
    assert _source(f, x).count("tk_select_float32(") == 1  # the prelude's definition only


def test_select_reading_through_a_constant_division_is_branch_free_and_right():
    """A max-pool gradient reads the pooled value at `c/2`: a division by a constant cannot trap,
    so the select evaluates both operands (a blend) instead of branching per element."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((37, 22), dtype=np.float32)
    p = rng.standard_normal((37, 11), dtype=np.float32)

    def fn(x, p):
        widened = p.reshape(37, 11, 1).expand(37, 11, 2).reshape(37, 22)  # element (r, c) is p[r, c // 2]
        return tk.where(x > 0.0, widened * 2.0, 0.0)
    f = tk.jit(fn)
    np.testing.assert_allclose(f(x, p).numpy(), np.where(x > 0, np.repeat(p, 2, axis=1) * 2.0, 0.0), rtol=1e-6)
    text = _source(f, x, p)
    assert text.count("tk_select_float32(") > 1 and "/ 2" in text


def test_saturating_float_to_int_cast_writes_its_operand_once_and_is_right():
    """A fake-quantization round trip (clamp(round(x / s) + z) -> uint8 -> float): the cast's NaN,
    range and truncation tests are one inline helper call, so the operand's C appears once."""
    x = np.random.default_rng(3).standard_normal((8, 300)).astype(np.float32) * 9
    x[0, :4] = [np.nan, np.inf, -np.inf, 1e30]

    def fn(x):
        q = ((x / 0.05).round() + 128.0).clamp(0.0, 255.0).to(tk.uint8)
        return (q.to(tk.float32) - 128.0) * 0.05, (x * 40.0).to(tk.int8), (x * 1e4).to(tk.int16)
    f = tk.jit(fn)
    for got, want in zip(f(x), tk.jit(fn, backend="interpreter")(x)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    text = _source(f, x)
    # the clamp to [0, 255] leaves only the NaN test to the cast; the unclamped casts saturate
    assert "tk_to_uint8_float32_in_range(tk_clamp_float32(" in text
    for target in ("int8", "int16"):
        assert f"= tk_to_{target}_float32(" in text
    assert text.count("rintf(in_x") == 1


def test_a_clamp_within_the_range_casts_with_the_nan_test_alone():
    """clamp(x, lo, hi) -> integer: where [lo, hi] lies within the type's range the cast is a conversion
    after a NaN test (NaN -> 0, as the saturating cast); bounds past the range, or an integer type an
    int32 does not hold, keep the saturating helper. Values at and past the bounds, NaN and infinities."""
    x = np.array([np.nan, np.inf, -np.inf, -0.7, -0.0, 0.2, 126.9, 127.0, 127.5, 254.99, 255.0, 1e30, -1e30,
                  32767.5, -32768.9, 3.5], np.float32)

    def fn(x):
        return (x.clamp(0.0, 255.0).to(tk.uint8), x.clamp(-128.0, 127.0).to(tk.int8),
                x.clamp(-32768.0, 32767.0).to(tk.int16), x.clamp(0.0, 65535.0).to(tk.uint16),
                x.clamp(-300.0, 300.0).to(tk.int8), x.clamp(0.0, 255.0).to(tk.int32))
    f = tk.jit(fn)
    for got, want in zip(f(x), tk.jit(fn, backend="interpreter")(x)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    text = _source(f, x)
    for target in ("uint8", "int8", "int16", "uint16"):
        assert f"= tk_to_{target}_float32_in_range(tk_clamp_float32(" in text, target
    assert "= tk_to_int8_float32(tk_clamp_float32(" in text  # [-300, 300] is wider than int8
    assert "= tk_to_int32_float32(tk_clamp_float32(" in text  # no in-range helper for int32
