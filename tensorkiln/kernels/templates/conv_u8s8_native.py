"""The C helpers of the direct 8-bit convolutions (conv_u8s8.py): register tiles of int32 sums.

Each helper fills a tile c[pixel * ldc + channel] of int32 sums for a run of
consecutive output pixels of one image (row-major over (OH, OW), so a run
may cross output rows) and a block of output channels; the loop-IR template
then applies the fused epilogue to the tile. The input x is one image of
the padded uint8 NHWC activation, so the window of output pixel (i, j) at
tap (r, s) starts at x + ((i*sh + r*dh) * Wp + j*sw + s*dw) * C: no window
is ever copied, and no index is divided inside the sums (one division per
tile finds where its windows start).

Dense (`tk_conv_u8s8_<kind>`): the micro-kernel holds 8 pixels of one output
row (equally spaced windows: one base pointer, as a GEMM's rows) x 32 output
channels in 16 zmm accumulators; a step loads one 128-byte group of a panel
(32 channels x 4 input channels, ir/ops/quantized.py) and, per pixel,
broadcasts its four input bytes (four consecutive channels of NHWC):
`vpdpbusd` (vnni), or bytes widened to 16 bits and `vpmaddwd` (avx512bw,
exact where `vpmaddubsw` would saturate), or plain C (portable).

Depthwise (`tk_depthwise_u8s8_<kind>`, the portable helper; the vector forms are the straight-line
tiles of depthwise_u8s8_tiles.py): each channel is its own sum, so the lanes are channels; here per
tap and pixel the window's bytes are read again.

The `avx2` helpers (256-bit vectors, no AVX-512), and the `maddubsw` tile an AVX2 target uses for a
layer whose weights `vpmaddubsw` sums exactly, are in int8_avx2.py.
"""
from __future__ import annotations

from .int8_avx2 import AVX2, MADDUBSW, QUARTER_ROWS, SPLIT, SPLIT_GROUP_BYTES, SPLIT_ROWS, conv_tile_avx2, \
    split_rows_source

_DENSE_TILE = {
    "vnni": r"""
            const __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 64);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) {
                const __m512i av = _mm512_set1_epi32(*(const tk_conv_i32 *)(a + i * lda));
                acc0[i] = _mm512_dpbusd_epi32(acc0[i], av, b0);
                acc1[i] = _mm512_dpbusd_epi32(acc1[i], av, b1);
            }""",
    "avx512bw": r"""
            /* B's bytes sign-extended to 16 bits: even bytes (depths 0, 2 of a lane), odd ones (1, 3) */
            const __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 64);
            const __m512i b0e = _mm512_srai_epi16(_mm512_slli_epi16(b0, 8), 8), b0o = _mm512_srai_epi16(b0, 8);
            const __m512i b1e = _mm512_srai_epi16(_mm512_slli_epi16(b1, 8), 8), b1o = _mm512_srai_epi16(b1, 8);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) {
                const uint32_t word = (uint32_t)*(const tk_conv_i32 *)(a + i * lda);
                const __m512i ae = _mm512_set1_epi32((int32_t)(word & 0x00ff00ffu));
                const __m512i ao = _mm512_set1_epi32((int32_t)((word >> 8) & 0x00ff00ffu));
                acc0[i] = _mm512_add_epi32(acc0[i], _mm512_add_epi32(_mm512_madd_epi16(ae, b0e),
                                                                     _mm512_madd_epi16(ao, b0o)));
                acc1[i] = _mm512_add_epi32(acc1[i], _mm512_add_epi32(_mm512_madd_epi16(ae, b1e),
                                                                     _mm512_madd_epi16(ao, b1o)));
            }""",
}

