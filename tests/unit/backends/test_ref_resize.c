/*
 * test_ref_resize.c - Resize and Upsample against the values of the ONNX
 * backend test suite (which ONNX Runtime passes) and a naive nearest
 * reference on random data.
 */
#include <stdint.h>

#include "ref_test.h"
#include "test.h"

/* Resize-13 of a [1,1,h,w] FP32 input with constant scales. */
static infd_status resize4(const char *mode, const char *ct, const char *nm, const float *x,
                           int64_t h, int64_t w, const float *scales, int64_t oh, int64_t ow,
                           float *y, infd_error *err)
{
    kt t;
    kt_init(&t, "Resize", 13);
    kt_attr_string(&t, "mode", mode);
    if (ct)
        kt_attr_string(&t, "coordinate_transformation_mode", ct);
    if (nm)
        kt_attr_string(&t, "nearest_mode", nm);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 1, h, w }, NULL);
    kt_input_omitted(&t);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, scales);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 1, oh, ow });
    infd_status st = rt_run(&t, (const void *[]){ x, NULL, scales }, (void *[]){ y }, err);
    kt_fini(&t);
    return st;
}

#define ASSERT_RESIZE(mode, ct, nm, x, h, w, s, oh, ow, want, tol)            \
    do {                                                                      \
        float y_[64];                                                         \
        infd_error e_ = { 0 };                                                \
        infd_status st_ = resize4(mode, ct, nm, x, h, w, s, oh, ow, y_, &e_); \
        if (st_ != INFD_STATUS_OK)                                            \
            TEST_FAIL_("resize: %s", e_.msg);                                 \
        ASSERT_F32_ARRAY(y_, want, (oh) * (ow), tol);                         \
    } while (0)

static const float x22[4] = { 1, 2, 3, 4 };
static const float x24[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };

static void test_linear_half_pixel_2x(void)
{
    const float want[16] = { 1,   1.25, 1.75, 2,   1.5, 1.75, 2.25, 2.5,
                             2.5, 2.75, 3.25, 3.5, 3,   3.25, 3.75, 4 };
    ASSERT_RESIZE("linear", NULL, NULL, x22, 2, 2, ((const float[]){ 1, 1, 2, 2 }), 4, 4, want,
                  1e-6f);
}

static void test_linear_align_corners(void)
{
    const float want[16] = { 1,          1.3333333f, 1.6666667f, 2,          1.6666667f, 2,
                             2.3333333f, 2.6666667f, 2.3333333f, 2.6666667f, 3,          3.3333333f,
                             3,          3.3333333f, 3.6666667f, 4 };
    ASSERT_RESIZE("linear", "align_corners", NULL, x22, 2, 2, ((const float[]){ 1, 1, 2, 2 }), 4, 4,
                  want, 1e-6f);
}

static void test_linear_downsample(void)
{
    /* resize_downsample_scales_linear */
    ASSERT_RESIZE("linear", NULL, NULL, x24, 2, 4, ((const float[]){ 1, 1, 0.6f, 0.6f }), 1, 2,
                  ((const float[]){ 2.6666665f, 4.3333331f }), 1e-6f);
    /* align_corners with the integer output length, as ONNX Runtime's CPU
     * kernel does: x = 1 maps to 1 * (4 - 1) / (2 - 1) = 3. The ONNX
     * reference (resize_downsample_scales_linear_align_corners) uses the
     * unrounded 4 * 0.6 and expects 3.142857 instead. */
    ASSERT_RESIZE("linear", "align_corners", NULL, x24, 2, 4, ((const float[]){ 1, 1, 0.6f, 0.6f }),
                  1, 2, ((const float[]){ 1, 4 }), 1e-6f);
}

static void test_nearest_modes(void)
{
    /* resize_upsample_scales_nearest (half_pixel, round_prefer_floor). */
    const float up[24] = { 1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4 };
    ASSERT_RESIZE("nearest", NULL, NULL, x22, 2, 2, ((const float[]){ 1, 1, 2, 3 }), 4, 6, up, 0);
    /* resize_downsample_scales_nearest */
    ASSERT_RESIZE("nearest", NULL, NULL, x24, 2, 4, ((const float[]){ 1, 1, 0.6f, 0.6f }), 1, 2,
                  ((const float[]){ 1, 3 }), 0);
    /* asymmetric + floor: the x2 upsample of YOLO-style necks. */
    ASSERT_RESIZE("nearest", "asymmetric", "floor", x22, 2, 2, ((const float[]){ 1, 1, 2, 2 }), 4,
                  4, ((const float[]){ 1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4 }), 0);
    /* round_prefer_ceil vs floor on a 1x4 -> 1x8 half_pixel: x_orig for
     * output 1 is 0.25 -> 0, output 2 is 0.75 -> 1. */
    const float r4[4] = { 10, 20, 30, 40 };
    ASSERT_RESIZE("nearest", NULL, "round_prefer_ceil", r4, 1, 4, ((const float[]){ 1, 1, 1, 2 }),
                  1, 8, ((const float[]){ 10, 10, 20, 20, 30, 30, 40, 40 }), 0);
    ASSERT_RESIZE("nearest", NULL, "ceil", r4, 1, 4, ((const float[]){ 1, 1, 1, 2 }), 1, 8,
                  ((const float[]){ 10, 20, 20, 30, 30, 40, 40, 40 }), 0);
    /* tf_half_pixel_for_nearest: x_orig = (x + 0.5) / 2. */
    ASSERT_RESIZE("nearest", "tf_half_pixel_for_nearest", "floor", r4, 1, 4,
                  ((const float[]){ 1, 1, 1, 2 }), 1, 8,
                  ((const float[]){ 10, 10, 20, 20, 30, 30, 40, 40 }), 0);
}

