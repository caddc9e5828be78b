/*
 * test_cuda_ops.c - the CUDA kernels of cuda_extra.c (Slice, the Reduce*
 * family, BatchNormalization, ConvTranspose, batched MatMul) against the
 * CPU backend on the same random inputs.
 *
 * Each case builds one node (kernel_test.h), runs it on the CPU backend for
 * the reference, then compiles it with infd_cuda_backend and runs it on
 * device copies of the same inputs through the backend's own memory and
 * stream slots (as test_cuda.c does). Every output is compared: FP32 within
 * |cuda - cpu| <= 1e-4 * (1 + |cpu|) (reductions accumulate in double on
 * both, matmuls and convolutions run FP32 math, so only the summation order
 * differs; the TF32 cases, opt-in, within 1e-2), integers exactly, NaN
 * only against NaN. Each case also checks
 * which kernel ran, so a case meant for cuda_extra.c cannot pass on another
 * table's kernel.
 *
 * Without a GPU (CI), or in a build without CUDA, the binary prints why and
 * exits 77, which ctest reports as skipped.
 */
#include "infd/engine.h"
#include "kernel_test.h"
#ifdef INFD_HAVE_CUDA
#include "cuda_test.h"
#endif
#include "test.h"

#define SKIP_CODE 77

#ifdef INFD_HAVE_CUDA

static const infd_backend_ops *cuda = &infd_cuda_backend;

static char last_kernel[64];
static char fail_msg[1024];
/* The precision kernels are compiled with and the FP32 tolerance (of
 * 1 + |cpu|); test_tf32 raises both. */
static infd_precision check_precision = INFD_PRECISION_FP32;
static double check_tolerance = 1e-4;

static size_t value_numel(kt *t, int32_t v)
{
    const infd_ir_value *val = &t->g->values[v];
    size_t n = 1;
    for (int32_t d = 0; d < val->shape.rank; d++)
        n *= (size_t)val->shape.dims[d].value;
    return n;
}

static void fill_i64(int64_t *p, size_t n, uint32_t seed, int64_t lo, int64_t hi)
{
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = lo + (int64_t)((s >> 8) % (uint32_t)(hi - lo + 1));
    }
}

/* Runs the node on both backends and compares output 0; false with the
 * reason in fail_msg. `kernel` (nullable): a prefix the CUDA kernel's name
 * must have. */
static bool check(kt *t, const void *const *inputs, const char *kernel)
{
    infd_error err = { 0 };
    const infd_ir_value *y = &t->g->values[t->outs[0]];
    size_t n = value_numel(t, t->outs[0]), nb = ct_value_bytes(t, t->outs[0]);
    void *ref = calloc(1, nb + 8), *got = calloc(1, nb + 8);
    void *ref_out[KT_MAX_IO] = { ref };
    bool ok = false;
    fail_msg[0] = '\0';
    if (kt_run(t, inputs, ref_out, &err) != INFD_STATUS_OK) {
        snprintf(fail_msg, sizeof(fail_msg), "%s: CPU reference failed: %s", t->node.op_type,
                 err.msg);
        goto out;
    }
    void *got_out[KT_MAX_IO] = { got };
    if (ct_run(t, check_precision, true, inputs, got_out, last_kernel, sizeof(last_kernel), &err) !=
        INFD_STATUS_OK) {
        snprintf(fail_msg, sizeof(fail_msg), "%s: CUDA failed: %s", t->node.op_type, err.msg);
        goto out;
    }
    if (kernel && strncmp(last_kernel, kernel, strlen(kernel)) != 0) {
        snprintf(fail_msg, sizeof(fail_msg), "%s: ran kernel '%s', expected '%s...'",
                 t->node.op_type, last_kernel, kernel);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (y->dtype == INFD_DTYPE_FP32) {
            double r = ((const float *)ref)[i], g = ((const float *)got)[i];
            bool same = (isnan(r) && isnan(g)) || (isinf(r) && r == g) ||
                        fabs(g - r) <= check_tolerance * (1.0 + fabs(r));
            if (!same) {
                snprintf(fail_msg, sizeof(fail_msg),
                         "%s: element %zu of %zu: cuda %.7g vs cpu %.7g (kernel %s)",
                         t->node.op_type, i, n, g, r, last_kernel);
                goto out;
            }
        } else if (y->dtype == INFD_DTYPE_INT64) {
            int64_t r = ((const int64_t *)ref)[i], g = ((const int64_t *)got)[i];
            if (r != g) {
                snprintf(fail_msg, sizeof(fail_msg), "%s: element %zu: cuda %lld vs cpu %lld",
                         t->node.op_type, i, (long long)g, (long long)r);
                goto out;
            }
        } else {
            size_t es = infd_dtype_size(y->dtype);
            if (memcmp((const char *)ref + i * es, (const char *)got + i * es, es) != 0) {
                snprintf(fail_msg, sizeof(fail_msg), "%s: element %zu differs", t->node.op_type, i);
                goto out;
            }
        }
    }
    ok = true;
out:
    free(ref);
    free(got);
    return ok;
}

