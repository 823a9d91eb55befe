"""Lowerings of ATen ops that are compositions of tensorkiln's primitives: empty_permuted, narrow_copy,
resize, Tensor.unfold, dist and adaptive max pooling (each says what it is built from)."""
from __future__ import annotations

import math

import numpy as np
import torch

from ...frontend.functions import where
from ...frontend.tensor import apply, as_tensor, normalize_dim
from .lowering import _dtype, _fill, register_lowering

aten = torch.ops.aten


@register_lowering(aten.empty_permuted.default)
def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None, pin_memory=None):
    """Uninitialized memory in PyTorch, laid out in `physical_layout`'s order; zeros of the logical
    `size` here (tensorkiln values have no strides)."""
    return _fill(size, 0, _dtype(dtype, None) or _dtype(torch.float32))


@register_lowering(aten.narrow_copy.default)
def narrow_copy(x, dim, start, length):
    """A copy of `length` elements from `start` along `dim` (tensorkiln values are copies already)."""
    return x.narrow(dim, start % x.shape[dim] if start < 0 else start, length)


def _check_resize(node) -> str | None:
    source, size = node.args[0].meta.get("val"), node.args[1]
    if not isinstance(source, torch.Tensor) or not source.is_contiguous():
        return "resize of a tensor that is not contiguous (its storage order is not its element order)"
    if math.prod(int(d) for d in size) > source.numel():
        return "resize to more elements than the tensor has (PyTorch leaves the new ones uninitialized)"
    return None


@register_lowering(aten.resize.default, check=_check_resize)
def resize(x, size, memory_format=None):
    """A contiguous tensor's first prod(size) elements in row-major order, as `size` (resize_ keeps the
    storage and reads it with the new shape's contiguous strides)."""
    count = math.prod(int(d) for d in size)
    return x.reshape((-1,))[:count].reshape(tuple(int(d) for d in size))


@register_lowering(aten.unfold.default)
def unfold(x, dimension, size, step):
    """Tensor.unfold: windows of `size` every `step` along `dimension`, the window as a new last axis
    (a gather of the window positions)."""
    if x.ndim == 0:
        return x.reshape(1)
    d = normalize_dim(dimension, x.ndim)
    count = (x.shape[d] - size) // step + 1
    positions = np.arange(count)[:, None] * step + np.arange(size)[None, :]  # [window, element]
    windows = apply("take", [x, as_tensor(positions.astype(np.int64))], axis=d)  # [..., count, size, ...]
    order = list(range(d + 1)) + list(range(d + 2, x.ndim + 1)) + [d + 1]
    return windows.permute(*order)


@register_lowering(aten.dist.default)
def dist(a, b, p=2):
    """The p-norm of a - b over every element (p = inf: the largest |difference|, p = 0: the nonzero count)."""
    difference = (a - b).abs()
    if p == math.inf:
        return difference.amax()
    if p == -math.inf:
        return difference.amin()
    if p == 0:
        return (difference != 0).to(difference.dtype).sum()
    if p == 1:
        return difference.sum()
    return difference.pow(p).sum().pow(1.0 / p)


def _adaptive_windows(sizes, outputs) -> tuple[np.ndarray, np.ndarray]:
    """(positions, valid), each [outputs, window]: the flat input positions of each output's window
    (PyTorch's start floor(i * S / O), end ceil((i + 1) * S / O) per axis), padded to the widest window."""
    axes = []
    for size, out in zip(sizes, outputs):
        starts = [(i * size) // out for i in range(out)]
        ends = [-(-((i + 1) * size) // out) for i in range(out)]
        width = max(e - s for s, e in zip(starts, ends))
        offsets = np.arange(width)
        position = np.array(starts)[:, None] + offsets[None, :]
        axes.append((position, position < np.array(ends)[:, None]))
    positions, valid = np.zeros((1, 1), np.int64), np.ones((1, 1), bool)
    for (position, ok), size in zip(axes, sizes):  # row-major: earlier axes vary slowest
        positions = (positions[:, None, :, None] * size + position[None, :, None, :])
        valid = valid[:, None, :, None] & ok[None, :, None, :]
        positions = positions.reshape(positions.shape[0] * positions.shape[1], -1)
        valid = valid.reshape(valid.shape[0] * valid.shape[1], -1)
    return np.where(valid, positions, 0).astype(np.int64), valid


def _adaptive_max_pool(x, output_size, spatial: int):
    sizes, outputs = tuple(x.shape[-spatial:]), tuple(int(o) for o in output_size)
    positions, valid = _adaptive_windows(sizes, outputs)
    lead = tuple(x.shape[:-spatial])
    flat = x.reshape(*lead, math.prod(sizes))
    windows = apply("take", [flat, as_tensor(positions)], axis=len(lead))  # [..., outputs, window]
    windows = where(as_tensor(valid), windows, -math.inf)
    best = windows.argmax(-1, keepdim=True)  # the first largest, as PyTorch's CPU kernel picks it
    values = windows.gather(-1, best).squeeze(-1)
    table = as_tensor(positions).expand(*lead, *positions.shape)
    indices = table.gather(-1, best).squeeze(-1)
    return values.reshape(*lead, *outputs), indices.reshape(*lead, *outputs)


@register_lowering(aten.adaptive_max_pool2d.default)
def adaptive_max_pool2d(x, output_size):
    return _adaptive_max_pool(x, output_size, 2)


@register_lowering(aten.adaptive_max_pool3d.default)
def adaptive_max_pool3d(x, output_size):
    return _adaptive_max_pool(x, output_size, 3)
