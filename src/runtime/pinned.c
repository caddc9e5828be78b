/*
 * pinned.c - the pinned memory pool (infd.h, "Pinned memory pool").
 *
 * One region of page-locked host memory per process, made by the engine's
 * device backend (infd_engine_host_alloc) when the first model with GPU
 * instances loads, carved into 64 KiB pages. An allocation is a run of
 * free pages found first-fit from where the last one ended (a bitmap, under
 * one mutex: allocations are per request body or larger, so a few thousand
 * a second). The region is never returned to the driver: libevent's read
 * buffers and requests in flight may point into it until the process ends,
 * and a later server reuses it.
 *
 * Whether a pointer is in the pool is a lock-free range check (the
 * scheduler asks for every input piece it batches).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "infd/engine.h"
#include "runtime/runtime.h"

#define PAGE ((size_t)64 << 10)

static struct {
    pthread_mutex_t mu;
    size_t n_pages;
    uint64_t *used;  /* bitmap of pages in use */
    uint32_t *first; /* per page in use: the first page of its allocation */
    uint32_t *pages; /* per first page: the allocation's length in pages */
    size_t hint;     /* where the next search starts */
    size_t free_pages;
    bool warned; /* "the pool is full" logged once */
} pool = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* Set once, after the fields above (release); read without the lock. */
static _Atomic(uint8_t *) pool_base;
static size_t pool_bytes;

static bool page_used(size_t i)
{
    return (pool.used[i >> 6] >> (i & 63)) & 1u;
}

static void mark(size_t from, size_t n, bool used)
{
    for (size_t i = from; i < from + n; i++) {
        if (used) {
            pool.used[i >> 6] |= (uint64_t)1 << (i & 63);
            pool.first[i] = (uint32_t)from;
        } else {
            pool.used[i >> 6] &= ~((uint64_t)1 << (i & 63));
        }
    }
    pool.pages[from] = used ? (uint32_t)n : 0;
}

infd_status rt_pinned_init_memory(void *mem, size_t bytes, infd_error *err)
{
    size_t n = bytes / PAGE;
    if (n > UINT32_MAX)
        n = UINT32_MAX;
    uint64_t *used = infd_calloc((n + 63) / 64 + 1, sizeof(uint64_t));
    uint32_t *first = infd_calloc(n + 1, sizeof(uint32_t));
    uint32_t *pages = infd_calloc(n + 1, sizeof(uint32_t));
    if (!used || !first || !pages) {
        infd_free(used);
        infd_free(first);
        infd_free(pages);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for the pinned pool");
    }
    pthread_mutex_lock(&pool.mu);
    if (atomic_load(&pool_base)) {
        pthread_mutex_unlock(&pool.mu);
        infd_free(used);
        infd_free(first);
        infd_free(pages);
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "the pinned pool exists");
    }
    pool.n_pages = n;
    pool.used = used;
    pool.first = first;
    pool.pages = pages;
    pool.hint = 0;
    pool.free_pages = n;
    pool_bytes = n * PAGE;
    atomic_store_explicit(&pool_base, (uint8_t *)mem, memory_order_release);
    pthread_mutex_unlock(&pool.mu);
    return INFD_STATUS_OK;
}

infd_status rt_pinned_init(size_t bytes, infd_error *err)
{
    static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
    bytes -= bytes % PAGE;
    if (bytes == 0 || atomic_load(&pool_base))
        return INFD_STATUS_OK;
    pthread_mutex_lock(&init_mu);
    infd_status st = INFD_STATUS_OK;
    if (!atomic_load(&pool_base)) {
        uint64_t t0 = infd_clock_ns();
        void *mem = infd_engine_host_alloc(INFD_DEVICE_CUDA, bytes, err);
        if (!mem) {
            st = err ? err->code : INFD_STATUS_OUT_OF_MEMORY;
        } else {
            st = rt_pinned_init_memory(mem, bytes, err);
            if (st != INFD_STATUS_OK)
                infd_engine_host_free(INFD_DEVICE_CUDA, mem);
            else
                infd_log(INFD_LOG_LEVEL_INFO, "pinned memory pool: %zu MiB in %.0f ms", bytes >> 20,
                         (double)(infd_clock_ns() - t0) / 1e6);
        }
    }
    pthread_mutex_unlock(&init_mu);
    return st;
}

