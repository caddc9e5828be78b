/*
 * test_restricted.c - the rules of --http-restricted-api and
 * --grpc-restricted-protocol (src/frontends/common/restricted.c): Triton's
 * <apis>:<key>=<value> parsed, a group in one rule only, bad specs
 * rejected with messages that never hold the value, and the comparison:
 * equal values pass; a missing, shorter, longer or different one fails.
 */
#include "frontends/common/restricted.c"

#include "test.h"

static void test_parse_and_allow(void)
{
    infd_restricted r;
    memset(&r, 0, sizeof(r));
    infd_error err = { 0 };
    ASSERT_STATUS(infd_restricted_add(&r, "--x", "model-repository,statistics:Admin-Key=abc", &err),
                  INFD_STATUS_OK);
    ASSERT_STATUS(infd_restricted_add(&r, "--x", "inference:k=v=w", &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(infd_restricted_key(&r, INFD_API_MODEL_REPOSITORY), "admin-key");
    ASSERT_STR_EQ(infd_restricted_key(&r, INFD_API_STATISTICS), "admin-key");
    ASSERT_STR_EQ(infd_restricted_key(&r, INFD_API_HEALTH), "");
    ASSERT_STR_EQ(infd_restricted_key(&r, INFD_API_INFERENCE), "k");
    ASSERT_TRUE(infd_restricted_allows(&r, INFD_API_HEALTH, NULL, 0));
    ASSERT_TRUE(infd_restricted_allows(&r, INFD_API_STATISTICS, "abc", 3));
    ASSERT_FALSE(infd_restricted_allows(&r, INFD_API_STATISTICS, NULL, 0));
    ASSERT_FALSE(infd_restricted_allows(&r, INFD_API_STATISTICS, "ab", 2));
    ASSERT_FALSE(infd_restricted_allows(&r, INFD_API_STATISTICS, "abcd", 4));
    ASSERT_FALSE(infd_restricted_allows(&r, INFD_API_STATISTICS, "abd", 3));
    ASSERT_FALSE(infd_restricted_allows(&r, INFD_API_STATISTICS, "abc\0", 4));
    /* The value is everything after the first '=' */
    ASSERT_TRUE(infd_restricted_allows(&r, INFD_API_INFERENCE, "v=w", 3));
    char big[INFD_RESTRICTED_VALUE_BYTES + 8];
    memset(big, 'a', sizeof(big));
    ASSERT_FALSE(infd_restricted_allows(&r, INFD_API_INFERENCE, big, sizeof(big)));
    ASSERT_TRUE(infd_restricted_allows(NULL, INFD_API_INFERENCE, NULL, 0));
}

static void test_bad_specs(void)
{
    static const char *const bad[] = {
        "",
        "inference",
        ":k=v",
        "inference:k",
        "inference:=v",
        "inference:k=",
        "inference,:k=v",
        "nope:k=v",
        "inference:a b=v",
        "inference:k\n=v",
        "health,health:k=secret1",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        infd_restricted r;
        memset(&r, 0, sizeof(r));
        infd_error err = { 0 };
        if (infd_restricted_add(&r, "--x", bad[i], &err) == INFD_STATUS_OK)
            TEST_FAIL_("accepted '%s'", bad[i]);
        ASSERT_STR_HAS(err.msg, "--x");
        ASSERT_TRUE(strstr(err.msg, "secret1") == NULL);
        for (int a = 0; a < INFD_API_COUNT; a++)
            ASSERT_STR_EQ(r.api[a].key, "");
    }
    /* A group in two rules: the second is refused, the first kept. */
    infd_restricted r;
    memset(&r, 0, sizeof(r));
    infd_error err = { 0 };
    ASSERT_STATUS(infd_restricted_add(&r, "--x", "health:a=1", &err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_restricted_add(&r, "--x", "inference,health:b=secret2", &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "'health' is restricted twice");
    ASSERT_TRUE(strstr(err.msg, "secret2") == NULL);
    ASSERT_STR_EQ(infd_restricted_key(&r, INFD_API_INFERENCE), "");
    ASSERT_STR_EQ(infd_restricted_key(&r, INFD_API_HEALTH), "a");
}

static void test_names(void)
{
    ASSERT_STR_EQ(infd_api_name(INFD_API_SHARED_MEMORY), "shared-memory");
    ASSERT_STR_EQ(infd_api_name(INFD_API_LOGGING), "logging");
    ASSERT_STR_EQ(infd_api_name(INFD_API_COUNT), "?");
}

TEST_MAIN(test_parse_and_allow, test_bad_specs, test_names)
