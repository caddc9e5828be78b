/*
 * pool.c - fixed worker threads with a task ring and a parallel_for.
 *
 * One mutex guards the pool state; workers sleep on `wake`. A parallel_for
 * publishes a job that lives on the caller's stack: workers that see it
 * register (job_refs) under the mutex, pull indices from an atomic counter
 * outside it, and unregister when the counter runs out. The caller works
 * too, then withdraws the job so late wakers cannot join, and waits for
 * job_refs to reach zero before its stack frame may go away.
 *
 * Rejected: a lock-free spinning barrier (as ggml uses) would cut the wake
 * latency of short operators further, but burns cores between operators;
 * revisit with numbers from the engine's profile.
 */
#include "core/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/alloc.h"
#include "core/common.h"

typedef struct for_job {
    infd_pool_for_fn fn;
    void *arg;
    int64_t n;
    _Atomic int64_t next; /* next index to hand out */
} for_job;

typedef struct task {
    infd_pool_task_fn fn;
    void *arg;
} task;

struct infd_pool {
    pthread_t *threads;
    int n_threads;

    /* Guarded by mu. */
    pthread_mutex_t mu;
    pthread_cond_t wake;     /* workers: a task or a job arrived, or stop */
    pthread_cond_t job_done; /* parallel_for caller: job_refs reached 0 */
    pthread_cond_t idle;     /* wait_idle: no queued or running tasks */
    pthread_mutex_t for_mu;  /* serialises parallel_for callers */
    task *ring;
    int ring_cap;
    int ring_head; /* next task to run */
    int ring_len;
    int n_running_tasks;
    for_job *job;     /* published parallel_for, or NULL */
    uint64_t job_gen; /* bumped for every published job */
    int job_refs;     /* workers inside the current job */
    int stop;
};

static void run_job(for_job *job)
{
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (i >= job->n)
            return;
        job->fn(job->arg, i);
    }
}

static void *worker_main(void *arg)
{
    infd_pool *pool = arg;
    uint64_t seen_gen = 0;

    pthread_mutex_lock(&pool->mu);
    for (;;) {
        if (pool->job && pool->job_gen != seen_gen) {
            for_job *job = pool->job;
            seen_gen = pool->job_gen;
            pool->job_refs++;
            pthread_mutex_unlock(&pool->mu);
            run_job(job);
            pthread_mutex_lock(&pool->mu);
            if (--pool->job_refs == 0)
                pthread_cond_signal(&pool->job_done);
            continue;
        }
        if (pool->ring_len > 0) {
            task t = pool->ring[pool->ring_head];
            pool->ring_head = (pool->ring_head + 1) % pool->ring_cap;
            pool->ring_len--;
            pool->n_running_tasks++;
            pthread_mutex_unlock(&pool->mu);
            t.fn(t.arg);
            pthread_mutex_lock(&pool->mu);
            pool->n_running_tasks--;
            if (pool->ring_len == 0 && pool->n_running_tasks == 0)
                pthread_cond_broadcast(&pool->idle);
            continue;
        }
        if (pool->stop)
            break;
        pthread_cond_wait(&pool->wake, &pool->mu);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

infd_status infd_pool_create(int n_threads, int task_capacity, infd_pool **out, infd_error *err)
{
    infd_pool *pool = NULL;
    infd_status st = INFD_STATUS_OK;
    *out = NULL;

    if (n_threads < 0 || task_capacity < 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "thread pool: n_threads %d and task_capacity %d must be >= 0",
                              n_threads, task_capacity);
    pool = infd_calloc(1, sizeof(*pool));
    if (!pool)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "thread pool: out of memory");
    pool->ring_cap = task_capacity ? task_capacity : 1024;
    pool->ring = infd_calloc((size_t)pool->ring_cap, sizeof(task));
    pool->threads = n_threads ? infd_calloc((size_t)n_threads, sizeof(pthread_t)) : NULL;
    if (!pool->ring || (n_threads && !pool->threads)) {
        infd_free(pool->ring);
        infd_free(pool->threads);
        infd_free(pool);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "thread pool: out of memory");
    }
    pthread_mutex_init(&pool->mu, NULL);
    pthread_mutex_init(&pool->for_mu, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->job_done, NULL);
    pthread_cond_init(&pool->idle, NULL);

    for (int i = 0; i < n_threads; i++) {
        int rc = pthread_create(&pool->threads[i], NULL, worker_main, pool);
        if (rc != 0) {
            st = infd_error_set(err, INFD_STATUS_INTERNAL,
                                "thread pool: creating thread %d of %d failed: %s", i + 1,
                                n_threads, strerror(rc));
            break;
        }
        pool->n_threads++;
    }
    if (st != INFD_STATUS_OK) {
        infd_pool_destroy(pool);
        return st;
    }
    *out = pool;
    return INFD_STATUS_OK;
}

void infd_pool_destroy(infd_pool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n_threads; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_mutex_destroy(&pool->for_mu);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->job_done);
    pthread_cond_destroy(&pool->idle);
    infd_free(pool->threads);
    infd_free(pool->ring);
    infd_free(pool);
}

int infd_pool_size(const infd_pool *pool)
{
    return pool->n_threads;
}

void infd_pool_parallel_for(infd_pool *pool, int64_t n, infd_pool_for_fn fn, void *arg)
{
    if (n <= 0)
        return;
    if (pool->n_threads == 0 || n == 1) {
        for (int64_t i = 0; i < n; i++)
            fn(arg, i);
        return;
    }
    for_job job = { .fn = fn, .arg = arg, .n = n };
    atomic_init(&job.next, 0);

    pthread_mutex_lock(&pool->for_mu);
    pthread_mutex_lock(&pool->mu);
    pool->job = &job;
    pool->job_gen++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);

    run_job(&job);

    pthread_mutex_lock(&pool->mu);
    pool->job = NULL;
    while (pool->job_refs > 0)
        pthread_cond_wait(&pool->job_done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
    pthread_mutex_unlock(&pool->for_mu);
}

infd_status infd_pool_submit(infd_pool *pool, infd_pool_task_fn fn, void *arg, infd_error *err)
{
    if (pool->n_threads == 0)
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE,
                              "thread pool has no workers to run a task");
    pthread_mutex_lock(&pool->mu);
    if (pool->stop || pool->ring_len == pool->ring_cap) {
        int cap = pool->ring_cap;
        int stopping = pool->stop;
        pthread_mutex_unlock(&pool->mu);
        if (stopping)
            return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "thread pool is stopping");
        return infd_error_set(err, INFD_STATUS_RESOURCE_EXHAUSTED,
                              "thread pool task queue is full (%d tasks)", cap);
    }
    int slot = (pool->ring_head + pool->ring_len) % pool->ring_cap;
    pool->ring[slot].fn = fn;
    pool->ring[slot].arg = arg;
    pool->ring_len++;
    pthread_cond_signal(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    return INFD_STATUS_OK;
}

void infd_pool_wait_idle(infd_pool *pool)
{
    pthread_mutex_lock(&pool->mu);
    while (pool->ring_len > 0 || pool->n_running_tasks > 0)
        pthread_cond_wait(&pool->idle, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}
