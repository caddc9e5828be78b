/*
 * etcd.c - the etcd v3 JSON-gateway client (etcd.h).
 *
 * A call's life: the JSON body is built (bytes fields base64), a POST goes
 * to the preferred endpoint on that endpoint's keep-alive connection, and
 * the reply is parsed (yajl's tree) into an etcd_result for the callback.
 * A connection failure or a 5xx moves the call to the next endpoint; each
 * endpoint is tried once per call.
 *
 * A watch owns a connection of its own: its POST /v3/watch reply is a
 * chunked stream of JSON messages, framed here by brace depth and parsed
 * one by one. Its restarts (resume, or list again) run from a timer, never
 * from inside libevent's request callbacks.
 *
 * Ownership: calls and watches are on the client's lists and freed by
 * their completion, their stop, or the client's destroy.
 */
#include "cluster/etcd.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_tree.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/strbuf.h"

#define MAX_ENDPOINTS   8
#define WATCH_IDLE_S    30   /* a silent watch stream is reopened (resumed) after this */
#define WATCH_RETRY_MIN 100  /* ms */
#define WATCH_RETRY_MAX 2000 /* ms */
#define MAX_REPLY_BYTES (64u << 20)

typedef struct etcd_call etcd_call;

struct etcd_client {
    struct event_base *base;
    int n_ep;
    char host[MAX_ENDPOINTS][256];
    int port[MAX_ENDPOINTS];
    char name[MAX_ENDPOINTS][280]; /* "host:port" */
    struct evhttp_connection *conn[MAX_ENDPOINTS];
    int cur; /* tried first */
    int timeout_s;
    etcd_call *calls;
    etcd_watch *watches;
};

enum call_kind { CALL_PUT, CALL_RANGE, CALL_DELETE, CALL_GRANT, CALL_KEEPALIVE, CALL_REVOKE };

struct etcd_call {
    etcd_call *prev, *next;
    etcd_client *c;
    enum call_kind kind;
    const char *path;
    char *body;
    etcd_callback cb;
    void *user;
    int first_ep, ep, tries;
    struct evhttp_request *req; /* in flight */
    char error[384];            /* the last endpoint's failure */
};

enum watch_state { W_IDLE, W_LISTING, W_STREAMING };

struct etcd_watch {
    etcd_watch *prev, *next;
    etcd_client *c;
    char *prefix;
    etcd_watch_callbacks cbs;
    enum watch_state state;
    bool resync;      /* the next start lists again (else resumes at next_rev) */
    bool lost;        /* on_state said so; say when it works again */
    int64_t next_rev; /* the first revision not seen */
    int ep;
    int retry_ms;
    struct evhttp_connection *conn;
    struct evhttp_request *req;
    struct evbuffer *acc; /* stream bytes not yet a whole message */
    struct event *timer;  /* (re)starts */
};

static void call_send(etcd_call *call);
static void watch_schedule(etcd_watch *w, int ms, bool resync, const char *why);

/* ------------------------------------------------------------------------- */
/* base64 and JSON                                                           */
/* ------------------------------------------------------------------------- */

static char *b64_encode(const void *data, size_t n)
{
    char *out = infd_malloc(4 * ((n + 2) / 3) + 1);
    if (out)
        EVP_EncodeBlock((unsigned char *)out, data, (int)n);
    return out;
}

/* Decodes into a NUL-terminated copy; *n its length. NULL when malformed. */
static char *b64_decode(const char *s, size_t *n)
{
    size_t len = strlen(s);
    if (len % 4 != 0)
        return NULL;
    char *out = infd_malloc(len / 4 * 3 + 1);
    if (!out)
        return NULL;
    int got = len ? EVP_DecodeBlock((unsigned char *)out, (const unsigned char *)s, (int)len) : 0;
    if (got < 0) {
        infd_free(out);
        return NULL;
    }
    size_t pad = len >= 1 && s[len - 1] == '=' ? (len >= 2 && s[len - 2] == '=' ? 2 : 1) : 0;
    *n = (size_t)got - pad;
    out[*n] = '\0';
    return out;
}

/* The end of the range of every key starting with `prefix`: its last byte
 * below 0xff incremented, the rest dropped; "\0" (every key) when none. */
static size_t prefix_end(const char *prefix, char *end)
{
    size_t n = strlen(prefix);
    memcpy(end, prefix, n);
    while (n > 0) {
        if ((unsigned char)end[n - 1] < 0xff) {
            end[n - 1]++;
            return n;
        }
        n--;
    }
    end[0] = '\0';
    return 1;
}

