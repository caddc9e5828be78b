/*
 * http.c - the KServe v2 HTTP/REST frontend (see http.h for the endpoints).
 *
 * Life of an inference request:
 *
 *   loop thread                         runtime worker thread
 *   ---------------------------------   ---------------------------------
 *   on_request: route, acquire model,
 *   pull up the JSON header, decode
 *   it (kserve_json), hand binary
 *   inputs over as the body's chains,
 *   reserve the binary outputs in one
 *   evbuffer chunk, infd_infer_async ─► batch, run, scatter outputs
 *                                       on_infer_done: queue the call on
 *                                       its loop, event_active(wake)
 *   on_wake: write the JSON header, ◄─┘
 *   append the binary chunk (moved,
 *   not copied), evhttp_send_reply
 *
 * Ownership: libevent owns the evhttp_request. It stays valid until we call
 * evhttp_send_reply, even when the client disconnects meanwhile (libevent
 * then detaches it from the connection, and send_reply just frees it), so
 * the request body our inputs borrow lives until the inference completed.
 * The only other way libevent frees a request is evhttp_free, which
 * infd_http_stop calls after every call has completed.
 *
 * Memory: an http_call (decoded request, infd_request, model reference,
 * binary-output evbuffer, the binary inputs' segment lists) comes from a
 * per-loop free list, and the JSON of
 * responses is written into a per-loop scratch buffer, so a warm loop
 * allocates only inside libevent (connection and chain buffers).
 *
 * Threads: everything here runs on the loop thread except on_infer_done
 * and load_main, which touch only their call and the loop's `done` list
 * (under `mu`) and wake the loop with event_active (thread-safe after
 * evthread_use_pthreads).
 */
#include "frontends/http/http.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <event2/util.h>
#include <inttypes.h>
#include <math.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <yajl/yajl_tree.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/common.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "frontends/common/conn_limit.h"
#include "frontends/common/restricted.h"
#include "frontends/common/tls.h"
#include "frontends/http/kserve_json.h"

#define HTTP_MAX_HEADERS_BYTES (64 * 1024)
#define HTTP_BACKLOG           1024
/* Most bytes one read of a connection takes (see top_up): 256 KiB less
 * room for libevent's chain header, which it adds before rounding a new
 * chain up to a power of two. */
#define HTTP_MAX_SINGLE_READ (256 * 1024 - 256)
/* Receiving into the pinned memory pool (rx_mirror): bodies from this size
 * on are looked for there; a connection's first slab, and the largest. */
#define RX_MIN_BODY (64u << 10)
#define RX_SLAB_MIN ((size_t)1 << 20)
#define RX_SLAB_MAX ((size_t)256 << 20)
/* Idle keep-alive connections and stalled clients are closed after this. */
#define HTTP_TIMEOUT_SECS 120
/* Longest path we route (model names are at most 127 bytes). */
#define HTTP_MAX_PATH 1024
#define HTTP_MAX_SEGS 8
/* Idle calls kept per loop; more are freed. */
#define CALLS_KEPT 256
/* A call whose decode buffers grew past this gives them back on release. */
#define CALL_KEEP_BYTES (4u << 20)
/* infd_http_stop: how long to wait for clients to read their responses. */
#define FLUSH_TIMEOUT_NS (3ull * 1000 * 1000 * 1000)
#define STOP_POLL_US     5000

/* ------------------------------------------------------------------------- */
/* Types                                                                     */
/* ------------------------------------------------------------------------- */

typedef struct http_loop http_loop;

/* A region of the pinned memory pool that a connection's bytes are
 * received into (rx_mirror). */
typedef struct rx_slab {
    atomic_int refs; /* reference chains into it, and its connection while current */
    size_t size;
    uint8_t *data;
} rx_slab;

/* A connection receiving into the pool: made at its first large read,
 * found by socket fd in its loop's table, freed when the connection closes
 * (or, if it closed before a request reached us, when another connection
 * gets its fd). */
typedef struct rx_conn {
    http_loop *loop;
    struct bufferevent *bev;
    int fd;
    rx_slab *slab; /* current, or NULL */
    size_t fill;   /* bytes of the stream mirrored into the slab */
    bool watched;  /* close callback set */
} rx_conn;

typedef enum call_kind { CALL_INFER, CALL_LOAD, CALL_UNLOAD } call_kind;

/* One request in flight (or idle on the free list). */
typedef struct http_call {
    struct http_call *next; /* free list or done list */
    http_loop *loop;
    call_kind kind;
    struct evhttp_request *ev; /* libevent's; valid until we reply */

    /* CALL_INFER */
    infd_model *model;
    infd_request *req;
    kserve_request kreq;
    struct evbuffer *bin;                /* binary outputs, reserved before submit */
    int n_bin;                           /* outputs that write into `bin`... */
    uint8_t *bin_ptr[INFD_MAX_MODEL_IO]; /* ...there, in response order */
    /* Binary inputs as pieces of the request body (borrowed from its
     * evbuffer chains until the reply): evbuffer_peek's view, then ours. */
    struct evbuffer_iovec *vecs;
    infd_data_segment *segs;
    int segs_cap;
    uint8_t raw_len[4]; /* a raw body's BYTES element length (raw_body_input) */
    /* Shared memory regions the request reads or writes (Triton's
     * extension), held until the call goes back; and per output (model
     * order) where its bytes go when the engine could not write them there
     * itself (outputs of no fixed size). */
    infd_shm_region *shm[2 * INFD_MAX_MODEL_IO];
    int n_shm;
    uint8_t *shm_out[INFD_MAX_MODEL_IO];
    size_t shm_out_cap[INFD_MAX_MODEL_IO];
    /* Reply chains that point into the request's outputs (a model that
     * lends its outputs: infd_model_lends_outputs), plus one while the
     * reply is written: the call goes back (and its request is destroyed)
     * when the last is released. */
    int refs;

    /* CALL_LOAD / CALL_UNLOAD */
    char name[KSERVE_NAME_BYTES];
    pthread_t thread;
    infd_server *server;

    /* Outcome, written by the completing thread before queueing. */
    infd_status status;
    char message[INFD_ERROR_MSG_BYTES];
} http_call;

struct http_loop {
    infd_http *h;
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    struct event *wake;  /* user event: completions queued or stop asked */
    struct event *timer; /* stop: polls until in-flight work is done */
    pthread_t thread;
    bool thread_started;

    pthread_mutex_t mu; /* guards done_* and stop_requested */
    bool mu_init;
    http_call *done_head, *done_tail;
    bool stop_requested;

    /* Loop thread only. */
    http_call *free_calls;
    int n_free;
    int n_inflight;         /* submitted calls not yet answered */
    int n_unsent;           /* replies handed to libevent, not yet fully written */
    bool closing;           /* listener removed */
    uint64_t idle_since_ns; /* closing: when n_inflight reached 0 */
    infd_strbuf jb;         /* response JSON scratch, reset per reply */
    struct rx_conn **rx;    /* per socket fd: its pinned receive state, or NULL */
    int rx_cap;
    infd_http_sink *sinks; /* event streams on this loop */
    /* Connection limits and the request deadline (see guard_track). */
    struct guard_conn *g_pending; /* accepted, not yet admitted */
    struct guard_conn *g_conns;   /* admitted or refused, until swept */
    struct guard_conn **g_by_fd;  /* per socket fd: its guard, or NULL */
    int g_by_fd_cap;
    struct event *g_admit;         /* user event: admits g_pending */
    struct event *g_sweep;         /* every second: reaps closed ones, ends slow requests */
    uint64_t g_warned_ns;          /* last refusal or expiry logged */
    uint64_t g_refused, g_expired; /* since then, not yet logged */
};

struct infd_http {
    infd_server *server;
    char *host;
    int port;
    size_t max_body_bytes;
    int max_json_depth;
    int timeout_secs;
    int n_loops;
    http_loop *loops;
    const infd_http_extension *ext; /* borrowed */
    int n_ext;
    SSL_CTX *ssl;                      /* HTTPS; NULL: plain HTTP */
    const infd_restricted *restricted; /* borrowed; NULL: all open */
    infd_conn_limit *limit;            /* NULL: no connection limit */
    int max_connections, max_per_client;
    int header_timeout_secs; /* 0: no request deadline */
};

/* evhttp_connection_set_closecb, through the connection's guard when it has
 * one (the guard's own close callback then runs it; see guard_closed). */
typedef void (*conn_close_cb)(struct evhttp_connection *, void *);
static void conn_set_closecb(http_loop *loop, struct evhttp_connection *conn, conn_close_cb cb,
                             void *arg);

/* An event stream (Server-Sent Events) of an app's route. The app pushes
 * from its threads into `pending`; the loop thread writes it out as chunks
 * when `flush` fires. It is freed on the loop thread once the app has
 * released it and its reply has ended (or its client has gone). */
#define SINK_MAX_PENDING (1u << 20)
struct infd_http_sink {
    http_loop *loop;
    struct evhttp_request *ev; /* loop thread; NULL once the reply ended */
    struct event *flush;       /* user event: pending data, or a release */
    infd_http_sink *next;      /* the loop's list (loop thread) */
    pthread_mutex_t mu;        /* guards the three below */
    infd_strbuf pending;
    bool closed;   /* the client left, or the frontend stops: send fails */
    bool released; /* the app let go */
    uint64_t dropped;
};

/* ------------------------------------------------------------------------- */
/* JSON text                                                                 */
/* ------------------------------------------------------------------------- */

/* A JSON string: quotes, backslashes and control bytes escaped; other
 * bytes (UTF-8) as they are. */
/* ------------------------------------------------------------------------- */
/* Replies                                                                   */
/* ------------------------------------------------------------------------- */

static int http_code(infd_status st)
{
    switch (st) {
    case INFD_STATUS_OK:
        return 200;
    case INFD_STATUS_INVALID_ARGUMENT:
        return 400;
    case INFD_STATUS_NOT_FOUND:
        return 404;
    case INFD_STATUS_UNAVAILABLE:
        return 503;
    /* Back off and retry: a full queue (Triton answers that one 503), a
     * router's rate limit or overload. 429 is gRPC's own HTTP mapping of
     * RESOURCE_EXHAUSTED; one code for it in both protocols. */
    case INFD_STATUS_RESOURCE_EXHAUSTED:
        return 429;
    case INFD_STATUS_DEADLINE_EXCEEDED:
        return 504;
    case INFD_STATUS_UNIMPLEMENTED:
        return 501;
    default:
        return 500;
    }
}

/* A reply is "unsent" from evhttp_send_reply until libevent has written it
 * (on_complete) or dropped it with its connection (the close callback, set
 * only while a reply is pending: libevent answers one request at a time per
 * connection, so exactly one of the two fires). infd_http_stop waits for
 * the count to reach zero. */
static rx_conn *rx_of(http_loop *loop, struct evhttp_connection *conn);
static void rx_free(rx_conn *rc);
static void rx_closed(struct evhttp_connection *evcon, void *arg);

/* The close callback goes back to freeing the connection's receive state
 * (its slab of the pinned pool) when it has one: a connection has one close
 * callback, which send_reply borrows while a reply is pending. */
static void on_reply_written(struct evhttp_request *ev, void *arg)
{
    http_loop *loop = arg;
    struct evhttp_connection *conn = evhttp_request_get_connection(ev);
    if (conn) {
        rx_conn *rc = rx_of(loop, conn);
        conn_set_closecb(loop, conn, rc ? rx_closed : NULL, rc);
    }
    loop->n_unsent--;
}

static void on_reply_dropped(struct evhttp_connection *conn, void *arg)
{
    http_loop *loop = arg;
    rx_free(rx_of(loop, conn)); /* its slab, at once */
    loop->n_unsent--;
}

/* Sends what is in ev's output buffer with `code`. */
static void send_reply(http_loop *loop, struct evhttp_request *ev, int code,
                       const char *content_type)
{
    struct evkeyvalq *hdrs = evhttp_request_get_output_headers(ev);
    /* libevent 2.1 would write the body of a HEAD reply (without its
     * Content-Length), desynchronising a keep-alive connection. */
    if (evhttp_request_get_command(ev) == EVHTTP_REQ_HEAD) {
        struct evbuffer *out = evhttp_request_get_output_buffer(ev);
        evbuffer_drain(out, evbuffer_get_length(out));
    }
    if (content_type)
        evhttp_add_header(hdrs, "Content-Type", content_type);
    /* A request whose client left has no connection: libevent frees it in
     * send_reply without writing or calling on_complete. */
    struct evhttp_connection *conn = evhttp_request_get_connection(ev);
    if (conn) {
        loop->n_unsent++;
        evhttp_request_set_on_complete_cb(ev, on_reply_written, loop);
        conn_set_closecb(loop, conn, on_reply_dropped, loop);
    }
    /* libevent 2.1's phrase table stops at 417 ("Client Error" for 429). */
    evhttp_send_reply(ev, code, code == 429 ? "Too Many Requests" : NULL, NULL);
}

/* Sends the loop's scratch JSON. */
static void send_json(http_loop *loop, struct evhttp_request *ev, int code)
{
    infd_strbuf *b = &loop->jb;
    struct evbuffer *out = evhttp_request_get_output_buffer(ev);
    if (b->oom) {
        static const char oom[] = "{\"error\":\"out of memory writing the response\"}";
        evbuffer_add(out, oom, sizeof(oom) - 1);
        code = 500;
    } else {
        evbuffer_add(out, b->data, b->len);
    }
    send_reply(loop, ev, code, "application/json");
}

static void send_error(http_loop *loop, struct evhttp_request *ev, int code, const char *msg)
{
    infd_strbuf *b = &loop->jb;
    infd_strbuf_reset(b);
    infd_strbuf_puts(b, "{\"error\":");
    kserve_write_cstr(b, msg);
    infd_strbuf_puts(b, "}");
    INFD_LOG_DEBUG("http: %s %s -> %d: %s",
                   evhttp_request_get_command(ev) == EVHTTP_REQ_POST ? "POST" : "GET",
                   evhttp_request_get_uri(ev), code, msg);
    send_json(loop, ev, code);
}

static void send_errorf(http_loop *loop, struct evhttp_request *ev, int code, const char *fmt, ...)
    INFD_PRINTF(4, 5);

