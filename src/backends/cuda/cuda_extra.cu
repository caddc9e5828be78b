/*
 * cuda_extra.cu - strided view copies, reductions and inference
 * BatchNormalization (cuda_extra.h).
 *
 * Reductions: one warp per output element. Its lanes stride over the
 * reduced positions (each decoded into an input offset), accumulate in
 * double (FP32 data) or int64 (integers), and combine with shuffles; lane
 * 0 finalises and writes. The CPU backend also accumulates FP32 in double,
 * so the two differ only in summation order. Max and Min propagate NaN as
 * the CPU kernels do.
 */
#include <math.h>
#include <stdint.h>

#include "cuda_extra.h"
#include "cuda_runtime_impl.h"

static unsigned grid(int64_t threads)
{
    unsigned b = infd_cuda_blocks(threads);
    return b > 65536 ? 65536 : b;
}

/* ---- view copy ----------------------------------------------------------- */

template <typename T> __global__ void view_kernel(const T *x, T *y, infd_cuda_view v, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, src = v.base;
        for (int d = v.rank - 1; d >= 0; d--) {
            src += (rem % v.dims[d]) * v.strides[d];
            rem /= v.dims[d];
        }
        y[i] = x[src];
    }
}

extern "C" void infd_cuda_view_copy(void *stream, const void *x, void *y, int esize,
                                    const infd_cuda_view *v, int64_t n)
{
    cudaStream_t s = ((infd_cuda_stream *)stream)->s;
    if (n <= 0)
        return;
    switch (esize) {
    case 1:
        view_kernel<uint8_t><<<grid(n), 256, 0, s>>>((const uint8_t *)x, (uint8_t *)y, *v, n);
        break;
    case 2:
        view_kernel<uint16_t><<<grid(n), 256, 0, s>>>((const uint16_t *)x, (uint16_t *)y, *v, n);
        break;
    case 4:
        view_kernel<uint32_t><<<grid(n), 256, 0, s>>>((const uint32_t *)x, (uint32_t *)y, *v, n);
        break;
    default:
        view_kernel<uint64_t><<<grid(n), 256, 0, s>>>((const uint64_t *)x, (uint64_t *)y, *v, n);
        break;
    }
}

/* ---- reductions ---------------------------------------------------------- */

/* Per element type: the accumulator, the identities of Max and Min, and
 * the arithmetic (integer products and absolute values wrap as in the
 * CPU backend's MUL_I / ABS_I). */
struct red_f32 {
    typedef float T;
    typedef double ACC;
    static __device__ ACC lowest()
    {
        return -INFINITY;
    }
    static __device__ ACC highest()
    {
        return INFINITY;
    }
    static __device__ ACC mul(ACC a, ACC b)
    {
        return a * b;
    }
    static __device__ ACC abs_(ACC a)
    {
        return fabs(a);
    }
    static __device__ ACC exp_(ACC a)
    {
        return exp(a);
    }
    static __device__ T fin(int op, ACC acc, int64_t count)
    {
        switch (op) {
        case INFD_CUDA_RED_MEAN:
            return (T)(acc / (double)count);
        case INFD_CUDA_RED_L2:
            return (T)sqrt(acc);
        case INFD_CUDA_RED_LOGSUM:
        case INFD_CUDA_RED_LOGSUMEXP:
            return (T)log(acc);
        default:
            return (T)acc;
        }
    }
};

/* Integers: the identities of Max and Min are the type's limits (given by
 * the two structs below, not as template constants: INT64_MIN does not
 * survive nvcc's host stub as a literal). */
template <typename TT, typename LIM> struct red_int {
    typedef TT T;
    typedef long long ACC;
    static __device__ ACC lowest()
    {
        return LIM::lowest();
    }
    static __device__ ACC highest()
    {
        return LIM::highest();
    }
    static __device__ ACC mul(ACC a, ACC b)
    {
        return (ACC)((unsigned long long)a * (unsigned long long)b);
    }
    static __device__ ACC abs_(ACC a)
    {
        return a < 0 ? (ACC)(0ull - (unsigned long long)a) : a;
    }
    static __device__ ACC exp_(ACC a)
    {
        return a;
    } /* never reached: FP32 only */
    static __device__ T fin(int op, ACC acc, int64_t count)
    {
        switch (op) {
        case INFD_CUDA_RED_MEAN:
            return (T)(count ? acc / count : 0);
        case INFD_CUDA_RED_L2:
            return (T)(long long)sqrt((double)acc);
        default:
            return (T)acc;
        }
    }
};

struct lim_i32 {
    static __device__ long long lowest()
    {
        return INT32_MIN;
    }
    static __device__ long long highest()
    {
        return INT32_MAX;
    }
};

struct lim_i64 {
    static __device__ long long lowest()
    {
        return INT64_MIN;
    }
    static __device__ long long highest()
    {
        return INT64_MAX;
    }
};

