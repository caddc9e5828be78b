/*
 * status.c - names and messages for infd_status, and the infd_error record.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "core/log.h"

static const char *const status_names[] = {
#define NAME_(name, str) #name,
    INFD_STATUS_MAP(NAME_)
#undef NAME_
};

static const char *const status_strs[] = {
#define STR_(name, str) str,
    INFD_STATUS_MAP(STR_)
#undef STR_
};

const char *infd_status_name(infd_status status)
{
    if ((unsigned)status >= INFD_STATUS_COUNT_)
        return "UNKNOWN";
    return status_names[status];
}

const char *infd_status_str(infd_status status)
{
    if ((unsigned)status >= INFD_STATUS_COUNT_)
        return "unknown status";
    return status_strs[status];
}

void infd_error_clear(infd_error *err)
{
    if (!err)
        return;
    err->code = INFD_STATUS_OK;
    err->msg[0] = '\0';
}

infd_status infd_error_setv(infd_error *err, infd_status code, const char *fmt, va_list ap)
{
    if (!err)
        return code;
    err->code = code;
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    return code;
}

infd_status infd_error_set(infd_error *err, infd_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    infd_error_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

infd_status infd_error_prefix(infd_error *err, const char *fmt, ...)
{
    if (!err)
        return INFD_STATUS_OK;
    /* Build "prefix: old" in place: format the prefix into a scratch buffer,
     * move the old message right, copy the prefix in front. Both parts are
     * truncated to fit; truncation is the documented behaviour. */
    char prefix[INFD_ERROR_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    size_t plen = n < 0 ? 0 : INFD_MIN((size_t)n, sizeof(prefix) - 1);
    size_t olen = strnlen(err->msg, sizeof(err->msg) - 1);
    size_t cap = sizeof(err->msg) - 1;
    size_t sep = olen ? 2 : 0;
    size_t head = INFD_MIN(plen + sep, cap);
    size_t keep = INFD_MIN(olen, cap - head);
    memmove(err->msg + head, err->msg, keep);
    memcpy(err->msg, prefix, INFD_MIN(plen, head));
    if (sep && head > plen)
        memcpy(err->msg + plen, ": ", head - plen);
    err->msg[head + keep] = '\0';
    return err->code;
}

void infd_assert_fail(const char *expr, const char *file, int line)
{
    infd_log(INFD_LOG_LEVEL_ERROR, "%s:%d: assertion failed: %s", file, line, expr);
    abort();
}

#ifndef NDEBUG
static uint64_t copied_bytes, copied_large;

void infd_count_copy(size_t n)
{
    __atomic_fetch_add(&copied_bytes, (uint64_t)n, __ATOMIC_RELAXED);
    if (n >= INFD_LARGE_COPY)
        __atomic_fetch_add(&copied_large, (uint64_t)n, __ATOMIC_RELAXED);
}

uint64_t infd_copied_bytes(bool large)
{
    return __atomic_load_n(large ? &copied_large : &copied_bytes, __ATOMIC_RELAXED);
}
#endif