static const char *jstr(yajl_val v, const char *key)
{
    const char *path[] = { key, NULL };
    yajl_val s = yajl_tree_get(v, path, yajl_t_string);
    return s ? YAJL_GET_STRING(s) : NULL;
}

/* proto3 JSON: int64 fields are strings (numbers accepted too); absent: 0. */
/* The revision after r (a reply may claim INT64_MAX: no overflow). */
static int64_t rev_after(int64_t r)
{
    return r < INT64_MAX ? r + 1 : r;
}

/* An int64 in a proto3 JSON string; 0 when it is not one. */
static int64_t sint(yajl_val x)
{
    const char *s = x && YAJL_IS_STRING(x) ? YAJL_GET_STRING(x) : NULL;
    return s ? strtoll(s, NULL, 10) : 0;
}

static int64_t jint(yajl_val v, const char *key)
{
    const char *path[] = { key, NULL };
    yajl_val x = yajl_tree_get(v, path, yajl_t_any);
    if (!x)
        return 0;
    if (YAJL_IS_STRING(x))
        return sint(x);
    if (YAJL_IS_INTEGER(x))
        return YAJL_GET_INTEGER(x);
    return 0;
}

static yajl_val jget(yajl_val v, const char *key, yajl_type t)
{
    const char *path[] = { key, NULL };
    return yajl_tree_get(v, path, t);
}

/* A kv object into `kv` (key and value decoded and owned by the caller). */
static bool kv_parse(yajl_val o, etcd_kv *kv)
{
    memset(kv, 0, sizeof(*kv));
    const char *k = jstr(o, "key"), *v = jstr(o, "value");
    char *key = b64_decode(k ? k : "", &kv->key_len);
    char *val = b64_decode(v ? v : "", &kv->value_len);
    if (!key || !val) {
        infd_free(key);
        infd_free(val);
        return false;
    }
    kv->key = key;
    kv->value = val;
    kv->create_revision = jint(o, "create_revision");
    kv->mod_revision = jint(o, "mod_revision");
    kv->version = jint(o, "version");
    kv->lease = jint(o, "lease");
    return true;
}

static void kvs_free(etcd_kv *kvs, int n)
{
    for (int i = 0; kvs && i < n; i++) {
        infd_free((char *)kvs[i].key);
        infd_free((char *)kvs[i].value);
    }
    infd_free(kvs);
}

infd_status etcd_status_from_code(int code)
{
    switch (code) { /* gRPC codes */
    case 0:
        return INFD_STATUS_OK;
    case 3:
        return INFD_STATUS_INVALID_ARGUMENT;
    case 4:
        return INFD_STATUS_DEADLINE_EXCEEDED;
    case 5:
        return INFD_STATUS_NOT_FOUND;
    case 8:
        return INFD_STATUS_RESOURCE_EXHAUSTED;
    case 9:
    case 11:
        return INFD_STATUS_INVALID_ARGUMENT;
    case 12:
        return INFD_STATUS_UNIMPLEMENTED;
    case 14:
        return INFD_STATUS_UNAVAILABLE;
    default:
        return INFD_STATUS_INTERNAL;
    }
}

/* ------------------------------------------------------------------------- */
/* The client                                                                */
/* ------------------------------------------------------------------------- */

