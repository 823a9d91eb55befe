"""The C helpers of the weight-only matmuls (weight_only.py): int8 / int4 weights with group scales,
and bf16 weights, dequantized in registers, float32 sums.

Each helper computes c[r * ldc + p * W + j] for rows r < rows, panels p < npanels, columns j < W of
a panel, over the whole depth, in register tiles of up to 4 rows x one panel. One panel of weights
streams through once per 4 rows: for a matrix-vector product (decoding) each weight byte is read
exactly once. An FMA waits ~4 cycles for the previous one into the same register, so with 1 or 2
rows the depth steps alternate between two sets of sums (added at the end of a group).

- `tk_w8_matmul_<kind>`: int8 panels (P, K, 32), float32 scales (P, G, 32). Per group of depths,
  sums of a[k] * q[k][j] (bytes sign-extended to int32, converted to float32), then
  c += scale[g][j] * sum.
- `tk_w4_matmul_<kind>`: int4 panels (P, K, 16): byte j of depth k holds column j in its low
  nibble and column j + 16 in its high one, each stored as q + 8. The 16 bytes are widened to
  32-bit lanes, and `vpermps` looks each nibble up in a table of the 16 floats -8..7: it reads
  only an index's low 4 bits, so the low nibbles need no mask and the high ones one shift.
- `tk_bf16_matvec_<kind>`: bf16 pairs (P, ceil(K/2), 2 W) as the bf16 GEMM packs them
  (ir/ops/gemm_panels.py), A given as bf16 pairs too. `dpbf16`: vdpbf16ps adds both depths of a
  pair in one instruction; `avx512`: each bf16 widened to float32 by a shift or a mask (exact),
  then two FMAs.

`kind` is `avx512` (or `dpbf16`) where the target has 512-bit vectors, else `portable`: plain C
computing the same sums.
"""
from __future__ import annotations

_INCLUDE = "#include <immintrin.h>\n"

# ---- int8 / int4 weights ------------------------------------------------------------------------------
_INT_TILE_AVX512 = r"""
/* int{bits} weights x float32 rows: c[i][0..31] = sum over groups g of scale[g][j] * sum over k in g of
 * a[i][k] * w[k][j], for mr rows (a register tile: 2 x mr sums per chain) */
static inline __attribute__((always_inline)) void tk_w{bits}_tile_avx512(
    const int mr, const float *restrict a, int64_t lda, const {qtype} *restrict q, const float *restrict s,
    float *restrict c, int64_t ldc, int64_t depth, int64_t group)
{{
    const int chains = mr <= 2 ? 2 : 1;  /* independent sums per output: FMA latency, not throughput */
    {table}
    __m512 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {{
        acc[i][0] = _mm512_setzero_ps();
        acc[i][1] = _mm512_setzero_ps();
    }}
    for (int64_t g0 = 0, gi = 0; g0 < depth; g0 += group, gi++) {{
        const int64_t end = g0 + group < depth ? g0 + group : depth;
        __m512 sum[2][4][2];
#pragma GCC unroll 2
        for (int t = 0; t < chains; t++) {{
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {{
                sum[t][i][0] = _mm512_setzero_ps();
                sum[t][i][1] = _mm512_setzero_ps();
            }}
        }}
#define TK_W{bits}_STEP(K, T) do {{ \
            __m512 w0, w1; \
            {widen} \
            _Pragma("GCC unroll 4") \
            for (int i = 0; i < mr; i++) {{ \
                const __m512 av = _mm512_set1_ps(a[i * lda + (K)]); \
                sum[T][i][0] = _mm512_fmadd_ps(av, w0, sum[T][i][0]); \
                sum[T][i][1] = _mm512_fmadd_ps(av, w1, sum[T][i][1]); \
            }} \
        }} while (0)
        int64_t k = g0;
        for (; k + chains <= end; k += chains) {{
#pragma GCC unroll 2
            for (int t = 0; t < chains; t++) TK_W{bits}_STEP(k + t, t);
        }}
        for (; k < end; k++) TK_W{bits}_STEP(k, 0);
#undef TK_W{bits}_STEP
        const __m512 s0 = _mm512_loadu_ps(s + gi * 32), s1 = _mm512_loadu_ps(s + gi * 32 + 16);
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {{
            __m512 t0 = sum[0][i][0], t1 = sum[0][i][1];
            if (chains > 1) {{
                t0 = _mm512_add_ps(t0, sum[1][i][0]);
                t1 = _mm512_add_ps(t1, sum[1][i][1]);
            }}
            acc[i][0] = _mm512_fmadd_ps(s0, t0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(s1, t1, acc[i][1]);
        }}
    }}
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {{
        _mm512_storeu_ps(c + i * ldc, acc[i][0]);
        _mm512_storeu_ps(c + i * ldc + 16, acc[i][1]);
    }}
}}
"""

