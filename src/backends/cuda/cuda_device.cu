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
