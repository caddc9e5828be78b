/*
 * cuda_gemm.cu - cuBLASLt matmul with bias/ReLU epilogue (cuda_gemm.h).
 *
 * cuBLASLt is column-major; a row-major Y[M,N] is a column-major Y^T[N,M],
 * so we compute Y^T = op(B)^T * op(A)^T: cuBLASLt's "A" is our B and its
 * "B" is our A, with the transposes carried over. The bias then runs along
 * cuBLASLt's rows (N), which is what its BIAS epilogue adds. The bias is
 * copied to the device at create so its pointer can live in the immutable
 * descriptor (contexts share the kernel; nothing is set per run).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_gemm.h"
#include "cuda_nhwc.h"
#include "cuda_runtime_impl.h"
#include "cuda_shared.h"

#define MAX_WORKSPACE ((size_t)32 << 20)

struct infd_cuda_gemm {
    infd_cuda_gemm_desc d;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    size_t ws_bytes;
    void *bias; /* device copy (FP16 for an FP16 gemm), or NULL */
    void *b16;  /* FP16: B, device copy */
    int pick;   /* the heuristic candidate chosen */
};

extern "C" void infd_cuda_gemm_destroy(infd_cuda_gemm *g)
{
    if (!g)
        return;
    if (g->op)
        cublasLtMatmulDescDestroy(g->op);
    if (g->la)
        cublasLtMatrixLayoutDestroy(g->la);
    if (g->lb)
        cublasLtMatrixLayoutDestroy(g->lb);
    if (g->lc)
        cublasLtMatrixLayoutDestroy(g->lc);
    infd_cuda_weights_free(g->bias);
    infd_cuda_weights_free(g->b16);
    free(g);
}

static cublasStatus_t set_batch(cublasLtMatrixLayout_t l, int32_t count, int64_t stride)
{
    cublasStatus_t s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                        &count, sizeof(count));
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    return cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                            sizeof(stride));
}

#define CHECK(call)                                                       \
    do {                                                                  \
        cublasStatus_t s_ = (call);                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                \
            snprintf(why, why_n, "%s: cuBLAS status %d", #call, (int)s_); \
            goto fail;                                                    \
        }                                                                 \
    } while (0)

/* Runs each heuristic candidate 2 + 5 times on random-free scratch (the
 * numbers do not change a GEMM's speed) and returns the fastest index, its
 * time in *best_ms; -1 when none ran. */
static int time_candidates(infd_cuda_gemm *g, infd_cuda_stream *st,
                           const cublasLtMatmulHeuristicResult_t *res, int n_res, float *best_ms)
{
    const infd_cuda_gemm_desc *d = &g->d;
    size_t es = d->fp16 ? 2 : 4;
    int kind = !d->fp16 ? 0 : d->bf16 ? 2 : 1; /* infd_cuda_fill_random's */
    void *a = NULL, *b = NULL, *y = NULL, *ws = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    int best = -1;
    size_t max_ws = 0;
    for (int i = 0; i < n_res; i++)
        max_ws = res[i].workspaceSize > max_ws ? res[i].workspaceSize : max_ws;
    if (cudaMalloc(&a, (size_t)(d->m * d->k) * es) != cudaSuccess ||
        cudaMalloc(&b, (size_t)(d->k * d->n) * es) != cudaSuccess ||
        cudaMalloc(&y, (size_t)(d->m * d->n) * es) != cudaSuccess ||
        (max_ws && cudaMalloc(&ws, max_ws) != cudaSuccess)) {
        cudaGetLastError();
        goto out;
    }
    /* Random data: tensor cores draw (and clock) differently on zeros. */
    infd_cuda_fill_random(st, a, (size_t)(d->m * d->k), kind, 1);
    infd_cuda_fill_random(st, b, (size_t)(d->k * d->n), kind, 2);
    infd_cuda_fill_random(st, y, (size_t)(d->m * d->n), kind, 3);
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    *best_ms = 1e30f;
    for (int i = 0; i < n_res; i++) {
        const float beta = d->has_res ? 1.0f : 0.0f;
        bool ok = true;
        for (int r = 0; r < 7 && ok; r++) {
            if (r == 2)
                cudaEventRecord(e0, st->s);
            ok = cublasLtMatmul(st->lt, g->op, &d->alpha, b, g->la, a, g->lb, &beta, y, g->lc, y,
                                g->lc, &res[i].algo, ws, res[i].workspaceSize,
                                st->s) == CUBLAS_STATUS_SUCCESS;
        }
        float ms = 0.0f;
        cudaEventRecord(e1, st->s);
        ok = ok && cudaEventSynchronize(e1) == cudaSuccess &&
             cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
        cudaGetLastError();
        if (ok && ms / 5.0f < *best_ms) {
            *best_ms = ms / 5.0f;
            best = i;
        }
    }
out:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaStreamSynchronize(st->s);
    cudaGetLastError();
    cudaFree(a);
    cudaFree(b);
    cudaFree(y);
    cudaFree(ws);
    return best;
}

