/*
 * router.c - `infd router`'s core (router.h has the design).
 *
 * The life of a call (rcall): a remote model's instance defers the request
 * and posts the call to the loop's mailbox; the loop picks a worker, sends
 * an INFER (header, then one frame per input straight from the request's
 * memory, as the pieces it lies in) and files the call under its number;
 * the worker's RESULT sets the request's outputs (large ones lent as their
 * frames, small ones copied) or its failure. The call
 * finishes (infd_request_done) when both the result is in and ZeroMQ has
 * let go of the input frames: a reference count, since ZeroMQ's I/O thread
 * releases frames.
 *
 * A worker (rworker) is a DEALER socket connected to its advertised
 * address, with a libevent event on its (edge-triggered) ZMQ_FD, drained
 * after every wake-up and every send.
 */
#include "cluster/router.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <yajl/yajl_tree.h>
#include <zmq.h>

#include "cluster.pb-c.h"
#include "cluster/etcd.h"
#include "cluster/link.h"
#include "cluster/ratelimit.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/common.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "frontends/common/freelist.h"
#include "frontends/common/mailbox.h"
#include "infd/plugin.h"

#define MAX_WORKERS    64
#define MAX_MODELS     128
#define MAX_CALLS      65536 /* in flight at once, all workers */
#define HEARTBEAT_MS   250
#define DEAD_AFTER_MS  (3 * HEARTBEAT_MS)
#define TICK_MS        50 /* dead workers are seen within DEAD_AFTER_MS + TICK_MS */
#define CALL_TIMEOUT_S 60 /* a worker that heartbeats but never answers a call */
#define NAME_BYTES     128
#define SEQ_KEY        80    /* "#<u64>" or "$<string id>" */
#define MAX_SEQS       16384 /* sequences open at once, a power of two */
#define SEQ_IDLE_S     600   /* a sequence silent this long is forgotten */

typedef struct rcall rcall;
typedef struct rworker rworker;

struct rcall {
    rcall *next; /* the mailbox */
    cluster_router *r;
    infd_request *req;
    uint64_t id; /* the call's number on the wire (0: not sent) */
    rworker *w;  /* where it is in flight */
    uint64_t sent_ns;
    uint64_t deadline_ns; /* from the client's timeout (0: none) */
    int tries;
    atomic_int refs;    /* the result, and each input frame ZeroMQ holds */
    char seq[SEQ_KEY];  /* the sequence's key ("" when none): sticky, never retried */
    uint32_t seq_flags; /* INFD_SEQUENCE_START / END */
};

/* Where a sequence lives: one worker from its START to its END (its state
 * is there). */
typedef struct rseq {
    char key[SEQ_KEY]; /* "" when free */
    int wi;            /* the worker's slot */
    uint64_t gen;      /* ... and its generation (a reused slot is another worker) */
    uint64_t last_ns;
} rseq;

typedef struct rmodel_ref {
    char name[NAME_BYTES];
    int64_t version;
} rmodel_ref;

struct rworker {
    bool used;
    uint64_t gen; /* a new number each time the slot takes a worker */
    char key[512];
    char id[NAME_BYTES];
    char address[256];
    rmodel_ref models[32]; /* READY ones */
    int n_models;
    void *sock;
    struct event *ev;
    cluster_router *r;
    bool alive; /* heard from in the last DEAD_AFTER_MS */
    uint64_t last_heard_ns;
    uint32_t inflight_hb; /* the worker's own count, from its heartbeat */
    uint32_t capacity_hb; /* what it takes at once, from its heartbeat */
    uint32_t queued_hb;   /* requests in its model queues, from its heartbeat */
    int outstanding;      /* this router's calls there */
    /* For the metrics (loop thread; rendered there too). */
    uint64_t n_requests, n_failures, n_retries, n_missed;
    uint64_t lat_buckets[12], lat_count; /* LAT_BOUNDS_US, then +Inf */
    double lat_sum_s;
};

/* The latency histogram's upper bounds, in microseconds. */
static const double LAT_BOUNDS_US[] = { 100,   250,   500,   1000,   2500,   5000,
                                        10000, 25000, 50000, 100000, 1000000 };
#define N_LAT_BOUNDS (sizeof(LAT_BOUNDS_US) / sizeof(LAT_BOUNDS_US[0]))

/* A model some worker lists READY (or did): the router mirrors the union
 * of the workers' READY models as remote models of its own. */
typedef struct rmodel {
    char name[NAME_BYTES];
    char *config; /* its config JSON, from a worker's value or a LOAD's answer */
    int listed;   /* workers in the view that list it READY */
    bool loaded;  /* as the loader last left it */
    bool queued;  /* for the loader */
} rmodel;

/* A repository request forwarded to the workers (LOAD / UNLOAD): made and
 * waited for by the caller's thread, run by the loop. */
typedef struct rctl rctl;
struct rctl {
    rctl *next; /* the mailbox, then the loop's list */
    uint64_t id;
    bool load;
    char model[NAME_BYTES];
    bool asked[MAX_WORKERS], answered[MAX_WORKERS];
    int n_asked, n_answered, n_ok;
    uint64_t deadline_ns;
    infd_status first_status;
    char message[512];
    char *config; /* a LOAD's: the first worker's answer */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
};
#define CTL_TIMEOUT_S 120

struct cluster_router {
    infd_server *server;
    char prefix[128], repository[512];
    struct event_base *base;
    struct event *tick;
    pthread_t thread;
    bool thread_started;
    etcd_client *etcd;
    etcd_watch *watch;
    void *zctx;
    infd_mailbox calls_box;
    infd_freelist records; /* rcall, recycled */
    infd_mailbox ctl_box;  /* rctl from repository requests */
    rctl *ctls;            /* asked, not all answered (loop) */
    uint64_t next_ctl;

    rworker workers[MAX_WORKERS];
    rcall **calls; /* [MAX_CALLS] by id % MAX_CALLS */
    uint64_t next_id;
    uint64_t next_sweep_ns;
    uint64_t next_hello_ns;
    uint64_t n_evictions; /* workers dropped (their key left etcd) */
    uint64_t next_gen;
    rseq *seqs;  /* [MAX_SEQS], open addressing by the key's hash (loop) */
    unsigned rr; /* round robin's next */

    /* Options. */
    cluster_router_policy policy;
    cluster_ratelimit *limits;
    int max_inflight;
    infd_log_level request_log;
    /* Calls taken (submit) and not finished: the bound on the mailbox. */
    atomic_int taken;
    /* Requests refused at submit (rate limits, overload). */
    atomic_uint_fast64_t n_rate_limited, n_overload;

    pthread_mutex_t mu; /* models and the load queue */
    pthread_cond_t cv;
    rmodel models[MAX_MODELS];
    int n_models;
    bool stop_loader;
    atomic_bool closing; /* stopping: repository requests are refused */
    pthread_t loader;
    bool loader_started;
};

static void send_call(cluster_router *r, rcall *c);
static void ctl_worker_gone(cluster_router *r, const rworker *w);
static infd_status remote_submit(void *state, infd_request *req, infd_error *err);
static bool remote_registered;
static void drain_worker(rworker *w);

/* ------------------------------------------------------------------------- */
/* The remote kind                                                           */
/* ------------------------------------------------------------------------- */

/* A model name the router may make a folder of in its repository: the
 * server's own rule (no leading '.', no separators or control bytes), since
 * names come from the network (repository requests, workers' values). */
static bool name_ok(const char *name)
{
    if (!name[0] || name[0] == '.' || strlen(name) >= NAME_BYTES)
        return false;
    for (const char *p = name; *p; p++)
        if (*p == '/' || *p == '\\' || (unsigned char)*p < 0x20 || *p == 0x7f)
            return false;
    return true;
}

/* A string value ("" when it is not one). */
static const char *jstr(yajl_val v)
{
    const char *s = v && YAJL_IS_STRING(v) ? YAJL_GET_STRING(v) : NULL;
    return s ? s : "";
}

static infd_status declare_io(infd_kind_model *km, yajl_val list, bool output, infd_error *err)
{
    const char *what = output ? "output" : "input";
    if (!list || !YAJL_IS_ARRAY(list))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "remote model '%s': the worker's config has no %s list",
                              infd_kind_model_name(km), what);
    for (size_t i = 0; i < YAJL_GET_ARRAY(list)->len; i++) {
        yajl_val io = YAJL_GET_ARRAY(list)->values[i];
        const char *np[] = { "name", NULL }, *tp[] = { "data_type", NULL },
                   *dp[] = { "dims", NULL };
        yajl_val name = yajl_tree_get(io, np, yajl_t_string);
        yajl_val type = yajl_tree_get(io, tp, yajl_t_string);
        yajl_val dims = yajl_tree_get(io, dp, yajl_t_array);
        const char *t = type ? jstr(type) : NULL;
        const char *n = name ? jstr(name) : NULL;
        if (!n || !t || strncmp(t, "TYPE_", 5) != 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "remote model '%s': %s %zu of the worker's config is "
                                  "malformed",
                                  infd_kind_model_name(km), what, i);
        infd_dtype dt =
            strcmp(t + 5, "STRING") == 0 ? INFD_DTYPE_BYTES : infd_dtype_from_name(t + 5);
        int64_t d[INFD_MAX_RANK];
        size_t rank = dims ? YAJL_GET_ARRAY(dims)->len : 0;
        if (rank >= INFD_MAX_RANK)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s '%s': rank %zu", what, n,
                                  rank);
        for (size_t k = 0; k < rank; k++) {
            yajl_val v = YAJL_GET_ARRAY(dims)->values[k];
            d[k] = YAJL_IS_INTEGER(v)  ? YAJL_GET_INTEGER(v)
                   : YAJL_IS_STRING(v) ? strtoll(jstr(v), NULL, 10)
                                       : -1;
        }
        infd_status st = output ? infd_kind_model_add_output(km, n, dt, (int)rank, d, err)
                                : infd_kind_model_add_input(km, n, dt, (int)rank, d, err);
        if (st != INFD_STATUS_OK)
            return st;
    }
    return INFD_STATUS_OK;
}

