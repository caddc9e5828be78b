/*
 * raw.c - the raw socket frontend (see raw.h and docs/RAW_PROTOCOL.md).
 *
 * Threads: one accepting thread owns the listeners and the rescans; it
 * hands each accepted connection, round robin, to one of the connection
 * loops (an epoll set and a thread each; `threads` of them), which owns it
 * from then on: reads, answers, completions. Within a loop everything is
 * touched by its thread alone, with two hand-offs: the runtime calls
 * on_infer_done() on an instance worker thread, which stores the outcome
 * in the connection, appends it to the loop's `done` list under `done_mu`
 * and writes the loop's eventfd when the list was empty; the accepting
 * thread appends new connections to `new_head` the same way. A model's
 * statistics are shared by the loops (under its stats_mu).
 *
 *   accept ─▶ READ (recv straight into the input slots) ─▶ IN_FLIGHT
 *      ▲                                                      │ worker thread:
 *      │                                                      ▼ done list + eventfd
 *      └──────────── WRITE (sendmsg from the output slots) ◀──┘
 *
 * A connection runs one request at a time: while a request is in flight or
 * its answer is being written, the connection does not read, so bytes of a
 * pipelined next request wait in the kernel's socket buffer. That keeps the
 * input memory stable while the runtime borrows it and makes the output
 * slots free to reuse, at no cost to a client that waits for each answer
 * (every client of the seed's protocol does); concurrency comes from
 * connections.
 *
 * Zero copy: inputs are received into 64-byte-aligned slots of the
 * connection's receive buffer and handed to the runtime as borrowed memory
 * (infd_request_add_input); outputs are written by the runtime into slots of
 * the send buffer (infd_request_set_output_buffer) and sent from there with
 * one sendmsg over an iovec. Buffers are sized per connection for its
 * largest request and reused, so steady-state requests allocate nothing.
 * Framed requests with RAW_FLAG_SHM name shared-memory regions instead of
 * sending some tensors: those inputs are read where they lie and those
 * outputs written there (the regions are held until the answer is sent).
 *
 * Sockets are edge-triggered and registered once (EPOLLIN | EPOLLOUT |
 * EPOLLRDHUP | EPOLLET): a connection that stops reading in the middle of
 * available data resumes by calling its read handler directly after its
 * answer is written, and writes that hit EAGAIN wait for the EPOLLOUT edge.
 * A slow or vanished client therefore never blocks the loop.
 *
 * Lifetimes: a raw_model (per model name, with its statistics) lives until
 * stop. A connection holds its own model handle, so it keeps working across
 * a reload until that version goes away (its loop then closes it when idle;
 * the client reconnects to the new version). A closed connection's fd is closed
 * at once, but its memory is freed at the end of the loop iteration (events
 * later in the same batch may still point at it), or, when a request is in
 * flight, once its completion arrives: the runtime borrows its buffers.
 */
#include "frontends/raw/raw.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/common.h"
#include "core/histogram.h"
#include "core/log.h"

/* ---- protocol constants (docs/RAW_PROTOCOL.md) -------------------------- */

#define RAW_MAGIC0         'I'
#define RAW_MAGIC1         'N'
#define RAW_MAGIC2         'F'
#define RAW_MAGIC3         'D'
#define RAW_VERSION        1
#define RAW_HEADER_BYTES   32
#define RAW_FLAG_CLOSING   0x01                /* response: the server closes after it */
#define RAW_FLAG_SHM       0x02                /* descriptors name shared-memory regions */
#define RAW_MAX_DESC_BYTES 65536u              /* request descriptor section */
#define RAW_MAX_DATA_BYTES ((uint64_t)1 << 30) /* request tensor data, 1 GiB */
#define RAW_MAX_MSG_BYTES  (INFD_ERROR_MSG_BYTES - 1)
/* One output descriptor at most: name length, name, dtype, rank, dims, nbytes,
 * and with RAW_FLAG_SHM whether it was written to its region. */
#define RAW_MAX_OUT_DESC (1 + 255 + 1 + 1 + 8 * INFD_MAX_RANK + 8 + 1)
#define RAW_TXHDR_BYTES \
    (RAW_HEADER_BYTES + RAW_MAX_MSG_BYTES + INFD_MAX_MODEL_IO * RAW_MAX_OUT_DESC)

/* ---- frontend constants ------------------------------------------------- */

#ifndef RESCAN_MS     /* the unit test, which includes this file, sets it */
#define RESCAN_MS 500 /* how often the READY set is compared with the listeners */
#endif
#define MAX_EVENTS    64
#define SCRATCH_BYTES 65536 /* discarding the data of a rejected framed request */
#define SLOT_ALIGN    64

typedef enum handle_kind { H_LISTENER, H_CONN, H_WAKE, H_TIMER } handle_kind;

/* First member of everything registered with epoll (ev.data.ptr). */
typedef struct raw_handle {
    handle_kind kind;
    int fd; /* -1 once closed */
} raw_handle;

typedef enum raw_mode { MODE_HEADERLESS, MODE_FRAMED } raw_mode;

typedef struct raw_model raw_model;

typedef struct raw_listener {
    raw_handle h;
    raw_model *rm;
    raw_mode mode;
    char *path;                /* Unix socket to unlink on close; NULL for TCP */
    int port;                  /* TCP port, 0 for Unix */
    struct raw_listener *next; /* rm->listeners, or the graveyard once closed */
} raw_listener;

/* A --raw-tcp-port entry. */
typedef struct tcp_spec {
    char model[128];
    int port;
    raw_mode mode;
    bool failed; /* bind failed or the mode does not fit: not retried until reactivation */
} tcp_spec;

/* Per model name; lives until stop. The accepting thread's, but for the
 * statistics. */
struct raw_model {
    raw_model *next;
    char name[128];
    infd_model *model; /* acquired while the listeners are open, else NULL */
    int64_t version;
    raw_listener *listeners;
    bool seen; /* in the READY set of the current scan */
    int64_t ready_version;
    int64_t failed_version; /* whose listeners all failed to open: not retried */
    /* Latency of the requests answered since the last stats line (ns),
     * recorded by every connection loop: under stats_mu. */
    pthread_mutex_t stats_mu;
    infd_histogram *hist;
    uint64_t n_window_failed;
    uint64_t n_total;
};

typedef enum conn_state {
    C_READ_HEADER, /* framed: the 32-byte header */
    C_READ_DESC,   /* framed: the descriptor section */
    C_READ_DATA,   /* tensor bytes into the input slots */
    C_DISCARD,     /* framed: skipping the data of a rejected request */
    C_IN_FLIGHT,   /* submitted; waiting for the completion */
    C_WRITE,       /* sending the answer */
} conn_state;

typedef struct slot {
    size_t off; /* in rx (inputs) or tx (outputs) */
    size_t nbytes;
} slot;

typedef struct raw_loop raw_loop;

typedef struct raw_conn {
    raw_handle h;
    infd_raw *raw;
    raw_loop *loop; /* the connection loop that owns it */
    raw_model *rm;
    infd_model *model; /* retained for the connection's life */
    raw_mode mode;
    conn_state state;
    bool closed;    /* fd closed; freed when nothing is in flight */
    bool in_reap;   /* on raw->reap */
    bool peer_gone; /* EPOLLHUP/ERR seen */
    bool close_after_send;
    struct raw_conn *prev, *next; /* loop->conns */
    struct raw_conn *reap_next;

    /* The current request. */
    infd_request *req;
    uint64_t t_start_ns; /* first byte of the request */
    bool failed;         /* the answer being written is an error */

    /* Receive side: input slots in rx. */
    uint8_t *rx;
    size_t rx_cap;
    int n_in;
    slot in[INFD_MAX_MODEL_IO];
    int in_cur;    /* slot being received */
    size_t in_got; /* bytes of it received */

    /* Framed request parsing. */
    uint8_t hdr[RAW_HEADER_BYTES];
    size_t hdr_got;
    uint8_t *desc; /* desc_need bytes plus one for NUL-terminating names in place */
    size_t desc_cap, desc_need, desc_got;
    uint64_t req_id;
    uint64_t discard_left;
    char err_msg[INFD_ERROR_MSG_BYTES];
    infd_status err_code;

    /* Headerless layout, from the connection's model at accept. */
    const char *in_name;
    infd_dtype in_dtype;
    int in_rank;
    int64_t in_shape[INFD_MAX_RANK + 1];
    int n_out;
    const char *out_name[INFD_MAX_MODEL_IO];
    slot out[INFD_MAX_MODEL_IO];

    /* Send side: output slots in tx, header in txhdr, iov over both. */
    uint8_t *tx;
    size_t tx_cap;
    size_t txhdr_len;
    struct iovec iov[INFD_MAX_MODEL_IO + 1];
    int iov_n, iov_i;

    /* Shared memory (RAW_FLAG_SHM): the regions the request holds, and per
     * requested output whether it goes to a region (its name, where, how
     * much room, and on which CUDA device, -1 for system memory). */
    bool shm;
    infd_shm_region *shm_held[2 * INFD_MAX_MODEL_IO];
    int n_shm;
    int n_shm_out;
    struct {
        const char *name;
        uint8_t *data;
        size_t cap;
        int device;
    } shm_out[INFD_MAX_MODEL_IO];

    /* Written by the worker thread before the hand-off under done_mu. */
    struct raw_conn *done_next;
    infd_status done_status;
    char done_msg[INFD_ERROR_MSG_BYTES];

    uint8_t txhdr[RAW_TXHDR_BYTES];
} raw_conn;

/* A connection loop: its own thread and epoll set, and the connections the
 * accepting thread handed it. */
