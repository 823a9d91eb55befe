"""The float64 reference of a tuning workload, computed once and kept in the cache root.

A fresh measuring process (every tuning run, and every restart after a
crashed candidate) needs the exact answer its candidates are checked
against; for SGEMM 2048 that is a float64 product of 2048^3 multiply-adds,
seconds on a loaded machine. It is stored as `references/<key>.npy` under
the cache root, keyed by the workload, the seed and a digest of the
operands' bytes, so a changed operand generator can never be answered with
an old reference. A file that cannot be read or does not match is computed
again and replaced.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable

import numpy as np

from ..runtime.cache_root import inside, make_private_dir, usable_root

MIN_ELEMENTS = 1 << 16  # smaller references are cheaper to compute than to read


def reference_path(workload: str, seed: int, operands: list[np.ndarray]) -> Path:
    """Where the reference of these operands is kept."""
    h = hashlib.sha256(f"{workload}\0{seed}\0".encode())
    for array in operands:
        h.update(f"{array.dtype}{array.shape}".encode())
        h.update(np.ascontiguousarray(array).view(np.uint8).data)
    return inside(make_private_dir(usable_root() / "references"), h.hexdigest(), ".npy")


def cached_reference(workload: str, seed: int, operands: list[np.ndarray],
                     compute: Callable[[], np.ndarray]) -> np.ndarray:
    """`compute()` (a float64 array), read from the cache when these operands' reference was kept."""
    if sum(a.size for a in operands) < MIN_ELEMENTS:
        return compute()
    try:
        path = reference_path(workload, seed, operands)
    except (OSError, ValueError):
        return compute()
    try:
        kept = np.load(path, allow_pickle=False)
        if kept.dtype == np.float64:
            return kept
    except (OSError, ValueError):
        pass
    reference = np.asarray(compute(), dtype=np.float64)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        with open(partial, "wb") as stream:
            np.save(stream, reference, allow_pickle=False)
        os.replace(partial, path)  # whole or not at all: another process may read it now
    except OSError:
        partial.unlink(missing_ok=True)
    return reference


__all__ = ["MIN_ELEMENTS", "cached_reference", "reference_path"]
