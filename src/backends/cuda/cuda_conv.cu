/*
 * cuda_conv.cu - convolution on cuDNN's legacy API (cuda_conv.h).
 *
 * Algorithm choice: cudnnGetConvolutionForwardAlgorithm_v7 lists the
 * candidates the heuristics consider valid for the shape; each one whose
 * workspace fits the cap is run 2 + 5 times on the compile stream with the
 * real weights (random inputs, never zeros) and timed with events, and the
 * fastest wins. Candidates that
 * fail (not every algorithm supports the fused call) are skipped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_fp16.h>

#include "cuda_conv.h"
#include "cuda_eltwise.h"
#include "cuda_runtime_impl.h"

/* Workspace cap per convolution: the plan reserves the largest one once per
 * context. */
#define MAX_WORKSPACE ((size_t)256 << 20)

struct infd_cuda_conv {
    infd_cuda_conv_desc d;
    cudnnTensorDescriptor_t xd, yd, bd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnActivationDescriptor_t ad;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws_bytes;
    __half *w16; /* FP16: the weights, KRSC (owned) */
};

static const char *algo_name(cudnnConvolutionFwdAlgo_t a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM:
        return "implicit_gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
        return "implicit_precomp_gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
        return "gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT:
        return "direct";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
        return "fft";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING:
        return "fft_tiling";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD:
        return "winograd";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
        return "winograd_nonfused";
    default:
        return "unknown";
    }
}

static cudnnStatus_t launch(const infd_cuda_conv *c, cudnnHandle_t h,
                            cudnnConvolutionFwdAlgo_t algo, const float *x, const float *w,
                            const float *bias, const float *z, float *y, void *ws, size_t ws_bytes)
{
    const float one = 1.0f, zero = 0.0f;
    if (!c->d.fused_relu)
        return cudnnConvolutionForward(h, &one, c->xd, x, c->wd, w, c->cd, algo, ws, ws_bytes,
                                       &zero, c->yd, y);
    const float alpha2 = c->d.has_res ? 1.0f : 0.0f;
    return cudnnConvolutionBiasActivationForward(
        h, &one, c->xd, x, c->wd, w, c->cd, algo, ws, ws_bytes, &alpha2, c->yd,
        c->d.has_res ? (const void *)z : (const void *)y, c->bd, bias, c->ad, c->yd, y);
}

/* Hash-based values in [-1, 1): timing on zeros can run faster than on real
 * data (device/METHOD.md). */
__global__ void fill_kernel(float *p, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        p[i] = (float)(h >> 8) / 8388608.0f - 1.0f;
    }
}

static void fill(float *p, size_t n, unsigned seed, cudaStream_t s)
{
    unsigned blocks = infd_cuda_blocks((long long)n);
    if (blocks > 4096)
        blocks = 4096;
    fill_kernel<<<blocks, 256, 0, s>>>(p, n, seed);
}

__global__ void fill_half_kernel(__half *p, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        p[i] = __float2half((float)(h >> 8) / 8388608.0f - 1.0f);
    }
}

static void fill_half(__half *p, size_t n, unsigned seed, cudaStream_t s)
{
    unsigned blocks = infd_cuda_blocks((long long)n);
    if (blocks > 4096)
        blocks = 4096;
    fill_half_kernel<<<blocks, 256, 0, s>>>(p, n, seed);
}

/* One thread per NHWC output element (padding written as 0): consecutive
 * threads write consecutive channels; reads stride over H*W. */
__global__ void to_nhwc_half_kernel(const float *x, __half *xh, int n, int c, int h, int w, int hp,
                                    int wp, int pt, int pl, size_t total)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int ci = (int)(i % c);
        size_t rest = i / c;
        int xw = (int)(rest % wp) - pl;
        rest /= wp;
        int yh = (int)(rest % hp) - pt;
        int ni = (int)(rest / hp);
        float v = 0.0f;
        if (yh >= 0 && yh < h && xw >= 0 && xw < w)
            v = x[(((size_t)ni * c + ci) * h + yh) * w + xw];
        xh[i] = __float2half(v);
    }
}

