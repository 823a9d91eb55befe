"""BLIS-style GEMM as loop IR: packed panels, cache blocking, a register-blocked micro-kernel, fused epilogue.

C[b][M x N] = epilogue(A[b][M x K] @ B[b][K x N]) is computed as (BLIS's five loops)::

    alloc bpack[KC x NC]                         # B panel, shared by the threads
    for b in batch:
      for jc in N / NC:                          # L3 block of columns
        for pc in K / KC:                        # L1 depth block
          for jp in panels of NR (parallel):     # pack B[pc.., jc..] into NR-wide micro-panels
            bpack[jp][p][0..NR] = B[pc + p, jc + jp*NR + j]     (zero past N)
          for ib in M / MC (parallel):           # L2 block of rows, one per thread at a time
            alloc apack[MC x KC]:                # pack A[ib.., pc..] into MR-tall micro-panels
              apack[ip][p][0..MR] = A[ib*MC + ip*MR + i, pc + p] (zero past M)
              for jp: for ip:                    # micro-kernel: MR x NR tile in registers
                acc[MR x NR] = 0
                for p in kc: for i in MR (unrolled): for j in NR (vectorized):
                  acc[i][j] += apack[ip][p][i] * bpack[jp][p][j]
                C tile = (pc == 0 ? 0 : C tile) + acc       (epilogue on the last pc)

Operands are expressions (`a_value(b, row, k)`, `b_value(b, k, col)`), so
packing absorbs transposes, broadcasts, slices and even convolution windows
(implicit GEMM: conv.py passes the im2col element as `b_value`). Packing
pads the edges with zeros, so the micro-kernel never has a short tile: only
the write-back loops have `min()` extents. The micro-kernel is ordinary loop
IR that GCC keeps in vector registers (the i loop unrolled, the j loop one or
two vectors wide: `vfmadd231ps` with a broadcast operand, checked with
objdump in tests/backend/test_templates.py); it is the `gemm_update`
intrinsic of schedule.py, inlined.

Blocking follows BLIS's analytical model: a KC x NR micro-panel of B and a
KC x MR one of A fill about 3/4 of L1; an MC x KC block of A half of L2; a
KC x NC block of B half of L3. MC is then reduced so that the row blocks
divide evenly among the threads (a 1024-row matrix still uses both cores).

Partial sums over K blocks accumulate in the output itself, so a GEMM with
K > KC needs an output of its compute dtype (float32/float64); the epilogue
(bias, activation, residual) is applied once, on the last K block.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import expr as E
from ..buffer import Buffer
from ..ir import Alloc, For, If, Stmt, Store, block
from ..schedule import substitute
from ..schedule_defaults import thread_count
from ..types import itemsize
from .target import cpu_target

IndexFn = Callable[..., E.Expr]


@dataclass(frozen=True)
class GemmBlocking:
    """Register tile (mr x nr) and cache blocks (mc x kc rows of A, kc x nc of B)."""

    mr: int
    nr: int
    kc: int
    mc: int
    nc: int


def _round_down(x: int, k: int) -> int:
    return max(k, x // k * k)


def _round_up(x: int, k: int) -> int:
    return -(-x // k) * k


def gemm_blocking(m: int, n: int, k: int, dtype: str, threads: int | None = None) -> GemmBlocking:
    """Tile and block sizes for an m x n x k GEMM of `dtype` on this CPU."""
    target = cpu_target()
    size = itemsize(dtype)
    lanes = max(target.vector_bytes // size, 1)
    if target.vector_registers >= 32:
        mr, nr = 8, 2 * lanes  # 16 accumulators + 2 B vectors + 1 broadcast of 32 registers
    elif target.vector_bytes >= 32:
        mr, nr = 6, 2 * lanes  # 12 accumulators of 16 registers
    else:
        mr, nr = 4, 2 * lanes
    kc = _round_down(int(target.l1d * 0.75) // ((mr + nr) * size), 8)
    kc = max(64, min(kc, 512, _round_up(k, 8)))
    mc = _round_down(min(target.l2 // 2 // (kc * size), 480), mr)
    nc = _round_down(min(target.l3 // 2 // (kc * size), 4096), nr)
    nc = min(nc, _round_up(n, nr))
    threads = threads or thread_count()
    blocks = -(-m // mc)
    if threads > 1 and blocks % threads:
        # Balance: a number of row blocks that the threads share evenly.
        mc = max(mr, _round_up(-(-m // _round_up(blocks, threads)), mr))
    mc = min(mc, _round_up(m, mr))
    return GemmBlocking(mr, nr, kc, mc, nc)


def gemm_needs_partial_sums(k: int, blocking: GemmBlocking) -> bool:
    """True when K spans several KC blocks, so partial sums pass through the output buffer."""
    return k > blocking.kc


def blis_gemm(out: Buffer, dtype: str, batch: int, m: int, n: int, k: int,
              a_value: IndexFn, b_value: IndexFn, out_index: IndexFn,
              epilogue: Callable[[E.Expr, E.Expr, E.Expr, E.Expr], E.Expr],
              blocking: GemmBlocking | None = None, prefix: str = "g",
              col_valid: Callable[[E.Expr], E.Expr] | None = None) -> Stmt:
    """Loop IR of a batched GEMM (see the module docstring).

    a_value(b, row, kk) / b_value(b, kk, col): the operand elements (in range;
    packing only asks for valid indices). out_index(b, row, col): flat index
    of the output element. epilogue(b, row, col, acc): the stored value.
    col_valid(col): when given, only columns where it is true are written back
    (the others are computed and dropped: the junk columns of conv.py's
    padded-row implicit GEMM).
    """
    bl = blocking or gemm_blocking(m, n, k, dtype)
    mr, nr, kc_max, mc_max, nc_max = bl.mr, bl.nr, bl.kc, bl.mc, bl.nc
    v = lambda name: E.Var(f"{prefix}_{name}")  # noqa: E731
    zero = E.Const(0.0, dtype)
    n_k = -(-k // kc_max)
    n_jc = -(-n // nc_max)
    n_ib = -(-m // mc_max)

    bi, jc, pc, jp, pp, jj = v("b"), v("jc"), v("pc"), v("jp"), v("pp"), v("jj")
    ib, ip, pa, ia, jq, iq = v("ib"), v("ip"), v("pa"), v("ia"), v("jq"), v("iq")
    q, p, i, j, wi, wj = v("q"), v("p"), v("i"), v("j"), v("wi"), v("wj")
    bpack = Buffer(f"{prefix}_bpack", dtype, (kc_max * nc_max,), scope="local")
    apack = Buffer(f"{prefix}_apack", dtype, (kc_max * mc_max,), scope="local")
    acc = Buffer(f"{prefix}_acc", dtype, (mr * nr,), scope="local")

    def lim(block_size: int, total: int, index: E.Expr) -> E.Expr:
        """Extent of block `index` of size block_size over total (min() only when there is a tail)."""
        return E.const(block_size) if total % block_size == 0 else E.minimum(E.const(block_size),
                                                                               total - index * block_size)

    kc = lim(kc_max, k, pc)
    nc = lim(nc_max, n, jc)
    mc = lim(mc_max, m, ib)
    k_at = lambda pv: pc * kc_max + pv  # noqa: E731
    clamp = lambda x, size: E.minimum(x, size - 1)  # noqa: E731

    # ---- pack B: micro-panel jp holds columns jc*NC + jp*NR + [0, NR) for depth p
    col = jc * nc_max + jp * nr + jj
    b_elem = E.Select(E.lt(col, n), b_value(bi, k_at(pp), clamp(col, n)), zero) if n % nr \
        else b_value(bi, k_at(pp), col)
    n_panels = (nc + (nr - 1)) // nr
    pack_b = For(jp, n_panels, For(pp, kc, For(jj, E.const(nr), Store(
        bpack, jp * (kc_max * nr) + pp * nr + jj, b_elem), "vectorized")), "parallel")

    # ---- pack A: micro-panel ip holds rows ib*MC + ip*MR + [0, MR) for depth p
    row = ib * mc_max + ip * mr + ia
    a_elem = E.Select(E.lt(row, m), a_value(bi, clamp(row, m), k_at(pa)), zero) if m % mr else \
        a_value(bi, row, k_at(pa))
    m_panels = (mc + (mr - 1)) // mr
    pack_a = For(ip, m_panels, For(pa, kc, For(ia, E.const(mr), Store(
        apack, ip * (kc_max * mr) + pa * mr + ia, a_elem), "unrolled")))

    # ---- micro-kernel on tile (iq, jq), then write-back
    # fma: one rounding per step, and C compiled as -std=c99 contracts nothing by itself
    update = E.call("fma", E.Load(apack, iq * (kc_max * mr) + p * mr + i),
                    E.Load(bpack, jq * (kc_max * nr) + p * nr + j), E.Load(acc, i * nr + j))
    micro_kernel = block(
        For(q, E.const(mr * nr), Store(acc, q, zero), "vectorized"),
        For(p, kc, For(i, E.const(mr), For(j, E.const(nr), Store(acc, i * nr + j, update), "vectorized"),
                       "unrolled")))
    r0, c0 = ib * mc_max + iq * mr, jc * nc_max + jq * nr
    out_row, out_col = r0 + wi, c0 + wj
    flat = out_index(bi, out_row, out_col)
    tile_sum: E.Expr = E.Load(acc, wi * nr + wj)
    if n_k > 1:
        if out.dtype != dtype:
            raise ValueError("blis_gemm: partial sums over K blocks need an output of the compute dtype")
        tile_sum = E.Select(E.eq(pc, 0), zero, E.Load(out, flat)) + tile_sum
    rows_left = E.minimum(E.const(mr), m - r0) if m % mr else E.const(mr)
    cols_left = E.minimum(E.const(nr), n - c0) if n % nr else E.const(nr)

    def write(value: E.Expr) -> Stmt:
        store: Stmt = Store(out, flat, value)
        if col_valid is not None:
            store = If(col_valid(out_col), store)
        return For(wi, rows_left, For(wj, cols_left, store, "vectorized"))

    final = write(epilogue(bi, out_row, out_col, tile_sum))
    writeback: Stmt = If(E.eq(pc, n_k - 1), final, write(tile_sum)) if n_k > 1 else final
    tiles = For(jq, n_panels, For(iq, m_panels, Alloc(acc, block(micro_kernel, writeback))))
    row_blocks = For(ib, E.const(n_ib), Alloc(apack, block(pack_a, tiles)), "parallel" if n_ib > 1 else "serial")
    depth = For(pc, E.const(n_k), block(pack_b, row_blocks))
    nest: Stmt = For(jc, E.const(n_jc), depth)
    if batch > 1:
        nest = For(bi, E.const(batch), nest)
    else:
        nest = substitute(nest, {bi.name: E.const(0)})
    return Alloc(bpack, nest)
