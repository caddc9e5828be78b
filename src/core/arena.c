/*
 * arena.c - chunked bump allocation.
 *
 * Chunk memory is INFD_ALIGNMENT-aligned and the header sits at its start, so
 * any alignment up to INFD_ALIGNMENT is satisfied by arithmetic on the
 * offset; larger alignments are rounded on the absolute address.
 */
#include "core/arena.h"

#include <string.h>

#include "core/alloc.h"
#include "core/common.h"

struct infd_arena_chunk {
    infd_arena_chunk *next;
    size_t cap;  /* bytes usable after the header */
    size_t used; /* bytes bumped so far */
    /* data follows, starting INFD_ALIGNMENT bytes after the chunk */
};

#define HEADER_BYTES INFD_ALIGNMENT

static unsigned char *chunk_data(infd_arena_chunk *c)
{
    return (unsigned char *)c + HEADER_BYTES;
}

static infd_arena_chunk *chunk_new(size_t cap)
{
    size_t total;
    if (__builtin_add_overflow(cap, (size_t)HEADER_BYTES, &total))
        return NULL;
    infd_arena_chunk *c = infd_aligned_alloc(INFD_ALIGNMENT, total);
    if (!c)
        return NULL;
    c->next = NULL;
    c->cap = cap;
    c->used = 0;
    return c;
}

void infd_arena_init(infd_arena *a, size_t chunk_bytes)
{
    a->_head = NULL;
    a->_chunk_bytes = chunk_bytes ? chunk_bytes : 64 * 1024;
    a->_used_bytes = 0;
}

void infd_arena_fini(infd_arena *a)
{
    infd_arena_chunk *c = a->_head;
    while (c) {
        infd_arena_chunk *next = c->next;
        infd_free(c);
        c = next;
    }
    a->_head = NULL;
    a->_used_bytes = 0;
}

/* Where an allocation of `n` bytes aligned to `align` would start in `c`, or
 * SIZE_MAX when it does not fit. */
static size_t fit(infd_arena_chunk *c, size_t n, size_t align)
{
    uintptr_t base = (uintptr_t)chunk_data(c);
    uintptr_t p = (base + c->used + align - 1) & ~(uintptr_t)(align - 1);
    size_t off = (size_t)(p - base);
    if (off > c->cap || c->cap - off < n)
        return SIZE_MAX;
    return off;
}

void *infd_arena_alloc(infd_arena *a, size_t n, size_t align)
{
    if (n == 0)
        return NULL;
    if (align == 0)
        align = 16;
    INFD_ASSERT((align & (align - 1)) == 0);

    infd_arena_chunk *c = a->_head;
    size_t off = c ? fit(c, n, align) : SIZE_MAX;
    if (off == SIZE_MAX) {
        size_t cap = a->_chunk_bytes;
        size_t need;
        if (__builtin_add_overflow(n, align, &need))
            return NULL;
        if (cap < need)
            cap = need;
        c = chunk_new(cap);
        if (!c)
            return NULL;
        c->next = a->_head;
        a->_head = c;
        off = fit(c, n, align);
        INFD_ASSERT(off != SIZE_MAX);
    }
    size_t before = c->used;
    c->used = off + n;
    a->_used_bytes += c->used - before;
    return chunk_data(c) + off;
}

void *infd_arena_calloc(infd_arena *a, size_t n, size_t align)
{
    void *p = infd_arena_alloc(a, n, align);
    if (p)
        memset(p, 0, n);
    return p;
}

char *infd_arena_strdup(infd_arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = infd_arena_alloc(a, n, 1);
    if (d)
        memcpy(d, s, n);
    return d;
}

void infd_arena_reset(infd_arena *a)
{
    infd_arena_chunk *c = a->_head;
    a->_used_bytes = 0;
    if (!c)
        return;
    if (!c->next) {
        c->used = 0;
        return;
    }
    /* Several chunks: replace them by one that holds them all, so the next
     * cycle of the same size fits without allocating. If that allocation
     * fails, keep the current chunk alone and free the rest. */
    size_t total = 0;
    for (infd_arena_chunk *k = c; k; k = k->next)
        total += k->cap;
    infd_arena_chunk *big = chunk_new(total);
    infd_arena_chunk *keep = big ? NULL : c;
    for (infd_arena_chunk *k = c; k;) {
        infd_arena_chunk *next = k->next;
        if (k != keep)
            infd_free(k);
        k = next;
    }
    a->_head = big ? big : keep;
    a->_head->next = NULL;
    a->_head->used = 0;
}

size_t infd_arena_used_bytes(const infd_arena *a)
{
    return a->_used_bytes;
}

size_t infd_arena_capacity_bytes(const infd_arena *a)
{
    size_t total = 0;
    for (infd_arena_chunk *k = a->_head; k; k = k->next)
        total += k->cap;
    return total;
}