static void send_errorf(http_loop *loop, struct evhttp_request *ev, int code, const char *fmt, ...)
{
    char msg[INFD_ERROR_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    send_error(loop, ev, code, msg);
}

static void send_status(http_loop *loop, struct evhttp_request *ev, const infd_error *err)
{
    send_error(loop, ev, http_code(err->code), err->msg[0] ? err->msg : infd_status_str(err->code));
}

/* An empty body (health, ready, load/unload). The type is set so that
 * libevent does not label it text/html. */
static void send_empty(http_loop *loop, struct evhttp_request *ev, int code)
{
    send_reply(loop, ev, code, "text/plain");
}

/* ------------------------------------------------------------------------- */
/* Calls                                                                     */
/* ------------------------------------------------------------------------- */

static http_call *call_get(http_loop *loop, call_kind kind)
{
    http_call *c = loop->free_calls;
    if (c) {
        loop->free_calls = c->next;
        loop->n_free--;
    } else {
        c = infd_calloc(1, sizeof(*c));
        if (!c)
            return NULL;
        kserve_request_init(&c->kreq);
        c->kreq.max_depth = loop->h->max_json_depth;
        c->loop = loop;
    }
    c->next = NULL;
    c->kind = kind;
    c->status = INFD_STATUS_OK;
    c->message[0] = '\0';
    c->n_bin = 0;
    c->refs = 0;
    c->n_shm = 0;
    memset(c->shm_out, 0, sizeof(c->shm_out));
    return c;
}

static void call_free(http_call *c)
{
    kserve_request_fini(&c->kreq);
    if (c->bin)
        evbuffer_free(c->bin);
    infd_free(c->vecs);
    infd_free(c->segs);
    infd_free(c);
}

static size_t kreq_bytes(const kserve_request *r)
{
    size_t n = r->_arena_cap;
    for (int i = 0; i < INFD_MAX_MODEL_IO; i++)
        n += r->inputs[i]._cap;
    return n;
}

/* Returns `c` to the free list, releasing its request and model. */
static void call_put(http_call *c)
{
    http_loop *loop = c->loop;
    infd_request_destroy(c->req);
    c->req = NULL;
    for (int i = 0; i < c->n_shm; i++)
        infd_shm_region_release(c->shm[i]);
    c->n_shm = 0;
    infd_model_release(c->model);
    c->model = NULL;
    c->ev = NULL;
    if (c->bin)
        evbuffer_drain(c->bin, evbuffer_get_length(c->bin));
    if (loop->n_free >= CALLS_KEPT) {
        call_free(c);
        return;
    }
    if (kreq_bytes(&c->kreq) > CALL_KEEP_BYTES)
        kserve_request_fini(&c->kreq);
    if ((size_t)c->segs_cap * (sizeof(*c->vecs) + sizeof(*c->segs)) > CALL_KEEP_BYTES) {
        infd_free(c->vecs);
        infd_free(c->segs);
        c->vecs = NULL;
        c->segs = NULL;
        c->segs_cap = 0;
    }
    c->next = loop->free_calls;
    loop->free_calls = c;
    loop->n_free++;
}

/* Queues a finished call on its loop; any thread. */
static void call_done(http_call *c)
{
    http_loop *loop = c->loop;
    pthread_mutex_lock(&loop->mu);
    bool was_empty = loop->done_head == NULL;
    if (loop->done_tail)
        loop->done_tail->next = c;
    else
        loop->done_head = c;
    loop->done_tail = c;
    c->next = NULL;
    /* Activated under the lock so that infd_http_stop cannot free the
     * event between our unlock and this call. */
    if (was_empty)
        event_active(loop->wake, 0, 0);
    pthread_mutex_unlock(&loop->mu);
}

/* ------------------------------------------------------------------------- */
/* Paths                                                                     */
/* ------------------------------------------------------------------------- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes %XX escapes in place; false on a malformed escape or a %00. */
static bool percent_decode(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (*r == '%') {
            int hi = hexval(r[1]), lo = hi >= 0 ? hexval(r[2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                return false;
            *w++ = (char)(hi * 16 + lo);
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
    return true;
}

/* Splits the path of `uri` (query dropped) into at most HTTP_MAX_SEGS
 * non-empty, percent-decoded segments stored in `buf`. -1 when the path is
 * too long, has too many segments or a bad escape. */
static int split_path(const char *uri, char *buf, char **segs)
{
    size_t n = strcspn(uri, "?#");
    if (n >= HTTP_MAX_PATH)
        return -1;
    memcpy(buf, uri, n);
    buf[n] = '\0';
    int k = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
        if (k == HTTP_MAX_SEGS || !percent_decode(t))
            return -1;
        segs[k++] = t;
    }
    return k;
}

/* A model version from the path: a positive integer. */
static bool parse_version(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno == ERANGE || v <= 0)
        return false;
    *out = v;
    return true;
}

/* ------------------------------------------------------------------------- */
/* Server and repository endpoints                                           */
/* ------------------------------------------------------------------------- */

static void handle_server_metadata(http_loop *loop, struct evhttp_request *ev)
{
    infd_strbuf *b = &loop->jb;
    infd_strbuf_reset(b);
    infd_strbuf_puts(b, "{\"name\":");
    kserve_write_cstr(b, infd_server_id(loop->h->server));
    infd_strbuf_puts(b, ",\"version\":");
    kserve_write_cstr(b, infd_version());
    infd_strbuf_puts(b, ",\"extensions\":[\"binary_tensor_data\",\"model_repository\","
                        "\"model_configuration\",\"statistics\",\"parameters\",\"schedule_"
                        "policy\"");
    if (infd_server_shared_memory(loop->h->server) & INFD_SHM_SYSTEM)
        infd_strbuf_puts(b, ",\"system_shared_memory\"");
    if (infd_server_shared_memory(loop->h->server) & INFD_SHM_CUDA)
        infd_strbuf_puts(b, ",\"cuda_shared_memory\"");
    infd_strbuf_puts(b, "]}");
    send_json(loop, ev, 200);
}

/* Acquires (name, version) or answers the error. */
static infd_model *acquire_or_reply(http_loop *loop, struct evhttp_request *ev, const char *name,
                                    int64_t version)
{
    infd_model *m = NULL;
    infd_error err = { 0 };
    if (infd_server_model_acquire(loop->h->server, name, version, &m, &err) != INFD_STATUS_OK) {
        send_status(loop, ev, &err);
        return NULL;
    }
    return m;
}

static void write_io(infd_strbuf *b, const infd_model_io *io, bool batched)
{
    infd_strbuf_puts(b, "{\"name\":");
    kserve_write_cstr(b, io->name);
    infd_strbuf_puts(b, ",\"datatype\":");
    kserve_write_cstr(b, infd_dtype_name(io->dtype));
    infd_strbuf_puts(b, ",\"shape\":[");
    if (batched)
        infd_strbuf_puts(b, io->rank ? "-1," : "-1");
    for (int d = 0; d < io->rank; d++)
        infd_strbuf_printf(b, d ? ",%" PRId64 : "%" PRId64, io->dims[d]);
    infd_strbuf_puts(b, "]}");
}

static void handle_model_metadata(http_loop *loop, struct evhttp_request *ev, const char *name,
                                  int64_t version)
{
    infd_model *m = acquire_or_reply(loop, ev, name, version);
    if (!m)
        return;
    infd_strbuf *b = &loop->jb;
    infd_strbuf_reset(b);
    infd_strbuf_puts(b, "{\"name\":");
    kserve_write_cstr(b, infd_model_name(m));
    infd_strbuf_puts(b, ",\"versions\":[");
    /* Every READY version; the acquired one at least. */
    infd_repository_entry *rows = NULL;
    int n_rows = 0, n_listed = 0;
    if (infd_server_repository_index(loop->h->server, true, &rows, &n_rows, NULL) ==
        INFD_STATUS_OK) {
        for (int i = 0; i < n_rows; i++) {
            if (strcmp(rows[i].name, name) != 0 || rows[i].version < 0)
                continue;
            infd_strbuf_printf(b, n_listed++ ? ",\"%" PRId64 "\"" : "\"%" PRId64 "\"",
                               rows[i].version);
        }
    }
    infd_free(rows);
    if (n_listed == 0)
        infd_strbuf_printf(b, "\"%" PRId64 "\"", infd_model_version(m));
    infd_strbuf_puts(b, "],\"platform\":");
    kserve_write_cstr(b, infd_model_platform(m));
    bool batched = infd_model_max_batch_size(m) > 0;
    infd_strbuf_puts(b, ",\"inputs\":[");
    for (int i = 0; i < infd_model_n_inputs(m); i++) {
        infd_model_io io;
        if (infd_model_input(m, i, &io) != INFD_STATUS_OK)
            continue;
        if (i)
            infd_strbuf_puts(b, ",");
        write_io(b, &io, batched);
    }
    infd_strbuf_puts(b, "],\"outputs\":[");
    for (int i = 0; i < infd_model_n_outputs(m); i++) {
        infd_model_io io;
        if (infd_model_output(m, i, &io) != INFD_STATUS_OK)
            continue;
        if (i)
            infd_strbuf_puts(b, ",");
        write_io(b, &io, batched);
    }
    infd_strbuf_puts(b, "]}");
    infd_model_release(m);
    send_json(loop, ev, 200);
}

static void handle_model_ready(http_loop *loop, struct evhttp_request *ev, const char *name,
                               int64_t version)
{
    infd_model *m = acquire_or_reply(loop, ev, name, version);
    if (!m)
        return;
    bool ready = infd_model_is_ready(m);
    infd_model_release(m);
    if (ready)
        send_empty(loop, ev, 200);
    else
        send_errorf(loop, ev, 503, "model '%s' is not ready", name);
}

static void handle_model_config(http_loop *loop, struct evhttp_request *ev, const char *name,
                                int64_t version)
{
    infd_model *m = acquire_or_reply(loop, ev, name, version);
    if (!m)
        return;
    char *json = NULL;
    size_t n = 0;
    infd_error err = { 0 };
    if (infd_model_config_json(m, &json, &n, &err) != INFD_STATUS_OK) {
        infd_model_release(m);
        send_status(loop, ev, &err);
        return;
    }
    infd_model_release(m);
    evbuffer_add(evhttp_request_get_output_buffer(ev), json, n);
    infd_free(json);
    send_reply(loop, ev, 200, "application/json");
}

static void write_duration(infd_strbuf *b, const char *key, uint64_t count, uint64_t ns)
{
    infd_strbuf_printf(b, "\"%s\":{\"count\":%" PRIu64 ",\"ns\":%" PRIu64 "}", key, count, ns);
}

/* One entry of Triton's model_stats array. */
static void write_model_stats(infd_strbuf *b, infd_model *m)
{
    /* About 4 KiB of per-batch-size counters: kept off the stack. */
    static _Thread_local infd_model_stats st;
    infd_model_get_stats(m, &st);
    infd_strbuf_puts(b, "{\"name\":");
    kserve_write_cstr(b, infd_model_name(m));
    infd_strbuf_printf(
        b,
        ",\"version\":\"%" PRId64 "\",\"last_inference\":%" PRIu64 ",\"inference_count\":%" PRIu64
        ",\"execution_count\":%" PRIu64 ",\"inference_stats\":{",
        infd_model_version(m), st.last_inference_ms, st.inference_count, st.execution_count);
    write_duration(b, "success", st.success_count, st.success_ns);
    infd_strbuf_puts(b, ",");
    write_duration(b, "fail", st.failure_count, st.failure_ns);
    infd_strbuf_puts(b, ",");
    write_duration(b, "queue", st.success_count, st.queue_ns);
    infd_strbuf_puts(b, ",");
    write_duration(b, "compute_input", st.success_count, st.compute_input_ns);
    infd_strbuf_puts(b, ",");
    write_duration(b, "compute_infer", st.success_count, st.compute_infer_ns);
    infd_strbuf_puts(b, ",");
    write_duration(b, "compute_output", st.success_count, st.compute_output_ns);
    infd_strbuf_puts(b, ",");
    write_duration(b, "cache_hit", 0, 0);
    infd_strbuf_puts(b, ",");
    write_duration(b, "cache_miss", 0, 0);
    infd_strbuf_puts(b, "},\"batch_stats\":[");
    int k = 0;
    for (int bs = 1; bs <= INFD_STATS_MAX_BATCH; bs++) {
        uint64_t c = st.batch_exec_count[bs];
        if (!c)
            continue;
        infd_strbuf_printf(b, "%s{\"batch_size\":%d,", k++ ? "," : "", bs);
        write_duration(b, "compute_input", c, 0);
        infd_strbuf_puts(b, ",");
        write_duration(b, "compute_infer", c, st.batch_compute_ns[bs]);
        infd_strbuf_puts(b, ",");
        write_duration(b, "compute_output", c, 0);
        infd_strbuf_puts(b, "}");
    }
    infd_strbuf_puts(b, "],\"memory_usage\":[");
    for (int i = 0; i < st.n_memory_usage; i++)
        infd_strbuf_printf(b, "%s{\"type\":\"%s\",\"id\":%" PRId64 ",\"byte_size\":%" PRIu64 "}",
                           i ? "," : "", st.memory_usage[i].type, st.memory_usage[i].id,
                           st.memory_usage[i].byte_size);
    infd_strbuf_puts(b, "]}");
}

/* Stats of every READY version of `name` (NULL: of every model), or of one
 * version when `version` > 0. */
static void handle_stats(http_loop *loop, struct evhttp_request *ev, const char *name,
                         int64_t version)
{
    infd_server *s = loop->h->server;
    infd_strbuf *b = &loop->jb;
    if (name && version > 0) {
        infd_model *m = acquire_or_reply(loop, ev, name, version);
        if (!m)
            return;
        infd_strbuf_reset(b);
        infd_strbuf_puts(b, "{\"model_stats\":[");
        write_model_stats(b, m);
        infd_strbuf_puts(b, "]}");
        infd_model_release(m);
        send_json(loop, ev, 200);
        return;
    }
    infd_repository_entry *rows = NULL;
    int n_rows = 0;
    infd_error err = { 0 };
    if (infd_server_repository_index(s, true, &rows, &n_rows, &err) != INFD_STATUS_OK) {
        send_status(loop, ev, &err);
        return;
    }
    infd_strbuf_reset(b);
    infd_strbuf_puts(b, "{\"model_stats\":[");
    int k = 0;
    for (int i = 0; i < n_rows; i++) {
        if (rows[i].version < 0 || (name && strcmp(rows[i].name, name) != 0))
            continue;
        infd_model *m = NULL;
        if (infd_server_model_acquire(s, rows[i].name, rows[i].version, &m, NULL) != INFD_STATUS_OK)
            continue; /* unloaded since the index was taken */
        if (k++)
            infd_strbuf_puts(b, ",");
        write_model_stats(b, m);
        infd_model_release(m);
    }
    infd_free(rows);
    infd_strbuf_puts(b, "]}");
    if (name && k == 0) {
        /* Say why: unknown (404) or not ready (503). */
        infd_model *m = acquire_or_reply(loop, ev, name, -1);
        if (!m)
            return;
        infd_model_release(m);
    }
    send_json(loop, ev, 200);
}

/* Reads {"ready": bool} from an optional body. */
static bool index_ready_flag(struct evhttp_request *ev, bool *ready, char *msg, size_t n)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(ev);
    size_t len = evbuffer_get_length(in);
    *ready = false;
    if (len == 0)
        return true;
    if (len > 64 * 1024) {
        snprintf(msg, n, "repository index request body is larger than 64 KiB");
        return false;
    }
    char *text = infd_malloc(len + 1);
    if (!text) {
        snprintf(msg, n, "out of memory");
        return false;
    }
    evbuffer_copyout(in, text, len);
    text[len] = '\0';
    char ebuf[256];
    yajl_val root = yajl_tree_parse(text, ebuf, sizeof(ebuf));
    infd_free(text);
    if (!root) {
        size_t e = strlen(ebuf);
        while (e && (ebuf[e - 1] == '\n' || ebuf[e - 1] == ' '))
            ebuf[--e] = '\0';
        snprintf(msg, n, "malformed JSON: %.200s", ebuf);
        return false;
    }
    bool ok = true;
    if (!YAJL_IS_OBJECT(root)) {
        snprintf(msg, n, "repository index request must be a JSON object");
        ok = false;
    } else {
        const char *path[] = { "ready", NULL };
        yajl_val v = yajl_tree_get(root, path, yajl_t_any);
        if (v && !YAJL_IS_TRUE(v) && !YAJL_IS_FALSE(v)) {
            snprintf(msg, n, "'ready' must be a boolean");
            ok = false;
        } else {
            *ready = v && YAJL_IS_TRUE(v);
        }
    }
    yajl_tree_free(root);
    return ok;
}

static void handle_index(http_loop *loop, struct evhttp_request *ev)
{
    char msg[256];
    bool ready;
    if (!index_ready_flag(ev, &ready, msg, sizeof(msg))) {
        send_error(loop, ev, 400, msg);
        return;
    }
    infd_repository_entry *rows = NULL;
    int n_rows = 0;
    infd_error err = { 0 };
    if (infd_server_repository_index(loop->h->server, ready, &rows, &n_rows, &err) !=
        INFD_STATUS_OK) {
        send_status(loop, ev, &err);
        return;
    }
    infd_strbuf *b = &loop->jb;
    infd_strbuf_reset(b);
    infd_strbuf_puts(b, "[");
    for (int i = 0; i < n_rows; i++) {
        infd_strbuf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        kserve_write_cstr(b, rows[i].name);
        if (rows[i].version >= 0)
            infd_strbuf_printf(b, ",\"version\":\"%" PRId64 "\"", rows[i].version);
        infd_strbuf_puts(b, ",\"state\":");
        kserve_write_cstr(b, infd_model_state_name(rows[i].state));
        if (rows[i].reason[0]) {
            infd_strbuf_puts(b, ",\"reason\":");
            kserve_write_cstr(b, rows[i].reason);
        }
        infd_strbuf_puts(b, "}");
    }
    infd_strbuf_puts(b, "]");
    infd_free(rows);
    send_json(loop, ev, 200);
}

/* Runs a (blocking) load or unload off the loop thread. */
static void *load_main(void *arg)
{
    http_call *c = arg;
    infd_error err = { 0 };
    infd_status st = c->kind == CALL_LOAD ? infd_server_load_model(c->server, c->name, &err)
                                          : infd_server_unload_model(c->server, c->name, &err);
    c->status = st;
    if (st != INFD_STATUS_OK)
        snprintf(c->message, sizeof(c->message), "%s", err.msg[0] ? err.msg : infd_status_str(st));
    call_done(c);
    return NULL;
}

static void handle_load(http_loop *loop, struct evhttp_request *ev, const char *name, bool load)
{
    if (strlen(name) >= KSERVE_NAME_BYTES) {
        send_errorf(loop, ev, 400, "model name longer than %d bytes", KSERVE_NAME_BYTES - 1);
        return;
    }
    http_call *c = call_get(loop, load ? CALL_LOAD : CALL_UNLOAD);
    if (!c) {
        send_error(loop, ev, 500, "out of memory");
        return;
    }
    snprintf(c->name, sizeof(c->name), "%s", name);
    c->server = loop->h->server;
    c->ev = ev;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&c->thread, NULL, load_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        call_put(c);
        send_errorf(loop, ev, 500, "cannot start a thread for the %s: %s", load ? "load" : "unload",
                    strerror(rc));
        return;
    }
    loop->n_inflight++;
}

