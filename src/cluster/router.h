/*
 * router.h - `infd router` (docs/CLUSTER.md): the KServe v2 HTTP and gRPC
 * API of a server whose models are served by workers found in etcd and
 * reached over ZeroMQ.
 *
 * The design keeps the layers (DESIGN.md): the router is an infd_server
 * whose models are of the kind "remote" (registered here), so the HTTP and
 * gRPC frontends serve it unchanged. A remote model's instance defers each
 * request (infd_request_defer) to the router's loop, which sends it to a
 * worker and finishes it (infd_request_done) when the worker answers.
 *
 * The view: a watch of <prefix>/workers/ gives the workers, their addresses
 * and their READY models with configs. A model READY on some worker is
 * loaded into the router's own (temporary) repository as a remote model
 * with that config's inputs, outputs and max_batch_size.
 *
 * Routing: among the live workers with the model READY and room (this
 * router's calls there below the capacity the worker heartbeats), the
 * power of two choices on (calls this router has in flight there + the
 * worker's own count from its last heartbeat), or round robin. A worker
 * is dead after 3 missed heartbeats (750 ms) or when its key goes; its
 * calls in flight are sent once more to another worker when they have not
 * been retried yet and their timeout allows, else they fail UNAVAILABLE.
 * No worker for a model: UNAVAILABLE at once; no room anywhere:
 * RESOURCE_EXHAUSTED at once.
 *
 * Sequences (requests with a correlation id): the START's worker is
 * remembered, and every later request of the sequence goes there, since
 * its state is there; the END forgets it (so does 10 minutes of silence).
 * Such requests are never retried elsewhere: when their worker is gone
 * they fail UNAVAILABLE, saying the sequence must start again.
 *
 * Limits, at submit on the frontend's thread (infd_kind_model_set_submit),
 * so refusals take microseconds: token buckets per model and per client
 * key (src/cluster/ratelimit.h), and a bound on the requests taken and not
 * finished (max_inflight): the router queues nothing without bound.
 *
 * Threads: one loop thread owns the etcd client and the ZeroMQ sockets
 * (one DEALER per worker); the frontends' threads post calls to it through
 * a mailbox; loads run on a thread of their own (they block).
 */
#ifndef INFD_CLUSTER_ROUTER_H
#define INFD_CLUSTER_ROUTER_H

#include "infd/infd.h"

typedef struct cluster_router cluster_router;

typedef enum cluster_router_policy {
    CLUSTER_ROUTER_P2C,         /* the power of two choices on load (default) */
    CLUSTER_ROUTER_ROUND_ROBIN, /* each candidate in turn */
} cluster_router_policy;

#define CLUSTER_ROUTER_MAX_RULES 64

typedef struct cluster_router_options {
    const char *etcd;       /* "http://HOST:PORT[,...]" (required) */
    const char *prefix;     /* default "/infd" */
    const char *repository; /* a folder of the router's own for its remote models (required) */
    cluster_router_policy policy;
    /* Requests taken and not finished, all models (default 4096): past it,
     * RESOURCE_EXHAUSTED at once. */
    int max_inflight;
    /* Token buckets (src/cluster/ratelimit.h's syntax). */
    const char *rate_limits[CLUSTER_ROUTER_MAX_RULES];
    int n_rate_limits;
    /* The level of the request log line (id, model, worker, status,
     * latency); default DEBUG. */
    infd_log_level request_log;
} cluster_router_options;

void cluster_router_options_init(cluster_router_options *o);

/* Registers the "remote" kind (once per process) and starts the loop.
 * `server` must be in EXPLICIT control mode over o->repository.
 * INVALID_ARGUMENT for a malformed rate limit, saying which. */
infd_status cluster_router_start(infd_server *server, const cluster_router_options *o,
                                 cluster_router **out, infd_error *err);

/* The router's Prometheus families (an infd_metrics_extra_fn: `user` is
 * the router): per worker, up, calls in flight, requests, failures,
 * retries, heartbeats missed and a latency histogram; evictions; requests
 * refused by rate limits and for overload. Rendered
 * on the loop, which owns the worker table; any thread may call it. */
infd_status cluster_router_metrics(void *user, char **out, size_t *n, infd_error *err);

/* Stops the loop (calls in flight fail UNAVAILABLE) and frees. Call
 * before infd_server_destroy. NULL: no-op. */
void cluster_router_stop(cluster_router *r);

#endif /* INFD_CLUSTER_ROUTER_H */
