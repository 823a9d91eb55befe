"""ONNX scatter operators (ScatterElements, Scatter, ScatterND, TensorScatter) without a scatter primitive.

The op registry has gathers but no scatter, so a scatter is written the way
the gradients of `take` and `gather` are (their op table entries in tensorkiln/ir/ops/movement.py): the
indices are compared against an iota of the positions they may hit, which
gives a one-hot mask, and the mask then selects, sums or reduces the updates:

    mask[u, j]  = (index[u] == j)                   one row per update, one column per target
    add, mul,   contribution[j] = reduce_u where(mask[u, j], updates[u], identity)
    max, min    output = data (op) contribution     (identity: 0, 1, -inf, +inf)
    none        last[j] = max_u where(mask[u, j], u, -1)
                output  = where(last >= 0, updates[last], data)

`none` takes, for each target, the update written last in the reference's
row-major loop order, so duplicate indices behave as in onnx's reference
implementation (ONNX leaves them undefined). Everything is ordinary
comparisons, selects, reductions, gathers with in-range indices and (for a
large ScatterND add) a matmul, so traced indices work and both backends run
the same graph.

Memory: ScatterElements' mask has one entry per (update, position along
`axis`); ScatterND's one per (update, index tuple of `data`'s leading `k`
axes), and its mul/max/min reductions (and an add up to `_BROADCAST_LIMIT`
elements) broadcast that mask against the slice each update writes; a larger
add contracts the mask with a matmul instead. The C backend fuses the
broadcast into the reduction; the reference interpreter materializes it.

Out-of-range indices: an index outside [-size, size) equals no position, so
its update is ignored, identically in both backends; generated code never
reads or writes out of bounds. Indices known when the model is compiled
(constants, initializers) are checked instead, and an out-of-range one
raises ShapeError, as onnx's reference raises IndexError.

Bool data: add is `or` and mul is `and` (numpy's bool arithmetic), computed
as max and min on int8. TensorScatter (a KV-cache write of one run of
positions per batch row) needs no mask: each cache position reads update
position `j - write_index`, a gather.
"""
from __future__ import annotations

import functools

import numpy as np

from ... import dtypes as dt
from ...errors import ShapeError
from ...frontend.functions import matmul, where
from ...frontend.tensor import Tensor, apply, as_tensor
from ...frontend.trace import composite_scope
from .helpers import filled, normalize_axis, prod
from .registry import NodeContext, converter

REDUCTIONS = ("none", "add", "mul", "max", "min")
# Above this many broadcast elements a ScatterND add contracts the mask with a matmul (memory:
# updates x targets instead of updates x targets x slice); non-finite updates then turn the
# other targets of their column into NaN (0 * inf), so smaller adds use the exact broadcast.
_BROADCAST_LIMIT = 1 << 22


# ---- helpers --------------------------------------------------------------------------------

def _iota(n: int, axis: int, rank: int) -> Tensor:
    """int64 positions 0..n-1 laid along `axis` of a rank-`rank` tensor (size 1 elsewhere)."""
    return as_tensor(np.arange(n, dtype=np.int64).reshape([n if d == axis else 1 for d in range(rank)]))


def _wrapped(index: Tensor, size: int) -> Tensor:
    """int64 indices with negative ones counted from the end; out-of-range ones stay out of range."""
    index = index.to(dt.int64)
    return where(index < 0, index + size, index)


def _check_range(index: Tensor, size: int, op: str) -> None:
    """Indices known at compile time must lie in [-size, size); runtime ones are not checked."""
    if index.is_traced or not index.numel():
        return
    values = index.numpy().astype(np.int64)
    bad = values[(values < -size) | (values >= size)]
    if bad.size:
        raise ShapeError(f"{op}: index {int(bad.reshape(-1)[0])} is out of range for an axis of size {size}")


def _reduction(ctx: NodeContext, attrs: dict) -> str:
    reduction = attrs.get("reduction", "none")
    if reduction not in REDUCTIONS:
        raise ctx.unsupported(f"reduction {reduction!r} (expected one of {', '.join(REDUCTIONS)})")
    return reduction


def _identity(reduction: str, dtype: dt.DType) -> Tensor:
    """The value a reduction starts from: adding, multiplying or comparing it changes nothing."""
    value = {"add": 0, "mul": 1, "max": dt.finfo_min(dtype), "min": dt.finfo_max(dtype)}[reduction]
    return filled((), value, dtype)


