/*
 * count_malloc.h - counts the process's heap allocations, for tests that
 * show a hot path allocates nothing: include it in one test file, then
 * compare count_malloc_n() before and after the loop. It interposes malloc,
 * calloc, realloc, memalign, aligned_alloc and posix_memalign over glibc's
 * (free passes through), so every library's allocations count (oneDNN,
 * OpenMP, FFTW). Sanitizer builds interpose malloc themselves: there
 * COUNT_MALLOC is 0, nothing is defined, and the test skips its check.
 */
#ifndef INFD_TEST_COUNT_MALLOC_H
#define INFD_TEST_COUNT_MALLOC_H

#include <stdatomic.h>
#include <stddef.h>

#if defined(__SANITIZE_ADDRESS__)
#define COUNT_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COUNT_MALLOC 0
#endif
#endif
#ifndef COUNT_MALLOC
#define COUNT_MALLOC 1
#endif

#if COUNT_MALLOC
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static _Atomic long count_malloc_n_;

static inline long count_malloc_n(void)
{
    return atomic_load(&count_malloc_n_);
}

void *malloc(size_t n);
void *calloc(size_t a, size_t b);
void *realloc(void *p, size_t n);
void free(void *p);
int posix_memalign(void **out, size_t align, size_t n);
void *aligned_alloc(size_t align, size_t n);
void *memalign(size_t align, size_t n);

void *malloc(size_t n)
{
    atomic_fetch_add_explicit(&count_malloc_n_, 1, memory_order_relaxed);
    return __libc_malloc(n);
}

void *calloc(size_t a, size_t b)
{
    atomic_fetch_add_explicit(&count_malloc_n_, 1, memory_order_relaxed);
    return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
    atomic_fetch_add_explicit(&count_malloc_n_, 1, memory_order_relaxed);
    return __libc_realloc(p, n);
}

void free(void *p)
{
    __libc_free(p);
}

void *memalign(size_t align, size_t n)
{
    atomic_fetch_add_explicit(&count_malloc_n_, 1, memory_order_relaxed);
    return __libc_memalign(align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    return memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    void *p = memalign(align, n);
    if (!p)
        return 12; /* ENOMEM */
    *out = p;
    return 0;
}
#endif

#endif /* INFD_TEST_COUNT_MALLOC_H */
