/*
 * test_ref_elementwise.c - the ref broadcasting and unary kernels: numpy
 * broadcasting against naive index math, integer semantics (truncating Div,
 * division by zero, wrap), comparisons, Where, variadic ops, unary math and
 * Clip in its attribute and input forms.
 */
#include <float.h>
#include <stdint.h>

#include "ref_test.h"
#include "test.h"

/* Naive numpy broadcast: the element of input (rank r, dims) for output
 * index `o` of (rank R, odims). */
static int64_t bcast_index(int64_t o, int32_t R, const int64_t *odims, int32_t r,
                           const int64_t *dims)
{
    int64_t idx = 0, mul = 1;
    for (int32_t d = R - 1; d >= 0; d--) {
        int64_t i = o % odims[d];
        o /= odims[d];
        int32_t di = d - (R - r);
        if (di < 0)
            continue;
        idx += (dims[di] == 1 ? 0 : i) * mul;
        mul *= dims[di];
    }
    return idx;
}

static void test_int64_add_broadcast_2x1x3_plus_4x1(void)
{
    int64_t a[6] = { 1, 2, 3, 4, 5, 6 }, b[4] = { 10, 20, 30, 40 }, y[24], want[24];
    int64_t ad[3] = { 2, 1, 3 }, bd[2] = { 4, 1 }, od[3] = { 2, 4, 3 };
    for (int64_t o = 0; o < 24; o++)
        want[o] = a[bcast_index(o, 3, od, 3, ad)] + b[bcast_index(o, 3, od, 2, bd)];
    kt t;
    kt_init(&t, "Add", 14);
    kt_input(&t, INFD_DTYPE_INT64, 3, ad, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 2, bd, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 3, od);
    ASSERT_RUN_OK(&t, ((const void *[]){ a, b }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, want, 24);
    ASSERT_EQ_I64(y[0], 11);
    ASSERT_EQ_I64(y[23], 46);
}

static void run_f32_binary(const char *op, int32_t ra, const int64_t *ad, int32_t rb,
                           const int64_t *bd, int32_t ro, const int64_t *od)
{
    int64_t na = 1, nb = 1, no = 1;
    for (int32_t i = 0; i < ra; i++)
        na *= ad[i];
    for (int32_t i = 0; i < rb; i++)
        nb *= bd[i];
    for (int32_t i = 0; i < ro; i++)
        no *= od[i];
    float *a = malloc(sizeof(float) * (size_t)(na + 1)),
          *b = malloc(sizeof(float) * (size_t)(nb + 1));
    float *y = malloc(sizeof(float) * (size_t)(no + 1)),
          *w = malloc(sizeof(float) * (size_t)(no + 1));
    rt_fill_f32(a, na);
    rt_fill_f32(b, nb);
    for (int64_t i = 0; i < nb; i++)
        b[i] += 2.0f; /* keep Div away from 0 */
    for (int64_t o = 0; o < no; o++) {
        float x = a[bcast_index(o, ro, od, ra, ad)], v = b[bcast_index(o, ro, od, rb, bd)];
        w[o] = op[0] == 'A' ? x + v : op[0] == 'S' ? x - v : op[0] == 'M' ? x * v : x / v;
    }
    kt t;
    kt_init(&t, op, 14);
    kt_input(&t, INFD_DTYPE_FP32, ra, ad, NULL);
    kt_input(&t, INFD_DTYPE_FP32, rb, bd, NULL);
    kt_output(&t, INFD_DTYPE_FP32, ro, od);
    infd_error e = { 0 };
    infd_status st = rt_run(&t, (const void *[]){ a, b }, (void *[]){ y }, &e);
    kt_fini(&t);
    int64_t bad = rt_mismatch_f32(y, w, no, 0);
    free(a);
    free(b);
    free(y);
    free(w);
    if (st != INFD_STATUS_OK)
        TEST_FAIL_("%s: %s", op, e.msg);
    if (bad >= 0)
        TEST_FAIL_("%s: mismatch at %" PRId64, op, bad);
}

static void test_f32_broadcast_shapes_vs_naive(void)
{
    const char *ops[] = { "Add", "Sub", "Mul", "Div" };
    for (int i = 0; i < 4 && !test_failed_; i++) {
        run_f32_binary(ops[i], 3, (int64_t[]){ 2, 1, 3 }, 2, (int64_t[]){ 4, 1 }, 3,
                       (int64_t[]){ 2, 4, 3 });
        run_f32_binary(ops[i], 4, (int64_t[]){ 2, 8, 5, 5 }, 3, (int64_t[]){ 8, 1, 1 }, 4,
                       (int64_t[]){ 2, 8, 5, 5 });
        run_f32_binary(ops[i], 0, NULL, 2, (int64_t[]){ 3, 5 }, 2, (int64_t[]){ 3, 5 });
        run_f32_binary(ops[i], 2, (int64_t[]){ 3, 5 }, 1, (int64_t[]){ 1 }, 2, (int64_t[]){ 3, 5 });
        run_f32_binary(ops[i], 2, (int64_t[]){ 7, 1 }, 2, (int64_t[]){ 1, 9 }, 2,
                       (int64_t[]){ 7, 9 });
        run_f32_binary(ops[i], 3, (int64_t[]){ 1, 0, 3 }, 1, (int64_t[]){ 3 }, 3,
                       (int64_t[]){ 1, 0, 3 });
        /* Large: pool path with a broadcast row vector. */
        run_f32_binary(ops[i], 2, (int64_t[]){ 300, 257 }, 1, (int64_t[]){ 257 }, 2,
                       (int64_t[]){ 300, 257 });
        run_f32_binary(ops[i], 4, (int64_t[]){ 1, 3, 1, 5 }, 4, (int64_t[]){ 2, 1, 4, 1 }, 4,
                       (int64_t[]){ 2, 3, 4, 5 });
    }
    kt t;
    infd_error why = { 0 };
    kt_init(&t, "Add", 14);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 3 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 });
    ASSERT_FALSE(rt_supported(&t, &why));
    kt_fini(&t);
    ASSERT_STR_HAS(why.msg, "broadcast");
}

