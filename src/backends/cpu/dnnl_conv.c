/*
 * dnnl_conv.c - Conv and ConvTranspose on oneDNN (FP32, or BF16 in a BF16
 * plan: see "Precision" in dnnl_common.h; 1-D to 3-D).
 *
 * Conv: groups (depthwise included), dilations, strides, explicit pads
 * (asymmetric too), auto_pad, optional bias. Weights are reordered once at
 * compile time into the layout the chosen implementation wants (format_tag
 * any); a weight that is not constant is read in place as plain goihw.
 * src/dst layouts: see infd_dnnl_conv_compile.
 *
 * Fusion hooks, read when present (a fusion pass adds them; Gemm and MatMul
 * read the same names):
 *
 *   _fused_activation  string  "Relu", "LeakyRelu", "Clip", "Sigmoid",
 *                              "HardSigmoid", "Tanh" or "HardSwish"
 *                              (x * min(max(x + 3, 0), 6) / 6), applied to
 *                              the output
 *   _fused_alpha       float   Relu/LeakyRelu slope (0 / 0.01), Clip min
 *                              (-inf), HardSigmoid alpha (0.2)
 *   _fused_beta        float   Clip max (+inf), HardSigmoid beta (0.5)
 *   _fused_sum         int     1: the residual input (Conv: input 3, after
 *                              an optional bias that may be omitted; Gemm:
 *                              input 3; MatMul: input 2), shaped like the
 *                              output, is added before the activation
 *   _fused_post_scale  float   y = scale * y + shift, applied last (after
 *   _fused_post_shift  float   the activation; defaults 1 and 0): a constant
 *                              scalar Mul/Add that followed the activation
 *
 * The post-ops run in that order on the FP32 accumulator (BF16 plans too):
 * residual sum, activation, scale and shift. A _fused_* attribute not listed
 * here is declined (infd_dnnl_fused_supported), as is an unknown activation.
 *
 * ConvTranspose: strides, dilations, pads, output_padding, group, auto_pad
 * and output_shape through oneDNN deconvolution; the output shape comes
 * from the graph, so oneDNN's end pad is derived from it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/dnnl_common.h"
#include "core/alloc.h"
#include "core/common.h"

static const infd_ir_value *input(const infd_kernel_args *a, int i)
{
    return i < a->n_inputs ? a->inputs[i] : NULL;
}

/* Checks X, W, B and group for Conv (W [OC, C/G, k...]) and ConvTranspose
 * (W [C, OC/G, k...]). */
static bool check_channels(const infd_kernel_args *a, int64_t group, infd_error *why)
{
    const infd_ir_value *x = a->inputs[0], *w = a->inputs[1], *b = input(a, 2);
    const infd_ir_value *y = a->outputs[0];
    bool transpose = strcmp(a->node->op_type, "ConvTranspose") == 0;
    if (x->shape.rank < 3 || x->shape.rank > 5 || w->shape.rank != x->shape.rank ||
        y->shape.rank != x->shape.rank) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "oneDNN takes 1-D to 3-D convolutions with matching ranks");
        return false;
    }
    int64_t c = x->shape.dims[1].value, oc = y->shape.dims[1].value;
    int64_t w_in = transpose ? w->shape.dims[0].value : w->shape.dims[1].value * group;
    int64_t w_out = transpose ? w->shape.dims[1].value * group : w->shape.dims[0].value;
    if (group < 1 || c % group != 0 || oc % group != 0 || w_in != c || w_out != oc) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "channels do not match: input %lld, output %lld, group %lld", (long long)c,
                        (long long)oc, (long long)group);
        return false;
    }
    if (b && (b->dtype != INFD_DTYPE_FP32 || b->shape.rank != 1 || b->shape.dims[0].value != oc)) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "bias must be FP32 [%lld]",
                        (long long)oc);
        return false;
    }
    return true;
}

bool infd_dnnl_conv_supports(const infd_kernel_args *a, infd_error *why)
{
    int64_t group = 1;
    infd_dnnl_window win;
    if (!infd_dnnl_fp32_only(a, 2, why))
        return false;
    if (infd_ir_attr_int(a->g, a->node, "group", 1, &group, why) != INFD_STATUS_OK ||
        !check_channels(a, group, why))
        return false;
    const infd_ir_value *w = a->inputs[1];
    int64_t k[3];
    for (int i = 0; i < w->shape.rank - 2; i++)
        k[i] = w->shape.dims[2 + i].value;
    if (infd_dnnl_window_get(a, k, &win, why) != INFD_STATUS_OK)
        return false;
    return infd_dnnl_fused_supported(a, 3, why);
}

