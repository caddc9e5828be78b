/*
 * cuda_act.cuh - the activation and binary-op arithmetic every elementwise
 * kernel of this backend shares (FP32 math), for .cu files only.
 */
#ifndef INFD_BACKENDS_CUDA_ACT_CUH
#define INFD_BACKENDS_CUDA_ACT_CUH

#include "cuda_eltwise.h"

__device__ __forceinline__ float apply_act(int act, float x, float alpha, float beta)
{
    switch (act) {
    case INFD_CUDA_ACT_NONE:
        return x;
    case INFD_CUDA_ACT_RELU:
        return x > 0.0f ? x : 0.0f;
    case INFD_CUDA_ACT_LEAKY_RELU:
        return x >= 0.0f ? x : x * alpha;
    case INFD_CUDA_ACT_CLIP:
        return fminf(fmaxf(x, alpha), beta);
    case INFD_CUDA_ACT_SIGMOID:
        return 1.0f / (1.0f + expf(-x));
    case INFD_CUDA_ACT_HARD_SIGMOID:
        return fminf(fmaxf(alpha * x + beta, 0.0f), 1.0f);
    case INFD_CUDA_ACT_TANH:
        return tanhf(x);
    case INFD_CUDA_ACT_HARD_SWISH:
        return x * fminf(fmaxf(x / 6.0f + 0.5f, 0.0f), 1.0f);
    case INFD_CUDA_ACT_ELU:
        return x >= 0.0f ? x : alpha * (expf(x) - 1.0f);
    case INFD_CUDA_ACT_SQRT:
        return sqrtf(x);
    case INFD_CUDA_ACT_EXP:
        return expf(x);
    case INFD_CUDA_ACT_LOG:
        return logf(x);
    case INFD_CUDA_ACT_ABS:
        return fabsf(x);
    case INFD_CUDA_ACT_NEG:
        return -x;
    case INFD_CUDA_ACT_RECIPROCAL:
        return 1.0f / x;
    case INFD_CUDA_ACT_FLOOR:
        return floorf(x);
    case INFD_CUDA_ACT_CEIL:
        return ceilf(x);
    case INFD_CUDA_ACT_ERF:
        return erff(x);
    case INFD_CUDA_ACT_SOFTPLUS:
        return x > 20.0f ? x : log1pf(expf(x));
    }
    return x;
}

/* apply_act on n values, the activation chosen once for all of them. */
template <int N>
__device__ __forceinline__ void apply_act_n(int act, float *v, float alpha, float beta)
{
    switch (act) {
    case INFD_CUDA_ACT_NONE:
        return;
    case INFD_CUDA_ACT_RELU:
#pragma unroll
        for (int j = 0; j < N; j++)
            v[j] = v[j] > 0.0f ? v[j] : 0.0f;
        return;
    case INFD_CUDA_ACT_CLIP:
#pragma unroll
        for (int j = 0; j < N; j++)
            v[j] = fminf(fmaxf(v[j], alpha), beta);
        return;
    default:
#pragma unroll
        for (int j = 0; j < N; j++)
            v[j] = apply_act(act, v[j], alpha, beta);
    }
}

__device__ __forceinline__ float apply_bin(int op, float a, float b)
{
    switch (op) {
    case INFD_CUDA_BIN_ADD:
        return a + b;
    case INFD_CUDA_BIN_SUB:
        return a - b;
    case INFD_CUDA_BIN_MUL:
        return a * b;
    case INFD_CUDA_BIN_DIV:
        return a / b;
    case INFD_CUDA_BIN_POW:
        return powf(a, b);
    case INFD_CUDA_BIN_MAX:
        return fmaxf(a, b);
    case INFD_CUDA_BIN_MIN:
        return fminf(a, b);
    case INFD_CUDA_BIN_PRELU:
        return a < 0.0f ? a * b : a;
    }
    return 0.0f;
}

#endif /* INFD_BACKENDS_CUDA_ACT_CUH */