static infd_status remote_load(void *user, infd_kind_model *km, void **state, infd_error *err)
{
    *state = NULL;
    cluster_router *r = user;
    if (!r)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "backend remote is the router's own (its models are made by "
                              "`infd router`)");
    char *config = NULL;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n_models; i++)
        if (strcmp(r->models[i].name, infd_kind_model_name(km)) == 0 && r->models[i].config)
            config = infd_strdup(r->models[i].config);
    pthread_mutex_unlock(&r->mu);
    if (!config)
        return infd_error_set(err, INFD_STATUS_NOT_FOUND,
                              "remote model '%s': no worker has it READY now",
                              infd_kind_model_name(km));
    char ebuf[128];
    yajl_val root = yajl_tree_parse(config, ebuf, sizeof(ebuf));
    infd_free(config);
    const char *ip[] = { "input", NULL }, *op[] = { "output", NULL };
    infd_status st = root ? declare_io(km, yajl_tree_get(root, ip, yajl_t_array), false, err)
                          : infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                           "remote model '%s': the worker's config is not JSON "
                                           "(%s)",
                                           infd_kind_model_name(km), ebuf);
    if (st == INFD_STATUS_OK)
        st = declare_io(km, yajl_tree_get(root, op, yajl_t_array), true, err);
    yajl_tree_free(root);
    if (st != INFD_STATUS_OK)
        return st;
    *state = r; /* the model's state is the router (nothing of its own) */
    infd_kind_model_set_lends_outputs(km);
    return infd_kind_model_set_submit(km, remote_submit, err);
}

static void remote_unload(void *state)
{
    (void)state; /* the router outlives its models */
}

/* On the frontend's thread (infd_kind_model_set_submit): the limits, then
 * to the loop. Refusals return at once, so the client has them within
 * microseconds. */
static infd_status remote_submit(void *state, infd_request *req, infd_error *err)
{
    cluster_router *r = state;
    const char *model = infd_model_name(infd_request_model(req));
    char why[256];
    if (cluster_ratelimit_any(r->limits) &&
        !cluster_ratelimit_take(r->limits, model, infd_request_client(req), infd_clock_ns(), why,
                                sizeof(why))) {
        atomic_fetch_add(&r->n_rate_limited, 1);
        return infd_error_set(err, INFD_STATUS_RESOURCE_EXHAUSTED, "router: %s", why);
    }
    if (atomic_fetch_add(&r->taken, 1) >= r->max_inflight) {
        atomic_fetch_sub(&r->taken, 1);
        atomic_fetch_add(&r->n_overload, 1);
        return infd_error_set(err, INFD_STATUS_RESOURCE_EXHAUSTED,
                              "router: %d requests in flight already (--max-inflight); try again "
                              "later",
                              r->max_inflight);
    }
    rcall *c = infd_freelist_get(&r->records);
    if (!c) {
        atomic_fetch_sub(&r->taken, 1);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "router: out of memory");
    }
    c->r = r;
    c->req = req;
    c->w = NULL;
    c->id = 0;
    c->tries = 0;
    uint64_t t = infd_request_timeout_us(req);
    c->deadline_ns = t ? infd_request_submit_ns(req) + t * 1000u : 0;
    infd_sequence_info si;
    infd_request_sequence(req, &si);
    c->seq[0] = '\0';
    c->seq_flags = si.flags;
    if (si.id_string)
        snprintf(c->seq, sizeof(c->seq), "$%s", si.id_string);
    else if (si.id)
        snprintf(c->seq, sizeof(c->seq), "#%" PRIu64, si.id);
    infd_mailbox_post(&r->calls_box, c);
    return INFD_STATUS_OK;
}

/* Not reached: remote models take their requests at submit. */
static infd_status remote_run_batch(void *state, int instance, infd_batch *batch, infd_error *err)
{
    (void)state;
    (void)instance;
    for (int k = 0; k < infd_batch_size(batch); k++)
        infd_request_fail(infd_batch_request(batch, k), INFD_STATUS_INTERNAL,
                          "router: a remote model's request reached its queue");
    (void)err;
    return INFD_STATUS_OK;
}

/* One router per process: its start sets `user` before the kind loads. */
static infd_model_kind remote_kind = {
    .name = "remote",
    .platform = "infd_remote",
    .load = remote_load,
    .unload = remote_unload,
    .run_batch = remote_run_batch,
};

/* ------------------------------------------------------------------------- */
/* Calls                                                                     */
/* ------------------------------------------------------------------------- */

static void call_release(rcall *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    infd_request *req = c->req;
    cluster_router *r = c->r;
    infd_freelist_put(&r->records, c);
    atomic_fetch_sub(&r->taken, 1);
    infd_request_done(req);
}

/* The request log line (--request-log LEVEL): when a call's fate is known,
 * on the loop. */
static void log_call(cluster_router *r, const rcall *c, const char *worker, infd_status st)
{
    if (!infd_log_enabled(r->request_log))
        return;
    uint64_t t0 = infd_request_submit_ns(c->req);
    infd_log(r->request_log, "request id=%s model=%s worker=%s status=%s latency_us=%.0f",
             infd_request_id(c->req)[0] ? infd_request_id(c->req) : "-",
             infd_model_name(infd_request_model(c->req)), worker && worker[0] ? worker : "-",
             infd_status_str(st), (double)(infd_clock_ns() - t0) / 1000.0);
}

static void frame_free(void *data, void *hint)
{
    (void)data;
    call_release(hint);
}

static void call_fail(rcall *c, infd_status st, const char *fmt, ...) INFD_PRINTF(3, 4);
static void call_fail(rcall *c, infd_status st, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    log_call(c->r, c, c->w ? c->w->id : NULL, st);
    infd_request_fail(c->req, st, text);
    call_release(c); /* the result's reference */
}

static void call_file(cluster_router *r, rcall *c)
{
    r->calls[c->id % MAX_CALLS] = c;
}

/* The worker a filed call is at, or NULL. */
static rworker *c_worker_of(cluster_router *r, uint64_t id)
{
    rcall *c = r->calls[id % MAX_CALLS];
    return c && c->id == id ? c->w : NULL;
}

static rcall *call_take(cluster_router *r, uint64_t id)
{
    rcall **slot = &r->calls[id % MAX_CALLS];
    rcall *c = *slot;
    if (!c || c->id != id)
        return NULL;
    *slot = NULL;
    if (c->w)
        c->w->outstanding--;
    c->w = NULL;
    return c;
}

static bool serves(const rworker *w, const char *model)
{
    for (int i = 0; i < w->n_models; i++)
        if (strcmp(w->models[i].name, model) == 0)
            return true;
    return false;
}

/* The power of two choices among the live workers with the model, `avoid`
 * excluded when another is there. */
static uint64_t load_of(const rworker *w)
{
    return (uint64_t)w->outstanding + w->inflight_hb;
}

/* A worker for a call of `model`: among the live ones that have it READY
 * and room (this router's calls there below the capacity it heartbeats),
 * `avoid` excluded when another is there; by the policy. NULL with *busy
 * set: some have the model but none has room. */
static rworker *pick(cluster_router *r, const char *model, const rworker *avoid, bool *busy)
{
    rworker *cand[MAX_WORKERS];
    int n = 0, n_full = 0;
    for (int i = 0; i < MAX_WORKERS; i++) {
        rworker *w = &r->workers[i];
        if (!w->used || !w->alive || !w->sock || !serves(w, model))
            continue;
        if (w->capacity_hb && (uint32_t)w->outstanding >= w->capacity_hb) {
            n_full++;
            continue;
        }
        if (w != avoid)
            cand[n++] = w;
    }
    if (n == 0 && avoid && avoid->used && avoid->alive && avoid->sock && serves(avoid, model) &&
        !(avoid->capacity_hb && (uint32_t)avoid->outstanding >= avoid->capacity_hb))
        cand[n++] = (rworker *)avoid;
    *busy = n == 0 && n_full > 0;
    if (n == 0)
        return NULL;
    if (r->policy == CLUSTER_ROUTER_ROUND_ROBIN)
        return cand[r->rr++ % (unsigned)n];
    rworker *a = cand[(unsigned)rand() % (unsigned)n], *b = cand[(unsigned)rand() % (unsigned)n];
    return load_of(b) < load_of(a) ? b : a;
}

