/*
 * worker.c - a worker's end of the router-worker link over ZeroMQ
 * (worker.h has the life of a call, load and threads).
 *
 * The loop: libevent watches the ROUTER socket's ZMQ_FD, which is
 * edge-triggered, so every wake-up (and every send, and the 250 ms
 * heartbeat timer) drains the socket until ZMQ_EVENTS has no POLLIN.
 *
 * A call (wcall) holds the router's identity, the received frames (the
 * request's inputs point into them), the request, and a reference count:
 * one for the loop and one per output frame ZeroMQ still holds. The last
 * release destroys the request and frees the call, on whichever thread
 * that is (ZeroMQ's I/O thread for the frames).
 */
#include "cluster/worker.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "cluster.pb-c.h"
#include "cluster/link.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "frontends/common/freelist.h"
#include "frontends/common/mailbox.h"

#define HEARTBEAT_MS   250
#define ROUTER_LOST_MS 3000
#define MAX_ROUTERS    64
#define MAX_FRAMES     (CLUSTER_LINK_MAX_FRAMES + 1) /* an INFER's header and tensors */
#define ID_BYTES       256
#define STOP_WAIT_MS   10000

typedef struct wcall wcall;

struct wcall {
    wcall *next; /* the mailbox */
    cluster_worker *w;
    atomic_int refs;
    uint8_t ident[ID_BYTES];
    size_t ident_n;
    uint64_t call;
    int n_in;
    infd_model *model;
    infd_request *req;
    infd_status status;
    char message[INFD_ERROR_MSG_BYTES];
    char id[128];
    /* Last: not cleared when the record is reused (the freelist's
     * `zeroed`); the first n_in are set before they are read. */
    zmq_msg_t in[MAX_FRAMES];           /* the header and the inputs' frames */
    infd_data_segment segs[MAX_FRAMES]; /* the inputs' frames, lent to the request */
};

/* A LOAD or UNLOAD from a router, run on the control thread (loads
 * block), answered by the loop. */
typedef struct wctl wctl;
struct wctl {
    wctl *next;
    uint8_t ident[ID_BYTES];
    size_t ident_n;
    uint64_t call;
    bool load;
    char model[128];
    infd_status status;
    char message[INFD_ERROR_MSG_BYTES];
    char *config; /* a LOAD's model config JSON */
};

typedef struct wrouter {
    uint8_t ident[ID_BYTES];
    size_t ident_n;
    uint64_t last_heard_ns;
} wrouter;

struct cluster_worker {
    infd_server *server;
    char id[128], bind[256];
    int capacity;
    void *zctx, *sock;
    struct event_base *base;
    struct event *readable, *tick;
    pthread_t thread;
    bool thread_started;

    /* Loop thread. */
    wrouter routers[MAX_ROUTERS];
    int n_routers;
    uint64_t seq;
    uint32_t queued; /* the models' queue depths, summed each tick */
    uint64_t next_complaint_ns;
    bool stopping;
    uint64_t stop_deadline_ns;

    atomic_int inflight;
    infd_mailbox done;     /* completed, for the loop */
    infd_freelist records; /* wcall, recycled */

    /* The control thread: LOAD / UNLOAD in order, answered through ctl_done. */
    pthread_mutex_t ctl_mu;
    pthread_cond_t ctl_cv;
    wctl *ctl_head, *ctl_tail;
    bool ctl_stop;
    pthread_t ctl_thread;
    bool ctl_started;
    infd_mailbox ctl_done;
};

void cluster_worker_options_init(cluster_worker_options *o)
{
    memset(o, 0, sizeof(*o));
    o->capacity = 1024;
    o->max_message_bytes = 64u << 20;
}

