/*
 * Unit tests for instance groups on GPUs (issue #6): KIND_GPU, KIND_AUTO
 * and KIND_CPU through the public server API, the `gpus` field, the
 * precision of GPU plans read from the config, and the engine's
 * infd_plan_options.device_index.
 *
 * One binary for both kinds of machine. Without a usable CUDA device (CI,
 * the 2-core dev box) it checks that a KIND_GPU model is UNAVAILABLE with
 * the reason while the other models of the repository serve, that KIND_AUTO
 * resolves to KIND_CPU and serves, and the config errors. With one (the
 * H100) it also checks that a KIND_GPU model with 2 instances on GPU 0
 * serves the same outputs as a KIND_CPU copy, that dynamic batching forms
 * batches on it, that KIND_AUTO resolves to KIND_GPU and falls back to the
 * CPU for an op the CUDA backend lacks, and that a GPU past the last one is
 * refused. Each test prints which of the two it ran.
 *
 * Models are the add_sub of tests/unit/onnx_model.h (OUTPUT0 = INPUT0 +
 * INPUT1, OUTPUT1 = INPUT0 - INPUT1, [batch, 16] FP32): FP32 add and
 * subtract are exact on both backends, so outputs compare bit for bit.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "infd/engine.h"
#include "infd/infd.h"
#include "onnx_model.h"
#include "test_repo.h"
#include "test.h"

static int g_gpus = -1; /* usable CUDA devices */
static char g_why[512]; /* why there are none */

static int gpus(void)
{
    if (g_gpus < 0) {
        infd_error err = { 0 };
        g_gpus = infd_engine_device_count(INFD_DEVICE_CUDA, &err);
        snprintf(g_why, sizeof(g_why), "%s", err.msg);
        if (g_gpus > 0) {
            /* A GPU the driver reports but the CUDA backend cannot use
             * (no cuDNN 9, say) counts as none, as it does for KIND_AUTO. */
            infd_plan_options o;
            infd_plan_options_init(&o);
            o.device = INFD_DEVICE_CUDA;
            o.device_index = g_gpus; /* past the last: fails after the availability check */
            infd_plan *p = NULL;
            infd_status st = infd_plan_create("/nonexistent.onnx", &o, &p, &err);
            if (st == INFD_STATUS_UNAVAILABLE) {
                g_gpus = 0;
                snprintf(g_why, sizeof(g_why), "%s", err.msg);
            }
        }
        printf("    %d usable CUDA device(s)%s%s\n", g_gpus, g_gpus ? "" : ": ",
               g_gpus ? "" : g_why);
    }
    return g_gpus;
}

/* The repository index row of `name`: its state and reason. */
static infd_model_state model_state(infd_server *s, const char *name, char *reason, size_t n)
{
    infd_repository_entry *rows = NULL;
    int n_rows = 0;
    infd_error err = { 0 };
    infd_model_state state = INFD_MODEL_STATE_UNKNOWN;
    reason[0] = '\0';
    if (infd_server_repository_index(s, false, &rows, &n_rows, &err) != INFD_STATUS_OK)
        return state;
    for (int i = 0; i < n_rows; i++)
        if (strcmp(rows[i].name, name) == 0) {
            state = rows[i].state;
            snprintf(reason, n, "%s", rows[i].reason);
        }
    infd_free(rows);
    return state;
}

/* The model's config JSON (free with infd_free), or NULL. */
static char *config_json(infd_server *s, const char *name)
{
    infd_model *m = NULL;
    infd_error err = { 0 };
    if (infd_server_model_acquire(s, name, -1, &m, &err) != INFD_STATUS_OK) {
        printf("    %s: %s\n", name, err.msg);
        return NULL;
    }
    char *json = NULL;
    size_t n = 0;
    if (infd_model_config_json(m, &json, &n, &err) != INFD_STATUS_OK)
        json = NULL;
    infd_model_release(m);
    return json;
}

