/*
 * test_device_prep.c - readying a device on a helper thread while a plan
 * reads its model (infd_device_prep_* in src/graph/plan.c), with stand-in
 * backends whose available/prepare slots record where and whether they
 * ran and fail on request. The CPU backend has neither slot, so without
 * these the helper thread never runs in CI.
 */
#include <pthread.h>
#include <string.h>

#include "graph/backend.h"
#include "graph/planfile.h"
#include "test.h"

static pthread_t seen_thread;
static int n_available, n_prepare, prepared_index;
static bool fail_available, fail_prepare;

static infd_status fake_available(infd_error *err)
{
    n_available++;
    if (fail_available)
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "no usable fake device: unplugged");
    return INFD_STATUS_OK;
}

static infd_status fake_prepare(int index, infd_error *err)
{
    n_prepare++;
    prepared_index = index;
    seen_thread = pthread_self();
    if (fail_prepare)
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "GPU %d: out of contexts", index);
    return INFD_STATUS_OK;
}

static const infd_backend_ops fake = { .version = INFD_BACKEND_OPS_VERSION,
                                       .size = sizeof(infd_backend_ops),
                                       .name = "fake",
                                       .available = fake_available,
                                       .prepare = fake_prepare };
static const infd_backend_ops bare = { .version = INFD_BACKEND_OPS_VERSION,
                                       .size = sizeof(infd_backend_ops),
                                       .name = "bare" };

static void reset(void)
{
    n_available = n_prepare = 0;
    prepared_index = -1;
    fail_available = fail_prepare = false;
    memset(&seen_thread, 0, sizeof(seen_thread));
}

/* Both slots run, prepare on another thread with the index given; a second
 * join is a no-op. */
static void test_prepares_on_a_helper_thread(void)
{
    infd_device_prep d;
    infd_error err = { 0 };
    reset();
    infd_device_prep_start_backend(&d, &fake, 3, true);
    ASSERT_STATUS(infd_device_prep_join(&d, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(n_available, 1);
    ASSERT_EQ_INT(n_prepare, 1);
    ASSERT_EQ_INT(prepared_index, 3);
    ASSERT_FALSE(pthread_equal(seen_thread, pthread_self()));
    ASSERT_STATUS(infd_device_prep_join(&d, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(n_prepare, 1);
}

/* Without `prepare`, only available runs. */
static void test_available_only(void)
{
    infd_device_prep d;
    reset();
    infd_device_prep_start_backend(&d, &fake, 0, false);
    ASSERT_STATUS(infd_device_prep_join(&d, NULL), INFD_STATUS_OK);
    ASSERT_EQ_INT(n_available, 1);
    ASSERT_EQ_INT(n_prepare, 0);
}

/* available's failure comes back with its message; prepare never runs. */
static void test_available_fails(void)
{
    infd_device_prep d;
    infd_error err = { 0 };
    reset();
    fail_available = true;
    infd_device_prep_start_backend(&d, &fake, 0, true);
    ASSERT_STATUS(infd_device_prep_join(&d, &err), INFD_STATUS_UNAVAILABLE);
    ASSERT_STR_EQ(err.msg, "no usable fake device: unplugged");
    ASSERT_FALSE(d.failed_in_prepare);
    ASSERT_EQ_INT(n_prepare, 0);
    /* Joined: the status stays readable, a second join returns OK. */
    ASSERT_STATUS(d.st, INFD_STATUS_UNAVAILABLE);
    ASSERT_STATUS(infd_device_prep_join(&d, &err), INFD_STATUS_OK);
}

/* prepare's failure is marked as such (the plan prefixes its path). */
static void test_prepare_fails(void)
{
    infd_device_prep d;
    infd_error err = { 0 };
    reset();
    fail_prepare = true;
    infd_device_prep_start_backend(&d, &fake, 1, true);
    ASSERT_STATUS(infd_device_prep_join(&d, &err), INFD_STATUS_UNAVAILABLE);
    ASSERT_STR_EQ(err.msg, "GPU 1: out of contexts");
    ASSERT_TRUE(d.failed_in_prepare);
}

/* A backend with neither slot (the CPU's) and no backend: nothing runs. */
static void test_nothing_to_do(void)
{
    infd_device_prep d;
    reset();
    infd_device_prep_start_backend(&d, &bare, 0, true);
    ASSERT_FALSE(d.threaded);
    ASSERT_STATUS(infd_device_prep_join(&d, NULL), INFD_STATUS_OK);
    infd_device_prep_start_backend(&d, NULL, 0, true);
    ASSERT_STATUS(infd_device_prep_join(&d, NULL), INFD_STATUS_OK);
    infd_device_prep_start(&d, INFD_DEVICE_CPU, 0, true);
    ASSERT_FALSE(d.threaded);
    ASSERT_STATUS(infd_device_prep_join(&d, NULL), INFD_STATUS_OK);
    ASSERT_EQ_INT(n_available + n_prepare, 0);
}

TEST_MAIN(test_prepares_on_a_helper_thread, test_available_only, test_available_fails,
          test_prepare_fails, test_nothing_to_do)
