/*
 * Unit tests for the runtime through the public server API: repository
 * loading and config completion, synchronous and asynchronous inference,
 * dynamic batching, queue timeouts and limits, explicit load/unload, broken
 * models beside good ones, and allocation-free steady-state inference.
 *
 * The test writes its own repositories under /tmp with a Triton `simple`
 * style model (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, inputs
 * [batch, 16] FP32) built with protobuf-c.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "infd/infd.h"
#include "model_config.pb-c.h"
#include "onnx_model.h"
#include "test_repo.h"
#include "test.h"

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    ASSERT_TRUE(fwrite(data, 1, n, f) == n);
    fclose(f);
}

/* One add_sub inference of `rows` rows; checks both outputs. */
/* Checks inside helpers that return a status (the ASSERT_ macros return
 * void): print and report INTERNAL. */
#define CHECK_TRUE(c)                                                        \
    do {                                                                     \
        if (!(c)) {                                                          \
            printf("    %s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
            return INFD_STATUS_INTERNAL;                                     \
        }                                                                    \
    } while (0)
#define CHECK_ST(a, b) CHECK_TRUE((a) == (b))
#define CHECK_EQ(a, b) CHECK_TRUE((a) == (b))

static infd_status infer_add_sub(infd_server *s, const char *name, int rows, float base,
                                 infd_error *err)
{
    infd_model *m = NULL;
    infd_status st = infd_server_model_acquire(s, name, -1, &m, err);
    if (st != INFD_STATUS_OK)
        return st;
    float a[8 * 16], b[8 * 16];
    for (int i = 0; i < rows * 16; i++) {
        a[i] = base + (float)i;
        b[i] = (float)(i % 5);
    }
    int64_t shape[2] = { rows, 16 };
    infd_request *r = NULL;
    CHECK_ST(infd_request_create(m, &r, err), INFD_STATUS_OK);
    CHECK_ST(infd_request_add_input(r, "INPUT0", INFD_DTYPE_FP32, shape, 2, a,
                                    sizeof(float) * 16 * (size_t)rows, err),
             INFD_STATUS_OK);
    CHECK_ST(infd_request_add_input(r, "INPUT1", INFD_DTYPE_FP32, shape, 2, b,
                                    sizeof(float) * 16 * (size_t)rows, err),
             INFD_STATUS_OK);
    st = infd_infer(r, err);
    if (st == INFD_STATUS_OK) {
        CHECK_EQ(infd_request_n_outputs(r), 2);
        const char *on = NULL;
        infd_tensor t0, t1;
        CHECK_ST(infd_request_output(r, 0, &on, &t0), INFD_STATUS_OK);
        CHECK_TRUE(strcmp(on, "OUTPUT0") == 0);
        CHECK_ST(infd_request_output(r, 1, &on, &t1), INFD_STATUS_OK);
        CHECK_EQ(t0.shape.dims[0], rows);
        for (int i = 0; i < rows * 16; i++) {
            CHECK_TRUE(((float *)t0.data)[i] == a[i] + b[i]);
            CHECK_TRUE(((float *)t1.data)[i] == a[i] - b[i]);
        }
    }
    infd_request_destroy(r);
    infd_model_release(m);
    return st;
}

/* An input in pieces (infd_request_add_input_segments) is gathered in order,
 * empty pieces included; sizes that do not add up are refused. */
static void test_segmented_inputs(void)
{
    const char *repo = test_repo_new("server", "segs");
    test_add_sub(repo, "add_sub", true, NULL);
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    infd_error err = { 0 };
    infd_model *m = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "add_sub", -1, &m, &err), INFD_STATUS_OK);
    float a[3 * 16], b[3 * 16];
    for (int i = 0; i < 3 * 16; i++) {
        a[i] = 0.5f * (float)i;
        b[i] = (float)(i % 7);
    }
    int64_t shape[2] = { 3, 16 };
    infd_data_segment segs[4] = {
        { a, 5 * sizeof(float) },
        { NULL, 0 },
        { a + 5, 30 * sizeof(float) },
        { a + 35, 13 * sizeof(float) },
    };
    infd_request *r = NULL;
    ASSERT_STATUS(infd_request_create(m, &r, &err), INFD_STATUS_OK);
    ASSERT_STATUS(
        infd_request_add_input_segments(r, "INPUT0", INFD_DTYPE_FP32, shape, 2, segs, 4, &err),
        INFD_STATUS_OK);
    ASSERT_STATUS(
        infd_request_add_input(r, "INPUT1", INFD_DTYPE_FP32, shape, 2, b, sizeof(b), &err),
        INFD_STATUS_OK);
    ASSERT_STATUS(infd_infer(r, &err), INFD_STATUS_OK);
    const char *on = NULL;
    infd_tensor t0, t1;
    ASSERT_STATUS(infd_request_output(r, 0, &on, &t0), INFD_STATUS_OK);
    ASSERT_STATUS(infd_request_output(r, 1, &on, &t1), INFD_STATUS_OK);
    for (int i = 0; i < 3 * 16; i++) {
        ASSERT_TRUE(((float *)t0.data)[i] == a[i] + b[i]);
        ASSERT_TRUE(((float *)t1.data)[i] == a[i] - b[i]);
    }
    infd_request_destroy(r);
    /* One byte short in all, and a piece with bytes but no memory. */
    ASSERT_STATUS(infd_request_create(m, &r, &err), INFD_STATUS_OK);
    segs[3].nbytes -= 1;
    ASSERT_STATUS(
        infd_request_add_input_segments(r, "INPUT0", INFD_DTYPE_FP32, shape, 2, segs, 4, &err),
        INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "191 bytes");
    segs[3].nbytes += 1;
    segs[1].nbytes = 4;
    segs[0].nbytes -= 4;
    ASSERT_STATUS(
        infd_request_add_input_segments(r, "INPUT0", INFD_DTYPE_FP32, shape, 2, segs, 4, &err),
        INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "no data");
    ASSERT_STATUS(
        infd_request_add_input_segments(r, "INPUT0", INFD_DTYPE_FP32, shape, 2, NULL, 2, &err),
        INFD_STATUS_INVALID_ARGUMENT);
    /* Sizes that wrap around to the right total are refused. */
    infd_data_segment wrap[2] = { { a, SIZE_MAX }, { a, 3 * 16 * sizeof(float) + 1 } };
    ASSERT_STATUS(
        infd_request_add_input_segments(r, "INPUT0", INFD_DTYPE_FP32, shape, 2, wrap, 2, &err),
        INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "overflow");
    infd_request_destroy(r);
    infd_model_release(m);
    infd_server_destroy(s);
}

