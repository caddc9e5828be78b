/*
 * histogram.h - a latency histogram with log-linear buckets.
 *
 * Values (microseconds, nanoseconds, bytes: any uint64) land in buckets that
 * are exact below 128 and, above, split every power of two into 128 equal
 * sub-buckets (the layout of HdrHistogram with 7 significant bits). A bucket
 * is at most 1/128 of its lower bound wide and quantiles report its middle,
 * so any quantile is within 0.4% of the exact order statistic (the contract:
 * within 1%), over the whole uint64 range, in 7424 counters (58 KiB).
 *
 * Recording is lock-free (relaxed atomic adds), so any number of threads can
 * record into one histogram; readers see a consistent-enough snapshot (each
 * counter is exact, the set may be mid-update). Histograms merge by adding
 * counters, so per-thread or per-instance histograms can be combined for
 * reporting.
 */
#ifndef INFD_CORE_HISTOGRAM_H
#define INFD_CORE_HISTOGRAM_H

#include <stdatomic.h>
#include <stdint.h>

#include "infd/infd.h"

#define INFD_HISTOGRAM_SUB_BITS  7
#define INFD_HISTOGRAM_SUB_COUNT (1u << INFD_HISTOGRAM_SUB_BITS)
#define INFD_HISTOGRAM_N_BUCKETS ((64u - INFD_HISTOGRAM_SUB_BITS + 1u) * INFD_HISTOGRAM_SUB_COUNT)

typedef struct infd_histogram {
    _Atomic uint64_t _counts[INFD_HISTOGRAM_N_BUCKETS];
    _Atomic uint64_t _n;   /* values recorded */
    _Atomic uint64_t _sum; /* sum of values (wraps past 2^64; fine for latencies) */
    _Atomic uint64_t _min; /* UINT64_MAX while empty */
    _Atomic uint64_t _max;
} infd_histogram;

/* A heap histogram, empty; NULL on out of memory. Free with destroy. */
infd_histogram *infd_histogram_create(void);
void infd_histogram_destroy(infd_histogram *h);

/* Empties a histogram in caller storage (also its initialiser). Not safe
 * against concurrent recording. */
void infd_histogram_reset(infd_histogram *h);

/* Records one value / `count` copies of a value. Lock-free, any thread. */
void infd_histogram_record(infd_histogram *h, uint64_t value);
void infd_histogram_record_n(infd_histogram *h, uint64_t value, uint64_t count);

/* Adds every count of `src` into `dst` (src may be recorded into
 * concurrently; dst gets a snapshot of it). */
void infd_histogram_merge(infd_histogram *dst, const infd_histogram *src);

uint64_t infd_histogram_count(const infd_histogram *h);
uint64_t infd_histogram_sum(const infd_histogram *h);
uint64_t infd_histogram_min(const infd_histogram *h); /* 0 when empty */
uint64_t infd_histogram_max(const infd_histogram *h); /* 0 when empty */
double infd_histogram_mean(const infd_histogram *h);  /* 0 when empty */

/* The q-quantile (0 <= q <= 1) by nearest rank: the value at rank
 * ceil(q * n) (at least 1) of the sorted values, within 1% relative error,
 * clamped to [min, max] so q = 0 and q = 1 are exact. 0 when empty. O(buckets). */
uint64_t infd_histogram_quantile(const infd_histogram *h, double q);

/* Number of recorded values <= `value`, exact when `value` + 1 is a bucket
 * boundary (every value below 256, every power of two) and otherwise counting
 * whole buckets whose upper end is <= value. For Prometheus `le` buckets. */
uint64_t infd_histogram_count_le(const infd_histogram *h, uint64_t value);

/* Bucket arithmetic, exposed for tests and exporters. */
uint32_t infd_histogram_bucket_index(uint64_t value);
uint64_t infd_histogram_bucket_lower(uint32_t index);
uint64_t infd_histogram_bucket_width(uint32_t index);

#endif /* INFD_CORE_HISTOGRAM_H */
