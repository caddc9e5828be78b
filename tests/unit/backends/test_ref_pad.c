/*
 * test_ref_pad.c - Pad in its three modes, pads as attribute (opset 2) and
 * as input (opset 11), constant_value as a run-time input, axes (opset 18),
 * negative pads, against hand-computed values.
 */
#include <stdint.h>

#include "ref_test.h"
#include "test.h"

/* [2, 3] = 1..6 padded by one column on the left and two on the right of
 * the last axis, one row above. */
static void run_modes(const char *mode, const float *want)
{
    float x[6] = { 1, 2, 3, 4, 5, 6 }, y[18];
    int64_t pads[4] = { 1, 1, 0, 2 };
    float cv = 9.0f;
    kt t;
    kt_init(&t, "Pad", 13);
    kt_attr_string(&t, "mode", mode);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 }, pads);
    kt_input(&t, INFD_DTYPE_FP32, 0, NULL, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 6 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x, pads, &cv }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, want, 18, 0);
}

static void test_pad_modes(void)
{
    run_modes("constant", (float[]){ 9, 9, 9, 9, 9, 9, 9, 1, 2, 3, 9, 9, 9, 4, 5, 6, 9, 9 });
    run_modes("edge", (float[]){ 1, 1, 2, 3, 3, 3, 1, 1, 2, 3, 3, 3, 4, 4, 5, 6, 6, 6 });
    run_modes("reflect", (float[]){ 5, 4, 5, 6, 5, 4, 2, 1, 2, 3, 2, 1, 5, 4, 5, 6, 5, 4 });
}

static void test_pad_attr_axes_crop(void)
{
    /* Opset 2: pads and value as attributes, INT32 data, a negative pad. */
    int32_t x[6] = { 1, 2, 3, 4, 5, 6 }, y[12];
    kt t;
    kt_init(&t, "Pad", 2);
    kt_attr_ints(&t, "pads", 4, (int64_t[]){ 0, -1, 1, 2 });
    kt_attr_float(&t, "value", 7.0f);
    kt_input(&t, INFD_DTYPE_INT32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT32, 2, (int64_t[]){ 3, 4 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 2, 3, 7, 7, 5, 6, 7, 7, 7, 7, 7, 7 }), 12);

    /* Opset 18: axes [-1] only, UINT8, default zero. */
    uint8_t xb[4] = { 1, 2, 3, 4 }, yb[8];
    int64_t pads[2] = { 1, 1 }, axes[1] = { -1 };
    kt_init(&t, "Pad", 18);
    kt_input(&t, INFD_DTYPE_UINT8, 2, (int64_t[]){ 2, 2 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 2 }, pads);
    kt_input_omitted(&t);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, axes);
    kt_output(&t, INFD_DTYPE_UINT8, 2, (int64_t[]){ 2, 4 });
    ASSERT_RUN_OK(&t, ((const void *[]){ xb, pads, NULL, axes }), ((void *[]){ yb }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(yb, ((int64_t[]){ 0, 1, 2, 0, 0, 3, 4, 0 }), 8);

    /* Declined mode, with a reason. */
    kt_init(&t, "Pad", 13);
    kt_attr_string(&t, "mode", "wrap");
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 2 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 2 }, pads);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 });
    infd_error e = { 0 };
    ASSERT_FALSE(rt_supported(&t, &e));
    ASSERT_TRUE(e.code == INFD_STATUS_UNIMPLEMENTED);
    kt_fini(&t);
}

TEST_MAIN(test_pad_modes, test_pad_attr_axes_crop)
