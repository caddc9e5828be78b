/*
 * common.h - small macros every module uses: assertions, array sizes,
 * branch hints, alignment arithmetic.
 *
 * INFD_ASSERT guards our own invariants, never outside input (a malformed
 * model or request returns an infd_error instead). It is live in debug and
 * sanitizer builds and compiled out when NDEBUG is defined (release).
 */
#ifndef INFD_CORE_COMMON_H
#define INFD_CORE_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "infd/infd.h"

#define INFD_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define INFD_UNUSED(x)     ((void)(x))
#define INFD_LIKELY(x)     __builtin_expect(!!(x), 1)
#define INFD_UNLIKELY(x)   __builtin_expect(!!(x), 0)
#define INFD_MIN(a, b)     ((a) < (b) ? (a) : (b))
#define INFD_MAX(a, b)     ((a) > (b) ? (a) : (b))

/* Rounds `n` up to a multiple of `align`, a power of two. */
static inline size_t infd_align_up(size_t n, size_t align)
{
    return (n + align - 1) & ~(align - 1);
}

/* FNV-1a of a NUL-terminated string (hash tables keyed by names). */
static inline uint32_t infd_hash_str(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* Prints "file:line: assertion failed: expr" through the logger and aborts. */
void infd_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));

#ifdef NDEBUG
#define INFD_ASSERT(expr) ((void)0)
#else
#define INFD_ASSERT(expr) ((expr) ? (void)0 : infd_assert_fail(#expr, __FILE__, __LINE__))
#endif

#endif /* INFD_CORE_COMMON_H */
