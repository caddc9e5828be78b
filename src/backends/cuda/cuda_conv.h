/*
 * cuda_conv.h - C-linkage 2-D convolution on cuDNN (cuda_conv.cu).
 *
 * infd_cuda_conv_create builds the descriptors for one concrete shape and
 * picks the algorithm by timing cuDNN's candidates on that shape on the
 * compile stream (cudnnFind's own times are ~5x off on the H100), with the
 * real weights and the exact call run() will make (fused or not), unless a
 * tuning record names the algorithm. FP32 NCHW (no TF32: CUDNN_FMA_MATH;
 * with tf32, TF32 tensor cores allowed: CUDNN_TENSOR_OP_MATH) or FP16 NHWC
 * (tensor cores).
 */
#ifndef INFD_BACKENDS_CUDA_CONV_H
#define INFD_BACKENDS_CUDA_CONV_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct infd_cuda_conv_desc {
    int n, c, h, w; /* input */
    int k, oh, ow;  /* output channels and size */
    int r, s;       /* kernel */
    int pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups;
    /* 0: a plain convolution; 1: relu(conv + bias (+ z)) and 2: conv + bias
     * (+ z), both in cudnnConvolutionBiasActivationForward. */
    int fused;
    int has_res; /* fused: z (the residual, shaped like y) is added */
    /* FP16: x, y and z are FP16 NHWC; the weights (host_w, required) are
     * converted to FP16 KRSC and kept by the convolution, and so is the
     * bias (host_b, required when fused); FP32 accumulation on tensor
     * cores. */
    int fp16;
    int bf16; /* with fp16: BF16 instead of FP16 throughout */
    /* Without fp16 (FP32 data): let cuDNN round inputs to TF32 on tensor
     * cores, FP32 accumulation (an INFD_PRECISION_TF32 plan); 0: strict
     * FP32, FMA kernels only. */
    int tf32;
} infd_cuda_conv_desc;

typedef struct infd_cuda_conv infd_cuda_conv;

/* Creates the convolution. `host_w` (K*C/G*R*S floats) are the real
 * weights, or NULL; `host_b` (K floats) the bias, or NULL. algo < 0: times
 * cuDNN's candidates and keeps the fastest; otherwise uses cuDNN algorithm
 * `algo` (a tuning record) after one trial launch, failing when it does not
 * run. On success fills *workspace_bytes (what run needs), *algo_out and
 * `name` ("cudnn:conv:ALGO"); NULL with the reason in `why` on failure. */
infd_cuda_conv *infd_cuda_conv_create(const infd_cuda_conv_desc *d, const float *host_w,
                                      const float *host_b, int algo, size_t *workspace_bytes,
                                      int *algo_out, char *name, size_t name_n, char *why,
                                      size_t why_n);

/* y = conv(x, w) (plain), or act(conv(x, w) + bias + z) (fused; bias
 * required, z when has_res). FP16 convolutions use their own weights and
 * bias (w and bias are ignored). */
void infd_cuda_conv_run(const infd_cuda_conv *c, void *stream, const void *x, const float *w,
                        const float *bias, const void *z, void *y, void *workspace);

void infd_cuda_conv_destroy(infd_cuda_conv *c);

/* The time per run of the algorithm chosen by timing, in ms (0 when a
 * record chose it). */
float infd_cuda_conv_ms(const infd_cuda_conv *c);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_CONV_H */
