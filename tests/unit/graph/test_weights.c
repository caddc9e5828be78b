/*
 * Unit tests for shared weights (engine.h infd_weights, graph/weights.h):
 * plans of one model hold one copy of each constant and of each prepared
 * form, a plan built after a trim reloads the model and reuses the forms,
 * plans may be built on several threads at once, and every create path
 * fails cleanly when an allocation fails.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "graph/weights.h"
#include "infd/engine.h"
#include "onnx_model.h"
#include "test.h"

static char tiny_path[256];

static infd_plan_options options_at(int64_t batch)
{
    infd_plan_options o;
    infd_plan_options_init(&o);
    o.batch = batch;
    o.n_threads = 1;
    return o;
}

/* Runs onnx_model_tiny's Y = Relu(X + B) at `batch` and checks Y. */
static void check_tiny_run(infd_plan *plan, int64_t batch)
{
    infd_context *ctx = NULL;
    infd_error err = { 0 };
    infd_tensor_info in, out;
    ASSERT_STATUS(infd_plan_input(plan, 0, &in), INFD_STATUS_OK);
    ASSERT_STATUS(infd_plan_output(plan, 0, &out), INFD_STATUS_OK);
    ASSERT_EQ_I64(in.shape.dims[0], batch);
    ASSERT_STATUS(infd_context_create(plan, &ctx, &err), INFD_STATUS_OK);
    float x[64], y[64];
    ASSERT_TRUE(batch * 4 <= 64);
    for (int i = 0; i < batch * 4; i++)
        x[i] = (float)i * 0.25f - 1.0f;
    infd_tensor tx, ty;
    ASSERT_STATUS(infd_tensor_init_view(&tx, INFD_DTYPE_FP32, &in.shape, x, in.nbytes, NULL),
                  INFD_STATUS_OK);
    ASSERT_STATUS(infd_tensor_init_view(&ty, INFD_DTYPE_FP32, &out.shape, y, out.nbytes, NULL),
                  INFD_STATUS_OK);
    ASSERT_STATUS(infd_plan_run(plan, ctx, &tx, 1, &ty, 1, &err), INFD_STATUS_OK);
    static const float bias[4] = { -1.5f, -0.5f, 0.5f, 1.5f };
    for (int i = 0; i < batch * 4; i++) {
        float want = x[i] + bias[i % 4];
        want = want > 0 ? want : 0;
        if (y[i] != want)
            TEST_FAIL_("batch %d: y[%d] = %g, expected %g", (int)batch, i, (double)y[i],
                       (double)want);
    }
    infd_context_destroy(ctx);
}

/* Two plans of one model read the same bytes for its constant B; each
 * keeps them after the other and the caller's handle are gone. */
