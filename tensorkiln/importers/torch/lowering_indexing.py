"""Lowerings of ATen's indexing and scattering ops onto take, gather, where and reductions.

- Reading: `index.Tensor` with several index tensors (one `take` and then one
  `gather` per further index tensor, so each index keeps take's per-axis range
  rules), `diagonal` and `as_strided` (index arithmetic over the flattened tensor).
- Writing: a scatter is a comparison `index == position` for every output
  position along the scattered axis, reduced over the written elements: the last
  writer for a plain scatter, a sum, product, maximum, minimum or mean for the
  reducing ones. The comparison square (written elements x positions) is inlined
  into the reduction, never stored.
  `index_put` is the same over the indexed axes; `select_scatter`,
  `slice_scatter` and `masked_scatter` are `where` over a mask known at compile
  time (masked_scatter's source positions are a prefix count of the mask).

Index tensors that select by a boolean mask give data-dependent shapes and are
refused (docs/pytorch.md), except `index_put` with one mask and a single value,
which is a `where`.
"""
from __future__ import annotations

import numpy as np
import torch

from ... import dtypes as dt
from ...frontend.functions import diagonal as tk_diagonal
from ...frontend.functions import where
from ...frontend.tensor import Tensor, as_tensor, normalize_dim
from ...nn import functional as F
from .lowering import register_lowering
from .lowering_scan import cumulative_sum

aten = torch.ops.aten


def _index_metas(node, position: int) -> list:
    indices = node.args[position] if position < len(node.args) else node.kwargs.get("indices", ())
    return [i.meta.get("val") if isinstance(i, torch.fx.Node) else None for i in indices if i is not None]


def _check_index(node):
    if any(m is not None and m.dtype == torch.bool for m in _index_metas(node, 1)):
        return "boolean mask indexing (data-dependent shape)"
    return None


def _broadcast_shape(tensors: list[Tensor]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*[tuple(t.shape) for t in tensors]))


def _indexed_layout(x: Tensor, indices) -> tuple[list[int], list[int], bool]:
    """(indexed dims, other dims, whether the indexed dims are adjacent)."""
    positions = [d for d, t in enumerate(indices) if t is not None]
    others = [d for d in range(x.ndim) if d not in positions]
    adjacent = positions == list(range(positions[0], positions[0] + len(positions)))
    return positions, others, adjacent


def _result_to_torch_order(y: Tensor, batch_rank: int, first: int, adjacent: bool) -> Tensor:
    """y is (batch..., other dims...); with adjacent indexed dims PyTorch puts the batch where they were."""
    if not adjacent or first == 0:
        return y
    order = list(range(batch_rank, batch_rank + first)) + list(range(batch_rank)) + \
        list(range(batch_rank + first, y.ndim))
    return y.permute(tuple(order))


@register_lowering(aten.index.Tensor, check=_check_index)
def index(x, indices):
    positions, others, adjacent = _indexed_layout(x, indices)
    tensors = [indices[d] for d in positions]
    batch = _broadcast_shape(tensors)
    flat = [t.expand(batch).reshape(-1) for t in tensors]
    y = x.permute(tuple(positions + others)) if positions + others != list(range(x.ndim)) else x
    y = y.index_select(0, flat[0])  # (n, remaining indexed dims..., others...)
    for idx in flat[1:]:
        shape = (y.shape[0], 1) + tuple(y.shape[2:])
        y = y.gather(1, idx.reshape((-1,) + (1,) * (y.ndim - 1)).expand(shape)).squeeze(1)
    y = y.reshape(batch + tuple(x.shape[d] for d in others))
    return _result_to_torch_order(y, len(batch), positions[0], adjacent)


def _check_index_put(node):
    metas = _index_metas(node, 1)
    masks = [m for m in metas if m is not None and m.dtype == torch.bool]
    if not masks:
        return None
    values = node.args[2].meta.get("val") if isinstance(node.args[2], torch.fx.Node) else None
    if len(metas) == 1 and values is not None and values.numel() == 1:
        return None
    return "boolean mask index_put with more than one value (data-dependent positions)"


