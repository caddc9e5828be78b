/*
 * cuda_nhwc.cu - kernels over the FP16 NHWC layout (cuda_nhwc.h).
 *
 * Threads walk tensors in NHWC order (channels fastest), so FP16 NHWC
 * operands are read and written coalesced; a plain FP32 NCHW operand is
 * addressed through its own index (strided, but it only occurs at the
 * plan's edges). The all-FP16 elementwise case, the epilogue after every
 * convolution, moves eight channels (16 bytes) per thread when the channel
 * count allows.
 */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "infd/infd.h"

#include "cuda_act.cuh"
#include "cuda_nhwc.h"
#include "cuda_pool.h"
#include "cuda_runtime_impl.h"
#include "cuda_time.cuh"
#include "cuda_vec.cuh"
#include "cuda_shared.h"

const infd_cuda_layout infd_cuda_layout_f16_nhwc = { INFD_CUDA_FMT_F16_NHWC };
const infd_cuda_layout infd_cuda_layout_bf16_nhwc = { INFD_CUDA_FMT_BF16_NHWC };

/* 16-bit element conversions, FP16 or BF16. */
__device__ __forceinline__ float tof(__half v)
{
    return __half2float(v);
}

__device__ __forceinline__ float tof(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

template <typename T> __device__ __forceinline__ T fromf(float v);
template <> __device__ __forceinline__ __half fromf<__half>(float v)
{
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 fromf<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

static cudaStream_t stream_of(void *stream)
{
    return ((infd_cuda_stream *)stream)->s;
}

static unsigned grid_for(int64_t n)
{
    unsigned b = infd_cuda_blocks((long long)n);
    return b > 65536 ? 65536 : b;
}

/* Element (n, c, h, w) of a tensor of dims d, where i is its NHWC index. */
__device__ __forceinline__ float load_at(const void *p, int fmt, int64_t i, int64_t n, int64_t c,
                                         int64_t h, int64_t w, const infd_cuda_dims &d)
{
    if (fmt == INFD_CUDA_FMT_F16_NHWC)
        return __half2float(((const __half *)p)[i]);
    if (fmt == INFD_CUDA_FMT_BF16_NHWC)
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return ((const float *)p)[((n * d.c + c) * d.h + h) * d.w + w];
}

__device__ __forceinline__ void store_at(void *p, int fmt, int64_t i, int64_t n, int64_t c,
                                         int64_t h, int64_t w, const infd_cuda_dims &d, float v)
{
    if (fmt == INFD_CUDA_FMT_F16_NHWC)
        ((__half *)p)[i] = __float2half_rn(v);
    else if (fmt == INFD_CUDA_FMT_BF16_NHWC)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else
        ((float *)p)[((n * d.c + c) * d.h + h) * d.w + w] = v;
}

/* ------------------------------------------------------------------------- */
/* Pack                                                                      */
/* ------------------------------------------------------------------------- */

template <typename T>
__global__ void pack_kernel(const void *x, int fx, infd_cuda_dims d, T *xh, int64_t hp, int64_t wp,
                            int64_t pt, int64_t pl, int64_t c_out, int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i % c_out, rest = i / c_out;
        int64_t xw = rest % wp - pl;
        rest /= wp;
        int64_t yh = rest % hp - pt, n = rest / hp;
        float v = 0.0f;
        if (c < d.c && yh >= 0 && yh < d.h && xw >= 0 && xw < d.w)
            v = load_at(x, fx, ((n * d.h + yh) * d.w + xw) * d.c + c, n, c, yh, xw, d);
        xh[i] = fromf<T>(v);
    }
}

/* Eight output channels (16 bytes) per thread, 32-bit indices: the stem
 * convolutions' zero-padded input (e.g. 3 channels to 8). */
template <typename T>
__global__ void pack8_kernel(const void *x, int fx, infd_cuda_dims d, uint4 *xh, int hp, int wp,
                             int pt, int pl, int c_out, int total8)
{
    const int c8 = c_out / 8, dc = (int)d.c, dh = (int)d.h, dw = (int)d.w;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total8; i += gridDim.x * blockDim.x) {
        int c0 = (i % c8) * 8, rest = i / c8;
        int xw = rest % wp - pl;
        rest /= wp;
        int yh = rest % hp - pt, n = rest / hp;
        uint4 ov;
        T *oe = (T *)&ov;
        bool in = yh >= 0 && yh < dh && xw >= 0 && xw < dw;
        int base = ((n * dh + yh) * dw + xw) * dc;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int c = c0 + j;
            float v = in && c < dc ? load_at(x, fx, base + c, n, c, yh, xw, d) : 0.0f;
            oe[j] = fromf<T>(v);
        }
        xh[i] = ov;
    }
}

