/*
 * clock.h - monotonic time for latency measurement and deadlines.
 *
 * CLOCK_MONOTONIC: never jumps with wall-clock changes; read through the
 * vDSO, about 20 ns, no system call. Thread-safe.
 */
#ifndef INFD_CORE_CLOCK_H
#define INFD_CORE_CLOCK_H

#include <stdint.h>

/* Nanoseconds since an arbitrary fixed point (boot). */
uint64_t infd_clock_ns(void);

/* Microseconds since the same point. */
uint64_t infd_clock_us(void);

/* Wall-clock nanoseconds since the Unix epoch, for timestamps only. */
uint64_t infd_clock_realtime_ns(void);

/* Sleeps at least `us` microseconds (restarted on EINTR). */
void infd_clock_sleep_us(uint64_t us);

#endif /* INFD_CORE_CLOCK_H */
