/*
 * http.h - the HTTP/REST frontend: KServe v2 (Open Inference Protocol) with
 * Triton's extensions, on libevent's HTTP server.
 *
 * Endpoints (docs/HTTP.md has the details and examples):
 *   GET  /v2                                  server metadata
 *   GET  /v2/health/live, /v2/health/ready    200 or 503
 *   GET  /v2/models/{m}[/versions/{v}]        model metadata
 *   GET  .../ready, .../config, .../stats     readiness, config JSON, statistics
 *   POST .../infer                            inference (JSON and binary tensors)
 *   GET  /v2/models/stats                     statistics of every READY model
 *   POST /v2/repository/index                 repository index ({"ready": true})
 *   POST /v2/repository/models/{m}/load|unload
 * Errors are {"error": "..."} with 400 (bad request), 404 (unknown model or
 * route), 405 (wrong method), 413 (body over max_body_bytes), 503
 * (unavailable, not ready, draining, queue full as in Triton), 504 (queue
 * timeout), 500 (internal).
 *
 * Threads: each of n_threads event-loop threads owns a libevent base, an
 * evhttp server and a listening socket on the same port (SO_REUSEPORT, the
 * kernel spreads connections). Requests are parsed and submitted on the
 * loop thread; infd_infer_async's callback runs on a runtime worker and only
 * queues the finished request back to its loop (a mutex-protected list and
 * a libevent user event), where the response is written. Model load/unload
 * block, so they run on a short-lived thread of their own. Nothing a client
 * does (sending slowly, not reading, vanishing) blocks the loop.
 */
#ifndef INFD_FRONTENDS_HTTP_HTTP_H
#define INFD_FRONTENDS_HTTP_HTTP_H

#include <stddef.h>

#include "infd/infd.h"

typedef struct infd_http_options {
    const char *host;      /* address to listen on; "0.0.0.0" */
    int port;              /* 8000; 0 picks a free port (see infd_http_port) */
    size_t max_body_bytes; /* larger request bodies get 413; 64 MiB */
    int n_threads;         /* event-loop threads; 1 */
} infd_http_options;

/* Defaults as documented on each field. */
void infd_http_options_init(infd_http_options *o);

typedef struct infd_http infd_http;

/* Binds host:port and starts the event-loop thread(s); returns once they
 * accept connections. The options are copied; `s` is borrowed and must
 * outlive the frontend. Fails with INVALID_ARGUMENT (port outside 0..65535,
 * n_threads < 1, max_body_bytes 0), IO (the address cannot be resolved or
 * bound: the message names it and says why), OUT_OF_MEMORY or INTERNAL;
 * nothing is left behind on failure. Does not log where it listens: the
 * caller does, with infd_http_port. */
infd_status infd_http_start(infd_server *s, const infd_http_options *o, infd_http **out,
                            infd_error *err);

/* The bound port (the ephemeral one when the options said 0). */
int infd_http_port(const infd_http *h);

/* Stops listening, lets in-flight requests complete and their responses be
 * written (waiting at most a few seconds for clients that do not read),
 * joins the threads, closes every connection and frees `h`. Call it after
 * infd_server_drain so no new inference starts meanwhile. NULL is a no-op. */
void infd_http_stop(infd_http *h);

#endif /* INFD_FRONTENDS_HTTP_HTTP_H */