#define CHECK_OR_FAIL(ok)               \
    do {                                \
        if (!(ok))                      \
            TEST_FAIL_("%s", fail_msg); \
    } while (0)

static size_t prod(int32_t rank, const int64_t *dims)
{
    size_t n = 1;
    for (int32_t i = 0; i < rank; i++)
        n *= (size_t)dims[i];
    return n;
}

/* ---- Slice --------------------------------------------------------------- */

/* Opset >= 10 Slice of FP32 x [xr dims] with constant inputs; axes and
 * steps may be NULL (left out). */
static bool slice_case(int32_t xr, const int64_t *xd, int32_t n, const int64_t *starts,
                       const int64_t *ends, const int64_t *axes, const int64_t *steps,
                       const int64_t *yd)
{
    kt t;
    size_t nx = prod(xr, xd);
    float *x = malloc(nx * 4 + 4);
    ct_fill(x, nx, 21, -1, 1);
    kt_init(&t, "Slice", 13);
    kt_input(&t, INFD_DTYPE_FP32, xr, xd, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ n }, starts);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ n }, ends);
    if (axes)
        kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ n }, axes);
    else if (steps)
        kt_input_omitted(&t);
    if (steps)
        kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ n }, steps);
    kt_output(&t, INFD_DTYPE_FP32, xr, yd);
    bool ok = check(&t, (const void *[]){ x, starts, ends, axes, steps }, "cuda:slice");
    kt_fini(&t);
    free(x);
    return ok;
}

static void test_slice_attributes_opset9(void)
{
    /* PaddleOCR rec: [3, 1, 8, 40, 15] -> one of three along axis 0. */
    kt t;
    float *x = malloc(3 * 8 * 40 * 15 * 4);
    ct_fill(x, 3 * 8 * 40 * 15, 22, -1, 1);
    bool ok = true;
    for (int64_t i = 0; i < 3 && ok; i++) {
        kt_init(&t, "Slice", 9);
        kt_input(&t, INFD_DTYPE_FP32, 5, (int64_t[]){ 3, 1, 8, 40, 15 }, NULL);
        kt_output(&t, INFD_DTYPE_FP32, 5, (int64_t[]){ 1, 1, 8, 40, 15 });
        kt_attr_ints(&t, "axes", 1, (int64_t[]){ 0 });
        kt_attr_ints(&t, "starts", 1, (int64_t[]){ i });
        kt_attr_ints(&t, "ends", 1, (int64_t[]){ i + 1 });
        ok = check(&t, (const void *[]){ x }, "cuda:slice");
        kt_fini(&t);
    }
    /* No axes attribute: the first n dims; ends past the dim clamp. */
    if (ok) {
        kt_init(&t, "Slice", 9);
        kt_input(&t, INFD_DTYPE_FP32, 5, (int64_t[]){ 3, 1, 8, 40, 15 }, NULL);
        kt_output(&t, INFD_DTYPE_FP32, 5, (int64_t[]){ 2, 1, 5, 40, 15 });
        kt_attr_ints(&t, "starts", 3, (int64_t[]){ 1, 0, -5 });
        kt_attr_ints(&t, "ends", 3, (int64_t[]){ 1000, 1, 8 });
        ok = check(&t, (const void *[]){ x }, "cuda:slice");
        kt_fini(&t);
    }
    free(x);
    CHECK_OR_FAIL(ok);
}

