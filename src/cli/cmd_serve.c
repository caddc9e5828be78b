/*
 * cmd_serve.c - `infd serve`: a model repository behind the frontends.
 *
 * The server (runtime) loads the repository; the frontends (HTTP/KServe v2,
 * gRPC/KServe v2, Prometheus metrics, raw sockets) are started on top of the
 * public API, with the speech app's model kind registered (backend "asr"),
 * and with --video-listen the live video app (src/apps/video), whose
 * detector is one of the served models.
 * The main thread then waits for SIGINT or SIGTERM with the
 * signals blocked in every thread (sigwait), so no frontend or worker is
 * interrupted by them; on a signal it drains (no new requests; queued and
 * executing ones finish and their responses are written), stops the
 * frontends and exits 0.
 */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/alloc.h"
#include "core/log.h"
#include "frontends/grpc/grpc.h"
#include "frontends/http/http.h"
#include "frontends/metrics/metrics.h"
#include "frontends/raw/raw.h"
#include "frontends/redisq/redisq.h"
#include "cluster/member.h"
#include "cluster/worker.h"
#include "plugins/plugins.h"
#include "apps/video/video.h"
#include "infd/asr.h"
#include "infd/infd.h"

#define MAX_LIST 64

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: infd serve [--model-repository DIR] [options]\n"
        "  --model-repository DIR      Triton-layout repository (default: models)\n"
        "  --model-control-mode MODE   none | poll | explicit (default none)\n"
        "  --load-model NAME           explicit mode: load NAME at start ('*': all)\n"
        "  --repository-poll-secs N    poll mode: rescan period (default 15)\n"
        "  --exit-on-error             fail to start when a model fails to load\n"
        "  --exit-grace-secs N         on SIGTERM, answer not ready at once but serve N s\n"
        "                              more before draining (default 0)\n"
        "  --exit-timeout-secs N       then drain and stop within N s, else exit anyway\n"
        "                              (default 30)\n"
        "  --host ADDR                 address for HTTP, gRPC, metrics and raw TCP (default\n"
        "                              0.0.0.0, 127.0.0.1 for raw TCP)\n"
        "  --http-port N               KServe v2 HTTP/REST (default 8000; -1: off)\n"
        "  --grpc-port N               KServe v2 gRPC (default 8001; -1: off)\n"
        "  --metrics-port N            Prometheus /metrics (default 8002; -1: off)\n"
        "  --max-body-bytes N          largest HTTP request body (default 64 MiB)\n"
        "  --http-timeout-secs N       close an HTTP connection that sends or reads nothing\n"
        "                              for N s: headers, body, answer, idle (default 120)\n"
        "  --http-header-timeout-secs N  a request's headers and body must arrive within N s\n"
        "                              of its first byte, plus 1 s per KiB (default 30; 0:\n"
        "                              off; later: 408)\n"
        "  --http-max-connections N    HTTP connections open at once (default 4096; 0: no\n"
        "                              limit; over it: 503)\n"
        "  --http-max-connections-per-client N  from one client address (default 1024;\n"
        "                              0: no limit; over it: 429)\n"
        "  --max-json-depth N          JSON nesting an HTTP request may have, 8 to 4096\n"
        "                              (default 64; deeper: 400)\n"
        "  --http-threads N            HTTP event-loop threads (default: cores, at most 8)\n"
        "  --grpc-max-message-bytes N  largest gRPC request message (default 64 MiB)\n"
        "  --grpc-handshake-timeout-secs N  a gRPC connection's handshake (TLS, HTTP/2\n"
        "                              preface) must end within N s (default 30)\n"
        "  --grpc-idle-timeout-secs N  GOAWAY to a gRPC connection idle N s (default 0:\n"
        "                              never)\n"
        "  --grpc-max-concurrent-streams N  calls in flight per gRPC connection (default\n"
        "                              1024)\n"
        "  --grpc-threads N            gRPC completion-queue threads (default: as "
        "HTTP's)\n" INFD_CLI_SECURITY_USAGE

        "  --raw-socket-dir DIR        raw protocol Unix sockets (default /tmp/infd; "
        "'off': none)\n"
        "  --raw-socket-mode MODE      the raw sockets' file mode, octal (0660; default:\n"
        "                              as the umask leaves it)\n"
        "  --raw-socket-group GROUP    and their group (a name or a gid; default the\n"
        "                              process's)\n"
        "  --raw-threads N             raw protocol connection loops (default: the HTTP\n"
        "                              threads)\n"
        "  --raw-tcp-port MODEL=PORT[:framed]\n"
        "                              raw protocol on a TCP port too (repeatable)\n"
        "  --raw-stats-every N         log raw latency stats every N requests (default "
        "1000)\n"
        "  --threads N                 engine threads per model instance (default: (cores "
        "- 1) / instances, at least 1)\n"
        "  --enable-shared-memory KINDS\n"
        "                              let clients register shared memory (Triton's\n"
        "                              extension): 'system' (POSIX shm), 'cuda' (CUDA\n"
        "                              IPC handles), or 'system,cuda'; default off\n"
        "  --pinned-memory-pool-byte-size N\n"
        "                              page-locked memory that GPU models' request bodies\n"
        "                              are received into (default 1 GiB; 0: none)\n"
        "  --video-listen URL          live face detection over SRT (srt://[HOST]:PORT; default\n"
        "                              off): the detector is the served model --video-model\n"
        "  --video-model NAME          the face detector (default blazeface)\n"
        "  --video-latency-ms N        SRT latency (default 120)\n"
        "  --video-passphrase P        SRT AES passphrase, 10 to 79 characters\n"
        "  --video-detections FILE|-   one JSON line per frame: faces, timings\n"
        "  --redis URL                 take jobs from Redis Streams\n"
        "                              (redis://[USER[:PASSWORD]@]HOST[:PORT][/DB]; default\n"
        "                              off; the password may come from INFD_REDIS_PASSWORD\n"
        "                              instead; docs/REDIS.md)\n"
        "  --redis-prefix P            key prefix: P:jobs:MODEL, P:dead:MODEL (default infd)\n"
        "  --redis-group G             consumer group (default infd)\n"
        "  --redis-models A,B          models to take jobs for (default every READY one)\n"
        "  --redis-claim-idle-ms N     take over jobs idle this long (default 30000)\n"
        "  --redis-max-deliveries N    dead-letter a job delivered more often (default 3)\n"
        "  --redis-result-ttl-s N      results:{id} expire after N s (default 86400)\n"
        "  --redis-max-inflight N      jobs at once per model (default 8 x max batch, >= 64)\n"
        "  --redis-max-job-bytes N     bigger jobs get an error result (default 64 MiB)\n"
        "  --redis-publish             PUBLISH P:done:MODEL <id> after each result\n"
        "  --cluster URL[,URL...]      join a cluster: register in etcd (http://HOST:PORT of\n"
        "                              its members; docs/CLUSTER.md); needs --advertise\n"
        "  --advertise tcp://HOST:PORT the address routers reach this worker at\n"
        "  --cluster-prefix P          etcd key prefix (default /infd): P/workers/ID\n"
        "  --cluster-id ID             this worker's id (default HOST-PID)\n"
        "  --cluster-ttl N             lease TTL in seconds (default 5)\n"
        "  --log-level LEVEL           error | warn | info | debug (default info)\n");
}