static void test_autocomplete_and_infer(void)
{
    const char *repo = test_repo_new("server", "auto");
    test_add_sub(repo, "add_sub", true, NULL);
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    ASSERT_TRUE(infd_server_is_ready(s));
    infd_error err = { 0 };
    ASSERT_STATUS(infer_add_sub(s, "add_sub", 1, 1.0f, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infer_add_sub(s, "add_sub", 3, 2.0f, &err), INFD_STATUS_OK);
    infd_model *m = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "add_sub", -1, &m, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(infd_model_max_batch_size(m), 4); /* Triton's default */
    ASSERT_EQ_INT(infd_model_n_inputs(m), 2);
    infd_model_io io;
    ASSERT_STATUS(infd_model_output(m, 1, &io), INFD_STATUS_OK);
    ASSERT_STR_EQ(io.name, "OUTPUT1");
    ASSERT_EQ_INT(io.rank, 1);
    ASSERT_EQ_I64(io.dims[0], 16);
    /* A batch above max_batch_size is refused with the limit named. */
    infd_request *r = NULL;
    float buf[5 * 16] = { 0 };
    int64_t shape[2] = { 5, 16 };
    ASSERT_STATUS(infd_request_create(m, &r, &err), INFD_STATUS_OK);
    ASSERT_STATUS(
        infd_request_add_input(r, "INPUT0", INFD_DTYPE_FP32, shape, 2, buf, sizeof(buf), &err),
        INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "1..4");
    shape[0] = 1;
    ASSERT_STATUS(infd_request_add_input(r, "INPUT0", INFD_DTYPE_FP16, shape, 2, buf, 64, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "FP16");
    ASSERT_STATUS(infd_request_add_input(r, "INPUT0", INFD_DTYPE_FP32, shape, 2, buf, 64, &err),
                  INFD_STATUS_OK);
    /* INPUT1 missing. */
    ASSERT_STATUS(infd_infer(r, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "INPUT1");
    infd_request_destroy(r);
    char *json = NULL;
    size_t n = 0;
    ASSERT_STATUS(infd_model_config_json(m, &json, &n, &err), INFD_STATUS_OK);
    ASSERT_STR_HAS(json, "\"max_batch_size\":4");
    ASSERT_STR_HAS(json, "dynamic_batching");
    ASSERT_STR_HAS(json, "TYPE_FP32");
    infd_free(json);
    /* The same config as a serialized inference.ModelConfig. */
    void *pb = NULL;
    ASSERT_STATUS(infd_model_config_pb(m, &pb, &n, &err), INFD_STATUS_OK);
    Inference__ModelConfig *cfg = inference__model_config__unpack(NULL, n, pb);
    ASSERT_TRUE(cfg != NULL);
    ASSERT_EQ_U64((uint64_t)cfg->max_batch_size, 4);
    ASSERT_EQ_U64(cfg->n_input, 2);
    ASSERT_TRUE(cfg->scheduling_choice_case ==
                INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_DYNAMIC_BATCHING);
    inference__model_config__free_unpacked(cfg, NULL);
    infd_free(pb);
    infd_model_stats st;
    infd_model_get_stats(m, &st);
    ASSERT_EQ_U64(st.success_count, 2);
    ASSERT_EQ_U64(st.inference_count, 4);
    ASSERT_GE_U64(st.failure_count, 1);
    infd_model_release(m);
    infd_server_destroy(s);
}

typedef struct async_ctx {
    pthread_mutex_t mu;
    int done, ok, timed_out;
} async_ctx;

static void on_done(void *user, infd_request *req, infd_status status, const char *message)
{
    (void)req;
    (void)message;
    async_ctx *c = user;
    pthread_mutex_lock(&c->mu);
    c->done++;
    c->ok += status == INFD_STATUS_OK;
    c->timed_out += status == INFD_STATUS_DEADLINE_EXCEEDED;
    pthread_mutex_unlock(&c->mu);
}

static void wait_done(async_ctx *c, int n)
{
    for (int i = 0; i < 20000; i++) {
        pthread_mutex_lock(&c->mu);
        int d = c->done;
        pthread_mutex_unlock(&c->mu);
        if (d >= n)
            return;
        infd_clock_sleep_us(1000);
    }
    ASSERT_TRUE(!"requests did not complete");
}

static void test_dynamic_batching_forms_batches(void)
{
    const char *repo = test_repo_new("server", "batch");
    test_add_sub(repo, "add_sub", true,
                 "max_batch_size: 8\n"
                 "dynamic_batching { max_queue_delay_microseconds: 200000 }\n");
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    infd_error err = { 0 };
    infd_model *m = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "add_sub", -1, &m, &err), INFD_STATUS_OK);
    async_ctx c = { .mu = PTHREAD_MUTEX_INITIALIZER };
    infd_request *reqs[8];
    static float data[8][2][16];
    int64_t shape[2] = { 1, 16 };
    for (int k = 0; k < 8; k++) {
        for (int i = 0; i < 16; i++) {
            data[k][0][i] = (float)(k * 100 + i);
            data[k][1][i] = 1.0f;
        }
        ASSERT_STATUS(infd_request_create(m, &reqs[k], &err), INFD_STATUS_OK);
        ASSERT_STATUS(infd_request_add_input(reqs[k], "INPUT0", INFD_DTYPE_FP32, shape, 2,
                                             data[k][0], 64, &err),
                      INFD_STATUS_OK);
        ASSERT_STATUS(infd_request_add_input(reqs[k], "INPUT1", INFD_DTYPE_FP32, shape, 2,
                                             data[k][1], 64, &err),
                      INFD_STATUS_OK);
        ASSERT_STATUS(infd_request_add_output(reqs[k], "OUTPUT1", &err), INFD_STATUS_OK);
    }
    for (int k = 0; k < 8; k++)
        ASSERT_STATUS(infd_infer_async(reqs[k], on_done, &c, &err), INFD_STATUS_OK);
    wait_done(&c, 8);
    ASSERT_EQ_INT(c.ok, 8);
    for (int k = 0; k < 8; k++) {
        /* Only OUTPUT1 was asked for; rows scattered back to their request. */
        ASSERT_EQ_INT(infd_request_n_outputs(reqs[k]), 1);
        infd_tensor t;
        const char *on;
        ASSERT_STATUS(infd_request_output(reqs[k], 0, &on, &t), INFD_STATUS_OK);
        ASSERT_STR_EQ(on, "OUTPUT1");
        for (int i = 0; i < 16; i++)
            ASSERT_TRUE(((float *)t.data)[i] == (float)(k * 100 + i) - 1.0f);
        infd_request_destroy(reqs[k]);
    }
    infd_model_stats st;
    infd_model_get_stats(m, &st);
    ASSERT_EQ_U64(st.success_count, 8);
    ASSERT_EQ_U64(st.inference_count, 8);
    /* All 8 were queued well within the 200 ms delay: one full batch. */
    ASSERT_EQ_U64(st.batch_exec_count[8], 1);
    ASSERT_EQ_U64(st.execution_count, 1);
    infd_model_release(m);
    infd_server_destroy(s);
}

/* Batches of 1 MB or more are gathered by the model's copy pool in 512 KB
 * chunks (INFD_GATHER_THREADS forces one on CPU instances): requests of 2
 * and 3 rows of 256 KB each, inputs in pieces that straddle the chunks,
 * come back exact, and met in one batch. */
static void test_parallel_gather(void)
{
    enum { W = 65536, N = 5 };
    const char *repo = test_repo_new("server", "pgather");
    const onnx_model_spec big = {
        .graph_name = "add_sub",
        .width = W,
        .inputs = { "INPUT0", "INPUT1" },
        .outputs = { "OUTPUT0", "OUTPUT1" },
        .nodes = { { "Add", "add", { "INPUT0", "INPUT1" }, "OUTPUT0" },
                   { "Sub", "sub", { "INPUT0", "INPUT1" }, "OUTPUT1" } },
    };
    ASSERT_TRUE(onnx_model_add(repo, "big", &big,
                               "max_batch_size: 16\n"
                               "dynamic_batching { max_queue_delay_microseconds: 200000 }\n"));
    setenv("INFD_GATHER_THREADS", "3", 1);
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    unsetenv("INFD_GATHER_THREADS");
    ASSERT_TRUE(s != NULL);
    infd_error err = { 0 };
    infd_model *m = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "big", -1, &m, &err), INFD_STATUS_OK);
    static float a[N][3 * W], b[N][3 * W];
    infd_data_segment segs[N][3];
    infd_request *reqs[N];
    async_ctx c = { .mu = PTHREAD_MUTEX_INITIALIZER };
    for (int k = 0; k < N; k++) {
        int rows = 2 + k % 2;
        size_t n = (size_t)rows * W;
        for (size_t i = 0; i < n; i++) {
            a[k][i] = (float)(k * 1000003 + (int)i) * 0.25f;
            b[k][i] = (float)((int)i % 97);
        }
        /* 3 pieces: 1 float, then up to a cut inside the second row, then
         * the rest. */
        size_t cut = (size_t)W + 12345 + (size_t)k;
        segs[k][0] = (infd_data_segment){ a[k], sizeof(float) };
        segs[k][1] = (infd_data_segment){ a[k] + 1, (cut - 1) * sizeof(float) };
        segs[k][2] = (infd_data_segment){ a[k] + cut, (n - cut) * sizeof(float) };
        int64_t shape[2] = { rows, W };
        ASSERT_STATUS(infd_request_create(m, &reqs[k], &err), INFD_STATUS_OK);
        ASSERT_STATUS(infd_request_add_input_segments(reqs[k], "INPUT0", INFD_DTYPE_FP32, shape, 2,
                                                      segs[k], 3, &err),
                      INFD_STATUS_OK);
        ASSERT_STATUS(infd_request_add_input(reqs[k], "INPUT1", INFD_DTYPE_FP32, shape, 2, b[k],
                                             n * sizeof(float), &err),
                      INFD_STATUS_OK);
    }
    for (int k = 0; k < N; k++)
        ASSERT_STATUS(infd_infer_async(reqs[k], on_done, &c, &err), INFD_STATUS_OK);
    wait_done(&c, N);
    ASSERT_EQ_INT(c.ok, N);
    for (int k = 0; k < N; k++) {
        size_t n = (size_t)(2 + k % 2) * W;
        infd_tensor t0, t1;
        const char *on;
        ASSERT_STATUS(infd_request_output(reqs[k], 0, &on, &t0), INFD_STATUS_OK);
        ASSERT_STATUS(infd_request_output(reqs[k], 1, &on, &t1), INFD_STATUS_OK);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += ((float *)t0.data)[i] != a[k][i] + b[k][i] ||
                   ((float *)t1.data)[i] != a[k][i] - b[k][i];
        ASSERT_EQ_U64(bad, 0);
        infd_request_destroy(reqs[k]);
    }
    infd_model_stats st;
    infd_model_get_stats(m, &st);
    /* 12 rows queued well within the delay: one batch (2 x 3 MB, gathered
     * in 6 chunks per input). */
    ASSERT_EQ_U64(st.execution_count, 1);
    ASSERT_EQ_U64(st.inference_count, 12);
    infd_model_release(m);
    infd_server_destroy(s);
}