/* One add_sub inference of `rows` rows; checks both outputs exactly. */
static bool infer_ok(infd_server *s, const char *name, int rows, float base)
{
    infd_model *m = NULL;
    infd_error err = { 0 };
    if (infd_server_model_acquire(s, name, -1, &m, &err) != INFD_STATUS_OK) {
        printf("    %s: %s\n", name, err.msg);
        return false;
    }
    float a[8 * 16], b[8 * 16];
    for (int i = 0; i < rows * 16; i++) {
        a[i] = base + (float)i * 0.25f;
        b[i] = (float)(i % 7) - 3.0f;
    }
    int64_t shape[2] = { rows, 16 };
    size_t nb = sizeof(float) * 16 * (size_t)rows;
    infd_request *r = NULL;
    bool ok = infd_request_create(m, &r, &err) == INFD_STATUS_OK &&
              infd_request_add_input(r, "INPUT0", INFD_DTYPE_FP32, shape, 2, a, nb, &err) ==
                  INFD_STATUS_OK &&
              infd_request_add_input(r, "INPUT1", INFD_DTYPE_FP32, shape, 2, b, nb, &err) ==
                  INFD_STATUS_OK &&
              infd_infer(r, &err) == INFD_STATUS_OK;
    if (!ok)
        printf("    %s: %s\n", name, err.msg);
    infd_tensor t0, t1;
    ok = ok && infd_request_n_outputs(r) == 2 &&
         infd_request_output(r, 0, NULL, &t0) == INFD_STATUS_OK &&
         infd_request_output(r, 1, NULL, &t1) == INFD_STATUS_OK;
    for (int i = 0; ok && i < rows * 16; i++) {
        if (((float *)t0.data)[i] != a[i] + b[i] || ((float *)t1.data)[i] != a[i] - b[i]) {
            printf("    %s: element %d: %g, %g; expected %g, %g\n", name, i,
                   (double)((float *)t0.data)[i], (double)((float *)t1.data)[i],
                   (double)(a[i] + b[i]), (double)(a[i] - b[i]));
            ok = false;
        }
    }
    infd_request_destroy(r);
    infd_model_release(m);
    return ok;
}

#define GPU_CONFIG(extra) \
    "max_batch_size: 8\n" \
    "dynamic_batching { max_queue_delay_microseconds: 20000 }\n" extra

/* Without a GPU: KIND_GPU is UNAVAILABLE with the reason, the others serve.
 * With one: every model serves, KIND_GPU and KIND_AUTO on the GPU. */
static void test_kinds_side_by_side(void)
{
    const char *repo = test_repo_new("gpu-instances", "kinds");
    test_add_sub(repo, "on_gpu", true,
                 GPU_CONFIG("instance_group [ { kind: KIND_GPU count: 2 } ]\n"));
    test_add_sub(repo, "on_cpu", true, GPU_CONFIG("instance_group [ { kind: KIND_CPU } ]\n"));
    test_add_sub(repo, "auto_kind", true, GPU_CONFIG("instance_group [ { kind: KIND_AUTO } ]\n"));
    test_add_sub(repo, "no_group", true, NULL);
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    if (!s)
        return;
    char reason[512];
    ASSERT_TRUE(infer_ok(s, "on_cpu", 3, 1.0f));
    ASSERT_TRUE(infer_ok(s, "auto_kind", 2, -5.0f));
    ASSERT_TRUE(infer_ok(s, "no_group", 1, 7.0f));
    char *json = config_json(s, "on_cpu");
    ASSERT_STR_HAS(json, "\"kind\":\"KIND_CPU\"");
    ASSERT_STR_HAS(json, "\"name\":\"on_cpu_0\"");
    infd_free(json);
    const char *resolved = gpus() > 0 ? "\"kind\":\"KIND_GPU\"" : "\"kind\":\"KIND_CPU\"";
    json = config_json(s, "auto_kind");
    ASSERT_STR_HAS(json, resolved);
    infd_free(json);
    json = config_json(s, "no_group"); /* Triton adds one KIND_AUTO group, then resolves it */
    ASSERT_STR_HAS(json, resolved);
    ASSERT_STR_HAS(json, "\"count\":1");
    infd_free(json);
    if (gpus() == 0) {
        printf("    no GPU: KIND_GPU must be UNAVAILABLE\n");
        ASSERT_EQ_INT(model_state(s, "on_gpu", reason, sizeof(reason)),
                      INFD_MODEL_STATE_UNAVAILABLE);
        ASSERT_STR_HAS(reason, "instance_group[0]: KIND_GPU, but no usable CUDA device: ");
        ASSERT_STR_HAS(reason, "config.pbtxt");
        ASSERT_FALSE(infer_ok(s, "on_gpu", 1, 0.0f));
    } else {
        printf("    %d GPU(s): KIND_GPU serves\n", gpus());
        ASSERT_EQ_INT(model_state(s, "on_gpu", reason, sizeof(reason)), INFD_MODEL_STATE_READY);
        ASSERT_TRUE(infer_ok(s, "on_gpu", 1, 0.5f));
        ASSERT_TRUE(infer_ok(s, "on_gpu", 8, -2.0f));
        ASSERT_TRUE(infer_ok(s, "on_gpu", 5, 3.0f)); /* runs on the batch-8 plan, padded */
        json = config_json(s, "on_gpu");
        ASSERT_STR_HAS(json, "\"kind\":\"KIND_GPU\"");
        ASSERT_STR_HAS(json, "\"count\":2");
        ASSERT_STR_HAS(json, "\"gpus\":[0");
        infd_free(json);
    }
    infd_server_destroy(s);
}

