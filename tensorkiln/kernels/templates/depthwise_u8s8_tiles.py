"""Depthwise u8 x s8 helpers built of straight-line tiles: each input column widened once per kernel row.

A tile is `mr` consecutive output pixels of one row x one vector of channels. Per kernel row, every
input column the tile's windows touch is loaded and widened once and multiplied into every pixel
whose window holds it (stride 1, 3x3, 6 pixels: 8 columns where the windows hold 18). Kernel rows go
in pairs: a column's bytes of row r and of row r + 1 are interleaved and widened to 16 bits, so each
32-bit lane holds one channel's two inputs, and one `vpmaddwd` (or VNNI's `vpdpwssd`) by the two rows'
weights, interleaved the same way, adds both products per lane, exactly (u8 x s8 in 16 bits); an odd
last row's bytes are widened to 32 bits and multiplied alone. The stride, dilation and kernel width are
constants of the C (one helper per layer geometry), so the tiles are straight-line code.

Two vector forms: `avx2` (8 channels a vector) and the 512-bit ones, `vnni` and `avx512bw` (16 channels
a vector; they differ in the multiply-add). The generic helper of conv_u8s8_native.py, which widens every
window's bytes again for every pixel, is what a portable build uses.
"""
from __future__ import annotations

from dataclasses import dataclass

DEPTHWISE_TILE = 6  # output pixels of one row sharing each input column: 6 accumulators, kw weights, one input
# with 32 vector registers: 8 accumulators; MobileNetV2's int8 depthwise layers 2-3% faster than with 6
# (`python benchmarks/int8_layer_profile.py mobilenetv2 --threads 2`, Zen 4, two runs each: 0.543-0.555 ms
# against 0.558-0.570)
DEPTHWISE_TILE_512 = 8


@dataclass(frozen=True)
class DepthwiseIsa:
    """The intrinsics of one vector form, as C text (`{u}`: the column, `{s}`: the tap, `{i}`: the pixel)."""

    lanes: int  # channels a vector (int32 lanes)
    tile: int  # output pixels a tile at most
    vector: str
    zero: str
    weights: str  # the tap's int32 weights of the vector's channels
    pair: str  # row r's weights (A) low and row r + 1's (B) high in each lane's 16-bit halves
    single: str  # a column's bytes of one row widened to int32
    paired: str  # a column's bytes of two rows, interleaved and widened to int16
    update: str  # acc{i} += the lane's products of xv by the weights {w}
    store: str
    helpers: str = ""


AVX2_TILES = DepthwiseIsa(
    lanes=8, tile=DEPTHWISE_TILE, vector="__m256i", zero="_mm256_setzero_si256()",
    weights="_mm256_loadu_si256((const __m256i *)(w + {s} * cin))",
    pair="_mm256_blend_epi16({a}, _mm256_slli_epi32({b}, 16), 0xaa)",
    single="_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(x + {u} * cin)))",
    paired="_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(x + {u} * cin)), "
           "_mm_loadl_epi64((const __m128i *)(x + row_step + {u} * cin))))",
    update="acc{i} = _mm256_add_epi32(acc{i}, _mm256_madd_epi16(xv, {w}));",
    store="_mm256_storeu_si256((__m256i *)(c + {i} * ldc), acc{i});")

_PAIRS_512 = r"""
#ifndef TK_DEPTHWISE_U8_PAIRS_512  /* one definition for every layer geometry's helper */
#define TK_DEPTHWISE_U8_PAIRS_512
/* 16 channels' bytes of two kernel rows, interleaved (row r's low) and widened to 16 bits: one lane a channel */
static inline __attribute__((always_inline)) __m512i tk_depthwise_u8_pairs_512(const uint8_t *x, int64_t row_step)
{
    const __m128i a = _mm_loadu_si128((const __m128i *)x), b = _mm_loadu_si128((const __m128i *)(x + row_step));
    return _mm512_cvtepu8_epi16(_mm256_set_m128i(_mm_unpackhi_epi8(a, b), _mm_unpacklo_epi8(a, b)));
}
#endif
"""


def _isa_512(update: str) -> DepthwiseIsa:
    return DepthwiseIsa(
        lanes=16, tile=DEPTHWISE_TILE_512, vector="__m512i", zero="_mm512_setzero_si512()",
        weights="_mm512_loadu_si512((const void *)(w + {s} * cin))",
        pair="_mm512_mask_blend_epi16(0xaaaaaaaau, {a}, _mm512_slli_epi32({b}, 16))",
        single="_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(x + {u} * cin)))",
        paired="tk_depthwise_u8_pairs_512(x + {u} * cin, row_step)",
        update=update, store="_mm512_storeu_si512((void *)(c + {i} * ldc), acc{i});", helpers=_PAIRS_512)


TILE_ISAS = {
    "avx2": AVX2_TILES,
    "vnni": _isa_512("acc{i} = _mm512_dpwssd_epi32(acc{i}, xv, {w});"),
    "avx512bw": _isa_512("acc{i} = _mm512_add_epi32(acc{i}, _mm512_madd_epi16(xv, {w}));"),
}


