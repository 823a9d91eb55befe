"""BLIS-style GEMM with bfloat16 operands and float32 accumulation (`vdpbf16ps`).

The same five loops as gemm.py (tasks, column blocks, depth blocks, row
blocks, register tiles), with operands packed as bf16 *pairs*: AVX512-BF16's
`vdpbf16ps` multiplies two consecutive depth steps at once, so a packed
micro-panel holds, per pair q of depth steps, both values side by side::

    apack[ip][q][i][t] = bf16(A[row ip*MR + i, depth 2q + t])     t = 0, 1
    bpack[jp][q][j][t] = bf16(B[depth 2q + t, column jp*NR + j])

Rounding to bf16 happens while packing (a float32 store into a bfloat16
buffer rounds to nearest even), so operands that the precision pass has
already rounded (passes/precision.py) pack exactly, and the result equals a
float32 GEMM of the same values up to the order of the float32 additions.
A depth past K and rows and columns past the matrix's edge pack as zeros.

The register tile is a C helper with intrinsics (codegen/c_native.py:
`tk_bf16_tile_8xNR`, MR = 8 rows by NR = 16 or 32 columns) where the target
has AVX512-BF16 (`CpuTarget.bf16_dot`); elsewhere it is loop IR that widens
each bf16 value to float32 and multiplies with `fma`, the same sums in the
same order, which GCC vectorizes like gemm.py's micro-kernel.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from ...codegen.c_native import BF16_TILE_NR
from ...ir.graph import Node
from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import Alloc, For, NativeCall, Pointer, Stmt, Store, block
from ...loops.schedule import substitute
from ..target import cpu_target
from .gemm import (GemmBlocking, IndexFn, Panels, _chunk_extent, _round_up, blis_gemm, gemm_blocking,
                   gemm_thread_split, task_blocks, tile_writeback)

NATIVE_MR = 8  # the rows of the intrinsics tile
# A bf16 output (a narrowing epilogue: precision="bf16" stores q, k, v and GELU's output as bf16)
# cannot hold partial sums over depth blocks, so such a GEMM takes its whole depth in one block,
# up to this K (its packed A block stays within ONE_BLOCK_A_BYTES of a thread's stack).
ONE_BLOCK_MAX_K = 1024
ONE_BLOCK_A_BYTES = 1 << 17


def one_depth_block(k: int, out_dtype: str, prepacked_b: bool) -> bool:
    """A GEMM into a non-float32 output over depth k runs as one depth block (ONE_BLOCK_MAX_K)."""
    return out_dtype != "float32" and prepacked_b and k <= ONE_BLOCK_MAX_K


def holds_bf16_values(node: Node) -> bool:
    """`node`'s float32 values are all bf16 numbers: a widening cast from bfloat16 (the precision
    pass's rounding is one), or a constant whose low 16 bits are all zero (a rounded weight, in
    whatever layout the weight passes gave it). A GEMM of such operands loses nothing in bf16."""
    if node.dtype.name != "float32":
        return False
    if node.op == "cast":
        return node.inputs[0].dtype.name == "bfloat16"
    if node.op == "constant":
        value = node.attrs["value"]
        exact = _EXACT.get(value.digest)
        if exact is None:
            bits = np.ascontiguousarray(value.array, dtype=np.float32).view(np.uint32)
            exact = _EXACT[value.digest] = not np.any(bits & 0xFFFF)
        return exact
    return False


_EXACT: dict[str, bool] = {}  # constant digest -> holds bf16 values (a digest names its content)


def is_bf16_rounding(node: Node) -> bool:
    """`node` is cast(cast(x, bfloat16), float32): x rounded to bf16 (what the precision pass writes)."""
    return (node.op == "cast" and node.dtype.name == "float32" and node.inputs[0].op == "cast"
            and node.inputs[0].dtype.name == "bfloat16")


# Contractions whose GEMM packs both operands when they hold bf16 values (bf16_gemm): a rounding
# read only by them is computed while packing, not stored first.
PACKING_CONTRACTIONS = frozenset({"matmul", "matmul_packed", "matmul_bf16_packed"})


def native_tile(blocking: GemmBlocking) -> str | None:
    """The C helper computing one register tile on this target, or None (the widening loop IR)."""
    if cpu_target().bf16_dot and blocking.mr == NATIVE_MR and blocking.nr in BF16_TILE_NR:
        return f"tk_bf16_tile_8x{blocking.nr}"
    return None


def gemm_template(root: Node) -> Callable[..., Stmt]:
    """The GEMM for contraction `root`: bf16 pairs (bf16_gemm) where all its operands hold bf16
    values (precision="bf16"), else gemm.blis_gemm; either is called with blis_gemm's arguments."""
    if all(holds_bf16_values(x) for x in root.inputs):
        return lambda out, dtype, *args, **kwargs: bf16_gemm(out, *args, **kwargs)
    return blis_gemm