static void test_pytorch_half_pixel_sizes(void)
{
    /* resize_downsample_sizes_linear_pytorch_half_pixel: 4x4 -> 3x1. */
    float x[16], y[3];
    for (int i = 0; i < 16; i++)
        x[i] = (float)(i + 1);
    int64_t sizes[4] = { 1, 1, 3, 1 };
    kt t;
    kt_init(&t, "Resize", 13);
    kt_attr_string(&t, "mode", "linear");
    kt_attr_string(&t, "coordinate_transformation_mode", "pytorch_half_pixel");
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 1, 4, 4 }, NULL);
    kt_input_omitted(&t);
    kt_input_omitted(&t);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 }, NULL); /* sizes at run time */
    kt_output(&t, INFD_DTYPE_FP32, 4, sizes);
    ASSERT_RUN_OK(&t, ((const void *[]){ x, NULL, NULL, sizes }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, ((const float[]){ 1.6666666f, 7, 12.333333f }), 3, 1e-6f);
}

static void test_opset10_and_upsample(void)
{
    const float up[24] = { 1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4 };
    float scales[4] = { 1, 1, 2, 3 }, y[24];
    kt t;
    kt_init(&t, "Resize", 10);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 1, 2, 2 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, scales);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 1, 4, 6 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x22, scales }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, up, 24, 0);

    /* Upsample-7, nearest, INT64 data. */
    int64_t xi[4] = { 1, 2, 3, 4 }, yi[24];
    kt_init(&t, "Upsample", 7);
    kt_attr_floats(&t, "scales", 4, scales);
    kt_input(&t, INFD_DTYPE_INT64, 4, (int64_t[]){ 1, 1, 2, 2 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 4, (int64_t[]){ 1, 1, 4, 6 });
    ASSERT_RUN_OK(&t, ((const void *[]){ xi }), ((void *[]){ yi }));
    kt_fini(&t);
    for (int i = 0; i < 24; i++)
        ASSERT_EQ_I64(yi[i], (int64_t)up[i]);

    /* Upsample-9 linear (asymmetric): upsample_scales_linear-like, 2x2 -> 4x4. */
    float s2[4] = { 1, 1, 2, 2 }, yl[16];
    kt_init(&t, "Upsample", 9);
    kt_attr_string(&t, "mode", "linear");
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 1, 2, 2 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, s2);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 1, 4, 4 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x22, s2 }), ((void *[]){ yl }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(
        yl, ((const float[]){ 1, 1.5f, 2, 2, 2, 2.5f, 3, 3, 3, 3.5f, 4, 4, 3, 3.5f, 4, 4 }), 16,
        1e-6f);
}

static void test_declines(void)
{
    float scales[4] = { 1, 1, 2, 2 };
    const char *modes[] = { "cubic", "linear" };
    const char *cts[] = { "half_pixel", "tf_crop_and_resize" };
    const char *needles[] = { "cubic", "tf_crop_and_resize" };
    for (int i = 0; i < 2; i++) {
        kt t;
        infd_error why = { 0 };
        kt_init(&t, "Resize", 13);
        kt_attr_string(&t, "mode", modes[i]);
        kt_attr_string(&t, "coordinate_transformation_mode", cts[i]);
        kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 1, 2, 2 }, NULL);
        kt_input_omitted(&t);
        kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, scales);
        kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 1, 4, 4 });
        ASSERT_FALSE(rt_supported(&t, &why));
        kt_fini(&t);
        ASSERT_STR_HAS(why.msg, needles[i]);
    }
    /* Scales computed at run time. */
    kt t;
    infd_error why = { 0 };
    kt_init(&t, "Resize", 13);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 1, 2, 2 }, NULL);
    kt_input_omitted(&t);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 1, 4, 4 });
    ASSERT_FALSE(rt_supported(&t, &why));
    kt_fini(&t);
    ASSERT_STR_HAS(why.msg, "constant");
}

static void test_nearest_random_vs_naive(void)
{
    /* asymmetric + floor: input index = floor(o / scale). 2x on a big
     * tensor exercises the pool. */
    enum { C = 8, H = 40, W = 50 };
    float *x = malloc(sizeof(float) * C * H * W), *y = malloc(sizeof(float) * C * 4 * H * W);
    float scales[4] = { 1, 1, 2, 2 };
    rt_fill_f32(x, C * H * W);
    kt t;
    kt_init(&t, "Resize", 13);
    kt_attr_string(&t, "mode", "nearest");
    kt_attr_string(&t, "coordinate_transformation_mode", "asymmetric");
    kt_attr_string(&t, "nearest_mode", "floor");
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, C, H, W }, NULL);
    kt_input_omitted(&t);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, scales);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, C, 2 * H, 2 * W });
    infd_error e = { 0 };
    infd_status st = rt_run(&t, (const void *[]){ x, NULL, scales }, (void *[]){ y }, &e);
    kt_fini(&t);
    int bad = 0;
    for (int c = 0; c < C; c++)
        for (int i = 0; i < 2 * H; i++)
            for (int j = 0; j < 2 * W; j++)
                bad += y[(c * 2 * H + i) * 2 * W + j] != x[(c * H + i / 2) * W + j / 2];
    free(x);
    free(y);
    ASSERT_STATUS(st, INFD_STATUS_OK);
    ASSERT_EQ_INT(bad, 0);
}

TEST_MAIN(test_linear_half_pixel_2x, test_linear_align_corners, test_linear_downsample,
          test_nearest_modes, test_pytorch_half_pixel_sizes, test_opset10_and_upsample,
          test_declines, test_nearest_random_vs_naive)
