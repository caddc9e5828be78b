/*
 * log.c - the logger behind log.h.
 *
 * The level is an atomic read on every call site; the sink pointer is set
 * before threads start (documented in infd.h), so it is read without a lock.
 * INFD_LOG_LEVEL is applied by a constructor when the library loads, so the
 * level check at each call site needs no lazy initialisation.
 */
#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

_Atomic int infd_log_level_current = INFD_LOG_LEVEL_INFO;

static infd_log_sink sink_fn;
static void *sink_user;

static const char *const level_names[] = { "ERROR", "WARN", "INFO", "DEBUG", "TRACE" };

const char *infd_log_level_name(infd_log_level level)
{
    if ((unsigned)level > INFD_LOG_LEVEL_TRACE)
        return "UNKNOWN";
    return level_names[level];
}

infd_status infd_log_level_parse(const char *name, infd_log_level *out, infd_error *err)
{
    for (int i = 0; i <= INFD_LOG_LEVEL_TRACE; i++) {
        if (name && strcasecmp(name, level_names[i]) == 0) {
            *out = (infd_log_level)i;
            return INFD_STATUS_OK;
        }
    }
    if (name && strcasecmp(name, "warning") == 0) {
        *out = INFD_LOG_LEVEL_WARN;
        return INFD_STATUS_OK;
    }
    return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                          "unknown log level '%s' (expected error, warn, info, debug or trace)",
                          name ? name : "(null)");
}

__attribute__((constructor)) static void apply_env(void)
{
    const char *v = getenv("INFD_LOG_LEVEL");
    infd_log_level level;
    if (v && *v && infd_log_level_parse(v, &level, NULL) == INFD_STATUS_OK)
        atomic_store(&infd_log_level_current, (int)level);
}

void infd_log_set_level(infd_log_level level)
{
    atomic_store(&infd_log_level_current, (int)level);
}

infd_log_level infd_log_get_level(void)
{
    return (infd_log_level)atomic_load(&infd_log_level_current);
}

void infd_log_set_sink(infd_log_sink sink, void *user)
{
    sink_fn = sink;
    sink_user = user;
}

void infd_log(infd_log_level level, const char *fmt, ...)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    int n;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 ts.tv_nsec / 1000000, infd_log_level_name(level));
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len] = '\0';

    if (sink_fn) {
        sink_fn(sink_user, level, line);
        return;
    }
    line[len] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len + 1);
    (void)w; /* nothing sensible to do when stderr is gone */
}
