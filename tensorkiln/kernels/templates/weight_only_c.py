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
- `tk_w4_matmul_<kind>`: int4 panels (P, steps, 64), each 64 bytes 4 depths x 16 columns: byte
  4j + d holds depth d of column j in its low nibble and of column j + 16 in its high one, stored
  as q + 8 (0..15, unsigned). The rows of A are first quantized to int8 per group of depths
  (`tk_w4_quantize_rows_<kind>`, ir/ops/weight_only.quantize_rows), so one mask (and one shift) gives 64
  unsigned bytes and `vpdpbusd` sums 4 depths x 16 columns of u8 x s8 products into int32 lanes:
  one instruction per 64 weights and row, as llama.cpp's Q4_0 x Q8_0 dot product. Per group, the
  stored + 8 costs `8 * sum(a_q)`, subtracted, then c += (w_scale * a_scale) * float(sum).
  `avx512bw` sums the same products with `vpmaddubsw` (exact: two products of at most 15 x 127)
  and `vpmaddwd` by ones; `avx2` does too, on 32-byte vectors (a step's 64 bytes in two).
- `tk_bf16_matvec_<kind>`: bf16 pairs (P, ceil(K/2), 2 W) as the bf16 GEMM packs them
  (ir/ops/gemm_panels.py), A given as bf16 pairs too. `dpbf16`: vdpbf16ps adds both depths of a
  pair in one instruction; `avx512`: each bf16 widened to float32 by a shift or a mask (exact),
  then two FMAs.

`kind` is `avx512` (or `dpbf16`; int4: `vnni` or `avx512bw`) where the target has 512-bit vectors,
`avx2` where it has 256-bit vectors with FMA (int4: any CPU with an integer dot path; int8: a panel's
32 columns a pass for one row, 16 for more, the running sums kept in c between groups; from 8 rows,
blocks of 128 depths of a panel dequantized once to float32 and the float GEMM's 6 x 16 tile run over
them), else `portable`: plain C computing the same sums.
"""
from __future__ import annotations

from .stream_prefetch import StreamPrefetch

_INCLUDE = "#include <immintrin.h>\n"

# ---- int8 / int4 weights ------------------------------------------------------------------------------
_INT_TILE_AVX512 = r"""
/* int{bits} weights x float32 rows: c[i][0..31] = sum over groups g of scale[g][j] * sum over k in g of
 * a[i][k] * w[k][j], for mr rows (a register tile: 2 x mr sums per chain) */
static inline __attribute__((always_inline)) void tk_w{bits}_tile_avx512(
    const int mr, const float *restrict a, int64_t lda, const {qtype} *restrict q, const {qtype} *last,
    const float *restrict s, float *restrict c, int64_t ldc, int64_t depth, int64_t group)
{{
    const int chains = mr <= 2 ? 2 : 1;  /* independent sums per output: FMA latency, not throughput */
    (void)last;
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
}
_TABLE = {8: ""}

# 32-byte vectors (AVX2 and FMA): one row does the panel's 32 columns in one pass (four vectors of 8
# floats, two chains); more rows do 16 columns a pass, the panel's two halves one after the other. The
# running result lives in c (read and written once per group), so a tile needs only its sums, the
# widened weight vectors and a broadcast row value in the 16 registers
_INT_TILE_AVX2 = r"""
/* int{bits} weights x float32 rows: c[i][0..31] = sum over groups g of scale[g][j] * sum over k in g of
 * a[i][k] * w[k][j], for mr rows, in passes of nv vectors (8 columns each) */
static inline __attribute__((always_inline)) void tk_w{bits}_tile_avx2(
    const int mr, const float *restrict a, int64_t lda, const {qtype} *restrict q, const {qtype} *last,
    const float *restrict s, float *restrict c, int64_t ldc, int64_t depth, int64_t group)
{{
    const int nv = mr == 1 ? 4 : 2;  /* vectors a pass: 2 x nv x mr sums at most 8 */
    /* independent sums per output, so FMAs wait on FMA latency (4 cycles, 2 a cycle) no more: 8 in flight */
    const int chains = mr <= 2 ? 2 : 1;
#pragma GCC unroll 2
    for (int h = 0; h < 4 / nv; h++) {{
        const {qtype} *qh = q + 8 * nv * h;
        for (int64_t g0 = 0, gi = 0; g0 < depth; g0 += group, gi++) {{
            const int64_t end = g0 + group < depth ? g0 + group : depth;
            __m256 sum[2][4][4];
#pragma GCC unroll 2
            for (int t = 0; t < chains; t++) {{
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++) {{
#pragma GCC unroll 4
                    for (int v = 0; v < nv; v++) sum[t][i][v] = _mm256_setzero_ps();
                }}
            }}
#define TK_W{bits}_STEP(K, T) do {{ \
                _Pragma("GCC unroll 4") \
                for (int v = 0; v < nv; v++) {{ \
                    const __m256 w = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32( \
                        _mm_loadl_epi64((const __m128i *)(qh + (K) * 32 + 8 * v)))); \
                    _Pragma("GCC unroll 4") \
                    for (int i = 0; i < mr; i++) \
                        sum[T][i][v] = _mm256_fmadd_ps(_mm256_set1_ps(a[i * lda + (K)]), w, sum[T][i][v]); \
                }} \
            }} while (0)
            int64_t k = g0;
            for (; k + chains <= end; k += chains) {{
                TK_W{bits}_PREFETCH(qh + k * 32);
#pragma GCC unroll 2
                for (int t = 0; t < chains; t++) TK_W{bits}_STEP(k + t, t);
            }}
            for (; k < end; k++) TK_W{bits}_STEP(k, 0);
#undef TK_W{bits}_STEP
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {{
                float *ci = c + i * ldc + 8 * nv * h;
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++) {{
                    const __m256 total = chains > 1 ? _mm256_add_ps(sum[0][i][v], sum[1][i][v]) : sum[0][i][v];
                    const __m256 scale = _mm256_loadu_ps(s + gi * 32 + 8 * nv * h + 8 * v);
                    _mm256_storeu_ps(ci + 8 * v, gi == 0 ? _mm256_mul_ps(scale, total)
                                                         : _mm256_fmadd_ps(scale, total, _mm256_loadu_ps(ci + 8 * v)));
                }}
            }}
        }}
    }}
}}
"""

# Many rows (a prompt's prefill) on 32-byte vectors: widening each weight vector in the tile costs two
# instructions per 4 rows' FMAs. Instead a block of KC depths of the panel is dequantized once to float32
# (q * scale: the weights the graph's reference multiplies by) and the rows run the float GEMM's 6 x 16
# register tile over it (12 sums, two weight vectors and a broadcast: 15 of the 16 registers)
_INT8_ROWS_AVX2 = r"""
#define TK_W8_ROWS_KC 128  /* depths dequantized at a time: 16 KiB of float32, in L1 beside A's rows */
#define TK_W8_FLOAT_ROWS 8  /* rows from which the dequantized block pays for itself */
/* c[i][16h .. 16h + 15] (+)= a[i][k0 .. k0 + kc] @ wf[0 .. kc][16h ..]: mr rows, one half of a panel */
static inline __attribute__((always_inline)) void tk_w8_float_tile_avx2(
    const int mr, const float *restrict a, int64_t lda, const float *restrict wf, int64_t kc, int h,
    float *restrict c, int64_t ldc, int first)
{
    __m256 acc[6][2];
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++) {
        acc[i][0] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(c + i * ldc + 16 * h);
        acc[i][1] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(c + i * ldc + 16 * h + 8);
    }
    for (int64_t k = 0; k < kc; k++) {
        const __m256 w0 = _mm256_load_ps(wf + k * 32 + 16 * h), w1 = _mm256_load_ps(wf + k * 32 + 16 * h + 8);
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++) {
            const __m256 av = _mm256_broadcast_ss(a + i * lda + k);
            acc[i][0] = _mm256_fmadd_ps(av, w0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(av, w1, acc[i][1]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++) {
        _mm256_storeu_ps(c + i * ldc + 16 * h, acc[i][0]);
        _mm256_storeu_ps(c + i * ldc + 16 * h + 8, acc[i][1]);
    }
}

static void tk_w8_rows_avx2(const float *restrict a, int64_t lda, int64_t rows, const int8_t *restrict q,
                            const float *restrict scales, int64_t npanels, int64_t depth, int64_t group,
                            int64_t groups, float *restrict c, int64_t ldc)
{
    float wf[TK_W8_ROWS_KC * 32] __attribute__((aligned(32)));
    for (int64_t p = 0; p < npanels; p++) {
        const int8_t *qp = q + p * depth * 32;
        const float *sp = scales + p * groups * 32;
        for (int64_t k0 = 0; k0 < depth; k0 += TK_W8_ROWS_KC) {
            const int64_t kc = depth - k0 < TK_W8_ROWS_KC ? depth - k0 : TK_W8_ROWS_KC;
            for (int64_t k = 0; k < kc; k++) {  /* wf[k][j] = q[k0 + k][j] * scale[group of k0 + k][j] */
                const float *sg = sp + (k0 + k) / group * 32;
#pragma GCC unroll 4
                for (int v = 0; v < 4; v++) {
                    const __m256 w = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                        _mm_loadl_epi64((const __m128i *)(qp + (k0 + k) * 32 + 8 * v))));
                    _mm256_store_ps(wf + k * 32 + 8 * v, _mm256_mul_ps(w, _mm256_loadu_ps(sg + 8 * v)));
                }
            }
            float *cp = c + p * 32;
            const float *ak = a + k0;
            int64_t r = 0;
            for (; r + 6 <= rows; r += 6) {
                tk_w8_float_tile_avx2(6, ak + r * lda, lda, wf, kc, 0, cp + r * ldc, ldc, k0 == 0);
                tk_w8_float_tile_avx2(6, ak + r * lda, lda, wf, kc, 1, cp + r * ldc, ldc, k0 == 0);
            }
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                switch (rows - r) {  /* a tile of constant height each: its sums stay in registers */
                case 5: tk_w8_float_tile_avx2(5, ak + r * lda, lda, wf, kc, h, cp + r * ldc, ldc, k0 == 0); break;
                case 4: tk_w8_float_tile_avx2(4, ak + r * lda, lda, wf, kc, h, cp + r * ldc, ldc, k0 == 0); break;
                case 3: tk_w8_float_tile_avx2(3, ak + r * lda, lda, wf, kc, h, cp + r * ldc, ldc, k0 == 0); break;
                case 2: tk_w8_float_tile_avx2(2, ak + r * lda, lda, wf, kc, h, cp + r * ldc, ldc, k0 == 0); break;
                case 1: tk_w8_float_tile_avx2(1, ak + r * lda, lda, wf, kc, h, cp + r * ldc, ldc, k0 == 0); break;
                default: break;
                }
            }
        }
    }
}
"""

_INT_TILE_PORTABLE = r"""
/* int{bits} weights x float32 rows, plain C: the sums of tk_w{bits}_tile_avx512 (one chain) */
static inline void tk_w{bits}_tile_portable(
    const int mr, const float *restrict a, int64_t lda, const {qtype} *restrict q, const {qtype} *last,
    const float *restrict s, float *restrict c, int64_t ldc, int64_t depth, int64_t group)
{{
    (void)last;
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
_PORTABLE_WEIGHT = {8: "(float)q[k * 32 + j]"}

_INT_DRIVER = r"""
static void tk_w{bits}_matmul_{kind}(const float *restrict a, int64_t lda, int64_t rows,
                                 const {qtype} *restrict q, const float *restrict scales, int64_t npanels,
                                 int64_t depth, int64_t group, int64_t groups, float *restrict c, int64_t ldc)
{{
    const {qtype} *last = q + npanels * depth * {bytes_per_depth} - 1;  /* the stream's last byte */
{many_rows}    for (int64_t p = 0; p < npanels; p++) {{  /* one panel of weights, read once per 4 rows */
        const {qtype} *qp = q + p * depth * {bytes_per_depth};
        const float *sp = scales + p * groups * 32;
        int64_t r = 0;
        for (; r + 4 <= rows; r += 4) {{
            tk_w{bits}_tile_{kind}(4, a + r * lda, lda, qp, last, sp, c + r * ldc + p * 32, ldc, depth, group);
        }}
        switch (rows - r) {{  /* a tile of constant height each: its sums stay in registers */
        case 3: tk_w{bits}_tile_{kind}(3, a + r * lda, lda, qp, last, sp, c + r * ldc + p * 32, ldc, depth, group); break;
        case 2: tk_w{bits}_tile_{kind}(2, a + r * lda, lda, qp, last, sp, c + r * ldc + p * 32, ldc, depth, group); break;
        case 1: tk_w{bits}_tile_{kind}(1, a + r * lda, lda, qp, last, sp, c + r * ldc + p * 32, ldc, depth, group); break;
        default: break;
        }}
    }}
}}
"""

INT_KINDS = ("avx512", "avx2", "portable")


def _stream_prefetch(ahead: StreamPrefetch | None, macro: str) -> str:
    """`#define macro(p)`: the weight stream's prefetch past p, clamped to `last` (the helper's last weight
    byte); nothing without `ahead`."""
    return ahead.clamped_macro(macro, "last") if ahead is not None else f"#undef {macro}\n#define {macro}(p) ((void)0)\n"


def int_weight_source(bits: int, kind: str, ahead: StreamPrefetch | None = None) -> str:
    """The C of `tk_w<bits>_matmul_<kind>` (bits 8, kind in INT_KINDS; int4: int4_weight_source); `ahead`:
    how the avx2 tile prefetches the weight stream (stream_prefetch.py), None for no prefetch."""
    if bits != 8:
        raise ValueError(f"float32 sums of dequantized weights are the int8 helper's; int{bits}: int4_weight_source")
    fields = dict(bits=bits, qtype="int8_t", kind=kind, bytes_per_depth=32)
    many_rows = ""
    if kind == "avx512":
        tile = _INCLUDE + _INT_TILE_AVX512.format(widen=_WIDEN[bits], table=_TABLE[bits], **fields)
    elif kind == "avx2":
        tile = (_INCLUDE + _stream_prefetch(ahead, f"TK_W{bits}_PREFETCH") + _INT_TILE_AVX2.format(**fields)
                + _INT8_ROWS_AVX2)
        many_rows = ("    if (rows >= TK_W8_FLOAT_ROWS) {  /* many rows: float tiles over dequantized blocks */\n"
                     "        tk_w8_rows_avx2(a, lda, rows, q, scales, npanels, depth, group, groups, c, ldc);\n"
                     "        return;\n"
                     "    }\n")
    else:
        tile = _INT_TILE_PORTABLE.format(portable_weight=_PORTABLE_WEIGHT[bits], **fields)
    return tile + _INT_DRIVER.format(many_rows=many_rows, **fields)


# ---- int4 weights x int8 activations ------------------------------------------------------------------
_INT4_QUANTIZE = r"""
#include <math.h>
#include <stdlib.h>
#include <string.h>
/* Rows of float32 a, quantized per group of depths to int8 (ir/ops/weight_only.quantize_rows):
 * aq[r][g * steps * 4 + t] (zero past a group's end), scale[r][g] = max|a| / 127 and
 * comp[r][g] = -8 * sum(aq) (what the stored q + 8 adds to a group's sum) */
static void tk_w4_quantize_rows_{kind}(const float *restrict a, int64_t lda, int64_t rows, int64_t depth,
                                      int64_t group, int64_t groups, int64_t steps, int8_t *restrict aq,
                                      float *restrict scale, int32_t *restrict comp)
{{
    for (int64_t r = 0; r < rows; r++) {{
        for (int64_t g = 0; g < groups; g++) {{
            const float *x = a + r * lda + g * group;
            const int64_t n = g * group + group < depth ? group : depth - g * group;
            int8_t *out = aq + (r * groups + g) * steps * 4;
            {quantize}
            memset(out + n, 0, (size_t)(steps * 4 - n));
            scale[r * groups + g] = amax / 127.0f;
            comp[r * groups + g] = -8 * sum;
        }}
    }}
}}
"""
# the same values both ways: max|x| is exact in any order, then rint(x * (127 / max|x|)) per element
_INT4_QUANTIZE_SCALAR = """float amax = 0.0f;
            for (int64_t k = 0; k < n; k++) amax = fmaxf(amax, fabsf(x[k]));
            const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
            int32_t sum = 0;
            for (int64_t k = 0; k < n; k++) {{
                const float v = fminf(fmaxf(rintf(x[k] * inverse), -127.0f), 127.0f);
                out[k] = (int8_t)v;
                sum += (int32_t)v;
            }}"""
_INT4_QUANTIZE_AVX512 = """__m512 top = _mm512_setzero_ps();
            for (int64_t k = 0; k < n; k += 16) {{
                const __mmask16 m = n - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - k)) - 1u);
                top = _mm512_max_ps(top, _mm512_abs_ps(_mm512_maskz_loadu_ps(m, x + k)));
            }}
            const float amax = _mm512_reduce_max_ps(top);
            const __m512 inverse = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
            __m512i total = _mm512_setzero_si512();
            for (int64_t k = 0; k < n; k += 16) {{
                const __mmask16 m = n - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - k)) - 1u);
                const __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + k), inverse),
                                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                const __m512i q = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(127)),
                                                   _mm512_set1_epi32(-127));
                total = _mm512_add_epi32(total, q);
                _mm_mask_storeu_epi8(out + k, m, _mm512_cvtepi32_epi8(q));
            }}
            const int32_t sum = _mm512_reduce_add_epi32(total);"""

# 32-byte vectors: 8 floats a step, the last n % 8 in scalar C (the same values: max|x| is exact in any
# order, and both round x * inverse to nearest even)
_INT4_QUANTIZE_AVX2 = """__m256 top = _mm256_setzero_ps();
            const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
            int64_t k = 0;
            for (; k + 8 <= n; k += 8) top = _mm256_max_ps(top, _mm256_and_ps(_mm256_loadu_ps(x + k), magnitude));
            __m128 half = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
            half = _mm_max_ps(half, _mm_movehl_ps(half, half));
            float amax = _mm_cvtss_f32(_mm_max_ss(half, _mm_shuffle_ps(half, half, 1)));
            for (int64_t t = k; t < n; t++) amax = fmaxf(amax, fabsf(x[t]));
            const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
            const __m256 scaled = _mm256_set1_ps(inverse);
            const __m256i first_dwords = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
            __m256i total = _mm256_setzero_si256();
            for (k = 0; k + 8 <= n; k += 8) {{
                const __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k), scaled),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                const __m256i q = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(127)),
                                                   _mm256_set1_epi32(-127));
                total = _mm256_add_epi32(total, q);
                /* 8 int32 -> 8 bytes: packs within each 128-bit lane, then the lanes' first dwords together */
                const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q, q), _mm256_setzero_si256());
                _mm_storel_epi64((__m128i *)(out + k),
                                 _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(bytes, first_dwords)));
            }}
            __m128i lanes = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
            lanes = _mm_add_epi32(lanes, _mm_shuffle_epi32(lanes, 0x4e));
            int32_t sum = _mm_cvtsi128_si32(_mm_add_epi32(lanes, _mm_shuffle_epi32(lanes, 0xb1)));
            for (; k < n; k++) {{
                const float v = fminf(fmaxf(rintf(x[k] * inverse), -127.0f), 127.0f);
                out[k] = (int8_t)v;
                sum += (int32_t)v;
            }}"""

_INT4_TILE = r"""
/* int4 weights x int8 rows ({how}): c[i][0..31] = sum over groups g of w_scale[g][j] * a_scale[i][g] *
 * (sum over the group's steps of the u8 x s8 products + comp[i][g]), for mr rows */