@register_lowering(aten.index_put.default, check=_check_index_put)
def index_put(x, indices, values, accumulate=False):
    indices = list(indices)
    if any(t is not None and t.dtype.is_bool for t in indices):  # x[mask] = value
        mask = next(t for t in indices if t is not None)
        first = next(d for d, t in enumerate(indices) if t is not None)
        mask = mask.reshape((1,) * first + tuple(mask.shape) + (1,) * (x.ndim - first - mask.ndim))
        value = values.reshape(()).to(x.dtype)
        return where(mask, x + value if accumulate else value, x)
    positions, others, adjacent = _indexed_layout(x, indices)
    tensors = [indices[d] for d in positions]
    batch = _broadcast_shape(tensors)
    k, n = len(positions), int(np.prod(batch, dtype=np.int64))
    if n == 0:  # no index: nothing is written or added
        return x
    order = positions + others
    xt = x.permute(tuple(order))  # (indexed..., others...)
    indexed_shape, rest = tuple(xt.shape[:k]), tuple(xt.shape[k:])
    # values as the result of x[indices] has them, then (n, others...)
    result_shape = batch + rest
    first = positions[0]
    if adjacent and first:
        result_shape = rest[:first] + batch + rest[first:]
    v = values.to(x.dtype).expand(result_shape)
    if adjacent and first:
        nb = len(batch)
        v = v.permute(tuple(range(first, first + nb)) + tuple(range(first)) + tuple(range(first + nb, v.ndim)))
    v = v.reshape((n,) + rest)
    # match[w, q...]: written element w lands on indexed position q
    match = None
    for j, (t, size) in enumerate(zip(tensors, indexed_shape)):
        t = t.expand(batch).reshape(-1).to(dt.int64)
        t = where(t < 0, t + size, t)
        axis_shape = [1] * (k + 1)
        axis_shape[j + 1] = size
        hit = t.reshape((n,) + (1,) * k) == as_tensor(np.arange(size, dtype=np.int64).reshape(axis_shape))
        match = hit if match is None else match.logical_and(hit)
    written = match.reshape(match.shape + (1,) * len(rest))
    if accumulate:
        spread = v.reshape((n,) + (1,) * k + rest)
        out = xt + where(written, spread, as_tensor(0, x.dtype)).sum(0, dtype=x.dtype)
    else:
        writer = as_tensor(np.arange(n, dtype=np.int64).reshape((n,) + (1,) * k))
        last = where(match, writer, as_tensor(-1, dt.int64)).amax(0)  # (indexed...)
        taken = v.index_select(0, last.clamp(0, None).reshape(-1)).reshape(indexed_shape + rest)
        out = where((last >= 0).reshape(indexed_shape + (1,) * len(rest)), taken, xt)
    inverse = tuple(int(i) for i in np.argsort(order))
    return out.permute(inverse)


@register_lowering(aten.put.default)
def put(x, index, source, accumulate=False):
    """x.put(index, source): x flattened, written (or added to) at `index` (negative from the end)."""
    flat = index_put(x.reshape((-1,)), [index.reshape((-1,))], source.reshape((-1,)), accumulate)
    return flat.reshape(tuple(x.shape))


# ---- scatter -----------------------------------------------------------------------------------

def _lowest(dtype: dt.DType):
    return float("-inf") if dtype.is_floating else (False if dtype.is_bool else int(np.iinfo(dtype.storage).min))


def _highest(dtype: dt.DType):
    return float("inf") if dtype.is_floating else (True if dtype.is_bool else int(np.iinfo(dtype.storage).max))


