/*
 * cuda_bmm.cu - strided batched FP32 matmul on cuBLASLt (cuda_extra.h), for
 * MatMul with batched operands (attention's Q K^T and P V).
 *
 * Row-major Y = A B is column-major Y^T = B^T A^T, as in cuda_gemm.cu:
 * cuBLASLt's "A" is our B (column-major [n, k], leading dim n), its "B" our
 * A ([k, m], leading dim k), its C/D our Y ([n, m], leading dim n). Each
 * layout carries the batch count and its own batch stride. FP32 compute
 * (CUBLAS_COMPUTE_32F: no TF32), or TF32 tensor cores with FP32
 * accumulation when the plan asked for them (CUBLAS_COMPUTE_32F_FAST_TF32);
 * no epilogue.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cuda_extra.h"
#include "cuda_runtime_impl.h"

#define MAX_WORKSPACE ((size_t)32 << 20)

struct infd_cuda_bmm {
    infd_cuda_bmm_desc d;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    size_t ws_bytes;
};

extern "C" void infd_cuda_bmm_destroy(infd_cuda_bmm *g)
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

static cublasStatus_t set_batch(cublasLtMatrixLayout_t l, int32_t count, int64_t stride)
{
    cublasStatus_t s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                        &count, sizeof(count));
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    return cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                            sizeof(stride));
}

extern "C" infd_cuda_bmm *infd_cuda_bmm_create(const infd_cuda_bmm_desc *d, size_t *workspace_bytes,
                                               char *why, size_t why_n)
{
    infd_cuda_bmm *g = (infd_cuda_bmm *)calloc(1, sizeof(*g));
    cublasLtMatmulPreference_t pref = NULL;
    infd_cuda_stream *st = NULL;
    cublasLtMatmulHeuristicResult_t res[8];
    int n_res = 0;
    cublasOperation_t tn = CUBLAS_OP_N;
    size_t max_ws = MAX_WORKSPACE;
    uint32_t align = d->align_bytes >= 4 && d->align_bytes <= 256 ? d->align_bytes : 4;
    if (!g) {
        snprintf(why, why_n, "out of memory");
        return NULL;
    }
    g->d = *d;
    if (d->batch < 1 || d->batch > 2147483647LL) {
        snprintf(why, why_n, "batch count %lld is out of range", (long long)d->batch);
        goto fail;
    }
    CHECK(cublasLtMatmulDescCreate(
        &g->op, d->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CHECK(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &tn, sizeof(tn)));
    CHECK(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &tn, sizeof(tn)));
    CHECK(cublasLtMatrixLayoutCreate(&g->la, CUDA_R_32F, d->n, d->k, d->n));
    CHECK(cublasLtMatrixLayoutCreate(&g->lb, CUDA_R_32F, d->k, d->m, d->k));
    CHECK(cublasLtMatrixLayoutCreate(&g->lc, CUDA_R_32F, d->n, d->m, d->n));
    if (d->batch > 1) {
        CHECK(set_batch(g->la, (int32_t)d->batch, d->stride_b));
        CHECK(set_batch(g->lb, (int32_t)d->batch, d->stride_a));
        CHECK(set_batch(g->lc, (int32_t)d->batch, d->stride_y));
    }
    CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &max_ws, sizeof(max_ws)));
    /* Pointers offset into a batch (the glue's outer loop) may be aligned
     * to less than the 256 bytes the heuristic assumes by default. */
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                               &align, sizeof(align)));
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                               &align, sizeof(align)));
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                               &align, sizeof(align)));
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                               &align, sizeof(align)));
    st = (infd_cuda_stream *)infd_cuda_compile_stream_lock(why, why_n);
    if (!st)
        goto fail;
    {
        cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(st->lt, g->op, g->la, g->lb, g->lc, g->lc,
                                                          pref, 8, res, &n_res);
        infd_cuda_compile_stream_unlock();
        if (s != CUBLAS_STATUS_SUCCESS || n_res == 0) {
            snprintf(why, why_n,
                     "cuBLASLt has no algorithm for %lld batched %lldx%lldx%lld matmuls "
                     "(status %d)",
                     (long long)d->batch, (long long)d->m, (long long)d->n, (long long)d->k,
                     (int)s);
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
    infd_cuda_bmm_destroy(g);
    return NULL;
}

extern "C" void infd_cuda_bmm_run(const infd_cuda_bmm *g, void *stream, const float *a,
                                  const float *b, float *y, void *workspace)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s = cublasLtMatmul(st->lt, g->op, &one, b, g->la, a, g->lb, &zero, y, g->lc, y,
                                      g->lc, &g->algo, workspace, g->ws_bytes, st->s);
    if (s != CUBLAS_STATUS_SUCCESS)
        infd_cuda_stream_fail(st, "cublasLtMatmul (batched %lld, %lldx%lldx%lld): status %d",
                              (long long)g->d.batch, (long long)g->d.m, (long long)g->d.n,
                              (long long)g->d.k, (int)s);
}
