/*
 * dnnl_concat.c - Concat of 4-D FP32 tensors along channels on oneDNN's
 * concat primitive, so that a channel concat between oneDNN kernels keeps
 * their layout instead of going through plain data.
 *
 * Why: BlazeFace pads channels in its residual branches with
 * Concat(x, zeros). On our plain-only Concat every such x was reordered
 * from the convolutions' layout to plain and back (three reorders per
 * block); see bench/RESULTS.md.
 *
 * Layouts: a non-constant input may arrive opaque (constants are always
 * plain). Three cases, tried in order:
 *   - Concat(x, zeros...) with x opaque nhwc or channel-blocked: our own
 *     copy-and-memset kernel (pad_run), output in x's layout;
 *   - x opaque and every input starting on a block of x's layout (nhwc:
 *     always): oneDNN's concat with dst in x's layout, published;
 *   - otherwise (or when oneDNN offers only its reference concat): the
 *     opaque inputs are reordered to plain through the workspace first
 *     (pre, pre2: hence at most two non-constant inputs) and the output is
 *     plain. Workspace: [plain copies][scratchpad].
 * BlazeFace 128 b1: 0.64 -> 0.31 ms p50 on 2 threads (bench/RESULTS.md).
 */
#include <string.h>

#include "backends/cpu/dnnl_common.h"
#include "core/alloc.h"
#include "core/common.h"

#define CONCAT_MAX_INPUTS 8

/* Says why in `why` and declines. */
#define DECLINE(...)                                                     \
    do {                                                                 \
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, __VA_ARGS__); \
        return false;                                                    \
    } while (0)

static bool is_const(const infd_kernel_args *a, int i)
{
    return a->inputs[i] && a->inputs[i]->data;
}

bool infd_dnnl_concat_supports(const infd_kernel_args *a, infd_error *why)
{
    int64_t axis = 0;
    int n_var = 0;
    if (a->precision != INFD_PRECISION_FP32)
        DECLINE("oneDNN Concat runs in FP32 plans only");
    if (a->n_inputs < 2 || a->n_inputs > CONCAT_MAX_INPUTS)
        DECLINE("oneDNN Concat takes 2 to %d inputs", CONCAT_MAX_INPUTS);
    if (!infd_dnnl_fp32_only(a, a->n_inputs, why) ||
        infd_ir_attr_int(a->g, a->node, "axis", 0, &axis, why) != INFD_STATUS_OK)
        return false;
    const infd_ir_value *y = a->outputs[0];
    if (y->shape.rank != 4 || (axis != 1 && axis != -3))
        DECLINE("oneDNN Concat takes 4-D tensors along axis 1");
    for (int i = 0; i < a->n_inputs; i++) {
        const infd_ir_value *x = a->inputs[i];
        bool ok = x->shape.rank == 4;
        for (int d = 0; ok && d < 4; d++)
            ok = x->shape.dims[d].value > 0 &&
                 (d == 1 || x->shape.dims[d].value == y->shape.dims[d].value);
        if (!ok)
            DECLINE("oneDNN Concat needs non-empty inputs of one rank");
        n_var += !is_const(a, i);
    }
    if (n_var > 2)
        DECLINE("oneDNN Concat takes at most two computed inputs");
    return true;
}

bool infd_dnnl_concat_accepts_opaque(const infd_kernel_args *a, int i)
{
    return i < a->n_inputs && a->inputs[i] && !is_const(a, i);
}

/* The format tag of an opaque input 0 that the output can keep: nhwc
 * always, a channel-blocked one when every input starts on a block;
 * dnnl_format_tag_undef otherwise. */
static dnnl_format_tag_t keep_tag(const infd_kernel_args *a, const dnnl_memory_desc_t *md)
{
    static const dnnl_format_tag_t tags[] = { dnnl_acdb, dnnl_aBcd16b, dnnl_aBcd8b };
    static const int64_t blocks[] = { 1, 16, 8 };
    dnnl_dims_t d;
    for (int i = 0; i < 4; i++)
        d[i] = a->inputs[0]->shape.dims[i].value;
    for (size_t t = 0; t < INFD_ARRAY_SIZE(tags); t++) {
        dnnl_memory_desc_t want;
        if (dnnl_memory_desc_init_by_tag(&want, 4, d, dnnl_f32, tags[t]) != dnnl_success ||
            !dnnl_memory_desc_equal(&want, md))
            continue;
        int64_t off = 0;
        bool aligned = true;
        for (int i = 0; i < a->n_inputs; i++) {
            aligned = aligned && off % blocks[t] == 0;
            off += a->inputs[i]->shape.dims[1].value;
        }
        return aligned ? tags[t] : dnnl_format_tag_undef;
    }
    return dnnl_format_tag_undef;
}