struct raw_loop {
    infd_raw *raw;
    int index;
    int epfd;
    raw_handle wake;  /* eventfd: completions, new connections, stop */
    raw_handle timer; /* timerfd: idle connections to a version that went away */
    pthread_t thread;
    bool thread_started;

    /* Hand-offs from other threads: completions (runtime workers) and
     * accepted connections (the accepting thread). */
    pthread_mutex_t done_mu;
    raw_conn *done_head, *done_tail;
    raw_conn *new_head;

    /* This loop's thread only. */
    raw_conn *conns;
    raw_conn *reap; /* closed connections to free at the end of the iteration */
    int n_in_flight;
    uint8_t *scratch;
};

struct infd_raw {
    infd_server *server;
    char *socket_dir;
    int socket_mode; /* -1: leave it */
    long socket_gid; /* -1: leave it */
    char *tcp_host;
    tcp_spec *tcp;
    int n_tcp;
    int stats_every;

    /* The accepting thread: listeners and rescans. */
    int epfd;
    raw_handle wake;  /* eventfd: stop */
    raw_handle timer; /* timerfd: rescans */
    pthread_t thread;
    bool thread_started;
    _Atomic bool stopping;

    /* The connection loops; accepted connections go round robin. */
    raw_loop *loops;
    int n_loops, next_loop;

    /* The accepting thread only. */
    raw_model *models;
    raw_listener *graveyard; /* closed listeners, freed at the end of the iteration */
};

/* ---- little-endian fields ----------------------------------------------- */

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | ((uint64_t)get_u32(p + 4) << 32);
}

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- options ------------------------------------------------------------ */

void infd_raw_options_init(infd_raw_options *o)
{
    memset(o, 0, sizeof(*o));
    o->socket_dir = "/tmp/infd";
    o->tcp_host = "127.0.0.1";
    o->stats_every = 1000;
    o->socket_mode = -1;
    o->socket_gid = -1;
}

/* "MODEL=PORT" or "MODEL=PORT:framed". */
static infd_status parse_tcp_spec(const char *s, tcp_spec *out, infd_error *err)
{
    const char *eq = strrchr(s, '=');
    if (!eq || eq == s || (size_t)(eq - s) >= sizeof(out->model))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "raw TCP port '%s': expected MODEL=PORT or MODEL=PORT:framed", s);
    memset(out, 0, sizeof(*out));
    memcpy(out->model, s, (size_t)(eq - s));
    char *end = NULL;
    errno = 0;
    long port = strtol(eq + 1, &end, 10);
    out->mode = MODE_HEADERLESS;
    if (end && strcmp(end, ":framed") == 0)
        out->mode = MODE_FRAMED;
    else if (!end || *end != '\0')
        end = NULL;
    if (!end || end == eq + 1 || errno || port < 1 || port > 65535)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "raw TCP port '%s': expected MODEL=PORT or MODEL=PORT:framed "
                              "with PORT in 1..65535",
                              s);
    out->port = (int)port;
    return INFD_STATUS_OK;
}

/* mkdir -p with mode 0755. */
static infd_status make_dirs(const char *dir, infd_error *err)
{
    char path[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof(path))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "raw socket dir '%s': bad length",
                              dir);
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return infd_error_set(err, INFD_STATUS_IO, "raw socket dir: mkdir '%s': %s", path,
                                  strerror(errno));
        path[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return infd_error_set(err, INFD_STATUS_IO, "raw socket dir '%s' is not a folder", dir);
    return INFD_STATUS_OK;
}

/* ---- listeners ---------------------------------------------------------- */

static infd_status epoll_add(int epfd, raw_handle *h, uint32_t events, infd_error *err)
{
    struct epoll_event ev = { .events = events, .data.ptr = h };
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, h->fd, &ev) != 0)
        return infd_error_set(err, INFD_STATUS_IO, "epoll_ctl: %s", strerror(errno));
    return INFD_STATUS_OK;
}

/* A socket file at `path` that no process listens on is stale and removed;
 * a live one or a file of another kind is an error. */
static infd_status clear_socket_path(const char *path, const struct sockaddr_un *addr,
                                     infd_error *err)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return INFD_STATUS_OK;
    if (!S_ISSOCK(st.st_mode))
        return infd_error_set(err, INFD_STATUS_IO, "raw socket '%s' exists and is not a socket",
                              path);
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (probe < 0)
        return infd_error_set(err, INFD_STATUS_IO, "socket: %s", strerror(errno));
    int rc = connect(probe, (const struct sockaddr *)addr, sizeof(*addr));
    int e = errno;
    close(probe);
    if (rc == 0 || e == EAGAIN || e == EINPROGRESS)
        return infd_error_set(err, INFD_STATUS_IO, "raw socket '%s' is in use by a live process",
                              path);
    if (unlink(path) != 0 && errno != ENOENT)
        return infd_error_set(err, INFD_STATUS_IO, "raw socket '%s': unlink stale file: %s", path,
                              strerror(errno));
    return INFD_STATUS_OK;
}

/* `mode` and `gid` (-1: leave) are set between bind and listen: no client
 * can connect before the socket has them. */
static int listen_unix(const char *path, int mode, long gid, infd_error *err)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof(addr.sun_path)) {
        infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                       "raw socket path '%s' is longer than %zu bytes", path,
                       sizeof(addr.sun_path) - 1);
        return -1;
    }
    strcpy(addr.sun_path, path);
    if (clear_socket_path(path, &addr, err) != INFD_STATUS_OK)
        return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        infd_error_set(err, INFD_STATUS_IO, "socket: %s", strerror(errno));
        return -1;
    }
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
        (mode >= 0 && chmod(path, (mode_t)mode) != 0) ||
        (gid >= 0 && chown(path, (uid_t)-1, (gid_t)gid) != 0) || listen(fd, SOMAXCONN) != 0) {
        infd_error_set(err, INFD_STATUS_IO, "raw socket '%s': %s", path, strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    return fd;
}

static int listen_tcp(const char *host, int port, infd_error *err)
{
    char service[16];
    snprintf(service, sizeof(service), "%d", port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC,
                              .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, service, &hints, &res);
    if (gai != 0) {
        infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "raw TCP host '%s': %s", host,
                       gai_strerror(gai));
        return -1;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        infd_error_set(err, INFD_STATUS_IO, "socket: %s", strerror(errno));
        goto out;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
        infd_error_set(err, INFD_STATUS_IO, "raw TCP %s:%d: %s", host, port, strerror(errno));
        close(fd);
        fd = -1;
    }
out:
    freeaddrinfo(res);
    return fd;
}

/* Opens one listener of `rm` and registers it; Unix when `path` is set. */
static infd_status open_listener(infd_raw *r, raw_model *rm, raw_mode mode, const char *path,
                                 int port, infd_error *err)
{
    infd_status st = INFD_STATUS_OUT_OF_MEMORY;
    raw_listener *l = infd_calloc(1, sizeof(*l));
    if (!l || (path && !(l->path = infd_strdup(path)))) {
        infd_error_set(err, st, "raw: out of memory opening a listener");
        goto out;
    }
    l->h.kind = H_LISTENER;
    l->rm = rm;
    l->mode = mode;
    l->port = port;
    l->h.fd = path ? listen_unix(path, r->socket_mode, r->socket_gid, err)
                   : listen_tcp(r->tcp_host, port, err);
    if (l->h.fd < 0) {
        st = err ? err->code : INFD_STATUS_IO;
        goto out;
    }
    st = epoll_add(r->epfd, &l->h, EPOLLIN | EPOLLET, err);
    if (st != INFD_STATUS_OK)
        goto out;
    l->next = rm->listeners;
    rm->listeners = l;
    l = NULL;
out:
    if (l) {
        if (l->h.fd >= 0) {
            close(l->h.fd);
            if (l->path)
                unlink(l->path);
        }
        infd_free(l->path);
        infd_free(l);
    }
    return st;
}

static void close_listener(infd_raw *r, raw_listener *l)
{
    epoll_ctl(r->epfd, EPOLL_CTL_DEL, l->h.fd, NULL);
    close(l->h.fd);
    l->h.fd = -1;
    if (l->path)
        unlink(l->path);
    l->next = r->graveyard;
    r->graveyard = l;
}

/* ---- statistics --------------------------------------------------------- */

/* rm->stats_mu held. */
static void stats_log_locked(raw_model *rm)
{
    uint64_t n = infd_histogram_count(rm->hist);
    if (n + rm->n_window_failed == 0)
        return;
    infd_histogram *h = rm->hist;
    INFD_LOG_INFO("raw: model '%s': %llu requests (%llu failed, %llu in total), latency us: "
                  "mean %.1f min %.1f max %.1f p95 %.1f p99 %.1f",
                  rm->name, (unsigned long long)(n + rm->n_window_failed),
                  (unsigned long long)rm->n_window_failed, (unsigned long long)rm->n_total,
                  infd_histogram_mean(h) / 1e3, (double)infd_histogram_min(h) / 1e3,
                  (double)infd_histogram_max(h) / 1e3,
                  (double)infd_histogram_quantile(h, 0.95) / 1e3,
                  (double)infd_histogram_quantile(h, 0.99) / 1e3);
    infd_histogram_reset(h);
    rm->n_window_failed = 0;
}

static void stats_log(raw_model *rm)
{
    pthread_mutex_lock(&rm->stats_mu);
    stats_log_locked(rm);
    pthread_mutex_unlock(&rm->stats_mu);
}

