/*
 * etcd.h - an etcd v3 client on its JSON gateway (docs/CLUSTER.md), for
 * cluster membership: put, range, delete, lease grant / keepalive / revoke,
 * and a prefix watch that lists, then follows, and resyncs by itself.
 *
 * There is no maintained C client for etcd v3; the gateway is HTTP/1.1 with
 * JSON bodies whose bytes fields are base64 (etcd's
 * Documentation/dev-guide/api_grpc_gateway.md). Requests go over libevent's
 * HTTP client, the bodies are parsed by yajl and base64 is OpenSSL's.
 *
 * Endpoints: "http://HOST:PORT" or "HOST:PORT", comma-separated (any
 * members of one cluster). A request that cannot reach its endpoint, or
 * gets a 5xx, moves to the next one and is tried there, each endpoint once;
 * then it fails UNAVAILABLE. The endpoint that answered last is used first.
 *
 * Threads: everything runs on the caller's event_base, one thread; the
 * callbacks run there. Calls never block. A call that cannot even be sent
 * (out of memory, no connection can be made) calls back before it returns,
 * so set any "in flight" flag before calling.
 *
 * Watches (etcd_watch_start): a Range of the prefix, given whole to
 * on_sync, then a Watch from the next revision, whose events go to
 * on_events. A broken stream is resumed from the last revision seen; a
 * compacted one (or any resume that fails) lists the prefix again and
 * calls on_sync again with everything there is, so the caller's view is
 * always whole after each on_sync and exact after each on_events.
 */
#ifndef INFD_CLUSTER_ETCD_H
#define INFD_CLUSTER_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "infd/infd.h"

struct event_base;

typedef struct etcd_client etcd_client;

/* One key: key and value are NUL-terminated copies (value may hold NULs:
 * use value_len), valid during the callback. */
typedef struct etcd_kv {
    const char *key;
    const char *value;
    size_t key_len, value_len;
    int64_t create_revision, mod_revision, version, lease;
} etcd_kv;

typedef struct etcd_result {
    int64_t revision; /* header.revision: the store's revision after the call */
    etcd_kv *kvs;     /* range: the keys found */
    int n_kvs;
    int64_t lease_id, ttl; /* lease grant and keepalive: ttl <= 0 means the lease is gone */
    int64_t deleted;       /* delete: how many */
} etcd_result;

/* A call's end: status OK and `r` set, or an error with `message` (which
 * names the endpoint and what etcd or the network said). */
typedef void (*etcd_callback)(void *user, infd_status status, const char *message,
                              const etcd_result *r);

infd_status etcd_client_create(struct event_base *base, const char *endpoints, etcd_client **out,
                               infd_error *err);
/* Cancels every call and watch (their callbacks do not run). NULL: no-op. */
void etcd_client_destroy(etcd_client *c);
/* The endpoint used first now ("host:port"). */
const char *etcd_client_endpoint(const etcd_client *c);

/* Per-call timeout in seconds (default 5; watches have none). */
void etcd_client_set_timeout(etcd_client *c, int seconds);

void etcd_put(etcd_client *c, const char *key, const void *value, size_t value_len, int64_t lease,
              etcd_callback cb, void *user);
/* prefix: every key that starts with `key`; else `key` alone. */
void etcd_range(etcd_client *c, const char *key, bool prefix, etcd_callback cb, void *user);
void etcd_delete(etcd_client *c, const char *key, bool prefix, etcd_callback cb, void *user);
void etcd_lease_grant(etcd_client *c, int64_t ttl_s, etcd_callback cb, void *user);
void etcd_lease_keepalive(etcd_client *c, int64_t lease, etcd_callback cb, void *user);
void etcd_lease_revoke(etcd_client *c, int64_t lease, etcd_callback cb, void *user);

typedef struct etcd_event {
    bool deleted; /* DELETE; else PUT */
    etcd_kv kv;   /* a DELETE's has the key and its mod_revision only */
} etcd_event;

typedef struct etcd_watch etcd_watch;

typedef struct etcd_watch_callbacks {
    /* Every key under the prefix at `revision`: replace the view. */
    void (*on_sync)(void *user, const etcd_kv *kvs, int n, int64_t revision);
    /* Changes after the last sync or event, in revision order. */
    void (*on_events)(void *user, const etcd_event *events, int n, int64_t revision);
    /* Optional: the watch lost etcd (message) or found it again (NULL). */
    void (*on_state)(void *user, const char *message);
    void *user;
} etcd_watch_callbacks;

infd_status etcd_watch_start(etcd_client *c, const char *prefix, const etcd_watch_callbacks *cbs,
                             etcd_watch **out, infd_error *err);
/* Stops and frees (no callback runs after). NULL: no-op. */
void etcd_watch_stop(etcd_watch *w);

/* The status an etcd gRPC code (the gateway's "code") maps to. */
infd_status etcd_status_from_code(int code);

#endif /* INFD_CLUSTER_ETCD_H */
