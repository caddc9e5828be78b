/*
 * test_plugin.c - a processor plugin for the e2e tests (backend "plugin",
 * docs/PIPELINES.md), built into build/<preset>/plugins/. The config's
 * parameter "op" picks what it does:
 *   scale  X (FP32, "rank" dims of any length, default 1) -> Y = X *
 *          "factor" (default 2); a request whose X[0] is -1 fails on its own
 *          with INVALID_ARGUMENT
 *   upper  TEXT (BYTES, any length) -> UPPER, each string upper-cased
 *   anything else: the model fails to load, naming the op
 * Each run_batch also counts its requests, so the tests can see batches.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infd/plugin.h"

typedef struct proc {
    int op; /* 0 scale, 1 upper */
    float factor;
} proc;

static infd_status load(void *user, infd_kind_model *km, void **state, infd_error *err)
{
    (void)user;
    const char *op = infd_kind_model_parameter(km, "op");
    const char *factor = infd_kind_model_parameter(km, "factor");
    const char *rank_s = infd_kind_model_parameter(km, "rank");
    int rank = rank_s ? atoi(rank_s) : 1;
    int64_t any[8] = { -1, -1, -1, -1, -1, -1, -1, -1 };
    if (rank < 1 || rank > 7)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "rank %d: 1 to 7", rank);
    proc *p = calloc(1, sizeof(*p));
    if (!p)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    p->factor = factor ? strtof(factor, NULL) : 2.0f;
    infd_status st;
    if (op && strcmp(op, "scale") == 0) {
        p->op = 0;
        st = infd_kind_model_add_input(km, "X", INFD_DTYPE_FP32, rank, any, err);
        if (st == INFD_STATUS_OK)
            st = infd_kind_model_add_output(km, "Y", INFD_DTYPE_FP32, rank, any, err);
    } else if (op && strcmp(op, "upper") == 0) {
        p->op = 1;
        st = infd_kind_model_add_input(km, "TEXT", INFD_DTYPE_BYTES, 1, any, err);
        if (st == INFD_STATUS_OK)
            st = infd_kind_model_add_output(km, "UPPER", INFD_DTYPE_BYTES, 1, any, err);
    } else {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "unknown op '%s' (scale, upper)",
                            op ? op : "(none)");
    }
    if (st != INFD_STATUS_OK) {
        free(p);
        return st;
    }
    *state = p;
    return INFD_STATUS_OK;
}

static void unload(void *state)
{
    free(state);
}

static infd_status run_batch(void *state, int instance, infd_batch *batch, infd_error *err)
{
    (void)instance;
    proc *p = state;
    for (int k = 0; k < infd_batch_size(batch); k++) {
        infd_request *req = infd_batch_request(batch, k);
        infd_tensor in;
        if (infd_request_input(req, 0, &in, err) != INFD_STATUS_OK) {
            infd_request_fail(req, err->code, err->msg);
            continue;
        }
        void *buf = malloc(in.nbytes ? in.nbytes : 1);
        if (!buf) {
            infd_request_fail(req, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
            continue;
        }
        if (p->op == 0) {
            const float *x = in.data;
            float *y = buf;
            int64_t n = (int64_t)(in.nbytes / sizeof(float));
            if (n > 0 && x[0] == -1.0f) {
                free(buf);
                infd_request_fail(req, INFD_STATUS_INVALID_ARGUMENT,
                                  "the test plugin refuses an X that starts with -1");
                continue;
            }
            for (int64_t i = 0; i < n; i++)
                y[i] = x[i] * p->factor;
        } else {
            /* Same layout out as in: lengths kept, letters upper-cased. */
            const unsigned char *s = in.data;
            unsigned char *d = buf;
            size_t off = 0;
            memcpy(d, s, in.nbytes);
            while (off + 4 <= in.nbytes) {
                uint32_t len = (uint32_t)s[off] | (uint32_t)s[off + 1] << 8 |
                               (uint32_t)s[off + 2] << 16 | (uint32_t)s[off + 3] << 24;
                off += 4;
                for (uint32_t i = 0; i < len && off + i < in.nbytes; i++)
                    d[off + i] = (unsigned char)toupper(s[off + i]);
                off += len;
            }
        }
        infd_tensor out = in;
        out.data = buf;
        out.owns_data = false;
        if (infd_request_output_set(req, 0, &out, err) != INFD_STATUS_OK)
            infd_request_fail(req, err->code, err->msg);
        free(buf);
    }
    return INFD_STATUS_OK;
}

static const infd_model_kind kind = {
    .name = "test_plugin",
    .platform = "infd_test_plugin",
    .load = load,
    .unload = unload,
    .run_batch = run_batch,
};

INFD_PLUGIN_EXPORT const infd_model_kind *infd_plugin_kind(void)
{
    return &kind;
}