/* Adds the weight argument: reordered once when constant, else read plain
 * at run time. `plain` describes the ONNX memory in the primitive's logical
 * dims. */
/* Binds input 0 as the primitive's source: read in place (`want` NULL) or,
 * when the primitive wants another layout, reordered from `given` into
 * `want` at workspace offset 0 before the primitive runs (the op's own
 * scratch starts at `ws_head`, after it). */
static infd_status bind_src(infd_dnnl_kernel *k, const infd_kernel_args *a,
                            const dnnl_memory_desc_t *given, const dnnl_memory_desc_t *want,
                            size_t ws_head, infd_error *err)
{
    if (!want)
        return infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_SRC, INFD_DNNL_FROM_INPUT, 0, given, err);
    infd_status st = infd_dnnl_exec_reorder(&k->pre, a, given, INFD_DNNL_FROM_INPUT, 0, want,
                                            INFD_DNNL_FROM_WORKSPACE, 0, ws_head, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg_ws(&k->exec, a, DNNL_ARG_SRC, 0, want, err);
    return st;
}

static infd_status add_weights(infd_dnnl_kernel *k, const infd_kernel_args *a,
                               const_dnnl_primitive_desc_t pd, const dnnl_memory_desc_t *plain,
                               infd_error *err)
{
    const infd_ir_value *w = a->inputs[1];
    if (!w->data)
        return infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_WEIGHTS, INFD_DNNL_FROM_INPUT, 1, plain,
                                  err);
    const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    return infd_dnnl_exec_arg_reordered(&k->exec, a, DNNL_ARG_WEIGHTS, plain, w->data, want, 1,
                                        &k->base.base.unread_inputs, err);
}

static infd_status add_bias(infd_dnnl_kernel *k, const infd_kernel_args *a,
                            const dnnl_memory_desc_t *md, infd_error *err)
{
    const infd_ir_value *b = a->inputs[2];
    if (!b->data)
        return infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_BIAS, INFD_DNNL_FROM_INPUT, 2, md, err);
    void *buf = NULL;
    infd_status st = infd_dnnl_copy_const(a, b->data, b->nbytes, &buf, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg_const(&k->exec, a, DNNL_ARG_BIAS, md, buf, err);
    if (st == INFD_STATUS_OK)
        k->base.base.unread_inputs |= 1u << 2;
    return st;
}

/* Everything a Conv primitive descriptor is made from but src/dst. */
typedef struct conv_spec {
    dnnl_memory_desc_t w_any, w_plain, b_md;
    bool has_bias;
    bool winograd; /* try oneDNN's Winograd F(2x2, 3x3) first */
    dnnl_dims_t strides, dil, pl, pr;
} conv_spec;

/* A primitive descriptor of algorithm `alg` (the implementation's name
 * containing `impl` when not NULL); see conv_pd. */
