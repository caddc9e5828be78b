/*
 * dnnl_eltwise.c - unary element-wise ops on oneDNN eltwise (FP32):
 * Relu, LeakyRelu, Sigmoid, Tanh, Exp, Abs, Sqrt, Clip, HardSigmoid,
 * HardSwish, and Pow with a constant scalar exponent.
 *
 * An element-wise op does not care about shape, so plain tensors are
 * described as one flat dimension of numel elements (any rank, scalars
 * included); an opaque input is computed in its own layout, which the
 * output keeps when it may (else a reorder to plain runs first and the op
 * runs in place on the output).
 *
 * Clip: bounds from the min/max attributes before opset 11, from the
 * optional inputs 1 and 2 after; an absent bound is unbounded (+-inf). A
 * bound that is not a constant is declined.
 * HardSigmoid is max(0, min(1, alpha x + beta)): eltwise linear, then an
 * in-place clip (two primitives; see eltwise_compile). HardSwish (opset 14,
 * no attributes; also what passes.c makes of x * clip(x + 3, 0, 6) / 6) is
 * oneDNN's hardswish, x * min(max(x + 3, 0), 6) / 6: one primitive.
 */
#include <math.h>
#include <string.h>

#include "backends/cpu/dnnl_common.h"
#include "core/common.h"

typedef struct unary_op {
    const char *op_type;
    dnnl_alg_kind_t alg;
    float alpha, beta; /* oneDNN's defaults for the op */
} unary_op;

static const unary_op unary_ops[] = {
    { "Relu", dnnl_eltwise_relu, 0.0f, 0.0f },
    { "LeakyRelu", dnnl_eltwise_relu, 0.01f, 0.0f },
    { "Sigmoid", dnnl_eltwise_logistic, 0.0f, 0.0f },
    { "Tanh", dnnl_eltwise_tanh, 0.0f, 0.0f },
    { "Exp", dnnl_eltwise_exp, 0.0f, 0.0f },
    { "Abs", dnnl_eltwise_abs, 0.0f, 0.0f },
    { "Sqrt", dnnl_eltwise_sqrt, 0.0f, 0.0f },
    { "Clip", dnnl_eltwise_clip_v2, -INFINITY, INFINITY },
    { "HardSigmoid", dnnl_eltwise_linear, 0.2f, 0.5f },
    { "HardSwish", dnnl_eltwise_hardswish, 0.0f, 0.0f },
};

static const unary_op *find_unary(const char *op_type)
{
    for (size_t i = 0; i < INFD_ARRAY_SIZE(unary_ops); i++) {
        if (strcmp(unary_ops[i].op_type, op_type) == 0)
            return &unary_ops[i];
    }
    return NULL;
}

/* A Clip bound from optional input i; *out is left alone when omitted. */
static infd_status clip_bound(const infd_kernel_args *a, int i, float *out, infd_error *err)
{
    const infd_ir_value *v = i < a->n_inputs ? a->inputs[i] : NULL;
    if (!v)
        return INFD_STATUS_OK;
    if (v->dtype != INFD_DTYPE_FP32 || infd_node_numel(v) != 1)
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                               "Clip bound %d must be an FP32 scalar", i);
    if (!v->data)
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                               "oneDNN Clip needs constant bounds; input %d is computed", i);
    *out = *(const float *)v->data;
    return INFD_STATUS_OK;
}

/* The op's alpha and beta in oneDNN's terms. */
static infd_status unary_params(const infd_kernel_args *a, const unary_op *op, float *alpha,
                                float *beta, infd_error *err)
{
    const char *t = op->op_type;
    infd_status st = INFD_STATUS_OK;
    *alpha = op->alpha;
    *beta = op->beta;
    if (strcmp(t, "LeakyRelu") == 0 || strcmp(t, "HardSigmoid") == 0) {
        st = infd_ir_attr_float(a->g, a->node, "alpha", op->alpha, alpha, err);
        if (st == INFD_STATUS_OK && t[0] == 'H')
            st = infd_ir_attr_float(a->g, a->node, "beta", op->beta, beta, err);
    } else if (strcmp(t, "Clip") == 0) {
        if (a->g->opset < 11) {
            /* Clip-6's defaults are the float range, i.e. unbounded. */
            st = infd_ir_attr_float(a->g, a->node, "min", -INFINITY, alpha, err);
            if (st == INFD_STATUS_OK)
                st = infd_ir_attr_float(a->g, a->node, "max", INFINITY, beta, err);
        } else {
            st = clip_bound(a, 1, alpha, err);
            if (st == INFD_STATUS_OK)
                st = clip_bound(a, 2, beta, err);
        }
    }
    return st;
}

static bool same_numel(const infd_kernel_args *a, infd_error *why)
{
    if (infd_node_numel(a->inputs[0]) != infd_node_numel(a->outputs[0])) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "input and output sizes differ");
        return false;
    }
    return true;
}

bool infd_dnnl_eltwise_supports(const infd_kernel_args *a, infd_error *why)
{
    const unary_op *op = find_unary(a->node->op_type);
    float alpha, beta;
    if (!op) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "not an eltwise op");
        return false;
    }
    return infd_dnnl_fp32_only(a, 1, why) && same_numel(a, why) &&
           unary_params(a, op, &alpha, &beta, why) == INFD_STATUS_OK;
}