/* The sequence's entry, or (make) a free one to take it; NULL when the
 * table is full. */
static rseq *seq_find(cluster_router *r, const char *key, bool make)
{
    uint32_t h = infd_hash_str(key);
    rseq *free_slot = NULL;
    for (uint32_t i = 0; i < MAX_SEQS; i++) {
        rseq *e = &r->seqs[(h + i) & (MAX_SEQS - 1)];
        if (e->key[0] && strcmp(e->key, key) == 0)
            return e;
        if (!e->key[0]) {
            if (!free_slot)
                free_slot = e;
            if (e->wi == 0) /* never used: the probe ends here */
                break;
        }
    }
    return make ? free_slot : NULL;
}

static void seq_forget(rseq *e)
{
    e->key[0] = '\0';
    e->wi = -1; /* a tombstone: probes go on past it */
}

/* The worker a sequence is pinned to; NULL with *lost when it was pinned to
 * one that is gone. */
static rworker *seq_worker(cluster_router *r, rseq *e, bool *lost)
{
    *lost = false;
    if (!e || e->wi < 1)
        return NULL;
    rworker *w = &r->workers[e->wi - 1];
    if (w->used && w->gen == e->gen && w->alive && w->sock)
        return w;
    *lost = true;
    return NULL;
}

static void send_call(cluster_router *r, rcall *c)
{
    infd_model *m = infd_request_model(c->req);
    const char *model = infd_model_name(m);
    bool busy = false;
    rworker *avoid = c->w;
    rworker *w = NULL;
    c->w = NULL;
    uint64_t now = infd_clock_ns();
    rseq *sq = NULL;
    if (c->seq[0]) {
        /* A sequence stays where its START went: its state is there. */
        bool lost = false;
        sq = seq_find(r, c->seq, true);
        w = (c->seq_flags & INFD_SEQUENCE_START) ? NULL : seq_worker(r, sq, &lost);
        if (lost || avoid) {
            if (sq && sq->key[0])
                seq_forget(sq);
            call_fail(c, INFD_STATUS_UNAVAILABLE,
                      "router: the worker that held sequence %s is gone (its state with it); "
                      "start the sequence again",
                      c->seq + 1);
            return;
        }
        if (!sq) {
            call_fail(c, INFD_STATUS_RESOURCE_EXHAUSTED, "router: %d sequences are open already",
                      MAX_SEQS);
            return;
        }
    }
    if (!w)
        w = pick(r, model, avoid, &busy);
    if (!w) {
        if (busy)
            call_fail(c, INFD_STATUS_RESOURCE_EXHAUSTED,
                      "router: every worker with model '%s' is at capacity; try again later",
                      model);
        else
            call_fail(c, INFD_STATUS_UNAVAILABLE, "router: no live worker serves model '%s'",
                      model);
        return;
    }
    if (c->deadline_ns && now >= c->deadline_ns) {
        call_fail(c, INFD_STATUS_DEADLINE_EXCEEDED,
                  "router: the request's timeout passed before a worker took it");
        return;
    }
    if (r->calls[(r->next_id + 1) % MAX_CALLS]) {
        call_fail(c, INFD_STATUS_RESOURCE_EXHAUSTED, "router: %d calls in flight already",
                  MAX_CALLS);
        return;
    }
    c->id = ++r->next_id;
    int n_in = infd_model_n_inputs(m);
    Inference__ModelInferRequest req = INFERENCE__MODEL_INFER_REQUEST__INIT;
    Inference__ModelInferRequest__InferInputTensor in[INFD_MAX_MODEL_IO];
    Inference__ModelInferRequest__InferInputTensor *pin[INFD_MAX_MODEL_IO];
    Inference__ModelInferRequest__InferRequestedOutputTensor out[INFD_MAX_MODEL_IO];
    Inference__ModelInferRequest__InferRequestedOutputTensor *pout[INFD_MAX_MODEL_IO];
    int64_t dims[INFD_MAX_MODEL_IO][INFD_MAX_RANK];
    infd_tensor t[INFD_MAX_MODEL_IO];
    req.model_name = (char *)model;
    req.model_version = (char *)"";
    req.id = (char *)(infd_request_id(c->req) ? infd_request_id(c->req) : "");
    infd_error err;
    infd_error_clear(&err);
    /* Each input goes as the pieces it lies in (an HTTP body's read
     * buffers), one frame each, so no byte is copied; more pieces than a
     * message may carry are joined (a copy) instead. */
    const infd_data_segment *pcs[INFD_MAX_MODEL_IO];
    int npc[INFD_MAX_MODEL_IO];
    uint32_t in_frames[INFD_MAX_MODEL_IO];
    int n_frames = 0;
    bool pieces = false;
    for (int i = 0; i < n_in; i++) {
        if (infd_request_input_pieces(c->req, i, &t[i], &pcs[i], &npc[i], &err) != INFD_STATUS_OK) {
            call_fail(c, err.code ? err.code : INFD_STATUS_INTERNAL, "router: input %d: %s", i,
                      err.msg);
            return;
        }
        pieces |= npc[i] > 1;
        n_frames += npc[i] > 1 ? npc[i] : 1;
    }
    for (int i = 0; i < n_in; i++) {
        infd_model_io io;
        bool join = npc[i] > 1 && n_frames > CLUSTER_LINK_MAX_FRAMES;
        if (join)
            n_frames -= npc[i] - 1;
        if (infd_model_input(m, i, &io) != INFD_STATUS_OK ||
            ((join || npc[i] == 0) &&
             infd_request_input(c->req, i, &t[i], &err) != INFD_STATUS_OK)) {
            call_fail(c, err.code ? err.code : INFD_STATUS_INTERNAL, "router: input %d: %s", i,
                      err.msg);
            return;
        }
        inference__model_infer_request__infer_input_tensor__init(&in[i]);
        in[i].name = (char *)io.name;
        in[i].datatype = (char *)infd_dtype_name(t[i].dtype);
        for (int d = 0; d < t[i].shape.rank; d++)
            dims[i][d] = t[i].shape.dims[d];
        in[i].n_shape = (size_t)t[i].shape.rank;
        in[i].shape = dims[i];
        pin[i] = &in[i];
        if (join || npc[i] == 0) {
            npc[i] = 1;
            pcs[i] = NULL; /* t[i].data */
        }
        in_frames[i] = (uint32_t)npc[i];
    }
    req.n_inputs = (size_t)n_in;
    req.inputs = pin;
    int n_out = 0;
    for (int j = 0; j < infd_model_n_outputs(m); j++) {
        infd_model_io io;
        if (!infd_request_output_wanted(c->req, j) || infd_model_output(m, j, &io))
            continue;
        inference__model_infer_request__infer_requested_output_tensor__init(&out[n_out]);
        out[n_out].name = (char *)io.name;
        pout[n_out] = &out[n_out];
        n_out++;
    }
    req.n_outputs = (size_t)n_out;
    req.outputs = pout;
    Infd__Cluster__LinkMessage h = INFD__CLUSTER__LINK_MESSAGE__INIT;
    h.version = 1;
    h.kind = INFD__CLUSTER__LINK_MESSAGE__KIND__INFER;
    h.call = c->id;
    h.request = &req;
    if (pieces) {
        h.n_input_frames = (size_t)n_in;
        h.input_frames = in_frames;
    }
    h.timeout_us = c->deadline_ns ? (c->deadline_ns - now + 999) / 1000 : 0;
    /* The client's priority level (the worker's model has the same levels)
     * and the sequence, as request parameters. */
    Inference__InferParameter pv[4];
    Inference__ModelInferRequest__ParametersEntry pe[4], *ppe[4];
    int np = 0;
    uint32_t prio = infd_request_priority(c->req);
    if (prio) {
        inference__infer_parameter__init(&pv[np]);
        pv[np].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
        pv[np].int64_param = prio;
        pe[np].key = (char *)"priority";
        np++;
    }
    if (c->seq[0]) {
        inference__infer_parameter__init(&pv[np]);
        if (c->seq[0] == '$') {
            pv[np].parameter_choice_case =
                INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
            pv[np].string_param = c->seq + 1;
        } else {
            pv[np].parameter_choice_case =
                INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
            pv[np].uint64_param = strtoull(c->seq + 1, NULL, 10);
        }
        pe[np++].key = (char *)"sequence_id";
        for (int f = 0; f < 2; f++) {
            inference__infer_parameter__init(&pv[np]);
            pv[np].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
            pv[np].bool_param = (c->seq_flags & (f ? INFD_SEQUENCE_END : INFD_SEQUENCE_START)) != 0;
            pe[np++].key = (char *)(f ? "sequence_end" : "sequence_start");
        }
    }
    for (int i = 0; i < np; i++) {
        Inference__ModelInferRequest__ParametersEntry init =
            INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT;
        char *key = pe[i].key;
        pe[i] = init;
        pe[i].key = key;
        pe[i].value = &pv[i];
        ppe[i] = &pe[i];
    }
    req.n_parameters = (size_t)np;
    req.parameters = ppe;
    size_t hn = protobuf_c_message_get_packed_size(&h.base);
    zmq_msg_t head;
    if (zmq_msg_init_size(&head, hn) != 0) {
        call_fail(c, INFD_STATUS_OUT_OF_MEMORY, "router: out of memory for a header");
        return;
    }
    protobuf_c_message_pack(&h.base, zmq_msg_data(&head));
    bool ok = zmq_msg_send(&head, w->sock, (n_frames ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) >= 0;
    if (!ok)
        zmq_msg_close(&head);
    int left = n_frames;
    for (int i = 0; ok && i < n_in; i++) {
        for (int k = 0; ok && k < npc[i]; k++) {
            /* The request's bytes go as they are: ZeroMQ holds a reference. */
            const void *p = pcs[i] ? pcs[i][k].data : t[i].data;
            size_t nb = pcs[i] ? pcs[i][k].nbytes : t[i].nbytes;
            zmq_msg_t f;
            atomic_fetch_add(&c->refs, 1);
            if (zmq_msg_init_data(&f, nb ? (void *)p : (void *)"", nb, frame_free, c) != 0) {
                atomic_fetch_sub(&c->refs, 1);
                ok = false;
                break;
            }
            if (zmq_msg_send(&f, w->sock, (--left ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&f); /* releases its reference */
                ok = false;
            }
        }
    }
    if (!ok) {
        /* A DEALER refuses only when the peer's queue is full: busy. */
        call_fail(c, INFD_STATUS_RESOURCE_EXHAUSTED,
                  "router: worker %s does not take more now (%s)", w->id,
                  zmq_strerror(zmq_errno()));
        return;
    }
    c->w = w;
    c->sent_ns = infd_clock_ns();
    if (sq) {
        if (c->seq_flags & INFD_SEQUENCE_END) {
            if (sq->key[0])
                seq_forget(sq);
        } else {
            snprintf(sq->key, sizeof(sq->key), "%s", c->seq);
            sq->wi = (int)(w - r->workers) + 1;
            sq->gen = w->gen;
            sq->last_ns = c->sent_ns;
        }
    }
    w->outstanding++;
    w->n_requests++;
    call_file(r, c);
    drain_worker(w); /* sending may have taken the fd's edge */
}

static void on_calls(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cluster_router *r = arg;
    rcall *list = infd_mailbox_take(&r->calls_box);
    while (list) {
        rcall *c = list;
        list = c->next;
        c->next = NULL;
        atomic_init(&c->refs, 1);
        send_call(r, c);
    }
}

/* The calls in flight at a worker that died: once more elsewhere, or
 * failed. */
static void fail_over(cluster_router *r, rworker *w, const char *why)
{
    for (int i = 0; i < MAX_CALLS; i++) {
        rcall *c = r->calls[i];
        if (!c || c->w != w)
            continue;
        r->calls[i] = NULL;
        w->outstanding--;
        if (c->tries++ == 0) {
            c->id = 0;
            w->n_retries++;
            send_call(r, c); /* c->w is still the dead one: avoided */
            continue;
        }
        w->n_failures++;
        c->w = NULL;
        call_fail(c, INFD_STATUS_UNAVAILABLE, "router: worker %s %s with the request", w->id, why);
    }
}

/* ------------------------------------------------------------------------- */
/* Worker messages                                                           */
/* ------------------------------------------------------------------------- */

/* Outputs of at least this many bytes are lent to the request as the
 * frames they arrived in (infd_request_output_adopt); smaller ones are
 * copied, which costs less than keeping their frame. */
#define LEND_MIN_BYTES (64 * 1024)

/* A frame lent to a request until the request is destroyed, which may be
 * after the router is gone (a frontend still writing its reply), so the
 * records are the process's, not the router's. */
typedef struct lent_frame {
    void *link;
    zmq_msg_t msg;
} lent_frame;

static infd_freelist lent_frames;
static pthread_once_t lent_once = PTHREAD_ONCE_INIT;

static void lent_init(void)
{
    infd_freelist_init(&lent_frames, sizeof(lent_frame), 0, offsetof(lent_frame, link), 1024);
}

static void lent_release(void *user)
{
    lent_frame *f = user;
    zmq_msg_close(&f->msg);
    infd_freelist_put(&lent_frames, f);
}

/* Output j of c's request from `frame`: lent when large, else copied. */
static infd_status set_output(rcall *c, int j, infd_tensor *t, zmq_msg_t *frame, infd_error *err)
{
    if (t->nbytes < LEND_MIN_BYTES)
        return infd_request_output_set(c->req, j, t, err);
    pthread_once(&lent_once, lent_init);
    lent_frame *f = infd_freelist_get(&lent_frames);
    if (!f)
        return infd_request_output_set(c->req, j, t, err);
    zmq_msg_init(&f->msg);
    zmq_msg_move(&f->msg, frame);
    t->data = zmq_msg_data(&f->msg);
    return infd_request_output_adopt(c->req, j, t, lent_release, f, err);
}

static void on_result(cluster_router *r, const Infd__Cluster__LinkMessage *h, zmq_msg_t *frames,
                      int n)
{
    rworker *w = c_worker_of(r, h->call);
    rcall *c = call_take(r, h->call);
    if (!c)
        return; /* late: failed over already */
    c->w = w;   /* for the log line only: the call is off the worker's books */
    if (w) {
        double us = (double)(infd_clock_ns() - c->sent_ns) / 1000.0;
        size_t b = 0;
        while (b < N_LAT_BOUNDS && us > LAT_BOUNDS_US[b])
            b++;
        w->lat_buckets[b]++;
        w->lat_count++;
        w->lat_sum_s += us / 1e6;
        if (h->status != 0)
            w->n_failures++;
    }
    if ((h->status == INFD_STATUS_UNAVAILABLE || h->status == INFD_STATUS_RESOURCE_EXHAUSTED) &&
        c->tries++ == 0) {
        /* Refused before it ran (stopping, unloading, full): once more
         * elsewhere. */
        if (w)
            w->n_retries++;
        c->id = 0;
        send_call(r, c); /* c->w (this worker) is avoided */
        return;
    }
    if (h->status != 0) {
        call_fail(c, (infd_status)h->status, "%s", h->message ? h->message : "worker error");
        return;
    }
    const Inference__ModelInferResponse *resp = h->response;
    infd_model *m = infd_request_model(c->req);
    if (!resp || (int)resp->n_outputs != n) {
        call_fail(c, INFD_STATUS_INTERNAL, "router: a result of %d frames for %zu outputs", n,
                  resp ? resp->n_outputs : 0);
        return;
    }
    infd_error err;
    infd_error_clear(&err);
    for (size_t k = 0; k < resp->n_outputs; k++) {
        int j;
        infd_tensor t;
        if (cluster_link_output(m, resp, k, zmq_msg_data(&frames[k]), zmq_msg_size(&frames[k]), &j,
                                &t, &err) != INFD_STATUS_OK ||
            set_output(c, j, &t, &frames[k], &err) != INFD_STATUS_OK) {
            call_fail(c, INFD_STATUS_INTERNAL, "router: %s", err.msg);
            return;
        }
    }
    log_call(r, c, w ? w->id : NULL, INFD_STATUS_OK);
    call_release(c);
}

static void ctl_answer(cluster_router *r, rctl *t, int wi, infd_status st, const char *who,
                       const char *message, const char *config);

static void on_message(rworker *w, zmq_msg_t *parts, int n)
{
    cluster_router *r = w->r;
    Infd__Cluster__LinkMessage *h =
        infd__cluster__link_message__unpack(NULL, zmq_msg_size(&parts[0]), zmq_msg_data(&parts[0]));
    if (!h || h->version != 1) {
        if (h)
            infd__cluster__link_message__free_unpacked(h, NULL);
        infd_log(INFD_LOG_LEVEL_WARN, "router: worker %s sent an unreadable message", w->id);
        return;
    }
    uint64_t now = infd_clock_ns();
    switch (h->kind) {
    case INFD__CLUSTER__LINK_MESSAGE__KIND__HEARTBEAT:
        if (!w->alive)
            infd_log(INFD_LOG_LEVEL_INFO, "router: worker %s at %s is live", w->id, w->address);
        w->alive = true;
        w->last_heard_ns = now;
        w->inflight_hb = h->inflight;
        w->capacity_hb = h->capacity;
        w->queued_hb = h->queued;
        break;
    case INFD__CLUSTER__LINK_MESSAGE__KIND__RESULT:
        w->last_heard_ns = now;
        on_result(r, h, parts + 1, n - 1);
        break;
    case INFD__CLUSTER__LINK_MESSAGE__KIND__BYE:
        w->alive = false;
        fail_over(r, w, "left");
        break;
    case INFD__CLUSTER__LINK_MESSAGE__KIND__CONTROL_RESULT:
        w->last_heard_ns = now;
        for (rctl *t = r->ctls; t; t = t->next)
            if (t->id == h->call) {
                ctl_answer(r, t, (int)(w - r->workers), (infd_status)h->status, w->id,
                           h->message ? h->message : "", h->config);
                break;
            }
        break;
    default:
        break;
    }
    infd__cluster__link_message__free_unpacked(h, NULL);
}

static void drain_worker(rworker *w)
{
    for (;;) {
        int events = 0;
        size_t len = sizeof(events);
        if (!w->sock || zmq_getsockopt(w->sock, ZMQ_EVENTS, &events, &len) != 0 ||
            !(events & ZMQ_POLLIN))
            return;
        zmq_msg_t parts[INFD_MAX_MODEL_IO + 2];
        int n = 0, more = 1;
        while (more) {
            zmq_msg_t extra;
            zmq_msg_t *p = n < INFD_MAX_MODEL_IO + 2 ? &parts[n] : &extra;
            zmq_msg_init(p);
            if (zmq_msg_recv(p, w->sock, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(p);
                break;
            }
            more = zmq_msg_more(p);
            if (p == &extra)
                zmq_msg_close(p);
            else
                n++;
        }
        if (n > 0)
            on_message(w, parts, n);
        for (int i = 0; i < n; i++)
            zmq_msg_close(&parts[i]);
    }
}

static void on_worker_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    drain_worker(arg);
}

static void send_hello(rworker *w)
{
    Infd__Cluster__LinkMessage h = INFD__CLUSTER__LINK_MESSAGE__INIT;
    h.version = 1;
    h.kind = INFD__CLUSTER__LINK_MESSAGE__KIND__HELLO;
    uint8_t buf[32];
    size_t n = protobuf_c_message_pack(&h.base, buf);
    zmq_send(w->sock, buf, n, ZMQ_DONTWAIT);
}

/* ------------------------------------------------------------------------- */
/* The view from etcd                                                        */
/* ------------------------------------------------------------------------- */

/* A fresh DEALER to the worker (linger 0: closing the old one drops what
 * it still queued, and ZeroMQ lets go of those calls' input frames). */
static bool worker_connect(cluster_router *r, rworker *w)
{
    if (w->ev)
        event_free(w->ev);
    if (w->sock)
        zmq_close(w->sock);
    w->ev = NULL;
    int zero = 0, fd = -1;
    size_t fd_len = sizeof(fd);
    w->sock = zmq_socket(r->zctx, ZMQ_DEALER);
    if (!w->sock || zmq_setsockopt(w->sock, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        zmq_connect(w->sock, w->address) != 0 ||
        zmq_getsockopt(w->sock, ZMQ_FD, &fd, &fd_len) != 0 ||
        !(w->ev = event_new(r->base, fd, EV_READ | EV_PERSIST, on_worker_readable, w)))
        return false;
    event_add(w->ev, NULL);
    send_hello(w);
    return true;
}

static void worker_close(cluster_router *r, rworker *w, const char *why)
{
    if (w->alive || w->outstanding)
        fail_over(r, w, why);
    ctl_worker_gone(r, w);
    w->alive = false;
    if (w->ev)
        event_free(w->ev);
    if (w->sock)
        zmq_close(w->sock);
    memset(w, 0, sizeof(*w));
}

/* The model's row (made when new; NULL past MAX_MODELS). r->mu held. */
static rmodel *model_row(cluster_router *r, const char *name)
{
    for (int i = 0; i < r->n_models; i++)
        if (strcmp(r->models[i].name, name) == 0)
            return &r->models[i];
    if (r->n_models == MAX_MODELS)
        return NULL;
    rmodel *m = &r->models[r->n_models++];
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "%s", name);
    return m;
}

/* A config for the model, when it has none yet (the first worker's). */
static void model_seen(cluster_router *r, const char *name, const char *config)
{
    pthread_mutex_lock(&r->mu);
    rmodel *m = model_row(r, name);
    if (m && config && !m->config)
        m->config = infd_strdup(config);
    pthread_mutex_unlock(&r->mu);
}

/* After a change of the view (loop): each model wants loading while some
 * worker lists it READY, and unloading when none does; the loader does
 * it. A model no worker lists forgets its config, so it takes the next
 * worker's. */
static void reconcile(cluster_router *r)
{
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n_models; i++) {
        rmodel *m = &r->models[i];
        m->listed = 0;
        for (int k = 0; k < MAX_WORKERS; k++)
            if (r->workers[k].used && serves(&r->workers[k], m->name))
                m->listed++;
        bool want = m->listed > 0 && m->config;
        if (want != m->loaded && !m->queued) {
            m->queued = true;
            pthread_cond_signal(&r->cv);
        }
        if (!m->listed && !m->loaded && !m->queued) {
            infd_free(m->config);
            m->config = NULL;
        }
    }
    pthread_cond_broadcast(&r->cv); /* an unload's caller waits for listed 0 */
    pthread_mutex_unlock(&r->mu);
}

/* A worker's key and value: (re)connects and refreshes its models. */
static void worker_put(cluster_router *r, const etcd_kv *kv)
{
    char ebuf[128];
    yajl_val root = yajl_tree_parse(kv->value, ebuf, sizeof(ebuf));
    const char *ap[] = { "address", NULL }, *ip[] = { "id", NULL }, *mp[] = { "models", NULL };
    yajl_val addr = root ? yajl_tree_get(root, ap, yajl_t_string) : NULL;
    yajl_val id = root ? yajl_tree_get(root, ip, yajl_t_string) : NULL;
    yajl_val models = root ? yajl_tree_get(root, mp, yajl_t_array) : NULL;
    if (!addr || !id) {
        infd_log(INFD_LOG_LEVEL_WARN, "router: %s: not a worker's value (%s)", kv->key,
                 root ? "no address or id" : ebuf);
        yajl_tree_free(root);
        return;
    }
    rworker *w = NULL, *free_slot = NULL;
    for (int i = 0; i < MAX_WORKERS; i++) {
        if (r->workers[i].used && strcmp(r->workers[i].key, kv->key) == 0)
            w = &r->workers[i];
        else if (!r->workers[i].used && !free_slot)
            free_slot = &r->workers[i];
    }
    if (w && strcmp(w->address, jstr(addr)) != 0)
        worker_close(r, w, "moved"), w = NULL;
    if (!w) {
        w = free_slot;
        if (!w) {
            infd_log(INFD_LOG_LEVEL_WARN, "router: more than %d workers: %s ignored", MAX_WORKERS,
                     kv->key);
            yajl_tree_free(root);
            return;
        }
        memset(w, 0, sizeof(*w));
        w->used = true;
        w->gen = ++r->next_gen;
        w->r = r;
        snprintf(w->key, sizeof(w->key), "%s", kv->key);
        snprintf(w->address, sizeof(w->address), "%s", jstr(addr));
        if (!worker_connect(r, w)) {
            infd_log(INFD_LOG_LEVEL_WARN, "router: cannot connect to worker %s at %s: %s", jstr(id),
                     w->address, zmq_strerror(zmq_errno()));
            worker_close(r, w, "failed");
            yajl_tree_free(root);
            return;
        }
        infd_log(INFD_LOG_LEVEL_INFO, "router: worker %s at %s joined", jstr(id), w->address);
    }
    snprintf(w->id, sizeof(w->id), "%s", jstr(id));
    w->n_models = 0;
    for (size_t i = 0; models && i < YAJL_GET_ARRAY(models)->len; i++) {
        yajl_val mo = YAJL_GET_ARRAY(models)->values[i];
        const char *np[] = { "name", NULL }, *sp[] = { "state", NULL }, *cp[] = { "config", NULL };
        yajl_val name = yajl_tree_get(mo, np, yajl_t_string);
        yajl_val state = yajl_tree_get(mo, sp, yajl_t_string);
        yajl_val config = yajl_tree_get(mo, cp, yajl_t_string);
        if (!name || !state || strcmp(jstr(state), "READY") != 0)
            continue;
        if (!name_ok(jstr(name))) {
            infd_log(INFD_LOG_LEVEL_WARN, "router: %s lists a model named '%.100s': ignored",
                     kv->key, jstr(name));
            continue;
        }
        if (w->n_models < (int)(sizeof(w->models) / sizeof(w->models[0]))) {
            snprintf(w->models[w->n_models].name, NAME_BYTES, "%s", jstr(name));
            w->n_models++;
        }
        model_seen(r, jstr(name), config ? jstr(config) : NULL);
    }
    yajl_tree_free(root);
}

static void worker_gone(cluster_router *r, const char *key)
{
    for (int i = 0; i < MAX_WORKERS; i++)
        if (r->workers[i].used && strcmp(r->workers[i].key, key) == 0) {
            infd_log(INFD_LOG_LEVEL_INFO, "router: worker %s left etcd", r->workers[i].id);
            r->n_evictions++;
            worker_close(r, &r->workers[i], "left etcd");
        }
}

static void on_sync(void *user, const etcd_kv *kvs, int n, int64_t revision)
{
    (void)revision;
    cluster_router *r = user;
    /* Workers not listed any more are gone. */
    for (int i = 0; i < MAX_WORKERS; i++) {
        if (!r->workers[i].used)
            continue;
        bool listed = false;
        for (int k = 0; k < n && !listed; k++)
            listed = strcmp(kvs[k].key, r->workers[i].key) == 0;
        if (!listed)
            worker_close(r, &r->workers[i], "left etcd");
    }
    for (int k = 0; k < n; k++)
        worker_put(r, &kvs[k]);
    reconcile(r);
}

static void on_events(void *user, const etcd_event *ev, int n, int64_t revision)
{
    (void)revision;
    cluster_router *r = user;
    for (int i = 0; i < n; i++) {
        if (ev[i].deleted)
            worker_gone(r, ev[i].kv.key);
        else
            worker_put(r, &ev[i].kv);
    }
    reconcile(r);
}

static void on_watch_state(void *user, const char *message)
{
    (void)user;
    if (message)
        infd_log(INFD_LOG_LEVEL_WARN, "router: %s; routing on with the last view", message);
    else
        infd_log(INFD_LOG_LEVEL_INFO, "router: etcd watch back");
}

/* ------------------------------------------------------------------------- */
/* Loading remote models                                                     */
/* ------------------------------------------------------------------------- */

/* An integer of a config's JSON (uint64s are strings there); 0 when not. */
static long long json_int(yajl_val v)
{
    if (v && YAJL_IS_INTEGER(v))
        return YAJL_GET_INTEGER(v);
    if (v && YAJL_IS_STRING(v))
        return strtoll(jstr(v), NULL, 10);
    return 0;
}

static bool write_config(cluster_router *r, const char *name, const char *config)
{
    char ebuf[64];
    yajl_val root = yajl_tree_parse(config, ebuf, sizeof(ebuf));
    const char *bp[] = { "max_batch_size", NULL };
    const char *lp[] = { "dynamic_batching", "priority_levels", NULL };
    const char *dp[] = { "dynamic_batching", "default_priority_level", NULL };
    yajl_val mb = root ? yajl_tree_get(root, bp, yajl_t_any) : NULL;
    long long max_batch = json_int(mb);
    /* The worker's priority levels, so the frontends take the same
     * priorities (the router forwards them). */
    long long levels = json_int(root ? yajl_tree_get(root, lp, yajl_t_any) : NULL);
    long long level = json_int(root ? yajl_tree_get(root, dp, yajl_t_any) : NULL);
    yajl_tree_free(root);
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", r->repository, name);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/%s/1", r->repository, name);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/%s/config.pbtxt", r->repository, name);
    static pthread_mutex_t file_mu = PTHREAD_MUTEX_INITIALIZER; /* the loader and the hook */
    pthread_mutex_lock(&file_mu);
    FILE *f = fopen(path, "w");
    if (!f) {
        pthread_mutex_unlock(&file_mu);
        return false;
    }
    /* One instance, idle: requests go to the loop at submit. */
    fprintf(f,
            "name: \"%s\"\nbackend: \"remote\"\nmax_batch_size: %lld\n"
            "instance_group [ { count: 1 kind: KIND_CPU } ]\n",
            name, max_batch);
    if (levels > 1 && levels < 1000)
        fprintf(f, "dynamic_batching { priority_levels: %lld default_priority_level: %lld }\n",
                levels, level >= 1 && level <= levels ? level : levels);
    bool ok = fclose(f) == 0;
    pthread_mutex_unlock(&file_mu);
    return ok;
}

