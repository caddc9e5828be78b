/*
 * test_ref_shape.c - Shape, Constant, ConstantOfShape, Range and Cast.
 */
#include <stdint.h>

#include "ref_test.h"
#include "test.h"

static void test_shape_start_end(void)
{
    int64_t y[4] = { 0 };
    kt t;
    kt_init(&t, "Shape", 13);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 3, 224, 112 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 });
    ASSERT_RUN_OK(&t, ((const void *[]){ NULL }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 1, 3, 224, 112 }), 4);

    kt_init(&t, "Shape", 15);
    kt_attr_int(&t, "start", -3);
    kt_attr_int(&t, "end", -1);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 3, 224, 112 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 2 });
    ASSERT_RUN_OK(&t, ((const void *[]){ NULL }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 3, 224 }), 2);
}

static void test_constant_forms(void)
{
    kt t;
    float v[3] = { 1.5f, -2, 3 }, y[3];
    kt_init(&t, "Constant", 13);
    rt_attr_tensor(&t, "value", rt_tensor(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 3 }, v));
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ NULL }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, v, 3, 0);

    int64_t iy[2];
    kt_init(&t, "Constant", 13);
    kt_attr_ints(&t, "value_ints", 2, (int64_t[]){ 7, -8 });
    kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 2 });
    ASSERT_RUN_OK(&t, ((const void *[]){ NULL }), ((void *[]){ iy }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(iy, ((int64_t[]){ 7, -8 }), 2);

    float f;
    kt_init(&t, "Constant", 13);
    kt_attr_float(&t, "value_float", 0.125f);
    kt_output(&t, INFD_DTYPE_FP32, 0, NULL);
    ASSERT_RUN_OK(&t, ((const void *[]){ NULL }), ((void *[]){ &f }));
    kt_fini(&t);
    ASSERT_TRUE(f == 0.125f);

    infd_error why = { 0 };
    kt_init(&t, "Constant", 13);
    kt_attr_string(&t, "value_string", "x");
    kt_output(&t, INFD_DTYPE_BYTES, 0, NULL);
    ASSERT_FALSE(rt_supported(&t, &why));
    kt_fini(&t);
    ASSERT_STR_HAS(why.msg, "string");
}

static void test_constant_of_shape(void)
{
    int64_t shape[2] = { 2, 3 }, y[6], seven = 7;
    kt t;
    kt_init(&t, "ConstantOfShape", 9);
    rt_attr_tensor(&t, "value", rt_tensor(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, &seven));
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 2 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 2, shape);
    ASSERT_RUN_OK(&t, ((const void *[]){ shape }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 7, 7, 7, 7, 7, 7 }), 6);

    enum { N = 40000 };
    float *z = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++)
        z[i] = 1.0f;
    kt_init(&t, "ConstantOfShape", 9);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ N });
    ASSERT_RUN_OK(&t, ((const void *[]){ (int64_t[]){ N } }), ((void *[]){ z }));
    kt_fini(&t);
    int nonzero = 0;
    for (int i = 0; i < N; i++)
        nonzero += z[i] != 0.0f;
    free(z);
    ASSERT_EQ_INT(nonzero, 0);
}

static void test_range(void)
{
    int64_t s = 10, l = 1, d = -3, y[3];
    kt t;
    kt_init(&t, "Range", 11);
    for (int i = 0; i < 3; i++)
        kt_input(&t, INFD_DTYPE_INT64, 0, NULL, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ &s, &l, &d }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 10, 7, 4 }), 3);

    float fs = 0.5f, fl = 2.0f, fd = 0.5f, fy[3];
    kt_init(&t, "Range", 11);
    for (int i = 0; i < 3; i++)
        kt_input(&t, INFD_DTYPE_FP32, 0, NULL, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ &fs, &fl, &fd }), ((void *[]){ fy }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(fy, ((float[]){ 0.5f, 1.0f, 1.5f }), 3, 0);
}

static void run_cast(infd_dtype from, infd_dtype to, const void *x, void *y, int64_t n)
{
    kt t;
    kt_init(&t, "Cast", 13);
    kt_attr_int(&t, "to", infd_dtype_to_onnx(to));
    kt_input(&t, from, 1, (int64_t[]){ n }, NULL);
    kt_output(&t, to, 1, (int64_t[]){ n });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
}

