/*
 * cuda_dwpw.h - a depthwise convolution and the 1x1 convolution after it
 * in one kernel (cuda_dwpw.cu), over FP16 NHWC: the block of MobileNet-
 * and BlazeFace-style networks.
 *
 *   y = act(W_pw * dw_act(dw(x) + b_dw) + b_pw + residual)
 *
 * A thread block takes a tile of output pixels: it computes their
 * depthwise outputs into shared memory (FP32 sums rounded to FP16, as the
 * separate depthwise kernel stores them), multiplies them by the 1x1
 * weights on tensor cores (WMMA, FP32 accumulation), adds bias and
 * residual, applies the activation and writes the pixels' k channels. The
 * depthwise output never reaches device memory, and the block reads its
 * input once.
 *
 * The residual may have fewer channels than y (cres < k: the channels past
 * it add 0, what a Concat of the block input with a constant of zeros
 * spelt out) and may be the 2x2, stride-2 max pool of a tensor of twice
 * the output size (res_pool = 2: the stride-2 block's shortcut), read and
 * pooled in the epilogue.
 *
 * Limits (infd_cuda_dwpw_fits): c and k at most INFD_CUDA_DWPW_MAX_C, c, k
 * and cres even, every tensor below 2^31 elements.
 */
#ifndef INFD_BACKENDS_CUDA_DWPW_H
#define INFD_BACKENDS_CUDA_DWPW_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define INFD_CUDA_DWPW_MAX_C 128

typedef struct infd_cuda_dwpw_desc {
    int n, h, w, c; /* x: [n, h, w, c] FP16 NHWC */
    int oh, ow, k;  /* y: [n, oh, ow, k] FP16 NHWC */
    /* The depthwise window: kernel r x s, strides, pads at the top and
     * left (the far ends follow from oh and ow), dilations. */
    int r, s, sh, sw, pt, pl, dh, dw;
    int cres;     /* residual channels (<= k), 0: no residual */
    int res_pool; /* 0: residual [n, oh, ow, cres]; 2: max pool 2x2 of [n, rh, rw, cres] */
    int rh, rw;
    int act; /* infd_cuda_act, with alpha and beta */
    float alpha, beta;
    int dw_act; /* on the depthwise output (before the 1x1), with dw_alpha and dw_beta */
    float dw_alpha, dw_beta;
} infd_cuda_dwpw_desc;

typedef struct infd_cuda_dwpw infd_cuda_dwpw;

/* 1 when the kernel runs d in its register-tiled form (stride 1, a 3x3 or
 * 5x5 window, outputs of at least 16 x 16; cuda_dwpw.cu), 0 in the tile
 * form. */
int infd_cuda_dwpw_register_tiled(const infd_cuda_dwpw_desc *d);

/* 1 when the kernel takes `d`; 0 (see the limits above) with the reason
 * in `why`. */
int infd_cuda_dwpw_fits(const infd_cuda_dwpw_desc *d, char *why, size_t why_n);

/* Uploads the weights: w_dw [c, 1, r, s] and w_pw [k, c] (FP32, host); the
 * biases b_dw [c] and b_pw [k] may be NULL. NULL with the reason in `why`
 * on failure. */
infd_cuda_dwpw *infd_cuda_dwpw_create(const infd_cuda_dwpw_desc *d, const float *w_dw,
                                      const float *b_dw, const float *w_pw, const float *b_pw,
                                      char *why, size_t why_n);

/* Enqueues y = the block of x (and res when d->cres > 0) on `stream`
 * (an infd_cuda_stream). x, res and y are 16-byte aligned device memory. */
void infd_cuda_dwpw_run(const infd_cuda_dwpw *p, void *stream, const void *x, const void *res,
                        void *y);

void infd_cuda_dwpw_destroy(infd_cuda_dwpw *p);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_DWPW_H */
