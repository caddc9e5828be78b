/*
 * Unit tests for the latency histogram: bucket arithmetic, and quantiles
 * against exact order statistics of random data within 1% relative error.
 */
#include <math.h>
#include <pthread.h>

#include "core/alloc.h"
#include "core/histogram.h"
#include "test.h"

static uint64_t rng_state = 42;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1). */
static double rng_unit(void)
{
    return ((double)(rng_next() >> 11) + 0.5) / 9007199254740992.0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank quantile of sorted values. */
static uint64_t exact_quantile(const uint64_t *sorted, size_t n, double q)
{
    size_t rank = (size_t)ceil(q * (double)n);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return sorted[rank - 1];
}

static void test_bucket_arithmetic(void)
{
    ASSERT_EQ_U64(infd_histogram_bucket_index(0), 0);
    ASSERT_EQ_U64(infd_histogram_bucket_index(127), 127);
    ASSERT_EQ_U64(infd_histogram_bucket_index(128), 128);
    ASSERT_EQ_U64(infd_histogram_bucket_index(255), 255);
    ASSERT_EQ_U64(infd_histogram_bucket_index(256), 256);
    ASSERT_EQ_U64(infd_histogram_bucket_index(257), 256);
    ASSERT_EQ_U64(infd_histogram_bucket_index(UINT64_MAX), INFD_HISTOGRAM_N_BUCKETS - 1);
    ASSERT_EQ_U64(infd_histogram_bucket_lower(INFD_HISTOGRAM_N_BUCKETS - 1) +
                      (infd_histogram_bucket_width(INFD_HISTOGRAM_N_BUCKETS - 1) - 1),
                  UINT64_MAX);
    /* Buckets tile the range with no gap or overlap. */
    for (uint32_t i = 0; i + 1 < INFD_HISTOGRAM_N_BUCKETS; i++)
        ASSERT_EQ_U64(infd_histogram_bucket_lower(i) + infd_histogram_bucket_width(i),
                      infd_histogram_bucket_lower(i + 1));
    for (int i = 0; i < 1000000; i++) {
        uint64_t v = rng_next() >> (rng_next() % 64);
        uint32_t b = infd_histogram_bucket_index(v);
        uint64_t lo = infd_histogram_bucket_lower(b), w = infd_histogram_bucket_width(b);
        ASSERT_LE_U64(lo, v);
        ASSERT_LE_U64(v - lo, w - 1);
        if (v >= 128)
            ASSERT_LE_DBL((double)w / (double)lo, 1.0 / 128.0);
    }
}

static void check_quantiles(const char *what, uint64_t *values, size_t n)
{
    infd_histogram *h = infd_histogram_create();
    ASSERT_TRUE(h != NULL);
    for (size_t i = 0; i < n; i++)
        infd_histogram_record(h, values[i]);
    qsort(values, n, sizeof(*values), cmp_u64);
    const double qs[] = { 0.0, 0.001, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0 };
    double worst = 0;
    for (size_t k = 0; k < sizeof(qs) / sizeof(qs[0]); k++) {
        uint64_t want = exact_quantile(values, n, qs[k]);
        uint64_t got = infd_histogram_quantile(h, qs[k]);
        double rel = want ? fabs((double)got - (double)want) / (double)want : (double)got;
        if (rel > worst)
            worst = rel;
        if (rel > 0.01) {
            infd_histogram_destroy(h);
            TEST_FAIL_("%s q=%g: got %llu, exact %llu (rel err %.4f)", what, qs[k],
                       (unsigned long long)got, (unsigned long long)want, rel);
        }
    }
    ASSERT_EQ_U64(infd_histogram_count(h), n);
    ASSERT_EQ_U64(infd_histogram_min(h), values[0]);
    ASSERT_EQ_U64(infd_histogram_max(h), values[n - 1]);
    printf("    %-28s n=%zu worst relative error %.5f\n", what, n, worst);
    infd_histogram_destroy(h);
}

static void test_quantiles_random_data(void)
{
    enum { N = 200000 };
    uint64_t *v = infd_malloc(N * sizeof(*v));
    ASSERT_TRUE(v != NULL);

    for (size_t i = 0; i < N; i++)
        v[i] = 1 + rng_next() % 1000000;
    check_quantiles("uniform 1..1e6", v, N);
    if (test_failed_)
        goto out;
    for (size_t i = 0; i < N; i++) /* latency-like: lognormal around 200us */
        v[i] = (uint64_t)(200.0 * exp(0.8 * sqrt(-2 * log(rng_unit())) *
                                      cos(6.283185307179586 * rng_unit())));
    check_quantiles("lognormal median 200", v, N);
    if (test_failed_)
        goto out;
    for (size_t i = 0; i < N; i++)
        v[i] = (uint64_t)(-50000.0 * log(rng_unit()));
    check_quantiles("exponential mean 5e4", v, N);
    if (test_failed_)
        goto out;
    for (size_t i = 0; i < N; i++)
        v[i] = rng_next() % 300;
    check_quantiles("small integers 0..299", v, N);
    if (test_failed_)
        goto out;
    for (size_t i = 0; i < N; i++)
        v[i] = rng_next() >> (rng_next() % 40);
    check_quantiles("wide range up to 2^64", v, N);
    if (test_failed_)
        goto out;
    for (size_t i = 0; i < 7; i++)
        v[i] = 1000 + 1000 * i;
    check_quantiles("seven values", v, 7);
out:
    infd_free(v);
}

static void test_empty_and_single(void)
{
    infd_histogram *h = infd_histogram_create();
    ASSERT_TRUE(h != NULL);
    ASSERT_EQ_U64(infd_histogram_quantile(h, 0.5), 0);
    ASSERT_EQ_U64(infd_histogram_min(h), 0);
    ASSERT_EQ_U64(infd_histogram_max(h), 0);
    ASSERT_LE_DBL(infd_histogram_mean(h), 0.0);
    infd_histogram_record(h, 123456789);
    ASSERT_EQ_U64(infd_histogram_quantile(h, 0.5), 123456789); /* clamped to min/max */
    ASSERT_EQ_U64(infd_histogram_quantile(h, 0.99), 123456789);
    infd_histogram_record_n(h, 10, 3);
    ASSERT_EQ_U64(infd_histogram_count(h), 4);
    ASSERT_EQ_U64(infd_histogram_sum(h), 123456789 + 30);
    ASSERT_EQ_U64(infd_histogram_quantile(h, 0.75), 10);
    infd_histogram_reset(h);
    ASSERT_EQ_U64(infd_histogram_count(h), 0);
    infd_histogram_destroy(h);
    infd_histogram_destroy(NULL);
}

static void test_count_le(void)
{
    infd_histogram *h = infd_histogram_create();
    ASSERT_TRUE(h != NULL);
    for (uint64_t v = 0; v < 1000; v++)
        infd_histogram_record(h, v);
    ASSERT_EQ_U64(infd_histogram_count_le(h, 99), 100);
    ASSERT_EQ_U64(infd_histogram_count_le(h, 255), 256);
    ASSERT_EQ_U64(infd_histogram_count_le(h, 511), 512);
    ASSERT_EQ_U64(infd_histogram_count_le(h, 5000), 1000);
    infd_histogram_destroy(h);
}

typedef struct rec_arg {
    infd_histogram *shared;
    infd_histogram *own;
    uint64_t seed;
} rec_arg;

enum { PER_THREAD = 100000, N_THREADS = 4 };

static void *recorder(void *p)
{
    rec_arg *a = p;
    uint64_t s = a->seed;
    for (int i = 0; i < PER_THREAD; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t v = 100 + (s >> 40) % 100000;
        infd_histogram_record(a->shared, v);
        infd_histogram_record(a->own, v);
    }
    return NULL;
}

/* Threads recording into one histogram lose nothing, and merging per-thread
 * histograms gives exactly the same counts. */
static void test_concurrent_record_and_merge(void)
{
    infd_histogram *shared = infd_histogram_create();
    infd_histogram *merged = infd_histogram_create();
    rec_arg args[N_THREADS];
    pthread_t th[N_THREADS];
    ASSERT_TRUE(shared && merged);
    for (int i = 0; i < N_THREADS; i++) {
        args[i].shared = shared;
        args[i].own = infd_histogram_create();
        args[i].seed = (uint64_t)i * 7919 + 1;
        pthread_create(&th[i], NULL, recorder, &args[i]);
    }
    for (int i = 0; i < N_THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < N_THREADS; i++) {
        infd_histogram_merge(merged, args[i].own);
        infd_histogram_destroy(args[i].own);
    }
    ASSERT_EQ_U64(infd_histogram_count(shared), (uint64_t)PER_THREAD * N_THREADS);
    ASSERT_EQ_U64(infd_histogram_count(merged), infd_histogram_count(shared));
    ASSERT_EQ_U64(infd_histogram_sum(merged), infd_histogram_sum(shared));
    ASSERT_EQ_U64(infd_histogram_min(merged), infd_histogram_min(shared));
    ASSERT_EQ_U64(infd_histogram_max(merged), infd_histogram_max(shared));
    const double qs[] = { 0.5, 0.9, 0.95, 0.99, 0.999 };
    for (size_t k = 0; k < 5; k++)
        ASSERT_EQ_U64(infd_histogram_quantile(merged, qs[k]),
                      infd_histogram_quantile(shared, qs[k]));
    infd_histogram_destroy(shared);
    infd_histogram_destroy(merged);
}

static void test_record_allocates_nothing(void)
{
    infd_histogram *h = infd_histogram_create();
    ASSERT_TRUE(h != NULL);
    infd_alloc_stats before = infd_alloc_get_stats();
    for (uint64_t i = 0; i < 100000; i++)
        infd_histogram_record(h, i * 37);
    infd_alloc_stats after = infd_alloc_get_stats();
    infd_histogram_destroy(h);
    ASSERT_EQ_U64(after.n_allocs, before.n_allocs);
}

TEST_MAIN(test_bucket_arithmetic, test_quantiles_random_data, test_empty_and_single, test_count_le,
          test_concurrent_record_and_merge, test_record_allocates_nothing)
