"""The C helpers a loop-IR `NativeCall` names: micro-kernels written with vector intrinsics.

Loop IR describes a scalar computation that GCC vectorizes; an instruction
that no C expression compiles to, like AVX512-BF16's `vdpbf16ps` (a dot
product of bfloat16 pairs accumulated in float32), needs its loop written
with intrinsics. Each helper is one entry of NATIVE_FUNCTIONS; the generated
file includes only the helpers its kernels call.

`tk_bf16_tile_8x<NR>(pairs, a, b, c)`: c[8 x NR] (float32, row-major) +=
A (8 rows) x B (NR columns) over 2*pairs depth steps, operands in bfloat16
pairs as kernels/templates/gemm_bf16.py packs them:

    a[q*16 + 2*i + t] = A[row i][depth 2q + t]          (8 rows)
    b[q*2*NR + 2*j + t] = B[depth 2q + t][column j]     (NR columns)

Per pair of depth steps, each row's pair is broadcast as one 32-bit lane and
`vdpbf16ps` adds a[2q]*b[2q] + a[2q+1]*b[2q+1] to 16 columns at once: 8 x NR/16
accumulators stay in registers (16 of 32 for NR = 32).
`tk_bf16_tile_8x<NR>_strided` is the same tile with the strides of the pairs as arguments, for
operands laid out otherwise (kernels/templates/attention_bf16.py).
"""
from __future__ import annotations

BF16_TILE_NR = (16, 32)  # the tile widths with a helper: one or two vectors of 16 float32


def _bf16_tile(nr: int, strided: bool = False) -> str:
    """tk_bf16_tile_8x<NR>: c[8 x NR] += bf16 pairs of A (8 rows, pair q of row i at a[q*16 + 2i]) x B
    (NR columns, pair q at b[q * 2NR]). strided: tk_bf16_tile_8x<NR>_strided, the same tile with the
    pairs' strides as arguments (fused attention's operands): row i's pair q of A at
    a[q * a_pair + i * a_row], B's pair q at b[q * b_pair]."""
    vectors = nr // 16
    if strided:
        header = [f"/* c[8 x {nr}] += bf16 pairs of A (8 rows) x B ({nr} columns), float32 accumulation (vdpbf16ps);",
                  " * row i's pair q of A at a[q * a_pair + i * a_row], pair q of B at b[q * b_pair] */",
                  f"static inline void tk_bf16_tile_8x{nr}_strided(int64_t pairs, const uint16_t *restrict a, "
                  f"int64_t a_pair, int64_t a_row, const uint16_t *restrict b, int64_t b_pair, float *restrict c)"]
        loop_start = ["    for (int64_t q = 0; q < pairs; ++q) {", "        const uint16_t *restrict ap = a + q * a_pair;"]
        b_at, a_at = "b + q * b_pair + {offset}", "ap + {i} * a_row"
    else:
        header = [f"/* c[8 x {nr}] += bf16 pairs of A (8 rows) x B ({nr} columns), float32 accumulation (vdpbf16ps) */",
                  f"static inline void tk_bf16_tile_8x{nr}(int64_t pairs, const uint16_t *restrict a, "
                  f"const uint16_t *restrict b, float *restrict c)"]
        loop_start = ["    for (int64_t q = 0; q < pairs; ++q) {"]
        b_at, a_at = f"b + q * {2 * nr} + {{offset}}", "a + q * 16 + {two_i}"
    lines = header + ["{"]
    for i in range(8):
        lines.append("    " + " ".join(f"__m512 c{i}{v} = _mm512_loadu_ps(c + {i * nr + 16 * v});"
                                       for v in range(vectors)))
    lines += loop_start
    for v in range(vectors):
        lines.append(f"        __m512bh b{v} = (__m512bh)_mm512_loadu_si512("
                     f"(const void *)({b_at.format(offset=32 * v)}));")
    for i in range(8):
        # the pair read through memcpy: an int32_t lvalue on bf16 (uint16_t) data breaks C's aliasing rule,
        # and once the helper is inlined GCC may load it before the pack's stores
        lines.append(f"        int32_t pair{i}; memcpy(&pair{i}, {a_at.format(i=i, two_i=2 * i)}, 4);")
        lines.append(f"        __m512bh a{i} = (__m512bh)_mm512_set1_epi32(pair{i});")
        for v in range(vectors):
            lines.append(f"        c{i}{v} = _mm512_dpbf16_ps(c{i}{v}, a{i}, b{v});")
    lines.append("    }")
    for i in range(8):
        lines.append("    " + " ".join(f"_mm512_storeu_ps(c + {i * nr + 16 * v}, c{i}{v});"
                                       for v in range(vectors)))
    lines.append("}")
    return "\n".join(lines)


_INCLUDE = "#include <immintrin.h>"
NATIVE_FUNCTIONS: dict[str, str] = {
    **{f"tk_bf16_tile_8x{nr}": _bf16_tile(nr) for nr in BF16_TILE_NR},
    **{f"tk_bf16_tile_8x{nr}_strided": _bf16_tile(nr, strided=True) for nr in BF16_TILE_NR},
}


def native_helpers(names: set[str]) -> str:
    """The C text of the helpers named (with the intrinsics header), in a fixed order."""
    unknown = names - set(NATIVE_FUNCTIONS)
    if unknown:
        raise ValueError(f"no native helper named {', '.join(sorted(unknown))}")
    if not names:
        return ""
    return "\n\n".join([_INCLUDE] + [NATIVE_FUNCTIONS[n] for n in sorted(names)])


__all__ = ["BF16_TILE_NR", "NATIVE_FUNCTIONS", "native_helpers"]