static inline __attribute__((always_inline)) void tk_w4_tile_{kind}(
    const int mr, const int8_t *restrict aq, int64_t ldq, const float *restrict ascale,
    const int32_t *restrict comp, int64_t groups, const uint8_t *restrict q, const uint8_t *last, const float *restrict s,
    float *restrict c, int64_t ldc, int64_t steps)
{{
    (void)last;
    const int chains = mr <= 2 ? 2 : 1;  /* independent sums per output: latency, not throughput */
    const __m512i low = _mm512_set1_epi8(0x0f);
    {constants}
    __m512 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {{
        acc[i][0] = _mm512_setzero_ps();
        acc[i][1] = _mm512_setzero_ps();
    }}
    for (int64_t g = 0; g < groups; g++) {{
        __m512i sum[2][4][2];
#pragma GCC unroll 2
        for (int t = 0; t < chains; t++) {{
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {{
                sum[t][i][0] = _mm512_setzero_si512();
                sum[t][i][1] = _mm512_setzero_si512();
            }}
        }}
        const uint8_t *qg = q + g * steps * 64;
        const int8_t *ag = aq + g * steps * 4;
#define TK_W4_STEP(S, T) do {{ \
            const __m512i bytes = _mm512_loadu_si512((const void *)(qg + (S) * 64)); \
            const __m512i w0 = _mm512_and_si512(bytes, low);  /* columns 0..15, 4 depths each */ \
            const __m512i w1 = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low);  /* 16..31 */ \
            _Pragma("GCC unroll 4") \
            for (int i = 0; i < mr; i++) {{ \
                int32_t four; \
                memcpy(&four, ag + i * ldq + (S) * 4, 4); \
                const __m512i av = _mm512_set1_epi32(four); \
                {update} \
            }} \
        }} while (0)
        int64_t st = 0;
        for (; st + chains <= steps; st += chains) {{
#pragma GCC unroll 2
            for (int t = 0; t < chains; t++) TK_W4_STEP(st + t, t);
        }}
        for (; st < steps; st++) TK_W4_STEP(st, 0);
#undef TK_W4_STEP
        const __m512 s0 = _mm512_loadu_ps(s + g * 32), s1 = _mm512_loadu_ps(s + g * 32 + 16);
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {{
            const __m512i offset = _mm512_set1_epi32(comp[i * groups + g]);
            __m512i t0 = _mm512_add_epi32(sum[0][i][0], offset), t1 = _mm512_add_epi32(sum[0][i][1], offset);
            if (chains > 1) {{
                t0 = _mm512_add_epi32(t0, sum[1][i][0]);
                t1 = _mm512_add_epi32(t1, sum[1][i][1]);
            }}
            const __m512 sa = _mm512_set1_ps(ascale[i * groups + g]);
            acc[i][0] = _mm512_fmadd_ps(_mm512_mul_ps(s0, sa), _mm512_cvtepi32_ps(t0), acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(_mm512_mul_ps(s1, sa), _mm512_cvtepi32_ps(t1), acc[i][1]);
        }}
    }}
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {{
        _mm512_storeu_ps(c + i * ldc, acc[i][0]);
        _mm512_storeu_ps(c + i * ldc + 16, acc[i][1]);
    }}
}}
"""
_INT4_UPDATE = {
    "vnni": ("sum[T][i][0] = _mm512_dpbusd_epi32(sum[T][i][0], w0, av); \\\n"
             "                sum[T][i][1] = _mm512_dpbusd_epi32(sum[T][i][1], w1, av);"),
    "avx512bw": ("sum[T][i][0] = _mm512_add_epi32(sum[T][i][0], _mm512_madd_epi16(_mm512_maddubs_epi16(w0, av), "
                 "ones)); \\\n"
                 "                sum[T][i][1] = _mm512_add_epi32(sum[T][i][1], "
                 "_mm512_madd_epi16(_mm512_maddubs_epi16(w1, av), ones));"),
}
_INT4_CONSTANTS = {"vnni": "", "avx512bw": "const __m512i ones = _mm512_set1_epi16(1);"}
_INT4_HOW = {"vnni": "vpdpbusd", "avx512bw": "vpmaddubsw + vpmaddwd"}

_INT4_TILE_AVX2 = r"""
/* int4 weights x int8 rows (vpmaddubsw + vpmaddwd on 32-byte vectors; exact: two products of at most
 * 15 x 127): c[i][0..31] = sum over groups g of w_scale[g][j] * a_scale[i][g] * (sum over the group's
 * steps of the u8 x s8 products + comp[i][g]), for mr rows. A step's 64 bytes are two vectors: the low
 * nibbles of the first hold columns 0..7, of the second 8..15, their high nibbles 16..23 and 24..31 */