static void test_slice_steps_and_negative_axes(void)
{
    int64_t xd[4] = { 2, 5, 7, 6 };
    /* Steps 2 and 3 on axes 1 and -1. */
    CHECK_OR_FAIL(slice_case(4, xd, 2, (int64_t[]){ 0, 1 }, (int64_t[]){ 5, 6 },
                             (int64_t[]){ 1, -1 }, (int64_t[]){ 2, 3 }, (int64_t[]){ 2, 3, 7, 2 }));
    /* Negative steps: reverse axis 2 completely (ends INT64_MIN), every
     * second element of axis 3 backwards from -1. */
    CHECK_OR_FAIL(slice_case(4, xd, 2, (int64_t[]){ -1, 5 }, (int64_t[]){ INT64_MIN, 0 },
                             (int64_t[]){ 2, 3 }, (int64_t[]){ -1, -2 },
                             (int64_t[]){ 2, 5, 7, 3 }));
    /* Starts past the end with a negative step clamp to dim - 1. */
    CHECK_OR_FAIL(slice_case(4, xd, 1, (int64_t[]){ 100 }, (int64_t[]){ 1 }, (int64_t[]){ -2 },
                             (int64_t[]){ -3 }, (int64_t[]){ 2, 5, 2, 6 }));
    /* Axes left out, steps given (input 3 omitted); INT64_MAX ends. */
    CHECK_OR_FAIL(slice_case(4, xd, 2, (int64_t[]){ 1, -4 }, (int64_t[]){ INT64_MAX, -1 }, NULL,
                             (int64_t[]){ 1, 1 }, (int64_t[]){ 1, 3, 7, 6 }));
    /* Axes and steps both left out. */
    CHECK_OR_FAIL(slice_case(4, xd, 1, (int64_t[]){ 1 }, (int64_t[]){ 2 }, NULL, NULL,
                             (int64_t[]){ 1, 5, 7, 6 }));
    /* An empty slice: start == end. */
    CHECK_OR_FAIL(slice_case(4, xd, 1, (int64_t[]){ 3 }, (int64_t[]){ 3 }, (int64_t[]){ 2 }, NULL,
                             (int64_t[]){ 2, 5, 0, 6 }));
}

static void test_slice_int64_data_int32_bounds(void)
{
    kt t;
    int64_t x[4 * 9];
    int32_t starts[1] = { -2 }, ends[1] = { -10 }, axes[1] = { 1 }, steps[1] = { -3 };
    fill_i64(x, 36, 23, -1000000, 1000000);
    kt_init(&t, "Slice", 13);
    kt_input(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 4, 9 }, NULL);
    kt_input(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ 1 }, starts);
    kt_input(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ 1 }, ends);
    kt_input(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ 1 }, axes);
    kt_input(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ 1 }, steps);
    /* From 7 down to 0 in steps of 3: 7, 4, 1. */
    kt_output(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 4, 3 });
    bool ok = check(&t, (const void *[]){ x, starts, ends, axes, steps }, "cuda:slice");
    kt_fini(&t);
    CHECK_OR_FAIL(ok);
}

/* ---- Reductions ---------------------------------------------------------- */

/* One reduction of x [xr dims] (FP32 in [lo, hi], or INT64/INT32) into y.
 * opset >= 18 (or ReduceSum >= 13) takes axes as an input (n_axes < 0:
 * left out); earlier opsets as an attribute (n_axes < 0: none). keepdims
 * < 0: attribute left out (default 1). */
static bool reduce_case(const char *op, int opset, infd_dtype dt, int32_t xr, const int64_t *xd,
                        int32_t n_axes, const int64_t *axes, int keepdims, int noop, int32_t yr,
                        const int64_t *yd, float lo, float hi)
{
    kt t;
    size_t nx = prod(xr, xd);
    void *x = malloc(nx * 8 + 8);
    if (dt == INFD_DTYPE_FP32) {
        ct_fill(x, nx, 31, lo, hi);
    } else if (dt == INFD_DTYPE_INT64) {
        fill_i64(x, nx, 32, -50, 50);
    } else {
        int64_t *tmp = malloc(nx * 8 + 8);
        fill_i64(tmp, nx, 33, -50, 50);
        for (size_t i = 0; i < nx; i++)
            ((int32_t *)x)[i] = (int32_t)tmp[i];
        free(tmp);
    }
    bool as_input = opset >= 18 || (strcmp(op, "ReduceSum") == 0 && opset >= 13);
    kt_init(&t, op, opset);
    kt_input(&t, dt, xr, xd, NULL);
    if (as_input && n_axes >= 0)
        kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ n_axes }, axes);
    kt_output(&t, dt, yr, yd);
    if (!as_input && n_axes >= 0)
        kt_attr_ints(&t, "axes", n_axes, axes);
    if (keepdims >= 0)
        kt_attr_int(&t, "keepdims", keepdims);
    if (noop)
        kt_attr_int(&t, "noop_with_empty_axes", 1);
    bool ok = check(&t, (const void *[]){ x, axes }, "cuda:reduce");
    kt_fini(&t);
    free(x);
    return ok;
}

