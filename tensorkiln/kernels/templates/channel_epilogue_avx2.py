"""The per-channel epilogue helper in 256-bit vectors (AVX2 and FMA): channel_epilogue.py's chain, the same
operations in the same order, 8 channels a vector.

AVX2 has no masked byte loads or stores, so a vector of 8 channels is one inlined body over pointers at
its channels, called in place for whole vectors and on zero-padded copies for the channel tail.

An 8-bit output is stored 32 channels at a time where the row has them: each of the four vectors'
lanes holds the exact 8-bit value in its low byte (channel_epilogue.py's `_c_chain`), so masking the
lanes to that byte and packing with unsigned saturation twice (32 -> 16 -> 8 bits, which keeps every
value of 0..255) puts the 32 bytes in one vector, in an order that one permutation of its 32-bit
lanes undoes: four operations and one store per 32 channels where a vector stored alone takes a byte
shuffle, a permutation and a store for each 8.
"""
from __future__ import annotations

from .channel_epilogue import AVX2, ChannelEpilogue, _C_TYPES, _STEP_TYPES, _c_chain, _c_step, _first, _ops, _parameters

_SIDE_LOADS = {"float32": "_mm256_loadu_ps(side{i})",
               "uint8": "_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)side{i})))",
               "int8": "_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)side{i})))"}
# the low byte of each 32-bit lane, the 8 of them packed into the vector's first 8 bytes
_LOW_BYTES = ("const __m256i bytes = _mm256_shuffle_epi8(v8, _mm256_setr_epi8(\n"
              "                0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,\n"
              "                0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));\n"
              "    _mm_storel_epi64((__m128i *)out, _mm256_castsi256_si128(\n"
              "        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1))));")
WIDE = 32  # channels of one 8-bit store


def avx2_source(epilogue: ChannelEpilogue) -> str:
    """The C of the helper: out[r * ldo + c] = chain(tile[r * ldt + c] + comp[c]) for r < rows, c < cols."""
    ctype, name = _C_TYPES[epilogue.store_dtype], epilogue.function
    eight_bit = epilogue.store_dtype != "float32"
    loads = []
    for i, side in enumerate(epilogue.sides):
        loads.append(f"__m256 side_value{i} = {_SIDE_LOADS[side.dtype].format(i=i)};  "
                     f"/* side value {i}: {side.dtype} at the output's index */")
        loads += [_c_step(step, AVX2, "", f"side_value{i}") for step in side.steps]
    steps = "\n    ".join(s.replace("\n            ", "\n    ")
                          for s in loads + _c_chain(epilogue.steps, epilogue.store_dtype, AVX2, ""))
    channels = [f"channel{i}" for i in range(len(epilogue.operands))]
    sides = [(f"side{i}", _C_TYPES[side.dtype]) for i, side in enumerate(epilogue.sides)]
    at_c = "".join(f", {x} + c" for x in channels) + "".join(f", {x} + r * ldo + c" for x, _ in sides)
    padded = "".join(f", {x}_tail" for x in channels) + "".join(f", {x}_tail" for x, _ in sides)
    declare = "".join(f"\n            {_STEP_TYPES[b.dtype]} {x}_tail[8] = {{0}};"
                      for x, b in zip(channels, epilogue.operands)) + \
        "".join(f"\n            {t} {x}_tail[8] = {{0}};" for x, t in sides)
    copy_in = "".join(f"\n                {x}_tail[j] = {x}[c + j];" for x in channels) + \
        "".join(f"\n                {x}_tail[j] = {x}[r * ldo + c + j];" for x, _ in sides)
    parameters = f"const int32_t *restrict tile, const int32_t *restrict comp{_parameters(epilogue)}"
    if eight_bit:  # the chain returns the lanes; the callers store them
        chain = f"""static inline __attribute__((always_inline)) __m256i {name}_lanes({parameters})
{{
{_body(steps)}
    return v8;
}}

static inline __attribute__((always_inline)) void {name}_vector({parameters}, {ctype} *restrict out)
{{
    const __m256i v8 = {name}_lanes(tile, comp{_forward(channels, sides)});
    {_LOW_BYTES}
}}
"""
        wide = _wide_loop(name, at_c)
    else:
        chain = f"""static inline __attribute__((always_inline)) void {name}_vector({parameters}, {ctype} *restrict out)
{{
{_body(steps)}
    (void)v8;
    _mm256_storeu_ps(out, v);
}}
"""
        wide = ""
    return f"""#include <immintrin.h>
#include <math.h>
/* a convolution's epilogue, 8 channels a vector (AVX2): int32 sums + compensation -> {_first(epilogue)} -> {_ops(epilogue)}
 * (kernels/templates/channel_epilogue.py); the pointers point at the vector's 8 channels */
{chain}
static void {name}(
    const int32_t *restrict tile, int64_t ldt, const int32_t *restrict comp{_parameters(epilogue)},
    {ctype} *restrict out, int64_t ldo, int64_t rows, int64_t cols)
{{
    for (int64_t r = 0; r < rows; r++) {{
        int64_t c = 0;{wide}
        for (; c + 8 <= cols; c += 8) {{
            {name}_vector(tile + r * ldt + c, comp + c{at_c}, out + r * ldo + c);
        }}
        if (c < cols) {{  /* the last channels, fewer than 8: on zero-padded copies */
            int32_t tile_tail[8] = {{0}}, comp_tail[8] = {{0}};{declare}
            {ctype} out_tail[8];
            for (int64_t j = 0; j < cols - c; j++) {{
                tile_tail[j] = tile[r * ldt + c + j];
                comp_tail[j] = comp[c + j];{copy_in}
            }}
            {name}_vector(tile_tail, comp_tail{padded}, out_tail);
            for (int64_t j = 0; j < cols - c; j++) {{
                out[r * ldo + c + j] = out_tail[j];
            }}
        }}
    }}
}}
"""


