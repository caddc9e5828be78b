/*
 * cuda_time.cuh - timing our own kernels on the compile stream (the forms
 * a convolution chooses between by their measured time), for .cu files
 * only.
 */
#ifndef INFD_BACKENDS_CUDA_TIME_CUH
#define INFD_BACKENDS_CUDA_TIME_CUH

#include <cuda_runtime.h>

#include "cuda_runtime_impl.h"

/* ms per call of run() on the compile stream (2 warm-up and 5 timed calls),
 * or a negative value when it failed. */
template <typename F> static inline float time_runs(infd_cuda_stream *st, F run)
{
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms = -1.0f;
    if (cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
        for (int i = 0; i < 7; i++) {
            if (i == 2)
                cudaEventRecord(e0, st->s);
            run();
        }
        cudaEventRecord(e1, st->s);
        if (cudaEventSynchronize(e1) == cudaSuccess &&
            cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess)
            ms /= 5.0f;
        else
            ms = -1.0f;
    }
    cudaGetLastError();
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaStreamSynchronize(st->s);
    cudaGetLastError();
    return ms;
}

/* Runs body(st, p) on the compile stream with p[i] a device scratch buffer
 * of bytes[i] (n of them, at most 5), filled with random values of kind[i]
 * (infd_cuda_fill_random's), and frees them after: the frame of every
 * such timing. body returns time_runs' ms; -1 when the stream or memory is not
 * to be had. */
template <typename F>
static inline float time_on_scratch(int n, const size_t *bytes, const int *kind, F body)
{
    char why[128];
    infd_cuda_stream *st = (infd_cuda_stream *)infd_cuda_compile_stream_lock(why, sizeof(why));
    if (!st)
        return -1.0f;
    void *p[5] = { NULL, NULL, NULL, NULL, NULL };
    bool ok = n <= 5;
    for (int i = 0; ok && i < n; i++) {
        ok = cudaMalloc(&p[i], bytes[i]) == cudaSuccess;
        if (ok)
            infd_cuda_fill_random(st, p[i], bytes[i] / (kind[i] ? 2 : 4), kind[i], (unsigned)i + 1);
    }
    float ms = ok ? body(st, p) : -1.0f;
    cudaGetLastError();
    cudaStreamSynchronize(st->s);
    for (int i = 0; i < 5; i++)
        cudaFree(p[i]);
    cudaGetLastError();
    infd_cuda_compile_stream_unlock();
    return ms;
}

#endif /* INFD_BACKENDS_CUDA_TIME_CUH */