static void test_reduce_mean_last_axis(void)
{
    /* openWakeWord's and PaddleOCR rec's LayerNorm: axes [-1], keepdims. */
    CHECK_OR_FAIL(reduce_case("ReduceMean", 13, INFD_DTYPE_FP32, 3, (int64_t[]){ 4, 40, 120 }, 1,
                              (int64_t[]){ -1 }, -1, 0, 3, (int64_t[]){ 4, 40, 1 }, -3, 3));
    CHECK_OR_FAIL(reduce_case("ReduceMean", 11, INFD_DTYPE_FP32, 2, (int64_t[]){ 1, 32 }, 1,
                              (int64_t[]){ -1 }, 1, 0, 2, (int64_t[]){ 1, 1 }, -3, 3));
    /* Opset 18: axes as an input. */
    CHECK_OR_FAIL(reduce_case("ReduceMean", 18, INFD_DTYPE_FP32, 3, (int64_t[]){ 4, 40, 120 }, 1,
                              (int64_t[]){ 2 }, 0, 0, 2, (int64_t[]){ 4, 40 }, -3, 3));
}

static void test_reduce_axes_and_keepdims(void)
{
    int64_t xd[4] = { 3, 5, 4, 6 };
    /* Non-adjacent axes (a kept dim between two reduced ones), keepdims 0. */
    CHECK_OR_FAIL(reduce_case("ReduceSum", 13, INFD_DTYPE_FP32, 4, xd, 2, (int64_t[]){ 1, -1 }, 0,
                              0, 2, (int64_t[]){ 3, 4 }, -1, 1));
    CHECK_OR_FAIL(reduce_case("ReduceSum", 13, INFD_DTYPE_FP32, 4, xd, 2, (int64_t[]){ 0, 2 }, 1, 0,
                              4, (int64_t[]){ 1, 5, 1, 6 }, -1, 1));
    /* Opset 13 ReduceSum without axes: everything (noop 0) or a copy
     * (noop_with_empty_axes 1). */
    CHECK_OR_FAIL(
        reduce_case("ReduceSum", 13, INFD_DTYPE_FP32, 4, xd, -1, NULL, 0, 0, 0, NULL, -1, 1));
    CHECK_OR_FAIL(
        reduce_case("ReduceSum", 13, INFD_DTYPE_FP32, 4, xd, -1, NULL, 1, 1, 4, xd, -1, 1));
    /* Attribute form without axes: all dims, kept as 1s. */
    CHECK_OR_FAIL(reduce_case("ReduceMax", 11, INFD_DTYPE_FP32, 4, xd, -1, NULL, 1, 0, 4,
                              (int64_t[]){ 1, 1, 1, 1 }, -5, 5));
    CHECK_OR_FAIL(reduce_case("ReduceMin", 13, INFD_DTYPE_FP32, 4, xd, 1, (int64_t[]){ 0 }, 0, 0, 3,
                              (int64_t[]){ 5, 4, 6 }, -5, 5));
    /* A long reduction (more positions than a warp has lanes, many times). */
    CHECK_OR_FAIL(reduce_case("ReduceMean", 13, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 5000 }, 1,
                              (int64_t[]){ 1 }, 1, 0, 2, (int64_t[]){ 3, 1 }, -1, 1));
}

