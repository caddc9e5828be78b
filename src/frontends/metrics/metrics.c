/*
 * metrics.c - GET /metrics over libevent's HTTP server.
 *
 * One event base, one thread, one listener. A scrape is rare (Prometheus
 * asks every few seconds) and small (a few KiB per model), so the handler
 * renders synchronously on the event thread into a fresh buffer and hands
 * that buffer to libevent by reference: no copy, freed by libevent when the
 * response is written. Rendering takes each READY model's statistics
 * snapshot through the public API, which never blocks inference for long
 * (the runtime copies counters under its own lock).
 *
 * Stopping: infd_metrics_stop activates an event whose callback breaks the
 * loop from inside. Activating from another thread is safe once
 * evthread_use_pthreads has run (before the base is created), and unlike
 * event_base_loopbreak it is not lost when the thread has not entered the
 * loop yet (the loop clears its break flag on entry). Then it joins the
 * thread and frees the server objects.
 */
#include "frontends/metrics/metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>

#include "core/alloc.h"
#include "frontends/common/restricted.h"
#include "frontends/metrics/metrics_text.h"

/* Requests to /metrics carry no body; anything larger is refused by
 * libevent (413) before it reaches the handler. */
#define METRICS_MAX_BODY_BYTES    4096
#define METRICS_MAX_HEADERS_BYTES 16384
/* Idle connections (a Prometheus keep-alive between scrapes included) are
 * closed after this long; Prometheus reconnects. */
#define METRICS_TIMEOUT_SECS 60

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct infd_metrics {
    infd_server *server; /* borrowed */
    infd_metrics_extra_fn extra;
    void *extra_user;
    const infd_restricted *restricted; /* borrowed; NULL: open */
    struct event_base *base;
    struct evhttp *http;
    struct event *stop_ev; /* activated by infd_metrics_stop: breaks the loop */
    pthread_t thread;
    bool thread_started;
    int port;
};

void infd_metrics_options_init(infd_metrics_options *o)
{
    o->host = "0.0.0.0";
    o->port = 8002;
    o->extra = NULL;
    o->extra_user = NULL;
    o->restricted = NULL;
}

int infd_metrics_port(const infd_metrics *m)
{
    return m->port;
}

/* ------------------------------------------------------------------------- */
/* Rendering                                                                 */
/* ------------------------------------------------------------------------- */

infd_status infd_metrics_render(infd_server *s, char **out, size_t *n, infd_error *err)
{
    infd_repository_entry *entries = NULL;
    infd_metrics_model_sample *samples = NULL;
    infd_strbuf b = { 0 };
    int n_entries = 0, n_samples = 0;
    infd_status st = infd_server_repository_index(s, true, &entries, &n_entries, err);
    if (st != INFD_STATUS_OK)
        goto out;
    if (n_entries > 0) {
        samples = infd_calloc((size_t)n_entries, sizeof(*samples));
        if (!samples) {
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "metrics: %d model samples",
                                n_entries);
            goto out;
        }
    }
    for (int i = 0; i < n_entries; i++) {
        const infd_repository_entry *e = &entries[i];
        infd_model *model = NULL;
        /* A version unloaded since the index was taken is simply left out
         * of this scrape. */
        if (e->version < 0 ||
            infd_server_model_acquire(s, e->name, e->version, &model, NULL) != INFD_STATUS_OK)
            continue;
        infd_metrics_model_sample *smp = &samples[n_samples++];
        smp->name = e->name; /* lives in `entries` until the end */
        smp->version = e->version;
        infd_model_get_stats(model, &smp->stats);
        infd_model_release(model);
    }

    infd_metrics_write_models(&b, samples, n_samples, infd_latency_bucket_bounds_us(),
                              INFD_LATENCY_BUCKETS);
    infd_metrics_process_sample proc;
    infd_metrics_read_process(&proc);
    infd_metrics_write_process(&b, &proc);
    *out = infd_strbuf_take(&b, n);
    if (!*out)
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "metrics: rendering %d models",
                            n_samples);
out:
    infd_strbuf_fini(&b);
    infd_free(samples);
    infd_free(entries);
    return st;
}

/* ------------------------------------------------------------------------- */
/* HTTP                                                                      */
/* ------------------------------------------------------------------------- */

static void reply_text(struct evhttp_request *req, int code, const char *reason, const char *text)
{
    struct evbuffer *body = evbuffer_new();
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; charset=utf-8");
    if (body)
        evbuffer_add(body, text, strlen(text));
    evhttp_send_reply(req, code, reason, body);
    if (body)
        evbuffer_free(body);
}

static void free_rendered(const void *data, size_t len, void *arg)
{
    (void)len;
    (void)arg;
    infd_free((void *)data);
}

