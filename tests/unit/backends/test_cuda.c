/*
 * test_cuda.c - the CUDA backend's kernels against the CPU backend on small
 * shapes: Conv (bias, fused ReLU/Clip, residual, depthwise, asymmetric
 * pads, 1-D), Gemm/MatMul (bias, ReLU, transposes), broadcast binaries,
 * unary ops, pooling, softmax, Concat, Transpose, Pad, Resize, Reshape, the
 * fused depthwise + 1x1 block (against a host reference), the stem
 * convolution over few channels, an unsupported op failing with its name,
 * a whole plan run through two contexts (eager, captured and replayed
 * runs), and plan inputs from page-locked pieces and from device memory.
 *
 * Each case builds one node (kernel_test.h), runs it on the CPU backend for
 * the reference, then compiles it with infd_cuda_backend and runs it on
 * device copies of the same inputs through the backend's own memory and
 * stream slots. FP32 tolerance: |cuda - cpu| <= 1e-4 * (1 + |cpu|), which
 * TF32 would miss on large sums (test_fp32_strict_tf32_opt_in); TF32
 * plans (opt-in) are checked within 5e-2.
 *
 * Without a GPU (CI), or in a build without CUDA, the binary prints why and
 * exits 77, which ctest reports as skipped.
 */
#include "infd/engine.h"
#include "kernel_test.h"
#ifdef INFD_HAVE_CUDA
#include "cuda_test.h"
#endif
#include "onnx.pb-c.h"
#include "onnx_model.h"
#include "test.h"

#define SKIP_CODE 77

#ifdef INFD_HAVE_CUDA

static const infd_backend_ops *cuda = &infd_cuda_backend;

/* The precision CUDA kernels are compiled with, and compare()'s tolerance
 * (|cuda - cpu| <= tolerance * (1 + |cpu|)); FP16 cases raise both. */
static infd_precision cuda_precision = INFD_PRECISION_FP32;
static double tolerance = 1e-4;
static char last_kernel[64];
static double last_worst; /* compare()'s largest relative error */

/* Runs the node on CUDA (inputs: data for every input, constants included)
 * and compares output 0 of `n` floats with `ref`. */
static void compare_to(kt *t, const void *const *inputs, const float *ref, size_t n)
{
    infd_error err = { 0 };
    float *got = calloc(n + 1, sizeof(float));
    void *got_out[KT_MAX_IO] = { got };
    infd_status st =
        ct_run(t, cuda_precision, false, inputs, got_out, last_kernel, sizeof(last_kernel), &err);
    if (st != INFD_STATUS_OK) {
        free(got);
        TEST_FAIL_("CUDA failed: %s", err.msg);
    }
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]) / (1.0 + fabs((double)ref[i]));
        if (!(e <= worst)) { /* NaN counts as worst */
            worst = isnan(e) ? INFINITY : e;
            at = i;
        }
    }
    float r = ref[at], g = got[at];
    free(got);
    last_worst = worst;
    if (!(worst <= tolerance))
        TEST_FAIL_("%s: element %zu: cuda %.7g vs reference %.7g (relative error %.3g)",
                   t->node.op_type, at, (double)g, (double)r, worst);
}

/* Runs the node on both backends and compares output 0 of `n` floats. */
static void compare(kt *t, const void *const *inputs, size_t n)
{
    infd_error err = { 0 };
    float *ref = calloc(n + 1, sizeof(float));
    void *ref_out[KT_MAX_IO] = { ref };
    infd_status st = kt_run(t, inputs, ref_out, &err);
    if (st != INFD_STATUS_OK) {
        free(ref);
        TEST_FAIL_("CPU reference failed: %s", err.msg);
    }
    compare_to(t, inputs, ref, n);
    free(ref);
}

#define F4(a, b, c, d) ((int64_t[]){ a, b, c, d })

static void conv_case(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t group,
                      int64_t k, int64_t s, const int64_t *pads, int64_t oh, int64_t ow,
                      const char *act, float alpha, float beta, bool bias, bool residual)
{
    kt t;
    size_t nx = (size_t)(n * c * h * w), nw = (size_t)(oc * (c / group) * k * k);
    size_t ny = (size_t)(n * oc * oh * ow);
    float *x = malloc(nx * 4), *wt = malloc(nw * 4), *b = malloc((size_t)oc * 4);
    float *r = malloc(ny * 4);
    ct_fill(x, nx, 1, -1, 1);
    ct_fill(wt, nw, 2, -0.5f, 0.5f);
    ct_fill(b, (size_t)oc, 3, -0.2f, 0.2f);
    ct_fill(r, ny, 4, -1, 1);
    kt_init(&t, "Conv", 17);
    kt_input(&t, INFD_DTYPE_FP32, 4, F4(n, c, h, w), NULL);
    kt_input(&t, INFD_DTYPE_FP32, 4, F4(oc, c / group, k, k), wt);
    if (bias)
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ oc }, b);
    else if (residual)
        kt_input_omitted(&t);
    if (residual)
        kt_input(&t, INFD_DTYPE_FP32, 4, F4(n, oc, oh, ow), NULL);
    kt_output(&t, INFD_DTYPE_FP32, 4, F4(n, oc, oh, ow));
    kt_attr_ints(&t, "kernel_shape", 2, (int64_t[]){ k, k });
    kt_attr_ints(&t, "strides", 2, (int64_t[]){ s, s });
    kt_attr_ints(&t, "pads", 4, pads);
    kt_attr_int(&t, "group", group);
    if (act) {
        kt_attr_string(&t, "_fused_activation", act);
        kt_attr_float(&t, "_fused_alpha", alpha);
        kt_attr_float(&t, "_fused_beta", beta);
    }
    if (residual)
        kt_attr_int(&t, "_fused_sum", 1);
    const void *ins[4] = { x, wt, bias ? b : NULL, r };
    if (!bias && residual)
        ins[2] = NULL;
    compare(&t, ins, ny);
    kt_fini(&t);
    free(x);
    free(wt);
    free(b);
    free(r);
}

static void test_conv_bias_relu(void)
{
    conv_case(2, 8, 9, 9, 16, 1, 3, 1, F4(1, 1, 1, 1), 9, 9, "Relu", 0, 0, true, false);
}

static void test_conv_plain_and_bias(void)
{
    conv_case(1, 3, 16, 16, 8, 1, 3, 2, F4(1, 1, 1, 1), 8, 8, NULL, 0, 0, false, false);
    conv_case(1, 16, 7, 7, 32, 1, 1, 1, F4(0, 0, 0, 0), 7, 7, NULL, 0, 0, true, false);
}

static void test_conv_residual_relu(void)
{
    conv_case(2, 16, 8, 8, 16, 1, 3, 1, F4(1, 1, 1, 1), 8, 8, "Relu", 0, 0, true, true);
    conv_case(1, 16, 8, 8, 16, 1, 1, 1, F4(0, 0, 0, 0), 8, 8, NULL, 0, 0, true, true);
}