extern "C" void infd_cuda_nhwc_pack(void *stream, const void *x, infd_cuda_fmt fx, infd_cuda_dims d,
                                    void *xh, infd_cuda_fmt fo, int64_t hp, int64_t wp, int64_t pt,
                                    int64_t pl, int64_t c_out)
{
    int64_t total = d.n * hp * wp * c_out;
    if (c_out % 8 == 0 && (uintptr_t)xh % 16 == 0 && total < INT32_MAX &&
        d.n * d.c * d.h * d.w < INT32_MAX) {
        int total8 = (int)(total / 8);
        if (fo == INFD_CUDA_FMT_BF16_NHWC)
            pack8_kernel<__nv_bfloat16><<<grid_for(total8), 256, 0, stream_of(stream)>>>(
                x, (int)fx, d, (uint4 *)xh, (int)hp, (int)wp, (int)pt, (int)pl, (int)c_out, total8);
        else
            pack8_kernel<__half><<<grid_for(total8), 256, 0, stream_of(stream)>>>(
                x, (int)fx, d, (uint4 *)xh, (int)hp, (int)wp, (int)pt, (int)pl, (int)c_out, total8);
        return;
    }
    if (fo == INFD_CUDA_FMT_BF16_NHWC)
        pack_kernel<<<grid_for(total), 256, 0, stream_of(stream)>>>(
            x, (int)fx, d, (__nv_bfloat16 *)xh, hp, wp, pt, pl, c_out, total);
    else
        pack_kernel<<<grid_for(total), 256, 0, stream_of(stream)>>>(x, (int)fx, d, (__half *)xh, hp,
                                                                    wp, pt, pl, c_out, total);
}

/* ------------------------------------------------------------------------- */
/* Elementwise                                                               */
/* ------------------------------------------------------------------------- */

__global__ void eltwise_kernel(infd_cuda_dims d, const void *a, int fa, const float *bias, int op,
                               const void *b, int fb, void *y, int fy, int act, float alpha,
                               float beta, int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i % d.c, rest = i / d.c;
        int64_t w = rest % d.w;
        rest /= d.w;
        int64_t h = rest % d.h, n = rest / d.h;
        float v = load_at(a, fa, i, n, c, h, w, d);
        if (bias)
            v += bias[c];
        if (b)
            v = apply_bin(op, v, load_at(b, fb, i, n, c, h, w, d));
        store_at(y, fy, i, n, c, h, w, d, apply_act(act, v, alpha, beta));
    }
}

/* All operands in one 16-bit NHWC format and c % 8 == 0: eight channels
 * (16 bytes) per thread. */
template <typename T>
__global__ void eltwise_h8_kernel(int64_t c, const uint4 *a, const float *bias, int op,
                                  const uint4 *b, uint4 *y, int act, float alpha, float beta,
                                  int64_t total8)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total8;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint4 av = a[i], bv = b ? b[i] : make_uint4(0, 0, 0, 0), yv;
        const T *ah = (const T *)&av, *bh = (const T *)&bv;
        T *yh = (T *)&yv;
        int64_t c0 = (i * 8) % c;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float v = tof(ah[j]);
            if (bias)
                v += bias[c0 + j];
            if (b)
                v = apply_bin(op, v, tof(bh[j]));
            yh[j] = fromf<T>(apply_act(act, v, alpha, beta));
        }
        y[i] = yv;
    }
}

