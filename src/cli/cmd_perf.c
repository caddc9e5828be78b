/*
 * cmd_perf.c - `infd perf`: a load generator in the manner of Triton's
 * perf_analyzer, for a running `infd serve` (or any KServe v2 HTTP server).
 *
 * For each concurrency level of --concurrency-range START:END:STEP (END
 * inclusive, STEP added, as perf_analyzer does) it opens that many
 * connections, each sending requests back to back (a new request as soon as
 * the previous answer is in), first for a warmup period, then for the
 * measurement: --request-count answered requests, or --measurement-ms of
 * time. Throughput and latency come from the requests answered inside the
 * measurement window (perf_analyzer's rule), latency measured from the
 * request's first byte handed to the socket to the last byte of its answer.
 *
 * One thread drives every connection through one libevent loop: HTTP with
 * libevent's evhttp client (keep-alive connections, the request body lent to
 * it without a copy), the raw protocol with nonblocking sockets. A single
 * loop keeps the generator's own cost low and steady, so that on a small
 * machine it leaves the cores to the server (as wrk does). gRPC (the KServe
 * v2 ModelInfer, or ModelStreamInfer with --streaming: one stream per
 * connection, one request in flight on each) runs on the gRPC core C API
 * instead: one channel (HTTP/2 multiplexes the calls), one completion
 * queue polled by the same single thread, the phase timer checked between
 * events.
 *
 * Inputs come from the model metadata (GET /v2/models/NAME over HTTP, also
 * usable with --metadata-url for the raw protocol; the ModelMetadata RPC for
 * gRPC) or, for the raw protocol,
 * from --shape/--dtype (one input). Request bodies are built once per run;
 * every request sends the same bytes.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <yajl/yajl_tree.h>

#include "cli/cli.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/common.h"
#include "core/histogram.h"
#include "core/strbuf.h"
#include "frontends/common/tls.h"
#include "grpc_service.pb-c.h"
#include "infd/engine.h"
#include "infd/infd.h"

#define PERF_MAX_IO          INFD_MAX_MODEL_IO
#define PERF_MAX_CHANNELS    64
#define PERF_MAX_CONCURRENCY 4096
#define PERF_TIMEOUT_S       60 /* a request unanswered this long counts as an error */
#define RAW_HEADER_BYTES     32

typedef enum perf_protocol { PROTO_HTTP, PROTO_RAW, PROTO_GRPC } perf_protocol;
typedef enum perf_phase { PH_WARMUP, PH_MEASURE, PH_DRAIN } perf_phase;

typedef struct perf_tensor {
    char name[256];
    infd_dtype dtype;
    int rank;
    int64_t shape[INFD_MAX_RANK + 1]; /* full shape, batch dim included */
    size_t nbytes;                    /* of the request (inputs) or of one answer (outputs) */
    uint8_t *data;                    /* inputs only */
} perf_tensor;

#define PERF_MAX_HEADERS 8

typedef struct perf_options {
    perf_protocol protocol;
    char host[256];
    int port;
    const char *unix_path;
    char meta_host[256];
    int meta_port; /* 0: no metadata over HTTP */
    const char *model;
    bool binary, framed, random_data;
    bool streaming; /* gRPC: ModelStreamInfer instead of ModelInfer */
    int channels;   /* gRPC: connections the calls spread over (--grpc-channels) */
    bool shm;       /* --shared-memory system|cuda: tensors in a registered region */
    bool shm_cuda;  /* --shared-memory cuda: the region is device memory of GPU 0 */
    bool rpc_live;  /* gRPC: unary ServerLive (an empty request) instead of ModelInfer */
    int c_start, c_end, c_step;
    int64_t request_count; /* 0: time window */
    /* --request-rate: requests per second, sent on schedule over the
     * level's connections (open loop, as perf_analyzer's request-rate
     * mode); 0: each connection sends its next request when its previous
     * one is answered (closed loop). */
    double request_rate;
    int measurement_ms, warmup_ms;
    int batch;
    const char *csv;
    /* raw without metadata */
    const char *shape, *dtype, *input_name;
    int64_t output_bytes;
    /* TLS (HTTP and gRPC): --ssl, the CAs to trust (NULL: the system's) and
     * a client certificate for servers that ask for one. */
    bool ssl;
    const char *ssl_ca, *ssl_cert, *ssl_key;
    /* -H NAME:VALUE: HTTP headers, and gRPC metadata (restricted APIs) */
    int n_headers;
    char header_name[PERF_MAX_HEADERS][64];
    char header_value[PERF_MAX_HEADERS][256];
} perf_options;

typedef struct perf perf;
typedef struct perf_conn perf_conn;

/* gRPC completion-queue tags: what finished on which connection. */
typedef enum perf_gop { G_UNARY, G_WRITE, G_READ, G_CLOSE } perf_gop;
typedef struct perf_gtag {
    perf_conn *c;
    perf_gop op;
} perf_gtag;

struct perf_conn {
    perf *p;
    bool busy;
    uint64_t t0_ns;
    /* HTTP */
    struct evhttp_connection *evcon;
    evutil_socket_t nodelay_fd; /* the socket TCP_NODELAY was set on, -1 before */
    /* raw */
    int fd;
    struct event *rev, *wev;
    size_t sent;
    size_t got, need;
    int stage; /* framed: 0 header, 1 rest */
    uint8_t *rbuf;
    size_t rcap;
    /* gRPC: the call (unary: one per request; streaming: the connection's
     * stream, kept across requests) and what its batches fill in. */
    grpc_call *call;
    grpc_byte_buffer *send_bb, *recv_bb;
    grpc_metadata_array md_in, md_trail;
    grpc_status_code status;
    grpc_slice details;
    int g_pending;  /* batches of the current request still in flight */
    bool g_failed;  /* one of them failed */
    bool g_opened;  /* streaming: initial metadata sent and asked for */
    bool g_closing; /* streaming: close batch started */
    perf_gtag t_unary, t_write, t_read, t_close;
};

typedef struct step_result {
    int concurrency;
    uint64_t ok, errors; /* inside the measurement window */
    uint64_t total, total_errors;
    double window_ms;
    double infer_per_s;
    double avg_us, p50_us, p90_us, p95_us, p99_us;
    uint64_t late; /* --request-rate: came due with every connection busy */
} step_result;

struct perf {
    perf_options o;
    struct event_base *base;
    int n_inputs, n_outputs;
    perf_tensor in[PERF_MAX_IO], out[PERF_MAX_IO];
    bool model_batches;

    /* --shared-memory system: one POSIX object holding every input and
     * output (at shm_off[], inputs then outputs), registered as one region. */
    char shm_key[64], shm_region[64];
    uint8_t *shm_map;
    void *shm_dev; /* --shared-memory cuda: the region's device memory (GPU 0) */
    size_t shm_bytes;
    size_t shm_off[2 * PERF_MAX_IO];
    bool shm_registered;

    /* The request, built once. */
    uint8_t *body;
    size_t body_len, json_len; /* json_len: HTTP binary header part */
    char uri[512];
    char host_header[300];
    char json_len_text[32];
    size_t answer_bytes; /* raw headerless */
    struct addrinfo *raw_addr;
    /* gRPC: the channel, its queue, the method, the request message. */
    grpc_channel *chan;
    /* --grpc-channels N: the calls spread over N channels, a connection
     * each (chans[0] is `chan`). */
    grpc_channel *chans[PERF_MAX_CHANNELS];
    int next_chan;
    grpc_completion_queue *cq;
    grpc_slice method;
    grpc_slice gmsg;
    bool grpc_inited;
    SSL_CTX *ssl;                        /* HTTPS connections' context (--ssl) */
    grpc_metadata gmd[PERF_MAX_HEADERS]; /* -H as gRPC metadata */
    uint64_t timer_at_ns;                /* gRPC: when on_timer is due, 0: not armed */
    /* --request-rate: the schedule's start, requests sent on it, the
     * connections with nothing in flight, requests sent over 1 ms late
     * (every connection was busy) in the window, and the pacing timer. */
    uint64_t pace_t0_ns, pace_sent, late, blocked_upto;
    perf_conn **idle;
    int n_idle;
    struct event *pace_ev;
    uint64_t pace_at_ns; /* gRPC: when pace() is due, 0: not armed */

    /* The running step. */
    perf_conn *conns;
    int n_conns, n_busy;
    perf_phase phase;
    uint64_t t_measure_ns, t_end_ns;
    struct event *timer;
    infd_histogram *hist;
    uint64_t ok, errors, total, total_errors;
    char first_error[256];
};

/* ---- small helpers ------------------------------------------------------ */

static void note_error(perf *p, const char *fmt, ...) INFD_PRINTF(2, 3);

static void note_error(perf *p, const char *fmt, ...)
{
    if (p->first_error[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->first_error, sizeof(p->first_error), fmt, ap);
    va_end(ap);
}

/* "HOST:PORT", "http://HOST:PORT[/]" or ":PORT" (127.0.0.1). */
static int parse_hostport(const char *s, char *host, size_t host_n, int *port)
{
    if (strncmp(s, "http://", 7) == 0)
        s += 7;
    const char *colon = strrchr(s, ':');
    if (!colon)
        return -1;
    size_t hn = (size_t)(colon - s);
    if (hn >= host_n)
        return -1;
    if (hn == 0)
        snprintf(host, host_n, "127.0.0.1");
    else {
        memcpy(host, s, hn);
        host[hn] = '\0';
    }
    char *end = NULL;
    long v = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || (*end && strcmp(end, "/") != 0) || v < 1 || v > 65535)
        return -1;
    *port = (int)v;
    return 0;
}

static int parse_range(const char *s, int *a, int *b, int *c)
{
    long v[3] = { 0, 0, 1 };
    int n = 0;
    const char *q = s;
    while (n < 3) {
        char *end = NULL;
        v[n++] = strtol(q, &end, 10);
        if (end == q)
            return -1;
        if (*end == '\0')
            break;
        if (*end != ':')
            return -1;
        q = end + 1;
    }
    if (n == 1)
        v[1] = v[0];
    if (v[0] < 1 || v[1] < v[0] || v[2] < 1 || v[1] > PERF_MAX_CONCURRENCY)
        return -1;
    *a = (int)v[0];
    *b = (int)v[1];
    *c = (int)v[2];
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: infd perf --model NAME (--url HOST:PORT | --unix PATH) "
               "[options]\n"
               "  --protocol http|raw|grpc     default http (raw when --unix is given)\n"
               "  --streaming                  gRPC: ModelStreamInfer, one stream per "
               "connection\n"
               "  --rpc infer|live             gRPC unary: ModelInfer (default) or "
               "ServerLive, the\n"
               "                               trivial-RPC baseline of the same server\n"
               "  --binary                     HTTP: binary tensor data extension "
               "(default JSON)\n"
               "  --framed                     raw: framed mode (default headerless)\n"
               "  -H, --header NAME:VALUE      HTTP header, or gRPC metadata, on every request\n"
               "                               (repeatable; restricted APIs)\n"
               "  --ssl                        HTTP/gRPC over TLS (the server's certificate\n"
               "                               is verified)\n"
               "  --ssl-ca FILE                PEM CAs to trust (default the system's)\n"
               "  --ssl-cert FILE --ssl-key FILE\n"
               "                               a client certificate (mutual TLS)\n"
               "  --grpc-channels N            gRPC: spread the calls over N connections\n"
               "                               (default 1; HTTP/2 multiplexes them on one)\n"
               "  --shared-memory none|system|cuda\n"
               "                               HTTP/gRPC: inputs and outputs in a POSIX shared\n"
               "                               memory region, or in device memory of GPU 0\n"
               "                               shared by a CUDA IPC handle, registered with the\n"
               "                               server (Triton's extensions; default none)\n"
               "  --concurrency-range S:E:ST   concurrency S, S+ST, ... up to E "
               "(default 1:1:1)\n"
               "  --request-rate R             send R requests/s on schedule over the level's\n"
               "                               connections (open loop; default: each sends\n"
               "                               again when answered)\n"
               "  --request-count N            measure N answered requests per step\n"
               "  --measurement-ms MS          or measure for MS milliseconds (default "
               "2000)\n"
               "  --warmup-ms MS               requests before each measurement "
               "(default 200)\n"
               "  --batch-size N               rows per request (default 1)\n"
               "  --input-data zero|random     default random\n"
               "  --csv FILE                   also write the results as CSV\n"
               "  --metadata-url HOST:PORT     raw: where to GET the model metadata\n"
               "  --shape D0,D1,.. --dtype DT  raw without metadata: the input's full "
               "shape\n"
               "  --input-name NAME            raw framed without metadata\n"
               "  --output-bytes N             raw headerless without metadata: answer "
               "size\n");
}

