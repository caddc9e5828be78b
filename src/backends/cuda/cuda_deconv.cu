/*
 * cuda_deconv.cu - ConvTranspose on cuDNN's legacy API (cuda_extra.h).
 *
 * A transposed convolution is the backward-data pass of the convolution
 * that maps its output to its input: cuDNN's dy is our x [n, c, h, w], its
 * dx our output, its filter ONNX's weight [c, k / groups, r, s] as is. The
 * descriptors follow cuda_conv.cu. cuDNN knows only symmetric pads, so it
 * computes the "full" output with the smaller pad of each dim (sizes and
 * the crop offset come from the glue, cuda_extra.c); when that differs from
 * the graph's output (asymmetric pads, output_padding) it lands in the
 * workspace and one kernel crops it into place, adding the bias. Otherwise
 * it lands in the output and the bias is added in place.
 *
 * Algorithm choice as for Conv: cudnnGetConvolutionBackwardDataAlgorithm_v7
 * lists the candidates, each whose workspace fits the cap runs 2 + 5 times
 * on the compile stream with the real weights (random inputs) and is timed
 * with events; the fastest wins. FP32 math (CUDNN_FMA_MATH: no TF32), or
 * TF32 tensor cores when the plan asked for them (d->tf32:
 * CUDNN_TENSOR_OP_MATH).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_extra.h"
#include "cuda_runtime_impl.h"

#define MAX_WORKSPACE ((size_t)256 << 20)
#define ALIGN_UP(x)   (((x) + 255) & ~(size_t)255)

struct infd_cuda_deconv {
    infd_cuda_deconv_desc d;
    cudnnTensorDescriptor_t xd, fd; /* x (cuDNN's dy), the full output (cuDNN's dx) */
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnConvolutionBwdDataAlgo_t algo;
    size_t algo_ws;  /* cuDNN's workspace, at the start of ours */
    int direct;      /* the full output is the graph's output */
    size_t ws_bytes; /* algo_ws aligned, plus the full output when !direct */
};

static const char *algo_name(cudnnConvolutionBwdDataAlgo_t a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0:
        return "algo0";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1:
        return "algo1";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT:
        return "fft";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING:
        return "fft_tiling";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD:
        return "winograd";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED:
        return "winograd_nonfused";
    default:
        return "unknown";
    }
}

/* y[n, k, oy, ox] = full[n, k, oy + off_h, ox + off_w] (0 outside) + bias[k].
 * full may be y itself (direct, in place): each thread reads and writes
 * only its own element then. */
__global__ void deconv_epilogue_kernel(const float *full, float *y, const float *bias, int k,
                                       int oh, int ow, int fh, int fw, int off_h, int off_w,
                                       int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ox = i % ow, rest = i / ow;
        int64_t oy = rest % oh;
        int64_t nk = rest / oh; /* n * k + channel */
        int64_t fy = oy + off_h, fx = ox + off_w;
        float v = 0.0f;
        if (fy >= 0 && fy < fh && fx >= 0 && fx < fw)
            v = full[(nk * fh + fy) * fw + fx];
        if (bias)
            v += bias[nk % k];
        y[i] = v;
    }
}

static void epilogue(cudaStream_t s, const infd_cuda_deconv_desc *d, const float *full, float *y,
                     const float *bias)
{
    int64_t total = (int64_t)d->n * d->k * d->oh * d->ow;
    if (total <= 0)
        return;
    unsigned blocks = infd_cuda_blocks(total);
    if (blocks > 65536)
        blocks = 65536;
    deconv_epilogue_kernel<<<blocks, 256, 0, s>>>(full, y, bias, d->k, d->oh, d->ow, d->fh, d->fw,
                                                  d->off_h, d->off_w, total);
}

static cudnnStatus_t launch(const infd_cuda_deconv *c, cudnnHandle_t h,
                            cudnnConvolutionBwdDataAlgo_t algo, const float *x, const float *w,
                            float *full, void *ws, size_t ws_bytes)
{
    const float one = 1.0f, zero = 0.0f;
    return cudnnConvolutionBackwardData(h, &one, c->wd, w, c->xd, x, c->cd, algo, ws, ws_bytes,
                                        &zero, c->fd, full);
}