static void test_queue_timeout_and_limit(void)
{
    const char *repo = test_repo_new("server", "queue");
    test_add_sub(repo, "add_sub", true,
                 "max_batch_size: 8\n"
                 "dynamic_batching {\n"
                 "  max_queue_delay_microseconds: 300000\n"
                 "  default_queue_policy { default_timeout_microseconds: 1000 max_queue_size: 2 }\n"
                 "}\n");
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    infd_error err = { 0 };
    infd_model *m = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "add_sub", -1, &m, &err), INFD_STATUS_OK);
    async_ctx c = { .mu = PTHREAD_MUTEX_INITIALIZER };
    static float zeros[16];
    int64_t shape[2] = { 1, 16 };
    infd_request *reqs[3];
    for (int k = 0; k < 3; k++) {
        ASSERT_STATUS(infd_request_create(m, &reqs[k], &err), INFD_STATUS_OK);
        ASSERT_STATUS(
            infd_request_add_input(reqs[k], "INPUT0", INFD_DTYPE_FP32, shape, 2, zeros, 64, &err),
            INFD_STATUS_OK);
        ASSERT_STATUS(
            infd_request_add_input(reqs[k], "INPUT1", INFD_DTYPE_FP32, shape, 2, zeros, 64, &err),
            INFD_STATUS_OK);
    }
    ASSERT_STATUS(infd_infer_async(reqs[0], on_done, &c, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_infer_async(reqs[1], on_done, &c, &err), INFD_STATUS_OK);
    /* The third finds the queue full. */
    ASSERT_STATUS(infd_infer_async(reqs[2], on_done, &c, &err), INFD_STATUS_RESOURCE_EXHAUSTED);
    ASSERT_STR_HAS(err.msg, "max_queue_size 2");
    /* The batcher waits 300 ms for more rows; the 1 ms timeout passes first. */
    wait_done(&c, 2);
    ASSERT_EQ_INT(c.timed_out, 2);
    for (int k = 0; k < 3; k++)
        infd_request_destroy(reqs[k]);
    infd_model_stats st;
    infd_model_get_stats(m, &st);
    ASSERT_EQ_U64(st.execution_count, 0);
    ASSERT_EQ_U64(st.failure_count, 3);
    infd_model_release(m);
    infd_server_destroy(s);
}

