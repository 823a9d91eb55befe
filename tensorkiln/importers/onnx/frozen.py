"""A graph input read as a value (a Reshape's shape, TopK's k): hashable, so tk.jit makes its value part
of the call signature and compiles one specialization per value."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import dtypes as dt


@dataclass(frozen=True)
class FrozenValue:
    """A value-specialized input: hashable, so tk.jit makes its value part of the signature."""

    data: bytes
    shape: tuple
    dtype: dt.DType

    @staticmethod
    def of(array: np.ndarray, dtype: dt.DType) -> "FrozenValue":
        array = np.array(array, dtype=dtype.storage, order="C")  # (ascontiguousarray makes a 0-d array 1-d)
        return FrozenValue(array.tobytes(), tuple(array.shape), dtype)

    @property
    def array(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype=self.dtype.storage).reshape(self.shape).copy()
