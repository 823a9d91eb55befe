"""Streaming (non-temporal) stores for the C backend: the `streamed` loop kind.

A plain store first reads the cache line it writes (so that the rest of
the line is there to merge with): for an output much larger than the
last-level cache that read is wasted traffic, a third of what a copy moves,
and the written lines evict data that is still used. A `streamed` loop

    for i in 0..n (streamed):
      dst[base + i] = src[i']         (float32, unit stride on both sides)

becomes one call of `tk_stream_f32`, which stores whole vectors with
non-temporal stores (`vmovntps`) from dst's first 64-byte boundary on. Such
stores are weakly ordered, so every thread that made them fences
(`tk_stream_fence`, an sfence) before the kernel's end: after the loop that
holds them, or for a parallel loop at the end of each thread's share of it.

Any other body of a `streamed` loop is written as a `vectorized` one. The
helpers and `<immintrin.h>` are emitted only into a file that streams, since
the header adds ~0.2 s to every compile.
"""
from __future__ import annotations

from typing import Optional

from tensorkiln.loops.expr import Expr, Load, Var, free_vars
from tensorkiln.loops.ir import Block, For, Stmt, Store, iter_stmts
from tensorkiln.loops.simplify import build_linear, linear_form

STREAM_HELPERS = r"""
/* ---- streaming stores: outputs far larger than the cache bypass it ----
 * tk_stream_f32 copies n floats; from dst's first 64-byte boundary on,
 * whole vectors go to memory with non-temporal stores, which neither read
 * the line first nor keep it in the cache. They are weakly ordered: each
 * thread calls tk_stream_fence before the data is read by another. */
#if defined(__SSE__)
#include <immintrin.h>
#endif
static inline void tk_stream_f32(float *restrict dst, const float *restrict src, int64_t n)
{
    int64_t i = 0;
    while (i < n && ((uintptr_t)(dst + i) & 63u) != 0) {  /* up to a 64-byte boundary */
        dst[i] = src[i];
        i++;
    }
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
    }
#elif defined(__AVX__)
    for (; i + 8 <= n; i += 8) {
        _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
    }
#elif defined(__SSE__)
    for (; i + 4 <= n; i += 4) {
        _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
    }
#endif
    for (; i < n; i++) {
        dst[i] = src[i];
    }
}
static inline void tk_stream_fence(void)
{
#if defined(__SSE__)
    _mm_sfence();
#endif
}
"""


def stream_copy(loop: For) -> Optional[tuple[Store, Expr, Expr]]:
    """(the store, dst's base index, src's base index) of a streamed float32 copy loop, or None."""
    if loop.kind != "streamed":
        return None
    body = loop.body
    if isinstance(body, Block) and len(body.stmts) == 1:
        body = body.stmts[0]
    if not (isinstance(body, Store) and isinstance(body.value, Load)):
        return None
    if body.buffer.dtype != "float32" or body.value.buffer.dtype != "float32":
        return None
    bases = [_unit_stride_base(index, loop.var) for index in (body.index, body.value.index)]
    if bases[0] is None or bases[1] is None:
        return None
    return body, bases[0], bases[1]


def streams(s: Stmt) -> bool:
    """True when `s` holds a loop written as a stream copy (its thread must fence afterwards)."""
    return any(isinstance(x, For) and stream_copy(x) is not None for x in iter_stmts(s))


def _unit_stride_base(index: Expr, var: Var) -> Optional[Expr]:
    """`base` of an index `base + var` where base does not depend on var, else None."""
    terms, constant = linear_form(index)
    if terms.get(var) != 1:
        return None
    rest = {t: c for t, c in terms.items() if t != var}
    if any(var.name in free_vars(t) for t in rest):
        return None
    return build_linear(rest, constant, index.dtype)

