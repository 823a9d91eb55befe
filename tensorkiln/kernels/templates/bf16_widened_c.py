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

from typing import Callable

from .conv_nchwc_bf16_c import _PAIR_TYPE, _PRELUDE, conv_tile_frame
from .conv_shallow_bf16_c import shallow_tile_frame

WIDENED_LANES = 8  # a ymm of float32 lanes: AVX2 + FMA
_HIGH = "const __m256i high = _mm256_set1_epi32((int)0xffff0000u);"  # masks the odd element of each pair
_HALVES = (("_mm256_slli_epi32({}, 16)", ""), ("_mm256_and_si256({}, high)", " + 1"))  # widen the even, odd one


def _widened_half(widen: str, comment: str, brace_indent: str, loaded: list[tuple[str, str]],
                  broadcast: list[tuple[str, str]], products: Callable[[int], str]) -> list[str]:
    """One half of a step: the `loaded` vectors (name, 32-bit pairs) widened by `widen`, then for each
    `broadcast` operand its widened pair and `products(index)`, the FMAs it takes part in."""
    def widened(name: str, pairs: str) -> str:
        return f"            __m256 {name} = _mm256_castsi256_ps({widen.format(pairs)});"
    lines = [f"{brace_indent}{{  /* {comment}, widened to float32 */"]
    lines += [widened(name, pairs) for name, pairs in loaded]
    for index, (name, pairs) in enumerate(broadcast):
        lines += [widened(name, pairs), "            " + products(index)]
    return lines + [f"{brace_indent}}}"]


def widened_conv_tile_name(pixels: int, blocks: int, pixel_stride: int) -> str:
    """The helper's name for a tile of `pixels` x `blocks` blocks of 8 lanes."""
    return f"tk_widened_bf16_conv_{pixels}x{blocks}_{WIDENED_LANES}_p{pixel_stride}"


def widened_conv_tile_source(pixels: int, blocks: int, pixel_stride: int) -> str:
    """The C text of `widened_conv_tile_name(...)` (see the module docstring)."""
    acc = [[f"c{i}_{o}" for o in range(blocks)] for i in range(pixels)]
    lanes = WIDENED_LANES
    body = [f"            const __m256i v{o} = _mm256_loadu_si256((const __m256i *)"
            f"(ws + p * {2 * lanes} + {o} * w_block));" for o in range(blocks)]
    weights = [(f"w{o}", f"v{o}") for o in range(blocks)]
    pixel_pairs = [(f"x{i}", f"_mm256_set1_epi32((int)*(const {_PAIR_TYPE} *)(xs + 2 * p + {i * pixel_stride}))")
                   for i in range(pixels)]
    for widen, label in _HALVES:
        body += _widened_half(widen, f"channel 2p{label} of every pair", "            ", weights, pixel_pairs,
                              lambda i: " ".join(f"{acc[i][o]} = _mm256_fmadd_ps(x{i}, w{o}, {acc[i][o]});"
                                                 for o in range(blocks)))
    comment = (f"/* c[{pixels} pixels x {blocks} blocks x {lanes}] = bf16 channel pairs of x (pixels {pixel_stride} "
               "apart) x weight pairs, each widened to float32 in registers, float32 fma (AVX2) */")
    return conv_tile_frame(widened_conv_tile_name(pixels, blocks, pixel_stride), comment, acc, "__m256", "_mm256",
                           lanes, body, constants=(_HIGH,))


def widened_shallow_tile_name(channels: int, vectors: int) -> str:
    """The helper's name for a tile of `channels` output channels x `vectors` vectors of 8 pixels."""
    return f"tk_widened_bf16_shallow_{channels}x{vectors}"


def widened_shallow_tile_source(channels: int, vectors: int) -> str:
    """The C text of `widened_shallow_tile_name(...)` (see the module docstring)."""
    acc = [[f"c{o}_{i}" for i in range(vectors)] for o in range(channels)]
    lanes = WIDENED_LANES
    body = [f"        const __m256i v{i} = _mm256_loadu_si256((const __m256i *)(xs + {i * lanes}));"
            for i in range(vectors)]
    pixels = [(f"x{i}", f"v{i}") for i in range(vectors)]
    taps = [(f"w{o}", f"_mm256_set1_epi32((int)ws[{o} * steps])") for o in range(channels)]
    for widen, label in _HALVES:
        body += _widened_half(widen, f"tap 2p{label} of every pair", "        ", pixels, taps,
                              lambda o: " ".join(f"{acc[o][i]} = _mm256_fmadd_ps(x{i}, w{o}, {acc[o][i]});"
                                                 for i in range(vectors)))
    comment = (f"/* c[{channels} channels x {vectors} x {lanes} pixels] = bf16 column pairs of x x tap pairs of w, "
               "each widened to float32 in registers, float32 fma (AVX2) */")
    return shallow_tile_frame(widened_shallow_tile_name(channels, vectors), comment, acc, "__m256", "_mm256",
                              lanes, body, prelude=_PRELUDE, pair_type=_PAIR_TYPE, constants=(_HIGH,))


__all__ = ["WIDENED_LANES", "widened_conv_tile_name", "widened_conv_tile_source", "widened_shallow_tile_name",
           "widened_shallow_tile_source"]
