/*
 * test_ref_reduce.c - reductions (axes as attribute and as input, keepdims,
 * noop_with_empty_axes, INT64), Softmax/LogSoftmax in both axis
 * conventions, and the MatMul fallback, against naive loops.
 */
#include <stdint.h>

#include "ref_test.h"
#include "test.h"

/* Naive reduction of a [2,3,4,5] tensor over the axes in `mask`. */
static void naive_reduce(const float *x, const int64_t *dims, const bool *mask, int op, float *out)
{
    int64_t od[4], on = 1;
    for (int d = 0; d < 4; d++) {
        od[d] = mask[d] ? 1 : dims[d];
        on *= od[d];
    }
    for (int64_t o = 0; o < on; o++) {
        int64_t oi[4], rem = o;
        for (int d = 3; d >= 0; d--) {
            oi[d] = rem % od[d];
            rem /= od[d];
        }
        double acc = op == 2 ? -INFINITY : 0;
        int64_t count = 0;
        for (int64_t i = 0; i < dims[0] * dims[1] * dims[2] * dims[3]; i++) {
            int64_t ii[4], r = i;
            bool in = true;
            for (int d = 3; d >= 0; d--) {
                ii[d] = r % dims[d];
                r /= dims[d];
                if (!mask[d] && ii[d] != oi[d])
                    in = false;
            }
            if (!in)
                continue;
            count++;
            acc = op == 2 ? (x[i] > acc ? x[i] : acc) : acc + x[i];
        }
        out[o] = (float)(op == 1 ? acc / (double)count : acc);
    }
}

static void run_reduce(const char *op_name, int op, int64_t opset, const int64_t *axes,
                       int32_t n_axes, bool axes_input, int keepdims)
{
    int64_t dims[4] = { 2, 3, 4, 5 }, od[4], kd[4];
    bool mask[4] = { false, false, false, false };
    for (int32_t i = 0; i < n_axes; i++)
        mask[axes[i] < 0 ? axes[i] + 4 : axes[i]] = true;
    if (n_axes == 0)
        mask[0] = mask[1] = mask[2] = mask[3] = true;
    int32_t orank = 0;
    for (int d = 0; d < 4; d++) {
        kd[d] = mask[d] ? 1 : dims[d];
        if (keepdims || !mask[d])
            od[orank++] = kd[d];
    }
    float x[120], y[120], want[120];
    rt_fill_f32(x, 120);
    naive_reduce(x, dims, mask, op, want);
    int64_t on = kd[0] * kd[1] * kd[2] * kd[3];
    kt t;
    kt_init(&t, op_name, opset);
    kt_attr_int(&t, "keepdims", keepdims);
    kt_input(&t, INFD_DTYPE_FP32, 4, dims, NULL);
    if (axes_input && n_axes)
        kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ n_axes }, axes);
    else if (n_axes)
        kt_attr_ints(&t, "axes", n_axes, axes);
    kt_output(&t, INFD_DTYPE_FP32, orank, od);
    infd_error e = { 0 };
    infd_status st = rt_run(&t, (const void *[]){ x, axes }, (void *[]){ y }, &e);
    kt_fini(&t);
    if (st != INFD_STATUS_OK)
        TEST_FAIL_("%s: %s", op_name, e.msg);
    ASSERT_F32_ARRAY(y, want, on, 1e-5f);
}

static void test_reduce_axes_forms(void)
{
    run_reduce("ReduceMean", 1, 13, (int64_t[]){ 2, 3 }, 2, false, 1);
    run_reduce("ReduceMean", 1, 18, (int64_t[]){ -1, -2 }, 2, true, 0);
    run_reduce("ReduceMean", 1, 13, (int64_t[]){ 1 }, 1, false, 1);
    run_reduce("ReduceSum", 0, 11, (int64_t[]){ 0, 2 }, 2, false, 0);
    run_reduce("ReduceSum", 0, 13, (int64_t[]){ 1, 3 }, 2, true, 1);
    run_reduce("ReduceSum", 0, 13, NULL, 0, true, 0);
    run_reduce("ReduceMax", 2, 13, (int64_t[]){ 0 }, 1, false, 1);
    run_reduce("ReduceMax", 2, 18, (int64_t[]){ 3 }, 1, true, 0);
}

