/*
 * member.c - a worker's lease and key in etcd (member.h).
 *
 * The loop thread's tick (every 100 ms) drives one small state machine:
 *   no lease          -> LeaseGrant (again after a pause when etcd is away)
 *   lease, key stale  -> Put the current value under the lease
 *   lease             -> KeepAlive every TTL/3; a reply with TTL <= 0 (etcd
 *                        forgot the lease) or no good reply for a whole TTL
 *                        drops the lease, so it is granted again
 * and, once a second, rebuilds the value from the repository index; a
 * different value makes the key stale. Each call has at most one request in
 * flight. Leaving runs on the loop too: LeaseRevoke, then the caller is
 * woken.
 */
#include "cluster/member.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <yajl/yajl_gen.h>

#include "cluster/etcd.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"

#define TICK_MS       100
#define INDEX_MS      1000
#define RETRY_MS      1000
#define LEAVE_WAIT_MS 2000

struct cluster_member {
    infd_server *server;
    char id[160], key[512], advertise[256], prefix[128];
    int ttl_s, http_port, grpc_port;
    int64_t started_ms;

    struct event_base *base;
    struct event *tick;
    pthread_t thread;
    bool thread_started;
    etcd_client *etcd;

    /* Loop thread only. */
    int64_t lease; /* 0: none */
    bool granting, putting, keeping;
    uint64_t next_grant_ns, next_put_ns, next_keepalive_ns, last_alive_ns, next_index_ns;
    char *value;         /* what the key should hold */
    uint64_t value_hash; /* index_hash of the index it was built from */
    char *written;       /* what it holds under this lease (NULL: not put yet) */
    char *putting_value;
    bool away; /* etcd unreachable was logged */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool left;
};

void cluster_member_options_init(cluster_member_options *o)
{
    memset(o, 0, sizeof(*o));
    o->prefix = "/infd";
    o->ttl_s = 5;
    o->http_port = o->grpc_port = -1;
}

const char *cluster_member_id(const cluster_member *m)
{
    return m->id;
}

const char *cluster_member_key(const cluster_member *m)
{
    return m->key;
}

/* ------------------------------------------------------------------------- */
/* The value                                                                 */
/* ------------------------------------------------------------------------- */

static void gen_str(yajl_gen g, const char *s)
{
    yajl_gen_string(g, (const unsigned char *)s, strlen(s));
}

/* FNV-1a over what the value depends on: the index's names, versions and
 * states, and which loaded model each READY row is (a reload with a new
 * config is a new model), so an unchanged index costs no configs to
 * serialize. */
static uint64_t index_hash(cluster_member *m, const infd_repository_entry *rows, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        const unsigned char *p = (const unsigned char *)rows[i].name;
        for (; *p; p++)
            h = (h ^ *p) * 1099511628211ull;
        h = (h ^ (uint64_t)rows[i].version) * 1099511628211ull;
        h = (h ^ (uint64_t)rows[i].state) * 1099511628211ull;
        infd_model *model = NULL;
        infd_error err;
        if (rows[i].state == INFD_MODEL_STATE_READY &&
            infd_server_model_acquire(m->server, rows[i].name, rows[i].version, &model, &err) ==
                INFD_STATUS_OK) {
            h = (h ^ (uint64_t)(uintptr_t)model) * 1099511628211ull;
            infd_model_release(model);
        }
    }
    return h;
}

/* The key's JSON value from the repository index; NULL when the index did
 * not change since the value was built, or out of memory (the old value
 * stays either way). */