/* "infd serve: WHAT: MESSAGE", without repeating WHAT when the message
 * already starts with it (frontend errors often name themselves). */
static void report(const char *what, const char *msg)
{
    size_t n = strlen(what);
    if (strncasecmp(msg, what, n) == 0 && msg[n] == ':')
        fprintf(stderr, "infd serve: %s\n", msg);
    else
        fprintf(stderr, "infd serve: %s: %s\n", what, msg);
}

/* The apps' and the queue's metric families, one after another. */
typedef struct serve_extras {
    infd_video *video;
    infd_redisq *redisq;
} serve_extras;

static infd_status serve_metrics_extra(void *user, char **out, size_t *n, infd_error *err)
{
    serve_extras *x = user;
    char *a = NULL, *b = NULL;
    size_t an = 0, bn = 0;
    *out = NULL;
    *n = 0;
    if (x->video && infd_cli_video_metrics(x->video, &a, &an, err) != INFD_STATUS_OK)
        return err->code;
    if (x->redisq && infd_redisq_metrics_render(x->redisq, &b, &bn, err) != INFD_STATUS_OK) {
        infd_free(a);
        return err->code;
    }
    if (!a || !b) {
        *out = a ? a : b;
        *n = a ? an : bn;
        return INFD_STATUS_OK;
    }
    char *all = infd_malloc(an + bn + 1);
    if (!all) {
        infd_free(a);
        infd_free(b);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for the metrics");
    }
    memcpy(all, a, an);
    memcpy(all + an, b, bn);
    all[an + bn] = '\0';
    infd_free(a);
    infd_free(b);
    *out = all;
    *n = an + bn;
    return INFD_STATUS_OK;
}

