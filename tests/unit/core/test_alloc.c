/* Unit tests for the counting, failure-injecting allocator. */
#include <stdint.h>

#include "core/alloc.h"
#include "test.h"

static void test_counts(void)
{
    infd_alloc_stats a = infd_alloc_get_stats();
    void *p = infd_malloc(10);
    void *q = infd_calloc(3, 8);
    ASSERT_TRUE(p && q);
    infd_alloc_stats b = infd_alloc_get_stats();
    ASSERT_EQ_U64(b.n_allocs - a.n_allocs, 2);
    infd_free(p);
    infd_free(q);
    infd_free(NULL);
    infd_alloc_stats c = infd_alloc_get_stats();
    ASSERT_EQ_U64(c.n_frees - b.n_frees, 2);
}

static void test_zero_sizes_fail(void)
{
    ASSERT_TRUE(infd_malloc(0) == NULL);
    ASSERT_TRUE(infd_calloc(0, 4) == NULL);
    ASSERT_TRUE(infd_aligned_alloc(64, 0) == NULL);
}

static void test_aligned(void)
{
    for (size_t align = 8; align <= 4096; align *= 2) {
        void *p = infd_aligned_alloc(align, 100);
        ASSERT_TRUE(p != NULL);
        ASSERT_EQ_U64((uintptr_t)p % align, 0);
        infd_free(p);
    }
}

static void test_fault_injection_nth(void)
{
    infd_alloc_fail_after(3);
    void *a = infd_malloc(1);
    void *b = infd_malloc(1);
    ASSERT_FALSE(infd_alloc_injected_fired());
    void *c = infd_malloc(1);
    void *d = infd_malloc(1);
    ASSERT_TRUE(a && b && !c && d);
    ASSERT_TRUE(infd_alloc_injected_fired());
    infd_free(a);
    infd_free(b);
    infd_free(d);
    infd_alloc_fail_after(0);
}

static void test_realloc_failure_keeps_block(void)
{
    char *p = infd_malloc(4);
    ASSERT_TRUE(p != NULL);
    memcpy(p, "abc", 4);
    infd_alloc_fail_after(1);
    char *q = infd_realloc(p, 1 << 20);
    ASSERT_TRUE(q == NULL);
    ASSERT_STR_EQ(p, "abc");
    q = infd_realloc(p, 8);
    ASSERT_TRUE(q != NULL);
    ASSERT_STR_EQ(q, "abc");
    infd_free(q);
}

static void test_strdup(void)
{
    char *s = infd_strdup("hello");
    char *t = infd_strndup("hello", 3);
    ASSERT_STR_EQ(s, "hello");
    ASSERT_STR_EQ(t, "hel");
    infd_free(s);
    infd_free(t);
    infd_alloc_fail_after(1);
    ASSERT_TRUE(infd_strdup("x") == NULL);
}

TEST_MAIN(test_counts, test_zero_sizes_fail, test_aligned, test_fault_injection_nth,
          test_realloc_failure_keeps_block, test_strdup)
