/*
 * raw.h - the raw socket frontend: tensor bytes in, tensor bytes out.
 *
 * For every READY model the frontend listens on Unix sockets in
 * `socket_dir`, and on the TCP ports named in `tcp_ports`:
 *
 *   <socket_dir>/<model>.sock         headerless mode (models with one input)
 *   <socket_dir>/<model>.framed.sock  framed mode (every model)
 *   --raw-tcp-port MODEL=PORT         headerless mode on TCP
 *   --raw-tcp-port MODEL=PORT:framed  framed mode on TCP
 *
 * Headerless mode is the protocol of the TensorRT daemon it grew from: the
 * client sends exactly the bytes of the model's single input at batch 1 and
 * receives exactly the bytes of its outputs (all of them, concatenated in
 * model order), then may send the next request on the same connection. It
 * has no way to report an error: the server closes the connection instead.
 * Framed mode adds a 32-byte header for several inputs, any batch size,
 * dtypes, shapes and error replies. docs/RAW_PROTOCOL.md has the byte
 * layouts.
 *
 * One thread accepts on every listener and hands each connection, round
 * robin, to one of `threads` connection loops (each an epoll set on a thread
 * of its own), which reads its requests and writes its answers; requests
 * go to the same schedulers as every other frontend (they batch with HTTP
 * traffic). The set of models is rescanned every 500 ms, so listeners follow
 * loads and unloads. Per model, latency statistics (requests, mean, min,
 * max, p95, p99) are logged every `stats_every` requests.
 */
#ifndef INFD_FRONTENDS_RAW_RAW_H
#define INFD_FRONTENDS_RAW_RAW_H

#include "infd/infd.h"

typedef struct infd_raw_options {
    const char *socket_dir;       /* "/tmp/infd"; created if missing */
    const char *const *tcp_ports; /* "MODEL=PORT" or "MODEL=PORT:framed" */
    int n_tcp_ports;
    const char *tcp_host; /* "127.0.0.1" */
    int stats_every;      /* 1000; 0 turns the latency log off */
    int threads;          /* connection loops (threads); 0: 1 */
    /* The Unix sockets' file mode (0660, say) and group (a gid), set
     * before they listen; -1 (the default): as the umask and the process's
     * group leave them (issue #24). */
    int socket_mode;
    long socket_gid;
} infd_raw_options;

/* Defaults as documented on each field. */
void infd_raw_options_init(infd_raw_options *o);

typedef struct infd_raw infd_raw;

/* Creates `socket_dir`, opens the listeners of the models READY now and
 * starts the epoll thread. The options are copied. Fails with
 * INVALID_ARGUMENT on a malformed tcp_ports entry, IO when the folder cannot
 * be created or a listener cannot be opened (a TCP port in use, a socket path
 * that a live process listens on or that is not a socket), leaving nothing
 * behind. `s` must outlive the frontend. */
infd_status infd_raw_start(infd_server *s, const infd_raw_options *o, infd_raw **out,
                           infd_error *err);

/* Closes the listeners (removing the socket files) and every connection,
 * waits for the requests in flight to complete, joins the thread and frees
 * `r`. Call it after infd_server_drain so that no request is left waiting.
 * NULL is a no-op. */
void infd_raw_stop(infd_raw *r);

#endif /* INFD_FRONTENDS_RAW_RAW_H */