def _columns(isa: DepthwiseIsa, mr: int, kw: int, sw: int, dw: int, load: str, weight: str) -> str:
    """Straight-line C over the input columns a tile's windows touch in one kernel row (or pair of rows):
    each column loaded and widened once (`load`, a C expression of the column's offset `{u} * cin`) and
    multiplied into every pixel whose window holds it, by that tap's weights (`weight`: w or p, and the tap)."""
    lines = []
    for u in range((mr - 1) * sw + (kw - 1) * dw + 1):
        users = [(i, (u - i * sw) // dw) for i in range(mr)
                 if u >= i * sw and (u - i * sw) % dw == 0 and (u - i * sw) // dw < kw]
        if not users:
            continue
        sums = " ".join(isa.update.format(i=i, w=f"{weight}{s}") for i, s in users)
        lines.append(f"{{ const {isa.vector} xv = {load.format(u=u)}; {sums} }}")
    return "\n        ".join(lines)


def _tile(isa: DepthwiseIsa, name: str, mr: int, kw: int, sw: int, dw: int) -> str:
    """The tile of `mr` consecutive output pixels of one row x one vector of channels (module docstring)."""
    zero = " ".join(f"{isa.vector} acc{i} = {isa.zero};" for i in range(mr))
    weights = "\n        ".join(f"const {isa.vector} w{s} = {isa.weights.format(s=s)};" for s in range(kw))
    # a weight is an int8 widened to int32: its low 16 bits are the int16, so row r's go low, row r + 1's high
    pairs = "\n        ".join(
        f"const {isa.vector} p{s} = "
        f"{isa.pair.format(a=isa.weights.format(s=s), b=isa.weights.format(s=f'({kw} + {s})'))};"
        for s in range(kw))
    single = _columns(isa, mr, kw, sw, dw, isa.single, "w")
    paired = _columns(isa, mr, kw, sw, dw, isa.paired, "p")
    stores = "\n    ".join(isa.store.format(i=i) for i in range(mr))
    return f"""
static inline __attribute__((always_inline)) void {name}_{mr}(
    const uint8_t *restrict x, const int32_t *restrict w, int32_t *restrict c, int64_t ldc, int64_t kh,
    int64_t row_step, int64_t cin)
{{
    {zero}
    int64_t r = 0;
    for (; r + 2 <= kh; r += 2, x += 2 * row_step, w += 2 * {kw} * cin) {{  /* two kernel rows at a time */
        {pairs}
        {paired}
    }}
    for (; r < kh; r++, x += row_step, w += {kw} * cin) {{
        {weights}
        {single}
    }}
    {stores}
}}
"""


def depthwise_tiles(kind: str, kw: int, sw: int, dw: int) -> tuple[str, str]:
    """(name, C) of the depthwise helper of vector form `kind` (TILE_ISAS) for a kernel kw wide, column stride
    sw and dilation dw (straight-line tiles need them as constants); its arguments are those of
    `tk_depthwise_u8s8_<kind>`: c[t * ldc + j] = the sum of output pixel p0 + t, channel j0 + j, for
    t < pixels, j < channels; x one padded NHWC image of cin channels a pixel, w (KH, KW, cin) int32."""
    isa = TILE_ISAS[kind]
    name = f"tk_depthwise_u8s8_k{kw}s{sw}d{dw}_{kind}"  # the kind last, as the precision report reads it
    tiles = "".join(_tile(isa, name, mr, kw, sw, dw) for mr in range(1, isa.tile + 1))
    cases = "\n".join(f"                case {mr}: {name}_{mr}(xt + j, w + j0 + j, ct + j, ldc, kh, row_step, cin); break;"
                       for mr in range(isa.tile, 0, -1))
    return name, f"""#include <immintrin.h>
/* ---- depthwise u8 convolution ({kind}), {kw} taps a row, column stride {sw}, dilation {dw}: {isa.lanes} channels
 * a vector; two kernel rows' bytes interleaved and widened to int16, so one multiply-add adds both rows'
 * products per channel (x0 * w0 + x1 * w1, exact); an odd last row's bytes widened to int32: x * w */
{isa.helpers}{tiles}
static void {name}(const uint8_t *restrict x, const int32_t *restrict w, int32_t *restrict c,
                   int64_t ldc, int64_t p0, int64_t pixels, int64_t j0, int64_t channels,
                   int64_t ow, int64_t wp, int64_t cin, int64_t sh, int64_t sw, int64_t dh,
                   int64_t dw, int64_t kh, int64_t kw)
{{
    const int64_t row_step = dh * wp * cin;
    for (int64_t t = 0; t < pixels;) {{
        const int64_t oy = (p0 + t) / ow, ox = (p0 + t) % ow;
        const int64_t left = ow - ox < pixels - t ? ow - ox : pixels - t;  /* pixels left in this output row */
        for (int64_t i = 0; i < left; i += {isa.tile}) {{
            const int64_t mr = left - i < {isa.tile} ? left - i : {isa.tile};
            const uint8_t *xt = x + (oy * sh * wp + (ox + i) * sw) * cin + j0;  /* the tile's first window */
            int32_t *ct = c + (t + i) * ldc;
            int64_t j = 0;
            for (; j + {isa.lanes} <= channels; j += {isa.lanes}) {{
                switch (mr) {{
{cases}
                default: break;
                }}
            }}
            for (; j < channels; j++) {{  /* the last channels, fewer than a vector */
                for (int64_t p = 0; p < mr; p++) {{
                    int32_t acc = 0;
                    for (int64_t r = 0; r < kh; r++) {{
                        for (int64_t s = 0; s < kw; s++) {{
                            acc += (int32_t)xt[(p * sw + r * dh * wp + s * dw) * cin + j] * w[(r * kw + s) * cin + j0 + j];
                        }}
                    }}
                    ct[p * ldc + j] = acc;
                }}
            }}
        }}
        t += left;
    }}
}}
"""


__all__ = ["DEPTHWISE_TILE", "DEPTHWISE_TILE_512", "TILE_ISAS", "depthwise_tiles"]
