/* Unit tests for the growable text buffer. */
#include <stdint.h>

#include "core/alloc.h"
#include "core/strbuf.h"
#include "test.h"

static void test_empty(void)
{
    infd_strbuf b = { 0 };
    ASSERT_STR_EQ(infd_strbuf_str(&b), "");
    infd_strbuf_fini(&b); /* a no-op on a zeroed buffer */
    infd_strbuf_init(&b);
    size_t len = 99;
    char *s = infd_strbuf_take(&b, &len);
    ASSERT_STR_EQ(s, ""); /* an empty buffer still yields a string */
    ASSERT_EQ_U64(len, 0);
    infd_free(s);
}

static void test_put_grows(void)
{
    infd_strbuf b = { 0 };
    for (int i = 0; i < 10000; i++) {
        infd_strbuf_put(&b, "ab", 2);
        infd_strbuf_putc(&b, 'c');
        infd_strbuf_puts(&b, "de");
    }
    ASSERT_FALSE(b.oom);
    ASSERT_EQ_U64(b.len, 50000);
    ASSERT_LT_U64(b.len, b.cap);
    ASSERT_EQ_U64(strlen(b.data), b.len);
    ASSERT_TRUE(memcmp(b.data + 49995, "abcde", 5) == 0);
    infd_strbuf_put(&b, "x\0y", 3); /* any bytes, NULs included */
    ASSERT_EQ_U64(b.len, 50003);
    ASSERT_TRUE(memcmp(b.data + 50000, "x\0y", 4) == 0);
    infd_strbuf_fini(&b);
    ASSERT_TRUE(b.data == NULL && b.len == 0 && b.cap == 0);
}

static void test_printf(void)
{
    infd_strbuf b = { 0 };
    infd_strbuf_printf(&b, "%d-%s", 42, "x");
    ASSERT_STR_EQ(b.data, "42-x");
    /* Longer than any first capacity, and than what is left after it. */
    char line[5000];
    memset(line, 'y', sizeof(line) - 1);
    line[sizeof(line) - 1] = '\0';
    for (int i = 0; i < 50; i++)
        infd_strbuf_printf(&b, "[%s]", line);
    ASSERT_FALSE(b.oom);
    ASSERT_EQ_U64(b.len, 4 + 50 * 5001);
    ASSERT_EQ_U64(strlen(b.data), b.len);
    ASSERT_TRUE(b.data[4] == '[' && b.data[5004] == ']' && b.data[b.len - 1] == ']');
    infd_strbuf_printf(&b, "%s", "");
    ASSERT_EQ_U64(b.len, 4 + 50 * 5001);
    infd_strbuf_fini(&b);
}

static void test_reserve_then_write(void)
{
    infd_strbuf b = { 0 };
    ASSERT_TRUE(infd_strbuf_reserve(&b, 0));
    ASSERT_TRUE(b.data != NULL);
    ASSERT_STR_EQ(b.data, "");
    ASSERT_TRUE(infd_strbuf_reserve(&b, 1000));
    ASSERT_GE_U64(b.cap, 1001);
    char *before = b.data;
    for (int i = 0; i < 1000; i++)
        infd_strbuf_putc(&b, 'z');
    ASSERT_TRUE(b.data == before); /* reserved room is used without moving */
    infd_strbuf_fini(&b);
}

