/*
 * cuda_gemm.c - Gemm and MatMul (FP32) on cuBLASLt: the node glue for
 * cuda_gemm.cu.
 *
 * Gemm: 2-D A and B with transA/transB and alpha; C is either a constant
 * bias of N values (scaled by beta at compile time, added in the cuBLASLt
 * epilogue) or a full [M,N] matrix with beta 1 (added as cuBLASLt's C).
 * MatMul: A [..., M, K] times a 2-D B [K, N], the leading dims folded into
 * M (a linear layer over a batch). ReLU fuses into the epilogue; other
 * fused activations run as one kernel after it. Strict FP32
 * (CUBLAS_COMPUTE_32F) in FP32 plans; TF32 tensor cores in a TF32 one
 * (CUBLAS_COMPUTE_32F_FAST_TF32, kernel "cublasLt:matmul_tf32"); 16-bit
 * tensor cores in FP16 and BF16 plans (CUBLAS_COMPUTE_32F_FAST_16F / _16BF,
 * "cublasLt:matmul_fast16f" / "_fast16bf": the FP32 operands rounded to 16
 * bits by cuBLASLt, FP32 sums and output).
 */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_gemm.h"
#include "backends/cuda/cuda_ops.h"
#include "core/alloc.h"
#include "core/common.h"

typedef struct gemm_kernel {
    infd_cuda_kernel base;
    infd_cuda_gemm *gemm;
    int res_input;      /* index of the input added as cuBLASLt's C, or -1 */
    infd_cuda_act post; /* activation run after the matmul (not ReLU) */
    float alpha, beta;
    int64_t n_out;
} gemm_kernel;

/* The layout a node asks for, resolved. */
typedef struct gemm_plan {
    int64_t m, n, k;
    int trans_a, trans_b;
    float alpha;
    int bias_input; /* constant bias input (Gemm's C), or -1 */
    float bias_scale;
    int res_input; /* input added as a full matrix, or -1 */
    infd_cuda_act act;
    float act_alpha, act_beta;
} gemm_plan;

static bool plan_gemm(const infd_kernel_args *a, gemm_plan *p, infd_error *why)
{
    bool is_gemm = strcmp(a->node->op_type, "Gemm") == 0;
    memset(p, 0, sizeof(*p));
    p->bias_input = p->res_input = -1;
    p->alpha = 1.0f;
    if (a->n_inputs < 2 || !a->inputs[0] || !a->inputs[1] || a->n_outputs != 1) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "needs A and B");
        return false;
    }
    if (!infd_cuda_fp32_only(a, a->n_inputs, why) ||
        !infd_cuda_fused_activation(a, &p->act, &p->act_alpha, &p->act_beta, why))
        return false;
    const infd_ir_value *A = a->inputs[0], *B = a->inputs[1], *Y = a->outputs[0];
    bool sum = infd_cuda_fused_sum(a);
    if (is_gemm) {
        int64_t ta = 0, tb = 0;
        float beta = 1.0f;
        if (infd_ir_attr_int(a->g, a->node, "transA", 0, &ta, why) != INFD_STATUS_OK ||
            infd_ir_attr_int(a->g, a->node, "transB", 0, &tb, why) != INFD_STATUS_OK ||
            infd_ir_attr_float(a->g, a->node, "alpha", 1.0f, &p->alpha, why) != INFD_STATUS_OK ||
            infd_ir_attr_float(a->g, a->node, "beta", 1.0f, &beta, why) != INFD_STATUS_OK)
            return false;
        if (A->shape.rank != 2 || B->shape.rank != 2) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "A and B must be 2-D");
            return false;
        }
        p->trans_a = ta != 0;
        p->trans_b = tb != 0;
        p->m = A->shape.dims[ta ? 1 : 0].value;
        p->k = A->shape.dims[ta ? 0 : 1].value;
        p->n = B->shape.dims[tb ? 0 : 1].value;
        if (B->shape.dims[tb ? 1 : 0].value != p->k) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "K of A and B differ");
            return false;
        }
        const infd_ir_value *C = a->n_inputs > 2 ? a->inputs[2] : NULL;
        if (C && beta != 0.0f) {
            int64_t nc = infd_node_numel(C);
            bool row = nc == p->n &&
                       (C->shape.rank == 1 || (C->shape.rank == 2 && C->shape.dims[0].value == 1));
            if (row && C->data) {
                p->bias_input = 2;
                p->bias_scale = beta;
            } else if (nc == p->m * p->n && C->shape.rank == 2 && beta == 1.0f && !sum) {
                p->res_input = 2;
            } else {
                infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                                "C must be a constant row of N values or a full [M,N] "
                                "matrix with beta 1");
                return false;
            }
        }
        if (sum)
            p->res_input = 3;
    } else {
        if (B->shape.rank != 2 || A->shape.rank < 1) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "CUDA MatMul takes a 2-D B (a batched B is not supported yet)");
            return false;
        }
        p->k = A->shape.dims[A->shape.rank - 1].value;
        p->n = B->shape.dims[1].value;
        p->m = p->k ? infd_node_numel(A) / p->k : 0;
        if (B->shape.dims[0].value != p->k) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "K of A and B differ");
            return false;
        }
        if (sum)
            p->res_input = 2;
    }
    if (p->m * p->n != infd_node_numel(Y) || p->m < 1 || p->n < 1 || p->k < 1) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "a %lldx%lldx%lld matmul into %lld values is not supported",
                        (long long)p->m, (long long)p->n, (long long)p->k,
                        (long long)infd_node_numel(Y));
        return false;
    }
    if (p->res_input >= 0 && (p->res_input >= a->n_inputs || !a->inputs[p->res_input] ||
                              infd_node_numel(a->inputs[p->res_input]) != p->m * p->n)) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "the added matrix must be shaped like the output");
        return false;
    }
    return true;
}