static void test_reduce_all_ops_fp32(void)
{
    static const char *const ops[] = { "ReduceSum",    "ReduceMean",      "ReduceMax", "ReduceMin",
                                       "ReduceProd",   "ReduceSumSquare", "ReduceL1",  "ReduceL2",
                                       "ReduceLogSum", "ReduceLogSumExp" };
    int64_t xd[3] = { 2, 7, 9 };
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        /* Positive inputs near 1 keep Prod and LogSum finite. */
        bool pos = strcmp(ops[i], "ReduceLogSum") == 0 || strcmp(ops[i], "ReduceProd") == 0;
        CHECK_OR_FAIL(reduce_case(ops[i], 13, INFD_DTYPE_FP32, 3, xd, 2, (int64_t[]){ 0, 2 }, 1, 0,
                                  3, (int64_t[]){ 1, 7, 1 }, pos ? 0.7f : -2, pos ? 1.4f : 2));
        CHECK_OR_FAIL(reduce_case(ops[i], 18, INFD_DTYPE_FP32, 3, xd, 1, (int64_t[]){ -2 }, 0, 0, 2,
                                  (int64_t[]){ 2, 9 }, pos ? 0.7f : -2, pos ? 1.4f : 2));
    }
}

static void test_reduce_integers(void)
{
    static const char *const ops[] = { "ReduceSum",       "ReduceMean", "ReduceMax", "ReduceMin",
                                       "ReduceSumSquare", "ReduceL1",   "ReduceL2" };
    int64_t xd[3] = { 3, 4, 5 };
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        CHECK_OR_FAIL(reduce_case(ops[i], 13, INFD_DTYPE_INT64, 3, xd, 1, (int64_t[]){ 1 }, 0, 0, 2,
                                  (int64_t[]){ 3, 5 }, 0, 0));
        CHECK_OR_FAIL(reduce_case(ops[i], 13, INFD_DTYPE_INT32, 3, xd, 2, (int64_t[]){ 0, -1 }, 1,
                                  0, 3, (int64_t[]){ 1, 4, 1 }, 0, 0));
    }
}

/* A NaN reaches a sum's output. (Max and Min propagate NaN as the CPU's
 * reference kernel does, but the CPU backend runs FP32 Max/Min on oneDNN,
 * which need not, so they are not compared on NaN.) */
static void test_reduce_nan_propagates(void)
{
    kt t;
    float x[2 * 40];
    ct_fill(x, 80, 34, -1, 1);
    x[37] = NAN; /* row 0, lane 5 of the second pass */
    kt_init(&t, "ReduceSum", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 40 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, (int64_t[]){ 1 });
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 1 });
    bool ok = check(&t, (const void *[]){ x, (int64_t[]){ 1 } }, "cuda:reduce");
    kt_fini(&t);
    CHECK_OR_FAIL(ok);
}

/* ---- BatchNormalization --------------------------------------------------- */

static void test_batchnorm(void)
{
    kt t;
    int64_t xd[4] = { 2, 24, 5, 7 };
    size_t nx = prod(4, xd);
    float *x = malloc(nx * 4), s[24], b[24], m[24], v[24];
    ct_fill(x, nx, 41, -2, 2);
    ct_fill(s, 24, 42, 0.5f, 1.5f);
    ct_fill(b, 24, 43, -0.5f, 0.5f);
    ct_fill(m, 24, 44, -0.3f, 0.3f);
    ct_fill(v, 24, 45, 0.2f, 2.0f);
    bool ok = true;
    /* Constant parameters (the CPU reference needs them; the CUDA kernel
     * reads them from device memory either way), two epsilons. */
    for (int e = 0; e < 2 && ok; e++) {
        kt_init(&t, "BatchNormalization", 15);
        kt_input(&t, INFD_DTYPE_FP32, 4, xd, NULL);
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 24 }, s);
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 24 }, b);
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 24 }, m);
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 24 }, v);
        kt_output(&t, INFD_DTYPE_FP32, 4, xd);
        if (e)
            kt_attr_float(&t, "epsilon", 1e-3f);
        ok = check(&t, (const void *[]){ x, s, b, m, v }, "cuda:batchnorm");
        kt_fini(&t);
    }
    /* 2-D input: no spatial dims. */
    if (ok) {
        kt_init(&t, "BatchNormalization", 9);
        kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 5, 24 }, NULL);
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 24 }, s);
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 24 }, b);
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 24 }, m);
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 24 }, v);
        kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 5, 24 });
        ok = check(&t, (const void *[]){ x, s, b, m, v }, "cuda:batchnorm");
        kt_fini(&t);
    }
    free(x);
    CHECK_OR_FAIL(ok);
}

