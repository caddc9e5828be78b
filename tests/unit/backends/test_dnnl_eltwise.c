/*
 * test_dnnl_eltwise.c - oneDNN unary ops against libm: Relu, LeakyRelu,
 * Sigmoid, Tanh, Exp, Abs, Sqrt, HardSigmoid, HardSwish, Clip (attributes
 * before opset 11, optional inputs after, one bound only), Pow with a
 * constant scalar.
 */
#include "dnnl_test.h"

#define N_EL 1000

typedef float (*ref_fn)(float x, float p, float q);

static float ref_relu(float x, float p, float q)
{
    (void)q;
    return x > 0 ? x : p * x;
}
static float ref_sigmoid(float x, float p, float q)
{
    (void)p, (void)q;
    return 1.0f / (1.0f + expf(-x));
}
static float ref_tanh(float x, float p, float q)
{
    (void)p, (void)q;
    return tanhf(x);
}
static float ref_exp(float x, float p, float q)
{
    (void)p, (void)q;
    return expf(x);
}
static float ref_abs(float x, float p, float q)
{
    (void)p, (void)q;
    return fabsf(x);
}
static float ref_sqrt(float x, float p, float q)
{
    (void)p, (void)q;
    return sqrtf(fabsf(x));
}
static float ref_hardsigmoid(float x, float p, float q)
{
    return fmaxf(0.0f, fminf(1.0f, p * x + q));
}
static float ref_hardswish(float x, float p, float q)
{
    (void)p, (void)q;
    return x * fmaxf(0.0f, fminf(1.0f, x / 6.0f + 0.5f)); /* ONNX's definition */
}
static float ref_clip(float x, float p, float q)
{
    return fminf(fmaxf(x, p), q);
}
static float ref_pow(float x, float p, float q)
{
    (void)q;
    return powf(x, p);
}

/* Runs `op` on a [4, 250] tensor (values in [-3, 3) times `range`, |x| for
 * Sqrt). */
static void run_unary_range(kt *t, ref_fn fn, float p, float q, const void *const *extra,
                            float range)
{
    float *x = malloc(sizeof(float) * N_EL), y[N_EL], want[N_EL];
    dt_fill(x, N_EL, 41, -3.0f * range, 3.0f * range);
    if (strcmp(t->node.op_type, "Sqrt") == 0)
        for (int i = 0; i < N_EL; i++)
            x[i] = fabsf(x[i]);
    for (int i = 0; i < N_EL; i++)
        want[i] = fn(x[i], p, q);
    const void *ins[3] = { x, extra ? extra[0] : NULL, extra ? extra[1] : NULL };
    DT_RUN(t, ins, ((void *[]){ y }));
    ASSERT_CLOSE(y, want, N_EL);
    free(x);
}

static void run_unary(kt *t, ref_fn fn, float p, float q, const void *const *extra)
{
    run_unary_range(t, fn, p, q, extra, 1.0f);
}

static void unary_node(kt *t, const char *op, int64_t opset)
{
    kt_init(t, op, opset);
    kt_input(t, INFD_DTYPE_FP32, 2, (int64_t[]){ 4, 250 }, NULL);
    kt_output(t, INFD_DTYPE_FP32, 2, (int64_t[]){ 4, 250 });
}

static void test_simple_unary(void)
{
    static const struct {
        const char *op;
        ref_fn fn;
        float p;
    } ops[] = {
        { "Relu", ref_relu, 0.0f },    { "LeakyRelu", ref_relu, 0.01f },
        { "Sigmoid", ref_sigmoid, 0 }, { "Tanh", ref_tanh, 0 },
        { "Exp", ref_exp, 0 },         { "Abs", ref_abs, 0 },
        { "Sqrt", ref_sqrt, 0 },       { "HardSigmoid", ref_hardsigmoid, 0.2f },
    };
    for (size_t i = 0; i < INFD_ARRAY_SIZE(ops) && !test_failed_; i++) {
        kt t;
        unary_node(&t, ops[i].op, 17);
        run_unary(&t, ops[i].fn, ops[i].p, 0.5f, NULL);
        kt_fini(&t);
    }
}

static void test_attrs(void)
{
    kt t;
    unary_node(&t, "LeakyRelu", 17);
    kt_attr_float(&t, "alpha", 0.3f);
    run_unary(&t, ref_relu, 0.3f, 0, NULL);
    kt_fini(&t);
    if (test_failed_)
        return;
    unary_node(&t, "HardSigmoid", 17);
    kt_attr_float(&t, "alpha", 0.25f);
    kt_attr_float(&t, "beta", 0.4f);
    run_unary(&t, ref_hardsigmoid, 0.25f, 0.4f, NULL);
    kt_fini(&t);
}

