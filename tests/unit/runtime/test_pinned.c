/* Unit tests for the pinned memory pool's allocator (runtime/pinned.c),
 * laid over ordinary memory: page-locking is the device backend's part and
 * is covered by the GPU tests (test_serve_gpu.py). The pool is one per
 * process, so the tests run in order on one pool. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "runtime/runtime.h"
#include "test.h"

#define PAGE  ((size_t)64 << 10)
#define PAGES 64

static uint8_t *base;

static void test_no_pool_hands_out_nothing(void)
{
    int local;
    ASSERT_TRUE(infd_pinned_alloc(100) == NULL);
    ASSERT_FALSE(infd_pinned_contains(&local, sizeof(local)));
    ASSERT_FALSE(infd_pinned_free(&local));
    void *s;
    size_t n;
    ASSERT_FALSE(infd_pinned_find(&local, &s, &n));
}

static void test_alloc_find_free(void)
{
    base = aligned_alloc(PAGE, PAGE * PAGES);
    ASSERT_TRUE(base != NULL);
    ASSERT_STATUS(rt_pinned_init_memory(base, PAGE * PAGES + 100, NULL), INFD_STATUS_OK);
    ASSERT_STATUS(rt_pinned_init_memory(base, PAGE * PAGES, NULL), INFD_STATUS_INVALID_ARGUMENT);
    uint8_t *a = infd_pinned_alloc(1);
    uint8_t *b = infd_pinned_alloc(PAGE + 1);
    uint8_t *c = infd_pinned_alloc(3 * PAGE);
    ASSERT_TRUE(a == base && b == base + PAGE && c == base + 3 * PAGE);
    ASSERT_TRUE(infd_pinned_contains(b, 2 * PAGE));
    ASSERT_TRUE(infd_pinned_contains(base + PAGE * PAGES - 1, 1));
    ASSERT_FALSE(infd_pinned_contains(base + PAGE * PAGES - 1, 2)); /* runs past the end */
    ASSERT_FALSE(infd_pinned_contains(base + PAGE * PAGES, 1));
    void *s = NULL;
    size_t n = 0;
    ASSERT_TRUE(infd_pinned_find(b + 70000, &s, &n));
    ASSERT_TRUE(s == b);
    ASSERT_EQ_U64(n, 2 * PAGE);
    ASSERT_TRUE(infd_pinned_free(b));
    ASSERT_FALSE(infd_pinned_find(b, &s, &n));
    /* Next fit: the hole b left is not taken while there is room after c. */
    uint8_t *d = infd_pinned_alloc(2 * PAGE);
    ASSERT_TRUE(d == base + 6 * PAGE);
    /* Filling up: 64 - 1 - 3 - 2 = 58 pages left, the hole of 2 among them. */
    int got = 0;
    void *more[PAGES];
    while ((more[got] = infd_pinned_alloc(PAGE)) != NULL)
        got++;
    ASSERT_EQ_INT(got, 58);
    ASSERT_TRUE(infd_pinned_alloc(1) == NULL);
    for (int i = 0; i < got; i++)
        ASSERT_TRUE(infd_pinned_free(more[i]));
    ASSERT_TRUE(infd_pinned_free(a));
    ASSERT_TRUE(infd_pinned_free(c));
    ASSERT_TRUE(infd_pinned_free(d));
    /* Everything free again: the whole pool in one piece, not one more. */
    ASSERT_TRUE(infd_pinned_alloc(PAGE * PAGES + 1) == NULL);
    uint8_t *all = infd_pinned_alloc(PAGE * PAGES);
    ASSERT_TRUE(all == base);
    ASSERT_TRUE(infd_pinned_free(all));
    /* Memory from elsewhere is the caller's to free. */
    void *m = malloc(16);
    ASSERT_FALSE(infd_pinned_free(m));
    free(m);
}

typedef struct worker {
    unsigned seed;
    int bad;
} worker;

/* Each thread allocates, stamps its allocations with its own byte and
 * checks them before freeing: an allocation handed out twice shows. */
static void *churn(void *arg)
{
    worker *w = arg;
    uint8_t *held[4] = { 0 };
    size_t len[4] = { 0 };
    uint8_t tag = (uint8_t)(w->seed & 0xff);
    for (int i = 0; i < 20000; i++) {
        int k = rand_r(&w->seed) % 4;
        if (held[k]) {
            for (size_t j = 0; j < len[k]; j += 4093)
                if (held[k][j] != tag)
                    w->bad++;
            if (!infd_pinned_free(held[k]))
                w->bad++;
            held[k] = NULL;
        } else {
            len[k] = 1 + (size_t)rand_r(&w->seed) % (3 * PAGE);
            held[k] = infd_pinned_alloc(len[k]);
            if (held[k])
                memset(held[k], tag, len[k]);
        }
    }
    for (int k = 0; k < 4; k++)
        if (held[k])
            infd_pinned_free(held[k]);
    return NULL;
}

static void test_threads_never_share_an_allocation(void)
{
    pthread_t t[4];
    worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){ .seed = 0x51u + (unsigned)i, .bad = 0 };
        ASSERT_EQ_INT(pthread_create(&t[i], NULL, churn, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 4; i++)
        ASSERT_EQ_INT(w[i].bad, 0);
    uint8_t *all = infd_pinned_alloc(PAGE * PAGES);
    ASSERT_TRUE(all == base); /* every page came back */
    infd_pinned_free(all);
}

TEST_MAIN(test_no_pool_hands_out_nothing, test_alloc_find_free,
          test_threads_never_share_an_allocation)
