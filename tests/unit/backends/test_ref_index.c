/*
 * test_ref_index.c - ArgMax/ArgMin (axis, keepdims, select_last_index,
 * dtypes), IsNaN/IsInf, Trilu (upper/lower, k in and out of range, batches)
 * Mod (both fmod modes, signs, broadcasting, division by zero), CumSum,
 * EyeLike, OneHot and Hardmax against hand-computed values; ReduceLogSumExp
 * against a naive loop.
 */
#include <stdint.h>

#include "ref_test.h"
#include "test.h"

static void test_argmax_argmin(void)
{
    /* [2, 3]: ties in row 0. */
    float x[6] = { 1, 5, 5, 7, -2, 7 };
    int64_t y[3];
    kt t;
    kt_init(&t, "ArgMax", 13);
    kt_attr_int(&t, "axis", 1);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 2, 1 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 1, 0 }), 2);

    kt_init(&t, "ArgMax", 13);
    kt_attr_int(&t, "axis", -1);
    kt_attr_int(&t, "keepdims", 0);
    kt_attr_int(&t, "select_last_index", 1);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 2 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 2, 2 }), 2);

    /* ArgMin over axis 0 (strided), INT32 and INT64. */
    int32_t xi[6] = { 3, -1, 4, 3, -5, 2 };
    kt_init(&t, "ArgMin", 13);
    kt_input(&t, INFD_DTYPE_INT32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 1, 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ xi }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 0, 1, 1 }), 3);

    int64_t xl[6] = { 3, -1, 4, 3, -5, 2 };
    kt_init(&t, "ArgMin", 13);
    kt_attr_int(&t, "select_last_index", 1);
    kt_input(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 1, 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ xl }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 1, 1, 1 }), 3);

    /* Declined dtype, with a reason. */
    kt_init(&t, "ArgMax", 13);
    kt_input(&t, INFD_DTYPE_UINT8, 1, (int64_t[]){ 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 });
    infd_error e = { 0 };
    ASSERT_TRUE(!rt_supported(&t, &e));
    ASSERT_TRUE(e.code == INFD_STATUS_UNIMPLEMENTED);
    kt_fini(&t);
}

static void test_isnan_isinf(void)
{
    float x[5] = { 1.0f, NAN, INFINITY, -INFINITY, -0.0f };
    uint8_t y[5];
    kt t;
    kt_init(&t, "IsNaN", 13);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 5 }, NULL);
    kt_output(&t, INFD_DTYPE_BOOL, 1, (int64_t[]){ 5 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 0, 1, 0, 0, 0 }), 5);

    kt_init(&t, "IsInf", 10);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 5 }, NULL);
    kt_output(&t, INFD_DTYPE_BOOL, 1, (int64_t[]){ 5 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 0, 0, 1, 1, 0 }), 5);

    double xd[5] = { 1.0, NAN, INFINITY, -INFINITY, 0.0 };
    kt_init(&t, "IsInf", 10);
    kt_attr_int(&t, "detect_positive", 0);
    kt_input(&t, INFD_DTYPE_FP64, 1, (int64_t[]){ 5 }, NULL);
    kt_output(&t, INFD_DTYPE_BOOL, 1, (int64_t[]){ 5 });
    ASSERT_RUN_OK(&t, ((const void *[]){ xd }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 0, 0, 0, 1, 0 }), 5);
}

static void test_trilu(void)
{
    /* [2, 3, 4] of 1..24. */
    int64_t x[24], y[24];
    for (int i = 0; i < 24; i++)
        x[i] = i + 1;
    kt t;
    kt_init(&t, "Trilu", 14);
    kt_input(&t, INFD_DTYPE_INT64, 3, (int64_t[]){ 2, 3, 4 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 3, (int64_t[]){ 2, 3, 4 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 1,  2,  3,  4,  0, 6,  7,  8,  0, 0, 11, 12,
                                      13, 14, 15, 16, 0, 18, 19, 20, 0, 0, 23, 24 }),
                     24);

    /* Lower with k = -1, float, k as an input. */
    float xf[12], yf[12];
    for (int i = 0; i < 12; i++)
        xf[i] = (float)(i + 1);
    int64_t k = -1;
    kt_init(&t, "Trilu", 14);
    kt_attr_int(&t, "upper", 0);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 4 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 0, NULL, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 4 });
    ASSERT_RUN_OK(&t, ((const void *[]){ xf, &k }), ((void *[]){ yf }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(yf, ((float[]){ 0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0 }), 12, 0);

    /* k far out of range either way: upper keeps all / nothing. */
    int64_t ks[2] = { -100, 100 };
    for (int c = 0; c < 2; c++) {
        kt_init(&t, "Trilu", 14);
        kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 4 }, NULL);
        kt_input(&t, INFD_DTYPE_INT64, 0, NULL, NULL);
        kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 4 });
        ASSERT_RUN_OK(&t, ((const void *[]){ xf, &ks[c] }), ((void *[]){ yf }));
        kt_fini(&t);
        for (int i = 0; i < 12; i++)
            ASSERT_TRUE(yf[i] == (c == 0 ? xf[i] : 0.0f));
    }
}