/* HardSwish (opset 14) over [-6, 6): both flat ends and the curve. */
static void test_hardswish(void)
{
    kt t;
    unary_node(&t, "HardSwish", 14);
    run_unary_range(&t, ref_hardswish, 0, 0, NULL, 2.0f);
    kt_fini(&t);
}

static void test_clip(void)
{
    kt t;
    /* Opset 6: attributes, max only. */
    unary_node(&t, "Clip", 6);
    kt_attr_float(&t, "max", 1.5f);
    run_unary(&t, ref_clip, -INFINITY, 1.5f, NULL);
    kt_fini(&t);
    if (test_failed_)
        return;
    /* Opset 13: both bounds as constant inputs. */
    float lo = -0.5f, hi = 2.0f;
    kt_init(&t, "Clip", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 4, 250 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 0, NULL, &lo);
    kt_input(&t, INFD_DTYPE_FP32, 0, NULL, &hi);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 4, 250 });
    run_unary(&t, ref_clip, lo, hi, (const void *[]){ &lo, &hi });
    kt_fini(&t);
    if (test_failed_)
        return;
    /* Opset 13: min omitted, max given. */
    kt_init(&t, "Clip", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 4, 250 }, NULL);
    kt_input_omitted(&t);
    kt_input(&t, INFD_DTYPE_FP32, 0, NULL, &hi);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 4, 250 });
    run_unary(&t, ref_clip, -INFINITY, hi, (const void *[]){ NULL, &hi });
    kt_fini(&t);
    if (test_failed_)
        return;
    /* Opset 13: min given only (max absent). */
    kt_init(&t, "Clip", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 4, 250 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 0, NULL, &lo);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 4, 250 });
    run_unary(&t, ref_clip, lo, INFINITY, (const void *[]){ &lo, NULL });
    kt_fini(&t);
    if (test_failed_)
        return;
    /* A computed bound is declined. */
    kt_init(&t, "Clip", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 4, 250 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 0, NULL, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 4, 250 });
    DT_DECLINES(&t, "constant bounds");
    kt_fini(&t);
}

static void test_pow(void)
{
    static const float exps[] = { 2.0f, 3.0f, 0.5f, -1.0f };
    for (size_t i = 0; i < INFD_ARRAY_SIZE(exps) && !test_failed_; i++) {
        kt t;
        float e = exps[i];
        kt_init(&t, "Pow", 15);
        kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 4, 250 }, NULL);
        kt_input(&t, INFD_DTYPE_FP32, 0, NULL, &e);
        kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 4, 250 });
        float *x = malloc(sizeof(float) * N_EL), y[N_EL], want[N_EL];
        /* Negative bases only for integer exponents. */
        dt_fill(x, N_EL, 42, e == 0.5f ? 0.0f : -2.0f, 2.0f);
        for (int j = 0; j < N_EL; j++) {
            if (e == -1.0f && fabsf(x[j]) < 0.1f)
                x[j] = 0.5f;
            want[j] = ref_pow(x[j], e, 0);
        }
        DT_RUN(&t, ((const void *[]){ x, &e }), ((void *[]){ y }));
        ASSERT_CLOSE(y, want, N_EL);
        free(x);
        kt_fini(&t);
    }
    /* An INT64 exponent is read too; a tensor exponent is declined. */
    kt t;
    int64_t e64 = 2;
    kt_init(&t, "Pow", 15);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 8 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 0, NULL, &e64);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 8 });
    infd_error why = { 0 };
    ASSERT_TRUE(dt_dnnl_supports(&t, &why));
    kt_fini(&t);
    kt_init(&t, "Pow", 15);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 8 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 8 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 8 });
    DT_DECLINES(&t, "constant scalar exponent");
    kt_fini(&t);
}

static void test_declines_fp16(void)
{
    kt t;
    kt_init(&t, "Relu", 14);
    kt_input(&t, INFD_DTYPE_FP16, 1, (int64_t[]){ 8 }, NULL);
    kt_output(&t, INFD_DTYPE_FP16, 1, (int64_t[]){ 8 });
    DT_DECLINES(&t, "FP32 only");
    kt_fini(&t);
}

TEST_MAIN(test_simple_unary, test_attrs, test_hardswish, test_clip, test_pow, test_declines_fp16)
