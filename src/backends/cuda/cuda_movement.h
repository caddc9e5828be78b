/*
 * cuda_movement.h - C-linkage launchers that move data without arithmetic
 * (cuda_movement.cu): transpose, strided 2-D copies (Concat, Slice of the
 * outer dims), padding, and Resize.
 */
#ifndef INFD_BACKENDS_CUDA_MOVEMENT_H
#define INFD_BACKENDS_CUDA_MOVEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_eltwise.h" /* INFD_CUDA_MAX_RANK */

#ifdef __cplusplus
extern "C" {
#endif

/* y[out index] = x[sum(idx[d] * src_strides[d])] over `rank` output dims;
 * elements of `esize` bytes (1, 2, 4 or 8). */
void infd_cuda_transpose(void *stream, const void *x, void *y, int esize, int rank,
                         const int64_t *out_dims, const int64_t *src_strides, int64_t n);

/* `height` rows of `width` bytes from src (pitch spitch) to dst (dpitch). */
void infd_cuda_copy2d(void *stream, void *dst, size_t dpitch, const void *src, size_t spitch,
                      size_t width, size_t height);

/* Pad of FP32 data: mode 0 constant (value), 1 reflect, 2 edge. */
void infd_cuda_pad(void *stream, const float *x, float *y, int rank, const int64_t *in_dims,
                   const int64_t *out_dims, const int64_t *pads_begin, int mode, float value,
                   int64_t n);

/* Resize of FP32 NCHW data over the last two dims. mode 0 nearest, 1
 * linear. coord: 0 half_pixel, 1 asymmetric, 2 align_corners, 3
 * pytorch_half_pixel. nearest_mode: 0 round_prefer_floor, 1
 * round_prefer_ceil, 2 floor, 3 ceil. scale_h/w: output/input scales. */
typedef struct infd_cuda_resize_desc {
    int64_t nc, h, w, oh, ow;
    float scale_h, scale_w;
    int mode, coord, nearest_mode;
} infd_cuda_resize_desc;

void infd_cuda_resize(void *stream, const infd_cuda_resize_desc *d, const float *x, float *y);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_MOVEMENT_H */
