/*
 * test.h - the unit-test harness: a table of test functions, assertions that
 * print both sides, and a closing "N passed, N failed" line.
 *
 *   static void test_numel(void) { ASSERT_EQ_I64(numel, 12); }
 *   TEST_MAIN(test_numel, test_other)
 *
 * An assertion failure prints file:line and the values, marks the test
 * failed and returns from the test function (so tests are void functions
 * that clean up before asserting, or accept a leak on failure). Run one test
 * by name: `./test_binary test_numel`.
 */
#ifndef INFD_TEST_H
#define INFD_TEST_H

#include <inttypes.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int test_failed_;

#define TEST_FAIL_(...)                                     \
    do {                                                    \
        fprintf(stderr, "    %s:%d: ", __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                       \
        fputc('\n', stderr);                                \
        test_failed_ = 1;                                   \
        return;                                             \
    } while (0)

#define ASSERT_TRUE(c)                           \
    do {                                         \
        if (!(c))                                \
            TEST_FAIL_("expected true: %s", #c); \
    } while (0)

#define ASSERT_FALSE(c)                           \
    do {                                          \
        if (c)                                    \
            TEST_FAIL_("expected false: %s", #c); \
    } while (0)

#define ASSERT_CMP_(type, fmt, a, op, b)                                    \
    do {                                                                    \
        type a_ = (a), b_ = (b);                                            \
        if (!(a_ op b_))                                                    \
            TEST_FAIL_("%s %s %s: %" fmt " vs %" fmt, #a, #op, #b, a_, b_); \
    } while (0)

#define ASSERT_EQ_I64(a, b) ASSERT_CMP_(int64_t, PRId64, a, ==, b)
#define ASSERT_EQ_U64(a, b) ASSERT_CMP_(uint64_t, PRIu64, a, ==, b)
#define ASSERT_NE_U64(a, b) ASSERT_CMP_(uint64_t, PRIu64, a, !=, b)
#define ASSERT_LE_U64(a, b) ASSERT_CMP_(uint64_t, PRIu64, a, <=, b)
#define ASSERT_LT_U64(a, b) ASSERT_CMP_(uint64_t, PRIu64, a, <, b)
#define ASSERT_GE_U64(a, b) ASSERT_CMP_(uint64_t, PRIu64, a, >=, b)
#define ASSERT_EQ_INT(a, b) ASSERT_CMP_(int, "d", a, ==, b)
#define ASSERT_LE_DBL(a, b) ASSERT_CMP_(double, "g", a, <=, b)

/* infd_status values, printed by name. */
#define ASSERT_STATUS(a, b)                                                                       \
    do {                                                                                          \
        infd_status a_ = (a), b_ = (b);                                                           \
        if (a_ != b_)                                                                             \
            TEST_FAIL_("%s == %s: %s vs %s", #a, #b, infd_status_name(a_), infd_status_name(b_)); \
    } while (0)

#define ASSERT_STR_EQ(a, b)                                                      \
    do {                                                                         \
        const char *a_ = (a), *b_ = (b);                                         \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                   \
            TEST_FAIL_("%s == %s: \"%s\" vs \"%s\"", #a, #b, a_ ? a_ : "(null)", \
                       b_ ? b_ : "(null)");                                      \
    } while (0)

/* `hay` contains `needle`. */
#define ASSERT_STR_HAS(hay, needle)                                               \
    do {                                                                          \
        const char *h_ = (hay), *n_ = (needle);                                   \
        if (!h_ || !strstr(h_, n_))                                               \
            TEST_FAIL_("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_); \
    } while (0)

typedef struct test_case_ {
    const char *name;
    void (*fn)(void);
} test_case_;

static int test_run_(const test_case_ *cases, size_t n, int argc, char **argv)
{
    int passed = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].name) != 0)
            continue;
        test_failed_ = 0;
        cases[i].fn();
        if (test_failed_) {
            failed++;
            printf("FAIL %s\n", cases[i].name);
        } else {
            passed++;
            printf("ok   %s\n", cases[i].name);
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : (passed ? 0 : 1);
}

/* TEST_MAIN(a, b, c): a main() that runs the listed tests in order. */
#define TEST_MAIN(...)                                                        \
    int main(int argc, char **argv)                                           \
    {                                                                         \
        void (*fns_[])(void) = { __VA_ARGS__ };                               \
        static const char names_[] = #__VA_ARGS__;                            \
        test_case_ cases_[sizeof(fns_) / sizeof(fns_[0])];                    \
        char buf_[sizeof(names_)];                                            \
        memcpy(buf_, names_, sizeof(names_));                                 \
        char *save_ = NULL, *tok_ = strtok_r(buf_, ", \n\t", &save_);         \
        for (size_t i_ = 0; i_ < sizeof(fns_) / sizeof(fns_[0]); i_++) {      \
            cases_[i_].name = tok_ ? tok_ : "?";                              \
            cases_[i_].fn = fns_[i_];                                         \
            tok_ = strtok_r(NULL, ", \n\t", &save_);                          \
        }                                                                     \
        return test_run_(cases_, sizeof(fns_) / sizeof(fns_[0]), argc, argv); \
    }

/* The path of `name` in the model cache ($INFD_CACHE, default
 * <repo>/.cache: what scripts/setup.sh fetches and generates) in `path`;
 * false, after printing a "skipped" line, when it is not there. Needs
 * INFD_SOURCE_DIR (tests/unit/CMakeLists.txt defines it). */
static inline bool test_cached_model_(const char *name, char *path, size_t n)
{
    const char *cache = getenv("INFD_CACHE");
    snprintf(path, n, "%s/%s", cache && *cache ? cache : INFD_SOURCE_DIR "/.cache", name);
    struct stat sb;
    if (stat(path, &sb) == 0)
        return true;
    printf("    skipped %s: not in the cache (run scripts/setup.sh)\n", name);
    return false;
}

#endif /* INFD_TEST_H */