infd_status etcd_client_create(struct event_base *base, const char *endpoints, etcd_client **out,
                               infd_error *err)
{
    *out = NULL;
    etcd_client *c = infd_calloc(1, sizeof(*c));
    if (!c)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "etcd: out of memory");
    c->base = base;
    c->timeout_s = 5;
    const char *p = endpoints ? endpoints : "";
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char one[300];
        if (n == 0 || n >= sizeof(one) || c->n_ep == MAX_ENDPOINTS) {
            infd_free(c);
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "etcd endpoints '%.200s': at most %d, each http://HOST:PORT",
                                  endpoints, MAX_ENDPOINTS);
        }
        memcpy(one, p, n);
        one[n] = '\0';
        const char *hp = strncmp(one, "http://", 7) == 0 ? one + 7 : one;
        if (strncmp(one, "https://", 8) == 0) {
            infd_free(c);
            return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED,
                                  "etcd endpoint '%s': https is not supported yet", one);
        }
        const char *colon = strrchr(hp, ':');
        char *end = NULL;
        long port = colon ? strtol(colon + 1, &end, 10) : 0;
        size_t hl = colon ? (size_t)(colon - hp) : 0;
        if (!colon || hl == 0 || hl >= sizeof(c->host[0]) || !end || *end || port < 1 ||
            port > 65535 || (end > hp && end[-1] == '/')) {
            infd_free(c);
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "etcd endpoint '%s': expected http://HOST:PORT", one);
        }
        memcpy(c->host[c->n_ep], hp, hl);
        c->host[c->n_ep][hl] = '\0';
        c->port[c->n_ep] = (int)port;
        snprintf(c->name[c->n_ep], sizeof(c->name[0]), "%.*s:%d", (int)hl, hp, (int)port);
        c->n_ep++;
        p = e ? e + 1 : p + n;
    }
    if (c->n_ep == 0) {
        infd_free(c);
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "no etcd endpoint: give http://HOST:PORT[,...]");
    }
    *out = c;
    return INFD_STATUS_OK;
}

const char *etcd_client_endpoint(const etcd_client *c)
{
    return c->name[c->cur];
}

void etcd_client_set_timeout(etcd_client *c, int seconds)
{
    c->timeout_s = seconds > 0 ? seconds : 5;
    for (int i = 0; i < c->n_ep; i++)
        if (c->conn[i])
            evhttp_connection_set_timeout(c->conn[i], c->timeout_s);
}

static void call_free(etcd_call *call)
{
    etcd_client *c = call->c;
    if (call->prev)
        call->prev->next = call->next;
    else
        c->calls = call->next;
    if (call->next)
        call->next->prev = call->prev;
    infd_free(call->body);
    infd_free(call);
}

void etcd_client_destroy(etcd_client *c)
{
    if (!c)
        return;
    while (c->watches)
        etcd_watch_stop(c->watches);
    while (c->calls) {
        etcd_call *call = c->calls;
        if (call->req)
            evhttp_cancel_request(call->req);
        call_free(call);
    }
    for (int i = 0; i < c->n_ep; i++)
        if (c->conn[i])
            evhttp_connection_free(c->conn[i]);
    infd_free(c);
}

static struct evhttp_connection *endpoint_conn(etcd_client *c, int ep)
{
    if (!c->conn[ep]) {
        c->conn[ep] = evhttp_connection_base_new(c->base, NULL, c->host[ep], (uint16_t)c->port[ep]);
        if (c->conn[ep])
            evhttp_connection_set_timeout(c->conn[ep], c->timeout_s);
    }
    return c->conn[ep];
}

/* Finishes the call: its callback, then it is freed. */
static void call_finish(etcd_call *call, infd_status st, const char *msg, const etcd_result *r)
{
    etcd_callback cb = call->cb;
    void *user = call->user;
    call->req = NULL;
    call_free(call);
    if (cb)
        cb(user, st, msg, r);
}

