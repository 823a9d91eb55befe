"""The AVX2 micro-kernels of the u8 x s8 GEMM and the direct 8-bit convolutions (`int8_dot == "avx2"`).

For CPUs with 256-bit vectors and no AVX-512 (or a hypervisor that hides it). The helpers have
the signatures and the tile contracts of their AVX-512 siblings (gemm_u8s8.py,
conv_u8s8_native.py), so the drivers and the loop-IR templates around them are the same.

Exactness: `vpmaddubsw` would saturate its 16-bit pair sums (255 * 127 * 2 > 32767), so, as on the
avx512bw path, the panel's int8 bytes are sign-extended to 16 bits (even and odd bytes of each
32-bit lane), the four activation bytes zero-extended the same way, and `vpmaddwd` sums each pair
exactly into 32 bits.

Split activations (`split_avx2`, where `split_pays`: 16 or more depth groups, 64 or more output
channels, 4 or more rows): the GEMM's task splits its rows of A once, a convolution's task the input
rows under its windows (`split_rows_source`): each depth group's four bytes (a0, a1, a2, a3) become the
two words (a0, a2) and (a1, a3) of zero-extended 16-bit halves, so the step broadcasts each word with
one load instead of masking and shifting one broadcast: 8 vector operations fewer per step of 4 rows,
which GCC also schedules with fewer accumulators on the stack (BERT-base's projections 1.10-1.13x in a
C harness, one thread; in the models 1.03-1.12x on such layers). The split doubles the bytes the step
reads; where a tile has few steps or a byte few sums, that costs what it saves.

Registers: 16 ymm. A whole 8 x 32 tile (32 accumulators) does not fit, so the tile is done in
quarters of at most 4 rows x 16 columns: 8 accumulators, the 16 columns' widened weights (4) and
the broadcast activation pairs (2), with GCC keeping a few accumulators on the stack (quarters of
3 or 2 rows, which need no stack, ran slower on a ResNet-18 3x3 layer: the widened weights serve
fewer rows). Each quarter walks the whole depth; the panel step it reads (64 bytes) stays in L1 for
the next quarter.

Depthwise: depthwise_u8s8_tiles.py, whose `avx2` form has 8 channels a vector.
"""
from __future__ import annotations

import numpy as np

from ...ir.graph import Node

AVX2 = "avx2"  # the exact step for any weights: both operands widened to 16 bits, vpmaddwd
MADDUBSW = "maddubsw"  # the step of a layer whose every weight pair passes `maddubsw_is_exact`
SPLIT = "split_avx2"  # the exact step on activations split into 16-bit pairs first (`split_pays`)
# vpmaddubsw's 16-bit pair sums: u8 x s8 products, a0 * w0 + a1 * w1, saturated to [-32768, 32767]
_U8_MAX, _S16_MAX, _S16_MIN = 255, 32767, -32768


def maddubsw_is_exact(panels: np.ndarray) -> bool:
    """Whether `vpmaddubsw` sums every pair of these packed weights exactly, for any uint8 activations.

    A pair is two neighbouring bytes of a column's depth group (ir/ops/quantized.py's panels: depths
    (0, 1) and (2, 3)). With activations a0, a1 in [0, 255], a0 * w0 + a1 * w1 is largest when both
    activations are 255 on the positive weights and smallest when they are 255 on the negative ones, so
    the rule, checked at compile time on the constant weights, is

        255 * (max(w0, 0) + max(w1, 0)) <= 32767  and  255 * (min(w0, 0) + min(w1, 0)) >= -32768,

    which holds for 7-bit weights (|w| <= 64: quantizers' reduce_range) and for any pair of opposite
    signs; one pair past it and the layer keeps the exact widened step."""
    return not saturating_pairs(panels).any()


def saturating_pairs(panels: np.ndarray) -> np.ndarray:
    """Per pair of packed weights (`maddubsw_is_exact`'s pairs, in panel order): whether some uint8
    activations make `vpmaddubsw`'s 16-bit sum of the pair saturate."""
    pairs = panels.reshape(-1, 2).astype(np.int32)
    high = np.maximum(pairs, 0).sum(axis=1)
    low = np.minimum(pairs, 0).sum(axis=1)
    return (_U8_MAX * high > _S16_MAX) | (_U8_MAX * low < _S16_MIN)