_WIDEN = {
    8: ("w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + (K) * 32)))); \\\n"
        "            w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + (K) * 32 + 16))));"),
    4: ("const __m512i nib = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + (K) * 16))); \\\n"
        "            w0 = _mm512_permutexvar_ps(nib, values); \\\n"
        "            w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(nib, 4), values);"),
}
_TABLE = {8: "",
          4: ("const __m512 values = _mm512_setr_ps(-8.0f, -7.0f, -6.0f, -5.0f, -4.0f, -3.0f, -2.0f, -1.0f, "
              "0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f);  /* nibble -> q */")}

_INT_TILE_PORTABLE = r"""
/* int{bits} weights x float32 rows, plain C: the sums of tk_w{bits}_tile_avx512 (one chain) */
static inline void tk_w{bits}_tile_portable(
    const int mr, const float *restrict a, int64_t lda, const {qtype} *restrict q, const float *restrict s,
    float *restrict c, int64_t ldc, int64_t depth, int64_t group)
{{
    for (int i = 0; i < mr; i++) {{
        float acc[32] = {{0.0f}};
        for (int64_t g0 = 0, gi = 0; g0 < depth; g0 += group, gi++) {{
            const int64_t end = g0 + group < depth ? g0 + group : depth;
            float sum[32] = {{0.0f}};
            for (int64_t k = g0; k < end; k++) {{
                const float ai = a[i * lda + k];
                for (int j = 0; j < 32; j++) {{
                    sum[j] += ai * {portable_weight};
                }}
            }}
            for (int j = 0; j < 32; j++) {{
                acc[j] += s[gi * 32 + j] * sum[j];
            }}
        }}
        for (int j = 0; j < 32; j++) {{
            c[i * ldc + j] = acc[j];
        }}
    }}
}}
"""
_PORTABLE_WEIGHT = {8: "(float)q[k * 32 + j]",
                    4: "(float)((j < 16 ? (q[k * 16 + j] & 15) : (q[k * 16 + j - 16] >> 4)) - 8)"}

_INT_DRIVER = r"""
static void tk_w{bits}_matmul_{kind}(const float *restrict a, int64_t lda, int64_t rows,
                                 const {qtype} *restrict q, const float *restrict scales, int64_t npanels,
                                 int64_t depth, int64_t group, int64_t groups, float *restrict c, int64_t ldc)
{{
    for (int64_t p = 0; p < npanels; p++) {{  /* one panel of weights, read once per 4 rows */
        const {qtype} *qp = q + p * depth * {bytes_per_depth};
        const float *sp = scales + p * groups * 32;
        int64_t r = 0;
        for (; r + 4 <= rows; r += 4) {{
            tk_w{bits}_tile_{kind}(4, a + r * lda, lda, qp, sp, c + r * ldc + p * 32, ldc, depth, group);
        }}
        switch (rows - r) {{  /* a tile of constant height each: its sums stay in registers */
        case 3: tk_w{bits}_tile_{kind}(3, a + r * lda, lda, qp, sp, c + r * ldc + p * 32, ldc, depth, group); break;
        case 2: tk_w{bits}_tile_{kind}(2, a + r * lda, lda, qp, sp, c + r * ldc + p * 32, ldc, depth, group); break;
        case 1: tk_w{bits}_tile_{kind}(1, a + r * lda, lda, qp, sp, c + r * ldc + p * 32, ldc, depth, group); break;
        default: break;
        }}
    }}
}}
"""