static void finish_load(http_call *c)
{
    pthread_join(c->thread, NULL);
    if (c->status == INFD_STATUS_OK) {
        INFD_LOG_INFO("http: %s of model '%s' done", c->kind == CALL_LOAD ? "load" : "unload",
                      c->name);
        send_empty(c->loop, c->ev, 200);
    } else {
        send_error(c->loop, c->ev, http_code(c->status), c->message);
    }
}

/* ------------------------------------------------------------------------- */
/* Inference                                                                 */
/* ------------------------------------------------------------------------- */

static void on_infer_done(void *user, infd_request *req, infd_status status, const char *message)
{
    (void)req;
    http_call *c = user;
    c->status = status;
    if (status != INFD_STATUS_OK)
        snprintf(c->message, sizeof(c->message), "%s",
                 message && *message ? message : infd_status_str(status));
    call_done(c);
}

/* Whether output `name` is returned as binary data: its own binary_data
 * parameter, else the request's binary_data_output, else JSON. */
/* Parses the Inference-Header-Content-Length header: the JSON part's length. */
static bool header_length(struct evhttp_request *ev, size_t body_n, size_t *out, char *msg,
                          size_t n)
{
    const char *v =
        evhttp_find_header(evhttp_request_get_input_headers(ev), "Inference-Header-Content-Length");
    *out = body_n;
    if (!v)
        return true;
    char *end;
    errno = 0;
    unsigned long long len = strtoull(v, &end, 10);
    if (!*v || *end || errno == ERANGE || v[0] == '-') {
        snprintf(msg, n, "Inference-Header-Content-Length '%.64s' is not a byte count", v);
        return false;
    }
    if (len > body_n) {
        snprintf(msg, n,
                 "Inference-Header-Content-Length is %llu but the body has only "
                 "%zu bytes",
                 len, body_n);
        return false;
    }
    *out = (size_t)len;
    return true;
}

/* Reserves one contiguous chunk of c->bin for the binary outputs whose size
 * is known before running (fixed-size dtypes), and lends each to the
 * request with infd_request_set_output_buffer: the engine writes the result
 * where the response body will send it from. One reservation, so evbuffer
 * never moves an earlier output to grow its chain. */
static infd_status reserve_binary_outputs(http_call *c, int64_t batch, infd_error *err)
{
    infd_model *m = c->model;
    if (infd_model_lends_outputs(m))
        return INFD_STATUS_OK; /* sent from where they lie (finish_infer) */
    kserve_request *r = &c->kreq;
    /* The response lists outputs in request order (model order when the
     * request names none); the chunk is carved in the same order so that
     * it can follow the JSON header as it is. */
    int order[INFD_MAX_MODEL_IO];
    int n_order = 0;
    if (r->n_outputs > 0) {
        for (int j = 0; j < r->n_outputs; j++) {
            int i = infd_model_output_index(m, r->outputs[j].name);
            if (i >= 0)
                order[n_order++] = i;
        }
    } else {
        for (int i = 0; i < infd_model_n_outputs(m) && i < INFD_MAX_MODEL_IO; i++)
            order[n_order++] = i;
    }
    size_t sizes[INFD_MAX_MODEL_IO];
    int idx[INFD_MAX_MODEL_IO];
    size_t total = 0;
    int k = 0;
    for (int j = 0; j < n_order; j++) {
        infd_model_io io;
        if (infd_model_output(m, order[j], &io) != INFD_STATUS_OK || io.dtype == INFD_DTYPE_BYTES ||
            !kserve_output_is_binary(r, io.name) || kserve_output_class_count(r, io.name) > 0 ||
            kserve_output_shm(r, io.name))
            continue; /* BYTES and classified outputs: their size comes with the result;
                       * shared memory ones go there */
        size_t sz = io.row_bytes * (size_t)(batch > 0 ? batch : 1);
        if (sz == 0)
            continue;
        sizes[k] = sz;
        idx[k++] = order[j];
        total += sz;
    }
    if (k == 0)
        return INFD_STATUS_OK;
    if (!c->bin && !(c->bin = evbuffer_new()))
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    struct evbuffer_iovec v;
    if (evbuffer_reserve_space(c->bin, (ev_ssize_t)total, &v, 1) != 1 || v.iov_len < total)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                              "cannot reserve %zu bytes for binary outputs", total);
    v.iov_len = total;
    if (evbuffer_commit_space(c->bin, &v, 1) != 0)
        return infd_error_set(err, INFD_STATUS_INTERNAL, "cannot commit binary output space");
    uint8_t *p = v.iov_base;
    for (int j = 0; j < k; j++) {
        infd_model_io io;
        infd_model_output(m, idx[j], &io);
        infd_status st = infd_request_set_output_buffer(c->req, io.name, p, sizes[j], err);
        if (st != INFD_STATUS_OK)
            return st;
        c->bin_ptr[c->n_bin++] = p;
        p += sizes[j];
    }
    return INFD_STATUS_OK;
}

/* Room for `need` entries in c->vecs and c->segs; false when out of
 * memory. */
static bool segs_reserve(http_call *c, int need)
{
    if (need <= c->segs_cap)
        return true;
    int cap = c->segs_cap ? c->segs_cap : 16;
    while (cap < need)
        cap *= 2;
    struct evbuffer_iovec *v = infd_realloc(c->vecs, (size_t)cap * sizeof(*v));
    if (v)
        c->vecs = v;
    infd_data_segment *g = v ? infd_realloc(c->segs, (size_t)cap * sizeof(*g)) : NULL;
    if (!g)
        return false;
    c->segs = g;
    c->segs_cap = cap;
    return true;
}

/* Appends to c->segs, from *n on, the pieces of bytes [off, off + len) of
 * `body` as its evbuffer chains hold them; false when out of memory. */
static bool body_segments(http_call *c, struct evbuffer *body, size_t off, size_t len, int *n)
{
    if (len == 0)
        return true;
    struct evbuffer_ptr pos;
    if (evbuffer_ptr_set(body, &pos, off, EVBUFFER_PTR_SET) != 0)
        return false;
    int need = evbuffer_peek(body, (ev_ssize_t)len, &pos, NULL, 0);
    if (need <= 0 || !segs_reserve(c, *n + need))
        return false;
    int got = evbuffer_peek(body, (ev_ssize_t)len, &pos, c->vecs, need);
    /* The last chain may run past the input: count only `len` bytes. */
    for (int k = 0; k < got && len > 0; k++) {
        size_t take = c->vecs[k].iov_len < len ? c->vecs[k].iov_len : len;
        c->segs[(*n)++] = (infd_data_segment){ c->vecs[k].iov_base, take };
        len -= take;
    }
    return len == 0;
}

/* A body that is not KServe JSON (Content-Type audio/... or
 * application/octet-stream, no Inference-Header-Content-Length) is the one
 * element of a model whose only input is BYTES of shape [1]: a whole sound
 * file for a speech model, say (`curl --data-binary @a.wav -H
 * 'Content-Type: audio/wav'`). The element's 4-byte length goes before the
 * body's pieces; the response is the ordinary JSON one with every output. */
static infd_status raw_body_input(http_call *c, struct evbuffer *in, size_t body_n,
                                  const char *ctype, infd_error *err)
{
    infd_model_io io;
    int lead = infd_model_max_batch_size(c->model) > 0;
    if (infd_model_n_inputs(c->model) != 1 ||
        infd_model_input(c->model, 0, &io) != INFD_STATUS_OK || io.dtype != INFD_DTYPE_BYTES ||
        io.rank != 1 || io.dims[0] != 1)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "a body of Content-Type '%.64s' is the input of a model with one "
                              "BYTES input of shape [1]; model '%s' is not such a model: send "
                              "KServe JSON (Content-Type application/json)",
                              ctype, infd_model_name(c->model));
    if (body_n > UINT32_MAX)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "a body of %zu bytes is over 4 GiB", body_n);
    kserve_request_reset(&c->kreq); /* no id, outputs or parameters: a JSON response */
    infd_status st;
    for (int b = 0; b < 4; b++)
        c->raw_len[b] = (uint8_t)((uint64_t)body_n >> (8 * b));
    int n_segs = 0;
    if (!segs_reserve(c, 1))
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    c->segs[n_segs++] = (infd_data_segment){ c->raw_len, 4 };
    if (!body_segments(c, in, 0, body_n, &n_segs))
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                              "cannot map the body (out of memory)");
    if ((st = infd_request_create(c->model, &c->req, err)) != INFD_STATUS_OK)
        return st;
    int64_t shape[2] = { 1, 1 };
    return infd_request_add_input_segments(c->req, io.name, INFD_DTYPE_BYTES, shape, 1 + lead,
                                           c->segs, n_segs, err);
}

/* Receiving into the pinned memory pool.
 *
 * A GPU instance copies an input to the device straight from where it lies
 * when that is page-locked memory (the pinned pool, infd.h), which saves
 * the batcher gathering it into the instance's staging: for ResNet-50
 * batches of 128 over HTTP that gather was about a quarter of the
 * server's CPU time per request (bench/RESULTS.md). So a connection that
 * reads large amounts has a slab of the pool, and its byte stream is
 * mirrored into it: top_up reads the socket straight into the slab and
 * hands the bytes to evhttp as reference chains (no copy), and the bytes
 * libevent read itself (at most 4 KiB a time) are copied in beside them.
 * A request body then usually lies whole, in order, in one slab, where
 * pool_span finds and checks it.
 *
 * The mirror goes back to the slab's start when the connection's input
 * buffer was empty (between requests, or between reads of one) and nothing
 * holds the slab but the connection: the previous request is gone. A
 * stream that outgrows its slab moves to a new one twice the size (the
 * body in between is then not contiguous: pool_span's check fails and it
 * takes the ordinary path). Without room in the pool, reads go to
 * libevent's memory as before. */

static _Thread_local http_loop *tl_loop; /* the loop this thread runs */

static void slab_unref(rx_slab *slab)
{
    if (slab && atomic_fetch_sub(&slab->refs, 1) == 1) {
        infd_pinned_free(slab->data);
        infd_free(slab);
    }
}

static void slab_chain_done(const void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    slab_unref(arg);
}

static rx_slab *slab_new(size_t size)
{
    uint8_t *data = infd_pinned_alloc(size);
    if (!data)
        return NULL;
    rx_slab *slab = infd_malloc(sizeof(*slab));
    if (!slab) {
        infd_pinned_free(data);
        return NULL;
    }
    atomic_init(&slab->refs, 1);
    slab->size = size;
    slab->data = data;
    return slab;
}

static void rx_free(rx_conn *rc)
{
    if (!rc)
        return;
    if (rc->fd >= 0 && rc->fd < rc->loop->rx_cap && rc->loop->rx[rc->fd] == rc)
        rc->loop->rx[rc->fd] = NULL;
    slab_unref(rc->slab);
    infd_free(rc);
}

static void rx_closed(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    rx_free(arg);
}

/* The receive state of the connection on `fd`; with `create`, made (with
 * a first slab) when missing and the pool has room. */
static rx_conn *rx_find(http_loop *loop, int fd, struct bufferevent *bev, bool create)
{
    if (!loop || fd < 0)
        return NULL;
    rx_conn *rc = fd < loop->rx_cap ? loop->rx[fd] : NULL;
    if (rc && rc->bev != bev) { /* the fd's previous connection closed unseen */
        rx_free(rc);
        rc = NULL;
    }
    if (rc || !create)
        return rc;
    if (fd >= loop->rx_cap) {
        int cap = loop->rx_cap ? loop->rx_cap : 64;
        while (cap <= fd)
            cap *= 2;
        rx_conn **t = infd_realloc(loop->rx, (size_t)cap * sizeof(*t));
        if (!t)
            return NULL;
        memset(t + loop->rx_cap, 0, (size_t)(cap - loop->rx_cap) * sizeof(*t));
        loop->rx = t;
        loop->rx_cap = cap;
    }
    rx_slab *slab = slab_new(RX_SLAB_MIN);
    rc = slab ? infd_calloc(1, sizeof(*rc)) : NULL;
    if (!rc) {
        slab_unref(slab);
        return NULL;
    }
    rc->loop = loop;
    rc->bev = bev;
    rc->fd = fd;
    rc->slab = slab;
    loop->rx[fd] = rc;
    return rc;
}

/* Makes room in the slab for `need` more bytes of the stream (see above);
 * false when the pool has none. The connection then keeps its slab (the
 * bytes go to libevent's memory; the hole they leave fails pool_span's
 * check), rather than give it back for another connection to take: slabs
 * changing hands under a full pool would break every mirror. */
static bool rx_room(rx_conn *rc, bool restart, size_t need)
{
    if (restart && rc->slab && atomic_load(&rc->slab->refs) == 1)
        rc->fill = 0;
    if (rc->slab && need <= rc->slab->size - rc->fill)
        return true;
    size_t size = rc->slab ? rc->slab->size : RX_SLAB_MIN;
    while (size < rc->fill + need && size < RX_SLAB_MAX)
        size *= 2;
    rx_slab *slab = need <= size ? slab_new(size) : NULL;
    if (!slab)
        return false;
    slab_unref(rc->slab);
    rc->slab = slab;
    rc->fill = 0;
    return true;
}

/* Copies the `n` bytes libevent just appended to `in` into the slab. */
static void rx_mirror(rx_conn *rc, struct evbuffer *in, size_t orig, size_t n)
{
    if (!rc->slab || !rx_room(rc, orig == 0, n))
        return;
    struct evbuffer_ptr pos;
    if (evbuffer_ptr_set(in, &pos, evbuffer_get_length(in) - n, EVBUFFER_PTR_SET) != 0 ||
        evbuffer_copyout_from(in, &pos, rc->slab->data + rc->fill, n) != (ev_ssize_t)n)
        return; /* a hole in the mirror, which pool_span's check finds */
    INFD_COUNT_COPY(n);
    rc->fill += n;
}

/* After an evhttp request arrived on a connection with receive state: free
 * that state when the connection closes. */
/* The receive state of `conn`, or NULL. */
static rx_conn *rx_of(http_loop *loop, struct evhttp_connection *conn)
{
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    return bev ? rx_find(loop, bufferevent_getfd(bev), bev, false) : NULL;
}

static void rx_watch(http_loop *loop, struct evhttp_request *ev)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(ev);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    rx_conn *rc = bev ? rx_find(loop, bufferevent_getfd(bev), bev, false) : NULL;
    if (rc && !rc->watched) {
        conn_set_closecb(loop, evcon, rx_closed, rc);
        rc->watched = true;
    }
}