_DENSE_VECTOR = r"""#include <immintrin.h>
typedef int32_t tk_conv_i32 __attribute__((may_alias, aligned(1)));
/* mr output pixels of one output row (their windows start at x + i * lda) x 32 output channels of
 * panel b, over every tap */
static inline __attribute__((always_inline)) void tk_conv_u8s8_tile_{kind}(
    const int mr, const int cols, const uint8_t *restrict x, int64_t lda, const int8_t *restrict b,
    int32_t *restrict c, int64_t ldc, int64_t kh, int64_t kw, int64_t row_step, int64_t col_step, int64_t groups)
{{
    (void)cols;  /* both 512-bit halves of the panel in one step: an unused half costs no extra step */
    __m512i acc0[8], acc1[8];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {{
        acc0[i] = _mm512_setzero_si512();
        acc1[i] = _mm512_setzero_si512();
    }}
    /* one loop over the depth (taps x groups of 4 channels), so the sums stay in registers throughout;
     * a points at pixel 0's four bytes of this step, moved on incrementally (no division) */
    const uint8_t *a = x;
    int64_t q = 0, s = 0, r = 0;
    for (int64_t k = 0; k < kh * kw * groups; k++, b += 128) {{{loop}
        a += 4;
        if (++q == groups) {{  /* the next tap: (r, s + 1), or (r + 1, 0) */
            q = 0;
            if (++s == kw) {{
                s = 0;
                r++;
            }}
            a = x + r * row_step + s * col_step;
        }}
    }}
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {{
        _mm512_storeu_si512(c + i * ldc, acc0[i]);
        _mm512_storeu_si512(c + i * ldc + 16, acc1[i]);
    }}
}}
"""

_DENSE_PORTABLE = r"""static inline void tk_conv_u8s8_tile_portable(
    const int mr, const int cols, const uint8_t *restrict x, int64_t lda, const int8_t *restrict b,
    int32_t *restrict c, int64_t ldc, int64_t kh, int64_t kw, int64_t row_step, int64_t col_step, int64_t groups)
{
    for (int i = 0; i < mr; i++) {
        int32_t acc[32] = {0};
        const int8_t *bq = b;
        for (int64_t r = 0; r < kh; r++) {
            for (int64_t s = 0; s < kw; s++) {
                const uint8_t *a = x + i * lda + r * row_step + s * col_step;
                for (int64_t q = 0; q < groups; q++, bq += 128) {
                    for (int j = 0; j < 32; j++) {
                        for (int t = 0; t < 4; t++) {
                            acc[j] += (int32_t)a[4 * q + t] * (int32_t)bq[4 * j + t];
                        }
                    }
                }
            }
        }
        for (int j = 0; j < cols; j++) {  /* the panel's columns past the layer's are never read */
            c[i * ldc + j] = acc[j];
        }
    }
}
"""