/* ---- HTTP: metadata ----------------------------------------------------- */

typedef struct http_get {
    struct event_base *base;
    int code;
    char *body;
} http_get;

static void on_get_done(struct evhttp_request *req, void *arg)
{
    http_get *g = arg;
    g->code = req ? evhttp_request_get_response_code(req) : 0;
    if (req) {
        struct evbuffer *b = evhttp_request_get_input_buffer(req);
        size_t n = evbuffer_get_length(b);
        g->body = infd_malloc(n + 1);
        if (g->body) {
            evbuffer_remove(b, g->body, n);
            g->body[n] = '\0';
        }
    }
    event_base_loopexit(g->base, NULL);
}

/* A connection to host:port, over TLS with --ssl (the server's certificate
 * checked against the CAs and against `host`, a name or an IP address). */
static struct evhttp_connection *http_connect(perf *p, const char *host, int port)
{
    if (!p->ssl)
        return evhttp_connection_base_new(p->base, NULL, host, (ev_uint16_t)port);
    SSL *ssl = SSL_new(p->ssl);
    if (!ssl)
        return NULL;
    unsigned char ip[16];
    bool is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
    if (is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) != 1
              : SSL_set1_host(ssl, host) != 1 || SSL_set_tlsext_host_name(ssl, host) != 1) {
        SSL_free(ssl);
        return NULL;
    }
    struct bufferevent *bev = bufferevent_openssl_socket_new(
        p->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        SSL_free(ssl);
        return NULL;
    }
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    struct evhttp_connection *evcon =
        evhttp_connection_base_bufferevent_new(p->base, NULL, bev, host, (ev_uint16_t)port);
    if (!evcon)
        bufferevent_free(bev);
    return evcon;
}

/* One blocking HTTP request to HOST:PORT (`body`, JSON, may be NULL): the
 * status code (0: no answer), the answer in *answer (free it). */
static int http_exchange(perf *p, const char *host, int port, enum evhttp_cmd_type method,
                         const char *uri, const char *body, char **answer)
{
    http_get g = { .base = p->base };
    struct evhttp_connection *evcon = http_connect(p, host, port);
    struct evhttp_request *req = evhttp_request_new(on_get_done, &g);
    *answer = NULL;
    if (!evcon || !req) {
        if (req)
            evhttp_request_free(req);
        if (evcon)
            evhttp_connection_free(evcon);
        return 0;
    }
    evhttp_connection_set_timeout(evcon, PERF_TIMEOUT_S);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Host", host);
    for (int i = 0; i < p->o.n_headers; i++)
        evhttp_add_header(evhttp_request_get_output_headers(req), p->o.header_name[i],
                          p->o.header_value[i]);
    if (body) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                          "application/json");
        evbuffer_add(evhttp_request_get_output_buffer(req), body, strlen(body));
    }
    if (evhttp_make_request(evcon, req, method, uri) == 0)
        event_base_dispatch(p->base);
    evhttp_connection_free(evcon);
    *answer = g.body;
    return g.code;
}

static int fetch_metadata(perf *p)
{
    perf_options *o = &p->o;
    const char *host = o->meta_host;
    int port = o->meta_port;
    int rc = -1;
    yajl_val root = NULL;
    char uri[512], *answer = NULL;
    snprintf(uri, sizeof(uri), "/v2/models/%s", o->model);
    int code = http_exchange(p, host, port, EVHTTP_REQ_GET, uri, NULL, &answer);
    if (code != 200) {
        fprintf(stderr, "infd perf: GET http://%s:%d%s: %s%d %s\n", host, port, uri,
                code ? "HTTP " : "no answer ", code, answer ? answer : "");
        goto out;
    }
    char errbuf[256];
    root = yajl_tree_parse(answer ? answer : "", errbuf, sizeof(errbuf));
    if (!root) {
        fprintf(stderr, "infd perf: model metadata is not JSON: %s\n", errbuf);
        goto out;
    }
    const char *kinds[2] = { "inputs", "outputs" };
    for (int k = 0; k < 2; k++) {
        const char *path[] = { kinds[k], NULL };
        yajl_val arr = yajl_tree_get(root, path, yajl_t_array);
        size_t n = arr ? YAJL_GET_ARRAY(arr)->len : 0;
        if (n == 0 || n > PERF_MAX_IO) {
            fprintf(stderr, "infd perf: model metadata: '%s' missing, empty or too long\n",
                    kinds[k]);
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            yajl_val t = YAJL_GET_ARRAY(arr)->values[i];
            const char *pn[] = { "name", NULL }, *pd[] = { "datatype", NULL },
                       *ps[] = { "shape", NULL };
            yajl_val name = yajl_tree_get(t, pn, yajl_t_string);
            yajl_val dt = yajl_tree_get(t, pd, yajl_t_string);
            yajl_val shape = yajl_tree_get(t, ps, yajl_t_array);
            perf_tensor *x = k == 0 ? &p->in[i] : &p->out[i];
            const char *nm = name ? YAJL_GET_STRING(name) : NULL;
            const char *dtn = dt ? YAJL_GET_STRING(dt) : NULL;
            if (!nm || !dtn || !shape || YAJL_GET_ARRAY(shape)->len > INFD_MAX_RANK + 1 ||
                strlen(nm) >= sizeof(x->name)) {
                fprintf(stderr, "infd perf: model metadata: %s[%zu] malformed\n", kinds[k], i);
                goto out;
            }
            snprintf(x->name, sizeof(x->name), "%s", nm);
            x->dtype = infd_dtype_from_name(dtn);
            if (x->dtype == INFD_DTYPE_INVALID || x->dtype == INFD_DTYPE_BYTES) {
                fprintf(stderr, "infd perf: %s '%s': datatype %s is not supported by perf\n",
                        kinds[k], x->name, dtn);
                goto out;
            }
            x->rank = (int)YAJL_GET_ARRAY(shape)->len;
            for (int d = 0; d < x->rank; d++) {
                yajl_val v = YAJL_GET_ARRAY(shape)->values[d];
                x->shape[d] = YAJL_IS_INTEGER(v) ? YAJL_GET_INTEGER(v) : -2;
                if (x->shape[d] == -1 && d == 0) {
                    x->shape[d] = o->batch;
                    if (k == 0)
                        p->model_batches = true;
                } else if (x->shape[d] < 0) {
                    fprintf(stderr, "infd perf: %s '%s': dim %d is variable (not supported)\n",
                            kinds[k], x->name, d);
                    goto out;
                }
            }
        }
        if (k == 0)
            p->n_inputs = (int)n;
        else
            p->n_outputs = (int)n;
    }
    if (!p->model_batches && o->batch != 1) {
        fprintf(stderr, "infd perf: model '%s' does not batch: --batch-size must be 1\n", o->model);
        goto out;
    }
    rc = 0;
out:
    yajl_tree_free(root);
    infd_free(answer);
    return rc;
}

/* Raw without metadata: one input from --shape/--dtype. */
static int inputs_from_options(perf *p)
{
    perf_options *o = &p->o;
    infd_shape s;
    perf_tensor *x = &p->in[0];
    if (!o->shape || !o->dtype || infd_cli_parse_dims(o->shape, &s) != 0) {
        fprintf(stderr, "infd perf: raw without --metadata-url needs --shape D0,D1,.. and "
                        "--dtype (the input's full shape)\n");
        return -1;
    }
    x->dtype = infd_dtype_from_name(o->dtype);
    if (x->dtype == INFD_DTYPE_INVALID || x->dtype == INFD_DTYPE_BYTES) {
        fprintf(stderr, "infd perf: --dtype %s: not a fixed-size KServe datatype\n", o->dtype);
        return -1;
    }
    x->rank = s.rank;
    memcpy(x->shape, s.dims, sizeof(int64_t) * (size_t)s.rank);
    snprintf(x->name, sizeof(x->name), "%s", o->input_name ? o->input_name : "");
    p->n_inputs = 1;
    if (!o->framed && o->output_bytes <= 0) {
        fprintf(stderr, "infd perf: raw headerless without --metadata-url needs "
                        "--output-bytes\n");
        return -1;
    }
    if (o->framed && !o->input_name) {
        fprintf(stderr, "infd perf: raw framed without --metadata-url needs --input-name\n");
        return -1;
    }
    return 0;
}

/* ---- request bodies ----------------------------------------------------- */

static int make_inputs(perf *p)
{
    for (int i = 0; i < p->n_inputs; i++) {
        perf_tensor *x = &p->in[i];
        infd_shape s;
        infd_error err = { 0 };
        if (infd_shape_init(&s, x->rank, x->shape, &err) != INFD_STATUS_OK ||
            infd_tensor_nbytes_for(x->dtype, &s, &x->nbytes, &err) != INFD_STATUS_OK) {
            fprintf(stderr, "infd perf: input '%s': %s\n", x->name, err.msg);
            return -1;
        }
        x->data = infd_calloc(1, x->nbytes ? x->nbytes : 1);
        if (!x->data)
            return -1;
        if (p->o.random_data) {
            infd_tensor t = { .dtype = x->dtype, .shape = s, .data = x->data, .nbytes = x->nbytes };
            infd_cli_fill_random(&t, (uint64_t)i + 1);
        }
    }
    for (int i = 0; i < p->n_outputs; i++) {
        perf_tensor *x = &p->out[i];
        infd_shape s;
        if (infd_shape_init(&s, x->rank, x->shape, NULL) != INFD_STATUS_OK ||
            infd_tensor_nbytes_for(x->dtype, &s, &x->nbytes, NULL) != INFD_STATUS_OK)
            return -1;
        p->answer_bytes += x->nbytes;
    }
    return 0;
}

static void json_value(infd_strbuf *b, infd_dtype dt, const uint8_t *d, int64_t i)
{
    switch (dt) {
    case INFD_DTYPE_BOOL:
        infd_strbuf_printf(b, "%s", d[i] ? "true" : "false");
        break;
    case INFD_DTYPE_UINT8:
        infd_strbuf_printf(b, "%u", d[i]);
        break;
    case INFD_DTYPE_INT8:
        infd_strbuf_printf(b, "%d", ((const int8_t *)d)[i]);
        break;
    case INFD_DTYPE_UINT16:
        infd_strbuf_printf(b, "%u", ((const uint16_t *)d)[i]);
        break;
    case INFD_DTYPE_INT16:
        infd_strbuf_printf(b, "%d", ((const int16_t *)d)[i]);
        break;
    case INFD_DTYPE_UINT32:
        infd_strbuf_printf(b, "%" PRIu32, ((const uint32_t *)d)[i]);
        break;
    case INFD_DTYPE_INT32:
        infd_strbuf_printf(b, "%" PRId32, ((const int32_t *)d)[i]);
        break;
    case INFD_DTYPE_UINT64:
        infd_strbuf_printf(b, "%" PRIu64, ((const uint64_t *)d)[i]);
        break;
    case INFD_DTYPE_INT64:
        infd_strbuf_printf(b, "%" PRId64, ((const int64_t *)d)[i]);
        break;
    case INFD_DTYPE_FP16:
        infd_strbuf_printf(b, "%.9g", (double)infd_fp16_to_fp32(((const uint16_t *)d)[i]));
        break;
    case INFD_DTYPE_BF16:
        infd_strbuf_printf(b, "%.9g", (double)infd_bf16_to_fp32(((const uint16_t *)d)[i]));
        break;
    case INFD_DTYPE_FP32:
        infd_strbuf_printf(b, "%.9g", (double)((const float *)d)[i]);
        break;
    case INFD_DTYPE_FP64:
        infd_strbuf_printf(b, "%.17g", ((const double *)d)[i]);
        break;
    default:
        infd_strbuf_puts(b, "0");
        break;
    }
}