/* Config errors in `gpus` and the precision fields name the file and field;
 * a GPU past the last one names it and the count. */
static void test_config_errors(void)
{
    const char *repo = test_repo_new("gpu-instances", "errors");
    test_add_sub(repo, "good", true, NULL);
    test_add_sub(repo, "neg_gpu", true,
                 GPU_CONFIG("instance_group [ { kind: KIND_GPU gpus: [ 0, -1 ] } ]\n"));
    test_add_sub(repo, "dup_gpu", true,
                 GPU_CONFIG("instance_group [ { kind: KIND_GPU gpus: [ 0, 0 ] } ]\n"));
    test_add_sub(repo, "cpu_gpus", true,
                 GPU_CONFIG("instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]\n"));
    test_add_sub(repo, "far_gpu", true,
                 GPU_CONFIG("instance_group [ { kind: KIND_GPU gpus: [ 5 ] } ]\n"));
    test_add_sub(repo, "auto_far_gpu", true,
                 GPU_CONFIG("instance_group [ { kind: KIND_AUTO gpus: [ 64 ] } ]\n"));
    test_add_sub(
        repo, "bad_precision", true,
        GPU_CONFIG("parameters { key: \"precision\" value: { string_value: \"fp8\" } }\n"));
    test_add_sub(
        repo, "bad_mode", true,
        GPU_CONFIG("optimization { execution_accelerators { gpu_execution_accelerator [ {\n"
                   "  name: \"tensorrt\"\n"
                   "  parameters { key: \"precision_mode\" value: \"INT4\" } } ] } }\n"));
    test_add_sub(
        repo, "bad_accel", true,
        GPU_CONFIG("optimization { execution_accelerators { gpu_execution_accelerator [ {\n"
                   "  name: \"warp_drive\" } ] } }\n"));
    test_add_sub(
        repo, "disagree", true,
        GPU_CONFIG("parameters { key: \"precision\" value: { string_value: \"fp32\" } }\n"
                   "optimization { execution_accelerators { gpu_execution_accelerator [ {\n"
                   "  name: \"tensorrt\"\n"
                   "  parameters { key: \"precision_mode\" value: \"FP16\" } } ] } }\n"));
    /* Accepted spellings: on the CPU (no GPU, or a KIND_CPU group) FP16
     * changes nothing; on a GPU the plans are FP16 and add_sub stays exact
     * (Add and Sub are FP32 kernels; FP16 covers Conv). */
    test_add_sub(
        repo, "fp16_param", true,
        GPU_CONFIG("parameters { key: \"precision\" value: { string_value: \"FP16\" } }\n"));
    /* TF32 likewise: CPU instances stay FP32; GPU plans keep FP32 tensors. */
    test_add_sub(
        repo, "tf32_param", true,
        GPU_CONFIG("parameters { key: \"precision\" value: { string_value: \"tf32\" } }\n"));
    test_add_sub(
        repo, "fp16_trt", true,
        GPU_CONFIG("optimization { execution_accelerators { gpu_execution_accelerator [ {\n"
                   "  name: \"tensorrt\"\n"
                   "  parameters { key: \"precision_mode\" value: \"FP16\" }\n"
                   "  parameters { key: \"max_workspace_size_bytes\" value: \"1073741824\" }\n"
                   "} ] } }\n"));
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    if (!s)
        return;
    char reason[512];
    static const struct {
        const char *model, *has;
    } cases[] = {
        { "neg_gpu", "config.pbtxt: instance_group[0].gpus[1] is -1; GPU ids start at 0" },
        { "dup_gpu", "instance_group[0].gpus lists GPU 0 twice" },
        { "cpu_gpus", "instance_group[0]: KIND_CPU with gpus" },
        { "bad_precision",
          "parameters['precision'].string_value is 'fp8'; expected fp32, tf32, fp16 or bf16" },
        { "bad_mode", "gpu_execution_accelerator[0].parameters['precision_mode'] is 'INT4'" },
        { "bad_accel", "unknown accelerator 'warp_drive'" },
        { "disagree", "parameters['precision'] is 'fp32' but the tensorrt accelerator's" },
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        ASSERT_EQ_INT(model_state(s, cases[k].model, reason, sizeof(reason)),
                      INFD_MODEL_STATE_UNAVAILABLE);
        ASSERT_STR_HAS(reason, cases[k].has);
    }
    ASSERT_EQ_INT(model_state(s, "far_gpu", reason, sizeof(reason)), INFD_MODEL_STATE_UNAVAILABLE);
    if (gpus() == 0) {
        ASSERT_STR_HAS(reason, "instance_group[0]: KIND_GPU, but no usable CUDA device");
    } else {
        char want[128];
        snprintf(want, sizeof(want), "instance_group[0]: GPU 5 does not exist (%d GPU%s)", gpus(),
                 gpus() == 1 ? "" : "s");
        if (gpus() <= 5)
            ASSERT_STR_HAS(reason, want);
    }
    /* KIND_AUTO with a GPU that is not there is KIND_CPU, as in Triton. */
    ASSERT_TRUE(infer_ok(s, "auto_far_gpu", 2, 1.0f));
    char *json = config_json(s, "auto_far_gpu");
    ASSERT_STR_HAS(json, "\"kind\":\"KIND_CPU\"");
    infd_free(json);
    ASSERT_TRUE(infer_ok(s, "good", 2, 1.0f));
    ASSERT_TRUE(infer_ok(s, "fp16_param", 4, 1.0f));
    ASSERT_TRUE(infer_ok(s, "tf32_param", 2, 3.0f));
    ASSERT_TRUE(infer_ok(s, "fp16_trt", 3, 2.0f));
    infd_server_destroy(s);
}