static void test_conv_depthwise_clip_asymmetric(void)
{
    /* TF-style SAME at stride 2: pad only at the end. */
    conv_case(1, 24, 16, 16, 24, 24, 3, 2, F4(0, 0, 1, 1), 8, 8, "Clip", 0, 6, true, false);
    conv_case(1, 24, 15, 15, 24, 24, 5, 1, F4(2, 2, 2, 2), 15, 15, "Sigmoid", 0, 0, true, false);
}

/* FP16 convolutions (tensor cores, FP32 accumulation) against the FP32 CPU:
 * inputs and weights rounded to FP16 (2^-11 relative) over sums of 72 to
 * 400 terms stay well inside 2e-2 of (1 + |cpu|). */
static void test_conv_fp16(void)
{
    cuda_precision = INFD_PRECISION_FP16;
    tolerance = 2e-2;
    conv_case(2, 8, 9, 9, 16, 1, 3, 1, F4(1, 1, 1, 1), 9, 9, "Relu", 0, 0, true, false);
    bool fp16 = strstr(last_kernel, "fp16") != NULL;
    conv_case(2, 16, 8, 8, 16, 1, 3, 1, F4(1, 1, 1, 1), 8, 8, "Relu", 0, 0, true, true);
    conv_case(1, 16, 16, 16, 32, 1, 1, 2, F4(0, 0, 0, 0), 8, 8, "Clip", 0, 6, true, false);
    conv_case(1, 24, 16, 16, 24, 24, 3, 2, F4(0, 0, 1, 1), 8, 8, "Clip", 0, 6, true, false);
    conv_case(1, 3, 16, 16, 16, 1, 3, 2, F4(0, 0, 1, 1), 8, 8, NULL, 0, 0, true, false);
    cuda_precision = INFD_PRECISION_FP32;
    tolerance = 1e-4;
    ASSERT_TRUE(fp16);
}

/* FP16 depthwise convolutions with the output in the FP16 NHWC layout (as
 * a plan keeps it for a reader that takes it) and the input plain, so the
 * kernel packs (converts) it first: every form, and our depthwise kernel
 * forced (cuDNN off). That kernel once lost a symmetric padding on a pack
 * that only converts (PaddleOCR rec and det FP16). PaddleOCR det's shapes:
 * 3x3 at strides 1 and 2, 5x5 at strides 1 and 2, and an asymmetric pad. */
static void test_conv_fp16_depthwise_opaque(void)
{
    static const char *const forms[] = { "", "cudnn,gemm,convg" };
    cuda_precision = INFD_PRECISION_FP16;
    tolerance = 2e-2;
    ct_opaque_output = true;
    bool dw_ran = false;
    for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
        setenv("INFD_CONV_DISABLE", forms[f], 1);
        conv_case(1, 32, 20, 20, 32, 32, 3, 1, F4(1, 1, 1, 1), 20, 20, "Relu", 0, 0, true, false);
        dw_ran |= strstr(last_kernel, "dwconv") != NULL;
        conv_case(2, 48, 20, 20, 48, 48, 3, 2, F4(1, 1, 1, 1), 10, 10, NULL, 0, 0, true, false);
        conv_case(1, 192, 12, 12, 192, 192, 5, 1, F4(2, 2, 2, 2), 12, 12, NULL, 0, 0, true, false);
        conv_case(1, 192, 12, 12, 192, 192, 5, 2, F4(2, 2, 2, 2), 6, 6, "Clip", 0, 6, true, false);
        conv_case(1, 24, 16, 16, 24, 24, 3, 2, F4(0, 0, 1, 1), 8, 8, "Clip", 0, 6, true, false);
        conv_case(1, 16, 320, 320, 16, 16, 3, 1, F4(1, 1, 1, 1), 320, 320, NULL, 0, 0, true, false);
    }
    unsetenv("INFD_CONV_DISABLE");
    ct_opaque_output = false;
    cuda_precision = INFD_PRECISION_FP32;
    tolerance = 1e-4;
    ASSERT_TRUE(dw_ran);
}

static void pool_case_c(const char *op, int64_t c, int64_t k, int64_t s, const int64_t *pads,
                        int64_t h, int64_t oh, int64_t cip);

/* Channel Concat of x (opaque, cx channels) with z (cz channels): a
 * constant of zeros when zero_const, else a second runtime input. */
static void pad_concat_case(int64_t cx, int64_t cz, bool zero_const, bool z_opaque)
{
    kt t;
    size_t nx = (size_t)(2 * cx * 5 * 6), nz = (size_t)(2 * cz * 5 * 6);
    float *x = malloc(nx * 4), *z = calloc(nz, 4);
    ct_fill(x, nx, 21, -1, 1);
    if (!zero_const)
        ct_fill(z, nz, 22, -1, 1);
    kt_init(&t, "Concat", 17);
    kt_input(&t, INFD_DTYPE_FP32, 4, F4(2, cx, 5, 6), NULL);
    kt_input(&t, INFD_DTYPE_FP32, 4, F4(2, cz, 5, 6), zero_const ? z : NULL);
    kt_output(&t, INFD_DTYPE_FP32, 4, F4(2, cx + cz, 5, 6));
    kt_attr_int(&t, "axis", 1);
    ct_opaque_inputs = z_opaque ? 3u : 1u;
    compare(&t, (const void *[]){ x, z }, nx + nz);
    ct_opaque_inputs = 0;
    kt_fini(&t);
    free(x);
    free(z);
}

/* FP16 kernels whose inputs arrive in the FP16 NHWC layout from their
 * producer (BlazeFace's blocks): the depthwise kernel padding x itself
 * where the pads differ at the two ends (no pack), with a residual; the
 * vectorized pools (8, 4 and 2 channels a thread, and the element path);
 * the one-pass channel Concat with a constant of zeros (the channel
 * padding), written without reading it, and with runtime inputs. */