static void test_mod(void)
{
    int32_t a[4] = { 5, -5, 5, -5 }, b[4] = { 3, 3, -3, -3 }, y[4];
    int64_t want_floor[4] = { 2, 1, -1, -2 }, want_trunc[4] = { 2, -2, 2, -2 };
    for (int fm = 0; fm < 2; fm++) {
        kt t;
        kt_init(&t, "Mod", 13);
        kt_attr_int(&t, "fmod", fm);
        kt_input(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ 4 }, NULL);
        kt_input(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ 4 }, NULL);
        kt_output(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ 4 });
        ASSERT_RUN_OK(&t, ((const void *[]){ a, b }), ((void *[]){ y }));
        kt_fini(&t);
        ASSERT_I64_ARRAY(y, fm ? want_trunc : want_floor, 4);
    }

    /* Broadcast [2, 3] % [3], division by zero gives 0, INT8 MIN % -1. */
    int8_t a8[6] = { 7, -7, 9, -128, 10, 11 }, b8[3] = { -1, 4, 0 }, y8[6];
    kt t;
    kt_init(&t, "Mod", 13);
    kt_input(&t, INFD_DTYPE_INT8, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT8, 1, (int64_t[]){ 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT8, 2, (int64_t[]){ 2, 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ a8, b8 }), ((void *[]){ y8 }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y8, ((int64_t[]){ 0, 1, 0, 0, 2, 0 }), 6);

    /* Floats need fmod=1 and follow C fmod. */
    float af[3] = { 5.5f, -5.5f, 4.0f }, bf[3] = { 2.0f, 2.0f, -3.0f }, yf[3];
    kt_init(&t, "Mod", 13);
    kt_attr_int(&t, "fmod", 1);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 3 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 3 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ af, bf }), ((void *[]){ yf }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(yf, ((float[]){ 1.5f, -1.5f, 1.0f }), 3, 0);

    kt_init(&t, "Mod", 13);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 3 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 3 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 3 });
    infd_error e = { 0 };
    ASSERT_TRUE(!rt_supported(&t, &e));
    kt_fini(&t);

    /* Unsigned. */
    uint64_t au[2] = { 10, UINT64_MAX }, bu[2] = { 3, 10 }, yu[2];
    kt_init(&t, "Mod", 13);
    kt_input(&t, INFD_DTYPE_UINT64, 1, (int64_t[]){ 2 }, NULL);
    kt_input(&t, INFD_DTYPE_UINT64, 1, (int64_t[]){ 2 }, NULL);
    kt_output(&t, INFD_DTYPE_UINT64, 1, (int64_t[]){ 2 });
    ASSERT_RUN_OK(&t, ((const void *[]){ au, bu }), ((void *[]){ yu }));
    kt_fini(&t);
    ASSERT_TRUE(yu[0] == 1 && yu[1] == 5);
}

static void test_reduce_log_sum_exp(void)
{
    /* [3, 4] over axis 1 (contiguous) and axis 0 (strided), FP32 and FP64. */
    float x[12], y[4];
    double xd[12], yd[4];
    rt_fill_f32(x, 12);
    for (int i = 0; i < 12; i++)
        xd[i] = (double)x[i] * 5.0;
    for (int axis = 0; axis < 2; axis++) {
        int64_t n_out = axis ? 3 : 4;
        float want[4];
        double want_d[4];
        for (int64_t o = 0; o < n_out; o++) {
            double s = 0, sd = 0;
            for (int64_t r = 0; r < (axis ? 4 : 3); r++) {
                int64_t i = axis ? o * 4 + r : r * 4 + o;
                s += exp((double)x[i]);
                sd += exp(xd[i]);
            }
            want[o] = (float)log(s);
            want_d[o] = log(sd);
        }
        kt t;
        kt_init(&t, "ReduceLogSumExp", 13);
        kt_attr_ints(&t, "axes", 1, (int64_t[]){ axis });
        kt_attr_int(&t, "keepdims", 0);
        kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 4 }, NULL);
        kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ n_out });
        ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
        kt_fini(&t);
        ASSERT_F32_ARRAY(y, want, n_out, 1e-5f);

        kt_init(&t, "ReduceLogSumExp", 18);
        kt_attr_int(&t, "keepdims", 0);
        kt_input(&t, INFD_DTYPE_FP64, 2, (int64_t[]){ 3, 4 }, NULL);
        kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, (int64_t[]){ axis });
        kt_output(&t, INFD_DTYPE_FP64, 1, (int64_t[]){ n_out });
        ASSERT_RUN_OK(&t, ((const void *[]){ xd, (int64_t[]){ axis } }), ((void *[]){ yd }));
        kt_fini(&t);
        for (int64_t o = 0; o < n_out; o++)
            ASSERT_TRUE(fabs(yd[o] - want_d[o]) <= 1e-12 * (1 + fabs(want_d[o])));
    }
}