INT_KINDS = ("avx512", "portable")


def int_weight_source(bits: int, kind: str) -> str:
    """The C of `tk_w<bits>_matmul_<kind>` (bits 8 or 4, kind in INT_KINDS)."""
    qtype = "int8_t" if bits == 8 else "uint8_t"
    fields = dict(bits=bits, qtype=qtype, kind=kind, bytes_per_depth=32 if bits == 8 else 16)
    if kind == "avx512":
        tile = _INCLUDE + _INT_TILE_AVX512.format(widen=_WIDEN[bits], table=_TABLE[bits], **fields)
    else:
        tile = _INT_TILE_PORTABLE.format(portable_weight=_PORTABLE_WEIGHT[bits], **fields)
    return tile + _INT_DRIVER.format(**fields)


# ---- bf16 weights -----------------------------------------------------------------------------------
_BF16_TILE = r"""
/* bf16 pairs: c[i][0..16 nv) = sum over pairs q of a[i][2q] * b[2q][j] + a[i][2q+1] * b[2q+1][j]
 * ({how}) for mr rows of A, itself given as bf16 pairs (one 32-bit word per pair) */
static inline __attribute__((always_inline)) void tk_bf16_mv_tile_{kind}(
    const int mr, const int nv, const tk_bf16_pair *restrict a, int64_t lda, const uint16_t *restrict b,
    float *restrict c, int64_t ldc, int64_t pairs)
{{
    const int chains = mr <= 2 ? 2 : 1;
    __m512 sum[2][4][2];
#pragma GCC unroll 2
    for (int t = 0; t < 2; t++) {{
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {{
            sum[t][i][0] = _mm512_setzero_ps();
            sum[t][i][1] = _mm512_setzero_ps();
        }}
    }}
#define TK_BF16_MV_STEP(Q, T) do {{ \
        _Pragma("GCC unroll 2") \
        for (int v = 0; v < nv; v++) {{ \
            const __m512i bv = _mm512_loadu_si512((const void *)(b + (Q) * 32 * nv + 32 * v)); \
            {prepare_b} \
            _Pragma("GCC unroll 4") \
            for (int i = 0; i < mr; i++) {{ \
                const __m512i ap = _mm512_set1_epi32((int32_t)a[i * lda + (Q)]); \
                {update} \
            }} \
        }} \
    }} while (0)
    int64_t q = 0;
    for (; q + chains <= pairs; q += chains) {{
#pragma GCC unroll 2
        for (int t = 0; t < chains; t++) TK_BF16_MV_STEP(q + t, t);
    }}
    for (; q < pairs; q++) TK_BF16_MV_STEP(q, 0);
#undef TK_BF16_MV_STEP
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {{
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) {{
            _mm512_storeu_ps(c + i * ldc + 16 * v, chains > 1 ? _mm512_add_ps(sum[0][i][v], sum[1][i][v])
                                                              : sum[0][i][v]);
        }}
    }}
}}
"""
_BF16_PREPARE = {
    "dpbf16": "",
    "avx512": ("const __m512 b_even = _mm512_castsi512_ps(_mm512_slli_epi32(bv, 16)); \\\n"
               "            const __m512 b_odd = _mm512_castsi512_ps(_mm512_and_si512(bv, "
               "_mm512_set1_epi32((int32_t)0xffff0000u)));"),
}
_BF16_UPDATE = {
    "dpbf16": "sum[T][i][v] = _mm512_dpbf16_ps(sum[T][i][v], (__m512bh)ap, (__m512bh)bv);",
    "avx512": ("const __m512 a_even = _mm512_castsi512_ps(_mm512_slli_epi32(ap, 16)); \\\n"
               "                const __m512 a_odd = _mm512_castsi512_ps(_mm512_and_si512(ap, "
               "_mm512_set1_epi32((int32_t)0xffff0000u))); \\\n"
               "                sum[T][i][v] = _mm512_fmadd_ps(a_odd, b_odd, "
               "_mm512_fmadd_ps(a_even, b_even, sum[T][i][v]));"),
}
_BF16_HOW = {"dpbf16": "vdpbf16ps", "avx512": "bf16 widened to float32 by a shift or a mask, two FMAs"}