static void test_integer_div_pow_and_wrap(void)
{
    int32_t a[6] = { -7, 7, 5, INT32_MIN, 9, -8 }, b[6] = { 2, -2, 0, -1, 3, 3 }, y[6];
    kt t;
    kt_init(&t, "Div", 14);
    kt_input(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ 6 }, NULL);
    kt_input(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ 6 }, NULL);
    kt_output(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ 6 });
    ASSERT_RUN_OK(&t, ((const void *[]){ a, b }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int32_t[]){ -3, -3, 0, INT32_MIN, 3, -2 }), 6);

    int64_t p[4] = { 2, -3, 1, 5 }, e[4] = { 10, 3, -4, 0 }, py[4];
    kt_init(&t, "Pow", 15);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 });
    ASSERT_RUN_OK(&t, ((const void *[]){ p, e }), ((void *[]){ py }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(py, ((int64_t[]){ 1024, -27, 1, 1 }), 4);

    /* Shape arithmetic: [N, C, H, W] * [1, 1, 2, 2] then Sub a scalar. */
    int64_t s[4] = { 1, 3, 16, 16 }, m[4] = { 1, 1, 2, 2 }, sy[4], one = 1, sz[4];
    kt_init(&t, "Mul", 14);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 }, m);
    kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 });
    ASSERT_RUN_OK(&t, ((const void *[]){ s, m }), ((void *[]){ sy }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(sy, ((int64_t[]){ 1, 3, 32, 32 }), 4);
    kt_init(&t, "Sub", 14);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 0, NULL, &one);
    kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 });
    ASSERT_RUN_OK(&t, ((const void *[]){ sy, &one }), ((void *[]){ sz }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(sz, ((int64_t[]){ 0, 2, 31, 31 }), 4);

    /* int64 wrap-around is defined (no UB). */
    int64_t big[1] = { INT64_MAX }, wy[1];
    kt_init(&t, "Add", 14);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 });
    ASSERT_RUN_OK(&t, ((const void *[]){ big, big }), ((void *[]){ wy }));
    kt_fini(&t);
    ASSERT_EQ_I64(wy[0], -2);
}

