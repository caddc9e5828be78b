/*
 * cuda_nhwc.h - the CUDA backend's opaque layouts for FP16 and BF16 plans,
 * and the C-linkage launchers of the kernels that read and write them
 * (cuda_nhwc.cu).
 *
 * In an FP16 plan (INFD_PRECISION_FP16) a 4-D FP32 value [n, c, h, w] that
 * passes between two kernels which both handle it is stored as FP16 NHWC
 * (BF16 NHWC in a BF16 plan: channels innermost, the layout cuDNN's
 * tensor-core convolutions read and write), so a chain of convolutions,
 * pools and residual Adds converts nothing between kernels: only at the
 * plan's edges (graph inputs and outputs, and readers that take plain data)
 * is a value converted. The plan negotiates it through the backend's
 * produces_opaque/accepts_opaque (see graph/backend.h); a kernel that reads
 * a value finds &infd_cuda_layout_f16_nhwc (or _bf16_nhwc) in its
 * input_layouts[i].
 *
 * Every launcher takes each operand with its format, so a kernel handles a
 * plain FP32 NCHW operand where the plan kept one (a graph input, a value
 * another reader needed plain) with the same code. Math is FP32; 16-bit
 * values are rounded to nearest even when stored.
 */
#ifndef INFD_BACKENDS_CUDA_NHWC_H
#define INFD_BACKENDS_CUDA_NHWC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Formats of a 4-D device tensor of logical shape [n, c, h, w]. */
typedef enum infd_cuda_fmt {
    INFD_CUDA_FMT_F32_NCHW = 0,  /* plain: what the IR says (FP32, row-major) */
    INFD_CUDA_FMT_F16_NHWC = 1,  /* opaque: FP16, [n, h, w, c] row-major */
    INFD_CUDA_FMT_BF16_NHWC = 2, /* opaque: BF16, [n, h, w, c] row-major */
} infd_cuda_fmt;

/* The layout object kernels publish in infd_kernel.output_layout. */
typedef struct infd_cuda_layout {
    infd_cuda_fmt fmt;
} infd_cuda_layout;

extern const infd_cuda_layout infd_cuda_layout_f16_nhwc;
extern const infd_cuda_layout infd_cuda_layout_bf16_nhwc;

/* Logical dims of a 4-D tensor. */
typedef struct infd_cuda_dims {
    int64_t n, c, h, w;
} infd_cuda_dims;

/* xh (16-bit NHWC [n, hp, wp, c_out] in format fo, c_out >= d.c) = x
 * placed at (pt, pl) in channels [0, d.c), zeros around it and in the
 * channels past d.c. */
void infd_cuda_nhwc_pack(void *stream, const void *x, infd_cuda_fmt fx, infd_cuda_dims d, void *xh,
                         infd_cuda_fmt fo, int64_t hp, int64_t wp, int64_t pt, int64_t pl,
                         int64_t c_out);

/* y = act(op(a + bias[c], b)) over tensors of dims `d`, each operand in its
 * format (y may alias a or b when their formats match). bias (FP32 [c]) and
 * b may be NULL; act, alpha, beta as infd_cuda_act; op as infd_cuda_binop. */
void infd_cuda_nhwc_eltwise(void *stream, infd_cuda_dims d, const void *a, infd_cuda_fmt fa,
                            const float *bias, int op, const void *b, infd_cuda_fmt fb, void *y,
                            infd_cuda_fmt fy, int act, float alpha, float beta);

/* Windowed max/average pooling of x (dims `d`) into y ([n, c, oh, ow]);
 * window fields as infd_cuda_pool_desc (its nc, h, w, oh, ow unused). */
struct infd_cuda_pool_desc;
void infd_cuda_nhwc_pool(void *stream, const struct infd_cuda_pool_desc *p, infd_cuda_dims d,
                         int64_t oh, int64_t ow, const void *x, infd_cuda_fmt fx, void *y,
                         infd_cuda_fmt fy);

/* y[n * c + ch] (FP32) = mean (max != 0: max) over h, w of 16-bit NHWC xh
 * (format fx). */
void infd_cuda_nhwc_global_pool(void *stream, int max, const void *xh, infd_cuda_fmt fx, float *y,
                                infd_cuda_dims d);

/* Copies x (dims `d`; NULL: zeros) into channels [c_off, c_off + d.c) of
 * y, which has c_total channels and the same n, h, w. */