/* Where the `len` bytes in pieces segs[0, n) lie as one run of the pinned
 * memory pool, or NULL. A connection's reads land in its slab and
 * libevent's own reads are copied there beside them (rx_mirror), so a body
 * usually lies whole in one slab. The run is placed by the first piece in
 * the pool and checked piece by piece: each piece in the pool must be
 * where the run puts it, every other piece's bytes must equal the run's
 * there. The run then lives as long as the body: its pieces in the pool
 * are reference chains that hold the slab. */
static const uint8_t *pool_span(const infd_data_segment *segs, int n, size_t len)
{
    if (len < RX_MIN_BODY)
        return NULL;
    uintptr_t run = 0;
    size_t at = 0;
    int k = 0;
    for (; k < n && !run; k++) {
        if (infd_pinned_contains(segs[k].data, segs[k].nbytes))
            run = (uintptr_t)segs[k].data - at;
        at += segs[k].nbytes;
    }
    void *slab;
    size_t slab_n;
    if (!run || !infd_pinned_find(segs[k - 1].data, &slab, &slab_n) || run < (uintptr_t)slab ||
        len > slab_n || run - (uintptr_t)slab > slab_n - len)
        return NULL;
    at = 0;
    for (k = 0; k < n; k++) {
        const infd_data_segment *g = &segs[k];
        const uint8_t *want = (const uint8_t *)(run + at);
        if (infd_pinned_contains(g->data, g->nbytes) ? g->data != want
                                                     : memcmp(g->data, want, g->nbytes) != 0)
            return NULL;
        at += g->nbytes;
    }
    return (const uint8_t *)run;
}

/* The span [offset, offset + size) of shared memory region `name` for the
 * call, held until the call goes back; *device is -1 for system memory,
 * else the CUDA device *data is on. */
static infd_status shm_span(http_call *c, const char *name, int64_t offset, int64_t size,
                            void **data, int *device, infd_error *err)
{
    if (c->n_shm >= (int)INFD_ARRAY_SIZE(c->shm))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "more than %d shared memory spans in one request",
                              (int)INFD_ARRAY_SIZE(c->shm));
    infd_status st = infd_server_shm_acquire(c->loop->h->server, name, (uint64_t)offset,
                                             (uint64_t)size, &c->shm[c->n_shm], data, err);
    if (st == INFD_STATUS_OK)
        *device = infd_shm_region_device(c->shm[c->n_shm++]);
    return st;
}

/* Outputs the client asked for in shared memory: a fixed-size one is
 * written there by the engine (infd_request_set_output_buffer, whose size
 * check at submit says when the span is too small); others are copied
 * there when they are known (finish_infer). Into a CUDA region the runtime
 * copies each output when the request completes
 * (infd_request_set_output_device). */
static infd_status shm_outputs(http_call *c, infd_error *err)
{
    kserve_request *r = &c->kreq;
    for (int k = 0; k < r->n_outputs; k++) {
        const kserve_output *o = &r->outputs[k];
        if (!o->shm_region[0])
            continue;
        int j = infd_model_output_index(c->model, o->name);
        infd_model_io io;
        if (j < 0 || infd_model_output(c->model, j, &io) != INFD_STATUS_OK)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "unknown output '%s' of model '%s'", o->name,
                                  infd_model_name(c->model));
        void *p;
        int dev = -1;
        infd_status st = shm_span(c, o->shm_region, o->shm_offset, o->shm_byte_size, &p, &dev, err);
        if (st != INFD_STATUS_OK)
            return infd_error_prefix(err, "output '%s'", o->name);
        c->shm_out[j] = p;
        c->shm_out_cap[j] = (size_t)o->shm_byte_size;
        if (dev >= 0) {
            if ((st = infd_request_set_output_device(c->req, o->name, p, (size_t)o->shm_byte_size,
                                                     dev, err)) != INFD_STATUS_OK)
                return st;
            continue;
        }
        if (io.row_bytes > 0 &&
            (st = infd_request_set_output_buffer(c->req, o->name, p, (size_t)o->shm_byte_size,
                                                 err)) != INFD_STATUS_OK)
            return st;
    }
    return INFD_STATUS_OK;
}

/* POST .../infer: decodes the body, builds the request and submits it; the
 * reply is written by finish_infer, or here at once on an error. */
/* Reserves the call's binary outputs (`batch` rows) and submits its
 * request; on failure replies with the error (a 400 for what the client
 * sent, as building the request does). */
static void submit_infer(http_loop *loop, struct evhttp_request *ev, http_call *c, int64_t batch)
{
    infd_error err = { 0 };
    int code;
    if (reserve_binary_outputs(c, batch, &err) != INFD_STATUS_OK) {
        code = err.code == INFD_STATUS_OUT_OF_MEMORY ? 500 : 400;
    } else {
        c->ev = ev;
        const char *client =
            evhttp_find_header(evhttp_request_get_input_headers(ev), INFD_CLIENT_HEADER);
        if (client)
            infd_request_set_client(c->req, client);
        if (infd_infer_async(c->req, on_infer_done, c, &err) == INFD_STATUS_OK) {
            loop->n_inflight++;
            return;
        }
        c->ev = NULL;
        code = http_code(err.code);
    }
    call_put(c);
    send_error(loop, ev, code, err.msg[0] ? err.msg : infd_status_str(err.code));
}

static void handle_infer(http_loop *loop, struct evhttp_request *ev, const char *name,
                         int64_t version)
{
    infd_http *h = loop->h;
    struct evbuffer *in = evhttp_request_get_input_buffer(ev);
    size_t body_n = evbuffer_get_length(in);
    char msg[INFD_ERROR_MSG_BYTES];
    infd_error err = { 0 };
    http_call *c = NULL;
    int code = 400;

    if (body_n > h->max_body_bytes) {
        send_errorf(loop, ev, 413, "request body of %zu bytes is over the limit of %zu", body_n,
                    h->max_body_bytes);
        return;
    }
    const char *enc = evhttp_find_header(evhttp_request_get_input_headers(ev), "Content-Encoding");
    if (enc && strcmp(enc, "identity") != 0) {
        send_errorf(loop, ev, 400, "unsupported Content-Encoding '%.32s'", enc);
        return;
    }
    c = call_get(loop, CALL_INFER);
    if (!c) {
        send_error(loop, ev, 500, "out of memory");
        return;
    }
    if (infd_server_model_acquire(h->server, name, version, &c->model, &err) != INFD_STATUS_OK) {
        code = http_code(err.code);
        goto fail;
    }
    struct evkeyvalq *hdrs = evhttp_request_get_input_headers(ev);
    const char *ctype = evhttp_find_header(hdrs, "Content-Type");
    if (ctype && !evhttp_find_header(hdrs, "Inference-Header-Content-Length") &&
        (strncasecmp(ctype, "audio/", 6) == 0 ||
         strncasecmp(ctype, "application/octet-stream", 24) == 0)) {
        if (raw_body_input(c, in, body_n, ctype, &err) != INFD_STATUS_OK) {
            code = http_code(err.code);
            goto fail;
        }
        submit_infer(loop, ev, c, 0);
        return;
    }
    size_t json_n;
    if (!header_length(ev, body_n, &json_n, msg, sizeof(msg))) {
        infd_error_set(&err, INFD_STATUS_INVALID_ARGUMENT, "%s", msg);
        goto fail;
    }
    /* Only the JSON header is made contiguous; binary inputs stay in the
     * evbuffer chains the socket was read into (body_segments). */
    const char *body = json_n ? (const char *)evbuffer_pullup(in, (ev_ssize_t)json_n) : "";
    if (!body) {
        infd_error_set(&err, INFD_STATUS_OUT_OF_MEMORY, "out of memory reading the body");
        code = 500;
        goto fail;
    }
    if (json_n == 0) {
        infd_error_set(&err, INFD_STATUS_INVALID_ARGUMENT, "empty request body");
        goto fail;
    }
    kserve_request *r = &c->kreq;
    if (kserve_request_parse(r, body, json_n, &err) != INFD_STATUS_OK) {
        code = err.code == INFD_STATUS_OUT_OF_MEMORY ? 500 : 400;
        goto fail;
    }
    /* Binary inputs follow the JSON in input order, as the body's chains
     * hold them. */
    size_t off = json_n;
    int seg_first[INFD_MAX_MODEL_IO] = { 0 }, seg_n[INFD_MAX_MODEL_IO] = { 0 }, n_segs = 0;
    for (int i = 0; i < r->n_inputs; i++) {
        kserve_input *ki = &r->inputs[i];
        if (ki->binary_data_size < 0)
            continue;
        if ((uint64_t)ki->binary_data_size > body_n - off) {
            infd_error_set(&err, INFD_STATUS_INVALID_ARGUMENT,
                           "input '%s': binary data truncated: needs %" PRId64
                           " bytes at offset %zu of the binary part, the body has %zu",
                           ki->name, ki->binary_data_size, off - json_n, body_n - off);
            goto fail;
        }
        seg_first[i] = n_segs;
        if (!body_segments(c, in, off, (size_t)ki->binary_data_size, &n_segs)) {
            infd_error_set(&err, INFD_STATUS_OUT_OF_MEMORY,
                           "input '%s': cannot map the binary data (out of memory)", ki->name);
            code = 500;
            goto fail;
        }
        seg_n[i] = n_segs - seg_first[i];
        off += (size_t)ki->binary_data_size;
    }
    if (off != body_n) {
        infd_error_set(&err, INFD_STATUS_INVALID_ARGUMENT,
                       "the body has %zu bytes after the JSON header, the inputs' "
                       "binary_data_size add up to %zu",
                       body_n - json_n, off - json_n);
        goto fail;
    }
    /* When the binary part lies whole in the pinned pool, one piece per
     * input there instead (a GPU instance copies it to the device from
     * where it lies); pieces only shrink, so they are rewritten in place. */
    const uint8_t *run = pool_span(c->segs, n_segs, body_n - json_n);
    if (run) {
        off = 0;
        n_segs = 0;
        for (int i = 0; i < r->n_inputs; i++) {
            size_t size = (size_t)r->inputs[i].binary_data_size;
            if (r->inputs[i].binary_data_size < 0)
                continue;
            seg_first[i] = n_segs;
            seg_n[i] = size > 0;
            if (size > 0)
                c->segs[n_segs++] = (infd_data_segment){ run + off, size };
            off += size;
        }
    }

    if (infd_request_create(c->model, &c->req, &err) != INFD_STATUS_OK) {
        code = http_code(err.code);
        goto fail;
    }
    if (kserve_request_apply(r, c->req, &err) != INFD_STATUS_OK)
        goto fail_request;
    for (int i = 0; i < r->n_inputs; i++) {
        kserve_input *ki = &r->inputs[i];
        if (ki->shm_region[0]) {
            void *p;
            int dev = -1;
            if (shm_span(c, ki->shm_region, ki->shm_offset, ki->shm_byte_size, &p, &dev, &err) !=
                    INFD_STATUS_OK ||
                (dev < 0 ? infd_request_add_input(c->req, ki->name, ki->dtype, ki->shape, ki->rank,
                                                  p, ki->nbytes, &err)
                         : infd_request_add_input_device(c->req, ki->name, ki->dtype, ki->shape,
                                                         ki->rank, p, ki->nbytes, dev, &err)) !=
                    INFD_STATUS_OK) {
                infd_error_prefix(&err, "input '%s'", ki->name);
                goto fail_request;
            }
            continue;
        }
        infd_status st = ki->binary_data_size < 0
                             ? infd_request_add_input(c->req, ki->name, ki->dtype, ki->shape,
                                                      ki->rank, ki->data, ki->nbytes, &err)
                             : infd_request_add_input_segments(
                                   c->req, ki->name, ki->dtype, ki->shape, ki->rank,
                                   seg_n[i] ? c->segs + seg_first[i] : NULL, seg_n[i], &err);
        if (st != INFD_STATUS_OK)
            goto fail_request;
    }
    if (kserve_request_add_outputs(r, c->req, &err) != INFD_STATUS_OK ||
        shm_outputs(c, &err) != INFD_STATUS_OK)
        goto fail_request;
    int64_t batch = 0;
    if (infd_model_max_batch_size(c->model) > 0 && r->inputs[0].rank > 0)
        batch = r->inputs[0].shape[0];
    submit_infer(loop, ev, c, batch);
    return;

fail_request:
    /* Building the request failed on what the client sent (unknown input,
     * wrong dtype or shape): a 400 whatever code the runtime chose. */
    code = err.code == INFD_STATUS_OUT_OF_MEMORY ? 500 : 400;
fail:
    call_put(c);
    send_error(loop, ev, code, err.msg[0] ? err.msg : infd_status_str(err.code));
}

/* A reply chain that pointed into the call's outputs is gone. */
static void call_unref(http_call *c)
{
    if (--c->refs == 0)
        call_put(c);
}

static void reply_chain_done(const void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    call_unref(arg);
}

static void finish_infer(http_call *c)
{
    http_loop *loop = c->loop;
    struct evhttp_request *ev = c->ev;
    if (c->status != INFD_STATUS_OK) {
        send_error(loop, ev, http_code(c->status), c->message);
        return;
    }
    kserve_request *r = &c->kreq;
    infd_strbuf *b = &loop->jb;
    infd_strbuf_reset(b);
    infd_strbuf_puts(b, "{\"model_name\":");
    kserve_write_cstr(b, infd_model_name(c->model));
    infd_strbuf_printf(b, ",\"model_version\":\"%" PRId64 "\"", infd_model_version(c->model));
    if (r->has_id) {
        infd_strbuf_puts(b, ",\"id\":");
        kserve_write_cstr(b, r->id);
    }
    infd_strbuf_puts(b, ",\"outputs\":[");

    int n_out = infd_request_n_outputs(c->req);
    bool any_binary = false, zero_copy = true;
    int n_binary = 0;
    for (int i = 0; i < n_out; i++) {
        const char *name = NULL;
        infd_tensor t;
        if (infd_request_output(c->req, i, &name, &t) != INFD_STATUS_OK)
            continue;
        if (i)
            infd_strbuf_puts(b, ",");
        kserve_write_output_head(b, name, &t);
        const kserve_output *so = kserve_output_shm(r, name);
        if (so) {
            /* In the region: written there in place, or copied now. */
            int j = infd_model_output_index(c->model, name);
            if (j < 0 || t.nbytes > c->shm_out_cap[j]) {
                send_errorf(loop, ev, 400,
                            "output '%s': %zu bytes do not fit its shared_memory_byte_size %zu",
                            name, t.nbytes, j < 0 ? (size_t)0 : c->shm_out_cap[j]);
                return;
            }
            if (t.data != c->shm_out[j] && t.nbytes) { /* a CUDA region's is there */
                INFD_COUNT_COPY(t.nbytes);
                memcpy(c->shm_out[j], t.data, t.nbytes);
            }
            infd_strbuf_puts(b, ",\"parameters\":{\"shared_memory_region\":");
            kserve_write_cstr(b, so->shm_region);
            infd_strbuf_printf(b, ",\"shared_memory_byte_size\":%zu}}", t.nbytes);
            continue;
        }
        if (kserve_output_is_binary(r, name)) {
            infd_strbuf_printf(b, ",\"parameters\":{\"binary_data_size\":%zu}}", t.nbytes);
            /* Zero copy holds when the binary outputs are exactly the
             * reserved ones, in order, written in place. */
            if (n_binary >= c->n_bin || t.data != c->bin_ptr[n_binary])
                zero_copy = false;
            n_binary++;
            any_binary = true;
        } else {
            infd_strbuf_puts(b, ",\"data\":");
            kserve_write_data(b, &t, infd_tensor_numel(&t));
            infd_strbuf_puts(b, "}");
        }
    }
    infd_strbuf_puts(b, "]}");
    if (n_binary != c->n_bin)
        zero_copy = false;
    if (b->oom) {
        send_error(loop, ev, 500, "out of memory writing the response");
        return;
    }
    struct evbuffer *out = evhttp_request_get_output_buffer(ev);
    evbuffer_add(out, b->data, b->len);
    if (!any_binary) {
        send_reply(loop, ev, 200, "application/json");
        return;
    }
    char len[32];
    snprintf(len, sizeof(len), "%zu", b->len);
    evhttp_add_header(evhttp_request_get_output_headers(ev), "Inference-Header-Content-Length",
                      len);
    INFD_LOG_TRACE("http: %d binary output(s), %s", n_binary, zero_copy ? "zero-copy" : "copied");
    if (zero_copy) {
        evbuffer_add_buffer(out, c->bin);
    } else {
        bool lent = infd_model_lends_outputs(c->model);
        for (int i = 0; i < n_out; i++) {
            const char *name = NULL;
            infd_tensor t;
            if (infd_request_output(c->req, i, &name, &t) != INFD_STATUS_OK ||
                !kserve_output_is_binary(r, name) || t.nbytes == 0)
                continue;
            if (lent && evbuffer_add_reference(out, t.data, t.nbytes, reply_chain_done, c) == 0) {
                c->refs++;
                continue;
            }
            INFD_COUNT_COPY(t.nbytes);
            evbuffer_add(out, t.data, t.nbytes);
        }
    }
    send_reply(loop, ev, 200, "application/octet-stream");
}