static void test_float_pow_and_fp16_add(void)
{
    float x[4] = { 1.5f, -2.0f, 3.0f, 0.5f }, two = 2.0f, y[4];
    kt t;
    kt_init(&t, "Pow", 15);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 0, NULL, &two);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x, &two }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, ((float[]){ 2.25f, 4.0f, 9.0f, 0.25f }), 4, 0);

    uint16_t h[3], g[3], hy[3];
    float hv[3] = { 1.0f, 2.5f, -4.0f }, gv[3] = { 0.5f, 0.25f, 1.0f };
    infd_fp32_to_fp16_n(h, hv, 3);
    infd_fp32_to_fp16_n(g, gv, 3);
    kt_init(&t, "Add", 14);
    kt_input(&t, INFD_DTYPE_FP16, 1, (int64_t[]){ 3 }, NULL);
    kt_input(&t, INFD_DTYPE_FP16, 1, (int64_t[]){ 3 }, NULL);
    kt_output(&t, INFD_DTYPE_FP16, 1, (int64_t[]){ 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ h, g }), ((void *[]){ hy }));
    kt_fini(&t);
    float out[3];
    infd_fp16_to_fp32_n(out, hy, 3);
    ASSERT_F32_ARRAY(out, ((float[]){ 1.5f, 2.75f, -3.0f }), 3, 0);
}

static void test_compare_where_not_logic(void)
{
    int64_t a[4] = { 1, 5, 3, 3 }, b = 3;
    uint8_t eq[4], lt[4], gt[4];
    const char *ops[] = { "Equal", "Less", "Greater" };
    uint8_t *outs[] = { eq, lt, gt };
    for (int i = 0; i < 3; i++) {
        kt t;
        kt_init(&t, ops[i], 13);
        kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 }, NULL);
        kt_input(&t, INFD_DTYPE_INT64, 0, NULL, NULL);
        kt_output(&t, INFD_DTYPE_BOOL, 1, (int64_t[]){ 4 });
        ASSERT_RUN_OK(&t, ((const void *[]){ a, &b }), ((void *[]){ outs[i] }));
        kt_fini(&t);
    }
    ASSERT_I64_ARRAY(eq, ((uint8_t[]){ 0, 0, 1, 1 }), 4);
    ASSERT_I64_ARRAY(lt, ((uint8_t[]){ 1, 0, 0, 0 }), 4);
    ASSERT_I64_ARRAY(gt, ((uint8_t[]){ 0, 1, 0, 0 }), 4);

    /* Where with cond [2,1], X [3], Y scalar. */
    uint8_t c[2] = { 1, 0 };
    float x[3] = { 1, 2, 3 }, yv = -1, w[6];
    kt t;
    kt_init(&t, "Where", 16);
    kt_input(&t, INFD_DTYPE_BOOL, 2, (int64_t[]){ 2, 1 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 3 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 0, NULL, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ c, x, &yv }), ((void *[]){ w }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(w, ((float[]){ 1, 2, 3, -1, -1, -1 }), 6, 0);

    uint8_t n[3] = { 1, 0, 1 }, ny[3], ay[3];
    kt_init(&t, "Not", 1);
    kt_input(&t, INFD_DTYPE_BOOL, 1, (int64_t[]){ 3 }, NULL);
    kt_output(&t, INFD_DTYPE_BOOL, 1, (int64_t[]){ 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ n }), ((void *[]){ ny }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(ny, ((uint8_t[]){ 0, 1, 0 }), 3);
    kt_init(&t, "And", 7);
    kt_input(&t, INFD_DTYPE_BOOL, 1, (int64_t[]){ 3 }, NULL);
    kt_input(&t, INFD_DTYPE_BOOL, 1, (int64_t[]){ 3 }, NULL);
    kt_output(&t, INFD_DTYPE_BOOL, 1, (int64_t[]){ 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ n, ny }), ((void *[]){ ay }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(ay, ((uint8_t[]){ 0, 0, 0 }), 3);
}

static void test_variadic_sum_mean_min_max(void)
{
    float a[6] = { 1, 2, 3, 4, 5, 6 }, b[3] = { 10, 20, 30 }, c = 100, y[6];
    const char *ops[] = { "Sum", "Mean", "Min", "Max" };
    float want[4][6] = {
        { 111, 122, 133, 114, 125, 136 },
        { 37, 122.0f / 3, 133.0f / 3, 38, 125.0f / 3, 136.0f / 3 },
        { 1, 2, 3, 4, 5, 6 },
        { 100, 100, 100, 100, 100, 100 },
    };
    for (int i = 0; i < 4; i++) {
        kt t;
        kt_init(&t, ops[i], 13);
        kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 3 }, NULL);
        kt_input(&t, INFD_DTYPE_FP32, 0, NULL, NULL);
        kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 });
        ASSERT_RUN_OK(&t, ((const void *[]){ a, b, &c }), ((void *[]){ y }));
        kt_fini(&t);
        ASSERT_F32_ARRAY(y, want[i], 6, 1e-6f);
    }
    /* INT64 Max with two inputs and Min with one. */
    int64_t p[3] = { -1, 5, 2 }, q[3] = { 0, 4, 9 }, r[3];
    kt t;
    kt_init(&t, "Max", 13);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ p, q }), ((void *[]){ r }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(r, ((int64_t[]){ 0, 5, 9 }), 3);
    kt_init(&t, "Min", 13);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ p }), ((void *[]){ r }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(r, p, 3);
}

