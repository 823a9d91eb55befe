"""Inline a fused group of graph nodes into one scalar expression per output element.

`ValueBuilder.value(node, index)` returns the loop-IR expression of `node`'s
element at the multi-index `index` (a list of index expressions). Nodes that
are materialized are loads from their buffer; every other node is expanded
in place: elementwise ops become arithmetic, and movement ops become index
arithmetic on their input's index (a transpose permutes the index, a reshape
linearizes and delinearizes it, a slice scales and offsets it), so no copy is
made. This is Halide's and TVM's compute_inline.
"""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from ..ir.graph import Node
from ..ir.ops import get_op
from ..loops import expr as E
from ..shapes import is_symbolic, prod
from ..loops.buffer import Buffer
from ..loops.types import INDEX_DTYPE, compute_dtype
from ..dtypes import f32_from_bf16_bits


def linear_index(index: list[E.Expr], shape: tuple[int, ...]) -> E.Expr:
    """Row-major flat offset of a multi-index."""
    flat: E.Expr = E.const(0)
    stride = 1
    for i, size in reversed(list(zip(index, shape))):
        if size != 1:
            flat = i * stride + flat if stride != 1 else i + flat
        stride *= size
    return flat


def delinearize(flat: E.Expr, shape: tuple[int, ...]) -> list[E.Expr]:
    """Multi-index of a row-major flat offset."""
    index: list[E.Expr] = []
    stride = prod(shape) if shape else 1
    for axis, size in enumerate(shape):
        stride //= max(size, 1)
        if size == 1:
            index.append(E.const(0))
        elif axis == 0 and is_symbolic(size):
            # the flat offset is in range, so the outermost index needs no modulo; with a symbolic
            # size the simplifier could not prove that and would keep a division per element
            index.append(flat // stride if stride != 1 else flat)
        else:
            index.append((flat // stride) % size if stride != 1 else flat % size)
    return index


def reshape_index(index: list[E.Expr], out_shape: tuple[int, ...], in_shape: tuple[int, ...]) -> list[E.Expr]:
    """The input index that a reshape from `in_shape` to `out_shape` reads for an output index.

    Dimensions are matched in groups of equal size ([128, 768] -> [1, 128, 12, 64] is
    128 -> 128 and 768 -> 12 x 64), and only within a group does the index go through
    a flat offset: a div/mod costs per element, and the simplifier cannot always undo
    one that straddles groups (it would have to know the other index's range).
    """
    if 0 in out_shape or 0 in in_shape:
        return delinearize(linear_index(index, out_shape), in_shape)
    outs = [k for k, d in enumerate(out_shape) if d != 1]
    ins = [k for k, d in enumerate(in_shape) if d != 1]
    result: list[E.Expr] = [E.const(0)] * len(in_shape)
    i = j = 0
    while i < len(outs) or j < len(ins):
        group_out, group_in = [outs[i]], [ins[j]]
        size_out, size_in = out_shape[outs[i]], in_shape[ins[j]]
        i, j = i + 1, j + 1
        while size_out != size_in:
            if size_out < size_in:
                group_out.append(outs[i])
                size_out *= out_shape[outs[i]]
                i += 1
            else:
                group_in.append(ins[j])
                size_in *= in_shape[ins[j]]
                j += 1
        if len(group_out) == 1 and len(group_in) == 1:
            result[group_in[0]] = index[group_out[0]]
            continue
        flat = linear_index([index[k] for k in group_out], tuple(out_shape[k] for k in group_out))
        for k, value in zip(group_in, delinearize(flat, tuple(in_shape[k] for k in group_in))):
            result[k] = value
    return result


def broadcast_index(index: list[E.Expr], out_shape: tuple[int, ...], in_shape: tuple[int, ...]) -> list[E.Expr]:
    """The input index that numpy broadcasting reads for an output index."""
    lead = len(out_shape) - len(in_shape)
    return [E.const(0) if d == 1 and out_shape[lead + k] != 1 else index[lead + k]
            for k, d in enumerate(in_shape)]


def _clamp(i: E.Expr, size: int) -> E.Expr:
    return E.minimum(E.maximum(i, 0), size - 1)


def _const_value(value, dtype: str) -> E.Expr:
    dtype = compute_dtype(dtype)
    if dtype == "bool":
        return E.Const(bool(value), "bool")
    if dtype.startswith("float"):
        return E.Const(float(value), dtype)
    return E.Const(int(value), dtype)


class ValueBuilder:
    """Builds element expressions for the nodes of one kernel."""

    def __init__(self, buffers: dict[int, Buffer], inline_root: Node | None = None,
                 known: dict[int, E.Expr] | None = None):
        self.buffers = buffers  # node id -> buffer of every materialized node
        self.inline_root = inline_root  # the kernel's own root is computed, not loaded
        self.known = known or {}  # node id -> expression already computed (a contraction's accumulator)

    def value(self, node: Node, index: list[E.Expr]) -> E.Expr:
        """Expression of node's element at `index` (compute dtype)."""
        if node.id in self.known:
            return self.known[node.id]
        if node.op == "constant" and node.type.size == 1:
            scalar = node.attrs["value"].array.reshape(-1)[0]
            if node.dtype.name == "bfloat16":
                scalar = f32_from_bf16_bits(np.array([scalar]))[0]
            return _const_value(scalar, node.dtype.name)
        if node.id in self.buffers and node is not self.inline_root:
            return E.Load(self.buffers[node.id], linear_index(index, node.shape))
        lower = get_op(node.op).lower
        if lower is not None:  # elementwise: the op table's row says how
            if not node.inputs:  # an element that is a function of its index alone (iota)
                return lower(tuple(index), node)
            operands = tuple(self._operand(node, k, index) for k in range(len(node.inputs)))
            return lower(operands + tuple(index) if get_op(node.op).indexed else operands, node)
        handler = getattr(self, "_" + node.op, None)
        if handler is not None:
            return handler(node, index)
        raise UnsupportedOpError(f"the C backend cannot inline op {node.op!r}")

    def _operand(self, node: Node, k: int, index: list[E.Expr]) -> E.Expr:
        inp = node.inputs[k]
        return self.value(inp, broadcast_index(index, node.shape, inp.shape))

    # ---- movement ops: index arithmetic -----------------------------------------------
    def _reshape(self, node, index):
        src = node.inputs[0]
        return self.value(src, reshape_index(index, node.shape, src.shape))

    def _permute(self, node, index):
        src_index = [None] * len(index)
        for out_axis, in_axis in enumerate(node.attrs["perm"]):
            src_index[in_axis] = index[out_axis]
        return self.value(node.inputs[0], src_index)

    def _expand(self, node, index):
        return self.value(node.inputs[0], broadcast_index(index, node.shape, node.inputs[0].shape))

    def _slice(self, node, index):
        a = node.attrs
        src = [i * step + start if step != 1 else i + start
               for i, start, step in zip(index, a["starts"], a["steps"])]
        return self.value(node.inputs[0], src)

    def _pad(self, node, index):
        src_node = node.inputs[0]
        inside: E.Expr | None = None
        src = []
        for i, (lo, _), size in zip(index, node.attrs["pads"], src_node.shape):
            if size == 0:
                return _const_value(node.attrs["value"], node.dtype.name)
            j = i - lo if lo else i
            if (lo, _) != (0, 0):
                test = E.logical_and(E.ge(j, 0), E.lt(j, size))
                inside = test if inside is None else E.logical_and(inside, test)
                j = _clamp(j, size)  # the load stays in bounds even where it is not used
            src.append(j)
        value = self.value(src_node, src)
        if inside is None:
            return value
        return E.Select(inside, value, _const_value(node.attrs["value"], node.dtype.name))

    def _concat(self, node, index):
        axis = node.attrs["axis"]
        pieces = [(inp, inp.shape[axis]) for inp in node.inputs if inp.shape[axis] > 0]
        offsets = np.cumsum([0] + [size for _, size in pieces])
        result: E.Expr | None = None
        for (inp, size), start in reversed(list(zip(pieces, offsets[:-1]))):
            src = list(index)
            src[axis] = _clamp(index[axis] - int(start), size) if start else _clamp(index[axis], size)
            value = self.value(inp, src)
            result = value if result is None else E.Select(E.lt(index[axis], int(start + size)), value, result)
        return result

    def _index_value(self, index_node: Node, index: list[E.Expr], size: int) -> E.Expr:
        i = E.cast(self.value(index_node, index), INDEX_DTYPE)
        i = E.Select(E.lt(i, 0), i + size, i)  # negative indices count from the end
        return _clamp(i, size)  # out-of-range indices are caught by the checks in debug mode

    def _take(self, node, index):
        data, idx = node.inputs
        axis = node.attrs["axis"]
        k = idx.ndim
        i = self._index_value(idx, index[axis:axis + k], data.shape[axis])
        return self.value(data, index[:axis] + [i] + index[axis + k:])

    def _gather(self, node, index):
        data, idx = node.inputs
        axis = node.attrs["axis"]
        src = list(index)
        src[axis] = self._index_value(idx, index, data.shape[axis])
        return self.value(data, src)

    def _window(self, node, index):
        a = node.attrs
        n = len(a["kernel"])
        lead = len(index) - 2 * n
        src = list(index[:lead])
        for j in range(n):
            o, k = index[lead + j], index[lead + n + j]
            src.append(o * a["stride"][j] + k * a["dilation"][j])
        return self.value(node.inputs[0], src)