static void stats_record(infd_raw *r, raw_model *rm, bool ok, uint64_t latency_ns)
{
    pthread_mutex_lock(&rm->stats_mu);
    rm->n_total++;
    if (ok)
        infd_histogram_record(rm->hist, latency_ns);
    else
        rm->n_window_failed++;
    if (r->stats_every > 0 &&
        infd_histogram_count(rm->hist) + rm->n_window_failed >= (uint64_t)r->stats_every)
        stats_log_locked(rm);
    pthread_mutex_unlock(&rm->stats_mu);
}

/* ---- models: following the READY set ------------------------------------ */

/* Whether `model` can be served headerless: one input and every tensor of a
 * fixed-size dtype with a non-zero size. `why` says why not. */
static bool headerless_fits(infd_model *model, char *why, size_t why_n)
{
    infd_model_io io;
    if (infd_model_n_inputs(model) != 1) {
        snprintf(why, why_n, "%d inputs", infd_model_n_inputs(model));
        return false;
    }
    infd_model_input(model, 0, &io);
    if (infd_dtype_size(io.dtype) == 0 || io.row_bytes == 0) {
        snprintf(why, why_n, "input '%s' has no fixed byte size", io.name);
        return false;
    }
    for (int i = 0; i < infd_model_n_outputs(model); i++) {
        infd_model_output(model, i, &io);
        if (infd_dtype_size(io.dtype) == 0) {
            snprintf(why, why_n, "output '%s' is %s", io.name, infd_dtype_name(io.dtype));
            return false;
        }
    }
    return true;
}

/* snprintf at `*w` in `buf`, keeping `*w` within the buffer. */
static void appendf(char *buf, size_t n, size_t *w, const char *fmt, ...) INFD_PRINTF(4, 5);

static void appendf(char *buf, size_t n, size_t *w, const char *fmt, ...)
{
    if (*w >= n - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *w, n - *w, fmt, ap);
    va_end(ap);
    if (k > 0)
        *w = INFD_MIN(*w + (size_t)k, n - 1);
}

static void deactivate(infd_raw *r, raw_model *rm)
{
    while (rm->listeners) {
        raw_listener *l = rm->listeners;
        rm->listeners = l->next;
        close_listener(r, l);
    }
    if (rm->model) {
        INFD_LOG_INFO("raw: model '%s' version %lld: listeners closed", rm->name,
                      (long long)rm->version);
        infd_model_release(rm->model);
        rm->model = NULL;
    }
    stats_log(rm);
}

/* Acquires the model's highest READY version and opens its listeners. With
 * `strict` (at start) a listener that fails to open fails the call;
 * otherwise it is logged and the others stay open. */
static infd_status activate(infd_raw *r, raw_model *rm, bool strict, infd_error *err)
{
    infd_error e = { 0 };
    infd_status st = infd_server_model_acquire(r->server, rm->name, -1, &rm->model, &e);
    if (st != INFD_STATUS_OK) {
        /* Unloaded between the index and now: the next scan decides again. */
        INFD_LOG_DEBUG("raw: model '%s': %s", rm->name, e.msg);
        rm->model = NULL;
        return INFD_STATUS_OK;
    }
    rm->version = infd_model_version(rm->model);

    char path[PATH_MAX], why[160] = "", where[512] = "";
    size_t w = 0;
    bool headerless = headerless_fits(rm->model, why, sizeof(why));
    if (headerless) {
        snprintf(path, sizeof(path), "%s/%s.sock", r->socket_dir, rm->name);
        st = open_listener(r, rm, MODE_HEADERLESS, path, 0, &e);
        if (st != INFD_STATUS_OK)
            goto fail;
        appendf(where, sizeof(where), &w, " headerless unix:%s", path);
    }
    snprintf(path, sizeof(path), "%s/%s.framed.sock", r->socket_dir, rm->name);
    st = open_listener(r, rm, MODE_FRAMED, path, 0, &e);
    if (st != INFD_STATUS_OK)
        goto fail;
    appendf(where, sizeof(where), &w, " framed unix:%s", path);
    for (int i = 0; i < r->n_tcp; i++) {
        tcp_spec *t = &r->tcp[i];
        if (strcmp(t->model, rm->name) != 0 || t->failed)
            continue;
        if (t->mode == MODE_HEADERLESS && !headerless) {
            INFD_LOG_WARN("raw: model '%s' cannot be served headerless (%s): TCP port %d not "
                          "opened (use %s=%d:framed)",
                          rm->name, why, t->port, rm->name, t->port);
            t->failed = true;
            continue;
        }
        st = open_listener(r, rm, t->mode, NULL, t->port, &e);
        if (st != INFD_STATUS_OK) {
            t->failed = true;
            goto fail;
        }
        appendf(where, sizeof(where), &w, " %s tcp:%s:%d",
                t->mode == MODE_FRAMED ? "framed" : "headerless", r->tcp_host, t->port);
    }
    INFD_LOG_INFO("raw: model '%s' version %lld:%s%s%s%s", rm->name, (long long)rm->version, where,
                  headerless ? "" : " (no headerless socket: ", headerless ? "" : why,
                  headerless ? "" : ")");
    return INFD_STATUS_OK;

fail:
    if (strict) {
        deactivate(r, rm);
        if (err)
            *err = e;
        return st;
    }
    INFD_LOG_ERROR("raw: model '%s': %s", rm->name, e.msg);
    if (!rm->listeners) {
        rm->failed_version = rm->version;
        deactivate(r, rm);
    }
    return INFD_STATUS_OK;
}

static raw_model *find_model(infd_raw *r, const char *name)
{
    for (raw_model *rm = r->models; rm; rm = rm->next) {
        if (strcmp(rm->name, name) == 0)
            return rm;
    }
    return NULL;
}

static raw_model *get_model(infd_raw *r, const char *name)
{
    raw_model *rm = find_model(r, name);
    if (rm)
        return rm;
    if (strlen(name) >= sizeof(rm->name) || strchr(name, '/'))
        return NULL;
    rm = infd_calloc(1, sizeof(*rm));
    if (!rm)
        return NULL;
    rm->hist = infd_histogram_create();
    if (!rm->hist) {
        infd_free(rm);
        return NULL;
    }
    pthread_mutex_init(&rm->stats_mu, NULL);
    strcpy(rm->name, name);
    rm->next = r->models;
    r->models = rm;
    return rm;
}

static void conn_close(infd_raw *r, raw_conn *c);

/* Brings the listeners in line with the READY models. */
static infd_status rescan(infd_raw *r, bool strict, infd_error *err)
{
    infd_repository_entry *rows = NULL;
    int n = 0;
    infd_error e = { 0 };
    infd_status st = infd_server_repository_index(r->server, true, &rows, &n, &e);
    if (st != INFD_STATUS_OK) {
        INFD_LOG_WARN("raw: repository index: %s", e.msg);
        return strict ? infd_error_set(err, st, "%s", e.msg) : INFD_STATUS_OK;
    }
    for (raw_model *rm = r->models; rm; rm = rm->next)
        rm->seen = false;
    for (int i = 0; i < n; i++) {
        if (rows[i].state != INFD_MODEL_STATE_READY)
            continue;
        raw_model *rm = get_model(r, rows[i].name);
        if (!rm && strict && strlen(rows[i].name) < sizeof(rm->name) &&
            !strchr(rows[i].name, '/')) {
            /* At start, a READY model without its sockets is an error. */
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                                "raw: model '%s': out of memory for its listeners", rows[i].name);
            infd_free(rows);
            return st;
        }
        if (!rm) {
            INFD_LOG_WARN("raw: model '%s': not served (bad name or out of memory)", rows[i].name);
            continue;
        }
        if (!rm->seen || rows[i].version > rm->ready_version)
            rm->ready_version = rows[i].version;
        rm->seen = true;
    }
    infd_free(rows);

    st = INFD_STATUS_OK;
    for (raw_model *rm = r->models; rm && st == INFD_STATUS_OK; rm = rm->next) {
        if (!rm->seen)
            rm->failed_version = 0;
        if (rm->model &&
            (!rm->seen || !infd_model_is_ready(rm->model) || rm->version != rm->ready_version))
            deactivate(r, rm);
        if (!rm->model && rm->seen && rm->ready_version != rm->failed_version) {
            if (!strict) {
                for (int i = 0; i < r->n_tcp; i++) {
                    if (strcmp(r->tcp[i].model, rm->name) == 0 && r->tcp[i].failed &&
                        rm->ready_version != rm->version)
                        r->tcp[i].failed = false; /* a new version: try again */
                }
            }
            st = activate(r, rm, strict, err);
        }
    }
    return st;
}

/* Idle connections to a version that went away can do nothing but fail
 * (each loop, on its own timer). */
static void close_stale(raw_loop *L)
{
    for (raw_conn *c = L->conns; c; c = c->next) {
        if (!c->closed && c->state <= C_READ_DATA && c->in_cur == 0 && c->in_got == 0 &&
            c->hdr_got == 0 && c->desc_got == 0 && !infd_model_is_ready(c->model))
            conn_close(L->raw, c);
    }
}

/* ---- connections -------------------------------------------------------- */

static void rx_free(uint8_t *p);

/* Lets go of the regions the current request held. */
static void shm_release(raw_conn *c)
{
    for (int i = 0; i < c->n_shm; i++)
        infd_shm_region_release(c->shm_held[i]);
    c->n_shm = 0;
    c->n_shm_out = 0;
}

static void conn_free(raw_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        c->loop->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    infd_request_destroy(c->req);
    shm_release(c);
    infd_model_release(c->model);
    rx_free(c->rx);
    infd_free(c->tx);
    infd_free(c->desc);
    infd_free(c);
}

/* Closes the fd now; the memory goes at the end of the loop iteration, or
 * after the completion when a request is in flight. */
