"""Tensor indexing with numpy's semantics: ints, slices (any step), None, Ellipsis,
integer arrays (advanced indexing) and boolean masks (eager only).

Basic indexing becomes one `slice` and one `reshape`; advanced indexing becomes
a `take` on the indexed axes (merged into one when there are several).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..errors import ShapeError, TraceError, at_user_line
from .tensor import Tensor, apply, as_tensor, tensor_methods
from .trace import current_trace
from ..shapes import is_symbolic, prod


def _is_int(k) -> bool:
    return isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))


def _classify(key, shape: tuple[int, ...]) -> list[tuple[str, object]]:
    """Expand Ellipsis and masks: a list of ('int'|'slice'|'none'|'array'|'bool0', value) per key item.

    A boolean mask becomes one integer array per mask dimension (its nonzero
    indices); a 0-d bool ('bool0') is a new axis indexed by [0] (True) or [] (False).
    """
    ndim = len(shape)
    if not isinstance(key, tuple):
        key = (key,)
    items: list[tuple[str, object]] = []
    for k in key:
        if k is None:
            items.append(("none", None))
        elif k is Ellipsis:
            items.append(("ellipsis", None))
        elif isinstance(k, slice):
            items.append(("slice", k))
        elif _is_int(k):
            items.append(("int", int(k)))
        else:
            if isinstance(k, list) and len(k) == 0:
                k = np.zeros(0, dtype=np.int64)  # numpy: an empty list selects nothing
            index = k if isinstance(k, Tensor) else as_tensor(np.asarray(k) if not isinstance(k, list) else k)
            if index.dtype.is_bool:
                if index.is_traced:
                    raise TraceError(at_user_line("indexing with a boolean mask gives a data-dependent "
                                                  "shape and cannot be traced; use tk.where"))
                mask = index.numpy()
                if mask.ndim == 0:  # numpy: a new axis indexed by nonzero(mask), i.e. [0] or []
                    items.append(("bool0", as_tensor(np.arange(int(mask), dtype=np.int64))))
                    continue
                for size, axis_index in zip(mask.shape, np.nonzero(mask)):
                    items.append(("mask", (as_tensor(axis_index.astype(np.int64)), size)))
            elif index.dtype.is_integer:
                items.append(("array", index))
            else:
                raise IndexError(f"tensors used as indices must be integer or bool, got {index.dtype.name}")
    if sum(kind == "ellipsis" for kind, _ in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(kind in ("int", "slice", "array", "mask") for kind, _ in items)
    if consumed > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    expanded = []
    axis = 0
    for kind, value in items:
        if kind == "ellipsis":
            # an ellipsis standing for no axis still separates advanced indices (numpy): keep a mark
            expanded += [("slice", slice(None))] * (ndim - consumed) or [("gap", None)]
            axis += ndim - consumed
            continue
        if kind == "mask":  # one item per mask dimension: that dimension must fit the tensor's
            index, size = value
            if shape[axis] != size:
                raise IndexError(f"boolean index did not match indexed tensor along dimension {axis}; size of "
                                 f"dimension is {shape[axis]} but size of corresponding boolean dimension "
                                 f"is {size}")
            kind, value = "array", index
        expanded.append((kind, value))
        if kind in ("int", "slice", "array"):
            axis += 1
    if not any(kind == "ellipsis" for kind, _ in items):
        expanded += [("slice", slice(None))] * (ndim - consumed)
    return expanded


def getitem(x: Tensor, key) -> Tensor:
    """x[key] with numpy semantics."""
    items = _classify(key, tuple(x.shape))
    advanced = any(kind in ("array", "bool0") for kind, _ in items)
    if advanced:  # numpy treats ints next to arrays as 0-d index arrays
        items = [("array", as_tensor(np.int64(v))) if kind == "int" else (kind, v) for kind, v in items]
    marks = [i for i, (kind, _) in enumerate(items) if kind in ("array", "bool0")]
    adjacent = marks == list(range(marks[0], marks[0] + len(marks))) if marks else True
    items = [item for item in items if item[0] != "gap"]

    starts, stops, steps, out_shape = [], [], [], []
    axis = 0
    for kind, value in items:
        if kind in ("none", "bool0"):  # a new axis (bool0 indexes it below)
            out_shape.append(1)
            continue
        size = x.shape[axis]
        if kind == "int":
            if not -size <= value < size:
                raise IndexError(f"index {value} is out of bounds for dimension {axis} with size {size}")
            value %= size
            starts.append(value), stops.append(value + 1), steps.append(1)
        elif kind == "slice":
            start, stop, step = _slice_bounds(value, size)
            if step == 0:
                raise ValueError("slice step cannot be zero")
            starts.append(start), stops.append(stop), steps.append(step)
            if not (is_symbolic(start) or is_symbolic(stop)):
                out_shape.append(len(range(start, stop, step)))
            else:  # a forward slice has start <= stop (_slice_bounds); a reversed one is the whole axis
                out_shape.append(stop - start if step == 1 else start + 1)
        else:
            starts.append(0), stops.append(size), steps.append(1)
            out_shape.append(size)
        axis += 1

    y = x
    if any(not _whole_axis(a, b, c, n) for a, b, c, n in zip(starts, stops, steps, x.shape)):
        if not x.is_traced and any(is_symbolic(b) for b in stops):  # a constant sliced to a symbolic length
            trace = current_trace()
            y = Tensor._from_node(trace.constant_for(x), trace)
        y = apply("slice", [y], starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))
    y = y.reshape(tuple(out_shape))
    if not advanced:
        return y

    positions = [i for i, (kind, _) in enumerate(i for i in items if i[0] != "int") if kind in ("array", "bool0")]
    arrays = [v for kind, v in items if kind in ("array", "bool0")]
    return _advanced(y, positions, arrays, adjacent)


def _whole_axis(start, stop, step, size) -> bool:
    """A slice that keeps a whole axis; a stop and a size that differ in symbols count as different
    (asking `stop == size` would guard, and one more slice op is always correct)."""
    if is_symbolic(start) or is_symbolic(stop) or is_symbolic(size):
        return str(start) == "0" and step == 1 and str(stop) == str(size)
    return (start, stop, step) == (0, size, 1)


def _advanced(y: Tensor, positions: list[int], arrays: list[Tensor], adjacent: bool = True) -> Tensor:
    """Index the axes at `positions` of y by integer tensors (numpy's advanced indexing).

    adjacent=False: the key separated the index arrays (by a slice, a new axis or an
    ellipsis, even one standing for no axis), so the indexed dims go first."""
    for position, index in zip(positions, arrays):
        if not index.is_traced:
            values, size = index.numpy(), y.shape[position]
            if values.size and (values.min() < -size or values.max() >= size):
                bad = values[(values < -size) | (values >= size)].reshape(-1)[0]
                raise IndexError(f"index {bad} is out of bounds for dimension {position} with size {size}")
    if len(arrays) == 1 and adjacent:
        return apply("take", [y, arrays[0]], axis=positions[0])
    try:
        shape = np.broadcast_shapes(*[tuple(a.shape) for a in arrays])
    except ValueError:
        raise ShapeError(at_user_line("indexing arrays could not be broadcast together with shapes "
                                      + " ".join(str(list(a.shape)) for a in arrays))) from None
    # Move the indexed axes to the front, merge them, and index the merged axis by a linear index.
    rest = [i for i in range(y.ndim) if i not in positions]
    moved = y.permute(positions + rest)
    sizes = [y.shape[p] for p in positions]
    merged = moved.reshape((prod(sizes),) + tuple(moved.shape[len(positions):]))
    linear = None
    for index, size in zip(arrays, sizes):
        index = index.to(dt.int64)
        index = (index + size) % size if size else index  # wrap negative indices
        linear = index if linear is None else linear * size + index
    out = apply("take", [merged, linear.expand(shape) if tuple(linear.shape) != shape else linear], axis=0)
    adjacent = adjacent and positions == list(range(positions[0], positions[0] + len(positions)))
    if adjacent and positions[0] > 0:
        # numpy puts the indexed dims where the first indexed axis was when the axes are adjacent
        k, first = len(shape), positions[0]
        order = list(range(k, k + first)) + list(range(k)) + list(range(k + first, out.ndim))
        out = out.permute(order)
    return out


@tensor_methods
class TensorIndexing:
    """Tensor's indexing operator (added to Tensor: tensor.py is below this module)."""

    __slots__ = ()

    def __getitem__(self, key) -> Tensor:
        return getitem(self, key)


def _slice_bounds(value: slice, size):
    """(start, stop, step) of a Python slice on an axis of `size`, as slice.indices; a forward slice
    whose stop or size is a size symbol keeps it symbolic (guarded to lie within the axis), so
    `positions[:seq]` serves every sequence length."""
    start, stop, step = value.start, value.stop, value.step
    symbolic = is_symbolic(stop) or is_symbolic(size)
    if symbolic and step in (None, 1) and (start is None or (isinstance(start, int) and 0 <= start)) \
            and (stop is None or is_symbolic(stop) or stop >= 0):
        stop = size if stop is None else stop
        start = 0 if start is None else start
        if not (is_symbolic(stop) and stop is size):
            stop = stop if stop <= size else size  # a range guard on the symbol, never its value
        if start <= stop:
            return start, stop, 1
    if is_symbolic(size) and value == slice(None, None, -1):  # the whole axis reversed (flip)
        return size - 1, -1, -1
    return value.indices(size)
