/*
 * dnnl_pool.c - MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool
 * on oneDNN pooling (FP32, 1-D to 3-D). An opaque input is pooled in its
 * own layout and data type (bf16 in a BF16 plan); the output keeps them
 * when it may, else it is reordered to plain FP32 through the workspace.
 *
 * ceil_mode needs nothing of its own: the output shape is given, and
 * infd_dnnl_window_get widens oneDNN's end pad until the windows fit.
 * That widening is harmless for max pooling (pads are -inf) and for
 * average pooling without count_include_pad (pads are not counted), but
 * ONNX Runtime counts a window only up to the declared end pad when
 * count_include_pad is 1, so that combination is declined. MaxPool's
 * Indices output is declined too (the reference kernel computes it).
 */
#include <string.h>

#include "backends/cpu/dnnl_common.h"
#include "core/common.h"

/* Pool-only window checks: every window must overlap the input. */
static bool windows_touch_input(const infd_kernel_args *a, const infd_dnnl_window *w,
                                infd_error *why)
{
    for (int i = 0; i < w->n_sp; i++) {
        int64_t in = a->inputs[0]->shape.dims[2 + i].value;
        int64_t out = a->outputs[0]->shape.dims[2 + i].value;
        int64_t dk = (w->kernel[i] - 1) * w->dilations[i] + 1;
        if (w->pad_l[i] >= dk || (out - 1) * w->strides[i] - w->pad_l[i] >= in) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "a window of dim %d lies entirely in the padding", 2 + i);
            return false;
        }
    }
    return true;
}

static bool pool_supports(const infd_kernel_args *a, bool avg, infd_error *why)
{
    infd_dnnl_window w;
    int64_t include_pad = 0;
    if (!infd_dnnl_fp32_only(a, 1, why))
        return false;
    if (a->n_outputs > 1 && a->outputs[1]) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "oneDNN MaxPool does not produce the Indices output");
        return false;
    }
    if (infd_dnnl_window_get(a, NULL, &w, why) != INFD_STATUS_OK ||
        !windows_touch_input(a, &w, why))
        return false;
    if (avg) {
        if (infd_ir_attr_int(a->g, a->node, "count_include_pad", 0, &include_pad, why) !=
            INFD_STATUS_OK)
            return false;
        for (int i = 0; include_pad && i < w.n_sp; i++) {
            if (w.extended[i]) {
                infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                                "count_include_pad with windows past the end pad "
                                "(ceil_mode) counts differently in oneDNN");
                return false;
            }
        }
    }
    return true;
}

bool infd_dnnl_max_pool_supports(const infd_kernel_args *a, infd_error *why)
{
    return pool_supports(a, false, why);
}

bool infd_dnnl_avg_pool_supports(const infd_kernel_args *a, infd_error *why)
{
    return pool_supports(a, true, why);
}

bool infd_dnnl_global_avg_pool_supports(const infd_kernel_args *a, infd_error *why)
{
    if (!infd_dnnl_fp32_only(a, 1, why))
        return false;
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    if (x->shape.rank < 3 || x->shape.rank > 5 || y->shape.rank != x->shape.rank) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "oneDNN takes 1-D to 3-D global pooling; input rank is %d",
                        (int)x->shape.rank);
        return false;
    }
    return true;
}

static infd_status pool_compile(const infd_kernel_args *a, dnnl_alg_kind_t alg,
                                const infd_dnnl_window *w, infd_kernel **out, infd_error *err)
{
    dnnl_memory_desc_t src_md, dst_md;
    dnnl_pooling_v2_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    infd_dnnl_kernel *k = NULL;
    infd_dnnl_dst dst;
    dnnl_dims_t strides, kernel, dil, pl, pr;
    infd_status st;
    *out = NULL;
    for (int i = 0; i < w->n_sp; i++) {
        strides[i] = w->strides[i];
        kernel[i] = w->kernel[i];
        dil[i] = w->dilations[i] - 1;
        pl[i] = w->pad_l[i];
        pr[i] = w->pad_r[i];
    }
    /* An opaque input: dst any of its data type (bf16 in a BF16 plan),
     * which pooling makes the input's format. */
    bool opaque = infd_dnnl_input_md(a, 0, &src_md);
    const infd_ir_value *y = a->outputs[0];
    int64_t ydims[DNNL_MAX_NDIMS];
    for (int32_t i = 0; i < y->shape.rank; i++)
        ydims[i] = y->shape.dims[i].value;
    dnnl_status_t s = opaque ? infd_dnnl_md_any_dt(&dst_md, y->shape.rank, ydims, src_md.data_type)
                             : infd_dnnl_md_value(&dst_md, y);
    if (s == dnnl_success)
        s = dnnl_pooling_v2_forward_desc_init(&desc, dnnl_forward_inference, alg, &src_md, &dst_md,
                                              strides, kernel, dil, pl, pr);
    st = infd_dnnl_check(a, err, s, "oneDNN pooling descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_pd_create(a, &desc, NULL, 1.0f, "pooling", &pd, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(
            a, err,
            infd_dnnl_dst_get(a, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), 0, &dst),
            "oneDNN pooling descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_kernel_create_at(a, "dnnl:pool", pd, dst.head, &k, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_SRC, INFD_DNNL_FROM_INPUT, 0, &src_md, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_dst_arg(k, a, &dst, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_dst_finish(k, a, &dst, err);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (st != INFD_STATUS_OK) {
        infd_kernel_destroy(k ? &k->base.base : NULL);
        return st;
    }
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

infd_status infd_dnnl_max_pool_compile(const infd_kernel_args *a, infd_kernel **out,
                                       infd_error *err)
{
    infd_dnnl_window w;
    infd_status st = infd_dnnl_window_get(a, NULL, &w, err);
    if (st != INFD_STATUS_OK)
        return st;
    return pool_compile(a, dnnl_pooling_max, &w, out, err);
}

infd_status infd_dnnl_avg_pool_compile(const infd_kernel_args *a, infd_kernel **out,
                                       infd_error *err)
{
    infd_dnnl_window w;
    int64_t include_pad = 0;
    infd_status st = infd_dnnl_window_get(a, NULL, &w, err);
    if (st == INFD_STATUS_OK)
        st = infd_ir_attr_int(a->g, a->node, "count_include_pad", 0, &include_pad, err);
    if (st != INFD_STATUS_OK)
        return st;
    return pool_compile(
        a, include_pad ? dnnl_pooling_avg_include_padding : dnnl_pooling_avg_exclude_padding, &w,
        out, err);
}

/* GlobalAveragePool and GlobalMaxPool: one window over all spatial dims. */
infd_status infd_dnnl_global_avg_pool_compile(const infd_kernel_args *a, infd_kernel **out,
                                              infd_error *err)
{
    const infd_ir_value *x = a->inputs[0];
    infd_dnnl_window w;
    memset(&w, 0, sizeof(w));
    w.n_sp = x->shape.rank - 2;
    for (int i = 0; i < w.n_sp; i++) {
        w.kernel[i] = x->shape.dims[2 + i].value;
        w.strides[i] = 1;
        w.dilations[i] = 1;
    }
    bool max = strcmp(a->node->op_type, "GlobalMaxPool") == 0;
    return pool_compile(a, max ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding, &w, out, err);
}
