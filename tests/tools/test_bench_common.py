"""bench_common.agreement: values within tolerance and equal shapes."""
from __future__ import annotations

import numpy as np

from tensorkiln.tools.bench_common import TOLERANCE, agreement


def test_equal_values_agree():
    reference = np.arange(6, dtype=np.float32).reshape(2, 3)
    result = agreement(reference + TOLERANCE / 10, reference)
    assert result["agrees"] and result["max_rel_error"] < TOLERANCE


def test_different_values_disagree():
    reference = np.ones((2, 3), np.float32)
    assert not agreement(reference * 2, reference)["agrees"]


def test_broadcastable_wrong_shape_disagrees():
    reference = np.ones((4, 3), np.float32)
    for wrong in (np.ones((1, 3), np.float32), np.ones((3,), np.float32), np.float32(1.0)):
        result = agreement(wrong, reference)
        assert not result["agrees"] and result["max_rel_error"] == float("inf")
    assert not agreement(np.ones((4, 3, 1), np.float32), np.ones((4, 3), np.float32))["agrees"]


def test_empty_outputs_of_equal_shape_agree():
    assert agreement(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32))["agrees"]


def test_tensor_outputs_are_compared_as_arrays():
    class FakeTensor:
        def numpy(self):
            return np.ones((2, 2), np.float32)
    assert agreement(FakeTensor(), np.ones((2, 2), np.float32))["agrees"]
    assert not agreement(FakeTensor(), np.ones((2,), np.float32))["agrees"]
