/*
 * cmd_router.c - `infd router`: the KServe v2 HTTP and gRPC API (and
 * metrics) in front of the workers registered in etcd (docs/CLUSTER.md).
 *
 * It is an infd_server in EXPLICIT mode over a temporary folder of its own,
 * where the cluster router (src/cluster/router.c) writes a remote model for
 * each model some worker has READY; the frontends serve it as they serve
 * `infd serve`. SIGTERM or Ctrl-C drains and stops.
 */
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cluster/router.h"
#include "core/common.h"
#include "core/log.h"
#include "frontends/grpc/grpc.h"
#include "frontends/http/http.h"
#include "frontends/metrics/metrics.h"
#include "infd/infd.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: infd router --etcd URL[,URL...] [options]\n"
            "  --etcd URL[,URL...]        etcd members (http://HOST:PORT) where workers register\n"
            "  --cluster-prefix P         etcd key prefix (default /infd)\n"
            "  --host ADDR                 address for HTTP, gRPC and metrics (default 0.0.0.0)\n"
            "  --http-port N               KServe v2 HTTP/REST (default 8000; -1: off)\n"
            "  --grpc-port N               KServe v2 gRPC (default 8001; -1: off)\n"
            "  --metrics-port N            Prometheus /metrics (default 8002; -1: off)\n"
            "  --http-threads N            HTTP event-loop threads (default "
            "1)\n" INFD_CLI_SECURITY_USAGE

            "  --grpc-threads N            gRPC completion-queue threads (default 1)\n"
            "  --policy P                  p2c (power of two choices on load; default) |\n"
            "                              round-robin\n"
            "  --max-inflight N            requests taken and not answered, all models, before\n"
            "                              RESOURCE_EXHAUSTED/429 at once (default 4096)\n"
            "  --rate-limit RULE           a token bucket (repeatable): model:NAME=RATE[:BURST]\n"
            "                              or client:KEY=RATE[:BURST] (KEY * for each other\n"
            "                              client); the client key is the `infd-client` HTTP\n"
            "                              header or gRPC metadata; RATE per second\n"
            "  --request-log LEVEL         level of the per-request log line (default debug)\n"
            "  --log-level LEVEL           error | warn | info | debug (default info)\n");
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) == 0 ? 0 : -1;
}

/* The temporary repository (the remote models' configs), removed at exit:
 * its entries first (FTW_DEPTH), links not followed (FTW_PHYS). */
static void remove_tree(const char *dir)
{
    if (nftw(dir, remove_one, 8, FTW_DEPTH | FTW_PHYS) != 0)
        infd_log(INFD_LOG_LEVEL_WARN, "router: could not remove %s", dir);
}