static void test_fp16_opaque_inputs(void)
{
    static const char *const forms[] = { "", "cudnn,gemm,convg" };
    cuda_precision = INFD_PRECISION_FP16;
    tolerance = 2e-2;
    ct_opaque_output = true;
    bool own_pads = false;
    for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
        setenv("INFD_CONV_DISABLE", forms[f], 1);
        ct_opaque_inputs = 1u;
        conv_case(2, 28, 16, 16, 28, 28, 3, 2, F4(0, 0, 1, 1), 8, 8, "Relu", 0, 0, true, false);
        own_pads |= f == 1 && strstr(last_kernel, "dwconv") != NULL;
        conv_case(2, 42, 15, 15, 42, 42, 3, 2, F4(0, 0, 1, 1), 7, 7, NULL, 0, 0, true, false);
        conv_case(1, 24, 9, 9, 24, 24, 5, 2, F4(1, 1, 2, 2), 4, 4, "Clip", 0, 6, true, false);
        conv_case(1, 3, 9, 9, 3, 3, 3, 1, F4(0, 0, 1, 1), 8, 8, NULL, 0, 0, true, false);
        ct_opaque_inputs = 1u | 8u; /* and the residual */
        conv_case(2, 24, 12, 12, 24, 24, 3, 1, F4(1, 1, 1, 1), 12, 12, "Relu", 0, 0, true, true);
        ct_opaque_inputs = 0;
    }
    unsetenv("INFD_CONV_DISABLE");
    ct_opaque_inputs = 1u;
    pool_case_c("MaxPool", 24, 2, 2, F4(0, 0, 0, 0), 16, 8, 0);
    pool_case_c("MaxPool", 28, 2, 2, F4(0, 0, 0, 0), 16, 8, 0);
    pool_case_c("MaxPool", 6, 3, 2, F4(1, 1, 1, 1), 16, 8, 0);
    pool_case_c("MaxPool", 5, 3, 2, F4(1, 1, 1, 1), 16, 8, 0);
    pool_case_c("AveragePool", 12, 3, 1, F4(1, 1, 1, 1), 6, 6, 0);
    pool_case_c("AveragePool", 12, 3, 1, F4(1, 1, 1, 1), 6, 6, 1);
    ct_opaque_inputs = 0;
    pad_concat_case(24, 4, true, false);
    pad_concat_case(16, 8, true, false);
    pad_concat_case(5, 3, true, false);
    pad_concat_case(6, 10, false, true);
    pad_concat_case(8, 4, false, false); /* a plain input: copied input by input */
    ct_opaque_output = false;
    cuda_precision = INFD_PRECISION_FP32;
    tolerance = 1e-4;
    ASSERT_TRUE(own_pads);
}

/* The activation on the depthwise output of the next dwpw_case (NULL:
 * none; "Relu", or "Clip" between dwpw_dw_lo and dwpw_dw_hi). */
static const char *dwpw_dw_act;
static float dwpw_dw_lo, dwpw_dw_hi;

/* The fused depthwise + 1x1 block (_DwPwConv, cuda_dwpw.h) on n images of
 * c x h x w: depthwise r x r at stride st with pads (pt, pl, pb, pr), 1x1
 * to k channels with bias, a residual of cres channels (0: none; pooled:
 * max 2x2 of an [n, cres, h, w] input, else [n, cres, oh, ow]) and the
 * activation; against a host reference in FP32. */
static void dwpw_case(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t st,
                      const int64_t *pads, int64_t cres, bool pooled, bool dw_bias, const char *act,
                      float alpha, float beta)
{
    int64_t oh = (h + pads[0] + pads[2] - r) / st + 1, ow = (w + pads[1] + pads[3] - r) / st + 1;
    int64_t rh = pooled ? h : oh, rw = pooled ? w : ow;
    size_t nx = (size_t)(n * c * h * w), ny = (size_t)(n * k * oh * ow);
    size_t nr = (size_t)(n * (cres ? cres : 1) * rh * rw), nd = (size_t)(n * c * oh * ow);
    float *x = malloc(nx * 4), *wd = malloc((size_t)(c * r * r) * 4), *bd = malloc((size_t)c * 4);
    float *wp = malloc((size_t)(k * c) * 4), *bp = malloc((size_t)k * 4), *res = malloc(nr * 4);
    float *d = calloc(nd, 4), *ref = calloc(ny, 4);
    ct_fill(x, nx, 31, -1, 1);
    ct_fill(wd, (size_t)(c * r * r), 32, -0.5f, 0.5f);
    ct_fill(bd, (size_t)c, 33, -0.2f, 0.2f);
    ct_fill(wp, (size_t)(k * c), 34, -0.3f, 0.3f);
    ct_fill(bp, (size_t)k, 35, -0.2f, 0.2f);
    ct_fill(res, nr, 36, -1, 1);
    for (int64_t i = 0; i < n; i++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t y = 0; y < oh; y++)
                for (int64_t xo = 0; xo < ow; xo++) {
                    float sum = dw_bias ? bd[ch] : 0.0f;
                    for (int64_t ky = 0; ky < r; ky++)
                        for (int64_t kx = 0; kx < r; kx++) {
                            int64_t iy = y * st - pads[0] + ky, ix = xo * st - pads[1] + kx;
                            if (iy >= 0 && iy < h && ix >= 0 && ix < w)
                                sum += x[((i * c + ch) * h + iy) * w + ix] *
                                       wd[(ch * r + ky) * r + kx];
                        }
                    if (dwpw_dw_act && !strcmp(dwpw_dw_act, "Relu"))
                        sum = fmaxf(sum, 0.0f);
                    else if (dwpw_dw_act)
                        sum = fminf(fmaxf(sum, dwpw_dw_lo), dwpw_dw_hi);
                    d[((i * c + ch) * oh + y) * ow + xo] = sum;
                }
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < k; o++)
            for (int64_t p = 0; p < oh * ow; p++) {
                float sum = bp[o];
                for (int64_t ch = 0; ch < c; ch++)
                    sum += wp[o * c + ch] * d[(i * c + ch) * oh * ow + p];
                if (o < cres) {
                    int64_t y = p / ow, xo = p % ow;
                    float add = -INFINITY;
                    if (!pooled)
                        add = res[((i * cres + o) * rh + y) * rw + xo];
                    for (int64_t q = 0; pooled && q < 4; q++)
                        add = fmaxf(
                            add, res[((i * cres + o) * rh + 2 * y + q / 2) * rw + 2 * xo + q % 2]);
                    sum += add;
                }
                if (act && !strcmp(act, "Relu"))
                    sum = fmaxf(sum, 0.0f);
                else if (act)
                    sum = fminf(fmaxf(sum, alpha), beta);
                ref[(i * k + o) * oh * ow + p] = sum;
            }
    kt t;
    kt_init(&t, "_DwPwConv", 17);
    kt_input(&t, INFD_DTYPE_FP32, 4, F4(n, c, h, w), NULL);
    kt_input(&t, INFD_DTYPE_FP32, 4, F4(k, c, 1, 1), wp);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ k }, bp);
    if (cres)
        kt_input(&t, INFD_DTYPE_FP32, 4, F4(n, cres, rh, rw), NULL);
    else
        kt_input_omitted(&t);
    kt_input(&t, INFD_DTYPE_FP32, 4, F4(c, 1, r, r), wd);
    if (dw_bias)
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ c }, bd);
    else
        kt_input_omitted(&t);
    kt_output(&t, INFD_DTYPE_FP32, 4, F4(n, k, oh, ow));
    kt_attr_ints(&t, "kernel_shape", 2, (int64_t[]){ r, r });
    kt_attr_ints(&t, "strides", 2, (int64_t[]){ st, st });
    kt_attr_ints(&t, "pads", 4, pads);
    kt_attr_int(&t, "group", c);
    if (act) {
        kt_attr_string(&t, "_fused_activation", act);
        kt_attr_float(&t, "_fused_alpha", alpha);
        kt_attr_float(&t, "_fused_beta", beta);
    }
    if (cres)
        kt_attr_int(&t, "_fused_sum", 1);
    if (pooled)
        kt_attr_int(&t, "residual_pool", 2);
    if (dwpw_dw_act) {
        kt_attr_string(&t, "_dw_activation", dwpw_dw_act);
        kt_attr_float(&t, "_dw_alpha", dwpw_dw_lo);
        kt_attr_float(&t, "_dw_beta", dwpw_dw_hi);
    }
    compare_to(&t, (const void *[]){ x, wp, bp, cres ? res : NULL, wd, dw_bias ? bd : NULL }, ref,
               ny);
    kt_fini(&t);
    free(x);
    free(wd);
    free(bd);
    free(wp);
    free(bp);
    free(res);
    free(d);
    free(ref);
}

