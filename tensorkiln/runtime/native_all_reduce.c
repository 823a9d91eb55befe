/* The runtime hook that generated code calls first (native_all_reduce.py): the shared-memory all-reduce of
 * a short vector (shared_all_reduce.py's one-phase path) in C, the rest handed to Python's hook.
 *
 * A call site's description is a string literal of its library, so its address names the call site:
 * Python registers the address of a start's and of a wait's description once their channel goes through
 * shared memory, and later calls with that address run here without entering Python. The steps are those
 * of SharedAllReduce (prepare and copy the operand into this rank's slot at the start; publish `arrived`,
 * wait for every rank's, reduce every slot in rank order into the output, publish `done` at the wait), on
 * the same segment, flags and call counter, so calls may alternate between this path and Python's. A
 * released library's addresses may come back with other descriptions: each entry keeps a copy of its
 * description's text, and a call whose text differs goes to Python, which registers the address afresh. */
#include <stdint.h>
#include <string.h>

typedef int (*tk_hook)(const char *, void *, const void *);
typedef void (*tk_failure)(int64_t site, int late, int64_t call);

enum { TK_F32, TK_F64, TK_I32, TK_I64 };
enum { TK_SUM, TK_MEAN, TK_MAX, TK_MIN };
enum { TK_START, TK_WAIT };

/* One shared all-reduce, laid out as native_all_reduce.py's Site: every pointer is into memory Python keeps. */
typedef struct {
    int64_t *calls;          /* the call counter, shared with SharedAllReduce */
    int64_t *const *arrived; /* each rank's flags */
    int64_t *const *done;
    char *const *slots;      /* each rank's operand slot */
    int64_t count;
    int64_t polls;           /* polls before a rank sleeps at every poll (the wait policy) */
    double timeout;
    int32_t size, rank, dtype, reduction;
    int64_t site;            /* its number, for the failure's message */
} tk_site;

int tk_flag_wait(int64_t *const *flags, int size, int self, int64_t target, int64_t polls_before_sleep,
                 double timeout_seconds);

#define TABLE 4096 /* call sites (a power of two); a full table leaves later sites to Python */
static const char *keys[TABLE];
static const char *texts[TABLE]; /* each key's description when registered (a copy Python keeps) */
static tk_site *sites[TABLE];
static int phases[TABLE];
static tk_hook fallback;
static tk_failure failed;
static int enabled = 1;

static uint64_t bucket(const char *what)
{
    return ((uint64_t)(uintptr_t)what >> 3) * 0x9E3779B97F4A7C15ull >> 52; /* 12 bits: TABLE */
}

void tk_native_set_fallback(tk_hook hook, tk_failure failure)
{
    fallback = hook;
    failed = failure;
}

void tk_native_set_enabled(int on)
{
    enabled = on;
}

/* Route the calls of description `what` (this address; `text`, a copy of it) to `site` as its start or
 * wait: 1, or 0 (table full). */
int tk_native_register(const char *what, const char *text, tk_site *site, int phase)
{
    for (uint64_t i = bucket(what), n = 0; n < TABLE; i = (i + 1) & (TABLE - 1), ++n) {
        if (keys[i] == 0 || keys[i] == what) {
            sites[i] = site;
            phases[i] = phase;
            texts[i] = text;
            __atomic_store_n(&keys[i], what, __ATOMIC_RELEASE);
            return 1;
        }
    }
    return 0;
}

static int find(const char *what)
{
    for (uint64_t i = bucket(what);; i = (i + 1) & (TABLE - 1)) {
        const char *key = __atomic_load_n(&keys[i], __ATOMIC_ACQUIRE);
        if (key == what)
            return (int)i;
        if (key == 0)
            return -1;
    }
}

/* out = slots[0] op slots[1] op ... in rank order (the bits numpy's ufuncs give), then / size for a mean.
 * max and min keep a NaN, as np.maximum and np.minimum do. */
#define REDUCE(T, MEAN)                                                                                   \
    {                                                                                                      \
        T *o = (T *)out;                                                                                   \
        const T *first = (const T *)s->slots[0];                                                           \
        memcpy(o, first, (size_t)s->count * sizeof(T));                                                    \
        for (int r = 1; r < s->size; ++r) {                                                                \
            const T *x = (const T *)s->slots[r];                                                           \
            if (s->reduction == TK_MAX)                                                                     \
                for (int64_t i = 0; i < s->count; ++i)                                                     \
                    o[i] = (o[i] != o[i] || o[i] >= x[i]) ? o[i] : x[i];                                    \
            else if (s->reduction == TK_MIN)                                                                \
                for (int64_t i = 0; i < s->count; ++i)                                                     \
                    o[i] = (o[i] != o[i] || o[i] <= x[i]) ? o[i] : x[i];                                    \
            else                                                                                           \
                for (int64_t i = 0; i < s->count; ++i)                                                     \
                    o[i] = o[i] + x[i];                                                                    \
        }                                                                                                  \
        if (MEAN && s->reduction == TK_MEAN)                                                                \
            for (int64_t i = 0; i < s->count; ++i)                                                         \
                o[i] = o[i] / (T)s->size;                                                                  \
    }

static void reduce(const tk_site *s, void *out)
{
    switch (s->dtype) {
    case TK_F32: REDUCE(float, 1) break;
    case TK_F64: REDUCE(double, 1) break;
    case TK_I32: REDUCE(int32_t, 0) break;
    default: REDUCE(int64_t, 0) break;
    }
}

static int item_bytes(int dtype)
{
    return dtype == TK_F32 || dtype == TK_I32 ? 4 : 8;
}

static int run(tk_site *s, int phase, void *out, const void *in)
{
    int64_t calls = *s->calls;
    if (phase == TK_START) { /* no rank still reads this rank's slot from the previous call */
        int late = tk_flag_wait(s->done, s->size, s->rank, calls, s->polls, s->timeout);
        if (late >= 0) {
            failed(s->site, late, calls);
            return 1;
        }
        memcpy(s->slots[s->rank], in, (size_t)s->count * (size_t)item_bytes(s->dtype));
        return 0;
    }
    int64_t call = calls + 1;
    *s->calls = call;
    __atomic_store_n(s->arrived[s->rank], call, __ATOMIC_RELEASE);
    int late = tk_flag_wait(s->arrived, s->size, s->rank, call, s->polls, s->timeout);
    if (late >= 0) {
        failed(s->site, late, call);
        return 1;
    }
    reduce(s, out);
    __atomic_store_n(s->done[s->rank], call, __ATOMIC_RELEASE);
    return 0;
}

/* What tk_set_runtime_hook gives every library. */
int tk_native_dispatch(const char *what, void *out, const void *in)
{
    if (enabled) {
        int i = find(what);
        if (i >= 0 && strcmp(texts[i], what) == 0)
            return run(sites[i], phases[i], out, in);
    }
    return fallback(what, out, in);
}
