/*
 * common.c - option parsing and input generation shared by subcommands.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <time.h>
#include <stdint.h>

#include "cli/cli.h"
#include "core/common.h"
#include "core/log.h"
#include "frontends/grpc/grpc.h"
#include "frontends/http/http.h"
#include "frontends/metrics/metrics.h"

int infd_cli_parse_dims(const char *s, infd_shape *shape)
{
    int64_t dims[INFD_MAX_RANK];
    int32_t rank = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || rank >= INFD_MAX_RANK)
            return -1;
        dims[rank++] = v;
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    return infd_shape_init(shape, rank, dims, NULL) == INFD_STATUS_OK ? 0 : -1;
}

int infd_cli_parse_common(infd_cli_common *c, int argc, char **argv, int *i, const char *cmd)
{
    const char *arg = argv[*i];
    const char *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (strcmp(arg, "--batch") == 0 || strcmp(arg, "--threads") == 0) {
        char *end = NULL;
        long v = val ? strtol(val, &end, 10) : 0;
        if (!val || *end || v < 1 || v > 1 << 20) {
            fprintf(stderr, "infd %s: %s needs a positive number\n", cmd, arg);
            return -1;
        }
        if (arg[2] == 'b')
            c->plan.batch = v;
        else
            c->plan.n_threads = (int)v;
        (*i)++;
        return 1;
    }
    if (strcmp(arg, "--precision") == 0) {
        if (!infd_precision_parse(val, &c->plan.precision)) {
            fprintf(stderr, "infd %s: --precision needs fp32, tf32, bf16 or fp16\n", cmd);
            return -1;
        }
        c->precision_given = true;
        (*i)++;
        return 1;
    }
    if (strcmp(arg, "--device") == 0) {
        if (val && strcmp(val, "cpu") == 0) {
            c->plan.device = INFD_DEVICE_CPU;
        } else if (val && strcmp(val, "cuda") == 0) {
            c->plan.device = INFD_DEVICE_CUDA;
        } else {
            fprintf(stderr, "infd %s: --device needs cpu or cuda\n", cmd);
            return -1;
        }
        c->device_given = true;
        (*i)++;
        return 1;
    }
    if (strcmp(arg, "--shape") == 0) {
        const char *eq = val ? strchr(val, '=') : NULL;
        int k = c->plan.n_shapes;
        if (!eq || eq == val || (size_t)(eq - val) >= sizeof(c->shape_names[0]) ||
            k >= INFD_CLI_MAX_SHAPES || infd_cli_parse_dims(eq + 1, &c->shapes[k].shape) != 0) {
            fprintf(stderr, "infd %s: --shape needs NAME=D0,D1,... (e.g. x=1,3,640,640)\n", cmd);
            return -1;
        }
        memcpy(c->shape_names[k], val, (size_t)(eq - val));
        c->shape_names[k][eq - val] = '\0';
        c->shapes[k].name = c->shape_names[k];
        c->plan.shapes = c->shapes;
        c->plan.n_shapes = k + 1;
        (*i)++;
        return 1;
    }
    return 0;
}

int infd_cli_use_plan_file(infd_cli_common *c, const char *cmd)
{
    infd_plan_file_info info;
    infd_error err = { 0 };
    if (!infd_plan_file_is(c->model))
        return 0;
    /* A damaged file, or one of another version, is left to
     * infd_plan_create, whose message says what it was built for. */
    if (infd_plan_file_read_info(c->model, &info, &err) != INFD_STATUS_OK)
        return 0;
    if (c->device_given && c->plan.device != info.device_kind) {
        fprintf(stderr,
                "infd %s: %s was built for device %s: rebuild it with infd build --device\n", cmd,
                c->model, info.device_kind == INFD_DEVICE_CUDA ? "cuda" : "cpu");
        return -1;
    }
    if (c->precision_given && c->plan.precision != info.precision) {
        fprintf(stderr,
                "infd %s: %s was built with precision %s: rebuild it with infd build "
                "--precision\n",
                cmd, c->model, infd_precision_name(info.precision));
        return -1;
    }
    c->plan.device = info.device_kind;
    c->plan.precision = info.precision;
    return 0;
}

void infd_cli_fill_random(infd_tensor *t, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    int64_t n = infd_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        double u = (double)(s >> 11) / 9007199254740992.0;
        switch (t->dtype) {
        case INFD_DTYPE_FP32:
            ((float *)t->data)[i] = (float)u;
            break;
        case INFD_DTYPE_FP64:
            ((double *)t->data)[i] = u;
            break;
        case INFD_DTYPE_FP16:
            ((uint16_t *)t->data)[i] = infd_fp16_from_fp32((float)u);
            break;
        case INFD_DTYPE_BF16:
            ((uint16_t *)t->data)[i] = infd_bf16_from_fp32((float)u);
            break;
        case INFD_DTYPE_BOOL:
            ((uint8_t *)t->data)[i] = u < 0.5;
            break;
        default: {
            size_t size = infd_dtype_size(t->dtype);
            uint64_t v = (uint64_t)(u * 10);
            memcpy((char *)t->data + (size_t)i * size, &v, size); /* little-endian */
            break;
        }
        }
    }
}

