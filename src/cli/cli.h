/*
 * cli.h - shared pieces of the `infd` subcommands: the subcommand entry
 * points and the parsing of options they have in common.
 */
#ifndef INFD_CLI_CLI_H
#define INFD_CLI_CLI_H

#include <pthread.h>
#include <signal.h>

#include "infd/engine.h"

/* Exit statuses of every subcommand (also listed by `infd --help`). */
enum {
    INFD_EXIT_OK = 0,
    INFD_EXIT_FAILURE = 1,
    INFD_EXIT_USAGE = 2,
    INFD_EXIT_NOT_BUILT = 3,
    INFD_EXIT_UNSUPPORTED = 4, /* the model uses an operator or variant infd does not run */
};

int infd_cli_run(int argc, char **argv);
int infd_cli_bench(int argc, char **argv);
int infd_cli_perf(int argc, char **argv);
int infd_cli_serve(int argc, char **argv);
int infd_cli_build(int argc, char **argv);
int infd_cli_asr(int argc, char **argv);
int infd_cli_video(int argc, char **argv);
int infd_cli_router(int argc, char **argv);

/* The video app's HTTP routes (an infd_http_extension with prefix "video",
 * `user` an infd_cli_video_routes): GET /v2/video/streams (the streams as
 * JSON) and /v2/video/streams/{name}/detections (Server-Sent Events of the
 * stream's detections). In cmd_video.c; `infd serve --video-listen` uses it
 * too. The app stops before the HTTP frontend (it releases its event
 * streams first), so the routes hold it under a lock: detach() waits for
 * calls in progress and makes later ones answer 503. */
typedef struct infd_cli_video_routes {
    pthread_rwlock_t lock;
    struct infd_video *video; /* NULL once detached */
} infd_cli_video_routes;
void infd_cli_video_routes_init(infd_cli_video_routes *r, struct infd_video *video);
void infd_cli_video_routes_detach(infd_cli_video_routes *r);
/* The video app's metric families (`user` the infd_video), for
 * infd_metrics_options.extra. */
infd_status infd_cli_video_metrics(void *user, char **out, size_t *n, infd_error *err);
struct infd_http_sink;
infd_status infd_cli_video_route(void *user, const char *path, struct infd_http_sink *sink,
                                 char **json, size_t *n, infd_error *err);

/* Options shared by run and bench, filled by infd_cli_parse_common. */
#define INFD_CLI_MAX_SHAPES 16
typedef struct infd_cli_common {
    const char *model;
    infd_plan_options plan;
    infd_input_shape shapes[INFD_CLI_MAX_SHAPES];
    char shape_names[INFD_CLI_MAX_SHAPES][256];
    bool device_given; /* --device or --precision was on the command line */
    bool precision_given;
} infd_cli_common;

/* Consumes argv[*i] (and its value) if it is a common option (--batch,
 * --threads, --shape NAME=D0,D1,..., --precision fp32|tf32|bf16|fp16, --device
 * cpu|cuda); returns 1 when
 * consumed, 0 when not a common option, -1 after printing a usage error. */
int infd_cli_parse_common(infd_cli_common *c, int argc, char **argv, int *i, const char *cmd);

/* When c->model is a plan file (`infd build`): takes the device and
 * precision it was built with unless given, and refuses given ones that
 * differ; 0 when it is not a plan file. -1 after printing an error. */
int infd_cli_use_plan_file(infd_cli_common *c, const char *cmd);

/* Parses a decimal integer in [lo, hi] into *out; -1 (nothing written) for
 * anything else. */
int infd_cli_parse_long(const char *s, long lo, long hi, long *out);

/* In a build with assertions, logs the payload bytes the process copied
 * (core/common.h: the zero-copy tests read the line), as `who`; nothing in
 * a release build. */
void infd_cli_log_copies(const char *who);

/* The network options of the servers (`infd serve`, `infd router`):
 * --host, --http-port, --grpc-port, --metrics-port (-1: off),
 * --http-threads, --grpc-threads. Returns 1 when `opt` is one of them, with
 * its value `v` stored (*bad set when the value is out of range; --host
 * goes to *host, for the caller to apply to every frontend), 0 when not. */