static void test_cumsum(void)
{
    /* [2, 3] along axis 1 (constant) and axis 0 (run-time input), all flags. */
    double x[6] = { 1, 2, 3, 4, 5, 6 }, y[6];
    static const double want[4][6] = {
        { 1, 3, 6, 4, 9, 15 },  /* plain */
        { 0, 1, 3, 0, 4, 9 },   /* exclusive */
        { 6, 5, 3, 15, 11, 6 }, /* reverse */
        { 5, 3, 0, 11, 6, 0 },  /* reverse exclusive */
    };
    int32_t axis = 1;
    for (int c = 0; c < 4; c++) {
        kt t;
        kt_init(&t, "CumSum", 14);
        kt_attr_int(&t, "exclusive", c & 1);
        kt_attr_int(&t, "reverse", c >> 1);
        kt_input(&t, INFD_DTYPE_FP64, 2, (int64_t[]){ 2, 3 }, NULL);
        kt_input(&t, INFD_DTYPE_INT32, 0, NULL, &axis);
        kt_output(&t, INFD_DTYPE_FP64, 2, (int64_t[]){ 2, 3 });
        ASSERT_RUN_OK(&t, ((const void *[]){ x, &axis }), ((void *[]){ y }));
        kt_fini(&t);
        for (int i = 0; i < 6; i++)
            ASSERT_TRUE(y[i] == want[c][i]);
    }
    int64_t xi[6] = { 1, 2, 3, 4, 5, 6 }, yi[6], ax0 = -2;
    kt t;
    kt_init(&t, "CumSum", 14);
    kt_input(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 2, 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ xi, &ax0 }), ((void *[]){ yi }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(yi, ((int64_t[]){ 1, 2, 3, 5, 7, 9 }), 6);
}

static void test_eye_like_one_hot(void)
{
    float x[6] = { 0 };
    int32_t y[6];
    kt t;
    kt_init(&t, "EyeLike", 9);
    kt_attr_int(&t, "k", 1);
    kt_attr_int(&t, "dtype", 6); /* ONNX INT32 */
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT32, 2, (int64_t[]){ 2, 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 0, 1, 0, 0, 0, 1 }), 6);

    /* Indices [3] = {1, -1, 5}, depth 3 on axis 0: out [3 (depth), 3]; 5 is
     * out of range and gives an all-off column. */
    int64_t idx[3] = { 1, -1, 5 }, depth = 3;
    float values[2] = { -1, 2 }, yo[9];
    kt_init(&t, "OneHot", 11);
    kt_attr_int(&t, "axis", 0);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 0, NULL, &depth);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 2 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ idx, &depth, values }), ((void *[]){ yo }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(yo, ((float[]){ -1, -1, -1, 2, -1, -1, -1, 2, -1 }), 9, 0);

    /* Depth not constant: declined with a reason. */
    kt_init(&t, "OneHot", 11);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 0, NULL, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 2 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 3 });
    infd_error e = { 0 };
    ASSERT_FALSE(rt_supported(&t, &e));
    ASSERT_TRUE(e.code == INFD_STATUS_UNIMPLEMENTED);
    kt_fini(&t);
}

static void test_hardmax(void)
{
    /* [2, 3]: ties pick the first maximum; axis 0 in opset 13 is per column,
     * axis 0 in opset 11 flattens everything into one line. */
    float x[6] = { 1, 3, 3, 4, 0, 3 }, y[6];
    kt t;
    kt_init(&t, "Hardmax", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, ((float[]){ 0, 1, 0, 1, 0, 0 }), 6, 0);

    kt_init(&t, "Hardmax", 13);
    kt_attr_int(&t, "axis", 0);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, ((float[]){ 0, 1, 1, 1, 0, 0 }), 6, 0);

    kt_init(&t, "Hardmax", 11);
    kt_attr_int(&t, "axis", 0);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, ((float[]){ 0, 0, 0, 1, 0, 0 }), 6, 0);
}

TEST_MAIN(test_argmax_argmin, test_isnan_isinf, test_trilu, test_mod, test_reduce_log_sum_exp,
          test_cumsum, test_eye_like_one_hot, test_hardmax)