def layer_dot_kind(kind: str, panels: Node) -> str:
    """The helper kind of one dense layer on a target whose int8 dot product is `kind`: "maddubsw" where
    the target is AVX2 and the layer's constant panels pass `maddubsw_is_exact`, else `kind`."""
    if kind != AVX2 or panels.op != "constant":
        return kind
    return MADDUBSW if maddubsw_is_exact(panels.attrs["value"].array) else kind

# one quarter of the dense tile: mr <= 4 pixels (rows of A) x 16 columns; `step` sums one depth step
# (_EXACT_STEP or _PAIRS_STEP), `next_a` moves `a` to the next (the GEMM: 4 bytes on; the convolution: the
# next group of 4 channels or the next tap)
_QUARTER = r"""
static inline __attribute__((always_inline)) void {name}(
    const int mr, const uint8_t *restrict x, int64_t lda, const int8_t *restrict b, int32_t *restrict c,
    int64_t ldc{params})
{{
    __m256i acc0[4], acc1[4];  /* mr rows x 16 columns of int32 sums */
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {{
        acc0[i] = _mm256_setzero_si256();
        acc1[i] = _mm256_setzero_si256();
    }}
    {setup}
    for (int64_t k = 0; k < steps; k++, b += 128) {{
{step}        {next_a}
    }}
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {{
        _mm256_storeu_si256((__m256i *)(c + i * ldc), acc0[i]);
        _mm256_storeu_si256((__m256i *)(c + i * ldc + 8), acc1[i]);
    }}
}}
"""

# the exact step: both operands widened to 16 bits, vpmaddwd; `{activations}` puts row i's even pairs (a0, a2)
# in `ae` and odd pairs (a1, a3) in `ao`, every lane
_WIDENED_STEP = r"""        /* 16 columns x 4 depths: bytes sign-extended to 16 bits, even (depths 0, 2) and odd (1, 3) */
        const __m256i b0 = _mm256_loadu_si256((const __m256i *)b), b1 = _mm256_loadu_si256((const __m256i *)(b + 32));
        const __m256i b0e = _mm256_srai_epi16(_mm256_slli_epi16(b0, 8), 8), b0o = _mm256_srai_epi16(b0, 8);
        const __m256i b1e = _mm256_srai_epi16(_mm256_slli_epi16(b1, 8), 8), b1o = _mm256_srai_epi16(b1, 8);
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
{activations}
            acc0[i] = _mm256_add_epi32(acc0[i], _mm256_madd_epi16(ae, b0e));
            acc0[i] = _mm256_add_epi32(acc0[i], _mm256_madd_epi16(ao, b0o));
            acc1[i] = _mm256_add_epi32(acc1[i], _mm256_madd_epi16(ae, b1e));
            acc1[i] = _mm256_add_epi32(acc1[i], _mm256_madd_epi16(ao, b1o));
        }
"""
# the activations' bytes as they lie: one broadcast, split into even and odd bytes in the vector
_EXACT_STEP = _WIDENED_STEP.replace("{activations}", r"""            /* row i's four bytes in every lane (one broadcast load), zero-extended to 16 bits the same way,
             * then vpmaddwd: exact 32-bit pair sums (a broadcast load and two vector operations where
             * scalar masks and two broadcasts from general registers took nine instructions) */
            const __m256i word = _mm256_set1_epi32(*(const tk_avx2_i32 *)(a + i * lda));
            const __m256i ae = _mm256_and_si256(word, _mm256_set1_epi32(0x00ff00ff));
            const __m256i ao = _mm256_srli_epi16(word, 8);""")
# the activations split by `split_rows_source`: row i's even and odd pairs are two words, two broadcast loads
_SPLIT_STEP = _WIDENED_STEP.replace("{activations}", r"""            const __m256i ae = _mm256_set1_epi32(*(const tk_avx2_i32 *)(a + i * lda));
            const __m256i ao = _mm256_set1_epi32(*(const tk_avx2_i32 *)(a + i * lda + 4));""")

# the same step where every pair of weights passes `maddubsw_is_exact`: vpmaddubsw multiplies the broadcast
# bytes (unsigned) by the panel's bytes (signed) and adds each pair into 16 bits without saturating, and
# vpmaddwd by ones adds the two pairs of each lane into 32 bits: no widening of either operand
_PAIRS_STEP = r"""        const __m256i b0 = _mm256_loadu_si256((const __m256i *)b);
        const __m256i b1 = _mm256_loadu_si256((const __m256i *)(b + 32));
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const __m256i word = _mm256_set1_epi32(*(const tk_avx2_i32 *)(a + i * lda));
            acc0[i] = _mm256_add_epi32(acc0[i], _mm256_madd_epi16(_mm256_maddubs_epi16(word, b0), ones));
            acc1[i] = _mm256_add_epi32(acc1[i], _mm256_madd_epi16(_mm256_maddubs_epi16(word, b1), ones));
        }
"""

