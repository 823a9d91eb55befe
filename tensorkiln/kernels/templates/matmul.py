"""Matmul loop nests: the BLIS-style GEMM (gemm.py) for float matmuls above a small size, else a simple nest.

`use_blis_gemm` is the rule. The simple nest, for tiny, integer or
matrix-vector products, runs in one of two loop orders chosen by how B is
laid out:

- Row order (B contiguous along N): for each output row keep N accumulators in
  a local buffer and stream rows of B through them (acc[:] += A[i, k] * B[k, :]),
  so the inner loop is contiguous in B and vectorizes. With fewer rows than
  threads, N is cut into one block per thread (`_column_blocks`).
- Dot order (B contiguous along K, e.g. x @ W.T of a linear layer): each
  output element is a dot product over K, contiguous in both operands, and
  the (row, column) pairs run in parallel.

Operands are read through `ValueBuilder`, so a transposed or reshaped operand
costs index arithmetic, not a copy. 16-bit operands accumulate in float32.
"""
from __future__ import annotations

import numpy as np

from ...ir.graph import Node
from ...loops import expr as E
from ...loops.buffer import Buffer
from ..inline import ValueBuilder, broadcast_index, delinearize
from ...loops.ir import Alloc, Assign, For, Let, Store, Stmt, block
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS, thread_count
from ...loops.types import compute_dtype
from .gemm import Panels, analytic_gemm_blocking, gemm_blocking, gemm_needs_partial_sums
from .gemm_a_reads import b_reads_columns
from .gemm_bf16 import bf16_gemm, gemm_template, one_depth_block
from .weight_only import bf16_matvec_body
from .stream_prefetch import prefetch_stream, weight_stream_prefetch
from ...shapes import is_symbolic, prod
from ...loops.simplify import index_step


def load_stride(value: E.Expr, var: str, env: dict[str, int]) -> int | None:
    """Element stride of the first load in `value` when `var` grows by one (None: no load)."""
    loads = [e for e in E.walk(value) if isinstance(e, E.Load)]
    if not loads:
        return None
    return index_step(loads[0].index, var, env)


BLIS_MIN_FLOPS = 32 ** 3  # below this, packing costs more than the register tile saves


def use_blis_gemm(root: Node, out: Buffer) -> bool:
    """The rule: float32/float64, at least 4 x 8 outputs per matrix and 32^3 multiply-adds in all.

    With K over one depth block the partial sums go through the output, so it
    must hold the compute dtype (a float16 output or a cast epilogue keeps the
    simple nest).
    """
    return blis_gemm_applies(root, out.dtype)


def blis_gemm_applies(root: Node, out_dtype: str) -> bool:
    """`use_blis_gemm` for an output buffer of `out_dtype`."""
    a_node, _ = root.inputs
    *batch_shape, m, n = root.shape
    k = a_node.shape[-1]
    dtype = compute_dtype(root.dtype.name)
    if dtype not in ("float32", "float64") or a_node.dtype.name != root.dtype.name:
        return False
    batch = prod(batch_shape) if batch_shape else 1
    # Run-time rows (M or the batch) take the GEMM at every size, not a size class for small ones: its
    # short last tile is masked, and the simple nest it gives way to wins only on a few microseconds' work
    runtime_rows = is_symbolic(m) or is_symbolic(batch)
    if (not is_symbolic(m) and m < 4) or n < 8 or k < 1 or \
            (not runtime_rows and batch * m * n * k < BLIS_MIN_FLOPS):
        return False
    # a tuned blocking never adds depth blocks to the analytic one's (gemm.blocking_legal)
    blocking = analytic_gemm_blocking(m, n, k, dtype)
    return (out_dtype == dtype or not gemm_needs_partial_sums(k, blocking)
            or one_depth_block(k, out_dtype, root.op == "matmul_bf16_packed"))


PANEL_MIN_WEIGHTS = 4096  # a smaller B is not worth a second layout


def panel_order_applies(root: Node) -> bool:
    """A float matmul by a 2-D B too small for the GEMM (few rows of A: a matrix-vector product)
    whose B, when known at compile time, is laid out in panels for `_panel_order`."""
    a_node, b_node = root.inputs
    dtype = compute_dtype(root.dtype.name)
    k, n = b_node.shape[-2:] if b_node.ndim >= 2 else (0, 0)
    return (dtype in ("float32", "float64") and a_node.dtype.name == root.dtype.name and b_node.ndim == 2
            and n >= 8 and k * n >= PANEL_MIN_WEIGHTS and not blis_gemm_applies(root, dtype))


