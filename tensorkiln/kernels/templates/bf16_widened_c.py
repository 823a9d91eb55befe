"""The C of the bf16 convolutions' register tiles without AVX512-BF16: AVX2 + FMA intrinsics.

Both tiles widen bf16 in registers: a bf16 value is the upper half of its float32, so the lower
element of a 32-bit pair widens by a shift left of 16 and the upper one by masking the low half
away (exact). Each accumulator meets the products of a pair in the order the loop IR that widens
every element adds them (the element 2p, then 2p + 1): the sums are the loop IR's, bit for bit.
Why helpers: from that loop IR, GCC 12 for AVX2 kept a tile's accumulators in memory (an fma
with a load and a store per product), several times slower than these tiles, whose accumulators
are named ymm variables.

**Direct** (conv_nchwc_bf16.py). `tk_widened_bf16_conv_<T>x<G>_8_p<P>(...)` takes the arguments of conv_nchwc_bf16_c.py's
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

Registers: T*G accumulators, G weight vectors of one half, a broadcast pixel and the mask: the
two halves run one after the other so that only one half's weights are live.

**Shallow** (conv_shallow_bf16.py, the RGB stem). `tk_widened_bf16_shallow_<G>x<T>(x, w, c, offsets,
steps)` takes the arguments of conv_shallow_bf16_c.py's tile and computes G output channels x T
vectors of 8 pixels of one row; a step loads the column pairs of each vector of pixels (one 256-bit
load) and broadcasts each channel's tap pair, the even taps of every product first, then the odd
ones. Registers: G*T accumulators, T pixel vectors of one half, a broadcast tap and the mask.
"""
from __future__ import annotations

from .conv_nchwc_bf16_c import _PAIR_TYPE, _PRELUDE, CONV_TILE_PARAMETERS, conv_tile_steps

WIDENED_LANES = 8  # a ymm of float32 lanes: AVX2 + FMA


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
        f"static inline void {name}({CONV_TILE_PARAMETERS})",
        "{",
        "    const __m256i high = _mm256_set1_epi32((int)0xffff0000u);",
    ]
    for row in acc:
        lines.append("    " + " ".join(f"__m256 {a} = _mm256_setzero_ps();" for a in row))
    lines += conv_tile_steps(lanes)
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


def widened_shallow_tile_name(channels: int, vectors: int) -> str:
    """The helper's name for a tile of `channels` output channels x `vectors` vectors of 8 pixels."""
    return f"tk_widened_bf16_shallow_{channels}x{vectors}"


def widened_shallow_tile_source(channels: int, vectors: int) -> str:
    """The C text of `widened_shallow_tile_name(...)` (see the module docstring)."""
    name = widened_shallow_tile_name(channels, vectors)
    acc = [[f"c{o}_{i}" for i in range(vectors)] for o in range(channels)]
    lanes = WIDENED_LANES

    def half(widen: str, label: str) -> list[str]:
        lines = [f"        {{  /* tap 2p{label} of every pair, widened to float32 */"]
        for i in range(vectors):
            lines.append(f"            __m256 x{i} = _mm256_castsi256_ps({widen.format(f'v{i}')});")
        for o in range(channels):
            tap = f"_mm256_set1_epi32((int)ws[{o} * steps])"
            lines.append(f"            __m256 w{o} = _mm256_castsi256_ps({widen.format(tap)});")
            lines.append("            " + " ".join(f"{acc[o][i]} = _mm256_fmadd_ps(x{i}, w{o}, {acc[o][i]});"
                                                   for i in range(vectors)))
        return lines + ["        }"]

    lines = [
        _PRELUDE,
        f"/* c[{channels} channels x {vectors} x {lanes} pixels] = bf16 column pairs of x x tap pairs of w, "
        "each widened to float32 in registers, float32 fma (AVX2) */",
        f"static inline void {name}(const uint16_t *restrict x, const uint16_t *restrict w, float *restrict c, "
        "const int64_t *restrict offsets, int64_t steps)",
        "{",
        "    const __m256i high = _mm256_set1_epi32((int)0xffff0000u);",
    ]
    for row in acc:
        lines.append("    " + " ".join(f"__m256 {a} = _mm256_setzero_ps();" for a in row))
    lines += [
        "    for (int64_t step = 0; step < steps; ++step) {",
        f"        const {_PAIR_TYPE} *xs = (const {_PAIR_TYPE} *)x + offsets[step];",
        f"        const {_PAIR_TYPE} *ws = (const {_PAIR_TYPE} *)w + step;",
    ]
    for i in range(vectors):
        lines.append(f"        const __m256i v{i} = _mm256_loadu_si256((const __m256i *)(xs + {i * lanes}));")
    lines += half("_mm256_slli_epi32({}, 16)", "")
    lines += half("_mm256_and_si256({}, high)", " + 1")
    lines.append("    }")
    for o, row in enumerate(acc):
        lines.append("    " + " ".join(f"_mm256_storeu_ps(c + {(o * vectors + i) * lanes}, {a});"
                                       for i, a in enumerate(row)))
    lines.append("}")
    return "\n".join(lines)


__all__ = ["WIDENED_LANES", "widened_conv_tile_name", "widened_conv_tile_source", "widened_shallow_tile_name",
           "widened_shallow_tile_source"]
