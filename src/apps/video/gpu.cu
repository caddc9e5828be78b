/*
 * gpu.cu - the video app's CUDA stages (gpu.h): letterbox from NV12 into
 * the detector's input, and the drawing on a device copy of the frame.
 *
 * The letterbox averages each input pixel's footprint in the frame (a box
 * filter: 640 -> 128 reads 5 x 5 luma pixels), as libswscale's
 * downscaling on the CPU path does, rather than one bilinear tap that
 * would alias; chroma is read at the footprint's centre. The drawing is
 * one thread per 2 x 2 luma block (one chroma pair), testing the block's
 * corner against every rectangle; the last rectangle that covers it wins,
 * as the CPU's painting in order does.
 */
#include "apps/video/gpu.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include <libavutil/hwcontext.h>
#include <libavutil/hwcontext_cuda.h>
}

extern "C" {
#include "core/alloc.h"
}

/* The driver API's context calls, from the libcuda.so.1 the CUDA runtime
 * has loaded: infd links no driver library (a machine without a GPU still
 * runs it). */
typedef CUresult (*ctx_push_fn)(CUcontext);
typedef CUresult (*ctx_pop_fn)(CUcontext *);
typedef CUresult (*ctx_get_fn)(CUcontext *);

static void *driver_symbol(const char *name)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *sym = lib ? dlsym(lib, name) : NULL;
    if (lib)
        dlclose(lib); /* still loaded: the runtime holds it */
    return sym;
}

extern "C" infd_status video_gpu_device(void **hw_device, infd_error *err)
{
    *hw_device = NULL;
    /* The runtime's primary context, current after cudaFree(0). FFmpeg
     * takes it as a context it does not own, whatever its flags, so the
     * decoder, these kernels and the engine share one context. */
    cudaError_t e = cudaSetDevice(0);
    if (e == cudaSuccess)
        e = cudaFree(0);
    if (e != cudaSuccess)
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "video gpu: no CUDA device (%s)",
                              cudaGetErrorString(e));
    ctx_get_fn get = (ctx_get_fn)driver_symbol("cuCtxGetCurrent");
    CUcontext ctx = NULL;
    if (!get || get(&ctx) != CUDA_SUCCESS || !ctx)
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE,
                              "video gpu: the CUDA runtime's context is not reachable");
    AVBufferRef *ref = av_hwdevice_ctx_alloc(AV_HWDEVICE_TYPE_CUDA);
    if (!ref)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "video gpu: out of memory");
    AVHWDeviceContext *dev = (AVHWDeviceContext *)ref->data;
    ((AVCUDADeviceContext *)dev->hwctx)->cuda_ctx = ctx;
    int rc = av_hwdevice_ctx_init(ref);
    if (rc < 0) {
        av_buffer_unref(&ref);
        char text[AV_ERROR_MAX_STRING_SIZE];
        av_strerror(rc, text, sizeof(text));
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "video gpu: FFmpeg's CUDA device: %s",
                              text);
    }
    *hw_device = ref;
    return INFD_STATUS_OK;
}

struct video_gpu {
    CUcontext ctx; /* FFmpeg's device's (the primary one, see video_gpu_device) */
    ctx_push_fn push;
    ctx_pop_fn pop;
    cudaStream_t stream;
    int w, h, size;
    uint8_t *frame; /* the stream's own NV12 frame, device */
    int pitch;      /* of both planes */
    float *input;   /* device S x S x 3, the request's input */
    uint8_t *host;  /* page-locked NV12 for the encoder */
    video_rect *rects, *host_rects;
};

static infd_status cuda_fail(infd_error *err, cudaError_t e, const char *what)
{
    return infd_error_set(
        err, e == cudaErrorMemoryAllocation ? INFD_STATUS_OUT_OF_MEMORY : INFD_STATUS_INTERNAL,
        "video gpu: %s: %s", what, cudaGetErrorString(e));
}

/* Makes FFmpeg's context current for the scope of a call. */
struct in_ctx {
    const video_gpu *g;
    explicit in_ctx(const video_gpu *gpu) : g(gpu)
    {
        g->push(g->ctx);
    }
    ~in_ctx()
    {
        CUcontext prev;
        g->pop(&prev);
    }
};

