/*
 * worker.h - a worker's end of the router-worker link (docs/CLUSTER.md):
 * `infd serve --cluster ... --advertise tcp://HOST:PORT` binds a ZeroMQ
 * ROUTER socket there and serves the routers that connect.
 *
 * The life of a call: a router's INFER (a LinkMessage header from
 * proto/cluster.proto, then one frame per input) becomes an infd_request
 * whose inputs point into the received frames (no copy), submitted with
 * infd_infer_async; its RESULT (a ModelInferResponse header, then one frame
 * per output) is sent from the request's own memory (zmq_msg_init_data, no
 * copy), and the request is destroyed when ZeroMQ has sent the last of them.
 * Errors come back as a RESULT with the status and message, as the gRPC
 * frontend would answer them.
 *
 * Load: a HEARTBEAT every 250 ms to each router heard from in the last 3 s
 * (routers say HELLO when they connect and every 250 ms), with the calls in
 * flight and the capacity. Past the capacity an INFER is answered
 * RESOURCE_EXHAUSTED at once.
 *
 * Hostile peers: frames over max_message_bytes close the peer (ZeroMQ's
 * ZMQ_MAXMSGSIZE); a header that does not parse, or frames that do not fit
 * it, are dropped or answered with INVALID_ARGUMENT, and logged at most once
 * a second.
 *
 * Threads: one loop thread owns the socket (ZeroMQ sockets are not
 * thread-safe); completions come from the runtime's threads through a
 * mailbox; ZeroMQ's I/O thread runs the frames' free callbacks.
 */
#ifndef INFD_CLUSTER_WORKER_H
#define INFD_CLUSTER_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "infd/infd.h"

typedef struct cluster_worker cluster_worker;

typedef struct cluster_worker_options {
    const char *bind;         /* "tcp://HOST:PORT" (the advertised address) */
    const char *id;           /* the worker's id, sent in heartbeats */
    int capacity;             /* calls in flight at once; default 1024 */
    size_t max_message_bytes; /* largest frame a peer may send; default 64 MiB */
} cluster_worker_options;

void cluster_worker_options_init(cluster_worker_options *o);

infd_status cluster_worker_start(infd_server *server, const cluster_worker_options *o,
                                 cluster_worker **out, infd_error *err);

/* Waits up to 10 s for the calls in flight to be answered, says BYE to the
 * routers, closes the socket (linger 0) and frees. Call after the server
 * drained. NULL: no-op. */
void cluster_worker_stop(cluster_worker *w);

#endif /* INFD_CLUSTER_WORKER_H */