int infd_cli_serve(int argc, char **argv)
{
    infd_server_options so;
    infd_server_options_init(&so);
    so.model_repository = "models";
    infd_http_options ho;
    infd_http_options_init(&ho);
    {
        /* Triton runs 8 HTTP threads; one loop decodes a 600 KB image body
         * at ~1k requests/s, far below what a GPU instance takes. */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        ho.n_threads = cores < 1 ? 1 : cores > 8 ? 8 : (int)cores;
    }
    infd_metrics_options mo;
    infd_metrics_options_init(&mo);
    /* static: the frontends borrow it for the process's life */
    static infd_cli_restrictions restrictions;
    int exit_grace_s = 0, exit_timeout_s = 30;
    infd_raw_options ro;
    infd_raw_options_init(&ro);
    infd_grpc_options go;
    infd_grpc_options_init(&go);
    go.n_threads = ho.n_threads; /* one completion queue per HTTP loop's core */
    const char *load[MAX_LIST], *tcp[MAX_LIST];
    int n_load = 0, n_tcp = 0;
    bool raw_off = false;
    const char *host = NULL;
    infd_video_options vo;
    infd_video_options_init(&vo);
    vo.listen = NULL;
    infd_redisq_options qo;
    infd_redisq_options_init(&qo);
    qo.url = NULL;
    cluster_member_options co;
    cluster_member_options_init(&co);
    infd_error err;
    infd_error_clear(&err);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return INFD_EXIT_OK;
        }
        if (strcmp(a, "--exit-on-error") == 0) {
            so.exit_on_error = true;
            continue;
        }
        if (strcmp(a, "--redis-publish") == 0) {
            qo.publish = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "infd serve: %s needs a value (or is unknown)\n", a);
            usage(stderr);
            return INFD_EXIT_USAGE;
        }
        i++;
        int bad = 0;
        if (infd_cli_parse_net(a, v, &ho, &go, &mo, &host, &bad)) {
            /* --host, the ports and the frontends' threads */
        } else if (infd_cli_parse_restricted(a, v, &restrictions, &ho, &go, &mo, &bad, &err)) {
            if (bad) {
                /* never the value: it holds the key's secret */
                fprintf(stderr, "infd serve: %s\n", err.msg);
                return INFD_EXIT_USAGE;
            }
        } else if (strcmp(a, "--model-repository") == 0 || strcmp(a, "--model-store") == 0) {
            so.model_repository = v;
        } else if (strcmp(a, "--model-control-mode") == 0) {
            bad = infd_model_control_parse(v, &so.control_mode, &err) != INFD_STATUS_OK;
        } else if (strcmp(a, "--load-model") == 0) {
            bad = n_load == MAX_LIST;
            if (!bad)
                load[n_load++] = v;
        } else if (strcmp(a, "--repository-poll-secs") == 0) {
            bad = infd_cli_parse_long(v, 1, 86400, &n);
            so.repository_poll_secs = (int)n;
        } else if (strcmp(a, "--grpc-handshake-timeout-secs") == 0) {
            bad = infd_cli_parse_long(v, 1, 86400, &n);
            go.handshake_timeout_secs = (int)n;
        } else if (strcmp(a, "--grpc-idle-timeout-secs") == 0) {
            bad = infd_cli_parse_long(v, 0, 86400 * 30, &n);
            go.idle_timeout_secs = (int)n;
        } else if (strcmp(a, "--grpc-max-concurrent-streams") == 0) {
            bad = infd_cli_parse_long(v, 1, INT32_MAX, &n);
            go.max_concurrent_streams = (int)n;
        } else if (strcmp(a, "--grpc-max-message-bytes") == 0) {
            bad = infd_cli_parse_long(v, 1, INT32_MAX, &n);
            go.max_message_bytes = (size_t)n;
        } else if (strcmp(a, "--max-body-bytes") == 0) {
            bad = infd_cli_parse_long(v, 1, 1L << 40, &n);
            ho.max_body_bytes = (size_t)n;
        } else if (strcmp(a, "--exit-grace-secs") == 0) {
            bad = infd_cli_parse_long(v, 0, 86400, &n);
            exit_grace_s = (int)n;
        } else if (strcmp(a, "--exit-timeout-secs") == 0) {
            bad = infd_cli_parse_long(v, 1, 86400, &n);
            exit_timeout_s = (int)n;
        } else if (strcmp(a, "--http-timeout-secs") == 0) {
            bad = infd_cli_parse_long(v, 1, 86400, &n);
            ho.timeout_secs = (int)n;
        } else if (strcmp(a, "--http-header-timeout-secs") == 0) {
            bad = infd_cli_parse_long(v, 0, 86400, &n);
            ho.header_timeout_secs = (int)n;
        } else if (strcmp(a, "--http-max-connections") == 0) {
            bad = infd_cli_parse_long(v, 0, 1 << 24, &n);
            ho.max_connections = (int)n;
        } else if (strcmp(a, "--http-max-connections-per-client") == 0) {
            bad = infd_cli_parse_long(v, 0, 1 << 24, &n);
            ho.max_connections_per_client = (int)n;
        } else if (strcmp(a, "--max-json-depth") == 0) {
            bad = infd_cli_parse_long(v, 8, 4096, &n);
            ho.max_json_depth = (int)n;
        } else if (strcmp(a, "--raw-socket-mode") == 0) {
            char *end = NULL;
            long m = strtol(v, &end, 8);
            bad = !*v || *end || m < 0 || m > 0777;
            ro.socket_mode = (int)m;
        } else if (strcmp(a, "--raw-socket-group") == 0) {
            struct group *gr = getgrnam(v);
            if (gr) {
                ro.socket_gid = (long)gr->gr_gid;
            } else {
                bad = infd_cli_parse_long(v, 0, INT32_MAX, &n);
                ro.socket_gid = n;
            }
        } else if (strcmp(a, "--raw-socket-dir") == 0) {
            raw_off = strcmp(v, "off") == 0;
            ro.socket_dir = v;
        } else if (strcmp(a, "--raw-tcp-port") == 0) {
            bad = n_tcp == MAX_LIST;
            if (!bad)
                tcp[n_tcp++] = v;
        } else if (strcmp(a, "--raw-threads") == 0) {
            bad = infd_cli_parse_long(v, 1, 256, &n);
            ro.threads = (int)n;
        } else if (strcmp(a, "--raw-stats-every") == 0) {
            bad = infd_cli_parse_long(v, 0, 1L << 30, &n);
            ro.stats_every = (int)n;
        } else if (strcmp(a, "--enable-shared-memory") == 0) {
            so.shared_memory = 0;
            bad = !v || !*v;
            for (const char *p = v; !bad && p && *p;) {
                size_t len = strcspn(p, ",");
                if (len == 6 && strncmp(p, "system", 6) == 0) {
                    so.shared_memory |= INFD_SHM_SYSTEM;
                } else if (len == 4 && strncmp(p, "cuda", 4) == 0) {
                    so.shared_memory |= INFD_SHM_CUDA;
                } else {
                    fprintf(stderr,
                            "infd serve: --enable-shared-memory: '%.*s' is not a kind infd has "
                            "('system', 'cuda')\n",
                            (int)len, p);
                    return INFD_EXIT_USAGE;
                }
                p += len + (p[len] == ',');
            }
        } else if (strcmp(a, "--pinned-memory-pool-byte-size") == 0) {
            bad = infd_cli_parse_long(v, 0, 1L << 40, &n);
            so.pinned_pool_bytes = (size_t)n;
        } else if (strcmp(a, "--threads") == 0) {
            bad = infd_cli_parse_long(v, 1, 1024, &n);
            so.n_threads = (int)n;
        } else if (strcmp(a, "--video-listen") == 0) {
            vo.listen = v;
        } else if (strcmp(a, "--video-model") == 0) {
            vo.model = v;
        } else if (strcmp(a, "--video-device") == 0) {
            bad = strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0;
            vo.device = v;
        } else if (strcmp(a, "--video-latency-ms") == 0) {
            bad = infd_cli_parse_long(v, 0, 10000, &n);
            vo.latency_ms = (int)n;
        } else if (strcmp(a, "--video-passphrase") == 0) {
            vo.passphrase = v;
        } else if (strcmp(a, "--video-detections") == 0) {
            vo.detections = v;
        } else if (strcmp(a, "--redis") == 0) {
            qo.url = v;
            qo.password = getenv("INFD_REDIS_PASSWORD"); /* kept out of the process list */
        } else if (strcmp(a, "--redis-prefix") == 0) {
            qo.prefix = v;
        } else if (strcmp(a, "--redis-group") == 0) {
            qo.group = v;
        } else if (strcmp(a, "--redis-models") == 0) {
            qo.models = v;
        } else if (strcmp(a, "--redis-claim-idle-ms") == 0) {
            bad = infd_cli_parse_long(v, 1, INT32_MAX, &n);
            qo.claim_idle_ms = (int)n;
        } else if (strcmp(a, "--redis-max-deliveries") == 0) {
            bad = infd_cli_parse_long(v, 1, 1000000, &n);
            qo.max_deliveries = (int)n;
        } else if (strcmp(a, "--redis-result-ttl-s") == 0) {
            bad = infd_cli_parse_long(v, 1, INT32_MAX, &n);
            qo.result_ttl_s = (int)n;
        } else if (strcmp(a, "--redis-max-job-bytes") == 0) {
            bad = infd_cli_parse_long(v, 1024, 1L << 32, &n);
            qo.max_job_bytes = (size_t)n;
        } else if (strcmp(a, "--redis-max-inflight") == 0) {
            bad = infd_cli_parse_long(v, 0, 1000000, &n);
            qo.max_inflight = (int)n;
        } else if (strcmp(a, "--cluster") == 0) {
            co.etcd = v;
        } else if (strcmp(a, "--advertise") == 0) {
            co.advertise = v;
        } else if (strcmp(a, "--cluster-prefix") == 0) {
            co.prefix = v;
        } else if (strcmp(a, "--cluster-id") == 0) {
            co.id = v;
        } else if (strcmp(a, "--cluster-ttl") == 0) {
            bad = infd_cli_parse_long(v, 2, 3600, &n);
            co.ttl_s = (int)n;
        } else if (strcmp(a, "--log-level") == 0) {
            infd_log_level level;
            bad = infd_log_level_parse(v, &level, &err) != INFD_STATUS_OK;
            if (!bad)
                infd_log_set_level(level);
        } else {
            fprintf(stderr, "infd serve: unknown option %s\n", a);
            usage(stderr);
            return INFD_EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "infd serve: bad value for %s: '%s'%s%s\n", a, v,
                    err.msg[0] ? ": " : "", err.msg);
            return INFD_EXIT_USAGE;
        }
    }
    if (!co.etcd != !co.advertise) {
        fprintf(stderr, "infd serve: --cluster and --advertise go together\n");
        return INFD_EXIT_USAGE;
    }
    so.startup_models = load;
    so.n_startup_models = n_load;
    ro.tcp_ports = tcp;
    ro.n_tcp_ports = n_tcp;
    if (ro.threads == 0)
        ro.threads = ho.n_threads; /* as many connection loops as HTTP loops */
    if (host) {
        ho.host = host;
        mo.host = host;
        go.host = host;
        ro.tcp_host = host;
    }

    /* Block the stop signals before any thread starts, so every thread
     * inherits the mask and only sigwait below sees them. */
    sigset_t stop;
    infd_cli_block_stop_signals(&stop);

    int rc = INFD_EXIT_FAILURE;
    infd_server *server = NULL;
    infd_http *http = NULL;
    infd_grpc *grpc = NULL;
    infd_metrics *metrics = NULL;
    infd_raw *raw = NULL;
    infd_video *video = NULL;
    infd_redisq *redisq = NULL;
    cluster_member *member = NULL;
    cluster_worker *link = NULL;
    serve_extras extras = { NULL, NULL };
    infd_cli_video_routes video_routes;
    infd_cli_video_routes_init(&video_routes, NULL);
    infd_http_extension video_ext = { "video", infd_cli_video_route, &video_routes };
    infd_log(INFD_LOG_LEVEL_INFO, "infd %s (git %s) serving %s", infd_version(), infd_version_git(),
             so.model_repository);
    /* Speech models (backend "asr") are served by the speech app's kind. */
    if (infd_asr_register_model_kind(&err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd serve: %s\n", err.msg);
        goto out;
    }
    /* Built-in processors: backends "image_decode" and "blazeface_decode". */
    if (infd_plugins_register(&err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd serve: %s\n", err.msg);
        goto out;
    }
    if (infd_server_create(&so, &server, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd serve: %s\n", err.msg);
        goto out;
    }
    /* The video app warms its detector up and listens before the other
     * frontends start, so a ready server has its video listener open. */
    if (vo.listen && infd_video_start(server, &vo, &video, &err) != INFD_STATUS_OK) {
        report("video", err.msg);
        goto out;
    }
    if (go.port >= 0) {
        if (infd_grpc_start(server, &go, &grpc, &err) != INFD_STATUS_OK) {
            report("grpc", err.msg);
            goto out;
        }
        infd_log(INFD_LOG_LEVEL_INFO, "gRPC listening on %s:%d", go.host, infd_grpc_port(grpc));
    }
    if (ho.port >= 0) {
        if (video) {
            video_routes.video = video; /* before the frontend starts */
            ho.extensions = &video_ext;
            ho.n_extensions = 1;
        }
        if (infd_http_start(server, &ho, &http, &err) != INFD_STATUS_OK) {
            report("http", err.msg);
            goto out;
        }
        infd_log(INFD_LOG_LEVEL_INFO, "HTTP listening on %s:%d", ho.host, infd_http_port(http));
    }
    if (qo.url) {
        if (infd_redisq_start(server, &qo, &redisq, &err) != INFD_STATUS_OK) {
            report("redis", err.msg);
            goto out;
        }
        infd_log(INFD_LOG_LEVEL_INFO, "redis: consumer %s, jobs from %s:jobs:<model>",
                 infd_redisq_consumer(redisq), qo.prefix);
    }
    if (mo.port >= 0) {
        extras.video = video;
        extras.redisq = redisq;
        if (video || redisq) {
            mo.extra = serve_metrics_extra;
            mo.extra_user = &extras;
        }
        if (infd_metrics_start(server, &mo, &metrics, &err) != INFD_STATUS_OK) {
            report("metrics", err.msg);
            goto out;
        }
        infd_log(INFD_LOG_LEVEL_INFO, "metrics listening on %s:%d", mo.host,
                 infd_metrics_port(metrics));
    }
    if (!raw_off) {
        if (infd_raw_start(server, &ro, &raw, &err) != INFD_STATUS_OK) {
            report("raw", err.msg);
            goto out;
        }
    }
    /* Registered last: routers find a worker whose frontends all listen. */
    if (co.etcd) {
        /* The link listens before the key says where it is. */
        cluster_worker_options wo;
        cluster_worker_options_init(&wo);
        wo.bind = co.advertise;
        wo.id = co.id;
        if (cluster_worker_start(server, &wo, &link, &err) != INFD_STATUS_OK) {
            report("cluster", err.msg);
            goto out;
        }
        co.http_port = http ? infd_http_port(http) : -1;
        co.grpc_port = grpc ? infd_grpc_port(grpc) : -1;
        if (cluster_member_start(server, &co, &member, &err) != INFD_STATUS_OK) {
            report("cluster", err.msg);
            goto out;
        }
    }
    infd_log(INFD_LOG_LEVEL_INFO, "ready; SIGTERM or Ctrl-C drains and stops");
    int sig = 0;
    sigwait(&stop, &sig);
    /* Not ready at once; requests are still served for the grace period
     * (a second signal cuts it short), then the drain, all of it within
     * the exit timeout. */
    infd_server_stop_ready(server);
    if (exit_grace_s > 0) {
        infd_log(INFD_LOG_LEVEL_INFO, "%s: not ready; serving %d s more before draining",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", exit_grace_s);
        struct timespec grace = { .tv_sec = exit_grace_s };
        while (sigtimedwait(&stop, NULL, &grace) < 0 && errno == EINTR) {
        }
    }
    infd_log(INFD_LOG_LEVEL_INFO, "%s: draining in-flight requests (at most %d s)",
             sig == SIGTERM ? "SIGTERM" : "SIGINT", exit_timeout_s);
    infd_cli_exit_after(exit_timeout_s);
    rc = INFD_EXIT_OK;
out:
    /* The video streams end first (their frames still get boxes), then the
     * drain: responses of in-flight requests are still written by the
     * frontends, which stop afterwards. The queue reads no more jobs from
     * here on; those it read finish in the drain, and its stop writes
     * their results. */
    /* Routers stop choosing this worker first (the lease is revoked, its
     * key goes), then the in-flight requests finish. */
    cluster_member_leave(member);
    cluster_member_stop(member);
    infd_redisq_quiesce(redisq);
    if (video) {
        infd_metrics_stop(metrics); /* it renders the app's families */
        metrics = NULL;
        infd_cli_video_routes_detach(&video_routes); /* no HTTP route runs on it now */
        infd_video_stop(video);
    }
    infd_server_drain(server);
    if (redisq) {
        infd_metrics_stop(metrics); /* it renders the queue's families */
        metrics = NULL;
        infd_redisq_stop(redisq);
    }
    cluster_worker_stop(link); /* after the drain: every call answered */
    infd_raw_stop(raw);
    infd_http_stop(http);
    infd_grpc_stop(grpc);
    infd_metrics_stop(metrics);
    infd_server_destroy(server);
    infd_cli_log_copies("serve"); /* the zero-copy tests read it */
    if (rc == INFD_EXIT_OK)
        infd_log(INFD_LOG_LEVEL_INFO, "stopped");
    return rc;
}
