"""Tensor's movement methods: flatten, permute/transpose, expand, squeeze/unsqueeze, narrow, gather.

They change how elements are arranged, never their values; reshape and
indexing, which build on more of the front-end, live in functions.py and
indexing.py.
"""
from __future__ import annotations

from ..errors import ShapeError, at_user_line
from ..shapes import is_symbolic, prod
from .tensor import _pick, apply, as_tensor, normalize_dim, normalize_dims, tensor_methods


@tensor_methods
class TensorMovement:
    """Tensor's movement methods (added to Tensor: tensor.py is below this module)."""

    __slots__ = ()

    def view_as(self, other) -> "Tensor":
        return self.reshape(other.shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        if self.ndim == 0:
            return self.reshape(1)
        s, e = normalize_dim(start_dim, self.ndim, "flatten"), normalize_dim(end_dim, self.ndim, "flatten")
        if s > e:
            raise ShapeError(at_user_line(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}"))
        shape = self.shape
        return self.reshape(shape[:s] + (prod(shape[s:e + 1]),) + shape[e + 1:])

    def permute(self, *dims) -> "Tensor":
        """Reorder the dimensions."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        if len(dims) != self.ndim:
            raise ShapeError(at_user_line(f"permute: {len(dims)} dims given for a tensor of rank {self.ndim}"))
        perm = tuple(normalize_dim(d, self.ndim, "permute") for d in dims)
        if sorted(perm) != list(range(self.ndim)):
            raise ShapeError(at_user_line(f"permute: {list(dims)} is not a permutation of {self.ndim} dims"))
        return self if perm == tuple(range(self.ndim)) else apply("permute", [self], perm=perm)

    def transpose(self, dim0: int = None, dim1: int = None) -> "Tensor":
        """Swap two dimensions (all reversed when none are given, as numpy does)."""
        if dim0 is None and dim1 is None:
            return self.permute(tuple(reversed(range(self.ndim))))
        perm = list(range(self.ndim))
        a, b = normalize_dim(dim0, self.ndim, "transpose"), normalize_dim(dim1, self.ndim, "transpose")
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(perm)

    swapaxes = transpose

    def t(self) -> "Tensor":
        if self.ndim > 2:
            raise ShapeError(at_user_line(f"t() expects a tensor of rank <= 2, got rank {self.ndim}"))
        return self.transpose() if self.ndim == 2 else self

    @property
    def T(self) -> "Tensor":  # noqa: N802
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> "Tensor":  # noqa: N802
        return self.transpose(-2, -1)

    def expand(self, *sizes) -> "Tensor":
        """Broadcast to `sizes` (-1 keeps a dimension)."""
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
            sizes = tuple(sizes[0])
        lead = len(sizes) - self.ndim
        if lead < 0:
            raise ShapeError(at_user_line(f"expand: cannot expand {list(self.shape)} to {list(sizes)}"))
        shape = tuple(self.shape[i - lead] if not is_symbolic(s) and s == -1 and i >= lead
                      else (s if is_symbolic(s) else int(s)) for i, s in enumerate(sizes))
        return self if shape == self.shape else apply("expand", [self], shape=shape)

    def broadcast_to(self, shape) -> "Tensor":
        return self.expand(tuple(shape))

    def expand_as(self, other) -> "Tensor":
        return self.expand(other.shape)

    def squeeze(self, dim=None, *, axis=None) -> "Tensor":
        """Remove size-1 dimensions (only the given ones when `dim` is set)."""
        d = _pick("dim", dim, axis)
        dims = normalize_dims(d, self.ndim, "squeeze") if d is not None else range(self.ndim)
        drop = {i for i in dims if self.shape[i] == 1}
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in drop))

    def unsqueeze(self, dim: int) -> "Tensor":
        """Insert a size-1 dimension at `dim`."""
        d = normalize_dim(dim, self.ndim + 1, "unsqueeze")
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def narrow(self, dim: int, start: int, length: int) -> "Tensor":
        """Elements start .. start+length-1 along `dim` (start may be negative, as in PyTorch)."""
        d = normalize_dim(dim, self.ndim, "narrow")
        size = self.shape[d]
        begin = start + size if -size <= start < 0 else start
        if not 0 <= begin <= size or length < 0 or begin + length > size:
            raise IndexError(at_user_line(f"narrow: start {start} and length {length} are out of range "
                                          f"for dimension {d} of size {size}"))
        index = [slice(None)] * self.ndim
        index[d] = slice(begin, begin + length)
        return self[tuple(index)]

    def unbind(self, dim: int = 0):
        d = normalize_dim(dim, self.ndim, "unbind")
        return tuple(self.narrow(d, i, 1).squeeze(d) for i in range(self.shape[d]))

    def gather(self, dim: int, index) -> "Tensor":
        """out[i][j] = self[i][index[i][j]] along `dim` (PyTorch's gather)."""
        index = as_tensor(index)
        return apply("gather", [self, index], axis=normalize_dim(dim, self.ndim, "gather"))

    def index_select(self, dim: int, index) -> "Tensor":
        """Select entries along `dim` by a 1-d index."""
        index = as_tensor(index)
        if index.ndim > 1:
            raise ShapeError(at_user_line(f"index_select: index must be 0-d or 1-d, got {list(index.shape)}"))
        return apply("take", [self, index.reshape(-1)], axis=normalize_dim(dim, self.ndim, "index_select"))