/* The reply of a 200, parsed into the result for the callback. */
static void call_reply(etcd_call *call, const char *text)
{
    char ebuf[256];
    yajl_val root = yajl_tree_parse(text, ebuf, sizeof(ebuf));
    char msg[512];
    etcd_result r;
    memset(&r, 0, sizeof(r));
    infd_status st = INFD_STATUS_OK;
    yajl_val body = root;
    if (root && call->kind == CALL_KEEPALIVE) {
        /* A stream of one: {"result": {...}} or {"error": {...}}. */
        yajl_val e = jget(root, "error", yajl_t_object);
        if (e) {
            const char *m = jstr(e, "message");
            if (m && strstr(m, "lease not found")) {
                r.ttl = 0; /* gone: the caller grants a new one */
                r.lease_id = 0;
                goto done;
            }
            snprintf(msg, sizeof(msg), "etcd %s: %s: %s", call->c->name[call->ep], call->path,
                     m ? m : "error");
            st = etcd_status_from_code((int)jint(e, "grpc_code"));
            goto done;
        }
        body = jget(root, "result", yajl_t_object);
    }
    if (!root || !body) {
        snprintf(msg, sizeof(msg), "etcd %s: %s: unreadable reply (%s)", call->c->name[call->ep],
                 call->path, root ? "no result" : ebuf);
        st = INFD_STATUS_INTERNAL;
        goto done;
    }
    const char *hdr[] = { "header", "revision", NULL };
    yajl_val rev = yajl_tree_get(body, hdr, yajl_t_any);
    r.revision = sint(rev);
    const char *lease_err = jstr(body, "error");
    switch (call->kind) {
    case CALL_RANGE: {
        yajl_val kvs = jget(body, "kvs", yajl_t_array);
        size_t n = kvs ? YAJL_GET_ARRAY(kvs)->len : 0;
        r.kvs = n ? infd_calloc(n, sizeof(etcd_kv)) : NULL;
        if (n && !r.kvs) {
            snprintf(msg, sizeof(msg), "etcd: out of memory for %zu keys", n);
            st = INFD_STATUS_OUT_OF_MEMORY;
            break;
        }
        for (size_t i = 0; i < n; i++) {
            if (!kv_parse(YAJL_GET_ARRAY(kvs)->values[i], &r.kvs[r.n_kvs])) {
                snprintf(msg, sizeof(msg), "etcd %s: range: key %zu is not base64",
                         call->c->name[call->ep], i);
                st = INFD_STATUS_INTERNAL;
                break;
            }
            r.n_kvs++;
        }
        break;
    }
    case CALL_GRANT:
        if (lease_err && *lease_err) {
            snprintf(msg, sizeof(msg), "etcd %s: lease grant: %s", call->c->name[call->ep],
                     lease_err);
            st = INFD_STATUS_UNAVAILABLE;
            break;
        }
        r.lease_id = jint(body, "ID");
        r.ttl = jint(body, "TTL");
        break;
    case CALL_KEEPALIVE:
        r.lease_id = jint(body, "ID");
        r.ttl = jint(body, "TTL");
        break;
    case CALL_DELETE:
        r.deleted = jint(body, "deleted");
        break;
    default:
        break;
    }
done:
    call_finish(call, st, st == INFD_STATUS_OK ? NULL : msg, st == INFD_STATUS_OK ? &r : NULL);
    kvs_free(r.kvs, r.n_kvs);
    yajl_tree_free(root);
}

static void on_call_done(struct evhttp_request *req, void *arg)
{
    etcd_call *call = arg;
    etcd_client *c = call->c;
    call->req = NULL;
    int code = req ? evhttp_request_get_response_code(req) : 0;
    struct evbuffer *in = req ? evhttp_request_get_input_buffer(req) : NULL;
    size_t n = in ? evbuffer_get_length(in) : 0;
    char *text = NULL;
    if (code == 200 || (code >= 400 && code < 600)) {
        text = infd_malloc(n + 1);
        if (text) {
            evbuffer_remove(in, text, n);
            text[n] = '\0';
        }
    }
    if (code == 200 && text) {
        c->cur = call->ep; /* it answered: first next time */
        call_reply(call, text);
        infd_free(text);
        return;
    }
    if (code >= 400 && code < 500) {
        /* The request's fault: the gateway's {"error", "code", "message"}. */
        char ebuf[128];
        yajl_val root = text ? yajl_tree_parse(text, ebuf, sizeof(ebuf)) : NULL;
        const char *m = root ? jstr(root, "message") : NULL;
        if (!m && root)
            m = jstr(root, "error");
        char msg[512];
        snprintf(msg, sizeof(msg), "etcd %s: %s: HTTP %d: %s", c->name[call->ep], call->path, code,
                 m ? m : "error");
        infd_status st =
            root ? etcd_status_from_code((int)jint(root, "code")) : INFD_STATUS_INVALID_ARGUMENT;
        yajl_tree_free(root);
        infd_free(text);
        call_finish(call, st == INFD_STATUS_OK ? INFD_STATUS_INVALID_ARGUMENT : st, msg, NULL);
        return;
    }
    /* Unreachable, timed out or 5xx: the next endpoint. */
    if (code == 0)
        snprintf(call->error, sizeof(call->error),
                 "etcd %s: %s: no answer (connection failed "
                 "or timed out)",
                 c->name[call->ep], call->path);
    else
        snprintf(call->error, sizeof(call->error), "etcd %s: %s: HTTP %d: %.200s",
                 c->name[call->ep], call->path, code, text ? text : "");
    infd_free(text);
    call->tries++;
    if (call->tries >= c->n_ep) {
        char msg[384];
        snprintf(msg, sizeof(msg), "%s", call->error);
        call_finish(call, INFD_STATUS_UNAVAILABLE, msg, NULL);
        return;
    }
    call->ep = (call->ep + 1) % c->n_ep;
    call_send(call);
}

