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

#include <stdbool.h>
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

/*
 * Payload bytes copied on the way between a frontend and the engine or the
 * network (joining input pieces, copying outputs, frontends' copies of
 * tensors): counted in builds with assertions (debug, ASan), where
 * infd_copied_bytes() reads the count, in all and in copies of at least
 * INFD_LARGE_COPY bytes, so tests can show where no copy is made
 * (docs/CLUSTER.md: the router's zero copy). Nothing in other builds.
 */
#define INFD_LARGE_COPY (64 * 1024)
#ifdef NDEBUG
#define INFD_COUNT_COPY(n) ((void)0)
#else
void infd_count_copy(size_t n);
uint64_t infd_copied_bytes(bool large);
#define INFD_COUNT_COPY(n) infd_count_copy(n)
#endif

#endif /* INFD_CORE_COMMON_H */