static void conn_close(infd_raw *r, raw_conn *c)
{
    INFD_UNUSED(r);
    if (c->closed)
        return;
    raw_loop *L = c->loop;
    epoll_ctl(L->epfd, EPOLL_CTL_DEL, c->h.fd, NULL);
    close(c->h.fd);
    c->h.fd = -1;
    c->closed = true;
    if (c->state != C_IN_FLIGHT && !c->in_reap) {
        c->in_reap = true;
        c->reap_next = L->reap;
        L->reap = c;
    }
}

/* Makes rx / tx hold at least `n` bytes (contents are not kept). */
static bool ensure_buf(uint8_t **buf, size_t *cap, size_t n)
{
    if (n <= *cap)
        return true;
    size_t want = infd_align_up(n, 4096);
    uint8_t *p = infd_aligned_alloc(SLOT_ALIGN, want);
    if (!p)
        return false;
    infd_free(*buf);
    *buf = p;
    *cap = want;
    return true;
}

/* As ensure_buf, for the receive buffer: from the pinned memory pool when
 * it has room (infd.h), so that a GPU instance copies the inputs to the
 * device from where they were received instead of gathering them into its
 * staging first, as the HTTP frontend's request bodies are; else ordinary
 * memory. */
static void rx_free(uint8_t *p)
{
    if (p && !infd_pinned_free(p))
        infd_free(p);
}

static bool ensure_rx(raw_conn *c, size_t n)
{
    if (n <= c->rx_cap)
        return true;
    size_t want = infd_align_up(n, 4096);
    uint8_t *p = infd_pinned_alloc(want);
    if (!p)
        p = infd_aligned_alloc(SLOT_ALIGN, want);
    if (!p)
        return false;
    rx_free(c->rx);
    c->rx = p;
    c->rx_cap = want;
    return true;
}

/* The headerless layout of the connection's model: one input at batch 1
 * (shape [1, dims...] when the model batches), every output's row in its own
 * slot of tx. */
static infd_status conn_setup_headerless(raw_conn *c)
{
    infd_model_io io;
    bool batches = infd_model_max_batch_size(c->model) > 0;
    infd_model_input(c->model, 0, &io);
    c->in_name = io.name;
    c->in_dtype = io.dtype;
    c->in_rank = 0;
    if (batches)
        c->in_shape[c->in_rank++] = 1;
    for (int d = 0; d < io.rank; d++)
        c->in_shape[c->in_rank++] = io.dims[d];
    c->n_in = 1;
    c->in[0].off = 0;
    c->in[0].nbytes = io.row_bytes;
    c->n_out = infd_model_n_outputs(c->model);
    size_t off = 0;
    for (int i = 0; i < c->n_out; i++) {
        infd_model_output(c->model, i, &io);
        c->out_name[i] = io.name;
        c->out[i].off = off;
        c->out[i].nbytes = io.row_bytes;
        off += infd_align_up(io.row_bytes, SLOT_ALIGN);
    }
    if (!ensure_rx(c, c->in[0].nbytes) || !ensure_buf(&c->tx, &c->tx_cap, off ? off : 1))
        return INFD_STATUS_OUT_OF_MEMORY;
    return INFD_STATUS_OK;
}

static void conn_reset(raw_conn *c)
{
    c->state = c->mode == MODE_FRAMED ? C_READ_HEADER : C_READ_DATA;
    c->hdr_got = 0;
    c->desc_got = 0;
    c->in_cur = 0;
    c->in_got = 0;
    c->failed = false;
    c->t_start_ns = 0;
    if (c->mode == MODE_FRAMED)
        c->n_in = 0;
}

/* A framed connection the server cannot take (no memory for its state):
 * one error answer from the stack (request id 0, as for an unreadable
 * header, and the CLOSING flag) before the socket closes, so that the
 * client learns why. Best effort: the socket is new and its buffer empty,
 * so the 32 + message bytes go at once or not at all. */
