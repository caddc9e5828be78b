/*
 * cuda_dwpw.c - the node glue of the fused depthwise + 1x1 block
 * (cuda_dwpw.h): the _DwPwConv node that infd_pass_fuse_depthwise
 * (graph/passes.h) makes of a depthwise Conv and the 1x1 Conv reading it.
 *
 * Inputs: 0 x, 1 the 1x1 weights [k, c, 1, 1], 2 their bias [k] (or
 * omitted), 3 the residual (with _fused_sum; or omitted), 4 the depthwise
 * weights [c, 1, r, s], 5 their bias [c] (or omitted). The window
 * attributes (kernel_shape, strides, pads, dilations, auto_pad, group) are
 * the depthwise Conv's, and its activation as _dw_activation, _dw_alpha and
 * _dw_beta; the activation hooks the 1x1 Conv's. residual_pool
 * = 2: input 3 is max-pooled 2x2 with stride 2 first. The residual may have
 * fewer channels than the output (the rest add 0).
 *
 * FP16 plans only (the kernel is FP16). x, the residual and y are read and
 * written in the backend's FP16 NHWC layout; where the plan keeps one of
 * them plain, it is converted through the workspace.
 */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_dwpw.h"
#include "backends/cuda/cuda_nhwc.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_runtime.h"
#include "core/alloc.h"
#include "core/common.h"

typedef struct dwpw_kernel {
    infd_cuda_kernel base;
    infd_cuda_dwpw *block;
    infd_cuda_dwpw_desc d;
    infd_cuda_fmt fx, fr, fy;
    size_t xh_bytes, rh_bytes; /* workspace for converted x and residual (0: none) */
} dwpw_kernel;

static bool const_of(const infd_ir_value *v, int rank, const int64_t *dims)
{
    if (!v || !v->data || v->dtype != INFD_DTYPE_FP32 || v->shape.rank != rank)
        return false;
    for (int i = 0; i < rank; i++) {
        if (v->shape.dims[i].value != dims[i])
            return false;
    }
    return true;
}