def _blis_matmul(root: Node, out: Buffer, values: ValueBuilder, epilogue) -> Stmt:
    a_node, b_node = root.inputs
    *batch_shape, m, n = root.shape
    batch_shape = tuple(batch_shape)
    k = a_node.shape[-1]
    dtype = compute_dtype(root.dtype.name)
    batch = prod(batch_shape) if batch_shape else 1
    if root.op == "matmul_bf16_packed":  # B's bf16 pairs (passes/packed_weights.py), read in place
        return _bf16_packed_matmul(root, out, values, epilogue)
    panels = None
    if root.op == "matmul_packed":  # B's panels (ceil(N/NR), K, NR), read in place: b_value is never asked
        panels = Panels(values.buffers[b_node.id], k * b_node.shape[2], b_node.shape[2], streamed=True)
    b_batched = panels is None and any(d != 1 for d in b_node.shape[:-2])
    if not b_batched and (batch > 1 or panels is not None):
        # B is shared by every batch: fold the batch into the rows, so B is packed once.
        def a_value(b, row, kk):
            index = delinearize(row // m, batch_shape) if m > 1 else delinearize(row, batch_shape)
            # one matrix (no batch, or batch axes of size 1) with a symbolic M: row < M, and a % by a
            # run-time M would cost a division per load (and make A packed instead of read in place)
            one_matrix = not batch_shape or (not is_symbolic(batch) and batch == 1)
            i = (row if one_matrix and is_symbolic(m) else row % m) if m > 1 else E.const(0)
            return values.value(a_node, broadcast_index(index, batch_shape, a_node.shape[:-2]) + [i, kk])

        def b_value(b, kk, col):
            return values.value(b_node, [E.const(0)] * (b_node.ndim - 2) + [kk, col])

        def epi(b, row, col, acc):
            return epilogue(_out_index(row, col, batch_shape, m), acc)

        blocking = gemm_blocking(batch * m, n, k, dtype, panels is not None,
                                 b_transposed=panels is None and b_reads_columns(b_value, E.Var("g_probe")))
        if panels is not None and blocking.nr != b_node.shape[2]:
            raise ValueError(f"matmul_packed: B's panels are {b_node.shape[2]} wide, this CPU's GEMM takes NR = "
                             f"{blocking.nr}")
        return gemm_template(root)(out, dtype, 1, batch * m, n, k, a_value, b_value, lambda b, row, col: row * n + col,
                           epi, blocking, b_panels=panels)

    def a_value(b, row, kk):
        index = delinearize(b, batch_shape) if batch_shape else []
        return values.value(a_node, broadcast_index(index, batch_shape, a_node.shape[:-2]) + [row, kk])

    def b_value(b, kk, col):
        index = delinearize(b, batch_shape) if batch_shape else []
        return values.value(b_node, broadcast_index(index, batch_shape, b_node.shape[:-2]) + [kk, col])

    def epi(b, row, col, acc):
        index = delinearize(b, batch_shape) if batch_shape else []
        return epilogue(index + [row, col], acc)

    return gemm_template(root)(out, dtype, batch, m, n, k, a_value, b_value, lambda b, row, col: (b * m + row) * n + col,
                       epi)


def _bf16_packed_matmul(root: Node, out: Buffer, values: ValueBuilder, epilogue) -> Stmt:
    """A (..., M, K) @ B given as bf16 pairs: the batch folded into the rows, as for matmul_packed."""
    a_node, b_node = root.inputs
    *batch_shape, m, n = root.shape
    batch_shape = tuple(batch_shape)
    k = a_node.shape[-1]
    batch = prod(batch_shape) if batch_shape else 1

    def a_value(b, row, kk):
        index = delinearize(row // m, batch_shape) if m > 1 else delinearize(row, batch_shape)
        i = row % m if m > 1 else E.const(0)
        return values.value(a_node, broadcast_index(index, batch_shape, a_node.shape[:-2]) + [i, kk])

    blocking = gemm_blocking(batch * m, n, k, "float32", True, template="gemm_bf16")
    if 2 * blocking.nr != b_node.shape[2]:
        raise ValueError(f"matmul_bf16_packed: B's pairs are {b_node.shape[2] // 2} columns wide, this CPU's GEMM "
                         f"takes NR = {blocking.nr}")
    return bf16_gemm(out, 1, batch * m, n, k, a_value, None, lambda b, row, col: row * n + col,
                     lambda b, row, col, acc: epilogue(_out_index(row, col, batch_shape, m), acc), blocking,
                     b_pairs=values.buffers[b_node.id])


def matmul_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """Loop IR computing out = epilogue(A @ B) with broadcast batch dimensions.

    `epilogue(index, acc)` gives the value stored for the output element at
    `index` (a list of index expressions) whose dot product is `acc`; by
    default the dot product itself, cast to the output type.
    """
    a_node, b_node = root.inputs
    if epilogue is None:
        epilogue = lambda index, acc: E.cast(acc, out.value_dtype)  # noqa: E731
    *batch_shape, m, n = root.shape
    k_extent = a_node.shape[-1]
    batch = prod(batch_shape) if batch_shape else 1
    if batch * m * n == 0:
        return None
    if use_blis_gemm(root, out):
        return _blis_matmul(root, out, values, epilogue)
    if root.op == "matmul_bf16_packed":  # too small for the GEMM: bf16 weights widened in registers
        return bf16_matvec_body(root, out, values, epilogue)
    b_batch_shape = b_node.shape[:-2]
    dtype = compute_dtype(root.dtype.name)
    zero = E.Const(0.0 if dtype.startswith("float") else 0, dtype)
    work = batch * m * n * max(k_extent, 1)
    parallel = work >= PARALLEL_MIN_ELEMENTS
    if root.op == "matmul_packed":  # B is one K x N matrix in panels: stream them one by one
        return _panel_order(root, out, values, epilogue, batch, m, n, k_extent, dtype, zero, parallel)

    def operands(bi: E.Expr, i_expr: E.Expr | None = None):
        b, i = (bi // m, bi % m) if m > 1 else (bi, E.const(0))
        batch_index = delinearize(b, tuple(batch_shape)) if batch_shape else []
        a_batch = broadcast_index(batch_index, tuple(batch_shape), a_node.shape[:-2])
        b_batch = broadcast_index(batch_index, tuple(batch_shape), b_batch_shape)
        return i, a_batch, b_batch

    # Probe B's layout at a sample point: which of k and j walks it contiguously?
    k, j = E.Var("k"), E.Var("j")
    _, _, b_probe = operands(E.const(0))
    sample = values.value(b_node, b_probe + [k, j])
    stride_j = load_stride(sample, "j", {"k": 0, "j": 0})
    stride_k = load_stride(sample, "k", {"k": 0, "j": 0})
    if k_extent and stride_j not in (None, 1, 0) and stride_k == 1:
        return _dot_order(root, out, values, operands, batch, m, n, k_extent, dtype, zero, parallel, epilogue)

    rows = batch * m
    blocks, width = _column_blocks(n, rows, parallel)
    task = E.Var("bj")
    bi, jb = (task // blocks, task % blocks) if blocks > 1 else (task, E.const(0))
    i, a_batch, b_batch = operands(bi)
    j0, j2 = E.Var("j0"), E.Var("j2")  # names must be unique within a kernel
    acc = Buffer("acc", dtype, (width,), scope="local")
    a_ik = E.Var("a_ik", dtype)
    cols = E.const(width) if n % width == 0 else E.minimum(E.const(width), n - jb * width)
    col = lambda jj: jb * width + jj if blocks > 1 else jj  # noqa: E731
    clear = For(j0, cols, Store(acc, j0, zero), "vectorized")
    steps = []
    # K_UNROLL rows of B per pass over the accumulators: the accumulators (up to
    # N floats) go through L1/L2 once per K_UNROLL rows instead of once per row
    unroll = K_UNROLL if k_extent >= 2 * K_UNROLL else 1
    kq, kr = E.Var("kq"), E.Var("kr")
    a_vars = [E.Var(f"a_ik{u}", dtype) for u in range(unroll)]
    if unroll > 1:
        k_rows = [kq * unroll + u for u in range(unroll)]
        update: E.Expr = E.Load(acc, j)
        for var, row in zip(a_vars, k_rows):
            update = update + var * values.value(b_node, b_batch + [row, col(j)])
        steps.append(For(kq, E.const(k_extent // unroll), block(
            *[Let(var, values.value(a_node, a_batch + [i, row])) for var, row in zip(a_vars, k_rows)],
            For(j, cols, Store(acc, j, update), "vectorized"))))
    done = k_extent // unroll * unroll if unroll > 1 else 0
    if k_extent > done:
        kk = kr + done if done else kr
        steps.append(For(kr, E.const(k_extent - done), block(
            Let(a_ik, values.value(a_node, a_batch + [i, kk])),
            For(j, cols, Store(acc, j, E.Load(acc, j) + a_ik * values.value(b_node, b_batch + [kk, col(j)])),
                "vectorized"))))
    write = For(j2, cols, Store(out, bi * n + col(j2), epilogue(_out_index(bi, col(j2), batch_shape, m),
                                                                E.Load(acc, j2))), "vectorized")
    tile = Alloc(acc, block(clear, *steps, write))
    return For(task, E.const(rows * blocks), tile, "parallel" if parallel and rows * blocks > 1 else "serial")


K_UNROLL = 4
PANEL_ROWS = 8  # rows of A per task of the panel order: their accumulators stay in registers
# Independent sums per output the panel order keeps: an FMA waits for the previous one into the
# same accumulator (4 cycles on Zen 4), so a single row (a matrix-vector product) with one
# accumulator per column ran one dependent chain over the whole depth. With fewer rows than
# this, the depth is dealt round-robin to PANEL_CHAINS // rows sums per output, added at the end.
PANEL_CHAINS = 4


def _panel_order(root: Node, out: Buffer, values: ValueBuilder, epilogue, batch: int, m: int, n: int, k: int,
                 dtype: str, zero: E.Const, parallel: bool) -> Stmt:
    """A matmul_packed too small for the GEMM (a matrix-vector product while decoding): each task
    multiplies up to PANEL_ROWS rows of A by one panel of B, K x NR contiguous floats, with the
    rows x NR sums in registers for the whole depth.

    B is read once, front to back in each thread's share of the panels: one sequential stream
    per thread, which the hardware prefetches best. (In row order, one row of B per step into
    N accumulators, a thread's reads jumped between rows and the accumulators went through L2:
    GPT-2's decode step read its weights at ~45 GB/s of this machine's ~56.)
    """
    a_node, b_node = root.inputs
    batch_shape = tuple(root.shape[:-2])
    n_panels, _, nr = b_node.shape
    rows = batch * m
    tile = min(rows, PANEL_ROWS)
    row_blocks = -(-rows // tile)
    task, kk, i, j, wi, wj = (E.Var(name) for name in ("pt", "pk", "pi", "pj", "pwi", "pwj"))
    panel, row_block = (task // row_blocks, task % row_blocks) if row_blocks > 1 else (task, E.const(0))
    row = row_block * tile + i
    if rows % tile:  # the last block's rows past the end repeat the last row; their sums are dropped
        row = E.minimum(row, E.const(rows - 1))
    b, a_row = (row // m, row % m) if m > 1 else (row, E.const(0))
    a_batch = broadcast_index(delinearize(b, batch_shape) if batch_shape else [], batch_shape,
                              a_node.shape[:-2])
    chains = max(1, min(PANEL_CHAINS // tile, k))
    acc = Buffer("acc", dtype, (chains * tile * nr,), scope="local")

    def update(depth: E.Expr, chain: E.Expr) -> Stmt:
        """acc[chain] += A[rows, depth] * B[depth, panel] for the task's rows."""
        slot = (chain * tile + i) * nr + j
        b_elem = E.Load(values.buffers[b_node.id], panel * (k * nr) + depth * nr + j)
        fma = E.call("fma", values.value(a_node, a_batch + [a_row, depth]), b_elem, E.Load(acc, slot))
        return For(i, E.const(tile), For(j, E.const(nr), Store(acc, slot, fma), "vectorized"), "unrolled")

    kc, c = E.Var("pkc"), E.Var("pc")
    b_buffer = values.buffers[b_node.id]
    ahead = weight_stream_prefetch(dtype)
    if chains == 1:
        depth_loop = For(kk, E.const(k), block(*prefetch_stream(b_buffer, panel * (k * nr) + kk * nr, nr, ahead),
                                               update(kk, E.const(0))))
    else:  # depth kc * chains + c into sum c; the last k % chains depths into the first sums
        step_start = panel * (k * nr) + kc * (chains * nr)
        depth_loop = block(For(kc, E.const(k // chains), block(
                               *prefetch_stream(b_buffer, step_start, chains * nr, ahead),
                               For(c, E.const(chains), update(kc * chains + c, c), "unrolled"))),
                           *([For(c, E.const(k % chains), update(E.const(k - k % chains) + c, c), "unrolled")]
                             if k % chains else []))
    total = E.Load(acc, wi * nr + wj)
    for chain in range(1, chains):
        total = total + E.Load(acc, (chain * tile + wi) * nr + wj)
    out_row, out_col = row_block * tile + wi, panel * nr + wj
    rows_left = E.const(tile) if rows % tile == 0 else E.minimum(E.const(tile), rows - row_block * tile)
    cols_left = E.const(nr) if n % nr == 0 else E.minimum(E.const(nr), n - panel * nr)
    body = block(
        For(j, E.const(chains * tile * nr), Store(acc, j, zero), "vectorized"),
        depth_loop,
        For(wi, rows_left, For(wj, cols_left, Store(out, out_row * n + out_col, epilogue(
            _out_index(out_row, out_col, batch_shape, m), total)), "vectorized")))
    tasks = n_panels * row_blocks
    return For(task, E.const(tasks), Alloc(acc, body), "parallel" if parallel and tasks > 1 else "serial")


def _column_blocks(n: int, rows: int, parallel: bool) -> tuple[int, int]:
    """(blocks, width): with fewer rows than threads (matrix-vector products while decoding),
    the row-order nest splits N into one block of accumulators per thread.

    Each block stays as wide as possible: B's rows are then read in long
    sequential runs, which streams faster than short L1-sized blocks (measured
    on a language-model head with 50,257 columns).
    """
    threads = thread_count()
    if not (parallel and rows < threads and n >= 2 * threads * 16):
        return 1, n
    width = -(-n // threads)
    width = min(n, -(-width // 16) * 16)  # whole vectors per block
    return -(-n // width), width


def _out_index(bi: E.Expr, j: E.Expr, batch_shape, m: int) -> list[E.Expr]:
    """Multi-index of output element (row bi of the flattened batch x rows, column j)."""
    b, i = (bi // m, bi % m) if m > 1 else (bi, E.const(0))
    return (delinearize(b, tuple(batch_shape)) if batch_shape else []) + [i, j]


# Output columns one task of the dot order computes together: each dot product is a chain of
# dependent FMAs over K (one vector accumulator), so a single one waits on FMA latency; four
# independent chains keep the FMA units busy and share each load of A's row (a linear layer at
# batch 1, whose weight is not a compile-time constant, is such a product per output).
DOT_COLUMNS = 4


def _dot_order(root, out, values, operands, batch, m, n, k_extent, dtype, zero, parallel, epilogue) -> Stmt:
    a_node, b_node = root.inputs
    group = DOT_COLUMNS if n >= DOT_COLUMNS else 1
    groups = -(-n // group)
    task, k = E.Var("bij"), E.Var("k")
    bi, first = (task // groups, (task % groups) * group) if group > 1 else (task // n, task % n)
    i, a_batch, b_batch = operands(bi)
    # the last group of a row whose length is not a multiple repeats column n - 1 (same value)
    columns = [first + c if n % group == 0 else E.minimum(first + c, E.const(n - 1)) for c in range(group)]
    totals = [E.Var("total" if group == 1 else f"total{c}", dtype) for c in range(group)]
    a_k = values.value(a_node, a_batch + [i, k])
    sums = [Assign(t, t + a_k * values.value(b_node, b_batch + [k, j])) for t, j in zip(totals, columns)]
    stores = [Store(out, bi * n + j, epilogue(_out_index(bi, j, root.shape[:-2], m), t))
              for t, j in zip(totals, columns)]
    body = block(*[Let(t, zero) for t in totals], For(k, E.const(k_extent), block(*sums), "vectorized"), *stores)
    return For(task, E.const(batch * m * groups), body, "parallel" if parallel else "serial")