def _reduce(t: Tensor, reduction: str, axis: int) -> Tensor:
    """Reduce `axis` away, keeping t's dtype (sum/prod of integers would widen to int64)."""
    if reduction == "add":
        return t.sum(axis, dtype=t.dtype)
    if reduction == "mul":
        return t.prod(axis, dtype=t.dtype)
    return t.amax(axis) if reduction == "max" else t.amin(axis)


def _combine(data: Tensor, contribution: Tensor, reduction: str) -> Tensor:
    if reduction == "add":
        return data + contribution
    if reduction == "mul":
        return data * contribution
    return data.maximum(contribution) if reduction == "max" else data.minimum(contribution)


def _pad_to(t: Tensor, shape, value) -> Tensor:
    """t padded at the end of each axis up to `shape` with `value`."""
    pads = tuple((0, s - d) for s, d in zip(shape, t.shape))
    if not any(hi for _, hi in pads):
        return t
    return apply("pad", [t], pads=pads, value=value)


def _bool_as_int8(fn):
    """Run `fn(data, index, updates, ..., reduction)` on int8 for bool data: add is `or` (max) and mul
    is `and` (min), as in numpy's reference."""
    @functools.wraps(fn)
    def run(data: Tensor, index: Tensor, updates: Tensor, *rest) -> Tensor:
        reduction = rest[-1]
        if data.dtype != dt.bool_ or reduction == "none":
            return fn(data, index, updates, *rest)
        reduction = {"add": "max", "mul": "min"}.get(reduction, reduction)
        return fn(data.to(dt.int8), index, updates.to(dt.int8), *rest[:-1], reduction).to(dt.bool_)
    return run


# ---- ScatterElements / Scatter ------------------------------------------------------------------

@_bool_as_int8
def scatter_elements(data: Tensor, index: Tensor, updates: Tensor, axis: int, reduction: str) -> Tensor:
    """output[..., index[u], ...] (op)= updates[u] along `axis`; the other coordinates are u's own."""
    n, count = data.shape[axis], updates.shape[axis]
    if not updates.numel() or not n:
        return data
    rank = data.ndim
    # mask: updates' shape with the n positions along `axis` inserted before the updates' own axis,
    # so reducing axis + 1 leaves the region of data the updates can reach, already in place.
    mask = _wrapped(index, n).unsqueeze(axis) == _iota(n, axis, rank + 1)
    if reduction == "none":
        last = where(mask, _iota(count, axis + 1, rank + 1), filled((), -1, dt.int64)).amax(axis + 1)
        values = updates.gather(axis, last.maximum(filled((), 0, dt.int64)))
        hit = _pad_to(last >= 0, data.shape, False)
        return where(hit, _pad_to(values, data.shape, 0), data)
    identity = _identity(reduction, data.dtype)
    contribution = _reduce(where(mask, updates.unsqueeze(axis), identity), reduction, axis + 1)
    return _combine(data, _pad_to(contribution, data.shape, identity.item()), reduction)


def _check_elements_shapes(data: Tensor, index: Tensor, updates: Tensor, axis: int) -> None:
    if tuple(index.shape) != tuple(updates.shape) or index.ndim != data.ndim:
        raise ShapeError(f"indices {list(index.shape)} and updates {list(updates.shape)} must have one shape, "
                         f"of the rank of data {list(data.shape)}")
    for d, (u, s) in enumerate(zip(updates.shape, data.shape)):
        if d != axis and u > s:
            raise ShapeError(f"updates {list(updates.shape)} exceed data {list(data.shape)} on axis {d}")


@converter("ScatterElements", "Scatter")
def _scatter_elements(ctx, inputs, attrs):
    data, index, updates = inputs
    axis = normalize_axis(attrs.get("axis", 0), data.ndim)
    reduction = _reduction(ctx, attrs)
    _check_elements_shapes(data, index, updates, axis)
    _check_range(index, data.shape[axis], ctx.op_type)
    with composite_scope("scatter_elements"):
        return scatter_elements(data, index, updates, axis, reduction)


# ---- ScatterND --------------------------------------------------------------------------------

def _linear_index(index: Tensor, dims) -> Tensor:
    """(M,) int64 row-major positions of index's (M, k) tuples in `dims`; -1 for a tuple out of range."""
    count, k = index.shape
    linear = filled((count,), 0, dt.int64)
    valid = None
    for j, size in enumerate(dims):
        i = _wrapped(index[:, j], size)
        inside = (i >= 0) & (i < size)
        valid = inside if valid is None else valid & inside
        linear = linear * size + i
    return linear if valid is None else where(valid, linear, filled((), -1, dt.int64))