# the tile of mr <= 8 rows x one 32-column panel, as quarters: columns 0..15 then 16..31, rows 0..3 then 4..7; a
# panel whose columns past 16 are past the layer's (a layer of 16 channels, 144 = 4 x 32 + 16) skips its
# second half, which the caller never reads
_TILE = r"""
static inline __attribute__((always_inline)) void {name}(
    const int mr, const int cols, const uint8_t *restrict x, int64_t lda, const int8_t *restrict b,
    int32_t *restrict c, int64_t ldc{params})
{{
    const int halves = cols > 16 ? 2 : 1;
#pragma GCC unroll 2
    for (int h = 0; h < halves; h++) {{
        {quarter}(mr < 4 ? mr : 4, x, lda, b + 64 * h, c + 16 * h, ldc{args});
        if (mr > 4) {{
            {quarter}(mr - 4, x + 4 * lda, lda, b + 64 * h, c + 4 * ldc + 16 * h, ldc{args});
        }}
    }}
}}
"""

QUARTER_ROWS = 4  # rows of A a quarter sums: 8 accumulators, 4 widened weights, 2 activation vectors, a mask

_PRELUDE = r"""#include <immintrin.h>
typedef int32_t tk_avx2_i32 __attribute__((may_alias, aligned(1)));
"""

_GEMM_SETUP = "const int64_t steps = depth;\n    const uint8_t *a = x;"
_GEMM_NEXT = "a += GROUP;"  # GROUP: the bytes of a depth group in `kind`'s activations (_GROUP_BYTES)
_CONV_SETUP = ("const int64_t steps = kh * kw * groups;\n"
               "    /* a points at pixel 0's four bytes of this step, moved on incrementally (no division) */\n"
               "    const uint8_t *a = x;\n"
               "    int64_t q = 0, s = 0, r = 0;")
_CONV_NEXT = """a += GROUP;
        if (++q == groups) {  /* the next tap: (r, s + 1), or (r + 1, 0) */
            q = 0;
            if (++s == kw) {
                s = 0;
                r++;
            }
            a = x + r * row_step + s * col_step;
        }"""
_CONV_PARAMS = ", int64_t kh, int64_t kw, int64_t row_step, int64_t col_step, int64_t groups"
_CONV_ARGS = ", kh, kw, row_step, col_step, groups"


_STEPS = {AVX2: _EXACT_STEP, MADDUBSW: _PAIRS_STEP, SPLIT: _SPLIT_STEP}
_STEP_SETUP = {AVX2: "", MADDUBSW: "\n    const __m256i ones = _mm256_set1_epi16(1);", SPLIT: ""}
SPLIT_GROUP_BYTES = 8  # a depth group's two words in split rows (split_rows_source)
_GROUP_BYTES = {AVX2: 4, MADDUBSW: 4, SPLIT: SPLIT_GROUP_BYTES}  # how far `a` moves per depth group
# where the split pays (`split_pays`): measured per layer on MobileNetV2, ResNet-18 and BERT-base (one thread,
# in turns): 1.03-1.12x with 64 or more output channels and 16 or more depth groups; level or slower below
# (16 -> 96, 24 -> 144, 144 -> 24: a tile's few steps, or few sums per byte split), and for a GEMM of one row
# (ResNet-18's classifier, 0.87x: a one-row tile's step is the panel's widening, which the split leaves)
SPLIT_MIN_GROUPS = 16
SPLIT_MIN_COLUMNS = 64
SPLIT_MIN_ROWS = QUARTER_ROWS


def split_pays(depth_groups: int, columns: int, rows: int) -> bool:
    """Whether the exact AVX2 layer of `depth_groups` groups of 4 bytes, `columns` output channels and `rows`
    rows of A (output pixels) sums faster on activations split into 16-bit pairs first (SPLIT) than widening
    them at every step (AVX2)."""
    return depth_groups >= SPLIT_MIN_GROUPS and columns >= SPLIT_MIN_COLUMNS and rows >= SPLIT_MIN_ROWS


