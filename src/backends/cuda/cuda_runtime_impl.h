/*
 * cuda_runtime_impl.h - the stream object behind cuda_runtime.h's `void *`,
 * and launch geometry helpers, for the .cu files of this backend only (it
 * names CUDA types).
 */
#ifndef INFD_BACKENDS_CUDA_RUNTIME_IMPL_H
#define INFD_BACKENDS_CUDA_RUNTIME_IMPL_H

#include <stdio.h>

#include <cuda_runtime.h>

#include "cuda_libs.h" /* cuDNN and cuBLASLt, through the loaded table */
#include "cuda_runtime.h"

typedef struct infd_cuda_stream {
    cudaStream_t s;
    cudnnHandle_t dnn;
    cublasLtHandle_t lt;
    cudaGraphExec_t graph;  /* the captured run, or NULL */
    cudaEvent_t done;       /* blocking-sync event infd_cuda_sync waits on */
    int dev;                /* the GPU the stream was made on */
    int in_flight;          /* counted in its GPU's runs in flight (cuda_runtime.cu) */
    long long last_wait_ns; /* how long infd_cuda_sync's last wait took */
    int failed;             /* an error is recorded in `err` */
    char err[256];          /* first failure since the last sync */
} infd_cuda_stream;

/* Launch geometry for n elements, 256 threads a block. */
static inline unsigned infd_cuda_blocks(long long n)
{
    long long b = (n + 255) / 256;
    if (b < 1)
        b = 1;
    return b > 2147483647LL ? 2147483647u : (unsigned)b;
}

/* The grid of a persistent kernel (each block loops over the tiles): as
 * many blocks of `threads` threads and `smem` bytes of dynamic shared
 * memory as fit on the current GPU at once, at most `tiles`. Each of the
 * n kernel instances in fns (fns[0] sizes the grid) is first allowed
 * `smem_cap` bytes: the setting is the instance's, shared by every layer
 * that launches it, so it is the cap and never one layer's size (a smaller
 * one set later made the larger layers' launches fail). 0 with the reason
 * (`what` cannot launch: ...) in `why` when no block fits. */
static inline int infd_cuda_persistent_grid(const void *const *fns, int n, int threads, size_t smem,
                                            int smem_cap, long long tiles, const char *what,
                                            char *why, size_t why_n)
{
    int dev = 0, sms = 0, per_sm = 0;
    cudaError_t rc = cudaSuccess;
    for (int i = 0; i < n && rc == cudaSuccess; i++)
        rc = cudaFuncSetAttribute(fns[i], cudaFuncAttributeMaxDynamicSharedMemorySize, smem_cap);
    if (rc == cudaSuccess)
        rc = cudaGetDevice(&dev);
    if (rc == cudaSuccess)
        rc = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (rc == cudaSuccess)
        rc = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fns[0], threads, smem);
    if (rc != cudaSuccess || per_sm < 1) {
        snprintf(why, why_n, "%s cannot launch: %s", what,
                 rc != cudaSuccess ? cudaGetErrorString(rc) : "no room for a block");
        cudaGetLastError();
        return 0;
    }
    long long most = (long long)sms * per_sm;
    return (int)(tiles < most ? tiles : most);
}

#endif /* INFD_BACKENDS_CUDA_RUNTIME_IMPL_H */
