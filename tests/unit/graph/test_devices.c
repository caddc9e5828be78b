/* Unit tests for device discovery: the CPU is always there; CUDA is there
 * when built and a GPU is present, and otherwise says why it is not.
 * Device memory (infd_engine_device_alloc and copy) on a GPU, refused on
 * the CPU and without one. */
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
    /* The CPU has no device memory: refused with why. */
    infd_error err = { 0 };
    ASSERT_TRUE(infd_engine_device_alloc(INFD_DEVICE_CPU, 0, 64, &err) == NULL);
    ASSERT_STATUS(err.code, INFD_STATUS_UNAVAILABLE);
    ASSERT_STR_HAS(err.msg, "device memory needs a device backend");
    char host[4] = { 0 };
    ASSERT_STATUS(infd_engine_device_copy(INFD_DEVICE_CPU, 0, host, host, 4, true, &err),
                  INFD_STATUS_UNAVAILABLE);
    infd_engine_device_free(INFD_DEVICE_CPU, 0, NULL);
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
        infd_error e2 = { 0 };
        ASSERT_TRUE(infd_engine_device_alloc(INFD_DEVICE_CUDA, 0, 64, &e2) == NULL);
        ASSERT_STATUS(e2.code, INFD_STATUS_UNAVAILABLE);
        return;
    }
    char buf[256];
    ASSERT_STATUS(infd_engine_device_describe(INFD_DEVICE_CUDA, 0, buf, sizeof(buf), &err),
                  INFD_STATUS_OK);
    ASSERT_STR_HAS(buf, "sm_");
    printf("    gpu 0: %s\n", buf);
    /* Device memory there and back; a GPU past the last one is refused. */
    float in[4] = { 1, 2, 3, 4 }, out[4] = { 0 };
    void *dev = infd_engine_device_alloc(INFD_DEVICE_CUDA, 0, sizeof(in), &err);
    ASSERT_TRUE(dev != NULL);
    ASSERT_STATUS(infd_engine_device_copy(INFD_DEVICE_CUDA, 0, dev, in, sizeof(in), true, &err),
                  INFD_STATUS_OK);
    ASSERT_STATUS(infd_engine_device_copy(INFD_DEVICE_CUDA, 0, out, dev, sizeof(out), false, &err),
                  INFD_STATUS_OK);
    ASSERT_TRUE(memcmp(in, out, sizeof(in)) == 0);
    infd_engine_device_free(INFD_DEVICE_CUDA, 0, dev);
    ASSERT_TRUE(infd_engine_device_alloc(INFD_DEVICE_CUDA, n, 64, &err) == NULL);
    ASSERT_STATUS(err.code, INFD_STATUS_INVALID_ARGUMENT);
}

TEST_MAIN(test_cpu, test_cuda)
