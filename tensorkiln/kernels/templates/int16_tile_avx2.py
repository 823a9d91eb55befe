"""The AVX2 register tile of exact 16 x 16-bit products that Winograd's 8-bit convolutions sum on.

`tk_i16_tile_avx2` sums up to 6 rows x 16 columns of int32 in 12 ymm registers: per pair of depths,
two 32-byte loads of the panel (16 columns x 2 depths of int16) and, per row, one broadcast of the
row's two int16 and two `vpmaddwd` (winograd_u8s8.py). Operands widened to int16 ahead of time are
no faster per multiply-add than the u8 x s8 tile that widens bytes at every step (int8_avx2.py: about
the same operations per multiply-add; measured 0.95x on a 32 x 768 x 512 GEMM task): Winograd gains
by doing 2.25x fewer multiplies, not cheaper ones.
"""
from __future__ import annotations

TILE_ROWS = 6  # rows of the tile (the C switches on 1..6): 12 accumulators, 2 panel vectors, a broadcast

# included by every helper that uses it; the guard keeps one definition in a module of several
INT16_TILE = r"""#include <immintrin.h>
#ifndef TK_I16_TILE_AVX2
#define TK_I16_TILE_AVX2
typedef int32_t tk_i16_pair __attribute__((may_alias, aligned(1)));

/* mr rows (of v, ldv int16 apart) x 16 columns: m[i * ldm + j] (+)= the sum over the pairs of depths of
 * v[i][2k, 2k + 1] . u[k][j][0, 1] (vpmaddwd: two exact 16 x 16-bit products into each 32-bit lane);
 * u holds 32 int16 a pair (16 columns x 2 depths) */
static inline __attribute__((always_inline)) void tk_i16_tile_avx2(
    const int mr, const int16_t *restrict v, int64_t ldv, const int16_t *restrict u, int64_t pairs,
    int32_t *restrict m, int64_t ldm)
{
    __m256i acc0[6], acc1[6];
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++) {
        acc0[i] = _mm256_setzero_si256();
        acc1[i] = _mm256_setzero_si256();
    }
    for (int64_t k = 0; k < pairs; k++, u += 32) {
        /* the panel 4 KiB ahead: a Winograd layer with few tiles (7 x 7 planes) streams its 16-bit panels
         * from memory, reading each only for a few tiles (measured 15% faster there, the same elsewhere) */
        _mm_prefetch((const char *)(u + 2048), _MM_HINT_T0);
        const __m256i b0 = _mm256_loadu_si256((const __m256i *)u);
        const __m256i b1 = _mm256_loadu_si256((const __m256i *)(u + 16));
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++) {
            const __m256i a = _mm256_set1_epi32(*(const tk_i16_pair *)(v + i * ldv + 2 * k));
            acc0[i] = _mm256_add_epi32(acc0[i], _mm256_madd_epi16(a, b0));
            acc1[i] = _mm256_add_epi32(acc1[i], _mm256_madd_epi16(a, b1));
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++) {
        _mm256_storeu_si256((__m256i *)(m + i * ldm), acc0[i]);
        _mm256_storeu_si256((__m256i *)(m + i * ldm + 8), acc1[i]);
    }
}

/* the tile at every height up to 6, each with constant bounds (its sums in registers) */
static inline __attribute__((always_inline)) void tk_i16_tiles_avx2(
    const int mr, const int16_t *restrict v, int64_t ldv, const int16_t *restrict u, int64_t pairs,
    int32_t *restrict m, int64_t ldm)
{
    switch (mr) {
    case 6: tk_i16_tile_avx2(6, v, ldv, u, pairs, m, ldm); break;
    case 5: tk_i16_tile_avx2(5, v, ldv, u, pairs, m, ldm); break;
    case 4: tk_i16_tile_avx2(4, v, ldv, u, pairs, m, ldm); break;
    case 3: tk_i16_tile_avx2(3, v, ldv, u, pairs, m, ldm); break;
    case 2: tk_i16_tile_avx2(2, v, ldv, u, pairs, m, ldm); break;
    default: tk_i16_tile_avx2(1, v, ldv, u, pairs, m, ldm); break;
    }
}
#endif
"""