extern "C" void infd_cuda_to_nhwc_half(void *stream, const float *x, void *xh, int n, int c, int h,
                                       int w, int hp, int wp, int pt, int pl)
{
    cudaStream_t s = ((infd_cuda_stream *)stream)->s;
    size_t total = (size_t)n * c * hp * wp;
    unsigned blocks = infd_cuda_blocks((long long)total);
    if (blocks > 65536)
        blocks = 65536;
    to_nhwc_half_kernel<<<blocks, 256, 0, s>>>(x, (__half *)xh, n, c, h, w, hp, wp, pt, pl, total);
}

/* One thread per NCHW output element, so writes (and the residual reads)
 * are coalesced; the FP16 reads stride by K. */
__global__ void from_nhwc_half_kernel(const __half *yh, float *y, const float *bias,
                                      const float *res, int n, int k, int oh, int ow, int act,
                                      float alpha, float beta, size_t total)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int xw = (int)(i % ow);
        size_t rest = i / ow;
        int yy = (int)(rest % oh);
        rest /= oh;
        int ki = (int)(rest % k);
        int ni = (int)(rest / k);
        float v = __half2float(yh[(((size_t)ni * oh + yy) * ow + xw) * k + ki]);
        if (bias)
            v += bias[ki];
        if (res)
            v += res[i];
        switch (act) {
        case INFD_CUDA_ACT_RELU:
            v = v > 0.0f ? v : 0.0f;
            break;
        case INFD_CUDA_ACT_LEAKY_RELU:
            v = v >= 0.0f ? v : v * alpha;
            break;
        case INFD_CUDA_ACT_CLIP:
            v = fminf(fmaxf(v, alpha), beta);
            break;
        case INFD_CUDA_ACT_SIGMOID:
            v = 1.0f / (1.0f + expf(-v));
            break;
        case INFD_CUDA_ACT_HARD_SIGMOID:
            v = fminf(fmaxf(alpha * v + beta, 0.0f), 1.0f);
            break;
        case INFD_CUDA_ACT_TANH:
            v = tanhf(v);
            break;
        default:
            break;
        }
        y[i] = v;
    }
}

extern "C" void infd_cuda_from_nhwc_half(void *stream, const void *yh, float *y, const float *bias,
                                         const float *res, int n, int k, int oh, int ow, int act,
                                         float alpha, float beta)
{
    cudaStream_t s = ((infd_cuda_stream *)stream)->s;
    size_t total = (size_t)n * k * oh * ow;
    unsigned blocks = infd_cuda_blocks((long long)total);
    if (blocks > 65536)
        blocks = 65536;
    from_nhwc_half_kernel<<<blocks, 256, 0, s>>>((const __half *)yh, y, bias, res, n, k, oh, ow,
                                                 act, alpha, beta, total);
}

extern "C" void infd_cuda_conv_destroy(infd_cuda_conv *c)
{
    if (!c)
        return;
    if (c->xd)
        cudnnDestroyTensorDescriptor(c->xd);
    if (c->yd)
        cudnnDestroyTensorDescriptor(c->yd);
    if (c->bd)
        cudnnDestroyTensorDescriptor(c->bd);
    if (c->wd)
        cudnnDestroyFilterDescriptor(c->wd);
    if (c->cd)
        cudnnDestroyConvolutionDescriptor(c->cd);
    if (c->ad)
        cudnnDestroyActivationDescriptor(c->ad);
    if (c->w16)
        cudaFree(c->w16);
    free(c);
}

#define CHECK(call)                                                         \
    do {                                                                    \
        cudnnStatus_t s_ = (call);                                          \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                   \
            snprintf(why, why_n, "%s: %s", #call, cudnnGetErrorString(s_)); \
            goto fail;                                                      \
        }                                                                   \
    } while (0)

