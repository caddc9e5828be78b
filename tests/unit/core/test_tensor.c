/* Unit tests for shapes and tensor descriptors. */
#include <stdint.h>

#include "core/alloc.h"
#include "infd/infd.h"
#include "test.h"

static void test_shape_init_validates(void)
{
    infd_shape s;
    infd_error err = { 0 };
    int64_t dims[9] = { 1, 3, 224, 224, 1, 1, 1, 1, 1 };
    ASSERT_STATUS(infd_shape_init(&s, 4, dims, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(s.rank, 4);
    ASSERT_STATUS(infd_shape_init(&s, 9, dims, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "rank 9");
    int64_t neg[2] = { 2, -1 };
    ASSERT_STATUS(infd_shape_init(&s, 2, neg, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "dim 1 is -1");
    ASSERT_STATUS(infd_shape_init(&s, 0, NULL, &err), INFD_STATUS_OK);
}

static void test_numel(void)
{
    infd_shape s;
    int64_t n = -1;
    int64_t dims[3] = { 2, 3, 4 };
    infd_shape_init(&s, 3, dims, NULL);
    ASSERT_STATUS(infd_shape_numel(&s, &n, NULL), INFD_STATUS_OK);
    ASSERT_EQ_I64(n, 24);
    infd_shape_init(&s, 0, NULL, NULL);
    infd_shape_numel(&s, &n, NULL);
    ASSERT_EQ_I64(n, 1); /* scalar */
    int64_t empty[2] = { 0, 5 };
    infd_shape_init(&s, 2, empty, NULL);
    infd_shape_numel(&s, &n, NULL);
    ASSERT_EQ_I64(n, 0);
}

static void test_numel_overflow(void)
{
    infd_shape s;
    infd_error err = { 0 };
    int64_t n;
    int64_t dims[3] = { INT64_MAX / 2, 3, 1 };
    infd_shape_init(&s, 3, dims, NULL);
    ASSERT_STATUS(infd_shape_numel(&s, &n, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "overflows");
    /* Fits int64 elements but not bytes. */
    int64_t d2[1] = { INT64_MAX / 2 };
    size_t bytes;
    infd_shape_init(&s, 1, d2, NULL);
    ASSERT_STATUS(infd_tensor_nbytes_for(INFD_DTYPE_FP64, &s, &bytes, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "overflows");
}

static void test_format(void)
{
    infd_shape s;
    char buf[64];
    int64_t dims[4] = { 1, 3, 224, 224 };
    infd_shape_init(&s, 4, dims, NULL);
    ASSERT_STR_EQ(infd_shape_format(&s, buf, sizeof(buf)), "[1,3,224,224]");
    infd_shape_init(&s, 0, NULL, NULL);
    ASSERT_STR_EQ(infd_shape_format(&s, buf, sizeof(buf)), "[]");
    infd_shape_init(&s, 4, dims, NULL);
    char small[6];
    ASSERT_STR_EQ(infd_shape_format(&s, small, sizeof(small)), "[1,3,");
}

static void test_view_checks_size(void)
{
    infd_tensor t;
    infd_shape s;
    infd_error err = { 0 };
    float data[6] = { 0 };
    int64_t dims[2] = { 2, 3 };
    infd_shape_init(&s, 2, dims, NULL);
    ASSERT_STATUS(infd_tensor_init_view(&t, INFD_DTYPE_FP32, &s, data, sizeof(data), &err),
                  INFD_STATUS_OK);
    ASSERT_FALSE(t.owns_data);
    ASSERT_EQ_I64(infd_tensor_numel(&t), 6);
    ASSERT_STATUS(infd_tensor_init_view(&t, INFD_DTYPE_FP32, &s, data, 20, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_EQ(err.msg, "FP32 tensor of shape [2,3] needs 24 bytes, got 20");
    ASSERT_STATUS(infd_tensor_init_view(&t, INFD_DTYPE_INVALID, &s, data, 24, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STATUS(infd_tensor_init_view(&t, INFD_DTYPE_FP32, &s, NULL, 24, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    /* BYTES: any byte size is accepted; the payload is validated by its user. */
    ASSERT_STATUS(infd_tensor_init_view(&t, INFD_DTYPE_BYTES, &s, data, 13, &err), INFD_STATUS_OK);
    infd_tensor_fini(&t); /* a view: frees nothing */
    ASSERT_TRUE(t.data == NULL);
}

static void test_alloc_owns_aligned_zeroed(void)
{
    infd_tensor t;
    infd_shape s;
    int64_t dims[3] = { 3, 5, 7 };
    infd_shape_init(&s, 3, dims, NULL);
    ASSERT_STATUS(infd_tensor_alloc(&t, INFD_DTYPE_FP16, &s, NULL), INFD_STATUS_OK);
    ASSERT_TRUE(t.owns_data);
    ASSERT_EQ_U64(t.nbytes, 3 * 5 * 7 * 2);
    ASSERT_EQ_U64((uintptr_t)t.data % INFD_ALIGNMENT, 0);
    for (size_t i = 0; i < t.nbytes; i++)
        ASSERT_EQ_U64(((unsigned char *)t.data)[i], 0);
    infd_tensor_fini(&t);
    ASSERT_FALSE(t.owns_data);
    infd_tensor_fini(&t); /* twice is fine */

    int64_t zero[1] = { 0 };
    infd_shape_init(&s, 1, zero, NULL);
    ASSERT_STATUS(infd_tensor_alloc(&t, INFD_DTYPE_FP32, &s, NULL), INFD_STATUS_OK);
    ASSERT_TRUE(t.data != NULL);
    ASSERT_EQ_U64(t.nbytes, 0);
    infd_tensor_fini(&t);
}

static void test_alloc_out_of_memory(void)
{
    infd_tensor t;
    infd_shape s;
    infd_error err = { 0 };
    int64_t dims[1] = { 16 };
    infd_shape_init(&s, 1, dims, NULL);
    infd_alloc_fail_after(1);
    ASSERT_STATUS(infd_tensor_alloc(&t, INFD_DTYPE_FP32, &s, &err), INFD_STATUS_OUT_OF_MEMORY);
    ASSERT_STR_HAS(err.msg, "64-byte tensor");
    ASSERT_TRUE(t.data == NULL && !t.owns_data);
    ASSERT_STATUS(infd_tensor_alloc(&t, INFD_DTYPE_BYTES, &s, &err), INFD_STATUS_INVALID_ARGUMENT);
}

TEST_MAIN(test_shape_init_validates, test_numel, test_numel_overflow, test_format,
          test_view_checks_size, test_alloc_owns_aligned_zeroed, test_alloc_out_of_memory)
