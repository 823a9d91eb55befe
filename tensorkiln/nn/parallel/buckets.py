"""Gradient buckets: parameters grouped so that one all-reduce carries many small gradients.

One collective per parameter pays the network latency once per parameter; one
per bucket of ~25 MB pays it a few times per step while each message is still
large enough to run at full bandwidth. Parameters go in reverse order (the
order backward produces their gradients in, roughly) and one dtype per bucket.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import dtypes as dt
from ...frontend.functions import concat
from ...frontend.tensor import Tensor
from ..modules.module import Parameter


@dataclass
class Bucket:
    """Parameters whose gradients travel together, all of one dtype."""

    params: list[Parameter]

    @property
    def dtype(self) -> dt.DType:
        return self.params[0].dtype

    @property
    def sizes(self) -> list[int]:
        return [p.numel() for p in self.params]


def plan_buckets(params: list[Parameter], cap_bytes: int) -> list[Bucket]:
    """Buckets of at most `cap_bytes` (a larger parameter gets one of its own), in reverse order of `params`."""
    buckets: list[Bucket] = []
    open_bucket: dict[dt.DType, tuple[Bucket, int]] = {}
    for p in reversed(params):
        size = p.numel() * p.dtype.itemsize
        bucket, used = open_bucket.get(p.dtype, (None, 0))
        if bucket is None or used + size > cap_bytes:
            bucket, used = Bucket([]), 0
            buckets.append(bucket)
        bucket.params.append(p)
        open_bucket[p.dtype] = (bucket, used + size)
    return buckets


def flatten_arrays(arrays: list[np.ndarray]) -> np.ndarray:
    """One contiguous vector of the arrays' elements."""
    return np.concatenate([np.ascontiguousarray(a).reshape(-1) for a in arrays])


def unflatten_arrays(flat: np.ndarray, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    """The pieces of `flat` in the given shapes (views, no copy)."""
    pieces, start = [], 0
    for shape in shapes:
        count = int(np.prod(shape, dtype=np.int64))
        pieces.append(flat[start:start + count].reshape(shape))
        start += count
    return pieces


def flatten_tensors(tensors: list[Tensor]) -> Tensor:
    """One vector of the tensors' elements (a graph op when they are traced)."""
    return concat([t.reshape(-1) for t in tensors])


def unflatten_tensor(flat: Tensor, shapes: list[tuple[int, ...]]) -> list[Tensor]:
    pieces, start = [], 0
    for shape in shapes:
        count = int(np.prod(shape, dtype=np.int64))
        pieces.append(flat[start:start + count].reshape(shape))
        start += count
    return pieces