/* ------------------------------------------------------------------------- */
/* Routing                                                                   */
/* ------------------------------------------------------------------------- */

static const char *method_name(enum evhttp_cmd_type m)
{
    switch (m) {
    case EVHTTP_REQ_GET:
        return "GET";
    case EVHTTP_REQ_POST:
        return "POST";
    case EVHTTP_REQ_HEAD:
        return "HEAD";
    case EVHTTP_REQ_PUT:
        return "PUT";
    case EVHTTP_REQ_DELETE:
        return "DELETE";
    case EVHTTP_REQ_OPTIONS:
        return "OPTIONS";
    case EVHTTP_REQ_PATCH:
        return "PATCH";
    default:
        return "this method";
    }
}

/* True when the method is `want` (GET also allows HEAD); else answers 405. */
static bool method_is(http_loop *loop, struct evhttp_request *ev, enum evhttp_cmd_type want)
{
    enum evhttp_cmd_type m = evhttp_request_get_command(ev);
    if (m == want || (want == EVHTTP_REQ_GET && m == EVHTTP_REQ_HEAD))
        return true;
    evhttp_add_header(evhttp_request_get_output_headers(ev), "Allow",
                      want == EVHTTP_REQ_GET ? "GET, HEAD" : "POST");
    send_errorf(loop, ev, 405, "%s is not allowed on %s; use %s", method_name(m),
                evhttp_request_get_uri(ev), method_name(want));
    return false;
}

/* ------------------------------------------------------------------------- */
/* System shared memory (Triton's extension; docs/HTTP.md)                   */
/* ------------------------------------------------------------------------- */

static void shm_status_row(void *user, const infd_shm_info *r)
{
    infd_strbuf *b = user;
    if (b->len > 1)
        infd_strbuf_puts(b, ",");
    infd_strbuf_puts(b, "{\"name\":");
    kserve_write_cstr(b, r->name);
    infd_strbuf_puts(b, ",\"key\":");
    kserve_write_cstr(b, r->key);
    infd_strbuf_printf(b, ",\"offset\":%" PRIu64 ",\"byte_size\":%" PRIu64 "}", r->offset,
                       r->byte_size);
}

/* An unsigned integer member of a register body; false with `msg` set when
 * it is missing (and required) or not a non-negative integer. */
static bool shm_u64(yajl_val root, const char *key, bool required, uint64_t *out, char *msg,
                    size_t n)
{
    const char *path[] = { key, NULL };
    yajl_val v = yajl_tree_get(root, path, yajl_t_any);
    *out = 0;
    if (!v) {
        if (required)
            snprintf(msg, n, "'%s' is missing", key);
        return !required;
    }
    if (!YAJL_IS_INTEGER(v) || YAJL_GET_INTEGER(v) < 0) {
        snprintf(msg, n, "'%s' must be a non-negative integer", key);
        return false;
    }
    *out = (uint64_t)YAJL_GET_INTEGER(v);
    return true;
}

static void cuda_shm_status_row(void *user, const infd_cuda_shm_info *r)
{
    infd_strbuf *b = user;
    if (b->len > 1)
        infd_strbuf_puts(b, ",");
    infd_strbuf_puts(b, "{\"name\":");
    kserve_write_cstr(b, r->name);
    infd_strbuf_printf(b, ",\"device_id\":%d,\"byte_size\":%" PRIu64 "}", r->device_id,
                       r->byte_size);
}

/* A CUDA register request's raw_handle: {"b64": "<base64 of the handle>"}
 * decoded into `out` (INFD_SHM_CUDA_HANDLE_BYTES); false with `msg` set. */
static bool cuda_handle(yajl_val root, uint8_t *out, char *msg, size_t n)
{
    const char *path[] = { "raw_handle", "b64", NULL };
    yajl_val v = yajl_tree_get(root, path, yajl_t_string);
    const char *b64 = v ? YAJL_GET_STRING(v) : NULL;
    size_t len = b64 ? strlen(b64) : 0;
    /* 64 bytes are 88 base64 characters, the last two '=' padding. */
    uint8_t buf[3 * 88 / 4];
    if (!b64 || len != 4 * ((INFD_SHM_CUDA_HANDLE_BYTES + 2) / 3) ||
        EVP_DecodeBlock(buf, (const unsigned char *)b64, (int)len) < 0 || b64[len - 1] != '=' ||
        b64[len - 2] != '=') {
        snprintf(msg, n,
                 "'raw_handle' must be {\"b64\": the base64 of a %d-byte cudaIpcMemHandle_t}",
                 INFD_SHM_CUDA_HANDLE_BYTES);
        return false;
    }
    memcpy(out, buf, INFD_SHM_CUDA_HANDLE_BYTES);
    return true;
}

/* POST .../region/{r}/register with {"key": "/name", "offset": N,
 * "byte_size": N}, or for a CUDA region {"raw_handle": {"b64": "..."},
 * "device_id": N, "byte_size": N}. */
static void shm_register(http_loop *loop, struct evhttp_request *ev, const char *name, bool cuda)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(ev);
    size_t len = evbuffer_get_length(in);
    char msg[320];
    if (len == 0 || len > 64 * 1024) {
        send_errorf(loop, ev, 400, "a register request is a JSON object of at most 64 KiB");
        return;
    }
    char *text = infd_malloc(len + 1);
    if (!text) {
        send_error(loop, ev, 500, "out of memory");
        return;
    }
    evbuffer_copyout(in, text, len);
    text[len] = '\0';
    char ebuf[256];
    yajl_val root = yajl_tree_parse(text, ebuf, sizeof(ebuf));
    infd_free(text);
    if (!root || !YAJL_IS_OBJECT(root)) {
        yajl_tree_free(root);
        send_errorf(loop, ev, 400,
                    cuda ? "a register request is a JSON object with 'raw_handle', 'device_id' "
                           "and 'byte_size'"
                         : "a register request is a JSON object with 'key', 'offset' and "
                           "'byte_size'");
        return;
    }
    if (cuda) {
        uint8_t handle[INFD_SHM_CUDA_HANDLE_BYTES];
        uint64_t device = 0, size = 0;
        infd_error err = { 0 };
        if (!cuda_handle(root, handle, msg, sizeof(msg)) ||
            !shm_u64(root, "device_id", true, &device, msg, sizeof(msg)) ||
            !shm_u64(root, "byte_size", true, &size, msg, sizeof(msg)))
            send_error(loop, ev, 400, msg);
        else if (device > INT32_MAX)
            send_errorf(loop, ev, 400, "'device_id' %" PRIu64 " is not a device", device);
        else if (infd_server_cuda_shm_register(loop->h->server, name, handle, sizeof(handle),
                                               (int)device, size, &err) == INFD_STATUS_OK)
            send_empty(loop, ev, 200);
        else
            send_errorf(loop, ev, 400, "%s", err.msg);
        yajl_tree_free(root);
        return;
    }
    const char *kpath[] = { "key", NULL };
    yajl_val key = yajl_tree_get(root, kpath, yajl_t_any);
    uint64_t offset = 0, size = 0;
    if (!key || !YAJL_IS_STRING(key)) {
        send_errorf(loop, ev, 400, "'key' must be a string");
    } else if (!shm_u64(root, "offset", false, &offset, msg, sizeof(msg)) ||
               !shm_u64(root, "byte_size", true, &size, msg, sizeof(msg))) {
        send_error(loop, ev, 400, msg);
    } else {
        infd_error err = { 0 };
        if (infd_server_shm_register(loop->h->server, name, YAJL_GET_STRING(key), offset, size,
                                     &err) == INFD_STATUS_OK)
            send_empty(loop, ev, 200);
        else
            send_errorf(loop, ev, 400, "%s", err.msg);
    }
    yajl_tree_free(root);
}

/* /v2/{system,cuda}sharedmemory[/region/{r}]/{status,register,unregister}.
 * Every error is 400, as Triton answers them. */
static void route_shm(http_loop *loop, struct evhttp_request *ev, char **seg, int n, bool cuda)
{
    const char *region = NULL;
    const char *action = n >= 3 ? seg[n - 1] : "";
    if (n == 5 && strcmp(seg[2], "region") == 0)
        region = seg[3];
    else if (n != 3) {
        send_errorf(loop, ev, 404, "no route for %.200s", evhttp_request_get_uri(ev));
        return;
    }
    infd_server *s = loop->h->server;
    infd_error err = { 0 };
    if (strcmp(action, "status") == 0) {
        if (!method_is(loop, ev, EVHTTP_REQ_GET))
            return;
        infd_strbuf *b = &loop->jb;
        infd_strbuf_reset(b);
        infd_strbuf_puts(b, "[");
        if ((cuda ? infd_server_cuda_shm_status(s, region, cuda_shm_status_row, b, &err)
                  : infd_server_shm_status(s, region, shm_status_row, b, &err)) != INFD_STATUS_OK) {
            send_errorf(loop, ev, 400, "%s", err.msg);
            return;
        }
        infd_strbuf_puts(b, "]");
        send_json(loop, ev, 200);
    } else if (strcmp(action, "register") == 0 && region) {
        if (method_is(loop, ev, EVHTTP_REQ_POST))
            shm_register(loop, ev, region, cuda);
    } else if (strcmp(action, "unregister") == 0) {
        if (!method_is(loop, ev, EVHTTP_REQ_POST))
            return;
        if ((cuda ? infd_server_cuda_shm_unregister(s, region, &err)
                  : infd_server_shm_unregister(s, region, &err)) == INFD_STATUS_OK)
            send_empty(loop, ev, 200);
        else
            send_errorf(loop, ev, 400, "%s", err.msg);
    } else {
        send_errorf(loop, ev, 404, "no route for %.200s", evhttp_request_get_uri(ev));
    }
}

/* /v2/models/{m}[/versions/{v}][/action] */
static void route_model(http_loop *loop, struct evhttp_request *ev, char **seg, int n)
{
    const char *name = seg[2];
    int64_t version = -1;
    int i = 3;
    if (strlen(name) >= KSERVE_NAME_BYTES) {
        send_errorf(loop, ev, 404, "unknown model: name longer than %d bytes",
                    KSERVE_NAME_BYTES - 1);
        return;
    }
    if (n > i && strcmp(seg[i], "versions") == 0) {
        if (n == i + 1) {
            send_errorf(loop, ev, 404, "no route for %s", evhttp_request_get_uri(ev));
            return;
        }
        if (!parse_version(seg[i + 1], &version)) {
            send_errorf(loop, ev, 400, "model '%s': invalid version '%.32s'", name, seg[i + 1]);
            return;
        }
        i += 2;
    }
    if (n == i) {
        if (method_is(loop, ev, EVHTTP_REQ_GET))
            handle_model_metadata(loop, ev, name, version);
        return;
    }
    if (n != i + 1) {
        send_errorf(loop, ev, 404, "no route for %s", evhttp_request_get_uri(ev));
        return;
    }
    const char *action = seg[i];
    if (strcmp(action, "infer") == 0) {
        if (method_is(loop, ev, EVHTTP_REQ_POST))
            handle_infer(loop, ev, name, version);
    } else if (strcmp(action, "ready") == 0) {
        if (method_is(loop, ev, EVHTTP_REQ_GET))
            handle_model_ready(loop, ev, name, version);
    } else if (strcmp(action, "config") == 0) {
        if (method_is(loop, ev, EVHTTP_REQ_GET))
            handle_model_config(loop, ev, name, version);
    } else if (strcmp(action, "stats") == 0) {
        if (method_is(loop, ev, EVHTTP_REQ_GET))
            handle_stats(loop, ev, name, version);
    } else {
        send_errorf(loop, ev, 404, "no route for %s", evhttp_request_get_uri(ev));
    }
}

/* ------------------------------------------------------------------------- */
/* Apps' routes and event streams                                            */
/* ------------------------------------------------------------------------- */

bool infd_http_sink_send(infd_http_sink *sink, const char *data, size_t n)
{
    pthread_mutex_lock(&sink->mu);
    bool open = !sink->closed;
    if (open && sink->pending.len + n + 8 > SINK_MAX_PENDING) {
        sink->dropped++; /* a slow reader loses events */
    } else if (open) {
        infd_strbuf_put(&sink->pending, "data: ", 6);
        infd_strbuf_put(&sink->pending, data, n);
        infd_strbuf_put(&sink->pending, "\n\n", 2);
    }
    /* Under the lock: once a release is seen, the loop thread frees the
     * sink, which must not be touched after unlocking. */
    if (open)
        event_active(sink->flush, 0, 0);
    pthread_mutex_unlock(&sink->mu);
    return open;
}

void infd_http_sink_release(infd_http_sink *sink)
{
    if (!sink)
        return;
    pthread_mutex_lock(&sink->mu);
    sink->released = true;
    event_active(sink->flush, 0, 0); /* under the lock: see infd_http_sink_send */
    pthread_mutex_unlock(&sink->mu);
}

static void sink_free(infd_http_sink *sink)
{
    http_loop *loop = sink->loop;
    for (infd_http_sink **p = &loop->sinks; *p; p = &(*p)->next) {
        if (*p == sink) {
            *p = sink->next;
            break;
        }
    }
    if (sink->flush)
        event_free(sink->flush);
    infd_strbuf_fini(&sink->pending);
    pthread_mutex_destroy(&sink->mu);
    infd_free(sink);
}

/* Ends the reply (the client is still there). */
static void sink_end(infd_http_sink *sink)
{
    if (!sink->ev)
        return;
    struct evhttp_connection *conn = evhttp_request_get_connection(sink->ev);
    if (conn)
        conn_set_closecb(sink->loop, conn, NULL, NULL);
    evhttp_send_reply_end(sink->ev);
    sink->ev = NULL;
}

/* The client left: libevent frees the request with its connection. */
static void on_sink_closed(struct evhttp_connection *conn, void *arg)
{
    (void)conn;
    infd_http_sink *sink = arg;
    sink->ev = NULL;
    pthread_mutex_lock(&sink->mu);
    sink->closed = true;
    pthread_mutex_unlock(&sink->mu);
    event_active(sink->flush, 0, 0);
}

static void on_sink_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    infd_http_sink *sink = arg;
    struct evbuffer *chunk = evbuffer_new();
    pthread_mutex_lock(&sink->mu);
    if (chunk && sink->pending.len > 0 && sink->ev)
        evbuffer_add(chunk, sink->pending.data, sink->pending.len);
    infd_strbuf_reset(&sink->pending);
    bool released = sink->released;
    pthread_mutex_unlock(&sink->mu);
    if (chunk && evbuffer_get_length(chunk) > 0 && sink->ev)
        evhttp_send_reply_chunk(sink->ev, chunk);
    if (chunk)
        evbuffer_free(chunk);
    if (released) {
        sink_end(sink);
        sink_free(sink);
    }
}

