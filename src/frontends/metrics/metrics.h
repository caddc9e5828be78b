/*
 * metrics.h - the Prometheus metrics frontend: GET /metrics on its own port.
 *
 * Serves Triton's per-model metrics under an `infd_` prefix, plus a latency
 * histogram, the batch-size distribution and the process metrics of the
 * Prometheus client libraries (metrics_text.h lists every family). Values
 * come from the public API only (infd_server_repository_index,
 * infd_server_model_acquire, infd_model_get_stats), read at each scrape:
 * nothing is cached, so a scrape costs one statistics snapshot per READY
 * model version.
 *
 * The frontend runs a libevent HTTP server on its own event base and thread
 * (with every signal blocked, so SIGTERM reaches the thread that waits for
 * it): GET or HEAD /metrics answers 200 with text/plain version 0.0.4, any
 * other path 404, any other method on /metrics 405.
 */
#ifndef INFD_FRONTENDS_METRICS_METRICS_H
#define INFD_FRONTENDS_METRICS_METRICS_H

#include <stddef.h>

#include "infd/infd.h"

/* More metric families, rendered at each scrape after the server's (an
 * app's, such as the video app's stage histograms): `*out` is a
 * NUL-terminated string of `*n` bytes the frontend frees with infd_free.
 * Called on the frontend's thread. */
typedef infd_status (*infd_metrics_extra_fn)(void *user, char **out, size_t *n, infd_error *err);

typedef struct infd_metrics_options {
    const char *host;            /* address to listen on; "0.0.0.0" */
    int port;                    /* 8002; 0 picks a free port (see infd_metrics_port) */
    infd_metrics_extra_fn extra; /* NULL: none */
    void *extra_user;
    /* Access control (--metrics-restricted-api; borrowed, must outlive the
     * frontend): /metrics needs the header of its `statistics` rule, else
     * 403. NULL: open. */
    const struct infd_restricted *restricted;
} infd_metrics_options;

/* Defaults as documented on each field. */
void infd_metrics_options_init(infd_metrics_options *o);

typedef struct infd_metrics infd_metrics;

/* Binds host:port and starts the frontend's thread. The options are copied;
 * `s` is borrowed and must outlive the frontend. Fails with
 * INVALID_ARGUMENT for a port outside 0..65535, IO when the address cannot
 * be bound (the message names it and says why), OUT_OF_MEMORY; nothing is
 * left behind on failure. Does not log: the caller says where it listens. */
infd_status infd_metrics_start(infd_server *s, const infd_metrics_options *o, infd_metrics **out,
                               infd_error *err);

/* The bound port (the ephemeral one when the options said 0). */
int infd_metrics_port(const infd_metrics *m);

/* Stops the event loop, joins the thread, closes the listener and every
 * connection and frees `m`. A scrape in progress completes first. NULL is a
 * no-op. */
void infd_metrics_stop(infd_metrics *m);

/* Renders the metrics text of `s` now, as GET /metrics serves it: `*out` is
 * a NUL-terminated string of `*n` bytes; free it with infd_free. Fails only
 * with OUT_OF_MEMORY or the repository index's error. Thread-safe. */
infd_status infd_metrics_render(infd_server *s, char **out, size_t *n, infd_error *err);

#endif /* INFD_FRONTENDS_METRICS_METRICS_H */
