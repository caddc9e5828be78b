/*
 * test_dnnl_softmax.c - oneDNN Softmax/LogSoftmax against naive loops, with
 * the axis rule of each opset: coerced to 2-D at `axis` before 13 (default
 * 1), a single axis from 13 (default -1).
 */
#include "dnnl_test.h"

/* Softmax over `n` elements at stride `inner`, for each (outer, inner). */
static void ref_softmax(const float *x, float *y, int64_t outer, int64_t n, int64_t inner,
                        bool take_log)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xs = x + o * n * inner + i;
            float *ys = y + o * n * inner + i;
            float m = xs[0];
            for (int64_t j = 1; j < n; j++)
                m = xs[j * inner] > m ? xs[j * inner] : m;
            double s = 0;
            for (int64_t j = 0; j < n; j++)
                s += exp((double)xs[j * inner] - m);
            for (int64_t j = 0; j < n; j++)
                ys[j * inner] = take_log ? (float)((double)xs[j * inner] - m - log(s))
                                         : (float)(exp((double)xs[j * inner] - m) / s);
        }
}

static void run_softmax(const char *op, int64_t opset, bool has_axis, int64_t axis, int64_t outer,
                        int64_t n, int64_t inner)
{
    int64_t d[4] = { 2, 3, 4, 5 };
    float *x = dt_rand(120, 61), y[120], want[120];
    for (int i = 0; i < 120; i++)
        x[i] *= 4.0f;
    ref_softmax(x, want, outer, n, inner, op[0] == 'L');
    kt t;
    kt_init(&t, op, opset);
    kt_input(&t, INFD_DTYPE_FP32, 4, d, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 4, d);
    if (has_axis)
        kt_attr_int(&t, "axis", axis);
    DT_RUN(&t, ((const void *[]){ x }), ((void *[]){ y }));
    ASSERT_CLOSE(y, want, 120);
    kt_fini(&t);
    free(x);
}

static void test_softmax_opset13_axes(void)
{
    /* [2, 3, 4, 5] */
    run_softmax("Softmax", 13, false, 0, 24, 5, 1); /* default -1 */
    if (!test_failed_)
        run_softmax("Softmax", 13, true, 1, 2, 3, 20);
    if (!test_failed_)
        run_softmax("Softmax", 13, true, -2, 6, 4, 5);
    if (!test_failed_)
        run_softmax("Softmax", 13, true, 0, 1, 2, 60);
}

static void test_softmax_legacy_coerce_2d(void)
{
    run_softmax("Softmax", 11, false, 0, 2, 60, 1); /* default 1: [2, 60] */
    if (!test_failed_)
        run_softmax("Softmax", 11, true, 2, 6, 20, 1);
    if (!test_failed_)
        run_softmax("Softmax", 1, true, -1, 24, 5, 1);
}

static void test_log_softmax(void)
{
    run_softmax("LogSoftmax", 13, true, 2, 6, 4, 5);
    if (!test_failed_)
        run_softmax("LogSoftmax", 11, true, 1, 2, 60, 1);
}

static void test_softmax_declines(void)
{
    kt t;
    kt_init(&t, "Softmax", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 });
    kt_attr_int(&t, "axis", 2);
    DT_DECLINES(&t, "out of range");
    kt_fini(&t);
}

TEST_MAIN(test_softmax_opset13_axes, test_softmax_legacy_coerce_2d, test_log_softmax,
          test_softmax_declines)