static void call_send(etcd_call *call)
{
    etcd_client *c = call->c;
    for (;;) {
        struct evhttp_connection *conn = endpoint_conn(c, call->ep);
        struct evhttp_request *req = conn ? evhttp_request_new(on_call_done, call) : NULL;
        if (req) {
            struct evkeyvalq *h = evhttp_request_get_output_headers(req);
            evhttp_add_header(h, "Host", c->name[call->ep]);
            evhttp_add_header(h, "Content-Type", "application/json");
            evbuffer_add(evhttp_request_get_output_buffer(req), call->body, strlen(call->body));
            call->req = req;
            if (evhttp_make_request(conn, req, EVHTTP_REQ_POST, call->path) == 0)
                return;
            call->req = NULL; /* libevent freed it */
        }
        snprintf(call->error, sizeof(call->error), "etcd %s: %s: cannot send the request",
                 c->name[call->ep], call->path);
        if (++call->tries >= c->n_ep)
            break;
        call->ep = (call->ep + 1) % c->n_ep;
    }
    /* No endpoint took it: the callback runs now, inside the call. */
    char msg[384];
    snprintf(msg, sizeof(msg), "%s", call->error);
    call_finish(call, INFD_STATUS_UNAVAILABLE, msg, NULL);
}

static void call_start(etcd_client *c, enum call_kind kind, const char *path, char *body,
                       etcd_callback cb, void *user)
{
    etcd_call *call = body ? infd_calloc(1, sizeof(*call)) : NULL;
    if (!call) {
        infd_free(body);
        if (cb)
            cb(user, INFD_STATUS_OUT_OF_MEMORY, "etcd: out of memory for a request", NULL);
        return;
    }
    call->c = c;
    call->kind = kind;
    call->path = path;
    call->body = body;
    call->cb = cb;
    call->user = user;
    call->ep = call->first_ep = c->cur;
    call->next = c->calls;
    if (c->calls)
        c->calls->prev = call;
    c->calls = call;
    call_send(call);
}

/* A body of printf's making; NULL when out of memory. */
static char *body_printf(const char *fmt, ...) INFD_PRINTF(1, 2);
static char *body_printf(const char *fmt, ...)
{
    infd_strbuf b;
    infd_strbuf_init(&b);
    va_list ap;
    va_start(ap, fmt);
    infd_strbuf_vprintf(&b, fmt, ap);
    va_end(ap);
    if (b.oom) {
        infd_strbuf_fini(&b);
        return NULL;
    }
    return infd_strbuf_take(&b, NULL);
}

void etcd_put(etcd_client *c, const char *key, const void *value, size_t value_len, int64_t lease,
              etcd_callback cb, void *user)
{
    char *k = b64_encode(key, strlen(key)), *v = b64_encode(value, value_len);
    char *body = k && v ? body_printf("{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%" PRId64 "\"}",
                                      k, v, lease)
                        : NULL;
    infd_free(k);
    infd_free(v);
    call_start(c, CALL_PUT, "/v3/kv/put", body, cb, user);
}

static char *range_body(const char *key, bool prefix, const char *extra)
{
    char *k = b64_encode(key, strlen(key));
    char *body = NULL;
    if (k && prefix) {
        size_t n = strlen(key);
        char *end = infd_malloc(n + 1);
        char *e = end ? b64_encode(end, prefix_end(key, end)) : NULL;
        if (e)
            body = body_printf("{\"key\":\"%s\",\"range_end\":\"%s\"%s}", k, e, extra);
        infd_free(e);
        infd_free(end);
    } else if (k) {
        body = body_printf("{\"key\":\"%s\"%s}", k, extra);
    }
    infd_free(k);
    return body;
}

void etcd_range(etcd_client *c, const char *key, bool prefix, etcd_callback cb, void *user)
{
    call_start(c, CALL_RANGE, "/v3/kv/range", range_body(key, prefix, ""), cb, user);
}

void etcd_delete(etcd_client *c, const char *key, bool prefix, etcd_callback cb, void *user)
{
    call_start(c, CALL_DELETE, "/v3/kv/deleterange", range_body(key, prefix, ""), cb, user);
}

void etcd_lease_grant(etcd_client *c, int64_t ttl_s, etcd_callback cb, void *user)
{
    call_start(c, CALL_GRANT, "/v3/lease/grant",
               body_printf("{\"TTL\":\"%" PRId64 "\",\"ID\":\"0\"}", ttl_s), cb, user);
}