static bool gemm_supports(const infd_kernel_args *a, infd_error *why)
{
    gemm_plan p;
    return plan_gemm(a, &p, why);
}

static void gemm_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const gemm_kernel *k = (const gemm_kernel *)base;
    const float *r = k->res_input >= 0 ? io->inputs[k->res_input] : NULL;
    infd_cuda_gemm_run(k->gemm, io->stream, io->inputs[0], io->inputs[1], r, io->outputs[0],
                       io->workspace);
    if (k->post != INFD_CUDA_ACT_NONE)
        infd_cuda_unary(io->stream, k->post, k->alpha, k->beta, io->outputs[0], io->outputs[0],
                        k->n_out);
}

static void gemm_fini(infd_cuda_kernel *base)
{
    infd_cuda_gemm_destroy(((gemm_kernel *)base)->gemm);
}

/* The math of a plan's FP32 matmuls: 0 strict FP32, 1 TF32, 2 and 3 on
 * FP16 and BF16 tensor cores (FP16 and BF16 plans). */
static int32_t math_of(infd_precision p)
{
    return p == INFD_PRECISION_TF32   ? 1
           : p == INFD_PRECISION_FP16 ? 2
           : p == INFD_PRECISION_BF16 ? 3
                                      : 0;
}

/* The tuning record a Gemm/MatMul keeps: "gmm1", its math (int32, math_of),
 * then cuBLASLt's algorithm (INFD_CUDA_GEMM_ALGO_BYTES), which a plan file
 * hands back so that loading skips cuBLASLt's heuristic. */
#define GEMM_TAG          "gmm1"
#define GEMM_RECORD_BYTES (8 + INFD_CUDA_GEMM_ALGO_BYTES)

/* The algorithm a record of this precision keeps, or NULL. */
static const void *recorded_algo(const infd_kernel_args *a, int32_t math)
{
    int32_t t;
    if (!a->tuning || a->tuning_bytes != GEMM_RECORD_BYTES || memcmp(a->tuning, GEMM_TAG, 4) != 0)
        return NULL;
    memcpy(&t, a->tuning + 4, sizeof(t));
    return t == math ? a->tuning + 8 : NULL;
}

static infd_status gemm_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    gemm_plan p;
    char why[256] = "";
    float *bias = NULL;
    if (!plan_gemm(a, &p, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    gemm_kernel *k = (gemm_kernel *)infd_cuda_kernel_new(sizeof(gemm_kernel), "cublasLt:matmul",
                                                         gemm_run, gemm_fini);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    k->res_input = p.res_input;
    k->post = p.act == INFD_CUDA_ACT_RELU ? INFD_CUDA_ACT_NONE : p.act;
    k->alpha = p.act_alpha;
    k->beta = p.act_beta;
    k->n_out = p.m * p.n;
    if (p.bias_input >= 0) {
        const float *c = a->inputs[p.bias_input]->data;
        bias = infd_malloc(sizeof(float) * (size_t)p.n);
        if (!bias) {
            infd_free(k);
            return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        }
        for (int64_t i = 0; i < p.n; i++)
            bias[i] = c[i] * p.bias_scale;
    }
    infd_cuda_gemm_desc d = { .m = p.m,
                              .n = p.n,
                              .k = p.k,
                              .trans_a = p.trans_a,
                              .trans_b = p.trans_b,
                              .alpha = p.alpha,
                              .host_bias = bias,
                              .relu = p.act == INFD_CUDA_ACT_RELU,
                              .has_res = p.res_input >= 0,
                              .tf32 = a->precision == INFD_PRECISION_TF32,
                              .fast16 = a->precision == INFD_PRECISION_FP16   ? 1
                                        : a->precision == INFD_PRECISION_BF16 ? 2
                                                                              : 0 };
    d.algo = recorded_algo(a, math_of(a->precision));
    size_t ws = 0;
    if (d.tf32)
        k->base.base.name = "cublasLt:matmul_tf32";
    else if (d.fast16)
        k->base.base.name = d.fast16 == 1 ? "cublasLt:matmul_fast16f" : "cublasLt:matmul_fast16bf";
    k->gemm = infd_cuda_gemm_create(&d, &ws, NULL, why, sizeof(why));
    infd_free(bias);
    if (!k->gemm) {
        infd_free(k);
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED, "%s", why);
    }
    k->base.base.workspace_bytes = ws;
    uint8_t head[8];
    int32_t math = math_of(a->precision);
    memcpy(head, GEMM_TAG, 4);
    memcpy(head + 4, &math, 4);
    infd_cuda_kernel_keep_tuning(&k->base, head, sizeof(head), infd_cuda_gemm_algo(k->gemm),
                                 INFD_CUDA_GEMM_ALGO_BYTES);
    if (p.bias_input >= 0) /* copied into the epilogue's bias at create */
        k->base.base.unread_inputs = 1u << p.bias_input;
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

const infd_cuda_op infd_cuda_ops_gemm[] = {
    { "Gemm", gemm_supports, gemm_compile },
    { "MatMul", gemm_supports, gemm_compile },
    { NULL, NULL, NULL },
};