static void json_shape(infd_strbuf *b, const perf_tensor *x)
{
    infd_strbuf_puts(b, "[");
    for (int d = 0; d < x->rank; d++)
        infd_strbuf_printf(b, "%s%" PRId64, d ? "," : "", x->shape[d]);
    infd_strbuf_puts(b, "]");
}

/* KServe v2 JSON body, or the binary extension's JSON header plus data. */
static int build_http_body(perf *p)
{
    infd_strbuf b = { 0 };
    infd_strbuf_puts(&b, "{\"inputs\":[");
    for (int i = 0; i < p->n_inputs; i++) {
        perf_tensor *x = &p->in[i];
        infd_strbuf_printf(&b, "%s{\"name\":\"%s\",\"shape\":", i ? "," : "", x->name);
        json_shape(&b, x);
        infd_strbuf_printf(&b, ",\"datatype\":\"%s\"", infd_dtype_name(x->dtype));
        if (p->o.shm) {
            infd_strbuf_printf(&b,
                               ",\"parameters\":{\"shared_memory_region\":\"%s\","
                               "\"shared_memory_offset\":%zu,\"shared_memory_byte_size\":%zu}}",
                               p->shm_region, p->shm_off[i], x->nbytes);
            continue;
        }
        if (p->o.binary) {
            infd_strbuf_printf(&b, ",\"parameters\":{\"binary_data_size\":%zu}}", x->nbytes);
            continue;
        }
        infd_strbuf_puts(&b, ",\"data\":[");
        int64_t n = (int64_t)(x->nbytes / infd_dtype_size(x->dtype));
        for (int64_t k = 0; k < n; k++) {
            if (k)
                infd_strbuf_puts(&b, ",");
            json_value(&b, x->dtype, x->data, k);
        }
        infd_strbuf_puts(&b, "]}");
    }
    infd_strbuf_puts(&b, "]");
    if (p->o.shm) {
        infd_strbuf_puts(&b, ",\"outputs\":[");
        for (int i = 0; i < p->n_outputs; i++)
            infd_strbuf_printf(&b,
                               "%s{\"name\":\"%s\",\"parameters\":{\"shared_memory_region\":"
                               "\"%s\",\"shared_memory_offset\":%zu,"
                               "\"shared_memory_byte_size\":%zu}}",
                               i ? "," : "", p->out[i].name, p->shm_region,
                               p->shm_off[PERF_MAX_IO + i], p->out[i].nbytes);
        infd_strbuf_puts(&b, "]");
    }
    if (p->o.binary)
        infd_strbuf_puts(&b, ",\"parameters\":{\"binary_data_output\":true}");
    infd_strbuf_puts(&b, "}");
    p->json_len = b.len;
    if (p->o.binary) {
        for (int i = 0; i < p->n_inputs; i++)
            infd_strbuf_put(&b, p->in[i].data, p->in[i].nbytes);
    }
    p->body = (uint8_t *)infd_strbuf_take(&b, &p->body_len);
    if (!p->body)
        return -1;
    snprintf(p->json_len_text, sizeof(p->json_len_text), "%zu", p->json_len);
    return 0;
}

static void put_le(uint8_t *q, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        q[i] = (uint8_t)(v >> (8 * i));
}

/* docs/RAW_PROTOCOL.md: headerless = the input's bytes; framed = header,
 * descriptors, data. */
static int build_raw_body(perf *p)
{
    if (!p->o.framed) {
        if (p->n_inputs != 1) {
            fprintf(stderr,
                    "infd perf: model '%s' has %d inputs: headerless mode needs one "
                    "(use --framed)\n",
                    p->o.model, p->n_inputs);
            return -1;
        }
        if (p->o.batch != 1) {
            fprintf(stderr, "infd perf: headerless mode sends batch 1 (use --framed)\n");
            return -1;
        }
        p->body = infd_malloc(p->in[0].nbytes ? p->in[0].nbytes : 1);
        if (!p->body)
            return -1;
        memcpy(p->body, p->in[0].data, p->in[0].nbytes);
        p->body_len = p->in[0].nbytes;
        if (p->o.output_bytes > 0)
            p->answer_bytes = (size_t)p->o.output_bytes;
        return 0;
    }
    size_t desc = 0, data = 0;
    for (int i = 0; i < p->n_inputs; i++) {
        desc += 1 + strlen(p->in[i].name) + 2 + 8 * (size_t)p->in[i].rank + 8;
        data += p->in[i].nbytes;
    }
    p->body_len = RAW_HEADER_BYTES + desc + data;
    p->body = infd_calloc(1, p->body_len);
    if (!p->body)
        return -1;
    uint8_t *q = p->body;
    memcpy(q, "INFD", 4);
    q[4] = 1;
    put_le(q + 8, 1, 8);
    put_le(q + 16, (uint64_t)p->n_inputs, 2);
    put_le(q + 20, desc, 4);
    put_le(q + 24, data, 8);
    q += RAW_HEADER_BYTES;
    for (int i = 0; i < p->n_inputs; i++) {
        perf_tensor *x = &p->in[i];
        size_t ln = strlen(x->name);
        if (ln == 0 || ln > 255) {
            fprintf(stderr, "infd perf: input name '%s' does not fit the framed protocol\n",
                    x->name);
            return -1;
        }
        *q++ = (uint8_t)ln;
        memcpy(q, x->name, ln);
        q += ln;
        *q++ = (uint8_t)x->dtype;
        *q++ = (uint8_t)x->rank;
        for (int d = 0; d < x->rank; d++, q += 8)
            put_le(q, (uint64_t)x->shape[d], 8);
        put_le(q, x->nbytes, 8);
        q += 8;
    }
    for (int i = 0; i < p->n_inputs; i++) {
        memcpy(q, p->in[i].data, p->in[i].nbytes);
        q += p->in[i].nbytes;
    }
    return 0;
}

/* ---- the step machinery ------------------------------------------------- */

static void issue(perf_conn *c);
static void pace(perf *p);

static void end_measure(perf *p, uint64_t t_ns)
{
    if (p->phase == PH_DRAIN)
        return;
    p->phase = PH_DRAIN;
    p->t_end_ns = t_ns;
    if (p->n_busy == 0)
        event_base_loopexit(p->base, NULL);
}

static void begin_measure(perf *p)
{
    p->phase = PH_MEASURE;
    p->t_measure_ns = infd_clock_ns();
    if (p->o.request_count == 0) {
        struct timeval tv = { p->o.measurement_ms / 1000, (p->o.measurement_ms % 1000) * 1000 };
        evtimer_add(p->timer, &tv);
        p->timer_at_ns = p->t_measure_ns + (uint64_t)p->o.measurement_ms * 1000000u;
    }
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    perf *p = arg;
    (void)fd;
    (void)what;
    if (p->phase == PH_WARMUP)
        begin_measure(p);
    else
        end_measure(p, infd_clock_ns());
}

/* One request answered (ok) or failed; issues the next one. */
static void complete(perf_conn *c, bool ok)
{
    perf *p = c->p;
    uint64_t t1 = infd_clock_ns();
    c->busy = false;
    p->n_busy--;
    p->total++;
    if (!ok)
        p->total_errors++;
    if (p->phase == PH_MEASURE) {
        if (ok) {
            infd_histogram_record(p->hist, t1 - c->t0_ns);
            p->ok++;
        } else {
            p->errors++;
        }
        if (p->o.request_count > 0 && (int64_t)(p->ok + p->errors) >= p->o.request_count)
            end_measure(p, t1);
    }
    if (p->phase == PH_DRAIN) {
        if (p->n_busy == 0)
            event_base_loopexit(p->base, NULL);
        return;
    }
    if (p->o.request_rate > 0) {
        p->idle[p->n_idle++] = c;
        pace(p);
        return;
    }
    issue(c);
}

static void on_fail_later(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    complete(arg, false);
}

/* A request that failed before reaching the server (no connection, out of
 * memory) completes from the loop 1 ms later: completing it at once would
 * recurse through issue() without bound and spin against a dead server. */
static void fail_later(perf_conn *c)
{
    struct timeval tv = { 0, 1000 };
    if (event_base_once(c->p->base, -1, EV_TIMEOUT, on_fail_later, c, &tv) != 0) {
        infd_clock_sleep_us(1000);
        complete(c, false);
    }
}

/* ---- HTTP requests ------------------------------------------------------ */

static void on_http_done(struct evhttp_request *req, void *arg)
{
    perf_conn *c = arg;
    int code = req ? evhttp_request_get_response_code(req) : 0;
    if (code != 200) {
        char body[160] = "";
        if (req) {
            struct evbuffer *b = evhttp_request_get_input_buffer(req);
            size_t n = INFD_MIN(evbuffer_get_length(b), sizeof(body) - 1);
            evbuffer_copyout(b, body, n);
            body[n] = '\0';
        }
        note_error(c->p, "HTTP %d%s%s", code, code ? ": " : " (no answer)", body);
    }
    /* evhttp opens its sockets itself, with Nagle's algorithm on: a large
     * body's last partial segment then waits for the server's delayed ACK
     * (40 ms stalls at p95 with 600 KB inputs). Switch it off once per
     * socket, as soon as the connection exists; only its first request goes
     * without. */
    struct bufferevent *bev = evhttp_connection_get_bufferevent(c->evcon);
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd >= 0 && fd != c->nodelay_fd) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c->nodelay_fd = fd;
    }
    complete(c, code == 200);
}

#define PERF_MAX_SINGLE_WRITE (4 << 20)

static void issue_http(perf_conn *c)
{
    perf *p = c->p;
    if (!c->evcon) {
        c->evcon = http_connect(p, p->o.host, p->o.port);
        if (c->evcon) {
            evhttp_connection_set_timeout(c->evcon, PERF_TIMEOUT_S);
            /* libevent writes at most 16 KB per call by default: a 600 KB
             * body took 37 writev calls and loop passes. */
            bufferevent_set_max_single_write(evhttp_connection_get_bufferevent(c->evcon),
                                             PERF_MAX_SINGLE_WRITE);
        }
    }
    struct evhttp_request *req = c->evcon ? evhttp_request_new(on_http_done, c) : NULL;
    if (!req) {
        note_error(p, "out of memory");
        fail_later(c);
        return;
    }
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Host", p->host_header);
    for (int i = 0; i < p->o.n_headers; i++)
        evhttp_add_header(h, p->o.header_name[i], p->o.header_value[i]);
    if (p->o.binary) {
        evhttp_add_header(h, "Content-Type", "application/octet-stream");
        evhttp_add_header(h, "Inference-Header-Content-Length", p->json_len_text);
    } else {
        evhttp_add_header(h, "Content-Type", "application/json");
    }
    evbuffer_add_reference(evhttp_request_get_output_buffer(req), p->body, p->body_len, NULL, NULL);
    if (evhttp_make_request(c->evcon, req, EVHTTP_REQ_POST, p->uri) != 0) {
        /* evhttp_make_request frees the request on failure. */
        note_error(p, "cannot send an HTTP request to %s:%d", p->o.host, p->o.port);
        fail_later(c);
    }
}

