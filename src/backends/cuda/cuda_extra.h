/*
 * cuda_extra.h - C-linkage launchers for the CUDA kernels the engine test
 * models need beyond the first set (cuda_extra.c is their node glue):
 * strided view copies (Slice), reductions over arbitrary axes (Reduce*),
 * inference BatchNormalization (cuda_extra.cu), ConvTranspose on cuDNN
 * (cuda_deconv.cu); batched MatMul runs on cuda_gemm's strided batches.
 *
 * Every launcher enqueues on `stream` (cuda_runtime.h) and returns at once;
 * nothing here allocates, synchronises or copies from the host at run time,
 * so every launch can be captured into a CUDA graph. Index arithmetic is
 * int64 throughout.
 */
#ifndef INFD_BACKENDS_CUDA_EXTRA_H
#define INFD_BACKENDS_CUDA_EXTRA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define INFD_CUDA_VIEW_MAX_RANK 8

/* A strided view of the input: output element i (row-major over `dims`)
 * reads input element base + sum(idx[d] * strides[d]); strides may be
 * negative or 0. */
typedef struct infd_cuda_view {
    int rank; /* 1..INFD_CUDA_VIEW_MAX_RANK */
    int64_t base;
    int64_t dims[INFD_CUDA_VIEW_MAX_RANK];
    int64_t strides[INFD_CUDA_VIEW_MAX_RANK];
} infd_cuda_view;

/* y = the view `v` of x, `n` output elements of `esize` bytes (1, 2, 4 or
 * 8). */
void infd_cuda_view_copy(void *stream, const void *x, void *y, int esize, const infd_cuda_view *v,
                         int64_t n);

/* Reductions, in ONNX's order of ReduceSum .. ReduceLogSumExp. */
typedef enum infd_cuda_redop {
    INFD_CUDA_RED_SUM = 0,
    INFD_CUDA_RED_MEAN,
    INFD_CUDA_RED_MAX,
    INFD_CUDA_RED_MIN,
    INFD_CUDA_RED_PROD,
    INFD_CUDA_RED_SUMSQ,
    INFD_CUDA_RED_L1,
    INFD_CUDA_RED_L2,
    INFD_CUDA_RED_LOGSUM,
    INFD_CUDA_RED_LOGSUMEXP,
} infd_cuda_redop;

/* Element types of a reduction: FP32 accumulates in double, INT32 and
 * INT64 in int64 (products wrap), as the CPU backend does. */
typedef enum infd_cuda_red_dtype {
    INFD_CUDA_RED_F32 = 0,
    INFD_CUDA_RED_I32,
    INFD_CUDA_RED_I64,
} infd_cuda_red_dtype;

/* Output element o decodes (row-major) over the kept dims into an input
 * offset sum(idx * kept_strides); reduced position q decodes over the
 * reduced dims the same way. red_count (the product of red_dims) may be 0:
 * the output is then the op's identity, finalised (Mean: NaN for FP32, 0
 * for integers). */
typedef struct infd_cuda_reduce_desc {
    int op;    /* infd_cuda_redop */
    int dtype; /* infd_cuda_red_dtype */
    int64_t n_out;
    int n_kept, n_red; /* 0..INFD_CUDA_VIEW_MAX_RANK each */
    int64_t kept_dims[INFD_CUDA_VIEW_MAX_RANK], kept_strides[INFD_CUDA_VIEW_MAX_RANK];
    int64_t red_dims[INFD_CUDA_VIEW_MAX_RANK], red_strides[INFD_CUDA_VIEW_MAX_RANK];
    int64_t red_count;
} infd_cuda_reduce_desc;

void infd_cuda_reduce(void *stream, const infd_cuda_reduce_desc *d, const void *x, void *y);

/* Inference BatchNormalization of FP32 data [N, C, inner...]:
 * y = (x - mean[c]) / sqrt(var[c] + eps) * scale[c] + bias[c] with
 * c = (i / inner) % channels; the per-channel vectors are device pointers. */
void infd_cuda_batchnorm(void *stream, const float *x, const float *scale, const float *bias,
                         const float *mean, const float *var, float eps, float *y, int64_t n,
                         int64_t channels, int64_t inner);

/* ConvTranspose of FP32 NCHW data as cuDNN's backward-data convolution.
 * cuDNN has one pad per side pair, so it computes the "full" output
 * [n, k, fh, fw] with the symmetric pads (pad_h, pad_w); output pixel
 * (oy, ox) then reads full (oy + off_h, ox + off_w), or 0 outside it, and
 * the bias is added. Weights are ONNX's [c, k / groups, r, s]. */
typedef struct infd_cuda_deconv_desc {
    int n, c, h, w; /* input */
    int k, oh, ow;  /* output (the graph's shape) */
    int r, s;       /* kernel */
    int groups;
    int stride_h, stride_w, dil_h, dil_w;
    int pad_h, pad_w; /* cuDNN's symmetric pads */
    int fh, fw;       /* the full output cuDNN computes */
    int off_h, off_w; /* output (oy, ox) reads full (oy + off_h, ox + off_w) */
    int tf32;         /* TF32 tensor cores allowed (a TF32 plan); 0: strict FP32 */
} infd_cuda_deconv_desc;

typedef struct infd_cuda_deconv infd_cuda_deconv;

/* Chooses the algorithm by timing cuDNN's candidates on the compile
 * stream (host_w: the constant weights, or NULL: random ones). Writes the
 * workspace the run needs and a kernel name ("cudnn:deconv:ALGO", or
 * "cudnn:deconv_tf32:ALGO"); NULL with the reason in `why` on failure. */
infd_cuda_deconv *infd_cuda_deconv_create(const infd_cuda_deconv_desc *d, const float *host_w,
                                          size_t *workspace_bytes, char *name, size_t name_n,
                                          char *why, size_t why_n);

/* bias may be NULL. workspace: workspace_bytes from create. */
void infd_cuda_deconv_run(const infd_cuda_deconv *c, void *stream, const float *x, const float *w,
                          const float *bias, float *y, void *workspace);

void infd_cuda_deconv_destroy(infd_cuda_deconv *c); /* NULL is a no-op */

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_EXTRA_H */