extern "C" infd_status video_gpu_create(const void *hw_device, video_gpu **out, infd_error *err)
{
    *out = NULL;
    if (!hw_device)
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "video gpu: no NVDEC device");
    const AVHWDeviceContext *dev =
        (const AVHWDeviceContext *)((const AVBufferRef *)hw_device)->data;
    const AVCUDADeviceContext *cu = (const AVCUDADeviceContext *)dev->hwctx;
    ctx_push_fn push = (ctx_push_fn)driver_symbol("cuCtxPushCurrent_v2");
    ctx_pop_fn pop = (ctx_pop_fn)driver_symbol("cuCtxPopCurrent_v2");
    if (!push || !pop)
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE,
                              "video gpu: libcuda.so.1's context calls not found");
    video_gpu *g = (video_gpu *)infd_calloc(1, sizeof(*g));
    if (!g)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "video gpu: out of memory");
    g->ctx = cu->cuda_ctx;
    g->push = push;
    g->pop = pop;
    cudaError_t e;
    {
        in_ctx scope(g);
        /* Blocking: ordered after FFmpeg's copies on the context's default
         * stream. */
        if ((e = cudaStreamCreate(&g->stream)) != cudaSuccess) {
            infd_free(g);
            return cuda_fail(err, e, "stream");
        }
        if ((e = cudaMallocHost((void **)&g->host_rects,
                                VIDEO_DRAW_MAX_RECTS * sizeof(video_rect))) == cudaSuccess)
            e = cudaMalloc((void **)&g->rects, VIDEO_DRAW_MAX_RECTS * sizeof(video_rect));
    }
    if (e != cudaSuccess) {
        video_gpu_destroy(g);
        return cuda_fail(err, e, "rectangles");
    }
    *out = g;
    return INFD_STATUS_OK;
}

static void free_frames(video_gpu *g)
{
    cudaFree(g->frame);
    cudaFree(g->input);
    cudaFreeHost(g->host);
    g->frame = g->host = NULL;
    g->input = NULL;
}

extern "C" void video_gpu_destroy(video_gpu *g)
{
    if (!g)
        return;
    in_ctx scope(g);
    if (g->stream)
        cudaStreamSynchronize(g->stream);
    free_frames(g);
    cudaFree(g->rects);
    cudaFreeHost(g->host_rects);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    infd_free(g);
}

extern "C" infd_status video_gpu_resize(video_gpu *g, int w, int h, const video_letterbox *lb,
                                        video_nv12 *host, float **dev_input, infd_error *err)
{
    in_ctx scope(g);
    cudaStreamSynchronize(g->stream);
    free_frames(g);
    g->w = w;
    g->h = h;
    g->size = lb->size;
    g->pitch = (w + 255) & ~255;
    size_t plane = (size_t)g->pitch * h, chroma = (size_t)g->pitch * ((h + 1) / 2);
    cudaError_t e;
    if ((e = cudaMalloc((void **)&g->frame, plane + chroma)) != cudaSuccess ||
        (e = cudaMalloc((void **)&g->input, (size_t)lb->size * lb->size * 3 * sizeof(float))) !=
            cudaSuccess ||
        (e = cudaMallocHost((void **)&g->host, plane + chroma)) != cudaSuccess) {
        free_frames(g);
        return cuda_fail(err, e, "frame buffers");
    }
    *host = (video_nv12){ g->host, g->host + plane, g->pitch, g->pitch, w, h };
    *dev_input = g->input;
    return INFD_STATUS_OK;
}

__device__ static float clamp255(float v)
{
    return v < 0.f ? 0.f : v > 255.f ? 255.f : v;
}

__global__ static void letterbox_kernel(const uint8_t *__restrict__ y, int pitch_y,
                                        const uint8_t *__restrict__ uv, int pitch_uv, int fw,
                                        int fh, int S, int ox, int oy, int lw, int lh,
                                        float *__restrict__ out)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int yy = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= S || yy >= S)
        return;
    float *o = out + ((size_t)yy * S + x) * 3;
    int lx = x - ox, ly = yy - oy;
    if (lx < 0 || ly < 0 || lx >= lw || ly >= lh) {
        o[0] = o[1] = o[2] = -1.f;
        return;
    }
    /* The footprint [x0, x1) x [y0, y1) of this input pixel in the frame. */
    int x0 = (int)((long long)lx * fw / lw), x1 = (int)((long long)(lx + 1) * fw / lw);
    int y0 = (int)((long long)ly * fh / lh), y1 = (int)((long long)(ly + 1) * fh / lh);
    if (x1 <= x0)
        x1 = x0 + 1;
    if (y1 <= y0)
        y1 = y0 + 1;
    float sum = 0.f;
    for (int j = y0; j < y1; j++)
        for (int i = x0; i < x1; i++)
            sum += y[(size_t)j * pitch_y + i];
    float Y = sum / (float)((x1 - x0) * (y1 - y0));
    int cx = ((x0 + x1) / 2) / 2, cy = ((y0 + y1) / 2) / 2;
    float U = uv[(size_t)cy * pitch_uv + 2 * cx], V = uv[(size_t)cy * pitch_uv + 2 * cx + 1];
    float c = 1.164f * (Y - 16.f), d = U - 128.f, e = V - 128.f;
    o[0] = clamp255(c + 1.596f * e) * (1.f / 127.5f) - 1.f;
    o[1] = clamp255(c - 0.392f * d - 0.813f * e) * (1.f / 127.5f) - 1.f;
    o[2] = clamp255(c + 2.017f * d) * (1.f / 127.5f) - 1.f;
}

