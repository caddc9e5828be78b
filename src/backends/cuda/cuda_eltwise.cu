/*
 * cuda_eltwise.cu - elementwise kernels (cuda_eltwise.h).
 *
 * One thread per element, grid-stride loops, FP32 math. The broadcast
 * kernel walks the output index dim by dim (rank <= 6); dense operands take
 * a kernel without index arithmetic, which is the common case (residual
 * Adds, activations that did not fuse).
 */
#include "cuda_act.cuh"
#include "cuda_eltwise.h"
#include "cuda_runtime_impl.h"

template <int ACT>
__global__ void unary_kernel(const float *x, float *y, int64_t n, float alpha, float beta)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = apply_act(ACT, x[i], alpha, beta);
}

__global__ void unary_any_kernel(int act, const float *x, float *y, int64_t n, float alpha,
                                 float beta)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = apply_act(act, x[i], alpha, beta);
}

extern "C" void infd_cuda_unary(void *stream, infd_cuda_act act, float alpha, float beta,
                                const float *x, float *y, int64_t n)
{
    cudaStream_t s = ((infd_cuda_stream *)stream)->s;
    unsigned blocks = infd_cuda_blocks(n);
    if (blocks > 65536)
        blocks = 65536;
    if (act == INFD_CUDA_ACT_RELU)
        unary_kernel<INFD_CUDA_ACT_RELU><<<blocks, 256, 0, s>>>(x, y, n, alpha, beta);
    else if (act == INFD_CUDA_ACT_CLIP)
        unary_kernel<INFD_CUDA_ACT_CLIP><<<blocks, 256, 0, s>>>(x, y, n, alpha, beta);
    else
        unary_any_kernel<<<blocks, 256, 0, s>>>((int)act, x, y, n, alpha, beta);
}

__global__ void binary_dense_kernel(int op, const float *a, const float *b, float *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = apply_bin(op, a[i], b[i]);
}

__global__ void binary_bcast_kernel(int op, const float *a, const float *b, float *y, int64_t n,
                                    infd_cuda_bcast bc)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, ia = 0, ib = 0;
        for (int d = bc.rank - 1; d >= 0; d--) {
            int64_t idx = rem % bc.dims[d];
            rem /= bc.dims[d];
            ia += idx * bc.sa[d];
            ib += idx * bc.sb[d];
        }
        y[i] = apply_bin(op, a[ia], b[ib]);
    }
}

extern "C" void infd_cuda_binary(void *stream, infd_cuda_binop op, const float *a, const float *b,
                                 float *y, int64_t n, int same_shape, const infd_cuda_bcast *bc)
{
    cudaStream_t s = ((infd_cuda_stream *)stream)->s;
    unsigned blocks = infd_cuda_blocks(n);
    if (blocks > 65536)
        blocks = 65536;
    if (same_shape)
        binary_dense_kernel<<<blocks, 256, 0, s>>>((int)op, a, b, y, n);
    else
        binary_bcast_kernel<<<blocks, 256, 0, s>>>((int)op, a, b, y, n, *bc);
}

__global__ void bias_act_kernel(float *y, const float *bias, const float *res, int64_t n,
                                int64_t channels, int64_t inner, int act, float alpha, float beta)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = y[i];
        if (bias)
            v += bias[(i / inner) % channels];
        if (res)
            v += res[i];
        y[i] = apply_act(act, v, alpha, beta);
    }
}

extern "C" void infd_cuda_bias_act(void *stream, float *y, const float *bias, const float *res,
                                   int64_t n, int64_t channels, int64_t inner, infd_cuda_act act,
                                   float alpha, float beta)
{
    cudaStream_t s = ((infd_cuda_stream *)stream)->s;
    unsigned blocks = infd_cuda_blocks(n);
    if (blocks > 65536)
        blocks = 65536;
    bias_act_kernel<<<blocks, 256, 0, s>>>(y, bias, res, n, channels, inner, (int)act, alpha, beta);
}
