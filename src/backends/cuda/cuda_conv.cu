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

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_conv.h"
#include "cuda_nhwc.h"
#include "cuda_runtime_impl.h"
#include "cuda_shared.h"

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
    void *w16; /* 16-bit: the weights, KRSC (owned) */
    void *b16; /* 16-bit fused: the bias (owned) */
    float ms;  /* the chosen algorithm's time per run (0: not timed) */
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
                            cudnnConvolutionFwdAlgo_t algo, const void *x, const void *w,
                            const void *bias, const void *z, void *y, void *ws, size_t ws_bytes)
{
    const float one = 1.0f, zero = 0.0f;
    if (c->w16)
        w = c->w16;
    if (c->b16)
        bias = c->b16;
    if (!c->d.fused)
        return cudnnConvolutionForward(h, &one, c->xd, x, c->wd, w, c->cd, algo, ws, ws_bytes,
                                       &zero, c->yd, y);
    const float alpha2 = c->d.has_res ? 1.0f : 0.0f;
    return cudnnConvolutionBiasActivationForward(h, &one, c->xd, x, c->wd, w, c->cd, algo, ws,
                                                 ws_bytes, &alpha2, c->yd, c->d.has_res ? z : y,
                                                 c->bd, bias, c->ad, c->yd, y);
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
    infd_cuda_weights_free(c->w16);
    infd_cuda_weights_free(c->b16);
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
                                                 const float *host_b, int forced_algo,
                                                 size_t *workspace_bytes, int *algo_out, char *name,
                                                 size_t name_n, char *why, size_t why_n)
{
    infd_cuda_conv *c = (infd_cuda_conv *)calloc(1, sizeof(*c));
    infd_cuda_stream *st = NULL;
    float *x = NULL, *w = NULL, *y = NULL, *z = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n_perf = 0;
    float best_ms = 1e30f;
    int found = 0;
    size_t es = d->fp16 ? 2 : 4; /* element bytes of x and y */
    cudnnTensorFormat_t fmt = d->fp16 ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    cudnnDataType_t dt = !d->fp16  ? CUDNN_DATA_FLOAT
                         : d->bf16 ? CUDNN_DATA_BFLOAT16
                                   : CUDNN_DATA_HALF;
    size_t xn = (size_t)d->n * d->c * d->h * d->w, yn = (size_t)d->n * d->k * d->oh * d->ow;
    size_t wn = (size_t)d->k * (d->c / d->groups) * d->r * d->s;
    if (!c) {
        snprintf(why, why_n, "out of memory");
        return NULL;
    }
    c->d = *d;
    if (d->fp16 && (!host_w || (d->fused && !host_b))) {
        snprintf(why, why_n, "FP16 convolution needs constant weights (and bias when fused)");
        goto fail;
    }
    if (d->fp16) {
        /* KCRS FP32 -> KRSC, once. */
        infd_cuda_fmt f16 = d->bf16 ? INFD_CUDA_FMT_BF16_NHWC : INFD_CUDA_FMT_F16_NHWC;
        c->w16 = infd_cuda_upload_krsc(host_w, d->k, d->c / d->groups, (int64_t)d->r * d->s, f16,
                                       why, why_n);
        bool ok = c->w16 != NULL;
        if (ok && d->fused)
            ok = (c->b16 = infd_cuda_upload(host_b, (size_t)d->k, f16, why, why_n)) != NULL;
        if (!ok)
            goto fail;
    }
    CHECK(cudnnCreateTensorDescriptor(&c->xd));
    CHECK(cudnnCreateTensorDescriptor(&c->yd));
    CHECK(cudnnCreateTensorDescriptor(&c->bd));
    CHECK(cudnnCreateFilterDescriptor(&c->wd));
    CHECK(cudnnCreateConvolutionDescriptor(&c->cd));
    CHECK(cudnnCreateActivationDescriptor(&c->ad));
    CHECK(cudnnSetTensor4dDescriptor(c->xd, fmt, dt, d->n, d->c, d->h, d->w));
    CHECK(cudnnSetTensor4dDescriptor(c->yd, fmt, dt, d->n, d->k, d->oh, d->ow));
    CHECK(cudnnSetTensor4dDescriptor(c->bd, CUDNN_TENSOR_NCHW, dt, 1, d->k, 1, 1));
    CHECK(cudnnSetFilter4dDescriptor(c->wd, dt, fmt, d->k, d->c / d->groups, d->r, d->s));
    CHECK(cudnnSetConvolution2dDescriptor(c->cd, d->pad_h, d->pad_w, d->stride_h, d->stride_w,
                                          d->dil_h, d->dil_w, CUDNN_CROSS_CORRELATION,
                                          CUDNN_DATA_FLOAT));
    CHECK(cudnnSetConvolutionGroupCount(c->cd, d->groups));
    /* FP32: CUDNN_FMA_MATH, since CUDNN_DEFAULT_MATH lets cuDNN use TF32
     * on Ampere and later for FP32 data. TF32 (asked for) and FP16:
     * tensor cores, FP32 accumulation (compute type FLOAT above);
     * TENSOR_OP_MATH, not ..._ALLOW_CONVERSION, which may also convert
     * FP32 tensors to FP16. */
    CHECK(cudnnSetConvolutionMathType(c->cd,
                                      d->fp16 || d->tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    CHECK(cudnnSetActivationDescriptor(
        c->ad, d->fused == 2 ? CUDNN_ACTIVATION_IDENTITY : CUDNN_ACTIVATION_RELU,
        CUDNN_NOT_PROPAGATE_NAN, 0.0));
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
    if (forced_algo >= 0) {
        n_perf = 1;
        perf[0].algo = (cudnnConvolutionFwdAlgo_t)forced_algo;
        perf[0].status = CUDNN_STATUS_SUCCESS;
    } else {
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
    if (d->fp16) {
        infd_cuda_fill_random(st, x, xn, d->bf16 ? 2 : 1, 1);
        infd_cuda_fill_random(st, z, yn, d->bf16 ? 2 : 1, 2);
    } else {
        infd_cuda_fill_random(st, x, xn, 0, 1);
        infd_cuda_fill_random(st, z, yn, 0, 2);
    }
    infd_cuda_fill_random(st, b, (size_t)d->k, 0, 3);
    if (host_w)
        cudaMemcpyAsync(w, host_w, wn * 4, cudaMemcpyHostToDevice, st->s);
    else
        infd_cuda_fill_random(st, w, wn, 0, 4);
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
        for (int r = 0; r < (forced_algo >= 0 ? 1 : 2) && ok; r++)
            ok = launch(c, st->dnn, perf[i].algo, x, w, b, z, y, cand_ws, need) ==
                 CUDNN_STATUS_SUCCESS;
        float ms = 0.0f;
        if (ok && forced_algo >= 0) {
            ok = cudaStreamSynchronize(st->s) == cudaSuccess;
        } else if (ok) {
            cudaEventRecord(e0, st->s);
            for (int r = 0; r < 5; r++)
                launch(c, st->dnn, perf[i].algo, x, w, b, z, y, cand_ws, need);
            cudaEventRecord(e1, st->s);
            ok = cudaEventSynchronize(e1) == cudaSuccess &&
                 cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
        }
        cudaGetLastError();
        cudaFree(cand_ws);
        if (ok && ms < best_ms) {
            best_ms = ms;
            c->ms = ms / 5.0f;
            c->algo = perf[i].algo;
            c->ws_bytes = need;
            found = 1;
        }
    }
    if (!found)
        snprintf(why, why_n, "cuDNN has %s for this convolution%s",
                 forced_algo >= 0 ? "rejected the recorded algorithm" : "no working algorithm",
                 d->fused ? " (fused with bias and activation)" : "");
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
    cudaStreamSynchronize(st->s);
    cudaGetLastError();
    infd_cuda_compile_stream_unlock();
    if (!found)
        goto fail;
    *workspace_bytes = c->ws_bytes;
    *algo_out = (int)c->algo;
    snprintf(name, name_n, "cudnn:conv%s%s:%s",
             !d->fp16  ? (d->tf32 ? "_tf32" : "")
             : d->bf16 ? "_bf16"
                       : "_fp16",
             d->fused == 1   ? "_bias_relu"
             : d->fused == 2 ? "_bias"
                             : "",
             algo_name(c->algo));
    return c;
fail:
    infd_cuda_conv_destroy(c);
    return NULL;
}

extern "C" float infd_cuda_conv_ms(const infd_cuda_conv *c)
{
    return c->ms;
}

extern "C" void infd_cuda_conv_run(const infd_cuda_conv *c, void *stream, const void *x,
                                   const float *w, const float *bias, const void *z, void *y,
                                   void *workspace)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    cudnnStatus_t s = launch(c, st->dnn, c->algo, x, w, bias, z, y, workspace, c->ws_bytes);
    if (s != CUDNN_STATUS_SUCCESS)
        infd_cuda_stream_fail(st, "cuDNN convolution: %s", cudnnGetErrorString(s));
}
