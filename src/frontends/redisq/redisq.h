/*
 * redisq.h - the Redis job queue frontend: jobs in from Redis Streams,
 * results out to Redis keys, with at-least-once delivery (docs/REDIS.md).
 *
 * Jobs for model M are entries of the stream {prefix}:jobs:M, read through
 * the consumer group {group} by a consumer named HOST-PID-N, so many infd
 * processes share one Redis and each job goes to one of them. The frontend
 * reads only as many jobs as it has room for (XREADGROUP ... COUNT free),
 * decodes each (job.h) into an ordinary request, and submits it to the
 * model's scheduler, where it batches with HTTP and gRPC traffic. When it
 * completes, the result JSON is stored with SET results:{id} ... NX EX ttl
 * and only then is the entry acknowledged (XACK), in one pipeline; with
 * `publish`, PUBLISH {prefix}:done:M {id} follows. NX makes a second run of
 * a job harmless: the first result stays.
 *
 * Recovery: every consumer runs XAUTOCLAIM on entries idle longer than
 * claim_idle_ms (their consumer died or hangs) and runs them itself. An
 * entry delivered more than max_deliveries times goes to the stream
 * {prefix}:dead:M with its fields and last error, gets an error result,
 * and is acknowledged. A malformed job gets an error result at once and is
 * never retried. A retryable failure (the model unloading, its queue full,
 * an execution error) leaves the entry pending, with its error kept in the
 * hash {prefix}:errors:M, for a later claim.
 *
 * Connections: one per model for the blocking reads, one for everything
 * else. Lost connections are remade with backoff (100 ms doubling to 5 s);
 * results finished meanwhile wait in memory and are written on reconnect.
 *
 * Threads: one libevent loop thread owns every Redis connection. Completion
 * callbacks (instance worker threads) only queue the job back to it.
 */
#ifndef INFD_FRONTENDS_REDISQ_REDISQ_H
#define INFD_FRONTENDS_REDISQ_REDISQ_H

#include <stdbool.h>
#include <stddef.h>

#include "infd/infd.h"

typedef struct infd_redisq_options {
    const char *url;      /* redis://[USER[:PASSWORD]@]HOST[:PORT][/DB]; port 6379, db 0 */
    const char *password; /* AUTH with this when the URL has no password; NULL: none */
    const char *prefix;   /* "infd" */
    const char *group;    /* "infd" */
    int claim_idle_ms;    /* 30000: idle time before a pending job is taken over */
    int max_deliveries;   /* 3: more deliveries than this and the job is dead */
    int result_ttl_s;     /* 86400: results:{id} expire after this */
    int max_inflight;     /* jobs read and not yet finished, per model; 0: 8 x max batch, >= 64 */
    size_t max_job_bytes; /* 64 MiB: a bigger entry gets an error result */
    bool publish;         /* PUBLISH {prefix}:done:{model} {id} after each result */
    const char *models;   /* comma-separated models to take jobs for; NULL: every READY one */
} infd_redisq_options;

void infd_redisq_options_init(infd_redisq_options *o);

typedef struct infd_redisq infd_redisq;

/* Checks the options (INVALID_ARGUMENT naming the bad one: a malformed URL,
 * a prefix or group with spaces), starts the loop thread and connects; the
 * first connection is made in the background, so a Redis that is not up
 * yet is retried, not an error. `s` must outlive the frontend. */
infd_status infd_redisq_start(infd_server *s, const infd_redisq_options *o, infd_redisq **out,
                              infd_error *err);

/* Reads no more jobs (any thread). Waits (up to 3 s) for the reads in
 * flight: a blocked XREADGROUP is unblocked, and the jobs it answered with
 * are handed to the scheduler before this returns, so a server drain after
 * it finishes them. Jobs already read still finish. */
void infd_redisq_quiesce(infd_redisq *q);

/* Waits up to 10 s for the results of finished jobs to be written (call it
 * after infd_server_drain, so every job read has finished), then closes
 * the connections, joins the thread and frees `q`. Jobs not written stay
 * pending in Redis for another consumer. NULL is a no-op. */
void infd_redisq_stop(infd_redisq *q);

/* The consumer name (HOST-PID-N). */
const char *infd_redisq_consumer(const infd_redisq *q);

/* Prometheus text of the queue's families (jobs read, completed, failed,
 * claimed, dead-lettered, duplicates, reconnects; lag and pending per
 * model), allocated (free with infd_free). */
infd_status infd_redisq_metrics_render(infd_redisq *q, char **out, size_t *n, infd_error *err);

#endif /* INFD_FRONTENDS_REDISQ_REDISQ_H */
