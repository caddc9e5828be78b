/*
 * redisq.c - the Redis job queue frontend (see redisq.h and docs/REDIS.md).
 *
 * Everything here runs on the loop thread except on_infer_done (a runtime
 * worker: it only queues the job back, like the HTTP frontend does) and
 * the metrics render (atomics and the append-only model table).
 *
 * A job's life, with the Redis commands in capitals:
 *
 *   XREADGROUP / XAUTOCLAIM ─▶ start: decode, request, infd_infer_async
 *        │                        │ malformed: error result
 *        │                        ▼
 *        │                  on_infer_done (worker) ─▶ done list ─▶ loop
 *        │                        │ final: SET results NX EX, PUBLISH, XACK
 *        │                        │ retryable: HSET errors, left pending
 *        ▼
 *   delivered > max_deliveries: HGET errors, XADD dead, SET results, XACK
 *
 * A job is released (its slot of the model's in-flight count freed) when
 * its XACK is answered, or when it is left pending. If the connection goes
 * while its writes are outstanding, it waits in the write list and the
 * writes are made again on the next connection: SET ... NX and XACK are
 * both idempotent.
 */
#include "frontends/redisq/redisq.h"

#include <ctype.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "frontends/common/mailbox.h"
#include "frontends/http/kserve_json.h"
#include "frontends/redisq/job.h"

#define MAX_MODELS     256
#define MAX_FIELDS     32
#define TICK_MS        20
#define SCAN_MS        500
#define INFO_MS        1000
#define READ_BLOCK_MS  1000
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define STOP_WAIT_MS   10000
#define QUIET_WAIT_MS  2000 /* quiesce: for the reads in flight to answer */
#define KEY_BYTES      512
#define SHORT_FIELD    256 /* an oversized job's fields kept for its error */

typedef struct rq_model rq_model;
typedef struct rq_job rq_job;

/* A connection and its reconnect schedule. */
typedef struct rq_conn {
    redisAsyncContext *ac; /* NULL while down */
    bool up;               /* connected (the connect callback said so) */
    uint64_t next_try_ns;
    int backoff_ms;
    infd_redisq *q;
    bool auth_refused;    /* AUTH failed: the close is not a lost connection */
    char auth_error[160]; /* Redis's answer to AUTH (never the password) */
} rq_conn;

struct rq_job {
    rq_job *prev, *next; /* the model's in-flight list */
    rq_job *link;        /* the done, write, retry or claim list */
    infd_redisq *q;
    rq_model *m;
    char entry[48];
    /* The entry's fields, copied (hiredis frees the reply after the
     * callback; binary inputs are borrowed from here until completion). */
    uint8_t *copy;
    size_t copy_cap;
    int n_fields;
    size_t oversize; /* the entry's bytes when over max_job_bytes (only short fields kept) */
    const char *fp[MAX_FIELDS], *vp[MAX_FIELDS];
    size_t fl[MAX_FIELDS], vl[MAX_FIELDS];
    redisq_fields fields;
    kserve_request kr;
    infd_model *model;
    infd_request *req;
    int64_t deliveries;
    int64_t submitted_ms, started_ms, finished_ms;
    uint64_t submit_real_ns;
    /* The outcome. */
    infd_status status;
    char message[512];
    bool final; /* store a result (else leave the entry pending) */
    bool dead;  /* dead-letter it first */
    char last_error[512];
    infd_strbuf result;
    int writes; /* replies still awaited */
    bool write_failed;
};

struct rq_model {
    char name[128];
    char stream[KEY_BYTES], dead[KEY_BYTES], errors[KEY_BYTES], channel[KEY_BYTES];
    infd_redisq *q;
    rq_conn rd;
    bool present; /* READY at the last scan */
    bool group_ready, group_creating;
    bool reading, claiming;
    long long rd_id; /* the read connection's CLIENT ID (0: not known) */
    /* After (re)connecting, the consumer's own pending entries are read
     * first (XREADGROUP ... 0): ones delivered while a reply was lost with
     * the connection would otherwise wait for a claim. */
    bool own_pel, reading_pel;
    char pel_from[48];
    size_t pel_asked;
    int inflight, cap;
    rq_job inflight_head; /* sentinel */
    rq_job *retry;        /* submit refused for now (queue full): tried again */
    rq_job *claimed;      /* claimed, waiting for their delivery counts */
    uint64_t next_claim_ns, next_info_ns;
    _Atomic uint64_t n_read, n_completed, n_failed, n_claimed, n_dead, n_duplicates, n_retried;
    _Atomic int64_t lag, pending;
};

struct infd_redisq {
    infd_server *server;
    char host[256];
    int port, db;
    char user[128], pass[256]; /* AUTH [user] pass when pass is set; zeroed at free */
    char prefix[128], group[128], consumer[320];
    char *models_filter; /* ",a,b," or NULL */
    int claim_idle_ms, max_deliveries, result_ttl_s, max_inflight;
    size_t max_job_bytes;
    bool publish;

    struct event_base *base;
    struct event *tick;
    pthread_t thread;
    bool thread_started;
    rq_conn cmd;
    rq_model *models[MAX_MODELS];
    _Atomic int n_models;
    uint64_t next_scan_ns;
    rq_job *writes; /* final jobs waiting for the command connection */
    rq_job *free_jobs;
    int n_jobs_out;  /* jobs not on the free list */
    bool stop_reads; /* quiesced: loop-thread copy */
    uint64_t quiet_deadline_ns;
    bool stopping;
    uint64_t stop_deadline_ns;

    infd_mailbox done; /* completed by workers, for the loop */
    pthread_mutex_t quiet_mu;
    pthread_cond_t quiet_cv; /* with quiet_mu: quiet set */
    bool quiet;              /* no read in flight after quiesce */
    _Atomic bool quiesce;
    _Atomic uint64_t n_reconnects;
    _Atomic bool connected;
};

static _Atomic int next_instance;

static const char *const DEAD_NO_ERROR = "no error was recorded";

/* ------------------------------------------------------------------------- */
/* Options                                                                   */
/* ------------------------------------------------------------------------- */

void infd_redisq_options_init(infd_redisq_options *o)
{
    memset(o, 0, sizeof(*o));
    o->url = "redis://127.0.0.1:6379";
    o->prefix = "infd";
    o->group = "infd";
    o->claim_idle_ms = 30000;
    o->max_deliveries = 3;
    o->result_ttl_s = 86400;
    o->max_job_bytes = 64u << 20;
}

/* Percent-decodes URL credentials into out (cap bytes): false when they do
 * not fit or a '%' is not followed by two hex digits. */
static bool url_decode(const char *p, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '%') {
            if (i + 2 >= n || !isxdigit((unsigned char)p[i + 1]) ||
                !isxdigit((unsigned char)p[i + 2]))
                return false;
            char hex[3] = { p[i + 1], p[i + 2], 0 };
            c = (unsigned char)strtol(hex, NULL, 16);
            i += 2;
        }
        if (c == 0 || k + 1 >= cap)
            return false;
        out[k++] = (char)c;
    }
    out[k] = '\0';
    return true;
}

/* redis://[USER[:PASSWORD]@]HOST[:PORT][/DB], HOST possibly [IPv6]; the
 * password may be left to INFD_REDIS_PASSWORD (infd_redisq_start). Error
 * text shows the URL with its credentials replaced by "***". */
