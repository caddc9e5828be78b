/*
 * test_dnnl_norm.c - oneDNN BatchNormalization (inference) and
 * ReduceMean/ReduceSum/ReduceMax/ReduceMin against naive loops: axes from
 * attributes and from the input per opset, keepdims, negative axes, and
 * the declined cases.
 */
#include <float.h>

#include "dnnl_test.h"

/* ---- BatchNormalization --------------------------------------------------- */

static void run_bn(int rank, const int64_t *d, float eps, bool set_eps)
{
    int64_t c = d[1], inner = 1, n = d[0];
    for (int i = 2; i < rank; i++)
        inner *= d[i];
    size_t nx = (size_t)(n * c * inner);
    float *x = dt_rand(nx, 71), *y = calloc(nx, sizeof(float)), *want = calloc(nx, sizeof(float));
    float *scale = dt_rand((size_t)c, 72), *bias = dt_rand((size_t)c, 73);
    float *mean = dt_rand((size_t)c, 74), *var = dt_rand((size_t)c, 75);
    for (int64_t i = 0; i < c; i++)
        var[i] = fabsf(var[i]) + 0.1f;
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t i = 0; i < inner; i++) {
                size_t at = (size_t)((b * c + ch) * inner + i);
                want[at] = (float)((x[at] - mean[ch]) / sqrt((double)var[ch] + eps) * scale[ch] +
                                   bias[ch]);
            }
    kt t;
    kt_init(&t, "BatchNormalization", 15);
    kt_input(&t, INFD_DTYPE_FP32, rank, d, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 1, &c, scale);
    kt_input(&t, INFD_DTYPE_FP32, 1, &c, bias);
    kt_input(&t, INFD_DTYPE_FP32, 1, &c, mean);
    kt_input(&t, INFD_DTYPE_FP32, 1, &c, var);
    kt_output(&t, INFD_DTYPE_FP32, rank, d);
    if (set_eps)
        kt_attr_float(&t, "epsilon", eps);
    DT_RUN(&t, ((const void *[]){ x, scale, bias, mean, var }), ((void *[]){ y }));
    ASSERT_CLOSE(y, want, nx);
    kt_fini(&t);
    free(x);
    free(y);
    free(want);
    free(scale);
    free(bias);
    free(mean);
    free(var);
}

static void test_batchnorm(void)
{
    run_bn(4, (int64_t[]){ 2, 5, 4, 3 }, 1e-5f, false);
    if (!test_failed_)
        run_bn(2, (int64_t[]){ 3, 7 }, 1e-3f, true);
    if (!test_failed_)
        run_bn(5, (int64_t[]){ 1, 3, 2, 3, 4 }, 0.01f, true);
}

static void test_batchnorm_declines(void)
{
    kt t;
    float p[4] = { 1, 1, 1, 1 };
    kt_init(&t, "BatchNormalization", 15);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 4, 2, 2 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, p);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, p);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, NULL); /* computed mean */
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, p);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 4, 2, 2 });
    DT_DECLINES(&t, "constant");
    kt_fini(&t);
    kt_init(&t, "BatchNormalization", 15);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 4, 2, 2 }, NULL);
    for (int i = 0; i < 4; i++)
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, p);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 4, 2, 2 });
    kt_attr_int(&t, "training_mode", 1);
    DT_DECLINES(&t, "inference-only");
    kt_fini(&t);
}

/* ---- Reduce --------------------------------------------------------------- */