static void test_cast_pairs(void)
{
    const float f[6] = { -2.7f, 2.7f, 0.0f, -0.0f, 0.5f, 65504.0f };
    int64_t i64[6];
    run_cast(INFD_DTYPE_FP32, INFD_DTYPE_INT64, f, i64, 6);
    ASSERT_I64_ARRAY(i64, ((int64_t[]){ -2, 2, 0, 0, 0, 65504 }), 6);

    uint8_t b[6];
    run_cast(INFD_DTYPE_FP32, INFD_DTYPE_BOOL, f, b, 6);
    ASSERT_I64_ARRAY(b, ((uint8_t[]){ 1, 1, 0, 0, 1, 1 }), 6);
    float fb[6];
    run_cast(INFD_DTYPE_BOOL, INFD_DTYPE_FP32, b, fb, 6);
    ASSERT_F32_ARRAY(fb, ((float[]){ 1, 1, 0, 0, 1, 1 }), 6, 0);

    uint16_t h[6];
    float back[6];
    run_cast(INFD_DTYPE_FP32, INFD_DTYPE_FP16, f, h, 6);
    ASSERT_EQ_INT(h[5], 0x7bff);
    ASSERT_EQ_INT(h[4], 0x3800);
    run_cast(INFD_DTYPE_FP16, INFD_DTYPE_FP32, h, back, 6);
    ASSERT_F32_ARRAY(back, ((float[]){ -2.69921875f, 2.69921875f, 0, -0.0f, 0.5f, 65504 }), 6, 0);

    uint16_t bf[6];
    run_cast(INFD_DTYPE_FP32, INFD_DTYPE_BF16, (const float[]){ 1, -2, 0.5f, 3, 0, 1e30f }, bf, 6);
    ASSERT_EQ_INT(bf[0], 0x3f80);
    ASSERT_EQ_INT(bf[1], 0xc000);
    float bb[6];
    run_cast(INFD_DTYPE_BF16, INFD_DTYPE_FP32, bf, bb, 6);
    ASSERT_TRUE(bb[3] == 3.0f);

    int64_t big[3] = { INT64_MAX, -5, 16777217 };
    float fbig[3];
    run_cast(INFD_DTYPE_INT64, INFD_DTYPE_FP32, big, fbig, 3);
    ASSERT_TRUE(fbig[0] == 9223372036854775807.0f);
    ASSERT_TRUE(fbig[1] == -5.0f);
    ASSERT_TRUE(fbig[2] == 16777216.0f);

    uint8_t u[3] = { 200, 0, 255 };
    int8_t s8[3];
    run_cast(INFD_DTYPE_UINT8, INFD_DTYPE_INT8, u, s8, 3);
    ASSERT_I64_ARRAY(s8, ((int8_t[]){ -56, 0, -1 }), 3);

    int32_t i32[2];
    run_cast(INFD_DTYPE_INT64, INFD_DTYPE_INT32, (const int64_t[]){ 3, -4 }, i32, 2);
    ASSERT_I64_ARRAY(i32, ((int32_t[]){ 3, -4 }), 2);

    /* Out-of-range and NaN float -> int do not trap. */
    int32_t odd[3];
    run_cast(INFD_DTYPE_FP32, INFD_DTYPE_INT32, (const float[]){ NAN, 1e30f, -1e30f }, odd, 3);
    ASSERT_EQ_INT(odd[0], 0);

    /* Large FP32 -> FP16 -> FP32 through the pool. */
    enum { N = 40000 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    uint16_t *hh = malloc(sizeof(uint16_t) * N);
    rt_fill_f32(x, N);
    run_cast(INFD_DTYPE_FP32, INFD_DTYPE_FP16, x, hh, N);
    run_cast(INFD_DTYPE_FP16, INFD_DTYPE_FP32, hh, y, N);
    int64_t bad = rt_mismatch_f32(y, x, N, 1e-3f);
    free(x);
    free(y);
    free(hh);
    ASSERT_EQ_I64(bad, -1);
}

TEST_MAIN(test_shape_start_end, test_constant_forms, test_constant_of_shape, test_range,
          test_cast_pairs)