/* The frontend stops: every stream's reply ends; sends fail from now on. */
static void sinks_close(http_loop *loop)
{
    for (infd_http_sink *sink = loop->sinks; sink; sink = sink->next) {
        pthread_mutex_lock(&sink->mu);
        sink->closed = true;
        pthread_mutex_unlock(&sink->mu);
        sink_end(sink);
    }
}

static void handle_extension(http_loop *loop, struct evhttp_request *ev,
                             const infd_http_extension *x, char **seg, int n)
{
    char path[HTTP_MAX_PATH];
    size_t len = 0;
    path[0] = '\0';
    for (int i = 2; i < n; i++)
        len += (size_t)snprintf(path + len, sizeof(path) - len, "%s%s", i > 2 ? "/" : "", seg[i]);
    infd_http_sink *sink = infd_calloc(1, sizeof(*sink));
    if (!sink) {
        send_error(loop, ev, 500, "out of memory");
        return;
    }
    sink->loop = loop;
    pthread_mutex_init(&sink->mu, NULL);
    sink->flush = event_new(loop->base, -1, 0, on_sink_flush, sink);
    sink->next = loop->sinks;
    loop->sinks = sink;
    if (!sink->flush) {
        sink_free(sink);
        send_error(loop, ev, 500, "out of memory");
        return;
    }
    char *json = NULL;
    size_t json_n = 0;
    infd_error err;
    infd_error_clear(&err);
    infd_status st = x->route(x->user, path, sink, &json, &json_n, &err);
    if (st != INFD_STATUS_OK || json) {
        sink_free(sink);
        if (st != INFD_STATUS_OK) {
            send_status(loop, ev, &err);
            return;
        }
        evbuffer_add(evhttp_request_get_output_buffer(ev), json, json_n);
        infd_free(json);
        send_reply(loop, ev, 200, "application/json");
        return;
    }
    /* The app took the sink: a never-ending reply, events as they come. */
    struct evhttp_connection *conn = evhttp_request_get_connection(ev);
    struct evkeyvalq *hdrs = evhttp_request_get_output_headers(ev);
    evhttp_add_header(hdrs, "Content-Type", "text/event-stream");
    evhttp_add_header(hdrs, "Cache-Control", "no-cache");
    sink->ev = ev;
    if (conn) {
        evhttp_connection_set_timeout(conn, 24 * 3600);
        conn_set_closecb(sink->loop, conn, on_sink_closed, sink);
    }
    evhttp_send_reply_start(ev, 200, "OK");
    event_active(sink->flush, 0, 0); /* what the app sent already */
}

/* Triton's API group of a /v2 path (seg[0] is "v2"): what
 * --http-restricted-api names. The apps' routes (/v2/video/...) and paths
 * no route answers count as metadata. */
static infd_api api_of(char **seg, int n)
{
    if (n == 1)
        return INFD_API_METADATA;
    if (strcmp(seg[1], "health") == 0)
        return INFD_API_HEALTH;
    if (strcmp(seg[1], "systemsharedmemory") == 0 || strcmp(seg[1], "cudasharedmemory") == 0)
        return INFD_API_SHARED_MEMORY;
    if (strcmp(seg[1], "repository") == 0)
        return INFD_API_MODEL_REPOSITORY;
    if (strcmp(seg[1], "models") != 0 || n < 3)
        return INFD_API_METADATA;
    if (n == 3 && strcmp(seg[2], "stats") == 0)
        return INFD_API_STATISTICS;
    /* models/{m}[/versions/{v}][/what] */
    int base = n >= 5 && strcmp(seg[3], "versions") == 0 ? 5 : 3;
    if (n != base + 1)
        return INFD_API_METADATA;
    const char *what = seg[base];
    return strcmp(what, "infer") == 0    ? INFD_API_INFERENCE
           : strcmp(what, "ready") == 0  ? INFD_API_HEALTH
           : strcmp(what, "config") == 0 ? INFD_API_MODEL_CONFIG
           : strcmp(what, "stats") == 0  ? INFD_API_STATISTICS
                                         : INFD_API_METADATA;
}

/* False (after answering 403) when the request's API group is restricted
 * and the request lacks the group's header and value. */
static bool allowed(http_loop *loop, struct evhttp_request *ev, char **seg, int n)
{
    const infd_restricted *r = loop->h->restricted;
    if (!r)
        return true;
    infd_api api = api_of(seg, n);
    const char *key = infd_restricted_key(r, api);
    if (!key[0])
        return true;
    const char *got = evhttp_find_header(evhttp_request_get_input_headers(ev), key);
    if (infd_restricted_allows(r, api, got, got ? strlen(got) : 0))
        return true;
    send_errorf(loop, ev, 403, "This API is restricted, expecting header '%s'", key);
    return false;
}

/* Connection limits and the request deadline (issue #24).
 *
 * libevent 2.1's HTTP server has no hook at accept time or when a
 * connection closes, but every connection's bufferevent comes from
 * make_bufferevent, synchronously inside evhttp's accept callback. There
 * each gets a guard_conn, with callbacks on the bufferevent's two buffers.
 * g_admit, activated from there, runs before the connection's first read
 * (its read event can only fire at the loop's next poll): it notes the
 * socket (its fd and inode) and the peer address, and asks the frontend's
 * infd_conn_limit, in total and per client address. A connection over a
 * limit is kept but marked: its first request is answered 503 (total) or
 * 429 (per client) with Connection: close, so the client learns why, as
 * nginx's limit_conn answers. A connection's place is given back when
 * evhttp closes it (guard_closed, for those that made a request) or, for
 * the rest, by the table itself: it knows each admitted socket, across
 * loops, and frees one whose fd number is given again or, at a limit, whose
 * socket is closed or whose client has hung up (conn_limit.h). g_sweep,
 * every second, frees the guards whose socket evhttp has closed (the fd
 * gone, or now another socket: fstat's inode differs); it never touches their
 * bufferevent, which evhttp may have freed. (Holding a reference on the
 * bufferevent instead would keep its read event registered on the fd
 * number after evhttp closed it, and that event would steal the bytes of
 * the next connection given the same number.) This assumes the bufferevent
 * outlives g_admit, which holds unless libevent itself runs out of memory
 * setting the connection up.
 *
 * The deadline: a request must arrive whole (headers and body) within
 * --http-header-timeout-secs of its first byte, plus one second for every
 * HTTP_MIN_RATE bytes received, so a slow but steady upload goes on while a
 * client that trickles its headers (slowloris) is cut off; evhttp's own
 * timeout only closes a connection that goes silent. The input callback
 * notes the first byte and counts them, on_request ends the wait, the
 * output buffer running dry after an answer starts the wait for the next.
 * g_sweep answers an expired request 408 (plain HTTP; under TLS the socket
 * just closes) and shuts the socket down, so evhttp closes the connection. */
#define HTTP_MIN_RATE 1024 /* bytes per second */

typedef enum guard_state { G_NEW, G_READING, G_BUSY, G_IDLE } guard_state;

typedef struct guard_conn {
    http_loop *loop;
    struct bufferevent *bev; /* evhttp's; valid while the socket is open */
    struct sockaddr_storage peer;
    bool has_peer;
    uint64_t ticket;        /* its admission (infd_conn_limit_enter); 0: not counted */
    int refused;            /* 0, or the status its requests get (503, 429) */
    guard_state state;      /* G_NEW/G_IDLE: waiting; G_READING: a request is arriving */
    uint64_t since_ns;      /* G_READING: its first byte */
    uint64_t bytes;         /* G_READING: bytes of it so far */
    bool closed;            /* evhttp called guard_closed: the count is released */
    conn_close_cb close_cb; /* the frontend's own close callback, and its arg */
    void *close_arg;
    int fd;                         /* -1 until admitted */
    dev_t dev;                      /* the socket's identity, */
    ino_t ino;                      /* as fstat saw it at admission */
    struct guard_conn *next, *prev; /* g_pending: next only; g_conns: both */
} guard_conn;

static void guard_unlink(http_loop *loop, guard_conn *g)
{
    if (g->prev)
        g->prev->next = g->next;
    else
        loop->g_conns = g->next;
    if (g->next)
        g->next->prev = g->prev;
    g->next = g->prev = NULL;
}

static void guard_input(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
    (void)in;
    guard_conn *g = arg;
    if (info->n_added == 0)
        return;
    if (g->state == G_NEW || g->state == G_IDLE) {
        g->state = G_READING;
        g->since_ns = infd_clock_ns();
        g->bytes = 0;
    }
    g->bytes += info->n_added;
}

/* An answer written out: the next request's wait starts now (with what
 * part of it is already buffered). */
static void guard_output(struct evbuffer *out, const struct evbuffer_cb_info *info, void *arg)
{
    guard_conn *g = arg;
    if (g->state != G_BUSY || info->n_deleted == 0 || evbuffer_get_length(out) != 0)
        return;
    size_t have = evbuffer_get_length(bufferevent_get_input(g->bev));
    g->state = have ? G_READING : G_IDLE;
    g->since_ns = infd_clock_ns();
    g->bytes = have;
}

/* Tracks a new connection's bufferevent (make_bufferevent, loop thread).
 * Without memory for it the connection goes untracked: not counted, no
 * deadline. */
static void guard_track(http_loop *loop, struct bufferevent *bev)
{
    infd_http *h = loop->h;
    if (!h->limit && h->header_timeout_secs <= 0)
        return;
    guard_conn *g = infd_calloc(1, sizeof(*g));
    if (!g)
        return;
    g->loop = loop;
    g->bev = bev;
    g->fd = -1;
    if (!evbuffer_add_cb(bufferevent_get_input(bev), guard_input, g)) {
        infd_free(g);
        return;
    }
    if (!evbuffer_add_cb(bufferevent_get_output(bev), guard_output, g)) {
        evbuffer_remove_cb(bufferevent_get_input(bev), guard_input, g);
        infd_free(g);
        return;
    }
    g->next = loop->g_pending;
    loop->g_pending = g;
    event_active(loop->g_admit, 0, 0);
}

/* Logs refusals and expiries, at most every 10 s. */
static void guard_log(http_loop *loop, uint64_t now)
{
    if (now - loop->g_warned_ns < 10ull * 1000000000ull)
        return;
    if (loop->g_refused)
        infd_log(INFD_LOG_LEVEL_WARN,
                 "http: %" PRIu64 " connection(s) over a limit (--http-max-connections %d, "
                 "--http-max-connections-per-client %d): answered 503/429",
                 loop->g_refused, loop->h->max_connections, loop->h->max_per_client);
    if (loop->g_expired)
        infd_log(INFD_LOG_LEVEL_WARN,
                 "http: %" PRIu64 " request(s) did not arrive within --http-header-timeout-secs "
                 "%d (plus 1 s per %d bytes): closed",
                 loop->g_expired, loop->h->header_timeout_secs, HTTP_MIN_RATE);
    if (loop->g_refused || loop->g_expired)
        loop->g_warned_ns = now;
    loop->g_refused = loop->g_expired = 0;
}

static void guard_release(http_loop *loop, guard_conn *g);

static void on_guard_admit(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_loop *loop = arg;
    infd_http *h = loop->h;
    while (loop->g_pending) {
        guard_conn *g = loop->g_pending;
        loop->g_pending = g->next;
        g->prev = NULL;
        g->next = loop->g_conns;
        if (loop->g_conns)
            loop->g_conns->prev = g;
        loop->g_conns = g;
        int sfd = bufferevent_getfd(g->bev);
        struct stat st;
        if (sfd < 0 || fstat(sfd, &st) != 0)
            continue; /* evhttp failed to set it up: the sweep reaps it */
        g->dev = st.st_dev;
        g->ino = st.st_ino;
        socklen_t len = sizeof(g->peer);
        g->has_peer = getpeername(sfd, (struct sockaddr *)&g->peer, &len) == 0;
        if (sfd >= loop->g_by_fd_cap) {
            int cap = loop->g_by_fd_cap ? loop->g_by_fd_cap : 64;
            while (cap <= sfd)
                cap *= 2;
            guard_conn **t = infd_realloc(loop->g_by_fd, (size_t)cap * sizeof(*t));
            if (t) {
                memset(t + loop->g_by_fd_cap, 0, (size_t)(cap - loop->g_by_fd_cap) * sizeof(*t));
                loop->g_by_fd = t;
                loop->g_by_fd_cap = cap;
            }
        }
        g->fd = sfd;
        if (sfd < loop->g_by_fd_cap) {
            /* The guard this fd had before belongs to a socket that is
             * closed (the number was free to be given again): freed now,
             * not at the sweep. */
            guard_conn *old = loop->g_by_fd[sfd];
            if (old && old != g) {
                guard_unlink(loop, old);
                guard_release(loop, old);
            }
            loop->g_by_fd[sfd] = g;
        }
        if (!h->limit)
            continue;
        const struct sockaddr *peer = g->has_peer ? (struct sockaddr *)&g->peer : NULL;
        infd_conn_verdict v = infd_conn_limit_enter(h->limit, sfd, peer, &g->ticket);
        switch (v) {
        case INFD_CONN_ADMITTED:
            break;
        case INFD_CONN_OVER_PER_CLIENT:
            g->refused = 429;
            break;
        default: /* over the total, or no memory to count it */
            g->refused = 503;
            break;
        }
        if (g->refused) {
            loop->g_refused++;
            guard_log(loop, infd_clock_ns());
        }
    }
}

/* True while the socket g admitted is still open (evhttp closes it when it
 * frees the connection; the fd number may then belong to another). */
static bool guard_alive(const guard_conn *g)
{
    struct stat st;
    return g->fd >= 0 && fstat(g->fd, &st) == 0 && st.st_dev == g->dev && st.st_ino == g->ino;
}

/* Gives the connection's place back. */
static void guard_uncount(http_loop *loop, guard_conn *g)
{
    if (g->ticket)
        infd_conn_limit_leave(loop->h->limit, g->fd, g->ticket);
    g->ticket = 0;
}

/* evhttp frees the connection (the close callback of every connection that
 * made a request): its place is given back at once, so a client that opens
 * and closes connections quickly is not counted for those it closed. The
 * guard itself stays until the sweep sees the socket closed. */
static void guard_closed(struct evhttp_connection *conn, void *arg)
{
    guard_conn *g = arg;
    if (g->close_cb)
        g->close_cb(conn, g->close_arg);
    guard_uncount(g->loop, g); /* at stop evhttp_free runs this on another thread */
    g->closed = true;
}

static guard_conn *guard_of_conn(http_loop *loop, struct evhttp_connection *conn)
{
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    int fd = bev ? bufferevent_getfd(bev) : -1;
    guard_conn *g = fd >= 0 && fd < loop->g_by_fd_cap ? loop->g_by_fd[fd] : NULL;
    return g && g->bev == bev && !g->closed ? g : NULL;
}

static void conn_set_closecb(http_loop *loop, struct evhttp_connection *conn, conn_close_cb cb,
                             void *arg)
{
    guard_conn *g = guard_of_conn(loop, conn);
    if (!g) {
        evhttp_connection_set_closecb(conn, cb, arg);
        return;
    }
    g->close_cb = cb;
    g->close_arg = arg;
    evhttp_connection_set_closecb(conn, guard_closed, g);
}

/* Frees a guard whose socket is closed: its callbacks stay on the
 * bufferevent, which has no more I/O and never calls them again. */
static void guard_release(http_loop *loop, guard_conn *g)
{
    guard_uncount(loop, g);
    if (g->fd >= 0 && g->fd < loop->g_by_fd_cap && loop->g_by_fd[g->fd] == g)
        loop->g_by_fd[g->fd] = NULL;
    infd_free(g);
}

/* A request that did not arrive in time: 408, and the socket shut down
 * (evhttp then reads its end and closes the connection). */
