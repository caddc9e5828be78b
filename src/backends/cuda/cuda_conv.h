/*
 * cuda_conv.h - C-linkage 2-D convolution on cuDNN (cuda_conv.cu), FP32
 * NCHW, no TF32 (CUDNN_FMA_MATH).
 *
 * infd_cuda_conv_create builds the descriptors for one concrete shape and
 * picks the algorithm by timing cuDNN's candidates on that shape on the
 * compile stream (cudnnFind's own times are ~5x off on the H100), with the
 * real weights and the exact call run() will make (fused or not).
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
    int fused_relu; /* run cudnnConvolutionBiasActivationForward with ReLU */
    int has_res;    /* fused: z (residual) is added before the ReLU */
    /* FP16: x and y are FP16 NHWC, the weights (host_w, required) are
     * converted to FP16 KRSC and kept by the convolution; FP32 accumulation
     * on tensor cores. Not combined with fused_relu. */
    int fp16;
} infd_cuda_conv_desc;

typedef struct infd_cuda_conv infd_cuda_conv;

/* Creates the convolution and times its algorithms. `host_w` (K*C/G*R*S
 * floats) are the real weights, or NULL. On success fills *workspace_bytes
 * (what run needs) and `name` ("cudnn:conv:ALGO"); NULL with the reason in
 * `why` on failure. */
infd_cuda_conv *infd_cuda_conv_create(const infd_cuda_conv_desc *d, const float *host_w,
                                      size_t *workspace_bytes, char *name, size_t name_n, char *why,
                                      size_t why_n);

/* y = conv(x, w) (unfused), or relu(conv(x, w) + bias + z) (fused; bias
 * required, z when has_res). */
void infd_cuda_conv_run(const infd_cuda_conv *c, void *stream, const float *x, const float *w,
                        const float *bias, const float *z, float *y, void *workspace);

void infd_cuda_conv_destroy(infd_cuda_conv *c);

/* FP16 helpers around an FP16 convolution. xh[n, y + pt, x + pl, c] =
 * x[n, c, y, x] over a zeroed [n, hp, wp, c] (padding included). */
void infd_cuda_to_nhwc_half(void *stream, const float *x, void *xh, int n, int c, int h, int w,
                            int hp, int wp, int pt, int pl);

/* y[n, k, i, j] = act(yh[n, i, j, k] + bias[k] + res[n, k, i, j]); bias and
 * res may be NULL; act, alpha, beta as infd_cuda_act. */
void infd_cuda_from_nhwc_half(void *stream, const void *yh, float *y, const float *bias,
                              const float *res, int n, int k, int oh, int ow, int act, float alpha,
                              float beta);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_CONV_H */