static infd_status conv_pd_alg(const infd_kernel_args *a, const conv_spec *c, dnnl_alg_kind_t alg,
                               const char *impl, const dnnl_memory_desc_t *src_md,
                               const dnnl_memory_desc_t *dst_md, const dnnl_memory_desc_t *res_md,
                               int *residual_po, dnnl_primitive_desc_t *pd, infd_error *err)
{
    dnnl_convolution_desc_t cd;
    dnnl_post_ops_t po = NULL;
    *pd = NULL;
    dnnl_status_t s = dnnl_dilated_convolution_forward_desc_init(
        &cd, dnnl_forward_inference, alg, src_md, &c->w_any, c->has_bias ? &c->b_md : NULL, dst_md,
        c->strides, c->dil, c->pl, c->pr);
    infd_status st =
        infd_dnnl_check(a, err, s, "oneDNN convolution descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(a, err, dnnl_post_ops_create(&po), "oneDNN post-ops");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_fused_append(a, po, res_md, residual_po, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_pd_create_impl(a, &cd, po, 1.0f, "convolution", impl, pd, err);
    if (po)
        dnnl_post_ops_destroy(po);
    return st;
}

/* A primitive descriptor for src `src_md` (maybe any), dst `dst_md` (maybe
 * any) and the fused post-ops, the residual described by `res_md`.
 *
 * Algorithm: direct, except that a Conv marked `winograd` takes oneDNN's
 * Winograd F(2x2, 3x3) (jit_fp32_wino_2x3) when oneDNN offers it for the
 * shapes and post-ops. See "Winograd" in infd_dnnl_conv_compile. */
static infd_status conv_pd(const infd_kernel_args *a, const conv_spec *c,
                           const dnnl_memory_desc_t *src_md, const dnnl_memory_desc_t *dst_md,
                           const dnnl_memory_desc_t *res_md, int *residual_po,
                           dnnl_primitive_desc_t *pd, infd_error *err)
{
    if (c->winograd) {
        int po_before = *residual_po;
        if (conv_pd_alg(a, c, dnnl_convolution_winograd, "wino_2x3", src_md, dst_md, res_md,
                        residual_po, pd, NULL) == INFD_STATUS_OK)
            return INFD_STATUS_OK;
        *residual_po = po_before;
    }
    return conv_pd_alg(a, c, dnnl_convolution_direct, NULL, src_md, dst_md, res_md, residual_po, pd,
                       err);
}

/* Whether pd's implementation name contains `what` (true when unknown). */
static bool impl_has(const_dnnl_primitive_desc_t pd, const char *what)
{
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
        return true;
    return strstr(impl, what) != NULL;
}

static bool pd_is_slow(const_dnnl_primitive_desc_t pd)
{
    return impl_has(pd, "gemm") || impl_has(pd, "ref");
}

/* A dst md of `dims` and data type `dt` in the same format as `like` (one
 * of the 4-D formats our convolutions pick); false when `like` is none of
 * them. */
static bool same_format_md(const dnnl_memory_desc_t *like, const int64_t *dims, dnnl_data_type_t dt,
                           dnnl_memory_desc_t *out)
{
    static const dnnl_format_tag_t tags[] = { dnnl_aBcd16b, dnnl_aBcd8b, dnnl_acdb, dnnl_abcd };
    dnnl_memory_desc_t probe;
    if (like->ndims != 4)
        return false;
    for (size_t i = 0; i < INFD_ARRAY_SIZE(tags); i++) {
        if (dnnl_memory_desc_init_by_tag(&probe, 4, like->dims, like->data_type, tags[i]) ==
                dnnl_success &&
            dnnl_memory_desc_equal(&probe, like))
            return dnnl_memory_desc_init_by_tag(out, 4, dims, dt, tags[i]) == dnnl_success;
    }
    return false;
}

/* Replaces *pd with `alt` when alt is a faster implementation (takes alt). */
static bool take_if_faster(dnnl_primitive_desc_t *pd, dnnl_primitive_desc_t alt)
{
    if (!alt)
        return false;
    if (pd_is_slow(alt)) {
        dnnl_primitive_desc_destroy(alt);
        return false;
    }
    dnnl_primitive_desc_destroy(*pd);
    *pd = alt;
    return true;
}

/* A 2-D 3x3 convolution of stride 1, no dilation and one group: the shape
 * oneDNN's Winograd implementations take. INFD_WINOGRAD=0 keeps every
 * convolution direct. */
static bool winograd_candidate(const infd_kernel_args *a, const infd_dnnl_window *win,
                               int64_t group, const int64_t *k_sp)
{
    const char *env = getenv("INFD_WINOGRAD");
    if ((env && strcmp(env, "0") == 0) || win->n_sp != 2 || group != 1 ||
        a->inputs[0]->shape.rank != 4)
        return false;
    for (int i = 0; i < 2; i++) {
        if (k_sp[i] != 3 || win->strides[i] != 1 || win->dilations[i] != 1)
            return false;
    }
    return true;
}

bool infd_dnnl_conv_produces_opaque(const infd_kernel_args *a)
{
    return a->inputs[0]->shape.rank == 4;
}

bool infd_dnnl_conv_accepts_opaque(const infd_kernel_args *a, int i)
{
    return a->inputs[0]->shape.rank == 4 && (i == 0 || i == 3);
}

bool infd_dnnl_conv_transpose_produces_opaque(const infd_kernel_args *a)
{
    return a->inputs[0]->shape.rank == 4;
}

/* nChw16c of `dims` with batch `n` (f32). */
static dnnl_status_t md_16c(dnnl_memory_desc_t *md, const int64_t *dims, int64_t n)
{
    dnnl_dims_t d = { n, dims[1], dims[2], dims[3] };
    return dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32, dnnl_aBcd16b);
}

/* Winograd F(2x2, 3x3) over slices of the batch, for a conv oneDNN would
 * not run it on whole (see "Winograd" below): INFD_STATUS_UNIMPLEMENTED
 * when no slice takes it; on OK *out is the kernel. Needs src arriving as
 * nChw16c, no residual and an opaque output. */