/* The fused depthwise block on BlazeFace's shapes and the kernel's edges:
 * 8, 4 and 2 channels a thread (24, 28 and 42 channels), a residual with
 * fewer channels than the output, a pooled one (the stride-2 block), none;
 * 5x5 and 3x3 windows with pads that differ at the two ends; 96 and 128
 * channels (the most), pixel counts that are not a multiple of the tile;
 * both forms: register-tiled (stride 1, outputs of 16 x 16 and more with
 * rows a multiple of 4 wide: 64 x 64, 32 x 32, 16 x 16, one channel pair,
 * and rows wider than its 128-pixel tile) and the tile form (strided, 8 x
 * 8, rows 7 and 5 wide, and stride 1 again with INFD_CONV_DISABLE=regtile);
 * an activation on the depthwise output (MobileNetV2's first block, ReLU6;
 * register-tiled only: the tile form declines it, measured slower);
 * x, the residual and y in the FP16 NHWC layout (as in a plan) and plain
 * (converted through the workspace). */
static void test_fp16_depthwise_block(void)
{
    cuda_precision = INFD_PRECISION_FP16;
    tolerance = 2e-2;
    for (int plain = 0; plain < 2; plain++) {
        ct_opaque_output = !plain;
        ct_opaque_inputs = plain ? 0u : 1u | 8u;
        dwpw_case(2, 24, 16, 16, 24, 5, 1, F4(2, 2, 2, 2), 24, false, true, "Relu", 0, 0);
        ASSERT_TRUE(strstr(last_kernel, "dwpw") != NULL);
        dwpw_case(2, 24, 16, 16, 28, 5, 1, F4(2, 2, 2, 2), 24, false, true, "Relu", 0, 0);
        dwpw_case(2, 28, 16, 16, 32, 5, 2, F4(1, 1, 2, 2), 28, true, true, "Relu", 0, 0);
        dwpw_case(1, 36, 9, 7, 42, 3, 1, F4(1, 1, 1, 1), 0, false, false, "Clip", 0, 6);
        dwpw_case(3, 96, 8, 8, 96, 5, 1, F4(2, 2, 2, 2), 96, false, true, "Relu", 0, 0);
        dwpw_case(1, 88, 16, 16, 96, 5, 2, F4(1, 1, 2, 2), 88, true, true, "Relu", 0, 0);
        dwpw_case(1, 128, 5, 5, 128, 3, 1, F4(1, 1, 1, 1), 0, false, true, NULL, 0, 0);
        dwpw_case(1, 16, 11, 13, 8, 3, 2, F4(0, 0, 1, 1), 8, false, true, NULL, 0, 0);
        dwpw_case(1, 24, 64, 64, 28, 5, 1, F4(2, 2, 2, 2), 24, false, true, "Relu", 0, 0);
        dwpw_case(2, 32, 32, 32, 36, 5, 1, F4(2, 2, 2, 2), 32, false, true, "Relu", 0, 0);
        dwpw_case(1, 32, 9, 136, 16, 3, 1, F4(1, 1, 1, 1), 0, false, true, "Clip", 0, 6);
        dwpw_case(1, 2, 16, 16, 4, 3, 1, F4(1, 0, 1, 2), 2, false, false, NULL, 0, 0);
        setenv("INFD_CONV_DISABLE", "regtile", 1);
        dwpw_case(2, 24, 16, 16, 28, 5, 1, F4(2, 2, 2, 2), 24, false, true, "Relu", 0, 0);
        dwpw_case(1, 32, 9, 136, 16, 3, 1, F4(1, 1, 1, 1), 0, false, true, "Clip", 0, 6);
        unsetenv("INFD_CONV_DISABLE");
        dwpw_dw_act = "Clip";
        dwpw_dw_lo = 0.0f;
        dwpw_dw_hi = 0.5f;
        dwpw_case(2, 32, 24, 24, 16, 3, 1, F4(1, 1, 1, 1), 0, false, true, NULL, 0, 0);
        dwpw_dw_act = "Relu";
        dwpw_case(1, 24, 16, 16, 28, 5, 1, F4(2, 2, 2, 2), 24, false, true, "Relu", 0, 0);
        dwpw_dw_act = NULL;
    }
    ct_opaque_output = false;
    ct_opaque_inputs = 0;
    cuda_precision = INFD_PRECISION_FP32;
    tolerance = 1e-4;
}

/* FP16 convolutions over few input channels (a network's stem) through
 * our implicit GEMM kernel (cuda_stem.h), cuDNN turned off, then with every
 * form timed: BlazeFace's (5x5, stride 2, pads differing at the two ends,
 * x arriving in the FP16 NHWC layout as after its Transpose),
 * MobileNetV2's (3x3, stride 2, ReLU6), ResNet-50's (7x7: 147 values a
 * window, the most), one channel without bias over a pixel count that is
 * no multiple of the 64-pixel tile, and 4 channels to 8 (one column tile);
 * y in the FP16 NHWC layout and plain (converted by the epilogue). */
