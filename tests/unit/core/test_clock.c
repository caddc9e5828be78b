/* Unit tests for the monotonic clock. */
#include "core/clock.h"
#include "test.h"

static void test_monotonic(void)
{
    uint64_t prev = infd_clock_ns();
    for (int i = 0; i < 100000; i++) {
        uint64_t now = infd_clock_ns();
        ASSERT_LE_U64(prev, now);
        prev = now;
    }
}

static void test_sleep(void)
{
    uint64_t t0 = infd_clock_us();
    infd_clock_sleep_us(2000);
    uint64_t dt = infd_clock_us() - t0;
    ASSERT_GE_U64(dt, 2000);
}

static void test_units_agree(void)
{
    uint64_t ns = infd_clock_ns();
    uint64_t us = infd_clock_us();
    ASSERT_LE_U64(ns / 1000, us);
    ASSERT_TRUE(infd_clock_realtime_ns() > 1600000000ull * 1000000000ull);
}

TEST_MAIN(test_monotonic, test_sleep, test_units_agree)