static infd_status parse_url(infd_redisq *q, const char *url, infd_error *err)
{
    const char *p = url;
    char shown[240];
    const char *at = strrchr(url, '@'), *scheme = strstr(url, "://");
    size_t keep = scheme ? (size_t)(scheme + 3 - url) : 0;
    if (at && (size_t)(at - url) >= keep)
        snprintf(shown, sizeof(shown), "%.*s***%.200s", (int)(keep < 20 ? keep : 20), url, at);
    else
        snprintf(shown, sizeof(shown), "%.200s", url);
    if (strncmp(p, "redis://", 8) != 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "redis: URL '%s' does not start with redis://", shown);
    p += 8;
    q->user[0] = q->pass[0] = '\0';
    if (at && at >= p) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        const char *user_end = colon ? colon : at;
        if (!url_decode(p, (size_t)(user_end - p), q->user, sizeof(q->user)) ||
            (colon && !url_decode(colon + 1, (size_t)(at - colon - 1), q->pass, sizeof(q->pass))))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "redis: URL '%s': the user name (at most %zu bytes) or the "
                                  "password (at most %zu bytes) is too long or badly %%-encoded",
                                  shown, sizeof(q->user) - 1, sizeof(q->pass) - 1);
        p = at + 1;
    }
    const char *host = p, *host_end;
    if (*p == '[') {
        host = ++p;
        host_end = strchr(p, ']');
        if (!host_end)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "redis: URL '%s': no ']' after the IPv6 address", shown);
        p = host_end + 1;
    } else {
        host_end = p + strcspn(p, ":/");
        p = host_end;
    }
    size_t hn = (size_t)(host_end - host);
    if (hn == 0 || hn >= sizeof(q->host))
        return infd_error_set(
            err, INFD_STATUS_INVALID_ARGUMENT,
            "redis: URL '%s': no host (redis://[USER[:PASSWORD]@]HOST[:PORT][/DB])", shown);
    memcpy(q->host, host, hn);
    q->host[hn] = '\0';
    q->port = 6379;
    q->db = 0;
    if (*p == ':') {
        char *end;
        errno = 0;
        long port = strtol(p + 1, &end, 10);
        if (end == p + 1 || errno || port < 1 || port > 65535 || (*end && *end != '/'))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "redis: URL '%s': the port is not 1..65535", shown);
        q->port = (int)port;
        p = end;
    }
    if (*p == '/' && p[1]) {
        char *end;
        errno = 0;
        long db = strtol(p + 1, &end, 10);
        if (end == p + 1 || errno || db < 0 || db > 1000000 || *end)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "redis: URL '%s': the database is not a number", shown);
        q->db = (int)db;
    } else if (*p && strcmp(p, "/") != 0) {
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "redis: URL '%s': unexpected '%.40s' after the host", shown, p);
    }
    return INFD_STATUS_OK;
}

static bool plain_name(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s <= ' ' || *s == 0x7f || *s == '{' || *s == '}')
            return false;
    return true;
}

/* ------------------------------------------------------------------------- */
/* Jobs                                                                      */
/* ------------------------------------------------------------------------- */

static rq_job *job_get(infd_redisq *q, rq_model *m)
{
    rq_job *j = q->free_jobs;
    if (j) {
        q->free_jobs = j->link;
    } else {
        j = infd_calloc(1, sizeof(*j));
        if (!j)
            return NULL;
        kserve_request_init(&j->kr);
        infd_strbuf_init(&j->result);
    }
    j->q = q;
    j->m = m;
    j->prev = j->next = j->link = NULL;
    j->n_fields = 0;
    j->oversize = 0;
    j->model = NULL;
    j->req = NULL;
    j->deliveries = 1;
    j->submitted_ms = j->started_ms = j->finished_ms = 0;
    j->status = INFD_STATUS_OK;
    j->message[0] = j->last_error[0] = '\0';
    j->final = j->dead = j->write_failed = false;
    j->writes = 0;
    j->entry[0] = '\0';
    memset(&j->fields, 0, sizeof(j->fields));
    infd_strbuf_reset(&j->result);
    q->n_jobs_out++;
    return j;
}

static void job_free_all(rq_job *j)
{
    kserve_request_fini(&j->kr);
    infd_strbuf_fini(&j->result);
    infd_free(j->copy);
    infd_free(j);
}

static void kick_read(rq_model *m);
static void conn_close(rq_conn *c);

/* Returns the job's slot to its model and the job to the free list. */
static void job_release(rq_job *j)
{
    infd_redisq *q = j->q;
    rq_model *m = j->m;
    if (j->req)
        infd_request_destroy(j->req);
    if (j->model)
        infd_model_release(j->model);
    j->req = NULL;
    j->model = NULL;
    if (j->prev) {
        j->prev->next = j->next;
        j->next->prev = j->prev;
        j->prev = j->next = NULL;
        m->inflight--;
    }
    j->link = q->free_jobs;
    q->free_jobs = j;
    q->n_jobs_out--;
    kick_read(m);
}

static void track(rq_model *m, rq_job *j)
{
    j->next = &m->inflight_head;
    j->prev = m->inflight_head.prev;
    j->prev->next = j;
    m->inflight_head.prev = j;
    m->inflight++;
}

static bool holds_entry(rq_model *m, const char *entry, size_t n)
{
    for (rq_job *j = m->inflight_head.next; j != &m->inflight_head; j = j->next)
        if (strlen(j->entry) == n && memcmp(j->entry, entry, n) == 0)
            return true;
    return false;
}

/* Copies a stream entry ([id, [field, value, ...]]) into `j`. */
static infd_status job_copy_entry(rq_job *j, const redisReply *e, infd_error *err)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
        e->element[0]->type != REDIS_REPLY_STRING || e->element[0]->len >= sizeof(j->entry))
        return infd_error_set(err, INFD_STATUS_INTERNAL, "unexpected stream entry from Redis");
    memcpy(j->entry, e->element[0]->str, e->element[0]->len);
    j->entry[e->element[0]->len] = '\0';
    j->submitted_ms = redisq_entry_ms(j->entry, strlen(j->entry));
    const redisReply *kv = e->element[1];
    if (kv->type != REDIS_REPLY_ARRAY)
        return infd_error_set(err, INFD_STATUS_NOT_FOUND, "entry %s was deleted", j->entry);
    if (kv->elements % 2 != 0)
        return infd_error_set(err, INFD_STATUS_INTERNAL, "entry %s: odd field count", j->entry);
    size_t pairs = kv->elements / 2;
    if (pairs > MAX_FIELDS)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "job at entry %s: %zu fields, at most %d", j->entry, pairs,
                              MAX_FIELDS);
    size_t total = 0, entry_bytes = 0;
    for (size_t i = 0; i < kv->elements; i++) {
        if (kv->element[i]->type != REDIS_REPLY_STRING)
            return infd_error_set(err, INFD_STATUS_INTERNAL, "entry %s: a field is not a string",
                                  j->entry);
        entry_bytes += kv->element[i]->len;
    }
    /* Too big: only the short fields are kept, for the error result. */
    bool over = entry_bytes > j->q->max_job_bytes;
    for (size_t i = 0; i < kv->elements; i++)
        if (!over || kv->element[i | 1]->len <= SHORT_FIELD)
            total += kv->element[i]->len + 1;
    j->oversize = over ? entry_bytes : 0;
    if (total > j->copy_cap) {
        uint8_t *c = infd_realloc(j->copy, total);
        if (!c)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                                  "out of memory for a job of %zu bytes", total);
        j->copy = c;
        j->copy_cap = total;
    }
    size_t off = 0, kept = 0;
    for (size_t p = 0; p < pairs; p++) {
        if (over && kv->element[2 * p + 1]->len > SHORT_FIELD)
            continue;
        size_t i = kept++;
        for (int k = 0; k < 2; k++) {
            const redisReply *r = kv->element[2 * p + (size_t)k];
            memcpy(j->copy + off, r->str, r->len);
            j->copy[off + r->len] = '\0';
            if (k == 0) {
                j->fp[i] = (const char *)j->copy + off;
                j->fl[i] = r->len;
            } else {
                j->vp[i] = (const char *)j->copy + off;
                j->vl[i] = r->len;
            }
            off += r->len + 1;
        }
    }
    j->n_fields = (int)kept;
    return INFD_STATUS_OK;
}

static int64_t now_ms(void)
{
    return (int64_t)(infd_clock_realtime_ns() / 1000000u);
}

/* Failures a later attempt may not meet: left pending for a claim. The
 * rest are the job's own fault (or its deadline) and final. */
static bool retryable(infd_status st)
{
    switch (st) {
    case INFD_STATUS_OK:
    case INFD_STATUS_INVALID_ARGUMENT:
    case INFD_STATUS_NOT_FOUND:
    case INFD_STATUS_DEADLINE_EXCEEDED:
    case INFD_STATUS_UNIMPLEMENTED:
        return false;
    default:
        return true;
    }
}

static void write_result(infd_redisq *q, rq_job *j);
static void queue_write(infd_redisq *q, rq_job *j);

/* The job ends here with an error result (final) or is left pending. */
static void job_fail(rq_job *j, infd_status st, const char *msg)
{
    j->status = st;
    snprintf(j->message, sizeof(j->message), "%s", msg && *msg ? msg : infd_status_str(st));
    j->final = !retryable(st);
    if (!j->started_ms)
        j->started_ms = now_ms();
    j->finished_ms = now_ms();
    queue_write(j->q, j);
}

static void on_infer_done(void *user, infd_request *req, infd_status status, const char *message)
{
    (void)req;
    rq_job *j = user;
    infd_redisq *q = j->q;
    j->status = status;
    snprintf(j->message, sizeof(j->message), "%s", message ? message : "");
    j->finished_ms = now_ms();
    infd_mailbox_post(&q->done, j);
}

