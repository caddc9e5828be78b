/*
 * cuda_stem.h - a convolution over few input channels (a network's first
 * convolution, over the image: c = 3) in one kernel (cuda_stem.cu), for
 * FP16 plans.
 *
 *   y = act(conv(x, w) + bias)
 *
 * x is read as it arrives: plain FP32 NCHW (a graph input) or FP16 NHWC
 * (a value the plan keeps in that layout), with the padding applied in the
 * kernel (any pads, the two ends may differ); y is FP16 NHWC. cuDNN wants
 * such an input converted and packed to 8 channels first (a pass over the
 * image, then a convolution that reads 8 channels for 3), and its
 * tensor-core kernels do poorly with c * r * s that small.
 *
 * The kernel is an implicit GEMM: a thread block loads the input patch
 * of 128 output pixels into shared memory (converting to FP16), lays their
 * windows out as a [64 x c*r*s] matrix there, multiplies it by the weights
 * on tensor cores (WMMA, FP32 accumulation), adds the bias, applies the
 * activation and writes the pixels' k channels.
 *
 * Limits (infd_cuda_stem_fits): c * r * s at most INFD_CUDA_STEM_MAX_K,
 * k even and at most INFD_CUDA_STEM_MAX_N, every tensor below 2^31
 * elements, a tile's patch within 96 KB of shared memory.
 */
#ifndef INFD_BACKENDS_CUDA_STEM_H
#define INFD_BACKENDS_CUDA_STEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define INFD_CUDA_STEM_MAX_K 160
#define INFD_CUDA_STEM_MAX_N 64

typedef struct infd_cuda_stem_desc {
    int n, c, h, w; /* x: logical [n, c, h, w] */
    int fx;         /* x's infd_cuda_fmt: INFD_CUDA_FMT_F32_NCHW or _F16_NHWC */
    int k, oh, ow;  /* y: [n, oh, ow, k] FP16 NHWC */
    /* The window: kernel r x s, strides, pads at the top and left (the
     * far ends follow from oh and ow), dilations. */
    int r, s, sh, sw, pt, pl, dh, dw;
    int act; /* infd_cuda_act, with alpha and beta */
    float alpha, beta;
} infd_cuda_stem_desc;

typedef struct infd_cuda_stem infd_cuda_stem;

/* 1 when the kernel takes `d`; 0 (see the limits above) with the reason
 * in `why`. */
int infd_cuda_stem_fits(const infd_cuda_stem_desc *d, char *why, size_t why_n);

/* Uploads the weights w (FP32 KCRS [k, c, r, s], host) and the bias b (FP32
 * [k], or NULL). NULL with the reason in `why` on failure. */
infd_cuda_stem *infd_cuda_stem_create(const infd_cuda_stem_desc *d, const float *w, const float *b,
                                      char *why, size_t why_n);

/* Enqueues y = the convolution of x on `stream` (an infd_cuda_stream). x
 * and y are device memory, y 4-byte aligned. */
void infd_cuda_stem_run(const infd_cuda_stem *p, void *stream, const void *x, void *y);

/* Times infd_cuda_stem_run on the compile stream (scratch data, 2 + 5
 * runs): ms per run, or a negative value when it cannot run. */
float infd_cuda_stem_time(const infd_cuda_stem *p);

void infd_cuda_stem_destroy(infd_cuda_stem *p);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_STEM_H */
