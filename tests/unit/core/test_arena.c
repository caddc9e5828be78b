/* Unit tests for the bump arena. */
#include <stdint.h>

#include "core/alloc.h"
#include "core/arena.h"
#include "test.h"

static void test_alignment_and_distinct(void)
{
    infd_arena a;
    infd_arena_init(&a, 1024);
    char *prev = NULL;
    for (size_t align = 1; align <= 256; align *= 2) {
        char *p = infd_arena_alloc(&a, 3, align);
        ASSERT_TRUE(p != NULL);
        ASSERT_EQ_U64((uintptr_t)p % align, 0);
        ASSERT_TRUE(p != prev);
        memset(p, 0xab, 3);
        prev = p;
    }
    ASSERT_TRUE(infd_arena_alloc(&a, 0, 8) == NULL);
    infd_arena_fini(&a);
}

static void test_large_and_many(void)
{
    infd_arena a;
    infd_arena_init(&a, 256);
    void *big = infd_arena_alloc(&a, 10000, 64);
    ASSERT_TRUE(big != NULL);
    memset(big, 1, 10000);
    for (int i = 0; i < 1000; i++) {
        int *p = infd_arena_alloc(&a, sizeof(int), 0);
        ASSERT_TRUE(p != NULL);
        *p = i;
    }
    ASSERT_GE_U64(infd_arena_used_bytes(&a), 10000 + 1000 * sizeof(int));
    ASSERT_GE_U64(infd_arena_capacity_bytes(&a), infd_arena_used_bytes(&a));
    infd_arena_fini(&a);
    infd_arena_fini(&a); /* idempotent */
}

/* The same cycle after a reset allocates nothing: chunks are coalesced. */
static void test_reset_reuses_memory(void)
{
    infd_arena a;
    infd_arena_init(&a, 512);
    for (int round = 0; round < 5; round++) {
        infd_alloc_stats before = infd_alloc_get_stats();
        for (int i = 0; i < 200; i++) {
            char *p = infd_arena_alloc(&a, 37, 8);
            ASSERT_TRUE(p != NULL);
            memset(p, round, 37);
        }
        char *s = infd_arena_strdup(&a, "request scratch");
        ASSERT_STR_EQ(s, "request scratch");
        infd_alloc_stats after = infd_alloc_get_stats();
        if (round >= 1)
            ASSERT_EQ_U64(after.n_allocs - before.n_allocs, 0);
        infd_arena_reset(&a);
        ASSERT_EQ_U64(infd_arena_used_bytes(&a), 0);
    }
    infd_arena_fini(&a);
}

static void test_calloc_zeroes(void)
{
    infd_arena a;
    infd_arena_init(&a, 0);
    unsigned char *p = infd_arena_alloc(&a, 64, 0);
    memset(p, 0xff, 64);
    infd_arena_reset(&a);
    unsigned char *q = infd_arena_calloc(&a, 64, 0);
    ASSERT_TRUE(q == p); /* same memory after reset */
    for (int i = 0; i < 64; i++)
        ASSERT_EQ_U64(q[i], 0);
    infd_arena_fini(&a);
}

static void test_out_of_memory(void)
{
    infd_arena a;
    infd_arena_init(&a, 128);
    infd_alloc_fail_after(1);
    ASSERT_TRUE(infd_arena_alloc(&a, 16, 0) == NULL);
    ASSERT_TRUE(infd_arena_alloc(&a, 16, 0) != NULL);          /* recovers */
    ASSERT_TRUE(infd_arena_alloc(&a, (size_t)-1, 64) == NULL); /* overflow, no crash */
    infd_arena_fini(&a);
}

TEST_MAIN(test_alignment_and_distinct, test_large_and_many, test_reset_reuses_memory,
          test_calloc_zeroes, test_out_of_memory)