def bf16_gemm(out: Buffer, batch: int, m: int, n: int, k: int,
              a_value: IndexFn, b_value: IndexFn | None, out_index: IndexFn,
              epilogue: Callable[[E.Expr, E.Expr, E.Expr, E.Expr], E.Expr],
              blocking: GemmBlocking | None = None, prefix: str = "g",
              col_valid: Callable[[E.Expr], E.Expr] | None = None, b_panels: Panels | None = None,
              threads: int | None = None, b_pairs: Buffer | None = None) -> Stmt:
    """Loop IR of a batched float32 GEMM computed from bf16-rounded operands (module docstring).

    The arguments mean what they mean for gemm.blis_gemm; `b_panels` (float32
    panels of a constant B, read in place by the float32 GEMM) is packed into
    bf16 pairs like any other B. `b_pairs`: B (batch 1) already in bf16 pairs,
    (ceil(N / NR), ceil(K / 2), 2 NR) (ir/ops/gemm_panels.py: `pack_bf16_pairs`),
    read in place. The output holds float32 (partial sums over depth blocks
    pass through it).
    """
    dtype = "float32"
    bl = blocking or gemm_blocking(m, n, k, dtype, b_panels is not None, template="gemm_bf16")
    if k > bl.kc and one_depth_block(k, out.dtype, b_pairs is not None):
        depth = _round_up(k, 2)
        rows = max(bl.mr, ONE_BLOCK_A_BYTES // (2 * depth) // bl.mr * bl.mr)
        bl = replace(bl, kc=depth, mc=min(bl.mc, rows))
    mr, nr = bl.mr, bl.nr
    kc_max = _round_up(bl.kc, 2)
    split = gemm_thread_split(batch, m, n, k, bl, threads, depth_split=False)
    m_chunk = _round_up(-(-m // split.row_chunks), mr)
    n_chunk = _round_up(-(-n // split.col_chunks), nr)
    mc_max = min(bl.mc, m_chunk)
    nc_max = min(bl.nc, n_chunk)
    n_k = -(-k // kc_max)
    if n_k > 1 and out.dtype != dtype:
        raise ValueError("bf16_gemm: partial sums over K blocks need a float32 output")
    v = lambda name: E.Var(f"{prefix}_{name}")  # noqa: E731
    zero = E.Const(0.0, dtype)
    task, bi, jc, pc, jp, qq, jj = v("task"), v("b"), v("jc"), v("pc"), v("jp"), v("qq"), v("jj")
    ib, ip, qa, ia, jq, iq = v("ib"), v("ip"), v("qa"), v("ia"), v("jq"), v("iq")
    zq, q, i, j, wi, wj = v("zq"), v("q"), v("i"), v("j"), v("wi"), v("wj")
    bpack = Buffer(f"{prefix}_bpack", "bfloat16", (kc_max * nc_max,), scope="local")
    apack = Buffer(f"{prefix}_apack", "bfloat16", (kc_max * mc_max,), scope="local")
    acc = Buffer(f"{prefix}_acc", dtype, (mr * nr,), scope="local")

    chunk, rows, cols, row_base, col_base, mc, nc = task_blocks(task, split, (m_chunk, n_chunk), (m, n), (ib, jc),
                                                                (mc_max, nc_max))
    kc = _chunk_extent(kc_max, n_k, k, pc * kc_max)
    pairs = (kc + 1) // 2
    clamp = lambda x, size: E.minimum(x, size - 1)  # noqa: E731

    def in_depth(value: Callable[[E.Expr], E.Expr], pair: E.Expr, t: int) -> E.Expr:
        """The operand at depth pc*KC + 2*pair + t: zero past K (only an odd K has such a step)."""
        depth = pc * kc_max + pair * 2 + t
        if k % 2 == 0:
            return value(depth)
        return E.Select(E.lt(depth, k), value(clamp(depth, k)), zero)

    # ---- pack B: micro-panel jp, pair qq, column jj: two depth steps side by side
    col = col_base + jp * nr + jj
    n_panels = (nc + (nr - 1)) // nr

    def b_at(depth: E.Expr) -> E.Expr:
        if b_panels is not None:  # its lanes past N hold zeros
            return b_panels.load(bi, (col_base + jp * nr) // nr, depth, jj)
        if n % nr:
            return E.Select(E.lt(col, n), b_value(bi, depth, clamp(col, n)), zero)
        return b_value(bi, depth, col)

    b_slot = jp * (kc_max * nr) + qq * (2 * nr) + jj * 2
    pack_b: Stmt | None = None if b_pairs is not None else For(jp, n_panels, For(qq, pairs, For(jj, E.const(nr), block(
        Store(bpack, b_slot, in_depth(b_at, qq, 0)), Store(bpack, b_slot + 1, in_depth(b_at, qq, 1))),
        "vectorized")))

    # ---- pack A: micro-panel ip, pair qa, row ia
    row = row_base + ip * mr + ia
    m_panels = (mc + (mr - 1)) // mr

    def a_at(depth: E.Expr) -> E.Expr:
        if m % mr:
            return E.Select(E.lt(row, m), a_value(bi, clamp(row, m), depth), zero)
        return a_value(bi, row, depth)

    a_slot = ip * (kc_max * mr) + qa * (2 * mr) + ia * 2
    pack_a = For(ip, m_panels, For(qa, pairs, For(ia, E.const(mr), block(
        Store(apack, a_slot, in_depth(a_at, qa, 0)), Store(apack, a_slot + 1, in_depth(a_at, qa, 1))),
        "unrolled")))

    # ---- register tile (iq, jq): acc = A's panel x B's panel, then write-back as gemm.py
    a_panel, b_panel, b_source = iq * (kc_max * mr), jq * (kc_max * nr), bpack
    if b_pairs is not None:  # panel (col_base + jq*NR) / NR of the weight, from the block's first pair
        b_panel = ((col_base + jq * nr) // nr) * (b_pairs.size // -(-n // nr)) + pc * (kc_max * nr)
        b_source = b_pairs
    helper = native_tile(bl)
    if helper is not None:
        products: Stmt = NativeCall(helper, (pairs, Pointer(apack, a_panel), Pointer(b_source, b_panel),
                                             Pointer(acc, E.const(0))))
    else:
        steps = []
        for t in (0, 1):  # the order vdpbf16ps adds them in: depth 2q, then 2q + 1
            a_elem = E.Load(apack, a_panel + q * (2 * mr) + i * 2 + t)
            b_elem = E.Load(b_source, b_panel + q * (2 * nr) + j * 2 + t)
            steps.append(Store(acc, i * nr + j, E.call("fma", a_elem, b_elem, E.Load(acc, i * nr + j))))
        products = For(q, pairs, For(i, E.const(mr), For(j, E.const(nr), block(*steps), "vectorized"),
                                     "unrolled"))
    micro_kernel = block(For(zq, E.const(mr * nr), Store(acc, zq, zero), "vectorized"), products)
    writeback = tile_writeback(out, acc, out_index, epilogue, col_valid, bi, row_base + iq * mr, col_base + jq * nr,
                               (wi, wj), (m, n), (mr, nr), pc, n_k, "float32", zero)
    tiles = For(jq, n_panels, For(iq, m_panels, Alloc(acc, block(micro_kernel, writeback))))
    row_blocks = For(ib, (rows + (mc_max - 1)) // mc_max, block(pack_a, tiles))
    depth_blocks = For(pc, E.const(n_k), row_blocks if pack_b is None else block(pack_b, row_blocks))
    matrix: Stmt = Alloc(apack, For(jc, (cols + (nc_max - 1)) // nc_max, depth_blocks))
    if pack_b is not None:
        matrix = Alloc(bpack, matrix)
    chunks = split.row_chunks * split.col_chunks
    tasks = batch * chunks
    if tasks == 1:
        return substitute(substitute(matrix, {bi.name: E.const(0)}), {task.name: E.const(0)})
    matrix = substitute(matrix, {bi.name: task // chunks if chunks > 1 else task})
    return For(task, E.const(tasks), matrix, "parallel" if split.parallel else "serial", split.threads_if)


__all__ = ["NATIVE_MR", "ONE_BLOCK_MAX_K", "PACKING_CONTRACTIONS", "bf16_gemm", "gemm_template", "holds_bf16_values",
           "is_bf16_rounding", "one_depth_block",
           "native_tile"]