void etcd_lease_keepalive(etcd_client *c, int64_t lease, etcd_callback cb, void *user)
{
    call_start(c, CALL_KEEPALIVE, "/v3/lease/keepalive",
               body_printf("{\"ID\":\"%" PRId64 "\"}", lease), cb, user);
}

void etcd_lease_revoke(etcd_client *c, int64_t lease, etcd_callback cb, void *user)
{
    call_start(c, CALL_REVOKE, "/v3/lease/revoke", body_printf("{\"ID\":\"%" PRId64 "\"}", lease),
               cb, user);
}

/* ------------------------------------------------------------------------- */
/* Watches                                                                   */
/* ------------------------------------------------------------------------- */

static void watch_close_stream(etcd_watch *w)
{
    if (w->req) {
        evhttp_cancel_request(w->req);
        w->req = NULL;
    }
    if (w->conn) {
        evhttp_connection_free(w->conn);
        w->conn = NULL;
    }
    evbuffer_drain(w->acc, evbuffer_get_length(w->acc));
}

static void watch_lost(etcd_watch *w, const char *why)
{
    if (!w->lost && w->cbs.on_state)
        w->cbs.on_state(w->cbs.user, why);
    w->lost = true;
}

static void watch_found(etcd_watch *w)
{
    w->retry_ms = 0;
    if (w->lost && w->cbs.on_state)
        w->cbs.on_state(w->cbs.user, NULL);
    w->lost = false;
}

/* One message of the stream. False: the stream must restart (resync set
 * when it must list again). */
static bool watch_message(etcd_watch *w, const char *text, bool *resync, char *why, size_t why_n)
{
    char ebuf[128];
    yajl_val root = yajl_tree_parse(text, ebuf, sizeof(ebuf));
    yajl_val res = root ? jget(root, "result", yajl_t_object) : NULL;
    bool ok = true;
    if (!res) {
        yajl_val e = root ? jget(root, "error", yajl_t_object) : NULL;
        const char *m = e ? jstr(e, "message") : NULL;
        snprintf(why, why_n, "etcd %s: watch: %s", w->c->name[w->ep],
                 m      ? m
                 : root ? "a message without a result"
                        : ebuf);
        *resync = m && strstr(m, "compacted");
        yajl_tree_free(root);
        return false;
    }
    if (jint(res, "compact_revision") > 0) {
        snprintf(why, why_n,
                 "etcd %s: watch: revision %" PRId64 " was compacted (now %" PRId64
                 "): listing again",
                 w->c->name[w->ep], w->next_rev, jint(res, "compact_revision"));
        *resync = true;
        yajl_tree_free(root);
        return false;
    }
    const char *cp[] = { "canceled", NULL };
    yajl_val canceled = yajl_tree_get(res, cp, yajl_t_true);
    if (canceled) {
        const char *r = jstr(res, "cancel_reason");
        snprintf(why, why_n, "etcd %s: watch canceled: %s", w->c->name[w->ep],
                 r ? r : "no reason given");
        *resync = true;
        yajl_tree_free(root);
        return false;
    }
    watch_found(w);
    const char *hdr[] = { "header", "revision", NULL };
    yajl_val rv = yajl_tree_get(res, hdr, yajl_t_any);
    int64_t rev = sint(rv);
    yajl_val evs = jget(res, "events", yajl_t_array);
    size_t n = evs ? YAJL_GET_ARRAY(evs)->len : 0;
    if (n == 0) {
        /* Created, or a progress notification: nothing before rev is pending. */
        if (!jget(res, "created", yajl_t_true) && rev_after(rev) > w->next_rev)
            w->next_rev = rev_after(rev);
        yajl_tree_free(root);
        return true;
    }
    etcd_event *ev = infd_calloc(n, sizeof(*ev));
    size_t got = 0;
    for (size_t i = 0; ev && i < n; i++) {
        yajl_val e = YAJL_GET_ARRAY(evs)->values[i];
        const char *type = jstr(e, "type");
        yajl_val kv = jget(e, "kv", yajl_t_object);
        if (!kv || !kv_parse(kv, &ev[got].kv)) {
            ok = false;
            break;
        }
        ev[got].deleted = type && strcmp(type, "DELETE") == 0;
        got++;
    }
    if (ok && ev) {
        int64_t last = ev[got - 1].kv.mod_revision;
        w->next_rev = rev_after(last > rev ? last : rev);
        w->cbs.on_events(w->cbs.user, ev, (int)got, last > rev ? last : rev);
    } else {
        snprintf(why, why_n, "etcd %s: watch: %s", w->c->name[w->ep],
                 ev ? "an event without a readable kv" : "out of memory");
        *resync = true;
        ok = false;
    }
    for (size_t i = 0; ev && i < got; i++) {
        infd_free((char *)ev[i].kv.key);
        infd_free((char *)ev[i].kv.value);
    }
    infd_free(ev);
    yajl_tree_free(root);
    return ok;
}