def scatter_along(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:
    """PyTorch's scatter/scatter_reduce: x with x[..index[i]..] combined with src[i] along `dim`.

    `reduce` is "assign" (the last writer wins) or one of sum, prod, mean, amax, amin.
    Only the block of x that `index` spans (all of `dim`) can change.
    """
    d = normalize_dim(dim, x.ndim, "scatter") if x.ndim else 0
    if x.ndim == 0 or index.numel() == 0:
        return x
    size = x.shape[d]
    block = tuple(size if a == d else index.shape[a] for a in range(x.ndim))
    src = src[tuple(slice(0, index.shape[a]) for a in range(src.ndim))].to(x.dtype)
    # match[..., i, p, ...]: element i (along dim) is written to position p
    positions = as_tensor(np.arange(size, dtype=np.int64).reshape((size,) + (1,) * (x.ndim - d - 1)))
    match = index.to(dt.int64).unsqueeze(d + 1) == positions
    spread = src.unsqueeze(d + 1)
    count = match.to(dt.int64).sum(d)
    touched = count > 0
    here = x[tuple(slice(0, s) for s in block)]
    if reduce == "assign":
        writer = as_tensor(np.arange(index.shape[d], dtype=np.int64).reshape((-1,) + (1,) * (x.ndim - d)))
        last = where(match, writer, as_tensor(-1, dt.int64)).amax(d)
        new = where(touched, src.gather(d, last.clamp(0, None)), here)
    else:
        if reduce in ("sum", "mean"):
            total = where(match, spread, as_tensor(0, x.dtype)).sum(d, dtype=x.dtype)
            combined = here + total if include_self else total
            if reduce == "mean":
                divisor = (count + 1 if include_self else count).clamp(1, None).to(x.dtype)
                combined = combined / divisor if x.dtype.is_floating else combined // divisor
        elif reduce == "prod":
            total = where(match, spread, as_tensor(1, x.dtype)).prod(d, dtype=x.dtype)
            combined = here * total if include_self else total
        elif reduce in ("amax", "amin"):
            fill = _lowest(x.dtype) if reduce == "amax" else _highest(x.dtype)
            picked = where(match, spread, as_tensor(fill, x.dtype))
            total = picked.amax(d) if reduce == "amax" else picked.amin(d)
            combined = (here.maximum(total) if reduce == "amax" else here.minimum(total)) if include_self else total
        else:
            raise ValueError(f"scatter_reduce: unknown reduction {reduce!r}")
        new = where(touched, combined.to(x.dtype), here)
    if block == tuple(x.shape):
        return new
    inside = np.zeros(x.shape, dtype=bool)
    inside[tuple(slice(0, s) for s in block)] = True
    padded = new.reshape(block)
    pads = []
    for a in reversed(range(x.ndim)):
        pads += [0, x.shape[a] - block[a]]
    return where(as_tensor(inside), F.pad(padded, pads), x)


@register_lowering(aten.scatter.src, aten.scatter.value)
def scatter(x, dim, index, src):
    if not isinstance(src, Tensor):
        src = as_tensor(src, x.dtype).expand(tuple(index.shape))
    return scatter_along(x, dim, index, src, "assign")


@register_lowering(aten.scatter_add.default)
def scatter_add(x, dim, index, src):
    return scatter_along(x, dim, index, src, "sum")


@register_lowering(aten.scatter_reduce.two)
def scatter_reduce(x, dim, index, src, reduce, *, include_self=True):
    return scatter_along(x, dim, index, src, reduce, include_self)


@register_lowering(aten.index_reduce.default)
def index_reduce(x, dim, index, source, reduce, *, include_self=True):
    """x with source's slice i combined into x's slice index[i] along `dim`: scatter_reduce with the
    index spread over source's other axes."""
    if x.ndim == 0:  # a 0-d tensor indexes as one of one element
        return index_reduce(x.reshape(1), 0, index, source.reshape(1), reduce, include_self=include_self).reshape(())
    d = normalize_dim(dim, x.ndim, "index_reduce")
    spread = index.to(dt.int64).reshape((-1,) + (1,) * (source.ndim - d - 1)).expand(tuple(source.shape))
    return scatter_along(x, d, spread, source, reduce, include_self)


@register_lowering(aten.select_scatter.default)
def select_scatter(x, src, dim, index):
    d = normalize_dim(dim, x.ndim, "select_scatter")
    size = x.shape[d]
    position = index + size if index < 0 else index
    mask = np.zeros((size,) + (1,) * (x.ndim - d - 1), dtype=bool)
    mask[position] = True
    return where(as_tensor(mask), src.to(x.dtype).unsqueeze(d), x)


@register_lowering(aten.slice_scatter.default)
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    d = normalize_dim(dim, x.ndim, "slice_scatter")
    size = x.shape[d]
    chosen = range(*slice(start, end, step).indices(size))
    if len(chosen) == 0:
        return x
    mask = np.zeros(size, dtype=bool)
    source_row = np.zeros(size, dtype=np.int64)
    mask[list(chosen)] = True
    source_row[list(chosen)] = np.arange(len(chosen))
    rows = src.to(x.dtype).index_select(d, as_tensor(source_row))
    return where(as_tensor(mask.reshape((size,) + (1,) * (x.ndim - d - 1))), rows, x)


@register_lowering(aten.masked_scatter.default)
def masked_scatter(x, mask, source):
    """The k-th True of the mask (in row-major order) takes source's k-th element."""
    mask = mask.expand(tuple(x.shape)).reshape(-1)
    slot = cumulative_sum(mask.to(dt.int64), 0) - 1
    last = max(source.numel() - 1, 0)
    values = source.to(x.dtype).reshape(-1).index_select(0, slot.clamp(0, last))
    return where(mask, values, x.reshape(-1)).reshape(tuple(x.shape))


# ---- views by index arithmetic -----------------------------------------------------------------

@register_lowering(aten.diagonal.default, aten.diagonal_copy.default)
def diagonal(x, offset=0, dim1=0, dim2=1):
    return tk_diagonal(x, offset, dim1, dim2)


def _check_as_strided(node):
    base = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    if base is None:
        return "as_strided of a tensor without a recorded layout"
    if not base.is_contiguous() or base.storage_offset() != 0:
        return "as_strided of a non-contiguous view (its storage is not the tensor's elements)"
    size, stride = node.args[1], node.args[2]
    offset = node.args[3] if len(node.args) > 3 and node.args[3] is not None else 0
    if any(s == 0 for s in size):
        return None
    last = offset + sum((s - 1) * st for s, st in zip(size, stride))
    if offset < 0 or last >= base.numel() or any(st < 0 for st in stride):
        return "as_strided reaching outside the tensor's elements"
    return None


@register_lowering(aten.as_strided.default, aten.as_strided_copy.default, check=_check_as_strided)
def as_strided(x, size, stride, storage_offset=None):
    size = tuple(int(s) for s in size)
    flat_index = np.full(size, int(storage_offset or 0), dtype=np.int64)
    for axis, (s, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[axis] = s
        flat_index = flat_index + (np.arange(s, dtype=np.int64) * int(st)).reshape(shape)
    return x.reshape(-1).index_select(0, as_tensor(flat_index.reshape(-1))).reshape(size)


@register_lowering(aten.diagonal_scatter.default)
def diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    """x with its diagonal (as `diagonal` reads it) replaced by src: a mask and an index known at compile time."""
    d1, d2 = normalize_dim(dim1, x.ndim, "diagonal_scatter"), normalize_dim(dim2, x.ndim, "diagonal_scatter")
    rows, cols = x.shape[d1], x.shape[d2]
    r = np.arange(rows).reshape(rows, 1)
    c = np.arange(cols).reshape(1, cols)
    on_diagonal = (c - r) == offset
    length = src.shape[-1]
    if length == 0:
        return x
    position = np.clip(r if offset >= 0 else c, 0, length - 1)  # the diagonal's k-th element is at row k (or column k)
    position = np.broadcast_to(position, (rows, cols))
    # src's last axis is the diagonal: bring it to (rows, cols) at dims (d1, d2) of x
    rest = [d for d in range(x.ndim) if d not in (d1, d2)]
    spread = src.to(x.dtype).index_select(src.ndim - 1, as_tensor(position.reshape(-1).astype(np.int64)))
    spread = spread.reshape(tuple(src.shape[:-1]) + (rows, cols))
    order = rest + [d1, d2]
    inverse = tuple(int(i) for i in np.argsort(order))
    mask = np.broadcast_to(on_diagonal, (rows, cols))
    mask_full = np.zeros(tuple(x.shape[d] for d in order), dtype=bool)
    mask_full[...] = mask
    return where(as_tensor(mask_full), spread, x.permute(tuple(order))).permute(inverse)