typedef red_int<int32_t, lim_i32> red_i32;
typedef red_int<int64_t, lim_i64> red_i64;

template <typename R> __device__ typename R::ACC red_init(int op)
{
    switch (op) {
    case INFD_CUDA_RED_MAX:
        return R::lowest();
    case INFD_CUDA_RED_MIN:
        return R::highest();
    case INFD_CUDA_RED_PROD:
        return 1;
    default:
        return 0;
    }
}

/* acc (+) one element v. */
template <typename R>
__device__ typename R::ACC red_step(int op, typename R::ACC acc, typename R::ACC v)
{
    switch (op) {
    case INFD_CUDA_RED_MAX:
        return (v > acc || v != v) ? v : acc;
    case INFD_CUDA_RED_MIN:
        return (v < acc || v != v) ? v : acc;
    case INFD_CUDA_RED_PROD:
        return R::mul(acc, v);
    case INFD_CUDA_RED_SUMSQ:
    case INFD_CUDA_RED_L2:
        return acc + R::mul(v, v);
    case INFD_CUDA_RED_L1:
        return acc + R::abs_(v);
    case INFD_CUDA_RED_LOGSUMEXP:
        return acc + R::exp_(v);
    default:
        return acc + v;
    }
}

/* Two partial accumulators combined. */
template <typename R>
__device__ typename R::ACC red_combine(int op, typename R::ACC a, typename R::ACC b)
{
    switch (op) {
    case INFD_CUDA_RED_MAX:
        return (b > a || b != b) ? b : a;
    case INFD_CUDA_RED_MIN:
        return (b < a || b != b) ? b : a;
    case INFD_CUDA_RED_PROD:
        return R::mul(a, b);
    default:
        return a + b;
    }
}

/* One warp per output element; blockDim is a multiple of 32, so every lane
 * of a warp takes the same trip through the output loop and the shuffles
 * see all 32 lanes. */
template <typename R>
__global__ void reduce_kernel(infd_cuda_reduce_desc d, const typename R::T *x, typename R::T *y)
{
    typedef typename R::ACC ACC;
    const int lane = threadIdx.x & 31;
    const int64_t n_warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t o = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; o < d.n_out;
         o += n_warps) {
        int64_t rem = o, base = 0;
        for (int i = d.n_kept - 1; i >= 0; i--) {
            base += (rem % d.kept_dims[i]) * d.kept_strides[i];
            rem /= d.kept_dims[i];
        }
        ACC acc = red_init<R>(d.op);
        for (int64_t q = lane; q < d.red_count; q += 32) {
            int64_t r = q, off = base;
            for (int i = d.n_red - 1; i >= 0; i--) {
                off += (r % d.red_dims[i]) * d.red_strides[i];
                r /= d.red_dims[i];
            }
            acc = red_step<R>(d.op, acc, (ACC)x[off]);
        }
        for (int sh = 16; sh > 0; sh >>= 1)
            acc = red_combine<R>(d.op, acc, __shfl_xor_sync(0xffffffffu, acc, sh));
        if (lane == 0)
            y[o] = R::fin(d.op, acc, d.red_count);
    }
}

extern "C" void infd_cuda_reduce(void *stream, const infd_cuda_reduce_desc *d, const void *x,
                                 void *y)
{
    cudaStream_t s = ((infd_cuda_stream *)stream)->s;
    if (d->n_out <= 0)
        return;
    unsigned blocks = grid(d->n_out * 32);
    switch (d->dtype) {
    case INFD_CUDA_RED_I32:
        reduce_kernel<red_i32><<<blocks, 256, 0, s>>>(*d, (const int32_t *)x, (int32_t *)y);
        break;
    case INFD_CUDA_RED_I64:
        reduce_kernel<red_i64><<<blocks, 256, 0, s>>>(*d, (const int64_t *)x, (int64_t *)y);
        break;
    default:
        reduce_kernel<red_f32><<<blocks, 256, 0, s>>>(*d, (const float *)x, (float *)y);
        break;
    }
}

/* ---- BatchNormalization -------------------------------------------------- */

__global__ void batchnorm_kernel(const float *x, const float *scale, const float *bias,
                                 const float *mean, const float *var, float eps, float *y,
                                 int64_t n, int64_t channels, int64_t inner)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = (i / inner) % channels;
        y[i] = (x[i] - mean[c]) / sqrtf(var[c] + eps) * scale[c] + bias[c];
    }
}

extern "C" void infd_cuda_batchnorm(void *stream, const float *x, const float *scale,
                                    const float *bias, const float *mean, const float *var,
                                    float eps, float *y, int64_t n, int64_t channels, int64_t inner)
{
    cudaStream_t s = ((infd_cuda_stream *)stream)->s;
    if (n <= 0 || channels <= 0 || inner <= 0)
        return;
    batchnorm_kernel<<<grid(n), 256, 0, s>>>(x, scale, bias, mean, var, eps, y, n, channels, inner);
}