static void handle_request(struct evhttp_request *req, void *arg)
{
    infd_metrics *m = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || strcmp(path, "/metrics") != 0) {
        reply_text(req, HTTP_NOTFOUND, "Not Found", "not found: the metrics are at /metrics\n");
        return;
    }
    const char *key = infd_restricted_key(m->restricted, INFD_API_STATISTICS);
    if (key[0]) {
        const char *got = evhttp_find_header(evhttp_request_get_input_headers(req), key);
        if (!infd_restricted_allows(m->restricted, INFD_API_STATISTICS, got,
                                    got ? strlen(got) : 0)) {
            char msg[160];
            snprintf(msg, sizeof(msg), "the metrics are restricted, expecting header '%s'\n", key);
            reply_text(req, 403, "Forbidden", msg);
            return;
        }
    }
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
        reply_text(req, HTTP_BADMETHOD, "Method Not Allowed",
                   "method not allowed: /metrics answers GET and HEAD\n");
        return;
    }

    char *text = NULL;
    size_t n = 0;
    infd_error err = { 0 };
    struct evbuffer *body = NULL;
    if (infd_metrics_render(m->server, &text, &n, &err) != INFD_STATUS_OK) {
        char msg[INFD_ERROR_MSG_BYTES + 2];
        snprintf(msg, sizeof(msg), "%s\n", err.msg);
        reply_text(req, HTTP_INTERNAL, "Internal Server Error", msg);
        return;
    }
    char *more = NULL;
    size_t n_more = 0;
    if (m->extra && m->extra(m->extra_user, &more, &n_more, &err) != INFD_STATUS_OK) {
        infd_free(text);
        char msg[INFD_ERROR_MSG_BYTES + 2];
        snprintf(msg, sizeof(msg), "%s\n", err.msg);
        reply_text(req, HTTP_INTERNAL, "Internal Server Error", msg);
        return;
    }
    body = evbuffer_new();
    if (!body || evbuffer_add_reference(body, text, n, free_rendered, NULL) != 0) {
        infd_free(text);
        infd_free(more);
        reply_text(req, HTTP_INTERNAL, "Internal Server Error", "out of memory\n");
        goto out;
    }
    if (more && evbuffer_add_reference(body, more, n_more, free_rendered, NULL) != 0) {
        infd_free(more);
        reply_text(req, HTTP_INTERNAL, "Internal Server Error", "out of memory\n");
        goto out;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", METRICS_CONTENT_TYPE);
    evhttp_send_reply(req, HTTP_OK, "OK", body);
out:
    if (body)
        evbuffer_free(body);
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    infd_metrics *m = arg;
    event_base_loopbreak(m->base);
}

static void *loop_main(void *arg)
{
    infd_metrics *m = arg;
    event_base_dispatch(m->base);
    return NULL;
}

/* The port a listener got (its own when the options asked for 0). */
static int bound_port(evutil_socket_t fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

static void destroy(infd_metrics *m)
{
    if (!m)
        return;
    if (m->thread_started) {
        event_active(m->stop_ev, 0, 0);
        pthread_join(m->thread, NULL);
    }
    if (m->stop_ev)
        event_free(m->stop_ev);
    if (m->http)
        evhttp_free(m->http);
    if (m->base)
        event_base_free(m->base);
    infd_free(m);
}

infd_status infd_metrics_start(infd_server *s, const infd_metrics_options *o, infd_metrics **out,
                               infd_error *err)
{
    infd_metrics *m = NULL;
    infd_status st = INFD_STATUS_OK;
    *out = NULL;
    if (o->port < 0 || o->port > 65535) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "metrics: port %d is outside 0..65535", o->port);
        goto out;
    }
    /* Process-wide and idempotent; must precede event_base_new so that the
     * base can be woken from infd_metrics_stop's thread. */
    if (evthread_use_pthreads() != 0) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "metrics: libevent without pthreads");
        goto out;
    }
    m = infd_calloc(1, sizeof(*m));
    if (!m) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "metrics: frontend");
        goto out;
    }
    m->server = s;
    m->extra = o->extra;
    m->extra_user = o->extra_user;
    m->restricted = o->restricted;
    m->base = event_base_new();
    m->http = m->base ? evhttp_new(m->base) : NULL;
    m->stop_ev = m->http ? event_new(m->base, -1, 0, on_stop, m) : NULL;
    if (!m->stop_ev) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "metrics: libevent HTTP server");
        goto out;
    }
    /* Every method reaches the handler, which answers 405 itself (libevent
     * would answer 405 without the Allow header). */
    evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                            EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_max_body_size(m->http, METRICS_MAX_BODY_BYTES);
    evhttp_set_max_headers_size(m->http, METRICS_MAX_HEADERS_BYTES);
    evhttp_set_timeout(m->http, METRICS_TIMEOUT_SECS);
    evhttp_set_gencb(m->http, handle_request, m);

    errno = 0;
    struct evhttp_bound_socket *listener =
        evhttp_bind_socket_with_handle(m->http, o->host, (ev_uint16_t)o->port);
    if (!listener) {
        st = infd_error_set(err, INFD_STATUS_IO, "metrics: cannot listen on %s:%d: %s", o->host,
                            o->port, errno ? strerror(errno) : "bind failed");
        goto out;
    }
    m->port = bound_port(evhttp_bound_socket_get_fd(listener));
    if (m->port < 0) {
        st = infd_error_set(err, INFD_STATUS_IO, "metrics: getsockname on %s:%d: %s", o->host,
                            o->port, strerror(errno));
        goto out;
    }

    /* The thread starts with every signal blocked: SIGTERM/SIGINT go to the
     * thread that waits for them, and a SIGPIPE from writing to a vanished
     * client stays pending here instead of killing the process (the write
     * fails with EPIPE). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&m->thread, NULL, loop_main, m);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "metrics: thread: %s", strerror(rc));
        goto out;
    }
    m->thread_started = true;
    pthread_setname_np(m->thread, "metrics");
    *out = m;
    m = NULL;
out:
    destroy(m);
    return st;
}

void infd_metrics_stop(infd_metrics *m)
{
    destroy(m);
}
