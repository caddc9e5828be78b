/*
 * pool.h - a fixed pool of worker threads.
 *
 * Two ways to use it:
 *  - infd_pool_parallel_for(pool, n, fn, arg): runs fn(arg, i) for every i in
 *    [0, n) across the workers and the calling thread, and returns when all
 *    are done. This is how the engine splits one operator over cores. It
 *    allocates nothing; calls from several threads are serialised.
 *  - infd_pool_submit(pool, fn, arg): queues fn(arg) to run on some worker,
 *    into a ring sized at create time (no allocation; a full ring is an
 *    error, not a wait). infd_pool_wait_idle waits for all submitted tasks.
 *
 * Threads are created once in infd_pool_create and joined in destroy.
 * All functions are thread-safe except destroy, which must be the last call.
 */
#ifndef INFD_CORE_POOL_H
#define INFD_CORE_POOL_H

#include <stdint.h>

#include "infd/infd.h"

typedef struct infd_pool infd_pool;

/* Body of a parallel_for: called once per index. */
typedef void (*infd_pool_for_fn)(void *arg, int64_t index);

/* A submitted task. */
typedef void (*infd_pool_task_fn)(void *arg);

/* Starts `n_threads` workers (>= 0; 0 makes a pool whose parallel_for runs
 * inline and whose submit is refused) with a task ring of `task_capacity`
 * slots (0: 1024). Fails with OUT_OF_MEMORY or INTERNAL (thread creation),
 * leaving nothing behind. */
infd_status infd_pool_create(int n_threads, int task_capacity, infd_pool **out, infd_error *err);

/* Runs the queued tasks, stops and joins the workers, frees the pool.
 * NULL is a no-op. Must not be called from a worker. */
void infd_pool_destroy(infd_pool *pool);

/* Number of worker threads (the caller of parallel_for makes one more). */
int infd_pool_size(const infd_pool *pool);

/* Runs fn(arg, i) for i in [0, n) and waits for all of them. Indices are
 * handed out dynamically, so uneven work balances itself. n <= 0 returns at
 * once. Must not be called from inside a pool task or loop body. */
void infd_pool_parallel_for(infd_pool *pool, int64_t n, infd_pool_for_fn fn, void *arg);

/* Queues fn(arg). RESOURCE_EXHAUSTED when the ring is full, UNAVAILABLE for a
 * pool without workers. */
infd_status infd_pool_submit(infd_pool *pool, infd_pool_task_fn fn, void *arg, infd_error *err);

/* Waits until every submitted task has finished. */
void infd_pool_wait_idle(infd_pool *pool);

#endif /* INFD_CORE_POOL_H */