int infd_cli_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int infd_cli_parse_net(const char *opt, const char *v, infd_http_options *http,
                       infd_grpc_options *grpc, infd_metrics_options *metrics, const char **host,
                       int *bad)
{
    long n = 0;
    int *port = strcmp(opt, "--http-port") == 0      ? &http->port
                : strcmp(opt, "--grpc-port") == 0    ? &grpc->port
                : strcmp(opt, "--metrics-port") == 0 ? &metrics->port
                                                     : NULL;
    int *threads = strcmp(opt, "--http-threads") == 0   ? &http->n_threads
                   : strcmp(opt, "--grpc-threads") == 0 ? &grpc->n_threads
                                                        : NULL;
    const char **tls = strcmp(opt, "--http-ssl-cert") == 0        ? &http->ssl_cert
                       : strcmp(opt, "--http-ssl-key") == 0       ? &http->ssl_key
                       : strcmp(opt, "--http-ssl-client-ca") == 0 ? &http->ssl_client_ca
                       : strcmp(opt, "--grpc-server-cert") == 0   ? &grpc->server_cert
                       : strcmp(opt, "--grpc-server-key") == 0    ? &grpc->server_key
                       : strcmp(opt, "--grpc-root-cert") == 0     ? &grpc->root_cert
                                                                  : NULL;
    bool *tls_on = strcmp(opt, "--grpc-use-ssl") == 0          ? &grpc->use_ssl
                   : strcmp(opt, "--grpc-use-ssl-mutual") == 0 ? &grpc->use_ssl_mutual
                                                               : NULL;
    if (strcmp(opt, "--host") == 0) {
        *host = v;
        *bad = 0;
    } else if (tls) {
        *tls = v;
        *bad = !*v;
    } else if (tls_on) {
        /* Triton's booleans: --grpc-use-ssl true|false */
        *bad = strcmp(v, "true") != 0 && strcmp(v, "false") != 0 && strcmp(v, "1") != 0 &&
               strcmp(v, "0") != 0;
        *tls_on = strcmp(v, "true") == 0 || strcmp(v, "1") == 0;
    } else if (port) {
        *bad = infd_cli_parse_long(v, -1, 65535, &n);
        *port = (int)n;
    } else if (threads) {
        *bad = infd_cli_parse_long(v, 1, 64, &n);
        *threads = (int)n;
    } else {
        return 0;
    }
    return 1;
}

int infd_cli_parse_restricted(const char *opt, const char *v, infd_cli_restrictions *r,
                              infd_http_options *http, infd_grpc_options *grpc,
                              infd_metrics_options *metrics, int *bad, infd_error *err)
{
    char spec[INFD_RESTRICTED_KEY_BYTES + INFD_RESTRICTED_VALUE_BYTES + 16];
    if (strcmp(opt, "--http-restricted-api") == 0) {
        *bad = infd_restricted_add(&r->http, opt, v, err) != INFD_STATUS_OK;
        http->restricted = &r->http;
    } else if (strcmp(opt, "--grpc-restricted-protocol") == 0) {
        *bad = infd_restricted_add(&r->grpc, opt, v, err) != INFD_STATUS_OK;
        grpc->restricted = &r->grpc;
    } else if (strcmp(opt, "--metrics-restricted-api") == 0) {
        /* <key>=<value>: the one group of the metrics port */
        int n = snprintf(spec, sizeof(spec), "statistics:%s", v);
        *bad = n < 0 || (size_t)n >= sizeof(spec) ||
               infd_restricted_add(&r->metrics, opt, spec, err) != INFD_STATUS_OK;
        if (*bad && !err->msg[0])
            infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: too long", opt);
        metrics->restricted = &r->metrics;
        memset(spec, 0, sizeof(spec));
    } else {
        return 0;
    }
    return 1;
}

static void *exit_watchdog(void *arg)
{
    int secs = (int)(intptr_t)arg;
    struct timespec t = { .tv_sec = secs };
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
    infd_log(INFD_LOG_LEVEL_WARN,
             "the stop did not finish within %d s (requests in flight or clients not "
             "reading); exiting",
             secs);
    fflush(NULL);
    _exit(INFD_EXIT_OK);
    return NULL;
}

void infd_cli_exit_after(int secs)
{
    pthread_t t;
    if (pthread_create(&t, NULL, exit_watchdog, (void *)(intptr_t)secs) == 0)
        pthread_detach(t);
}

void infd_cli_block_stop_signals(sigset_t *stop)
{
    sigemptyset(stop);
    sigaddset(stop, SIGINT);
    sigaddset(stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, stop, NULL);
    signal(SIGPIPE, SIG_IGN);
}

void infd_cli_log_copies(const char *who)
{
#ifndef NDEBUG
    infd_log(INFD_LOG_LEVEL_INFO,
             "%s: payload bytes copied: %llu (%llu in copies of %d bytes or more)", who,
             (unsigned long long)infd_copied_bytes(false),
             (unsigned long long)infd_copied_bytes(true), INFD_LARGE_COPY);
#else
    (void)who;
#endif
}
