/*
 * Unit tests for the raw socket frontend through a real server: steady-state
 * headerless and framed requests allocate nothing (frontend and runtime
 * together), the listeners follow the server's models, and stop closes
 * connections that are idle, mid-request or waiting for an answer.
 *
 * The frontend's .c is included (STYLE.md allows it for tests) so the test
 * links without libevent and can slow the rescan timer down: a rescan lists
 * the repository, which allocates, and would blur the allocation count.
 * The model is written with tests/unit/onnx_model.h: INPUT0 [batch, 4] FP32 ->
 * OUTPUT0 = INPUT0, OUTPUT1 = INPUT0 + INPUT0.
 */
#define RESCAN_MS 3600000
#include "frontends/raw/raw.c"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "onnx_model.h"
#include "test_repo.h"
#include "test.h"

/* Writes <root>/models/twin/{1/model.onnx,config.pbtxt}; returns the repository. */
static const char *write_repo(void)
{
    const char *repo = test_repo_new("raw", "models");
    onnx_model_add_twin(repo);
    return repo;
}

static int connect_unix(const char *path)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    size_t len = strlen(path);
    if (len >= sizeof(a.sun_path))
        return -1;
    memcpy(a.sun_path, path, len + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
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

static bool recv_all(int fd, void *p, size_t n)
{
    for (size_t k = 0; k < n;) {
        ssize_t r = recv(fd, (char *)p + k, n - k, 0);
        if (r <= 0)
            return false;
        k += (size_t)r;
    }
    return true;
}

/* One headerless round trip: 4 floats in, 4 + 4 floats out. */
static bool headerless_once(int fd, float base)
{
    float x[4] = { base, base + 1, base + 2, base + 3 }, y[8];
    if (!send_all(fd, x, sizeof(x)) || !recv_all(fd, y, sizeof(y)))
        return false;
    for (int i = 0; i < 4; i++) {
        if (y[i] != x[i] || y[4 + i] != 2 * x[i])
            return false;
    }
    return true;
}

/* A framed request of `rows` rows of INPUT0; the whole request in `req`. */
static size_t framed_request(uint8_t *req, int rows, float base)
{
    uint8_t *p = req;
    size_t data = (size_t)rows * 16;
    memcpy(p, "INFD", 4);
    p[4] = 1;
    p[5] = 0;
    put_u16(p + 6, 0);
    put_u64(p + 8, 42);
    put_u16(p + 16, 1);
    put_u16(p + 18, 0);
    put_u32(p + 20, 1 + 6 + 2 + 16 + 8);
    put_u64(p + 24, data);
    p += 32;
    *p++ = 6;
    memcpy(p, "INPUT0", 6);
    p += 6;
    *p++ = INFD_DTYPE_FP32;
    *p++ = 2;
    put_u64(p, (uint64_t)rows);
    put_u64(p + 8, 4);
    put_u64(p + 16, data);
    p += 24;
    for (int i = 0; i < rows * 4; i++) {
        float v = base + (float)i;
        memcpy(p, &v, 4);
        p += 4;
    }
    return (size_t)(p - req);
}

/* Sends it and checks the answer: status 0, two outputs, the values. */
static bool framed_once(int fd, int rows, float base)
{
    uint8_t req[256], hdr[32], rest[1024];
    size_t n = framed_request(req, rows, base);
    if (!send_all(fd, req, n) || !recv_all(fd, hdr, 32))
        return false;
    size_t more = get_u16(hdr + 18) + get_u32(hdr + 20) + get_u64(hdr + 24);
    if (memcmp(hdr, "INFD", 4) != 0 || get_u16(hdr + 6) != 0 || get_u64(hdr + 8) != 42 ||
        get_u16(hdr + 16) != 2 || more > sizeof(rest) || !recv_all(fd, rest, more))
        return false;
    /* Descriptors: OUTPUT0 then OUTPUT1, each 1 + 7 + 2 + 16 + 8 bytes. */
    const float *y = (const float *)(const void *)(rest + get_u32(hdr + 20));
    for (int i = 0; i < rows * 4; i++) {
        float x = base + (float)i;
        if (y[i] != x || y[rows * 4 + i] != 2 * x)
            return false;
    }
    return true;
}

static void test_steady_state_allocates_nothing(void)
{
    infd_server *s = test_server_start(write_repo(), INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    char dir[300], path[400];
    snprintf(dir, sizeof(dir), "%s/sockets", test_repo_root);
    infd_raw_options o;
    infd_raw_options_init(&o);
    o.socket_dir = dir;
    o.stats_every = 0;
    infd_raw *raw = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(infd_raw_start(s, &o, &raw, &err), INFD_STATUS_OK);
    snprintf(path, sizeof(path), "%s/twin.sock", dir);
    int h = connect_unix(path);
    snprintf(path, sizeof(path), "%s/twin.framed.sock", dir);
    int f = connect_unix(path);
    ASSERT_TRUE(h >= 0 && f >= 0);
    /* Warm up: the connections' buffers grow to the largest request. */
    for (int i = 0; i < 10; i++) {
        ASSERT_TRUE(headerless_once(h, (float)i));
        ASSERT_TRUE(framed_once(f, 1 + i % 8, (float)i));
    }
    infd_alloc_stats a = infd_alloc_get_stats();
    for (int i = 0; i < 300; i++) {
        ASSERT_TRUE(headerless_once(h, (float)i));
        ASSERT_TRUE(framed_once(f, 1 + i % 8, (float)i));
    }
    infd_alloc_stats b = infd_alloc_get_stats();
    ASSERT_EQ_U64(b.n_allocs - a.n_allocs, 0);
    close(h);
    close(f);
    infd_server_drain(s);
    infd_raw_stop(raw);
    infd_server_destroy(s);
    snprintf(path, sizeof(path), "%s/twin.sock", dir);
    ASSERT_TRUE(access(path, F_OK) != 0); /* removed at stop */
}

static void test_stop_with_connections_in_every_state(void)
{
    infd_server *s = test_server_start(write_repo(), INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    char dir[300], path[400];
    snprintf(dir, sizeof(dir), "%s/sockets", test_repo_root);
    infd_raw_options o;
    infd_raw_options_init(&o);
    o.socket_dir = dir;
    infd_raw *raw = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(infd_raw_start(s, &o, &raw, &err), INFD_STATUS_OK);
    /* A second frontend on the same folder would steal live sockets. */
    infd_raw *other = NULL;
    ASSERT_STATUS(infd_raw_start(s, &o, &other, &err), INFD_STATUS_IO);
    ASSERT_STR_HAS(err.msg, "in use by a live process");
    ASSERT_TRUE(other == NULL);

    snprintf(path, sizeof(path), "%s/twin.sock", dir);
    int idle = connect_unix(path), partial = connect_unix(path), waiting = connect_unix(path);
    snprintf(path, sizeof(path), "%s/twin.framed.sock", dir);
    int fpartial = connect_unix(path);
    ASSERT_TRUE(idle >= 0 && partial >= 0 && waiting >= 0 && fpartial >= 0);
    ASSERT_TRUE(headerless_once(idle, 1.0f));
    float x[4] = { 0 };
    ASSERT_TRUE(send_all(partial, x, 7));
    ASSERT_TRUE(send_all(waiting, x, sizeof(x))); /* its answer is never read */
    uint8_t req[256];
    size_t n = framed_request(req, 2, 0.0f);
    ASSERT_TRUE(send_all(fpartial, req, n - 5));
    infd_server_drain(s);
    infd_raw_stop(raw);
    /* Every connection sees the end: EOF, or a reset when the frontend
     * closed it before reading bytes the client had already sent (the
     * stop may overtake the epoll thread's read). */
    char c;
    ASSERT_TRUE(recv(idle, &c, 1, 0) <= 0);
    ASSERT_TRUE(recv(partial, &c, 1, 0) <= 0);
    ASSERT_TRUE(recv(fpartial, &c, 1, 0) <= 0);
    close(idle);
    close(partial);
    close(waiting);
    close(fpartial);
    infd_server_destroy(s);
}

static void test_bad_options(void)
{
    infd_raw_options o;
    infd_raw_options_init(&o);
    infd_raw *raw = NULL;
    infd_error err = { 0 };
    const char *bad[] = { "twin", "=9000", "twin=0", "twin=70000", "twin=9000:other", "twin=x" };
    for (size_t i = 0; i < INFD_ARRAY_SIZE(bad); i++) {
        o.tcp_ports = &bad[i];
        o.n_tcp_ports = 1;
        ASSERT_STATUS(infd_raw_start(NULL, &o, &raw, &err), INFD_STATUS_INVALID_ARGUMENT);
        ASSERT_STR_HAS(err.msg, "MODEL=PORT");
    }
    const char *twice[] = { "a=9000", "b=9000:framed" };
    o.tcp_ports = twice;
    o.n_tcp_ports = 2;
    ASSERT_STATUS(infd_raw_start(NULL, &o, &raw, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "given twice");
    tcp_spec t;
    ASSERT_STATUS(parse_tcp_spec("m.v2=123:framed", &t, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(t.model, "m.v2");
    ASSERT_EQ_INT(t.port, 123);
    ASSERT_EQ_INT(t.mode, MODE_FRAMED);
}

static void test_cleanup(void)
{
    test_rm_rf(test_repo_root);
}

TEST_MAIN(test_steady_state_allocates_nothing, test_stop_with_connections_in_every_state,
          test_bad_options, test_cleanup)
