/*
 * strbuf.c - the growable text buffer (see strbuf.h).
 *
 * Invariant: when `data` is non-NULL, len < cap and data[len] == '\0'; when
 * `oom` is set the text so far stays terminated but is incomplete.
 */
#include "core/strbuf.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"

/* The first allocation: small enough for a config file, large enough that a
 * typical reply grows at most a few times. */
#define STRBUF_MIN_CAP 256

void infd_strbuf_init(infd_strbuf *b)
{
    memset(b, 0, sizeof(*b));
}

void infd_strbuf_fini(infd_strbuf *b)
{
    infd_free(b->data);
    memset(b, 0, sizeof(*b));
}

void infd_strbuf_reset(infd_strbuf *b)
{
    b->len = 0;
    b->oom = false;
    if (b->data)
        b->data[0] = '\0';
}

bool infd_strbuf_reserve(infd_strbuf *b, size_t extra)
{
    if (b->oom)
        return false;
    if (b->data && b->cap - b->len > extra)
        return true;
    if (extra >= SIZE_MAX - b->len) {
        b->oom = true;
        return false;
    }
    size_t need = b->len + extra + 1;
    size_t cap = b->cap ? b->cap : STRBUF_MIN_CAP;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = infd_realloc(b->data, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    p[b->len] = '\0';
    b->data = p;
    b->cap = cap;
    return true;
}

void infd_strbuf_put(infd_strbuf *b, const void *s, size_t n)
{
    if (!infd_strbuf_reserve(b, n))
        return;
    if (n)
        memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void infd_strbuf_puts(infd_strbuf *b, const char *s)
{
    infd_strbuf_put(b, s, strlen(s));
}

void infd_strbuf_putc(infd_strbuf *b, char c)
{
    if (!infd_strbuf_reserve(b, 1))
        return;
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
}

void infd_strbuf_vprintf(infd_strbuf *b, const char *fmt, va_list ap)
{
    if (b->oom)
        return;
    /* First try the free capacity: most pieces fit and are formatted in
     * place, without a copy through a stack buffer. */
    va_list again;
    va_copy(again, ap);
    size_t room = b->data ? b->cap - b->len : 0;
    int n = vsnprintf(b->data ? b->data + b->len : NULL, room, fmt, ap);
    if (n >= 0 && (size_t)n >= room) {
        if (infd_strbuf_reserve(b, (size_t)n))
            vsnprintf(b->data + b->len, (size_t)n + 1, fmt, again);
        else if (b->data)
            b->data[b->len] = '\0'; /* drop the truncated attempt */
    }
    va_end(again);
    if (n < 0) {
        if (b->data)
            b->data[b->len] = '\0';
        b->oom = true;
        return;
    }
    if (!b->oom)
        b->len += (size_t)n;
}

void infd_strbuf_printf(infd_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    infd_strbuf_vprintf(b, fmt, ap);
    va_end(ap);
}

char *infd_strbuf_take(infd_strbuf *b, size_t *len)
{
    if (len)
        *len = 0;
    if (!b->oom && !b->data)
        infd_strbuf_reserve(b, 0);
    if (b->oom) {
        infd_strbuf_fini(b);
        return NULL;
    }
    char *s = b->data;
    if (len)
        *len = b->len;
    memset(b, 0, sizeof(*b));
    return s;
}