/* ---- ConvTranspose -------------------------------------------------------- */

/* 2-D ConvTranspose; pads (4 values) and opad (2 values) may be NULL. The
 * output size is computed here from ONNX's formula. */
static bool deconv_case(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t group,
                        int64_t kh, int64_t kw, int64_t s, int64_t dil, const int64_t *pads,
                        const int64_t *opad, bool bias)
{
    kt t;
    int64_t p[4] = { 0, 0, 0, 0 }, op[2] = { 0, 0 };
    if (pads)
        memcpy(p, pads, sizeof(p));
    if (opad)
        memcpy(op, opad, sizeof(op));
    int64_t oh = s * (h - 1) + op[0] + (kh - 1) * dil + 1 - p[0] - p[2];
    int64_t ow = s * (w - 1) + op[1] + (kw - 1) * dil + 1 - p[1] - p[3];
    size_t nx = (size_t)(n * c * h * w), nw = (size_t)(c * (k / group) * kh * kw);
    float *x = malloc(nx * 4), *wt = malloc(nw * 4), *b = malloc((size_t)k * 4);
    ct_fill(x, nx, 51, -1, 1);
    ct_fill(wt, nw, 52, -0.5f, 0.5f);
    ct_fill(b, (size_t)k, 53, -0.5f, 0.5f);
    kt_init(&t, "ConvTranspose", 17);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ n, c, h, w }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ c, k / group, kh, kw }, wt);
    if (bias)
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ k }, b);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ n, k, oh, ow });
    kt_attr_ints(&t, "kernel_shape", 2, (int64_t[]){ kh, kw });
    kt_attr_ints(&t, "strides", 2, (int64_t[]){ s, s });
    kt_attr_ints(&t, "dilations", 2, (int64_t[]){ dil, dil });
    kt_attr_ints(&t, "pads", 4, p);
    if (opad)
        kt_attr_ints(&t, "output_padding", 2, op);
    kt_attr_int(&t, "group", group);
    bool ok = check(&t, (const void *[]){ x, wt, b }, "cudnn:deconv");
    kt_fini(&t);
    free(x);
    free(wt);
    free(b);
    return ok;
}

static void test_conv_transpose(void)
{
    /* PaddleOCR det's upsampling: 2x2 stride 2, no pads, with and without
     * bias, into 1 channel. */
    CHECK_OR_FAIL(deconv_case(1, 24, 10, 10, 24, 1, 2, 2, 2, 1, NULL, NULL, false));
    CHECK_OR_FAIL(deconv_case(2, 24, 8, 9, 1, 1, 2, 2, 2, 1, NULL, NULL, true));
    /* Symmetric pads (direct into the output). */
    CHECK_OR_FAIL(
        deconv_case(1, 8, 7, 7, 16, 1, 3, 3, 2, 1, (int64_t[]){ 1, 1, 1, 1 }, NULL, true));
    /* output_padding: the end grows past the last tap (cropped full
     * output, bias-only pixels). */
    CHECK_OR_FAIL(deconv_case(1, 8, 7, 7, 16, 1, 3, 3, 2, 1, (int64_t[]){ 1, 1, 1, 1 },
                              (int64_t[]){ 1, 1 }, true));
    /* output_padding with end pads it does not exceed (the CPU reference,
     * oneDNN, takes no output past the last tap). */
    CHECK_OR_FAIL(deconv_case(1, 8, 5, 6, 4, 1, 2, 2, 3, 1, (int64_t[]){ 0, 0, 2, 1 },
                              (int64_t[]){ 2, 1 }, true));
    /* Asymmetric pads. */
    CHECK_OR_FAIL(deconv_case(1, 8, 6, 6, 8, 1, 4, 4, 2, 1, (int64_t[]){ 0, 2, 1, 0 }, NULL, true));
    /* Groups and dilation. */
    CHECK_OR_FAIL(
        deconv_case(2, 8, 6, 5, 12, 4, 3, 3, 1, 2, (int64_t[]){ 1, 1, 1, 1 }, NULL, true));
}