#define TK_W4_STEPS16 8  /* steps summed in 16-bit lanes: 8 x 3810 <= 32767 */
static inline __attribute__((always_inline)) void tk_w4_tile_avx2(
    const int mr, const int8_t *restrict aq, int64_t ldq, const float *restrict ascale,
    const int32_t *restrict comp, int64_t groups, const uint8_t *restrict q, const uint8_t *last, const float *restrict s,
    float *restrict c, int64_t ldc, int64_t steps)
{
    const __m256i low = _mm256_set1_epi8(0x0f);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {
        for (int h = 0; h < 4; h++) acc[i][h] = _mm256_setzero_ps();
    }
    for (int64_t g = 0; g < groups; g++) {
        __m256i sum[4][4];  /* [row][eight columns] */
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            for (int h = 0; h < 4; h++) sum[i][h] = _mm256_setzero_si256();
        }
        const uint8_t *qg = q + g * steps * 64;
        const int8_t *ag = aq + g * steps * 4;
        /* vpmaddubsw's pair sums stay within 2 x 15 x 127 = 3810, so eight steps add up in 16-bit lanes
           (at most 30480) before one vpmaddwd widens them: half the multiplies of widening every step */
        for (int64_t st = 0; st < steps;) {
            const int64_t end = st + TK_W4_STEPS16 < steps ? st + TK_W4_STEPS16 : steps;
            __m256i part[4][4];
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                for (int h = 0; h < 4; h++) part[i][h] = _mm256_setzero_si256();
            }
            for (; st < end; st++) {
                TK_W4_PREFETCH(qg + st * 64);
                const __m256i b0 = _mm256_loadu_si256((const __m256i *)(qg + st * 64));
                const __m256i b1 = _mm256_loadu_si256((const __m256i *)(qg + st * 64 + 32));
                const __m256i w[4] = {_mm256_and_si256(b0, low), _mm256_and_si256(b1, low),
                                      _mm256_and_si256(_mm256_srli_epi16(b0, 4), low),
                                      _mm256_and_si256(_mm256_srli_epi16(b1, 4), low)};
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++) {
                    int32_t four;
                    memcpy(&four, ag + i * ldq + st * 4, 4);
                    const __m256i av = _mm256_set1_epi32(four);
#pragma GCC unroll 4
                    for (int h = 0; h < 4; h++) part[i][h] = _mm256_add_epi16(part[i][h], _mm256_maddubs_epi16(w[h], av));
                }
            }
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                for (int h = 0; h < 4; h++) sum[i][h] = _mm256_add_epi32(sum[i][h], _mm256_madd_epi16(part[i][h], ones));
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const __m256i offset = _mm256_set1_epi32(comp[i * groups + g]);
            const __m256 sa = _mm256_set1_ps(ascale[i * groups + g]);