static void test_fp16_stem(void)
{
    static const char *const forms[] = { "cudnn", "" };
    cuda_precision = INFD_PRECISION_FP16;
    tolerance = 2e-2;
    for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
        setenv("INFD_CONV_DISABLE", forms[f], 1);
        for (int plain = 0; plain < 2; plain++) {
            ct_opaque_output = !plain;
            ct_opaque_inputs = plain ? 0u : 1u;
            conv_case(2, 3, 32, 32, 24, 1, 5, 2, F4(1, 1, 2, 2), 16, 16, "Relu", 0, 0, true, false);
            if (f == 0)
                ASSERT_TRUE(strstr(last_kernel, "stem") != NULL);
            ct_opaque_inputs = 0;
            conv_case(2, 3, 30, 30, 32, 1, 3, 2, F4(1, 1, 1, 1), 15, 15, "Clip", 0, 6, true, false);
            if (f == 0)
                ASSERT_TRUE(strstr(last_kernel, "stem") != NULL);
            conv_case(1, 3, 40, 40, 64, 1, 7, 2, F4(3, 3, 3, 3), 20, 20, "Relu", 0, 0, true, false);
            conv_case(1, 1, 13, 11, 16, 1, 3, 1, F4(1, 1, 1, 1), 13, 11, NULL, 0, 0, false, false);
            conv_case(3, 4, 20, 20, 8, 1, 3, 2, F4(0, 0, 1, 1), 10, 10, "Sigmoid", 0, 0, true,
                      false);
            if (f == 0)
                ASSERT_TRUE(strstr(last_kernel, "stem") != NULL);
        }
    }
    unsetenv("INFD_CONV_DISABLE");
    ct_opaque_output = false;
    ct_opaque_inputs = 0;
    cuda_precision = INFD_PRECISION_FP32;
    tolerance = 1e-4;
}

static void gemm_case(int64_t m, int64_t k, int64_t n, int ta, int tb, bool bias, const char *act,
                      bool residual)
{
    kt t;
    float *a = malloc((size_t)(m * k) * 4), *b = malloc((size_t)(k * n) * 4);
    float *c = malloc((size_t)n * 4), *r = malloc((size_t)(m * n) * 4);
    ct_fill(a, (size_t)(m * k), 5, -1, 1);
    ct_fill(b, (size_t)(k * n), 6, -1, 1);
    ct_fill(c, (size_t)n, 7, -1, 1);
    ct_fill(r, (size_t)(m * n), 8, -1, 1);
    kt_init(&t, "Gemm", 17);
    kt_input(&t, INFD_DTYPE_FP32, 2, ta ? (int64_t[]){ k, m } : (int64_t[]){ m, k }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 2, tb ? (int64_t[]){ n, k } : (int64_t[]){ k, n }, b);
    if (bias)
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ n }, c);
    else if (residual)
        kt_input_omitted(&t);
    if (residual)
        kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ m, n }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ m, n });
    kt_attr_int(&t, "transA", ta);
    kt_attr_int(&t, "transB", tb);
    if (act) {
        /* As the fusion pass sets them: Relu's slope is 0. */
        kt_attr_string(&t, "_fused_activation", act);
        kt_attr_float(&t, "_fused_alpha", strcmp(act, "Relu") == 0 ? 0.0f : 0.1f);
        kt_attr_float(&t, "_fused_beta", 0);
    }
    if (residual)
        kt_attr_int(&t, "_fused_sum", 1);
    const void *ins[4] = { a, b, bias ? c : NULL, r };
    compare(&t, ins, (size_t)(m * n));
    kt_fini(&t);
    free(a);
    free(b);
    free(c);
    free(r);
}

static void test_gemm(void)
{
    gemm_case(4, 64, 10, 0, 1, true, NULL, false);
    gemm_case(3, 33, 17, 1, 0, true, "Relu", false);
    gemm_case(8, 16, 16, 0, 0, false, "LeakyRelu", false);
    gemm_case(5, 16, 12, 0, 1, true, "Relu", true);
}

static void test_matmul(void)
{
    kt t;
    float a[2 * 3 * 8], b[8 * 5];
    ct_fill(a, 48, 9, -1, 1);
    ct_fill(b, 40, 10, -1, 1);
    kt_init(&t, "MatMul", 17);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 3, 8 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 8, 5 }, b);
    kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 3, 5 });
    compare(&t, (const void *[]){ a, b }, 30);
    kt_fini(&t);
}

/* Plain FP32 never uses TF32, and INFD_PRECISION_TF32 does. TF32 rounds
 * each input to 10 mantissa bits (2^-11 relative): a K = 1024 GEMM of
 * values in [-1, 1] is then off by ~4e-3 (one standard deviation, against
 * outputs of ~10), a 64-channel 3x3 convolution (K = 576, weights in
 * [-0.5, 0.5]) by ~1.6e-3, both far outside the 1e-4 of (1 + |cpu|) the
 * FP32 cases must meet, where FP32 differs only in summation order. So:
 * FP32 meets 1e-4 on both (and names no TF32 kernel); TF32 names its
 * kernels, meets 5e-2 (the worst of 4096 elements near 0 is ~4 standard
 * deviations) and is at least 10x further from the CPU than FP32 on the
 * GEMM, which shows TF32 really ran (cuBLASLt's FAST_TF32 kernels; cuDNN
 * may still pick an FMA algorithm when it times faster, so the
 * convolution's errors are printed, not compared). */
static void test_fp32_strict_tf32_opt_in(void)
{
    gemm_case(64, 1024, 64, 0, 1, true, NULL, false);
    double strict = last_worst;
    ASSERT_TRUE(strstr(last_kernel, "tf32") == NULL);
    conv_case(1, 64, 28, 28, 64, 1, 3, 1, F4(1, 1, 1, 1), 28, 28, "Relu", 0, 0, true, false);
    double strict_conv = last_worst;
    ASSERT_TRUE(strstr(last_kernel, "tf32") == NULL);

    cuda_precision = INFD_PRECISION_TF32;
    tolerance = 5e-2;
    gemm_case(64, 1024, 64, 0, 1, true, NULL, false);
    double tf32 = last_worst;
    bool gemm_named = strstr(last_kernel, "matmul_tf32") != NULL;
    conv_case(1, 64, 28, 28, 64, 1, 3, 1, F4(1, 1, 1, 1), 28, 28, "Relu", 0, 0, true, false);
    double tf32_conv = last_worst;
    bool conv_named = strstr(last_kernel, "conv_tf32") != NULL;
    conv_case(1, 24, 15, 15, 24, 24, 5, 1, F4(2, 2, 2, 2), 15, 15, "Sigmoid", 0, 0, true, false);
    test_matmul();
    bool matmul_named = strstr(last_kernel, "tf32") != NULL;
    cuda_precision = INFD_PRECISION_FP32;
    tolerance = 1e-4;
    printf("    GEMM K=1024: FP32 %.3g, TF32 %.3g; conv K=576: FP32 %.3g, TF32 %.3g "
           "(of 1 + |cpu|)\n",
           strict, tf32, strict_conv, tf32_conv);
    ASSERT_TRUE(gemm_named);
    ASSERT_TRUE(conv_named);
    ASSERT_TRUE(matmul_named);
    ASSERT_TRUE(tf32 > 10.0 * strict); /* TF32 really ran */
}

