/*
 * fuzz_http.c - libFuzzer target for the HTTP frontend's whole request path
 * (issue #24): raw bytes through libevent's HTTP parser and infd's handlers
 * (src/frontends/http/http.c, kserve_json.c), in a real frontend listening
 * on a loopback port, against a server of two built-in softmax models ("sm"
 * batching up to 4, "sm_flat" not batching; LOGITS FP32 [4] in, PROBS out).
 *
 * Each input is what a client sends on a fresh connection: it is written,
 * the client's side is shut for writing, and the answer is read until the
 * server closes. Routing, methods, headers, chunked bodies, KServe JSON and
 * the binary extension, inference and the error paths all run on the
 * frontend's own thread, where ASan and UBSan watch them as anywhere.
 *
 * Seeds: tests/fuzz/seeds-http (requests written for this project).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "frontends/http/http.h"
#include "fuzz_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static infd_server *server;
static infd_http *http;
static struct sockaddr_in addr;

static void setup(void)
{
    static const fuzz_model sm[] = { { "sm", "softmax", 4 }, { "sm_flat", "softmax", 0 } };
    server = fuzz_server_create("fuzz_http", sm, 2, 0);
    infd_http_options o;
    infd_http_options_init(&o);
    o.host = "127.0.0.1";
    o.port = 0;
    o.n_threads = 1;
    o.max_body_bytes = 1 << 20;
    o.timeout_secs = 5;
    infd_error err;
    if (infd_http_start(server, &o, &http, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "fuzz_http: %s\n", err.msg);
        abort();
    }
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)infd_http_port(http));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!server)
        setup();
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&addr, sizeof(addr));
    if (rc != 0 && fd >= 0 && errno == EINTR) {
        /* libFuzzer's timer signal interrupted it: the connection goes on
         * in the background; wait for its outcome. */
        struct pollfd pf = { .fd = fd, .events = POLLOUT };
        while (poll(&pf, 1, 20000) < 0 && errno == EINTR) {
        }
        int e = ETIMEDOUT;
        socklen_t len = sizeof(e);
        if (pf.revents && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
            e = errno;
        rc = e ? -1 : 0;
        errno = e;
    }
    if (rc != 0) {
        /* The frontend is gone (a crash on its thread would show first). */
        fprintf(stderr, "fuzz_http: connect: %s\n", strerror(errno));
        abort();
    }
    /* A hung server fails the input after 20 s (libFuzzer's -timeout is 30). */
    struct timeval tv = { .tv_sec = 20 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    size_t off = 0;
    while (off < size) {
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* the server closed first (a 400 or 413 mid-body) */
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    char buf[16384];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0 || (n < 0 && errno == EINTR)) {
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        fprintf(stderr, "fuzz_http: no end of the answer in 20 s\n");
        abort();
    }
    close(fd);
    return 0;
}