typedef struct batch_ctx {
    pthread_mutex_t mu;
    int done, ok;
} batch_ctx;

static void on_done(void *user, infd_request *req, infd_status status, const char *message)
{
    (void)req;
    (void)message;
    batch_ctx *c = user;
    pthread_mutex_lock(&c->mu);
    c->done++;
    c->ok += status == INFD_STATUS_OK;
    pthread_mutex_unlock(&c->mu);
}

/* GPU only: many concurrent single-row requests on a KIND_GPU model with 2
 * instances on GPU 0 form batches, and every output matches a KIND_CPU copy
 * of the model. */
static void test_gpu_dynamic_batching(void)
{
    if (gpus() == 0) {
        printf("    skipped: no usable CUDA device (%s)\n", g_why);
        return;
    }
    const char *repo = test_repo_new("gpu-instances", "batching");
    test_add_sub(repo, "gpu2", true,
                 GPU_CONFIG("instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] } ]\n"));
    test_add_sub(repo, "cpu1", true, GPU_CONFIG("instance_group [ { kind: KIND_CPU } ]\n"));
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    if (!s)
        return;
    enum { N = 64 };
    static float in0[N][16], in1[N][16];
    static float out_gpu[N][2][16], out_cpu[N][2][16];
    for (int r = 0; r < N; r++)
        for (int i = 0; i < 16; i++) {
            in0[r][i] = (float)(r * 16 + i) * 0.37f - 100.0f;
            in1[r][i] = (float)((r + i) % 11) * 1.5f;
        }
    const char *names[2] = { "gpu2", "cpu1" };
    float(*outs[2])[2][16] = { out_gpu, out_cpu };
    for (int which = 0; which < 2; which++) {
        infd_model *m = NULL;
        infd_error err = { 0 };
        ASSERT_STATUS(infd_server_model_acquire(s, names[which], -1, &m, &err), INFD_STATUS_OK);
        if (!m)
            return;
        batch_ctx ctx = { .mu = PTHREAD_MUTEX_INITIALIZER };
        infd_request *reqs[N] = { 0 };
        int64_t shape[2] = { 1, 16 };
        for (int r = 0; r < N; r++) {
            ASSERT_STATUS(infd_request_create(m, &reqs[r], &err), INFD_STATUS_OK);
            ASSERT_STATUS(infd_request_add_input(reqs[r], "INPUT0", INFD_DTYPE_FP32, shape, 2,
                                                 in0[r], sizeof(in0[r]), &err),
                          INFD_STATUS_OK);
            ASSERT_STATUS(infd_request_add_input(reqs[r], "INPUT1", INFD_DTYPE_FP32, shape, 2,
                                                 in1[r], sizeof(in1[r]), &err),
                          INFD_STATUS_OK);
            ASSERT_STATUS(infd_request_set_output_buffer(reqs[r], "OUTPUT0", outs[which][r][0],
                                                         sizeof(outs[which][r][0]), &err),
                          INFD_STATUS_OK);
            ASSERT_STATUS(infd_request_set_output_buffer(reqs[r], "OUTPUT1", outs[which][r][1],
                                                         sizeof(outs[which][r][1]), &err),
                          INFD_STATUS_OK);
        }
        for (int r = 0; r < N; r++)
            ASSERT_STATUS(infd_infer_async(reqs[r], on_done, &ctx, &err), INFD_STATUS_OK);
        for (int t = 0; t < 30000; t++) {
            pthread_mutex_lock(&ctx.mu);
            int d = ctx.done;
            pthread_mutex_unlock(&ctx.mu);
            if (d >= N)
                break;
            infd_clock_sleep_us(1000);
        }
        ASSERT_EQ_INT(ctx.done, N);
        ASSERT_EQ_INT(ctx.ok, N);
        for (int r = 0; r < N; r++)
            infd_request_destroy(reqs[r]);
        infd_model_stats st;
        infd_model_get_stats(m, &st);
        uint64_t batched = 0;
        for (int b = 2; b <= INFD_STATS_MAX_BATCH; b++)
            batched += st.batch_exec_count[b];
        printf("    %s: %llu executions for %d requests, %llu of them batches of 2+\n",
               names[which], (unsigned long long)st.execution_count, N,
               (unsigned long long)batched);
        ASSERT_EQ_U64(st.inference_count, N);
        ASSERT_GE_U64(batched, 1);
        ASSERT_LT_U64(st.execution_count, N);
        infd_model_release(m);
    }
    ASSERT_TRUE(memcmp(out_gpu, out_cpu, sizeof(out_gpu)) == 0);
    for (int r = 0; r < N; r++)
        for (int i = 0; i < 16; i++) {
            ASSERT_TRUE(out_gpu[r][0][i] == in0[r][i] + in1[r][i]);
            ASSERT_TRUE(out_gpu[r][1][i] == in0[r][i] - in1[r][i]);
        }
    infd_server_destroy(s);
}