extern "C" void infd_cuda_nhwc_eltwise(void *stream, infd_cuda_dims d, const void *a,
                                       infd_cuda_fmt fa, const float *bias, int op, const void *b,
                                       infd_cuda_fmt fb, void *y, infd_cuda_fmt fy, int act,
                                       float alpha, float beta)
{
    int64_t total = d.n * d.c * d.h * d.w;
    bool all_h = fa != INFD_CUDA_FMT_F32_NCHW && fy == fa && (!b || fb == fa);
    bool aligned =
        ((uintptr_t)a % 16) == 0 && ((uintptr_t)y % 16) == 0 && (!b || ((uintptr_t)b % 16) == 0);
    if (all_h && aligned && d.c % 8 == 0) {
        int64_t total8 = total / 8;
        if (fa == INFD_CUDA_FMT_BF16_NHWC)
            eltwise_h8_kernel<__nv_bfloat16><<<grid_for(total8), 256, 0, stream_of(stream)>>>(
                d.c, (const uint4 *)a, bias, op, (const uint4 *)b, (uint4 *)y, act, alpha, beta,
                total8);
        else
            eltwise_h8_kernel<__half><<<grid_for(total8), 256, 0, stream_of(stream)>>>(
                d.c, (const uint4 *)a, bias, op, (const uint4 *)b, (uint4 *)y, act, alpha, beta,
                total8);
        return;
    }
    eltwise_kernel<<<grid_for(total), 256, 0, stream_of(stream)>>>(
        d, a, (int)fa, bias, op, b, (int)fb, y, (int)fy, act, alpha, beta, total);
}

/* ------------------------------------------------------------------------- */
/* Pooling                                                                   */
/* ------------------------------------------------------------------------- */

__global__ void pool_kernel(infd_cuda_pool_desc p, infd_cuda_dims d, int64_t oh, int64_t ow,
                            const void *x, int fx, void *y, int fy, int64_t total)
{
    infd_cuda_dims od = { d.n, d.c, oh, ow };
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i % d.c, rest = i / d.c;
        int64_t ox = rest % ow;
        rest /= ow;
        int64_t oy = rest % oh, n = rest / oh;
        float acc = p.max ? -FLT_MAX : 0.0f;
        int count = 0;
        for (int ky = 0; ky < p.kh; ky++) {
            int64_t iy = oy * p.sh - p.ph + (int64_t)ky * p.dh;
            if (iy < 0 || iy >= d.h)
                continue;
            for (int kx = 0; kx < p.kw; kx++) {
                int64_t ix = ox * p.sw - p.pw + (int64_t)kx * p.dw;
                if (ix < 0 || ix >= d.w)
                    continue;
                float v = load_at(x, fx, ((n * d.h + iy) * d.w + ix) * d.c + c, n, c, iy, ix, d);
                acc = p.max ? fmaxf(acc, v) : acc + v;
                count++;
            }
        }
        if (!p.max) {
            int div = count;
            if (p.count_include_pad) {
                int64_t y0 = oy * p.sh - p.ph, x0 = ox * p.sw - p.pw;
                int64_t y1 = y0 + (int64_t)(p.kh - 1) * p.dh + 1,
                        x1 = x0 + (int64_t)(p.kw - 1) * p.dw + 1;
                y1 = y1 < d.h + p.ph ? y1 : d.h + p.ph;
                x1 = x1 < d.w + p.pw ? x1 : d.w + p.pw;
                div = (int)(((y1 - y0 + p.dh - 1) / p.dh) * ((x1 - x0 + p.dw - 1) / p.dw));
            }
            acc = div > 0 ? acc / (float)div : 0.0f;
        }
        store_at(y, fy, i, n, c, oy, ox, od, acc);
    }
}

/* Input and output in one 16-bit NHWC format: V channels per thread,
 * 32-bit indices. */