extern "C" infd_cuda_gemm *infd_cuda_gemm_create(const infd_cuda_gemm_desc *d,
                                                 size_t *workspace_bytes, float *ms, char *why,
                                                 size_t why_n)
{
    infd_cuda_gemm *g = (infd_cuda_gemm *)calloc(1, sizeof(*g));
    cublasLtMatmulPreference_t pref = NULL;
    infd_cuda_stream *st = NULL;
    cublasLtMatmulHeuristicResult_t res[8];
    int n_res = 0;
    cublasLtEpilogue_t epi;
    cublasOperation_t ta, tb;
    cudaDataType_t dt;
    infd_cuda_fmt fmt = !d->fp16  ? INFD_CUDA_FMT_F32_NCHW /* the bias's and B's element type */
                        : d->bf16 ? INFD_CUDA_FMT_BF16_NHWC
                                  : INFD_CUDA_FMT_F16_NHWC;
    bool checked = false; /* the record's algorithm, taken */
    size_t max_ws = MAX_WORKSPACE;
    int pick = 0;
    bool batched = d->batch > 1, tune = d->tune && !batched;
    uint32_t align = d->align_bytes >= 4 && d->align_bytes <= 256 ? d->align_bytes : 16;
    if (!g) {
        snprintf(why, why_n, "out of memory");
        return NULL;
    }
    g->d = *d;
    if (batched && (d->fp16 || d->host_bias || d->batch > 2147483647LL)) {
        snprintf(why, why_n, "a batch of %lld %s matmuls is not supported", (long long)d->batch,
                 d->fp16 ? "16-bit" : "biased");
        goto fail;
    }
    if (d->fp16 && !d->host_b) {
        snprintf(why, why_n, "an FP16 matmul needs constant B");
        goto fail;
    }
    if (d->host_bias && !(g->bias = infd_cuda_upload(d->host_bias, (size_t)d->n, fmt, why, why_n)))
        goto fail;
    if (d->fp16 && !(g->b16 = infd_cuda_upload(d->host_b, (size_t)(d->k * d->n), fmt, why, why_n)))
        goto fail;
    dt = !d->fp16 ? CUDA_R_32F : d->bf16 ? CUDA_R_16BF : CUDA_R_16F;
    /* FP32 data: CUBLAS_COMPUTE_32F is strict FP32 (cuBLASLt has no math
     * mode on its handle; the compute type decides), _FAST_TF32 when the
     * plan asked for TF32. 16-bit data: FP32 accumulation. */
    CHECK(cublasLtMatmulDescCreate(&g->op,
                                   d->fp16          ? CUBLAS_COMPUTE_32F
                                   : d->fast16 == 1 ? CUBLAS_COMPUTE_32F_FAST_16F
                                   : d->fast16 == 2 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                   : d->tf32        ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                    : CUBLAS_COMPUTE_32F,
                                   CUDA_R_32F));
    /* cuBLASLt's A is our B: stored [N,K] (trans_b) is column-major [K,N],
     * transposed to [N,K]; stored [K,N] is column-major [N,K] as is. */
    ta = d->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    tb = d->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    CHECK(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CHECK(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    epi = g->bias ? (d->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                  : (d->relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    CHECK(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (g->bias)
        CHECK(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                             sizeof(g->bias)));
    if (d->trans_b)
        CHECK(cublasLtMatrixLayoutCreate(&g->la, dt, d->k, d->n, d->k));
    else
        CHECK(cublasLtMatrixLayoutCreate(&g->la, dt, d->n, d->k, d->n));
    if (d->trans_a)
        CHECK(cublasLtMatrixLayoutCreate(&g->lb, dt, d->m, d->k, d->m));
    else
        CHECK(cublasLtMatrixLayoutCreate(&g->lb, dt, d->k, d->m, d->k));
    CHECK(cublasLtMatrixLayoutCreate(&g->lc, dt, d->n, d->m, d->n));
    if (batched) {
        CHECK(set_batch(g->la, (int32_t)d->batch, d->stride_b));
        CHECK(set_batch(g->lb, (int32_t)d->batch, d->stride_a));
        CHECK(set_batch(g->lc, (int32_t)d->batch, d->stride_y));
    }
    CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &max_ws, sizeof(max_ws)));
    /* cuBLASLt assumes 256-byte aligned pointers unless told. */
    for (int i = 0; i < 4; i++) {
        static const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES
        };
        CHECK(cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align, sizeof(align)));
    }
    st = (infd_cuda_stream *)infd_cuda_compile_stream_lock(why, why_n);
    if (!st)
        goto fail;
    if (d->algo) { /* a record's algorithm, when cuBLASLt still takes it here */
        cublasLtMatmulAlgo_t algo;
        memcpy(&algo, d->algo, sizeof(algo));
        memset(&res[0], 0, sizeof(res[0]));
        checked = cublasLtMatmulAlgoCheck(st->lt, g->op, g->la, g->lb, g->lc, g->lc, &algo,
                                          &res[0]) == CUBLAS_STATUS_SUCCESS &&
                  res[0].workspaceSize <= max_ws;
        res[0].algo = algo;
        pick = d->pick;
    }
    if (!checked) {
        cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(st->lt, g->op, g->la, g->lb, g->lc, g->lc,
                                                          pref, 8, res, &n_res);
        pick = 0;
        if (s == CUBLAS_STATUS_SUCCESS && n_res > 0 && !tune)
            pick = d->pick < 0 ? 0 : d->pick < n_res ? d->pick : n_res - 1;
        if (s == CUBLAS_STATUS_SUCCESS && n_res > 0 && tune) {
            float best = 0.0f;
            pick = time_candidates(g, st, res, n_res, &best);
            if (ms)
                *ms = best;
        }
        if (s != CUBLAS_STATUS_SUCCESS || n_res == 0 || pick < 0) {
            infd_cuda_compile_stream_unlock();
            snprintf(why, why_n,
                     "cuBLASLt has no algorithm for %lld %lldx%lldx%lld matmul(s) (status %d)",
                     (long long)(batched ? d->batch : 1), (long long)d->m, (long long)d->n,
                     (long long)d->k, (int)s);
            goto fail;
        }
    }
    infd_cuda_compile_stream_unlock();
    g->pick = pick; /* the record's, when its algorithm (in res[0]) was taken */
    g->algo = res[checked ? 0 : pick].algo;
    g->ws_bytes = res[checked ? 0 : pick].workspaceSize;
    cublasLtMatmulPreferenceDestroy(pref);
    *workspace_bytes = g->ws_bytes;
    return g;
fail:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    infd_cuda_gemm_destroy(g);
    return NULL;
}