/* Whole JSON messages out of the stream's bytes in w->acc, by brace depth
 * (strings and escapes skipped); the rest waits for the next chunk. */
static void watch_feed(etcd_watch *w)
{
    while (w->state == W_STREAMING) {
        size_t n = evbuffer_get_length(w->acc);
        if (n > MAX_REPLY_BYTES) {
            watch_schedule(w, 0, true, "etcd watch: a message over 64 MiB");
            return;
        }
        const char *p = (const char *)evbuffer_pullup(w->acc, -1);
        size_t start = 0;
        while (start < n && p[start] != '{')
            start++;
        int depth = 0;
        bool in_str = false, esc = false;
        size_t end = 0;
        for (size_t i = start; i < n && !end; i++) {
            char ch = p[i];
            if (in_str) {
                if (esc)
                    esc = false;
                else if (ch == '\\')
                    esc = true;
                else if (ch == '"')
                    in_str = false;
            } else if (ch == '"') {
                in_str = true;
            } else if (ch == '{') {
                depth++;
            } else if (ch == '}' && --depth == 0) {
                end = i + 1;
            }
        }
        if (!end) {
            evbuffer_drain(w->acc, start);
            return;
        }
        char *msg = infd_malloc(end - start + 1);
        if (!msg) {
            watch_schedule(w, WATCH_RETRY_MAX, false, "etcd watch: out of memory");
            return;
        }
        memcpy(msg, p + start, end - start);
        msg[end - start] = '\0';
        evbuffer_drain(w->acc, end);
        bool resync = false;
        char why[384];
        bool ok = watch_message(w, msg, &resync, why, sizeof(why));
        infd_free(msg);
        if (!ok) {
            watch_schedule(w, 0, resync, why);
            return;
        }
    }
}

static void on_watch_chunk(struct evhttp_request *req, void *arg)
{
    etcd_watch *w = arg;
    if (w->state != W_STREAMING)
        return; /* a restart is scheduled: the rest of this stream is moot */
    evbuffer_add_buffer(w->acc, evhttp_request_get_input_buffer(req));
    watch_feed(w);
}

static void on_watch_done(struct evhttp_request *req, void *arg)
{
    etcd_watch *w = arg;
    int code = req ? evhttp_request_get_response_code(req) : 0;
    w->req = NULL; /* libevent frees it after this callback */
    if (w->state != W_STREAMING)
        return; /* a restart is scheduled already */
    char why[384];
    if (code == 0)
        snprintf(why, sizeof(why), "etcd %s: watch stream ended (connection lost or idle)",
                 w->c->name[w->ep]);
    else
        snprintf(why, sizeof(why), "etcd %s: watch stream ended (HTTP %d)", w->c->name[w->ep],
                 code);
    /* An idle timeout is routine: resume at once; else after a pause on
     * the next endpoint. */
    bool failed = code != 200;
    if (failed)
        w->ep = (w->ep + 1) % w->c->n_ep;
    watch_schedule(w, failed ? -1 : 0, false, failed ? why : NULL);
}

