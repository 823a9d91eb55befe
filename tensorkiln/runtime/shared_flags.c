/* Sequence flags in memory that ranks of one node share: a rank publishes how far it has got (a
 * release store of a call's number) and waits until every other rank has got as far (acquire loads).
 * Each flag sits on its own 64-byte line, so a rank's spinning reads never contend with a write to
 * anything but the flag it waits for. */
#define _POSIX_C_SOURCE 200809L  /* nanosleep, clock_gettime */
#include <stdint.h>
#include <sched.h>
#include <time.h>

void tk_flag_publish(int64_t *flag, int64_t value)
{
    __atomic_store_n(flag, value, __ATOMIC_RELEASE);
}

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Wait until the flag of every rank but `self` (*flags[r], r < size) reaches `target`.
 * After `polls_before_sleep` polls each further poll first sleeps (a microsecond asked for, the timer's
 * slack more), as MPICH's heavy yield does: a waiting rank on a core shared with other work leaves the
 * run queue, so the rank it waits for gets its time. Before, one poll in 1024 yields (sched_yield, as
 * MPICH's light yield: it returns at once when nothing else wants the core). Returns the lowest rank
 * still short of `target` after `timeout_seconds`, or -1 once every rank has arrived. */
int tk_flag_wait(int64_t *const *flags, int size, int self, int64_t target,
                 int64_t polls_before_sleep, double timeout_seconds)
{
    const struct timespec nap = {0, 1000};
    double deadline = 0.0;
    for (int64_t poll = 0;; ++poll) {
        int late = -1;
        for (int r = 0; r < size && late < 0; ++r)
            if (r != self && __atomic_load_n(flags[r], __ATOMIC_ACQUIRE) < target)
                late = r;
        if (late < 0)
            return -1;
        if (poll >= polls_before_sleep)
            nanosleep(&nap, 0);
        else if ((poll & 1023) == 1023)
            sched_yield();
        else
            relax();
        if ((poll & 4095) == 4095 || poll >= polls_before_sleep) {  /* the clock now and then (or after a sleep) */
            double now = seconds_now();
            if (deadline == 0.0)
                deadline = now + timeout_seconds;
            else if (now > deadline)
                return late;
        }
    }
}
