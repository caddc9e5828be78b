/*
 * cuda_ops.h - the CUDA backend's op table and kernel base, shared by its C
 * glue files (cuda_backend.c, cuda_conv.c, cuda_gemm.c, cuda_ops.c).
 *
 * The glue is C: it reads the node (attributes, shapes, fusion hooks),
 * decides support, precomputes launch parameters at compile time and calls
 * the C-linkage launchers of the .cu files at run time with device pointers
 * and the context's stream (io->stream). Kernels keep no per-slot state: a
 * launch only reads the kernel and io, so one kernel runs from several
 * contexts at once.
 *
 * Fusion hooks (see src/backends/cpu/dnnl_conv.c for their meaning) are
 * read by Conv, Gemm and MatMul: _fused_activation (Relu, LeakyRelu, Clip,
 * Sigmoid, HardSigmoid, Tanh), _fused_alpha, _fused_beta, _fused_sum. Any
 * other (_fused_post_scale, _fused_post_shift, a HardSwish activation) is
 * declined, and the fusion pass then keeps those ops as separate kernels.
 */
#ifndef INFD_BACKENDS_CUDA_OPS_H
#define INFD_BACKENDS_CUDA_OPS_H

#include <stdbool.h>

#include "backends/cuda/cuda_eltwise.h"
#include "backends/cuda/cuda_nhwc.h"
#include "graph/backend.h"
#include "graph/node_params.h"

typedef struct infd_cuda_kernel infd_cuda_kernel;

/* A compiled CUDA kernel: the vtable's kernel plus its run and fini. */
struct infd_cuda_kernel {
    infd_kernel base;
    void (*run)(const infd_cuda_kernel *k, const infd_kernel_io *io);
    void (*fini)(infd_cuda_kernel *k); /* frees what the kernel owns (NULL: nothing) */
};

/* One entry of an op table; the table ends with op_type NULL. */
typedef struct infd_cuda_op {
    const char *op_type;
    bool (*supports)(const infd_kernel_args *a, infd_error *why);
    infd_status (*compile)(const infd_kernel_args *a, infd_kernel **out, infd_error *err);
} infd_cuda_op;

extern const infd_cuda_op infd_cuda_ops_conv[];
extern const infd_cuda_op infd_cuda_ops_gemm[];
extern const infd_cuda_op infd_cuda_ops_misc[];
extern const infd_cuda_op infd_cuda_ops_extra[]; /* cuda_extra.c */
extern const infd_cuda_op infd_cuda_ops_seq[];   /* cuda_seq.c */

/* For kernels that read plain data only (cuda_extra.c, cuda_seq.c): false
 * with a message when an input arrives in an opaque layout, the node
 * carries a fusion hook, or input 0 or output 0 is missing. */
bool infd_cuda_plain_unfused(const infd_kernel_args *a, infd_error *why);

/* A kernel of `size` bytes whose fields after the base are copied from the
 * compile-time struct `tmp` (of the same type), with `run` and the
 * workspace it needs. */
infd_status infd_cuda_kernel_from(const infd_kernel_args *a, const void *tmp, size_t size,
                                  const char *name,
                                  void (*run)(const infd_cuda_kernel *, const infd_kernel_io *),
                                  size_t workspace, infd_kernel **out, infd_error *err);
extern const infd_cuda_op infd_cuda_ops_dwpw[]; /* cuda_dwpw.c */

/* A zeroed kernel struct of `size` bytes (>= sizeof(infd_cuda_kernel)) with
 * the base filled in; NULL when out of memory. Freed by the backend's
 * destroy_kernel after fini. */
infd_cuda_kernel *infd_cuda_kernel_new(size_t size, const char *name,
                                       void (*run)(const infd_cuda_kernel *,
                                                   const infd_kernel_io *),
                                       void (*fini)(infd_cuda_kernel *));

/* Keeps head_n bytes at head, then tail_n at tail, as k's tuning record
 * (infd_kernel.tuning; freed with the kernel), replacing any it had;
 * false when out of memory (the kernel then keeps none: a plan file loses
 * the choice, not its correctness). */
bool infd_cuda_kernel_keep_tuning(infd_cuda_kernel *k, const void *head, size_t head_n,
                                  const void *tail, size_t tail_n);

/* True when inputs [0, n_in) that are present and every output are FP32;
 * otherwise false with a message. */
bool infd_cuda_fp32_only(const infd_kernel_args *a, int n_in, infd_error *why);

/* False with a message when the node carries a _fused_* attribute the
 * kernel does not apply: `fuses` true for kernels that apply the hooks
 * above (Conv, Gemm, MatMul), false for kernels that fuse nothing (any
 * _fused_* attribute is then declined). */
bool infd_cuda_fused_known(const infd_kernel_args *a, bool fuses, infd_error *why);

/* The node's fused activation (INFD_CUDA_ACT_NONE without one) and its
 * parameters; false with a message for one this backend cannot apply, or
 * for a fusion attribute it does not know (infd_cuda_fused_known). */
bool infd_cuda_fused_activation(const infd_kernel_args *a, infd_cuda_act *act, float *alpha,
                                float *beta, infd_error *why);

/* The activation of a _DwPwConv node's depthwise part (_dw_activation,
 * _dw_alpha, _dw_beta; infd_pass_fuse_depthwise), as above. */
bool infd_cuda_dw_activation(const infd_kernel_args *a, infd_cuda_act *act, float *alpha,
                             float *beta, infd_error *why);

/* Whether the node has the _fused_sum hook (a residual input). */
bool infd_cuda_fused_sum(const infd_kernel_args *a);

/* Input i's format as the plan hands it over: the backend's 16-bit NHWC
 * layout (cuda_nhwc.h) where the plan keeps the value in it, else plain
 * FP32 NCHW (also for an input past n_inputs). */
infd_cuda_fmt infd_cuda_input_fmt(const infd_kernel_args *a, int i);

/* A convolution's window over (H, W), 1-D convolutions as H = 1: kernel,
 * strides, dilations and the pads at the two ends, resolved from auto_pad
 * and widened at the end to produce the output's size. */
typedef struct infd_cuda_window {
    int64_t k[2], s[2], d[2], pl[2], pr[2];
} infd_cuda_window;

/* The window of the node's attributes (kernel_shape, strides, dilations,
 * pads, auto_pad) for weights `wt` ([k, c/group, kh, kw]) between input 0
 * and output 0; false with a message when they do not fit. */
bool infd_cuda_conv_window(const infd_kernel_args *a, const infd_ir_value *wt, infd_cuda_window *w,
                           infd_error *why);

/* The FP16 NHWC layout policy (cuda_nhwc.h), per op family: whether the
 * node can write output 0 (i == -1) or read input i in that layout. Only
 * FP16 plans use it. */
bool infd_cuda_conv_opaque(const infd_kernel_args *a, int i);
bool infd_cuda_misc_opaque(const infd_kernel_args *a, int i);
bool infd_cuda_dwpw_opaque(const infd_kernel_args *a, int i);

#endif /* INFD_BACKENDS_CUDA_OPS_H */