/* ---- raw requests ------------------------------------------------------- */

static void raw_close(perf_conn *c)
{
    if (c->rev)
        event_free(c->rev);
    if (c->wev)
        event_free(c->wev);
    c->rev = c->wev = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

static void raw_fail(perf_conn *c, const char *what)
{
    note_error(c->p, "raw: %s", what);
    raw_close(c);
    complete(c, false);
}

static void on_raw_event(evutil_socket_t fd, short what, void *arg);

static int raw_connect(perf_conn *c)
{
    perf *p = c->p;
    int fd;
    if (p->o.unix_path) {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", p->o.unix_path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
            note_error(p, "raw: connect %s: %s", p->o.unix_path, strerror(errno));
            if (fd >= 0)
                close(fd);
            return -1;
        }
    } else {
        fd = socket(p->raw_addr->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, p->raw_addr->ai_addr, p->raw_addr->ai_addrlen) != 0) {
            note_error(p, "raw: connect %s:%d: %s", p->o.host, p->o.port, strerror(errno));
            if (fd >= 0)
                close(fd);
            return -1;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    c->fd = fd;
    c->rev = event_new(p->base, fd, EV_READ | EV_PERSIST, on_raw_event, c);
    c->wev = event_new(p->base, fd, EV_WRITE | EV_PERSIST, on_raw_event, c);
    if (!c->rev || !c->wev) {
        raw_close(c);
        return -1;
    }
    return 0;
}

static bool raw_write(perf_conn *c)
{
    perf *p = c->p;
    while (c->sent < p->body_len) {
        ssize_t n = send(c->fd, p->body + c->sent, p->body_len - c->sent, MSG_NOSIGNAL);
        if (n > 0) {
            c->sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            event_add(c->wev, NULL);
            return true;
        }
        raw_fail(c, "send failed (connection closed by the server?)");
        return false;
    }
    event_del(c->wev);
    return true;
}

static bool ensure_rbuf(perf_conn *c, size_t n)
{
    if (n <= c->rcap)
        return true;
    uint8_t *q = infd_realloc(c->rbuf, n);
    if (!q)
        return false;
    c->rbuf = q;
    c->rcap = n;
    return true;
}

static uint64_t get_le(const uint8_t *q, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | q[i];
    return v;
}

static void raw_read(perf_conn *c)
{
    perf *p = c->p;
    for (;;) {
        ssize_t n = recv(c->fd, c->rbuf + c->got, c->need - c->got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            raw_fail(c, n == 0 ? "the server closed the connection" : strerror(errno));
            return;
        }
        c->got += (size_t)n;
        if (c->got < c->need)
            continue;
        if (!p->o.framed) {
            event_del(c->rev);
            complete(c, true);
            return;
        }
        if (c->stage == 0) {
            const uint8_t *h = c->rbuf;
            if (memcmp(h, "INFD", 4) != 0) {
                raw_fail(c, "bad magic in an answer");
                return;
            }
            size_t rest =
                (size_t)get_le(h + 18, 2) + (size_t)get_le(h + 20, 4) + (size_t)get_le(h + 24, 8);
            c->stage = 1;
            if (!ensure_rbuf(c, RAW_HEADER_BYTES + rest)) {
                raw_fail(c, "out of memory");
                return;
            }
            c->need = RAW_HEADER_BYTES + rest;
            if (c->got < c->need)
                continue;
        }
        uint16_t status = (uint16_t)get_le(c->rbuf + 6, 2);
        if (status != 0) {
            size_t ml = (size_t)get_le(c->rbuf + 18, 2);
            note_error(p, "raw: %s: %.*s", infd_status_name((infd_status)status), (int)ml,
                       (const char *)c->rbuf + RAW_HEADER_BYTES);
        }
        event_del(c->rev);
        if (c->rbuf[5] & 1) /* the server closes after this answer */
            raw_close(c);
        complete(c, status == 0);
        return;
    }
}

static void on_raw_event(evutil_socket_t fd, short what, void *arg)
{
    perf_conn *c = arg;
    (void)fd;
    if (what & EV_TIMEOUT) {
        raw_fail(c, "no answer in time");
        return;
    }
    if ((what & EV_WRITE) && !raw_write(c))
        return;
    if (what & EV_READ)
        raw_read(c);
}

static void issue_raw(perf_conn *c)
{
    perf *p = c->p;
    if (c->fd < 0 && raw_connect(c) != 0) {
        fail_later(c);
        return;
    }
    c->sent = 0;
    c->got = 0;
    c->stage = 0;
    c->need = p->o.framed ? RAW_HEADER_BYTES : p->answer_bytes;
    if (!ensure_rbuf(c, c->need ? c->need : 1)) {
        note_error(p, "out of memory");
        fail_later(c);
        return;
    }
    struct timeval tv = { PERF_TIMEOUT_S, 0 };
    event_add(c->rev, &tv);
    if (!raw_write(c))
        return;
    if (c->need == 0) {
        event_del(c->rev);
        complete(c, true);
    }
}

/* ---- gRPC requests ------------------------------------------------------ */

/* Connects the channel (lazily: the first call dials) and its queue. */
static int grpc_open(perf *p)
{
    grpc_init();
    p->grpc_inited = true;
    for (int i = 0; i < p->o.n_headers; i++) {
        p->gmd[i].key = grpc_slice_from_static_string(p->o.header_name[i]);
        p->gmd[i].value = grpc_slice_from_static_string(p->o.header_value[i]);
    }
    char target[300];
    snprintf(target, sizeof(target), strchr(p->o.host, ':') ? "[%s]:%d" : "%s:%d", p->o.host,
             p->o.port);
    grpc_arg args[3];
    memset(args, 0, sizeof(args));
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = -1;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = -1;
    /* Channels of one process share a connection unless each has a
     * subchannel pool of its own. */
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
    args[2].value.integer = 1;
    grpc_channel_args ch = { 3, args };
    grpc_channel_credentials *creds = NULL;
    if (p->o.ssl) {
        /* gRPC core takes PEM text; NULL roots: its default (the system's). */
        char *ca = NULL, *cert = NULL, *key = NULL;
        infd_error err;
        infd_error_clear(&err);
        if ((p->o.ssl_ca && infd_tls_read_pem("--ssl-ca", p->o.ssl_ca, &ca, &err) != 0) ||
            (p->o.ssl_cert && infd_tls_read_pem("--ssl-cert", p->o.ssl_cert, &cert, &err) != 0) ||
            (p->o.ssl_key && infd_tls_read_pem("--ssl-key", p->o.ssl_key, &key, &err) != 0)) {
            fprintf(stderr, "infd perf: %s\n", err.msg);
            infd_free(ca);
            infd_free(cert);
            return -1;
        }
        grpc_ssl_pem_key_cert_pair pair = { .private_key = key, .cert_chain = cert };
        creds = grpc_ssl_credentials_create(ca, cert && key ? &pair : NULL, NULL, NULL);
        infd_free(ca);
        infd_free(cert);
        infd_free(key);
    } else {
        creds = grpc_insecure_credentials_create();
    }
    int n = p->o.channels > 0 ? p->o.channels : 1;
    for (int k = 0; k < n; k++)
        p->chans[k] = grpc_channel_create(target, creds, &ch);
    p->chan = p->chans[0];
    grpc_channel_credentials_release(creds);
    p->cq = grpc_completion_queue_create_for_next(NULL);
    bool ok = true;
    for (int k = 0; k < n; k++)
        ok &= p->chans[k] != NULL;
    if (!ok || !p->cq) {
        fprintf(stderr, "infd perf: cannot create a gRPC channel to %s\n", target);
        return -1;
    }
    p->method = grpc_slice_from_static_string(
        p->o.streaming  ? "/inference.GRPCInferenceService/ModelStreamInfer"
        : p->o.rpc_live ? "/inference.GRPCInferenceService/ServerLive"
                        : "/inference.GRPCInferenceService/ModelInfer");
    return 0;
}

static void grpc_close(perf *p)
{
    if (p->cq) {
        grpc_completion_queue_shutdown(p->cq);
        while (grpc_completion_queue_next(p->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
               GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(p->cq);
        p->cq = NULL;
    }
    for (int k = 0; k < PERF_MAX_CHANNELS; k++)
        if (p->chans[k])
            grpc_channel_destroy(p->chans[k]);
    memset(p->chans, 0, sizeof(p->chans));
    p->chan = NULL;
    grpc_slice_unref(p->gmsg);
    p->gmsg = grpc_empty_slice();
    if (p->grpc_inited)
        grpc_shutdown();
    p->grpc_inited = false;
}

/* One unary call on the perf channel, waited for: `req` packed, the reply
 * unpacked with `d`. NULL (after a message) on failure. */
static ProtobufCMessage *grpc_unary(perf *p, const char *method, const ProtobufCMessage *req,
                                    const ProtobufCMessageDescriptor *d)
{
    size_t n = protobuf_c_message_get_packed_size(req);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(req, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&s, 1), *recv = NULL;
    grpc_slice_unref(s);
    grpc_metadata_array md_in, md_trail;
    grpc_metadata_array_init(&md_in);
    grpc_metadata_array_init(&md_trail);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                   gpr_time_from_seconds(PERF_TIMEOUT_S, GPR_TIMESPAN));
    grpc_call *call =
        grpc_channel_create_call(p->chan, NULL, GRPC_PROPAGATE_DEFAULTS, p->cq,
                                 grpc_slice_from_static_string(method), NULL, dl, NULL);
    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = (size_t)p->o.n_headers;
    ops[0].data.send_initial_metadata.metadata = p->gmd;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_in;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &md_trail;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &details;
    ProtobufCMessage *m = NULL;
    if (!call || grpc_call_start_batch(call, ops, 6, call, NULL) != GRPC_CALL_OK) {
        fprintf(stderr, "infd perf: gRPC %s: cannot start the call\n", method);
    } else {
        grpc_event ev;
        do
            ev = grpc_completion_queue_next(p->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        while (ev.type != GRPC_OP_COMPLETE || ev.tag != call);
        if (status != GRPC_STATUS_OK || !recv) {
            char *msg = grpc_slice_to_c_string(details);
            fprintf(stderr, "infd perf: gRPC %s at %s:%d: status %d%s%s\n", method, p->o.host,
                    p->o.port, (int)status, msg && *msg ? ": " : "", msg ? msg : "");
            gpr_free(msg);
        } else {
            grpc_byte_buffer_reader r;
            if (grpc_byte_buffer_reader_init(&r, recv)) {
                grpc_slice all = grpc_byte_buffer_reader_readall(&r);
                m = protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(all),
                                              GRPC_SLICE_START_PTR(all));
                grpc_slice_unref(all);
                grpc_byte_buffer_reader_destroy(&r);
            }
            if (!m)
                fprintf(stderr, "infd perf: gRPC %s: malformed reply\n", method);
        }
    }
    if (call)
        grpc_call_unref(call);
    grpc_byte_buffer_destroy(send);
    if (recv)
        grpc_byte_buffer_destroy(recv);
    grpc_metadata_array_destroy(&md_in);
    grpc_metadata_array_destroy(&md_trail);
    grpc_slice_unref(details);
    return m;
}

/* The model's inputs and outputs from the ModelMetadata RPC. */
static int grpc_fetch_metadata(perf *p)
{
    Inference__ModelMetadataRequest rq = INFERENCE__MODEL_METADATA_REQUEST__INIT;
    rq.name = (char *)p->o.model;
    Inference__ModelMetadataResponse *md = (Inference__ModelMetadataResponse *)grpc_unary(
        p, "/inference.GRPCInferenceService/ModelMetadata", &rq.base,
        &inference__model_metadata_response__descriptor);
    if (!md)
        return -1;
    int rc = -1;
    for (int k = 0; k < 2; k++) {
        size_t n = k == 0 ? md->n_inputs : md->n_outputs;
        Inference__ModelMetadataResponse__TensorMetadata **ts = k == 0 ? md->inputs : md->outputs;
        if (n == 0 || n > PERF_MAX_IO) {
            fprintf(stderr, "infd perf: model metadata: %s missing or too many\n",
                    k == 0 ? "inputs" : "outputs");
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            perf_tensor *x = k == 0 ? &p->in[i] : &p->out[i];
            if (strlen(ts[i]->name) >= sizeof(x->name) || ts[i]->n_shape > INFD_MAX_RANK + 1) {
                fprintf(stderr, "infd perf: model metadata: tensor %zu malformed\n", i);
                goto out;
            }
            snprintf(x->name, sizeof(x->name), "%s", ts[i]->name);
            x->dtype = infd_dtype_from_name(ts[i]->datatype);
            if (x->dtype == INFD_DTYPE_INVALID || x->dtype == INFD_DTYPE_BYTES) {
                fprintf(stderr, "infd perf: '%s': datatype %s is not supported by perf\n", x->name,
                        ts[i]->datatype);
                goto out;
            }
            x->rank = (int)ts[i]->n_shape;
            for (int d = 0; d < x->rank; d++) {
                x->shape[d] = ts[i]->shape[d];
                if (x->shape[d] == -1 && d == 0) {
                    x->shape[d] = p->o.batch;
                    if (k == 0)
                        p->model_batches = true;
                } else if (x->shape[d] < 0) {
                    fprintf(stderr, "infd perf: '%s': dim %d is variable (not supported)\n",
                            x->name, d);
                    goto out;
                }
            }
        }
        if (k == 0)
            p->n_inputs = (int)n;
        else
            p->n_outputs = (int)n;
    }
    if (!p->model_batches && p->o.batch != 1) {
        fprintf(stderr, "infd perf: model '%s' does not batch: --batch-size must be 1\n",
                p->o.model);
        goto out;
    }
    rc = 0;
out:
    protobuf_c_message_free_unpacked(&md->base, NULL);
    return rc;
}

/* The ModelInferRequest, packed once: every input raw (as Triton's clients
 * send them). Each call wraps the same slice, without a copy. */
static int build_grpc_request(perf *p)
{
    if (p->o.rpc_live) {
        /* --rpc live: an empty ServerLiveRequest (zero bytes). */
        p->gmsg = grpc_empty_slice();
        return 0;
    }
    Inference__ModelInferRequest r = INFERENCE__MODEL_INFER_REQUEST__INIT;
    Inference__ModelInferRequest__InferInputTensor t[PERF_MAX_IO], *pt[PERF_MAX_IO];
    ProtobufCBinaryData raw[PERF_MAX_IO];
    r.model_name = (char *)p->o.model;
    for (int i = 0; i < p->n_inputs; i++) {
        inference__model_infer_request__infer_input_tensor__init(&t[i]);
        t[i].name = p->in[i].name;
        t[i].datatype = (char *)infd_dtype_name(p->in[i].dtype);
        t[i].n_shape = (size_t)p->in[i].rank;
        t[i].shape = p->in[i].shape;
        pt[i] = &t[i];
        raw[i].data = p->in[i].data;
        raw[i].len = p->in[i].nbytes;
    }
    r.n_inputs = (size_t)p->n_inputs;
    r.inputs = pt;
    r.n_raw_input_contents = (size_t)p->n_inputs;
    r.raw_input_contents = raw;
    /* --shared-memory: three parameters per tensor instead of its bytes. */
    Inference__InferParameter pv[2 * PERF_MAX_IO][3];
    Inference__ModelInferRequest__InferInputTensor__ParametersEntry ie[PERF_MAX_IO][3],
        *pie[PERF_MAX_IO][3];
    Inference__ModelInferRequest__InferRequestedOutputTensor ot[PERF_MAX_IO], *pot[PERF_MAX_IO];
    Inference__ModelInferRequest__InferRequestedOutputTensor__ParametersEntry oe[PERF_MAX_IO][3],
        *poe[PERF_MAX_IO][3];
    static const char *const keys[3] = { "shared_memory_region", "shared_memory_offset",
                                         "shared_memory_byte_size" };
    if (p->o.shm) {
        for (int k = 0; k < p->n_inputs + p->n_outputs; k++) {
            bool in = k < p->n_inputs;
            int i = in ? k : k - p->n_inputs;
            size_t off = p->shm_off[in ? i : PERF_MAX_IO + i];
            size_t size = in ? p->in[i].nbytes : p->out[i].nbytes;
            for (int q = 0; q < 3; q++) {
                inference__infer_parameter__init(&pv[k][q]);
                if (q == 0) {
                    pv[k][q].parameter_choice_case =
                        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
                    pv[k][q].string_param = p->shm_region;
                } else {
                    pv[k][q].parameter_choice_case =
                        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
                    pv[k][q].int64_param = (int64_t)(q == 1 ? off : size);
                }
                if (in) {
                    inference__model_infer_request__infer_input_tensor__parameters_entry__init(
                        &ie[i][q]);
                    ie[i][q].key = (char *)keys[q];
                    ie[i][q].value = &pv[k][q];
                    pie[i][q] = &ie[i][q];
                } else {
                    inference__model_infer_request__infer_requested_output_tensor__parameters_entry__init(
                        &oe[i][q]);
                    oe[i][q].key = (char *)keys[q];
                    oe[i][q].value = &pv[k][q];
                    poe[i][q] = &oe[i][q];
                }
            }
            if (in) {
                t[i].n_parameters = 3;
                t[i].parameters = pie[i];
            } else {
                inference__model_infer_request__infer_requested_output_tensor__init(&ot[i]);
                ot[i].name = p->out[i].name;
                ot[i].n_parameters = 3;
                ot[i].parameters = poe[i];
                pot[i] = &ot[i];
            }
        }
        r.n_raw_input_contents = 0;
        r.n_outputs = (size_t)p->n_outputs;
        r.outputs = pot;
    }
    size_t n = protobuf_c_message_get_packed_size(&r.base);
    p->gmsg = grpc_slice_malloc(n);
    protobuf_c_message_pack(&r.base, GRPC_SLICE_START_PTR(p->gmsg));
    return 0;
}

static void grpc_call_done(perf_conn *c)
{
    if (c->call)
        grpc_call_unref(c->call);
    c->call = NULL;
    grpc_metadata_array_destroy(&c->md_in);
    grpc_metadata_array_destroy(&c->md_trail);
    grpc_slice_unref(c->details);
    c->details = grpc_empty_slice();
}

/* A streaming answer is an error when it carries error_message (field 1,
 * first on the wire when set). */
static bool stream_answer_ok(perf *p, grpc_byte_buffer *bb)
{
    grpc_byte_buffer_reader r;
    grpc_slice *first = NULL;
    bool ok = true;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return false;
    if (grpc_byte_buffer_reader_peek(&r, &first) && GRPC_SLICE_LENGTH(*first) >= 2 &&
        GRPC_SLICE_START_PTR(*first)[0] == ((1 << 3) | 2)) {
        const uint8_t *q = GRPC_SLICE_START_PTR(*first);
        size_t len = q[1] & 0x7f, avail = GRPC_SLICE_LENGTH(*first) - 2;
        note_error(p, "stream: %.*s", (int)(len < avail ? len : avail), (const char *)q + 2);
        ok = false;
    }
    grpc_byte_buffer_reader_destroy(&r);
    return ok;
}

/* One completed batch of connection `t->c`. */
static void grpc_on_event(perf_gtag *t, bool success)
{
    perf_conn *c = t->c;
    perf *p = c->p;
    if (t->op == G_CLOSE) {
        grpc_call_done(c);
        return;
    }
    if (!success)
        c->g_failed = true;
    if (t->op == G_WRITE) {
        grpc_byte_buffer_destroy(c->send_bb);
        c->send_bb = NULL;
    }
    if (--c->g_pending > 0)
        return;
    bool ok = !c->g_failed;
    if (t->op == G_UNARY) {
        if (c->status != GRPC_STATUS_OK || !c->recv_bb) {
            char *msg = grpc_slice_to_c_string(c->details);
            note_error(p, "gRPC status %d: %s", (int)c->status, msg ? msg : "");
            gpr_free(msg);
            ok = false;
        }
        grpc_byte_buffer_destroy(c->send_bb);
        c->send_bb = NULL;
        grpc_call_done(c);
    } else if (!c->recv_bb) {
        note_error(p, "gRPC stream ended");
        ok = false;
    } else if (ok) {
        ok = stream_answer_ok(p, c->recv_bb);
    }
    if (c->recv_bb)
        grpc_byte_buffer_destroy(c->recv_bb);
    c->recv_bb = NULL;
    if (!ok && c->call && !c->g_closing) {
        /* A broken stream: close it; the next request opens a new one. */
        grpc_call_cancel(c->call, NULL);
        grpc_op op;
        memset(&op, 0, sizeof(op));
        op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        op.data.recv_status_on_client.trailing_metadata = &c->md_trail;
        op.data.recv_status_on_client.status = &c->status;
        op.data.recv_status_on_client.status_details = &c->details;
        c->g_closing = true;
        if (grpc_call_start_batch(c->call, &op, 1, &c->t_close, NULL) != GRPC_CALL_OK)
            grpc_call_done(c);
    }
    if (!ok)
        infd_clock_sleep_us(1000); /* do not spin against a failing server */
    complete(c, ok);
}

static void issue_grpc(perf_conn *c)
{
    perf *p = c->p;
    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    c->t_unary = (perf_gtag){ c, G_UNARY };
    c->t_write = (perf_gtag){ c, G_WRITE };
    c->t_read = (perf_gtag){ c, G_READ };
    c->t_close = (perf_gtag){ c, G_CLOSE };
    c->g_failed = false;
    c->send_bb = grpc_raw_byte_buffer_create(&p->gmsg, 1);
    if (!c->call || c->g_closing) {
        if (c->g_closing) {
            /* The broken stream is still closing: fail this one too. */
            grpc_byte_buffer_destroy(c->send_bb);
            c->send_bb = NULL;
            complete(c, false);
            return;
        }
        gpr_timespec dl = p->o.streaming
                              ? gpr_inf_future(GPR_CLOCK_REALTIME)
                              : gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                             gpr_time_from_seconds(PERF_TIMEOUT_S, GPR_TIMESPAN));
        int n = p->o.channels > 0 ? p->o.channels : 1;
        grpc_channel *chan = p->chans[p->next_chan++ % n];
        c->call = grpc_channel_create_call(chan, NULL, GRPC_PROPAGATE_DEFAULTS, p->cq, p->method,
                                           NULL, dl, NULL);
        grpc_metadata_array_init(&c->md_in);
        grpc_metadata_array_init(&c->md_trail);
        c->details = grpc_empty_slice();
        c->g_opened = false;
    }
    if (!p->o.streaming) {
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[0].data.send_initial_metadata.count = (size_t)p->o.n_headers;
        ops[0].data.send_initial_metadata.metadata = p->gmd;
        ops[1].op = GRPC_OP_SEND_MESSAGE;
        ops[1].data.send_message.send_message = c->send_bb;
        ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->md_in;
        ops[4].op = GRPC_OP_RECV_MESSAGE;
        ops[4].data.recv_message.recv_message = &c->recv_bb;
        ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        ops[5].data.recv_status_on_client.trailing_metadata = &c->md_trail;
        ops[5].data.recv_status_on_client.status = &c->status;
        ops[5].data.recv_status_on_client.status_details = &c->details;
        c->g_pending = 1;
        if (grpc_call_start_batch(c->call, ops, 6, &c->t_unary, NULL) != GRPC_CALL_OK) {
            note_error(p, "gRPC: cannot start a call");
            grpc_byte_buffer_destroy(c->send_bb);
            c->send_bb = NULL;
            grpc_call_done(c);
            infd_clock_sleep_us(1000);
            complete(c, false);
        }
        return;
    }
    /* Streaming: a write batch and a read batch per request. */
    size_t nw = 0, nr = 0;
    grpc_op *w = ops, *r = ops + 3;
    if (!c->g_opened) {
        w[nw].data.send_initial_metadata.count = (size_t)p->o.n_headers;
        w[nw].data.send_initial_metadata.metadata = p->gmd;
        w[nw++].op = GRPC_OP_SEND_INITIAL_METADATA;
        r[nr].op = GRPC_OP_RECV_INITIAL_METADATA;
        r[nr++].data.recv_initial_metadata.recv_initial_metadata = &c->md_in;
        c->g_opened = true;
    }
    w[nw].op = GRPC_OP_SEND_MESSAGE;
    w[nw++].data.send_message.send_message = c->send_bb;
    r[nr].op = GRPC_OP_RECV_MESSAGE;
    r[nr++].data.recv_message.recv_message = &c->recv_bb;
    c->g_pending = 2;
    if (grpc_call_start_batch(c->call, w, nw, &c->t_write, NULL) != GRPC_CALL_OK ||
        grpc_call_start_batch(c->call, r, nr, &c->t_read, NULL) != GRPC_CALL_OK) {
        /* Only on misuse, which the pending count rules out. */
        fprintf(stderr, "infd perf: gRPC stream: cannot start a batch\n");
        abort();
    }
}

/* Ends every connection's stream (half-close, then the status) and waits
 * for them. */
static void grpc_close_streams(perf *p)
{
    int n_closing = 0;
    for (int i = 0; i < p->n_conns; i++) {
        perf_conn *c = &p->conns[i];
        if (!c->call || c->g_closing) {
            n_closing += c->g_closing;
            continue;
        }
        grpc_op ops[2];
        memset(ops, 0, sizeof(ops));
        ops[0].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        ops[1].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        ops[1].data.recv_status_on_client.trailing_metadata = &c->md_trail;
        ops[1].data.recv_status_on_client.status = &c->status;
        ops[1].data.recv_status_on_client.status_details = &c->details;
        c->g_closing = true;
        if (grpc_call_start_batch(c->call, ops, 2, &c->t_close, NULL) == GRPC_CALL_OK)
            n_closing++;
        else
            grpc_call_done(c);
    }
    while (n_closing > 0) {
        grpc_event ev =
            grpc_completion_queue_next(p->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type != GRPC_OP_COMPLETE)
            break;
        perf_gtag *t = ev.tag;
        if (t->op == G_CLOSE) {
            grpc_call_done(t->c);
            t->c->g_closing = false;
            n_closing--;
        }
    }
}

/* The step's loop for gRPC: completions from the queue, the phase timer
 * checked between them (at least every 10 ms). */
static void grpc_dispatch(perf *p)
{
    while (p->phase != PH_DRAIN || p->n_busy > 0) {
        uint64_t now = infd_clock_ns();
        if (p->timer_at_ns && now >= p->timer_at_ns) {
            p->timer_at_ns = 0;
            on_timer(-1, 0, p);
            continue;
        }
        if (p->pace_at_ns && now >= p->pace_at_ns) {
            p->pace_at_ns = 0;
            pace(p);
            continue;
        }
        uint64_t wait_ns = 10 * 1000 * 1000;
        if (p->timer_at_ns && p->timer_at_ns - now < wait_ns)
            wait_ns = p->timer_at_ns - now;
        if (p->pace_at_ns && p->pace_at_ns - now < wait_ns)
            wait_ns = p->pace_at_ns - now;
        gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                       gpr_time_from_nanos((int64_t)wait_ns, GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_next(p->cq, dl, NULL);
        if (ev.type == GRPC_OP_COMPLETE) {
            perf_gtag *t = ev.tag;
            if (t->op == G_CLOSE) {
                grpc_call_done(t->c);
                t->c->g_closing = false;
            } else {
                grpc_on_event(t, ev.success != 0);
            }
        }
    }
    p->timer_at_ns = 0;
    p->pace_at_ns = 0;
}

/* --request-rate: the send time of request k of the schedule. */
static uint64_t pace_time_ns(const perf *p, uint64_t k)
{
    return p->pace_t0_ns + (uint64_t)((double)k * 1e9 / p->o.request_rate);
}

/* --request-rate: sends every request whose time has come on an idle
 * connection, then arms the timer for the next one. Requests that come due
 * while every connection is busy go out as soon as one is answered, and
 * count as late: the level needs more connections for the rate. */
static void pace(perf *p)
{
    uint64_t now = infd_clock_ns();
    while (p->phase != PH_DRAIN && p->n_idle > 0 && pace_time_ns(p, p->pace_sent) <= now) {
        p->pace_sent++;
        issue(p->idle[--p->n_idle]);
        now = infd_clock_ns();
    }
    if (p->phase == PH_DRAIN)
        return;
    if (p->n_idle == 0 && pace_time_ns(p, p->pace_sent) <= now && p->phase == PH_MEASURE) {
        /* Due, and no connection free: each such request counts once. */
        uint64_t due = (uint64_t)((double)(now - p->pace_t0_ns) * p->o.request_rate / 1e9) + 1;
        uint64_t from = p->pace_sent > p->blocked_upto ? p->pace_sent : p->blocked_upto;
        if (due > from) {
            p->late += due - from;
            p->blocked_upto = due;
        }
    }
    if (p->n_idle == 0)
        return; /* the next answer calls again */
    uint64_t next = pace_time_ns(p, p->pace_sent);
    if (p->o.protocol == PROTO_GRPC) {
        p->pace_at_ns = next > now ? next : now;
    } else {
        uint64_t d = next > now ? next - now : 0;
        struct timeval tv = { (time_t)(d / 1000000000u), (suseconds_t)(d % 1000000000u / 1000) };
        evtimer_add(p->pace_ev, &tv);
    }
}

static void on_pace(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pace(arg);
}

static void issue(perf_conn *c)
{
    perf *p = c->p;
    c->busy = true;
    p->n_busy++;
    c->t0_ns = infd_clock_ns();
    if (p->o.protocol == PROTO_HTTP)
        issue_http(c);
    else if (p->o.protocol == PROTO_GRPC)
        issue_grpc(c);
    else
        issue_raw(c);
}

static void close_conns(perf *p)
{
    if (p->o.protocol == PROTO_GRPC)
        grpc_close_streams(p);
    for (int i = 0; i < p->n_conns; i++) {
        perf_conn *c = &p->conns[i];
        if (c->evcon)
            evhttp_connection_free(c->evcon);
        raw_close(c);
        infd_free(c->rbuf);
    }
    infd_free(p->conns);
    p->conns = NULL;
    p->n_conns = 0;
}

static int run_step(perf *p, int concurrency, step_result *r)
{
    p->conns = infd_calloc((size_t)concurrency, sizeof(*p->conns));
    p->idle = p->conns ? infd_calloc((size_t)concurrency, sizeof(*p->idle)) : NULL;
    if (!p->idle) {
        infd_free(p->conns);
        p->conns = NULL;
        return -1;
    }
    p->n_idle = 0;
    p->late = 0;
    p->n_conns = concurrency;
    infd_histogram_reset(p->hist);
    p->ok = p->errors = p->total = p->total_errors = 0;
    p->n_busy = 0;
    for (int i = 0; i < concurrency; i++) {
        p->conns[i].p = p;
        p->conns[i].fd = -1;
        p->conns[i].nodelay_fd = -1;
    }
    if (p->o.warmup_ms > 0) {
        p->phase = PH_WARMUP;
        struct timeval tv = { p->o.warmup_ms / 1000, (p->o.warmup_ms % 1000) * 1000 };
        evtimer_add(p->timer, &tv);
        p->timer_at_ns = infd_clock_ns() + (uint64_t)p->o.warmup_ms * 1000000u;
    } else {
        begin_measure(p);
    }
    /* A connection whose request fails at once issues the next from inside
     * complete(); the phase bounds that. */
    if (p->o.request_rate > 0) {
        for (int i = concurrency - 1; i >= 0; i--)
            p->idle[p->n_idle++] = &p->conns[i];
        p->pace_t0_ns = infd_clock_ns();
        p->pace_sent = p->blocked_upto = 0;
        pace(p);
    } else {
        for (int i = 0; i < concurrency && p->phase != PH_DRAIN; i++)
            issue(&p->conns[i]);
    }
    if (p->o.protocol == PROTO_GRPC)
        grpc_dispatch(p);
    else if (p->phase != PH_DRAIN || p->n_busy > 0)
        event_base_dispatch(p->base);
    evtimer_del(p->timer);
    evtimer_del(p->pace_ev);
    close_conns(p);
    infd_free(p->idle);
    p->idle = NULL;

    memset(r, 0, sizeof(*r));
    r->concurrency = concurrency;
    r->ok = p->ok;
    r->errors = p->errors;
    r->total = p->total;
    r->total_errors = p->total_errors;
    r->late = p->late;
    r->window_ms = (double)(p->t_end_ns - p->t_measure_ns) / 1e6;
    if (r->window_ms > 0)
        r->infer_per_s = (double)p->ok * p->o.batch * 1000.0 / r->window_ms;
    r->avg_us = infd_histogram_mean(p->hist) / 1e3;
    r->p50_us = (double)infd_histogram_quantile(p->hist, 0.50) / 1e3;
    r->p90_us = (double)infd_histogram_quantile(p->hist, 0.90) / 1e3;
    r->p95_us = (double)infd_histogram_quantile(p->hist, 0.95) / 1e3;
    r->p99_us = (double)infd_histogram_quantile(p->hist, 0.99) / 1e3;
    return 0;
}

/* ---- report ------------------------------------------------------------- */

static void print_row(const step_result *r)
{
    printf("%11d %9" PRIu64 " %7" PRIu64 " %11.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n", r->concurrency,
           r->ok, r->errors, r->infer_per_s, r->avg_us, r->p50_us, r->p90_us, r->p95_us, r->p99_us);
    fflush(stdout);
}

static int write_csv(const char *path, const perf *p, const step_result *rs, int n)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "infd perf: %s: %s\n", path, strerror(errno));
        return -1;
    }
    /* perf_analyzer's column names where they exist; latencies in usec. */
    fprintf(f, "Concurrency,Batch Size,Inferences/Second,Requests,Errors,Window "
               "ms,Avg latency,"
               "p50 latency,p90 latency,p95 latency,p99 latency,Total "
               "Requests,Total Errors\n");
    for (int i = 0; i < n; i++) {
        const step_result *r = &rs[i];
        fprintf(f,
                "%d,%d,%.1f,%" PRIu64 ",%" PRIu64 ",%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%" PRIu64
                ",%" PRIu64 "\n",
                r->concurrency, p->o.batch, r->infer_per_s, r->ok, r->errors, r->window_ms,
                r->avg_us, r->p50_us, r->p90_us, r->p95_us, r->p99_us, r->total, r->total_errors);
    }
    int rc = fclose(f) == 0 ? 0 : -1;
    if (rc != 0)
        fprintf(stderr, "infd perf: %s: write failed\n", path);
    return rc;
}

