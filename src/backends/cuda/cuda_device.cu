/*
 * cuda_device.cu - device enumeration through the CUDA runtime.
 *
 * The runtime is linked statically and loads libcuda.so.1 at first use, so
 * the same binary starts on machines without a driver; there the first call
 * returns cudaErrorInsufficientDriver or cudaErrorNoDevice and we report 0.
 */
#include "cuda_device.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <string.h>
#include <stdio.h>

#include "cuda_libs.h"

extern "C" int infd_cuda_device_count(char *why, size_t n)
{
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
        if (why && n)
            snprintf(why, n, "%s", cudaGetErrorString(rc));
        cudaGetLastError(); /* clear the sticky error for later calls */
        return 0;
    }
    if (count == 0 && why && n)
        snprintf(why, n, "no CUDA device");
    return count;
}

static_assert(sizeof(cudaIpcMemHandle_t) == INFD_CUDA_IPC_HANDLE_BYTES,
              "cudaIpcMemHandle_t has the size infd's API gives it");

/* Writes the error (cleared from the runtime's sticky state) and returns -1. */
static int fail(cudaError_t rc, const char *what, char *why, size_t n)
{
    if (why && n)
        snprintf(why, n, "%s: %s", what, cudaGetErrorString(rc));
    cudaGetLastError();
    return -1;
}

/* Makes device `index` current for one call and puts the thread's own
 * current device back after it: these calls run on threads (a model
 * instance's worker) whose current device is another's. */
struct device_scope {
    int prev = -1;
    cudaError_t rc;
    explicit device_scope(int index)
    {
        if (cudaGetDevice(&prev) != cudaSuccess)
            prev = -1;
        rc = index == prev ? cudaSuccess : cudaSetDevice(index);
    }
    ~device_scope()
    {
        int now = -1;
        if (prev >= 0 && cudaGetDevice(&now) == cudaSuccess && now != prev)
            cudaSetDevice(prev);
    }
};

extern "C" int infd_cuda_ipc_open(int index, const void *handle, void **out, size_t *bytes,
                                  char *why, size_t n)
{
    *out = NULL;
    *bytes = 0;
    device_scope dev(index);
    if (dev.rc != cudaSuccess)
        return fail(dev.rc, "cudaSetDevice", why, n);
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof(h));
    cudaError_t rc = cudaIpcOpenMemHandle(out, h, cudaIpcMemLazyEnablePeerAccess);
    if (rc != cudaSuccess) {
        *out = NULL;
        return fail(rc, "cudaIpcOpenMemHandle", why, n);
    }
    /* The allocation's size, from the driver (the runtime API has no call
     * for it): a region may not claim more than the client allocated. */
    static PFN_cuMemGetAddressRange_v3020 range;
    cudaDriverEntryPointQueryResult found;
    if (!range && (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", (void **)&range, 3020,
                                                    cudaEnableDefault, &found) != cudaSuccess ||
                   found != cudaDriverEntryPointSuccess))
        range = NULL;
    CUdeviceptr base = 0;
    size_t size = 0;
    if (!range || range(&base, &size, (CUdeviceptr)*out) != CUDA_SUCCESS) {
        cudaIpcCloseMemHandle(*out);
        *out = NULL;
        cudaGetLastError();
        snprintf(why, n,
                 "cannot tell the size of the memory the handle maps "
                 "(cuMemGetAddressRange)");
        return -1;
    }
    *bytes = (size_t)(base + size - (CUdeviceptr)*out);
    return 0;
}

extern "C" void infd_cuda_ipc_close(int index, void *ptr)
{
    if (!ptr)
        return;
    device_scope dev(index);
    if (dev.rc != cudaSuccess || cudaIpcCloseMemHandle(ptr) != cudaSuccess)
        cudaGetLastError();
}

extern "C" int infd_cuda_ipc_handle(int index, const void *dev_ptr, void *handle, char *why,
                                    size_t n)
{
    device_scope dev(index);
    if (dev.rc != cudaSuccess)
        return fail(dev.rc, "cudaSetDevice", why, n);
    cudaIpcMemHandle_t h;
    cudaError_t rc = cudaIpcGetMemHandle(&h, (void *)dev_ptr);
    if (rc != cudaSuccess)
        return fail(rc, "cudaIpcGetMemHandle", why, n);
    memcpy(handle, &h, sizeof(h));
    return 0;
}

/* On this thread's own default stream (cudaStreamPerThread): the legacy
 * default stream would also wait for the device's blocking streams. */
extern "C" int infd_cuda_memcpy_async(int index, void *dst, const void *src, size_t bytes,
                                      char *why, size_t n)
{
    device_scope dev(index);
    if (dev.rc != cudaSuccess)
        return fail(dev.rc, "cudaSetDevice", why, n);
    cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamPerThread);
    return rc == cudaSuccess ? 0 : fail(rc, "cudaMemcpyAsync", why, n);
}

extern "C" int infd_cuda_memcpy_wait(int index, char *why, size_t n)
{
    device_scope dev(index);
    if (dev.rc != cudaSuccess)
        return fail(dev.rc, "cudaSetDevice", why, n);
    cudaError_t rc = cudaStreamSynchronize(cudaStreamPerThread);
    return rc == cudaSuccess ? 0 : fail(rc, "cudaStreamSynchronize", why, n);
}

extern "C" int infd_cuda_memcpy(int index, void *dst, const void *src, size_t bytes, char *why,
                                size_t n)
{
    if (infd_cuda_memcpy_async(index, dst, src, bytes, why, n) != 0)
        return -1;
    return infd_cuda_memcpy_wait(index, why, n);
}

extern "C" int infd_cuda_device_describe(int index, char *buf, size_t n)
{
    cudaDeviceProp prop;
    cudaError_t rc = cudaGetDeviceProperties(&prop, index);
    if (rc != cudaSuccess) {
        snprintf(buf, n, "device %d: %s", index, cudaGetErrorString(rc));
        cudaGetLastError();
        return -1;
    }
    snprintf(buf, n, "%s, sm_%d%d, %.1f GiB", prop.name, prop.major, prop.minor,
             (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return 0;
}

/* cuDNN's and cuBLASLt's own major.minor.patch, read from the loaded
 * libraries (loaded now if no plan did: cuda_libs.h; they may be newer or
 * older than the headers we compiled against), or why they cannot be
 * loaded; the CUDA runtime is linked statically, so its version is the
 * toolkit's. */
extern "C" void infd_cuda_library_versions(char *buf, size_t n)
{
    int dnn[3] = { 0, 0, 0 }, lt[3] = { 0, 0, 0 }, rt = 0;
    static const libraryPropertyType parts[3] = { MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL };
    char why[512];
    if (infd_cuda_libs_load(why, sizeof(why)) != 0) {
        snprintf(buf, n, "%s", why);
        return;
    }
    for (int i = 0; i < 3; i++) {
        if (cudnnGetProperty(parts[i], &dnn[i]) != CUDNN_STATUS_SUCCESS)
            dnn[i] = -1;
        if (cublasLtGetProperty(parts[i], &lt[i]) != CUBLAS_STATUS_SUCCESS)
            lt[i] = -1;
    }
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) {
        cudaGetLastError();
        rt = 0;
    }
    snprintf(buf, n, "cuDNN %d.%d.%d, cuBLASLt %d.%d.%d, CUDA runtime %d.%d", dnn[0], dnn[1],
             dnn[2], lt[0], lt[1], lt[2], rt / 1000, rt % 1000 / 10);
}
