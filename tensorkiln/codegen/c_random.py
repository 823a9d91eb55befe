"""The C helpers of the `philox` op (ir/ops/random.py): Philox4x32-10 and its float transforms.

Pure functions of (key, counter, stream), so a parallel or vectorized loop may
compute its elements in any order; the numpy reference (`philox4x32`,
`philox_values`) computes the same words and the same floats.
"""
from __future__ import annotations

C_RANDOM = r"""
/* ---- counter-based random numbers: Philox4x32-10 (Salmon et al., SC 2011) ---- */
static inline void tk_philox4x32(uint32_t c[4], uint64_t key)
{
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0];
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
        c[0] = n0; c[1] = (uint32_t)p1; c[2] = n2; c[3] = (uint32_t)p0;
        k0 += 0x9E3779B9u;  /* the Weyl sequence of round keys */
        k1 += 0xBB67AE85u;
    }
}

/* The four words at (counter, stream) under key: counter and stream as two 32-bit words each. */
static inline void tk_philox_words(uint32_t c[4], int64_t key, int64_t counter, int64_t stream)
{
    c[0] = (uint32_t)(uint64_t)counter; c[1] = (uint32_t)((uint64_t)counter >> 32);
    c[2] = (uint32_t)(uint64_t)stream; c[3] = (uint32_t)((uint64_t)stream >> 32);
    tk_philox4x32(c, (uint64_t)key);
}

/* [0, 1) from 53 bits: all of `high`, the top 21 of `low`. */
static inline double tk_unit53(uint32_t high, uint32_t low)
{
    return (double)(((uint64_t)high << 21) | (low >> 11)) * 0x1p-53;
}

static inline float tk_philox_uniform_f32(int64_t key, int64_t counter, int64_t stream)
{
    uint32_t c[4];
    tk_philox_words(c, key, counter, stream);
    return (float)(c[0] >> 8) * 0x1p-24f;  /* 24 bits: exact in float, below 1 */
}

static inline double tk_philox_uniform_f64(int64_t key, int64_t counter, int64_t stream)
{
    uint32_t c[4];
    tk_philox_words(c, key, counter, stream);
    return tk_unit53(c[0], c[1]);
}

/* Box-Muller in double: u1 in (0, 1] keeps log finite. */
static inline double tk_philox_normal_f64(int64_t key, int64_t counter, int64_t stream)
{
    uint32_t c[4];
    tk_philox_words(c, key, counter, stream);
    double u1 = 1.0 - tk_unit53(c[0], c[1]), u2 = tk_unit53(c[2], c[3]);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static inline float tk_philox_normal_f32(int64_t key, int64_t counter, int64_t stream)
{
    return (float)tk_philox_normal_f64(key, counter, stream);
}
"""
