/* Unit tests for leveled logging. */
#include "core/log.h"
#include "test.h"

static char last_line[4096];
static int n_lines;
static infd_log_level last_level;

static void capture(void *user, infd_log_level level, const char *line)
{
    (void)user;
    snprintf(last_line, sizeof(last_line), "%s", line);
    last_level = level;
    n_lines++;
}

static void test_levels_filter(void)
{
    infd_log_set_sink(capture, NULL);
    infd_log_set_level(INFD_LOG_LEVEL_WARN);
    n_lines = 0;
    INFD_LOG_INFO("hidden %d", 1);
    INFD_LOG_DEBUG("hidden %d", 2);
    ASSERT_EQ_INT(n_lines, 0);
    INFD_LOG_WARN("shown %d", 3);
    INFD_LOG_ERROR("shown %d", 4);
    ASSERT_EQ_INT(n_lines, 2);
    ASSERT_EQ_INT(last_level, INFD_LOG_LEVEL_ERROR);
    ASSERT_EQ_INT(infd_log_get_level(), INFD_LOG_LEVEL_WARN);
    infd_log_set_sink(NULL, NULL);
}

static void test_line_format(void)
{
    infd_log_set_sink(capture, NULL);
    infd_log_set_level(INFD_LOG_LEVEL_TRACE);
    INFD_LOG_TRACE("model %s loaded in %d ms", "resnet50", 42);
    /* "2026-11-21T13:22:58.123Z TRACE model resnet50 loaded in 42 ms" */
    ASSERT_EQ_U64(strlen(last_line) > 25, 1);
    ASSERT_TRUE(last_line[4] == '-' && last_line[10] == 'T' && last_line[23] == 'Z');
    ASSERT_STR_HAS(last_line, " TRACE model resnet50 loaded in 42 ms");
    infd_log_set_sink(NULL, NULL);
    infd_log_set_level(INFD_LOG_LEVEL_INFO);
}

static void test_long_line_truncates(void)
{
    static char big[8192];
    memset(big, 'x', sizeof(big) - 1);
    infd_log_set_sink(capture, NULL);
    INFD_LOG_ERROR("%s", big);
    ASSERT_TRUE(strlen(last_line) < 2048);
    infd_log_set_sink(NULL, NULL);
}

static void test_parse(void)
{
    infd_log_level l;
    infd_error err = { 0 };
    ASSERT_STATUS(infd_log_level_parse("debug", &l, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(l, INFD_LOG_LEVEL_DEBUG);
    ASSERT_STATUS(infd_log_level_parse("WARNING", &l, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(l, INFD_LOG_LEVEL_WARN);
    ASSERT_STATUS(infd_log_level_parse("loud", &l, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "'loud'");
    ASSERT_STR_EQ(infd_log_level_name(INFD_LOG_LEVEL_INFO), "INFO");
}

static void test_default_sink_writes(void)
{
    /* The default sink writes to stderr; this must not crash or block. */
    infd_log_set_level(INFD_LOG_LEVEL_INFO);
    INFD_LOG_INFO("unit test line on stderr");
}

TEST_MAIN(test_levels_filter, test_line_format, test_long_line_truncates, test_parse,
          test_default_sink_writes)