static void test_reduce_int64_noop_and_empty(void)
{
    int64_t x[6] = { 1, -7, 3, 4, 5, 6 }, y[3];
    kt t;
    kt_init(&t, "ReduceMin", 13);
    kt_attr_ints(&t, "axes", 1, (int64_t[]){ 0 });
    kt_attr_int(&t, "keepdims", 0);
    kt_input(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 1, -7, 3 }), 3);

    int64_t p = 0;
    kt_init(&t, "ReduceProd", 13);
    kt_attr_int(&t, "keepdims", 0);
    kt_input(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 0, NULL);
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ &p }));
    kt_fini(&t);
    ASSERT_EQ_I64(p, -2520);

    /* noop_with_empty_axes: identity. */
    float f[4] = { 1, 2, 3, 4 }, g[4];
    kt_init(&t, "ReduceSum", 13);
    kt_attr_int(&t, "noop_with_empty_axes", 1);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 2 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 2 });
    ASSERT_RUN_OK(&t, ((const void *[]){ f }), ((void *[]){ g }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(g, f, 4, 0);

    /* Reducing an empty axis gives the identity of the op. */
    float s[3];
    kt_init(&t, "ReduceSum", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 0, 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, (int64_t[]){ 0 });
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 1, 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ f, (int64_t[]){ 0 } }), ((void *[]){ s }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(s, ((float[]){ 0, 0, 0 }), 3, 0);

    /* L2 and SumSquare. */
    float l2 = 0, v[2] = { 3, 4 };
    kt_init(&t, "ReduceL2", 13);
    kt_attr_int(&t, "keepdims", 0);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 2 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 0, NULL);
    ASSERT_RUN_OK(&t, ((const void *[]){ v }), ((void *[]){ &l2 }));
    kt_fini(&t);
    ASSERT_TRUE(l2 == 5.0f);
}

static void naive_softmax(const float *x, float *y, int64_t outer, int64_t len, int64_t inner,
                          bool is_log)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t l = 0; l < len; l++)
                mx = fmax(mx, x[(o * len + l) * inner + i]);
            for (int64_t l = 0; l < len; l++)
                sum += exp(x[(o * len + l) * inner + i] - mx);
            for (int64_t l = 0; l < len; l++) {
                double v = x[(o * len + l) * inner + i] - mx;
                y[(o * len + l) * inner + i] = (float)(is_log ? v - log(sum) : exp(v) / sum);
            }
        }
}

static void run_softmax(const char *op, int64_t opset, int64_t axis, int64_t outer, int64_t len,
                        int64_t inner)
{
    int64_t n = outer * len * inner;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n),
          *w = malloc(sizeof(float) * (size_t)n);
    rt_fill_f32(x, n);
    for (int64_t i = 0; i < n; i++)
        x[i] *= 20.0f; /* large logits: needs the max shift */
    naive_softmax(x, w, outer, len, inner, op[0] == 'L');
    kt t;
    kt_init(&t, op, opset);
    kt_attr_int(&t, "axis", axis);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ outer, len, inner }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ outer, len, inner });
    infd_error e = { 0 };
    infd_status st = rt_run(&t, (const void *[]){ x }, (void *[]){ y }, &e);
    kt_fini(&t);
    int64_t bad = rt_mismatch_f32(y, w, n, 1e-5f);
    free(x);
    free(y);
    free(w);
    if (st != INFD_STATUS_OK)
        TEST_FAIL_("%s: %s", op, e.msg);
    if (bad >= 0)
        TEST_FAIL_("%s opset %d axis %d [%d,%d,%d]: mismatch at %d", op, (int)opset, (int)axis,
                   (int)outer, (int)len, (int)inner, (int)bad);
}

static void test_softmax_axes(void)
{
    /* Opset 13, axis 1 of [2,3,70]: strided axis (inner 70, ragged blocks). */
    run_softmax("Softmax", 13, 1, 2, 3, 70);
    /* Opset 13, last axis. */
    run_softmax("Softmax", 13, -1, 6, 1, 1);
    run_softmax("LogSoftmax", 13, 1, 2, 3, 1);
    run_softmax("LogSoftmax", 13, 1, 2, 5, 3);
    /* Opset 11, axis 1: coerced to 2-D, so [2, 3*70] rows. */
    int64_t n = 2 * 3 * 70;
    float x[420], y[420], w[420];
    rt_fill_f32(x, n);
    naive_softmax(x, w, 2, 210, 1, false);
    kt t;
    kt_init(&t, "Softmax", 11);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 3, 70 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 3, 70 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, w, n, 1e-5f);
    /* Many rows: pool path. */
    run_softmax("Softmax", 13, 1, 400, 100, 1);
}