int infd_cli_router(int argc, char **argv)
{
    cluster_router_options ro;
    cluster_router_options_init(&ro);
    infd_http_options ho;
    infd_http_options_init(&ho);
    infd_grpc_options go;
    infd_grpc_options_init(&go);
    infd_metrics_options mo;
    infd_metrics_options_init(&mo);
    /* static: the frontends borrow it for the process's life */
    static infd_cli_restrictions restrictions;
    const char *host = NULL;
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
        if (!v) {
            fprintf(stderr, "infd router: %s needs a value (or is unknown)\n", a);
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
                fprintf(stderr, "infd router: %s\n", err.msg);
                return INFD_EXIT_USAGE;
            }
        } else if (strcmp(a, "--etcd") == 0) {
            ro.etcd = v;
        } else if (strcmp(a, "--cluster-prefix") == 0) {
            ro.prefix = v;
        } else if (strcmp(a, "--policy") == 0) {
            if (strcmp(v, "p2c") == 0)
                ro.policy = CLUSTER_ROUTER_P2C;
            else if (strcmp(v, "round-robin") == 0)
                ro.policy = CLUSTER_ROUTER_ROUND_ROBIN;
            else
                bad = 1;
        } else if (strcmp(a, "--max-inflight") == 0) {
            bad = infd_cli_parse_long(v, 1, 1 << 20, &n);
            ro.max_inflight = (int)n;
        } else if (strcmp(a, "--rate-limit") == 0) {
            if (ro.n_rate_limits == CLUSTER_ROUTER_MAX_RULES) {
                fprintf(stderr, "infd router: more than %d --rate-limit rules\n",
                        CLUSTER_ROUTER_MAX_RULES);
                return INFD_EXIT_USAGE;
            }
            ro.rate_limits[ro.n_rate_limits++] = v;
        } else if (strcmp(a, "--request-log") == 0) {
            bad = infd_log_level_parse(v, &ro.request_log, &err) != INFD_STATUS_OK;
        } else if (strcmp(a, "--log-level") == 0) {
            infd_log_level level;
            bad = infd_log_level_parse(v, &level, &err) != INFD_STATUS_OK;
            if (!bad)
                infd_log_set_level(level);
        } else {
            fprintf(stderr, "infd router: unknown option %s\n", a);
            usage(stderr);
            return INFD_EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "infd router: bad value for %s: '%s'\n", a, v);
            return INFD_EXIT_USAGE;
        }
    }
    if (!ro.etcd) {
        fprintf(stderr, "infd router: --etcd is needed\n");
        usage(stderr);
        return INFD_EXIT_USAGE;
    }
    if (host)
        ho.host = go.host = mo.host = host;
    char repo[] = "/tmp/infd-router-XXXXXX";
    if (!mkdtemp(repo)) {
        fprintf(stderr, "infd router: cannot make its repository folder in /tmp\n");
        return INFD_EXIT_FAILURE;
    }
    ro.repository = repo;
    sigset_t stop;
    infd_cli_block_stop_signals(&stop);
    int rc = INFD_EXIT_FAILURE;
    infd_server *server = NULL;
    cluster_router *router = NULL;
    infd_http *http = NULL;
    infd_grpc *grpc = NULL;
    infd_metrics *metrics = NULL;
    infd_server_options so;
    infd_server_options_init(&so);
    so.model_repository = repo;
    so.control_mode = INFD_MODEL_CONTROL_EXPLICIT;
    so.server_id = "infd-router";
    so.pinned_pool_bytes = 0;
    if (infd_server_create(&so, &server, &err) != INFD_STATUS_OK ||
        cluster_router_start(server, &ro, &router, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd router: %s\n", err.msg);
        goto out;
    }
    if (go.port >= 0 && infd_grpc_start(server, &go, &grpc, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd router: grpc: %s\n", err.msg);
        goto out;
    }
    if (ho.port >= 0 && infd_http_start(server, &ho, &http, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd router: http: %s\n", err.msg);
        goto out;
    }
    mo.extra = cluster_router_metrics;
    mo.extra_user = router;
    if (mo.port >= 0 && infd_metrics_start(server, &mo, &metrics, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd router: metrics: %s\n", err.msg);
        goto out;
    }
    infd_log(INFD_LOG_LEVEL_INFO, "router ready (HTTP %d, gRPC %d); SIGTERM or Ctrl-C stops",
             http ? infd_http_port(http) : -1, grpc ? infd_grpc_port(grpc) : -1);
    int sig = 0;
    sigwait(&stop, &sig);
    rc = INFD_EXIT_OK;
out:
    /* The drain first: requests in flight are finished by the router's
     * loop (answered by workers, or failed over or timed out); then the
     * loop stops, then the frontends. */
    infd_server_drain(server);
    infd_metrics_stop(metrics); /* it renders the router's families */
    cluster_router_stop(router);
    infd_http_stop(http);
    infd_grpc_stop(grpc);
    infd_server_destroy(server);
    remove_tree(repo);
    infd_cli_log_copies("router"); /* the zero-copy tests read it */
    return rc;
}