static void watch_stream(etcd_watch *w)
{
    etcd_client *c = w->c;
    char *k = b64_encode(w->prefix, strlen(w->prefix));
    size_t n = strlen(w->prefix);
    char *end = infd_malloc(n + 1);
    char *e = end ? b64_encode(end, prefix_end(w->prefix, end)) : NULL;
    char *body = k && e
                     ? body_printf("{\"create_request\":{\"key\":\"%s\",\"range_end\":\"%s\","
                                   "\"start_revision\":\"%" PRId64 "\",\"progress_notify\":true}}",
                                   k, e, w->next_rev)
                     : NULL;
    infd_free(k);
    infd_free(e);
    infd_free(end);
    w->conn =
        body ? evhttp_connection_base_new(c->base, NULL, c->host[w->ep], (uint16_t)c->port[w->ep])
             : NULL;
    w->req = w->conn ? evhttp_request_new(on_watch_done, w) : NULL;
    if (!w->req) {
        infd_free(body);
        watch_schedule(w, -1, false, "etcd watch: cannot start the stream (out of memory)");
        return;
    }
    evhttp_connection_set_timeout(w->conn, WATCH_IDLE_S);
    evhttp_request_set_chunked_cb(w->req, on_watch_chunk);
    struct evkeyvalq *h = evhttp_request_get_output_headers(w->req);
    evhttp_add_header(h, "Host", c->name[w->ep]);
    evhttp_add_header(h, "Content-Type", "application/json");
    evbuffer_add(evhttp_request_get_output_buffer(w->req), body, strlen(body));
    infd_free(body);
    w->state = W_STREAMING;
    if (evhttp_make_request(w->conn, w->req, EVHTTP_REQ_POST, "/v3/watch") != 0) {
        w->req = NULL;
        watch_schedule(w, -1, false, "etcd watch: cannot send the request");
    }
}

static void on_watch_list(void *user, infd_status st, const char *message, const etcd_result *r)
{
    etcd_watch *w = user;
    w->state = W_IDLE;
    if (st != INFD_STATUS_OK) {
        watch_schedule(w, -1, true, message);
        return;
    }
    watch_found(w);
    w->ep = w->c->cur;
    w->next_rev = rev_after(r->revision);
    w->cbs.on_sync(w->cbs.user, r->kvs, r->n_kvs, r->revision);
    watch_stream(w);
}

static void on_watch_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    etcd_watch *w = arg;
    watch_close_stream(w);
    if (w->resync) {
        w->resync = false;
        w->state = W_LISTING;
        etcd_range(w->c, w->prefix, true, on_watch_list, w);
    } else {
        watch_stream(w);
    }
}

/* Restarts the watch from the timer after `ms` (-1: the growing retry
 * pause), listing again when `resync`; `why` is reported as lost. */
static void watch_schedule(etcd_watch *w, int ms, bool resync, const char *why)
{
    if (why)
        watch_lost(w, why);
    if (ms < 0) {
        w->retry_ms = w->retry_ms ? w->retry_ms * 2 : WATCH_RETRY_MIN;
        if (w->retry_ms > WATCH_RETRY_MAX)
            w->retry_ms = WATCH_RETRY_MAX;
        ms = w->retry_ms;
    }
    w->resync |= resync;
    w->state = W_IDLE;
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    evtimer_add(w->timer, &tv);
}

infd_status etcd_watch_start(etcd_client *c, const char *prefix, const etcd_watch_callbacks *cbs,
                             etcd_watch **out, infd_error *err)
{
    *out = NULL;
    if (!cbs || !cbs->on_sync || !cbs->on_events)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "etcd watch: on_sync and on_events are needed");
    etcd_watch *w = infd_calloc(1, sizeof(*w));
    if (w) {
        w->prefix = infd_strdup(prefix);
        w->acc = evbuffer_new();
        w->timer = evtimer_new(c->base, on_watch_timer, w);
    }
    if (!w || !w->prefix || !w->acc || !w->timer) {
        if (w) {
            infd_free(w->prefix);
            if (w->acc)
                evbuffer_free(w->acc);
            if (w->timer)
                event_free(w->timer);
            infd_free(w);
        }
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "etcd watch: out of memory");
    }
    w->c = c;
    w->cbs = *cbs;
    w->ep = c->cur;
    w->next = c->watches;
    if (c->watches)
        c->watches->prev = w;
    c->watches = w;
    /* The first list starts from the loop, like every later one. */
    watch_schedule(w, 0, true, NULL);
    *out = w;
    return INFD_STATUS_OK;
}

void etcd_watch_stop(etcd_watch *w)
{
    if (!w)
        return;
    etcd_client *c = w->c;
    /* A listing in flight: its call goes without its callback. */
    for (etcd_call *call = c->calls; call; call = call->next)
        if (call->user == w && call->cb == on_watch_list)
            call->cb = NULL;
    watch_close_stream(w);
    event_free(w->timer);
    evbuffer_free(w->acc);
    if (w->prev)
        w->prev->next = w->next;
    else
        c->watches = w->next;
    if (w->next)
        w->next->prev = w->prev;
    infd_free(w->prefix);
    infd_free(w);
}
