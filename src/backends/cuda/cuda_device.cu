/*
 * cuda_device.cu - device enumeration through the CUDA runtime.
 *
 * The runtime is linked statically and loads libcuda.so.1 at first use, so
 * the same binary starts on machines without a driver; there the first call
 * returns cudaErrorInsufficientDriver or cudaErrorNoDevice and we report 0.
 */
#include "cuda_device.h"

#include <cuda_runtime.h>
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