/* A model of one unary op `op` on INPUT0 ([batch, 16]). */
static void add_unary_model(const char *repo, const char *name, const char *op, const char *config)
{
    const onnx_model_spec spec = {
        .graph_name = "unary",
        .rows = 0,
        .width = 16,
        .inputs = { "INPUT0" },
        .outputs = { "OUTPUT0" },
        .nodes = { { op, "the_op", { "INPUT0" }, "OUTPUT0" } },
    };
    ASSERT_TRUE(onnx_model_add(repo, name, &spec, config));
}

/* GPU only: KIND_AUTO falls back to the CPU, with the op named in the log,
 * when the CUDA backend lacks an op; KIND_GPU makes such a model
 * UNAVAILABLE with the op in its reason. The op is the first of a list that
 * the CUDA backend refuses here (its op set grows). */
static void test_auto_falls_back_for_missing_op(void)
{
    if (gpus() == 0) {
        printf("    skipped: no usable CUDA device (%s)\n", g_why);
        return;
    }
    static const char *const candidates[] = { "Sign", "Round", "Softsign", "ThresholdedRelu",
                                              "Mish", "Selu",  "Sin",      "Cos" };
    const char *repo = test_repo_new("gpu-instances", "fallback");
    const char *op = NULL;
    for (size_t k = 0; k < sizeof(candidates) / sizeof(candidates[0]) && !op; k++) {
        add_unary_model(repo, "probe", candidates[k], NULL);
        char path[512];
        snprintf(path, sizeof(path), "%s/probe/1/model.onnx", repo);
        infd_plan_options o;
        infd_plan_options_init(&o);
        o.device = INFD_DEVICE_CUDA;
        infd_plan *p = NULL;
        infd_error err = { 0 };
        infd_status st = infd_plan_create(path, &o, &p, &err);
        infd_plan_destroy(p);
        if (st == INFD_STATUS_UNIMPLEMENTED)
            op = candidates[k];
    }
    char probe[512];
    snprintf(probe, sizeof(probe), "%s/probe", repo);
    test_rm_rf(probe);
    if (!op) {
        printf("    skipped: the CUDA backend runs every candidate op\n");
        return;
    }
    printf("    the CUDA backend lacks %s\n", op);
    add_unary_model(repo, "auto_op", op, GPU_CONFIG("instance_group [ { kind: KIND_AUTO } ]\n"));
    add_unary_model(repo, "gpu_op", op, GPU_CONFIG("instance_group [ { kind: KIND_GPU } ]\n"));
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    if (!s)
        return;
    char reason[512];
    ASSERT_EQ_INT(model_state(s, "auto_op", reason, sizeof(reason)), INFD_MODEL_STATE_READY);
    char *json = config_json(s, "auto_op");
    ASSERT_STR_HAS(json, "\"kind\":\"KIND_CPU\"");
    infd_free(json);
    ASSERT_EQ_INT(model_state(s, "gpu_op", reason, sizeof(reason)), INFD_MODEL_STATE_UNAVAILABLE);
    ASSERT_STR_HAS(reason, op);
    infd_server_destroy(s);
}