static void binary_case(const char *op, int32_t ra, const int64_t *da, int32_t rb,
                        const int64_t *db, int32_t ry, const int64_t *dy)
{
    kt t;
    size_t na = 1, nb = 1, ny = 1;
    for (int i = 0; i < ra; i++)
        na *= (size_t)da[i];
    for (int i = 0; i < rb; i++)
        nb *= (size_t)db[i];
    for (int i = 0; i < ry; i++)
        ny *= (size_t)dy[i];
    float *a = malloc(na * 4), *b = malloc(nb * 4);
    ct_fill(a, na, 11, 0.5f, 2);
    ct_fill(b, nb, 12, 0.5f, 2);
    kt_init(&t, op, 17);
    kt_input(&t, INFD_DTYPE_FP32, ra, da, NULL);
    kt_input(&t, INFD_DTYPE_FP32, rb, db, NULL);
    kt_output(&t, INFD_DTYPE_FP32, ry, dy);
    compare(&t, (const void *[]){ a, b }, ny);
    kt_fini(&t);
    free(a);
    free(b);
}

static void test_binary_broadcast(void)
{
    binary_case("Add", 4, F4(2, 3, 4, 5), 3, (int64_t[]){ 3, 1, 1 }, 4, F4(2, 3, 4, 5));
    binary_case("Sub", 4, F4(2, 3, 4, 5), 4, F4(2, 3, 4, 5), 4, F4(2, 3, 4, 5));
    binary_case("Mul", 2, (int64_t[]){ 4, 1 }, 2, (int64_t[]){ 1, 6 }, 2, (int64_t[]){ 4, 6 });
    binary_case("Div", 1, (int64_t[]){ 7 }, 0, NULL, 1, (int64_t[]){ 7 });
    binary_case("Pow", 3, (int64_t[]){ 2, 3, 4 }, 1, (int64_t[]){ 4 }, 3, (int64_t[]){ 2, 3, 4 });
}

static void unary_case(const char *op, float alpha, float beta, bool has_attrs)
{
    kt t;
    float x[3 * 50];
    ct_fill(x, 150, 13, -4, 4);
    kt_init(&t, op, 17);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 50 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 50 });
    if (has_attrs) {
        kt_attr_float(&t, "alpha", alpha);
        kt_attr_float(&t, "beta", beta);
    }
    compare(&t, (const void *[]){ x }, 150);
    kt_fini(&t);
}

static void test_unary(void)
{
    unary_case("Relu", 0, 0, false);
    unary_case("Sigmoid", 0, 0, false);
    unary_case("HardSigmoid", 0.25f, 0.4f, true);
    unary_case("Tanh", 0, 0, false);
    unary_case("Exp", 0, 0, false);
    unary_case("Abs", 0, 0, false);
}

static void test_clip(void)
{
    kt t;
    float x[64], lo = -0.5f, hi = 0.75f;
    ct_fill(x, 64, 14, -2, 2);
    kt_init(&t, "Clip", 17);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 64 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 0, NULL, &lo);
    kt_input(&t, INFD_DTYPE_FP32, 0, NULL, &hi);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 64 });
    compare(&t, (const void *[]){ x, &lo, &hi }, 64);
    kt_fini(&t);
}

static void pool_case_c(const char *op, int64_t c, int64_t k, int64_t s, const int64_t *pads,
                        int64_t h, int64_t oh, int64_t cip)
{
    kt t;
    size_t nx = (size_t)(2 * c * h * h), ny = (size_t)(2 * c * oh * oh);
    float *x = malloc(nx * 4);
    ct_fill(x, nx, 15, -1, 1);
    kt_init(&t, op, 17);
    kt_input(&t, INFD_DTYPE_FP32, 4, F4(2, c, h, h), NULL);
    kt_output(&t, INFD_DTYPE_FP32, 4, F4(2, c, oh, oh));
    if (k) {
        kt_attr_ints(&t, "kernel_shape", 2, (int64_t[]){ k, k });
        kt_attr_ints(&t, "strides", 2, (int64_t[]){ s, s });
        kt_attr_ints(&t, "pads", 4, pads);
        if (strcmp(op, "AveragePool") == 0)
            kt_attr_int(&t, "count_include_pad", cip);
    }
    compare(&t, (const void *[]){ x }, ny);
    kt_fini(&t);
    free(x);
}

static void pool_case(const char *op, int64_t k, int64_t s, const int64_t *pads, int64_t h,
                      int64_t oh, int64_t cip)
{
    pool_case_c(op, 5, k, s, pads, h, oh, cip);
}

static void test_pool(void)
{
    pool_case("MaxPool", 3, 2, F4(1, 1, 1, 1), 16, 8, 0);
    pool_case("AveragePool", 2, 2, F4(0, 0, 0, 0), 8, 4, 0);
    pool_case("AveragePool", 3, 1, F4(1, 1, 1, 1), 6, 6, 0);
    pool_case("AveragePool", 3, 1, F4(1, 1, 1, 1), 6, 6, 1);
    pool_case("GlobalAveragePool", 0, 0, NULL, 7, 1, 0);
    pool_case("GlobalMaxPool", 0, 0, NULL, 9, 1, 0);
}

static void test_softmax(void)
{
    kt t;
    float x[4 * 10 * 3];
    ct_fill(x, 120, 16, -5, 5);
    kt_init(&t, "Softmax", 17);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 4, 10 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 4, 10 });
    compare(&t, (const void *[]){ x }, 40);
    kt_fini(&t);
    kt_init(&t, "Softmax", 17);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 4, 10, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 4, 10, 3 });
    kt_attr_int(&t, "axis", 1);
    compare(&t, (const void *[]){ x }, 120);
    kt_fini(&t);
}

static void test_concat_transpose_reshape(void)
{
    kt t;
    float a[2 * 3 * 4], b[2 * 5 * 4];
    ct_fill(a, 24, 17, -1, 1);
    ct_fill(b, 40, 18, -1, 1);
    kt_init(&t, "Concat", 17);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 3, 4 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 5, 4 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 8, 4 });
    kt_attr_int(&t, "axis", 1);
    compare(&t, (const void *[]){ a, b }, 64);
    kt_fini(&t);

    kt_init(&t, "Transpose", 17);
    kt_input(&t, INFD_DTYPE_FP32, 4, F4(2, 5, 2, 2), NULL);
    kt_output(&t, INFD_DTYPE_FP32, 4, F4(2, 2, 2, 5));
    kt_attr_ints(&t, "perm", 4, F4(0, 2, 3, 1));
    compare(&t, (const void *[]){ b }, 40);
    kt_fini(&t);

    int64_t shape[2] = { 8, 5 };
    kt_init(&t, "Reshape", 17);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 5, 4 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 2 }, shape);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 8, 5 });
    compare(&t, (const void *[]){ b, shape }, 40);
    kt_fini(&t);
}

