"""Loop IR of the weight-only matmuls: `matmul_int8w` / `matmul_int4w` (any number of rows), and
`matmul_bf16_packed` too small for the bf16 GEMM (a matrix-vector product while decoding:
matmul.blis_gemm_applies says no).

Decoding a token multiplies one row of activations by every weight of the model once: the time is
the weight bytes read, so the weights stay in their compact form (1 byte, 1/2 byte or a bf16 per
weight) and are widened to float32 in registers by the C helpers (weight_only_c.py). The work
is cut into tasks of up to ROW_BLOCK rows x a block of panels, spread over the threads::

    for task in row blocks x panel blocks (parallel):
      apack[rows x K] = A rows              # loop IR; skipped when A's rows lie in a buffer
                                            #   (bf16: always, as bf16 pairs, zero past K)
      tile[rows x cols] = apack @ weights   # the C helper: weights dequantized in registers
      out[rows, cols] = epilogue(tile)      # loop IR: the fused epilogue (bias, activation, ...)

With many rows (a prompt's prefill) the same helper runs 4 rows per pass over a panel, which
stays in L1/L2 between passes; int8's avx2 helper instead dequantizes a block of the panel to float32
once per task and runs the float GEMM's register tile over it (as fast as the float GEMM: widening
each weight vector inside the tile cost two instructions per 4 rows' FMAs).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...ir.graph import Node
from ...ir.ops.weight_only import PANEL_COLUMNS, WEIGHT_BITS
from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import Alloc, For, NativeCall, Pointer, Stmt, Store, block
from ..inline import ValueBuilder, broadcast_index, delinearize
from ..schedule_defaults import thread_count
from ..target import cpu_target
from .gemm import PARALLEL_MIN_MACS
from .stream_prefetch import weight_stream_prefetch
from .weight_only_c import INT4_512_KINDS, bf16_matvec_source, int4_weight_source, int_weight_source

ROW_BLOCK = 32  # rows of A per task: their K floats stay in L1/L2 while the panels stream past
COLUMN_BLOCK = 512  # columns per task at most
TASKS_PER_THREAD = 4  # enough tasks that uneven progress of the threads evens out


def weight_only_kind() -> str:
    """The int8 helper's variant on this target: "avx512" (512-bit vectors), "avx2" (256-bit vectors
    with FMA) or "portable"."""
    target = cpu_target()
    if target.vector_bytes >= 64:
        return "avx512"
    return "avx2" if target.vector_bytes == 32 and target.fma256 else "portable"


def int4_kind() -> str:
    """The int4 helper's variant: "vnni" (vpdpbusd), "avx512bw" (vpmaddubsw), "avx2" (vpmaddubsw on
    32-byte vectors) or "portable"."""
    target = cpu_target()
    if target.int8_dot == "portable":
        return "portable"
    # the 64-byte forms where the vectors are that wide; any other integer dot path implies AVX2
    return target.int8_dot if target.vector_bytes >= 64 and target.int8_dot in INT4_512_KINDS else "avx2"


def bf16_matvec_kind() -> str:
    """The bf16 matrix-vector helper's variant: "dpbf16" (AVX512-BF16), "avx512", "avx2" (256-bit
    vectors with FMA) or "portable" (plain C, one chain per column: much slower than the float32
    matrix-vector product, so only for a CPU without AVX2)."""
    target = cpu_target()
    if target.vector_bytes < 64:
        return "avx2" if target.vector_bytes == 32 and target.fma256 else "portable"
    return "dpbf16" if target.bf16_dot else "avx512"


def _split(rows: int, panels: int, width: int, macs: int) -> tuple[int, int, bool]:
    """(rows per task, panels per task, parallel)."""
    threads = thread_count()
    mb = min(ROW_BLOCK, rows)
    row_tasks = -(-rows // mb)
    parallel = threads > 1 and macs >= PARALLEL_MIN_MACS
    want = max(1, -(-TASKS_PER_THREAD * threads // row_tasks)) if parallel else 1
    per_task = max(1, min(COLUMN_BLOCK // width, -(-panels // want)))
    return mb, per_task, parallel and row_tasks * -(-panels // per_task) > 1


def _tasks(root: Node, out: Buffer, values: ValueBuilder, epilogue, width: int, panels: int,
           a_pack: tuple[str, int] | None, call: Callable[[Pointer, int, E.Expr, E.Expr, E.Expr, Buffer], Stmt],
           prefix: str) -> Stmt | None:
    """The task loop shared by the helpers.

    a_pack: None to read A's rows in place (float32, lda = K), else (dtype, K padded) of the local
    copy. call(a, lda, rows, first panel, panel count, tile) is the helper's NativeCall, writing
    tile[r * cols + c] for the task's rows r and columns c.
    """
    a_node = root.inputs[0]
    *batch_shape, m, n = root.shape
    batch_shape = tuple(batch_shape)
    k = a_node.shape[-1]
    rows = int(np.prod(batch_shape, dtype=np.int64)) * m if batch_shape else m
    if rows == 0 or n == 0:
        return None
    mb, per_task, parallel = _split(rows, panels, width, rows * n * k)
    row_tasks, col_tasks = -(-rows // mb), -(-panels // per_task)
    nb = per_task * width
    task, r, kk, c = (E.Var(f"{prefix}_{name}") for name in ("task", "r", "k", "c"))
    row0 = (task // col_tasks) * mb if col_tasks > 1 else task * mb
    panel0 = task % col_tasks if col_tasks > 1 else E.const(0)
    panel0 = panel0 * per_task
    col0 = panel0 * width
    task_rows = E.minimum(E.const(mb), rows - row0) if rows % mb else E.const(mb)
    task_panels = E.minimum(E.const(per_task), panels - panel0) if panels % per_task else E.const(per_task)
    task_cols = E.minimum(E.const(nb), n - col0) if n % nb else E.const(nb)
    tile = Buffer(f"{prefix}_tile", "float32", (mb * nb,), scope="local")

    def out_index(row: E.Expr, col: E.Expr) -> list[E.Expr]:
        if not batch_shape:
            return [row, col]
        return delinearize(row // m, batch_shape) + [row % m, col] if m > 1 else \
            delinearize(row, batch_shape) + [E.const(0), col]

    if a_pack is None:
        compute = call(Pointer(values.buffers[a_node.id], row0 * k), k, task_rows, panel0, task_panels, tile)
    else:
        dtype, depth = a_pack
        apack = Buffer(f"{prefix}_apack", dtype, (mb * depth,), scope="local")
        index = out_index(row0 + r, E.minimum(kk, k - 1))
        value = values.value(a_node, broadcast_index(index[:-2], batch_shape, a_node.shape[:-2]) + index[-2:])
        if depth != k:
            value = E.Select(E.lt(kk, k), value, E.Const(0.0, "float32"))
        pack = For(r, task_rows, For(kk, E.const(depth), Store(apack, r * depth + kk, value), "vectorized"))
        lda = depth // 2 if dtype == "bfloat16" else depth  # bf16: pairs, one 32-bit word each
        compute = Alloc(apack, block(pack, call(Pointer(apack, E.const(0)), lda, task_rows, panel0, task_panels,
                                                tile)))
    acc = E.Load(tile, r * nb + c)
    stored = E.cast(acc, out.value_dtype) if epilogue is None else epilogue(out_index(row0 + r, col0 + c), acc)
    write = For(r, task_rows, For(c, task_cols, Store(out, (row0 + r) * n + col0 + c, stored), "vectorized"))
    tasks = row_tasks * col_tasks
    return For(task, E.const(tasks), Alloc(tile, block(compute, write)), "parallel" if parallel else "serial")


def weight_only_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """Loop IR computing out = epilogue(A @ dequantized W) for a matmul_int8w / matmul_int4w node."""
    a_node, q_node, s_node = root.inputs
    bits = WEIGHT_BITS[root.op]
    kind = weight_only_kind() if bits == 8 else int4_kind()
    k, group = root.attrs["k"], root.attrs["group"]
    groups = s_node.shape[1]
    panels = q_node.shape[0]
    q_buf, s_buf = values.buffers[q_node.id], values.buffers[s_node.id]
    panel_bytes = q_node.shape[1] * q_node.shape[2]
    function = f"tk_w{bits}_matmul_{kind}"
    ahead = weight_stream_prefetch("int8")  # int4 too: the stream is bytes either way

    def call(a: Pointer, lda: int, rows: E.Expr, panel0: E.Expr, count: E.Expr, tile: Buffer) -> Stmt:
        return NativeCall(function, (a, E.const(lda), rows, Pointer(q_buf, panel0 * panel_bytes),
                                     Pointer(s_buf, panel0 * (groups * PANEL_COLUMNS)), count, E.const(k),
                                     E.const(group), E.const(groups), Pointer(tile, E.const(0)),
                                     E.const(_tile_columns(root, panels, PANEL_COLUMNS))),
                          writes=(tile.name,),
                          source=int_weight_source(bits, kind, ahead) if bits == 8 else int4_weight_source(kind, ahead))

    in_place = a_node.id in values.buffers and a_node.dtype.name == "float32"
    return _tasks(root, out, values, epilogue, PANEL_COLUMNS, panels, None if in_place else ("float32", k), call,
                  f"w{bits}")


def bf16_matvec_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """Loop IR computing out = epilogue(A @ B) for a matmul_bf16_packed node with few rows: A's rows
    as bf16 pairs (they hold bf16 values: the precision pass rounded them), B's pairs read in place."""
    a_node, b_node = root.inputs
    panels, pairs, double_width = b_node.shape
    width = double_width // 2
    if width % 16:
        raise ValueError(f"matmul_bf16_packed: the matrix-vector helper takes panels of a multiple of 16 columns, "
                         f"got {width}")
    kind = bf16_matvec_kind() if width <= 32 else "portable"
    b_buf = values.buffers[b_node.id]

    def call(a: Pointer, lda: int, rows: E.Expr, panel0: E.Expr, count: E.Expr, tile: Buffer) -> Stmt:
        return NativeCall(f"tk_bf16_matvec_{kind}", (a, E.const(lda), rows, Pointer(b_buf, panel0 * (pairs * 2 * width)),
                                                      count, E.const(pairs), E.const(width), Pointer(tile, E.const(0)),
                                                      E.const(_tile_columns(root, panels, width))),
                          writes=(tile.name,), source=bf16_matvec_source(kind))

    return _tasks(root, out, values, epilogue, width, panels, ("bfloat16", 2 * pairs), call, "mv")


def _tile_columns(root: Node, panels: int, width: int) -> int:
    """The tile's row length (ldc): the task's panels x their width, as `_tasks` allocates it."""
    *batch_shape, m, n = root.shape
    rows = int(np.prod(batch_shape, dtype=np.int64)) * m if batch_shape else m
    k = root.inputs[0].shape[-1]
    return _split(rows, panels, width, rows * n * k)[1] * width


__all__ = ["bf16_matvec_body", "bf16_matvec_kind", "int4_kind", "weight_only_body", "weight_only_kind"]