void infd_cuda_nhwc_concat(void *stream, const void *x, infd_cuda_fmt fx, infd_cuda_dims d, void *y,
                           infd_cuda_fmt fy, int64_t c_off, int64_t c_total);

/* A channel Concat of n_in inputs (at most INFD_CUDA_CONCAT_MAX) in one
 * pass: xs[i] (cs[i] channels; NULL: zeros) all in y's 16-bit NHWC format,
 * npx = n * h * w pixels, y of c_total channels. Returns 0 when it does not
 * apply (too many inputs, or too large for 32-bit indices): the caller
 * copies input by input with infd_cuda_nhwc_concat. */
#define INFD_CUDA_CONCAT_MAX 8
int infd_cuda_nhwc_concat_all(void *stream, int n_in, const void *const *xs, const int64_t *cs,
                              int64_t npx, void *y, int64_t c_total);

/* y[i] = (float)x[i] for n 16-bit values of format fx (16-bit NHWC read as
 * plain NHWC FP32: a Transpose to channels-last). */
void infd_cuda_nhwc_to_float(void *stream, const void *x, infd_cuda_fmt fx, float *y, int64_t n);
/* y (16-bit, format fy) = x (FP32), n elements in the same order: a plain
 * NHWC FP32 tensor becomes the 16-bit NHWC layout of its NCHW transpose. */
void infd_cuda_nhwc_from_float(void *stream, const float *x, void *y, infd_cuda_fmt fy, int64_t n);

/* A depthwise convolution (groups == channels in == channels out) over
 * 16-bit NHWC: x [n, h, w, c] (pads ph, pw around it), weights [r, s, c] in
 * the same format on the device, y [n, oh, ow, c] = act(conv + bias[c] +
 * res). */
typedef struct infd_cuda_dw_desc {
    int64_t n, c, h, w, oh, ow;
    int r, s, sh, sw, ph, pw, dh, dw;
} infd_cuda_dw_desc;

/* bias (FP32 [c]) and res (like y) may be NULL; act, alpha, beta as
 * infd_cuda_act. */
void infd_cuda_nhwc_dwconv(void *stream, const infd_cuda_dw_desc *d, infd_cuda_fmt fmt,
                           const void *x, const void *w, const float *bias, const void *res,
                           void *y, int act, float alpha, float beta);

/* Times infd_cuda_nhwc_dwconv on the compile stream (scratch data, 2 + 5
 * runs) and returns ms per run, or a negative value when it cannot run. */
float infd_cuda_nhwc_dwconv_time(const infd_cuda_dw_desc *d, infd_cuda_fmt fmt, int has_res,
                                 int act);

/* Times infd_cuda_nhwc_eltwise in place over a 16-bit NHWC tensor of dims
 * `d` (bias, residual as asked) like infd_cuda_nhwc_dwconv_time: what a
 * convolution form that leaves them to an epilogue pays on top. */
float infd_cuda_nhwc_eltwise_time(infd_cuda_dims d, infd_cuda_fmt f, int has_bias, int has_res,
                                  int act, float alpha, float beta);

/* Times infd_cuda_nhwc_pack like infd_cuda_nhwc_dwconv_time: what a
 * convolution that pads its input itself saves. */
float infd_cuda_nhwc_pack_time(infd_cuda_fmt fx, infd_cuda_dims d, infd_cuda_fmt fo, int64_t hp,
                               int64_t wp, int64_t pt, int64_t pl, int64_t c_out);

/* A device copy of n floats in fmt's element type (FP32 for
 * INFD_CUDA_FMT_F32_NCHW, else FP16 or BF16; freed with
 * infd_cuda_weights_free), or NULL with the reason in `why`. Converts on
 * the host through infd_fp32_to_fp16_n/bf16_n (F16C where the CPU has it):
 * the one way weights reach the device, and a part of plan load. */
void *infd_cuda_upload(const float *src, size_t n, infd_cuda_fmt fmt, char *why, size_t why_n);

/* Convolution weights w (FP32 KCRS: k x cg x rs, rs = kernel height x
 * width) as a device copy in KRSC order (channels last), in fmt's element
 * type as infd_cuda_upload. Both are freed with infd_cuda_weights_free:
 * while a plan compiles they are the model's shared copies (cuda_shared.h). */
void *infd_cuda_upload_krsc(const float *w, int64_t k, int64_t cg, int64_t rs, infd_cuda_fmt fmt,
                            char *why, size_t why_n);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_NHWC_H */