/* oneDNN's reference concat: a reorder per input into the output. */
static bool pd_is_ref(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
           impl && strncmp(impl, "ref", 3) == 0;
}

static infd_status concat_pd(const infd_kernel_args *a, const dnnl_memory_desc_t *dst,
                             const dnnl_memory_desc_t *src, dnnl_primitive_desc_t *pd,
                             infd_error *err)
{
    dnnl_primitive_attr_t attr = NULL;
    *pd = NULL;
    infd_dnnl_set_threads(a->n_threads);
    infd_status st =
        infd_dnnl_check(a, err, dnnl_primitive_attr_create(&attr), "oneDNN attributes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(
            a, err, dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
            "oneDNN scratchpad mode");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(a, err,
                             dnnl_concat_primitive_desc_create(pd, dst, a->n_inputs, 1, src, attr,
                                                               infd_dnnl_engine()),
                             "oneDNN concat rejected the layouts");
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

/*
 * Channel zero padding, Concat(x, zeros...): BlazeFace's residual branches.
 * In a channel-blocked layout y is x's blocks followed by zero blocks,
 * because oneDNN keeps the padded channels of a blocked dst at zero (its
 * zero-padding rule), and zero is what the concatenated constants hold; in
 * nhwc each pixel is x's channels followed by zeros. A copy and a memset,
 * no reorder.
 */
typedef struct pad_kernel {
    infd_dnnl_kernel dk; /* only base, layout and name are used */
    size_t n_outer;      /* blocked: batch; nhwc: pixels */
    size_t copy_bytes;   /* of x per outer step */
    size_t zero_bytes;   /* appended per outer step */
} pad_kernel;

static void pad_run(const infd_cpu_kernel *k, const infd_kernel_io *io)
{
    const pad_kernel *pk = (const pad_kernel *)k;
    const char *x = io->inputs[0];
    char *y = io->outputs[0];
    for (size_t i = 0; i < pk->n_outer; i++) {
        memcpy(y, x, pk->copy_bytes);
        memset(y + pk->copy_bytes, 0, pk->zero_bytes);
        x += pk->copy_bytes;
        y += pk->copy_bytes + pk->zero_bytes;
    }
}

/* Makes the pad kernel when the node is one (*out stays NULL otherwise). */
static infd_status pad_compile(const infd_kernel_args *a, const dnnl_memory_desc_t *in0,
                               infd_kernel **out, infd_error *err)
{
    static const dnnl_format_tag_t tags[] = { dnnl_acdb, dnnl_aBcd16b, dnnl_aBcd8b };
    static const int64_t blocks[] = { 1, 16, 8 };
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    dnnl_dims_t xd, yd;
    *out = NULL;
    if (!a->output_opaque_ok || !infd_dnnl_input_is_opaque(a, 0))
        return INFD_STATUS_OK;
    for (int i = 1; i < a->n_inputs; i++) {
        if (!infd_ir_value_is_zeros(a->inputs[i]))
            return INFD_STATUS_OK;
    }
    for (int i = 0; i < 4; i++) {
        xd[i] = x->shape.dims[i].value;
        yd[i] = y->shape.dims[i].value;
    }
    for (size_t t = 0; t < INFD_ARRAY_SIZE(tags); t++) {
        dnnl_memory_desc_t want, ymd;
        if (dnnl_memory_desc_init_by_tag(&want, 4, xd, dnnl_f32, tags[t]) != dnnl_success ||
            !dnnl_memory_desc_equal(&want, in0) ||
            dnnl_memory_desc_init_by_tag(&ymd, 4, yd, dnnl_f32, tags[t]) != dnnl_success)
            continue;
        pad_kernel *k = (pad_kernel *)infd_cpu_kernel_new(sizeof(pad_kernel), "dnnl:pad_channels",
                                                          pad_run, NULL);
        if (!k)
            return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY,
                                   "out of memory for the kernel");
        size_t xb = dnnl_memory_desc_get_size(in0), yb = dnnl_memory_desc_get_size(&ymd);
        k->n_outer = (size_t)(blocks[t] == 1 ? xd[0] * xd[2] * xd[3] : xd[0]);
        k->copy_bytes = xb / k->n_outer;
        k->zero_bytes = (yb - xb) / k->n_outer;
        infd_dnnl_kernel_publish(&k->dk, &ymd);
        *out = &k->dk.base.base;
        return INFD_STATUS_OK;
    }
    return INFD_STATUS_OK;
}