/* The kernel's description of the node, or false with a message. */
static bool describe(const infd_kernel_args *a, infd_cuda_dwpw_desc *d, infd_error *why)
{
    if (a->precision != INFD_PRECISION_FP16) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "the fused depthwise block runs in FP16 plans only");
        return false;
    }
    if (a->n_inputs != 6 || !a->inputs[0] || !a->inputs[1] || !a->inputs[4] || a->n_outputs != 1) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "needs x, the 1x1 weights and the depthwise weights");
        return false;
    }
    if (!infd_cuda_fp32_only(a, a->n_inputs, why))
        return false;
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0], *res = a->inputs[3];
    if (x->shape.rank != 4 || y->shape.rank != 4) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "the fused block is 2-D");
        return false;
    }
    int64_t n = x->shape.dims[0].value, c = x->shape.dims[1].value, k = y->shape.dims[1].value;
    int64_t r = a->inputs[4]->shape.rank == 4 ? a->inputs[4]->shape.dims[2].value : 0;
    int64_t s = a->inputs[4]->shape.rank == 4 ? a->inputs[4]->shape.dims[3].value : 0;
    int64_t group = 0, pool = 0;
    infd_cuda_window w;
    infd_cuda_act act, dw_act;
    float alpha, beta, dw_alpha, dw_beta;
    if (infd_ir_attr_int(a->g, a->node, "group", 1, &group, why) != INFD_STATUS_OK ||
        infd_ir_attr_int(a->g, a->node, "residual_pool", 0, &pool, why) != INFD_STATUS_OK)
        return false;
    if (group != c || y->shape.dims[0].value != n ||
        !const_of(a->inputs[1], 4, (int64_t[]){ k, c, 1, 1 }) ||
        !const_of(a->inputs[4], 4, (int64_t[]){ c, 1, r, s }) ||
        (a->inputs[2] && !const_of(a->inputs[2], 1, &k)) ||
        (a->inputs[5] && !const_of(a->inputs[5], 1, &c))) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "weights, biases or group do not match %lld channels in, %lld out",
                        (long long)c, (long long)k);
        return false;
    }
    if (!infd_cuda_conv_window(a, a->inputs[4], &w, why) ||
        !infd_cuda_fused_activation(a, &act, &alpha, &beta, why) ||
        !infd_cuda_dw_activation(a, &dw_act, &dw_alpha, &dw_beta, why))
        return false;
    bool sum = infd_cuda_fused_sum(a);
    if (sum != (res != NULL) || (res && res->shape.rank != 4) || (pool && !res)) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "bad residual");
        return false;
    }
    *d = (infd_cuda_dwpw_desc){ .n = (int)n,
                                .h = (int)x->shape.dims[2].value,
                                .w = (int)x->shape.dims[3].value,
                                .c = (int)c,
                                .oh = (int)y->shape.dims[2].value,
                                .ow = (int)y->shape.dims[3].value,
                                .k = (int)k,
                                .r = (int)r,
                                .s = (int)s,
                                .sh = (int)w.s[0],
                                .sw = (int)w.s[1],
                                .pt = (int)w.pl[0],
                                .pl = (int)w.pl[1],
                                .dh = (int)w.d[0],
                                .dw = (int)w.d[1],
                                .cres = res ? (int)res->shape.dims[1].value : 0,
                                .res_pool = (int)pool,
                                .rh = res ? (int)res->shape.dims[2].value : 0,
                                .rw = res ? (int)res->shape.dims[3].value : 0,
                                .act = (int)act,
                                .alpha = alpha,
                                .beta = beta,
                                .dw_act = (int)dw_act,
                                .dw_alpha = dw_alpha,
                                .dw_beta = dw_beta };
    if (res && (res->shape.dims[0].value != n || (!pool && (d->rh != d->oh || d->rw != d->ow)))) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "the residual's batch or size differs from the output's");
        return false;
    }
    /* Taken at every size: on BlazeFace FP16 at batch 128 (H100, Nsight
     * Compute) the fused kernel beat the depthwise and 1x1 kernels apart
     * at every block, 51 against 64 us at 64 x 64 x 24 (cuda_dwpw.cu has
     * the forms). INFD_CONV_DISABLE=pwfuse keeps them apart (measuring). */
    if (infd_cuda_conv_disabled("pwfuse")) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "the fused depthwise block is turned off (INFD_CONV_DISABLE)");
        return false;
    }
    /* infd_cuda_dwpw_fits takes a depthwise activation (MobileNetV2's
     * ReLU6) only in the register-tiled form. MobileNetV2 FP16 at batch
     * 128 (H100, Nsight Compute): its first block fused 173 us against 242
     * us apart; its stride-2 block (112 x 112 x 96 -> 56 x 56 x 24) in the
     * tile form 301 us against 228 us apart. */
    char msg[256];
    if (!infd_cuda_dwpw_fits(d, msg, sizeof(msg))) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "%s", msg);
        return false;
    }
    return true;
}

static bool dwpw_supports(const infd_kernel_args *a, infd_error *why)
{
    infd_cuda_dwpw_desc d;
    return describe(a, &d, why);
}

static void dwpw_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const dwpw_kernel *k = (const dwpw_kernel *)base;
    const infd_cuda_dwpw_desc *d = &k->d;
    const void *x = io->inputs[0], *res = d->cres ? io->inputs[3] : NULL;
    void *y = io->outputs[0];
    uint8_t *ws = io->workspace;
    if (k->fx != INFD_CUDA_FMT_F16_NHWC) {
        infd_cuda_nhwc_pack(io->stream, x, k->fx, (infd_cuda_dims){ d->n, d->c, d->h, d->w }, ws,
                            INFD_CUDA_FMT_F16_NHWC, d->h, d->w, 0, 0, d->c);
        x = ws;
        ws += k->xh_bytes;
    }
    if (res && k->fr != INFD_CUDA_FMT_F16_NHWC) {
        infd_cuda_nhwc_pack(io->stream, res, k->fr, (infd_cuda_dims){ d->n, d->cres, d->rh, d->rw },
                            ws, INFD_CUDA_FMT_F16_NHWC, d->rh, d->rw, 0, 0, d->cres);
        res = ws;
        ws += k->rh_bytes;
    }
    if (k->fy == INFD_CUDA_FMT_F16_NHWC) {
        infd_cuda_dwpw_run(k->block, io->stream, x, res, y);
        return;
    }
    infd_cuda_dwpw_run(k->block, io->stream, x, res, ws);
    infd_cuda_nhwc_eltwise(io->stream, (infd_cuda_dims){ d->n, d->k, d->oh, d->ow }, ws,
                           INFD_CUDA_FMT_F16_NHWC, NULL, INFD_CUDA_BIN_ADD, NULL,
                           INFD_CUDA_FMT_F16_NHWC, y, k->fy, INFD_CUDA_ACT_NONE, 0.0f, 0.0f);
}