template <typename T, int V>
__global__ void pool_vec_kernel(infd_cuda_pool_desc p, infd_cuda_dims d, int oh, int ow, const T *x,
                                T *y, int total)
{
    typedef typename vec_t<V>::type vt;
    const int cv = (int)d.c / V, c = (int)d.c, h = (int)d.h, w = (int)d.w;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int c0 = (i % cv) * V, rest = i / cv;
        int ox = rest % ow;
        rest /= ow;
        int oy = rest % oh, n = rest / oh;
        float acc[V];
#pragma unroll
        for (int j = 0; j < V; j++)
            acc[j] = p.max ? -FLT_MAX : 0.0f;
        int count = 0;
        const T *xn = x + n * h * w * c + c0;
        for (int ky = 0; ky < p.kh; ky++) {
            int iy = oy * p.sh - p.ph + ky * p.dh;
            if (iy < 0 || iy >= h)
                continue;
            for (int kx = 0; kx < p.kw; kx++) {
                int ix = ox * p.sw - p.pw + kx * p.dw;
                if (ix < 0 || ix >= w)
                    continue;
                vt xv = *(const vt *)(xn + (iy * w + ix) * c);
                const T *xe = (const T *)&xv;
#pragma unroll
                for (int j = 0; j < V; j++)
                    acc[j] = p.max ? fmaxf(acc[j], tof(xe[j])) : acc[j] + tof(xe[j]);
                count++;
            }
        }
        float div = 1.0f;
        if (!p.max) {
            int cnt = count;
            if (p.count_include_pad) {
                int y0 = oy * p.sh - p.ph, x0 = ox * p.sw - p.pw;
                int y1 = y0 + (p.kh - 1) * p.dh + 1, x1 = x0 + (p.kw - 1) * p.dw + 1;
                y1 = y1 < h + p.ph ? y1 : h + p.ph;
                x1 = x1 < w + p.pw ? x1 : w + p.pw;
                cnt = ((y1 - y0 + p.dh - 1) / p.dh) * ((x1 - x0 + p.dw - 1) / p.dw);
            }
            div = cnt > 0 ? (float)cnt : 0.0f;
        }
        vt yv;
        T *ye = (T *)&yv;
#pragma unroll
        for (int j = 0; j < V; j++)
            ye[j] = fromf<T>(p.max ? acc[j] : (div > 0.0f ? acc[j] / div : 0.0f));
        *(vt *)(y + i * V) = yv;
    }
}

template <typename T>
static bool pool_vec(cudaStream_t s, const infd_cuda_pool_desc *p, infd_cuda_dims d, int64_t oh,
                     int64_t ow, const void *x, void *y)
{
    int v = vec_width(d.c, (uintptr_t)x | (uintptr_t)y);
    if (v == 1 || d.n * d.c * d.h * d.w >= INT32_MAX || d.n * d.c * oh * ow >= INT32_MAX)
        return false;
    int total = (int)(d.n * oh * ow);
    if (v == 8)
        pool_vec_kernel<T, 8><<<grid_for(total * (d.c / 8)), 256, 0, s>>>(
            *p, d, (int)oh, (int)ow, (const T *)x, (T *)y, total * (int)(d.c / 8));
    else if (v == 4)
        pool_vec_kernel<T, 4><<<grid_for(total * (d.c / 4)), 256, 0, s>>>(
            *p, d, (int)oh, (int)ow, (const T *)x, (T *)y, total * (int)(d.c / 4));
    else
        pool_vec_kernel<T, 2><<<grid_for(total * (d.c / 2)), 256, 0, s>>>(
            *p, d, (int)oh, (int)ow, (const T *)x, (T *)y, total * (int)(d.c / 2));
    return true;
}

extern "C" void infd_cuda_nhwc_pool(void *stream, const struct infd_cuda_pool_desc *p,
                                    infd_cuda_dims d, int64_t oh, int64_t ow, const void *x,
                                    infd_cuda_fmt fx, void *y, infd_cuda_fmt fy)
{
    int64_t total = d.n * d.c * oh * ow;
    if (fx == fy && fx == INFD_CUDA_FMT_F16_NHWC &&
        pool_vec<__half>(stream_of(stream), p, d, oh, ow, x, y))
        return;
    if (fx == fy && fx == INFD_CUDA_FMT_BF16_NHWC &&
        pool_vec<__nv_bfloat16>(stream_of(stream), p, d, oh, ow, x, y))
        return;
    pool_kernel<<<grid_for(total), 256, 0, stream_of(stream)>>>(*p, d, oh, ow, x, (int)fx, y,
                                                                (int)fy, total);
}

/* One thread per (n, c): consecutive threads read consecutive channels. */
template <typename T>
__global__ void global_pool_kernel(int max, const T *x, float *y, infd_cuda_dims d)
{
    int64_t hw = d.h * d.w, rows = d.n * d.c;
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows;
         r += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = r / d.c, c = r % d.c;
        const T *p = x + n * hw * d.c + c;
        float acc = max ? -FLT_MAX : 0.0f;
        for (int64_t j = 0; j < hw; j++) {
            float v = tof(p[j * d.c]);
            acc = max ? fmaxf(acc, v) : acc + v;
        }
        y[r] = max ? acc : acc / (float)(hw ? hw : 1);
    }
}