extern "C" void infd_cuda_deconv_destroy(infd_cuda_deconv *c)
{
    if (!c)
        return;
    if (c->xd)
        cudnnDestroyTensorDescriptor(c->xd);
    if (c->fd)
        cudnnDestroyTensorDescriptor(c->fd);
    if (c->wd)
        cudnnDestroyFilterDescriptor(c->wd);
    if (c->cd)
        cudnnDestroyConvolutionDescriptor(c->cd);
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

extern "C" infd_cuda_deconv *infd_cuda_deconv_create(const infd_cuda_deconv_desc *d,
                                                     const float *host_w, size_t *workspace_bytes,
                                                     char *name, size_t name_n, char *why,
                                                     size_t why_n)
{
    infd_cuda_deconv *c = (infd_cuda_deconv *)calloc(1, sizeof(*c));
    infd_cuda_stream *st = NULL;
    float *x = NULL, *w = NULL, *full = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n_perf = 0;
    float best_ms = 1e30f;
    int found = 0;
    size_t xn = (size_t)d->n * d->c * d->h * d->w, fn = (size_t)d->n * d->k * d->fh * d->fw;
    size_t wn = (size_t)d->c * (d->k / d->groups) * d->r * d->s;
    if (!c) {
        snprintf(why, why_n, "out of memory");
        return NULL;
    }
    c->d = *d;
    c->direct = d->fh == d->oh && d->fw == d->ow && d->off_h == 0 && d->off_w == 0;
    CHECK(cudnnCreateTensorDescriptor(&c->xd));
    CHECK(cudnnCreateTensorDescriptor(&c->fd));
    CHECK(cudnnCreateFilterDescriptor(&c->wd));
    CHECK(cudnnCreateConvolutionDescriptor(&c->cd));
    CHECK(cudnnSetTensor4dDescriptor(c->xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n, d->c, d->h,
                                     d->w));
    CHECK(cudnnSetTensor4dDescriptor(c->fd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n, d->k, d->fh,
                                     d->fw));
    /* The forward convolution's filter: c outputs from k / groups inputs. */
    CHECK(cudnnSetFilter4dDescriptor(c->wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, d->c,
                                     d->k / d->groups, d->r, d->s));
    CHECK(cudnnSetConvolution2dDescriptor(c->cd, d->pad_h, d->pad_w, d->stride_h, d->stride_w,
                                          d->dil_h, d->dil_w, CUDNN_CROSS_CORRELATION,
                                          CUDNN_DATA_FLOAT));
    CHECK(cudnnSetConvolutionGroupCount(c->cd, d->groups));
    CHECK(cudnnSetConvolutionMathType(c->cd, d->tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    {
        /* The forward convolution of the full output must give x's shape. */
        int dims[4];
        CHECK(cudnnGetConvolution2dForwardOutputDim(c->cd, c->fd, c->wd, &dims[0], &dims[1],
                                                    &dims[2], &dims[3]));
        if (dims[0] != d->n || dims[1] != d->c || dims[2] != d->h || dims[3] != d->w) {
            snprintf(why, why_n,
                     "cuDNN maps the %dx%dx%dx%d output back to %dx%dx%dx%d, not the input's "
                     "%dx%dx%dx%d",
                     d->n, d->k, d->fh, d->fw, dims[0], dims[1], dims[2], dims[3], d->n, d->c, d->h,
                     d->w);
            goto fail;
        }
    }

    st = (infd_cuda_stream *)infd_cuda_compile_stream_lock(why, why_n);
    if (!st)
        goto fail;
    {
        cudnnStatus_t s = cudnnGetConvolutionBackwardDataAlgorithm_v7(
            st->dnn, c->wd, c->xd, c->cd, c->fd, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n_perf,
            perf);
        if (s != CUDNN_STATUS_SUCCESS) {
            snprintf(why, why_n, "cudnnGetConvolutionBackwardDataAlgorithm_v7: %s",
                     cudnnGetErrorString(s));
            goto unlock;
        }
    }
    if (cudaMalloc(&x, (xn ? xn : 1) * 4) != cudaSuccess ||
        cudaMalloc(&w, (wn ? wn : 1) * 4) != cudaSuccess ||
        cudaMalloc(&full, (fn ? fn : 1) * 4) != cudaSuccess) {
        snprintf(why, why_n, "out of device memory timing the transposed convolution");
        cudaGetLastError();
        goto unlock;
    }
    infd_cuda_fill_random(st, x, xn, 0, 1);
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
        if (cudnnGetConvolutionBackwardDataWorkspaceSize(
                st->dnn, c->wd, c->xd, c->cd, c->fd, perf[i].algo, &need) != CUDNN_STATUS_SUCCESS ||
            need > MAX_WORKSPACE)
            continue;
        void *cand_ws = NULL;
        if (need && cudaMalloc(&cand_ws, need) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        bool ok = true;
        for (int r = 0; r < 2 && ok; r++)
            ok =
                launch(c, st->dnn, perf[i].algo, x, w, full, cand_ws, need) == CUDNN_STATUS_SUCCESS;
        float ms = 0.0f;
        if (ok) {
            cudaEventRecord(e0, st->s);
            for (int r = 0; r < 5; r++)
                launch(c, st->dnn, perf[i].algo, x, w, full, cand_ws, need);
            cudaEventRecord(e1, st->s);
            ok = cudaEventSynchronize(e1) == cudaSuccess &&
                 cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
        }
        cudaGetLastError();
        cudaFree(cand_ws);
        if (ok && ms < best_ms) {
            best_ms = ms;
            c->algo = perf[i].algo;
            c->algo_ws = need;
            found = 1;
        }
    }
    if (!found)
        snprintf(why, why_n, "cuDNN has no working algorithm for this transposed convolution");
unlock:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaStreamSynchronize(st->s);
    cudaFree(x);
    cudaFree(w);
    cudaFree(full);
    cudaGetLastError();
    infd_cuda_compile_stream_unlock();
    if (!found)
        goto fail;
    c->ws_bytes = c->direct ? c->algo_ws : ALIGN_UP(c->algo_ws) + fn * 4;
    *workspace_bytes = c->ws_bytes;
    snprintf(name, name_n, "cudnn:deconv%s:%s", d->tf32 ? "_tf32" : "", algo_name(c->algo));
    return c;
fail:
    infd_cuda_deconv_destroy(c);
    return NULL;
}

extern "C" void infd_cuda_deconv_run(const infd_cuda_deconv *c, void *stream, const float *x,
                                     const float *w, const float *bias, float *y, void *workspace)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    float *full = c->direct ? y : (float *)((char *)workspace + ALIGN_UP(c->algo_ws));
    cudnnStatus_t s = launch(c, st->dnn, c->algo, x, w, full, workspace, c->algo_ws);
    if (s != CUDNN_STATUS_SUCCESS) {
        infd_cuda_stream_fail(st, "cuDNN transposed convolution: %s", cudnnGetErrorString(s));
        return;
    }
    if (!c->direct || bias)
        epilogue(st->s, &c->d, full, y, bias);
}