infd_status infd_dnnl_concat_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    const infd_ir_value *y = a->outputs[0];
    dnnl_memory_desc_t src[CONCAT_MAX_INPUTS], in[CONCAT_MAX_INPUTS], dst;
    size_t ws_off[CONCAT_MAX_INPUTS] = { 0 };
    bool via_ws[CONCAT_MAX_INPUTS] = { false };
    bool any_opaque = false;
    size_t head = 0;
    int64_t ydims[4];
    dnnl_primitive_desc_t pd = NULL;
    infd_dnnl_kernel *k = NULL;
    infd_status st;
    *out = NULL;
    for (int d = 0; d < 4; d++)
        ydims[d] = y->shape.dims[d].value;
    for (int i = 0; i < a->n_inputs; i++) {
        any_opaque |= infd_dnnl_input_md(a, i, &in[i]);
        src[i] = in[i];
    }
    st = pad_compile(a, &in[0], out, err);
    if (st != INFD_STATUS_OK || *out)
        return st;
    dnnl_format_tag_t tag = dnnl_format_tag_undef;
    if (any_opaque && a->output_opaque_ok && infd_dnnl_input_is_opaque(a, 0))
        tag = keep_tag(a, &in[0]);
    bool publish = tag != dnnl_format_tag_undef;
    dnnl_dims_t yd = { ydims[0], ydims[1], ydims[2], ydims[3] };
    dnnl_status_t s = publish ? dnnl_memory_desc_init_by_tag(&dst, 4, yd, dnnl_f32, tag)
                              : infd_dnnl_md_value(&dst, y);
    if (s != dnnl_success)
        return infd_dnnl_check(a, err, s, "oneDNN concat descriptor");
    st = concat_pd(a, &dst, src, &pd, any_opaque ? NULL : err);
    if (st == INFD_STATUS_OK && any_opaque && pd_is_ref(pd)) {
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
        st = INFD_STATUS_UNIMPLEMENTED;
    }
    if (st != INFD_STATUS_OK && any_opaque) {
        /* The fallback: plain copies of the opaque inputs, plain output. */
        publish = false;
        infd_dnnl_md_value(&dst, y);
        for (int i = 0; i < a->n_inputs; i++) {
            if (!infd_dnnl_input_is_opaque(a, i))
                continue;
            infd_dnnl_md_value(&src[i], a->inputs[i]);
            via_ws[i] = true;
            ws_off[i] = head;
            head += infd_align_up(dnnl_memory_desc_get_size(&src[i]), 64);
        }
        st = concat_pd(a, &dst, src, &pd, err);
    }
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_kernel_create_at(a, "dnnl:concat", pd, head, &k, err);
    for (int i = 0; i < a->n_inputs && st == INFD_STATUS_OK; i++) {
        if (via_ws[i])
            st = infd_dnnl_exec_arg_ws(&k->exec, a, DNNL_ARG_MULTIPLE_SRC + i, ws_off[i], &src[i],
                                       err);
        else
            st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_MULTIPLE_SRC + i, INFD_DNNL_FROM_INPUT, i,
                                    &src[i], err);
    }
    const dnnl_memory_desc_t *picked =
        st == INFD_STATUS_OK ? dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0) : NULL;
    if (st == INFD_STATUS_OK && !picked)
        st = infd_node_error(a, err, INFD_STATUS_INTERNAL, "oneDNN concat has no dst");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_DST, INFD_DNNL_FROM_OUTPUT, 0, picked, err);
    for (int i = 0, n_pre = 0; i < a->n_inputs && st == INFD_STATUS_OK; i++) {
        if (!via_ws[i])
            continue;
        infd_dnnl_exec *e = n_pre++ == 0 ? &k->pre : &k->pre2;
        st = infd_dnnl_exec_reorder(e, a, &in[i], INFD_DNNL_FROM_INPUT, (size_t)i, &src[i],
                                    INFD_DNNL_FROM_WORKSPACE, ws_off[i], head, err);
    }
    if (st == INFD_STATUS_OK) {
        if (publish)
            infd_dnnl_kernel_publish(k, picked);
        else if (!infd_dnnl_md_is_plain(picked, y))
            st = infd_node_error(a, err, INFD_STATUS_INTERNAL,
                                 "oneDNN concat picked an opaque dst for a plain output");
        infd_dnnl_kernel_size_workspace(k, head);
    }
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (st != INFD_STATUS_OK) {
        infd_kernel_destroy(k ? &k->base.base : NULL);
        return st;
    }
    *out = &k->base.base;
    return INFD_STATUS_OK;
}
