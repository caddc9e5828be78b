/*
 * histogram.c - log-linear bucket arithmetic and quantile walk.
 *
 * Bucket index of v: v itself below 128; otherwise with e = floor(log2 v)
 * (7..63), the group is e - 6 and the sub-bucket the 7 bits below the top
 * bit: index = (e - 6) * 128 + (v >> (e - 7)) - 128. Group 1 (128..255)
 * is still exact; group g covers [2^(g+6), 2^(g+7)) in steps of 2^(g-1).
 */
#include "core/histogram.h"

#include <math.h>
#include <string.h>

#include "core/alloc.h"

#define SUB INFD_HISTOGRAM_SUB_COUNT

uint32_t infd_histogram_bucket_index(uint64_t value)
{
    if (value < SUB)
        return (uint32_t)value;
    uint32_t e = 63u - (uint32_t)__builtin_clzll(value);
    return (e - 6u) * SUB + (uint32_t)(value >> (e - INFD_HISTOGRAM_SUB_BITS)) - SUB;
}

uint64_t infd_histogram_bucket_lower(uint32_t index)
{
    if (index < SUB)
        return index;
    uint32_t g = index / SUB;
    uint32_t sub = index % SUB;
    return ((uint64_t)SUB + sub) << (g - 1u);
}

uint64_t infd_histogram_bucket_width(uint32_t index)
{
    if (index < SUB)
        return 1;
    return (uint64_t)1 << (index / SUB - 1u);
}

infd_histogram *infd_histogram_create(void)
{
    infd_histogram *h = infd_aligned_alloc(INFD_ALIGNMENT, sizeof(*h));
    if (h)
        infd_histogram_reset(h);
    return h;
}

void infd_histogram_destroy(infd_histogram *h)
{
    infd_free(h);
}

void infd_histogram_reset(infd_histogram *h)
{
    for (uint32_t i = 0; i < INFD_HISTOGRAM_N_BUCKETS; i++)
        atomic_init(&h->_counts[i], 0);
    atomic_init(&h->_n, 0);
    atomic_init(&h->_sum, 0);
    atomic_init(&h->_min, UINT64_MAX);
    atomic_init(&h->_max, 0);
}

static void update_min(infd_histogram *h, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(&h->_min, memory_order_relaxed);
    while (v < cur && !atomic_compare_exchange_weak_explicit(
                          &h->_min, &cur, v, memory_order_relaxed, memory_order_relaxed)) {
    }
}

static void update_max(infd_histogram *h, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(&h->_max, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak_explicit(
                          &h->_max, &cur, v, memory_order_relaxed, memory_order_relaxed)) {
    }
}

void infd_histogram_record_n(infd_histogram *h, uint64_t value, uint64_t count)
{
    if (count == 0)
        return;
    atomic_fetch_add_explicit(&h->_counts[infd_histogram_bucket_index(value)], count,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&h->_n, count, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->_sum, value * count, memory_order_relaxed);
    update_min(h, value);
    update_max(h, value);
}

void infd_histogram_record(infd_histogram *h, uint64_t value)
{
    infd_histogram_record_n(h, value, 1);
}

void infd_histogram_merge(infd_histogram *dst, const infd_histogram *src)
{
    /* The atomics are only read; the casts drop const for C11's
     * atomic_load, which takes a non-const pointer in older libcs. */
    infd_histogram *s = (infd_histogram *)src;
    uint64_t n = 0;
    for (uint32_t i = 0; i < INFD_HISTOGRAM_N_BUCKETS; i++) {
        uint64_t c = atomic_load_explicit(&s->_counts[i], memory_order_relaxed);
        if (c) {
            atomic_fetch_add_explicit(&dst->_counts[i], c, memory_order_relaxed);
            n += c;
        }
    }
    if (n == 0)
        return;
    atomic_fetch_add_explicit(&dst->_n, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&dst->_sum, atomic_load(&s->_sum), memory_order_relaxed);
    update_min(dst, atomic_load(&s->_min));
    update_max(dst, atomic_load(&s->_max));
}

uint64_t infd_histogram_count(const infd_histogram *h)
{
    return atomic_load(&((infd_histogram *)h)->_n);
}

uint64_t infd_histogram_sum(const infd_histogram *h)
{
    return atomic_load(&((infd_histogram *)h)->_sum);
}

uint64_t infd_histogram_min(const infd_histogram *h)
{
    uint64_t m = atomic_load(&((infd_histogram *)h)->_min);
    return m == UINT64_MAX ? 0 : m;
}

uint64_t infd_histogram_max(const infd_histogram *h)
{
    return atomic_load(&((infd_histogram *)h)->_max);
}

double infd_histogram_mean(const infd_histogram *h)
{
    uint64_t n = infd_histogram_count(h);
    return n ? (double)infd_histogram_sum(h) / (double)n : 0.0;
}

uint64_t infd_histogram_quantile(const infd_histogram *h, double q)
{
    infd_histogram *m = (infd_histogram *)h;
    uint64_t total = 0;
    /* Sum the buckets rather than trusting _n, so a snapshot taken while
     * others record is still self-consistent. */
    for (uint32_t i = 0; i < INFD_HISTOGRAM_N_BUCKETS; i++)
        total += atomic_load_explicit(&m->_counts[i], memory_order_relaxed);
    if (total == 0)
        return 0;
    if (!(q > 0.0))
        q = 0.0;
    if (q > 1.0)
        q = 1.0;
    uint64_t rank = (uint64_t)ceil(q * (double)total);
    if (rank < 1)
        rank = 1;
    if (rank > total)
        rank = total;

    uint64_t lo = infd_histogram_min(h);
    uint64_t hi = infd_histogram_max(h);
    uint64_t seen = 0;
    for (uint32_t i = 0; i < INFD_HISTOGRAM_N_BUCKETS; i++) {
        seen += atomic_load_explicit(&m->_counts[i], memory_order_relaxed);
        if (seen >= rank) {
            uint64_t v = infd_histogram_bucket_lower(i) + (infd_histogram_bucket_width(i) - 1) / 2;
            if (v < lo)
                v = lo;
            if (v > hi)
                v = hi;
            return v;
        }
    }
    return hi;
}

uint64_t infd_histogram_count_le(const infd_histogram *h, uint64_t value)
{
    infd_histogram *m = (infd_histogram *)h;
    uint64_t n = 0;
    for (uint32_t i = 0; i < INFD_HISTOGRAM_N_BUCKETS; i++) {
        uint64_t upper = infd_histogram_bucket_lower(i) + (infd_histogram_bucket_width(i) - 1);
        if (upper > value)
            break;
        n += atomic_load_explicit(&m->_counts[i], memory_order_relaxed);
    }
    return n;
}