static void test_conv_transpose_1d(void)
{
    kt t;
    float x[2 * 6 * 11], wt[6 * 4 * 3], b[4];
    ct_fill(x, sizeof(x) / 4, 54, -1, 1);
    ct_fill(wt, sizeof(wt) / 4, 55, -0.5f, 0.5f);
    ct_fill(b, 4, 56, -0.5f, 0.5f);
    kt_init(&t, "ConvTranspose", 17);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 6, 11 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 6, 4, 3 }, wt);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, b);
    /* 2 * 10 + 3 - 1 - 0 = 22 */
    kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 4, 22 });
    kt_attr_ints(&t, "kernel_shape", 1, (int64_t[]){ 3 });
    kt_attr_ints(&t, "strides", 1, (int64_t[]){ 2 });
    kt_attr_ints(&t, "pads", 2, (int64_t[]){ 1, 0 });
    bool ok = check(&t, (const void *[]){ x, wt, b }, "cudnn:deconv");
    kt_fini(&t);
    CHECK_OR_FAIL(ok);
}

/* ---- MatMul -------------------------------------------------------------- */

static bool matmul_case(int32_t ra, const int64_t *da, int32_t rb, const int64_t *db, int32_t ry,
                        const int64_t *dy, bool b_const)
{
    kt t;
    size_t na = prod(ra, da), nb = prod(rb, db);
    float *a = malloc(na * 4), *b = malloc(nb * 4);
    ct_fill(a, na, 61, -1, 1);
    ct_fill(b, nb, 62, -1, 1);
    kt_init(&t, "MatMul", 13);
    kt_input(&t, INFD_DTYPE_FP32, ra, da, NULL);
    kt_input(&t, INFD_DTYPE_FP32, rb, db, b_const ? b : NULL);
    kt_output(&t, INFD_DTYPE_FP32, ry, dy);
    bool ok = check(&t, (const void *[]){ a, b }, "cublasLt:bmm");
    kt_fini(&t);
    free(a);
    free(b);
    return ok;
}

static void test_matmul_batched(void)
{
    /* PaddleOCR rec's attention: Q K^T and P V over 8 heads, batch 1 and 4. */
    CHECK_OR_FAIL(matmul_case(4, (int64_t[]){ 1, 8, 40, 15 }, 4, (int64_t[]){ 1, 8, 15, 40 }, 4,
                              (int64_t[]){ 1, 8, 40, 40 }, false));
    CHECK_OR_FAIL(matmul_case(4, (int64_t[]){ 4, 8, 40, 40 }, 4, (int64_t[]){ 4, 8, 40, 15 }, 4,
                              (int64_t[]){ 4, 8, 40, 15 }, false));
    /* Odd sizes (no vector-friendly alignment in the batch strides). */
    CHECK_OR_FAIL(matmul_case(3, (int64_t[]){ 5, 3, 7 }, 3, (int64_t[]){ 5, 7, 9 }, 3,
                              (int64_t[]){ 5, 3, 9 }, false));
}

static void test_matmul_broadcast(void)
{
    /* Both sides broadcast: a loop of launches. */
    CHECK_OR_FAIL(matmul_case(4, (int64_t[]){ 2, 1, 4, 5 }, 3, (int64_t[]){ 3, 5, 6 }, 4,
                              (int64_t[]){ 2, 3, 4, 6 }, false));
    /* A shared across B's batch. */
    CHECK_OR_FAIL(matmul_case(2, (int64_t[]){ 4, 5 }, 3, (int64_t[]){ 3, 5, 6 }, 3,
                              (int64_t[]){ 3, 4, 6 }, true));
    /* B [1, k, n] shared across A's batch: folded into M. */
    CHECK_OR_FAIL(matmul_case(4, (int64_t[]){ 2, 3, 4, 5 }, 3, (int64_t[]){ 1, 5, 6 }, 4,
                              (int64_t[]){ 2, 3, 4, 6 }, true));
    /* B broadcast on the outer batch dim only. */
    CHECK_OR_FAIL(matmul_case(4, (int64_t[]){ 2, 3, 4, 5 }, 4, (int64_t[]){ 1, 3, 5, 6 }, 4,
                              (int64_t[]){ 2, 3, 4, 6 }, false));
}