#pragma GCC unroll 4
            for (int h = 0; h < 4; h++) {
                const __m256 sw = _mm256_loadu_ps(s + g * 32 + h * 8);
                acc[i][h] = _mm256_fmadd_ps(_mm256_mul_ps(sw, sa),
                                            _mm256_cvtepi32_ps(_mm256_add_epi32(sum[i][h], offset)), acc[i][h]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {
        for (int h = 0; h < 4; h++) _mm256_storeu_ps(c + i * ldc + h * 8, acc[i][h]);
    }
}
"""

_INT4_TILE_PORTABLE = r"""
/* int4 weights x int8 rows, plain C: the sums of the vector tiles (one chain) */
static inline void tk_w4_tile_portable(
    const int mr, const int8_t *restrict aq, int64_t ldq, const float *restrict ascale,
    const int32_t *restrict comp, int64_t groups, const uint8_t *restrict q, const uint8_t *last, const float *restrict s,
    float *restrict c, int64_t ldc, int64_t steps)
{
    (void)last;
    for (int i = 0; i < mr; i++) {
        float acc[32] = {0.0f};
        for (int64_t g = 0; g < groups; g++) {
            int32_t sum[32];
            for (int j = 0; j < 32; j++) sum[j] = comp[i * groups + g];
            for (int64_t st = 0; st < steps; st++) {
                const uint8_t *bytes = q + (g * steps + st) * 64;
                const int8_t *x = aq + i * ldq + (g * steps + st) * 4;
                for (int j = 0; j < 16; j++) {
                    for (int d = 0; d < 4; d++) {
                        sum[j] += (bytes[4 * j + d] & 15) * x[d];
                        sum[j + 16] += (bytes[4 * j + d] >> 4) * x[d];
                    }
                }
            }
            for (int j = 0; j < 32; j++) acc[j] += s[g * 32 + j] * ascale[i * groups + g] * (float)sum[j];
        }
        for (int j = 0; j < 32; j++) c[i * ldc + j] = acc[j];
    }
}
"""

_INT4_DRIVER = r"""
static void tk_w4_matmul_{kind}(const float *restrict a, int64_t lda, int64_t rows,
                               const uint8_t *restrict q, const float *restrict scales, int64_t npanels,
                               int64_t depth, int64_t group, int64_t groups, float *restrict c, int64_t ldc)
{{
    const int64_t steps = (group + 3) / 4;  /* 4-depth steps per group (ir/ops/weight_only.py) */
    const int64_t ldq = groups * steps * 4;
    /* one scratch buffer (the prelude's tk_alloc): the rows quantized, their scales, their compensations */
    const size_t aq_bytes = ((size_t)(rows * ldq) + 63) / 64 * 64, row_groups = (size_t)(rows * groups);
    unsigned char *scratch = (unsigned char *)tk_alloc(aq_bytes + row_groups * (sizeof(float) + sizeof(int32_t)),
                                                       "tk_w4_matmul_{kind}", "quantized rows");
    if (scratch == NULL) return;  /* tk_alloc reported it: the entry returns the error */
    int8_t *aq = (int8_t *)scratch;
    float *ascale = (float *)(scratch + aq_bytes);
    int32_t *comp = (int32_t *)(ascale + row_groups);
    tk_w4_quantize_rows_{kind}(a, lda, rows, depth, group, groups, steps, aq, ascale, comp);
    const uint8_t *last = q + npanels * groups * steps * 64 - 1;  /* the stream's last byte */
    for (int64_t p = 0; p < npanels; p++) {{  /* one panel of weights, read once per 4 rows */
        const uint8_t *qp = q + p * groups * steps * 64;
        const float *sp = scales + p * groups * 32;
        int64_t r = 0;
        for (; r + 4 <= rows; r += 4) {{
            tk_w4_tile_{kind}(4, aq + r * ldq, ldq, ascale + r * groups, comp + r * groups, groups, qp, last, sp,
                             c + r * ldc + p * 32, ldc, steps);
        }}
        switch (rows - r) {{  /* a tile of constant height each: its sums stay in registers */
        case 3: tk_w4_tile_{kind}(3, aq + r * ldq, ldq, ascale + r * groups, comp + r * groups, groups, qp, last, sp,
                                 c + r * ldc + p * 32, ldc, steps); break;
        case 2: tk_w4_tile_{kind}(2, aq + r * ldq, ldq, ascale + r * groups, comp + r * groups, groups, qp, last, sp,
                                 c + r * ldc + p * 32, ldc, steps); break;
        case 1: tk_w4_tile_{kind}(1, aq + r * ldq, ldq, ascale + r * groups, comp + r * groups, groups, qp, last, sp,
                                 c + r * ldc + p * 32, ldc, steps); break;
        default: break;
        }}
    }}
    tk_free(scratch);
}}
"""

INT4_KINDS = ("vnni", "avx512bw", "avx2", "portable")
INT4_512_KINDS = tuple(_INT4_UPDATE)  # the forms on 64-byte vectors


def int4_weight_source(kind: str, ahead: StreamPrefetch | None = None) -> str:
    """The C of `tk_w4_matmul_<kind>` (kind in INT4_KINDS); `ahead`: how the avx2 tile prefetches the
    weight stream (stream_prefetch.py), None for no prefetch."""
    if kind in INT4_512_KINDS:  # rows quantized with AVX-512 too
        rows, tile = _INT4_QUANTIZE_AVX512, _INCLUDE + _INT4_TILE.format(
            kind=kind, how=_INT4_HOW[kind], update=_INT4_UPDATE[kind], constants=_INT4_CONSTANTS[kind])
    elif kind == "avx2":
        rows, tile = _INT4_QUANTIZE_AVX2, _INCLUDE + _stream_prefetch(ahead, "TK_W4_PREFETCH") + _INT4_TILE_AVX2
    else:
        rows, tile = _INT4_QUANTIZE_SCALAR, _INT4_TILE_PORTABLE
    quantize = _INT4_QUANTIZE.format(kind=kind, quantize=rows.format())
    return (_INCLUDE if kind != "portable" else "") + quantize + tile + _INT4_DRIVER.format(kind=kind)


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

# Without 512-bit vectors (AVX2 and FMA: Zen 3, Haswell to Alder Lake, a virtual machine that hides
# AVX-512): each 16-column vector of pairs is two 256-bit halves, each widened as the avx512 kind does
# (even elements by a shift, odd ones by a mask), with the same two FMAs per pair and row. One chain
# unless a single row leaves registers to spare: 4 rows x 2 vectors x 2 halves is already 16 ymm sums.
_BF16_TILE_AVX2 = r"""
/* bf16 pairs: c[i][0..16 nv) = sum over pairs q of a[i][2q] * b[2q][j] + a[i][2q+1] * b[2q+1][j]
 * (bf16 widened to float32 by a shift or a mask in 256-bit halves, two FMAs) for mr rows of A,
 * itself given as bf16 pairs (one 32-bit word per pair) */
static inline __attribute__((always_inline)) void tk_bf16_mv_tile_avx2(
    const int mr, const int nv, const tk_bf16_pair *restrict a, int64_t lda, const uint16_t *restrict b,
    float *restrict c, int64_t ldc, int64_t pairs)
{
    const int chains = mr == 1 ? 2 : 1;
    const __m256i upper = _mm256_set1_epi32((int32_t)0xffff0000u);
    __m256 sum[2][4][4];  /* [chain][row][vector * 2 + half] */
#pragma GCC unroll 2
    for (int t = 0; t < 2; t++) {
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
#pragma GCC unroll 4
            for (int h = 0; h < 4; h++) sum[t][i][h] = _mm256_setzero_ps();
        }
    }
#define TK_BF16_MV_STEP(Q, T) do { \
        _Pragma("GCC unroll 4") \
        for (int h = 0; h < 2 * nv; h++) { \
            const __m256i bv = _mm256_loadu_si256((const __m256i *)(b + (Q) * 32 * nv + 16 * h)); \
            const __m256 b_even = _mm256_castsi256_ps(_mm256_slli_epi32(bv, 16)); \
            const __m256 b_odd = _mm256_castsi256_ps(_mm256_and_si256(bv, upper)); \
            _Pragma("GCC unroll 4") \
            for (int i = 0; i < mr; i++) { \
                const __m256i ap = _mm256_set1_epi32((int32_t)a[i * lda + (Q)]); \
                const __m256 a_even = _mm256_castsi256_ps(_mm256_slli_epi32(ap, 16)); \
                const __m256 a_odd = _mm256_castsi256_ps(_mm256_and_si256(ap, upper)); \
                sum[T][i][h] = _mm256_fmadd_ps(a_odd, b_odd, _mm256_fmadd_ps(a_even, b_even, sum[T][i][h])); \
            } \
        } \
    } while (0)
    int64_t q = 0;
    for (; q + chains <= pairs; q += chains) {
#pragma GCC unroll 2
        for (int t = 0; t < chains; t++) TK_BF16_MV_STEP(q + t, t);
    }
    for (; q < pairs; q++) TK_BF16_MV_STEP(q, 0);