extern "C" int infd_cuda_gemm_pick(const infd_cuda_gemm *g)
{
    return g->pick;
}

static_assert(sizeof(cublasLtMatmulAlgo_t) == INFD_CUDA_GEMM_ALGO_BYTES,
              "INFD_CUDA_GEMM_ALGO_BYTES is cublasLtMatmulAlgo_t's size");

extern "C" const void *infd_cuda_gemm_algo(const infd_cuda_gemm *g)
{
    return &g->algo;
}

extern "C" void infd_cuda_gemm_run(const infd_cuda_gemm *g, void *stream, const void *a,
                                   const void *b, const void *r, void *y, void *workspace)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    const float beta = g->d.has_res ? 1.0f : 0.0f;
    if (g->b16)
        b = g->b16;
    cublasStatus_t s =
        cublasLtMatmul(st->lt, g->op, &g->d.alpha, b, g->la, a, g->lb, &beta, g->d.has_res ? r : y,
                       g->lc, y, g->lc, &g->algo, workspace, g->ws_bytes, st->s);
    if (s != CUBLAS_STATUS_SUCCESS)
        infd_cuda_stream_fail(st, "cublasLtMatmul %lldx%lldx%lld: status %d", (long long)g->d.m,
                              (long long)g->d.n, (long long)g->d.k, (int)s);
}