static void guard_expire(http_loop *loop, guard_conn *g)
{
    int fd = g->fd;    /* open: the sweep just checked */
    g->state = G_BUSY; /* once */
    loop->g_expired++;
    if (!loop->h->ssl) {
        char msg[160];
        int n = snprintf(msg, sizeof(msg),
                         "{\"error\":\"the request did not arrive within %d s "
                         "(--http-header-timeout-secs)\"}",
                         loop->h->header_timeout_secs);
        char all[384];
        int m = snprintf(all, sizeof(all),
                         "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
                         "Content-Length: %d\r\nConnection: close\r\n\r\n%s",
                         n, msg);
        if (send(fd, all, (size_t)m, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
            (void)0; /* the client is gone or not reading: it is closed all the same */
    }
    shutdown(fd, SHUT_RDWR);
}

static void on_guard_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_loop *loop = arg;
    uint64_t now = infd_clock_ns();
    uint64_t limit_ns = (uint64_t)loop->h->header_timeout_secs * 1000000000ull;
    for (guard_conn *g = loop->g_conns, *next; g; g = next) {
        next = g->next;
        if (!guard_alive(g)) {
            guard_unlink(loop, g);
            guard_release(loop, g);
            continue;
        }
        if (limit_ns && g->state == G_READING &&
            now - g->since_ns > limit_ns + g->bytes * 1000000000ull / HTTP_MIN_RATE)
            guard_expire(loop, g);
    }
    guard_log(loop, now);
}

/* Every guard of the loop, at stop (after evhttp_free closed or freed every
 * connection). */
static void guard_release_all(http_loop *loop)
{
    guard_conn *lists[2] = { loop->g_pending, loop->g_conns };
    for (int i = 0; i < 2; i++) {
        while (lists[i]) {
            guard_conn *g = lists[i];
            lists[i] = g->next;
            guard_release(loop, g);
        }
    }
    loop->g_pending = loop->g_conns = NULL;
    infd_free(loop->g_by_fd);
    loop->g_by_fd = NULL;
    loop->g_by_fd_cap = 0;
}

static void on_request(struct evhttp_request *ev, void *arg)
{
    http_loop *loop = arg;
    rx_watch(loop, ev);
    struct evhttp_connection *gconn = evhttp_request_get_connection(ev);
    guard_conn *g = guard_of_conn(loop, gconn);
    if (g) {
        /* From its first request on, evhttp tells the guard when the
         * connection closes (conn_set_closecb keeps the other users'). */
        evhttp_connection_set_closecb(gconn, guard_closed, g);
        g->state = G_BUSY;
        if (g->refused) {
            evhttp_add_header(evhttp_request_get_output_headers(ev), "Connection", "close");
            if (g->refused == 429)
                send_errorf(loop, ev, 429,
                            "too many connections from this client address (at most %d: "
                            "--http-max-connections-per-client)",
                            loop->h->max_per_client);
            else
                send_errorf(loop, ev, 503,
                            "too many connections (at most %d: --http-max-connections)",
                            loop->h->max_connections);
            return;
        }
    }
    infd_server *s = loop->h->server;
    char buf[HTTP_MAX_PATH];
    char *seg[HTTP_MAX_SEGS];
    int n = split_path(evhttp_request_get_uri(ev), buf, seg);
    if (n < 1 || strcmp(seg[0], "v2") != 0) {
        send_errorf(loop, ev, 404, "no route for %.200s", evhttp_request_get_uri(ev));
        return;
    }
    if (!allowed(loop, ev, seg, n))
        return;
    if (n == 1) {
        if (method_is(loop, ev, EVHTTP_REQ_GET))
            handle_server_metadata(loop, ev);
        return;
    }
    if (strcmp(seg[1], "health") == 0 && n == 3 &&
        (strcmp(seg[2], "live") == 0 || strcmp(seg[2], "ready") == 0)) {
        if (!method_is(loop, ev, EVHTTP_REQ_GET))
            return;
        bool ok = seg[2][0] == 'l' ? infd_server_is_live(s) : infd_server_is_ready(s);
        if (ok)
            send_empty(loop, ev, 200);
        else
            send_errorf(loop, ev, 503, "server is not %s", seg[2]);
        return;
    }
    if (strcmp(seg[1], "models") == 0 && n >= 3) {
        if (n == 3 && strcmp(seg[2], "stats") == 0) {
            if (method_is(loop, ev, EVHTTP_REQ_GET))
                handle_stats(loop, ev, NULL, -1);
            return;
        }
        route_model(loop, ev, seg, n);
        return;
    }
    for (int i = 0; i < loop->h->n_ext; i++) {
        if (strcmp(seg[1], loop->h->ext[i].prefix) == 0) {
            if (method_is(loop, ev, EVHTTP_REQ_GET))
                handle_extension(loop, ev, &loop->h->ext[i], seg, n);
            return;
        }
    }
    if (strcmp(seg[1], "systemsharedmemory") == 0 || strcmp(seg[1], "cudasharedmemory") == 0) {
        route_shm(loop, ev, seg, n, seg[1][0] == 'c');
        return;
    }
    if (strcmp(seg[1], "repository") == 0) {
        if (n == 3 && strcmp(seg[2], "index") == 0) {
            if (method_is(loop, ev, EVHTTP_REQ_POST))
                handle_index(loop, ev);
            return;
        }
        if (n == 5 && strcmp(seg[2], "models") == 0 &&
            (strcmp(seg[4], "load") == 0 || strcmp(seg[4], "unload") == 0)) {
            if (method_is(loop, ev, EVHTTP_REQ_POST))
                handle_load(loop, ev, seg[3], strcmp(seg[4], "load") == 0);
            return;
        }
    }
    send_errorf(loop, ev, 404, "no route for %.200s", evhttp_request_get_uri(ev));
}

/* ------------------------------------------------------------------------- */
/* Event loop                                                                */
/* ------------------------------------------------------------------------- */

static void on_stop_timer(evutil_socket_t fd, short what, void *arg);

/* Answers every queued completion; on stop, closes the listener and starts
 * waiting for in-flight work. */
static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_loop *loop = arg;
    pthread_mutex_lock(&loop->mu);
    http_call *c = loop->done_head;
    loop->done_head = loop->done_tail = NULL;
    bool stop = loop->stop_requested;
    pthread_mutex_unlock(&loop->mu);

    while (c) {
        http_call *next = c->next;
        c->refs++; /* while the reply is written */
        if (c->kind == CALL_INFER)
            finish_infer(c);
        else
            finish_load(c);
        loop->n_inflight--;
        call_unref(c);
        c = next;
    }
    if (stop && !loop->closing) {
        loop->closing = true;
        sinks_close(loop);
        if (loop->bound) {
            evhttp_del_accept_socket(loop->http, loop->bound);
            loop->bound = NULL;
        }
        struct timeval tv = { 0, STOP_POLL_US };
        event_add(loop->timer, &tv);
    }
}

/* Stop: leave the loop once nothing is in flight and every reply has been
 * written or dropped, or FLUSH_TIMEOUT_NS after the last completion for
 * clients that do not read. */
static void on_stop_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_loop *loop = arg;
    uint64_t now = infd_clock_ns();
    if (loop->n_inflight > 0) {
        loop->idle_since_ns = 0;
    } else {
        if (!loop->idle_since_ns)
            loop->idle_since_ns = now;
        if (loop->n_unsent <= 0 || now - loop->idle_since_ns > FLUSH_TIMEOUT_NS) {
            event_base_loopbreak(loop->base);
            return;
        }
    }
    struct timeval tv = { 0, STOP_POLL_US };
    event_add(loop->timer, &tv);
}