static void run_unary(const char *op, const float *x, float *y, int n)
{
    kt t;
    kt_init(&t, op, 13);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ n }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ n });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
}

static void test_unary_values(void)
{
    const float x[5] = { -2.0f, -0.5f, 0.0f, 0.5f, 4.0f };
    float y[5], w[5];
    run_unary("Relu", x, y, 5);
    ASSERT_F32_ARRAY(y, ((float[]){ 0, 0, 0, 0.5f, 4 }), 5, 0);
    run_unary("Sigmoid", x, y, 5);
    for (int i = 0; i < 5; i++)
        w[i] = 1.0f / (1.0f + expf(-x[i]));
    ASSERT_F32_ARRAY(y, w, 5, 1e-6f);
    run_unary("HardSigmoid", x, y, 5);
    ASSERT_F32_ARRAY(y, ((float[]){ 0.1f, 0.4f, 0.5f, 0.6f, 1.0f }), 5, 1e-6f);
    run_unary("LeakyRelu", x, y, 5);
    ASSERT_F32_ARRAY(y, ((float[]){ -0.02f, -0.005f, 0, 0.5f, 4 }), 5, 1e-6f);
    run_unary("Abs", x, y, 5);
    ASSERT_F32_ARRAY(y, ((float[]){ 2, 0.5f, 0, 0.5f, 4 }), 5, 0);
    run_unary("Floor", x, y, 5);
    ASSERT_F32_ARRAY(y, ((float[]){ -2, -1, 0, 0, 4 }), 5, 0);
    run_unary("Ceil", x, y, 5);
    ASSERT_F32_ARRAY(y, ((float[]){ -2, -0.0f, 0, 1, 4 }), 5, 0);
    run_unary("Neg", x, y, 5);
    ASSERT_F32_ARRAY(y, ((float[]){ 2, 0.5f, 0, -0.5f, -4 }), 5, 0);
    run_unary("Round", x, y, 5);
    ASSERT_F32_ARRAY(y, ((float[]){ -2, -0.0f, 0, 0, 4 }), 5, 0);
    run_unary("HardSwish", x, y, 5);
    ASSERT_F32_ARRAY(
        y, ((float[]){ -1.0f / 3.0f, -0.5f * (5.0f / 12.0f), 0, 0.5f * (7.0f / 12.0f), 4 }), 5,
        1e-6f);
    const float p[3] = { 0.0f, 4.0f, 0.25f };
    run_unary("Sqrt", p, y, 3);
    ASSERT_F32_ARRAY(y, ((float[]){ 0, 2, 0.5f }), 3, 0);
    run_unary("Reciprocal", (const float[]){ 4, -0.5f }, y, 2);
    ASSERT_F32_ARRAY(y, ((float[]){ 0.25f, -2 }), 2, 0);
    run_unary("Erf", (const float[]){ 0, 1 }, y, 2);
    ASSERT_F32_ARRAY(y, ((float[]){ 0, 0.8427007929f }), 2, 1e-6f);
    run_unary("Tanh", (const float[]){ 0, 1 }, y, 2);
    ASSERT_F32_ARRAY(y, ((float[]){ 0, 0.761594156f }), 2, 1e-6f);
    run_unary("Exp", (const float[]){ 0, 1 }, y, 2);
    ASSERT_F32_ARRAY(y, ((float[]){ 1, 2.718281828f }), 2, 1e-6f);
    run_unary("Log", (const float[]){ 1, 2.718281828f }, y, 2);
    ASSERT_F32_ARRAY(y, ((float[]){ 0, 1 }), 2, 1e-6f);
}

