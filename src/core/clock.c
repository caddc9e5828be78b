/*
 * clock.c - thin wrappers over clock_gettime / clock_nanosleep.
 */
#include "core/clock.h"

#include <errno.h>
#include <time.h>

static uint64_t read_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t infd_clock_ns(void)
{
    return read_ns(CLOCK_MONOTONIC);
}

uint64_t infd_clock_us(void)
{
    return read_ns(CLOCK_MONOTONIC) / 1000u;
}

uint64_t infd_clock_realtime_ns(void)
{
    return read_ns(CLOCK_REALTIME);
}

void infd_clock_sleep_us(uint64_t us)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(us / 1000000u);
    ts.tv_nsec = (long)(us % 1000000u) * 1000;
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR) {
    }
}