static char *build_value(cluster_member *m)
{
    infd_repository_entry *rows = NULL;
    int n = 0;
    infd_error err;
    infd_error_clear(&err);
    if (infd_server_repository_index(m->server, false, &rows, &n, &err) != INFD_STATUS_OK)
        n = 0;
    uint64_t h = index_hash(m, rows, n);
    if (m->value && h == m->value_hash) {
        infd_free(rows);
        return NULL;
    }
    yajl_gen g = yajl_gen_alloc(NULL);
    if (!g) {
        infd_free(rows);
        return NULL;
    }
    yajl_gen_map_open(g);
    gen_str(g, "id");
    gen_str(g, m->id);
    gen_str(g, "address");
    gen_str(g, m->advertise);
    gen_str(g, "http_port");
    yajl_gen_integer(g, m->http_port);
    gen_str(g, "grpc_port");
    yajl_gen_integer(g, m->grpc_port);
    gen_str(g, "infd_version");
    gen_str(g, infd_version());
    gen_str(g, "started_at_ms");
    yajl_gen_integer(g, m->started_ms);
    gen_str(g, "models");
    yajl_gen_array_open(g);
    for (int i = 0; i < n; i++) {
        if (rows[i].version < 0)
            continue; /* never loaded */
        yajl_gen_map_open(g);
        gen_str(g, "name");
        gen_str(g, rows[i].name);
        gen_str(g, "version");
        yajl_gen_integer(g, rows[i].version);
        gen_str(g, "state");
        gen_str(g, infd_model_state_name(rows[i].state));
        /* A READY version's config, so a router serves its metadata
         * without asking (JSON in a string: read it with a second parse). */
        infd_model *model = NULL;
        char *cfg = NULL;
        size_t cfg_n = 0;
        if (rows[i].state == INFD_MODEL_STATE_READY &&
            infd_server_model_acquire(m->server, rows[i].name, rows[i].version, &model, &err) ==
                INFD_STATUS_OK &&
            infd_model_config_json(model, &cfg, &cfg_n, &err) == INFD_STATUS_OK) {
            gen_str(g, "config");
            yajl_gen_string(g, (const unsigned char *)cfg, cfg_n);
        }
        infd_free(cfg);
        infd_model_release(model);
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
    yajl_gen_map_close(g);
    const unsigned char *buf = NULL;
    size_t len = 0;
    char *out = NULL;
    if (yajl_gen_get_buf(g, &buf, &len) == yajl_gen_status_ok && (out = infd_malloc(len + 1))) {
        memcpy(out, buf, len);
        out[len] = '\0';
    }
    yajl_gen_free(g);
    infd_free(rows);
    if (out)
        m->value_hash = h;
    return out;
}

/* ------------------------------------------------------------------------- */
/* etcd calls                                                                */
/* ------------------------------------------------------------------------- */

static void etcd_away(cluster_member *m, const char *what, const char *message)
{
    if (!m->away)
        infd_log(INFD_LOG_LEVEL_WARN, "cluster: %s failed: %s; serving on, trying again", what,
                 message);
    m->away = true;
}

static void etcd_back(cluster_member *m)
{
    if (m->away)
        infd_log(INFD_LOG_LEVEL_INFO, "cluster: etcd answers again (%s)",
                 etcd_client_endpoint(m->etcd));
    m->away = false;
}

static void on_grant(void *user, infd_status st, const char *message, const etcd_result *r)
{
    cluster_member *m = user;
    m->granting = false;
    uint64_t now = infd_clock_ns();
    if (st != INFD_STATUS_OK || r->lease_id == 0) {
        etcd_away(m, "lease grant", message ? message : "no lease id");
        m->next_grant_ns = now + RETRY_MS * 1000000ull;
        return;
    }
    etcd_back(m);
    m->lease = r->lease_id;
    infd_free(m->written);
    m->written = NULL; /* the key goes under the new lease */
    m->last_alive_ns = now;
    m->next_keepalive_ns = now + (uint64_t)m->ttl_s * 1000000000ull / 3;
    m->next_put_ns = now;
}

static void on_put(void *user, infd_status st, const char *message, const etcd_result *r)
{
    (void)r;
    cluster_member *m = user;
    m->putting = false;
    char *v = m->putting_value;
    m->putting_value = NULL;
    if (st != INFD_STATUS_OK) {
        infd_free(v);
        etcd_away(m, "registering the worker", message);
        m->next_put_ns = infd_clock_ns() + RETRY_MS * 1000000ull;
        return;
    }
    etcd_back(m);
    bool first = m->written == NULL;
    infd_free(m->written);
    m->written = v;
    if (first)
        infd_log(INFD_LOG_LEVEL_INFO,
                 "cluster: registered as %s (lease %llx, TTL %d s) at %s; routers reach it at %s",
                 m->key, (unsigned long long)m->lease, m->ttl_s, etcd_client_endpoint(m->etcd),
                 m->advertise);
}

static void on_keepalive(void *user, infd_status st, const char *message, const etcd_result *r)
{
    cluster_member *m = user;
    m->keeping = false;
    uint64_t now = infd_clock_ns();
    if (st != INFD_STATUS_OK) {
        etcd_away(m, "lease keepalive", message);
        m->next_keepalive_ns = now + 500000000ull;
        return;
    }
    etcd_back(m);
    if (r->ttl <= 0) {
        infd_log(INFD_LOG_LEVEL_WARN,
                 "cluster: etcd no longer has lease %llx (it expired while etcd was away): "
                 "registering again",
                 (unsigned long long)m->lease);
        m->lease = 0;
        m->next_grant_ns = now;
        return;
    }
    m->last_alive_ns = now;
    m->next_keepalive_ns = now + (uint64_t)m->ttl_s * 1000000000ull / 3;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cluster_member *m = arg;
    uint64_t now = infd_clock_ns();
    if (now >= m->next_index_ns) {
        m->next_index_ns = now + INDEX_MS * 1000000ull;
        char *v = build_value(m);
        if (v && (!m->value || strcmp(v, m->value) != 0)) {
            infd_free(m->value);
            m->value = v;
        } else {
            infd_free(v);
        }
    }
    if (m->lease && now - m->last_alive_ns > (uint64_t)m->ttl_s * 1000000000ull) {
        /* A whole TTL without a good keepalive: etcd has let it go. */
        infd_log(INFD_LOG_LEVEL_WARN, "cluster: lease %llx not kept alive for %d s: it is gone",
                 (unsigned long long)m->lease, m->ttl_s);
        m->lease = 0;
    }
    if (!m->lease) {
        if (!m->granting && now >= m->next_grant_ns) {
            m->granting = true;
            etcd_lease_grant(m->etcd, m->ttl_s, on_grant, m);
        }
        return;
    }
    if (m->value && !m->putting && now >= m->next_put_ns &&
        (!m->written || strcmp(m->written, m->value) != 0)) {
        m->putting_value = infd_strdup(m->value);
        if (m->putting_value) {
            m->putting = true;
            etcd_put(m->etcd, m->key, m->value, strlen(m->value), m->lease, on_put, m);
        }
    }
    if (!m->keeping && now >= m->next_keepalive_ns) {
        m->keeping = true;
        etcd_lease_keepalive(m->etcd, m->lease, on_keepalive, m);
    }
}

/* ------------------------------------------------------------------------- */
/* Leaving and stopping                                                      */
/* ------------------------------------------------------------------------- */

static void signal_left(cluster_member *m)
{
    pthread_mutex_lock(&m->mu);
    m->left = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

static void on_revoke(void *user, infd_status st, const char *message, const etcd_result *r)
{
    (void)r;
    cluster_member *m = user;
    if (st == INFD_STATUS_OK)
        infd_log(INFD_LOG_LEVEL_INFO, "cluster: left (lease %llx revoked, %s deleted)",
                 (unsigned long long)m->lease, m->key);
    else
        infd_log(INFD_LOG_LEVEL_WARN,
                 "cluster: revoking lease %llx failed (%s): %s goes when it "
                 "expires",
                 (unsigned long long)m->lease, message, m->key);
    m->lease = 0;
    signal_left(m);
}

static void on_leave(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cluster_member *m = arg;
    event_del(m->tick); /* no more grants, puts or keepalives */
    if (!m->lease) {
        signal_left(m);
        return;
    }
    etcd_lease_revoke(m->etcd, m->lease, on_revoke, m);
}

void cluster_member_leave(cluster_member *m)
{
    if (!m || !m->thread_started)
        return;
    if (event_base_once(m->base, -1, EV_TIMEOUT, on_leave, m, NULL) != 0)
        return;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += LEAVE_WAIT_MS / 1000;
    pthread_mutex_lock(&m->mu);
    while (!m->left)
        if (pthread_cond_timedwait(&m->cv, &m->mu, &until) != 0)
            break;
    pthread_mutex_unlock(&m->mu);
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

static void *loop_main(void *arg)
{
    cluster_member *m = arg;
    event_base_dispatch(m->base);
    return NULL;
}

static void member_free(cluster_member *m)
{
    etcd_client_destroy(m->etcd);
    if (m->tick)
        event_free(m->tick);
    if (m->base)
        event_base_free(m->base);
    infd_free(m->value);
    infd_free(m->written);
    infd_free(m->putting_value);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    infd_free(m);
}

void cluster_member_stop(cluster_member *m)
{
    if (!m)
        return;
    if (m->thread_started) {
        event_base_once(m->base, -1, EV_TIMEOUT, on_stop, m->base, NULL);
        pthread_join(m->thread, NULL);
    }
    member_free(m);
}

/* ------------------------------------------------------------------------- */
/* Starting                                                                  */
/* ------------------------------------------------------------------------- */

/* tcp://HOST:PORT, the port 1..65535. */
static bool advertise_ok(const char *a)
{
    if (!a || strncmp(a, "tcp://", 6) != 0)
        return false;
    const char *colon = strrchr(a + 6, ':');
    if (!colon || colon == a + 6)
        return false;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    return *end == '\0' && port >= 1 && port <= 65535 && end != colon + 1;
}

static bool id_ok(const char *s)
{
    if (!*s || strlen(s) >= 128)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '_' || *s == '.'))
            return false;
    return true;
}

infd_status cluster_member_start(infd_server *server, const cluster_member_options *o,
                                 cluster_member **out, infd_error *err)
{
    *out = NULL;
    if (!o->etcd || !*o->etcd)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "--cluster needs etcd endpoints: http://HOST:PORT[,...]");
    if (!advertise_ok(o->advertise))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "--advertise '%.200s': expected tcp://HOST:PORT, the address routers "
                              "reach this worker at",
                              o->advertise ? o->advertise : "");
    const char *prefix = o->prefix && *o->prefix ? o->prefix : "/infd";
    if (prefix[0] != '/' || strlen(prefix) >= 128 || prefix[strlen(prefix) - 1] == '/')
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "--cluster-prefix '%.200s': a key path like /infd (starts with /, "
                              "no trailing /)",
                              prefix);
    if (o->ttl_s < 2 || o->ttl_s > 3600)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "--cluster-ttl %d: 2 to 3600 seconds (etcd's minimum is 2)",
                              o->ttl_s);
    cluster_member *m = infd_calloc(1, sizeof(*m));
    if (!m)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "cluster: out of memory");
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    m->server = server;
    m->ttl_s = o->ttl_s;
    m->http_port = o->http_port;
    m->grpc_port = o->grpc_port;
    m->started_ms = (int64_t)(infd_clock_realtime_ns() / 1000000u);
    snprintf(m->prefix, sizeof(m->prefix), "%s", prefix);
    snprintf(m->advertise, sizeof(m->advertise), "%s", o->advertise);
    if (o->id && *o->id) {
        snprintf(m->id, sizeof(m->id), "%s", o->id);
    } else {
        char host[128];
        if (gethostname(host, sizeof(host)) != 0)
            snprintf(host, sizeof(host), "host");
        host[sizeof(host) - 1] = '\0';
        snprintf(m->id, sizeof(m->id), "%s-%d", host, (int)getpid());
    }
    infd_status st = INFD_STATUS_OK;
    if (!id_ok(m->id)) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "--cluster-id '%.100s': 1 to 127 of [A-Za-z0-9._-]", m->id);
        goto fail;
    }
    snprintf(m->key, sizeof(m->key), "%s/workers/%s", m->prefix, m->id);
    if (evthread_use_pthreads() != 0 || !(m->base = event_base_new()) ||
        !(m->tick = event_new(m->base, -1, EV_PERSIST, on_tick, m))) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "cluster: cannot make the event loop");
        goto fail;
    }
    st = etcd_client_create(m->base, o->etcd, &m->etcd, err);
    if (st != INFD_STATUS_OK)
        goto fail;
    m->value = build_value(m);
    struct timeval tv = { 0, TICK_MS * 1000 };
    event_add(m->tick, &tv);
    if (pthread_create(&m->thread, NULL, loop_main, m) != 0) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "cluster: cannot start the loop thread");
        goto fail;
    }
    m->thread_started = true;
    pthread_setname_np(m->thread, "member");
    infd_log(INFD_LOG_LEVEL_INFO, "cluster: worker %s registering at etcd %s", m->id, o->etcd);
    *out = m;
    return INFD_STATUS_OK;
fail:
    member_free(m);
    return st;
}