/* ZeroMQ's errno as a status, once for the component. */
static infd_status zmq_status(int e)
{
    switch (e) {
    case ENOMEM:
        return INFD_STATUS_OUT_OF_MEMORY;
    case EINVAL:
    case EPROTONOSUPPORT:
        return INFD_STATUS_INVALID_ARGUMENT;
    case EADDRINUSE:
    case EADDRNOTAVAIL:
    case ENODEV:
        return INFD_STATUS_UNAVAILABLE;
    case EHOSTUNREACH:
    case EAGAIN:
        return INFD_STATUS_UNAVAILABLE;
    default:
        return INFD_STATUS_INTERNAL;
    }
}

/* A peer's misbehaviour, logged at most once a second. */
static void complain(cluster_worker *w, const char *fmt, ...) INFD_PRINTF(2, 3);
static void complain(cluster_worker *w, const char *fmt, ...)
{
    uint64_t now = infd_clock_ns();
    if (now < w->next_complaint_ns)
        return;
    w->next_complaint_ns = now + 1000000000ull;
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    infd_log(INFD_LOG_LEVEL_WARN, "cluster link %s: %s", w->bind, text);
}

/* ------------------------------------------------------------------------- */
/* Calls                                                                     */
/* ------------------------------------------------------------------------- */

static void call_release(wcall *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    for (int i = 0; i < c->n_in; i++)
        zmq_msg_close(&c->in[i]);
    if (c->req)
        infd_request_destroy(c->req);
    if (c->model)
        infd_model_release(c->model);
    cluster_worker *w = c->w;
    atomic_fetch_sub(&w->inflight, 1);
    infd_freelist_put(&w->records, c);
}

/* ZeroMQ is done with an output frame (any thread). */
static void frame_free(void *data, void *hint)
{
    (void)data;
    call_release(hint);
}

/* Sends [ident][header][frames...]; false when the router is gone or
 * full (ROUTER_MANDATORY: EHOSTUNREACH / EAGAIN), the frames then closed. */
