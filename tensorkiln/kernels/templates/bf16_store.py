"""A convolution tile's bf16 store with `vcvtneps2bf16`: the epilogue in float32, then one conversion.

A convolution whose output is stored as bfloat16 (grouping.py: a value read only
by bf16 convolutions) ends each tile with, per output vector, the bias, the
activation and the rounding to bf16. Written as scalar C, the rounding
(`tk_f32_to_bf16`: a NaN test, an add with the carry of the low bit, a shift)
vectorizes into about a dozen instructions per 16 values, and GCC splits the
epilogue into 256-bit halves because the stored type is 16 bits wide: in a
depthwise layer (9 FMAs per output vector) the store cost about as much as the
arithmetic. With AVX512-BF16 the tile instead runs its epilogue in float32 in
place, in the accumulators, then converts each output vector with one
`vcvtneps2bf16` (`tk_f32_to_bf16_vectors`)::

    acc[i][o][:] = epilogue(acc[i][o][:])            float32, rounding left out
    for o < G: out[pixel i, block o][:] = vcvtneps2bf16(acc[i][o][:])   for i < T

`vcvtneps2bf16` rounds to nearest even and makes a NaN quiet, as
`tk_f32_to_bf16` does, but flushes subnormal inputs to zero: a vector holding
one (tested with `vfpclassps`, almost never) is converted again lane by lane by
`tk_f32_to_bf16`, so the stored bits are those of the scalar rounding and of
the reference interpreter. Without AVX512-BF16 (or with
TENSORKILN_NO_BF16_DOT=1), or for blocks of other than 16 channels, the store
stays the scalar one.
"""
from __future__ import annotations

from typing import Callable

from ...codegen.c_kernel import rounding_dropped
from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import For, NativeCall, Pointer, Stmt, Store, block
from ..target import cpu_target

CONVERT = "tk_f32_to_bf16_vectors"
CONVERT_SOURCE = r"""#include <immintrin.h>

/* dst[16k + j] = bf16(src[k * stride + j]) for k < vectors, j < 16, with vcvtneps2bf16 (rounding to
 * nearest even, NaN to a quiet NaN); a vector with a subnormal value, which the instruction flushes
 * to zero, is converted again lane by lane as tk_f32_to_bf16 rounds */
static inline void tk_f32_to_bf16_vectors(const float *restrict src, int64_t stride, uint16_t *restrict dst,
                                          int64_t vectors)
{
    for (int64_t k = 0; k < vectors; ++k) {
        __m512 v = _mm512_loadu_ps(src + k * stride);
        _mm256_storeu_si256((__m256i *)(dst + 16 * k), (__m256i)_mm512_cvtneps_pbh(v));
        if (__builtin_expect(_mm512_fpclass_ps_mask(v, 0x20) != 0, 0)) {  /* 0x20: subnormal */
            for (int64_t j = 0; j < 16; ++j) {
                dst[16 * k + j] = tk_f32_to_bf16(src[k * stride + j]);
            }
        }
    }
}
"""
VECTOR_LANES = 16  # float32 lanes of one vcvtneps2bf16


def uses_vector_store(out: Buffer, kb: int) -> bool:
    """The tile's bf16 store converts with vcvtneps2bf16: a bfloat16 output in blocks of 16, AVX512-BF16."""
    return out.dtype == "bfloat16" and kb == VECTOR_LANES and cpu_target().bf16_dot


def bf16_tile_store(out: Buffer, acc: Buffer, lanes: Callable[[Stmt], Stmt], slot: E.Expr, value: E.Expr,
                    block_var: E.Var, blocks: int, pixels: int, out_at: E.Expr) -> Stmt:
    """Store a tile of `pixels` x `blocks` vectors of 16 channels into bfloat16 `out` (see the module docstring).

    `lanes(stmt)` runs `stmt` over the tile's (pixel i, block o, lane j); `value` is the stored
    value of accumulator `slot` = (i*blocks + o)*16 + j; `out_at` the flat index in `out` of
    block `block_var`'s first pixel, lane 0, whose pixels follow one another.
    """
    finish = lanes(Store(acc, slot, rounding_dropped(value)))
    convert = NativeCall(CONVERT, (Pointer(acc, block_var * VECTOR_LANES), E.const(blocks * VECTOR_LANES),
                                   Pointer(out, out_at), E.const(pixels)), writes=(out.name,), source=CONVERT_SOURCE)
    return block(finish, For(block_var, E.const(blocks), convert, "unrolled"))
