/* Unit tests for status codes and the infd_error record. */
#include "infd/infd.h"
#include "test.h"

static void test_names_and_strings(void)
{
    ASSERT_STR_EQ(infd_status_name(INFD_STATUS_OK), "OK");
    ASSERT_STR_EQ(infd_status_name(INFD_STATUS_INVALID_ARGUMENT), "INVALID_ARGUMENT");
    ASSERT_STR_EQ(infd_status_name(INFD_STATUS_DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
    ASSERT_STR_EQ(infd_status_str(INFD_STATUS_OUT_OF_MEMORY), "out of memory");
    ASSERT_STR_EQ(infd_status_name((infd_status)999), "UNKNOWN");
    ASSERT_STR_EQ(infd_status_str((infd_status)-1), "unknown status");
    for (int s = 0; s < INFD_STATUS_COUNT_; s++)
        ASSERT_TRUE(strlen(infd_status_str((infd_status)s)) > 0);
}

static void test_error_set_and_clear(void)
{
    infd_error err = { 0 };
    infd_status st =
        infd_error_set(&err, INFD_STATUS_NOT_FOUND, "model '%s' version %d", "resnet", 3);
    ASSERT_STATUS(st, INFD_STATUS_NOT_FOUND);
    ASSERT_STATUS(err.code, INFD_STATUS_NOT_FOUND);
    ASSERT_STR_EQ(err.msg, "model 'resnet' version 3");
    infd_error_clear(&err);
    ASSERT_STATUS(err.code, INFD_STATUS_OK);
    ASSERT_STR_EQ(err.msg, "");
}

static void test_null_error_is_allowed(void)
{
    ASSERT_STATUS(infd_error_set(NULL, INFD_STATUS_IO, "x %d", 1), INFD_STATUS_IO);
    ASSERT_STATUS(infd_error_prefix(NULL, "ctx"), INFD_STATUS_OK);
    infd_error_clear(NULL);
}

static void test_long_messages_truncate(void)
{
    infd_error err = { 0 };
    char big[2 * INFD_ERROR_MSG_BYTES];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    infd_error_set(&err, INFD_STATUS_INTERNAL, "%s", big);
    ASSERT_EQ_U64(strlen(err.msg), INFD_ERROR_MSG_BYTES - 1);
    infd_error_prefix(&err, "prefix %d", 7);
    ASSERT_EQ_U64(strlen(err.msg), INFD_ERROR_MSG_BYTES - 1);
    ASSERT_TRUE(strncmp(err.msg, "prefix 7: aaa", 13) == 0);
}

static void test_prefix_keeps_code(void)
{
    infd_error err = { 0 };
    infd_error_set(&err, INFD_STATUS_INVALID_ARGUMENT, "unknown field 'foo'");
    ASSERT_STATUS(infd_error_prefix(&err, "%s:%d", "config.pbtxt", 12),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_EQ(err.msg, "config.pbtxt:12: unknown field 'foo'");
}

TEST_MAIN(test_names_and_strings, test_error_set_and_clear, test_null_error_is_allowed,
          test_long_messages_truncate, test_prefix_keeps_code)
