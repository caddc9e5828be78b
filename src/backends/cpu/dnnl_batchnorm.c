/*
 * dnnl_batchnorm.c - BatchNormalization in inference mode on oneDNN batch
 * normalization with global statistics (FP32, rank 2 to 5):
 *   y = (x - mean) / sqrt(var + epsilon) * scale + B
 * scale, B, mean and var must be constants; they are copied into the kernel.
 * An opaque input keeps its layout (see infd_dnnl_unary_layout).
 * Training mode (training_mode = 1, or the running-statistics outputs in
 * use) and the pre-opset-7 `spatial = 0` form are declined.
 */
#include "backends/cpu/dnnl_common.h"
#include "core/common.h"

static bool bn_check(const infd_kernel_args *a, infd_error *why)
{
    const infd_ir_value *x = a->inputs[0];
    int64_t training = 0, spatial = 1;
    if (!infd_dnnl_fp32_only(a, 5, why))
        return false;
    if (infd_ir_attr_int(a->g, a->node, "training_mode", 0, &training, why) != INFD_STATUS_OK ||
        infd_ir_attr_int(a->g, a->node, "spatial", 1, &spatial, why) != INFD_STATUS_OK)
        return false;
    bool extra_outputs = false;
    for (int i = 1; i < a->n_outputs; i++)
        extra_outputs = extra_outputs || a->outputs[i];
    if (training || extra_outputs || !spatial) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "oneDNN BatchNormalization is inference-only (no training_mode, "
                        "statistics outputs or spatial=0)");
        return false;
    }
    if (x->shape.rank < 2 || x->shape.rank > 5) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "oneDNN batch normalization takes rank 2 to 5, not %d", (int)x->shape.rank);
        return false;
    }
    int64_t c = x->shape.dims[1].value;
    for (int i = 1; i < 5; i++) {
        const infd_ir_value *v = a->inputs[i];
        if (!v->data || infd_node_numel(v) != c || v->shape.rank != 1) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "oneDNN BatchNormalization needs constant [%lld] scale, B, mean "
                            "and var; input %d is not",
                            (long long)c, i);
            return false;
        }
    }
    return true;
}

bool infd_dnnl_batch_norm_supports(const infd_kernel_args *a, infd_error *why)
{
    return bn_check(a, why);
}

infd_status infd_dnnl_batch_norm_compile(const infd_kernel_args *a, infd_kernel **out,
                                         infd_error *err)
{
    static const int arg_ids[5] = { 0, DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN,
                                    DNNL_ARG_VARIANCE };
    dnnl_memory_desc_t c_md;
    infd_dnnl_unary_layout l;
    dnnl_batch_normalization_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    infd_dnnl_kernel *k = NULL;
    float eps = 1e-5f;
    *out = NULL;
    infd_status st = infd_ir_attr_float(a->g, a->node, "epsilon", 1e-5f, &eps, err);
    if (st != INFD_STATUS_OK)
        return st;
    int64_t c = a->inputs[0]->shape.dims[1].value;
    dnnl_status_t s = infd_dnnl_unary_layout_get(a, NULL, &l);
    if (s == dnnl_success)
        s = infd_dnnl_md_plain(&c_md, 1, &c);
    if (s == dnnl_success)
        s = dnnl_batch_normalization_forward_desc_init(&desc, dnnl_forward_inference, &l.md, eps,
                                                       dnnl_use_global_stats | dnnl_use_scale |
                                                           dnnl_use_shift);
    st = infd_dnnl_check(a, err, s, "oneDNN batch normalization descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_pd_create(a, &desc, NULL, 1.0f, "batch normalization", &pd, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_kernel_create(a, "dnnl:bnorm", pd, &k, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_SRC,
                                l.in_place ? INFD_DNNL_FROM_OUTPUT : INFD_DNNL_FROM_INPUT, 0, &l.md,
                                err);
    for (int i = 1; i < 5 && st == INFD_STATUS_OK; i++) {
        void *buf = NULL;
        st = infd_dnnl_copy_const(a, a->inputs[i]->data, sizeof(float) * (size_t)c, &buf, err);
        if (st == INFD_STATUS_OK)
            st = infd_dnnl_exec_arg_const(&k->exec, a, arg_ids[i], &c_md, buf, err);
        if (st == INFD_STATUS_OK) /* copied: never read at run time */
            k->base.base.unread_inputs |= 1u << i;
    }
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_DST, INFD_DNNL_FROM_OUTPUT, 0, &l.md, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_unary_finish(k, a, &l, err);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (st != INFD_STATUS_OK) {
        infd_kernel_destroy(k ? &k->base.base : NULL);
        return st;
    }
    *out = &k->base.base;
    return INFD_STATUS_OK;
}
