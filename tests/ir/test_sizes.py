"""Shapes whose element count or byte size does not fit a 64-bit index are refused when traced."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tensorkiln as tk

THIS_FILE = os.path.basename(__file__)


def test_an_expand_past_int64_elements_is_a_shape_error_eagerly():
    s = tk.tensor(np.float32(1.0))
    with pytest.raises(tk.ShapeError, match=r"expand: .*18446744073709551616 elements.*64-bit index") as err:
        s.expand(2 ** 32, 2 ** 32)
    assert THIS_FILE in str(err.value)  # the user's line


def test_an_expand_past_int64_elements_is_a_shape_error_when_traced():
    f = tk.jit(lambda s: s.expand(2 ** 32, 2 ** 32).sum())
    with pytest.raises(tk.ShapeError, match="does not fit a 64-bit index"):
        f(np.array(1.0, np.float32))


def test_the_byte_size_counts_too():
    s = tk.tensor(np.zeros((1, 1), np.float64))
    with pytest.raises(tk.ShapeError, match="bytes"):
        s.expand(2 ** 31, 2 ** 30)  # 2**61 elements fit int64, their 2**64 bytes do not
    assert s.expand(2 ** 30, 2 ** 29).shape == (2 ** 30, 2 ** 29)  # an eager view of 2**62 bytes is fine


def test_size_never_wraps():
    assert tk.ir.ops.TensorType((2 ** 40, 2 ** 40), tk.float32).size == 2 ** 80
