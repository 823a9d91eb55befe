"""The C of the bf16 direct convolution's register tile without AVX512-BF16: AVX2 + FMA intrinsics.

`tk_widened_bf16_conv_<T>x<G>_8_p<P>(...)` takes the arguments of conv_nchwc_bf16_c.py's
`vdpbf16ps` tile and computes the same T pixels x G blocks of 8 float32 lanes (one ymm each),
widening the bf16 pairs in registers:

    for b < cblocks, r < kh, s < kw, p < pairs:
        wv[o] = 8 weight pairs of block o            (one 256-bit load)
        even half:  we[o] = wv[o] << 16                         channel 2p as float32
                    for i < T: xe = broadcast(pair of pixel i) << 16
                               c[i][o] = fma(xe, we[o], c[i][o])
        odd half:   wo[o] = wv[o] & 0xffff0000                  channel 2p + 1 as float32
                    for i < T: xo = broadcast(pair of pixel i) & 0xffff0000
                               c[i][o] = fma(xo, wo[o], c[i][o])

Widening bf16 is exact (a bf16 value is the upper half of its float32), so every accumulator
meets the same products in the same order as the loop IR that widens each element
(conv_nchwc_bf16.py: `_widened_products`, an fma for channel 2p, then one for 2p + 1): the
sums are the same, bit for bit. Why a helper: from that loop IR, GCC 12 for AVX2 kept the
accumulators of the tile in memory (an fma with a load and a store per product), several times
slower than this tile, whose accumulators are named ymm variables.

Registers: T*G accumulators, G weight vectors of one half, a broadcast pixel and the mask
(`WIDENED_RESERVED` beside the accumulators and weights): the two halves run one after the
other so that only one half's weights are live.
"""
from __future__ import annotations

from .conv_nchwc_bf16_c import _PAIR_TYPE, _PRELUDE

WIDENED_LANES = 8  # a ymm of float32 lanes: AVX2 + FMA
WIDENED_RESERVED = 2  # registers beside accumulators and weights: the broadcast pixel and the mask


def widened_conv_tile_name(pixels: int, blocks: int, pixel_stride: int) -> str:
    """The helper's name for a tile of `pixels` x `blocks` blocks of 8 lanes."""
    return f"tk_widened_bf16_conv_{pixels}x{blocks}_{WIDENED_LANES}_p{pixel_stride}"


def widened_conv_tile_source(pixels: int, blocks: int, pixel_stride: int) -> str:
    """The C text of `widened_conv_tile_name(...)` (see the module docstring)."""
    name = widened_conv_tile_name(pixels, blocks, pixel_stride)
    acc = [[f"c{i}_{o}" for o in range(blocks)] for i in range(pixels)]
    lanes = WIDENED_LANES

    def half(widen: str, label: str) -> list[str]:
        lines = [f"            {{  /* channel 2p{label} of every pair, widened to float32 */"]
        for o in range(blocks):
            lines.append(f"            __m256 w{o} = _mm256_castsi256_ps({widen.format(f'v{o}')});")
        for i in range(pixels):
            pair = f"_mm256_set1_epi32((int)*(const {_PAIR_TYPE} *)(xs + 2 * p + {i * pixel_stride}))"
            lines.append(f"            __m256 x{i} = _mm256_castsi256_ps({widen.format(pair)});")
            lines.append("            " + " ".join(f"{acc[i][o]} = _mm256_fmadd_ps(x{i}, w{o}, {acc[i][o]});"
                                                   for o in range(blocks)))
        return lines + ["            }"]

    lines = [
        _PRELUDE,
        f"/* c[{pixels} pixels x {blocks} blocks x {lanes}] = bf16 channel pairs of x (pixels {pixel_stride} apart) "
        "x weight pairs, each widened to float32 in registers, float32 fma (AVX2) */",
        f"static inline void {name}(const uint16_t *restrict x, const uint16_t *restrict w, float *restrict c, "
        "int64_t cblocks, int64_t kh, int64_t kw, int64_t pairs, int64_t x_block, int64_t x_row, int64_t x_col, "
        "int64_t w_block)",
        "{",
        "    const __m256i high = _mm256_set1_epi32((int)0xffff0000u);",
    ]
    for row in acc:
        lines.append("    " + " ".join(f"__m256 {a} = _mm256_setzero_ps();" for a in row))
    lines += [
        "    for (int64_t b = 0; b < cblocks; ++b)",
        "    for (int64_t r = 0; r < kh; ++r)",
        "    for (int64_t s = 0; s < kw; ++s) {",
        "        const uint16_t *xs = x + b * x_block + r * x_row + s * x_col;",
        f"        const uint16_t *ws = w + ((b * kh + r) * kw + s) * pairs * {2 * lanes};",
        "        for (int64_t p = 0; p < pairs; ++p) {",
    ]
    for o in range(blocks):
        lines.append(f"            const __m256i v{o} = _mm256_loadu_si256((const __m256i *)"
                     f"(ws + p * {2 * lanes} + {o} * w_block));")
    lines += half("_mm256_slli_epi32({}, 16)", "")
    lines += half("_mm256_and_si256({}, high)", " + 1")
    lines += ["        }", "    }"]
    for i, row in enumerate(acc):
        lines.append("    " + " ".join(f"_mm256_storeu_ps(c + {(i * blocks + o) * lanes}, {a});"
                                       for o, a in enumerate(row)))
    lines.append("}")
    return "\n".join(lines)


__all__ = ["WIDENED_LANES", "WIDENED_RESERVED", "widened_conv_tile_name", "widened_conv_tile_source"]