static void test_plans_share_constants(void)
{
    infd_weights *w = NULL;
    infd_plan *p1 = NULL, *p4 = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(infd_weights_create(tiny_path, &w, &err), INFD_STATUS_OK);
    infd_plan_options o1 = options_at(1), o4 = options_at(4);
    ASSERT_STATUS(infd_plan_create_from_weights(w, &o1, &p1, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_plan_create_from_weights(w, &o4, &p4, &err), INFD_STATUS_OK);
    const void *b1 = infd_plan_constant_data(p1, "B");
    const void *b4 = infd_plan_constant_data(p4, "B");
    ASSERT_TRUE(b1 != NULL);
    ASSERT_TRUE(b1 == b4);
    infd_weights_stats s;
    infd_weights_get_stats(w, &s);
    ASSERT_EQ_INT(s.n_plans, 2);
    ASSERT_EQ_INT(s.n_forms, 1); /* B, once */
    ASSERT_EQ_U64(s.host_bytes, 4 * sizeof(float));
    ASSERT_GE_U64(s.n_reused, 1);                    /* the second plan took it */
    ASSERT_TRUE(s.model_bytes >= 4 * sizeof(float)); /* not trimmed */
    infd_plan_destroy(p1);
    infd_weights_destroy(w); /* p4 keeps what it uses */
    check_tiny_run(p4, 4);
    infd_plan_destroy(p4);
}

/* After a trim the model is gone; a later plan loads it again and takes
 * the forms the living plans hold instead of making them. */
static void test_trim_then_later_plan(void)
{
    infd_weights *w = NULL;
    infd_plan *p1 = NULL, *p2 = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(infd_weights_create(tiny_path, &w, &err), INFD_STATUS_OK);
    infd_plan_options o1 = options_at(1), o2 = options_at(2);
    ASSERT_STATUS(infd_plan_create_from_weights(w, &o1, &p1, &err), INFD_STATUS_OK);
    infd_weights_trim(w);
    infd_weights_stats s;
    infd_weights_get_stats(w, &s);
    ASSERT_EQ_U64(s.model_bytes, 0);
    uint64_t reused = s.n_reused;
    ASSERT_STATUS(infd_plan_create_from_weights(w, &o2, &p2, &err), INFD_STATUS_OK);
    infd_weights_get_stats(w, &s);
    ASSERT_TRUE(s.n_reused > reused);
    ASSERT_EQ_INT(s.n_forms, 1);
    ASSERT_TRUE(infd_plan_constant_data(p1, "B") == infd_plan_constant_data(p2, "B"));
    check_tiny_run(p2, 2);
    check_tiny_run(p1, 1);
    infd_plan_destroy(p1);
    infd_plan_destroy(p2);
    infd_weights_destroy(w);
}

/* The model's declared inputs: X FP32 [batch, 4] with its symbolic dim as
 * -1; the initializer B is not one; they and the metadata stay readable
 * after a trim, without loading the model again. */
static void test_declared_inputs(void)
{
    infd_weights *w = NULL;
    infd_error err = { 0 };
    infd_graph_input in;
    ASSERT_STATUS(infd_weights_create(tiny_path, &w, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(infd_weights_n_inputs(w), 1);
    ASSERT_STATUS(infd_weights_input(w, 0, &in, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(in.name, "X");
    ASSERT_EQ_INT(in.dtype, INFD_DTYPE_FP32);
    ASSERT_EQ_INT(in.shape.rank, 2);
    ASSERT_EQ_I64(in.shape.dims[0], -1);
    ASSERT_EQ_I64(in.shape.dims[1], 4);
    ASSERT_STATUS(infd_weights_input(w, 1, &in, &err), INFD_STATUS_NOT_FOUND);
    ASSERT_STATUS(infd_weights_input(w, -1, &in, &err), INFD_STATUS_NOT_FOUND);
    ASSERT_STR_EQ(infd_weights_metadata(w, "window_size"), "121");
    infd_weights_trim(w);
    ASSERT_EQ_INT(infd_weights_n_inputs(w), 1);
    ASSERT_STATUS(infd_weights_input(w, 0, &in, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(in.name, "X");
    /* the metadata too, after the trim */
    ASSERT_STR_EQ(infd_weights_metadata(w, "normalize_type"), "");
    ASSERT_STR_EQ(infd_weights_metadata(w, "window_size"), "121");
    ASSERT_TRUE(infd_weights_metadata(w, "chunk_shift") == NULL);
    infd_weights_stats s;
    infd_weights_get_stats(w, &s);
    ASSERT_EQ_U64(s.model_bytes, 0); /* still trimmed: nothing was loaded */
    infd_weights_destroy(w);
}

/* A convolutional network: the second batch size takes the first's
 * oneDNN weights (reordered into blocked layouts, Winograd's included)
 * instead of reordering them again, and holds no second copy. */
static void test_prepared_weights_shared(void)
{
    char path[2200];
    if (!test_cached_model_("models/mobilenetv2.onnx", path, sizeof(path)))
        return;
    infd_weights *w = NULL;
    infd_plan *p1 = NULL, *p4 = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(infd_weights_create(path, &w, &err), INFD_STATUS_OK);
    infd_plan_options o1 = options_at(1), o4 = options_at(4);
    ASSERT_STATUS(infd_plan_create_from_weights(w, &o1, &p1, &err), INFD_STATUS_OK);
    infd_weights_stats s1, s4;
    infd_weights_get_stats(w, &s1);
    ASSERT_TRUE(s1.n_forms > 50); /* 52 Conv weights and biases, the Gemm, ... */
    ASSERT_STATUS(infd_plan_create_from_weights(w, &o4, &p4, &err), INFD_STATUS_OK);
    infd_weights_get_stats(w, &s4);
    /* One copy: the second plan took (nearly) every form the first made. */
    ASSERT_GE_U64(s4.n_reused - s1.n_reused, (uint64_t)s1.n_forms * 9 / 10);
    ASSERT_LE_U64(s4.host_bytes, s1.host_bytes + s1.host_bytes / 10);
    /* The plain weights the kernels reordered are not kept besides. */
    ASSERT_LE_U64(s4.host_bytes, s1.model_bytes + s1.model_bytes / 4);
    infd_plan_stats ps;
    infd_plan_get_stats(p4, &ps);
    ASSERT_LT_U64(ps.weight_bytes, s1.model_bytes / 10); /* what its runs read plain */
    infd_plan_destroy(p1);
    infd_plan_destroy(p4);
    infd_weights_get_stats(w, &s4);
    ASSERT_EQ_INT(s4.n_forms, 0); /* the last holder freed them */
    ASSERT_EQ_U64(s4.host_bytes, 0);
    infd_weights_destroy(w);
}

typedef struct build_job {
    infd_weights *w;
    int64_t batch;
    infd_plan *plan;
    infd_status st;
} build_job;

static void *build_main(void *arg)
{
    build_job *j = arg;
    infd_plan_options o = options_at(j->batch);
    infd_error err = { 0 };
    j->st = infd_plan_create_from_weights(j->w, &o, &j->plan, &err);
    return NULL;
}

/* Plans built on four threads at once share one set of forms. */
static void test_parallel_builds(void)
{
    infd_weights *w = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(infd_weights_create(tiny_path, &w, &err), INFD_STATUS_OK);
    build_job jobs[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (build_job){ w, (int64_t)1 << i, NULL, INFD_STATUS_INTERNAL };
        ASSERT_EQ_INT(pthread_create(&t[i], NULL, build_main, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    infd_weights_stats s;
    infd_weights_get_stats(w, &s);
    ASSERT_EQ_INT(s.n_plans, 4);
    ASSERT_EQ_INT(s.n_forms, 1);
    for (int i = 0; i < 4; i++) {
        ASSERT_STATUS(jobs[i].st, INFD_STATUS_OK);
        check_tiny_run(jobs[i].plan, jobs[i].batch);
        infd_plan_destroy(jobs[i].plan);
    }
    infd_weights_destroy(w);
}

/* Bad input is an error with a message; nothing leaks. */
static void test_bad_input(void)
{
    infd_weights *w = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(infd_weights_create("/nonexistent/model.onnx", &w, &err), INFD_STATUS_NOT_FOUND);
    ASSERT_TRUE(w == NULL);
    ASSERT_STR_HAS(err.msg, "/nonexistent/model.onnx");
    ASSERT_STATUS(infd_weights_create_from_memory("x", 0, "empty", &w, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "empty");
    static const char plan_magic[] = "INFDPLAN and then some";
    ASSERT_STATUS(
        infd_weights_create_from_memory(plan_magic, sizeof(plan_magic), "p.plan", &w, &err),
        INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "plan file");
    infd_plan *p = NULL;
    ASSERT_STATUS(infd_plan_create_from_weights(NULL, NULL, &p, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
}

/* Every allocation of create and of a plan build failing in turn: a clean
 * OUT_OF_MEMORY, no leak (ASan), and the weights still usable after a
 * failed plan. */
static void test_allocation_failures(void)
{
    int n;
    for (n = 1; n < 10000; n++) {
        infd_weights *w = NULL;
        infd_error err = { 0 };
        infd_alloc_fail_after(n);
        infd_status st = infd_weights_create(tiny_path, &w, &err);
        int fired = infd_alloc_injected_fired();
        infd_alloc_fail_after(0);
        if (st == INFD_STATUS_OK) {
            infd_weights_destroy(w);
            if (!fired)
                break;
            continue;
        }
        /* protobuf-c reports its own allocation failing as a malformed
         * message (test_loader.c accepts the same). */
        ASSERT_TRUE(st == INFD_STATUS_OUT_OF_MEMORY || st == INFD_STATUS_INVALID_ARGUMENT);
        ASSERT_TRUE(w == NULL);
    }
    ASSERT_TRUE(n > 3 && n < 10000);
    infd_weights *w = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(infd_weights_create(tiny_path, &w, &err), INFD_STATUS_OK);
    infd_plan *keep = NULL;
    infd_plan_options o1 = options_at(1), o2 = options_at(2);
    ASSERT_STATUS(infd_plan_create_from_weights(w, &o1, &keep, &err), INFD_STATUS_OK);
    for (n = 1; n < 100000; n++) {
        infd_plan *p = NULL;
        infd_alloc_fail_after(n);
        infd_status st = infd_plan_create_from_weights(w, &o2, &p, &err);
        int fired = infd_alloc_injected_fired();
        infd_alloc_fail_after(0);
        if (st == INFD_STATUS_OK) {
            infd_plan_destroy(p);
            if (!fired)
                break;
            continue;
        }
        ASSERT_TRUE(p == NULL);
        ASSERT_TRUE(st == INFD_STATUS_OUT_OF_MEMORY || st == INFD_STATUS_INTERNAL ||
                    st == INFD_STATUS_UNAVAILABLE);
    }
    ASSERT_TRUE(n > 3 && n < 100000);
    infd_weights_stats s;
    infd_weights_get_stats(w, &s);
    ASSERT_EQ_INT(s.n_plans, 1);
    ASSERT_EQ_INT(s.n_forms, 1); /* failed builds released what they took */
    check_tiny_run(keep, 1);
    infd_plan_destroy(keep);
    infd_weights_destroy(w);
}

int main(int argc, char **argv)
{
    snprintf(tiny_path, sizeof(tiny_path), "/tmp/infd_test_weights_%d.onnx", (int)getpid());
    uint8_t *buf = NULL;
    size_t n = onnx_model_tiny(&buf);
    onnx_model_write_file_(tiny_path, buf, n);
    free(buf);
    test_case_ cases[] = {
        { "test_plans_share_constants", test_plans_share_constants },
        { "test_trim_then_later_plan", test_trim_then_later_plan },
        { "test_declared_inputs", test_declared_inputs },
        { "test_prepared_weights_shared", test_prepared_weights_shared },
        { "test_parallel_builds", test_parallel_builds },
        { "test_bad_input", test_bad_input },
        { "test_allocation_failures", test_allocation_failures },
    };
    int rc = test_run_(cases, sizeof(cases) / sizeof(cases[0]), argc, argv);
    unlink(tiny_path);
    return rc;
}
