/*
 * dnnl_reduce.c - ReduceMean, ReduceSum, ReduceMax, ReduceMin on oneDNN
 * reduction (FP32).
 *
 * Axes come from the `axes` attribute before opset 18 (ReduceSum: before
 * 13) and from the optional constant input 1 after; none means all axes,
 * unless noop_with_empty_axes asks for the identity, which is declined
 * (the reference kernel copies). oneDNN's dst keeps the reduced dims as 1;
 * keepdims = 0 drops them, which is the same memory.
 */
#include <string.h>

#include "backends/cpu/dnnl_common.h"
#include "core/common.h"

typedef struct reduce_plan {
    dnnl_alg_kind_t alg;
    int nd;
    int64_t src[DNNL_MAX_NDIMS], dst[DNNL_MAX_NDIMS];
} reduce_plan;

static infd_status reduce_plan_get(const infd_kernel_args *a, reduce_plan *p, infd_error *err)
{
    static const struct {
        const char *op;
        dnnl_alg_kind_t alg;
        int64_t axes_input_opset; /* first opset that takes axes as an input */
    } algs[] = {
        { "ReduceMean", dnnl_reduction_mean, 18 },
        { "ReduceSum", dnnl_reduction_sum, 13 },
        { "ReduceMax", dnnl_reduction_max, 18 },
        { "ReduceMin", dnnl_reduction_min, 18 },
    };
    const infd_ir_value *x = a->inputs[0];
    const int64_t *axes = NULL;
    int32_t n_axes = 0;
    int64_t noop = 0, axes_input_opset = 18;
    bool reduced[DNNL_MAX_NDIMS] = { false };
    infd_status st;
    p->alg = dnnl_alg_kind_undef;
    for (size_t i = 0; i < INFD_ARRAY_SIZE(algs); i++) {
        if (strcmp(algs[i].op, a->node->op_type) == 0) {
            p->alg = algs[i].alg;
            axes_input_opset = algs[i].axes_input_opset;
        }
    }
    if (p->alg == dnnl_alg_kind_undef)
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED, "not a reduction");
    p->nd = x->shape.rank;
    if (p->nd < 1 || p->nd > DNNL_MAX_NDIMS)
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                               "oneDNN reduction takes rank 1 to %d, not %d", DNNL_MAX_NDIMS,
                               p->nd);
    if (a->g->opset >= axes_input_opset) {
        const infd_ir_value *v = a->n_inputs > 1 ? a->inputs[1] : NULL;
        if (v && !v->data)
            return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                                   "oneDNN reduction needs constant axes");
        if (v && v->dtype != INFD_DTYPE_INT64)
            return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT, "axes must be INT64");
        if (v) {
            axes = v->data;
            n_axes = (int32_t)infd_node_numel(v);
        }
        st = infd_ir_attr_int(a->g, a->node, "noop_with_empty_axes", 0, &noop, err);
    } else {
        st = infd_ir_attr_ints(a->g, a->node, "axes", &axes, &n_axes, err);
    }
    if (st != INFD_STATUS_OK)
        return st;
    if (n_axes == 0 && noop)
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                               "noop_with_empty_axes with no axes is an identity");
    for (int i = 0; i < p->nd; i++)
        reduced[i] = n_axes == 0;
    for (int32_t i = 0; i < n_axes; i++) {
        int64_t ax = axes[i] < 0 ? axes[i] + p->nd : axes[i];
        if (ax < 0 || ax >= p->nd)
            return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                                   "axis %lld is out of range for rank %d", (long long)axes[i],
                                   p->nd);
        reduced[ax] = true;
    }
    bool changes = false;
    for (int i = 0; i < p->nd; i++) {
        p->src[i] = x->shape.dims[i].value;
        p->dst[i] = reduced[i] ? 1 : p->src[i];
        changes = changes || p->dst[i] != p->src[i];
    }
    if (!changes)
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                               "the reduced axes all have size 1 (an identity)");
    return INFD_STATUS_OK;
}

bool infd_dnnl_reduce_supports(const infd_kernel_args *a, infd_error *why)
{
    reduce_plan p;
    return infd_dnnl_fp32_only(a, 1, why) && reduce_plan_get(a, &p, why) == INFD_STATUS_OK;
}

infd_status infd_dnnl_reduce_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    reduce_plan p;
    dnnl_memory_desc_t src_md, dst_md;
    dnnl_reduction_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    infd_dnnl_kernel *k = NULL;
    *out = NULL;
    infd_status st = reduce_plan_get(a, &p, err);
    if (st != INFD_STATUS_OK)
        return st;
    dnnl_status_t s = infd_dnnl_md_plain(&src_md, p.nd, p.src);
    if (s == dnnl_success)
        s = infd_dnnl_md_plain(&dst_md, p.nd, p.dst);
    if (s == dnnl_success)
        s = dnnl_reduction_desc_init(&desc, p.alg, &src_md, &dst_md, 0.0f, 0.0f);
    st = infd_dnnl_check(a, err, s, "oneDNN reduction descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_pd_create(a, &desc, NULL, 1.0f, "reduction", &pd, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_kernel_create(a, "dnnl:reduce", pd, &k, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_SRC, INFD_DNNL_FROM_INPUT, 0, &src_md, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_DST, INFD_DNNL_FROM_OUTPUT, 0, &dst_md, err);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (st != INFD_STATUS_OK) {
        infd_kernel_destroy(k ? &k->base.base : NULL);
        return st;
    }
    *out = &k->base.base;
    return INFD_STATUS_OK;
}
