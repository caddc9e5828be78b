/*
 * cuda_gemm.h - C-linkage matrix multiply on cuBLASLt (cuda_gemm.cu),
 * row-major like ONNX: Y[M,N] = op(A)[M,K] * op(B)[K,N] (+ bias[N])
 * (+ R[M,N]), then ReLU when asked, all in the cuBLASLt epilogue. FP32
 * data and compute (CUBLAS_COMPUTE_32F: no TF32), FP32 data on TF32 tensor
 * cores with FP32 accumulation when asked (tf32:
 * CUBLAS_COMPUTE_32F_FAST_TF32), or FP16 data with FP32 accumulation on
 * tensor cores (a 1x1 convolution over FP16 NHWC).
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
    /* FP16: A, R and Y are FP16; B is host_b (required: K*N floats as
     * stored, converted to FP16 and kept on the device by the gemm; run's
     * b is ignored) and the bias is kept in FP16. */
    int fp16;
    int bf16; /* with fp16: BF16 instead of FP16 */
    int tf32; /* without fp16: TF32 tensor cores allowed (a TF32 plan) */
    /* Without fp16, in an FP16 (1) or BF16 (2) plan: FP32 data multiplied on
     * 16-bit tensor cores (CUBLAS_COMPUTE_32F_FAST_16F / _16BF: inputs
     * rounded to 16 bits, FP32 sums and output). */
    int fast16;
    const float *host_b;
    /* tune: time the heuristic's candidates on the compile stream and keep
     * the fastest, reporting its time in *ms (may be NULL); else take
     * candidate `pick` (a tuning record; the last one when fewer). */
    int tune;
    int pick;
    /* The algorithm a tuning record kept (INFD_CUDA_GEMM_ALGO_BYTES from
     * infd_cuda_gemm_algo), or NULL. Taken, without asking the heuristic,
     * when cuBLASLt's check accepts it for this description: the first
     * heuristic query of a process costs 70-110 ms (plan load, issue #6). */
    const void *algo;
    /* Strided batches (FP32, run-time B, no bias; batch 0 or 1: one
     * product): `batch` products, A_i at a + i * stride_a elements, B_i at
     * b + i * stride_b, Y_i at y + i * stride_y. Not timed (tune is
     * ignored): the heuristic's candidate `pick` runs. */
    int64_t batch, stride_a, stride_b, stride_y;
    /* The alignment (4 to 256, a power of two) every pointer a run passes
     * is known to have; 0: 16 (plan pointers are 64-byte aligned, timing
     * scratch more). cuBLASLt then picks only kernels that can read them. */
    uint32_t align_bytes;
} infd_cuda_gemm_desc;

typedef struct infd_cuda_gemm infd_cuda_gemm;

/* NULL with the reason in `why` when cuBLASLt has no algorithm. With
 * d->tune, *ms gets the fastest candidate's time per run (ms may be NULL). */
infd_cuda_gemm *infd_cuda_gemm_create(const infd_cuda_gemm_desc *d, size_t *workspace_bytes,
                                      float *ms, char *why, size_t why_n);

/* r may be NULL unless has_res. Pointers are FP16 data for an FP16 gemm. */
void infd_cuda_gemm_run(const infd_cuda_gemm *g, void *stream, const void *a, const void *b,
                        const void *r, void *y, void *workspace);

void infd_cuda_gemm_destroy(infd_cuda_gemm *g);

/* The heuristic candidate the gemm runs (for a tuning record). */
int infd_cuda_gemm_pick(const infd_cuda_gemm *g);

/* Bytes of a cuBLASLt algorithm (cublasLtMatmulAlgo_t: opaque, valid for
 * the same cuBLASLt and GPU, which a plan file's fingerprint pins). */
#define INFD_CUDA_GEMM_ALGO_BYTES 64

/* The algorithm the gemm runs, INFD_CUDA_GEMM_ALGO_BYTES bytes owned by g
 * (for a tuning record; given back as infd_cuda_gemm_desc.algo). */
const void *infd_cuda_gemm_algo(const infd_cuda_gemm *g);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_GEMM_H */