extern "C" void infd_cuda_nhwc_global_pool(void *stream, int max, const void *xh, infd_cuda_fmt fx,
                                           float *y, infd_cuda_dims d)
{
    if (fx == INFD_CUDA_FMT_BF16_NHWC)
        global_pool_kernel<<<grid_for(d.n * d.c), 256, 0, stream_of(stream)>>>(
            max, (const __nv_bfloat16 *)xh, y, d);
    else
        global_pool_kernel<<<grid_for(d.n * d.c), 256, 0, stream_of(stream)>>>(
            max, (const __half *)xh, y, d);
}

/* ------------------------------------------------------------------------- */
/* Concat, conversion                                                        */
/* ------------------------------------------------------------------------- */

__global__ void concat_kernel(const void *x, int fx, infd_cuda_dims d, void *y, int fy,
                              int64_t c_off, int64_t c_total, int64_t total)
{
    infd_cuda_dims od = { d.n, c_total, d.h, d.w };
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i % d.c, rest = i / d.c;
        int64_t w = rest % d.w;
        rest /= d.w;
        int64_t h = rest % d.h, n = rest / d.h;
        float v = x ? load_at(x, fx, i, n, c, h, w, d) : 0.0f;
        int64_t oi = ((n * d.h + h) * d.w + w) * c_total + c_off + c;
        store_at(y, fy, oi, n, c_off + c, h, w, od, v);
    }
}

extern "C" void infd_cuda_nhwc_concat(void *stream, const void *x, infd_cuda_fmt fx,
                                      infd_cuda_dims d, void *y, infd_cuda_fmt fy, int64_t c_off,
                                      int64_t c_total)
{
    int64_t total = d.n * d.c * d.h * d.w;
    concat_kernel<<<grid_for(total), 256, 0, stream_of(stream)>>>(x, (int)fx, d, y, (int)fy, c_off,
                                                                  c_total, total);
}

/* Every input of a channel Concat in one pass over y: V channels per
 * thread, each group inside one input (every channel count a multiple of
 * V), 32-bit indices. */
struct concat_srcs {
    const void *x[INFD_CUDA_CONCAT_MAX]; /* NULL: zeros */
    int off[INFD_CUDA_CONCAT_MAX + 1];   /* first channel of each input in y */
    int n;
};

template <int V> __global__ void concat_vec_kernel(concat_srcs s, void *y, int c_total, int total)
{
    typedef typename vec_t<V>::type vt;
    const int cv = c_total / V;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int ch = (i % cv) * V, px = i / cv;
        /* The input holding channel ch, found with constant indices only
         * (a dynamic index would copy s to local memory in every thread). */
        const void *x = s.x[0];
        int lo = 0, hi = s.off[1];
#pragma unroll
        for (int k = 1; k < INFD_CUDA_CONCAT_MAX; k++) {
            if (k < s.n && ch >= s.off[k]) {
                x = s.x[k];
                lo = s.off[k];
                hi = s.off[k + 1];
            }
        }
        vt v;
        if (x)
            v = ((const vt *)x)[(px * (hi - lo) + ch - lo) / V];
        else
            memset(&v, 0, sizeof(v));
        ((vt *)y)[i] = v;
    }
}

extern "C" int infd_cuda_nhwc_concat_all(void *stream, int n_in, const void *const *xs,
                                         const int64_t *cs, int64_t npx, void *y, int64_t c_total)
{
    if (n_in < 1 || n_in > INFD_CUDA_CONCAT_MAX || npx * c_total >= INT32_MAX)
        return 0;
    concat_srcs s;
    memset(&s, 0, sizeof(s));
    s.n = n_in;
    int64_t counts = c_total; /* every channel count, OR-ed for vec_width */
    uintptr_t ptrs = (uintptr_t)y;
    for (int i = 0; i < n_in; i++) {
        s.x[i] = xs[i];
        s.off[i + 1] = s.off[i] + (int)cs[i];
        counts |= cs[i];
        ptrs |= (uintptr_t)xs[i];
    }
    int total = (int)(npx * c_total), v = vec_width(counts, ptrs);
    cudaStream_t st = stream_of(stream);
    if (v == 8)
        concat_vec_kernel<8><<<grid_for(total / 8), 256, 0, st>>>(s, y, (int)c_total, total / 8);
    else if (v == 4)
        concat_vec_kernel<4><<<grid_for(total / 4), 256, 0, st>>>(s, y, (int)c_total, total / 4);
    else if (v == 2)
        concat_vec_kernel<2><<<grid_for(total / 2), 256, 0, st>>>(s, y, (int)c_total, total / 2);
    else
        concat_vec_kernel<1><<<grid_for(total), 256, 0, st>>>(s, y, (int)c_total, total);
    return 1;
}

