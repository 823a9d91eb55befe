"""The u8 x s8 -> s32 GEMM of `matmul_u8s8`: `vpdpbusd` micro-kernels, a fused epilogue.

out[row, col] = epilogue(sum_k A[row, k] * B[k, col] + compensation[col]), with
A uint8, B int8 given in panels packed at compile time (ir/ops/quantized.py:
four consecutive depths of a column are four consecutive bytes), and the
compensation (what the zero points cost, folded at compile time) added per
column. The rows of every batch matrix are one M, since B is shared.

The work is cut into tasks of MB rows x NB columns, spread over the threads::

    for task in row blocks x column blocks (parallel):
      apack[MB x K4] = A rows (uint8, zero past K)     # loop IR; skipped when A's rows
                                                      #   are a buffer, K a multiple of 4
      tile[MB x NB] = apack @ B panels                # the native micro-kernels (below)
      out[rows, cols] = epilogue(tile + compensation) # loop IR: the fused epilogue

The micro-kernel is C with vector intrinsics (a `NativeCall`, since loop IR
has no 4-byte dot product), in one of four variants chosen by the target's
`int8_dot` (kernels/target.py):

- `vnni`: `vpdpbusd` (AVX512-VNNI) adds four u8 x s8 products into each
  32-bit lane, exactly (no saturation). The register tile is MR = 8 rows x
  NR = 32 columns: 16 accumulators, two B vectors and one broadcast of A.
- `avx512bw`: no VNNI. `vpmaddubsw` would saturate the pair sums to 16 bits
  (255 * 127 * 2 > 32767), so the bytes are widened to 16 bits instead (even
  and odd bytes of each 32-bit lane) and `vpmaddwd` sums the pairs exactly
  into 32 bits: two multiplies and two additions where VNNI needs one.
- `avx2`: the same sums in 256-bit vectors, the tile in quarters of 4 rows x 16
  columns (int8_avx2.py); `split_avx2` where it pays (`split_pays`: deep enough
  and wide enough), with A's rows split into 16-bit pairs once per task (into
  the task's `q_asplit`) so the step broadcasts them with plain loads; where the
  constant weights allow it (`maddubsw_is_exact`), the `maddubsw` tile there sums
  byte pairs with `vpmaddubsw` instead, unwidened, from A's rows as they are.
- `portable`: plain C, for any other CPU.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.graph import Node
from ...ir.ops.quantized import U8S8_DEPTH_GROUP, U8S8_PANEL_COLUMNS
from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import Alloc, For, NativeCall, Pointer, Stmt, Store, block
from ..inline import ValueBuilder, broadcast_index, delinearize
from ..schedule_defaults import thread_count
from ..target import cpu_target
from .gemm import PARALLEL_MIN_MACS
from .int8_avx2 import AVX2, MADDUBSW, SPLIT, SPLIT_GROUP_BYTES, SPLIT_ROWS, gemm_tile_avx2, layer_dot_kind, \
    split_pays, split_rows_source

MR = 8  # rows of the register tile
NR = U8S8_PANEL_COLUMNS  # columns of the register tile: one panel
ROW_BLOCK = 32  # MB: rows of A per task (32 x K bytes stay in L1/L2 while B's panels stream past)
COLUMN_BLOCK = 512  # NB at most: a 32 x 512 int32 tile is 64 KiB, read back by the epilogue from L2

_TILE_PROLOGUE = r"""
/* ---- u8 x s8 GEMM ({kind}): c[r * ldc + j] = sum over k of a[r * lda + k] * B[k][j] for r < rows,
 * j < cols (the columns of ceil(cols / 32) panels; a tile may leave the last panel's columns past cols
 * unwritten). B comes in panels of 32 columns (ir/ops/quantized.py): panel p,
 * depth group q holds 32 columns x 4 bytes, the bytes of one column's four depths together. */
