/*
 * Allocation-failure injection, SQLite's way (issue #24): the counting
 * allocator (core/alloc.c) fails the N-th allocation from now, for N = 1, 2,
 * ... until the operation runs without reaching an injected failure, once
 * with only that allocation failing (fail-once) and once with it and every
 * one after it failing until the operation returns (fail-forever).
 *
 * The operations: loading a model and two built-in processors (image_decode,
 * blazeface_decode) through the public API, and one inference request
 * through each frontend of a real server in this process (HTTP and gRPC on
 * loopback TCP, framed raw on a Unix socket), sent by clients here that
 * allocate nothing through infd_malloc (hand-written HTTP/1.1 and raw
 * frames; gRPC core and protobuf-c use their own allocators). Each step must
 * end in success or in the protocol's error for a server fault (HTTP 500 or
 * 503, gRPC RESOURCE_EXHAUSTED/INTERNAL/UNAVAILABLE, a raw error reply),
 * never a lost request, a crash or a hang; the same operation, run again at
 * once without injection, must succeed; and under ASan (make test's unit run
 * with the asan preset) nothing may leak. The count of distinct allocation
 * sites that failed (the callers' return addresses) is printed per
 * operation.
 *
 * Only allocations that go through infd_malloc & co. are failed: libevent's,
 * gRPC core's, yajl's and oneDNN's own mallocs are outside the count.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/alloc.h"
#include "frontends/grpc/grpc.h"
#include "frontends/http/http.h"
#include "frontends/raw/raw.h"
#include "grpc_service.pb-c.h"
#include "onnx_model.h"
#include "plugins/plugins.h"
#include "test_repo.h"
#include "test.h"

/* Outcomes of one operation. */
enum { OK_ = 0, FAULT = 1, LOST = 2 };

/* Distinct sites of injected failures, over one sweep. */
typedef struct {
    const void *at[4096];
    int n;
} sites;

static void sites_add(sites *st, const void *p)
{
    for (int i = 0; i < st->n; i++) {
        if (st->at[i] == p)
            return;
    }
    if (st->n < (int)(sizeof(st->at) / sizeof(st->at[0])))
        st->at[st->n++] = p;
}

static const char *write_repo(void)
{
    const char *repo = test_repo_new("oom", "models");
    onnx_model_add_twin(repo);
    /* Built-in processors (src/plugins), two instances each. */
    test_write_config(repo, "img",
                      "backend: \"image_decode\"\nmax_batch_size: 8\n"
                      "parameters { key: \"size\" value { string_value: \"128\" } }\n"
                      "instance_group [ { count: 2 kind: KIND_CPU } ]\n");
    test_write_config(repo, "bfd",
                      "backend: \"blazeface_decode\"\nmax_batch_size: 8\n"
                      "parameters { key: \"size\" value { string_value: \"128\" } }\n"
                      "instance_group [ { count: 2 kind: KIND_CPU } ]\n");
    return repo;
}

/* ---- clients ---- */

