/*
 * cuda_gemm.h - C-linkage FP32 matrix multiply on cuBLASLt (cuda_gemm.cu),
 * row-major like ONNX: Y[M,N] = op(A)[M,K] * op(B)[K,N] (+ bias[N])
 * (+ R[M,N]), then ReLU when asked, all in the cuBLASLt epilogue. FP32
 * compute (CUBLAS_COMPUTE_32F: no TF32).
 */
#ifndef INFD_BACKENDS_CUDA_GEMM_H
#define INFD_BACKENDS_CUDA_GEMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct infd_cuda_gemm_desc {
    int64_t m, n, k;
    int trans_a, trans_b;   /* A stored [K,M] / B stored [N,K] */
    float alpha;            /* scales op(A) * op(B) */
    const float *host_bias; /* N floats copied to the device at create, or NULL */
    int relu;               /* ReLU after bias and residual */
    int has_res;            /* R is added (beta = 1) */
} infd_cuda_gemm_desc;

typedef struct infd_cuda_gemm infd_cuda_gemm;

/* NULL with the reason in `why` when cuBLASLt has no algorithm. */
infd_cuda_gemm *infd_cuda_gemm_create(const infd_cuda_gemm_desc *d, size_t *workspace_bytes,
                                      char *why, size_t why_n);

/* r may be NULL unless has_res. */
void infd_cuda_gemm_run(const infd_cuda_gemm *g, void *stream, const float *a, const float *b,
                        const float *r, float *y, void *workspace);

void infd_cuda_gemm_destroy(infd_cuda_gemm *g);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_GEMM_H */
