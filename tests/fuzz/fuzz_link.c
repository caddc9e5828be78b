/*
 * fuzz_link.c - libFuzzer target for what a worker reads from the
 * router-worker link (src/cluster/link.c, proto/cluster.proto): a
 * LinkMessage header and tensor frames, unpacked, and an INFER's request
 * built from them against a real server's models (not submitted). Any
 * bytes must become a request or an error with a message, never a crash, a
 * leak or an out-of-bounds read.
 *
 * Input: a byte n (frames, at most 9), then n 4-byte little-endian
 * lengths, then the frames' bytes one after another (frame 0 the header);
 * missing bytes make short frames. The server has two models of the
 * built-in softmax kind, one batching (max_batch_size 4) and one not, and
 * "held" (a kind of this file that takes requests at submit and holds
 * them: outputs FP32 [4], FP32 [-1], BYTES [1] and INT64 [2], batching),
 * whose request of 2 rows gets a RESULT's outputs.
 * Seeds: tests/fuzz/seeds-link (INFER messages written for this project).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cluster.pb-c.h"
#include "cluster/link.h"
#include "infd/plugin.h"
#include "fuzz_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static infd_server *server;
static infd_request *held_req; /* taken by the "held" kind's submit */
static int lent, given_back;
static volatile uint8_t sink; /* outputs read back */

static infd_status held_submit(void *state, infd_request *req, infd_error *err)
{
    (void)state;
    (void)err;
    held_req = req;
    return INFD_STATUS_OK;
}

static infd_status held_load(void *user, infd_kind_model *km, void **state, infd_error *err)
{
    (void)user;
    *state = NULL;
    int64_t one = 1, four = 4, any = -1, two = 2;
    infd_status st = infd_kind_model_add_input(km, "IN", INFD_DTYPE_FP32, 1, &one, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "F", INFD_DTYPE_FP32, 1, &four, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "V", INFD_DTYPE_FP32, 1, &any, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "B", INFD_DTYPE_BYTES, 1, &one, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "I", INFD_DTYPE_INT64, 1, &two, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_set_submit(km, held_submit, err);
    if (st == INFD_STATUS_OK)
        infd_kind_model_set_lends_outputs(km);
    return st;
}

static void held_unload(void *state)
{
    (void)state;
}

static infd_status held_run(void *state, int instance, infd_batch *batch, infd_error *err)
{
    (void)state;
    (void)instance;
    (void)batch;
    (void)err;
    abort(); /* requests are taken at submit */
}

static const infd_model_kind held_kind = {
    .name = "held",
    .platform = "fuzz_held",
    .load = held_load,
    .unload = held_unload,
    .run_batch = held_run,
};

static void give_back(void *user)
{
    (void)user;
    given_back++;
}

static void on_done(void *user, infd_request *req, infd_status status, const char *message)
{
    (void)req;
    (void)status;
    (void)message;
    *(int *)user = 1;
}

/* The RESULT's outputs on a request of "held" (rows 2), as the router
 * sets them: small frames copied, large ones lent. */
static void result(const Infd__Cluster__LinkMessage *h, const infd_data_segment *frames, int n)
{
    const Inference__ModelInferResponse *resp = h->response;
    if (!resp || (int)resp->n_outputs != n)
        return;
    infd_model *m = NULL;
    infd_request *req = NULL;
    infd_error err;
    infd_error_clear(&err);
    float in[2] = { 1, 2 };
    int64_t shape[2] = { 2, 1 };
    int done = 0;
    if (infd_server_model_acquire(server, "held", -1, &m, &err) != INFD_STATUS_OK ||
        infd_request_create(m, &req, &err) != INFD_STATUS_OK ||
        infd_request_add_input(req, "IN", INFD_DTYPE_FP32, shape, 2, in, sizeof(in), &err) !=
            INFD_STATUS_OK ||
        infd_infer_async(req, on_done, &done, &err) != INFD_STATUS_OK || held_req != req)
        abort();
    held_req = NULL;
    lent = given_back = 0;
    for (int k = 0; k < n; k++) {
        int j;
        infd_tensor t;
        infd_status st =
            cluster_link_output(m, resp, (size_t)k, frames[k].data, frames[k].nbytes, &j, &t, &err);
        if (st == INFD_STATUS_OK && t.nbytes >= 16) {
            lent++;
            st = infd_request_output_adopt(req, j, &t, give_back, NULL, &err);
        } else if (st == INFD_STATUS_OK) {
            st = infd_request_output_set(req, j, &t, &err);
        }
        if (st != INFD_STATUS_OK) {
            if (!err.msg[0])
                abort(); /* an error always says what */
            infd_request_fail(req, st, err.msg);
            break;
        }
    }
    infd_request_done(req);
    if (!done)
        abort();
    /* Read every output back, as a frontend would. */
    for (int i = 0; i < infd_request_n_outputs(req); i++) {
        infd_tensor t;
        if (infd_request_output(req, i, NULL, &t) == INFD_STATUS_OK)
            for (size_t b = 0; b < t.nbytes; b++)
                sink += ((const uint8_t *)t.data)[b];
    }
    infd_request_destroy(req);
    infd_model_release(m);
    if (given_back != lent)
        abort(); /* every lent frame is given back exactly once */
}

static void setup(void)
{
    infd_error err;
    if (infd_model_kind_register(&held_kind, &err) != INFD_STATUS_OK)
        abort();
    static const fuzz_model models[] = { { "sm", "softmax", 4 },
                                         { "sm_flat", "softmax", 0 },
                                         { "held", "held", 4 } };
    server = fuzz_server_create("fuzz_link", models, 3, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!server)
        setup();
    if (size < 1)
        return 0;
    int n = data[0] % 10;
    size_t at = 1 + 4 * (size_t)n;
    if (n == 0 || at > size)
        return 0;
    const void *frame[10];
    size_t len[10];
    infd_data_segment seg[10];
    for (int i = 0; i < n; i++) {
        const uint8_t *p = data + 1 + 4 * i;
        size_t want = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
        len[i] = want < size - at ? want : size - at;
        frame[i] = data + at;
        seg[i] = (infd_data_segment){ frame[i], len[i] };
        at += len[i];
    }
    Infd__Cluster__LinkMessage *h = infd__cluster__link_message__unpack(NULL, len[0], frame[0]);
    if (!h)
        return 0;
    if (h->kind == INFD__CLUSTER__LINK_MESSAGE__KIND__INFER && h->request) {
        infd_model *m = NULL;
        infd_request *req = NULL;
        infd_error err;
        infd_error_clear(&err);
        if (cluster_link_request(server, h, seg + 1, n - 1, &m, &req, &err) != INFD_STATUS_OK &&
            !err.msg[0])
            abort(); /* an error always says what */
        infd_request_destroy(req);
        if (m)
            infd_model_release(m);
    }
    if (h->kind == INFD__CLUSTER__LINK_MESSAGE__KIND__RESULT)
        result(h, seg + 1, n - 1);
    infd__cluster__link_message__free_unpacked(h, NULL);
    return 0;
}