_DENSE_DRIVER = r"""/* ---- direct u8 x s8 convolution ({kind}): c[t * ldc + j] = the sum of output pixel p0 + t (row-major
 * over an OH x OW image) and channel j, for t < pixels, j < cols (the channels of ceil(cols / 32) panels;
 * the last panel's columns past cols may be left unwritten); x is one padded NHWC image (Wp pixels a
 * row, c4 bytes a pixel). A tile stays within an output row, so its pixels' windows are equally spaced
 * (sw * c4 bytes). noipa: never specialized to one call's constants, with which GCC 12 schedules the
 * tile's loads early and keeps several of its sums on the stack. */
static __attribute__((noipa)) void tk_conv_u8s8_{kind}(
    const uint8_t *restrict x, const int8_t *restrict panels, int32_t *restrict c, int64_t ldc, int64_t p0,
    int64_t pixels, int64_t cols, int64_t ow, int64_t wp, int64_t c4, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
    int64_t kh, int64_t kw{params})
{{
    /* with dilation 1 the taps of a kernel row are consecutive pixels, so their bytes are one run: the
     * tile sums it as one tap of kw * c4 channels (the panels' depth order is the same), moving to
     * another tap kh times instead of kh * kw (the stem's 7 x 7 taps of 4 channels: every step) */
    const int64_t taps = dw == 1 ? 1 : kw, groups = (kw / taps) * c4 / 4, depth = kh * taps * groups;
{image}
    const int64_t lda = sw * c4 * {scale}, row_step = dh * wp * c4 * {scale}, col_step = dw * c4 * {scale};
    const int64_t npanels = (cols + 31) / 32;
    for (int64_t p = 0; p < npanels; p++) {{  /* one panel of the filters stays in cache while the pixels pass */
        const int8_t *b = panels + p * depth * 128;
        const int nc = (int)(cols - p * 32 < 32 ? cols - p * 32 : 32);  /* the panel's columns in use */
        for (int64_t t = 0; t < pixels;) {{
            const int64_t oy = (p0 + t) / ow, ox = (p0 + t) % ow;
            const int64_t left = ow - ox < pixels - t ? ow - ox : pixels - t;  /* pixels left in this row */
            /* the row's pixels in tiles of equal height, at most {rows} (28: 7 + 7 + 7 + 7, not 8 + 8 + 8 + 4; 4 x 7
             * where a tile is done as quarters of 4 rows): a short tile does a step's loads and bookkeeping
             * for fewer sums. The first `taller` tiles take one pixel more. Divided once per row, not per
             * tile: a 1x1 layer of 16 channels sums a tile in about as many cycles as three divisions take. */
            const int64_t row_tiles = (left + {rows} - 1) / {rows}, height = left / row_tiles, taller = left % row_tiles;
            const uint8_t *a = xs + ((oy * sh - first_row) * wp + ox * sw) * c4 * {scale};
            int32_t *ct = c + t * ldc + p * 32;
            for (int64_t q = 0; q < row_tiles; q++) {{
                const int mr = (int)(height + (q < taller));
                /* a tile of constant height each, so its sums stay in registers */
                {direct_switch}
                a += mr * lda;
                ct += mr * ldc;
            }}
            t += left;
        }}
    }}
}}
"""

# one copy of a run of bytes, shared by every kind's gathered driver (a module may hold two kinds: avx2 and
# maddubsw), hence the guard
_COPY_RUN = r"""#include <string.h>
#ifndef TK_CONV_U8S8_COPY_RUN
#define TK_CONV_U8S8_COPY_RUN
static inline void tk_conv_u8s8_copy_run(uint8_t *restrict dst, const uint8_t *restrict src, int64_t n)
{
    /* 16 bytes a copy where the run has them (the stem's 21: two copies), else 8, else bytes; the last copy
     * ends at the run's end, overlapping the one before: never a byte past the run. Constant sizes, so
     * each memcpy is one load and one store. */
    int64_t i = 0;
    if (n >= 16) {
        for (; i + 16 < n; i += 16) {
            memcpy(dst + i, src + i, 16);
        }
        memcpy(dst + n - 16, src + n - 16, 16);
    } else if (n >= 8) {
        memcpy(dst, src, 8);
        memcpy(dst + n - 8, src + n - 8, 8);
    } else {
        for (; i < n; i++) {
            dst[i] = src[i];
        }
    }
}
#endif
"""