static infd_status conv_split_compile(const infd_kernel_args *a, const conv_spec *c,
                                      const dnnl_memory_desc_t *src_in, const int64_t *ydims,
                                      infd_kernel **out, infd_error *err)
{
    const int64_t n = ydims[0];
    dnnl_memory_desc_t src_full, src_md, dst_md;
    dnnl_primitive_desc_t pd = NULL;
    int64_t part = n - 1;
    int residual_po = -1;
    if (md_16c(&src_full, src_in->dims, n) != dnnl_success ||
        !dnnl_memory_desc_equal(&src_full, src_in))
        return INFD_STATUS_UNIMPLEMENTED;
    for (; part >= 1; part--) {
        if (n % part != 0 || md_16c(&src_md, src_in->dims, part) != dnnl_success ||
            md_16c(&dst_md, ydims, part) != dnnl_success)
            continue;
        if (conv_pd_alg(a, c, dnnl_convolution_winograd, "wino_2x3", &src_md, &dst_md, NULL,
                        &residual_po, &pd, NULL) == INFD_STATUS_OK)
            break;
    }
    if (!pd)
        return INFD_STATUS_UNIMPLEMENTED;
    dnnl_memory_desc_t dst_full;
    infd_dnnl_kernel *k = NULL;
    infd_status st = infd_dnnl_check(a, err, md_16c(&dst_full, ydims, n),
                                     "oneDNN convolution descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_kernel_create_at(a, "dnnl:conv", pd, 0, &k, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_SRC, INFD_DNNL_FROM_INPUT, 0, &src_md, err);
    if (st == INFD_STATUS_OK)
        st = add_weights(k, a, pd, &c->w_plain, err);
    if (st == INFD_STATUS_OK && c->has_bias)
        st = add_bias(k, a, &c->b_md, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_DST, INFD_DNNL_FROM_OUTPUT, 0, &dst_md, err);
    int n_parts = (int)(n / part);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_split(&k->exec, a, n_parts, DNNL_ARG_SRC,
                                  dnnl_memory_desc_get_size(&src_md), err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_split(&k->exec, a, n_parts, DNNL_ARG_DST,
                                  dnnl_memory_desc_get_size(&dst_md), err);
    dnnl_primitive_desc_destroy(pd);
    if (st != INFD_STATUS_OK) {
        infd_kernel_destroy(k ? &k->base.base : NULL);
        return st;
    }
    size_t used = strlen(k->name);
    snprintf(k->name + used, sizeof(k->name) - used, ":%dx%lld", n_parts, (long long)part);
    infd_dnnl_kernel_publish(k, &dst_full);
    infd_dnnl_kernel_size_workspace(k, 0);
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/*
 * Layouts: src is the input's layout (opaque or plain) and dst is any, so
 * the implementation picks (jit: nChw16c; a plain nchw src with few
 * channels is the jit "first convolution" case). A residual read opaque
 * fixes dst to its layout (the binary post-op reads it as src1 in the
 * dst's layout). When that leaves oneDNN only gemm or ref: an opaque src
 * tries dst in its own format; a plain residual tries dst and residual in
 * the src's format (the residual copied); then src any (the input copied
 * into the format the conv picks). The picked dst is published, or reordered to
 * plain through the workspace when it must be plain. Workspace: [src
 * copy][residual copy][dst copy][scratchpads].
 *
 * Winograd: FP32 2-D 3x3 convolutions of stride 1, no dilation and one
 * group (with constant weights) take oneDNN's Winograd F(2x2, 3x3), 35-45%
 * faster than direct on ResNet-50's 3x3 convs on AVX-512: over the whole
 * batch, or else over equal slices of it, one run per slice (oneDNN 2.6
 * takes at most as many images as threads in one run), or else direct.
 * Its error against ONNX Runtime on ResNet-50 is in the range of direct's
 * (worst element 0.55-0.94 of the parity bound over 8 inputs at batch 4
 * and 8; direct 0.56-0.95). oneDNN's F(4x4, 3x3) (jit_wino_4x3), which it
 * offers where F(2x2, 3x3) declines, is never taken: it reached 1.16.
 * INFD_WINOGRAD=0 keeps every convolution direct.
 *
 * In a BF16 plan with constant weights, src and weights are bf16 (a src
 * arriving as f32 is copied: src any of bf16 from the start), an opaque
 * dst is bf16 and a dst that must be plain is f32; the residual keeps the
 * data type it arrives in (the binary post-op converts).
 */
infd_status infd_dnnl_conv_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    const infd_ir_value *x = a->inputs[0], *w = a->inputs[1], *b = input(a, 2);
    const infd_ir_value *y = a->outputs[0];
    dnnl_memory_desc_t src_in, src_md, dst_md, res_md, src_any;
    dnnl_primitive_desc_t pd = NULL, pd2 = NULL;
    infd_dnnl_kernel *k = NULL;
    infd_dnnl_window win;
    infd_dnnl_dst dst;
    conv_spec c;
    int64_t group = 1, wdims[6], k_sp[3], ydims[DNNL_MAX_NDIMS], sum = 0;
    int residual_po = -1, wn = 0;
    size_t src_head = 0;
    bool src_copy = false;
    infd_status st;
    *out = NULL;

    memset(&c, 0, sizeof(c));
    if ((st = infd_ir_attr_int(a->g, a->node, "group", 1, &group, err)) != INFD_STATUS_OK ||
        (st = infd_ir_attr_int(a->g, a->node, "_fused_sum", 0, &sum, err)) != INFD_STATUS_OK)
        return st;
    for (int i = 0; i < w->shape.rank - 2; i++)
        k_sp[i] = w->shape.dims[2 + i].value;
    if ((st = infd_dnnl_window_get(a, k_sp, &win, err)) != INFD_STATUS_OK)
        return st;
    for (int i = 0; i < win.n_sp; i++) {
        c.strides[i] = win.strides[i];
        c.dil[i] = win.dilations[i] - 1;
        c.pl[i] = win.pad_l[i];
        c.pr[i] = win.pad_r[i];
    }
    /* Grouped weights are [G, OC/G, IC/G, k...]: the same memory as ONNX's
     * [OC, IC/G, k...]. */
    if (group > 1)
        wdims[wn++] = group;
    wdims[wn++] = w->shape.dims[0].value / group;
    for (int i = 1; i < w->shape.rank; i++)
        wdims[wn++] = w->shape.dims[i].value;
    for (int32_t i = 0; i < y->shape.rank; i++)
        ydims[i] = y->shape.dims[i].value;

    /* A weight read at run time is plain f32, so the conv stays f32. */
    dnnl_data_type_t dt = w->data ? infd_dnnl_compute_type(a) : dnnl_f32;
    c.winograd = w->data && dt == dnnl_f32 && winograd_candidate(a, &win, group, k_sp);
    dnnl_data_type_t dst_dt = a->output_opaque_ok ? dt : dnnl_f32;
    bool src_opaque = infd_dnnl_input_md(a, 0, &src_in);
    bool src_convert = src_in.data_type != dt;
    bool res_opaque = sum && infd_dnnl_input_md(a, 3, &res_md);
    c.has_bias = b != NULL;
    src_md = src_in;
    dnnl_status_t s = infd_dnnl_md_plain(&c.w_plain, wn, wdims);
    if (s == dnnl_success && src_convert)
        s = infd_dnnl_md_any_dt(&src_md, x->shape.rank, (const int64_t *)src_in.dims, dt);
    if (s == dnnl_success)
        s = w->data ? infd_dnnl_md_any_dt(&c.w_any, wn, wdims, dt)
                    : infd_dnnl_md_plain(&c.w_any, wn, wdims);
    if (s == dnnl_success && b)
        s = infd_dnnl_md_value(&c.b_md, b);
    if (s == dnnl_success && !res_opaque)
        s = infd_dnnl_md_value(&res_md, y);
    if (s == dnnl_success)
        s = res_opaque ? dnnl_success : infd_dnnl_md_any_dt(&dst_md, y->shape.rank, ydims, dst_dt);
    if (res_opaque)
        dst_md = res_md;
    st = infd_dnnl_check(a, err, s, "oneDNN convolution descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = conv_pd(a, &c, &src_md, &dst_md, &res_md, &residual_po, &pd, err);
    if (st == INFD_STATUS_OK && c.winograd && ydims[0] > 1 && src_opaque && !src_convert && !sum &&
        a->output_opaque_ok && !impl_has(pd, "wino_2x3")) {
        infd_status split = conv_split_compile(a, &c, &src_in, ydims, out, err);
        if (split != INFD_STATUS_UNIMPLEMENTED) {
            dnnl_primitive_desc_destroy(pd);
            return split;
        }
    }
    /* Only gemm or ref take these layouts: with an opaque src, try dst in
     * the src's format (jit depthwise wants nChw16c on both sides); with a
     * plain residual, dst and the residual in the src's format (brgconv
     * takes no binary post-op in 2.6; jit_1x1 does with all three alike),
     * the residual reordered into the workspace; then let the conv pick src
     * too, reordering the input into the workspace. */
    dnnl_memory_desc_t dst_like, res_pd_md = res_md, res_any;
    if (st == INFD_STATUS_OK && src_opaque && !src_convert && !res_opaque && pd_is_slow(pd) &&
        same_format_md(&src_md, ydims, dst_dt, &dst_like) &&
        conv_pd(a, &c, &src_md, &dst_like, &res_md, &residual_po, &pd2, NULL) == INFD_STATUS_OK)
        take_if_faster(&pd, pd2);
    pd2 = NULL;
    if (st == INFD_STATUS_OK && sum && !res_opaque && pd_is_slow(pd) &&
        same_format_md(&src_md, ydims, dst_dt, &dst_like) &&
        conv_pd(a, &c, &src_md, &dst_like, &dst_like, &residual_po, &pd2, NULL) == INFD_STATUS_OK &&
        take_if_faster(&pd, pd2)) {
        dst_md = dst_like;
        res_pd_md = dst_like;
    }
    pd2 = NULL;
    if (st == INFD_STATUS_OK && pd_is_slow(pd) && !src_convert &&
        infd_dnnl_md_any_dt(&src_any, x->shape.rank, (const int64_t *)src_md.dims, dt) ==
            dnnl_success &&
        conv_pd(a, &c, &src_any, &dst_md, &res_pd_md, &residual_po, &pd2, NULL) == INFD_STATUS_OK)
        take_if_faster(&pd, pd2);
    pd2 = NULL;
    /* The src as the conv reads it; a copy when that is not how it arrives. */
    if (st == INFD_STATUS_OK) {
        const dnnl_memory_desc_t *picked = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
        src_copy = !dnnl_memory_desc_equal(picked, &src_in);
        if (src_copy) {
            src_any = *picked;
            src_head = infd_align_up(dnnl_memory_desc_get_size(picked), 64);
        }
    }
    /* The residual as the post-op reads it; a copy when that is not how it
     * arrives. */
    size_t res_offset = src_head;
    bool res_copy = false;
    if (st == INFD_STATUS_OK && residual_po >= 0) {
        const dnnl_memory_desc_t *r = dnnl_primitive_desc_query_md(
            pd, dnnl_query_exec_arg_md,
            DNNL_ARG_ATTR_MULTIPLE_POST_OP(residual_po) | DNNL_ARG_SRC_1);
        if (r && !dnnl_memory_desc_equal(r, &res_md)) {
            res_any = *r;
            res_copy = true;
            src_head += infd_align_up(dnnl_memory_desc_get_size(r), 64);
        }
    }
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(
            a, err,
            infd_dnnl_dst_get(a, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), src_head,
                              &dst),
            "oneDNN convolution descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_kernel_create_at(a, "dnnl:conv", pd, dst.head, &k, err);
    if (st == INFD_STATUS_OK)
        st = bind_src(k, a, &src_in, src_copy ? &src_any : NULL, dst.head, err);
    if (st == INFD_STATUS_OK)
        st = add_weights(k, a, pd, &c.w_plain, err);
    if (st == INFD_STATUS_OK && b)
        st = add_bias(k, a, &c.b_md, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_dst_arg(k, a, &dst, err);
    if (st == INFD_STATUS_OK && res_copy) {
        st = infd_dnnl_exec_reorder(&k->pre2, a, &res_md, INFD_DNNL_FROM_INPUT, 3, &res_any,
                                    INFD_DNNL_FROM_WORKSPACE, res_offset, dst.head, err);
        if (st == INFD_STATUS_OK)
            st = infd_dnnl_exec_arg_ws(&k->exec, a,
                                       DNNL_ARG_ATTR_MULTIPLE_POST_OP(residual_po) | DNNL_ARG_SRC_1,
                                       res_offset, &res_any, err);
    } else if (st == INFD_STATUS_OK && residual_po >= 0) {
        st = infd_dnnl_exec_arg(&k->exec, a,
                                DNNL_ARG_ATTR_MULTIPLE_POST_OP(residual_po) | DNNL_ARG_SRC_1,
                                INFD_DNNL_FROM_INPUT, 3, &res_md, err);
    }
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

/* ---- ConvTranspose ------------------------------------------------------- */

typedef struct deconv_geom {
    int n_sp;
    dnnl_dims_t strides, dil, pl, pr;
} deconv_geom;

/* Resolves ConvTranspose's padding against the given output shape:
 *   out = s (in - 1) + output_padding + dk - pad_begin - pad_end
 * oneDNN has no output_padding; it is folded into its end pad, which is
 * derived from the output shape. */
static infd_status deconv_geom_get(const infd_kernel_args *a, deconv_geom *g, infd_error *err)
{
    const infd_ir_value *x = a->inputs[0], *w = a->inputs[1], *y = a->outputs[0];
    const int64_t *v;
    int32_t nv;
    const char *auto_pad = NULL;
    int n = x->shape.rank - 2;
    int64_t strides[3], dil[3], pads[6] = { 0 }, opad[3] = { 0 };
    bool have_oshape = false;
    infd_status st;
    g->n_sp = n;
    struct {
        const char *name;
        int64_t *dst;
        int count;
        int64_t dflt;
        bool *seen;
    } attrs[] = {
        { "strides", strides, n, 1, NULL },
        { "dilations", dil, n, 1, NULL },
        { "pads", pads, 2 * n, 0, NULL },
        { "output_padding", opad, n, 0, NULL },
        { "output_shape", NULL, n, 0, &have_oshape },
    };
    for (size_t i = 0; i < INFD_ARRAY_SIZE(attrs); i++) {
        if ((st = infd_ir_attr_ints(a->g, a->node, attrs[i].name, &v, &nv, err)) != INFD_STATUS_OK)
            return st;
        if (v && nv != attrs[i].count)
            return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                                   "attribute %s has %d values, expected %d", attrs[i].name,
                                   (int)nv, attrs[i].count);
        if (attrs[i].seen)
            *attrs[i].seen = v != NULL;
        for (int j = 0; attrs[i].dst && j < attrs[i].count; j++)
            attrs[i].dst[j] = v ? v[j] : attrs[i].dflt;
    }
    if ((st = infd_ir_attr_string(a->g, a->node, "auto_pad", "NOTSET", &auto_pad, err)) !=
        INFD_STATUS_OK)
        return st;
    bool same = strcmp(auto_pad, "SAME_UPPER") == 0 || strcmp(auto_pad, "SAME_LOWER") == 0;
    bool valid = strcmp(auto_pad, "VALID") == 0;
    if (!same && !valid && strcmp(auto_pad, "NOTSET") != 0)
        return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT, "auto_pad '%s' is unknown",
                               auto_pad);
    for (int i = 0; i < n; i++) {
        int64_t in = x->shape.dims[2 + i].value, out = y->shape.dims[2 + i].value;
        int64_t k = w->shape.dims[2 + i].value, s = strides[i], d = dil[i];
        if (s < 1 || d < 1)
            return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                                   "strides and dilations must be >= 1");
        int64_t dk = (k - 1) * d + 1;
        int64_t pl = pads[i];
        if (valid) {
            pl = 0;
        } else if (same || have_oshape) {
            /* With output_shape, ONNX ignores pads. */
            int64_t total = s * (in - 1) + opad[i] + dk - out;
            /* ONNX's text and ONNX Runtime disagree on which end gets the odd
             * pixel; leave that case to the reference kernel. */
            if (total < 0 || total % 2 != 0)
                return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                                       "output_shape/auto_pad needs an odd or negative "
                                       "total padding (%lld) on dim %d",
                                       (long long)total, 2 + i);
            pl = total / 2;
        }
        int64_t pr = s * (in - 1) + dk - pl - out;
        if (pl < 0 || pr < 0)
            return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                                   "output_padding beyond the end pad (dim %d) is not "
                                   "supported by oneDNN deconvolution",
                                   2 + i);
        g->strides[i] = s;
        g->dil[i] = d - 1;
        g->pl[i] = pl;
        g->pr[i] = pr;
    }
    return INFD_STATUS_OK;
}

