"""How many times compiled code has updated an array in place.

A jitted function may bake a parameter's array into its graph as a constant,
valid while the parameter still holds that array with those values. Eager
updates replace a tensor's array, so identity alone would tell; a compiled
training step instead writes the new values into the same array (no
allocation, no copy), and counts the write here so the baked constant is
seen to be stale.
"""
from __future__ import annotations

import numpy as np

_writes: dict[int, int] = {}  # id(array) -> in-place writes; a baked array is kept alive by its record


def count_write(array: np.ndarray) -> None:
    """Note that `array`'s contents were just replaced in place."""
    _writes[id(array)] = _writes.get(id(array), 0) + 1


def write_count(array: np.ndarray) -> int:
    """In-place writes to `array` so far."""
    return _writes.get(id(array), 0)


def write_counts() -> dict[int, int]:
    """The table itself (id(array) -> writes), for code that checks counts without a call per array
    (the C fast path of warm calls, runtime/fastcall.c)."""
    return _writes