_GATHERED_DRIVER = r"""/* ---- the same for a shallow input (C not a multiple of 4: an image's 3 channels): a tile's windows
 * are first copied, a kernel row's run of bytes at a time, into rows of k4 bytes (KH * KW * C rounded up to
 * a multiple of 4, the tail zero), which the tile then reads as a GEMM reads the rows of A. The depth the
 * tile sums is KH * KW * C, where windows read in place would sum KH * KW * 4 * ceil(C / 4) (the stem's
 * 7 x 7 x 3: 148 bytes, not 196). rows: a caller's buffer of 8 * k4 bytes. */
static __attribute__((noipa)) void tk_conv_u8s8_gathered_{kind}(
    const uint8_t *restrict x, const int8_t *restrict panels, int32_t *restrict c, int64_t ldc, int64_t p0,
    int64_t pixels, int64_t cols, int64_t ow, int64_t wp, int64_t cin, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
    int64_t kh, int64_t kw, uint8_t *restrict rows{params})
{{
    const int64_t window = kh * kw * cin, k4 = (window + 3) / 4 * 4, groups = k4 / 4;
    /* with dilation 1 a kernel row's taps are one run of kw * cin bytes */
    const int64_t run = dw == 1 ? kw * cin : cin, runs = dw == 1 ? 1 : kw;
    const int64_t npanels = (cols + 31) / 32;
    memset(rows, 0, (size_t)(8 * k4));  /* the tail past the window meets zero weights: keep it defined */
    for (int64_t t = 0; t < pixels;) {{
        const int64_t oy = (p0 + t) / ow, ox0 = (p0 + t) % ow;
        const int64_t left = ow - ox0 < pixels - t ? ow - ox0 : pixels - t;
        /* tiles of equal height within the row, the first `taller` one pixel more (divided once per row) */
        const int64_t row_tiles = (left + {rows} - 1) / {rows}, height = left / row_tiles, taller = left % row_tiles;
        for (int64_t tile = 0, ox = ox0; tile < row_tiles; tile++) {{
            const int mr = (int)(height + (tile < taller));
            for (int i = 0; i < mr; i++) {{
                const uint8_t *src = x + (oy * sh * wp + (ox + i) * sw) * cin;
                uint8_t *dst = rows + i * k4;
                for (int64_t r = 0; r < kh; r++) {{
                    for (int64_t q = 0; q < runs; q++) {{
                        tk_conv_u8s8_copy_run(dst + (r * kw + q) * cin, src + (r * dh * wp + q * dw) * cin, run);
                    }}
                }}
            }}
{gathered_rows}
            /* every panel over the gathered rows (a shallow layer's panels are small: they stay in L1) */
            for (int64_t p = 0; p < npanels; p++) {{
                const int8_t *b = panels + p * groups * 128;
                const int nc = (int)(cols - p * 32 < 32 ? cols - p * 32 : 32);
                int32_t *ct = c + (t + ox - ox0) * ldc + p * 32;
                {gathered_switch}
            }}
            ox += mr;
        }}
        t += left;
    }}
}}
"""

def _tile_switch(kind: str, operands: str) -> str:
    """C calling the tile at its constant height mr (1 to 8; the AVX2 drivers use 1 to 4), so that each
    call's sums stay in registers; `operands`: the tile's arguments after its height and columns."""
    cases = [f"{'case ' + str(h) if h > 1 else 'default'}: tk_conv_u8s8_tile_{kind}({h}, nc, {operands}); break;"
             for h in range(8, 0, -1)]
    return "switch (mr) {\n" + "".join(f"                {case}\n" for case in cases) + "                }"


_DEPTHWISE_PORTABLE = r"""static void tk_depthwise_u8s8_portable(
    const uint8_t *restrict x, const int32_t *restrict w, int32_t *restrict c, int64_t ldc, int64_t p0,
    int64_t pixels, int64_t j0, int64_t channels, int64_t ow, int64_t wp, int64_t cin, int64_t sh, int64_t sw,
    int64_t dh, int64_t dw, int64_t kh, int64_t kw)
{
    for (int64_t t = 0; t < pixels; t++) {
        const int64_t pixel = p0 + t, oy = pixel / ow, ox = pixel % ow;
        const uint8_t *px = x + (oy * sh * wp + ox * sw) * cin + j0;
        for (int64_t j = 0; j < channels; j++) {
            int32_t acc = 0;
            for (int64_t r = 0; r < kh; r++) {
                for (int64_t s = 0; s < kw; s++) {
                    acc += (int32_t)px[(r * dh * wp + s * dw) * cin + j] * w[(r * kw + s) * cin + j0 + j];
                }
            }
            c[t * ldc + j] = acc;
        }
    }
}
"""