static void job_submit(rq_job *j);

/* Decodes and submits the job; on failure writes or leaves it. */
static void job_start(rq_job *j)
{
    infd_redisq *q = j->q;
    rq_model *m = j->m;
    infd_error err;
    infd_error_clear(&err);
    j->started_ms = 0;
    infd_status pst =
        redisq_fields_parse(j->fp, j->fl, j->vp, j->vl, j->n_fields, &j->fields, &err);
    if (j->oversize) {
        pst = INFD_STATUS_INVALID_ARGUMENT;
        infd_error_set(&err, pst, "job %s: %zu bytes, more than --redis-max-job-bytes %zu",
                       j->fields.id[0] ? j->fields.id : "(no id)", j->oversize, q->max_job_bytes);
    }
    if (pst != INFD_STATUS_OK) {
        if (!j->fields.id[0]) {
            /* No id: no result key to write the error to. */
            infd_log(INFD_LOG_LEVEL_WARN, "redis: %s entry %s: %s: dead-lettered", m->stream,
                     j->entry, err.msg);
            j->dead = true;
            snprintf(j->last_error, sizeof(j->last_error), "%s", err.msg);
        }
        job_fail(j, INFD_STATUS_INVALID_ARGUMENT, err.msg);
        return;
    }
    if (j->fields.model && (j->fields.model_n != strlen(m->name) ||
                            memcmp(j->fields.model, m->name, j->fields.model_n))) {
        snprintf(err.msg, sizeof(err.msg), "job %s: field model '%.*s' is not this stream's '%s'",
                 j->fields.id, (int)(j->fields.model_n > 128 ? 128 : j->fields.model_n),
                 j->fields.model, m->name);
        job_fail(j, INFD_STATUS_INVALID_ARGUMENT, err.msg);
        return;
    }
    if (redisq_job_decode(&j->fields, &j->kr, &err) != INFD_STATUS_OK) {
        job_fail(j, err.code, err.msg);
        return;
    }
    if (infd_server_model_acquire(q->server, m->name, j->fields.version, &j->model, &err) !=
        INFD_STATUS_OK) {
        j->model = NULL;
        job_fail(j, err.code, err.msg);
        return;
    }
    kserve_request *r = &j->kr;
    if (infd_request_create(j->model, &j->req, &err) != INFD_STATUS_OK) {
        j->req = NULL;
        job_fail(j, err.code, err.msg);
        return;
    }
    /* The job's own fields win over the request's parameters; its id is
     * the request's. */
    if (j->fields.timeout_us >= 0)
        r->timeout_us = j->fields.timeout_us;
    if (j->fields.priority >= 0)
        r->priority = j->fields.priority;
    infd_status st = kserve_request_apply(r, j->req, &err);
    infd_request_set_id(j->req, j->fields.id);
    for (int i = 0; st == INFD_STATUS_OK && i < r->n_inputs; i++) {
        kserve_input *ki = &r->inputs[i];
        st = infd_request_add_input(j->req, ki->name, ki->dtype, ki->shape, ki->rank, ki->data,
                                    ki->nbytes, &err);
    }
    if (st == INFD_STATUS_OK)
        st = kserve_request_add_outputs(r, j->req, &err);
    if (st != INFD_STATUS_OK) {
        /* What the job asked for does not fit the model: final. */
        job_fail(j, err.code == INFD_STATUS_OUT_OF_MEMORY ? err.code : INFD_STATUS_INVALID_ARGUMENT,
                 err.msg);
        return;
    }
    job_submit(j);
}

/* Hands the built request to the scheduler; a refusal for now (queue
 * full, model reloading) is tried again at the next tick. */
static void job_submit(rq_job *j)
{
    infd_redisq *q = j->q;
    rq_model *m = j->m;
    infd_error err;
    infd_error_clear(&err);
    j->submit_real_ns = infd_clock_realtime_ns();
    infd_status st = infd_infer_async(j->req, on_infer_done, j, &err);
    if (st == INFD_STATUS_OK)
        return;
    if ((st == INFD_STATUS_RESOURCE_EXHAUSTED || st == INFD_STATUS_UNAVAILABLE) && !q->stop_reads) {
        /* The model's queue is full or it is reloading: try again soon,
         * holding the job's slot (so reads slow down). */
        j->link = m->retry;
        m->retry = j;
        return;
    }
    job_fail(j, st, err.msg);
}

/* ------------------------------------------------------------------------- */
/* Results                                                                   */
/* ------------------------------------------------------------------------- */

static void build_result(infd_redisq *q, rq_job *j)
{
    infd_strbuf *b = &j->result;
    infd_strbuf_reset(b);
    infd_strbuf_puts(b, "{\"id\":");
    kserve_write_cstr(b, j->fields.id);
    bool ok = j->status == INFD_STATUS_OK && !j->dead;
    infd_strbuf_puts(b, ok ? ",\"status\":\"ok\"" : ",\"status\":\"error\"");
    if (!ok) {
        infd_strbuf_puts(b, ",\"error\":");
        kserve_write_cstr(b, j->message);
        infd_strbuf_puts(b, ",\"code\":");
        kserve_write_cstr(b, j->dead ? "DEAD_LETTERED" : infd_status_name(j->status));
    }
    infd_strbuf_puts(b, ",\"model\":");
    kserve_write_cstr(b, j->m->name);
    if (j->model)
        infd_strbuf_printf(b, ",\"model_version\":\"%" PRId64 "\"", infd_model_version(j->model));
    infd_strbuf_puts(b, ",\"worker\":");
    kserve_write_cstr(b, q->consumer);
    infd_strbuf_printf(b, ",\"deliveries\":%" PRId64, j->deliveries);
    infd_strbuf_printf(
        b, ",\"submitted_at\":%" PRId64 ",\"started_at\":%" PRId64 ",\"finished_at\":%" PRId64,
        j->submitted_ms, j->started_ms, j->finished_ms);
    size_t bin_total = 0;
    if (ok) {
        infd_strbuf_puts(b, ",\"outputs\":[");
        int n_out = infd_request_n_outputs(j->req);
        for (int i = 0; i < n_out; i++) {
            const char *name = NULL;
            infd_tensor t;
            if (infd_request_output(j->req, i, &name, &t) != INFD_STATUS_OK)
                continue;
            if (i)
                infd_strbuf_putc(b, ',');
            kserve_write_output_head(b, name, &t);
            if (kserve_output_is_binary(&j->kr, name)) {
                infd_strbuf_printf(b, ",\"parameters\":{\"binary_data_size\":%zu}}", t.nbytes);
                bin_total += t.nbytes;
            } else {
                infd_strbuf_puts(b, ",\"data\":");
                kserve_write_data(b, &t, infd_tensor_numel(&t));
                infd_strbuf_putc(b, '}');
            }
        }
        infd_strbuf_putc(b, ']');
    }
    infd_strbuf_putc(b, '}');
    if (bin_total) {
        /* The binary outputs follow the JSON and a newline, in order. */
        infd_strbuf_putc(b, '\n');
        int n_out = infd_request_n_outputs(j->req);
        for (int i = 0; i < n_out; i++) {
            const char *name = NULL;
            infd_tensor t;
            if (infd_request_output(j->req, i, &name, &t) == INFD_STATUS_OK &&
                kserve_output_is_binary(&j->kr, name))
                infd_strbuf_put(b, t.data, t.nbytes);
        }
    }
}

static void write_done(rq_job *j)
{
    infd_redisq *q = j->q;
    if (--j->writes > 0)
        return;
    if (j->write_failed) {
        /* The connection went: write it all again on the next one. */
        j->write_failed = false;
        j->link = q->writes;
        q->writes = j;
        return;
    }
    rq_model *m = j->m;
    if (!j->final)
        atomic_fetch_add(&m->n_retried, 1);
    else if (j->dead)
        atomic_fetch_add(&m->n_dead, 1);
    else if (j->status == INFD_STATUS_OK)
        atomic_fetch_add(&m->n_completed, 1);
    else
        atomic_fetch_add(&m->n_failed, 1);
    job_release(j);
}

static void on_write_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    (void)ac;
    rq_job *j = privdata;
    redisReply *reply = r;
    if (!reply)
        j->write_failed = true;
    else if (reply->type == REDIS_REPLY_ERROR)
        infd_log(INFD_LOG_LEVEL_WARN, "redis: job %s (entry %s of %s): %s", j->fields.id, j->entry,
                 j->m->stream, reply->str);
    write_done(j);
}

