"""pad (constant, reflect, replicate, circular), embedding lookup and one_hot."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError, at_user_line
from ...frontend.functions import concat, flip, where
from ...frontend.tensor import Tensor, apply, as_tensor


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad trailing dims: `pad` = (last_lo, last_hi, second_last_lo, ...); negative values crop."""
    x = as_tensor(input)
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ShapeError(at_user_line(f"pad: {len(pad)} values do not describe (before, after) pairs "
                                      f"for a tensor of rank {x.ndim}"))
    pairs = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        pairs[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if any(lo < 0 or hi < 0 for lo, hi in pairs):  # crop first
        index = tuple(slice(-lo if lo < 0 else 0, x.shape[d] + hi if hi < 0 else x.shape[d])
                      for d, (lo, hi) in enumerate(pairs))
        x = x[index]
        pairs = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
    if mode == "constant":
        fill = 0 if value is None else value
        if not any(lo or hi for lo, hi in pairs):
            return x
        return apply("pad", [x], pads=tuple(pairs), value=fill)
    for d, (lo, hi) in enumerate(pairs):
        if lo or hi:
            x = _pad_edges(x, d, lo, hi, mode)
    return x


def _pad_edges(x: Tensor, d: int, lo: int, hi: int, mode: str) -> Tensor:
    n = x.shape[d]

    def take(start, stop):
        index = [slice(None)] * x.ndim
        index[d] = slice(start, stop)
        return x[tuple(index)]

    if mode == "reflect":
        if lo >= n or hi >= n:
            raise ShapeError(at_user_line(f"pad: reflect padding ({lo}, {hi}) must be smaller than the "
                                          f"dimension size {n}"))
        parts = [flip(take(1, lo + 1), d), x, flip(take(n - 1 - hi, n - 1), d)]
    elif mode == "replicate":
        edge_shape = list(x.shape)
        parts = []
        if lo:
            edge_shape[d] = lo
            parts.append(take(0, 1).expand(edge_shape))
        parts.append(x)
        if hi:
            edge_shape[d] = hi
            parts.append(take(n - 1, n).expand(edge_shape))
    elif mode == "circular":
        if lo > n or hi > n:
            raise ShapeError(at_user_line(f"pad: circular padding ({lo}, {hi}) exceeds dimension size {n}"))
        parts = [take(n - lo, n), x, take(0, hi)]
    else:
        raise ValueError(f"pad: mode must be constant, reflect, replicate or circular, got {mode!r}")
    return concat([p for p in parts if p.shape[d]], d)


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm=None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of `weight` selected by integer `input`: output shape input.shape + (dim,)."""
    index, table = as_tensor(input), as_tensor(weight)
    if not index.dtype.is_integer:
        raise DTypeError(at_user_line(f"embedding: indices must be integers, got {index.dtype.name}"))
    if table.ndim != 2:
        raise ShapeError(at_user_line(f"embedding: weight must be 2-d, got {list(table.shape)}"))
    if padding_idx is not None and table.requires_grad:  # the padding row gets no gradient (PyTorch)
        padding = (index == (padding_idx % table.shape[0])).unsqueeze(-1)
        return where(padding, apply("take", [table.detach(), index], axis=0), apply("take", [table, index], axis=0))
    return apply("take", [table, index], axis=0)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot encoding along a new last dimension."""
    index = as_tensor(tensor)
    if num_classes < 0:
        num_classes = int(index.numpy().max()) + 1
    return (index.unsqueeze(-1) == as_tensor(np.arange(num_classes))).to(dt.int64)
