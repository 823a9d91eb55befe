"""Tensor's reductions: sum, prod, amax/amin, max/min (with indices), argmax/argmin, all/any and std.

`dim` and `keepdim` also take numpy's spellings `axis` and `keepdims`; an
int `dim` to max/min gives PyTorch's (values, indices) pair.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .tensor import MinMax, Tensor, _pick, apply, as_tensor, normalize_dim, normalize_dims, tensor_methods


@tensor_methods
class TensorReductions:
    """Tensor's reductions (added to Tensor: tensor.py is below this module)."""

    __slots__ = ()

    def _reduce(self, op: str, dim, axis, keepdim, keepdims) -> "Tensor":
        dims = normalize_dims(_pick("dim", dim, axis), self.ndim, op)
        keep = bool(_pick("keepdim", keepdim, keepdims, False))
        return apply(op, [self], axes=dims, keepdims=keep)

    def sum(self, dim=None, keepdim=None, dtype=None, *, axis=None, keepdims=None) -> "Tensor":
        """Sum over `dim` (all when None); integers and bools accumulate in int64."""
        x = self
        if dtype is not None:
            x = x.to(dtype)
        elif not x._dtype.is_floating:
            x = x.to(dt.int64)
        return x._reduce("reduce_sum", dim, axis, keepdim, keepdims)

    def prod(self, dim=None, keepdim=None, dtype=None, *, axis=None, keepdims=None) -> "Tensor":
        x = self.to(dtype) if dtype is not None else (self if self._dtype.is_floating else self.to(dt.int64))
        return x._reduce("reduce_prod", dim, axis, keepdim, keepdims)

    def std(self, dim=None, unbiased=None, keepdim=None, *, correction=None, axis=None,
            keepdims=None, ddof=None) -> "Tensor":
        return self.var(dim, unbiased, keepdim, correction=correction, axis=axis,
                        keepdims=keepdims, ddof=ddof).sqrt()

    def amax(self, dim=None, keepdim=None, *, axis=None, keepdims=None) -> "Tensor":
        return self._reduce("reduce_max", dim, axis, keepdim, keepdims)

    def amin(self, dim=None, keepdim=None, *, axis=None, keepdims=None) -> "Tensor":
        return self._reduce("reduce_min", dim, axis, keepdim, keepdims)

    def _minmax(self, op: str, argop: str, dim, axis, keepdim, keepdims):
        if isinstance(dim, Tensor) or (dim is not None and not isinstance(dim, (int, np.integer, tuple, list))):
            return self._binary("maximum" if op == "reduce_max" else "minimum", dim)
        d = _pick("dim", dim, axis)
        if isinstance(d, (int, np.integer)) and axis is None:  # numpy's spelling gives numpy's result
            keep = bool(_pick("keepdim", keepdim, keepdims, False))
            return MinMax(self._reduce(op, d, None, keep, None), self._arg(argop, d, keep))
        return self._reduce(op, d, None, keepdim, keepdims)

    def max(self, dim=None, keepdim=None, *, axis=None, keepdims=None):
        """Max over all elements; with an int dim, (values, indices) as in PyTorch; with a tensor, maximum."""
        return self._minmax("reduce_max", "argmax", dim, axis, keepdim, keepdims)

    def min(self, dim=None, keepdim=None, *, axis=None, keepdims=None):
        """Min over all elements; with an int dim, (values, indices) as in PyTorch; with a tensor, minimum."""
        return self._minmax("reduce_min", "argmin", dim, axis, keepdim, keepdims)

    def _arg(self, op: str, dim, keepdim: bool) -> "Tensor":
        if dim is None or self.ndim == 0:
            if dim is not None:
                normalize_dim(dim, self.ndim, op)
            return apply(op, [self.reshape(-1)], axis=0, keepdims=False)
        return apply(op, [self], axis=normalize_dim(dim, self.ndim, op), keepdims=bool(keepdim))

    def argmax(self, dim=None, keepdim=None, *, axis=None, keepdims=None) -> "Tensor":
        """Index of the first maximum along `dim` (of the flattened tensor when None)."""
        return self._arg("argmax", _pick("dim", dim, axis), _pick("keepdim", keepdim, keepdims, False))

    def argmin(self, dim=None, keepdim=None, *, axis=None, keepdims=None) -> "Tensor":
        return self._arg("argmin", _pick("dim", dim, axis), _pick("keepdim", keepdim, keepdims, False))

    def _all_any(self, op: str, identity: bool, dim, axis, keepdim, keepdims) -> "Tensor":
        x = self.to(dt.bool_)
        dims = normalize_dims(_pick("dim", dim, axis), x.ndim, op)
        if any(x.shape[d] == 0 for d in dims):  # max/min have no empty reduction; all/any do
            keep = bool(_pick("keepdim", keepdim, keepdims, False))
            shape = tuple(1 if i in dims else n for i, n in enumerate(x.shape)) if keep else \
                tuple(n for i, n in enumerate(x.shape) if i not in dims)
            return as_tensor(identity).expand(shape)
        return x._reduce(op, dims, None, keepdim, keepdims)

    def all(self, dim=None, keepdim=None, *, axis=None, keepdims=None) -> "Tensor":
        return self._all_any("reduce_min", True, dim, axis, keepdim, keepdims)

    def any(self, dim=None, keepdim=None, *, axis=None, keepdims=None) -> "Tensor":
        return self._all_any("reduce_max", False, dim, axis, keepdim, keepdims)