static bool send_parts(cluster_worker *w, const uint8_t *ident, size_t ident_n,
                       const Infd__Cluster__LinkMessage *h, zmq_msg_t *frames, int n_frames)
{
    size_t hn = protobuf_c_message_get_packed_size(&h->base);
    zmq_msg_t id, head;
    bool ok = zmq_msg_init_size(&id, ident_n) == 0;
    if (ok)
        memcpy(zmq_msg_data(&id), ident, ident_n);
    if (ok && zmq_msg_init_size(&head, hn) != 0) {
        zmq_msg_close(&id);
        ok = false;
    }
    if (ok) {
        protobuf_c_message_pack(&h->base, zmq_msg_data(&head));
        ok = zmq_msg_send(&id, w->sock, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0;
        if (!ok) {
            zmq_msg_close(&id);
            zmq_msg_close(&head);
        }
    }
    if (ok) {
        ok = zmq_msg_send(&head, w->sock, (n_frames ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) >= 0;
        if (!ok)
            zmq_msg_close(&head);
    }
    int sent = 0;
    for (; ok && sent < n_frames; sent++)
        if (zmq_msg_send(&frames[sent], w->sock,
                         (sent + 1 < n_frames ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0)
            ok = false;
    for (int i = sent; i < n_frames; i++)
        zmq_msg_close(&frames[i]);
    return ok;
}

static void send_error(cluster_worker *w, const uint8_t *ident, size_t ident_n, uint64_t call,
                       infd_status st, const char *message)
{
    Infd__Cluster__LinkMessage h = INFD__CLUSTER__LINK_MESSAGE__INIT;
    h.version = 1;
    h.kind = INFD__CLUSTER__LINK_MESSAGE__KIND__RESULT;
    h.call = call;
    h.status = st == INFD_STATUS_OK ? INFD_STATUS_INTERNAL : st;
    h.message = (char *)message;
    send_parts(w, ident, ident_n, &h, NULL, 0);
}

/* The call's answer: its outputs' frames straight from the request. */
static void send_result(cluster_worker *w, wcall *c)
{
    if (c->status != INFD_STATUS_OK) {
        send_error(w, c->ident, c->ident_n, c->call, c->status, c->message);
        return;
    }
    int n = infd_request_n_outputs(c->req);
    if (n > INFD_MAX_MODEL_IO)
        n = INFD_MAX_MODEL_IO;
    Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    Inference__ModelInferResponse__InferOutputTensor ot[INFD_MAX_MODEL_IO];
    Inference__ModelInferResponse__InferOutputTensor *pot[INFD_MAX_MODEL_IO];
    int64_t dims[INFD_MAX_MODEL_IO][INFD_MAX_RANK];
    zmq_msg_t frames[INFD_MAX_MODEL_IO];
    char ver[24];
    snprintf(ver, sizeof(ver), "%" PRId64, infd_model_version(c->model));
    resp.model_name = (char *)infd_model_name(c->model);
    resp.model_version = ver;
    resp.id = c->id;
    int k = 0;
    for (int i = 0; i < n; i++) {
        const char *name = NULL;
        infd_tensor t;
        if (infd_request_output(c->req, i, &name, &t) != INFD_STATUS_OK)
            continue;
        inference__model_infer_response__infer_output_tensor__init(&ot[k]);
        ot[k].name = (char *)name;
        ot[k].datatype = (char *)infd_dtype_name(t.dtype);
        for (int d = 0; d < t.shape.rank; d++)
            dims[k][d] = t.shape.dims[d];
        ot[k].n_shape = (size_t)t.shape.rank;
        ot[k].shape = dims[k];
        pot[k] = &ot[k];
        /* ZeroMQ holds the request's bytes until sent: one reference each. */
        atomic_fetch_add(&c->refs, 1);
        if (zmq_msg_init_data(&frames[k], t.nbytes ? t.data : (void *)"", t.nbytes, frame_free,
                              c) != 0) {
            atomic_fetch_sub(&c->refs, 1);
            for (int j = 0; j < k; j++)
                zmq_msg_close(&frames[j]);
            send_error(w, c->ident, c->ident_n, c->call, INFD_STATUS_OUT_OF_MEMORY,
                       "out of memory for the result's frames");
            return;
        }
        k++;
    }
    resp.n_outputs = (size_t)k;
    resp.outputs = pot;
    Infd__Cluster__LinkMessage h = INFD__CLUSTER__LINK_MESSAGE__INIT;
    h.version = 1;
    h.kind = INFD__CLUSTER__LINK_MESSAGE__KIND__RESULT;
    h.call = c->call;
    h.response = &resp;
    if (!send_parts(w, c->ident, c->ident_n, &h, frames, k))
        complain(w, "the router of call %" PRIu64 " is gone or full: its result is dropped",
                 c->call);
}

/* infd_infer_async's callback, on a runtime thread: to the loop. */
static void on_call_done(void *user, infd_request *req, infd_status status, const char *message)
{
    (void)req;
    wcall *c = user;
    cluster_worker *w = c->w;
    c->status = status;
    snprintf(c->message, sizeof(c->message), "%s", message ? message : "");
    infd_mailbox_post(&w->done, c);
}

static void drain_done(cluster_worker *w)
{
    wcall *list = infd_mailbox_take(&w->done);
    while (list) {
        wcall *c = list;
        list = c->next;
        send_result(w, c);
        call_release(c); /* the loop's reference */
    }
}

/* ------------------------------------------------------------------------- */
/* LOAD and UNLOAD                                                           */
/* ------------------------------------------------------------------------- */

static void *ctl_main(void *arg)
{
    cluster_worker *w = arg;
    pthread_mutex_lock(&w->ctl_mu);
    for (;;) {
        while (!w->ctl_head && !w->ctl_stop)
            pthread_cond_wait(&w->ctl_cv, &w->ctl_mu);
        if (!w->ctl_head)
            break;
        wctl *t = w->ctl_head;
        w->ctl_head = t->next;
        if (!w->ctl_head)
            w->ctl_tail = NULL;
        t->next = NULL;
        pthread_mutex_unlock(&w->ctl_mu);
        infd_error err;
        infd_error_clear(&err);
        t->status = t->load ? infd_server_load_model(w->server, t->model, &err)
                            : infd_server_unload_model(w->server, t->model, &err);
        snprintf(t->message, sizeof(t->message), "%s", err.msg);
        infd_model *m = NULL;
        size_t n = 0;
        if (t->status == INFD_STATUS_OK && t->load &&
            infd_server_model_acquire(w->server, t->model, -1, &m, &err) == INFD_STATUS_OK) {
            if (infd_model_config_json(m, &t->config, &n, &err) != INFD_STATUS_OK)
                t->config = NULL;
            infd_model_release(m);
        }
        infd_log(t->status == INFD_STATUS_OK ? INFD_LOG_LEVEL_INFO : INFD_LOG_LEVEL_WARN,
                 "cluster link: a router asked to %s model '%s': %s", t->load ? "load" : "unload",
                 t->model, t->status == INFD_STATUS_OK ? "done" : t->message);
        infd_mailbox_post(&w->ctl_done, t);
        pthread_mutex_lock(&w->ctl_mu);
    }
    pthread_mutex_unlock(&w->ctl_mu);
    return NULL;
}

static void send_ctl_result(cluster_worker *w, wctl *t)
{
    Infd__Cluster__LinkMessage h = INFD__CLUSTER__LINK_MESSAGE__INIT;
    h.version = 1;
    h.kind = INFD__CLUSTER__LINK_MESSAGE__KIND__CONTROL_RESULT;
    h.call = t->call;
    h.status = t->status;
    h.message = t->message;
    h.model = t->model;
    h.config = t->config ? t->config : (char *)"";
    if (!send_parts(w, t->ident, t->ident_n, &h, NULL, 0))
        complain(w, "the router that asked to %s '%s' is gone", t->load ? "load" : "unload",
                 t->model);
}

static void drain_socket(cluster_worker *w);

static void on_ctl_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cluster_worker *w = arg;
    wctl *list = infd_mailbox_take(&w->ctl_done);
    while (list) {
        wctl *t = list;
        list = t->next;
        send_ctl_result(w, t);
        infd_free(t->config);
        infd_free(t);
    }
    drain_socket(w); /* sending may have taken the fd's edge */
}

/* A LOAD or UNLOAD, queued for the control thread. */
static void ctl_take(cluster_worker *w, const uint8_t *ident, size_t ident_n,
                     const Infd__Cluster__LinkMessage *h)
{
    wctl *t = infd_calloc(1, sizeof(*t));
    if (!t) {
        send_error(w, ident, ident_n, h->call, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        return;
    }
    memcpy(t->ident, ident, ident_n);
    t->ident_n = ident_n;
    t->call = h->call;
    t->load = h->kind == INFD__CLUSTER__LINK_MESSAGE__KIND__LOAD;
    snprintf(t->model, sizeof(t->model), "%s", h->model ? h->model : "");
    if (w->stopping || !h->model || !*h->model) {
        t->status = w->stopping ? INFD_STATUS_UNAVAILABLE : INFD_STATUS_INVALID_ARGUMENT;
        snprintf(t->message, sizeof(t->message), "%s",
                 w->stopping ? "the worker is stopping" : "no model named");
        send_ctl_result(w, t);
        infd_free(t);
        return;
    }
    pthread_mutex_lock(&w->ctl_mu);
    if (w->ctl_tail)
        w->ctl_tail->next = t;
    else
        w->ctl_head = t;
    w->ctl_tail = t;
    pthread_cond_signal(&w->ctl_cv);
    pthread_mutex_unlock(&w->ctl_mu);
}

/* Builds and submits the request of an INFER; an error is the router's
 * RESULT. */
static infd_status start_call(cluster_worker *w, wcall *c, const Infd__Cluster__LinkMessage *h,
                              infd_error *err)
{
    snprintf(c->id, sizeof(c->id), "%s", h->request && h->request->id ? h->request->id : "");
    for (int i = 1; i < c->n_in; i++)
        c->segs[i - 1] = (infd_data_segment){ zmq_msg_data(&c->in[i]), zmq_msg_size(&c->in[i]) };
    infd_status st =
        cluster_link_request(w->server, h, c->segs, c->n_in - 1, &c->model, &c->req, err);
    if (st != INFD_STATUS_OK)
        return st;
    return infd_infer_async(c->req, on_call_done, c, err);
}

/* ------------------------------------------------------------------------- */
/* Routers and messages                                                      */
/* ------------------------------------------------------------------------- */

static wrouter *router_find(cluster_worker *w, const uint8_t *ident, size_t n, bool add)
{
    for (int i = 0; i < w->n_routers; i++)
        if (w->routers[i].ident_n == n && memcmp(w->routers[i].ident, ident, n) == 0)
            return &w->routers[i];
    if (!add)
        return NULL;
    uint64_t now = infd_clock_ns();
    int slot = -1;
    if (w->n_routers < MAX_ROUTERS) {
        slot = w->n_routers++;
    } else { /* the longest silent one goes */
        slot = 0;
        for (int i = 1; i < w->n_routers; i++)
            if (w->routers[i].last_heard_ns < w->routers[slot].last_heard_ns)
                slot = i;
    }
    memcpy(w->routers[slot].ident, ident, n);
    w->routers[slot].ident_n = n;
    w->routers[slot].last_heard_ns = now;
    return &w->routers[slot];
}

static void send_heartbeat(cluster_worker *w, const wrouter *r)
{
    Infd__Cluster__LinkMessage h = INFD__CLUSTER__LINK_MESSAGE__INIT;
    h.version = 1;
    h.kind = INFD__CLUSTER__LINK_MESSAGE__KIND__HEARTBEAT;
    h.seq = w->seq;
    h.inflight = (uint32_t)atomic_load(&w->inflight);
    h.capacity = (uint32_t)w->capacity;
    h.queued = w->queued;
    h.worker_id = w->id;
    send_parts(w, r->ident, r->ident_n, &h, NULL, 0);
}

/* One multipart message, its frames received into `parts` (frame 0 the
 * router's identity). */
static void on_message(cluster_worker *w, zmq_msg_t *parts, int n)
{
    const uint8_t *ident = zmq_msg_data(&parts[0]);
    size_t ident_n = zmq_msg_size(&parts[0]);
    if (n < 2 || ident_n == 0 || ident_n > ID_BYTES) {
        complain(w, "a message of %d frames without a header: dropped", n);
        return;
    }
    Infd__Cluster__LinkMessage *h =
        infd__cluster__link_message__unpack(NULL, zmq_msg_size(&parts[1]), zmq_msg_data(&parts[1]));
    if (!h) {
        complain(w,
                 "a header of %zu bytes that is not a LinkMessage: dropped (not an infd "
                 "router?)",
                 zmq_msg_size(&parts[1]));
        return;
    }
    if (h->version != 1) {
        complain(w, "a message of link version %u (this worker speaks 1): dropped", h->version);
        infd__cluster__link_message__free_unpacked(h, NULL);
        return;
    }
    wrouter *r = router_find(w, ident, ident_n, h->kind != INFD__CLUSTER__LINK_MESSAGE__KIND__BYE);
    if (r)
        r->last_heard_ns = infd_clock_ns();
    switch (h->kind) {
    case INFD__CLUSTER__LINK_MESSAGE__KIND__HELLO:
        send_heartbeat(w, r);
        break;
    case INFD__CLUSTER__LINK_MESSAGE__KIND__BYE:
        if (r) {
            *r = w->routers[--w->n_routers];
        }
        break;
    case INFD__CLUSTER__LINK_MESSAGE__KIND__INFER: {
        if (!h->request || n - 1 > MAX_FRAMES) {
            send_error(w, ident, ident_n, h->call, INFD_STATUS_INVALID_ARGUMENT,
                       h->request ? "more tensor frames than an INFER may have"
                                  : "an INFER without a request");
            break;
        }
        if (w->stopping || atomic_load(&w->inflight) >= w->capacity) {
            send_error(w, ident, ident_n, h->call,
                       w->stopping ? INFD_STATUS_UNAVAILABLE : INFD_STATUS_RESOURCE_EXHAUSTED,
                       w->stopping ? "the worker is stopping" : "the worker is at capacity");
            break;
        }
        wcall *c = infd_freelist_get(&w->records);
        if (!c) {
            send_error(w, ident, ident_n, h->call, INFD_STATUS_OUT_OF_MEMORY,
                       "the worker is out of memory");
            break;
        }
        atomic_fetch_add(&w->inflight, 1);
        atomic_init(&c->refs, 1);
        c->w = w;
        memcpy(c->ident, ident, ident_n);
        c->ident_n = ident_n;
        c->call = h->call;
        /* The header and the tensors' frames move into the call. */
        for (int i = 1; i < n; i++) {
            zmq_msg_init(&c->in[i - 1]);
            zmq_msg_move(&c->in[i - 1], &parts[i]);
        }
        c->n_in = n - 1;
        infd_error err;
        infd_error_clear(&err);
        if (start_call(w, c, h, &err) != INFD_STATUS_OK) {
            send_error(w, ident, ident_n, h->call, err.code, err.msg);
            call_release(c);
        }
        break;
    }
    case INFD__CLUSTER__LINK_MESSAGE__KIND__LOAD:
    case INFD__CLUSTER__LINK_MESSAGE__KIND__UNLOAD:
        ctl_take(w, ident, ident_n, h);
        break;
    default:
        complain(w, "a message of kind %d from a router: dropped", (int)h->kind);
        break;
    }
    infd__cluster__link_message__free_unpacked(h, NULL);
}

/* Receives every whole message waiting (the socket's fd is edge-triggered:
 * stop only when ZMQ_EVENTS says nothing is left). */
static void drain_socket(cluster_worker *w)
{
    for (;;) {
        int events = 0;
        size_t len = sizeof(events);
        if (zmq_getsockopt(w->sock, ZMQ_EVENTS, &events, &len) != 0 || !(events & ZMQ_POLLIN))
            return;
        zmq_msg_t parts[MAX_FRAMES + 2];
        int n = 0, more = 1;
        bool over = false;
        while (more) {
            zmq_msg_t extra;
            zmq_msg_t *part = n < MAX_FRAMES + 2 ? &parts[n] : &extra;
            zmq_msg_init(part);
            if (zmq_msg_recv(part, w->sock, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(part);
                break;
            }
            more = zmq_msg_more(part);
            if (part == &extra) {
                zmq_msg_close(part);
                over = true;
            } else {
                n++;
            }
        }
        if (over)
            complain(w, "a message of more than %d frames: dropped", MAX_FRAMES + 2);
        else if (n > 0)
            on_message(w, parts, n);
        for (int i = 0; i < n; i++)
            zmq_msg_close(&parts[i]);
    }
}

/* ------------------------------------------------------------------------- */
/* The loop                                                                  */
/* ------------------------------------------------------------------------- */

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    drain_socket(arg);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cluster_worker *w = arg;
    drain_done(w);
    drain_socket(w); /* sending may have taken the fd's edge */
}

/* Requests waiting in the queues of the server's READY models. */
static uint32_t queue_depth(infd_server *server)
{
    infd_repository_entry *rows = NULL;
    int n = 0;
    infd_error err;
    infd_error_clear(&err);
    if (infd_server_repository_index(server, true, &rows, &n, &err) != INFD_STATUS_OK)
        return 0;
    uint64_t sum = 0;
    infd_model_stats *st = infd_malloc(sizeof(*st));
    for (int i = 0; st && i < n; i++) {
        infd_model *m = NULL;
        if (infd_server_model_acquire(server, rows[i].name, rows[i].version, &m, &err) !=
            INFD_STATUS_OK)
            continue;
        infd_model_get_stats(m, st);
        sum += st->queue_depth;
        infd_model_release(m);
    }
    infd_free(st);
    infd_free(rows);
    return sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cluster_worker *w = arg;
    uint64_t now = infd_clock_ns();
    drain_done(w);
    w->seq++;
    if (w->n_routers)
        w->queued = queue_depth(w->server);
    for (int i = 0; i < w->n_routers;) {
        if (now - w->routers[i].last_heard_ns > ROUTER_LOST_MS * 1000000ull) {
            w->routers[i] = w->routers[--w->n_routers];
            continue;
        }
        send_heartbeat(w, &w->routers[i]);
        i++;
    }
    drain_socket(w);
    if (w->stopping && (atomic_load(&w->inflight) == 0 || now >= w->stop_deadline_ns))
        event_base_loopbreak(w->base);
}

static void *loop_main(void *arg)
{
    cluster_worker *w = arg;
    event_base_dispatch(w->base);
    return NULL;
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cluster_worker *w = arg;
    w->stopping = true;
    w->stop_deadline_ns = infd_clock_ns() + STOP_WAIT_MS * 1000000ull;
}

static void worker_free(cluster_worker *w)
{
    if (w->ctl_started) {
        pthread_mutex_lock(&w->ctl_mu);
        w->ctl_stop = true;
        pthread_cond_signal(&w->ctl_cv);
        pthread_mutex_unlock(&w->ctl_mu);
        pthread_join(w->ctl_thread, NULL);
    }
    for (wctl *t = w->ctl_head, *next; t; t = next) {
        next = t->next;
        infd_free(t);
    }
    for (wctl *t = w->ctl_done.wake ? infd_mailbox_take(&w->ctl_done) : NULL, *next; t; t = next) {
        next = t->next;
        infd_free(t->config);
        infd_free(t);
    }
    infd_mailbox_fini(&w->ctl_done);
    pthread_mutex_destroy(&w->ctl_mu);
    pthread_cond_destroy(&w->ctl_cv);
    if (w->readable)
        event_free(w->readable);
    if (w->tick)
        event_free(w->tick);
    infd_mailbox_fini(&w->done);
    if (w->base)
        event_base_free(w->base);
    if (w->sock)
        zmq_close(w->sock);
    if (w->zctx)
        zmq_ctx_term(w->zctx); /* every frame released: no call left */
    infd_freelist_fini(&w->records);
    infd_free(w);
}

void cluster_worker_stop(cluster_worker *w)
{
    if (!w)
        return;
    if (w->thread_started) {
        event_base_once(w->base, -1, EV_TIMEOUT, on_stop, w, NULL);
        pthread_join(w->thread, NULL);
        drain_done(w);
        Infd__Cluster__LinkMessage h = INFD__CLUSTER__LINK_MESSAGE__INIT;
        h.version = 1;
        h.kind = INFD__CLUSTER__LINK_MESSAGE__KIND__BYE;
        h.worker_id = w->id;
        for (int i = 0; i < w->n_routers; i++)
            send_parts(w, w->routers[i].ident, w->routers[i].ident_n, &h, NULL, 0);
        if (atomic_load(&w->inflight) > 0)
            infd_log(INFD_LOG_LEVEL_WARN,
                     "cluster link: %d call(s) not answered at stop (their routers retry them)",
                     atomic_load(&w->inflight));
    }
    /* Linger 0: nothing queued holds the context's termination up. */
    worker_free(w);
}

infd_status cluster_worker_start(infd_server *server, const cluster_worker_options *o,
                                 cluster_worker **out, infd_error *err)
{
    *out = NULL;
    if (!o->bind || strncmp(o->bind, "tcp://", 6) != 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "cluster link: '%.200s': expected tcp://HOST:PORT",
                              o->bind ? o->bind : "");
    if (o->capacity < 1 || o->max_message_bytes < 4096)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "cluster link: capacity >= 1 and max message >= 4096 bytes");
    cluster_worker *w = infd_calloc(1, sizeof(*w));
    if (!w)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "cluster link: out of memory");
    infd_freelist_init(&w->records, sizeof(wcall), offsetof(wcall, in), offsetof(wcall, next),
                       o->capacity); /* the frame arrays (40 KB) are written before read */
    pthread_mutex_init(&w->ctl_mu, NULL);
    pthread_cond_init(&w->ctl_cv, NULL);
    w->server = server;
    w->capacity = o->capacity;
    snprintf(w->bind, sizeof(w->bind), "%s", o->bind);
    if (o->id && *o->id) {
        snprintf(w->id, sizeof(w->id), "%s", o->id);
    } else { /* member.c's default */
        char host[100];
        if (gethostname(host, sizeof(host)) != 0)
            snprintf(host, sizeof(host), "host");
        host[sizeof(host) - 1] = '\0';
        snprintf(w->id, sizeof(w->id), "%s-%d", host, (int)getpid());
    }
    infd_status st = INFD_STATUS_OK;
    int zero = 0, one = 1;
    int64_t max = (int64_t)o->max_message_bytes;
    if (!(w->zctx = zmq_ctx_new()) || !(w->sock = zmq_socket(w->zctx, ZMQ_ROUTER)) ||
        zmq_setsockopt(w->sock, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        zmq_setsockopt(w->sock, ZMQ_ROUTER_MANDATORY, &one, sizeof(one)) != 0 ||
        zmq_setsockopt(w->sock, ZMQ_MAXMSGSIZE, &max, sizeof(max)) != 0) {
        st = infd_error_set(err, zmq_status(zmq_errno()), "cluster link: %s",
                            zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (zmq_bind(w->sock, o->bind) != 0) {
        st = infd_error_set(err, zmq_status(zmq_errno()), "cluster link: cannot bind %s: %s",
                            o->bind, zmq_strerror(zmq_errno()));
        goto fail;
    }
    int fd = -1;
    size_t fd_len = sizeof(fd);
    if (zmq_getsockopt(w->sock, ZMQ_FD, &fd, &fd_len) != 0 || evthread_use_pthreads() != 0 ||
        !(w->base = event_base_new()) ||
        !(w->readable = event_new(w->base, fd, EV_READ | EV_PERSIST, on_readable, w)) ||
        !(w->tick = event_new(w->base, -1, EV_PERSIST, on_tick, w)) ||
        !infd_mailbox_init(&w->done, w->base, offsetof(wcall, next), on_wake, w) ||
        !infd_mailbox_init(&w->ctl_done, w->base, offsetof(wctl, next), on_ctl_wake, w)) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "cluster link: cannot make the event loop");
        goto fail;
    }
    struct timeval tv = { 0, HEARTBEAT_MS * 1000 };
    event_add(w->readable, NULL);
    event_add(w->tick, &tv);
    if (pthread_create(&w->ctl_thread, NULL, ctl_main, w) != 0) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "cluster link: cannot start its thread");
        goto fail;
    }
    w->ctl_started = true;
    pthread_setname_np(w->ctl_thread, "link-ctl");
    if (pthread_create(&w->thread, NULL, loop_main, w) != 0) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "cluster link: cannot start its thread");
        goto fail;
    }
    w->thread_started = true;
    pthread_setname_np(w->thread, "link");
    infd_log(INFD_LOG_LEVEL_INFO, "cluster link: routers reach worker %s at %s", w->id, w->bind);
    *out = w;
    return INFD_STATUS_OK;
fail:
    worker_free(w);
    return st;
}
