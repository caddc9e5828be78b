/*
 * dnnl_softmax.c - Softmax and LogSoftmax on oneDNN softmax v2 (FP32).
 *
 * Both ONNX definitions reduce to one axis of a 3-D view [outer, n, inner]
 * of the dense input:
 *   opset < 13   the input is coerced to 2-D at `axis` (default 1):
 *                outer = prod(dims[:axis]), n = prod(dims[axis:]), inner 1
 *   opset >= 13  a single axis (default -1): n = dims[axis]
 */
#include <string.h>

#include "backends/cpu/dnnl_common.h"
#include "core/common.h"

static infd_status softmax_view(const infd_kernel_args *a, int64_t *view, infd_error *err)
{
    const infd_ir_value *x = a->inputs[0];
    int r = x->shape.rank;
    bool legacy = a->g->opset < 13;
    int64_t axis;
    infd_status st = infd_ir_attr_int(a->g, a->node, "axis", legacy ? 1 : -1, &axis, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (r < 1)
        return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT, "Softmax needs rank >= 1");
    if (axis < 0)
        axis += r;
    if (axis < 0 || axis >= r + (legacy ? 1 : 0))
        return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                               "axis %lld is out of range for rank %d", (long long)axis, r);
    view[0] = view[1] = view[2] = 1;
    for (int i = 0; i < r; i++) {
        int64_t d = x->shape.dims[i].value;
        int part = i < axis ? 0 : (legacy || i == axis) ? 1 : 2;
        view[part] *= d;
    }
    return INFD_STATUS_OK;
}

bool infd_dnnl_softmax_supports(const infd_kernel_args *a, infd_error *why)
{
    int64_t view[3];
    return infd_dnnl_fp32_only(a, 1, why) && softmax_view(a, view, why) == INFD_STATUS_OK;
}

infd_status infd_dnnl_softmax_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    int64_t view[3];
    dnnl_memory_desc_t md;
    dnnl_softmax_v2_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    infd_dnnl_kernel *k = NULL;
    bool log = strcmp(a->node->op_type, "LogSoftmax") == 0;
    *out = NULL;
    infd_status st = softmax_view(a, view, err);
    if (st != INFD_STATUS_OK)
        return st;
    dnnl_status_t s = infd_dnnl_md_plain(&md, 3, view);
    if (s == dnnl_success)
        s = dnnl_softmax_v2_forward_desc_init(&desc, dnnl_forward_inference,
                                              log ? dnnl_softmax_log : dnnl_softmax_accurate, &md,
                                              &md, 1);
    st = infd_dnnl_check(a, err, s, "oneDNN softmax descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_pd_create(a, &desc, NULL, 1.0f, "softmax", &pd, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_kernel_create(a, "dnnl:softmax", pd, &k, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_SRC, INFD_DNNL_FROM_INPUT, 0, &md, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_DST, INFD_DNNL_FROM_OUTPUT, 0, &md, err);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (st != INFD_STATUS_OK) {
        infd_kernel_destroy(k ? &k->base.base : NULL);
        return st;
    }
    *out = &k->base.base;
    return INFD_STATUS_OK;
}