@_bool_as_int8
def scatter_nd(data: Tensor, index: Tensor, updates: Tensor, reduction: str) -> Tensor:
    """output[index[q]] (op)= updates[q] for each tuple q of index's leading axes."""
    k = index.shape[-1]
    count = prod(index.shape[:-1])
    targets, width = prod(data.shape[:k]), prod(data.shape[k:])
    if not count or not targets or not width:
        return data
    linear = _linear_index(index.to(dt.int64).reshape((count, k)), data.shape[:k])
    mask = linear.reshape((count, 1)) == _iota(targets, 1, 2)  # (updates, targets)
    flat, rows = data.reshape((targets, width)), updates.reshape((count, width))
    if reduction == "none":
        last = where(mask, _iota(count, 0, 2), filled((), -1, dt.int64)).amax(0)  # (targets,)
        chosen = apply("take", [rows, last.maximum(filled((), 0, dt.int64))], axis=0)
        out = where((last >= 0).reshape((targets, 1)), chosen, flat)
    elif reduction == "add" and count * targets * width > _BROADCAST_LIMIT:
        out = flat + matmul(mask.to(data.dtype).transpose(0, 1), rows)
    else:
        identity = _identity(reduction, data.dtype)
        spread = where(mask.reshape((count, targets, 1)), rows.reshape((count, 1, width)), identity)
        out = _combine(flat, _reduce(spread, reduction, 0), reduction)
    return out.reshape(tuple(data.shape))


@converter("ScatterND")
def _scatter_nd(ctx, inputs, attrs):
    data, index, updates = inputs
    reduction = _reduction(ctx, attrs)
    k = index.shape[-1] if index.ndim else -1
    if index.ndim < 1 or k > data.ndim:
        raise ShapeError(f"indices {list(index.shape)}: the last axis (the tuple length) must be at most the "
                         f"rank of data {list(data.shape)}")
    expected = tuple(index.shape[:-1]) + tuple(data.shape[k:])
    if tuple(updates.shape) != expected:
        raise ShapeError(f"updates {list(updates.shape)} must have shape {list(expected)} "
                         f"(indices {list(index.shape)}, data {list(data.shape)})")
    if not index.is_traced:
        for j in range(k):
            _check_range(index[..., j], data.shape[j], "ScatterND")
    with composite_scope("scatter_nd"):
        return scatter_nd(data, index, updates, reduction)


# ---- TensorScatter ------------------------------------------------------------------------------

@converter("TensorScatter")
def _tensor_scatter(ctx, inputs, attrs):
    """KV-cache update: cache[b, ..., w[b] + s, ...] = update[b, ..., s, ...] (modulo the length if circular).

    Written as the inverse map, a gather: cache position j reads update position j - w[b]."""
    cache, update = inputs[0], inputs[1]
    writes = inputs[2] if len(inputs) > 2 else None
    axis = normalize_axis(attrs.get("axis", -2), cache.ndim)
    mode = attrs.get("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.unsupported(f"mode {mode!r} (expected 'linear' or 'circular')")
    length, count = cache.shape[axis], update.shape[axis]
    if axis == 0 or update.ndim != cache.ndim or count > length or any(
            u != c for d, (u, c) in enumerate(zip(update.shape, cache.shape)) if d != axis):
        raise ShapeError(f"update {list(update.shape)} must match past_cache {list(cache.shape)} except along "
                         f"the sequence axis {axis} (not the batch axis), where it may be shorter")
    if not count:
        return cache
    with composite_scope("tensor_scatter"):
        start = filled((cache.shape[0],), 0, dt.int64) if writes is None else writes.to(dt.int64)
        start = start.reshape([cache.shape[0] if d == 0 else 1 for d in range(cache.ndim)])
        source = _iota(length, axis, cache.ndim) - start  # the update position each cache position reads
        if mode == "circular":
            source = source % length
        valid = (source >= 0) & (source < count)
        source = source.maximum(filled((), 0, dt.int64)).minimum(filled((), count - 1, dt.int64))
        shape = tuple(cache.shape)
        values = update.gather(axis, source.expand(shape))
        return where(valid.expand(shape), values, cache)
