/*
 * alloc.c - counting, aligning, failure-injecting wrappers around libc.
 *
 * The fault-injection countdown costs one relaxed atomic load per allocation
 * when disarmed, so it stays compiled into every build: the same binary that
 * ships is the one whose out-of-memory paths were tested.
 */
#include "core/alloc.h"

#include "infd/infd.h" /* infd_free is public API: exported from libinfd.so */

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic uint64_t n_allocs;
static _Atomic uint64_t n_frees;
static _Atomic uint64_t n_failed;
static _Atomic int64_t fail_countdown; /* > 0: armed; the allocation that takes it to 0 fails */
static _Atomic int fail_forever;       /* every allocation after that one fails too */
static _Atomic int injected_fired;
static _Atomic uintptr_t first_site; /* return address of the first injected failure */
static _Atomic uint64_t n_injected;

/* Injection marks itself fired when the countdown reaches this. */
#define FIRED_FOREVER INT64_MIN

/* True when this allocation, asked for at `site` (the caller's return
 * address), must fail by injection. */
static int should_fail(const void *site)
{
    int64_t c = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    if (c == FIRED_FOREVER) {
        atomic_fetch_add_explicit(&n_injected, 1, memory_order_relaxed);
        return 1;
    }
    if (c <= 0)
        return 0;
    if (atomic_fetch_sub(&fail_countdown, 1) == 1) {
        if (atomic_load(&fail_forever))
            atomic_store(&fail_countdown, FIRED_FOREVER);
        atomic_store(&first_site, (uintptr_t)site);
        atomic_fetch_add_explicit(&n_injected, 1, memory_order_relaxed);
        atomic_store(&injected_fired, 1);
        return 1;
    }
    return 0;
}

#define SITE __builtin_return_address(0)

static void *count(void *p)
{
    if (p)
        atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&n_failed, 1, memory_order_relaxed);
    return p;
}

static void *malloc_at(size_t n, const void *site)
{
    if (n == 0 || should_fail(site))
        return count(NULL);
    return count(malloc(n));
}

void *infd_malloc(size_t n)
{
    return malloc_at(n, SITE);
}

void *infd_calloc(size_t count_, size_t size)
{
    if (count_ == 0 || size == 0 || should_fail(SITE))
        return count(NULL);
    return count(calloc(count_, size));
}

void *infd_realloc(void *p, size_t n)
{
    if (n == 0 || should_fail(SITE)) {
        /* The old block stays valid, as with realloc failing. */
        atomic_fetch_add_explicit(&n_failed, 1, memory_order_relaxed);
        return NULL;
    }
    void *q = realloc(p, n);
    if (!q) {
        atomic_fetch_add_explicit(&n_failed, 1, memory_order_relaxed);
        return NULL;
    }
    if (!p)
        atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
    return q;
}

void *infd_aligned_alloc(size_t alignment, size_t n)
{
    void *p = NULL;
    if (n == 0 || should_fail(SITE))
        return count(NULL);
    if (posix_memalign(&p, alignment, n) != 0)
        p = NULL;
    return count(p);
}

static char *strndup_at(const char *s, size_t n, const void *site)
{
    size_t len = strnlen(s, n);
    char *d = malloc_at(len + 1, site);
    if (!d)
        return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

char *infd_strdup(const char *s)
{
    return strndup_at(s, strlen(s), SITE);
}

char *infd_strndup(const char *s, size_t n)
{
    return strndup_at(s, n, SITE);
}

void infd_free(void *p)
{
    if (!p)
        return;
    atomic_fetch_add_explicit(&n_frees, 1, memory_order_relaxed);
    free(p);
}

infd_alloc_stats infd_alloc_get_stats(void)
{
    infd_alloc_stats s;
    s.n_allocs = atomic_load(&n_allocs);
    s.n_frees = atomic_load(&n_frees);
    s.n_failed = atomic_load(&n_failed);
    return s;
}

void infd_alloc_fail_after(int64_t n)
{
    infd_alloc_fail_from(n, 0);
}

void infd_alloc_fail_from(int64_t n, int forever)
{
    atomic_store(&fail_countdown, 0);
    atomic_store(&injected_fired, 0);
    atomic_store(&first_site, 0);
    atomic_store(&n_injected, 0);
    atomic_store(&fail_forever, forever != 0);
    atomic_store(&fail_countdown, n > 0 ? n : 0);
}

int infd_alloc_injected_fired(void)
{
    return atomic_load(&injected_fired);
}

const void *infd_alloc_injected_site(void)
{
    return (const void *)atomic_load(&first_site);
}

uint64_t infd_alloc_injected_count(void)
{
    return atomic_load(&n_injected);
}