static void on_set_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    rq_job *j = privdata;
    redisReply *reply = r;
    if (reply && reply->type == REDIS_REPLY_NIL) {
        /* A result was there already: this was a second run. */
        atomic_fetch_add(&j->m->n_duplicates, 1);
    }
    on_write_reply(ac, r, privdata);
}

static void cmd_argv(infd_redisq *q, rq_job *j, redisCallbackFn *fn, int argc, const char **argv,
                     const size_t *len)
{
    j->writes++;
    if (redisAsyncCommandArgv(q->cmd.ac, fn, j, argc, argv, len) != REDIS_OK) {
        j->write_failed = true;
        j->writes--;
    }
}

/* The job's writes, pipelined: [XADD dead], [SET result], [HDEL error],
 * [PUBLISH], XACK. */
static void write_result(infd_redisq *q, rq_job *j)
{
    rq_model *m = j->m;
    char key[KEY_BYTES + REDISQ_ID_BYTES], ttl[24];
    j->writes = 1; /* held while queuing, so replies cannot finish it early */
    if (j->dead) {
        const char *argv[3 + 2 * MAX_FIELDS + 8];
        size_t len[3 + 2 * MAX_FIELDS + 8];
        int n = 0;
        char deliveries[24];
        argv[n] = "XADD", len[n++] = 4;
        argv[n] = m->dead, len[n++] = strlen(m->dead);
        argv[n] = "*", len[n++] = 1;
        for (int i = 0; i < j->n_fields; i++) {
            argv[n] = j->fp[i], len[n++] = j->fl[i];
            argv[n] = j->vp[i], len[n++] = j->vl[i];
        }
        snprintf(deliveries, sizeof(deliveries), "%" PRId64, j->deliveries);
        argv[n] = "infd_entry", len[n++] = 10;
        argv[n] = j->entry, len[n++] = strlen(j->entry);
        argv[n] = "infd_deliveries", len[n++] = 15;
        argv[n] = deliveries, len[n++] = strlen(deliveries);
        argv[n] = "infd_error", len[n++] = 10;
        argv[n] = j->message, len[n++] = strlen(j->message);
        argv[n] = "infd_last_error", len[n++] = 15;
        argv[n] = j->last_error, len[n++] = strlen(j->last_error);
        cmd_argv(q, j, on_write_reply, n, argv, len);
    }
    if (j->final && j->fields.id[0]) {
        build_result(q, j);
        if (j->result.oom) {
            infd_strbuf_reset(&j->result);
            infd_strbuf_printf(&j->result,
                               "{\"id\":\"%s\",\"status\":\"error\",\"error\":\"out of memory "
                               "for the result\",\"code\":\"OUT_OF_MEMORY\"}",
                               j->fields.id);
        }
        snprintf(key, sizeof(key), "results:%s", j->fields.id);
        snprintf(ttl, sizeof(ttl), "%d", q->result_ttl_s);
        const char *argv[] = { "SET", key, infd_strbuf_str(&j->result), "NX", "EX", ttl };
        size_t len[] = { 3, strlen(key), j->result.len, 2, 2, strlen(ttl) };
        cmd_argv(q, j, on_set_reply, 6, argv, len);
    }
    if (!j->final) {
        /* Left pending: the error is kept for whoever gives up on it. */
        const char *argv[] = { "HSET", m->errors, j->entry, j->message };
        size_t len[] = { 4, strlen(m->errors), strlen(j->entry), strlen(j->message) };
        cmd_argv(q, j, on_write_reply, 4, argv, len);
        infd_log(INFD_LOG_LEVEL_WARN,
                 "redis: job %s (entry %s of %s): %s: left pending for a later attempt",
                 j->fields.id, j->entry, m->stream, j->message);
        write_done(j);
        return;
    }
    if (j->deliveries > 1) {
        const char *argv[] = { "HDEL", m->errors, j->entry };
        size_t len[] = { 4, strlen(m->errors), strlen(j->entry) };
        cmd_argv(q, j, on_write_reply, 3, argv, len);
    }
    if (q->publish && j->fields.id[0]) {
        const char *argv[] = { "PUBLISH", m->channel, j->fields.id };
        size_t len[] = { 7, strlen(m->channel), strlen(j->fields.id) };
        cmd_argv(q, j, on_write_reply, 3, argv, len);
    }
    const char *argv[] = { "XACK", m->stream, q->group, j->entry };
    size_t len[] = { 4, strlen(m->stream), strlen(q->group), strlen(j->entry) };
    cmd_argv(q, j, on_write_reply, 4, argv, len);
    write_done(j);
}

static void queue_write(infd_redisq *q, rq_job *j)
{
    if (q->cmd.up) {
        write_result(q, j);
    } else {
        j->link = q->writes;
        q->writes = j;
    }
}

/* A job past max_deliveries: its last error first, then the dead letter. */
static void on_last_error(redisAsyncContext *ac, void *r, void *privdata)
{
    (void)ac;
    rq_job *j = privdata;
    redisReply *reply = r;
    if (!reply) {
        j->write_failed = false;
        j->writes = 0;
        j->link = j->q->writes; /* tried again on reconnect, as a dead letter */
        j->q->writes = j;
        return;
    }
    if (reply->type == REDIS_REPLY_STRING)
        snprintf(j->last_error, sizeof(j->last_error), "%.*s", (int)reply->len, reply->str);
    else
        snprintf(j->last_error, sizeof(j->last_error), "%s", DEAD_NO_ERROR);
    queue_write(j->q, j);
}

static void dead_letter(rq_job *j)
{
    infd_redisq *q = j->q;
    rq_model *m = j->m;
    /* The id, when the job has a usable one, for the error result. */
    infd_error err;
    redisq_fields_parse(j->fp, j->fl, j->vp, j->vl, j->n_fields, &j->fields, &err);
    j->dead = true;
    j->final = true;
    j->status = INFD_STATUS_UNAVAILABLE;
    snprintf(j->message, sizeof(j->message),
             "job %s: delivered %" PRId64 " times (more than --redis-max-deliveries %d) without "
             "a result: moved to %.200s",
             j->fields.id[0] ? j->fields.id : "(no id)", j->deliveries, q->max_deliveries, m->dead);
    j->started_ms = j->finished_ms = now_ms();
    infd_log(INFD_LOG_LEVEL_WARN, "redis: %s entry %s: %s", m->stream, j->entry, j->message);
    if (!q->cmd.up) {
        j->link = q->writes;
        q->writes = j;
        return;
    }
    const char *argv[] = { "HGET", m->errors, j->entry };
    size_t len[] = { 4, strlen(m->errors), strlen(j->entry) };
    if (redisAsyncCommandArgv(q->cmd.ac, on_last_error, j, 3, argv, len) != REDIS_OK) {
        j->link = q->writes;
        q->writes = j;
    }
}

/* ------------------------------------------------------------------------- */
/* Reading and claiming                                                      */
/* ------------------------------------------------------------------------- */

/* Takes one entry of a read or claim reply into a new job. */
static rq_job *take_entry(rq_model *m, const redisReply *e)
{
    infd_redisq *q = m->q;
    rq_job *j = job_get(q, m);
    if (!j) {
        infd_log(INFD_LOG_LEVEL_ERROR, "redis: %s: out of memory for a job: left pending",
                 m->stream);
        return NULL;
    }
    track(m, j);
    infd_error err;
    infd_error_clear(&err);
    infd_status st = job_copy_entry(j, e, &err);
    if (st == INFD_STATUS_NOT_FOUND) {
        /* Deleted from the stream (trimmed) while pending: nothing to run;
         * acknowledge it so it leaves the pending list. */
        j->final = true;
        j->status = INFD_STATUS_NOT_FOUND;
        queue_write(q, j);
        return NULL;
    }
    if (st != INFD_STATUS_OK) {
        infd_log(INFD_LOG_LEVEL_WARN, "redis: %s: %s", m->stream, err.msg);
        if (st == INFD_STATUS_INVALID_ARGUMENT && j->entry[0]) {
            j->dead = true;
            snprintf(j->last_error, sizeof(j->last_error), "%s", err.msg);
            job_fail(j, st, err.msg);
        } else {
            job_release(j); /* left pending */
        }
        return NULL;
    }
    atomic_fetch_add(&m->n_read, 1);
    return j;
}