/* ---- options ------------------------------------------------------------ */

static int parse_int(const char *opt, const char *val, int64_t lo, int64_t hi, int64_t *out)
{
    char *end = NULL;
    long long v = val ? strtoll(val, &end, 10) : 0;
    if (!val || *end || end == val || v < lo || v > hi) {
        fprintf(stderr, "infd perf: %s needs a number in %" PRId64 "..%" PRId64 "\n", opt, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_options(perf_options *o, int argc, char **argv)
{
    const char *url = NULL, *proto = NULL, *meta = NULL;
    o->c_start = o->c_end = o->c_step = 1;
    o->measurement_ms = 2000;
    o->warmup_ms = 200;
    o->batch = 1;
    o->random_data = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n = 0;
        bool takes = true;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            return 1;
        } else if (strcmp(a, "--binary") == 0) {
            o->binary = true;
            takes = false;
        } else if (strcmp(a, "--framed") == 0) {
            o->framed = true;
            takes = false;
        } else if (strcmp(a, "--grpc-channels") == 0) {
            if (parse_int(a, v, 1, PERF_MAX_CHANNELS, &n) != 0)
                return -1;
            o->channels = (int)n;
        } else if (strcmp(a, "--streaming") == 0) {
            o->streaming = true;
            takes = false;
        } else if (v && (strcmp(a, "--header") == 0 || strcmp(a, "-H") == 0)) {
            const char *colon = strchr(v, ':');
            size_t kn = colon ? (size_t)(colon - v) : 0;
            const char *val = colon ? colon + 1 : "";
            while (*val == ' ')
                val++;
            if (o->n_headers == PERF_MAX_HEADERS || kn == 0 || kn >= sizeof(o->header_name[0]) ||
                strlen(val) >= sizeof(o->header_value[0])) {
                fprintf(stderr,
                        "infd perf: %s: NAME:VALUE (at most %d, names < 64 and values "
                        "< 256 bytes)\n",
                        a, PERF_MAX_HEADERS);
                return -1;
            }
            /* gRPC metadata keys are lower case; HTTP's are not case-sensitive */
            for (size_t k = 0; k < kn; k++)
                o->header_name[o->n_headers][k] = (char)tolower((unsigned char)v[k]);
            o->header_name[o->n_headers][kn] = '\0';
            snprintf(o->header_value[o->n_headers], sizeof(o->header_value[0]), "%s", val);
            o->n_headers++;
        } else if (strcmp(a, "--ssl") == 0) {
            o->ssl = true;
            takes = false;
        } else if (v && (strcmp(a, "--ssl-ca") == 0 || strcmp(a, "--ssl-cert") == 0 ||
                         strcmp(a, "--ssl-key") == 0)) {
            *(strcmp(a, "--ssl-ca") == 0     ? &o->ssl_ca
              : strcmp(a, "--ssl-cert") == 0 ? &o->ssl_cert
                                             : &o->ssl_key) = v;
            o->ssl = true;
        } else if (!v) {
            fprintf(stderr, "infd perf: %s: unknown option or missing value\n", a);
            return -1;
        } else if (strcmp(a, "--url") == 0 || strcmp(a, "-u") == 0) {
            url = v;
        } else if (strcmp(a, "--unix") == 0) {
            o->unix_path = v;
        } else if (strcmp(a, "--model") == 0 || strcmp(a, "-m") == 0) {
            o->model = v;
        } else if (strcmp(a, "--protocol") == 0 || strcmp(a, "-i") == 0) {
            proto = v;
        } else if (strcmp(a, "--metadata-url") == 0) {
            meta = v;
        } else if (strcmp(a, "--shared-memory") == 0) {
            if (strcmp(v, "system") != 0 && strcmp(v, "cuda") != 0 && strcmp(v, "none") != 0) {
                fprintf(stderr, "infd perf: --shared-memory takes none, system or cuda, not '%s'\n",
                        v);
                return -1;
            }
            o->shm = strcmp(v, "none") != 0;
            o->shm_cuda = strcmp(v, "cuda") == 0;
        } else if (strcmp(a, "--concurrency-range") == 0) {
            if (parse_range(v, &o->c_start, &o->c_end, &o->c_step) != 0) {
                fprintf(stderr,
                        "infd perf: --concurrency-range needs START[:END[:STEP]] with "
                        "1 <= START <= END <= %d\n",
                        PERF_MAX_CONCURRENCY);
                return -1;
            }
        } else if (strcmp(a, "--request-rate") == 0) {
            char *end = NULL;
            o->request_rate = strtod(v, &end);
            if (!*v || *end || !(o->request_rate > 0 && o->request_rate <= 1e7)) {
                fprintf(stderr, "infd perf: --request-rate needs requests per second, above 0 "
                                "and at most 10000000\n");
                return -1;
            }
        } else if (strcmp(a, "--request-count") == 0) {
            if (parse_int(a, v, 1, INT64_MAX, &o->request_count) != 0)
                return -1;
        } else if (strcmp(a, "--measurement-ms") == 0 || strcmp(a, "-p") == 0) {
            if (parse_int(a, v, 1, 3600000, &n) != 0)
                return -1;
            o->measurement_ms = (int)n;
            o->request_count = 0;
        } else if (strcmp(a, "--warmup-ms") == 0) {
            if (parse_int(a, v, 0, 3600000, &n) != 0)
                return -1;
            o->warmup_ms = (int)n;
        } else if (strcmp(a, "--batch-size") == 0 || strcmp(a, "-b") == 0) {
            if (parse_int(a, v, 1, 1 << 20, &n) != 0)
                return -1;
            o->batch = (int)n;
        } else if (strcmp(a, "--rpc") == 0) {
            if (strcmp(v, "infer") != 0 && strcmp(v, "live") != 0) {
                fprintf(stderr, "infd perf: --rpc needs infer or live\n");
                return -1;
            }
            o->rpc_live = strcmp(v, "live") == 0;
        } else if (strcmp(a, "--input-data") == 0) {
            if (strcmp(v, "zero") != 0 && strcmp(v, "random") != 0) {
                fprintf(stderr, "infd perf: --input-data needs zero or random\n");
                return -1;
            }
            o->random_data = strcmp(v, "random") == 0;
        } else if (strcmp(a, "--csv") == 0 || strcmp(a, "-f") == 0) {
            o->csv = v;
        } else if (strcmp(a, "--shape") == 0) {
            o->shape = v;
        } else if (strcmp(a, "--dtype") == 0) {
            o->dtype = v;
        } else if (strcmp(a, "--input-name") == 0) {
            o->input_name = v;
        } else if (strcmp(a, "--output-bytes") == 0) {
            if (parse_int(a, v, 1, INT64_MAX, &o->output_bytes) != 0)
                return -1;
        } else {
            fprintf(stderr, "infd perf: unknown option '%s'\n", a);
            return -1;
        }
        if (takes)
            i++;
    }
    if (!o->model) {
        fprintf(stderr, "infd perf: --model is required\n");
        return -1;
    }
    o->protocol = o->unix_path ? PROTO_RAW : PROTO_HTTP;
    if (proto && strcmp(proto, "raw") == 0)
        o->protocol = PROTO_RAW;
    else if (proto && strcmp(proto, "grpc") == 0)
        o->protocol = PROTO_GRPC;
    else if (proto && strcmp(proto, "http") != 0) {
        fprintf(stderr, "infd perf: --protocol needs http, raw or grpc\n");
        return -1;
    }
    if (o->streaming && o->protocol != PROTO_GRPC) {
        fprintf(stderr, "infd perf: --streaming is a gRPC option\n");
        return -1;
    }
    if (o->rpc_live && (o->protocol != PROTO_GRPC || o->streaming)) {
        fprintf(stderr, "infd perf: --rpc live is a unary gRPC option\n");
        return -1;
    }
    if (o->protocol == PROTO_GRPC && (o->unix_path || o->framed || o->binary || meta)) {
        fprintf(stderr, "infd perf: --unix, --framed, --binary and --metadata-url are not "
                        "gRPC options\n");
        return -1;
    }
    if (o->protocol == PROTO_HTTP && (o->unix_path || o->framed)) {
        fprintf(stderr, "infd perf: --unix and --framed are raw-protocol options\n");
        return -1;
    }
    if (o->protocol == PROTO_RAW && o->shm) {
        fprintf(stderr, "infd perf: --shared-memory is an HTTP and gRPC option\n");
        return -1;
    }
    if (o->protocol == PROTO_RAW && o->binary) {
        fprintf(stderr, "infd perf: --binary is an HTTP option\n");
        return -1;
    }
    if (o->protocol != PROTO_GRPC && o->channels) {
        fprintf(stderr, "infd perf: --grpc-channels is a gRPC option\n");
        return -1;
    }
    if (!url && !o->unix_path) {
        fprintf(stderr, "infd perf: give --url HOST:PORT%s\n",
                o->protocol == PROTO_RAW ? " or --unix PATH" : "");
        return -1;
    }
    if (url && parse_hostport(url, o->host, sizeof(o->host), &o->port) != 0) {
        fprintf(stderr, "infd perf: --url needs HOST:PORT, not '%s'\n", url);
        return -1;
    }
    if (o->protocol == PROTO_GRPC) {
        /* Metadata comes over gRPC (ModelMetadata). */
    } else if (o->protocol == PROTO_HTTP) {
        snprintf(o->meta_host, sizeof(o->meta_host), "%s", o->host);
        o->meta_port = o->port;
    } else if (meta &&
               parse_hostport(meta, o->meta_host, sizeof(o->meta_host), &o->meta_port) != 0) {
        fprintf(stderr, "infd perf: --metadata-url needs HOST:PORT, not '%s'\n", meta);
        return -1;
    }
    return 0;
}

/* ---- shared memory ------------------------------------------------------ */

/* Registers (or unregisters) the region over the protocol in use. */
static int shm_tell_server(perf *p, bool reg)
{
    uint8_t handle[INFD_IPC_HANDLE_BYTES];
    if (reg && p->o.shm_cuda) {
        infd_error err = { 0 };
        if (infd_engine_ipc_handle(INFD_DEVICE_CUDA, 0, p->shm_dev, handle, sizeof(handle), &err) !=
            INFD_STATUS_OK) {
            fprintf(stderr, "infd perf: --shared-memory cuda: %s\n", err.msg);
            return -1;
        }
    }
    if (p->o.protocol == PROTO_GRPC && p->o.shm_cuda) {
        ProtobufCMessage *m;
        if (reg) {
            Inference__CudaSharedMemoryRegisterRequest r =
                INFERENCE__CUDA_SHARED_MEMORY_REGISTER_REQUEST__INIT;
            r.name = p->shm_region;
            r.raw_handle.data = handle;
            r.raw_handle.len = sizeof(handle);
            r.device_id = 0;
            r.byte_size = p->shm_bytes;
            m = grpc_unary(p, "/inference.GRPCInferenceService/CudaSharedMemoryRegister", &r.base,
                           &inference__cuda_shared_memory_register_response__descriptor);
        } else {
            Inference__CudaSharedMemoryUnregisterRequest r =
                INFERENCE__CUDA_SHARED_MEMORY_UNREGISTER_REQUEST__INIT;
            r.name = p->shm_region;
            m = grpc_unary(p, "/inference.GRPCInferenceService/CudaSharedMemoryUnregister", &r.base,
                           &inference__cuda_shared_memory_unregister_response__descriptor);
        }
        if (!m)
            return -1;
        protobuf_c_message_free_unpacked(m, NULL);
        return 0;
    }
    if (p->o.protocol == PROTO_GRPC) {
        ProtobufCMessage *m;
        if (reg) {
            Inference__SystemSharedMemoryRegisterRequest r =
                INFERENCE__SYSTEM_SHARED_MEMORY_REGISTER_REQUEST__INIT;
            r.name = p->shm_region;
            r.key = p->shm_key;
            r.byte_size = p->shm_bytes;
            m = grpc_unary(p, "/inference.GRPCInferenceService/SystemSharedMemoryRegister", &r.base,
                           &inference__system_shared_memory_register_response__descriptor);
        } else {
            Inference__SystemSharedMemoryUnregisterRequest r =
                INFERENCE__SYSTEM_SHARED_MEMORY_UNREGISTER_REQUEST__INIT;
            r.name = p->shm_region;
            m = grpc_unary(p, "/inference.GRPCInferenceService/SystemSharedMemoryUnregister",
                           &r.base,
                           &inference__system_shared_memory_unregister_response__descriptor);
        }
        if (!m)
            return -1;
        protobuf_c_message_free_unpacked(m, NULL);
        return 0;
    }
    char uri[160], body[256], *answer = NULL;
    snprintf(uri, sizeof(uri), "/v2/%ssharedmemory/region/%s/%s", p->o.shm_cuda ? "cuda" : "system",
             p->shm_region, reg ? "register" : "unregister");
    if (p->o.shm_cuda) {
        char b64[4 * ((INFD_IPC_HANDLE_BYTES + 2) / 3) + 1];
        EVP_EncodeBlock((unsigned char *)b64, handle, (int)sizeof(handle));
        snprintf(body, sizeof(body),
                 "{\"raw_handle\":{\"b64\":\"%s\"},\"device_id\":0,\"byte_size\":%zu}", b64,
                 p->shm_bytes);
    } else {
        snprintf(body, sizeof(body), "{\"key\":\"%s\",\"offset\":0,\"byte_size\":%zu}", p->shm_key,
                 p->shm_bytes);
    }
    int code =
        http_exchange(p, p->o.host, p->o.port, EVHTTP_REQ_POST, uri, reg ? body : NULL, &answer);
    if (code != 200)
        fprintf(stderr, "infd perf: POST http://%s:%d%s: %s%d %s\n", p->o.host, p->o.port, uri,
                code ? "HTTP " : "no answer ", code, answer ? answer : "");
    infd_free(answer);
    return code == 200 ? 0 : -1;
}

/* --shared-memory system: a POSIX object with every input (copied in once)
 * and room for every output, 64-byte aligned, registered as one region.
 * Concurrent requests share it: their outputs overwrite one another, which
 * a load generator does not read. */
static int shm_setup(perf *p)
{
    size_t at = 0;
    for (int k = 0; k < p->n_inputs + p->n_outputs; k++) {
        bool in = k < p->n_inputs;
        int i = in ? k : k - p->n_inputs;
        p->shm_off[in ? i : PERF_MAX_IO + i] = at;
        at += ((in ? p->in[i].nbytes : p->out[i].nbytes) + 63) & ~(size_t)63;
    }
    p->shm_bytes = at ? at : 64;
    snprintf(p->shm_region, sizeof(p->shm_region), "infd_perf_%d", (int)getpid());
    if (p->o.shm_cuda) {
        infd_error err = { 0 };
        p->shm_dev = infd_engine_device_alloc(INFD_DEVICE_CUDA, 0, p->shm_bytes, &err);
        for (int i = 0; p->shm_dev && i < p->n_inputs && err.code == INFD_STATUS_OK; i++)
            if (p->in[i].nbytes)
                infd_engine_device_copy(INFD_DEVICE_CUDA, 0, (uint8_t *)p->shm_dev + p->shm_off[i],
                                        p->in[i].data, p->in[i].nbytes, true, &err);
        if (!p->shm_dev || err.code != INFD_STATUS_OK) {
            fprintf(stderr, "infd perf: --shared-memory cuda: %s\n", err.msg);
            return -1;
        }
        if (shm_tell_server(p, true) != 0)
            return -1;
        p->shm_registered = true;
        return 0;
    }
    snprintf(p->shm_key, sizeof(p->shm_key), "/infd-perf-%d", (int)getpid());
    int fd = shm_open(p->shm_key, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)p->shm_bytes) != 0) {
        fprintf(stderr, "infd perf: shared memory object %s: %s\n", p->shm_key, strerror(errno));
        if (fd >= 0) {
            close(fd);
            shm_unlink(p->shm_key);
        }
        p->shm_key[0] = '\0';
        return -1;
    }
    void *map = mmap(NULL, p->shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        fprintf(stderr, "infd perf: cannot map %s: %s\n", p->shm_key, strerror(errno));
        return -1;
    }
    p->shm_map = map;
    for (int i = 0; i < p->n_inputs; i++)
        if (p->in[i].nbytes)
            memcpy(p->shm_map + p->shm_off[i], p->in[i].data, p->in[i].nbytes);
    if (shm_tell_server(p, true) != 0)
        return -1;
    p->shm_registered = true;
    return 0;
}

