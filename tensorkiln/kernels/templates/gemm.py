"""BLIS-style GEMM as loop IR: packed panels, cache blocking, a register-blocked micro-kernel, fused epilogue.

C[b][M x N] = epilogue(A[b][M x K] @ B[b][K x N]) is computed as (BLIS's five loops)::

    for task in batch x row chunks x column chunks (parallel: one region per GEMM)
      alloc bpack[KC x NC], apack[MC x KC]       # per task: nothing shared, no barrier
      for jc in the chunk's columns / NC:        # L3 block of columns
        for pc in K / KC:                        # L1 depth block
          for jp in panels of NR:                # pack B[pc.., jc..] into NR-wide micro-panels
            bpack[jp][p][0..NR] = B[pc + p, jc*NC + jp*NR + j]     (zero past N)
          for ib in the chunk's rows / MC:       # L2 block of rows
            for ip in panels of MR:              # pack A[ib.., pc..] into MR-tall micro-panels
              apack[ip][p][0..MR] = A[ib*MC + ip*MR + i, pc + p]   (zero past M)
            for jp: for ip:                      # micro-kernel: MR x NR tile in registers
              acc[MR x NR] = 0
              for p in kc: for i in MR (unrolled): for j in NR (vectorized):
                acc[i][j] += apack[ip][p][i] * bpack[jp][p][j]
              C tile = (pc == 0 ? 0 : C tile) + acc       (epilogue on the last pc)

Operands are expressions (`a_value(b, row, k)`, `b_value(b, k, col)`), so
packing absorbs transposes, broadcasts, slices and even convolution windows
(implicit GEMM: conv.py passes the im2col element as `b_value`). An A whose
rows lie contiguous in memory (a plain load stepping by one along k,
`a_reads_rows`) is not packed: the micro-kernel broadcasts from its MR rows
where they are. Packing A bought contiguity the broadcasts do not need, and
every column chunk paid for it (the MLP's GEMMs, 64 rows: ~3% faster
without; BERT-sized ones 2-7%). An A contiguous in pieces along k (attention's
output read through a permute) is read in place too, its depth loop cut into
pieces (gemm_a_reads.py). Packing
pads the edges with zeros, so the micro-kernel never has a short tile: only
the write-back loops have `min()` extents. The micro-kernel is ordinary loop
IR that GCC keeps in vector registers (the i loop unrolled, the j loop one or
two vectors wide: `vfmadd231ps` with a broadcast operand, checked with
objdump in tests/kernels/test_templates.py); it is the `gemm_update`
intrinsic of schedule.py, inlined.

Blocking follows BLIS's analytical model, with B's micro-panel in L2: a
KC x NR micro-panel of B takes an eighth of L2 (B's micro-panels fetched from
L2 keep up with the micro-kernel, and deeper blocks write the partial sums to
the output fewer times); an MC x KC block of A half of L2, in rows that fill
no L2 set past half its ways (`a_block_rows`: an A read in place at a
power-of-two K puts its rows in the same sets); a KC x NC block of B half of
L3. Before each micro-kernel the output tile whose partial sums it will add
is prefetched (gemm_prefetch.prefetch_output_tile).

Weights read in place from their panels (`Panels.streamed`: matmul_packed)
come from memory on every call when the model's weights outgrow the caches
(BERT-base: 340 MB), so each depth step also prefetches the same row of the
next panel into L2 (gemm_prefetch.py): the next panel arrives while this one
is computed.

Threads (`gemm_thread_split`): the whole GEMM is one parallel loop over
tasks, so a GEMM with many K blocks does not pay a fork and a join per
block. Matrices of the batch are the tasks when they divide among the
threads; otherwise each matrix is cut into as many row or column chunks as
make the tasks divide evenly, cutting the dimension whose chunks repack the
smaller operand (column chunks repack A, row chunks repack B).

Partial sums over K blocks accumulate in the output itself, so a GEMM with
K > KC needs an output of its compute dtype (float32/float64); the epilogue
(bias, activation, residual) is applied once, on the last K block.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import Alloc, For, If, Stmt, Store, block
from ...loops.schedule import substitute
from ..schedule_defaults import thread_count
from ..run_time_choice import at_least, threads_if
from ...loops.types import itemsize
from ..target import cpu_target, l2_ways
from ..tuned import configured, workload_key
from .gemm_a_reads import a_reads_rows, a_row_piece, b_reads_columns, rows_sharing_l2
from .gemm_prefetch import prefetch_ahead, prefetch_next_panel, prefetch_output_tile
from .gemm_transposed_pack import transposed_pack
from ...shapes import is_symbolic

IndexFn = Callable[..., E.Expr]


# Knobs whose neutral value leaves the code as it was before they existed: a kernel comment names
# them only when a configuration moves them (tuned.shown_config), so untuned C stays the same.
QUIET = {"quiet": True}


@dataclass(frozen=True)
class GemmBlocking:
    """Register tile (mr x nr), cache blocks (mc x kc rows of A, kc x nc of B) and how the threads
    cut a matrix (`split`: "auto" is gemm_thread_split's rule, "rows" / "cols" force the cut).

    The micro-kernel's depth loop is unrolled `ku` steps at a time (1: left to the compiler);
    `pf` > 0 prefetches B's micro-panel `pf` depth steps ahead; `ksplit` cuts K for the threads:
    0 is gemm_thread_split's rule, 1 never, c >= 2 into c chunks summed afterwards (batch 1).
    """

    mr: int
    nr: int
    kc: int
    mc: int
    nc: int
    split: str = "auto"
    ku: int = field(default=1, metadata=QUIET)
    pf: int = field(default=0, metadata=QUIET)
    ksplit: int = field(default=0, metadata=QUIET)


THREAD_SPLITS = ("auto", "rows", "cols")
K_UNROLLS = (1, 2, 4, 8)
MAX_PREFETCH_STEPS = 64  # prefetch distance in depth steps at most
MAX_K_CHUNKS = 16
SPLIT_K_MAX_TUNED_BYTES = 16 << 20  # partial products of a tuned split-K, all chunks together
MAX_LOCAL_BYTES = 64 << 20  # packed blocks of one task: more is no blocking a cache could hold


def _round_down(x: int, k: int) -> int:
    return max(k, x // k * k)


def _round_up(x: int, k: int) -> int:
    return -(-x // k) * k


def gemm_workload(m: int, n: int, k: int, dtype: str, panels_given: bool = False, template: str = "gemm",
                  b_transposed: bool = False) -> str:
    """The tuning workload key of a GEMM: what decides its blocking (tuned.py). `bt=1` marks a B packed
    from its transpose (gemm_a_reads.b_reads_columns); keys without it are B's rows contiguous."""
    layout = {"bt": 1} if b_transposed and not panels_given else {}
    return workload_key(template, dtype=dtype, m=m, n=n, k=k, panels=int(panels_given), **layout)


def gemm_blocking(m: int, n: int, k: int, dtype: str, panels_given: bool = False,
                  template: str = "gemm", b_transposed: bool = False) -> GemmBlocking:
    """The blocking of an m x n x k GEMM of `dtype` here: a tuned record's (tuned.py), else analytic.

    template: "gemm" (blis_gemm) or "gemm_bf16" (bf16_gemm): their records are kept apart.
    b_transposed: B is packed from its transpose ([N, K] in memory), a workload of its own.
    """
    analytic = analytic_gemm_blocking(m, n, k, dtype, panels_given)
    return configured(gemm_workload(m, n, k, dtype, panels_given, template, b_transposed), analytic,
                      lambda bl: blocking_legal(bl, m, n, k, dtype, panels_given, analytic))


def blocking_legal(bl: GemmBlocking, m: int, n: int, k: int, dtype: str, panels_given: bool,
                   analytic: GemmBlocking) -> bool:
    """Whether `bl` is a blocking the template computes correctly and that fits this CPU.

    The register tile must be whole vectors wide and leave room for B's vectors and a broadcast in
    the vector registers; blocks are whole tiles and no larger than the matrix (rounded up to a
    tile); a B or A given in panels (`analytic` says which tile they were laid out for) keeps its tile.
    """
    target = cpu_target()
    lanes = max(target.vector_bytes // itemsize(dtype), 1)
    vectors = bl.nr // lanes
    if bl.nr % lanes or not 1 <= vectors <= 4 or not 1 <= bl.mr <= 16:
        return False
    if bl.mr * vectors + vectors + 1 > target.vector_registers:
        return False  # accumulators + B's vectors + one broadcast
    if panels_given and (bl.mr, bl.nr) != (analytic.mr, analytic.nr):
        return False  # the operand's layout fixed the tile
    if bl.kc % 8 or not 8 <= bl.kc <= max(_round_up(k, 8), analytic.kc):
        return False
    if gemm_needs_partial_sums(k, bl) and not gemm_needs_partial_sums(k, analytic):
        return False  # callers chose the output's dtype on the analytic depth blocks (blis_gemm_applies)
    if bl.mc % bl.mr or not bl.mr <= bl.mc <= max(_round_up(m, bl.mr), analytic.mc):
        return False
    if bl.nc % bl.nr or not bl.nr <= bl.nc <= max(_round_up(n, bl.nr), analytic.nc):
        return False
    if bl.ku not in K_UNROLLS or not 0 <= bl.pf <= MAX_PREFETCH_STEPS or not k_split_legal(bl.ksplit, m, n, k, dtype):
        return False
    return bl.split in THREAD_SPLITS and bl.kc * (bl.mc + bl.nc) * itemsize(dtype) <= MAX_LOCAL_BYTES


def k_split_legal(chunks: int, m: int, n: int, k: int, dtype: str) -> bool:
    """0 (the rule) and 1 (never) always; c >= 2 chunks of at least 8 deep whose partials fit the bound."""
    if chunks in (0, 1):
        return True
    return (2 <= chunks <= MAX_K_CHUNKS and k >= 8 * chunks
            and chunks * m * n * itemsize(dtype) <= SPLIT_K_MAX_TUNED_BYTES)


def analytic_gemm_blocking(m: int, n: int, k: int, dtype: str, panels_given: bool = False) -> GemmBlocking:
    """Tile and block sizes for an m x n x k GEMM of `dtype` on this CPU, from its cache sizes.

    panels_given: B (or both operands) comes already in panels and is read in
    place, so no KC x NC block of it has to fit anywhere: KC is then bounded by
    A's micro-panel (MR x KC) filling 5/8 of L1d, with B's micro-panel
    streaming from L2, and K is cut into equal blocks of at most that. Deep
    blocks write the partial sums to the output fewer times (GPT-2's 128-row
    GEMMs: ~10% faster than KC 224; the MLP's K = 784 in one block instead
    of two: ~2% faster). A K whose whole micro-panel fits 4/5 of L1d is one
    block (with a 32 KiB L1d, GPT-2's language-model head, K = 768 and a
    25 MiB output, ran ~4% faster than in two blocks of 384).
    """
    target = cpu_target()
    size = itemsize(dtype)
    lanes = max(target.vector_bytes // size, 1)
    if n <= lanes:
        mr, nr = 8, lanes  # a narrow B (few output channels): one vector wide, 8 accumulators
    elif target.vector_registers >= 32:
        mr, nr = 8, 2 * lanes  # 16 accumulators + 2 B vectors + 1 broadcast of 32 registers
    elif target.vector_bytes >= 32:
        mr, nr = 6, 2 * lanes  # 12 accumulators of 16 registers
    else:
        mr, nr = 4, 2 * lanes
    if panels_given:
        deepest = _round_down(target.l1d * 5 // 8 // (mr * size), 8)
        if mr * _round_up(k, 8) * size <= target.l1d * 4 // 5:
            deepest = _round_up(k, 8)  # one block: the output is written once, not read back per block
        kc = _round_up(-(-k // -(-k // deepest)), 8)
    else:
        # B's micro-panel (KC x NR) in an eighth of L2, K cut into equal blocks of at most that
        deepest = max(_round_down(min(target.l2 // 8 // (nr * size), KC_LIMIT), 8), 64)
        kc = min(_round_up(-(-k // -(-k // deepest)), 8), _round_up(k, 8))
    mc = _round_down(min(target.l2 // 2 // (kc * size), 480), mr)
    # B panels past ~1 MiB measured slower here than a shorter panel re-packed more often
    nc = _round_down(min(target.l3 // 2 // (kc * size), 1024 * 4 // size), nr)
    nc = min(nc, _round_up(n, nr))
    if not is_symbolic(m):  # a symbolic M keeps the cache-sized block: its last block is short (min())
        mc = min(mc, _round_up(m, mr))
    if not panels_given:
        mc = a_block_rows(mc, mr, k * size, kc * size)
    return GemmBlocking(mr, nr, kc, mc, nc)


KC_LIMIT = 1024  # the deepest block of a GEMM that packs B


def a_block_rows(mc: int, mr: int, row_stride_bytes: int, row_bytes: int) -> int:
    """The rows of A's L2 block cut (in whole tiles) until they take at most half the ways of any L2 set.

    A read in place (a row-major [M, K] A: gemm_a_reads.py) keeps its rows K apart, and a power-of-two
    K puts many of them in the same sets (gemm_a_reads.rows_sharing_l2); the other half of the ways is
    left to B's micro-panel and C. An A packed into panels does not need it, and loses little by it:
    a smaller block only fetches B's micro-panels from L3 a few more times.
    """
    target, ways = cpu_target(), l2_ways()
    while mc > mr and rows_sharing_l2(mc, row_stride_bytes, row_bytes, target.l2, ways) > ways // 2:
        mc -= mr
    return mc


def gemm_needs_partial_sums(k: int, blocking: GemmBlocking) -> bool:
    """True when K spans several KC blocks, so partial sums pass through the output buffer."""
    return k > blocking.kc


PARALLEL_MIN_MACS = 1 << 18  # below this, waking the other threads costs more than they save


@dataclass(frozen=True)
class ThreadSplit:
    """How one GEMM's work is cut into tasks for the threads: batch x row chunks x column chunks,
    or `k_chunks` > 1: the depth cut into chunks whose partial products are added afterwards."""

    row_chunks: int
    col_chunks: int
    parallel: bool
    k_chunks: int = 1
    threads_if: E.Expr | None = None  # a parallel split used only where this run-time condition holds


SPLIT_K_DEPTH = 8  # split the depth when K is at least this many times M and N
SPLIT_K_CHUNK = 256  # and into chunks at least this deep (a depth block of the L1 rule that came before)
SPLIT_K_MAX_PARTIAL_BYTES = 1 << 20  # the partial products of all chunks together


def gemm_thread_split(batch: int, m: int, n: int, k: int, blocking: GemmBlocking,
                      threads: int | None = None, depth_split: bool = True, a_packed: bool = True) -> ThreadSplit:
    """Cut a batched GEMM into tasks that the threads share evenly, one parallel region in all.

    Independent matrices of the batch are the cheapest tasks (nothing is packed
    twice). Where the batch alone does not divide among the threads, each
    matrix is cut into chunks: by rows (each chunk repacks B, but A is packed
    once), or by columns when N >= 2M (each chunk repacks A, M x K, which is
    then the smaller operand; square GEMMs measured faster cut by rows). An A read in place
    (`a_packed=False`: its rows are contiguous, gemm_a_reads.py) is packed by nobody, so column
    chunks repack nothing while row chunks each still pack all of B: such a GEMM is cut by columns
    unless A is much the larger operand (M > 2N), whose rows each thread would then read from L3.
    Every chunk is a multiple of the register tile, so rounding may leave the last tasks
    without rows or columns (64 rows on 7 threads: 4 chunks of 16 and 3 idle tasks).
    depth_split=False: never cut K (`split_k_applies`), for a GEMM that cannot.
    blocking.split "rows" / "cols" imposes the cut where the matrix is cut at all.
    """
    threads = threads or thread_count()
    # with a run-time size, whether the threads share the GEMM is decided per call (no size class)
    choice = at_least(batch * m * n * k, PARALLEL_MIN_MACS)
    if threads <= 1 or choice is False:
        return ThreadSplit(1, 1, False)
    split = _thread_cut(batch, m, n, k, blocking, threads, depth_split and choice is True, a_packed)
    return replace(split, threads_if=threads_if(choice)) if split.parallel else split


def _thread_cut(batch: int, m: int, n: int, k: int, blocking: GemmBlocking, threads: int,
                depth_split: bool, a_packed: bool = True) -> ThreadSplit:
    """gemm_thread_split's cut of a GEMM large enough to share."""
    if is_symbolic(batch) and not (is_symbolic(m) and is_symbolic(n)) and blocking.split == "auto":
        # a run-time batch (a convolution's images): the same cut at every batch (no size class), each
        # matrix in `threads` chunks where they go round, so any batch divides evenly. With run-time
        # pixels as well (a run-time image size: M or N), the fixed dimension is cut where it goes
        # round; else the run-time rows, or (run-time columns) only the batch is shared.
        row_units, col_units = -(-m // blocking.mr), -(-n // blocking.nr)
        if is_symbolic(m):
            return ThreadSplit(1, threads, True) if col_units >= threads else ThreadSplit(threads, 1, True)
        if is_symbolic(n):
            return ThreadSplit(threads, 1, True) if row_units >= threads else ThreadSplit(1, 1, True)
        if col_units >= threads and (n >= 2 * m or row_units < threads):
            return ThreadSplit(1, threads, True)
        return ThreadSplit(threads, 1, True) if row_units >= threads else ThreadSplit(1, 1, True)
    if batch % threads == 0 or batch >= 4 * threads:
        return ThreadSplit(1, 1, True)
    if depth_split and batch == 1 and blocking.ksplit >= 2:  # a tuned blocking chose the depth cut
        return ThreadSplit(1, 1, True, blocking.ksplit)
    if depth_split and batch == 1 and blocking.ksplit == 0 and split_k_applies(m, n, k, blocking, threads):
        return ThreadSplit(1, 1, True, threads)
    cuts = threads // math.gcd(batch, threads)
    row_units, col_units = -(-m // blocking.mr), -(-n // blocking.nr)
    if is_symbolic(m) and not is_symbolic(n) and blocking.split == "auto":
        # a run-time M: the same cut at every M (no size class): the columns where they go round,
        # else the rows (at a small M some tasks get none)
        return ThreadSplit(1, cuts, True) if col_units >= cuts else ThreadSplit(cuts, 1, True)
    columns_cheaper = n >= 2 * m if a_packed else 2 * n >= m
    by_cols = (columns_cheaper and col_units >= cuts) or row_units < cuts
    if blocking.split != "auto":  # a tuned blocking chose the cut
        by_cols = blocking.split == "cols"
    units = col_units if by_cols else row_units
    if units < cuts:
        return ThreadSplit(1, 1, batch > 1)
    return ThreadSplit(1, cuts, True) if by_cols else ThreadSplit(cuts, 1, True)


def split_k_applies(m: int, n: int, k: int, blocking: GemmBlocking, threads: int) -> bool:
    """Cut K rather than M or N: a long depth with few outputs (a weight gradient: M x N weights,
    K = batch x pixels). Cutting rows or columns would make every thread pack all of the other
    operand; cutting K packs each element once and adds `threads` small partial products."""
    return (k >= threads * SPLIT_K_CHUNK and k >= SPLIT_K_DEPTH * max(m, n)
            and threads * m * n * 4 <= SPLIT_K_MAX_PARTIAL_BYTES)  # float32 partials


@dataclass(frozen=True)
class Panels:
    """An operand already laid out in the micro-kernel's panels, read in place (nothing packs it).

    Lane l of panel p at depth d of matrix b of the batch is
    buffer[offset + b*batch_stride + p*panel_stride + d*depth_stride + l]:
    for B a panel is NR consecutive columns, for A MR consecutive rows. The
    lanes past the matrix's edge are only ever multiplied into outputs that
    are dropped, but should hold zeros. The weights of matmul_packed
    (ir/ops/gemm_panels.py) are B panels with depth stride NR; Winograd's U and V
    (winograd.py) are the A and B panels of its n^2 GEMMs.
    """

    buffer: Buffer
    panel_stride: int
    depth_stride: int
    offset: E.Expr | int = 0
    batch_stride: int = 0
    streamed: bool = False  # constant weights read from memory on every call: prefetch the next panel

    def __post_init__(self) -> None:
        if self.streamed and (self.offset != 0 or self.batch_stride):
            raise ValueError("Panels: streamed panels are one whole matrix (offset 0, no batch stride)")

    def load(self, batch: E.Expr, panel: E.Expr, depth: E.Expr, lane: E.Expr) -> E.Expr:
        index = self.offset + panel * self.panel_stride + depth * self.depth_stride + lane
        if self.batch_stride:
            index = index + batch * self.batch_stride
        return E.Load(self.buffer, index)


def blis_gemm(out: Buffer, dtype: str, batch: int, m: int, n: int, k: int,
              a_value: IndexFn | None, b_value: IndexFn | None, out_index: IndexFn,
              epilogue: Callable[[E.Expr, E.Expr, E.Expr, E.Expr], E.Expr],
              blocking: GemmBlocking | None = None, prefix: str = "g",
              col_valid: Callable[[E.Expr], E.Expr] | None = None, b_panels: Panels | None = None,
              threads: int | None = None, a_panels: Panels | None = None) -> Stmt:
    """Loop IR of a batched GEMM (see the module docstring).

    a_value(b, row, kk) / b_value(b, kk, col): the operand elements (in range;
    packing only asks for valid indices). out_index(b, row, col): flat index
    of the output element. epilogue(b, row, col, acc): the stored value.
    col_valid(col): when given, only columns where it is true are written back
    (the others are computed and dropped: the junk columns of conv.py's
    padded-row implicit GEMM). a_panels / b_panels: the operand given in the
    micro-kernel's panels (`Panels`, for the blocking's MR / NR), read in place:
    nothing packs it and its a_value / b_value is never asked. threads: how many to
    plan for (default: OpenMP's count).
    """
    bl = blocking or gemm_blocking(m, n, k, dtype, b_transposed=b_value is not None and b_panels is None
                                   and b_reads_columns(b_value, E.Var(f"{prefix}_probe")))
    mr, nr, kc_max, nc_max = bl.mr, bl.nr, bl.kc, bl.nc
    # a depth split writes whole partial products: not for dropped columns or B read in place
    given = a_panels is not None or b_panels is not None
    probe = E.Var(f"{prefix}_probe")
    a_rows_in_place = a_panels is None and a_reads_rows(a_value, probe)
    # rows contiguous in pieces (a permuted A): read in place too, the depth loop cut into pieces
    a_piece = None if a_panels is not None or a_rows_in_place else a_row_piece(a_value, k, kc_max, probe)
    a_packed = a_panels is None and not a_rows_in_place and a_piece is None
    split = gemm_thread_split(batch, m, n, k, bl, threads, depth_split=col_valid is None and not given,
                              a_packed=a_packed)
    if split.k_chunks > 1:
        return _split_k_gemm(out, dtype, m, n, k, a_value, b_value, out_index, epilogue, bl, prefix, split.k_chunks)
    # Each task owns a chunk of rows and a chunk of columns of one matrix of the batch.
    m_chunk = _round_up(-(-m // split.row_chunks), mr)
    n_chunk = _round_up(-(-n // split.col_chunks), nr)
    mc_max = bl.mc if is_symbolic(m_chunk) else min(bl.mc, m_chunk)  # local buffers keep a static size
    nc_max = nc_max if is_symbolic(n_chunk) else min(nc_max, n_chunk)
    v = lambda name: E.Var(f"{prefix}_{name}")  # noqa: E731
    zero = E.Const(0.0, dtype)
    n_k = -(-k // kc_max)

    task, bi, jc, pc, jp, pp, jj = v("task"), v("b"), v("jc"), v("pc"), v("jp"), v("pp"), v("jj")
    ib, ip, pa, ia, jq, iq = v("ib"), v("ip"), v("pa"), v("ia"), v("jq"), v("iq")
    q, p, i, j, wi, wj = v("q"), v("p"), v("i"), v("j"), v("wi"), v("wj")
    bpack = Buffer(f"{prefix}_bpack", dtype, (kc_max * nc_max,), scope="local")
    apack = Buffer(f"{prefix}_apack", dtype, (kc_max * mc_max,), scope="local")
    acc = Buffer(f"{prefix}_acc", dtype, (mr * nr,), scope="local")

    chunk, rows, cols, row_base, col_base, mc, nc = task_blocks(task, split, (m_chunk, n_chunk), (m, n), (ib, jc),
                                                                (mc_max, nc_max))
    kc = _chunk_extent(kc_max, n_k, k, pc * kc_max)
    k_at = lambda pv: pc * kc_max + pv  # noqa: E731
    clamp = lambda x, size: E.minimum(x, size - 1)  # noqa: E731

    # ---- pack B: micro-panel jp holds columns col_base + jp*NR + [0, NR) for depth p
    n_panels = (nc + (nr - 1)) // nr
    pack_b: Stmt | None = None
    if b_panels is None:
        # a B stored transposed packs by 8 x 8 register transposes where the target has them
        pack_b = transposed_pack(bpack, b_value, bi, k_at(0), kc, col_base, n, n_panels, jp, kc_max, nr, dtype,
                                 E.Var(f"{prefix}_probe"))
    if b_panels is None and pack_b is None:
        col = col_base + jp * nr + jj
        b_elem = E.Select(E.lt(col, n), b_value(bi, k_at(pp), clamp(col, n)), zero) if has_tail(n, nr) \
            else b_value(bi, k_at(pp), col)
        pack_b = For(jp, n_panels, For(pp, kc, For(jj, E.const(nr), Store(
            bpack, jp * (kc_max * nr) + pp * nr + jj, b_elem), "vectorized")))

    # ---- pack A: micro-panel ip holds rows row_base + ip*MR + [0, MR) for depth p
    m_panels = (mc + (mr - 1)) // mr
    pack_a: Stmt | None = None
    if a_packed:
        row = row_base + ip * mr + ia
        a_elem = E.Select(E.lt(row, m), a_value(bi, clamp(row, m), k_at(pa)), zero) if has_tail(m, mr) else \
            a_value(bi, row, k_at(pa))
        pack_a = For(ip, m_panels, For(pa, kc, For(ia, E.const(mr), Store(
            apack, ip * (kc_max * mr) + pa * mr + ia, a_elem), "unrolled")))

    # ---- micro-kernel on tile (iq, jq), then write-back
    if b_panels is None:
        b_micro = E.Load(bpack, jq * (kc_max * nr) + p * nr + j)
    else:
        # the task's first panel: column chunks and NC blocks are whole numbers of panels
        panel = (chunk % split.col_chunks) * (n_chunk // nr) if split.col_chunks > 1 else E.const(0)
        b_panel = panel + jc * (nc_max // nr) + jq
        b_micro = b_panels.load(bi, b_panel, k_at(p), j)
    if a_rows_in_place or a_piece is not None:
        # MR rows of A read where they lie (rows past M repeat the last one; their sums are dropped)
        a_row = row_base + iq * mr + i
        a_micro = a_value(bi, clamp(a_row, m) if has_tail(m, mr) else a_row, k_at(p))
    elif a_panels is None:
        a_micro = E.Load(apack, iq * (kc_max * mr) + p * mr + i)
    else:
        # row chunks and MC blocks are whole numbers of panels too
        panel = (chunk // split.col_chunks) * (m_chunk // mr) if split.row_chunks > 1 else E.const(0)
        a_micro = a_panels.load(bi, panel + ib * (mc_max // mr) + iq, k_at(p), i)
    # fma: one rounding per step, and C compiled as -std=c99 contracts nothing by itself
    update = E.call("fma", a_micro, b_micro, E.Load(acc, i * nr + j))
    step: Stmt = For(i, E.const(mr), For(j, E.const(nr), Store(acc, i * nr + j, update), "vectorized"), "unrolled")
    if bl.pf:
        step = block(*prefetch_ahead(b_micro, p, j, bl.pf, nr, dtype), step)
    if b_panels is not None and b_panels.streamed:
        step = block(*prefetch_next_panel(b_panels.buffer, lambda pn, lane: b_panels.load(bi, pn, k_at(p), lane).index,
                                          b_panel, b_panels.buffer.size // b_panels.panel_stride, nr, dtype), step)
    if a_piece is None:
        depth_steps = depth_loop(p, kc, step, bl.ku, prefix)
    else:
        piece, within = v("pq"), v("pr")
        inner = depth_loop(within, E.const(a_piece), substitute(step, {p.name: piece * a_piece + within}), bl.ku,
                           f"{prefix}_r")
        depth_steps = [For(piece, kc // a_piece, block(*inner))]
    micro_kernel = block(For(q, E.const(mr * nr), Store(acc, q, zero), "vectorized"), *depth_steps)
    if n_k > 1 and col_valid is None:
        # the write-back reads partial sums back: fetch the tile while the depth loop runs
        r0, c0 = row_base + iq * mr, col_base + jq * nr
        micro_kernel = block(*prefetch_output_tile(
            out, lambda row, col: out_index(bi, row, col),
            lambda r: clamp(r0 + r, m) if has_tail(m, mr) else r0 + r,
            lambda c: clamp(c0 + c, n) if has_tail(n, nr) else c0 + c, (mr, nr), out.dtype), micro_kernel)
    writeback = tile_writeback(out, acc, out_index, epilogue, col_valid, bi, row_base + iq * mr, col_base + jq * nr,
                               (wi, wj), (m, n), (mr, nr), pc, n_k, dtype, zero)
    tiles = For(jq, n_panels, For(iq, m_panels, Alloc(acc, block(micro_kernel, writeback))))
    row_blocks = For(ib, (rows + (mc_max - 1)) // mc_max, tiles if pack_a is None else block(pack_a, tiles))
    depth = For(pc, E.const(n_k), row_blocks if pack_b is None else block(pack_b, row_blocks))
    matrix: Stmt = For(jc, (cols + (nc_max - 1)) // nc_max, depth)
    if pack_a is not None:
        matrix = Alloc(apack, matrix)
    if b_panels is None:
        matrix = Alloc(bpack, matrix)
    chunks = split.row_chunks * split.col_chunks
    tasks = batch * chunks
    if tasks == 1:
        return substitute(substitute(matrix, {bi.name: E.const(0)}), {task.name: E.const(0)})
    matrix = substitute(matrix, {bi.name: task // chunks if chunks > 1 else task})
    return For(task, E.const(tasks), matrix, "parallel" if split.parallel else "serial", split.threads_if)


def depth_loop(p: E.Var, depth: E.Expr, step: Stmt, unroll: int, prefix: str) -> list[Stmt]:
    """`for p < depth: step`, or with unroll u > 1: `for po < depth / u: for pu < u (unrolled): step`
    at p = po*u + pu, then the depth % u steps left (none where depth is a constant multiple of u)."""
    if unroll <= 1:
        return [For(p, depth, step)]
    outer, inner, rest = E.Var(f"{prefix}_po"), E.Var(f"{prefix}_pu"), E.Var(f"{prefix}_pt")
    whole = depth // unroll
    loops: list[Stmt] = [For(outer, whole, For(inner, E.const(unroll), substitute(step, {p.name: outer * unroll + inner}),
                                             "unrolled"))]
    if not (isinstance(depth, E.Const) and int(depth.value) % unroll == 0):
        loops.append(For(rest, depth - whole * unroll, substitute(step, {p.name: whole * unroll + rest})))
    return loops


def _split_k_gemm(out: Buffer, dtype: str, m: int, n: int, k: int, a_value: IndexFn, b_value: IndexFn,
                  out_index: IndexFn, epilogue, bl: GemmBlocking, prefix: str, chunks: int) -> Stmt:
    """One GEMM (batch 1) as `chunks` parallel GEMMs over slices of K, each into its own slice of a
    partial buffer, then out = epilogue(sum of the partials)."""
    depth = _round_up(-(-k // chunks), 8)
    t = E.Var(f"{prefix}_kt")
    start = t * depth
    zero = E.Const(0.0, dtype)

    def in_range(value: Callable[[E.Expr], E.Expr], kk: E.Expr) -> E.Expr:
        """The element at depth start + kk: zero past K (the last chunk may be short)."""
        if depth * chunks == k:
            return value(start + kk)
        return E.Select(E.lt(start + kk, k), value(E.minimum(start + kk, k - 1)), zero)

    partial = Buffer(f"{prefix}_partial", dtype, (chunks * m * n,), scope="local")
    chunk = blis_gemm(partial, dtype, 1, m, n, depth,
                      lambda b, row, kk: in_range(lambda d: a_value(b, row, d), kk),
                      lambda b, kk, col: in_range(lambda d: b_value(b, d, col), kk),
                      lambda b, row, col: (t * m + row) * n + col, lambda b, row, col, acc: acc,
                      bl, prefix, threads=1)
    row, col = E.Var(f"{prefix}_row"), E.Var(f"{prefix}_col")
    total: E.Expr = E.Load(partial, row * n + col)
    for c in range(1, chunks):
        total = total + E.Load(partial, (c * m + row) * n + col)
    zero_b = E.const(0)
    combine = For(row, E.const(m), For(col, E.const(n), Store(out, out_index(zero_b, row, col),
                                                               epilogue(zero_b, row, col, total)), "vectorized"))
    return Alloc(partial, block(For(t, E.const(chunks), chunk, "parallel"), combine))


def _chunk_extent(chunk: int, chunks: int, total: int, start: E.Expr) -> E.Expr:
    """Extent of the chunk at `start` of `chunks` chunks of `chunk` over `total`: min(chunk, total - start),
    a constant where the chunks tile `total` exactly."""
    if chunks == 1:
        return E.const(total)
    exact = not is_symbolic(total) and not is_symbolic(chunk) and chunk * chunks == total
    return E.const(chunk) if exact else E.minimum(E.const(chunk), total - start)


def has_tail(size, tile: int) -> bool:
    """Whether loops over `size` in steps of `tile` end with a short step: always assumed for a
    symbolic size (a min() or mask), never an equality guard on it."""
    return is_symbolic(size) or size % tile != 0


def _block_extent(block_size: int, chunk_extent: E.Expr, index: E.Expr) -> E.Expr:
    """Extent of block `index` of size block_size within a chunk (min() only when a block can be short)."""
    if isinstance(chunk_extent, E.Const) and int(chunk_extent.value) % block_size == 0:
        return E.const(block_size)
    return E.minimum(E.const(block_size), chunk_extent - index * block_size)


def tile_writeback(out: Buffer, acc: Buffer, out_index: IndexFn, epilogue, col_valid, bi: E.Expr, r0: E.Expr,
                   c0: E.Expr, tile_vars: tuple[E.Var, E.Var], sizes: tuple[int, int], tile: tuple[int, int],
                   pc: E.Var, n_k: int, dtype: str, zero: E.Const) -> Stmt:
    """Store a micro-tile's sums (`acc`, MR x NR row-major) at rows r0.., columns c0.. of `out`.

    Over several K blocks (n_k > 1) `out` holds the partial sums: block pc adds its tile to
    them (the first block starts from zero), and the last one applies the epilogue. Rows and
    columns past m and n (tails) are not stored; `col_valid` can drop more columns.
    """
    (wi, wj), (m, n), (mr, nr) = tile_vars, sizes, tile
    out_row, out_col = r0 + wi, c0 + wj
    flat = out_index(bi, out_row, out_col)
    tile_sum: E.Expr = E.Load(acc, wi * nr + wj)
    last_sum = tile_sum  # the sum on the last K block, where the epilogue applies
    if n_k > 1:
        if out.dtype != dtype:
            raise ValueError("blis_gemm: partial sums over K blocks need an output of the compute dtype")
        last_sum = E.Load(out, flat) + tile_sum  # pc > 0 there: a plain load, so the epilogue vectorizes
        tile_sum = E.Select(E.eq(pc, 0), zero, E.Load(out, flat)) + tile_sum
    rows_left = E.minimum(E.const(mr), m - r0) if has_tail(m, mr) else E.const(mr)
    cols_left = E.minimum(E.const(nr), n - c0) if has_tail(n, nr) else E.const(nr)

    def write(value: E.Expr) -> Stmt:
        store: Stmt = Store(out, flat, value)
        if col_valid is not None:
            store = If(col_valid(out_col), store)
        return For(wi, rows_left, For(wj, cols_left, store, "vectorized"))

    final = write(epilogue(bi, out_row, out_col, last_sum))
    return If(E.eq(pc, n_k - 1), final, write(tile_sum)) if n_k > 1 else final


def task_blocks(task: E.Expr, split, chunk_sizes: tuple[int, int], sizes: tuple[int, int],
                block_vars: tuple[E.Var, E.Var], block_sizes: tuple[int, int]):
    """Where a GEMM task works: (its chunk index, the chunk's rows and columns, the first row and
    column of cache block (ib, jc) in it, and that block's rows mc and columns nc).

    Task `task` takes chunk task % chunks: rows [row0, row0 + rows), columns [col0, col0 + cols)
    of its matrix. Chunks rounded up to the register tile may cover the matrix in fewer than the
    tasks made for it (64 rows on 7 threads: 4 chunks of 16): the tasks past its end get a
    negative extent, no work.
    """
    (m_chunk, n_chunk), (m, n), (ib, jc), (mc_max, nc_max) = chunk_sizes, sizes, block_vars, block_sizes
    chunks = split.row_chunks * split.col_chunks
    chunk = task % chunks if chunks > 1 else E.const(0)
    row0 = (chunk // split.col_chunks) * m_chunk if split.row_chunks > 1 else E.const(0)
    col0 = (chunk % split.col_chunks) * n_chunk if split.col_chunks > 1 else E.const(0)
    rows = _chunk_extent(m_chunk, split.row_chunks, m, row0)
    cols = _chunk_extent(n_chunk, split.col_chunks, n, col0)
    return (chunk, rows, cols, row0 + ib * mc_max, col0 + jc * nc_max, _block_extent(mc_max, rows, ib),
            _block_extent(nc_max, cols, jc))
