/*
 * cuda_movement.cu - transpose, 2-D copies, pad and resize
 * (cuda_movement.h). One thread per output element; index arithmetic over
 * at most INFD_CUDA_MAX_RANK dims passed by value in a small struct.
 */
#include "cuda_movement.h"
#include "cuda_runtime_impl.h"

typedef struct dims6 {
    int64_t d[INFD_CUDA_MAX_RANK];
} dims6;

template <typename T>
__global__ void transpose_kernel(const T *x, T *y, int rank, dims6 out, dims6 stride, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, src = 0;
        for (int d = rank - 1; d >= 0; d--) {
            src += (rem % out.d[d]) * stride.d[d];
            rem /= out.d[d];
        }
        y[i] = x[src];
    }
}

static unsigned grid(int64_t n)
{
    unsigned b = infd_cuda_blocks(n);
    return b > 65536 ? 65536 : b;
}

extern "C" void infd_cuda_transpose(void *stream, const void *x, void *y, int esize, int rank,
                                    const int64_t *out_dims, const int64_t *src_strides, int64_t n)
{
    cudaStream_t s = ((infd_cuda_stream *)stream)->s;
    dims6 o = {}, st = {};
    for (int d = 0; d < rank; d++) {
        o.d[d] = out_dims[d];
        st.d[d] = src_strides[d];
    }
    switch (esize) {
    case 1:
        transpose_kernel<uint8_t>
            <<<grid(n), 256, 0, s>>>((const uint8_t *)x, (uint8_t *)y, rank, o, st, n);
        break;
    case 2:
        transpose_kernel<uint16_t>
            <<<grid(n), 256, 0, s>>>((const uint16_t *)x, (uint16_t *)y, rank, o, st, n);
        break;
    case 4:
        transpose_kernel<uint32_t>
            <<<grid(n), 256, 0, s>>>((const uint32_t *)x, (uint32_t *)y, rank, o, st, n);
        break;
    default:
        transpose_kernel<uint64_t>
            <<<grid(n), 256, 0, s>>>((const uint64_t *)x, (uint64_t *)y, rank, o, st, n);
        break;
    }
}

extern "C" void infd_cuda_copy2d(void *stream, void *dst, size_t dpitch, const void *src,
                                 size_t spitch, size_t width, size_t height)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    if (!width || !height)
        return;
    cudaError_t rc =
        cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, st->s);
    if (rc != cudaSuccess)
        infd_cuda_stream_fail(st, "cudaMemcpy2DAsync: %s", cudaGetErrorString(rc));
}

__global__ void pad_kernel(const float *x, float *y, int rank, dims6 in, dims6 out, dims6 begin,
                           int mode, float value, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, src = 0, stride = 1;
        bool outside = false;
        for (int d = rank - 1; d >= 0; d--) {
            int64_t idx = rem % out.d[d] - begin.d[d];
            rem /= out.d[d];
            int64_t len = in.d[d];
            if (idx < 0 || idx >= len) {
                if (mode == 0) {
                    outside = true;
                } else if (mode == 1) { /* reflect, no edge repeat */
                    int64_t period = len > 1 ? 2 * (len - 1) : 1;
                    idx = idx < 0 ? -idx : idx;
                    idx %= period;
                    idx = idx >= len ? period - idx : idx;
                } else {
                    idx = idx < 0 ? 0 : len - 1;
                }
            }
            src += idx * stride;
            stride *= len;
        }
        y[i] = outside ? value : x[src];
    }
}

extern "C" void infd_cuda_pad(void *stream, const float *x, float *y, int rank,
                              const int64_t *in_dims, const int64_t *out_dims,
                              const int64_t *pads_begin, int mode, float value, int64_t n)
{
    cudaStream_t s = ((infd_cuda_stream *)stream)->s;
    dims6 in = {}, out = {}, begin = {};
    for (int d = 0; d < rank; d++) {
        in.d[d] = in_dims[d];
        out.d[d] = out_dims[d];
        begin.d[d] = pads_begin[d];
    }
    pad_kernel<<<grid(n), 256, 0, s>>>(x, y, rank, in, out, begin, mode, value, n);
}

__device__ __forceinline__ float src_coord(int coord, int64_t o, float scale, int64_t in_len,
                                           int64_t out_len)
{
    switch (coord) {
    case 1:
        return (float)o / scale;
    case 2:
        return out_len > 1 ? (float)o * (float)(in_len - 1) / (float)(out_len - 1) : 0.0f;
    case 3:
        return out_len > 1 ? ((float)o + 0.5f) / scale - 0.5f : 0.0f;
    default:
        return ((float)o + 0.5f) / scale - 0.5f;
    }
}

__device__ __forceinline__ int64_t nearest(int mode, float c, int64_t len)
{
    int64_t i;
    switch (mode) {
    case 1:
        i = (int64_t)ceilf(c - 0.5f);
        break;
    case 2:
        i = (int64_t)floorf(c);
        break;
    case 3:
        i = (int64_t)ceilf(c);
        break;
    default:
        i = (int64_t)floorf(c + 0.5f);
        if (c + 0.5f == floorf(c + 0.5f)) /* a tie: round down */
            i = (int64_t)floorf(c);
        break;
    }
    return i < 0 ? 0 : (i >= len ? len - 1 : i);
}

__global__ void resize_kernel(infd_cuda_resize_desc d, const float *x, float *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ox = i % d.ow, oy = (i / d.ow) % d.oh, nc = i / (d.ow * d.oh);
        const float *src = x + nc * d.h * d.w;
        float cy = src_coord(d.coord, oy, d.scale_h, d.h, d.oh);
        float cx = src_coord(d.coord, ox, d.scale_w, d.w, d.ow);
        if (d.mode == 0) {
            y[i] = src[nearest(d.nearest_mode, cy, d.h) * d.w + nearest(d.nearest_mode, cx, d.w)];
            continue;
        }
        cy = fminf(fmaxf(cy, 0.0f), (float)(d.h - 1));
        cx = fminf(fmaxf(cx, 0.0f), (float)(d.w - 1));
        int64_t y0 = (int64_t)floorf(cy), x0 = (int64_t)floorf(cx);
        int64_t y1 = y0 + 1 < d.h ? y0 + 1 : d.h - 1, x1 = x0 + 1 < d.w ? x0 + 1 : d.w - 1;
        float fy = cy - (float)y0, fx = cx - (float)x0;
        float top = src[y0 * d.w + x0] * (1.0f - fx) + src[y0 * d.w + x1] * fx;
        float bot = src[y1 * d.w + x0] * (1.0f - fx) + src[y1 * d.w + x1] * fx;
        y[i] = top * (1.0f - fy) + bot * fy;
    }
}

extern "C" void infd_cuda_resize(void *stream, const infd_cuda_resize_desc *d, const float *x,
                                 float *y)
{
    cudaStream_t s = ((infd_cuda_stream *)stream)->s;
    int64_t n = d->nc * d->oh * d->ow;
    resize_kernel<<<grid(n), 256, 0, s>>>(*d, x, y, n);
}