static void *loop_main(void *arg)
{
    http_loop *loop = arg;
    tl_loop = loop;
    event_base_loop(loop->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

/* ------------------------------------------------------------------------- */
/* Start and stop                                                            */
/* ------------------------------------------------------------------------- */

void infd_http_options_init(infd_http_options *o)
{
    o->host = "0.0.0.0";
    o->port = 8000;
    o->max_body_bytes = (size_t)64 << 20;
    o->max_json_depth = KSERVE_MAX_JSON_DEPTH;
    o->timeout_secs = HTTP_TIMEOUT_SECS;
    o->max_connections = 4096;
    o->max_connections_per_client = 1024;
    o->header_timeout_secs = 30;
    o->n_threads = 1;
    o->extensions = NULL;
    o->n_extensions = 0;
    o->ssl_cert = o->ssl_key = o->ssl_client_ca = NULL;
    o->restricted = NULL;
}

int infd_http_port(const infd_http *h)
{
    return h->port;
}

static void loop_fini(http_loop *loop)
{
    /* evhttp_free closes the listener and every connection, and frees the
     * requests still on them (none of ours: every call has completed). */
    /* Sinks the app did not release (it must, before infd_http_stop). */
    while (loop->sinks) {
        infd_http_sink *sink = loop->sinks;
        struct evhttp_connection *conn = sink->ev ? evhttp_request_get_connection(sink->ev) : NULL;
        if (conn)
            conn_set_closecb(loop, conn, NULL, NULL); /* evhttp_free would call it */
        sink_free(sink);
    }
    if (loop->http)
        evhttp_free(loop->http);
    guard_release_all(loop);
    if (loop->g_admit)
        event_free(loop->g_admit);
    if (loop->g_sweep)
        event_free(loop->g_sweep);
    for (int fd = 0; fd < loop->rx_cap; fd++)
        rx_free(loop->rx[fd]); /* connections that closed unseen */
    infd_free(loop->rx);
    if (loop->wake)
        event_free(loop->wake);
    if (loop->timer)
        event_free(loop->timer);
    if (loop->base)
        event_base_free(loop->base);
    while (loop->free_calls) {
        http_call *c = loop->free_calls;
        loop->free_calls = c->next;
        call_free(c);
    }
    if (loop->mu_init)
        pthread_mutex_destroy(&loop->mu);
    infd_strbuf_fini(&loop->jb);
}

static void destroy(infd_http *h)
{
    if (!h)
        return;
    for (int i = 0; i < h->n_loops; i++) {
        http_loop *loop = &h->loops[i];
        if (!loop->thread_started)
            continue;
        pthread_mutex_lock(&loop->mu);
        loop->stop_requested = true;
        event_active(loop->wake, 0, 0);
        pthread_mutex_unlock(&loop->mu);
    }
    for (int i = 0; i < h->n_loops; i++)
        if (h->loops[i].thread_started)
            pthread_join(h->loops[i].thread, NULL);
    for (int i = 0; i < h->n_loops; i++)
        loop_fini(&h->loops[i]);
    infd_free(h->loops);
    infd_free(h->host);
    SSL_CTX_free(h->ssl);
    infd_conn_limit_destroy(h->limit);
    infd_free(h);
}

/* Reading big bodies in big reads.
 *
 * libevent 2.1's evbuffer_read takes at most 4096 bytes per call, whatever
 * bufferevent_set_max_single_read says (evbuffer_set_max_read, which lifts
 * that, is 2.2's), and a socket bufferevent calls it once per readiness
 * event. A 602 KB ResNet-50 body was about 141 reads, each an ioctl, a readv
 * and a pass through the event loop: 750 us of CPU per request on the H100
 * machine's cores, which capped GPU serving at a third of the engine's
 * throughput (bench/RESULTS.md, "Serving end to end").
 *
 * top_up is a callback of each connection's input buffer. When libevent's
 * own read has just added a full 4096 bytes (less means it drained the
 * socket; and this is the only moment the buffer's end is not frozen:
 * evbuffer_reserve_space fails at any other), it reads what else the socket
 * holds, up to HTTP_MAX_SINGLE_READ, into the same buffer, and libevent's
 * read callback then hands evhttp everything at once. That may take up to
 * HTTP_MAX_SINGLE_READ past the end of a request, which evhttp keeps for
 * the connection's next one, as it keeps what its own reads overshoot;
 * evhttp's max body size is enforced on what it parses, as before. End of
 * file is left to libevent's next read; a read error ends the connection
 * there too (the socket is shut down). */
static void top_up(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
    static _Thread_local bool busy; /* our own commit calls us again */
    struct bufferevent *bev = arg;
    if (busy || info->n_added == 0)
        return;
    evutil_socket_t fd = bufferevent_getfd(bev);
    bool big = info->n_added >= 4096;
    rx_conn *rx = rx_find(tl_loop, fd, bev, big);
    if (rx)
        rx_mirror(rx, in, info->orig_size, info->n_added);
    if (!big || !(bufferevent_get_enabled(bev) & EV_READ))
        return;
    int avail = 0;
    if (fd < 0 || ioctl(fd, FIONREAD, &avail) != 0 || avail <= 0)
        return;
    size_t want = (size_t)avail < HTTP_MAX_SINGLE_READ ? (size_t)avail : HTTP_MAX_SINGLE_READ;
    /* Into the connection's slab (handed over as a reference chain), else
     * into space reserved at the end of the buffer. */
    bool into_slab = rx && rx->slab && rx_room(rx, false, want);
    struct evbuffer_iovec vec[2];
    struct iovec iov[2];
    int nv = 1;
    if (into_slab) {
        iov[0] = (struct iovec){ rx->slab->data + rx->fill, want };
    } else {
        nv = evbuffer_reserve_space(in, (ev_ssize_t)want, vec, 2);
        if (nv <= 0)
            return;
        size_t left = want;
        for (int i = 0; i < nv; i++) {
            iov[i].iov_base = vec[i].iov_base;
            iov[i].iov_len = vec[i].iov_len < left ? vec[i].iov_len : left;
            left -= iov[i].iov_len;
        }
    }
    ssize_t got = readv(fd, iov, nv);
    if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        shutdown(fd, SHUT_RDWR); /* the error is consumed: make the next read fail */
    if (got <= 0)
        return; /* a reservation lapses */
    int rc;
    busy = true;
    if (into_slab) {
        rx->fill += (size_t)got;
        atomic_fetch_add(&rx->slab->refs, 1);
        rc = evbuffer_add_reference(in, iov[0].iov_base, (size_t)got, slab_chain_done, rx->slab);
        if (rc != 0)
            slab_unref(rx->slab); /* the chain's reference, never made */
    } else {
        size_t rest = (size_t)got;
        int used = 0;
        for (; used < nv && rest > 0; used++) {
            vec[used].iov_len = iov[used].iov_len < rest ? iov[used].iov_len : rest;
            rest -= vec[used].iov_len;
        }
        rc = evbuffer_commit_space(in, vec, used);
    }
    busy = false;
    if (rc != 0) {
        /* The bytes left the socket but not into the stream: the request
         * can no longer be parsed, so the connection ends. */
        infd_log(INFD_LOG_LEVEL_WARN, "http: lost %zd bytes read from a connection; closing it",
                 got);
        shutdown(fd, SHUT_RDWR);
    }
}

/* libevent 2.1 answers a few errors itself, with evhttp_send_error's small
 * HTML page: a body over --max-body-bytes or headers over
 * HTTP_MAX_HEADERS_BYTES (413), a request line or header it cannot parse
 * (400), an Expect it does not know (417). 2.2 has evhttp_set_errorcb for
 * this; 2.1 has no hook, so each connection's output buffer has this
 * callback, which sees such a page arrive and rewrites the whole answer as
 * KServe's JSON error with the same status. The page is recognisable: evhttp
 * writes one answer at a time into an output buffer that is then empty, the
 * page's body is added in one piece after the headers, it ends with
 * "</BODY></HTML>\n", and its headers say "Content-Type: text/html", which
 * no answer of ours does. Other adds cost a length test or a 15-byte copy. */
static void json_error_pages(struct evbuffer *out, const struct evbuffer_cb_info *info, void *arg)
{
    static _Thread_local bool busy; /* our own rewrite calls us again */
    static const char tail[] = "</BODY></HTML>\n";
    const size_t tail_n = sizeof(tail) - 1;
    const infd_http *h = arg;
    size_t len = evbuffer_get_length(out);
    if (busy || info->n_added < tail_n || len > 1024)
        return;
    char page[1025];
    struct evbuffer_ptr at;
    if (evbuffer_ptr_set(out, &at, len - tail_n, EVBUFFER_PTR_SET) != 0 ||
        evbuffer_copyout_from(out, &at, page, tail_n) != (ev_ssize_t)tail_n ||
        memcmp(page, tail, tail_n) != 0)
        return;
    if (evbuffer_copyout(out, page, len) != (ev_ssize_t)len)
        return;
    page[len] = '\0';
    int code = 0, skip = 0;
    if (strncmp(page, "HTTP/1.", 7) != 0 || sscanf(page + 8, " %3d %n", &code, &skip) != 1 ||
        skip == 0 || !strstr(page, "\r\nContent-Type: text/html\r\n"))
        return;
    const char *reason = page + 8 + skip;
    int reason_n = (int)strcspn(reason, "\r\n");
    char msg[256];
    if (code == 413)
        snprintf(msg, sizeof(msg), "request body over the limit of %zu bytes (--max-body-bytes)",
                 h->max_body_bytes);
    else if (code == 400)
        snprintf(msg, sizeof(msg),
                 "malformed HTTP request: a request line or header that does not parse, or "
                 "headers over %d bytes",
                 HTTP_MAX_HEADERS_BYTES);
    else
        snprintf(msg, sizeof(msg), "%.*s", reason_n > 100 ? 100 : reason_n, reason);
    busy = true;
    evbuffer_drain(out, len);
    evbuffer_add_printf(out,
                        "%.8s %d %.*s\r\nContent-Type: application/json\r\n"
                        "Content-Length: %zu\r\nConnection: close\r\n\r\n{\"error\":\"%s\"}",
                        page, code, reason_n > 100 ? 100 : reason_n, reason, strlen(msg) + 12, msg);
    busy = false;
}

/* HTTPS: libevent's OpenSSL bufferevent writes each chain of the output
 * buffer with its own SSL_write, that is a TLS record and a write() each,
 * where plain HTTP sends the same chains with one writev. An answer is a
 * chain of headers and the body's chains, so small answers are pulled into
 * one chain as they are added (the write itself comes later, from the
 * loop): one record, one write. */
#define HTTP_TLS_COALESCE_BYTES (16 * 1024)

static void tls_coalesce(struct evbuffer *out, const struct evbuffer_cb_info *info, void *arg)
{
    (void)arg;
    size_t len = evbuffer_get_length(out);
    if (info->n_added == 0 || len > HTTP_TLS_COALESCE_BYTES ||
        evbuffer_peek(out, -1, NULL, NULL, 0) < 2)
        return;
    evbuffer_pullup(out, -1);
}

/* HTTPS receives through OpenSSL's socket BIO, and libevent 2.1's OpenSSL
 * bufferevent reads one TLS record per pass of the loop: SSL_read of 4096
 * bytes at a time while SSL_pending says the record has more, then back to
 * the loop to wait for the socket. A 196 KB body was twelve passes and two
 * read() calls a record (its header, then the rest).
 *
 * So each connection's SSL reads ahead into a buffer of
 * HTTP_TLS_READ_BUFFER bytes (several records a read() call), and tls_drain,
 * a callback of the input buffer, runs when libevent's read adds bytes and
 * goes on with SSL_read into the same buffer until OpenSSL holds nothing
 * (SSL_has_pending) and, up to HTTP_MAX_SINGLE_READ, the socket neither.
 * Read-ahead starts at the first drain, after the handshake: during it,
 * OpenSSL would read the client's first request along with its last
 * handshake flight, and libevent, done with the handshake, waits for the
 * socket (the request then hung, seen with client certificates).
 * The drain is what makes read-ahead safe here: libevent stops reading
 * when SSL_pending is 0, which does not count records OpenSSL has read
 * ahead and not yet opened, and the socket, drained, would not wake it
 * again (the connection hung when read-ahead was on alone). After a drain
 * OpenSSL holds no byte, so the socket's readiness is again the whole truth.
 *
 * SSL_read's other outcomes are left to libevent's next read, which meets
 * them again: the socket is shut down for reading at a close_notify (so
 * that read comes, and sees the end) and both ways at an error (so the
 * connection ends, as top_up does). WANT_WRITE (OpenSSL answering a TLS 1.2
 * renegotiation attempt with its refusal while the socket cannot take it)
 * just stops the drain. Bytes that SSL_read gave but the buffer could not
 * take end the connection. */
#define HTTP_TLS_READ_BUFFER (64 * 1024)

static void tls_drain(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
    static _Thread_local bool busy; /* our own commit calls us again */
    struct bufferevent *bev = arg;
    if (busy || info->n_added == 0)
        return;
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    evutil_socket_t fd = bufferevent_getfd(bev);
    if (!ssl || fd < 0)
        return;
    if (!SSL_get_read_ahead(ssl))
        SSL_set_read_ahead(ssl, 1); /* the handshake is over (see above) */
    size_t total = 0;
    busy = true;
    for (;;) {
        if (!SSL_has_pending(ssl) &&
            (total >= HTTP_MAX_SINGLE_READ || !(bufferevent_get_enabled(bev) & EV_READ)))
            break; /* OpenSSL holds nothing: the socket wakes the loop for the rest */
        struct evbuffer_iovec vec;
        if (evbuffer_reserve_space(in, HTTP_TLS_READ_BUFFER, &vec, 1) < 1)
            break;
        ERR_clear_error();
        int r = SSL_read(ssl, vec.iov_base, (int)(vec.iov_len < INT_MAX ? vec.iov_len : INT_MAX));
        if (r <= 0) {
            int e = SSL_get_error(ssl, r);
            if (e == SSL_ERROR_ZERO_RETURN)
                shutdown(fd, SHUT_RD);
            else if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
                shutdown(fd, SHUT_RDWR);
            ERR_clear_error();
            break; /* the reservation lapses */
        }
        vec.iov_len = (size_t)r;
        if (evbuffer_commit_space(in, &vec, 1) != 0) {
            infd_log(INFD_LOG_LEVEL_WARN,
                     "http: lost %d bytes read from a TLS connection; closing it", r);
            shutdown(fd, SHUT_RDWR);
            break;
        }
        total += (size_t)r;
    }
    busy = false;
}

/* Connections get their bufferevent here: top_up on its input buffer, and
 * up to HTTP_MAX_SINGLE_READ bytes for libevent's own reads where a libevent
 * honours that. Options 0, as libevent's own: evhttp closes the socket
 * itself when the bufferevent does not (it checks BEV_OPT_CLOSE_ON_FREE).
 * HTTPS: an OpenSSL bufferevent instead, with BEV_OPT_CLOSE_ON_FREE so that
 * it frees its SSL, and tls_drain in place of top_up. */
static struct bufferevent *make_bufferevent(struct event_base *base, void *arg)
{
    infd_http *h = arg;
    struct bufferevent *bev = NULL;
    if (h->ssl) {
        /* The handshake starts once evhttp sets the accepted socket; the
         * SSL object is freed with the bufferevent. */
        SSL *ssl = SSL_new(h->ssl);
        if (!ssl)
            return NULL;
        bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                             BEV_OPT_CLOSE_ON_FREE);
        if (!bev) {
            SSL_free(ssl);
            return NULL;
        }
        /* A client that closes without close_notify ends its connection
         * as a plain one would, not with an error. */
        bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
        /* Read-ahead from tls_drain on; buffers given back while idle;
         * no TLS 1.2 renegotiation (an attack surface, and a write inside
         * a read). */
        SSL_set_default_read_buffer_len(ssl, HTTP_TLS_READ_BUFFER);
        SSL_set_mode(ssl, SSL_MODE_RELEASE_BUFFERS);
        SSL_set_options(ssl, SSL_OP_NO_RENEGOTIATION);
        if (!evbuffer_add_cb(bufferevent_get_output(bev), tls_coalesce, NULL) ||
            !evbuffer_add_cb(bufferevent_get_input(bev), tls_drain, bev)) {
            bufferevent_free(bev);
            return NULL;
        }
    } else {
        bev = bufferevent_socket_new(base, -1, 0);
    }
    if (!bev)
        return NULL;
    bufferevent_set_max_single_read(bev, HTTP_MAX_SINGLE_READ);
    /* top_up reads the socket itself: plain HTTP only (under TLS the bytes
     * on the socket are ciphertext, and bodies are not mirrored into the
     * pinned pool). */
    if ((!h->ssl && !evbuffer_add_cb(bufferevent_get_input(bev), top_up, bev)) ||
        !evbuffer_add_cb(bufferevent_get_output(bev), json_error_pages, h)) {
        bufferevent_free(bev);
        return NULL;
    }
    if (tl_loop)
        guard_track(tl_loop, bev);
    return bev;
}

/* Sets up loop `i`: base, evhttp, events, and a listener on `sa` (for i >
 * 0 on the port loop 0 got, sharing it with SO_REUSEPORT). */
static infd_status loop_init(infd_http *h, int i, struct sockaddr_storage *sa, socklen_t sa_len,
                             infd_error *err)
{
    http_loop *loop = &h->loops[i];
    loop->h = h;
    if (pthread_mutex_init(&loop->mu, NULL) != 0)
        return infd_error_set(err, INFD_STATUS_INTERNAL, "http: mutex");
    loop->mu_init = true;
    loop->base = event_base_new();
    loop->http = loop->base ? evhttp_new(loop->base) : NULL;
    loop->wake = loop->http ? event_new(loop->base, -1, 0, on_wake, loop) : NULL;
    loop->timer = loop->wake ? evtimer_new(loop->base, on_stop_timer, loop) : NULL;
    loop->g_admit = loop->timer ? event_new(loop->base, -1, 0, on_guard_admit, loop) : NULL;
    loop->g_sweep =
        loop->g_admit ? event_new(loop->base, -1, EV_PERSIST, on_guard_sweep, loop) : NULL;
    struct timeval every_s = { 1, 0 };
    if (!loop->g_sweep || event_add(loop->g_sweep, &every_s) != 0)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "http: libevent HTTP server");
    /* Every method reaches on_request, which answers 405 with an Allow
     * header and a JSON error (libevent's own answer is an HTML page). */
    evhttp_set_allowed_methods(loop->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                               EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                               EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    /* libevent refuses larger bodies itself, before buffering them, with 413
     * (an HTML page): our own check in handle_infer only catches bodies
     * libevent let through. Lingering close reads and drops the rest of an
     * oversized body first, so the client gets the 413 instead of a reset
     * connection while it is still sending. */
    evhttp_set_max_body_size(loop->http, (ev_ssize_t)h->max_body_bytes);
    evhttp_set_flags(loop->http, EVHTTP_SERVER_LINGERING_CLOSE);
    evhttp_set_max_headers_size(loop->http, HTTP_MAX_HEADERS_BYTES);
    evhttp_set_timeout(loop->http, h->timeout_secs);
    evhttp_set_gencb(loop->http, on_request, loop);
    evhttp_set_bevcb(loop->http, make_bufferevent, h);

    unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC;
    if (h->n_loops > 1)
        flags |= LEV_OPT_REUSEABLE_PORT;
    errno = 0;
    struct evconnlistener *lev = evconnlistener_new_bind(
        loop->base, NULL, NULL, flags, HTTP_BACKLOG, (struct sockaddr *)sa, (int)sa_len);
    if (!lev)
        return infd_error_set(err, INFD_STATUS_IO, "http: cannot listen on %s:%d: %s", h->host,
                              h->port, errno ? strerror(errno) : "bind failed");
    /* Accepted sockets inherit TCP_NODELAY from the listener (Linux): the
     * tail of a reply larger than a segment is not held back by Nagle until
     * the client's (possibly delayed) ACK, as Triton also disables it. */
    int one = 1;
    setsockopt(evconnlistener_get_fd(lev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    loop->bound = evhttp_bind_listener(loop->http, lev);
    if (!loop->bound) {
        evconnlistener_free(lev);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "http: listener");
    }
    if (i == 0) {
        struct sockaddr_storage got;
        socklen_t len = sizeof(got);
        if (getsockname(evconnlistener_get_fd(lev), (struct sockaddr *)&got, &len) != 0)
            return infd_error_set(err, INFD_STATUS_IO, "http: getsockname: %s", strerror(errno));
        int port = got.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&got)->sin6_port)
                                             : ntohs(((struct sockaddr_in *)&got)->sin_port);
        h->port = port;
        /* The other loops bind the same (possibly ephemeral) port. */
        if (sa->ss_family == AF_INET6)
            ((struct sockaddr_in6 *)sa)->sin6_port = htons((uint16_t)port);
        else
            ((struct sockaddr_in *)sa)->sin_port = htons((uint16_t)port);
    }
    return INFD_STATUS_OK;
}

infd_status infd_http_start(infd_server *s, const infd_http_options *o, infd_http **out,
                            infd_error *err)
{
    infd_http *h = NULL;
    infd_status st = INFD_STATUS_OK;
    struct addrinfo *ai = NULL;
    *out = NULL;
    if (o->port < 0 || o->port > 65535 || o->n_threads < 1 || o->max_body_bytes == 0 ||
        o->max_body_bytes > (size_t)INT64_MAX || o->max_json_depth < 1 || o->timeout_secs < 1 ||
        o->max_connections < 0 || o->max_connections_per_client < 0 || o->header_timeout_secs < 0) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "http: invalid options (port %d, %d threads, max body %zu bytes, "
                            "max JSON depth %d)",
                            o->port, o->n_threads, o->max_body_bytes, o->max_json_depth);
        goto out;
    }
    /* Process-wide and idempotent; before event_base_new, so that runtime
     * workers can wake a loop with event_active. */
    if (evthread_use_pthreads() != 0) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "http: libevent without pthreads");
        goto out;
    }
    h = infd_calloc(1, sizeof(*h));
    if (!h || !(h->host = infd_strdup(o->host ? o->host : "0.0.0.0")) ||
        !(h->loops = infd_calloc((size_t)o->n_threads, sizeof(http_loop)))) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "http: frontend");
        goto out;
    }
    h->server = s;
    h->port = o->port;
    h->max_body_bytes = o->max_body_bytes;
    h->max_json_depth = o->max_json_depth;
    h->timeout_secs = o->timeout_secs;
    h->max_connections = o->max_connections;
    h->max_per_client = o->max_connections_per_client;
    h->header_timeout_secs = o->header_timeout_secs;
    if ((o->max_connections > 0 || o->max_connections_per_client > 0) &&
        !(h->limit = infd_conn_limit_create(o->max_connections, o->max_connections_per_client))) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "http: frontend");
        goto out;
    }
    h->restricted = o->restricted;
    h->n_loops = o->n_threads;
    h->ext = o->extensions;
    h->n_ext = o->n_extensions;
    if ((o->ssl_cert || o->ssl_key || o->ssl_client_ca) &&
        (st = infd_tls_server_ctx("http", o->ssl_cert, o->ssl_key, o->ssl_client_ca, &h->ssl,
                                  err)) != INFD_STATUS_OK)
        goto out;

    char port_s[16];
    snprintf(port_s, sizeof(port_s), "%d", o->port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC,
                              .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    int rc = getaddrinfo(h->host, port_s, &hints, &ai);
    if (rc != 0 || !ai || ai->ai_addrlen > sizeof(struct sockaddr_storage)) {
        st = infd_error_set(err, INFD_STATUS_IO, "http: cannot resolve '%s': %s", h->host,
                            rc ? gai_strerror(rc) : "no address");
        goto out;
    }
    struct sockaddr_storage sa;
    memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
    socklen_t sa_len = ai->ai_addrlen;
    for (int i = 0; i < h->n_loops; i++)
        if ((st = loop_init(h, i, &sa, sa_len, err)) != INFD_STATUS_OK)
            goto out;

    /* Loop threads start with every signal blocked: SIGTERM/SIGINT reach
     * the thread that waits for them, and a SIGPIPE from writing to a
     * vanished client stays pending instead of killing the process (the
     * write fails with EPIPE and libevent closes the connection). */
    for (int i = 0; i < h->n_loops; i++) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        rc = pthread_create(&h->loops[i].thread, NULL, loop_main, &h->loops[i]);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) {
            st = infd_error_set(err, INFD_STATUS_INTERNAL, "http: thread: %s", strerror(rc));
            goto out;
        }
        h->loops[i].thread_started = true;
        char tname[16];
        snprintf(tname, sizeof(tname), "http-%d", i % 1000);
        pthread_setname_np(h->loops[i].thread, tname); /* for profiles (top -H, perf) */
    }
    *out = h;
    h = NULL;
out:
    if (ai)
        freeaddrinfo(ai);
    destroy(h);
    return st;
}

void infd_http_stop(infd_http *h)
{
    destroy(h);
}
