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

#include "cuda_gemm.h"
#include "cuda_runtime_impl.h"

#define MAX_WORKSPACE ((size_t)32 << 20)

struct infd_cuda_gemm {
    infd_cuda_gemm_desc d;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    size_t ws_bytes;
    float *bias; /* device copy, or NULL */
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
    if (g->bias)
        cudaFree(g->bias);
    free(g);
}

#define CHECK(call)                                                       \
    do {                                                                  \
        cublasStatus_t s_ = (call);                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                \
            snprintf(why, why_n, "%s: cuBLAS status %d", #call, (int)s_); \
            goto fail;                                                    \
        }                                                                 \
    } while (0)

extern "C" infd_cuda_gemm *infd_cuda_gemm_create(const infd_cuda_gemm_desc *d,
                                                 size_t *workspace_bytes, char *why, size_t why_n)
{
    infd_cuda_gemm *g = (infd_cuda_gemm *)calloc(1, sizeof(*g));
    cublasLtMatmulPreference_t pref = NULL;
    infd_cuda_stream *st = NULL;
    cublasLtMatmulHeuristicResult_t res[8];
    int n_res = 0;
    cublasLtEpilogue_t epi;
    cublasOperation_t ta, tb;
    size_t max_ws = MAX_WORKSPACE;
    if (!g) {
        snprintf(why, why_n, "out of memory");
        return NULL;
    }
    g->d = *d;
    if (d->host_bias) {
        if (cudaMalloc(&g->bias, (size_t)d->n * 4) != cudaSuccess ||
            cudaMemcpy(g->bias, d->host_bias, (size_t)d->n * 4, cudaMemcpyHostToDevice) !=
                cudaSuccess) {
            cudaGetLastError();
            snprintf(why, why_n, "out of device memory for the bias");
            goto fail;
        }
    }
    CHECK(cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
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
        CHECK(cublasLtMatrixLayoutCreate(&g->la, CUDA_R_32F, d->k, d->n, d->k));
    else
        CHECK(cublasLtMatrixLayoutCreate(&g->la, CUDA_R_32F, d->n, d->k, d->n));
    if (d->trans_a)
        CHECK(cublasLtMatrixLayoutCreate(&g->lb, CUDA_R_32F, d->m, d->k, d->m));
    else
        CHECK(cublasLtMatrixLayoutCreate(&g->lb, CUDA_R_32F, d->k, d->m, d->k));
    CHECK(cublasLtMatrixLayoutCreate(&g->lc, CUDA_R_32F, d->n, d->m, d->n));
    CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &max_ws, sizeof(max_ws)));
    st = (infd_cuda_stream *)infd_cuda_compile_stream_lock(why, why_n);
    if (!st)
        goto fail;
    {
        cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(st->lt, g->op, g->la, g->lb, g->lc, g->lc,
                                                          pref, 8, res, &n_res);
        infd_cuda_compile_stream_unlock();
        if (s != CUBLAS_STATUS_SUCCESS || n_res == 0) {
            snprintf(why, why_n,
                     "cuBLASLt has no algorithm for a %lldx%lldx%lld matmul (status %d)",
                     (long long)d->m, (long long)d->n, (long long)d->k, (int)s);
            goto fail;
        }
    }
    g->algo = res[0].algo;
    g->ws_bytes = res[0].workspaceSize;
    cublasLtMatmulPreferenceDestroy(pref);
    *workspace_bytes = g->ws_bytes;
    return g;
fail:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    infd_cuda_gemm_destroy(g);
    return NULL;
}

extern "C" void infd_cuda_gemm_run(const infd_cuda_gemm *g, void *stream, const float *a,
                                   const float *b, const float *r, float *y, void *workspace)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    const float beta = g->d.has_res ? 1.0f : 0.0f;
    cublasStatus_t s = cublasLtMatmul(st->lt, g->op, &g->d.alpha, b, g->la, a, g->lb, &beta,
                                      g->d.has_res ? (const void *)r : (const void *)y, g->lc, y,
                                      g->lc, &g->algo, workspace, g->ws_bytes, st->s);
    if (s != CUBLAS_STATUS_SUCCESS)
        infd_cuda_stream_fail(st, "cublasLtMatmul %lldx%lldx%lld: status %d", (long long)g->d.m,
                              (long long)g->d.n, (long long)g->d.k, (int)s);
}