template <typename T> __global__ void to_float_kernel(const T *x, float *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = tof(x[i]);
}

template <typename T> __global__ void from_float_kernel(const float *x, T *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = fromf<T>(x[i]);
}

extern "C" void infd_cuda_nhwc_from_float(void *stream, const float *x, void *y, infd_cuda_fmt fy,
                                          int64_t n)
{
    if (fy == INFD_CUDA_FMT_BF16_NHWC)
        from_float_kernel<<<grid_for(n), 256, 0, stream_of(stream)>>>(x, (__nv_bfloat16 *)y, n);
    else
        from_float_kernel<<<grid_for(n), 256, 0, stream_of(stream)>>>(x, (__half *)y, n);
}

extern "C" void infd_cuda_nhwc_to_float(void *stream, const void *x, infd_cuda_fmt fx, float *y,
                                        int64_t n)
{
    if (fx == INFD_CUDA_FMT_BF16_NHWC)
        to_float_kernel<<<grid_for(n), 256, 0, stream_of(stream)>>>((const __nv_bfloat16 *)x, y, n);
    else
        to_float_kernel<<<grid_for(n), 256, 0, stream_of(stream)>>>((const __half *)x, y, n);
}

/* ------------------------------------------------------------------------- */
/* Depthwise convolution                                                     */
/* ------------------------------------------------------------------------- */

/* V consecutive channels of one output pixel per thread: 16-byte loads
 * (V = 8), 8-byte (V = 4), 4-byte (V = 2) or single elements; the window's
 * rows of x are shared through L1. T is __half or __nv_bfloat16; I the
 * index type, int where every offset fits (64-bit division costs several
 * times the window's arithmetic). Pads may differ at the two ends: the
 * output size says where the window stops. */
template <typename T, int V, typename I>
__global__ void dw_kernel(infd_cuda_dw_desc d, const T *x, const T *w, const float *bias,
                          const T *res, T *y, int act, float alpha, float beta, I total)
{
    typedef typename vec_t<V>::type vt;
    const I cv = (I)(d.c / V), c = (I)d.c, oh = (I)d.oh, ow = (I)d.ow, h = (I)d.h, wd = (I)d.w;
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total;
         i += (I)gridDim.x * (I)blockDim.x) {
        I c0 = (i % cv) * V, rest = i / cv;
        I ox = rest % ow;
        rest /= ow;
        I oy = rest % oh, n = rest / oh;
        float acc[V];
#pragma unroll
        for (int j = 0; j < V; j++)
            acc[j] = bias ? bias[c0 + j] : 0.0f;
        const T *xn = x + n * h * wd * c + c0;
        I iy0 = oy * d.sh - d.ph, ix0 = ox * d.sw - d.pw;
        for (int ky = 0; ky < d.r; ky++) {
            I iy = iy0 + ky * d.dh;
            if (iy < 0 || iy >= h)
                continue;
            for (int kx = 0; kx < d.s; kx++) {
                I ix = ix0 + kx * d.dw;
                if (ix < 0 || ix >= wd)
                    continue;
                vt xv = *(const vt *)(xn + (iy * wd + ix) * c);
                vt wv = *(const vt *)(w + (ky * d.s + kx) * c + c0);
                const T *xe = (const T *)&xv, *we = (const T *)&wv;
#pragma unroll
                for (int j = 0; j < V; j++)
                    acc[j] = fmaf(tof(xe[j]), tof(we[j]), acc[j]);
            }
        }
        I o = ((n * oh + oy) * ow + ox) * c + c0;
        vt rv, yv;
        if (res)
            rv = *(const vt *)(res + o);
        const T *re = (const T *)&rv;
        T *ye = (T *)&yv;
#pragma unroll
        for (int j = 0; j < V; j++) {
            float v = acc[j];
            if (res)
                v += tof(re[j]);
            ye[j] = fromf<T>(apply_act(act, v, alpha, beta));
        }
        *(vt *)(y + o) = yv;
    }
}

