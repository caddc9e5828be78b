/*
 * cuda_eltwise.h - C-linkage launchers for elementwise work on FP32 device
 * data (cuda_eltwise.cu): unary ops and activations, binary ops with
 * broadcasting, and the bias/residual/activation epilogue that follows a
 * Conv or Gemm whose fusion the libraries cannot do themselves.
 *
 * Every launcher enqueues on `stream` (cuda_runtime.h) and returns at once.
 */
#ifndef INFD_BACKENDS_CUDA_ELTWISE_H
#define INFD_BACKENDS_CUDA_ELTWISE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Unary functions; the first seven double as fused activations. alpha and
 * beta: LeakyRelu/Elu slope (alpha), Clip min/max, HardSigmoid alpha/beta. */
typedef enum infd_cuda_act {
    INFD_CUDA_ACT_NONE = 0, /* identity */
    INFD_CUDA_ACT_RELU,
    INFD_CUDA_ACT_LEAKY_RELU,
    INFD_CUDA_ACT_CLIP,
    INFD_CUDA_ACT_SIGMOID,
    INFD_CUDA_ACT_HARD_SIGMOID,
    INFD_CUDA_ACT_TANH,
    INFD_CUDA_ACT_HARD_SWISH,
    INFD_CUDA_ACT_ELU,
    INFD_CUDA_ACT_SQRT,
    INFD_CUDA_ACT_EXP,
    INFD_CUDA_ACT_LOG,
    INFD_CUDA_ACT_ABS,
    INFD_CUDA_ACT_NEG,
    INFD_CUDA_ACT_RECIPROCAL,
    INFD_CUDA_ACT_FLOOR,
    INFD_CUDA_ACT_CEIL,
    INFD_CUDA_ACT_ERF,
    INFD_CUDA_ACT_SOFTPLUS,
} infd_cuda_act;

typedef enum infd_cuda_binop {
    INFD_CUDA_BIN_ADD = 0,
    INFD_CUDA_BIN_SUB,
    INFD_CUDA_BIN_MUL,
    INFD_CUDA_BIN_DIV,
    INFD_CUDA_BIN_POW,
    INFD_CUDA_BIN_MAX,
    INFD_CUDA_BIN_MIN,
    INFD_CUDA_BIN_PRELU, /* a < 0 ? a * b : a */
} infd_cuda_binop;

#define INFD_CUDA_MAX_RANK 6

/* Output dims and per-operand element strides (0 along broadcast dims),
 * right-aligned to `rank` dims. */
typedef struct infd_cuda_bcast {
    int rank;
    int64_t dims[INFD_CUDA_MAX_RANK];
    int64_t sa[INFD_CUDA_MAX_RANK];
    int64_t sb[INFD_CUDA_MAX_RANK];
} infd_cuda_bcast;

/* y[i] = act(x[i]) for n elements (x == y allowed). */
void infd_cuda_unary(void *stream, infd_cuda_act act, float alpha, float beta, const float *x,
                     float *y, int64_t n);

/* y = op(a, b) over `n` output elements with the broadcast in `bc`.
 * same_shape: both operands are dense like y (bc is ignored). */
void infd_cuda_binary(void *stream, infd_cuda_binop op, const float *a, const float *b, float *y,
                      int64_t n, int same_shape, const infd_cuda_bcast *bc);

/* y[i] = act(y[i] + bias[c] + res[i]) with c = (i / inner) % channels;
 * bias and res may be NULL. */
void infd_cuda_bias_act(void *stream, float *y, const float *bias, const float *res, int64_t n,
                        int64_t channels, int64_t inner, infd_cuda_act act, float alpha,
                        float beta);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_ELTWISE_H */
