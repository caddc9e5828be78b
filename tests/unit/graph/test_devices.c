/* Unit tests for device discovery: the CPU is always there; CUDA is there
 * when built and a GPU is present, and otherwise says why it is not. */
#include "infd/engine.h"
#include "test.h"

static void test_cpu(void)
{
    char buf[256];
    ASSERT_TRUE(infd_engine_has_backend(INFD_DEVICE_CPU));
    ASSERT_EQ_INT(infd_engine_device_count(INFD_DEVICE_CPU, NULL), 1);
    ASSERT_STATUS(infd_engine_device_describe(INFD_DEVICE_CPU, 0, buf, sizeof(buf), NULL),
                  INFD_STATUS_OK);
    ASSERT_TRUE(strlen(buf) > 0);
    ASSERT_STATUS(infd_engine_device_describe(INFD_DEVICE_CPU, 1, buf, sizeof(buf), NULL),
                  INFD_STATUS_NOT_FOUND);
}

static void test_cuda(void)
{
    infd_error err = { 0 };
#ifdef INFD_HAVE_CUDA
    ASSERT_TRUE(infd_engine_has_backend(INFD_DEVICE_CUDA));
#else
    ASSERT_FALSE(infd_engine_has_backend(INFD_DEVICE_CUDA));
#endif
    int n = infd_engine_device_count(INFD_DEVICE_CUDA, &err);
    ASSERT_TRUE(n >= 0);
    if (n == 0) {
        ASSERT_STATUS(err.code, INFD_STATUS_UNAVAILABLE);
        ASSERT_TRUE(strlen(err.msg) > 0);
        printf("    skipped GPU checks: %s\n", err.msg);
        return;
    }
    char buf[256];
    ASSERT_STATUS(infd_engine_device_describe(INFD_DEVICE_CUDA, 0, buf, sizeof(buf), &err),
                  INFD_STATUS_OK);
    ASSERT_STR_HAS(buf, "sm_");
    printf("    gpu 0: %s\n", buf);
}

TEST_MAIN(test_cpu, test_cuda)
