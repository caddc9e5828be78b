/*
 * grpc.h - the gRPC frontend: KServe v2 `inference.GRPCInferenceService`
 * (proto/grpc_service.proto, Triton's names and field numbers) and
 * `grpc.health.v1.Health/Check`, on the gRPC core C API.
 *
 * RPCs (docs/GRPC.md has the details): ServerLive, ServerReady, ModelReady,
 * ServerMetadata, ModelMetadata, ModelConfig, ModelStatistics,
 * RepositoryIndex, RepositoryModelLoad, RepositoryModelUnload, ModelInfer and
 * ModelStreamInfer (bidirectional: responses in completion order, each with
 * its request's id; a failed request is a message with error_message and
 * the stream stays open). Errors are gRPC statuses: INVALID_ARGUMENT,
 * NOT_FOUND, UNAVAILABLE, RESOURCE_EXHAUSTED (queue full, message too
 * large), DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL.
 *
 * Threads: each of n_threads threads owns a completion queue and polls it
 * (grpc_completion_queue_next); new calls, received messages and finished
 * sends arrive there, where requests are decoded and submitted. A request's
 * completion callback (a runtime worker thread) starts the send of its
 * response itself (grpc_call_start_batch is thread-safe), so a response
 * costs no thread hop. No thread per call: call and request state come from
 * per-thread free lists, so thousands of open streams cost memory only.
 */
#ifndef INFD_FRONTENDS_GRPC_GRPC_H
#define INFD_FRONTENDS_GRPC_GRPC_H

#include <stdbool.h>
#include <stddef.h>

#include "infd/infd.h"

typedef struct infd_grpc_options {
    const char *host;         /* address to listen on; "0.0.0.0" */
    int port;                 /* 8001; 0 picks a free port (see infd_grpc_port) */
    size_t max_message_bytes; /* largest request message; 64 MiB (a 1x3x640x640 FP32 fits) */
    int n_threads;            /* completion-queue threads; 1 */
    /* A new connection must finish its handshake (TLS, and HTTP/2's
     * preface and settings) within this many seconds, else it is closed
     * (gRPC core's server handshake timeout). 30; gRPC's own default is 120. */
    int handshake_timeout_secs;
    /* A connection with no call in flight for this long is sent GOAWAY and
     * closed; clients reconnect when they next call. 0 (the default, as
     * gRPC's): never. */
    int idle_timeout_secs;
    /* Calls in flight on one connection; a client's further calls wait in
     * the client. 1024 (gRPC's default: no limit). */
    int max_concurrent_streams;
    /* TLS with Triton's options (issue #24): use_ssl with server_cert and
     * server_key (PEM files); use_ssl_mutual also asks every client for a
     * certificate that root_cert's CAs signed. All off/NULL by default. */
    bool use_ssl;
    bool use_ssl_mutual;
    const char *server_cert;
    const char *server_key;
    const char *root_cert;
    /* Access control (--grpc-restricted-protocol; borrowed, must outlive
     * the frontend): an RPC of a restricted API group without the metadata
     * triton-grpc-protocol-<key> and its value ends PERMISSION_DENIED.
     * NULL: everything open. */
    const struct infd_restricted *restricted;
} infd_grpc_options;

/* Defaults as documented on each field. */
void infd_grpc_options_init(infd_grpc_options *o);

typedef struct infd_grpc infd_grpc;

/* Binds host:port and starts the completion-queue thread(s); returns once
 * calls are accepted. The options are copied; `s` is borrowed and must
 * outlive the frontend. Fails with INVALID_ARGUMENT (port outside 0..65535,
 * n_threads outside 1..64, max_message_bytes 0 or above INT32_MAX; TLS
 * files missing, not PEM, or a key that does not match its certificate:
 * the message names the file), IO
 * (the address cannot be bound: the message names it), OUT_OF_MEMORY or
 * INTERNAL; nothing is left behind on failure. Does not log where it
 * listens: the caller does, with infd_grpc_port. */
infd_status infd_grpc_start(infd_server *s, const infd_grpc_options *o, infd_grpc **out,
                            infd_error *err);

/* The bound port (the ephemeral one when the options said 0). */
int infd_grpc_port(const infd_grpc *g);

/* Stops accepting calls, lets calls in flight finish (waiting a few
 * seconds, then cancelling those still open, such as idle streams), joins
 * the threads and frees `g`. Call it after infd_server_drain so that every
 * accepted inference has completed. NULL is a no-op. */
void infd_grpc_stop(infd_grpc *g);

#endif /* INFD_FRONTENDS_GRPC_GRPC_H */