/* The loader's thread: its own calls of infd_server_load_model pass the
 * repository hook (they load the router's remote models). */
static __thread bool in_loader;

static void *loader_main(void *arg)
{
    cluster_router *r = arg;
    in_loader = true;
    pthread_mutex_lock(&r->mu);
    while (!r->stop_loader) {
        int i = 0;
        while (i < r->n_models && !r->models[i].queued)
            i++;
        if (i == r->n_models) {
            pthread_cond_wait(&r->cv, &r->mu);
            continue;
        }
        rmodel *m = &r->models[i];
        m->queued = false;
        bool want = m->listed > 0 && m->config;
        if (want == m->loaded)
            continue;
        char name[NAME_BYTES];
        snprintf(name, sizeof(name), "%s", m->name);
        char *config = want ? infd_strdup(m->config) : NULL;
        pthread_mutex_unlock(&r->mu);
        infd_error err;
        infd_error_clear(&err);
        bool ok = false;
        infd_model *have = NULL;
        if (want && infd_server_model_acquire(r->server, name, -1, &have, &err) == INFD_STATUS_OK &&
            infd_model_is_ready(have)) {
            ok = true; /* loaded already (a repository request through the router) */
        } else if (want) {
            infd_error_clear(&err);
            ok = config && write_config(r, name, config) &&
                 infd_server_load_model(r->server, name, &err) == INFD_STATUS_OK;
            if (ok)
                infd_log(INFD_LOG_LEVEL_INFO, "router: model '%s' routable", name);
            else
                infd_log(INFD_LOG_LEVEL_WARN, "router: model '%s' not loaded: %s", name,
                         err.msg[0] ? err.msg : "cannot write its config");
        } else {
            infd_server_unload_model(r->server, name, &err);
            infd_log(INFD_LOG_LEVEL_INFO, "router: model '%s' unloaded: no worker has it READY",
                     name);
        }
        if (have)
            infd_model_release(have);
        infd_free(config);
        pthread_mutex_lock(&r->mu);
        m->loaded = want && ok;
        /* Changed meanwhile (a failed load waits for the next change). */
        bool now = m->listed > 0 && m->config;
        if (now != want && now != m->loaded)
            m->queued = true;
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ------------------------------------------------------------------------- */
/* Repository requests, forwarded                                            */
/* ------------------------------------------------------------------------- */

static void ctl_finish(cluster_router *r, rctl *t)
{
    for (rctl **p = &r->ctls; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    t->next = NULL;
    pthread_mutex_lock(&t->mu);
    t->done = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void ctl_answer(cluster_router *r, rctl *t, int wi, infd_status st, const char *who,
                       const char *message, const char *config)
{
    if (!t->asked[wi] || t->answered[wi])
        return;
    t->answered[wi] = true;
    t->n_answered++;
    if (st == INFD_STATUS_OK) {
        t->n_ok++;
        /* The worker's routing row follows at once; its etcd value, which
         * says the same, comes within a second. */
        rworker *w = &r->workers[wi];
        int k = 0;
        while (k < w->n_models && strcmp(w->models[k].name, t->model) != 0)
            k++;
        if (t->load && k == w->n_models && k < (int)(sizeof(w->models) / sizeof(w->models[0]))) {
            snprintf(w->models[k].name, NAME_BYTES, "%s", t->model);
            w->n_models++;
        } else if (!t->load && k < w->n_models) {
            w->models[k] = w->models[--w->n_models];
        }
        if (t->load && !t->config && config && *config)
            t->config = infd_strdup(config);
    } else if (t->first_status == INFD_STATUS_OK) {
        t->first_status = st;
        snprintf(t->message, sizeof(t->message), "worker %s: %s", who, message);
    }
    if (t->n_answered == t->n_asked) {
        if (t->n_ok && !t->load)
            reconcile(r);
        ctl_finish(r, t);
    }
}

static void ctl_worker_gone(cluster_router *r, const rworker *w)
{
    int wi = (int)(w - r->workers);
    for (rctl *t = r->ctls, *next; t; t = next) {
        next = t->next;
        ctl_answer(r, t, wi, INFD_STATUS_UNAVAILABLE, w->id, "left before it answered", NULL);
    }
}

static void on_ctls(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cluster_router *r = arg;
    rctl *list = infd_mailbox_take(&r->ctl_box);
    while (list) {
        rctl *t = list;
        list = t->next;
        t->next = NULL;
        if (atomic_load(&r->closing)) {
            t->first_status = INFD_STATUS_UNAVAILABLE;
            snprintf(t->message, sizeof(t->message), "the router is stopping");
            ctl_finish(r, t);
            continue;
        }
        t->id = ++r->next_ctl;
        t->deadline_ns = infd_clock_ns() + CTL_TIMEOUT_S * 1000000000ull;
        Infd__Cluster__LinkMessage h = INFD__CLUSTER__LINK_MESSAGE__INIT;
        h.version = 1;
        h.kind = t->load ? INFD__CLUSTER__LINK_MESSAGE__KIND__LOAD
                         : INFD__CLUSTER__LINK_MESSAGE__KIND__UNLOAD;
        h.call = t->id;
        h.model = t->model;
        uint8_t buf[256];
        size_t n = protobuf_c_message_get_packed_size(&h.base);
        int sent[MAX_WORKERS], n_sent = 0;
        for (int i = 0; n <= sizeof(buf) && i < MAX_WORKERS; i++) {
            rworker *w = &r->workers[i];
            if (!w->used || !w->alive || !w->sock)
                continue;
            protobuf_c_message_pack(&h.base, buf);
            if (zmq_send(w->sock, buf, n, ZMQ_DONTWAIT) < 0)
                continue;
            t->asked[i] = true;
            t->n_asked++;
            sent[n_sent++] = i;
        }
        if (t->n_asked == 0) {
            t->first_status = INFD_STATUS_UNAVAILABLE;
            snprintf(t->message, sizeof(t->message), "no live worker to %s it",
                     t->load ? "load" : "unload");
            ctl_finish(r, t);
            continue;
        }
        t->next = r->ctls;
        r->ctls = t;
        /* Sending may have taken a socket's edge: read what came, only now
         * that the request is listed and n_asked is final. A fast answer
         * (a model no worker has) can already be there, and before, it
         * found no request and was dropped, leaving the caller to time
         * out. Draining may finish t, so it is not read after this. */
        for (int k = 0; k < n_sent; k++)
            drain_worker(&r->workers[sent[k]]);
    }
}

/* The repository hook (frontends' threads): the request goes to every live
 * worker, and the router's own remote model follows. */
/* At the stop, on the loop: every repository request waiting is answered. */
static void on_close(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cluster_router *r = arg;
    on_ctls(-1, 0, r); /* those posted: refused */
    while (r->ctls) {
        if (r->ctls->first_status == INFD_STATUS_OK) {
            r->ctls->first_status = INFD_STATUS_UNAVAILABLE;
            snprintf(r->ctls->message, sizeof(r->ctls->message), "the router is stopping");
        }
        ctl_finish(r, r->ctls);
    }
}

static infd_status repo_hook(void *user, const char *name, bool load, infd_error *err)
{
    cluster_router *r = user;
    if (in_loader)
        return INFD_STATUS_OK;
    if (atomic_load(&r->closing))
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "router: stopping");
    if (!name_ok(name))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "router: '%.100s' is not a model name (1 to %d bytes, no leading "
                              "'.', no '/', '\\' or control characters)",
                              name, NAME_BYTES - 1);
    rctl *t = infd_calloc(1, sizeof(*t));
    if (!t)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "router: out of memory");
    t->load = load;
    snprintf(t->model, sizeof(t->model), "%s", name);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    infd_mailbox_post(&r->ctl_box, t);
    pthread_mutex_lock(&t->mu);
    while (!t->done)
        pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    infd_status st = INFD_STATUS_OK;
    if (t->n_ok == 0) {
        st = infd_error_set(err, t->first_status ? t->first_status : INFD_STATUS_UNAVAILABLE,
                            "router: no worker could %s model '%s' (%s)", load ? "load" : "unload",
                            name, t->message[0] ? t->message : "no answer");
    } else if (t->first_status != INFD_STATUS_OK) {
        infd_log(INFD_LOG_LEVEL_WARN, "router: %d of %d workers did %s model '%s'; %s", t->n_ok,
                 t->n_asked, load ? "load" : "unload", name, t->message);
    }
    if (st == INFD_STATUS_OK && load) {
        /* The server loads its remote model next, from the answer's config. */
        pthread_mutex_lock(&r->mu);
        rmodel *m = model_row(r, name);
        if (m && t->config) {
            infd_free(m->config);
            m->config = infd_strdup(t->config);
        }
        bool ok = m && m->config && write_config(r, name, m->config);
        pthread_mutex_unlock(&r->mu);
        if (!ok)
            st = infd_error_set(err, INFD_STATUS_INTERNAL,
                                "router: the workers loaded model '%s' but it has no config here",
                                name);
    } else if (st == INFD_STATUS_OK) {
        /* Until the workers' keys say so (they write within a second), so
         * the view does not bring the model back. */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 3;
        pthread_mutex_lock(&r->mu);
        for (;;) {
            rmodel *m = model_row(r, name);
            if (!m || m->listed == 0 || pthread_cond_timedwait(&r->cv, &r->mu, &until) != 0)
                break;
        }
        pthread_mutex_unlock(&r->mu);
    }
    infd_free(t->config);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    infd_free(t);
    return st;
}

/* ------------------------------------------------------------------------- */
/* The loop                                                                  */
/* ------------------------------------------------------------------------- */

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cluster_router *r = arg;
    uint64_t now = infd_clock_ns();
    bool hello = now >= r->next_hello_ns;
    if (hello)
        r->next_hello_ns = now + HEARTBEAT_MS * 1000000ull;
    for (int i = 0; i < MAX_WORKERS; i++) {
        rworker *w = &r->workers[i];
        if (!w->used)
            continue;
        if (w->alive && now - w->last_heard_ns > DEAD_AFTER_MS * 1000000ull) {
            infd_log(INFD_LOG_LEVEL_WARN, "router: worker %s missed 3 heartbeats: not routed to",
                     w->id);
            w->alive = false;
            w->n_missed++;
            fail_over(r, w, "stopped answering");
            /* Its queue goes with the old socket; a new one says HELLO, so
             * a worker that was only paused comes back. */
            if (!worker_connect(r, w))
                infd_log(INFD_LOG_LEVEL_WARN, "router: cannot reconnect to worker %s: %s", w->id,
                         zmq_strerror(zmq_errno()));
        }
        if (hello)
            send_hello(w);
        drain_worker(w);
    }
    /* Repository requests some worker never answered. */
    for (rctl *t = r->ctls, *next; t; t = next) {
        next = t->next;
        if (now < t->deadline_ns)
            continue;
        if (t->first_status == INFD_STATUS_OK) {
            t->first_status = INFD_STATUS_DEADLINE_EXCEEDED;
            snprintf(t->message, sizeof(t->message), "%d worker(s) did not answer in %d s",
                     t->n_asked - t->n_answered, CTL_TIMEOUT_S);
        }
        ctl_finish(r, t);
    }
    /* Calls a live worker never answered; sequences long silent. */
    if (now >= r->next_sweep_ns) {
        r->next_sweep_ns = now + 1000000000ull;
        for (int i = 0; i < MAX_SEQS; i++)
            if (r->seqs[i].key[0] && now - r->seqs[i].last_ns > SEQ_IDLE_S * 1000000000ull)
                seq_forget(&r->seqs[i]);
        for (int i = 0; i < MAX_CALLS; i++) {
            rcall *c = r->calls[i];
            /* (sent_ns may be after `now`: failed over in this tick) */
            if (!c || c->sent_ns + CALL_TIMEOUT_S * 1000000000ull > now)
                continue;
            rcall *t = call_take(r, c->id);
            if (t)
                call_fail(t, INFD_STATUS_DEADLINE_EXCEEDED,
                          "router: no answer from the worker in %d s", CALL_TIMEOUT_S);
        }
    }
}