bool infd_dnnl_conv_transpose_supports(const infd_kernel_args *a, infd_error *why)
{
    int64_t group = 1;
    deconv_geom geom;
    if (!infd_dnnl_fp32_only(a, 2, why))
        return false;
    if (!a->inputs[1]->data) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "oneDNN ConvTranspose needs constant weights");
        return false;
    }
    if (infd_ir_attr_int(a->g, a->node, "group", 1, &group, why) != INFD_STATUS_OK ||
        !check_channels(a, group, why))
        return false;
    return deconv_geom_get(a, &geom, why) == INFD_STATUS_OK;
}

infd_status infd_dnnl_conv_transpose_compile(const infd_kernel_args *a, infd_kernel **out,
                                             infd_error *err)
{
    const infd_ir_value *w = a->inputs[1], *b = input(a, 2);
    const infd_ir_value *y = a->outputs[0];
    dnnl_memory_desc_t src_in, src_md, dst_md, w_any, w_onnx, b_md;
    infd_dnnl_dst dst;
    int64_t ydims[DNNL_MAX_NDIMS];
    dnnl_deconvolution_desc_t dd;
    dnnl_primitive_desc_t pd = NULL;
    infd_dnnl_kernel *k = NULL;
    deconv_geom geom;
    int64_t group = 1;
    dnnl_dims_t wdims, wstrides;
    int wn = 0;
    infd_status st;
    *out = NULL;
    if ((st = infd_ir_attr_int(a->g, a->node, "group", 1, &group, err)) != INFD_STATUS_OK ||
        (st = deconv_geom_get(a, &geom, err)) != INFD_STATUS_OK)
        return st;
    /* ONNX weights are [C_in, C_out/G, k...] = [G][C_in/G][C_out/G][k...] in
     * memory; oneDNN's logical order is [G][C_out/G][C_in/G][k...]. */
    int64_t ksize = 1;
    for (int i = 2; i < w->shape.rank; i++)
        ksize *= w->shape.dims[i].value;
    int64_t ocg = w->shape.dims[1].value, icg = w->shape.dims[0].value / group;
    if (group > 1) {
        wdims[wn] = group;
        wstrides[wn++] = icg * ocg * ksize;
    }
    wdims[wn] = ocg;
    wstrides[wn++] = ksize;
    wdims[wn] = icg;
    wstrides[wn++] = ocg * ksize;
    int64_t stride = ksize;
    for (int i = 2; i < w->shape.rank; i++) {
        stride /= w->shape.dims[i].value;
        wdims[wn] = w->shape.dims[i].value;
        wstrides[wn++] = stride;
    }
    /* src: the input's layout (copied into the workspace when its data
     * type is not the one computed in); dst: any, published or reordered to
     * plain. oneDNN 2.6 has bf16 deconvolution only with a bf16 dst
     * (ref:any otherwise), so in BF16 even a plain output goes through the
     * workspace. */
    dnnl_data_type_t dt = infd_dnnl_compute_type(a);
    bool src_opaque = infd_dnnl_input_md(a, 0, &src_in);
    size_t src_head = 0;
    src_md = src_in;
    for (int32_t i = 0; i < y->shape.rank; i++)
        ydims[i] = y->shape.dims[i].value;
    dnnl_status_t s = src_opaque || a->output_opaque_ok || dt != dnnl_f32
                          ? infd_dnnl_md_any_dt(&dst_md, y->shape.rank, ydims, dt)
                          : infd_dnnl_md_value(&dst_md, y);
    if (s == dnnl_success && src_in.data_type != dt)
        s = infd_dnnl_md_any_dt(&src_md, src_in.ndims, (const int64_t *)src_in.dims, dt);
    if (s == dnnl_success)
        s = dnnl_memory_desc_init_by_strides(&w_onnx, wn, wdims, dnnl_f32, wstrides);
    if (s == dnnl_success)
        s = infd_dnnl_md_any_dt(&w_any, wn, wdims, dt);
    if (s == dnnl_success && b)
        s = infd_dnnl_md_value(&b_md, b);
    if (s == dnnl_success)
        s = dnnl_dilated_deconvolution_forward_desc_init(
            &dd, dnnl_forward_inference, dnnl_deconvolution_direct, &src_md, &w_any,
            b ? &b_md : NULL, &dst_md, geom.strides, geom.dil, geom.pl, geom.pr);
    st = infd_dnnl_check(a, err, s, "oneDNN deconvolution descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_pd_create(a, &dd, NULL, 1.0f, "deconvolution", &pd, err);
    /* jit deconvolution may want another src format than the one the input
     * arrives in (bf16), or a blocked dst where the output must be plain
     * (f32 with a plain input: ref:any otherwise): let it pick src, then
     * dst too, and copy through the workspace. */
    for (int retry = 0; retry < 2 && st == INFD_STATUS_OK && pd_is_slow(pd); retry++) {
        dnnl_primitive_desc_t pd2 = NULL;
        dnnl_status_t s2 =
            infd_dnnl_md_any_dt(&src_md, src_in.ndims, (const int64_t *)src_in.dims, dt);
        if (s2 == dnnl_success && retry == 1)
            s2 = infd_dnnl_md_any_dt(&dst_md, y->shape.rank, ydims, dt);
        if (s2 == dnnl_success)
            s2 = dnnl_dilated_deconvolution_forward_desc_init(
                &dd, dnnl_forward_inference, dnnl_deconvolution_direct, &src_md, &w_any,
                b ? &b_md : NULL, &dst_md, geom.strides, geom.dil, geom.pl, geom.pr);
        if (s2 == dnnl_success &&
            infd_dnnl_pd_create(a, &dd, NULL, 1.0f, "deconvolution", &pd2, NULL) == INFD_STATUS_OK)
            take_if_faster(&pd, pd2);
    }
    if (st == INFD_STATUS_OK) {
        src_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
        if (!dnnl_memory_desc_equal(&src_md, &src_in))
            src_head = infd_align_up(dnnl_memory_desc_get_size(&src_md), 64);
    }
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(
            a, err,
            infd_dnnl_dst_get(a, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), src_head,
                              &dst),
            "oneDNN deconvolution descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_kernel_create_at(a, "dnnl:deconv", pd, dst.head, &k, err);
    if (st == INFD_STATUS_OK)
        st = bind_src(k, a, &src_in, src_head ? &src_md : NULL, dst.head, err);
    if (st == INFD_STATUS_OK)
        st = add_weights(k, a, pd, &w_onnx, err);
    if (st == INFD_STATUS_OK && b)
        st = add_bias(k, a, &b_md, err);
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
