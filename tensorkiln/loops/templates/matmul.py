"""A first matmul loop nest: rows in parallel, a row of accumulators, i-k-j order.

For each output row i the kernel keeps N accumulators in a local buffer and
streams rows of B through them (out[i, :] += A[i, k] * B[k, :]), so the inner
loop is contiguous in B and in the accumulators and vectorizes. Operands are
read through `ValueBuilder`, so a transposed or reshaped operand costs index
arithmetic, not a copy. 16-bit operands accumulate in float32.
"""
from __future__ import annotations

import numpy as np

from ...graph import Node
from .. import expr as E
from ..buffer import Buffer
from ..inline import ValueBuilder, broadcast_index, delinearize
from ..ir import Alloc, For, Let, Store, Stmt, block
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS
from ..types import compute_dtype


def matmul_body(root: Node, out: Buffer, values: ValueBuilder) -> Stmt | None:
    """Loop IR computing out = A @ B with broadcast batch dimensions."""
    a_node, b_node = root.inputs
    *batch_shape, m, n = root.shape
    k_extent = a_node.shape[-1]
    batch = int(np.prod(batch_shape, dtype=np.int64)) if batch_shape else 1
    if batch * m * n == 0:
        return None
    dtype = compute_dtype(root.dtype.name)
    zero = E.Const(0.0 if dtype.startswith("float") else 0, dtype)

    bi, k = E.Var("bi"), E.Var("k")
    j0, j, j2 = E.Var("j0"), E.Var("j"), E.Var("j2")  # names must be unique within a kernel
    b, i = (bi // m, bi % m) if m > 1 else (bi, E.const(0))
    batch_index = delinearize(b, tuple(batch_shape)) if batch_shape else []
    a_batch = broadcast_index(batch_index, tuple(batch_shape), a_node.shape[:-2])
    b_batch = broadcast_index(batch_index, tuple(batch_shape), b_node.shape[:-2])

    acc = Buffer("acc", out.dtype if out.dtype == dtype else dtype, (n,), scope="local")
    a_ik = E.Var("a_ik", dtype)
    if k_extent == 0:
        k_loop: Stmt = block()
    else:
        k_loop = For(k, E.const(k_extent), block(
            Let(a_ik, values.value(a_node, a_batch + [i, k])),
            For(j, E.const(n), Store(acc, j, E.Load(acc, j) + a_ik * values.value(b_node, b_batch + [k, j])),
                "vectorized")))
    update = For(j0, E.const(n), Store(acc, j0, zero), "vectorized")
    write = For(j2, E.const(n), Store(out, bi * n + j2, E.cast(E.Load(acc, j2), out.value_dtype)), "vectorized")
    row = Alloc(acc, block(update, k_loop, write) if k_extent else block(update, write))
    parallel = batch * m * n * max(k_extent, 1) >= PARALLEL_MIN_ELEMENTS and batch * m > 1
    return For(bi, E.const(batch * m), row, "parallel" if parallel else "serial")