def _body(steps: str) -> str:
    """The chain's C from the tile's sums to `v` (float32) or `v8` (8-bit values in int32 lanes)."""
    return f"""    const __m256i sums = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)tile),
                                          _mm256_loadu_si256((const __m256i *)comp));
    __m256 v = _mm256_cvtepi32_ps(sums);
    __m256i v8 = _mm256_setzero_si256();
    __m256d d0 = _mm256_setzero_pd(), d1 = d0;  /* float64 steps' halves */
    {steps}
    (void)v; (void)d0; (void)d1;"""


def _forward(channels: list[str], sides: list[tuple[str, str]]) -> str:
    return "".join(f", {x}" for x in channels) + "".join(f", {x}" for x, _ in sides)


def _wide_loop(name: str, at_c: str) -> str:
    """The row's channels 32 at a time: four vectors' low bytes packed into one 32-byte store."""
    calls = "\n".join(
        f"            const __m256i v{k} = {name}_lanes(tile + r * ldt + c + {8 * k}, comp + c + {8 * k}"
        f"{at_c.replace(' + c', f' + c + {8 * k}')});" for k in range(4))
    return f"""
        for (; c + {WIDE} <= cols; c += {WIDE}) {{
{calls}
            const __m256i low = _mm256_set1_epi32(255);  /* each lane's low byte: the 8-bit value */
            const __m256i v01 = _mm256_packus_epi32(_mm256_and_si256(v0, low), _mm256_and_si256(v1, low));
            const __m256i v23 = _mm256_packus_epi32(_mm256_and_si256(v2, low), _mm256_and_si256(v3, low));
            /* bytes in 4-byte groups 0 2 4 6 | 1 3 5 7 of the 32 channels' groups: back in order */
            const __m256i bytes = _mm256_packus_epi16(v01, v23);
            _mm256_storeu_si256((__m256i *)(out + r * ldo + c),
                                _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        }}"""


__all__ = ["WIDE", "avx2_source"]
