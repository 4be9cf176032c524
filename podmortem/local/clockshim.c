/*
 * podmortem clock shim: make one "pod" believe its node's wall clock is off by N seconds.
 *
 * Why this and not libfaketime: libfaketime shifts every clock, CLOCK_MONOTONIC included, and
 * intercepts pthread_cond_timedwait & co.; Python's timed waits (and with them torchrun's agent
 * loop, the TCPStore client and gloo's timeouts) broke under it on this machine. A skewed node only
 * has a wrong *wall* clock, so this shim shifts CLOCK_REALTIME readings (clock_gettime with
 * CLOCK_REALTIME / CLOCK_REALTIME_COARSE, gettimeofday, time) and leaves every other clock alone.
 *
 * Load with LD_PRELOAD=<compiled .so>; the shift comes from PODMORTEM_CLOCK_SHIFT (float seconds,
 * negative = the clock runs behind). Built by podmortem/local/clockshim.py with the machine's gcc.
 * Python's time.time() calls clock_gettime through libc's PLT, so it is interposed; calls that go
 * straight to the vDSO from other libraries are not (not needed for our jobs).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long long shift_ns = 0;
static int (*real_clock_gettime)(clockid_t, struct timespec *) = 0;
static int (*real_gettimeofday)(struct timeval *, void *) = 0;

__attribute__((constructor)) static void podmortem_clockshim_init(void) {
    const char *s = getenv("PODMORTEM_CLOCK_SHIFT");
    if (s && *s) shift_ns = (long long)(strtod(s, 0) * 1e9);
    real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    real_gettimeofday = (int (*)(struct timeval *, void *))dlsym(RTLD_NEXT, "gettimeofday");
}

static void shift_timespec(struct timespec *tp) {
    long long ns = (long long)tp->tv_sec * 1000000000LL + tp->tv_nsec + shift_ns;
    long long sec = ns / 1000000000LL, rem = ns % 1000000000LL;
    if (rem < 0) { rem += 1000000000LL; sec -= 1; }
    tp->tv_sec = (time_t)sec;
    tp->tv_nsec = (long)rem;
}

int clock_gettime(clockid_t clk, struct timespec *tp) {
    if (!real_clock_gettime) podmortem_clockshim_init();
    int rc = real_clock_gettime(clk, tp);
    if (rc == 0 && tp && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE)) shift_timespec(tp);
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    if (!real_gettimeofday) podmortem_clockshim_init();
    int rc = real_gettimeofday(tv, tz);
    if (rc == 0 && tv) {
        struct timespec ts = {tv->tv_sec, (long)tv->tv_usec * 1000L};
        shift_timespec(&ts);
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000L;
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