/* Reduces a [2, 3, 4] tensor over the axes in `mask` (bit i: axis i). */
static void ref_reduce(const char *op, const float *x, unsigned mask, float *y)
{
    int64_t d[3] = { 2, 3, 4 }, od[3];
    for (int i = 0; i < 3; i++)
        od[i] = mask & (1u << i) ? 1 : d[i];
    int64_t ny = od[0] * od[1] * od[2], cnt = 24 / ny;
    for (int64_t i = 0; i < ny; i++)
        y[i] = op[6] == 'M' && op[7] == 'a' ? -FLT_MAX : op[6] == 'M' && op[7] == 'i' ? FLT_MAX : 0;
    for (int64_t a = 0; a < 2; a++)
        for (int64_t b = 0; b < 3; b++)
            for (int64_t c = 0; c < 4; c++) {
                int64_t oa = od[0] == 1 ? 0 : a, ob = od[1] == 1 ? 0 : b, oc = od[2] == 1 ? 0 : c;
                float *o = &y[(oa * od[1] + ob) * od[2] + oc];
                float v = x[(a * 3 + b) * 4 + c];
                if (strcmp(op, "ReduceMax") == 0)
                    *o = v > *o ? v : *o;
                else if (strcmp(op, "ReduceMin") == 0)
                    *o = v < *o ? v : *o;
                else
                    *o += v;
            }
    if (strcmp(op, "ReduceMean") == 0)
        for (int64_t i = 0; i < ny; i++)
            y[i] /= (float)cnt;
}

/* axes == NULL: none given (all axes). */
static void run_reduce(const char *op, int64_t opset, int n_axes, const int64_t *axes,
                       bool keepdims)
{
    int64_t d[3] = { 2, 3, 4 }, yd[3];
    unsigned mask = 0;
    for (int i = 0; i < n_axes; i++)
        mask |= 1u << (axes[i] < 0 ? axes[i] + 3 : axes[i]);
    if (!axes)
        mask = 7;
    int yr = 0;
    for (int i = 0; i < 3; i++) {
        if (!(mask & (1u << i)))
            yd[yr++] = d[i];
        else if (keepdims)
            yd[yr++] = 1;
    }
    float *x = dt_rand(24, 81), y[24], want[24];
    ref_reduce(op, x, mask, want);
    int64_t ny = 1;
    for (int i = 0; i < yr; i++)
        ny *= yd[i];
    kt t;
    kt_init(&t, op, opset);
    kt_input(&t, INFD_DTYPE_FP32, 3, d, NULL);
    bool axes_input = opset >= (strcmp(op, "ReduceSum") == 0 ? 13 : 18);
    if (axes && axes_input)
        kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ n_axes }, axes);
    else if (axes)
        kt_attr_ints(&t, "axes", n_axes, axes);
    kt_output(&t, INFD_DTYPE_FP32, yr, yd);
    kt_attr_int(&t, "keepdims", keepdims);
    DT_RUN(&t, ((const void *[]){ x, axes }), ((void *[]){ y }));
    ASSERT_CLOSE(y, want, (size_t)ny);
    kt_fini(&t);
    free(x);
}

static void test_reduce_attr_axes(void)
{
    run_reduce("ReduceMean", 13, 1, (int64_t[]){ 1 }, true);
    if (!test_failed_)
        run_reduce("ReduceMean", 13, 2, (int64_t[]){ -1, 0 }, false);
    if (!test_failed_)
        run_reduce("ReduceMax", 13, 1, (int64_t[]){ 2 }, false);
    if (!test_failed_)
        run_reduce("ReduceMin", 11, 1, (int64_t[]){ 0 }, true);
    if (!test_failed_)
        run_reduce("ReduceSum", 11, 2, (int64_t[]){ 0, 2 }, true);
    if (!test_failed_)
        run_reduce("ReduceMean", 13, 0, NULL, false); /* all axes */
}

static void test_reduce_input_axes(void)
{
    run_reduce("ReduceSum", 13, 1, (int64_t[]){ -2 }, true);
    if (!test_failed_)
        run_reduce("ReduceMean", 18, 2, (int64_t[]){ 1, 2 }, false);
    if (!test_failed_)
        run_reduce("ReduceMax", 18, 0, NULL, true);
}

static void test_reduce_declines(void)
{
    kt t;
    kt_init(&t, "ReduceSum", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, NULL); /* computed axes */
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 1 });
    DT_DECLINES(&t, "constant axes");
    kt_fini(&t);
    kt_init(&t, "ReduceSum", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 });
    kt_attr_int(&t, "noop_with_empty_axes", 1);
    DT_DECLINES(&t, "identity");
    kt_fini(&t);
}

TEST_MAIN(test_batchnorm, test_batchnorm_declines, test_reduce_attr_axes, test_reduce_input_axes,
          test_reduce_declines)