template <typename T, int V>
static void dw_launch(cudaStream_t s, const infd_cuda_dw_desc *d, const T *x, const T *w,
                      const float *bias, const T *res, T *y, int act, float alpha, float beta)
{
    int64_t total = d->n * d->oh * d->ow * (d->c / V);
    int64_t xn = d->n * d->h * d->w * d->c, yn = d->n * d->oh * d->ow * d->c;
    if (xn < INT32_MAX && yn < INT32_MAX)
        dw_kernel<T, V, int>
            <<<grid_for(total), 256, 0, s>>>(*d, x, w, bias, res, y, act, alpha, beta, (int)total);
    else
        dw_kernel<T, V, int64_t>
            <<<grid_for(total), 256, 0, s>>>(*d, x, w, bias, res, y, act, alpha, beta, total);
}

template <typename T>
static void dwconv(cudaStream_t s, const infd_cuda_dw_desc *d, const void *x, const void *w,
                   const float *bias, const void *res, void *y, int act, float alpha, float beta)
{
    const T *xt = (const T *)x, *wt = (const T *)w, *rt = (const T *)res;
    T *yt = (T *)y;
    int v = vec_width(d->c, (uintptr_t)x | (uintptr_t)w | (uintptr_t)res | (uintptr_t)y);
    if (v == 8)
        dw_launch<T, 8>(s, d, xt, wt, bias, rt, yt, act, alpha, beta);
    else if (v == 4)
        dw_launch<T, 4>(s, d, xt, wt, bias, rt, yt, act, alpha, beta);
    else if (v == 2)
        dw_launch<T, 2>(s, d, xt, wt, bias, rt, yt, act, alpha, beta);
    else
        dw_launch<T, 1>(s, d, xt, wt, bias, rt, yt, act, alpha, beta);
}

extern "C" void infd_cuda_nhwc_dwconv(void *stream, const infd_cuda_dw_desc *d, infd_cuda_fmt fmt,
                                      const void *x, const void *w, const float *bias,
                                      const void *res, void *y, int act, float alpha, float beta)
{
    if (fmt == INFD_CUDA_FMT_BF16_NHWC)
        dwconv<__nv_bfloat16>(stream_of(stream), d, x, w, bias, res, y, act, alpha, beta);
    else
        dwconv<__half>(stream_of(stream), d, x, w, bias, res, y, act, alpha, beta);
}

extern "C" float infd_cuda_nhwc_dwconv_time(const infd_cuda_dw_desc *d, infd_cuda_fmt fmt,
                                            int has_res, int act)
{
    size_t xn = (size_t)(d->n * d->h * d->w * d->c), yn = (size_t)(d->n * d->oh * d->ow * d->c);
    size_t wn = (size_t)d->r * d->s * d->c;
    int k = fmt == INFD_CUDA_FMT_BF16_NHWC ? 2 : 1;
    const size_t bytes[5] = { xn * 2, wn * 2, yn * 2, yn * 2, (size_t)d->c * 4 };
    const int kind[5] = { k, k, k, k, 0 }; /* x, w, y, residual, bias (FP32) */
    return time_on_scratch(5, bytes, kind, [&](infd_cuda_stream *st, void **p) {
        return time_runs(st, [&] {
            infd_cuda_nhwc_dwconv(st, d, fmt, p[0], p[1], (const float *)p[4],
                                  has_res ? p[3] : NULL, p[2], act, 0.0f, 6.0f);
        });
    });
}

extern "C" float infd_cuda_nhwc_eltwise_time(infd_cuda_dims d, infd_cuda_fmt f, int has_bias,
                                             int has_res, int act, float alpha, float beta)
{
    size_t n = (size_t)(d.n * d.c * d.h * d.w);
    int k = f == INFD_CUDA_FMT_BF16_NHWC ? 2 : 1;
    const size_t bytes[3] = { n * 2, n * 2, (size_t)d.c * 4 };
    const int kind[3] = { k, k, 0 }; /* y (in place), residual, bias (FP32) */
    return time_on_scratch(3, bytes, kind, [&](infd_cuda_stream *st, void **p) {
        return time_runs(st, [&] {
            infd_cuda_nhwc_eltwise(st, d, p[0], f, has_bias ? (const float *)p[2] : NULL,
                                   INFD_CUDA_BIN_ADD, has_res ? p[1] : NULL, f, p[0], f, act, alpha,
                                   beta);
        });
    });
}