_BF16_TILE_PORTABLE = r"""
/* bf16 pairs, plain C: the sums of the vector tiles (one chain) */
static inline float tk_bf16_mv_widen(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
static inline void tk_bf16_mv_tile_portable(
    const int mr, const int nv, const tk_bf16_pair *restrict a, int64_t lda, const uint16_t *restrict b,
    float *restrict c, int64_t ldc, int64_t pairs)
{
    const int width = 16 * nv;
    for (int i = 0; i < mr; i++) {
        for (int j = 0; j < width; j++) {
            float acc = 0.0f;
            for (int64_t q = 0; q < pairs; q++) {
                const uint32_t ap = a[i * lda + q];
                acc += tk_bf16_mv_widen(ap << 16) * tk_bf16_mv_widen((uint32_t)b[q * 2 * width + 2 * j] << 16);
                acc += tk_bf16_mv_widen(ap & 0xffff0000u) *
                       tk_bf16_mv_widen((uint32_t)b[q * 2 * width + 2 * j + 1] << 16);
            }
            c[i * ldc + j] = acc;
        }
    }
}
"""

_BF16_DRIVER = r"""
static void tk_bf16_matvec_{kind}(const tk_bf16_pair *restrict a, int64_t lda, int64_t rows, const uint16_t *restrict b,
                                 int64_t npanels, int64_t pairs, int64_t width, float *restrict c, int64_t ldc)
{{
    const int nv = (int)(width / 16);  /* vectors of 16 columns per panel: 1 or 2 */
    for (int64_t p = 0; p < npanels; p++) {{
        const uint16_t *bp = b + p * pairs * 2 * width;
        int64_t r = 0;
        for (; r + 4 <= rows; r += 4) {{
            if (nv == 2) tk_bf16_mv_tile_{kind}(4, 2, a + r * lda, lda, bp, c + r * ldc + p * width, ldc, pairs);
            else tk_bf16_mv_tile_{kind}(4, 1, a + r * lda, lda, bp, c + r * ldc + p * width, ldc, pairs);
        }}
        for (; r < rows; r++) {{
            if (nv == 2) tk_bf16_mv_tile_{kind}(1, 2, a + r * lda, lda, bp, c + r * ldc + p * width, ldc, pairs);
            else tk_bf16_mv_tile_{kind}(1, 1, a + r * lda, lda, bp, c + r * ldc + p * width, ldc, pairs);
        }}
    }}
}}
"""

BF16_KINDS = ("dpbf16", "avx512", "portable")


# A's pairs are a bfloat16 buffer read as 32-bit words: the type may alias the 16-bit stores that wrote
# them (else GCC may take those stores as dead once the helper is inlined)
_PAIR_TYPE = "typedef uint32_t tk_bf16_pair __attribute__((may_alias));\n"


def bf16_matvec_source(kind: str) -> str:
    """The C of `tk_bf16_matvec_<kind>` (kind in BF16_KINDS)."""
    if kind == "portable":
        tile = "#include <string.h>\n" + _BF16_TILE_PORTABLE
    else:
        tile = _INCLUDE + _BF16_TILE.format(kind=kind, how=_BF16_HOW[kind], prepare_b=_BF16_PREPARE[kind],
                                            update=_BF16_UPDATE[kind])
    return _PAIR_TYPE + tile + _BF16_DRIVER.format(kind=kind)