/* The TLS and access-control options of the HTTP and gRPC frontends, for
 * the usage texts of `infd serve` and `infd router`. */
#define INFD_CLI_SECURITY_USAGE                                                           \
    "  --http-restricted-api APIS:KEY=VALUE\n"                                            \
    "                              HTTP requests to these API groups (comma-separated:\n" \
    "                              health, metadata, inference, shared-memory,\n"         \
    "                              model-config, model-repository, statistics, trace,\n"  \
    "                              logging) need the header KEY: VALUE (repeatable)\n"    \
    "  --grpc-restricted-protocol APIS:KEY=VALUE\n"                                       \
    "                              gRPC calls to them need the metadata\n"                \
    "                              triton-grpc-protocol-KEY: VALUE (repeatable)\n"        \
    "  --metrics-restricted-api KEY=VALUE\n"                                              \
    "                              /metrics needs the header KEY: VALUE\n"                \
    "  --http-ssl-cert FILE        HTTPS: the server's PEM certificate chain (with\n"     \
    "                              --http-ssl-key; default plain HTTP)\n"                 \
    "  --http-ssl-key FILE         its PEM private key\n"                                 \
    "  --http-ssl-client-ca FILE   HTTPS clients must present a certificate these CAs\n"  \
    "                              signed (default: none asked for)\n"                    \
    "  --grpc-use-ssl true|false   gRPC over TLS (with --grpc-server-cert/-key)\n"        \
    "  --grpc-use-ssl-mutual true|false\n"                                                \
    "                              and clients must present a certificate that\n"         \
    "                              --grpc-root-cert's CAs signed\n"                       \
    "  --grpc-server-cert FILE     gRPC's PEM certificate chain\n"                        \
    "  --grpc-server-key FILE      its PEM private key\n"                                 \
    "  --grpc-root-cert FILE       PEM CAs for client certificates\n"

/* A watchdog for a graceful stop: when the process has not exited `secs`
 * seconds from now (requests still in flight, clients not reading), it
 * logs so and exits 0 (`infd serve --exit-timeout-secs`). */
void infd_cli_exit_after(int secs);

/* Also the TLS options of both (issue #24): --http-ssl-cert/-key/-client-ca
 * FILE, --grpc-use-ssl and --grpc-use-ssl-mutual true|false, and
 * --grpc-server-cert/-key and --grpc-root-cert FILE. */
struct infd_http_options;
struct infd_grpc_options;
struct infd_metrics_options;
int infd_cli_parse_net(const char *opt, const char *v, struct infd_http_options *http,
                       struct infd_grpc_options *grpc, struct infd_metrics_options *metrics,
                       const char **host, int *bad);

/* Access control with Triton's syntax (issue #24; docs/SECURITY.md):
 * --http-restricted-api and --grpc-restricted-protocol <apis>:<key>=<value>
 * (repeatable) and --metrics-restricted-api <key>=<value>. Returns 1 when
 * `opt` is one of them (*bad and `err` say whether `v` was good; the rules
 * go to `r`, which the options then point at), 0 when not. Messages never
 * contain the value. */
#include "frontends/common/restricted.h"
typedef struct infd_cli_restrictions {
    infd_restricted http, grpc, metrics;
} infd_cli_restrictions;
int infd_cli_parse_restricted(const char *opt, const char *v, infd_cli_restrictions *r,
                              struct infd_http_options *http, struct infd_grpc_options *grpc,
                              struct infd_metrics_options *metrics, int *bad, infd_error *err);

/* Blocks SIGINT and SIGTERM in this thread (and so in every thread started
 * after it) and ignores SIGPIPE: a server's main thread then waits for the
 * stop signals with sigwait(stop). */
void infd_cli_block_stop_signals(sigset_t *stop);

/* Parses "1,3,224,224" into `shape`; -1 on a malformed list. */
int infd_cli_parse_dims(const char *s, infd_shape *shape);

/* Fills a tensor with deterministic pseudo-random values (floats in [0, 1),
 * small non-negative integers, booleans) from `seed`. */
void infd_cli_fill_random(infd_tensor *t, uint64_t seed);

#endif /* INFD_CLI_CLI_H */