"""

_VNNI = r"""#include <immintrin.h>
typedef int32_t tk_unaligned_i32 __attribute__((may_alias, aligned(1)));
static inline __attribute__((always_inline)) void tk_u8s8_tile_vnni(
    const int mr, const int cols, const uint8_t *restrict a, int64_t lda, const int8_t *restrict b,
    int32_t *restrict c, int64_t ldc, int64_t depth)
{
    (void)cols;  /* both 512-bit halves of the panel in one step: an unused half costs no extra step */
    __m512i acc0[8], acc1[8];  /* mr rows x 32 columns of int32 sums, in 16 registers */
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        acc0[i] = _mm512_setzero_si512();
        acc1[i] = _mm512_setzero_si512();
    }
    for (int64_t q = 0; q < depth; q++) {
        const __m512i b0 = _mm512_loadu_si512(b + q * 128);       /* columns 0..15, 4 depths each */
        const __m512i b1 = _mm512_loadu_si512(b + q * 128 + 64);  /* columns 16..31 */
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            /* four bytes of row i, broadcast to every lane: vpdpbusd's unsigned operand */
            const __m512i av = _mm512_set1_epi32(*(const tk_unaligned_i32 *)(a + i * lda + 4 * q));
            acc0[i] = _mm512_dpbusd_epi32(acc0[i], av, b0);
            acc1[i] = _mm512_dpbusd_epi32(acc1[i], av, b1);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        _mm512_storeu_si512(c + i * ldc, acc0[i]);
        _mm512_storeu_si512(c + i * ldc + 16, acc1[i]);
    }
}
"""

_AVX512BW = r"""#include <immintrin.h>
typedef int32_t tk_unaligned_i32 __attribute__((may_alias, aligned(1)));
static inline __attribute__((always_inline)) void tk_u8s8_tile_avx512bw(
    const int mr, const int cols, const uint8_t *restrict a, int64_t lda, const int8_t *restrict b,
    int32_t *restrict c, int64_t ldc, int64_t depth)
{
    (void)cols;  /* both 512-bit halves of the panel in one step: an unused half costs no extra step */
    __m512i acc0[8], acc1[8];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        acc0[i] = _mm512_setzero_si512();
        acc1[i] = _mm512_setzero_si512();
    }
    for (int64_t q = 0; q < depth; q++) {
        /* B's bytes sign-extended to 16 bits: even bytes (depths 0 and 2 of each lane), odd ones (1 and 3) */
        const __m512i b0 = _mm512_loadu_si512(b + q * 128), b1 = _mm512_loadu_si512(b + q * 128 + 64);
        const __m512i b0_even = _mm512_srai_epi16(_mm512_slli_epi16(b0, 8), 8), b0_odd = _mm512_srai_epi16(b0, 8);
        const __m512i b1_even = _mm512_srai_epi16(_mm512_slli_epi16(b1, 8), 8), b1_odd = _mm512_srai_epi16(b1, 8);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            /* A's four bytes zero-extended the same way, then vpmaddwd: exact 32-bit pair sums */
            const uint32_t word = (uint32_t)*(const tk_unaligned_i32 *)(a + i * lda + 4 * q);
            const __m512i a_even = _mm512_set1_epi32((int32_t)(word & 0x00ff00ffu));
            const __m512i a_odd = _mm512_set1_epi32((int32_t)((word >> 8) & 0x00ff00ffu));
            acc0[i] = _mm512_add_epi32(acc0[i], _mm512_add_epi32(_mm512_madd_epi16(a_even, b0_even),
                                                                 _mm512_madd_epi16(a_odd, b0_odd)));
            acc1[i] = _mm512_add_epi32(acc1[i], _mm512_add_epi32(_mm512_madd_epi16(a_even, b1_even),
                                                                 _mm512_madd_epi16(a_odd, b1_odd)));
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        _mm512_storeu_si512(c + i * ldc, acc0[i]);
        _mm512_storeu_si512(c + i * ldc + 16, acc1[i]);
    }
}
"""

_PORTABLE = r"""static inline void tk_u8s8_tile_portable(
    const int mr, const int cols, const uint8_t *restrict a, int64_t lda, const int8_t *restrict b,
    int32_t *restrict c, int64_t ldc, int64_t depth)
{
    for (int i = 0; i < mr; i++) {
        int32_t acc[32] = {0};
        for (int64_t q = 0; q < depth; q++) {
            for (int j = 0; j < 32; j++) {
                for (int t = 0; t < 4; t++) {
                    acc[j] += (int32_t)a[i * lda + 4 * q + t] * (int32_t)b[q * 128 + 4 * j + t];
                }
            }
        }
        for (int j = 0; j < cols; j++) {  /* the panel's columns past the matrix's are never read */
            c[i * ldc + j] = acc[j];
        }
    }
}
"""

_DRIVER = r"""static void tk_gemm_u8s8_{kind}(const uint8_t *restrict a_rows, int64_t lda_rows, const int8_t *restrict panels,
                               int32_t *restrict c, int64_t ldc, int64_t rows, int64_t cols, int64_t depth{params})
{{
{rows}
    const int64_t npanels = (cols + 31) / 32;  /* the last panel's columns past cols may be left unwritten */
    for (int64_t p = 0; p < npanels; p++) {{  /* one panel of B stays in L1 while the rows pass */
        const int8_t *b = panels + p * depth * 128;
        const int nc = (int)(cols - p * 32 < 32 ? cols - p * 32 : 32);  /* the panel's columns in use */
        int64_t r = 0;
        for (; r + 8 <= rows; r += 8) {{
            tk_u8s8_tile_{kind}(8, nc, a + r * lda, lda, b, c + r * ldc + p * 32, ldc, depth);
        }}
        /* the last rows: a tile of constant height each, so its sums stay in registers */
        const uint8_t *a_rest = a + r * lda;
        int32_t *c_rest = c + r * ldc + p * 32;
        switch (rows - r) {{
        case 7: tk_u8s8_tile_{kind}(7, nc, a_rest, lda, b, c_rest, ldc, depth); break;
        case 6: tk_u8s8_tile_{kind}(6, nc, a_rest, lda, b, c_rest, ldc, depth); break;
        case 5: tk_u8s8_tile_{kind}(5, nc, a_rest, lda, b, c_rest, ldc, depth); break;
        case 4: tk_u8s8_tile_{kind}(4, nc, a_rest, lda, b, c_rest, ldc, depth); break;
        case 3: tk_u8s8_tile_{kind}(3, nc, a_rest, lda, b, c_rest, ldc, depth); break;
        case 2: tk_u8s8_tile_{kind}(2, nc, a_rest, lda, b, c_rest, ldc, depth); break;
        case 1: tk_u8s8_tile_{kind}(1, nc, a_rest, lda, b, c_rest, ldc, depth); break;
        default: break;
        }}
    }}
}}
"""

_TILES = {"vnni": _VNNI, "avx512bw": _AVX512BW, AVX2: gemm_tile_avx2(), MADDUBSW: gemm_tile_avx2(MADDUBSW),
          SPLIT: gemm_tile_avx2(SPLIT), "portable": _PORTABLE}


_ROWS_IN_PLACE = "    const uint8_t *a = a_rows;  /* the tiles read A's rows where they are */\n" \
    "    const int64_t lda = lda_rows;"
# the exact AVX2 step reads A's rows split into 16-bit pairs (int8_avx2.split_rows_source), once per call,
# into `split`: the caller's buffer of rows * depth * SPLIT_GROUP_BYTES bytes
_ROWS_SPLIT = f"    {SPLIT_ROWS}(a_rows, lda_rows, rows, depth, split);\n" \
    "    const uint8_t *a = split;  /* each panel's tiles read the split rows */\n" \
    f"    const int64_t lda = depth * {SPLIT_GROUP_BYTES};"


def native_source(kind: str) -> str:
    """The C of the u8 x s8 GEMM helper `tk_gemm_u8s8_<kind>`: its micro-kernel and the loop over panels."""
    if kind == SPLIT:  # the driver takes a buffer for A's rows split into 16-bit pairs, its last argument
        driver = _DRIVER.format(kind=kind, params=", uint8_t *restrict split", rows=_ROWS_SPLIT)
        return _TILE_PROLOGUE.format(kind=kind) + split_rows_source() + _TILES[kind] + driver
    return _TILE_PROLOGUE.format(kind=kind) + _TILES[kind] + _DRIVER.format(kind=kind, params="", rows=_ROWS_IN_PLACE)


def task_split(rows: int, n: int, k: int, threads: int) -> tuple[int, int]:
    """(row block MB, column block NB) of the tasks: NB a multiple of NR of at most COLUMN_BLOCK,
    and where there are few row blocks, enough column blocks for every thread to have a share."""
    mb = min(ROW_BLOCK, -(-rows // MR) * MR)
    row_tasks = -(-rows // mb)
    panels = -(-n // NR)
    col_tasks = -(-panels * NR // COLUMN_BLOCK)
    if threads > 1 and rows * n * k >= PARALLEL_MIN_MACS and row_tasks * col_tasks < 4 * threads:
        need = threads // math.gcd(row_tasks, threads)  # column blocks per row block for an even share
        col_tasks = min(panels, -(-col_tasks // need) * need)
    nb = -(-panels // col_tasks) * NR
    return mb, nb


def u8s8_gemm_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """Loop IR computing out = epilogue(A @ B + compensation) for a `matmul_u8s8` node."""
    a_node, panels_node, comp_node = root.inputs
    *batch_shape, m, n = root.shape
    batch_shape = tuple(batch_shape)
    k = a_node.shape[-1]
    rows = int(np.prod(batch_shape, dtype=np.int64)) * m if batch_shape else m
    if rows == 0 or n == 0:
        return None
    depth = panels_node.shape[1]
    k4 = depth * U8S8_DEPTH_GROUP
    kind = layer_dot_kind(cpu_target().int8_dot, panels_node)
    if kind == AVX2 and split_pays(depth, n, rows):
        kind = SPLIT  # A's rows split into 16-bit pairs once per task: the step then broadcasts them by loads
    threads = thread_count()
    mb, nb = task_split(rows, n, k, threads)
    row_tasks, col_tasks = -(-rows // mb), -(-n // nb)
    panels = values.buffers[panels_node.id]

    def out_index(row: E.Expr, col: E.Expr) -> list[E.Expr]:
        if not batch_shape:
            return [row, col]
        return delinearize(row // m, batch_shape) + [row % m, col] if m > 1 else \
            delinearize(row, batch_shape) + [E.const(0), col]

    def a_value(row: E.Expr, kk: E.Expr) -> E.Expr:
        index = out_index(row, kk)  # A's index: the output's with k for the column
        return values.value(a_node, broadcast_index(index[:-2], batch_shape, a_node.shape[:-2]) + index[-2:])

    task, r, kk, c = E.Var("q_task"), E.Var("q_r"), E.Var("q_k"), E.Var("q_c")
    row0 = (task // col_tasks) * mb if col_tasks > 1 else task * mb
    col0 = (task % col_tasks) * nb if col_tasks > 1 else E.const(0)
    task_rows = E.minimum(E.const(mb), rows - row0) if rows % mb else E.const(mb)
    task_cols = E.minimum(E.const(nb), n - col0) if n % nb else E.const(nb)
    tile = Buffer("q_tile", "int32", (mb * nb,), scope="local")
    # B's panels of this column block: NB is a whole number of panels
    b_start = Pointer(panels, (col0 // NR) * (depth * NR * U8S8_DEPTH_GROUP))

    split = Buffer("q_asplit", "uint8", (mb * depth * SPLIT_GROUP_BYTES,), scope="local") if kind == SPLIT \
        else None

    def call(a_start: Pointer, lda: int) -> Stmt:
        scratch = (Pointer(split, E.const(0)),) if split is not None else ()
        helper = NativeCall(f"tk_gemm_u8s8_{kind}", (a_start, E.const(lda), b_start, Pointer(tile, E.const(0)),
                                                     E.const(nb), task_rows, task_cols, E.const(depth)) + scratch,
                            writes=(tile.name,) + ((split.name,) if split is not None else ()),
                            source=native_source(kind))
        return helper if split is None else Alloc(split, helper)

    if k4 == k and a_node.id in values.buffers:  # A's rows lie in memory, whole depth groups: read in place
        compute = call(Pointer(values.buffers[a_node.id], row0 * k), k)
    else:
        apack = Buffer("q_apack", "uint8", (mb * k4,), scope="local")
        value = a_value(row0 + r, E.minimum(kk, k - 1))
        if k4 != k:
            value = E.Select(E.lt(kk, k), value, E.Const(0, "uint8"))
        pack = For(r, task_rows, For(kk, E.const(k4), Store(apack, r * k4 + kk, value), "vectorized"))
        compute = Alloc(apack, block(pack, call(Pointer(apack, E.const(0)), k4)))

    acc = E.Load(tile, r * nb + c) + values.value(comp_node, [col0 + c])
    index = out_index(row0 + r, col0 + c)
    stored = E.cast(acc, out.value_dtype) if epilogue is None else epilogue(index, acc)
    write = For(r, task_rows, For(c, task_cols, Store(out, (row0 + r) * n + col0 + c, stored), "vectorized"))
    tasks = row_tasks * col_tasks
    parallel = threads > 1 and tasks > 1 and rows * n * k >= PARALLEL_MIN_MACS
    return For(task, E.const(tasks), Alloc(tile, block(compute, write)), "parallel" if parallel else "serial")