# the windows read where they lie
_IMAGE_IN_PLACE = "    const uint8_t *xs = x;  /* the image the windows are read from */\n    const int64_t first_row = 0;"
# the exact AVX2 step reads its activations split into 16-bit pairs (int8_avx2.split_rows_source): the input
# rows the task's windows touch are split once into `split`, two bytes for each, so every offset doubles
_IMAGE_SPLIT = f"""    /* the input rows under the task's windows, split into 16-bit pairs once (rows are contiguous: one run) */
    const int64_t first_row = (p0 / ow) * sh, last_row = ((p0 + pixels - 1) / ow) * sh + (kh - 1) * dh;
    {SPLIT_ROWS}(x + first_row * wp * c4, 0, 1, (last_row - first_row + 1) * wp * c4 / 4, split);
    const uint8_t *xs = split;"""
_GATHERED_SPLIT = f"""            /* the gathered rows split into 16-bit pairs, as the exact AVX2 step reads them */
            {SPLIT_ROWS}(rows, k4, mr, k4 / 4, split);"""


def split_bytes(pixels: int, ow: int, oh: int, wp: int, cin: int, sh: int, dh: int, kh: int, hp: int) -> int:
    """The split input rows of a direct driver's task of at most `pixels` output pixels: the rows its windows
    touch (a run of pixels spans at most (pixels - 1) // ow + 2 output rows), two bytes for each."""
    out_rows = min(oh, (pixels - 1) // ow + 2)
    return min(hp, (out_rows - 1) * sh + (kh - 1) * dh + 1) * wp * cin * SPLIT_GROUP_BYTES // 4


def dense_source(kind: str) -> str:
    """The C of `tk_conv_u8s8_<kind>` and `tk_conv_u8s8_gathered_<kind>`: their micro-kernel and the loops
    over panels and pixel tiles."""
    avx2 = kind in (AVX2, MADDUBSW, SPLIT)
    tile = _DENSE_PORTABLE if kind == "portable" else conv_tile_avx2(kind) if avx2 else \
        _DENSE_VECTOR.format(kind=kind, loop=_DENSE_TILE[kind])
    # the AVX2 tile sums 4 rows at a time (int8_avx2.py): a row of 28 pixels as 7 tiles of 4, not 4 x (4 + 3)
    rows = QUARTER_ROWS if avx2 else 8
    split = kind == SPLIT  # the drivers take a buffer for the split activations, their last argument
    params = ", uint8_t *restrict split" if split else ""
    # both drivers share the tile: one source, whichever of them a module's layers call
    direct = _DENSE_DRIVER.format(kind=kind, rows=rows, image=_IMAGE_SPLIT if split else _IMAGE_IN_PLACE,
                                  params=params,
                                  scale=2 if split else 1, direct_switch=_tile_switch(
                                      kind, "a, lda, b, ct, ldc, kh, taps, row_step, col_step, groups"))
    gathered = _GATHERED_DRIVER.format(kind=kind, rows=rows, params=params,
                                       gathered_rows=_GATHERED_SPLIT if split else "",
                                       gathered_switch=_tile_switch(
                                           kind, "split, 2 * k4, b, ct, ldc, 1, 1, 0, 0, groups" if split else
                                           "rows, k4, b, ct, ldc, 1, 1, 0, 0, groups"))  # one tap: the gathered row
    return tile + (split_rows_source() if split else "") + direct + _COPY_RUN + gathered


def depthwise_source(kind: str) -> str:
    """The C of `tk_depthwise_u8s8_<kind>` for the portable kind (the vector kinds: depthwise_u8s8_tiles.py)."""
    if kind != "portable":
        raise ValueError(f"the {kind} depthwise helper is built by depthwise_u8s8_tiles.depthwise_tiles")
    return _DEPTHWISE_PORTABLE