static void test_pad_resize(void)
{
    kt t;
    float x[1 * 2 * 4 * 4];
    int64_t pads[8] = { 0, 0, 1, 2, 0, 0, 2, 1 };
    ct_fill(x, 32, 19, -1, 1);
    const char *modes[3] = { "constant", "reflect", "edge" };
    for (int m = 0; m < 3; m++) {
        kt_init(&t, "Pad", 17);
        kt_input(&t, INFD_DTYPE_FP32, 4, F4(1, 2, 4, 4), NULL);
        kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 8 }, pads);
        kt_output(&t, INFD_DTYPE_FP32, 4, F4(1, 2, 7, 7));
        kt_attr_string(&t, "mode", modes[m]);
        compare(&t, (const void *[]){ x, pads }, 98);
        kt_fini(&t);
    }
    float scales[4] = { 1, 1, 2, 2 };
    const char *rmodes[2] = { "nearest", "linear" };
    for (int m = 0; m < 2; m++) {
        kt_init(&t, "Resize", 17);
        kt_input(&t, INFD_DTYPE_FP32, 4, F4(1, 2, 4, 4), NULL);
        kt_input_omitted(&t);
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, scales);
        kt_output(&t, INFD_DTYPE_FP32, 4, F4(1, 2, 8, 8));
        kt_attr_string(&t, "mode", rmodes[m]);
        compare(&t, (const void *[]){ x, NULL, scales }, 128);
        kt_fini(&t);
    }
}

static void test_unsupported_names_op(void)
{
    kt t;
    infd_error err = { 0 };
    const infd_ir_value *ins[KT_MAX_IO], *outs[KT_MAX_IO];
    infd_kernel_args a;
    infd_kernel *k = NULL;
    kt_init(&t, "Einsum", 17);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 });
    kt_args(&t, &a, ins, outs);
    infd_status st = infd_backend_compile(cuda, &a, &k, &err);
    kt_fini(&t);
    ASSERT_STATUS(st, INFD_STATUS_UNIMPLEMENTED);
    ASSERT_TRUE(strstr(err.msg, "Einsum") != NULL);
    ASSERT_TRUE(strstr(err.msg, "not supported on CUDA") != NULL);
}

/* A whole plan on CUDA through two contexts: the first run of each is
 * eager, the second captured, later ones replay the graph; every run must
 * see its own input (a replay that read stale staging would not). */
static void test_plan_runs_on_cuda(void)
{
    static const float bias[4] = { -1.5f, -0.5f, 0.5f, 1.5f };
    uint8_t *model = NULL;
    size_t n = onnx_model_tiny(&model);
    infd_plan_options opts;
    infd_plan *plan = NULL;
    infd_context *ctx[2] = { NULL, NULL };
    infd_error err = { 0 };
    infd_plan_options_init(&opts);
    opts.device = INFD_DEVICE_CUDA;
    opts.batch = 3;
    opts.max_contexts = 2;
    infd_status st = infd_plan_create_from_memory(model, n, "tiny.onnx", &opts, &plan, &err);
    free(model);
    ASSERT_STATUS(st, INFD_STATUS_OK);
    for (int c = 0; c < 2 && st == INFD_STATUS_OK; c++)
        st = infd_context_create(plan, &ctx[c], &err);
    int bad = -1;
    for (int r = 0; r < 12 && st == INFD_STATUS_OK && bad < 0; r++) {
        float x[12], y[12];
        int64_t dims[2] = { 3, 4 };
        ct_fill(x, 12, 100 + (uint32_t)r, -2, 2);
        infd_tensor in = { .dtype = INFD_DTYPE_FP32, .data = x, .nbytes = sizeof(x) };
        infd_tensor out = { .data = y, .nbytes = sizeof(y) };
        infd_shape_init(&in.shape, 2, dims, NULL);
        st = infd_plan_run(plan, ctx[r % 2], &in, 1, &out, 1, &err);
        for (int i = 0; i < 12 && st == INFD_STATUS_OK; i++) {
            float want = x[i] + bias[i % 4] > 0 ? x[i] + bias[i % 4] : 0.0f;
            if (fabsf(y[i] - want) > 1e-6f)
                bad = r * 100 + i;
        }
    }
    infd_context_destroy(ctx[0]);
    infd_context_destroy(ctx[1]);
    infd_plan_destroy(plan);
    ASSERT_STATUS(st, INFD_STATUS_OK);
    ASSERT_EQ_INT(bad, -1);
}

/* onnx_model_tiny (y = relu(x + bias), x [batch, 4]) as a CUDA plan at
 * batch 3 and a context of it. */
static infd_status tiny_cuda_plan(infd_plan **plan, infd_context **ctx, infd_error *err)
{
    uint8_t *model = NULL;
    size_t n = onnx_model_tiny(&model);
    infd_plan_options opts;
    infd_plan_options_init(&opts);
    opts.device = INFD_DEVICE_CUDA;
    opts.batch = 3;
    infd_status st = infd_plan_create_from_memory(model, n, "tiny.onnx", &opts, plan, err);
    free(model);
    return st == INFD_STATUS_OK ? infd_context_create(*plan, ctx, err) : st;
}

/* Input from pieces (infd_context_set_input_pieces): rows from page-locked
 * memory of infd_engine_host_alloc and from the context's staging, in
 * three pieces, through the eager, captured and replayed runs; a run
 * without pieces after them reads the staging again. Pieces larger than the
 * input, or for a plan input a device does not copy, are refused. */