static void on_read(redisAsyncContext *ac, void *r, void *privdata)
{
    (void)ac;
    rq_model *m = privdata;
    redisReply *reply = r;
    bool pel = m->reading_pel;
    m->reading = m->reading_pel = false;
    if (!reply)
        return; /* the connection went */
    if (reply->type == REDIS_REPLY_ERROR) {
        if (strncmp(reply->str, "NOGROUP", 7) == 0)
            m->group_ready = false; /* made again by the next tick */
        else
            infd_log(INFD_LOG_LEVEL_WARN, "redis: XREADGROUP %s: %s", m->stream, reply->str);
        return;
    }
    size_t got = 0, asked = m->pel_asked;
    if (reply->type == REDIS_REPLY_ARRAY) {
        for (size_t s = 0; s < reply->elements; s++) {
            const redisReply *st = reply->element[s];
            if (st->type != REDIS_REPLY_ARRAY || st->elements != 2 ||
                st->element[1]->type != REDIS_REPLY_ARRAY)
                continue;
            const redisReply *entries = st->element[1];
            for (size_t i = 0; i < entries->elements; i++) {
                const redisReply *e = entries->element[i];
                got++;
                if (pel) {
                    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
                        e->element[0]->type != REDIS_REPLY_STRING)
                        continue;
                    snprintf(m->pel_from, sizeof(m->pel_from), "%.*s", (int)e->element[0]->len,
                             e->element[0]->str);
                    if (holds_entry(m, e->element[0]->str, e->element[0]->len))
                        continue; /* ours, running or being written */
                }
                rq_job *j = take_entry(m, e);
                if (!j)
                    continue;
                if (pel) {
                    j->deliveries = 2; /* delivered before; its reply was lost */
                    atomic_fetch_add(&m->n_claimed, 1);
                }
                job_start(j);
            }
        }
    }
    if (pel && got < asked)
        m->own_pel = false; /* every entry of our own seen: new ones from here */
    if (m->q->stop_reads)
        conn_close(&m->rd); /* the last read, unblocked by the quiesce: its jobs started */
    else
        kick_read(m);
}

static void kick_read(rq_model *m)
{
    infd_redisq *q = m->q;
    if (m->reading || !m->rd.up || !m->group_ready || !m->present || q->stop_reads)
        return;
    int free_slots = m->cap - m->inflight;
    if (free_slots <= 0)
        return;
    char count[16], block[16];
    snprintf(count, sizeof(count), "%d", free_slots);
    snprintf(block, sizeof(block), "%d", READ_BLOCK_MS);
    const char *argv[] = { "XREADGROUP", "GROUP", q->group,  q->consumer, "COUNT", count,
                           "BLOCK",      block,   "STREAMS", m->stream,   ">" };
    int argc = 11;
    if (m->own_pel) {
        /* Our own pending entries after pel_from, without blocking. */
        argv[6] = "STREAMS";
        argv[7] = m->stream;
        argv[8] = m->pel_from;
        argc = 9;
        m->pel_asked = (size_t)free_slots;
    }
    size_t len[11];
    for (int i = 0; i < argc; i++)
        len[i] = strlen(argv[i]);
    if (redisAsyncCommandArgv(m->rd.ac, on_read, m, argc, argv, len) == REDIS_OK) {
        m->reading = true;
        m->reading_pel = m->own_pel;
    }
}

/* XPENDING over the claimed entries: their delivery counts. */
static void on_claim_counts(redisAsyncContext *ac, void *r, void *privdata)
{
    (void)ac;
    rq_model *m = privdata;
    redisReply *reply = r;
    rq_job *list = m->claimed;
    m->claimed = NULL;
    m->claiming = false;
    while (list) {
        rq_job *j = list;
        list = j->link;
        j->link = NULL;
        if (reply && reply->type == REDIS_REPLY_ARRAY) {
            for (size_t i = 0; i < reply->elements; i++) {
                const redisReply *row = reply->element[i];
                if (row->type == REDIS_REPLY_ARRAY && row->elements >= 4 &&
                    row->element[0]->type == REDIS_REPLY_STRING &&
                    strcmp(row->element[0]->str, j->entry) == 0 &&
                    row->element[3]->type == REDIS_REPLY_INTEGER)
                    j->deliveries = row->element[3]->integer;
            }
        } else {
            /* No counts (the connection went): left pending. */
            job_release(j);
            continue;
        }
        atomic_fetch_add(&m->n_claimed, 1);
        if (j->deliveries > m->q->max_deliveries)
            dead_letter(j);
        else
            job_start(j);
    }
}

static void on_claim(redisAsyncContext *ac, void *r, void *privdata)
{
    rq_model *m = privdata;
    infd_redisq *q = m->q;
    redisReply *reply = r;
    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
        reply->element[1]->type != REDIS_REPLY_ARRAY) {
        if (reply && reply->type == REDIS_REPLY_ERROR) {
            if (strncmp(reply->str, "NOGROUP", 7) == 0)
                m->group_ready = false;
            else
                infd_log(INFD_LOG_LEVEL_WARN, "redis: XAUTOCLAIM %s: %s", m->stream, reply->str);
        }
        m->claiming = false;
        return;
    }
    m->claiming = false;
    const redisReply *entries = reply->element[1];
    const char *first = NULL, *last = NULL;
    for (size_t i = 0; i < entries->elements; i++) {
        const redisReply *e = entries->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
            e->element[0]->type != REDIS_REPLY_STRING)
            continue;
        if (holds_entry(m, e->element[0]->str, e->element[0]->len))
            continue; /* ours and still running (a slow job): not a second run */
        rq_job *j = take_entry(m, e);
        if (!j)
            continue;
        j->link = m->claimed;
        m->claimed = j;
        if (!first)
            first = e->element[0]->str;
        last = e->element[0]->str;
    }
    if (!m->claimed)
        return;
    if (ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)) {
        on_claim_counts(NULL, NULL, m);
        return;
    }
    char count[16];
    snprintf(count, sizeof(count), "%zu", entries->elements);
    const char *argv[] = { "XPENDING", m->stream, q->group, first, last, count, q->consumer };
    size_t len[7];
    for (int i = 0; i < 7; i++)
        len[i] = strlen(argv[i]);
    if (redisAsyncCommandArgv(q->cmd.ac, on_claim_counts, m, 7, argv, len) == REDIS_OK)
        m->claiming = true;
    else
        on_claim_counts(NULL, NULL, m);
}

static void claim(rq_model *m)
{
    infd_redisq *q = m->q;
    int free_slots = m->cap - m->inflight;
    if (m->claiming || !q->cmd.up || !m->group_ready || free_slots <= 0 || q->stop_reads)
        return;
    char idle[16], count[16];
    snprintf(idle, sizeof(idle), "%d", q->claim_idle_ms);
    snprintf(count, sizeof(count), "%d", free_slots < 100 ? free_slots : 100);
    const char *argv[] = { "XAUTOCLAIM", m->stream, q->group, q->consumer,
                           idle,         "0-0",     "COUNT",  count };
    size_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = strlen(argv[i]);
    if (redisAsyncCommandArgv(q->cmd.ac, on_claim, m, 8, argv, len) == REDIS_OK)
        m->claiming = true;
}

/* XINFO GROUPS: the group's pending count and lag (Redis 7). */
static void on_info(redisAsyncContext *ac, void *r, void *privdata)
{
    (void)ac;
    rq_model *m = privdata;
    redisReply *reply = r;
    if (!reply || reply->type != REDIS_REPLY_ARRAY)
        return;
    for (size_t g = 0; g < reply->elements; g++) {
        const redisReply *kv = reply->element[g];
        if (kv->type != REDIS_REPLY_ARRAY)
            continue;
        bool ours = false;
        int64_t pending = -1, lag = -1;
        for (size_t i = 0; i + 1 < kv->elements; i += 2) {
            const redisReply *k = kv->element[i], *v = kv->element[i + 1];
            if (k->type != REDIS_REPLY_STRING)
                continue;
            if (strcmp(k->str, "name") == 0 && v->type == REDIS_REPLY_STRING)
                ours = strcmp(v->str, m->q->group) == 0;
            else if (strcmp(k->str, "pending") == 0 && v->type == REDIS_REPLY_INTEGER)
                pending = v->integer;
            else if (strcmp(k->str, "lag") == 0 && v->type == REDIS_REPLY_INTEGER)
                lag = v->integer;
        }
        if (ours) {
            atomic_store(&m->pending, pending);
            atomic_store(&m->lag, lag);
        }
    }
}

