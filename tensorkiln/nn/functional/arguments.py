"""Argument helpers shared by the functional operations: int-or-pair sizes, floating inputs."""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import ShapeError, at_user_line
from ...frontend.tensor import Tensor


def _pair(value, name: str) -> tuple[int, int]:
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        return value[0], value[0]
    if len(value) != 2:
        raise ShapeError(at_user_line(f"{name} must be an int or a pair, got {value}"))
    return value


def _floating(x: Tensor) -> Tensor:
    return x if x.dtype.is_floating else x.to(dt.DEFAULT_FLOAT)