extern "C" infd_cuda_conv *infd_cuda_conv_create(const infd_cuda_conv_desc *d, const float *host_w,
                                                 size_t *workspace_bytes, char *name, size_t name_n,
                                                 char *why, size_t why_n)
{
    infd_cuda_conv *c = (infd_cuda_conv *)calloc(1, sizeof(*c));
    infd_cuda_stream *st = NULL;
    float *x = NULL, *w = NULL, *y = NULL, *z = NULL, *b = NULL;
    void *ws = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n_perf = 0;
    float best_ms = 1e30f;
    int found = 0;
    size_t es = d->fp16 ? 2 : 4; /* element bytes of x and y */
    cudnnTensorFormat_t fmt = d->fp16 ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    cudnnDataType_t dt = d->fp16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    size_t xn = (size_t)d->n * d->c * d->h * d->w, yn = (size_t)d->n * d->k * d->oh * d->ow;
    size_t wn = (size_t)d->k * (d->c / d->groups) * d->r * d->s;
    if (!c) {
        snprintf(why, why_n, "out of memory");
        return NULL;
    }
    c->d = *d;
    if (d->fp16 && (!host_w || d->fused_relu)) {
        snprintf(why, why_n, "FP16 convolution needs constant weights and no fused call");
        goto fail;
    }
    if (d->fp16) {
        /* KCRS FP32 -> KRSC FP16, once. */
        int cg = d->c / d->groups;
        __half *h16 = (__half *)malloc(wn * sizeof(__half));
        if (!h16) {
            snprintf(why, why_n, "out of memory");
            goto fail;
        }
        for (int k = 0; k < d->k; k++)
            for (int ci = 0; ci < cg; ci++)
                for (int r = 0; r < d->r; r++)
                    for (int q = 0; q < d->s; q++)
                        h16[(((size_t)k * d->r + r) * d->s + q) * cg + ci] =
                            __float2half(host_w[(((size_t)k * cg + ci) * d->r + r) * d->s + q]);
        cudaError_t rc = cudaMalloc(&c->w16, wn * sizeof(__half));
        if (rc == cudaSuccess)
            rc = cudaMemcpy(c->w16, h16, wn * sizeof(__half), cudaMemcpyHostToDevice);
        free(h16);
        if (rc != cudaSuccess) {
            snprintf(why, why_n, "FP16 weights: %s", cudaGetErrorString(rc));
            cudaGetLastError();
            goto fail;
        }
    }
    CHECK(cudnnCreateTensorDescriptor(&c->xd));
    CHECK(cudnnCreateTensorDescriptor(&c->yd));
    CHECK(cudnnCreateTensorDescriptor(&c->bd));
    CHECK(cudnnCreateFilterDescriptor(&c->wd));
    CHECK(cudnnCreateConvolutionDescriptor(&c->cd));
    CHECK(cudnnCreateActivationDescriptor(&c->ad));
    CHECK(cudnnSetTensor4dDescriptor(c->xd, fmt, dt, d->n, d->c, d->h, d->w));
    CHECK(cudnnSetTensor4dDescriptor(c->yd, fmt, dt, d->n, d->k, d->oh, d->ow));
    CHECK(cudnnSetTensor4dDescriptor(c->bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, d->k, 1, 1));
    CHECK(cudnnSetFilter4dDescriptor(c->wd, dt, fmt, d->k, d->c / d->groups, d->r, d->s));
    CHECK(cudnnSetConvolution2dDescriptor(c->cd, d->pad_h, d->pad_w, d->stride_h, d->stride_w,
                                          d->dil_h, d->dil_w, CUDNN_CROSS_CORRELATION,
                                          CUDNN_DATA_FLOAT));
    CHECK(cudnnSetConvolutionGroupCount(c->cd, d->groups));
    /* FP32: no TF32. FP16: tensor cores, FP32 accumulation (compute type
     * FLOAT above). */
    CHECK(cudnnSetConvolutionMathType(c->cd, d->fp16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    CHECK(cudnnSetActivationDescriptor(c->ad, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    {
        int dims[4];
        CHECK(cudnnGetConvolution2dForwardOutputDim(c->cd, c->xd, c->wd, &dims[0], &dims[1],
                                                    &dims[2], &dims[3]));
        if (dims[0] != d->n || dims[1] != d->k || dims[2] != d->oh || dims[3] != d->ow) {
            snprintf(why, why_n, "cuDNN computes output %dx%dx%dx%d, the graph says %dx%dx%dx%d",
                     dims[0], dims[1], dims[2], dims[3], d->n, d->k, d->oh, d->ow);
            goto fail;
        }
    }

    st = (infd_cuda_stream *)infd_cuda_compile_stream_lock(why, why_n);
    if (!st)
        goto fail;
    {
        cudnnStatus_t s = cudnnGetConvolutionForwardAlgorithm_v7(
            st->dnn, c->xd, c->wd, c->cd, c->yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n_perf, perf);
        if (s != CUDNN_STATUS_SUCCESS) {
            snprintf(why, why_n, "cudnnGetConvolutionForwardAlgorithm_v7: %s",
                     cudnnGetErrorString(s));
            goto unlock;
        }
    }
    if (cudaMalloc(&x, xn * es) != cudaSuccess || cudaMalloc(&w, wn * 4) != cudaSuccess ||
        cudaMalloc(&y, yn * es) != cudaSuccess || cudaMalloc(&z, yn * 4) != cudaSuccess ||
        cudaMalloc(&b, (size_t)d->k * 4) != cudaSuccess) {
        snprintf(why, why_n, "out of device memory timing the convolution");
        cudaGetLastError();
        goto unlock;
    }
    if (d->fp16)
        fill_half((__half *)x, xn, 1, st->s);
    else
        fill(x, xn, 1, st->s);
    fill(z, yn, 2, st->s);
    fill(b, (size_t)d->k, 3, st->s);
    if (host_w)
        cudaMemcpyAsync(w, host_w, wn * 4, cudaMemcpyHostToDevice, st->s);
    else
        fill(w, wn, 4, st->s);
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < n_perf; i++) {
        size_t need = 0;
        if (perf[i].status != CUDNN_STATUS_SUCCESS)
            continue;
        if (cudnnGetConvolutionForwardWorkspaceSize(st->dnn, c->xd, c->wd, c->cd, c->yd,
                                                    perf[i].algo, &need) != CUDNN_STATUS_SUCCESS ||
            need > MAX_WORKSPACE)
            continue;
        void *cand_ws = NULL;
        if (need && cudaMalloc(&cand_ws, need) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        bool ok = true;
        for (int r = 0; r < 2 && ok; r++)
            ok = launch(c, st->dnn, perf[i].algo, x, c->w16 ? (const float *)c->w16 : w, b, z, y,
                        cand_ws, need) == CUDNN_STATUS_SUCCESS;
        float ms = 0.0f;
        if (ok) {
            cudaEventRecord(e0, st->s);
            for (int r = 0; r < 5; r++)
                launch(c, st->dnn, perf[i].algo, x, c->w16 ? (const float *)c->w16 : w, b, z, y,
                       cand_ws, need);
            cudaEventRecord(e1, st->s);
            ok = cudaEventSynchronize(e1) == cudaSuccess &&
                 cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
        }
        cudaGetLastError();
        cudaFree(cand_ws);
        if (ok && ms < best_ms) {
            best_ms = ms;
            c->algo = perf[i].algo;
            c->ws_bytes = need;
            found = 1;
        }
    }
    if (!found)
        snprintf(why, why_n, "cuDNN has no working algorithm for this convolution%s",
                 d->fused_relu ? " (fused with bias and ReLU)" : "");
unlock:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(x);
    cudaFree(w);
    cudaFree(y);
    cudaFree(z);
    cudaFree(b);
    cudaFree(ws);
    cudaStreamSynchronize(st->s);
    cudaGetLastError();
    infd_cuda_compile_stream_unlock();
    if (!found)
        goto fail;
    *workspace_bytes = c->ws_bytes;
    snprintf(name, name_n, "cudnn:conv%s:%s",
             d->fp16         ? "_fp16"
             : d->fused_relu ? "_bias_relu"
                             : "",
             algo_name(c->algo));
    return c;
fail:
    infd_cuda_conv_destroy(c);
    return NULL;
}

extern "C" void infd_cuda_conv_run(const infd_cuda_conv *c, void *stream, const float *x,
                                   const float *w, const float *bias, const float *z, float *y,
                                   void *workspace)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    if (c->w16)
        w = (const float *)c->w16;
    cudnnStatus_t s = launch(c, st->dnn, c->algo, x, w, bias, z, y, workspace, c->ws_bytes);
    if (s != CUDNN_STATUS_SUCCESS)
        infd_cuda_stream_fail(st, "cuDNN convolution: %s", cudnnGetErrorString(s));
}