static void refuse_framed(int fd, infd_status code, const char *msg)
{
    uint8_t out[RAW_HEADER_BYTES + 64];
    size_t n = INFD_MIN(strlen(msg), sizeof(out) - RAW_HEADER_BYTES);
    memset(out, 0, RAW_HEADER_BYTES);
    memcpy(out, "INFD", 4);
    out[4] = 1;
    out[5] = RAW_FLAG_CLOSING;
    put_u16(out + 6, (uint16_t)code);
    put_u16(out + 18, (uint16_t)n);
    memcpy(out + RAW_HEADER_BYTES, msg, n);
    if (send(fd, out, RAW_HEADER_BYTES + n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        return;
    shutdown(fd, SHUT_WR);
}

static void on_accept(infd_raw *r, raw_listener *l)
{
    for (;;) {
        int fd = accept4(l->h.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                INFD_LOG_WARN("raw: model '%s': accept: %s", l->rm->name, strerror(errno));
            return;
        }
        if (!l->path) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        raw_conn *c = infd_calloc(1, sizeof(*c));
        if (!c) {
            INFD_LOG_WARN("raw: model '%s': out of memory accepting a connection", l->rm->name);
            if (l->mode == MODE_FRAMED)
                refuse_framed(fd, INFD_STATUS_OUT_OF_MEMORY,
                              "out of memory accepting the connection");
            close(fd);
            continue;
        }
        c->h.kind = H_CONN;
        c->h.fd = fd;
        c->raw = r;
        c->rm = l->rm;
        c->model = l->rm->model;
        infd_model_retain(c->model);
        c->mode = l->mode;
        conn_reset(c);
        if (c->mode == MODE_HEADERLESS && conn_setup_headerless(c) != INFD_STATUS_OK) {
            INFD_LOG_WARN("raw: model '%s': out of memory setting up a connection", l->rm->name);
            close(fd);
            infd_model_release(c->model);
            rx_free(c->rx);
            infd_free(c->tx);
            infd_free(c);
            continue;
        }
        /* To the next loop, which takes it on its wake-up. */
        raw_loop *L = &r->loops[r->next_loop];
        r->next_loop = (r->next_loop + 1) % r->n_loops;
        c->loop = L;
        pthread_mutex_lock(&L->done_mu);
        c->next = L->new_head;
        L->new_head = c;
        pthread_mutex_unlock(&L->done_mu);
        uint64_t one = 1;
        ssize_t rc = write(L->wake.fd, &one, sizeof(one));
        INFD_UNUSED(rc); /* EAGAIN: the counter is already non-zero */
    }
}

/* The connections the accepting thread handed this loop: listed and
 * watched (an fd that is readable already reports so at once). */
static void take_new(raw_loop *L)
{
    pthread_mutex_lock(&L->done_mu);
    raw_conn *c = L->new_head;
    L->new_head = NULL;
    pthread_mutex_unlock(&L->done_mu);
    while (c) {
        raw_conn *next = c->next;
        c->prev = NULL;
        c->next = L->conns;
        if (L->conns)
            L->conns->prev = c;
        L->conns = c;
        infd_error e = { 0 };
        if (atomic_load(&L->raw->stopping) ||
            epoll_add(L->epfd, &c->h, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, &e) !=
                INFD_STATUS_OK) {
            if (!atomic_load(&L->raw->stopping))
                INFD_LOG_WARN("raw: model '%s': cannot watch a connection: %s", c->rm->name, e.msg);
            c->state = C_WRITE; /* not in flight: conn_close reaps it */
            conn_close(L->raw, c);
        }
        c = next;
    }
}

/* ---- completions -------------------------------------------------------- */

/* Runs on a runtime worker thread (or inside infd_infer_async). */
static void on_infer_done(void *user, infd_request *req, infd_status status, const char *message)
{
    raw_conn *c = user;
    raw_loop *L = c->loop;
    INFD_UNUSED(req);
    c->done_status = status;
    if (status != INFD_STATUS_OK)
        snprintf(c->done_msg, sizeof(c->done_msg), "%s", message ? message : "");
    c->done_next = NULL;
    pthread_mutex_lock(&L->done_mu);
    bool was_empty = L->done_head == NULL;
    if (L->done_tail)
        L->done_tail->done_next = c;
    else
        L->done_head = c;
    L->done_tail = c;
    pthread_mutex_unlock(&L->done_mu);
    if (was_empty) {
        uint64_t one = 1;
        ssize_t rc = write(L->wake.fd, &one, sizeof(one));
        INFD_UNUSED(rc); /* EAGAIN: the counter is already non-zero */
    }
}

/* ---- writing ------------------------------------------------------------ */

static void on_readable(infd_raw *r, raw_conn *c);

static void write_done(infd_raw *r, raw_conn *c)
{
    stats_record(r, c->rm, !c->failed, infd_clock_ns() - c->t_start_ns);
    infd_request_destroy(c->req);
    c->req = NULL;
    shm_release(c);
    if (c->close_after_send) {
        /* Closing with unread bytes makes the kernel reset the connection,
         * and over TCP a reset can discard the error answer before the
         * client reads it: read what has arrived (bounded) first. */
        for (int i = 0; i < 16; i++) {
            if (recv(c->h.fd, c->loop->scratch, SCRATCH_BYTES, MSG_DONTWAIT) <= 0)
                break;
        }
        conn_close(r, c);
        return;
    }
    conn_reset(c);
    on_readable(r, c); /* bytes of the next request may already wait (edge-triggered) */
}

static void on_writable(infd_raw *r, raw_conn *c)
{
    while (c->iov_i < c->iov_n) {
        struct msghdr mh = { .msg_iov = c->iov + c->iov_i,
                             .msg_iovlen = (size_t)(c->iov_n - c->iov_i) };
        ssize_t n = sendmsg(c->h.fd, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return; /* EPOLLOUT resumes */
            INFD_LOG_DEBUG("raw: model '%s': send: %s", c->rm->name, strerror(errno));
            conn_close(r, c);
            return;
        }
        size_t left = (size_t)n;
        while (left > 0 && c->iov_i < c->iov_n) {
            struct iovec *v = &c->iov[c->iov_i];
            size_t k = INFD_MIN(left, v->iov_len);
            v->iov_base = (uint8_t *)v->iov_base + k;
            v->iov_len -= k;
            left -= k;
            if (v->iov_len == 0)
                c->iov_i++;
        }
        while (c->iov_i < c->iov_n && c->iov[c->iov_i].iov_len == 0)
            c->iov_i++;
    }
    write_done(r, c);
}

static void start_write(infd_raw *r, raw_conn *c)
{
    c->state = C_WRITE;
    c->iov_i = 0;
    on_writable(r, c);
}

/* Writes the fixed response header into txhdr. */
static void put_response_header(raw_conn *c, infd_status status, uint8_t flags, int n_outputs,
                                size_t msg_bytes, size_t desc_bytes, uint64_t data_bytes)
{
    uint8_t *h = c->txhdr;
    h[0] = RAW_MAGIC0;
    h[1] = RAW_MAGIC1;
    h[2] = RAW_MAGIC2;
    h[3] = RAW_MAGIC3;
    h[4] = RAW_VERSION;
    h[5] = flags;
    put_u16(h + 6, (uint16_t)status);
    put_u64(h + 8, c->req_id);
    put_u16(h + 16, (uint16_t)n_outputs);
    put_u16(h + 18, (uint16_t)msg_bytes);
    put_u32(h + 20, (uint32_t)desc_bytes);
    put_u64(h + 24, data_bytes);
}

/* Framed: answers `code` with `msg`; `closing` when framing is lost. */
static void send_error(infd_raw *r, raw_conn *c, infd_status code, const char *msg, bool closing)
{
    size_t n = INFD_MIN(strlen(msg), (size_t)RAW_MAX_MSG_BYTES);
    put_response_header(c, code, closing ? RAW_FLAG_CLOSING : 0, 0, n, 0, 0);
    memcpy(c->txhdr + RAW_HEADER_BYTES, msg, n);
    c->iov[0].iov_base = c->txhdr;
    c->iov[0].iov_len = RAW_HEADER_BYTES + n;
    c->iov_n = 1;
    c->failed = true;
    c->close_after_send = closing;
    INFD_LOG_DEBUG("raw: model '%s': request %llu: %s: %s", c->rm->name,
                   (unsigned long long)c->req_id, infd_status_name(code), msg);
    start_write(r, c);
}

/* A request failed: framed connections answer it, headerless ones (which
 * have no way to say so) close. */
static void fail_request(infd_raw *r, raw_conn *c, infd_status code, const char *msg)
{
    if (c->mode == MODE_FRAMED) {
        send_error(r, c, code, msg, false);
        return;
    }
    INFD_LOG_WARN("raw: model '%s': headerless request failed, closing the connection: %s",
                  c->rm->name, msg);
    stats_record(r, c->rm, false, 0);
    conn_close(r, c);
}

static void answer(infd_raw *r, raw_conn *c)
{
    int n = infd_request_n_outputs(c->req);
    size_t d = RAW_HEADER_BYTES;
    uint64_t data_bytes = 0;
    if (n > INFD_MAX_MODEL_IO) {
        fail_request(r, c, INFD_STATUS_INTERNAL, "too many outputs");
        return;
    }
    for (int i = 0; i < n; i++) {
        const char *name = NULL;
        infd_tensor t;
        infd_request_output(c->req, i, &name, &t);
        if (c->mode == MODE_HEADERLESS && t.nbytes != c->out[i].nbytes) {
            fail_request(r, c, INFD_STATUS_INTERNAL, "output size differs from the model's row");
            return;
        }
        /* An output in a shared-memory region is there (in place, or
         * copied now), and sends no bytes. */
        int so = -1;
        for (int k = 0; k < c->n_shm_out && so < 0; k++)
            if (strcmp(c->shm_out[k].name, name) == 0)
                so = k;
        if (so >= 0) {
            if (t.nbytes > c->shm_out[so].cap) {
                char msg[320];
                snprintf(msg, sizeof(msg),
                         "output '%.127s': %zu bytes do not fit its shared memory span of %zu",
                         name, t.nbytes, c->shm_out[so].cap);
                fail_request(r, c, INFD_STATUS_INVALID_ARGUMENT, msg);
                return;
            }
            if (t.data != c->shm_out[so].data && t.nbytes) /* a CUDA region's is there */
                memcpy(c->shm_out[so].data, t.data, t.nbytes);
        }
        c->iov[1 + i].iov_base = t.data;
        c->iov[1 + i].iov_len = so >= 0 ? 0 : t.nbytes;
        data_bytes += c->iov[1 + i].iov_len;
        if (c->mode == MODE_HEADERLESS)
            continue;
        size_t len = strlen(name);
        if (len > 255 || t.shape.rank > INFD_MAX_RANK) {
            fail_request(r, c, INFD_STATUS_INTERNAL, "output name or rank out of range");
            return;
        }
        uint8_t *p = c->txhdr + d;
        *p++ = (uint8_t)len;
        memcpy(p, name, len);
        p += len;
        *p++ = (uint8_t)t.dtype;
        *p++ = (uint8_t)t.shape.rank;
        for (int k = 0; k < t.shape.rank; k++, p += 8)
            put_u64(p, (uint64_t)t.shape.dims[k]);
        put_u64(p, t.nbytes);
        p += 8;
        if (c->shm)
            *p++ = so >= 0;
        d = (size_t)(p - c->txhdr);
    }
    if (c->mode == MODE_FRAMED) {
        put_response_header(c, INFD_STATUS_OK, c->shm ? RAW_FLAG_SHM : 0, n, 0,
                            d - RAW_HEADER_BYTES, data_bytes);
        c->iov[0].iov_base = c->txhdr;
        c->iov[0].iov_len = d;
    } else {
        c->iov[0].iov_base = c->txhdr;
        c->iov[0].iov_len = 0;
    }
    c->iov_n = 1 + n;
    start_write(r, c);
}

static void on_completion(infd_raw *r, raw_conn *c)
{
    raw_loop *L = c->loop;
    L->n_in_flight--;
    c->state = C_WRITE; /* not in flight any more: conn_close may reap it */
    if (c->closed) {
        c->in_reap = true;
        c->reap_next = L->reap;
        L->reap = c;
        return;
    }
    if (c->done_status != INFD_STATUS_OK) {
        fail_request(r, c, c->done_status, c->done_msg);
        return;
    }
    answer(r, c);
}

static void drain_counter(int fd);

static void on_wake(raw_loop *L)
{
    drain_counter(L->wake.fd);
    pthread_mutex_lock(&L->done_mu);
    raw_conn *c = L->done_head;
    L->done_head = L->done_tail = NULL;
    pthread_mutex_unlock(&L->done_mu);
    while (c) {
        raw_conn *next = c->done_next;
        on_completion(L->raw, c);
        c = next;
    }
    take_new(L);
}

/* ---- reading ------------------------------------------------------------ */

static void submit(infd_raw *r, raw_conn *c)
{
    infd_error e = { 0 };
    c->state = C_IN_FLIGHT; /* the callback may run inside infd_infer_async */
    c->loop->n_in_flight++;
    if (infd_infer_async(c->req, on_infer_done, c, &e) != INFD_STATUS_OK) {
        c->loop->n_in_flight--;
        c->state = C_WRITE;
        fail_request(r, c, e.code, e.msg);
    }
}

/* Headerless: the input slot is full; build the request around it. */
static void submit_headerless(infd_raw *r, raw_conn *c)
{
    infd_error e = { 0 };
    infd_status st = infd_request_create(c->model, &c->req, &e);
    if (st == INFD_STATUS_OK)
        st = infd_request_add_input(c->req, c->in_name, c->in_dtype, c->in_shape, c->in_rank, c->rx,
                                    c->in[0].nbytes, &e);
    for (int i = 0; i < c->n_out && st == INFD_STATUS_OK; i++)
        st = infd_request_set_output_buffer(c->req, c->out_name[i], c->tx + c->out[i].off,
                                            c->out[i].nbytes, &e);
    if (st != INFD_STATUS_OK) {
        c->state = C_WRITE;
        fail_request(r, c, st, e.msg);
        return;
    }
    submit(r, c);
}

/* recv() into [p, p+n): bytes read, 0 when none are available now (EAGAIN)
 * and -1 when the connection is gone (EOF, error: it is closed). */
static ssize_t conn_recv(infd_raw *r, raw_conn *c, void *p, size_t n)
{
    for (;;) {
        ssize_t k = recv(c->h.fd, p, n, 0);
        if (k > 0) {
            if (c->t_start_ns == 0)
                c->t_start_ns = infd_clock_ns();
            return k;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        bool mid = c->t_start_ns != 0;
        if (mid)
            INFD_LOG_DEBUG("raw: model '%s': client left in the middle of a request (%s)",
                           c->rm->name, k == 0 ? "EOF" : strerror(errno));
        conn_close(r, c);
        return -1;
    }
}

/* Framed: a header field is out of range; answer and close (framing lost). */
static void framing_lost(infd_raw *r, raw_conn *c, const char *fmt, ...) INFD_PRINTF(3, 4);

static void framing_lost(infd_raw *r, raw_conn *c, const char *fmt, ...)
{
    char msg[INFD_ERROR_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    send_error(r, c, INFD_STATUS_INVALID_ARGUMENT, msg, true);
}

/* Framed: the 32-byte header is in; check it and size the descriptors. */
static void parse_header(infd_raw *r, raw_conn *c)
{
    const uint8_t *h = c->hdr;
    c->req_id = 0;
    if (h[0] != RAW_MAGIC0 || h[1] != RAW_MAGIC1 || h[2] != RAW_MAGIC2 || h[3] != RAW_MAGIC3) {
        framing_lost(r, c, "framed request: bad magic %02x %02x %02x %02x (expected \"INFD\")",
                     h[0], h[1], h[2], h[3]);
        return;
    }
    c->req_id = get_u64(h + 8);
    if (h[4] != RAW_VERSION) {
        framing_lost(r, c, "framed request: version %u, this server speaks %u", h[4], RAW_VERSION);
        return;
    }
    uint32_t desc_bytes = get_u32(h + 20);
    uint64_t data_bytes = get_u64(h + 24);
    if (desc_bytes > RAW_MAX_DESC_BYTES) {
        framing_lost(r, c, "framed request: descriptors of %u bytes, at most %u", desc_bytes,
                     RAW_MAX_DESC_BYTES);
        return;
    }
    if (data_bytes > RAW_MAX_DATA_BYTES) {
        framing_lost(r, c, "framed request: %llu data bytes, at most %llu",
                     (unsigned long long)data_bytes, (unsigned long long)RAW_MAX_DATA_BYTES);
        return;
    }
    if (!ensure_buf(&c->desc, &c->desc_cap, (size_t)desc_bytes + 1)) {
        framing_lost(r, c, "framed request: out of memory for %u descriptor bytes", desc_bytes);
        return;
    }
    c->desc_need = desc_bytes;
    c->desc_got = 0;
    c->state = C_READ_DESC;
}

typedef struct in_desc {
    size_t name_off, name_len;
    int dtype, rank;
    int64_t dims[INFD_MAX_RANK];
    uint64_t nbytes;
    size_t region_off, region_len; /* RAW_FLAG_SHM: 0 = the bytes are in the data */
    uint64_t offset;
} in_desc;

/* RAW_FLAG_SHM: a region reference after a descriptor at d + *p (n bytes
 * in all): u8 region_len, region, u64 offset and, for an output, u64
 * byte_size. False when truncated. */
static bool region_ref(const uint8_t *d, size_t n, size_t *p, bool output, size_t *off, size_t *len,
                       uint64_t *offset, uint64_t *size)
{
    if (*p + 1 > n)
        return false;
    *len = d[*p];
    *off = *p + 1;
    size_t need = 1 + *len + (*len ? 8 : 0) + (*len && output ? 8 : 0);
    if (*p + need > n)
        return false;
    *p += 1 + *len;
    if (*len) {
        *offset = get_u64(d + *p);
        *p += 8;
        if (output) {
            *size = get_u64(d + *p);
            *p += 8;
        }
    }
    return true;
}

/* Holds [offset, offset + size) of region `name` for the request; *device
 * is -1 for system memory, else the CUDA device *data is on. */
static infd_status shm_span(raw_conn *c, const char *name, uint64_t offset, uint64_t size,
                            void **data, int *device, infd_error *err)
{
    if (c->n_shm >= (int)INFD_ARRAY_SIZE(c->shm_held))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "more than %d shared memory spans in one request",
                              (int)INFD_ARRAY_SIZE(c->shm_held));
    infd_status st = infd_server_shm_acquire(c->raw->server, name, offset, size,
                                             &c->shm_held[c->n_shm], data, err);
    if (st == INFD_STATUS_OK)
        *device = infd_shm_region_device(c->shm_held[c->n_shm++]);
    return st;
}

/* Framed: parses the descriptors, builds the request and the slots. Errors
 * are answered after the data is skipped; the connection stays usable. */
static void parse_desc(raw_conn *c)
{
    const uint8_t *h = c->hdr;
    uint8_t *d = c->desc;
    size_t n = c->desc_need, p = 0;
    int n_in = get_u16(h + 16), n_out = get_u16(h + 18);
    uint64_t data_bytes = get_u64(h + 24);
    in_desc in[INFD_MAX_MODEL_IO];
    size_t out_off[INFD_MAX_MODEL_IO], out_len[INFD_MAX_MODEL_IO];
    size_t oreg_off[INFD_MAX_MODEL_IO], oreg_len[INFD_MAX_MODEL_IO];
    uint64_t oreg_offset[INFD_MAX_MODEL_IO], oreg_size[INFD_MAX_MODEL_IO];
    infd_error e = { 0 };
    infd_status st = INFD_STATUS_INVALID_ARGUMENT;

    c->discard_left = data_bytes;
    c->shm = (h[5] & RAW_FLAG_SHM) != 0;
    if (n_in > INFD_MAX_MODEL_IO || n_out > INFD_MAX_MODEL_IO) {
        infd_error_set(&e, st, "%d inputs and %d outputs requested, at most %d each", n_in, n_out,
                       INFD_MAX_MODEL_IO);
        goto fail;
    }
    uint64_t sum = 0;
    for (int i = 0; i < n_in; i++) {
        in_desc *x = &in[i];
        if (p + 1 > n || p + 1 + d[p] + 2 > n) {
            infd_error_set(&e, st, "input %d: descriptor truncated", i);
            goto fail;
        }
        x->name_len = d[p];
        x->name_off = p + 1;
        p += 1 + x->name_len;
        x->dtype = d[p];
        x->rank = d[p + 1];
        p += 2;
        if (x->name_len == 0) {
            infd_error_set(&e, st, "input %d: empty name", i);
            goto fail;
        }
        if (x->dtype <= INFD_DTYPE_INVALID || x->dtype >= INFD_DTYPE_COUNT_) {
            infd_error_set(&e, st, "input '%.*s': dtype code %d is not a dtype", (int)x->name_len,
                           (const char *)d + x->name_off, x->dtype);
            goto fail;
        }
        if (x->rank > INFD_MAX_RANK) {
            infd_error_set(&e, st, "input '%.*s': rank %d, at most %d", (int)x->name_len,
                           (const char *)d + x->name_off, x->rank, INFD_MAX_RANK);
            goto fail;
        }
        if (p + 8 * (size_t)x->rank + 8 > n) {
            infd_error_set(&e, st, "input %d: descriptor truncated", i);
            goto fail;
        }
        for (int k = 0; k < x->rank; k++, p += 8)
            x->dims[k] = (int64_t)get_u64(d + p);
        x->nbytes = get_u64(d + p);
        p += 8;
        x->region_len = 0;
        if (c->shm &&
            !region_ref(d, n, &p, false, &x->region_off, &x->region_len, &x->offset, NULL)) {
            infd_error_set(&e, st, "input %d: shared memory reference truncated", i);
            goto fail;
        }
        if (x->region_len == 0 && x->nbytes > RAW_MAX_DATA_BYTES) {
            infd_error_set(&e, st, "input '%.*s': %llu bytes", (int)x->name_len,
                           (const char *)d + x->name_off, (unsigned long long)x->nbytes);
            goto fail;
        }
        if (x->region_len == 0)
            sum += x->nbytes;
    }
    for (int i = 0; i < n_out; i++) {
        if (p + 1 > n || p + 1 + d[p] > n || d[p] == 0) {
            infd_error_set(&e, st, "requested output %d: descriptor truncated or empty", i);
            goto fail;
        }
        out_len[i] = d[p];
        out_off[i] = p + 1;
        p += 1 + out_len[i];
        oreg_len[i] = 0;
        if (c->shm && !region_ref(d, n, &p, true, &oreg_off[i], &oreg_len[i], &oreg_offset[i],
                                  &oreg_size[i])) {
            infd_error_set(&e, st, "requested output %d: shared memory reference truncated", i);
            goto fail;
        }
    }
    if (p != n) {
        infd_error_set(&e, st, "descriptors: %zu bytes left over", n - p);
        goto fail;
    }
    if (sum != data_bytes) {
        infd_error_set(&e, st, "inputs hold %llu bytes, the header says %llu",
                       (unsigned long long)sum, (unsigned long long)data_bytes);
        goto fail;
    }
    /* Every field is read: the byte after each name may now become its NUL
     * (a region name's is the first byte of its offset, read above). */
    for (int i = 0; i < n_in; i++) {
        d[in[i].name_off + in[i].name_len] = '\0';
        if (in[i].region_len)
            d[in[i].region_off + in[i].region_len] = '\0';
    }
    for (int i = 0; i < n_out; i++) {
        d[out_off[i] + out_len[i]] = '\0';
        if (oreg_len[i])
            d[oreg_off[i] + oreg_len[i]] = '\0';
    }

    /* Input slots (none for an input in shared memory). */
    size_t off = 0;
    for (int i = 0; i < n_in; i++) {
        c->in[i].off = off;
        c->in[i].nbytes = in[i].region_len ? 0 : (size_t)in[i].nbytes;
        off += infd_align_up(c->in[i].nbytes, SLOT_ALIGN);
    }
    if (!ensure_rx(c, off ? off : 1)) {
        infd_error_set(&e, INFD_STATUS_OUT_OF_MEMORY, "out of memory for %zu input bytes", off);
        goto fail;
    }
    st = infd_request_create(c->model, &c->req, &e);
    for (int i = 0; i < n_in && st == INFD_STATUS_OK; i++) {
        const char *name = (const char *)d + in[i].name_off;
        if (in[i].region_len) {
            void *p_in;
            int dev = -1;
            if ((st = shm_span(c, (const char *)d + in[i].region_off, in[i].offset, in[i].nbytes,
                               &p_in, &dev, &e)) != INFD_STATUS_OK) {
                infd_error_prefix(&e, "input '%s'", name);
                break;
            }
            st = dev < 0 ? infd_request_add_input(c->req, name, (infd_dtype)in[i].dtype, in[i].dims,
                                                  in[i].rank, p_in, (size_t)in[i].nbytes, &e)
                         : infd_request_add_input_device(c->req, name, (infd_dtype)in[i].dtype,
                                                         in[i].dims, in[i].rank, p_in,
                                                         (size_t)in[i].nbytes, dev, &e);
            continue;
        }
        st = infd_request_add_input(c->req, name, (infd_dtype)in[i].dtype, in[i].dims, in[i].rank,
                                    c->rx + c->in[i].off, c->in[i].nbytes, &e);
    }
    for (int i = 0; i < n_out && st == INFD_STATUS_OK; i++)
        st = infd_request_add_output(c->req, (const char *)d + out_off[i], &e);
    /* Outputs in shared memory: written there (fixed size, system memory),
     * copied there at completion (CUDA), or copied there when answering. */
    for (int i = 0; i < n_out && st == INFD_STATUS_OK; i++) {
        if (!oreg_len[i])
            continue;
        const char *name = (const char *)d + out_off[i];
        void *p_out;
        int dev = -1;
        if ((st = shm_span(c, (const char *)d + oreg_off[i], oreg_offset[i], oreg_size[i], &p_out,
                           &dev, &e)) != INFD_STATUS_OK) {
            infd_error_prefix(&e, "output '%s'", name);
            break;
        }
        int k = c->n_shm_out++;
        c->shm_out[k].name = name;
        c->shm_out[k].data = p_out;
        c->shm_out[k].cap = (size_t)oreg_size[i];
        c->shm_out[k].device = dev;
        if (dev >= 0)
            st = infd_request_set_output_device(c->req, name, p_out, (size_t)oreg_size[i], dev, &e);
    }
    if (st != INFD_STATUS_OK)
        goto fail;

    /* Output slots for the outputs of a fixed-size dtype; others (BYTES)
     * stay in the request's memory and are sent from there. */
    int64_t batch = 1;
    if (infd_model_max_batch_size(c->model) > 0 && n_in > 0 && in[0].rank > 0)
        batch = in[0].dims[0];
    int n_produce = n_out ? n_out : infd_model_n_outputs(c->model);
    size_t out_bytes[INFD_MAX_MODEL_IO];
    const char *out_names[INFD_MAX_MODEL_IO] = { 0 };
    off = 0;
    for (int i = 0; i < n_produce; i++) {
        infd_model_io io;
        int idx = n_out ? infd_model_output_index(c->model, (const char *)d + out_off[i]) : i;
        out_bytes[i] = 0;
        if (idx < 0 || infd_model_output(c->model, idx, &io) != INFD_STATUS_OK ||
            infd_dtype_size(io.dtype) == 0)
            continue;
        if (n_out && oreg_len[i]) { /* in shared memory: written there, not in tx */
            int k = 0;
            while (k < c->n_shm_out && c->shm_out[k].name != (const char *)d + out_off[i])
                k++;
            if (c->shm_out[k].device < 0 &&
                (st = infd_request_set_output_buffer(c->req, io.name, c->shm_out[k].data,
                                                     c->shm_out[k].cap, &e)) != INFD_STATUS_OK)
                goto fail;
            continue;
        }
        out_names[i] = io.name;
        out_bytes[i] = (size_t)batch * io.row_bytes;
        off += infd_align_up(out_bytes[i], SLOT_ALIGN);
    }
    if (!ensure_buf(&c->tx, &c->tx_cap, off ? off : 1)) {
        st = infd_error_set(&e, INFD_STATUS_OUT_OF_MEMORY, "out of memory for %zu output bytes",
                            off);
        goto fail;
    }
    off = 0;
    for (int i = 0; i < n_produce && st == INFD_STATUS_OK; i++) {
        if (out_bytes[i] == 0)
            continue;
        st = infd_request_set_output_buffer(c->req, out_names[i], c->tx + off, out_bytes[i], &e);
        off += infd_align_up(out_bytes[i], SLOT_ALIGN);
    }
    if (st != INFD_STATUS_OK)
        goto fail;
    c->n_in = n_in;
    c->in_cur = 0;
    c->in_got = 0;
    c->state = C_READ_DATA;
    return;

fail:
    infd_request_destroy(c->req);
    c->req = NULL;
    shm_release(c);
    c->err_code = e.code != INFD_STATUS_OK ? e.code : INFD_STATUS_INVALID_ARGUMENT;
    snprintf(c->err_msg, sizeof(c->err_msg), "%s", e.msg);
    c->state = C_DISCARD;
}

static void on_readable(infd_raw *r, raw_conn *c)
{
    for (;;) {
        ssize_t k;
        switch (c->state) {
        case C_READ_HEADER:
            k = conn_recv(r, c, c->hdr + c->hdr_got, RAW_HEADER_BYTES - c->hdr_got);
            if (k <= 0)
                return;
            c->hdr_got += (size_t)k;
            if (c->hdr_got == RAW_HEADER_BYTES)
                parse_header(r, c);
            break;
        case C_READ_DESC:
            if (c->desc_got < c->desc_need) {
                k = conn_recv(r, c, c->desc + c->desc_got, c->desc_need - c->desc_got);
                if (k <= 0)
                    return;
                c->desc_got += (size_t)k;
            }
            if (c->desc_got == c->desc_need)
                parse_desc(c);
            break;
        case C_READ_DATA:
            while (c->in_cur < c->n_in && c->in_got == c->in[c->in_cur].nbytes) {
                c->in_cur++;
                c->in_got = 0;
            }
            if (c->in_cur < c->n_in) {
                slot *s = &c->in[c->in_cur];
                k = conn_recv(r, c, c->rx + s->off + c->in_got, s->nbytes - c->in_got);
                if (k <= 0)
                    return;
                c->in_got += (size_t)k;
                break;
            }
            if (c->mode == MODE_HEADERLESS)
                submit_headerless(r, c);
            else
                submit(r, c);
            return;
        case C_DISCARD:
            if (c->discard_left > 0) {
                k = conn_recv(r, c, c->loop->scratch,
                              (size_t)INFD_MIN(c->discard_left, (uint64_t)SCRATCH_BYTES));
                if (k <= 0)
                    return;
                c->discard_left -= (uint64_t)k;
                break;
            }
            send_error(r, c, c->err_code, c->err_msg, false);
            return;
        case C_IN_FLIGHT:
        case C_WRITE:
            return;
        }
        if (c->closed)
            return;
    }
}

static void on_conn_event(infd_raw *r, raw_conn *c, uint32_t events)
{
    if (c->closed)
        return;
    if (events & (EPOLLERR | EPOLLHUP)) {
        /* Both directions are gone: nothing can be answered. */
        c->peer_gone = true;
        conn_close(r, c);
        return;
    }
    if ((events & EPOLLOUT) && c->state == C_WRITE)
        on_writable(r, c);
    if (!c->closed && (events & (EPOLLIN | EPOLLRDHUP)))
        on_readable(r, c);
}

/* ---- the loops ---------------------------------------------------------- */

/* The ready events of `epfd` (0 after an interruption or an error, which
 * is logged). */
static int wait_events(int epfd, struct epoll_event *evs)
{
    int n = epoll_wait(epfd, evs, MAX_EVENTS, -1);
    if (n < 0 && errno != EINTR)
        INFD_LOG_ERROR("raw: epoll_wait: %s", strerror(errno));
    return n < 0 ? 0 : n;
}

/* Reads an eventfd's or a timerfd's counter back to zero. */
static void drain_counter(int fd)
{
    uint64_t v;
    ssize_t rc = read(fd, &v, sizeof(v));
    INFD_UNUSED(rc); /* EAGAIN: already zero */
}

static void reap_listeners(infd_raw *r)
{
    while (r->graveyard) {
        raw_listener *l = r->graveyard;
        r->graveyard = l->next;
        infd_free(l->path);
        infd_free(l);
    }
}

static void reap(raw_loop *L)
{
    while (L->reap) {
        raw_conn *c = L->reap;
        L->reap = c->reap_next;
        conn_free(c);
    }
}

/* A connection loop: its connections' reads, answers and completions. */
static void *conn_loop_main(void *arg)
{
    raw_loop *L = arg;
    infd_raw *r = L->raw;
    struct epoll_event evs[MAX_EVENTS];
    bool shut = false;
    for (;;) {
        if (atomic_load(&r->stopping) && !shut) {
            take_new(L); /* closes them */
            for (raw_conn *c = L->conns; c; c = c->next)
                conn_close(r, c);
            epoll_ctl(L->epfd, EPOLL_CTL_DEL, L->timer.fd, NULL);
            shut = true;
        }
        reap(L);
        if (shut && L->n_in_flight == 0)
            break;
        int n = wait_events(L->epfd, evs);
        for (int i = 0; i < n; i++) {
            raw_handle *h = evs[i].data.ptr;
            switch (h->kind) {
            case H_WAKE:
                on_wake(L);
                break;
            case H_TIMER:
                drain_counter(h->fd);
                if (!shut)
                    close_stale(L);
                break;
            case H_CONN:
                on_conn_event(r, (raw_conn *)h, evs[i].events);
                break;
            case H_LISTENER:
                break;
            }
        }
    }
    reap(L);
    return NULL;
}

/* The accepting thread: listeners and rescans. */
static void *loop_main(void *arg)
{
    infd_raw *r = arg;
    struct epoll_event evs[MAX_EVENTS];
    for (;;) {
        reap_listeners(r);
        if (atomic_load(&r->stopping))
            break;
        int n = wait_events(r->epfd, evs);
        for (int i = 0; i < n; i++) {
            raw_handle *h = evs[i].data.ptr;
            switch (h->kind) {
            case H_WAKE:
                drain_counter(h->fd);
                break;
            case H_TIMER:
                drain_counter(h->fd);
                if (!atomic_load(&r->stopping))
                    rescan(r, false, NULL);
                break;
            case H_LISTENER:
                if (h->fd >= 0 && !atomic_load(&r->stopping))
                    on_accept(r, (raw_listener *)h);
                break;
            case H_CONN:
                break;
            }
        }
    }
    /* Stopping: the listeners close (their socket files go). */
    for (raw_model *rm = r->models; rm; rm = rm->next)
        deactivate(r, rm);
    reap_listeners(r);
    return NULL;
}

/* ---- start / stop ------------------------------------------------------- */

static void loop_fini(raw_loop *L)
{
    reap(L);
    /* Handed over but never taken (a failed start): closed here. */
    while (L->new_head) {
        raw_conn *c = L->new_head;
        L->new_head = c->next;
        close(c->h.fd);
        infd_model_release(c->model);
        rx_free(c->rx);
        infd_free(c->tx);
        infd_free(c->desc);
        infd_free(c);
    }
    if (L->timer.fd >= 0)
        close(L->timer.fd);
    if (L->wake.fd >= 0)
        close(L->wake.fd);
    if (L->epfd >= 0)
        close(L->epfd);
    pthread_mutex_destroy(&L->done_mu);
    infd_free(L->scratch);
}

static void raw_free(infd_raw *r)
{
    if (!r)
        return;
    for (raw_model *rm = r->models; rm; rm = rm->next)
        deactivate(r, rm);
    reap_listeners(r);
    for (int i = 0; i < r->n_loops; i++)
        loop_fini(&r->loops[i]);
    infd_free(r->loops);
    while (r->models) {
        raw_model *rm = r->models;
        r->models = rm->next;
        infd_histogram_destroy(rm->hist);
        pthread_mutex_destroy(&rm->stats_mu);
        infd_free(rm);
    }
    if (r->timer.fd >= 0)
        close(r->timer.fd);
    if (r->wake.fd >= 0)
        close(r->wake.fd);
    if (r->epfd >= 0)
        close(r->epfd);
    infd_free(r->tcp);
    infd_free(r->socket_dir);
    infd_free(r->tcp_host);
    infd_free(r);
}

/* A connection loop's epoll set, eventfd and timer. */
static infd_status loop_init(raw_loop *L, infd_error *err)
{
    L->epfd = epoll_create1(EPOLL_CLOEXEC);
    L->wake.kind = H_WAKE;
    L->wake.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    L->timer.kind = H_TIMER;
    L->timer.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    L->scratch = infd_malloc(SCRATCH_BYTES);
    if (!L->scratch)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "raw: out of memory");
    if (L->epfd < 0 || L->wake.fd < 0 || L->timer.fd < 0)
        return infd_error_set(err, INFD_STATUS_IO, "raw: epoll/eventfd/timerfd: %s",
                              strerror(errno));
    struct timespec period = { RESCAN_MS / 1000, (RESCAN_MS % 1000) * 1000000L };
    struct itimerspec its = { .it_interval = period, .it_value = period };
    if (timerfd_settime(L->timer.fd, 0, &its, NULL) != 0)
        return infd_error_set(err, INFD_STATUS_IO, "raw: timerfd_settime: %s", strerror(errno));
    infd_status st = epoll_add(L->epfd, &L->wake, EPOLLIN, err);
    if (st == INFD_STATUS_OK)
        st = epoll_add(L->epfd, &L->timer, EPOLLIN, err);
    return st;
}

/* Stops the connection loops that run: each closes its connections and
 * waits for its requests in flight. */
static void stop_loops(infd_raw *r)
{
    atomic_store(&r->stopping, true);
    for (int i = 0; i < r->n_loops; i++) {
        raw_loop *L = &r->loops[i];
        if (!L->thread_started)
            continue;
        uint64_t one = 1;
        ssize_t rc = write(L->wake.fd, &one, sizeof(one));
        INFD_UNUSED(rc);
        pthread_join(L->thread, NULL);
        L->thread_started = false;
    }
}

infd_status infd_raw_start(infd_server *s, const infd_raw_options *o, infd_raw **out,
                           infd_error *err)
{
    infd_status st = INFD_STATUS_OUT_OF_MEMORY;
    *out = NULL;
    infd_raw *r = infd_calloc(1, sizeof(*r));
    if (!r)
        return infd_error_set(err, st, "raw: out of memory");
    r->epfd = r->wake.fd = r->timer.fd = -1;
    r->server = s;
    r->stats_every = o->stats_every;
    r->socket_dir = infd_strdup(o->socket_dir ? o->socket_dir : "/tmp/infd");
    r->socket_mode = o->socket_mode;
    r->socket_gid = o->socket_gid;
    r->tcp_host = infd_strdup(o->tcp_host ? o->tcp_host : "127.0.0.1");
    int n_loops = o->threads > 0 ? o->threads : 1;
    r->loops = infd_calloc((size_t)n_loops, sizeof(*r->loops));
    if (r->loops) {
        r->n_loops = n_loops;
        for (int i = 0; i < n_loops; i++) {
            raw_loop *L = &r->loops[i];
            L->raw = r;
            L->index = i;
            L->epfd = L->wake.fd = L->timer.fd = -1;
            pthread_mutex_init(&L->done_mu, NULL);
        }
    }
    if (o->n_tcp_ports > 0)
        r->tcp = infd_calloc((size_t)o->n_tcp_ports, sizeof(*r->tcp));
    if (!r->socket_dir || !r->tcp_host || !r->loops || (o->n_tcp_ports > 0 && !r->tcp)) {
        infd_error_set(err, st, "raw: out of memory");
        goto out;
    }
    /* A trailing slash would double in the socket paths. */
    for (size_t n = strlen(r->socket_dir); n > 1 && r->socket_dir[n - 1] == '/'; n--)
        r->socket_dir[n - 1] = '\0';
    for (int i = 0; i < o->n_tcp_ports; i++) {
        st = parse_tcp_spec(o->tcp_ports[i], &r->tcp[i], err);
        if (st != INFD_STATUS_OK)
            goto out;
        for (int j = 0; j < i; j++) {
            if (r->tcp[j].port == r->tcp[i].port) {
                st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                    "raw TCP port %d is given twice", r->tcp[i].port);
                goto out;
            }
        }
        r->n_tcp++;
    }
    st = make_dirs(r->socket_dir, err);
    if (st != INFD_STATUS_OK)
        goto out;

    st = INFD_STATUS_IO;
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    r->wake.kind = H_WAKE;
    r->wake.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    r->timer.kind = H_TIMER;
    r->timer.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (r->epfd < 0 || r->wake.fd < 0 || r->timer.fd < 0) {
        infd_error_set(err, st, "raw: epoll/eventfd/timerfd: %s", strerror(errno));
        goto out;
    }
    struct timespec period = { RESCAN_MS / 1000, (RESCAN_MS % 1000) * 1000000L };
    struct itimerspec its = { .it_interval = period, .it_value = period };
    if (timerfd_settime(r->timer.fd, 0, &its, NULL) != 0) {
        infd_error_set(err, st, "raw: timerfd_settime: %s", strerror(errno));
        goto out;
    }
    st = epoll_add(r->epfd, &r->wake, EPOLLIN, err);
    if (st == INFD_STATUS_OK)
        st = epoll_add(r->epfd, &r->timer, EPOLLIN, err);
    for (int i = 0; st == INFD_STATUS_OK && i < r->n_loops; i++)
        st = loop_init(&r->loops[i], err);
    if (st != INFD_STATUS_OK)
        goto out;

    /* The first scan runs here, so the sockets of the models READY now exist
     * when start returns and a listener that cannot open fails the start. */
    st = rescan(r, true, err);
    if (st != INFD_STATUS_OK)
        goto out;
    for (int i = 0; i < r->n_tcp; i++) {
        raw_model *rm = find_model(r, r->tcp[i].model);
        if (!rm || !rm->model)
            INFD_LOG_WARN("raw: model '%s' is not ready: TCP port %d opens when it is",
                          r->tcp[i].model, r->tcp[i].port);
    }
    for (int i = 0; i < r->n_loops; i++) {
        int rc = pthread_create(&r->loops[i].thread, NULL, conn_loop_main, &r->loops[i]);
        if (rc != 0) {
            st = infd_error_set(err, INFD_STATUS_INTERNAL, "raw: pthread_create: %s", strerror(rc));
            stop_loops(r);
            goto out;
        }
        r->loops[i].thread_started = true;
        char tname[16];
        snprintf(tname, sizeof(tname), "raw-%d", i % 1000);
        pthread_setname_np(r->loops[i].thread, tname); /* for profiles (top -H, perf) */
    }
    int rc = pthread_create(&r->thread, NULL, loop_main, r);
    if (rc != 0) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "raw: pthread_create: %s", strerror(rc));
        stop_loops(r);
        goto out;
    }
    r->thread_started = true;
    pthread_setname_np(r->thread, "raw-accept");
    *out = r;
    r = NULL;
    st = INFD_STATUS_OK;
out:
    raw_free(r);
    return st;
}

void infd_raw_stop(infd_raw *r)
{
    if (!r)
        return;
    atomic_store(&r->stopping, true);
    if (r->thread_started) {
        uint64_t one = 1;
        ssize_t rc = write(r->wake.fd, &one, sizeof(one));
        INFD_UNUSED(rc);
        pthread_join(r->thread, NULL); /* no more accepts; listeners closed */
    }
    stop_loops(r);
    raw_free(r);
}