def _tile(kind: str, prefix: str, params: str, setup: str, next_a: str, args: str) -> str:
    """The C of `{prefix}_tile_{kind}` and its quarter, summing with `kind`'s step."""
    quarter = f"{prefix}_quarter_{kind}"
    body = _QUARTER.format(name=quarter, params=params, setup=setup + _STEP_SETUP[kind], step=_STEPS[kind],
                           next_a=next_a.replace("GROUP", str(_GROUP_BYTES[kind])))
    return _PRELUDE + body + _TILE.format(name=f"{prefix}_tile_{kind}", params=params, quarter=quarter, args=args)


def gemm_tile_avx2(kind: str = AVX2) -> str:
    """The C of `tk_u8s8_tile_<kind>(mr, cols, a, lda, b, c, ldc, depth)`: gemm_u8s8.py's tile contract; `kind` is
    "avx2" (exact for any weights), "split_avx2" (the same on A's rows split by `split_rows_source`, lda their
    stride) or "maddubsw" (for panels that pass `maddubsw_is_exact`)."""
    return _tile(kind, "tk_u8s8", ", int64_t depth", _GEMM_SETUP, _GEMM_NEXT, ", depth")


SPLIT_ROWS = "tk_u8s8_split_rows_avx2"


def split_rows_source() -> str:
    """The C of `tk_u8s8_split_rows_avx2(a, lda, rows, depth, split)`: each row's depth groups of four bytes
    (a0, a1, a2, a3) as the words (a0, a2) and (a1, a3) of 16-bit halves, SPLIT_GROUP_BYTES a group, rows
    depth * SPLIT_GROUP_BYTES apart: what the exact GEMM step (`_SPLIT_STEP`) broadcasts."""
    return r"""#include <immintrin.h>
#include <string.h>
#ifndef TK_U8S8_SPLIT_ROWS
#define TK_U8S8_SPLIT_ROWS  /* one definition for a module's GEMMs and convolutions, whose helpers both carry it */
/* rows of u8 activations for the exact AVX2 step: per group of four bytes (a0, a1, a2, a3), the word of
 * (a0, a2) and the word of (a1, a3), zero-extended to 16 bits each; eight groups a vector */
static void tk_u8s8_split_rows_avx2(const uint8_t *restrict a, int64_t lda, int64_t rows, int64_t depth,
                                    uint8_t *restrict split)
{
    const __m256i low_bytes = _mm256_set1_epi32(0x00ff00ff);
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *src = a + r * lda;
        uint8_t *dst = split + r * depth * 8;
        int64_t q = 0;
        for (; q + 8 <= depth; q += 8) {
            const __m256i bytes = _mm256_loadu_si256((const __m256i *)(src + 4 * q));
            const __m256i even = _mm256_and_si256(bytes, low_bytes), odd = _mm256_srli_epi16(bytes, 8);
            /* (even, odd) word pairs in group order: unpack within each 128-bit half, then put the halves in order */
            const __m256i first = _mm256_unpacklo_epi32(even, odd), second = _mm256_unpackhi_epi32(even, odd);
            _mm256_storeu_si256((__m256i *)(dst + 8 * q), _mm256_permute2x128_si256(first, second, 0x20));
            _mm256_storeu_si256((__m256i *)(dst + 8 * q + 32), _mm256_permute2x128_si256(first, second, 0x31));
        }
        for (; q < depth; q++) {
            uint32_t word;
            memcpy(&word, src + 4 * q, 4);
            const uint32_t even = word & 0x00ff00ffu, odd = (word >> 8) & 0x00ff00ffu;
            memcpy(dst + 8 * q, &even, 4);
            memcpy(dst + 8 * q + 4, &odd, 4);
        }
    }
}
#endif
"""


def conv_tile_avx2(kind: str = AVX2) -> str:
    """The C of `tk_conv_u8s8_tile_<kind>(mr, cols, x, lda, b, c, ldc, kh, kw, row_step, col_step, groups)`:
    conv_u8s8_native.py's dense tile contract (mr pixels of one output row, windows lda bytes apart); for
    "split_avx2" the activations are split by `split_rows_source` (every offset doubled)."""
    return _tile(kind, "tk_conv_u8s8", _CONV_PARAMS, _CONV_SETUP, _CONV_NEXT, _CONV_ARGS)


__all__ = ["AVX2", "MADDUBSW", "QUARTER_ROWS", "SPLIT", "SPLIT_GROUP_BYTES", "SPLIT_ROWS", "split_pays",
           "split_rows_source", "conv_tile_avx2", "gemm_tile_avx2", "layer_dot_kind",
           "maddubsw_is_exact", "saturating_pairs"]