extern "C" float infd_cuda_nhwc_pack_time(infd_cuda_fmt fx, infd_cuda_dims d, infd_cuda_fmt fo,
                                          int64_t hp, int64_t wp, int64_t pt, int64_t pl,
                                          int64_t c_out)
{
    size_t xn = (size_t)(d.n * d.c * d.h * d.w), yn = (size_t)(d.n * hp * wp * c_out);
    bool plain = fx == INFD_CUDA_FMT_F32_NCHW;
    const size_t bytes[2] = { xn * (plain ? 4 : 2), yn * 2 };
    const int kind[2] = { plain ? 0 : fx == INFD_CUDA_FMT_BF16_NHWC ? 2 : 1, 1 };
    return time_on_scratch(2, bytes, kind, [&](infd_cuda_stream *st, void **p) {
        return time_runs(
            st, [&] { infd_cuda_nhwc_pack(st, p[0], fx, d, p[1], fo, hp, wp, pt, pl, c_out); });
    });
}

/* src's n floats in fmt's element type at dst (host memory). */
static void to_format(void *dst, const float *src, size_t n, infd_cuda_fmt fmt)
{
    if (fmt == INFD_CUDA_FMT_BF16_NHWC)
        infd_fp32_to_bf16_n((uint16_t *)dst, src, n);
    else if (fmt == INFD_CUDA_FMT_F16_NHWC)
        infd_fp32_to_fp16_n((uint16_t *)dst, src, n); /* F16C where the CPU has it */
    else
        memcpy(dst, src, n * sizeof(float));
}

/* A device copy of the n elements (es bytes each) at host, freed with
 * infd_cuda_weights_free; NULL (why) on failure. */
static void *copy_up(const void *host, size_t n, size_t es, char *why, size_t why_n)
{
    /* The model's shared copy while a plan compiles (cuda_shared.h). */
    return infd_cuda_shared_upload(host, n * es, why, why_n);
}

extern "C" void *infd_cuda_upload(const float *src, size_t n, infd_cuda_fmt fmt, char *why,
                                  size_t why_n)
{
    if (fmt == INFD_CUDA_FMT_F32_NCHW)
        return copy_up(src, n, sizeof(float), why, why_n);
    uint16_t *h = (uint16_t *)malloc(n * sizeof(uint16_t) + 1);
    if (!h) {
        snprintf(why, why_n, "out of memory");
        return NULL;
    }
    to_format(h, src, n, fmt);
    void *d = copy_up(h, n, sizeof(uint16_t), why, why_n);
    free(h);
    return d;
}

extern "C" void *infd_cuda_upload_krsc(const float *w, int64_t k, int64_t cg, int64_t rs,
                                       infd_cuda_fmt fmt, char *why, size_t why_n)
{
    size_t n = (size_t)(k * cg * rs), es = fmt == INFD_CUDA_FMT_F32_NCHW ? 4 : 2;
    if (rs == 1) /* [k, cg, 1, 1] is [k, 1, 1, cg] */
        return infd_cuda_upload(w, n, fmt, why, why_n);
    /* Convert in KCRS order (contiguous, vectorized), then move elements. */
    unsigned char *conv = (unsigned char *)malloc(n * es + 1);
    unsigned char *krsc = (unsigned char *)malloc(n * es + 1);
    void *d = NULL;
    if (!conv || !krsc) {
        snprintf(why, why_n, "out of memory");
    } else {
        to_format(conv, w, n, fmt);
        for (int64_t o = 0; o < k; o++) {
            const unsigned char *src = conv + (size_t)(o * cg * rs) * es;
            unsigned char *dst = krsc + (size_t)(o * cg * rs) * es;
            for (int64_t c = 0; c < cg; c++)
                for (int64_t p = 0; p < rs; p++)
                    memcpy(dst + (size_t)(p * cg + c) * es, src + (size_t)(c * rs + p) * es, es);
        }
        d = copy_up(krsc, n, es, why, why_n);
    }
    free(conv);
    free(krsc);
    return d;
}
