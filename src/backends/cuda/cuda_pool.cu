/*
 * cuda_pool.cu - pooling, global pooling and softmax (cuda_pool.h).
 *
 * Windowed pooling: one thread per output element, the window read from
 * global memory (L1/L2 catch the overlap). Global pooling and softmax: one
 * warp per row with shuffle reductions; rows are long for global pooling
 * (7x7 to 112x112) and softmax rows are classes.
 */
#include <float.h>

#include "cuda_pool.h"
#include "cuda_runtime_impl.h"

__global__ void pool2d_kernel(infd_cuda_pool_desc d, const float *x, float *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ox = i % d.ow, oy = (i / d.ow) % d.oh, nc = i / (d.ow * d.oh);
        const float *src = x + nc * d.h * d.w;
        float acc = d.max ? -FLT_MAX : 0.0f;
        int count = 0;
        for (int ky = 0; ky < d.kh; ky++) {
            int64_t iy = oy * d.sh - d.ph + (int64_t)ky * d.dh;
            for (int kx = 0; kx < d.kw; kx++) {
                int64_t ix = ox * d.sw - d.pw + (int64_t)kx * d.dw;
                if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w)
                    continue;
                float v = src[iy * d.w + ix];
                acc = d.max ? fmaxf(acc, v) : acc + v;
                count++;
            }
        }
        if (!d.max) {
            int div = count;
            if (d.count_include_pad) {
                /* The window clipped to the padded input, as ONNX counts it. */
                int64_t y0 = oy * d.sh - d.ph, x0 = ox * d.sw - d.pw;
                int64_t y1 = y0 + (int64_t)(d.kh - 1) * d.dh + 1,
                        x1 = x0 + (int64_t)(d.kw - 1) * d.dw + 1;
                y1 = y1 < d.h + d.ph ? y1 : d.h + d.ph;
                x1 = x1 < d.w + d.pw ? x1 : d.w + d.pw;
                div = (int)(((y1 - y0 + d.dh - 1) / d.dh) * ((x1 - x0 + d.dw - 1) / d.dw));
            }
            acc = div > 0 ? acc / (float)div : 0.0f;
        }
        y[i] = acc;
    }
}

extern "C" void infd_cuda_pool2d(void *stream, const infd_cuda_pool_desc *d, const float *x,
                                 float *y)
{
    cudaStream_t s = ((infd_cuda_stream *)stream)->s;
    int64_t n = d->nc * d->oh * d->ow;
    unsigned blocks = infd_cuda_blocks(n);
    if (blocks > 65536)
        blocks = 65536;
    pool2d_kernel<<<blocks, 256, 0, s>>>(*d, x, y, n);
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__global__ void global_pool_kernel(int max, const float *x, float *y, int64_t rows, int64_t len)
{
    int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    const float *src = x + row * len;
    float acc = max ? -FLT_MAX : 0.0f;
    for (int64_t i = lane; i < len; i += 32)
        acc = max ? fmaxf(acc, src[i]) : acc + src[i];
    acc = max ? warp_max(acc) : warp_sum(acc);
    if (lane == 0)
        y[row] = max ? acc : acc / (float)len;
}

extern "C" void infd_cuda_global_pool(void *stream, int max, const float *x, float *y, int64_t rows,
                                      int64_t len)
{
    cudaStream_t s = ((infd_cuda_stream *)stream)->s;
    unsigned blocks = (unsigned)((rows + 7) / 8);
    global_pool_kernel<<<blocks ? blocks : 1, 256, 0, s>>>(max, x, y, rows, len);
}

/* One warp per (outer, inner) row of `axis` elements, strided by inner. */
__global__ void softmax_kernel(int log, const float *x, float *y, int64_t outer, int64_t axis,
                               int64_t inner)
{
    int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= outer * inner)
        return;
    int64_t o = row / inner, in = row % inner;
    const float *src = x + o * axis * inner + in;
    float *dst = y + o * axis * inner + in;
    float m = -FLT_MAX;
    for (int64_t i = lane; i < axis; i += 32)
        m = fmaxf(m, src[i * inner]);
    m = warp_max(m);
    float sum = 0.0f;
    for (int64_t i = lane; i < axis; i += 32)
        sum += expf(src[i * inner] - m);
    sum = warp_sum(sum);
    float lsum = logf(sum);
    for (int64_t i = lane; i < axis; i += 32) {
        float v = src[i * inner] - m;
        dst[i * inner] = log ? v - lsum : expf(v) / sum;
    }
}

extern "C" void infd_cuda_softmax(void *stream, int log, const float *x, float *y, int64_t outer,
                                  int64_t axis, int64_t inner)
{
    cudaStream_t s = ((infd_cuda_stream *)stream)->s;
    int64_t rows = outer * inner;
    unsigned blocks = (unsigned)((rows + 7) / 8);
    softmax_kernel<<<blocks ? blocks : 1, 256, 0, s>>>(log, x, y, outer, axis, inner);
}
