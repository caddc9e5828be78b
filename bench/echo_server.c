/*
 * echo_server.c - the peer of bench/serve_raw.py: a bare Unix-socket echo of
 * fixed-size messages, built the way infd's raw frontend is built, minus
 * inference.
 *
 *   bench_echo_server PATH MESSAGE_BYTES
 *
 * It listens on PATH (a stale file there is replaced) and, per connection,
 * reads exactly MESSAGE_BYTES, writes them back, and reads the next message:
 * the headerless raw protocol (docs/RAW_PROTOCOL.md) with an echo for a
 * model, so `infd perf --unix PATH --shape ... --output-bytes MESSAGE_BYTES`
 * drives it exactly as it drives `infd serve`.
 *
 * Why it is shaped like src/frontends/raw/raw.c: the benchmark asks what infd
 * adds to moving the bytes, so the baseline moves them the same way. One
 * thread runs epoll (edge-triggered) over nonblocking sockets; a message is
 * received whole into the connection's buffer before any byte goes back
 * (store and forward, as a model needs its whole input), then written from
 * that buffer. A streaming echo that writes each chunk as it arrives would
 * overlap receive and send and so be a faster baseline than any server that
 * computes on the whole message can be.
 *
 * A standalone program: it links nothing of infd, so it uses libc's
 * allocator directly (one buffer per connection, allocated at accept).
 * SIGTERM or SIGINT ends it; it removes PATH on the way out.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_EVENTS 64

/* One connection: reading `got` of the message, or writing it back from
 * `sent`. The listener has buf == NULL. */
typedef struct conn {
    int fd;
    int writing; /* 0: receiving the message, 1: sending it back */
    size_t got;
    size_t sent;
    unsigned char *buf; /* message_bytes, owned */
} conn;

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void conn_close(conn *c)
{
    close(c->fd); /* also removes it from the epoll set */
    free(c->buf);
    free(c);
}

/* Runs connection c as far as its socket allows. Returns 0 to keep it,
 * -1 when it is done (peer closed or an error). */
static int conn_step(conn *c, size_t message_bytes)
{
    for (;;) {
        if (!c->writing) {
            ssize_t k = recv(c->fd, c->buf + c->got, message_bytes - c->got, 0);
            if (k == 0)
                return -1;
            if (k < 0)
                return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
            c->got += (size_t)k;
            if (c->got == message_bytes) {
                c->writing = 1;
                c->sent = 0;
            }
        } else {
            ssize_t k = send(c->fd, c->buf + c->sent, message_bytes - c->sent, MSG_NOSIGNAL);
            if (k < 0)
                return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
            c->sent += (size_t)k;
            if (c->sent == message_bytes) {
                c->writing = 0;
                c->got = 0;
            }
        }
    }
}

static void accept_all(int epfd, int lfd, size_t message_bytes)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        conn *c = calloc(1, sizeof(*c));
        unsigned char *buf = malloc(message_bytes);
        struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET };
        if (!c || !buf) {
            free(c);
            free(buf);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->buf = buf;
        ev.data.ptr = c;
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
            conn_close(c);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: bench_echo_server PATH MESSAGE_BYTES\n");
        return 2;
    }
    const char *path = argv[1];
    char *end = NULL;
    unsigned long long message_bytes = strtoull(argv[2], &end, 10);
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (!end || *end || message_bytes == 0 || strlen(path) >= sizeof(addr.sun_path)) {
        fprintf(stderr, "bench_echo_server: bad PATH or MESSAGE_BYTES\n");
        return 2;
    }
    memcpy(addr.sun_path, path, strlen(path) + 1);

    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    unlink(path);
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
        listen(lfd, 128) != 0) {
        perror(path);
        return 1;
    }
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    conn listener = { .fd = lfd };
    struct epoll_event lev = { .events = EPOLLIN | EPOLLET, .data.ptr = &listener };
    if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev) != 0) {
        perror("epoll");
        return 1;
    }

    struct epoll_event events[MAX_EVENTS];
    while (!stop_requested) {
        int n = epoll_wait(epfd, events, MAX_EVENTS, -1);
        for (int i = 0; i < n; i++) {
            conn *c = events[i].data.ptr;
            if (c == &listener)
                accept_all(epfd, lfd, (size_t)message_bytes);
            else if (conn_step(c, (size_t)message_bytes) != 0)
                conn_close(c);
        }
    }
    unlink(path);
    return 0;
}
