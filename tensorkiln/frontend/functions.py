"""Tensor functions that are compositions of primitives: matmul on vectors, mean, var,
reshape with -1, concatenation, splitting, where with promotion, and the like.

They work on eager and traced tensors alike, because they only call `apply`
and Tensor methods.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import dtypes as dt
from ..errors import ShapeError, at_user_line
from .tensor import Tensor, _pick, apply, as_tensor, normalize_dim, normalize_dims, promote, tensor_methods
from .trace import composite
from ..shapes import is_symbolic, prod


def where(condition, x, y) -> Tensor:
    """Elementwise `x if condition else y`, with broadcasting and type promotion."""
    cond = as_tensor(condition).to(dt.bool_)
    (x, y), _ = promote(x, y)
    return apply("where", [cond, x, y])


def matmul(a, b) -> Tensor:
    """numpy's matmul: vectors are lifted to matrices, batch dimensions broadcast."""
    (a, b), _ = promote(a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(at_user_line(f"matmul: operands must not be scalars "
                                      f"(shapes {list(a.shape)} and {list(b.shape)})"))
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    out = apply("matmul", [a2, b2])
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    return out


def matmul_integer(a, b) -> Tensor:
    """Exact int32 product (..., M, K) @ (K, N) of int8/uint8 tensors (the `matmul_integer` op)."""
    return apply("matmul_integer", [as_tensor(a), as_tensor(b)])


def reshape(x: Tensor, *shape) -> Tensor:
    """Reshape with at most one -1 (inferred size)."""
    x = as_tensor(x)
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = tuple(s if is_symbolic(s) else int(s) for s in shape)
    if shape.count(-1) > 1:
        raise ShapeError(at_user_line(f"reshape: only one dimension can be -1, got {list(shape)}"))
    if -1 in shape:
        known = prod([s for s in shape if s != -1])
        if known == 0 or x.numel() % known:
            raise ShapeError(at_user_line(f"reshape: cannot reshape {list(x.shape)} "
                                          f"({x.numel()} elements) to {list(shape)}"))
        shape = tuple(x.numel() // known if s == -1 else s for s in shape)
    if shape == tuple(x.shape):
        return x
    return apply("reshape", [x], shape=shape)


@composite("mean")
def mean(x: Tensor, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """Arithmetic mean over `dim` (all when None)."""
    x = as_tensor(x)
    if dtype is not None:
        x = x.to(dtype)
    elif not x.dtype.is_floating:
        x = x.to(dt.DEFAULT_FLOAT)
    dims = normalize_dims(dim, x.ndim, "mean")
    out_dtype = x.dtype
    x = x.to(out_dtype.compute)  # 16-bit floats: accumulate and divide in float32, round once (PyTorch)
    count = prod([x.shape[d] for d in dims])
    total = x.sum(dims, keepdim)
    if is_symbolic(count):  # a run-time count (symbols are >= 2): its reciprocal computed per call, no guard
        return (total * (1.0 / _size_value(count, x.dtype))).to(out_dtype)
    count = int(count)
    return (total * (1.0 / count) if count else total / 0.0).to(out_dtype)


def _size_value(size, dtype) -> Tensor:
    """A symbolic size as a 0-d tensor of `dtype`, read at run time (a one-element iota starting at it)."""
    return apply("iota", [], length=1, start=size, step=1, dtype=dtype).reshape(())


@composite("var")
def var(x: Tensor, dim=None, unbiased=None, keepdim: bool = False, correction=None) -> Tensor:
    """Variance over `dim`; `correction` (default 1, PyTorch's) is subtracted from the count."""
    x = as_tensor(x)
    if correction is None:
        correction = 0 if unbiased is False else 1
    if not x.dtype.is_floating:
        x = x.to(dt.DEFAULT_FLOAT)
    dims = normalize_dims(dim, x.ndim, "var")
    out_dtype = x.dtype
    x = x.to(out_dtype.compute)  # 16-bit floats: compute in float32, round once (PyTorch)
    count = int(np.prod([x.shape[d] for d in dims], dtype=np.int64))
    centered = x - mean(x, dims, True)
    total = (centered * centered).sum(dims, keepdim)
    denominator = max(count - correction, 0)
    return (total * (1.0 / denominator) if denominator else total / 0.0).to(out_dtype)


def concat(tensors: Sequence, dim: int = 0, *, axis: int | None = None) -> Tensor:
    """Join tensors along an existing dimension (torch.cat / numpy.concatenate)."""
    tensors, _ = promote(*tensors) if tensors else ([], None)
    if not tensors:
        raise ShapeError(at_user_line("concat: needs at least one tensor"))
    d = dim if axis is None else axis
    ndim = tensors[0].ndim
    if ndim == 0:
        raise ShapeError(at_user_line("concat: zero-dimensional tensors cannot be concatenated"))
    for t in tensors:
        if t.ndim != ndim:
            raise ShapeError(at_user_line(f"concat: tensors of rank {ndim} and {t.ndim} cannot be joined"))
    d = normalize_dim(d, ndim, "concat")
    if len(tensors) == 1:
        return tensors[0]
    return apply("concat", tensors, axis=d)


cat = concatenate = concat


def stack(tensors: Sequence, dim: int = 0, *, axis: int | None = None) -> Tensor:
    """Join tensors along a new dimension."""
    tensors = [as_tensor(t) if not isinstance(t, Tensor) else t for t in tensors]
    if not tensors:
        raise ShapeError(at_user_line("stack: needs at least one tensor"))
    d = normalize_dim(dim if axis is None else axis, tensors[0].ndim + 1, "stack")
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) > 1:
        raise ShapeError(at_user_line(f"stack: tensors must have equal shapes, got {sorted(shapes)}"))
    return concat([t.unsqueeze(d) for t in tensors], d)


def flip(x: Tensor, dims) -> Tensor:
    """Reverse the order of elements along `dims`."""
    x = as_tensor(x)
    axes = normalize_dims(dims, x.ndim, "flip")
    index = tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(x.ndim))
    return x[index]


def diagonal(x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of the (dim1, dim2) planes as a new last axis, as torch.diagonal (offset > 0: above
    the main diagonal); a strided slice of the flattened plane, no copy of the rest."""
    x = as_tensor(x)
    d1, d2 = normalize_dim(dim1, x.ndim, "diagonal"), normalize_dim(dim2, x.ndim, "diagonal")
    if d1 == d2:
        raise ShapeError(at_user_line(f"diagonal: dim1 and dim2 must differ, got {dim1} and {dim2} for shape "
                                      f"{list(x.shape)}"))
    rest = [d for d in range(x.ndim) if d not in (d1, d2)]
    y = x.permute(tuple(rest + [d1, d2]))
    rows, cols = x.shape[d1], x.shape[d2]
    length = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
    flat = y.reshape(tuple(y.shape[:-2]) + (rows * cols,))
    if length == 0:
        return flat.narrow(-1, 0, 0)
    start = offset if offset >= 0 else -offset * cols
    key = (slice(None),) * (flat.ndim - 1) + (slice(start, start + (length - 1) * (cols + 1) + 1, cols + 1),)
    return flat[key]


def split(x: Tensor, split_size_or_sections, dim: int = 0) -> tuple[Tensor, ...]:
    """Split into pieces of a given size, or of the given list of sizes."""
    x = as_tensor(x)
    d = normalize_dim(dim, x.ndim, "split")
    n = x.shape[d]
    if isinstance(split_size_or_sections, (int, np.integer)):
        size = int(split_size_or_sections)
        if size <= 0:
            raise ShapeError(at_user_line(f"split: split size must be positive, got {size}"))
        sizes = [min(size, n - i) for i in range(0, n, size)] or [0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != n:
            raise ShapeError(at_user_line(f"split: sizes {sizes} do not add up to {n} (dimension {d})"))
    pieces, start = [], 0
    for s in sizes:
        pieces.append(x.narrow(d, start, s))
        start += s
    return tuple(pieces)


def chunk(x: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """Split into `chunks` nearly equal pieces (the last may be smaller)."""
    x = as_tensor(x)
    if chunks <= 0:
        raise ShapeError(at_user_line(f"chunk: the number of chunks must be positive, got {chunks}"))
    n = x.shape[normalize_dim(dim, x.ndim, "chunk")]
    return split(x, max(1, -(-n // chunks)), dim)


def repeat(x: Tensor, *sizes) -> Tensor:
    """Tile the tensor `sizes[i]` times along each dimension (PyTorch's repeat)."""
    x = as_tensor(x)
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    if len(sizes) < x.ndim:
        raise ShapeError(at_user_line(f"repeat: {len(sizes)} repeats for a tensor of rank {x.ndim}"))
    x = x.reshape((1,) * (len(sizes) - x.ndim) + tuple(x.shape))
    # (d0, d1) -> (r0, d0, r1, d1) by expand, then merge pairs.
    interleaved = []
    for r, d in zip(sizes, x.shape):
        interleaved += [1, d]
    expanded = []
    for r, d in zip(sizes, x.shape):
        expanded += [r, d]
    y = x.reshape(interleaved).expand(expanded)
    return y.reshape([r * d for r, d in zip(sizes, x.shape)])


def maximum(a, b) -> Tensor:
    (a, b), _ = promote(a, b)
    return apply("maximum", [a, b])


def minimum(a, b) -> Tensor:
    (a, b), _ = promote(a, b)
    return apply("minimum", [a, b])


@tensor_methods
class TensorFunctions:
    """Tensor's methods built on the functions above (added to Tensor: tensor.py is below this module)."""

    __slots__ = ()

    def log1p(self) -> Tensor:
        """log(1 + x), accurate for tiny x: log(u) * x / (u - 1) with u = 1 + x (Goldberg's trick)."""
        out_dtype = self._dtype if self._dtype.is_floating else dt.DEFAULT_FLOAT
        x = self.to(out_dtype.compute)  # 16-bit floats: the trick needs one precision throughout
        u = 1 + x
        d = u - 1
        exact = (d == 0) | (u == float("inf"))
        return where(exact, x, u.log() * (x / where(exact, 1, d))).to(out_dtype)

    def where(self, condition, other) -> Tensor:
        """self where condition, else other (PyTorch's Tensor.where)."""
        return where(condition, self, other)

    def masked_fill(self, mask, value) -> Tensor:
        """Replace elements where `mask` is true by `value` (the result keeps self's dtype, as in PyTorch)."""
        value = value.to(self._dtype) if isinstance(value, Tensor) else as_tensor(value, self._dtype)
        return where(mask, value, self)

    # ---- matmul ------------------------------------------------------------------
    def matmul(self, other) -> Tensor:
        return matmul(self, other)

    def __matmul__(self, other): return self.matmul(other)

    def __rmatmul__(self, other):
        return matmul(as_tensor(other), self)

    # ---- reductions ----------------------------------------------------------------
    def mean(self, dim=None, keepdim=None, dtype=None, *, axis=None, keepdims=None) -> Tensor:
        """Mean over `dim`; integer tensors are averaged in float32."""
        return mean(self, _pick("dim", dim, axis), bool(_pick("keepdim", keepdim, keepdims, False)), dtype)

    def var(self, dim=None, unbiased=None, keepdim=None, *, correction=None, axis=None,
            keepdims=None, ddof=None) -> Tensor:
        """Variance with Bessel's correction by default, as in PyTorch (ddof= is numpy's spelling)."""
        return var(self, _pick("dim", dim, axis), unbiased, bool(_pick("keepdim", keepdim, keepdims, False)),
                   _pick("correction", correction, ddof))

    # ---- movement ------------------------------------------------------------------
    def reshape(self, *shape) -> Tensor:
        """Reshape (one size may be -1)."""
        return reshape(self, *shape)

    view = reshape

    def flip(self, dims) -> Tensor:
        return flip(self, dims)

    def split(self, split_size_or_sections, dim: int = 0):
        return split(self, split_size_or_sections, dim)

    def chunk(self, chunks: int, dim: int = 0):
        return chunk(self, chunks, dim)

    def repeat(self, *sizes) -> Tensor:
        return repeat(self, *sizes)
