"""Row kernels: softmax and layer norm in one pass over each row, reductions included.

A group whose elementwise root reads row reductions (reductions over the
trailing k axes, kept as size-1 dims) becomes, for each row:

    for each inner reduction, in order:  acc_i = reduce over the row of its input
    for each per-row value (e.g. rsqrt(var + eps)):  let v = ... (computed once per row)
    for each element of the row:  out = root's expression, reading acc_i and v as scalars

so the row is read once per reduction and written once, and no per-row
intermediate goes to memory.
"""
from __future__ import annotations

import numpy as np

from ...graph import Node
from ...ops.registry import OpKind
from .. import expr as E
from ..buffer import Buffer
from ..inline import ValueBuilder, delinearize
from ..ir import For, Let, Store, Stmt, block
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS
from ..types import compute_dtype


def row_body(root: Node, members: list[Node], out: Buffer, buffers: dict[int, Buffer], accumulate) -> Stmt | None:
    """Loop IR of a row kernel (see the module docstring)."""
    inner = [n for n in members if n.kind == OpKind.REDUCTION and n is not root]
    k = len(inner[0].attrs["axes"])
    full = inner[0].inputs[0].shape
    lead, tail = full[:len(full) - k], full[len(full) - k:]
    row_shape = lead + (1,) * k
    rows = int(np.prod(lead, dtype=np.int64)) if lead else 1
    width = int(np.prod(tail, dtype=np.int64))
    if rows * width == 0:
        return None
    r = E.Var("row")
    lead_index = delinearize(r, lead) if lead else []
    known: dict[int, E.Expr] = {}
    stmts: list[Stmt] = []
    counter = 0
    # softmax's e / sum(e): the sum pass also writes e to the output, and the last pass only
    # divides, so exp runs once per element instead of twice.
    normalizer = _row_normalizer(root, inner, out)

    for n in members:
        if n is root and n.kind != OpKind.REDUCTION:
            continue
        values = ValueBuilder(buffers, inline_root=n, known=known)
        if n.kind == OpKind.REDUCTION:
            counter += 1
            flat = E.Var(f"e{counter}")
            dtype = compute_dtype(n.inputs[0].dtype.name)
            acc = E.Var(f"acc{counter}", dtype)
            element = values.value(n.inputs[0], lead_index + delinearize(flat, tail))
            declarations, updates, result = accumulate(n.op, acc, element)
            if n is normalizer:
                updates = [Store(out, r * width + flat, element)] + updates
            stmts += declarations + [For(flat, E.const(width), block(*updates), "vectorized")]
            if result is not acc:  # a final fix-up (NaN seen): computed once per row
                fixed = E.Var(f"r{counter}", dtype)
                stmts.append(Let(fixed, result))
                result = fixed
            known[n.id] = result
            if n is root:
                stmts.append(Store(out, r, E.cast(result, out.value_dtype)))
        elif n.kind == OpKind.ELEMENTWISE and n.shape == row_shape and _depends_on(n, known):
            counter += 1
            v = E.Var(f"v{counter}", compute_dtype(n.dtype.name))
            stmts.append(Let(v, values.value(n, lead_index + [E.const(0)] * k)))
            known[n.id] = v
    if normalizer is not None:
        flat = E.Var("e0")
        stmts.append(For(flat, E.const(width), Store(out, r * width + flat,
                                                     E.Load(out, r * width + flat) / known[normalizer.id]),
                         "vectorized"))
    elif root.kind != OpKind.REDUCTION:
        flat = E.Var("e0")
        values = ValueBuilder(buffers, inline_root=root, known=known)
        value = values.value(root, lead_index + delinearize(flat, tail))
        stmts.append(For(flat, E.const(width), Store(out, r * width + flat, E.cast(value, out.value_dtype)),
                         "vectorized"))
    parallel = rows > 1 and rows * width * (len(inner) + 1) >= PARALLEL_MIN_ELEMENTS
    return For(r, E.const(rows), block(*stmts), "parallel" if parallel else "serial")


def _row_normalizer(root: Node, inner: list[Node], out: Buffer) -> Node | None:
    """The sum s when the root is e / s with s = sum(e) over the row, the last inner reduction."""
    if root.op != "div" or out.dtype not in ("float32", "float64") or not inner:
        return None
    e, s = root.inputs
    last = inner[-1]
    if s is not last or last.op != "reduce_sum" or last.inputs[0] is not e or e.shape != root.shape:
        return None
    return last


def _depends_on(node: Node, known: dict[int, E.Expr]) -> bool:
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n.id in known:
            return True
        if n.id in seen:
            continue
        seen.add(n.id)
        stack.extend(n.inputs)
    return False