static void test_plan_input_pieces(void)
{
    static const float bias[4] = { -1.5f, -0.5f, 0.5f, 1.5f };
    infd_plan *plan = NULL;
    infd_context *ctx = NULL;
    infd_error err = { 0 };
    infd_status st = tiny_cuda_plan(&plan, &ctx, &err);
    ASSERT_STATUS(st, INFD_STATUS_OK);
    float *host = infd_engine_host_alloc(INFD_DEVICE_CUDA, 64 * sizeof(float), &err);
    ASSERT_TRUE(host != NULL);
    float *stage = infd_context_input_buffer(ctx, 0);
    ASSERT_TRUE(stage != NULL);
    int bad = -1;
    for (int r = 0; r < 6 && st == INFD_STATUS_OK && bad < 0; r++) {
        float x[12], y[12];
        int64_t dims[2] = { 3, 4 };
        ct_fill(x, 12, 300 + (uint32_t)r, -2, 2);
        bool pieces = r != 4;
        infd_data_segment seg[3]; /* borrowed until the run */
        if (pieces) {
            /* row 0 and row 2 from host memory at odd places, row 1 from
             * the staging's own row 1 */
            memcpy(host + 5, x, 4 * sizeof(float));
            memcpy(stage + 4, x + 4, 4 * sizeof(float));
            memcpy(host + 21, x + 8, 4 * sizeof(float));
            seg[0] = (infd_data_segment){ host + 5, 16 };
            seg[1] = (infd_data_segment){ stage + 4, 16 };
            seg[2] = (infd_data_segment){ host + 21, 16 };
            st = infd_context_set_input_pieces(ctx, 0, seg, 3, &err);
        } else {
            memcpy(stage, x, sizeof(x));
        }
        infd_tensor in = { .dtype = INFD_DTYPE_FP32,
                           .data = pieces ? NULL : stage,
                           .nbytes = sizeof(x) };
        infd_tensor out = { .data = y, .nbytes = sizeof(y) };
        infd_shape_init(&in.shape, 2, dims, NULL);
        if (st == INFD_STATUS_OK)
            st = infd_plan_run(plan, ctx, &in, 1, &out, 1, &err);
        for (int i = 0; i < 12 && st == INFD_STATUS_OK; i++) {
            float want = x[i] + bias[i % 4] > 0 ? x[i] + bias[i % 4] : 0.0f;
            if (fabsf(y[i] - want) > 1e-6f)
                bad = r * 100 + i;
        }
    }
    ASSERT_STATUS(st, INFD_STATUS_OK);
    ASSERT_EQ_INT(bad, -1);
    /* The setting lasts one run: without it NULL data is refused again. */
    float y[12];
    infd_tensor in = { .dtype = INFD_DTYPE_FP32, .data = NULL, .nbytes = 48 };
    infd_tensor out = { .data = y, .nbytes = sizeof(y) };
    int64_t dims[2] = { 3, 4 };
    infd_shape_init(&in.shape, 2, dims, NULL);
    ASSERT_STATUS(infd_plan_run(plan, ctx, &in, 1, &out, 1, &err), INFD_STATUS_INVALID_ARGUMENT);
    infd_data_segment big[2] = { { host, 40 }, { host, 16 } };
    ASSERT_STATUS(infd_context_set_input_pieces(ctx, 0, big, 2, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_TRUE(strstr(err.msg, "piece 1 (16 bytes) runs past the input's end") != NULL);
    ASSERT_STATUS(infd_context_set_input_pieces(ctx, 1, big, 1, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    infd_engine_host_free(INFD_DEVICE_CUDA, host);
    infd_context_destroy(ctx);
    infd_plan_destroy(plan);
}

/* An input already in device memory (infd_context_set_device_input): the
 * run copies it device to device and ignores the tensor's data; the
 * setting lasts one run, and bad arguments are refused. */
static void test_plan_device_input(void)
{
    static const float bias[4] = { -1.5f, -0.5f, 0.5f, 1.5f };
    infd_plan *plan = NULL;
    infd_context *ctx = NULL;
    infd_error err = { 0 };
    infd_status st = tiny_cuda_plan(&plan, &ctx, &err);
    ASSERT_STATUS(st, INFD_STATUS_OK);
    void *dev = infd_engine_device_alloc(INFD_DEVICE_CUDA, 0, 48, &err);
    ASSERT_TRUE(dev != NULL);
    int64_t dims[2] = { 3, 4 };
    int bad = -1;
    for (int r = 0; r < 4 && st == INFD_STATUS_OK && bad < 0; r++) { /* eager, capture, replays */
        float x[12], y[12];
        ct_fill(x, 12, 400 + (uint32_t)r, -2, 2);
        st = infd_engine_device_copy(INFD_DEVICE_CUDA, 0, dev, x, sizeof(x), true, &err);
        if (st == INFD_STATUS_OK)
            st = infd_context_set_device_input(ctx, 0, dev, &err);
        infd_tensor in = { .dtype = INFD_DTYPE_FP32, .data = NULL, .nbytes = sizeof(x) };
        infd_tensor out = { .data = y, .nbytes = sizeof(y) };
        infd_shape_init(&in.shape, 2, dims, NULL);
        if (st == INFD_STATUS_OK)
            st = infd_plan_run(plan, ctx, &in, 1, &out, 1, &err);
        for (int i = 0; i < 12 && st == INFD_STATUS_OK; i++) {
            float want = x[i] + bias[i % 4] > 0 ? x[i] + bias[i % 4] : 0.0f;
            if (fabsf(y[i] - want) > 1e-6f)
                bad = r * 100 + i;
        }
    }
    ASSERT_STATUS(st, INFD_STATUS_OK);
    ASSERT_EQ_INT(bad, -1);
    float y[12];
    infd_tensor in = { .dtype = INFD_DTYPE_FP32, .data = NULL, .nbytes = 48 };
    infd_tensor out = { .data = y, .nbytes = sizeof(y) };
    infd_shape_init(&in.shape, 2, dims, NULL);
    ASSERT_STATUS(infd_plan_run(plan, ctx, &in, 1, &out, 1, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STATUS(infd_context_set_device_input(ctx, 0, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STATUS(infd_context_set_device_input(ctx, 1, dev, &err), INFD_STATUS_INVALID_ARGUMENT);
    infd_engine_device_free(INFD_DEVICE_CUDA, 0, dev);
    infd_context_destroy(ctx);
    infd_plan_destroy(plan);
}

int main(int argc, char **argv)
{
    infd_error err = { 0 };
    if (cuda->available(&err) != INFD_STATUS_OK) {
        printf("SKIP: CUDA kernel tests: %s\n", err.msg);
        return SKIP_CODE;
    }
    static const test_case_ cases[] = {
        { "test_conv_bias_relu", test_conv_bias_relu },
        { "test_conv_plain_and_bias", test_conv_plain_and_bias },
        { "test_conv_residual_relu", test_conv_residual_relu },
        { "test_conv_depthwise_clip_asymmetric", test_conv_depthwise_clip_asymmetric },
        { "test_conv_fp16", test_conv_fp16 },
        { "test_conv_fp16_depthwise_opaque", test_conv_fp16_depthwise_opaque },
        { "test_fp16_opaque_inputs", test_fp16_opaque_inputs },
        { "test_fp16_depthwise_block", test_fp16_depthwise_block },
        { "test_fp16_stem", test_fp16_stem },
        { "test_gemm", test_gemm },
        { "test_matmul", test_matmul },
        { "test_fp32_strict_tf32_opt_in", test_fp32_strict_tf32_opt_in },
        { "test_binary_broadcast", test_binary_broadcast },
        { "test_unary", test_unary },
        { "test_clip", test_clip },
        { "test_pool", test_pool },
        { "test_softmax", test_softmax },
        { "test_concat_transpose_reshape", test_concat_transpose_reshape },
        { "test_pad_resize", test_pad_resize },
        { "test_unsupported_names_op", test_unsupported_names_op },
        { "test_plan_runs_on_cuda", test_plan_runs_on_cuda },
        { "test_plan_input_pieces", test_plan_input_pieces },
        { "test_plan_device_input", test_plan_device_input },
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
