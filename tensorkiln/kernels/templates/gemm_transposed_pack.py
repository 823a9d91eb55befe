"""Packing a B stored transposed (`[N, K]`, a linear layer's weight) into the GEMM's micro-panels, 8 x 8 at a time.

A micro-panel row holds NR columns of B at one depth: `bpack[p][j] = B[k0 + p, c0 + j]`.
When B lies as its transpose, consecutive j are ld floats apart in memory, so the
plain pack (gemm.py's loop IR) gathers every element alone: a scalar load and an
insert per float, about twice the instructions of the copy it is. Here each
task's panel is packed by a C helper that reads eight depths of eight columns as
eight 256-bit loads (each contiguous along k), transposes the 8 x 8 block in
registers (unpack, shuffle, permute2f128: 24 shuffles) and stores it as eight
panel rows, so every float is loaded and stored once as part of a vector. A
panel cut by the matrix's edge (fewer than NR columns) and the depth's last
steps (fewer than 8) fall back to the element-wise copy, with zeros past N.

The helper needs the 256-bit AVX shuffles (`CpuTarget.fma256`) and float32; B's
index must be affine in the column with a constant stride (`transposed_stride`).
Otherwise the loop-IR pack stays.
"""
from __future__ import annotations

from typing import Callable

from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import For, NativeCall, Pointer, Stmt
from ...loops.simplify import simplify
from ..target import cpu_target
from .gemm_a_reads import b_reads_columns

IndexFn = Callable[..., E.Expr]

PACK_FUNCTION = "tk_pack_transposed_f32"

_SOURCE = r"""/* ---- a GEMM micro-panel packed from B's transpose (gemm_transposed_pack.py):
 * dst[p * nr + j] = src[j * ld + p] for j < cols, 0 for cols <= j < nr, p < depth.
 * Eight depths of eight columns at a time: eight loads along k, an 8 x 8 transpose in registers,
 * eight stores of panel rows. */
static void tk_pack_transposed_f32(float *restrict dst, const float *restrict src, int64_t ld,
                                   int64_t depth, int64_t cols, int64_t nr)
{
    int64_t p = 0;
    if (cols == nr && nr % 8 == 0) {
        for (; p + 8 <= depth; p += 8) {
            for (int64_t j = 0; j < nr; j += 8) {
                const float *s = src + j * ld + p;
                __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ld);
                __m256 r2 = _mm256_loadu_ps(s + 2 * ld), r3 = _mm256_loadu_ps(s + 3 * ld);
                __m256 r4 = _mm256_loadu_ps(s + 4 * ld), r5 = _mm256_loadu_ps(s + 5 * ld);
                __m256 r6 = _mm256_loadu_ps(s + 6 * ld), r7 = _mm256_loadu_ps(s + 7 * ld);
                __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
                __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
                __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
                __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
                __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
                __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
                __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
                __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
                float *d = dst + p * nr + j;
                _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
                _mm256_storeu_ps(d + nr, _mm256_permute2f128_ps(u1, u5, 0x20));
                _mm256_storeu_ps(d + 2 * nr, _mm256_permute2f128_ps(u2, u6, 0x20));
                _mm256_storeu_ps(d + 3 * nr, _mm256_permute2f128_ps(u3, u7, 0x20));
                _mm256_storeu_ps(d + 4 * nr, _mm256_permute2f128_ps(u0, u4, 0x31));
                _mm256_storeu_ps(d + 5 * nr, _mm256_permute2f128_ps(u1, u5, 0x31));
                _mm256_storeu_ps(d + 6 * nr, _mm256_permute2f128_ps(u2, u6, 0x31));
                _mm256_storeu_ps(d + 7 * nr, _mm256_permute2f128_ps(u3, u7, 0x31));
            }
        }
    }
    for (; p < depth; p++) {
        for (int64_t j = 0; j < nr; j++) {
            dst[p * nr + j] = j < cols ? src[j * ld + p] : 0.0f;
        }
    }
}
"""


def transposed_stride(b_value: IndexFn, probe: E.Var) -> int | None:
    """ld when B's element (k, col) is a float32 load at base + col * ld + k (ld a constant), else None."""
    if not b_reads_columns(b_value, probe):
        return None
    col = E.Var(probe.name + "_col")
    here, right = b_value(E.const(0), probe, col), b_value(E.const(0), probe, col + 1)
    if not (isinstance(here, E.Load) and isinstance(right, E.Load)) or here.buffer.dtype != "float32":
        return None
    step = simplify(right.index - here.index)
    return int(step.value) if isinstance(step, E.Const) and int(step.value) > 0 else None


def transposed_pack(bpack: Buffer, b_value: IndexFn, bi: E.Expr, k0: E.Expr, depth: E.Expr, col0: E.Expr,
                    n: int | E.Expr, panels: E.Expr, jp: E.Var, kc_max: int, nr: int, dtype: str,
                    probe: E.Var) -> Stmt | None:
    """The pack of `panels` micro-panels of NR columns from col0 (panel jp at col0 + jp * NR) over
    `depth` steps from k0, by the helper; None where it does not apply (the caller packs in loop IR)."""
    target = cpu_target()
    if dtype != "float32" or not target.fma256 or target.vector_bytes < 32 or nr % 8:
        return None
    ld = transposed_stride(b_value, probe)
    if ld is None:
        return None
    first = col0 + jp * nr
    source = b_value(bi, k0, E.minimum(first, n - 1))  # a panel wholly past N reads nothing: any valid address
    cols = E.maximum(E.minimum(n - first, E.const(nr)), E.const(0))
    call = NativeCall(PACK_FUNCTION, (Pointer(bpack, jp * (kc_max * nr)), Pointer(source.buffer, source.index),
                                      E.const(ld), depth, cols, E.const(nr)),
                      writes=(bpack.name,), source="#include <immintrin.h>\n" + _SOURCE)
    return For(jp, panels, call)


__all__ = ["PACK_FUNCTION", "transposed_pack", "transposed_stride"]