static void test_matmul_broadcast_and_1d(void)
{
    /* [2,1,3,4] x [3,4,5] -> [2,3,3,5] */
    float a[24], b[60], y[90], w[90];
    rt_fill_f32(a, 24);
    rt_fill_f32(b, 60);
    for (int i0 = 0; i0 < 2; i0++)
        for (int i1 = 0; i1 < 3; i1++)
            for (int m = 0; m < 3; m++)
                for (int n = 0; n < 5; n++) {
                    float s = 0;
                    for (int k = 0; k < 4; k++)
                        s += a[(i0 * 3 + m) * 4 + k] * b[(i1 * 4 + k) * 5 + n];
                    w[((i0 * 3 + i1) * 3 + m) * 5 + n] = s;
                }
    kt t;
    kt_init(&t, "MatMul", 13);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 2, 1, 3, 4 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 3, 4, 5 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 2, 3, 3, 5 });
    ASSERT_RUN_OK(&t, ((const void *[]){ a, b }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, w, 90, 1e-5f);

    /* 1-D x 2-D and 2-D x 1-D. */
    float v[2] = { 1, 2 }, m[6] = { 1, 2, 3, 4, 5, 6 }, r[3], q[2];
    kt_init(&t, "MatMul", 13);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 2 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ v, m }), ((void *[]){ r }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(r, ((float[]){ 9, 12, 15 }), 3, 0);
    kt_init(&t, "MatMul", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 3 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 2 });
    ASSERT_RUN_OK(&t, ((const void *[]){ m, (float[]){ 1, 0, -1 } }), ((void *[]){ q }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(q, ((float[]){ -2, -2 }), 2, 0);
}

/* LayerNormalization over the last axis and the last two, with and without
 * B and the optional Mean/InvStdDev outputs. */
static void test_layernorm(void)
{
    float x[12], y[12], mean[6], inv[6], want[12], scale[8], bias[8];
    rt_fill_f32(x, 12);
    rt_fill_f32(scale, 8);
    rt_fill_f32(bias, 8);
    for (int axis = 1; axis <= 2; axis++) {
        /* x is [3, 2, 2]: axis 1 normalises rows of 4, axis 2 (as -1) rows of 2. */
        int64_t len = axis == 1 ? 4 : 2, rows = 12 / len;
        float wm[6], wi[6];
        for (int64_t r = 0; r < rows; r++) {
            double s = 0, q = 0;
            for (int64_t i = 0; i < len; i++)
                s += x[r * len + i];
            double m = s / (double)len;
            for (int64_t i = 0; i < len; i++)
                q += (x[r * len + i] - m) * (x[r * len + i] - m);
            double iv = 1.0 / sqrt(q / (double)len + 1e-3);
            wm[r] = (float)m;
            wi[r] = (float)iv;
            for (int64_t i = 0; i < len; i++)
                want[r * len + i] = (float)((x[r * len + i] - m) * iv * scale[i] + bias[i]);
        }
        int64_t tail[2] = { 2, 2 };
        kt t;
        kt_init(&t, "LayerNormalization", 17);
        kt_attr_int(&t, "axis", axis == 1 ? 1 : -1);
        kt_attr_float(&t, "epsilon", 1e-3f);
        kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 3, 2, 2 }, NULL);
        kt_input(&t, INFD_DTYPE_FP32, axis == 1 ? 2 : 1, axis == 1 ? tail : tail + 1, NULL);
        kt_input(&t, INFD_DTYPE_FP32, axis == 1 ? 2 : 1, axis == 1 ? tail : tail + 1, NULL);
        kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 3, 2, 2 });
        kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 3, axis == 1 ? 1 : 2, 1 });
        kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 3, axis == 1 ? 1 : 2, 1 });
        ASSERT_RUN_OK(&t, ((const void *[]){ x, scale, bias }), ((void *[]){ y, mean, inv }));
        kt_fini(&t);
        ASSERT_F32_ARRAY(y, want, 12, 1e-5f);
        ASSERT_F32_ARRAY(mean, wm, rows, 1e-6f);
        ASSERT_F32_ARRAY(inv, wi, rows, 1e-5f);
    }

    /* No B, Y only. */
    float x2[4] = { 1, 2, 3, 4 }, s2[2] = { 1, 2 }, y2[4];
    kt t;
    kt_init(&t, "LayerNormalization", 17);
    kt_attr_float(&t, "epsilon", 0.0f);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 2 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 2 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 2 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x2, s2 }), ((void *[]){ y2 }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y2, ((float[]){ -1, 2, -1, 2 }), 4, 1e-6f);
}

TEST_MAIN(test_reduce_axes_forms, test_reduce_int64_noop_and_empty, test_softmax_axes,
          test_matmul_broadcast_and_1d, test_layernorm)