static void set_timeouts(int fd)
{
    struct timeval tv = { .tv_sec = 20 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static bool send_all(int fd, const void *p, size_t n)
{
    for (size_t k = 0; k < n;) {
        ssize_t r = send(fd, (const char *)p + k, n - k, MSG_NOSIGNAL);
        if (r <= 0)
            return false;
        k += (size_t)r;
    }
    return true;
}

/* Reads until end of file or `cap` bytes; the count, or -1 on a timeout. */
static ssize_t recv_until_eof(int fd, char *p, size_t cap)
{
    size_t k = 0;
    while (k < cap) {
        ssize_t r = recv(fd, p + k, cap - k, 0);
        if (r == 0)
            break;
        if (r < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? -1 : (ssize_t)k;
        k += (size_t)r;
    }
    return (ssize_t)k;
}

typedef struct {
    int port;
    int last_code; /* the last HTTP status seen (0: none) */
} http_ctx;

/* One POST of the twin model's JSON request on a new connection. */
static int http_infer(void *arg)
{
    http_ctx *c = arg;
    static const char body[] =
        "{\"inputs\":[{\"name\":\"INPUT0\",\"shape\":[1,4],\"datatype\":\"FP32\","
        "\"data\":[1,2,3,4]}]}";
    char req[512], resp[8192];
    int n = snprintf(req, sizeof(req),
                     "POST /v2/models/twin/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     sizeof(body) - 1, body);
    c->last_code = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)c->port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0)
        return LOST;
    set_timeouts(fd);
    ssize_t got = -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && send_all(fd, req, (size_t)n))
        got = recv_until_eof(fd, resp, sizeof(resp) - 1);
    close(fd);
    if (got <= 0) {
        printf("    HTTP: no answer (%s)\n", got < 0 ? "timed out" : "closed");
        return LOST;
    }
    resp[got] = '\0';
    if (sscanf(resp, "HTTP/1.1 %d", &c->last_code) != 1)
        return LOST;
    if (c->last_code == 200 && strstr(resp, "\"OUTPUT1\"") && strstr(resp, "[2,4,6,8]"))
        return OK_;
    /* A server fault, answered as one, with a JSON error. */
    if ((c->last_code == 500 || c->last_code == 503) && strstr(resp, "{\"error\":"))
        return FAULT;
    printf("    HTTP answer: %.300s\n", resp);
    return LOST;
}

typedef struct {
    grpc_channel *chan;
    grpc_completion_queue *cq;
    grpc_status_code last_status;
} grpc_ctx;

static int grpc_infer(void *arg)
{
    grpc_ctx *c = arg;
    float x[4] = { 1, 2, 3, 4 };
    int64_t shape[2] = { 1, 4 };
    Inference__ModelInferRequest r = INFERENCE__MODEL_INFER_REQUEST__INIT;
    Inference__ModelInferRequest__InferInputTensor t =
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT;
    Inference__ModelInferRequest__InferInputTensor *pt = &t;
    ProtobufCBinaryData raw = { sizeof(x), (uint8_t *)x };
    r.model_name = "twin";
    t.name = "INPUT0";
    t.datatype = "FP32";
    t.n_shape = 2;
    t.shape = shape;
    r.n_inputs = 1;
    r.inputs = &pt;
    r.n_raw_input_contents = 1;
    r.raw_input_contents = &raw;
    size_t n = inference__model_infer_request__get_packed_size(&r);
    grpc_slice s = grpc_slice_malloc(n);
    inference__model_infer_request__pack(&r, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&s, 1), *recv = NULL;
    grpc_slice_unref(s);
    grpc_metadata_array md_in, md_trail;
    grpc_metadata_array_init(&md_in);
    grpc_metadata_array_init(&md_trail);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    gpr_timespec dl =
        gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(20, GPR_TIMESPAN));
    grpc_call *call = grpc_channel_create_call(
        c->chan, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
        grpc_slice_from_static_string("/inference.GRPCInferenceService/ModelInfer"), NULL, dl,
        NULL);
    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
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
    int out = LOST;
    if (call && grpc_call_start_batch(call, ops, 6, call, NULL) == GRPC_CALL_OK) {
        grpc_event ev;
        do
            ev = grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        while (ev.type != GRPC_OP_COMPLETE || ev.tag != call);
        c->last_status = status;
        if (status == GRPC_STATUS_OK && recv) {
            grpc_byte_buffer_reader rd;
            Inference__ModelInferResponse *m = NULL;
            if (grpc_byte_buffer_reader_init(&rd, recv)) {
                grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
                m = inference__model_infer_response__unpack(NULL, GRPC_SLICE_LENGTH(all),
                                                            GRPC_SLICE_START_PTR(all));
                grpc_slice_unref(all);
                grpc_byte_buffer_reader_destroy(&rd);
            }
            float y[4];
            if (m && m->n_raw_output_contents == 2 && m->raw_output_contents[1].len == 16) {
                memcpy(y, m->raw_output_contents[1].data, 16);
                if (y[0] == 2 && y[1] == 4 && y[2] == 6 && y[3] == 8)
                    out = OK_;
            }
            if (m)
                inference__model_infer_response__free_unpacked(m, NULL);
        } else if (status == GRPC_STATUS_RESOURCE_EXHAUSTED || status == GRPC_STATUS_INTERNAL ||
                   status == GRPC_STATUS_UNAVAILABLE) {
            out = FAULT;
        } else {
            char *msg = grpc_slice_to_c_string(details);
            printf("    gRPC status under injection: %d %s\n", (int)status, msg);
            gpr_free(msg);
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
    return out;
}

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

typedef struct {
    char path[400];
    int last_status; /* the last framed reply's status; -1: no reply */
} raw_ctx;

/* One framed request (docs/RAW_PROTOCOL.md) on a new connection. */
static int raw_infer(void *arg)
{
    raw_ctx *c = arg;
    uint8_t req[128], hdr[32], rest[1024];
    float x[4] = { 1, 2, 3, 4 };
    memcpy(req, "INFD", 4);
    req[4] = 1;
    req[5] = 0;
    put_le(req + 6, 0, 2);
    put_le(req + 8, 7, 8);
    put_le(req + 16, 1, 2);
    put_le(req + 18, 0, 2);
    put_le(req + 20, 1 + 6 + 2 + 16 + 8, 4);
    put_le(req + 24, sizeof(x), 8);
    uint8_t *p = req + 32;
    *p++ = 6;
    memcpy(p, "INPUT0", 6);
    p += 6;
    *p++ = INFD_DTYPE_FP32;
    *p++ = 2;
    put_le(p, 1, 8);
    put_le(p + 8, 4, 8);
    put_le(p + 16, sizeof(x), 8);
    p += 24;
    memcpy(p, x, sizeof(x));
    p += sizeof(x);
    c->last_status = -1;
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    memcpy(a.sun_path, c->path, strlen(c->path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0)
        return LOST;
    set_timeouts(fd);
    int out = LOST;
    /* A refused connection may be closed before the request is sent: the
     * refusal is read all the same. */
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        (send_all(fd, req, (size_t)(p - req)) || true) && recv(fd, hdr, 32, MSG_WAITALL) == 32 &&
        memcmp(hdr, "INFD", 4) == 0 &&
        (get_le(hdr + 8, 8) == 7 || (get_le(hdr + 8, 8) == 0 && (hdr[5] & 1)))) {
        /* Its answer, or the refusal of the connection (id 0, CLOSING). */
        c->last_status = (int)get_le(hdr + 6, 2);
        size_t more = get_le(hdr + 18, 2) + get_le(hdr + 20, 4) + get_le(hdr + 24, 8);
        if (more <= sizeof(rest) && recv(fd, rest, more, MSG_WAITALL) == (ssize_t)more) {
            if (c->last_status != 0) {
                out = FAULT; /* an error reply, with its message */
            } else if (get_le(hdr + 16, 2) == 2) {
                float y[4];
                memcpy(y, rest + get_le(hdr + 20, 4) + 16, 16);
                out = y[0] == 2 && y[1] == 4 && y[2] == 6 && y[3] == 8 ? OK_ : LOST;
            }
        }
    }
    close(fd);
    return out;
}

typedef struct {
    infd_server *s;
    http_ctx *check; /* the model answers through HTTP afterwards */
    const char *name;
} load_ctx;

static int load_model(void *arg)
{
    load_ctx *c = arg;
    infd_error err = { 0 };
    infd_status st = infd_server_load_model(c->s, c->name, &err);
    if (st == INFD_STATUS_OK)
        return OK_;
    if ((st == INFD_STATUS_OUT_OF_MEMORY || st == INFD_STATUS_RESOURCE_EXHAUSTED ||
         st == INFD_STATUS_INTERNAL) &&
        err.msg[0])
        return FAULT;
    printf("    load under injection: %s: %s\n", infd_status_name(st), err.msg);
    return LOST;
}

/* The sweep: N = 1, 2, ... until a run reaches no injected failure. Returns
 * the number of steps, or -1 after reporting a defect. */
static int sweep(const char *what, int (*op)(void *), void *ctx, int forever, int (*after)(void *),
                 void *after_ctx)
{
    sites st = { .n = 0 };
    int faults = 0;
    for (int64_t n = 1; n < 20000; n++) {
        infd_alloc_fail_from(n, forever);
        int r = op(ctx);
        int fired = infd_alloc_injected_fired();
        const void *site = infd_alloc_injected_site();
        infd_alloc_fail_from(0, 0);
        if (r == LOST) {
            printf("    %s (%s): step %" PRId64 " lost the request (injected: %d)\n", what,
                   forever ? "fail-forever" : "fail-once", n, fired);
            return -1;
        }
        if (!fired) {
            if (r != OK_) {
                printf("    %s: failed with no injected failure\n", what);
                return -1;
            }
            printf("    %s, %s: %" PRId64 " steps, %d answered as a server fault, %d distinct "
                   "allocation sites failed\n",
                   what, forever ? "fail-forever" : "fail-once", n - 1, faults, st.n);
            return (int)n;
        }
        faults += r == FAULT;
        sites_add(&st, site);
        /* Right after, without injection: served normally. */
        if ((after ? after(after_ctx) : op(ctx)) != OK_) {
            printf("    %s (%s): not served after step %" PRId64 "\n", what,
                   forever ? "fail-forever" : "fail-once", n);
            return -1;
        }
    }
    printf("    %s: no end to the sweep\n", what);
    return -1;
}

static infd_server *server;

/* The model's server; the frontends start per operation. */
static void test_start(void)
{
    grpc_init();
    infd_error err = { 0 };
    ASSERT_EQ_INT(infd_plugins_register(&err), INFD_STATUS_OK);
    static const char *const load[] = { "twin" };
    server = test_server_start(write_repo(), INFD_MODEL_CONTROL_EXPLICIT, load, 1);
    ASSERT_TRUE(server != NULL);
}

enum { HTTP, GRPC, RAW };

typedef struct {
    int kind;
    bool cold; /* start and stop the frontend inside the operation */
    infd_http *http;
    infd_grpc *grpc;
    infd_raw *raw;
    http_ctx hc;
    grpc_ctx gc;
    raw_ctx rc;
} fe_ctx;

/* Starts c->kind's frontend (and the gRPC client's channel): OK_, or FAULT
 * when it fails with its out-of-memory error, or LOST on any other. */
static int fe_start(fe_ctx *c)
{
    infd_error err = { 0 };
    infd_status st = INFD_STATUS_OK;
    if (c->kind == HTTP) {
        infd_http_options o;
        infd_http_options_init(&o);
        o.host = "127.0.0.1";
        o.port = 0;
        st = infd_http_start(server, &o, &c->http, &err);
        c->hc.port = c->http ? infd_http_port(c->http) : 0;
    } else if (c->kind == GRPC) {
        infd_grpc_options o;
        infd_grpc_options_init(&o);
        o.host = "127.0.0.1";
        o.port = 0;
        st = infd_grpc_start(server, &o, &c->grpc, &err);
        if (c->grpc) {
            char target[64];
            snprintf(target, sizeof(target), "127.0.0.1:%d", infd_grpc_port(c->grpc));
            grpc_channel_credentials *creds = grpc_insecure_credentials_create();
            c->gc.chan = grpc_channel_create(target, creds, NULL);
            grpc_channel_credentials_release(creds);
            c->gc.cq = grpc_completion_queue_create_for_next(NULL);
        }
    } else {
        infd_raw_options o;
        infd_raw_options_init(&o);
        char dir[300];
        snprintf(dir, sizeof(dir), "%s/sockets", test_repo_root);
        o.socket_dir = dir;
        o.stats_every = 0;
        st = infd_raw_start(server, &o, &c->raw, &err);
        snprintf(c->rc.path, sizeof(c->rc.path), "%s/twin.framed.sock", dir);
    }
    if (st == INFD_STATUS_OK)
        return OK_;
    if (st == INFD_STATUS_OUT_OF_MEMORY && err.msg[0])
        return FAULT;
    printf("    start under injection: %s: %s\n", infd_status_name(st), err.msg);
    return LOST;
}

static void fe_stop(fe_ctx *c)
{
    if (c->gc.chan) {
        grpc_channel_destroy(c->gc.chan);
        grpc_completion_queue_shutdown(c->gc.cq);
        while (
            grpc_completion_queue_next(c->gc.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
            GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(c->gc.cq);
        c->gc.chan = NULL;
    }
    infd_http_stop(c->http);
    infd_grpc_stop(c->grpc);
    infd_raw_stop(c->raw);
    c->http = NULL;
    c->grpc = NULL;
    c->raw = NULL;
}

/* One request through c->kind's frontend; when cold, the frontend's start
 * and stop are part of the operation. */
static int fe_request(void *arg)
{
    fe_ctx *c = arg;
    if (c->cold) {
        int r = fe_start(c);
        if (r != OK_)
            return r;
    }
    int r = c->kind == HTTP   ? http_infer(&c->hc)
            : c->kind == GRPC ? grpc_infer(&c->gc)
                              : raw_infer(&c->rc);
    if (c->cold)
        fe_stop(c);
    return r;
}

static void sweep_frontend(int kind, const char *name)
{
    char what[64];
    fe_ctx c = { .kind = kind };
    /* Warm: the frontend up, its first request served; then one request
     * (the steady state allocates nothing, so this may reach no site). */
    ASSERT_EQ_INT(fe_start(&c), OK_);
    int first = fe_request(&c);
    snprintf(what, sizeof(what), "%s request (warm)", name);
    int a = first == OK_ ? sweep(what, fe_request, &c, 0, NULL, NULL) : -1;
    int b = first == OK_ ? sweep(what, fe_request, &c, 1, NULL, NULL) : -1;
    fe_stop(&c);
    ASSERT_EQ_INT(first, OK_);
    ASSERT_TRUE(a >= 1 && b >= 1);
    /* Cold: start, first request and stop, failing at every step. */
    c.cold = true;
    snprintf(what, sizeof(what), "%s start + request + stop", name);
    ASSERT_TRUE(sweep(what, fe_request, &c, 0, NULL, NULL) > 1);
    ASSERT_TRUE(sweep(what, fe_request, &c, 1, NULL, NULL) > 1);
}

static void test_model_load(void)
{
    ASSERT_TRUE(server != NULL);
    fe_ctx c = { .kind = HTTP };
    ASSERT_EQ_INT(fe_start(&c), OK_);
    for (int forever = 0; forever <= 1; forever++) {
        int n = sweep("model load", load_model, &(load_ctx){ server, &c.hc, "twin" }, forever,
                      http_infer, &c.hc);
        if (n <= 1) {
            fe_stop(&c);
            ASSERT_TRUE(n > 1);
        }
    }
    fe_stop(&c);
}

/* Processors' loads fail part-way too: their instances' state freed, the
 * server serving on. */
static void test_processor_load(void)
{
    ASSERT_TRUE(server != NULL);
    fe_ctx c = { .kind = HTTP };
    ASSERT_EQ_INT(fe_start(&c), OK_);
    static const char *const names[][2] = { { "img", "processor load (image_decode)" },
                                            { "bfd", "processor load (blazeface_decode)" } };
    for (int m = 0; m < 2; m++)
        for (int forever = 0; forever <= 1; forever++) {
            int n = sweep(names[m][1], load_model, &(load_ctx){ server, &c.hc, names[m][0] },
                          forever, http_infer, &c.hc);
            if (n <= 1) {
                fe_stop(&c);
                ASSERT_TRUE(n > 1);
            }
        }
    fe_stop(&c);
}

static void test_http_request(void)
{
    sweep_frontend(HTTP, "HTTP");
}

static void test_grpc_request(void)
{
    sweep_frontend(GRPC, "gRPC");
}

static void test_raw_request(void)
{
    sweep_frontend(RAW, "raw framed");
}

static void test_stop(void)
{
    if (server)
        infd_server_drain(server);
    infd_server_destroy(server);
    grpc_shutdown();
    test_rm_rf(test_repo_root);
}

TEST_MAIN(test_start, test_model_load, test_processor_load, test_http_request, test_grpc_request,
          test_raw_request, test_stop)