static void test_matmul_vectors(void)
{
    /* 1-D B: [.., m, k] x [k] -> [.., m]. */
    CHECK_OR_FAIL(
        matmul_case(3, (int64_t[]){ 2, 3, 4 }, 1, (int64_t[]){ 4 }, 2, (int64_t[]){ 2, 3 }, false));
    /* 1-D A against a batched B: [k] x [b, k, n] -> [b, n]. */
    CHECK_OR_FAIL(
        matmul_case(1, (int64_t[]){ 5 }, 3, (int64_t[]){ 2, 5, 7 }, 2, (int64_t[]){ 2, 7 }, false));
}

/* ---- TF32 ---------------------------------------------------------------- */

/* A TF32 plan (opt-in): ConvTranspose and batched MatMul keep FP32 tensors
 * but may round inputs to TF32 on tensor cores (10 mantissa bits, FP32
 * sums), which the kernel names say; the sums here (K <= 216) stay well
 * inside 1e-2 of (1 + |cpu|). FP32 kernels never name TF32. */
static void test_tf32(void)
{
    bool fp32_plain = true, named = true;
    CHECK_OR_FAIL(
        deconv_case(1, 8, 7, 7, 16, 1, 3, 3, 2, 1, (int64_t[]){ 1, 1, 1, 1 }, NULL, true));
    fp32_plain &= strstr(last_kernel, "tf32") == NULL;
    CHECK_OR_FAIL(matmul_case(4, (int64_t[]){ 1, 8, 40, 15 }, 4, (int64_t[]){ 1, 8, 15, 40 }, 4,
                              (int64_t[]){ 1, 8, 40, 40 }, false));
    fp32_plain &= strstr(last_kernel, "tf32") == NULL;
    check_precision = INFD_PRECISION_TF32;
    check_tolerance = 1e-2;
    bool ok = deconv_case(1, 24, 8, 9, 24, 1, 3, 3, 1, 1, (int64_t[]){ 1, 1, 1, 1 }, NULL, true);
    named &= strncmp(last_kernel, "cudnn:deconv_tf32:", 18) == 0;
    ok = ok && matmul_case(4, (int64_t[]){ 4, 8, 40, 40 }, 4, (int64_t[]){ 4, 8, 40, 15 }, 4,
                           (int64_t[]){ 4, 8, 40, 15 }, false);
    named &= strcmp(last_kernel, "cublasLt:bmm_tf32") == 0;
    check_precision = INFD_PRECISION_FP32;
    check_tolerance = 1e-4;
    CHECK_OR_FAIL(ok);
    ASSERT_TRUE(fp32_plain);
    ASSERT_TRUE(named);
}

int main(int argc, char **argv)
{
    infd_error err = { 0 };
    if (cuda->available(&err) != INFD_STATUS_OK) {
        printf("SKIP: CUDA kernel tests: %s\n", err.msg);
        return SKIP_CODE;
    }
    static const test_case_ cases[] = {
        { "test_slice_attributes_opset9", test_slice_attributes_opset9 },
        { "test_slice_steps_and_negative_axes", test_slice_steps_and_negative_axes },
        { "test_slice_int64_data_int32_bounds", test_slice_int64_data_int32_bounds },
        { "test_reduce_mean_last_axis", test_reduce_mean_last_axis },
        { "test_reduce_axes_and_keepdims", test_reduce_axes_and_keepdims },
        { "test_reduce_all_ops_fp32", test_reduce_all_ops_fp32 },
        { "test_reduce_integers", test_reduce_integers },
        { "test_reduce_nan_propagates", test_reduce_nan_propagates },
        { "test_batchnorm", test_batchnorm },
        { "test_conv_transpose", test_conv_transpose },
        { "test_conv_transpose_1d", test_conv_transpose_1d },
        { "test_matmul_batched", test_matmul_batched },
        { "test_matmul_broadcast", test_matmul_broadcast },
        { "test_matmul_vectors", test_matmul_vectors },
        { "test_tf32", test_tf32 },
    };
    return test_run_(cases, sizeof(cases) / sizeof(cases[0]), argc, argv);
}

#else

int main(void)
{
    (void)test_run_;
    printf("SKIP: CUDA kernel tests: this build has no CUDA backend\n");
    return SKIP_CODE;
}

#endif
