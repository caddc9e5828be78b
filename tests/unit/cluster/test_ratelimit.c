/* Unit tests for the router's token buckets (src/cluster/ratelimit.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/ratelimit.h"
#include "test.h"

#define SEC 1000000000ull

/* The rules are the test's own and valid: a failure aborts. */
static cluster_ratelimit *make(const char *const *rules)
{
    cluster_ratelimit *rl = NULL;
    infd_error err;
    infd_error_clear(&err);
    if (cluster_ratelimit_create(&rl, &err) != INFD_STATUS_OK)
        abort();
    for (; rules && *rules; rules++)
        if (cluster_ratelimit_add(rl, *rules, &err) != INFD_STATUS_OK) {
            fprintf(stderr, "%s\n", err.msg);
            abort();
        }
    return rl;
}

static int passes(cluster_ratelimit *rl, const char *model, const char *client, uint64_t now,
                  int tries)
{
    char why[256];
    int n = 0;
    for (int i = 0; i < tries; i++)
        n += cluster_ratelimit_take(rl, model, client, now, why, sizeof(why));
    return n;
}

static void test_no_rules_pass_everything(void)
{
    cluster_ratelimit *rl = make(NULL);
    ASSERT_TRUE(!cluster_ratelimit_any(rl));
    ASSERT_EQ_INT(passes(rl, "m", "c", SEC, 1000), 1000);
    cluster_ratelimit_destroy(rl);
}

static void test_model_burst_then_rate(void)
{
    const char *rules[] = { "model:m=10:5", NULL };
    cluster_ratelimit *rl = make(rules);
    /* A full bucket of 5, then nothing until it refills at 10/s. */
    ASSERT_EQ_INT(passes(rl, "m", "", SEC, 8), 5);
    ASSERT_EQ_INT(passes(rl, "m", "", SEC + SEC / 20, 3), 0);
    ASSERT_EQ_INT(passes(rl, "m", "", SEC + SEC / 10, 3), 1);
    ASSERT_EQ_INT(passes(rl, "m", "", SEC + SEC / 10 + SEC / 2, 10), 5);
    /* Other models have no limit. */
    ASSERT_EQ_INT(passes(rl, "other", "", SEC, 100), 100);
    /* Over a long run: rate x time, plus the burst. */
    int total = 0;
    for (uint64_t t = 10 * SEC; t < 20 * SEC; t += SEC / 1000)
        total += passes(rl, "m", "", t, 1);
    ASSERT_TRUE(total >= 100 && total <= 106);
    cluster_ratelimit_destroy(rl);
}

static void test_clients(void)
{
    const char *rules[] = { "client:gold=100:100", "client:*=2:2", NULL };
    cluster_ratelimit *rl = make(rules);
    ASSERT_EQ_INT(passes(rl, "m", "gold", SEC, 200), 100);
    /* Every other key has a bucket of its own, the anonymous one too. */
    ASSERT_EQ_INT(passes(rl, "m", "a", SEC, 10), 2);
    ASSERT_EQ_INT(passes(rl, "m", "b", SEC, 10), 2);
    ASSERT_EQ_INT(passes(rl, "m", "", SEC, 10), 2);
    ASSERT_EQ_INT(passes(rl, "m", NULL, SEC, 10), 0);
    /* Many keys: the table recycles idle buckets and keeps working. */
    char key[32];
    int ok = 0;
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        ok += passes(rl, "m", key, 2 * SEC + (uint64_t)i, 1);
    }
    ASSERT_EQ_INT(ok, 20000);
    cluster_ratelimit_destroy(rl);
}

static void test_both_must_pass_and_none_taken(void)
{
    const char *rules[] = { "model:m=1:3", "client:c=1:1", NULL };
    cluster_ratelimit *rl = make(rules);
    char why[256] = "";
    ASSERT_TRUE(cluster_ratelimit_take(rl, "m", "c", SEC, why, sizeof(why)));
    ASSERT_TRUE(!cluster_ratelimit_take(rl, "m", "c", SEC, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "client 'c'") != NULL);
    /* The client's refusal took nothing from the model's bucket. */
    ASSERT_EQ_INT(passes(rl, "m", "d", SEC, 5), 2);
    ASSERT_TRUE(!cluster_ratelimit_take(rl, "m", "d", SEC, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "model 'm'") != NULL);
    cluster_ratelimit_destroy(rl);
}

static void test_bad_rules(void)
{
    const char *bad[] = { "m=1",          "model:=1",     "model:m",     "model:m=0",
                          "model:m=-1",   "model:m=x",    "model:m=1:0", "model:m=1:2x",
                          "client:c=nan", "model:m=1e12", NULL };
    cluster_ratelimit *rl = make(NULL);
    infd_error err;
    for (const char *const *b = bad; *b; b++) {
        infd_error_clear(&err);
        ASSERT_TRUE(cluster_ratelimit_add(rl, *b, &err) == INFD_STATUS_INVALID_ARGUMENT);
        ASSERT_TRUE(strstr(err.msg, "rate limit") != NULL);
    }
    ASSERT_TRUE(cluster_ratelimit_add(rl, "model:m=1", &err) == INFD_STATUS_OK);
    ASSERT_TRUE(cluster_ratelimit_add(rl, "model:m=2", &err) == INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_TRUE(cluster_ratelimit_add(rl, "client:*=2", &err) == INFD_STATUS_OK);
    ASSERT_TRUE(cluster_ratelimit_add(rl, "client:*=3", &err) == INFD_STATUS_INVALID_ARGUMENT);
    /* A fractional rate: at least a burst of one. */
    ASSERT_TRUE(cluster_ratelimit_add(rl, "model:slow=0.5", &err) == INFD_STATUS_OK);
    ASSERT_EQ_INT(passes(rl, "slow", "x", SEC, 3), 1);
    ASSERT_EQ_INT(passes(rl, "slow", "y", 3 * SEC, 3), 1);
    cluster_ratelimit_destroy(rl);
}

TEST_MAIN(test_no_rules_pass_everything, test_model_burst_then_rate, test_clients,
          test_both_must_pass_and_none_taken, test_bad_rules)