static void shm_teardown(perf *p)
{
    if (p->shm_registered)
        shm_tell_server(p, false);
    p->shm_registered = false;
    if (p->shm_map)
        munmap(p->shm_map, p->shm_bytes);
    p->shm_map = NULL;
    if (p->shm_dev)
        infd_engine_device_free(INFD_DEVICE_CUDA, 0, p->shm_dev);
    p->shm_dev = NULL;
    if (p->shm_key[0])
        shm_unlink(p->shm_key);
    p->shm_key[0] = '\0';
}

/* ---- main --------------------------------------------------------------- */

int infd_cli_perf(int argc, char **argv)
{
    int rc = INFD_EXIT_FAILURE;
    perf *p = infd_calloc(1, sizeof(*p));
    step_result *rs = NULL;
    int n_steps = 0;
    if (!p) {
        fprintf(stderr, "infd perf: out of memory\n");
        return INFD_EXIT_FAILURE;
    }
    int parsed = parse_options(&p->o, argc, argv);
    if (parsed != 0) {
        usage(parsed > 0 ? stdout : stderr);
        rc = parsed > 0 ? INFD_EXIT_OK : INFD_EXIT_USAGE;
        goto out;
    }
    perf_options *o = &p->o;
    if (o->ssl && o->protocol == PROTO_RAW) {
        fprintf(stderr, "infd perf: --ssl: the raw protocol has no TLS\n");
        rc = INFD_EXIT_USAGE;
        goto out;
    }
    if (o->ssl && o->protocol != PROTO_GRPC) {
        infd_error err;
        infd_error_clear(&err);
        if (infd_tls_client_ctx("infd perf", o->ssl_ca, o->ssl_cert, o->ssl_key, &p->ssl, &err) !=
            INFD_STATUS_OK) {
            fprintf(stderr, "%s\n", err.msg);
            rc = INFD_EXIT_USAGE;
            goto out;
        }
    }
    p->base = event_base_new();
    p->hist = infd_histogram_create();
    if (!p->base || !p->hist || !(p->timer = evtimer_new(p->base, on_timer, p)) ||
        !(p->pace_ev = evtimer_new(p->base, on_pace, p))) {
        fprintf(stderr, "infd perf: out of memory\n");
        goto out;
    }
    if (o->protocol == PROTO_GRPC) {
        if (grpc_open(p) != 0 || grpc_fetch_metadata(p) != 0)
            goto out;
    } else if (o->meta_port ? fetch_metadata(p) != 0 : inputs_from_options(p) != 0) {
        goto out;
    }
    if (make_inputs(p) != 0)
        goto out;
    if (o->shm && shm_setup(p) != 0)
        goto out;
    if (o->protocol == PROTO_GRPC) {
        if (build_grpc_request(p) != 0) {
            fprintf(stderr, "infd perf: out of memory building the request\n");
            goto out;
        }
    } else if (o->protocol == PROTO_HTTP) {
        if (build_http_body(p) != 0) {
            fprintf(stderr, "infd perf: out of memory building the request\n");
            goto out;
        }
        snprintf(p->uri, sizeof(p->uri), "/v2/models/%s/infer", o->model);
        snprintf(p->host_header, sizeof(p->host_header), "%s:%d", o->host, o->port);
    } else {
        if (build_raw_body(p) != 0)
            goto out;
        if (!o->unix_path) {
            char service[16];
            snprintf(service, sizeof(service), "%d", o->port);
            struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
            int gai = getaddrinfo(o->host, service, &hints, &p->raw_addr);
            if (gai != 0) {
                fprintf(stderr, "infd perf: %s: %s\n", o->host, gai_strerror(gai));
                goto out;
            }
        }
    }

    int max_steps = (o->c_end - o->c_start) / o->c_step + 1;
    rs = infd_calloc((size_t)max_steps, sizeof(*rs));
    if (!rs)
        goto out;
    char where[300];
    if (o->unix_path)
        snprintf(where, sizeof(where), "unix:%s", o->unix_path);
    else
        snprintf(where, sizeof(where), "%s:%d", o->host, o->port);
    printf("*** infd perf: model '%s', %s (%s) at %s, batch %d, %s data\n", o->model,
           o->protocol == PROTO_HTTP   ? "http"
           : o->protocol == PROTO_GRPC ? "grpc"
                                       : "raw",
           o->protocol == PROTO_GRPC   ? (o->shm_cuda    ? "unary, CUDA shared memory"
                                          : o->shm       ? "unary, shared memory"
                                          : o->streaming ? "streaming"
                                          : o->rpc_live  ? "unary ServerLive"
                                                         : "unary")
           : o->protocol == PROTO_HTTP ? (o->shm_cuda ? "CUDA shared memory"
                                          : o->shm    ? "shared memory"
                                          : o->binary ? "binary"
                                                      : "JSON")
                                       : (o->framed ? "framed" : "headerless"),
           where, o->batch, o->random_data ? "random" : "zero");
    if (o->request_count)
        printf("*** measurement: %" PRId64 " requests per step after %d ms of warmup\n",
               o->request_count, o->warmup_ms);
    else
        printf("*** measurement: %d ms per step after %d ms of warmup\n", o->measurement_ms,
               o->warmup_ms);
    if (o->request_rate > 0)
        printf("*** request rate: %.1f/s on schedule (the concurrency column: connections)\n",
               o->request_rate);
    printf("%11s %9s %7s %11s %9s %9s %9s %9s %9s\n", "concurrency", "requests", "errors",
           "infer/s", "avg us", "p50 us", "p90 us", "p95 us", "p99 us");
    uint64_t all_ok = 0, all_requests = 0;
    for (int c = o->c_start; c <= o->c_end; c += o->c_step) {
        if (run_step(p, c, &rs[n_steps]) != 0) {
            fprintf(stderr, "infd perf: out of memory\n");
            goto out;
        }
        print_row(&rs[n_steps]);
        if (rs[n_steps].late)
            fprintf(stderr,
                    "infd perf: %" PRIu64 " request(s) came due with all %d connections "
                    "busy and went out late (use more for this rate)\n",
                    rs[n_steps].late, c);
        all_ok += rs[n_steps].ok;
        all_requests += rs[n_steps].ok + rs[n_steps].errors;
        n_steps++;
    }
    if (p->first_error[0])
        fprintf(stderr, "infd perf: first error: %s\n", p->first_error);
    if (o->csv && write_csv(o->csv, p, rs, n_steps) != 0)
        goto out;
    if (all_ok == 0) {
        fprintf(stderr, "infd perf: no request succeeded (%" PRIu64 " failed)\n", all_requests);
        goto out;
    }
    rc = INFD_EXIT_OK;
out:
    shm_teardown(p);
    grpc_close(p);
    if (p->raw_addr)
        freeaddrinfo(p->raw_addr);
    for (int i = 0; i < PERF_MAX_IO; i++)
        infd_free(p->in[i].data);
    infd_free(p->body);
    if (p->timer)
        event_free(p->timer);
    if (p->pace_ev)
        event_free(p->pace_ev);
    if (p->base)
        event_base_free(p->base);
    SSL_CTX_free(p->ssl);
    infd_histogram_destroy(p->hist);
    infd_free(rs);
    infd_free(p);
    return rc;
}