static void on_group(redisAsyncContext *ac, void *r, void *privdata)
{
    (void)ac;
    rq_model *m = privdata;
    redisReply *reply = r;
    m->group_creating = false;
    if (!reply)
        return;
    if (reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "BUSYGROUP", 9) != 0) {
        infd_log(INFD_LOG_LEVEL_ERROR, "redis: XGROUP CREATE %s %s: %s", m->stream, m->q->group,
                 reply->str);
        return;
    }
    m->group_ready = true;
    kick_read(m);
}

/* ------------------------------------------------------------------------- */
/* Connections                                                               */
/* ------------------------------------------------------------------------- */

static void conn_failed(infd_redisq *q, rq_conn *c, const char *what, const char *why)
{
    /* A connection Redis refused to authenticate backs off like one that
     * never came up, and says why at WARN. */
    bool refused = c->auth_refused;
    bool was_up = c->up && !refused;
    c->auth_refused = false;
    if (refused)
        why = c->auth_error;
    c->ac = NULL;
    c->up = false;
    if (c->backoff_ms == 0 || was_up)
        c->backoff_ms = BACKOFF_MIN_MS;
    else if (c->backoff_ms < BACKOFF_MAX_MS)
        c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
    c->next_try_ns = infd_clock_ns() + (uint64_t)c->backoff_ms * 1000000u;
    if (!q->stopping && (was_up || refused || c == &q->cmd))
        infd_log(was_up || refused ? INFD_LOG_LEVEL_WARN : INFD_LOG_LEVEL_INFO,
                 "redis: %s connection to %s:%d %s: %s; trying again in %d ms", what, q->host,
                 q->port, was_up ? "lost" : "failed", why, c->backoff_ms);
    if (c == &q->cmd)
        atomic_store(&q->connected, false);
}

/* The connection is up and, with a password, authenticated. */
static void conn_logged_in(rq_conn *c)
{
    infd_redisq *q = c->q;
    c->backoff_ms = 0;
    if (c != &q->cmd)
        return;
    atomic_store(&q->connected, true);
    infd_log(INFD_LOG_LEVEL_INFO, "redis: connected to %s:%d (db %d%s) as consumer %s of group %s",
             q->host, q->port, q->db, q->pass[0] ? ", authenticated" : "", q->consumer, q->group);
}

static void on_cmd_connect(const redisAsyncContext *ac, int status)
{
    infd_redisq *q = ac->data;
    if (status != REDIS_OK) {
        conn_failed(q, &q->cmd, "command", ac->errstr);
        return;
    }
    q->cmd.up = true;
    if (!q->pass[0])
        conn_logged_in(&q->cmd); /* else once AUTH is answered */
    /* Groups may have gone with a restarted Redis: made again (BUSYGROUP
     * when they are there). Then the results that waited. */
    int n = atomic_load(&q->n_models);
    for (int i = 0; i < n; i++)
        q->models[i]->group_ready = q->models[i]->group_creating = false;
    rq_job *w = q->writes;
    q->writes = NULL;
    while (w) {
        rq_job *j = w;
        w = j->link;
        j->link = NULL;
        if (j->dead && !j->last_error[0])
            dead_letter(j);
        else
            write_result(q, j);
    }
}

static void on_cmd_disconnect(const redisAsyncContext *ac, int status)
{
    infd_redisq *q = ac->data;
    conn_failed(q, &q->cmd, "command", status == REDIS_OK ? "closed" : ac->errstr);
    atomic_fetch_add(&q->n_reconnects, 1);
}

/* The read connection's id, for CLIENT UNBLOCK at quiesce. */
static void on_rd_id(redisAsyncContext *ac, void *r, void *privdata)
{
    (void)ac;
    rq_model *m = privdata;
    redisReply *reply = r;
    if (reply && reply->type == REDIS_REPLY_INTEGER)
        m->rd_id = reply->integer;
}

static void on_rd_connect(const redisAsyncContext *ac, int status)
{
    rq_model *m = ac->data;
    if (status != REDIS_OK) {
        conn_failed(m->q, &m->rd, m->stream, ac->errstr);
        return;
    }
    m->rd.up = true;
    if (!m->q->pass[0])
        conn_logged_in(&m->rd);
    m->own_pel = true;
    m->rd_id = 0;
    redisAsyncCommand(m->rd.ac, on_rd_id, m, "CLIENT ID");
    snprintf(m->pel_from, sizeof(m->pel_from), "0");
    kick_read(m);
}

static void on_rd_disconnect(const redisAsyncContext *ac, int status)
{
    rq_model *m = ac->data;
    m->reading = false;
    conn_failed(m->q, &m->rd, m->stream, status == REDIS_OK ? "closed" : ac->errstr);
}

static void on_auth(redisAsyncContext *ac, void *reply, void *privdata)
{
    rq_conn *c = privdata;
    redisReply *r = reply;
    if (!r || c->ac != ac)
        return;
    if (r->type != REDIS_REPLY_ERROR) {
        conn_logged_in(c);
        return;
    }
    c->auth_refused = true;
    snprintf(c->auth_error, sizeof(c->auth_error), "AUTH refused: %.120s",
             r->str ? r->str : "an error");
    redisAsyncFree(ac); /* after this callback; the disconnect callback reports it */
}

static void conn_open(infd_redisq *q, rq_conn *c, void *data, redisConnectCallback *on_conn,
                      redisDisconnectCallback *on_disc, const char *what)
{
    redisAsyncContext *ac = redisAsyncConnect(q->host, q->port);
    if (!ac || ac->err) {
        conn_failed(q, c, what, ac ? ac->errstr : "out of memory");
        if (ac)
            redisAsyncFree(ac);
        return;
    }
    ac->data = data;
    if (redisLibeventAttach(ac, q->base) != REDIS_OK) {
        redisAsyncFree(ac);
        conn_failed(q, c, what, "cannot attach to the event loop");
        return;
    }
    redisAsyncSetConnectCallback(ac, on_conn);
    redisAsyncSetDisconnectCallback(ac, on_disc);
    c->ac = ac;
    c->up = false;
    c->q = q;
    c->auth_refused = false;
    if (q->pass[0]) {
        /* Queued before anything else: Redis answers in order, so every
         * later command runs authenticated or not at all. */
        const char *argv[3] = { "AUTH" };
        size_t len[3] = { 4 };
        int argc = 1;
        if (q->user[0]) {
            argv[argc] = q->user;
            len[argc++] = strlen(q->user);
        }
        argv[argc] = q->pass;
        len[argc++] = strlen(q->pass);
        redisAsyncCommandArgv(ac, on_auth, c, argc, argv, len);
    }
    if (q->db != 0) {
        char db[16];
        snprintf(db, sizeof(db), "%d", q->db);
        const char *argv[] = { "SELECT", db };
        size_t len[] = { 6, strlen(db) };
        redisAsyncCommandArgv(ac, NULL, NULL, 2, argv, len);
    }
}

static void conn_close(rq_conn *c)
{
    if (c->ac) {
        redisAsyncContext *ac = c->ac;
        redisAsyncFree(ac); /* the disconnect callback clears c */
        c->ac = NULL;
        c->up = false;
    }
}

/* ------------------------------------------------------------------------- */
/* Models                                                                    */
/* ------------------------------------------------------------------------- */

static rq_model *model_find(infd_redisq *q, const char *name)
{
    int n = atomic_load(&q->n_models);
    for (int i = 0; i < n; i++)
        if (strcmp(q->models[i]->name, name) == 0)
            return q->models[i];
    return NULL;
}

static bool wanted(infd_redisq *q, const char *name)
{
    if (!q->models_filter)
        return true;
    char pat[140];
    snprintf(pat, sizeof(pat), ",%s,", name);
    return strstr(q->models_filter, pat) != NULL;
}

