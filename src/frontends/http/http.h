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
 *   GET  /v2/<prefix>/...                     an app's routes (infd_http_extension)
 * HTTPS when the options name a certificate and key (OpenSSL bufferevents;
 * optional client certificates).
 * Errors are {"error": "..."} with 400 (bad request), 403 (a restricted
 * API without its header), 404 (unknown model or
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

#include <stdbool.h>
#include <stddef.h>

#include "infd/infd.h"

/*
 * An app's routes: GET /v2/<prefix>/... answered by the app (the live video
 * app's /v2/video/streams), as a JSON document or as an event stream
 * (Server-Sent Events) the app pushes to from its own threads. The frontend
 * knows nothing of the app beyond this.
 */
typedef struct infd_http_sink infd_http_sink;

/* Pushes one event, `data` (n bytes, one line, no newline), sent as
 * "data: <data>\n\n". Any thread; never blocks. False once the client has
 * gone or the frontend is stopping: release the sink and send no more.
 * Events wait for a slow reader up to 1 MiB; past that they are dropped for
 * that client, which never holds the app up. */
bool infd_http_sink_send(infd_http_sink *sink, const char *data, size_t n);

/* The app is done with `sink` (any thread): the reply ends (if the client
 * is still there) and the sink is freed. Release every sink before
 * infd_http_stop. */
void infd_http_sink_release(infd_http_sink *sink);

/* Called on a loop thread for GET /v2/<prefix>/<path>; must not block. It
 * answers a JSON document (OK with *json set: `*n` bytes, freed by the
 * frontend with infd_free), or takes `sink` to push events to (OK with
 * *json NULL: a 200 text/event-stream reply starts, and the app keeps the
 * sink until infd_http_sink_release), or fails (NOT_FOUND: 404, ...; the
 * message goes to the client). */
typedef infd_status (*infd_http_route_fn)(void *user, const char *path, infd_http_sink *sink,
                                          char **json, size_t *n, infd_error *err);

typedef struct infd_http_extension {
    const char *prefix; /* the first segment after /v2/ ("video") */
    infd_http_route_fn route;
    void *user;
} infd_http_extension;

typedef struct infd_http_options {
    const char *host;      /* address to listen on; "0.0.0.0" */
    int port;              /* 8000; 0 picks a free port (see infd_http_port) */
    size_t max_body_bytes; /* larger request bodies get 413; 64 MiB */
    int max_json_depth;    /* JSON containers open at once, skipped ones too; deeper: 400; 64 */
    /* A connection that sends or takes no byte for this long is closed:
     * while it sends its headers or body, while an answer waits for it to
     * read, and idle between requests. 120 (seconds). */
    int timeout_secs;
    /* Connections open at once, in total and from one client address (its
     * IP): a connection over a limit gets 503 (total) or 429 (per client)
     * for its first request, then is closed. 4096 and 1024; 0: no limit. */
    int max_connections;
    int max_connections_per_client;
    /* A request (headers and body) must arrive within this many seconds of
     * its first byte, plus one second per KiB received; else 408 and the
     * connection is closed (slowloris). 30; 0: off. */
    int header_timeout_secs;
    int n_threads; /* event-loop threads; 1 */
    /* HTTPS (issue #24): PEM files of the certificate chain and its key;
     * both NULL (the default): plain HTTP. With ssl_client_ca, clients must
     * present a certificate one of its CAs signed (mutual TLS). */
    const char *ssl_cert;
    const char *ssl_key;
    const char *ssl_client_ca;
    /* Access control (--http-restricted-api; borrowed, must outlive the
     * frontend): a request to a restricted API group without its header
     * and value gets 403. NULL: everything open. */
    const struct infd_restricted *restricted;
    /* Apps' routes (borrowed; must outlive the frontend); none by default. */
    const infd_http_extension *extensions;
    int n_extensions;
} infd_http_options;

/* Defaults as documented on each field. */
void infd_http_options_init(infd_http_options *o);

typedef struct infd_http infd_http;

/* Binds host:port and starts the event-loop thread(s); returns once they
 * accept connections. The options are copied; `s` is borrowed and must
 * outlive the frontend. Fails with INVALID_ARGUMENT (port outside 0..65535,
 * n_threads < 1, max_body_bytes 0; a TLS file missing, not PEM or a key
 * that does not match its certificate: the message names the file), IO (the address cannot be
 * resolved or bound: the message names it and says why), OUT_OF_MEMORY or INTERNAL; nothing is left
 * behind on failure. Does not log where it listens: the caller does, with infd_http_port. */
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