static void *loop_main(void *arg)
{
    cluster_router *r = arg;
    event_base_dispatch(r->base);
    return NULL;
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

void cluster_router_options_init(cluster_router_options *o)
{
    memset(o, 0, sizeof(*o));
    o->prefix = "/infd";
    o->max_inflight = 4096;
    o->request_log = INFD_LOG_LEVEL_DEBUG;
}

static void router_free(cluster_router *r)
{
    for (int i = 0; i < MAX_WORKERS; i++)
        if (r->workers[i].used)
            worker_close(r, &r->workers[i], "was dropped at the router's stop");
    /* Calls posted and not sent: failed. */
    rcall *list = r->calls_box.wake ? infd_mailbox_take(&r->calls_box) : NULL;
    while (list) {
        rcall *c = list;
        list = c->next;
        atomic_init(&c->refs, 1);
        call_fail(c, INFD_STATUS_UNAVAILABLE, "router: stopping");
    }
    /* Repository requests waiting: answered. */
    rctl *ctls = r->ctl_box.wake ? infd_mailbox_take(&r->ctl_box) : NULL;
    while (ctls) {
        rctl *t = ctls;
        ctls = t->next;
        t->next = r->ctls;
        r->ctls = t;
    }
    while (r->ctls) {
        if (r->ctls->first_status == INFD_STATUS_OK) {
            r->ctls->first_status = INFD_STATUS_UNAVAILABLE;
            snprintf(r->ctls->message, sizeof(r->ctls->message), "the router is stopping");
        }
        ctl_finish(r, r->ctls);
    }
    etcd_watch_stop(r->watch);
    etcd_client_destroy(r->etcd);
    infd_mailbox_fini(&r->calls_box);
    infd_mailbox_fini(&r->ctl_box);
    if (r->tick)
        event_free(r->tick);
    if (r->base)
        event_base_free(r->base);
    if (r->zctx)
        zmq_ctx_term(r->zctx);
    for (int i = 0; i < r->n_models; i++)
        infd_free(r->models[i].config);
    infd_free(r->calls);
    infd_free(r->seqs);
    cluster_ratelimit_destroy(r->limits);
    remote_kind.user = NULL;
    infd_freelist_fini(&r->records); /* after zmq_ctx_term: every frame released */
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    infd_free(r);
}

/* ------------------------------------------------------------------------- */
/* Metrics                                                                   */
/* ------------------------------------------------------------------------- */

typedef struct render_job {
    cluster_router *r;
    infd_strbuf text;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} render_job;

static void counter_family(infd_strbuf *b, cluster_router *r, const char *name, const char *help,
                           size_t off)
{
    infd_strbuf_printf(b, "# HELP infd_router_%s %s\n# TYPE infd_router_%s counter\n", name, help,
                       name);
    for (int i = 0; i < MAX_WORKERS; i++)
        if (r->workers[i].used)
            infd_strbuf_printf(b, "infd_router_%s{worker=\"%s\"} %" PRIu64 "\n", name,
                               r->workers[i].id,
                               *(const uint64_t *)((const char *)&r->workers[i] + off));
}

/* On the loop, which owns the worker table. */
static void on_render(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    render_job *j = arg;
    cluster_router *r = j->r;
    infd_strbuf *b = &j->text;
    infd_strbuf_puts(b, "# HELP infd_router_worker_up Whether the worker answers heartbeats "
                        "(1) or missed 3 (0).\n# TYPE infd_router_worker_up gauge\n");
    for (int i = 0; i < MAX_WORKERS; i++)
        if (r->workers[i].used)
            infd_strbuf_printf(b, "infd_router_worker_up{worker=\"%s\"} %d\n", r->workers[i].id,
                               r->workers[i].alive ? 1 : 0);
    infd_strbuf_puts(b, "# HELP infd_router_worker_queue_depth Requests waiting in the worker's "
                        "model queues, from its last heartbeat.\n"
                        "# TYPE infd_router_worker_queue_depth gauge\n");
    for (int i = 0; i < MAX_WORKERS; i++)
        if (r->workers[i].used)
            infd_strbuf_printf(b, "infd_router_worker_queue_depth{worker=\"%s\"} %u\n",
                               r->workers[i].id, r->workers[i].queued_hb);
    infd_strbuf_puts(b, "# HELP infd_router_inflight Calls this router has at the worker.\n"
                        "# TYPE infd_router_inflight gauge\n");
    for (int i = 0; i < MAX_WORKERS; i++)
        if (r->workers[i].used)
            infd_strbuf_printf(b, "infd_router_inflight{worker=\"%s\"} %d\n", r->workers[i].id,
                               r->workers[i].outstanding);
    counter_family(b, r, "requests_total", "Calls sent to the worker.",
                   offsetof(rworker, n_requests));
    counter_family(b, r, "failures_total",
                   "Calls the worker answered with an error, or lost twice.",
                   offsetof(rworker, n_failures));
    counter_family(b, r, "retries_total", "Calls sent again elsewhere when the worker died.",
                   offsetof(rworker, n_retries));
    counter_family(b, r, "heartbeats_missed_total",
                   "Times the worker missed 3 heartbeats and was not routed to.",
                   offsetof(rworker, n_missed));
    infd_strbuf_printf(b,
                       "# HELP infd_router_evictions_total Workers dropped because their key "
                       "left etcd.\n# TYPE infd_router_evictions_total counter\n"
                       "infd_router_evictions_total %" PRIu64 "\n",
                       r->n_evictions);
    infd_strbuf_printf(b,
                       "# HELP infd_router_rejected_total Requests refused at once: over a rate "
                       "limit, or over --max-inflight.\n"
                       "# TYPE infd_router_rejected_total counter\n"
                       "infd_router_rejected_total{reason=\"rate_limit\"} %" PRIu64 "\n"
                       "infd_router_rejected_total{reason=\"overload\"} %" PRIu64 "\n",
                       (uint64_t)atomic_load(&r->n_rate_limited),
                       (uint64_t)atomic_load(&r->n_overload));
    infd_strbuf_puts(b, "# HELP infd_router_request_duration_seconds From sending a call to the "
                        "worker to its result.\n"
                        "# TYPE infd_router_request_duration_seconds histogram\n");
    for (int i = 0; i < MAX_WORKERS; i++) {
        const rworker *w = &r->workers[i];
        if (!w->used)
            continue;
        uint64_t cum = 0;
        for (size_t k = 0; k <= N_LAT_BOUNDS; k++) {
            cum += w->lat_buckets[k];
            if (k < N_LAT_BOUNDS)
                infd_strbuf_printf(b,
                                   "infd_router_request_duration_seconds_bucket{worker=\"%s\","
                                   "le=\"%g\"} %" PRIu64 "\n",
                                   w->id, LAT_BOUNDS_US[k] / 1e6, cum);
            else
                infd_strbuf_printf(b,
                                   "infd_router_request_duration_seconds_bucket{worker=\"%s\","
                                   "le=\"+Inf\"} %" PRIu64 "\n",
                                   w->id, cum);
        }
        infd_strbuf_printf(b,
                           "infd_router_request_duration_seconds_sum{worker=\"%s\"} %.9f\n"
                           "infd_router_request_duration_seconds_count{worker=\"%s\"} %" PRIu64
                           "\n",
                           w->id, w->lat_sum_s, w->id, w->lat_count);
    }
    pthread_mutex_lock(&j->mu);
    j->done = true;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

infd_status cluster_router_metrics(void *user, char **out, size_t *n, infd_error *err)
{
    cluster_router *r = user;
    *out = NULL;
    *n = 0;
    render_job *j = infd_calloc(1, sizeof(*j));
    if (!j)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "router metrics: out of memory");
    j->r = r;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    bool done = false;
    if (event_base_once(r->base, -1, EV_TIMEOUT, on_render, j, NULL) == 0) {
        pthread_mutex_lock(&j->mu);
        while (!j->done)
            if (pthread_cond_timedwait(&j->cv, &j->mu, &until) != 0)
                break;
        done = j->done;
        pthread_mutex_unlock(&j->mu);
    }
    if (!done) {
        /* The loop may still run it: the job is left to it (a small leak
         * on a stuck loop beats a use after free). */
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE,
                              "router metrics: the loop did not answer in 2 s");
    }
    infd_status st = INFD_STATUS_OK;
    if (j->text.oom)
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "router metrics: out of memory");
    else
        *out = infd_strbuf_take(&j->text, n);
    infd_strbuf_fini(&j->text);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    infd_free(j);
    return st;
}