static void test_unary_large_fp16_and_int(void)
{
    enum { N = 50000 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    rt_fill_f32(x, N);
    run_unary("Sigmoid", x, y, N);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += fabsf(y[i] - 1.0f / (1.0f + expf(-x[i]))) > 1e-6f;
    free(x);
    free(y);
    ASSERT_EQ_INT(bad, 0);

    uint16_t h[3], hy[3];
    infd_fp32_to_fp16_n(h, (const float[]){ -1.0f, 0.25f, 9.0f }, 3);
    kt t;
    kt_init(&t, "Relu", 14);
    kt_input(&t, INFD_DTYPE_FP16, 1, (int64_t[]){ 3 }, NULL);
    kt_output(&t, INFD_DTYPE_FP16, 1, (int64_t[]){ 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ h }), ((void *[]){ hy }));
    kt_fini(&t);
    float f[3];
    infd_fp16_to_fp32_n(f, hy, 3);
    ASSERT_F32_ARRAY(f, ((float[]){ 0, 0.25f, 9 }), 3, 0);

    int32_t iv[3] = { -5, INT32_MIN, 7 }, iy[3];
    kt_init(&t, "Abs", 13);
    kt_input(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ iv }), ((void *[]){ iy }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(iy, ((int32_t[]){ 5, INT32_MIN, 7 }), 3);

    infd_error why = { 0 };
    kt_init(&t, "Sigmoid", 13);
    kt_input(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ 3 });
    ASSERT_FALSE(rt_supported(&t, &why));
    kt_fini(&t);
    ASSERT_STR_HAS(why.msg, "INT32");
}

static void test_clip_forms(void)
{
    float x[5] = { -3, -1, 0, 1, 3 }, y[5];
    kt t;
    /* Opset 6: attributes. */
    kt_init(&t, "Clip", 6);
    kt_attr_float(&t, "min", -1.5f);
    kt_attr_float(&t, "max", 2.0f);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 5 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 5 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, ((float[]){ -1.5f, -1, 0, 1, 2 }), 5, 0);

    /* Opset 13: constant min, omitted max (ReLU6-like with max only below). */
    float lo = 0.0f, hi = 1.0f;
    kt_init(&t, "Clip", 13);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 5 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 0, NULL, &lo);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 5 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x, &lo }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, ((float[]){ 0, 0, 0, 1, 3 }), 5, 0);

    /* Opset 13: omitted min, max read at run time. */
    kt_init(&t, "Clip", 13);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 5 }, NULL);
    kt_input_omitted(&t);
    kt_input(&t, INFD_DTYPE_FP32, 0, NULL, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 5 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x, NULL, &hi }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, ((float[]){ -3, -1, 0, 1, 1 }), 5, 0);

    /* INT64 Clip. */
    int64_t ix[4] = { -10, 0, 10, 100 }, ilo = -1, ihi = 50, iy[4];
    kt_init(&t, "Clip", 13);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 0, NULL, &ilo);
    kt_input(&t, INFD_DTYPE_INT64, 0, NULL, &ihi);
    kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 });
    ASSERT_RUN_OK(&t, ((const void *[]){ ix, &ilo, &ihi }), ((void *[]){ iy }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(iy, ((int64_t[]){ -1, 0, 10, 50 }), 4);
}

TEST_MAIN(test_int64_add_broadcast_2x1x3_plus_4x1, test_f32_broadcast_shapes_vs_naive,
          test_integer_div_pow_and_wrap, test_float_pow_and_fp16_add, test_compare_where_not_logic,
          test_variadic_sum_mean_min_max, test_unary_values, test_unary_large_fp16_and_int,
          test_clip_forms)