/* The eltwise descriptor over `md` and its primitive descriptor. */
static infd_status eltwise_pd(const infd_kernel_args *a, dnnl_alg_kind_t alg, float alpha,
                              float beta, const dnnl_memory_desc_t *md, dnnl_primitive_desc_t *pd,
                              infd_error *err)
{
    dnnl_eltwise_desc_t desc;
    dnnl_status_t s =
        dnnl_eltwise_forward_desc_init(&desc, dnnl_forward_inference, alg, md, alpha, beta);
    infd_status st = infd_dnnl_check(a, err, s, "oneDNN eltwise descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_pd_create(a, &desc, NULL, 1.0f, "eltwise", pd, err);
    return st;
}

/* src is input 0, or output 0 for a step that runs in place. */
static infd_status eltwise_args(infd_dnnl_exec *e, const infd_kernel_args *a,
                                const dnnl_memory_desc_t *md, bool in_place, infd_error *err)
{
    infd_status st = infd_dnnl_exec_arg(
        e, a, DNNL_ARG_SRC, in_place ? INFD_DNNL_FROM_OUTPUT : INFD_DNNL_FROM_INPUT, 0, md, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(e, a, DNNL_ARG_DST, INFD_DNNL_FROM_OUTPUT, 0, md, err);
    return st;
}

/* One eltwise step (alg, alpha, beta), then for HardSigmoid a clip to
 * [0, 1] in place as a second primitive (the post step). An eltwise
 * primitive with a clip post-op would be one pass, but oneDNN 2.6 gives it
 * to its ref:any implementation, which left the output unwritten in our
 * tests. Plain tensors are described as one flat dimension; an opaque
 * input keeps its layout (see infd_dnnl_unary_layout). */
static infd_status eltwise_compile(const infd_kernel_args *a, dnnl_alg_kind_t alg, float alpha,
                                   float beta, bool clip01, infd_kernel **out, infd_error *err)
{
    dnnl_memory_desc_t flat;
    infd_dnnl_unary_layout l;
    dnnl_primitive_desc_t pd = NULL;
    infd_dnnl_kernel *k = NULL;
    int64_t n = infd_node_numel(a->inputs[0]);
    *out = NULL;
    dnnl_status_t s = infd_dnnl_md_plain(&flat, 1, &n);
    if (s == dnnl_success)
        s = infd_dnnl_unary_layout_get(a, &flat, &l);
    infd_status st = infd_dnnl_check(a, err, s, "oneDNN eltwise descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = eltwise_pd(a, alg, alpha, beta, &l.md, &pd, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_kernel_create(a, clip01 ? "dnnl:eltwise:hard_sigmoid" : "dnnl:eltwise", pd,
                                     &k, err);
    if (st == INFD_STATUS_OK)
        st = eltwise_args(&k->exec, a, &l.md, l.in_place, err);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    pd = NULL;
    if (st == INFD_STATUS_OK && clip01) {
        st = eltwise_pd(a, dnnl_eltwise_clip_v2, 0.0f, 1.0f, &l.md, &pd, err);
        if (st == INFD_STATUS_OK)
            st = infd_dnnl_exec_init(&k->post, a, pd, err);
        if (st == INFD_STATUS_OK)
            st = eltwise_args(&k->post, a, &l.md, true, err);
        if (pd)
            dnnl_primitive_desc_destroy(pd);
    }
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_unary_finish(k, a, &l, err);
    if (st != INFD_STATUS_OK) {
        infd_kernel_destroy(k ? &k->base.base : NULL);
        return st;
    }
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

infd_status infd_dnnl_eltwise_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    const unary_op *op = find_unary(a->node->op_type);
    float alpha, beta;
    *out = NULL;
    if (!op)
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED, "not an eltwise op");
    infd_status st = unary_params(a, op, &alpha, &beta, err);
    if (st != INFD_STATUS_OK)
        return st;
    return eltwise_compile(a, op->alg, alpha, beta, strcmp(op->op_type, "HardSigmoid") == 0, out,
                           err);
}

/* ---- Pow ------------------------------------------------------------------ */

/* The exponent when it is a constant scalar of a type we can read. */
static infd_status pow_exponent(const infd_kernel_args *a, float *out, infd_error *err)
{
    *out = 0.0f; /* defined on every path, or GCC 12 -O3 warns at the callers */
    const infd_ir_value *e = a->n_inputs > 1 ? a->inputs[1] : NULL;
    if (!e || !e->data || infd_node_numel(e) != 1)
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                               "oneDNN Pow needs a constant scalar exponent");
    switch (e->dtype) {
    case INFD_DTYPE_FP32:
        *out = *(const float *)e->data;
        return INFD_STATUS_OK;
    case INFD_DTYPE_FP64:
        *out = (float)*(const double *)e->data;
        return INFD_STATUS_OK;
    case INFD_DTYPE_INT32:
        *out = (float)*(const int32_t *)e->data;
        return INFD_STATUS_OK;
    case INFD_DTYPE_INT64:
        *out = (float)*(const int64_t *)e->data;
        return INFD_STATUS_OK;
    default:
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                               "oneDNN Pow does not read a %s exponent", infd_dtype_name(e->dtype));
    }
}

bool infd_dnnl_pow_supports(const infd_kernel_args *a, infd_error *why)
{
    float e;
    return infd_dnnl_fp32_only(a, 1, why) && same_numel(a, why) &&
           pow_exponent(a, &e, why) == INFD_STATUS_OK;
}

infd_status infd_dnnl_pow_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    float e;
    *out = NULL;
    infd_status st = pow_exponent(a, &e, err);
    if (st != INFD_STATUS_OK)
        return st;
    /* eltwise_pow computes alpha * x^beta. */
    return eltwise_compile(a, dnnl_eltwise_pow, 1.0f, e, false, out, err);
}