static rq_model *model_add(infd_redisq *q, const char *name)
{
    int n = atomic_load(&q->n_models);
    if (n == MAX_MODELS) {
        infd_log(INFD_LOG_LEVEL_WARN, "redis: more than %d models: no queue for %s", MAX_MODELS,
                 name);
        return NULL;
    }
    rq_model *m = infd_calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->q = q;
    snprintf(m->name, sizeof(m->name), "%s", name);
    snprintf(m->stream, sizeof(m->stream), "%s:jobs:%s", q->prefix, name);
    snprintf(m->dead, sizeof(m->dead), "%s:dead:%s", q->prefix, name);
    snprintf(m->errors, sizeof(m->errors), "%s:errors:%s", q->prefix, name);
    snprintf(m->channel, sizeof(m->channel), "%s:done:%s", q->prefix, name);
    m->inflight_head.next = m->inflight_head.prev = &m->inflight_head;
    atomic_store(&m->lag, -1);
    atomic_store(&m->pending, -1);
    m->cap = q->max_inflight;
    if (m->cap <= 0) {
        infd_model *im = NULL;
        infd_error err;
        int mb = 1;
        if (infd_server_model_acquire(q->server, name, -1, &im, &err) == INFD_STATUS_OK) {
            mb = infd_model_max_batch_size(im);
            infd_model_release(im);
        }
        m->cap = 8 * (mb > 0 ? mb : 1);
        if (m->cap < 64)
            m->cap = 64;
    }
    q->models[n] = m;
    atomic_store(&q->n_models, n + 1);
    infd_log(INFD_LOG_LEVEL_INFO, "redis: taking jobs from %s (up to %d at once)", m->stream,
             m->cap);
    return m;
}

static void scan_models(infd_redisq *q)
{
    infd_repository_entry *rows = NULL;
    int n = 0;
    infd_error err;
    if (infd_server_repository_index(q->server, true, &rows, &n, &err) != INFD_STATUS_OK)
        return;
    int nm = atomic_load(&q->n_models);
    for (int i = 0; i < nm; i++)
        q->models[i]->present = false;
    for (int i = 0; i < n; i++) {
        if (!wanted(q, rows[i].name))
            continue;
        rq_model *m = model_find(q, rows[i].name);
        if (!m)
            m = model_add(q, rows[i].name);
        if (m)
            m->present = true;
    }
    infd_free(rows);
    nm = atomic_load(&q->n_models);
    for (int i = 0; i < nm; i++) {
        rq_model *m = q->models[i];
        if (!m->present && m->rd.ac)
            conn_close(&m->rd); /* unloaded: no more reads */
    }
}

/* ------------------------------------------------------------------------- */
/* The loop                                                                  */
/* ------------------------------------------------------------------------- */

static void drain_done(infd_redisq *q)
{
    rq_job *list = infd_mailbox_take(&q->done);
    while (list) {
        rq_job *j = list;
        list = j->link;
        j->link = NULL;
        uint64_t queue_ns = 0, compute_ns = 0;
        infd_request_timing(j->req, &queue_ns, &compute_ns);
        j->started_ms = (int64_t)((j->submit_real_ns + queue_ns) / 1000000u);
        j->final = !retryable(j->status);
        queue_write(q, j);
    }
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    drain_done(arg);
}

/* Nothing left to do: every job released, or (Redis down) only results
 * that cannot be written now. */
static bool idle(infd_redisq *q)
{
    if (q->n_jobs_out == 0)
        return true;
    if (q->cmd.up)
        return false;
    int waiting = 0;
    for (rq_job *j = q->writes; j; j = j->link)
        waiting++;
    return waiting == q->n_jobs_out;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    infd_redisq *q = arg;
    uint64_t now = infd_clock_ns();
    drain_done(q);
    if (atomic_load(&q->quiesce) && !q->stop_reads) {
        /* A blocked XREADGROUP may have been answered already: Redis counts
         * its entries as delivered to us. Closing the connection would
         * leave them pending until another consumer claims them, so the
         * read is unblocked (CLIENT UNBLOCK: it answers what it has, or
         * nil) and its jobs start before the server drains. */
        q->stop_reads = true;
        q->quiet_deadline_ns = now + QUIET_WAIT_MS * 1000000ull;
        int n = atomic_load(&q->n_models);
        for (int i = 0; i < n; i++) {
            rq_model *m = q->models[i];
            if (m->reading && m->rd.up && m->rd_id > 0 && q->cmd.up)
                redisAsyncCommand(q->cmd.ac, NULL, NULL, "CLIENT UNBLOCK %lld", m->rd_id);
            else
                conn_close(&m->rd);
            /* Jobs that never reached the scheduler stay pending in Redis. */
            while (m->retry) {
                rq_job *j = m->retry;
                m->retry = j->link;
                job_release(j);
            }
        }
    }
    if (q->stop_reads && !q->quiet) {
        bool reading = false;
        int n = atomic_load(&q->n_models);
        for (int i = 0; i < n; i++)
            reading |= q->models[i]->rd.ac != NULL;
        if (reading && now >= q->quiet_deadline_ns) {
            for (int i = 0; i < n; i++)
                conn_close(&q->models[i]->rd);
            reading = false;
        }
        if (!reading) {
            pthread_mutex_lock(&q->quiet_mu);
            q->quiet = true;
            pthread_cond_broadcast(&q->quiet_cv);
            pthread_mutex_unlock(&q->quiet_mu);
        }
    }
    if (q->stopping && (idle(q) || now >= q->stop_deadline_ns)) {
        event_base_loopbreak(q->base);
        return;
    }
    if (!q->cmd.ac && now >= q->cmd.next_try_ns)
        conn_open(q, &q->cmd, q, on_cmd_connect, on_cmd_disconnect, "command");
    if (!q->stop_reads && now >= q->next_scan_ns) {
        scan_models(q);
        q->next_scan_ns = now + SCAN_MS * 1000000ull;
    }
    int n = atomic_load(&q->n_models);
    uint64_t claim_every = (uint64_t)(q->claim_idle_ms / 4 < 50 ? 50 : q->claim_idle_ms / 4);
    if (claim_every > 1000)
        claim_every = 1000;
    for (int i = 0; i < n; i++) {
        rq_model *m = q->models[i];
        /* Jobs refused for now (queue full) try again. */
        rq_job *retry = m->retry;
        m->retry = NULL;
        while (retry) {
            rq_job *j = retry;
            retry = j->link;
            j->link = NULL;
            job_submit(j);
        }
        if (q->stop_reads || !m->present)
            continue;
        if (q->cmd.up && !m->group_ready && !m->group_creating) {
            const char *argv[] = { "XGROUP", "CREATE", m->stream, q->group, "0", "MKSTREAM" };
            size_t len[6];
            for (int k = 0; k < 6; k++)
                len[k] = strlen(argv[k]);
            if (redisAsyncCommandArgv(q->cmd.ac, on_group, m, 6, argv, len) == REDIS_OK)
                m->group_creating = true;
        }
        if (!m->rd.ac && now >= m->rd.next_try_ns)
            conn_open(q, &m->rd, m, on_rd_connect, on_rd_disconnect, m->stream);
        kick_read(m);
        if (q->cmd.up && m->group_ready && now >= m->next_claim_ns) {
            claim(m);
            m->next_claim_ns = now + claim_every * 1000000ull;
        }
        if (q->cmd.up && now >= m->next_info_ns) {
            const char *argv[] = { "XINFO", "GROUPS", m->stream };
            size_t len[] = { 5, 6, strlen(m->stream) };
            redisAsyncCommandArgv(q->cmd.ac, on_info, m, 3, argv, len);
            m->next_info_ns = now + INFO_MS * 1000000ull;
        }
    }
}

static void *loop_main(void *arg)
{
    infd_redisq *q = arg;
    event_base_dispatch(q->base);
    return NULL;
}

/* ------------------------------------------------------------------------- */
/* Public                                                                    */
/* ------------------------------------------------------------------------- */

static void q_free(infd_redisq *q)
{
    if (q->tick)
        event_free(q->tick);
    infd_mailbox_fini(&q->done);
    if (q->base)
        event_base_free(q->base);
    int n = atomic_load(&q->n_models);
    for (int i = 0; i < n; i++)
        infd_free(q->models[i]);
    infd_free(q->models_filter);
    explicit_bzero(q->pass, sizeof(q->pass));
    pthread_mutex_destroy(&q->quiet_mu);
    pthread_cond_destroy(&q->quiet_cv);
    infd_free(q);
}