#undef TK_BF16_MV_STEP
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {
#pragma GCC unroll 4
        for (int h = 0; h < 2 * nv; h++) {
            _mm256_storeu_ps(c + i * ldc + 8 * h, chains > 1 ? _mm256_add_ps(sum[0][i][h], sum[1][i][h])
                                                             : sum[0][i][h]);
        }
    }
}
"""

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
static void tk_bf16_matvec_{kind}(const uint16_t *restrict a_bits, int64_t lda, int64_t rows,
                                 const uint16_t *restrict b, int64_t npanels, int64_t pairs, int64_t width,
                                 float *restrict c, int64_t ldc)
{{
    const tk_bf16_pair *restrict a = (const tk_bf16_pair *)a_bits;  /* A's rows as pairs; lda counts pairs */
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

BF16_KINDS = ("dpbf16", "avx512", "avx2", "portable")


# A's pairs are a bfloat16 buffer read as 32-bit words: the type may alias the 16-bit stores that wrote
# them (else GCC may take those stores as dead once the helper is inlined)
_PAIR_TYPE = "typedef uint32_t tk_bf16_pair __attribute__((may_alias));\n"


def bf16_matvec_source(kind: str) -> str:
    """The C of `tk_bf16_matvec_<kind>` (kind in BF16_KINDS)."""
    if kind == "portable":
        tile = "#include <string.h>\n" + _BF16_TILE_PORTABLE
    elif kind == "avx2":
        tile = _INCLUDE + _BF16_TILE_AVX2
    else:
        tile = _INCLUDE + _BF16_TILE.format(kind=kind, how=_BF16_HOW[kind], prepare_b=_BF16_PREPARE[kind],
                                            update=_BF16_UPDATE[kind])
    return _PAIR_TYPE + tile + _BF16_DRIVER.format(kind=kind)