static void test_take_and_reset(void)
{
    infd_strbuf b = { 0 };
    infd_strbuf_puts(&b, "hello");
    size_t len = 0;
    char *s = infd_strbuf_take(&b, &len);
    ASSERT_STR_EQ(s, "hello");
    ASSERT_EQ_U64(len, 5);
    ASSERT_TRUE(b.data == NULL && b.len == 0 && b.cap == 0);
    infd_free(s);

    /* reset empties but keeps the memory: a reused buffer stops allocating. */
    for (int i = 0; i < 3000; i++)
        infd_strbuf_putc(&b, 'q');
    size_t cap = b.cap;
    infd_alloc_stats before = infd_alloc_get_stats();
    for (int round = 0; round < 100; round++) {
        infd_strbuf_reset(&b);
        ASSERT_STR_EQ(b.data, "");
        for (int i = 0; i < 3000; i++)
            infd_strbuf_putc(&b, 'q');
        infd_strbuf_printf(&b, "%d", round);
    }
    ASSERT_EQ_U64(infd_alloc_get_stats().n_allocs, before.n_allocs);
    ASSERT_EQ_U64(b.cap, cap);
    ASSERT_STR_EQ(b.data + 3000, "99");
    infd_strbuf_fini(&b);
}

static void test_oom_is_sticky(void)
{
    infd_strbuf b = { 0 };
    infd_strbuf_puts(&b, "kept");
    size_t cap = b.cap;
    infd_alloc_fail_after(1);
    char big[1000];
    memset(big, 'b', sizeof(big));
    while (b.cap == cap && !b.oom)
        infd_strbuf_put(&b, big, sizeof(big));
    ASSERT_TRUE(infd_alloc_injected_fired());
    ASSERT_TRUE(b.oom);
    size_t len = b.len;
    ASSERT_EQ_U64(strlen(b.data), len); /* still terminated */
    /* Later writes are dropped, even those that would fit. */
    infd_strbuf_putc(&b, 'x');
    infd_strbuf_puts(&b, "y");
    infd_strbuf_printf(&b, "%s", "z");
    ASSERT_EQ_U64(b.len, len);
    ASSERT_FALSE(infd_strbuf_reserve(&b, 0));
    /* take reports the failure and frees what was written. */
    size_t n = 99;
    ASSERT_TRUE(infd_strbuf_take(&b, &n) == NULL);
    ASSERT_EQ_U64(n, 0);
    ASSERT_TRUE(b.data == NULL && !b.oom);
}

static void test_oom_printf_and_reset(void)
{
    infd_strbuf b = { 0 };
    infd_strbuf_puts(&b, "ab");
    char line[2000];
    memset(line, 'p', sizeof(line) - 1);
    line[sizeof(line) - 1] = '\0';
    infd_alloc_fail_after(1);
    infd_strbuf_printf(&b, "%s", line); /* does not fit: the realloc fails */
    ASSERT_TRUE(infd_alloc_injected_fired());
    ASSERT_TRUE(b.oom);
    ASSERT_STR_EQ(b.data, "ab"); /* the truncated attempt is not left behind */
    /* reset clears the flag; the buffer works again. */
    infd_strbuf_reset(&b);
    ASSERT_FALSE(b.oom);
    infd_strbuf_printf(&b, "%s!", line);
    ASSERT_FALSE(b.oom);
    ASSERT_EQ_U64(b.len, 2000);
    infd_strbuf_fini(&b);
}

static void test_oom_first_allocation(void)
{
    /* Fail each allocation of a small document in turn: a clean NULL from
     * take, no leak, and success once nothing fails. */
    for (int64_t n = 1;; n++) {
        infd_strbuf b = { 0 };
        infd_alloc_fail_after(n);
        for (int i = 0; i < 200; i++)
            infd_strbuf_printf(&b, "line %d of the document\n", i);
        char *s = infd_strbuf_take(&b, NULL);
        int fired = infd_alloc_injected_fired();
        infd_alloc_fail_after(0);
        if (!fired) {
            ASSERT_TRUE(s != NULL);
            ASSERT_STR_HAS(s, "line 199 of the document\n");
            infd_free(s);
            break;
        }
        ASSERT_TRUE(s == NULL);
        ASSERT_LT_U64(n, 64);
    }
}

TEST_MAIN(test_empty, test_put_grows, test_printf, test_reserve_then_write, test_take_and_reset,
          test_oom_is_sticky, test_oom_printf_and_reset, test_oom_first_allocation)
