/*
 * cuda_runtime_impl.h - the stream object behind cuda_runtime.h's `void *`,
 * for the .cu files of this backend only (it names CUDA types).
 */
#ifndef INFD_BACKENDS_CUDA_RUNTIME_IMPL_H
#define INFD_BACKENDS_CUDA_RUNTIME_IMPL_H

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "cuda_runtime.h"

typedef struct infd_cuda_stream {
    cudaStream_t s;
    cudnnHandle_t dnn;
    cublasLtHandle_t lt;
    cudaGraphExec_t graph;  /* the captured run, or NULL */
    cudaEvent_t done;       /* blocking-sync event infd_cuda_sync waits on */
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

#endif /* INFD_BACKENDS_CUDA_RUNTIME_IMPL_H */