infd_status infd_redisq_start(infd_server *s, const infd_redisq_options *o, infd_redisq **out,
                              infd_error *err)
{
    *out = NULL;
    infd_redisq *q = infd_calloc(1, sizeof(*q));
    if (!q)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    pthread_mutex_init(&q->quiet_mu, NULL);
    pthread_cond_init(&q->quiet_cv, NULL);
    q->server = s;
    infd_status st = parse_url(q, o->url ? o->url : "", err);
    if (st != INFD_STATUS_OK)
        goto fail;
    if (!q->pass[0] && o->password && *o->password) {
        if (strlen(o->password) >= sizeof(q->pass)) {
            st =
                infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                               "redis: the password is longer than %zu bytes", sizeof(q->pass) - 1);
            goto fail;
        }
        snprintf(q->pass, sizeof(q->pass), "%s", o->password);
    }
    if (q->user[0] && !q->pass[0]) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "redis: the URL names user '%s' but no password (USER:PASSWORD@ in "
                            "the URL, or INFD_REDIS_PASSWORD)",
                            q->user);
        goto fail;
    }
    if (!o->prefix || !plain_name(o->prefix) || strlen(o->prefix) >= sizeof(q->prefix) ||
        !o->group || !plain_name(o->group) || strlen(o->group) >= sizeof(q->group)) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "redis: the prefix and group must be 1 to 127 characters without "
                            "spaces, control characters or braces");
        goto fail;
    }
    if (o->claim_idle_ms < 1 || o->max_deliveries < 1 || o->result_ttl_s < 1 ||
        o->max_inflight < 0 || o->max_inflight > 1000000 || o->max_job_bytes < 1024) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "redis: claim idle time, max deliveries and result TTL must be >= 1, "
                            "max in flight 0..1000000, max job bytes >= 1024");
        goto fail;
    }
    snprintf(q->prefix, sizeof(q->prefix), "%s", o->prefix);
    snprintf(q->group, sizeof(q->group), "%s", o->group);
    q->claim_idle_ms = o->claim_idle_ms;
    q->max_deliveries = o->max_deliveries;
    q->result_ttl_s = o->result_ttl_s;
    q->max_inflight = o->max_inflight;
    q->max_job_bytes = o->max_job_bytes;
    q->publish = o->publish;
    if (o->models && *o->models) {
        size_t n = strlen(o->models);
        q->models_filter = infd_malloc(n + 3);
        if (!q->models_filter) {
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
            goto fail;
        }
        snprintf(q->models_filter, n + 3, ",%s,", o->models);
    }
    char host[256];
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "host");
    host[sizeof(host) - 1] = '\0';
    snprintf(q->consumer, sizeof(q->consumer), "%s-%d-%d", host, (int)getpid(),
             atomic_fetch_add(&next_instance, 1));

    if (evthread_use_pthreads() != 0 || !(q->base = event_base_new()) ||
        !(q->tick = event_new(q->base, -1, EV_PERSIST, on_tick, q)) ||
        !infd_mailbox_init(&q->done, q->base, offsetof(rq_job, link), on_wake, q)) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "redis: cannot make the event loop");
        goto fail;
    }
    struct timeval tv = { 0, TICK_MS * 1000 };
    event_add(q->tick, &tv);
    if (pthread_create(&q->thread, NULL, loop_main, q) != 0) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "redis: cannot start the loop thread");
        goto fail;
    }
    q->thread_started = true;
    pthread_setname_np(q->thread, "redisq");
    *out = q;
    return INFD_STATUS_OK;
fail:
    q_free(q);
    return st;
}

void infd_redisq_quiesce(infd_redisq *q)
{
    if (!q)
        return;
    atomic_store(&q->quiesce, true);
    if (!q->thread_started)
        return;
    /* Until the reads in flight have answered and their jobs started. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += QUIET_WAIT_MS / 1000 + 1;
    pthread_mutex_lock(&q->quiet_mu);
    while (!q->quiet)
        if (pthread_cond_timedwait(&q->quiet_cv, &q->quiet_mu, &until) != 0)
            break;
    pthread_mutex_unlock(&q->quiet_mu);
}

/* Runs on the loop thread: asks the loop to finish. */
static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    infd_redisq *q = arg;
    q->stopping = true;
    q->stop_deadline_ns = infd_clock_ns() + STOP_WAIT_MS * 1000000ull;
}

void infd_redisq_stop(infd_redisq *q)
{
    if (!q)
        return;
    atomic_store(&q->quiesce, true);
    if (q->thread_started) {
        event_base_once(q->base, -1, EV_TIMEOUT, on_stop, q, NULL);
        pthread_join(q->thread, NULL);
    }
    /* The loop has stopped: what is left runs here. */
    drain_done(q); /* queued for writing, which will not happen now */
    int n = atomic_load(&q->n_models);
    for (int i = 0; i < n; i++)
        conn_close(&q->models[i]->rd);
    conn_close(&q->cmd);
    if (q->n_jobs_out > 0)
        infd_log(INFD_LOG_LEVEL_WARN,
                 "redis: %d job(s) not finished or not written at stop: left pending in Redis "
                 "for another consumer",
                 q->n_jobs_out);
    /* Every job still out is on a list or in a model's in-flight list. */
    for (int i = 0; i < n; i++) {
        rq_model *m = q->models[i];
        while (m->inflight_head.next != &m->inflight_head) {
            rq_job *j = m->inflight_head.next;
            j->prev->next = j->next;
            j->next->prev = j->prev;
            if (j->req)
                infd_request_destroy(j->req);
            if (j->model)
                infd_model_release(j->model);
            job_free_all(j);
        }
    }
    while (q->free_jobs) {
        rq_job *j = q->free_jobs;
        q->free_jobs = j->link;
        job_free_all(j);
    }
    q_free(q);
}

const char *infd_redisq_consumer(const infd_redisq *q)
{
    return q->consumer;
}

infd_status infd_redisq_metrics_render(infd_redisq *q, char **out, size_t *n, infd_error *err)
{
    infd_strbuf b;
    infd_strbuf_init(&b);
    static const struct {
        const char *name, *help;
        size_t off;
    } counters[] = {
        { "read", "Jobs read from the model's stream (XREADGROUP and XAUTOCLAIM)",
          offsetof(rq_model, n_read) },
        { "completed", "Jobs whose OK result was stored", offsetof(rq_model, n_completed) },
        { "failed", "Jobs whose error result was stored", offsetof(rq_model, n_failed) },
        { "claimed", "Jobs taken over from an idle consumer (XAUTOCLAIM)",
          offsetof(rq_model, n_claimed) },
        { "dead_lettered", "Jobs moved to the dead-letter stream after too many deliveries",
          offsetof(rq_model, n_dead) },
        { "duplicates", "Runs whose result was already stored (SET NX found one)",
          offsetof(rq_model, n_duplicates) },
        { "retried", "Runs that failed retryably and were left pending",
          offsetof(rq_model, n_retried) },
    };
    int nm = atomic_load(&q->n_models);
    for (size_t c = 0; c < sizeof(counters) / sizeof(counters[0]); c++) {
        infd_strbuf_printf(&b, "# HELP infd_redis_jobs_%s_total %s.\n", counters[c].name,
                           counters[c].help);
        infd_strbuf_printf(&b, "# TYPE infd_redis_jobs_%s_total counter\n", counters[c].name);
        for (int i = 0; i < nm; i++) {
            rq_model *m = q->models[i];
            _Atomic uint64_t *v = (_Atomic uint64_t *)((char *)m + counters[c].off);
            infd_strbuf_printf(&b, "infd_redis_jobs_%s_total{model=\"%s\"} %" PRIu64 "\n",
                               counters[c].name, m->name, atomic_load(v));
        }
    }
    infd_strbuf_puts(&b, "# HELP infd_redis_lag Entries of the model's stream not yet read by "
                         "the group (XINFO GROUPS lag; -1 unknown).\n"
                         "# TYPE infd_redis_lag gauge\n");
    for (int i = 0; i < nm; i++)
        infd_strbuf_printf(&b, "infd_redis_lag{model=\"%s\"} %" PRId64 "\n", q->models[i]->name,
                           atomic_load(&q->models[i]->lag));
    infd_strbuf_puts(&b, "# HELP infd_redis_pending Entries read by the group and not yet "
                         "acknowledged (-1 unknown).\n"
                         "# TYPE infd_redis_pending gauge\n");
    for (int i = 0; i < nm; i++)
        infd_strbuf_printf(&b, "infd_redis_pending{model=\"%s\"} %" PRId64 "\n", q->models[i]->name,
                           atomic_load(&q->models[i]->pending));
    infd_strbuf_printf(&b,
                       "# HELP infd_redis_connected Whether the command connection to Redis is "
                       "up.\n# TYPE infd_redis_connected gauge\ninfd_redis_connected %d\n"
                       "# HELP infd_redis_disconnects_total Command connections lost.\n"
                       "# TYPE infd_redis_disconnects_total counter\n"
                       "infd_redis_disconnects_total %" PRIu64 "\n",
                       atomic_load(&q->connected) ? 1 : 0, atomic_load(&q->n_reconnects));
    *out = infd_strbuf_take(&b, n);
    if (!*out)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for the metrics");
    return INFD_STATUS_OK;
}