void cluster_router_stop(cluster_router *r)
{
    if (!r)
        return;
    /* Repository requests in flight return (refused), then no more come. */
    atomic_store(&r->closing, true);
    if (r->thread_started)
        event_base_once(r->base, -1, EV_TIMEOUT, on_close, r, NULL);
    infd_server_set_repository_hook(r->server, NULL, NULL);
    if (r->loader_started) {
        pthread_mutex_lock(&r->mu);
        r->stop_loader = true;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->loader, NULL);
    }
    if (r->thread_started) {
        event_base_once(r->base, -1, EV_TIMEOUT, on_stop, r->base, NULL);
        pthread_join(r->thread, NULL);
    }
    router_free(r);
}

infd_status cluster_router_start(infd_server *server, const cluster_router_options *o,
                                 cluster_router **out, infd_error *err)
{
    *out = NULL;
    if (remote_kind.user)
        return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED, "router: one per process");
    if (!o->etcd || !o->repository)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "router: --etcd and a repository folder are needed");
    cluster_router *r = infd_calloc(1, sizeof(*r));
    if (!r)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "router: out of memory");
    infd_status st = INFD_STATUS_OK;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    infd_freelist_init(&r->records, sizeof(rcall), 0, offsetof(rcall, next), 4096);
    r->server = server;
    remote_kind.user = r;
    if (!remote_registered) {
        if ((st = infd_model_kind_register(&remote_kind, err)) != INFD_STATUS_OK) {
            remote_kind.user = NULL;
            infd_freelist_fini(&r->records);
            pthread_mutex_destroy(&r->mu);
            pthread_cond_destroy(&r->cv);
            infd_free(r);
            return st;
        }
        remote_registered = true;
    }
    snprintf(r->prefix, sizeof(r->prefix), "%s", o->prefix ? o->prefix : "/infd");
    snprintf(r->repository, sizeof(r->repository), "%s", o->repository);
    r->policy = o->policy;
    r->max_inflight = o->max_inflight > 0 ? o->max_inflight : 4096;
    r->request_log = o->request_log;
    if ((st = cluster_ratelimit_create(&r->limits, err)) != INFD_STATUS_OK)
        goto fail;
    for (int i = 0; i < o->n_rate_limits; i++)
        if ((st = cluster_ratelimit_add(r->limits, o->rate_limits[i], err)) != INFD_STATUS_OK)
            goto fail;
    r->calls = infd_calloc(MAX_CALLS, sizeof(rcall *));
    r->seqs = infd_calloc(MAX_SEQS, sizeof(rseq));
    if (!r->calls || !r->seqs || evthread_use_pthreads() != 0 || !(r->base = event_base_new()) ||
        !(r->tick = event_new(r->base, -1, EV_PERSIST, on_tick, r)) ||
        !infd_mailbox_init(&r->calls_box, r->base, offsetof(rcall, next), on_calls, r) ||
        !infd_mailbox_init(&r->ctl_box, r->base, offsetof(rctl, next), on_ctls, r) ||
        !(r->zctx = zmq_ctx_new())) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "router: cannot make the event loop");
        goto fail;
    }
    if ((st = etcd_client_create(r->base, o->etcd, &r->etcd, err)) != INFD_STATUS_OK)
        goto fail;
    char prefix[160];
    snprintf(prefix, sizeof(prefix), "%s/workers/", r->prefix);
    etcd_watch_callbacks cbs = { on_sync, on_events, on_watch_state, r };
    if ((st = etcd_watch_start(r->etcd, prefix, &cbs, &r->watch, err)) != INFD_STATUS_OK)
        goto fail;
    struct timeval tv = { 0, TICK_MS * 1000 };
    event_add(r->tick, &tv);
    if (pthread_create(&r->loader, NULL, loader_main, r) != 0) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "router: cannot start its loader");
        goto fail;
    }
    r->loader_started = true;
    pthread_setname_np(r->loader, "router-load");
    if (pthread_create(&r->thread, NULL, loop_main, r) != 0) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "router: cannot start its loop");
        goto fail;
    }
    r->thread_started = true;
    pthread_setname_np(r->thread, "router");
    infd_server_set_repository_hook(server, repo_hook, r);
    infd_log(INFD_LOG_LEVEL_INFO, "router: watching %s at etcd %s", prefix, o->etcd);
    *out = r;
    return INFD_STATUS_OK;
fail:
    cluster_router_stop(r);
    return st;
}