extern "C" infd_status video_gpu_preprocess(video_gpu *g, const video_nv12 *src,
                                            const video_letterbox *lb, infd_error *err)
{
    in_ctx scope(g);
    int S = lb->size;
    dim3 block(16, 16), grid((S + 15) / 16, (S + 15) / 16);
    letterbox_kernel<<<grid, block, 0, g->stream>>>(src->y, src->pitch_y, src->uv, src->pitch_uv,
                                                    src->w, src->h, S, lb->ox, lb->oy, lb->w, lb->h,
                                                    g->input);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(g->stream);
    return e == cudaSuccess ? INFD_STATUS_OK : cuda_fail(err, e, "letterbox");
}

__global__ static void draw_kernel(uint8_t *__restrict__ y, uint8_t *__restrict__ uv, int pitch,
                                   int w, int h, const video_rect *__restrict__ rects, int n)
{
    int bx = blockIdx.x * blockDim.x + threadIdx.x;
    int by = blockIdx.y * blockDim.y + threadIdx.y;
    int px = 2 * bx, py = 2 * by;
    if (px >= w || py >= h)
        return;
    int hit = -1;
    for (int i = 0; i < n; i++) {
        video_rect r = rects[i];
        if (px >= r.x0 && px < r.x1 && py >= r.y0 && py < r.y1)
            hit = i;
    }
    if (hit < 0)
        return;
    video_rect r = rects[hit];
    for (int j = 0; j < 2 && py + j < h; j++)
        for (int i = 0; i < 2 && px + i < w; i++)
            y[(size_t)(py + j) * pitch + px + i] = r.y;
    uv[(size_t)by * pitch + 2 * bx] = r.u;
    uv[(size_t)by * pitch + 2 * bx + 1] = r.v;
}

extern "C" infd_status video_gpu_draw(video_gpu *g, const video_nv12 *src, const video_rect *rects,
                                      int n, infd_error *err)
{
    in_ctx scope(g);
    size_t plane = (size_t)g->pitch * g->h, chroma_rows = (size_t)(g->h + 1) / 2;
    uint8_t *y = g->frame, *uv = g->frame + plane;
    cudaError_t e = cudaMemcpy2DAsync(y, g->pitch, src->y, src->pitch_y, g->w, g->h,
                                      cudaMemcpyDeviceToDevice, g->stream);
    if (e == cudaSuccess)
        e = cudaMemcpy2DAsync(uv, g->pitch, src->uv, src->pitch_uv, (size_t)((g->w + 1) / 2) * 2,
                              chroma_rows, cudaMemcpyDeviceToDevice, g->stream);
    if (e == cudaSuccess && n > 0) {
        memcpy(g->host_rects, rects, (size_t)n * sizeof(video_rect));
        e = cudaMemcpyAsync(g->rects, g->host_rects, (size_t)n * sizeof(video_rect),
                            cudaMemcpyHostToDevice, g->stream);
        if (e == cudaSuccess) {
            dim3 block(32, 8);
            dim3 grid(((g->w + 1) / 2 + 31) / 32, ((g->h + 1) / 2 + 7) / 8);
            draw_kernel<<<grid, block, 0, g->stream>>>(y, uv, g->pitch, g->w, g->h, g->rects, n);
            e = cudaGetLastError();
        }
    }
    /* The finished frame goes to the host once, for the encoder. */
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(g->host, g->frame, plane + (size_t)g->pitch * chroma_rows,
                            cudaMemcpyDeviceToHost, g->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(g->stream);
    return e == cudaSuccess ? INFD_STATUS_OK : cuda_fail(err, e, "draw");
}
