"""STREAM's kernels in C, for the memory bandwidth one process and several processes at once reach.

copy (a = b), add (a = b + c) and triad (a = b + 3 c) as STREAM defines them, each one pass over
float32 arrays; and read (the sum of a), the traffic of a decode step's matrix-vector products,
which read every weight once and write almost nothing. The read comes in three forms, to see what
raises the bandwidth a process reaches: the hardware prefetchers alone, software prefetch into L1
(prefetcht0) and non-temporal prefetch (prefetchnta, which keeps the stream out of the caches'
other ways), both PREFETCH_AHEAD bytes ahead. The triad also comes with non-temporal stores
(no read for ownership of the written lines). Built once with the system C compiler
(tensorkiln.runtime.c_compiler; AVX-512 where the machine has it, else the non-temporal triad is the
plain one) and called through ctypes. Beside them, the compute probe: independent FMA chains in
registers, no memory traffic, for the FLOP/s one process and several at once reach (two hardware
threads of one core share its FMA units, two cores do not).
"""
from __future__ import annotations

import ctypes

import numpy as np

from tensorkiln.runtime.c_compiler import compile_c

PREFETCH_AHEAD = 2048  # bytes: 32 cache lines ahead of the loads

# the FMA probe, shared with benchmarks/kernels.py's peak (which runs it on every thread)
FMA_CHAINS_C = r"""
#include <stdint.h>

/* Compute, not memory: CHAINS independent FMA chains in registers (the vector width GCC's vector
   type gets here), so a process runs at its core's FMA throughput; returns the flops done. */
#if defined(__AVX512F__)
#define FMA_VBYTES 64
#elif defined(__AVX__)
#define FMA_VBYTES 32
#else
#define FMA_VBYTES 16
#endif
/* >= latency x pipes (4 x 2) in flight, and with x and y within AVX2's 16 vector registers (16 chains
 * spilled there and measured half the peak) */
#define FMA_CHAINS 12
typedef float fma_vector __attribute__((vector_size(FMA_VBYTES)));

/* fp-contract: ISO C mode (-std=c99) keeps a * x + y a multiply and an add; the probe wants fused ones */
__attribute__((optimize("fp-contract=fast"))) double fma_chains(int64_t iterations) {
    fma_vector acc[FMA_CHAINS], x, y;
    for (int c = 0; c < FMA_CHAINS; c++)
        for (int l = 0; l < FMA_VBYTES / 4; l++) acc[c][l] = (float)(c + l) * 1e-3f;
    for (int l = 0; l < FMA_VBYTES / 4; l++) { x[l] = 0.999999f; y[l] = 1e-7f; }
    for (int64_t i = 0; i < iterations; i++) {
        #pragma GCC unroll 12
        for (int c = 0; c < FMA_CHAINS; c++) acc[c] = acc[c] * x + y;
    }
    float s = 0.0f;
    for (int c = 0; c < FMA_CHAINS; c++) for (int l = 0; l < FMA_VBYTES / 4; l++) s += acc[c][l];
    return (double)iterations * FMA_CHAINS * (FMA_VBYTES / 4) * 2 + (s == 12345.0f);  /* s keeps the loop */
}
"""

SOURCE = r"""
#include <stdint.h>
#include <immintrin.h>
#define AHEAD (%(ahead)d / 4) /* floats */

/* The sum of a[0..n): 4 independent accumulators of 16 lanes, one cache line a load.
   hint: 0 the hardware prefetchers alone, 1 prefetcht0, 2 prefetchnta, AHEAD floats ahead. */
#ifdef __AVX512F__
float stream_read(const float *a, int64_t n, int hint) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        if (hint == 1) {
            for (int line = 0; line < 64; line += 16) _mm_prefetch((const char *)(a + i + AHEAD + line), _MM_HINT_T0);
        } else if (hint == 2) {
            for (int line = 0; line < 64; line += 16) _mm_prefetch((const char *)(a + i + AHEAD + line), _MM_HINT_NTA);
        }
        s0 = _mm512_add_ps(s0, _mm512_loadu_ps(a + i));
        s1 = _mm512_add_ps(s1, _mm512_loadu_ps(a + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_loadu_ps(a + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_loadu_ps(a + i + 48));
    }
    float tail = 0.0f;
    for (; i < n; i++) tail += a[i];
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3))) + tail;
}
#else
float stream_read(const float *a, int64_t n, int hint) {  /* without AVX-512: the compiler's vectors */
    float s[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        /* the locality hint must be a compile-time constant */
        if (hint == 1) __builtin_prefetch(a + i + AHEAD, 0, 3);
        else if (hint == 2) __builtin_prefetch(a + i + AHEAD, 0, 0);
        for (int k = 0; k < 16; k++) s[k] += a[i + k];
    }
    float total = 0.0f;
    for (int k = 0; k < 16; k++) total += s[k];
    for (; i < n; i++) total += a[i];
    return total;
}
#endif

""" + FMA_CHAINS_C + r"""
void stream_copy(float *restrict a, const float *restrict b, int64_t n) {
    for (int64_t i = 0; i < n; i++) a[i] = b[i];
}

void stream_add(float *restrict a, const float *restrict b, const float *restrict c, int64_t n) {
    for (int64_t i = 0; i < n; i++) a[i] = b[i] + c[i];
}

/* nontemporal: stores that bypass the caches (no read for ownership); a must be 64-byte aligned */
void stream_triad(float *restrict a, const float *restrict b, const float *restrict c, float s, int64_t n,
                  int nontemporal) {
    int64_t i = 0;
#ifdef __AVX512F__
    if (nontemporal) {
        for (; i + 16 <= n; i += 16)
            _mm512_stream_ps(a + i, _mm512_fmadd_ps(_mm512_set1_ps(s), _mm512_loadu_ps(c + i), _mm512_loadu_ps(b + i)));
        _mm_sfence();
    }
#endif
    for (; i < n; i++) a[i] = b[i] + s * c[i];
}
"""