static void test_broken_model_beside_good_one(void)
{
    const char *repo = test_repo_new("server", "broken");
    test_add_sub(repo, "good", true, NULL);
    test_add_sub(repo, "bad_config", true, "max_batch_size: 8\ninput [ { name: \"NOPE\" } ]\n");
    test_add_sub(repo, "fixed_batch", false, "max_batch_size: 4\n");
    char path[512];
    snprintf(path, sizeof(path), "%s/garbage/1", repo);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/garbage", repo);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/garbage/1", repo);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/garbage/1/model.onnx", repo);
    write_file(path, "not a model", 11);
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    infd_error err = { 0 };
    ASSERT_STATUS(infer_add_sub(s, "good", 2, 0.0f, &err), INFD_STATUS_OK);
    infd_model *m = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "bad_config", -1, &m, &err),
                  INFD_STATUS_UNAVAILABLE);
    ASSERT_STR_HAS(err.msg, "NOPE");
    ASSERT_STATUS(infd_server_model_acquire(s, "fixed_batch", -1, &m, &err),
                  INFD_STATUS_UNAVAILABLE);
    ASSERT_STR_HAS(err.msg, "fixed first dim");
    ASSERT_STATUS(infd_server_model_acquire(s, "garbage", -1, &m, &err), INFD_STATUS_UNAVAILABLE);
    ASSERT_STATUS(infd_server_model_acquire(s, "nothing", -1, &m, &err), INFD_STATUS_NOT_FOUND);
    infd_repository_entry *rows = NULL;
    int n = 0;
    ASSERT_STATUS(infd_server_repository_index(s, false, &rows, &n, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(n, 4);
    ASSERT_STR_EQ(rows[0].name, "bad_config");
    ASSERT_EQ_INT(rows[0].state, INFD_MODEL_STATE_UNAVAILABLE);
    ASSERT_STR_HAS(rows[0].reason, "config.pbtxt");
    ASSERT_STR_EQ(rows[3].name, "good");
    ASSERT_EQ_INT(rows[3].state, INFD_MODEL_STATE_READY);
    ASSERT_EQ_I64(rows[3].version, 1);
    infd_free(rows);
    ASSERT_STATUS(infd_server_repository_index(s, true, &rows, &n, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(n, 1);
    infd_free(rows);
    /* Load/unload need explicit mode. */
    ASSERT_STATUS(infd_server_unload_model(s, "good", &err), INFD_STATUS_UNAVAILABLE);
    ASSERT_STR_HAS(err.msg, "explicit");
    infd_server_destroy(s);
}

static void test_explicit_load_unload(void)
{
    const char *repo = test_repo_new("server", "explicit");
    test_add_sub(repo, "a", true, NULL);
    test_add_sub(repo, "b", true, NULL);
    const char *load[] = { "a" };
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_EXPLICIT, load, 1);
    ASSERT_TRUE(s != NULL);
    infd_error err = { 0 };
    ASSERT_STATUS(infer_add_sub(s, "a", 1, 0.0f, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infer_add_sub(s, "b", 1, 0.0f, &err), INFD_STATUS_UNAVAILABLE);
    ASSERT_STATUS(infd_server_load_model(s, "b", &err), INFD_STATUS_OK);
    ASSERT_STATUS(infer_add_sub(s, "b", 1, 0.0f, &err), INFD_STATUS_OK);
    /* A handle held across the unload stays valid; new requests are refused. */
    infd_model *held = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "b", -1, &held, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_server_unload_model(s, "b", &err), INFD_STATUS_OK);
    ASSERT_STATUS(infer_add_sub(s, "b", 1, 0.0f, &err), INFD_STATUS_UNAVAILABLE);
    ASSERT_STR_HAS(err.msg, "unloaded");
    ASSERT_TRUE(!infd_model_is_ready(held));
    ASSERT_STR_EQ(infd_model_name(held), "b");
    infd_request *r = NULL;
    ASSERT_STATUS(infd_request_create(held, &r, &err), INFD_STATUS_OK);
    float z[16] = { 0 };
    int64_t shape[2] = { 1, 16 };
    ASSERT_STATUS(infd_request_add_input(r, "INPUT0", INFD_DTYPE_FP32, shape, 2, z, 64, &err),
                  INFD_STATUS_OK);
    ASSERT_STATUS(infd_request_add_input(r, "INPUT1", INFD_DTYPE_FP32, shape, 2, z, 64, &err),
                  INFD_STATUS_OK);
    ASSERT_STATUS(infd_infer(r, &err), INFD_STATUS_UNAVAILABLE);
    infd_request_destroy(r);
    infd_model_release(held);
    ASSERT_STATUS(infd_server_load_model(s, "nothing", &err), INFD_STATUS_NOT_FOUND);
    ASSERT_STATUS(infd_server_load_model(s, "../etc", &err), INFD_STATUS_INVALID_ARGUMENT);
    /* Reload while serving. */
    ASSERT_STATUS(infd_server_load_model(s, "a", &err), INFD_STATUS_OK);
    ASSERT_STATUS(infer_add_sub(s, "a", 2, 0.0f, &err), INFD_STATUS_OK);
    /* A reload that fails (a broken config, then a broken model file)
     * leaves the loaded version serving, as in Triton. */
    char path[512];
    snprintf(path, sizeof(path), "%s/a/config.pbtxt", repo);
    write_file(path, "max_batch_size: [\n", 18);
    ASSERT_STATUS(infd_server_load_model(s, "a", &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STATUS(infer_add_sub(s, "a", 3, 0.0f, &err), INFD_STATUS_OK);
    unlink(path);
    snprintf(path, sizeof(path), "%s/a/1/model.onnx", repo);
    write_file(path, "not onnx", 8);
    ASSERT_TRUE(infd_server_load_model(s, "a", &err) != INFD_STATUS_OK);
    ASSERT_STATUS(infer_add_sub(s, "a", 2, 0.0f, &err), INFD_STATUS_OK);
    infd_server_destroy(s);
}

static void test_steady_state_allocates_nothing(void)
{
    const char *repo = test_repo_new("server", "alloc");
    test_add_sub(repo, "add_sub", true, "max_batch_size: 8\ndynamic_batching { }\n");
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    infd_error err = { 0 };
    for (int i = 0; i < 5; i++)
        ASSERT_STATUS(infer_add_sub(s, "add_sub", 1 + i % 4, 0.0f, &err), INFD_STATUS_OK);
    infd_alloc_stats a = infd_alloc_get_stats();
    for (int i = 0; i < 200; i++)
        ASSERT_STATUS(infer_add_sub(s, "add_sub", 1 + i % 4, 0.0f, &err), INFD_STATUS_OK);
    infd_alloc_stats b = infd_alloc_get_stats();
    ASSERT_EQ_U64(b.n_allocs - a.n_allocs, 0);
    infd_server_destroy(s);
}

static void test_drain_completes_in_flight(void)
{
    const char *repo = test_repo_new("server", "drain");
    test_add_sub(repo, "add_sub", true,
                 "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 100000 }\n");
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    infd_error err = { 0 };
    infd_model *m = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "add_sub", -1, &m, &err), INFD_STATUS_OK);
    async_ctx c = { .mu = PTHREAD_MUTEX_INITIALIZER };
    static float zeros[16];
    int64_t shape[2] = { 1, 16 };
    infd_request *reqs[4];
    for (int k = 0; k < 4; k++) {
        ASSERT_STATUS(infd_request_create(m, &reqs[k], &err), INFD_STATUS_OK);
        ASSERT_STATUS(
            infd_request_add_input(reqs[k], "INPUT0", INFD_DTYPE_FP32, shape, 2, zeros, 64, &err),
            INFD_STATUS_OK);
        ASSERT_STATUS(
            infd_request_add_input(reqs[k], "INPUT1", INFD_DTYPE_FP32, shape, 2, zeros, 64, &err),
            INFD_STATUS_OK);
    }
    for (int k = 0; k < 3; k++)
        ASSERT_STATUS(infd_infer_async(reqs[k], on_done, &c, &err), INFD_STATUS_OK);
    infd_server_drain(s); /* returns once the three completed */
    ASSERT_EQ_INT(c.done, 3);
    ASSERT_EQ_INT(c.ok, 3);
    ASSERT_FALSE(infd_server_is_live(s));
    ASSERT_STATUS(infd_infer_async(reqs[3], on_done, &c, &err), INFD_STATUS_UNAVAILABLE);
    ASSERT_STR_HAS(err.msg, "shutting down");
    for (int k = 0; k < 4; k++)
        infd_request_destroy(reqs[k]);
    infd_model_release(m);
    infd_server_destroy(s);
}

typedef struct stress_arg {
    infd_server *s;
    int id;
    int failures;
} stress_arg;

static void *stress_main(void *p)
{
    stress_arg *a = p;
    infd_error err = { 0 };
    for (int i = 0; i < 150; i++)
        if (infer_add_sub(a->s, "add_sub", 1 + (i + a->id) % 8, (float)(a->id * 1000 + i), &err) !=
            INFD_STATUS_OK)
            a->failures++;
    return NULL;
}

/* Four client threads against two instances: every row comes back to the
 * request it belongs to (run under the tsan preset for races). */
static void test_concurrent_clients_two_instances(void)
{
    const char *repo = test_repo_new("server", "stress");
    test_add_sub(
        repo, "add_sub", true,
        "max_batch_size: 8\n"
        "dynamic_batching { max_queue_delay_microseconds: 100 preferred_batch_size: [ 4 ] }\n"
        "instance_group [ { count: 2 kind: KIND_CPU } ]\n");
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    pthread_t t[4];
    stress_arg args[4];
    for (int k = 0; k < 4; k++) {
        args[k] = (stress_arg){ .s = s, .id = k };
        ASSERT_TRUE(pthread_create(&t[k], NULL, stress_main, &args[k]) == 0);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(t[k], NULL);
        ASSERT_EQ_INT(args[k].failures, 0);
    }
    infd_model *m = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(infd_server_model_acquire(s, "add_sub", -1, &m, &err), INFD_STATUS_OK);
    infd_model_stats st;
    infd_model_get_stats(m, &st);
    ASSERT_EQ_U64(st.success_count, 600);
    ASSERT_LE_U64(st.execution_count, 600);
    infd_model_release(m);
    infd_server_destroy(s);
}

/* Poll mode's rescan (called directly rather than waiting for the timer):
 * a new folder loads, a changed config reloads, a removed folder unloads. */
static void test_poll_rescan(void)
{
    const char *repo = test_repo_new("server", "poll");
    test_add_sub(repo, "a", true, NULL);
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_POLL, NULL, 0);
    ASSERT_TRUE(s != NULL);
    infd_error err = { 0 };
    ASSERT_STATUS(infer_add_sub(s, "a", 1, 0.0f, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infer_add_sub(s, "b", 1, 0.0f, &err), INFD_STATUS_NOT_FOUND);
    test_add_sub(repo, "b", true, NULL);
    ASSERT_STATUS(infd_server_poll_repository(s, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infer_add_sub(s, "b", 1, 0.0f, &err), INFD_STATUS_OK);
    /* A changed config is picked up: max_batch_size 4 -> 2. */
    char path[512];
    snprintf(path, sizeof(path), "%s/b/config.pbtxt", repo);
    write_file(path, "max_batch_size: 2\n", 18);
    ASSERT_STATUS(infd_server_poll_repository(s, &err), INFD_STATUS_OK);
    infd_model *m = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "b", -1, &m, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(infd_model_max_batch_size(m), 2);
    infd_model_release(m);
    snprintf(path, sizeof(path), "%s/a", repo);
    test_rm_rf(path);
    ASSERT_STATUS(infd_server_poll_repository(s, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infer_add_sub(s, "a", 1, 0.0f, &err), INFD_STATUS_UNAVAILABLE);
    ASSERT_STATUS(infer_add_sub(s, "b", 2, 0.0f, &err), INFD_STATUS_OK);
    infd_server_destroy(s);
}

static void test_cleanup(void)
{
    test_rm_rf(test_repo_root);
}

TEST_MAIN(test_autocomplete_and_infer, test_segmented_inputs, test_parallel_gather,
          test_dynamic_batching_forms_batches, test_queue_timeout_and_limit,
          test_broken_model_beside_good_one, test_explicit_load_unload,
          test_steady_state_allocates_nothing, test_drain_completes_in_flight,
          test_concurrent_clients_two_instances, test_poll_rescan, test_cleanup)
