/*
 * fuzz_etcd.c - libFuzzer target for what the etcd client reads from the
 * network (src/cluster/etcd.c): any bytes as the reply to each kind of call
 * (range, put, delete, lease grant, keepalive, revoke), and as the chunks of
 * a watch stream (framed by brace depth, then parsed message by message).
 * Each must become a result, an error or a restart, never a crash, a leak or
 * an out-of-bounds read. The client's source is compiled in (its parsers
 * are static). Seeds: tests/fuzz/seeds-etcd (replies of etcd 3.4's gateway,
 * written for this project).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "cluster/etcd.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void on_result(void *user, infd_status st, const char *message, const etcd_result *r)
{
    (void)user;
    (void)message;
    size_t sink = 0;
    for (int i = 0; st == INFD_STATUS_OK && r && i < r->n_kvs; i++)
        sink += r->kvs[i].key_len + r->kvs[i].value_len;
    (void)sink;
}

static void on_sync(void *user, const etcd_kv *kvs, int n, int64_t revision)
{
    (void)user;
    (void)kvs;
    (void)n;
    (void)revision;
}

static void on_events(void *user, const etcd_event *ev, int n, int64_t revision)
{
    (void)user;
    (void)revision;
    size_t sink = 0;
    for (int i = 0; i < n; i++)
        sink += ev[i].kv.key_len + ev[i].kv.value_len;
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct event_base *base;
    static etcd_client *c;
    static etcd_watch *w;
    if (!base) {
        infd_error err;
        base = event_base_new();
        if (!base || etcd_client_create(base, "127.0.0.1:9", &c, &err) != INFD_STATUS_OK)
            abort();
        etcd_watch_callbacks cbs = { on_sync, on_events, NULL, NULL };
        if (etcd_watch_start(c, "/fuzz/", &cbs, &w, &err) != INFD_STATUS_OK)
            abort();
    }
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    /* Every kind of call's reply. */
    static const enum call_kind kinds[] = { CALL_PUT,   CALL_RANGE,     CALL_DELETE,
                                            CALL_GRANT, CALL_KEEPALIVE, CALL_REVOKE };
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        etcd_call *call = infd_calloc(1, sizeof(*call));
        if (!call)
            break;
        call->c = c;
        call->kind = kinds[k];
        call->path = "/fuzz";
        call->cb = on_result;
        call->next = c->calls;
        if (c->calls)
            c->calls->prev = call;
        c->calls = call;
        call_reply(call, text); /* frees the call */
    }
    /* The same bytes as a watch stream, in two chunks. */
    w->state = W_STREAMING;
    evbuffer_drain(w->acc, evbuffer_get_length(w->acc));
    size_t half = size / 2;
    evbuffer_add(w->acc, data, half);
    watch_feed(w);
    if (w->state == W_STREAMING) {
        evbuffer_add(w->acc, data + half, size - half);
        watch_feed(w);
    }
    free(text);
    return 0;
}