static void dwpw_fini(infd_cuda_kernel *base)
{
    infd_cuda_dwpw_destroy(((dwpw_kernel *)base)->block);
}

static infd_status dwpw_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    dwpw_kernel *k = (dwpw_kernel *)infd_cuda_kernel_new(sizeof(dwpw_kernel), "cuda:dwpw_fp16",
                                                         dwpw_run, dwpw_fini);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    if (!describe(a, &k->d, err)) {
        infd_free(k);
        return err ? err->code : INFD_STATUS_UNIMPLEMENTED;
    }
    const infd_cuda_dwpw_desc *d = &k->d;
    char why[256] = "";
    k->block = infd_cuda_dwpw_create(d, a->inputs[4]->data,
                                     a->inputs[5] ? a->inputs[5]->data : NULL, a->inputs[1]->data,
                                     a->inputs[2] ? a->inputs[2]->data : NULL, why, sizeof(why));
    if (!k->block) {
        infd_free(k);
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED, "%s", why);
    }
    k->fx = infd_cuda_input_fmt(a, 0);
    k->fr = infd_cuda_input_fmt(a, 3);
    k->fy = a->output_opaque_ok ? INFD_CUDA_FMT_F16_NHWC : INFD_CUDA_FMT_F32_NCHW;
    size_t yn = (size_t)d->n * d->oh * d->ow * d->k;
    if (k->fx != INFD_CUDA_FMT_F16_NHWC)
        k->xh_bytes =
            infd_align_up((size_t)d->n * d->h * d->w * d->c * 2, INFD_WORKSPACE_ALIGNMENT);
    if (d->cres && k->fr != INFD_CUDA_FMT_F16_NHWC)
        k->rh_bytes =
            infd_align_up((size_t)d->n * d->rh * d->rw * d->cres * 2, INFD_WORKSPACE_ALIGNMENT);
    k->base.base.workspace_bytes =
        k->xh_bytes + k->rh_bytes +
        (k->fy != INFD_CUDA_FMT_F16_NHWC ? infd_align_up(yn * 2, INFD_WORKSPACE_ALIGNMENT) : 0);
    if (k->fy == INFD_CUDA_FMT_F16_NHWC) {
        k->base.base.output_layout = &infd_cuda_layout_f16_nhwc;
        k->base.base.output_layout_bytes = yn * 2;
    }
    /* The weights and biases live in the block's own device copies. */
    k->base.base.unread_inputs = 1u << 1 | 1u << 2 | 1u << 4 | 1u << 5;
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

bool infd_cuda_dwpw_opaque(const infd_kernel_args *a, int i)
{
    if (a->precision != INFD_PRECISION_FP16 || strcmp(a->node->op_type, "_DwPwConv") != 0 ||
        a->n_outputs != 1 || a->outputs[0]->shape.rank != 4)
        return false;
    if (i == 3)
        return a->n_inputs > 3 && a->inputs[3] && a->inputs[3]->shape.rank == 4;
    return i <= 0;
}

const infd_cuda_op infd_cuda_ops_dwpw[] = {
    { "_DwPwConv", dwpw_supports, dwpw_compile },
    { NULL, NULL, NULL },
};
