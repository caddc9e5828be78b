/*
 * alloc.h - every heap allocation in infd goes through here.
 *
 * One place to count allocations (the "no malloc on the hot path" tests read
 * the counters around steady-state runs), to align tensor memory, and to
 * inject failures: infd_alloc_fail_after(n) makes the n-th allocation from now
 * return NULL, so each create/load path can be run failing at every step
 * (tests/unit/core/test_alloc.c shows the loop).
 *
 * All functions are thread-safe; the counters are relaxed atomics, exact once
 * the threads that allocate have been joined or synchronised with.
 * Memory from any of these functions is released with infd_free.
 */
#ifndef INFD_CORE_ALLOC_H
#define INFD_CORE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

/* malloc/calloc/realloc with counting and fault injection. NULL on failure
 * (and for n == 0 in infd_malloc, which never returns a zero-size block). */
void *infd_malloc(size_t n);
void *infd_calloc(size_t count, size_t size);
void *infd_realloc(void *p, size_t n);

/* `n` bytes on an `alignment` boundary (a power of two, at least
 * sizeof(void *)); infd_free releases it. NULL on failure or n == 0. */
void *infd_aligned_alloc(size_t alignment, size_t n);

/* A copy of `s`; NULL on failure. */
char *infd_strdup(const char *s);
char *infd_strndup(const char *s, size_t n);

/* Releases memory from any function above. NULL is a no-op. */
void infd_free(void *p);

typedef struct infd_alloc_stats {
    uint64_t n_allocs; /* successful allocations, realloc of NULL included */
    uint64_t n_frees;  /* infd_free of non-NULL pointers */
    uint64_t n_failed; /* allocations that returned NULL (injected or real) */
} infd_alloc_stats;

/* Counters since process start. */
infd_alloc_stats infd_alloc_get_stats(void);

/* Makes the `n`-th allocation from now (1 = the next) fail, once. n <= 0
 * disables injection. Process-wide: tests that use it run single-threaded. */
void infd_alloc_fail_after(int64_t n);

/* SQLite's two modes: as infd_alloc_fail_after when `forever` is 0; else
 * the n-th allocation from now and every one after it fail, until the next
 * call disarms (n <= 0) or re-arms injection. */
void infd_alloc_fail_from(int64_t n, int forever);

/* True when an injected failure was armed and has fired since the last
 * infd_alloc_fail_after/infd_alloc_fail_from call. */
int infd_alloc_injected_fired(void);

/* Where the first injected failure since arming was asked for: the return
 * address in the caller of infd_malloc & co. (so distinct values are
 * distinct allocation sites); NULL before one fired. */
const void *infd_alloc_injected_site(void);

/* Allocations failed by injection since arming (1 in fail-once mode). */
uint64_t infd_alloc_injected_count(void);

#endif /* INFD_CORE_ALLOC_H */
