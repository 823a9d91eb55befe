"""The C of the bf16 direct convolution's register tile (conv_nchwc_bf16.py): `vdpbf16ps` intrinsics.

`tk_bf16_conv_<T>x<G>_<V>_p<P>(x, w, c, cblocks, kh, kw, pairs, x_block, x_row, x_col, w_block)`
computes T output pixels x G output-channel blocks of V lanes (V = 16: zmm, 8: ymm), all in
registers, over every input channel pair of every tap:

    for b < cblocks, r < kh, s < kw, p < pairs:
        xs = x + b*x_block + r*x_row + s*x_col + 2p        channels 2p, 2p+1 of pixel 0 (bf16, adjacent)
        ws = w + ((b*kh + r)*kw + s)*pairs*2V + p*2V      the pairs of V output lanes (one vector)
        for o < G:  wv[o] = ws[o*w_block .. + 2V]
        for i < T:  xi = broadcast 32 bits at xs + i*P   (both channels of pixel i)
                    for o < G:  c[i][o] = vdpbf16ps(c[i][o], xi, wv[o])
    c[(i*G + o)*V + j] = the float32 sums

so a step is G vector loads, T broadcasts and T*G `vdpbf16ps` (two multiply-adds per lane each).
P, the distance between pixels (stride x channels per block, in bf16 elements), is part of the name:
the pixel loads are then one address register with constant displacements.
"""
from __future__ import annotations

# x's pairs are a bfloat16 buffer read as 32-bit words: the type may alias the 16-bit stores of the
# padded copy that wrote them (else GCC may take those stores as dead once the helper is inlined)
_PAIR_TYPE = "tk_bf16_conv_pair"
_PRELUDE = (f"#include <immintrin.h>\n#ifndef TK_BF16_CONV_PAIR\n#define TK_BF16_CONV_PAIR\n"  # once per file
            f"typedef uint32_t {_PAIR_TYPE} __attribute__((may_alias));\n#endif\n")

_VECTOR = {  # lanes -> (float vector, bf16 vector, intrinsic prefix, load of 2V bf16 as an integer vector)
    16: ("__m512", "__m512bh", "_mm512", "_mm512_loadu_si512((const void *)({}))"),
    8: ("__m256", "__m256bh", "_mm256", "_mm256_loadu_si256((const __m256i *)({}))"),
}


# The parameters of every direct-convolution tile helper: input, weight pairs, the c[] tile, and the
# walk over input channel blocks, kernel rows and columns and the channel pairs of each.
CONV_TILE_PARAMETERS = ("const uint16_t *restrict x, const uint16_t *restrict w, float *restrict c, "
                        "int64_t cblocks, int64_t kh, int64_t kw, int64_t pairs, int64_t x_block, "
                        "int64_t x_row, int64_t x_col, int64_t w_block")


def conv_tile_steps(lanes: int) -> list[str]:
    """The loops of a tile helper up to one channel pair p: xs and ws point at the block, row and column."""
    return [
        "    for (int64_t b = 0; b < cblocks; ++b)",
        "    for (int64_t r = 0; r < kh; ++r)",
        "    for (int64_t s = 0; s < kw; ++s) {",
        "        const uint16_t *xs = x + b * x_block + r * x_row + s * x_col;",
        f"        const uint16_t *ws = w + ((b * kh + r) * kw + s) * pairs * {2 * lanes};",
        "        for (int64_t p = 0; p < pairs; ++p) {",
    ]


def conv_tile_frame(name: str, comment: str, acc: list[list[str]], vector: str, mm: str, lanes: int,
                    pair_body: list[str], constants: tuple[str, ...] = ()) -> str:
    """A direct-convolution tile helper around `pair_body` (the statements of one channel pair p):
    the accumulators `acc[pixel][block]` of type `vector` zeroed, the walk to each pair, then every
    accumulator stored to c in order. `mm` is the intrinsics' prefix (_mm256 or _mm512)."""
    lines = [_PRELUDE, comment, f"static inline void {name}({CONV_TILE_PARAMETERS})", "{"]
    lines += [f"    {constant}" for constant in constants]
    for row in acc:
        lines.append("    " + " ".join(f"{vector} {a} = {mm}_setzero_ps();" for a in row))
    lines += conv_tile_steps(lanes) + pair_body + ["        }", "    }"]
    blocks = len(acc[0])
    for i, row in enumerate(acc):
        lines.append("    " + " ".join(f"{mm}_storeu_ps(c + {(i * blocks + o) * lanes}, {a});"
                                       for o, a in enumerate(row)))
    lines.append("}")
    return "\n".join(lines)


def conv_tile_name(pixels: int, blocks: int, lanes: int, pixel_stride: int) -> str:
    """The helper's name for a tile of `pixels` x `blocks` blocks of `lanes` lanes."""
    return f"tk_bf16_conv_{pixels}x{blocks}_{lanes}_p{pixel_stride}"


def conv_tile_source(pixels: int, blocks: int, lanes: int, pixel_stride: int) -> str:
    """The C text of `conv_tile_name(...)` (see the module docstring)."""
    if lanes not in _VECTOR:
        raise ValueError(f"bf16 convolution tile: lanes must be one of {sorted(_VECTOR)}, got {lanes}")
    ps, bh, mm, load = _VECTOR[lanes]
    name = conv_tile_name(pixels, blocks, lanes, pixel_stride)
    acc = [[f"c{i}_{o}" for o in range(blocks)] for i in range(pixels)]
    body = []
    for o in range(blocks):
        body.append(f"            {bh} w{o} = ({bh}){load.format(f'ws + p * {2 * lanes} + {o} * w_block')};")
    for i in range(pixels):
        body.append(f"            {bh} x{i} = ({bh}){mm}_set1_epi32((int)*(const {_PAIR_TYPE} *)"
                    f"(xs + 2 * p + {i * pixel_stride}));")
        body.append("            " + " ".join(f"{acc[i][o]} = {mm}_dpbf16_ps({acc[i][o]}, x{i}, w{o});"
                                              for o in range(blocks)))
    comment = (f"/* c[{pixels} pixels x {blocks} blocks x {lanes}] = bf16 channel pairs of x (pixels {pixel_stride} "
               f"apart) x weight pairs, float32 sums (vdpbf16ps) */")
    return conv_tile_frame(name, comment, acc, ps, mm, lanes, body)


__all__ = ["conv_tile_frame", "conv_tile_name", "conv_tile_source"]
