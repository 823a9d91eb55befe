"""The C of the bf16 shallow convolution's register tile (conv_shallow_bf16.py): `vdpbf16ps` intrinsics.

`tk_bf16_shallow_<G>x<T>(x, w, c, offsets, steps)` computes G output channels x T vectors of 16
output pixels of one row, all in registers, over every step (input channel c, kernel row r, tap pair
p) of the reduction:

    for step < steps:
        xs = x + 2 * offsets[step]                  the step's column pairs of pixel 0 (bf16, adjacent)
        for i < T:  xv[i] = the 16 pairs at xs + 32 i           one load of pixels 16i .. 16i + 15
        for o < G:  wb = broadcast of pair w[2 (o*steps + step)]  taps 2p, 2p + 1 of channel o
                    c[o][i] = vdpbf16ps(c[o][i], xv[i], wb)
    c[(o*T + i)*16 + j] = the float32 sums

so a step is T vector loads, G broadcasts and G*T `vdpbf16ps`, each two multiply-adds per lane: half
the instructions of the float32 kernel's FMAs.
"""
from __future__ import annotations

LANES = 16  # output pixels per vector: one zmm of float32 sums, 16 column pairs of bf16

# The plane's pairs are a bfloat16 buffer read as 32-bit words: the type may alias the 16-bit stores of
# the copy that wrote them (else GCC may take those stores as dead once the helper is inlined).
_PAIR_TYPE = "tk_bf16_shallow_pair"
_PRELUDE = (f"#include <immintrin.h>\n#ifndef TK_BF16_SHALLOW_PAIR\n#define TK_BF16_SHALLOW_PAIR\n"
            f"typedef uint32_t {_PAIR_TYPE} __attribute__((may_alias));\n#endif\n")


def shallow_tile_name(channels: int, vectors: int) -> str:
    """The helper's name for a tile of `channels` output channels x `vectors` vectors of pixels."""
    return f"tk_bf16_shallow_{channels}x{vectors}"


def shallow_tile_frame(name: str, comment: str, acc: list[list[str]], vector: str, mm: str, lanes: int,
                       step_body: list[str], prelude: str = _PRELUDE, pair_type: str = _PAIR_TYPE,
                       constants: tuple[str, ...] = ()) -> str:
    """A shallow-convolution tile helper around `step_body` (the statements of one step): the
    accumulators `acc[channel][vector]` of type `vector` zeroed, xs and ws at the step's column pairs
    and taps, then every accumulator stored to c in order. `mm` is the intrinsics' prefix."""
    lines = [prelude, comment,
             f"static inline void {name}(const uint16_t *restrict x, const uint16_t *restrict w, float *restrict c, "
             "const int64_t *restrict offsets, int64_t steps)", "{"]
    lines += [f"    {constant}" for constant in constants]
    for row in acc:
        lines.append("    " + " ".join(f"{vector} {a} = {mm}_setzero_ps();" for a in row))
    lines += [
        "    for (int64_t step = 0; step < steps; ++step) {",
        f"        const {pair_type} *xs = (const {pair_type} *)x + offsets[step];",
        f"        const {pair_type} *ws = (const {pair_type} *)w + step;",
    ]
    lines += step_body + ["    }"]
    vectors = len(acc[0])
    for o, row in enumerate(acc):
        lines.append("    " + " ".join(f"{mm}_storeu_ps(c + {(o * vectors + i) * lanes}, {a});"
                                       for i, a in enumerate(row)))
    lines.append("}")
    return "\n".join(lines)


def shallow_tile_source(channels: int, vectors: int) -> str:
    """The C text of `shallow_tile_name(...)` (see the module docstring)."""
    name = shallow_tile_name(channels, vectors)
    acc = [[f"c{o}_{i}" for i in range(vectors)] for o in range(channels)]
    body = [f"        __m512bh x{i} = (__m512bh)_mm512_loadu_si512((const void *)(xs + {i * LANES}));"
            for i in range(vectors)]
    for o in range(channels):
        body.append(f"        __m512bh w{o} = (__m512bh)_mm512_set1_epi32((int)ws[{o} * steps]);")
        body.append("        " + " ".join(f"{acc[o][i]} = _mm512_dpbf16_ps({acc[o][i]}, x{i}, w{o});"
                                          for i in range(vectors)))
    comment = (f"/* c[{channels} channels x {vectors} x {LANES} pixels] = bf16 column pairs of x x tap pairs of w, "
               "float32 sums (vdpbf16ps) */")
    return shallow_tile_frame(name, comment, acc, "__m512", "_mm512", LANES, body)


__all__ = ["LANES", "shallow_tile_frame", "shallow_tile_name", "shallow_tile_source"]