KERNELS = ("copy", "add", "triad", "triad, non-temporal stores", "read", "read, prefetcht0", "read, prefetchnta")
BYTES_PER_ELEMENT = {"copy": 8, "add": 12, "triad": 12, "triad, non-temporal stores": 12, "read": 4,
                     "read, prefetcht0": 4, "read, prefetchnta": 4}


class StreamKernels:
    """The compiled kernels over three float32 arrays of `elements` each (64-byte aligned); each kernel
    is checked against numpy on an odd size (a tail past the vectors) before anything is timed."""

    def __init__(self, elements: int, check: bool = True):
        library = compile_c(SOURCE % {"ahead": PREFETCH_AHEAD})
        self._lib = ctypes.CDLL(library.path)
        for name in ("stream_read", "stream_copy", "stream_add", "stream_triad"):
            getattr(self._lib, name).restype = ctypes.c_float if name == "stream_read" else None
        self._lib.fma_chains.restype = ctypes.c_double
        self._lib.fma_chains.argtypes = [ctypes.c_int64]
        if check:
            StreamKernels(1037, check=False).check()
        self.elements = elements
        self._raw = [np.empty(elements + 16, np.float32) for _ in range(3)]  # 16 to spare for the alignment
        self.a, self.b, self.c = (aligned(raw, elements) for raw in self._raw)
        self.a[:], self.b[:], self.c[:] = 0.0, 1.0, 2.0  # touch every page before timing

    def run(self, kernel: str) -> None:
        """One pass of `kernel` (one of KERNELS)."""
        n = ctypes.c_int64(self.elements)
        a, b, c = (ctypes.c_void_p(x.ctypes.data) for x in (self.a, self.b, self.c))
        if kernel == "copy":
            self._lib.stream_copy(a, b, n)
        elif kernel == "add":
            self._lib.stream_add(a, b, c, n)
        elif kernel.startswith("triad"):
            self._lib.stream_triad(a, b, c, ctypes.c_float(3.0), n, ctypes.c_int(kernel != "triad"))
        else:
            hint = {"read": 0, "read, prefetcht0": 1, "read, prefetchnta": 2}[kernel]
            self._lib.stream_read(b, n, ctypes.c_int(hint))


    def fma_flops(self, iterations: int) -> float:
        """Run the FMA chains `iterations` times (registers only, no memory traffic); the flops done."""
        return float(self._lib.fma_chains(ctypes.c_int64(iterations)))

    def check(self) -> None:
        """Each kernel's result against numpy on random values (raises AssertionError on a wrong one)."""
        rng = np.random.default_rng(0)
        self.b[:], self.c[:] = rng.standard_normal(self.elements), rng.standard_normal(self.elements)
        want = {"copy": self.b, "add": self.b + self.c, "triad": self.b + 3 * self.c}
        for kernel in KERNELS:
            self.a[:] = np.nan
            if kernel.startswith("read"):
                hint = {"read": 0, "read, prefetcht0": 1, "read, prefetchnta": 2}[kernel]
                got = self._lib.stream_read(ctypes.c_void_p(self.b.ctypes.data), ctypes.c_int64(self.elements),
                                            ctypes.c_int(hint))
                np.testing.assert_allclose(got, self.b.sum(dtype=np.float64), rtol=1e-4, atol=1e-3, err_msg=kernel)
            else:
                self.run(kernel)
                np.testing.assert_allclose(self.a, want[kernel.split(",")[0]], rtol=1e-6, atol=1e-6, err_msg=kernel)


def aligned(raw: np.ndarray, elements: int) -> np.ndarray:
    """The 64-byte aligned `elements` of `raw` (which has 16 floats to spare)."""
    shift = (-raw.ctypes.data) % 64 // 4
    return raw[shift:shift + elements]