/* The engine: a plan for a GPU past the last one is refused with the count;
 * without a GPU, a CUDA plan is UNAVAILABLE; the CPU has device 0 only. */
static void test_plan_device_index(void)
{
    const char *repo = test_repo_new("gpu-instances", "plan");
    test_add_sub(repo, "m", true, NULL);
    char path[512];
    snprintf(path, sizeof(path), "%s/m/1/model.onnx", repo);
    infd_plan_options o;
    infd_plan_options_init(&o);
    ASSERT_EQ_INT(o.device_index, 0);
    infd_plan *p = NULL;
    infd_error err = { 0 };
    o.device_index = 1;
    ASSERT_STATUS(infd_plan_create(path, &o, &p, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "the cpu backend has device 0 only");
    o.device = INFD_DEVICE_CUDA;
    o.device_index = gpus() > 0 ? gpus() : 3;
    infd_status st = infd_plan_create(path, &o, &p, &err);
    if (gpus() == 0) {
        ASSERT_STATUS(st, INFD_STATUS_UNAVAILABLE);
        ASSERT_STR_HAS(err.msg, "no usable CUDA device");
        return;
    }
    ASSERT_STATUS(st, INFD_STATUS_INVALID_ARGUMENT);
    char want[128];
    snprintf(want, sizeof(want), "GPU %d does not exist (this machine has %d)", gpus(), gpus());
    ASSERT_STR_HAS(err.msg, want);
    /* The last GPU works: plan, context and run all on it. */
    o.device_index = gpus() - 1;
    o.batch = 2;
    ASSERT_STATUS(infd_plan_create(path, &o, &p, &err), INFD_STATUS_OK);
    infd_context *c = NULL;
    ASSERT_STATUS(infd_context_create(p, &c, &err), INFD_STATUS_OK);
    float a[32], b[32], y0[32], y1[32];
    for (int i = 0; i < 32; i++) {
        a[i] = (float)i;
        b[i] = 1.0f;
    }
    infd_tensor in[2], out[2];
    memset(in, 0, sizeof(in));
    memset(out, 0, sizeof(out));
    int64_t dims[2] = { 2, 16 };
    for (int k = 0; k < 2; k++) {
        in[k].dtype = INFD_DTYPE_FP32;
        infd_shape_init(&in[k].shape, 2, dims, NULL);
        in[k].nbytes = sizeof(a);
    }
    in[0].data = a;
    in[1].data = b;
    out[0].data = y0;
    out[0].nbytes = sizeof(y0);
    out[1].data = y1;
    out[1].nbytes = sizeof(y1);
    for (int run = 0; run < 3; run++) /* eager, captured, replayed */
        ASSERT_STATUS(infd_plan_run(p, c, in, 2, out, 2, &err), INFD_STATUS_OK);
    for (int i = 0; i < 32; i++) {
        ASSERT_TRUE(y0[i] == a[i] + 1.0f);
        ASSERT_TRUE(y1[i] == a[i] - 1.0f);
    }
    infd_context_destroy(c);
    infd_plan_destroy(p);
}

static void test_cleanup(void)
{
    test_rm_rf(test_repo_root);
}

TEST_MAIN(test_kinds_side_by_side, test_config_errors, test_gpu_dynamic_batching,
          test_auto_falls_back_for_missing_op, test_plan_device_index, test_cleanup)
