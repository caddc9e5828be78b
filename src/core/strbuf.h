/*
 * strbuf.h - a growable, NUL-terminated text buffer with a sticky
 * out-of-memory flag.
 *
 * Writers append without checking each call: a failed allocation sets `oom`
 * and every later write is dropped, so the code that builds a document (a
 * JSON reply, a config file, a metrics scrape) checks once at the end
 * rather than after every call. Capacity doubles, so
 * n appends cost O(total bytes); reset keeps the memory, so a buffer reused
 * per request (the HTTP loop's reply scratch) stops allocating once it has
 * grown to the largest reply.
 *
 * Caller-owned struct, libuv style: zero it (or infd_strbuf_init), write,
 * then infd_strbuf_take the text or infd_strbuf_fini it. Memory comes from
 * core/alloc. Not thread-safe: one buffer, one thread at a time.
 */
#ifndef INFD_CORE_STRBUF_H
#define INFD_CORE_STRBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "infd/infd.h"

typedef struct infd_strbuf {
    char *data; /* the text, NUL-terminated; NULL until the first write */
    size_t len; /* bytes before the NUL */
    size_t cap; /* bytes allocated at `data`, the NUL included */
    bool oom;   /* an allocation failed; writes are dropped until reset */
} infd_strbuf;

/* An empty buffer; allocates nothing (a zeroed struct is the same). */
void infd_strbuf_init(infd_strbuf *b);

/* Frees the memory and leaves the buffer empty. A no-op on a zeroed one. */
void infd_strbuf_fini(infd_strbuf *b);

/* Empties the buffer and clears `oom`, keeping the memory for reuse. */
void infd_strbuf_reset(infd_strbuf *b);

/* Makes room for `extra` more bytes plus the NUL, so the caller may write up
 * to `extra` bytes at data + len. False when `oom` is (or becomes) set.
 * reserve(b, 0) on an empty buffer allocates, so `data` is non-NULL. */
bool infd_strbuf_reserve(infd_strbuf *b, size_t extra);

/* Appends `n` bytes of `s` (any bytes, NULs included). */
void infd_strbuf_put(infd_strbuf *b, const void *s, size_t n);

/* Appends the C string `s`. */
void infd_strbuf_puts(infd_strbuf *b, const char *s);

/* Appends one byte. */
void infd_strbuf_putc(infd_strbuf *b, char c);

/* Appends printf-style text, of any length. Formats in place when it fits
 * the free capacity (no copy); otherwise grows and formats again. An
 * encoding error from vsnprintf sets `oom` too: the text is lost either way. */
void infd_strbuf_printf(infd_strbuf *b, const char *fmt, ...) INFD_PRINTF(2, 3);
void infd_strbuf_vprintf(infd_strbuf *b, const char *fmt, va_list ap) INFD_PRINTF(2, 0);

/* Hands the text to the caller (free it with infd_free) and stores its length
 * in `*len` when `len` is non-NULL; the buffer is left empty. An empty buffer
 * yields "". Returns NULL, with `*len` = 0, when `oom` was set (the memory is
 * freed) or when allocating that "" fails. */
char *infd_strbuf_take(infd_strbuf *b, size_t *len);

/* The text, "" while nothing is allocated. Valid until the next write. */
static inline const char *infd_strbuf_str(const infd_strbuf *b)
{
    return b->data ? b->data : "";
}

#endif /* INFD_CORE_STRBUF_H */