void *infd_pinned_alloc(size_t nbytes)
{
    uint8_t *base = atomic_load_explicit(&pool_base, memory_order_acquire);
    if (!base || nbytes == 0 || nbytes > pool_bytes)
        return NULL;
    size_t k = (nbytes + PAGE - 1) / PAGE;
    pthread_mutex_lock(&pool.mu);
    size_t n = pool.n_pages, run = 0, start = 0, i = pool.hint;
    bool found = false;
    if (k <= pool.free_pages) {
        /* n + k steps: a run that starts just before the hint ends after
         * the scan has wrapped round to it. */
        for (size_t step = 0; step < n + k; step++, i++) {
            if (i == n) {
                i = 0;
                run = 0;
            }
            if ((i & 63) == 0 && i + 64 <= n && pool.used[i >> 6] == UINT64_MAX) {
                i += 63; /* a full word of pages in use */
                step += 63;
                run = 0;
                continue;
            }
            if (page_used(i)) {
                run = 0;
                continue;
            }
            if (run++ == 0)
                start = i;
            if (run == k) {
                found = true;
                break;
            }
        }
    }
    void *p = NULL;
    if (found) {
        mark(start, k, true);
        pool.free_pages -= k;
        pool.hint = start + k < n ? start + k : 0;
        p = base + start * PAGE;
    } else if (!pool.warned) {
        pool.warned = true;
        infd_log(INFD_LOG_LEVEL_WARN,
                 "pinned memory pool (%zu MiB) has no room for %zu bytes (%zu MiB free): "
                 "inputs go through ordinary memory until it has (a larger "
                 "--pinned-memory-pool-byte-size helps); logged once",
                 pool_bytes >> 20, nbytes, pool.free_pages * PAGE >> 20);
    }
    pthread_mutex_unlock(&pool.mu);
    return p;
}

bool infd_pinned_free(void *ptr)
{
    uint8_t *base = atomic_load_explicit(&pool_base, memory_order_acquire);
    if (!infd_pinned_contains(ptr, 1))
        return false;
    size_t at = (size_t)((uintptr_t)ptr - (uintptr_t)base);
    pthread_mutex_lock(&pool.mu);
    size_t page = at / PAGE;
    uint32_t k = pool.pages[page];
    if (at % PAGE != 0 || !page_used(page) || k == 0) {
        pthread_mutex_unlock(&pool.mu);
        infd_log(INFD_LOG_LEVEL_ERROR, "pinned memory pool: freeing %p, which it did not hand out",
                 ptr);
        return true; /* pool memory all the same: never the caller's to free */
    }
    mark(page, k, false);
    pool.free_pages += k;
    pthread_mutex_unlock(&pool.mu);
    return true;
}

bool infd_pinned_contains(const void *ptr, size_t nbytes)
{
    /* As integers: ptr may belong to any object. */
    uintptr_t base = (uintptr_t)atomic_load_explicit(&pool_base, memory_order_acquire);
    uintptr_t p = (uintptr_t)ptr;
    return base && p >= base && p - base < pool_bytes && nbytes <= pool_bytes - (p - base);
}

bool infd_pinned_find(const void *ptr, void **start, size_t *nbytes)
{
    uint8_t *base = atomic_load_explicit(&pool_base, memory_order_acquire);
    if (!infd_pinned_contains(ptr, 1))
        return false;
    size_t page = (size_t)((const uint8_t *)ptr - base) / PAGE;
    pthread_mutex_lock(&pool.mu);
    bool ok = page_used(page);
    if (ok) {
        size_t f = pool.first[page];
        *start = base + f * PAGE;
        *nbytes = pool.pages[f] * PAGE;
    }
    pthread_mutex_unlock(&pool.mu);
    return ok;
}
