/* Unit tests for the fixed thread pool. */
#include <pthread.h>
#include <stdatomic.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/pool.h"
#include "test.h"

enum { N_ITEMS = 20000 };

static _Atomic int hits[N_ITEMS];

static void mark(void *arg, int64_t i)
{
    (void)arg;
    atomic_fetch_add(&hits[i], 1);
}

static void test_parallel_for_covers_each_index_once(void)
{
    infd_pool *pool = NULL;
    ASSERT_STATUS(infd_pool_create(3, 0, &pool, NULL), INFD_STATUS_OK);
    ASSERT_EQ_INT(infd_pool_size(pool), 3);
    for (int round = 0; round < 20; round++) {
        memset(hits, 0, sizeof(hits));
        infd_pool_parallel_for(pool, N_ITEMS, mark, NULL);
        for (int i = 0; i < N_ITEMS; i++) {
            if (atomic_load(&hits[i]) != 1) {
                infd_pool_destroy(pool);
                TEST_FAIL_("round %d: index %d ran %d times", round, i, atomic_load(&hits[i]));
            }
        }
    }
    infd_pool_parallel_for(pool, 0, mark, NULL);
    infd_pool_destroy(pool);
}

static void test_parallel_for_allocates_nothing(void)
{
    infd_pool *pool = NULL;
    ASSERT_STATUS(infd_pool_create(2, 0, &pool, NULL), INFD_STATUS_OK);
    infd_pool_parallel_for(pool, 100, mark, NULL); /* warm up */
    infd_alloc_stats before = infd_alloc_get_stats();
    for (int i = 0; i < 1000; i++)
        infd_pool_parallel_for(pool, 64, mark, NULL);
    infd_alloc_stats after = infd_alloc_get_stats();
    infd_pool_destroy(pool);
    ASSERT_EQ_U64(after.n_allocs - before.n_allocs, 0);
}

typedef struct caller_arg {
    infd_pool *pool;
    _Atomic int64_t sum;
} caller_arg;

static void add_index(void *arg, int64_t i)
{
    caller_arg *c = arg;
    atomic_fetch_add(&c->sum, i);
}

static void *caller_main(void *arg)
{
    caller_arg *c = arg;
    for (int i = 0; i < 200; i++)
        infd_pool_parallel_for(c->pool, 100, add_index, c);
    return NULL;
}

/* Several threads may call parallel_for on one pool at once. */
static void test_concurrent_callers(void)
{
    infd_pool *pool = NULL;
    ASSERT_STATUS(infd_pool_create(2, 0, &pool, NULL), INFD_STATUS_OK);
    caller_arg args[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        args[i].pool = pool;
        atomic_init(&args[i].sum, 0);
        pthread_create(&th[i], NULL, caller_main, &args[i]);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    infd_pool_destroy(pool);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ_I64(atomic_load(&args[i].sum), 200 * (99 * 100 / 2));
}

static _Atomic int task_count;

static void count_task(void *arg)
{
    (void)arg;
    atomic_fetch_add(&task_count, 1);
}

static void test_submit_and_wait(void)
{
    infd_pool *pool = NULL;
    ASSERT_STATUS(infd_pool_create(2, 64, &pool, NULL), INFD_STATUS_OK);
    atomic_store(&task_count, 0);
    int submitted = 0;
    for (int i = 0; i < 1000; i++) {
        if (infd_pool_submit(pool, count_task, NULL, NULL) == INFD_STATUS_OK)
            submitted++;
        else
            infd_pool_wait_idle(pool);
    }
    infd_pool_wait_idle(pool);
    ASSERT_EQ_INT(atomic_load(&task_count), submitted);
    ASSERT_TRUE(submitted >= 64);
    infd_pool_destroy(pool);
}

static _Atomic int gate;

static void blocked_task(void *arg)
{
    (void)arg;
    while (!atomic_load(&gate))
        infd_clock_sleep_us(100);
}

static void test_full_ring_is_an_error(void)
{
    infd_pool *pool = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(infd_pool_create(1, 2, &pool, NULL), INFD_STATUS_OK);
    atomic_store(&gate, 0);
    ASSERT_STATUS(infd_pool_submit(pool, blocked_task, NULL, NULL), INFD_STATUS_OK);
    /* Wait until the worker has taken the first task off the ring. */
    for (int i = 0; i < 1000; i++) {
        infd_clock_sleep_us(1000);
        if (infd_pool_submit(pool, blocked_task, NULL, NULL) == INFD_STATUS_OK)
            break;
    }
    infd_status st = INFD_STATUS_OK;
    for (int i = 0; i < 3 && st == INFD_STATUS_OK; i++)
        st = infd_pool_submit(pool, blocked_task, NULL, &err);
    atomic_store(&gate, 1);
    infd_pool_destroy(pool); /* runs what is queued, then joins */
    ASSERT_STATUS(st, INFD_STATUS_RESOURCE_EXHAUSTED);
    ASSERT_STR_HAS(err.msg, "full (2 tasks)");
}

static void test_zero_threads(void)
{
    infd_pool *pool = NULL;
    ASSERT_STATUS(infd_pool_create(0, 0, &pool, NULL), INFD_STATUS_OK);
    memset(hits, 0, sizeof(hits));
    infd_pool_parallel_for(pool, 10, mark, NULL);
    for (int i = 0; i < 10; i++)
        ASSERT_EQ_INT(atomic_load(&hits[i]), 1);
    ASSERT_STATUS(infd_pool_submit(pool, count_task, NULL, NULL), INFD_STATUS_UNAVAILABLE);
    infd_pool_destroy(pool);
    infd_pool_destroy(NULL);
}

/* Failing each allocation of create in turn: a clean error, no leak. */
static void test_create_fault_injection(void)
{
    for (int64_t n = 1;; n++) {
        infd_pool *pool = NULL;
        infd_error err = { 0 };
        infd_alloc_fail_after(n);
        infd_status st = infd_pool_create(2, 8, &pool, &err);
        int fired = infd_alloc_injected_fired();
        infd_alloc_fail_after(0);
        if (!fired) {
            ASSERT_STATUS(st, INFD_STATUS_OK);
            infd_pool_destroy(pool);
            ASSERT_TRUE(n > 1);
            return;
        }
        ASSERT_STATUS(st, INFD_STATUS_OUT_OF_MEMORY);
        ASSERT_TRUE(pool == NULL);
        ASSERT_STR_HAS(err.msg, "out of memory");
    }
}

TEST_MAIN(test_parallel_for_covers_each_index_once, test_parallel_for_allocates_nothing,
          test_concurrent_callers, test_submit_and_wait, test_full_ring_is_an_error,
          test_zero_threads, test_create_fault_injection)
