/*
 * cuda_pool.h - C-linkage launchers for pooling and reductions over FP32
 * NCHW device data (cuda_pool.cu): windowed max/average pooling, global
 * pooling and softmax.
 */
#ifndef INFD_BACKENDS_CUDA_POOL_H
#define INFD_BACKENDS_CUDA_POOL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A 2-D pooling window (1-D pools use h = kh = 1). */
typedef struct infd_cuda_pool_desc {
    int64_t nc;     /* batch * channels */
    int64_t h, w;   /* input */
    int64_t oh, ow; /* output */
    int kh, kw, sh, sw, ph, pw, dh, dw;
    int max;               /* 1: max, 0: average */
    int count_include_pad; /* average: divide by the full window */
} infd_cuda_pool_desc;

void infd_cuda_pool2d(void *stream, const infd_cuda_pool_desc *d, const float *x, float *y);

/* y[i] = mean (max != 0: max) of x[i * len .. (i + 1) * len) for i < rows. */
void infd_cuda_global_pool(void *stream, int max, const float *x, float *y, int64_t rows,
                           int64_t len);

/* Softmax (log_softmax when `log`) of x viewed as [outer, axis, inner] along
 * the middle dim. */
void infd_cuda_softmax(void *stream, int log, const float *x, float *y, int64_t outer, int64_t axis,
                       int64_t inner);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_POOL_H */
