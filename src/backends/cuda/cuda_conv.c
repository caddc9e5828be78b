/*
 * cuda_conv.c - Conv (1-D and 2-D, FP32 NCHW) on cuDNN: the node glue for
 * cuda_conv.cu.
 *
 * Fusion: bias + ReLU (+ residual) run inside cuDNN's
 * cudnnConvolutionBiasActivationForward; any other fused activation, or a
 * bias without ReLU, runs as one epilogue kernel after the convolution
 * (infd_cuda_bias_act), so every fusion the plan offers is accepted.
 * Asymmetric pads (TF-style SAME, ceil-mode ends) have no cuDNN form: the
 * input is padded into the workspace first and convolved unpadded.
 *
 * FP16 plans: a Conv with constant weights runs in FP16 NHWC on tensor
 * cores between two conversion kernels (compile_fp16); values between
 * kernels stay FP32 NCHW (keeping FP16 NHWC between convs through the
 * plan's opaque layouts is the next step of #6). Where cuDNN has no FP16
 * algorithm for a shape the Conv stays FP32.
 */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_conv.h"
#include "backends/cuda/cuda_movement.h"
#include "backends/cuda/cuda_ops.h"
#include "core/alloc.h"
#include "core/common.h"

typedef struct conv_kernel {
    infd_cuda_kernel base;
    infd_cuda_conv *conv;
    char name[64];
    infd_cuda_act act;
    float alpha, beta;
    bool fused; /* bias + ReLU (+ residual) inside cuDNN */
    bool has_sum;
    bool has_bias;
    int64_t n_out, k, hw;
    /* Explicit pre-padding (asymmetric pads): into the workspace. */
    bool prepad;
    int64_t in_dims[4], pad_dims[4], pad_begin[4];
    size_t pad_bytes; /* workspace bytes the padded input takes (aligned) */
    /* FP16 (an FP16 plan with constant weights): x converted to FP16 NHWC
     * (padding included) into the workspace, the convolution into FP16
     * NHWC after it, then back to FP32 NCHW with bias, residual and
     * activation in one kernel. */
    bool fp16;
    int n, c, h, w, hp, wp, pt, pl, oh, ow;
    size_t xh_bytes, yh_bytes;
} conv_kernel;

typedef struct window {
    int64_t k[2], s[2], d[2], pl[2], pr[2];
} window;

/* The conv window over (H, W) with 1-D convs as H = 1, pads resolved from
 * auto_pad and widened at the end to produce the graph's output size. */
static bool get_window(const infd_kernel_args *a, window *w, infd_error *why)
{
    const infd_ir_value *x = a->inputs[0], *wt = a->inputs[1], *y = a->outputs[0];
    int sp = x->shape.rank - 2;
    const int64_t *strides = NULL, *dil = NULL, *pads = NULL;
    int32_t ns = 0, nd = 0, np = 0;
    const char *auto_pad = NULL;
    if (infd_ir_attr_ints(a->g, a->node, "strides", &strides, &ns, why) != INFD_STATUS_OK ||
        infd_ir_attr_ints(a->g, a->node, "dilations", &dil, &nd, why) != INFD_STATUS_OK ||
        infd_ir_attr_ints(a->g, a->node, "pads", &pads, &np, why) != INFD_STATUS_OK ||
        infd_ir_attr_string(a->g, a->node, "auto_pad", "NOTSET", &auto_pad, why) != INFD_STATUS_OK)
        return false;
    if ((strides && ns != sp) || (dil && nd != sp) || (pads && np != 2 * sp)) {
        infd_cuda_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                             "strides, dilations or pads do not match %d spatial dims", sp);
        return false;
    }
    for (int i = 0; i < 2; i++) {
        int j = i - (2 - sp); /* attribute index; < 0 for the H of a 1-D conv */
        int64_t in = j >= 0 ? x->shape.dims[2 + j].value : 1;
        int64_t out = j >= 0 ? y->shape.dims[2 + j].value : 1;
        w->k[i] = j >= 0 ? wt->shape.dims[2 + j].value : 1;
        w->s[i] = j >= 0 && strides ? strides[j] : 1;
        w->d[i] = j >= 0 && dil ? dil[j] : 1;
        int64_t pl = j >= 0 && pads ? pads[j] : 0, pr = j >= 0 && pads ? pads[j + sp] : 0;
        int64_t dk = (w->k[i] - 1) * w->d[i] + 1;
        if (w->s[i] < 1 || w->d[i] < 1 || pl < 0 || pr < 0) {
            infd_cuda_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                                 "strides and dilations must be >= 1 and pads >= 0");
            return false;
        }
        if (j >= 0 && strcmp(auto_pad, "VALID") == 0) {
            pl = pr = 0;
        } else if (j >= 0 && strncmp(auto_pad, "SAME_", 5) == 0) {
            int64_t total = INFD_MAX(0, (out - 1) * w->s[i] + dk - in);
            pl = auto_pad[5] == 'U' ? total / 2 : total - total / 2;
            pr = total - pl;
        }
        int64_t need = (out - 1) * w->s[i] + dk - in - pl;
        if (need > pr)
            pr = need;
        if ((in + pl + pr - dk) / w->s[i] + 1 != out) {
            infd_cuda_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                                 "output size %lld does not follow from input %lld", (long long)out,
                                 (long long)in);
            return false;
        }
        w->pl[i] = pl;
        w->pr[i] = pr;
    }
    return true;
}

static bool conv_supports(const infd_kernel_args *a, infd_error *why)
{
    int64_t group = 1;
    window w;
    infd_cuda_act act;
    float alpha, beta;
    if (a->n_inputs < 2 || !a->inputs[0] || !a->inputs[1] || a->n_outputs != 1) {
        infd_cuda_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "needs X and W");
        return false;
    }
    if (!infd_cuda_fp32_only(a, a->n_inputs, why))
        return false;
    const infd_ir_value *x = a->inputs[0], *wt = a->inputs[1], *y = a->outputs[0];
    if ((x->shape.rank != 3 && x->shape.rank != 4) || wt->shape.rank != x->shape.rank ||
        y->shape.rank != x->shape.rank) {
        infd_cuda_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                             "CUDA runs 1-D and 2-D convolutions; this one has rank %d",
                             (int)x->shape.rank);
        return false;
    }
    if (infd_ir_attr_int(a->g, a->node, "group", 1, &group, why) != INFD_STATUS_OK)
        return false;
    int64_t c = x->shape.dims[1].value, oc = y->shape.dims[1].value;
    if (group < 1 || c % group || oc % group || wt->shape.dims[0].value != oc ||
        wt->shape.dims[1].value * group != c) {
        infd_cuda_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                             "channels do not match: input %lld, output %lld, group %lld",
                             (long long)c, (long long)oc, (long long)group);
        return false;
    }
    const infd_ir_value *b = a->n_inputs > 2 ? a->inputs[2] : NULL;
    if (b && infd_cuda_numel(b) != oc) {
        infd_cuda_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "bias must have %lld values",
                             (long long)oc);
        return false;
    }
    if (infd_cuda_fused_sum(a) &&
        (a->n_inputs < 4 || !a->inputs[3] || infd_cuda_numel(a->inputs[3]) != infd_cuda_numel(y))) {
        infd_cuda_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                             "the fused residual must be shaped like the output");
        return false;
    }
    for (int i = 0; i < x->shape.rank; i++) {
        if (x->shape.dims[i].value > INT32_MAX || y->shape.dims[i].value > INT32_MAX) {
            infd_cuda_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "dims exceed cuDNN's int");
            return false;
        }
    }
    return get_window(a, &w, why) && infd_cuda_fused_activation(a, &act, &alpha, &beta, why);
}

static void conv_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const conv_kernel *k = (const conv_kernel *)base;
    const float *x = io->inputs[0], *w = io->inputs[1];
    const float *b = k->has_bias ? io->inputs[2] : NULL;
    const float *res = k->has_sum ? io->inputs[3] : NULL;
    float *y = io->outputs[0];
    uint8_t *ws = io->workspace;
    if (k->fp16) {
        uint8_t *xh = ws, *yh = ws + k->xh_bytes;
        infd_cuda_to_nhwc_half(io->stream, x, xh, k->n, k->c, k->h, k->w, k->hp, k->wp, k->pt,
                               k->pl);
        infd_cuda_conv_run(k->conv, io->stream, (const float *)xh, w, NULL, NULL, (float *)yh,
                           yh + k->yh_bytes);
        infd_cuda_from_nhwc_half(io->stream, yh, y, b, res, k->n, (int)k->k, k->oh, k->ow,
                                 (int)k->act, k->alpha, k->beta);
        return;
    }
    if (k->prepad) {
        int64_t n = k->pad_dims[0] * k->pad_dims[1] * k->pad_dims[2] * k->pad_dims[3];
        infd_cuda_pad(io->stream, x, (float *)ws, 4, k->in_dims, k->pad_dims, k->pad_begin, 0, 0.0f,
                      n);
        x = (const float *)ws;
        ws += k->pad_bytes;
    }
    infd_cuda_conv_run(k->conv, io->stream, x, w, b, res, y, ws);
    if (!k->fused && (b || res || k->act != INFD_CUDA_ACT_NONE))
        infd_cuda_bias_act(io->stream, y, b, res, k->n_out, k->k, k->hw, k->act, k->alpha, k->beta);
}

static void conv_fini(infd_cuda_kernel *base)
{
    infd_cuda_conv_destroy(((conv_kernel *)base)->conv);
}

/* The FP16 variant of the convolution `d` describes (FP32, padded when
 * k->prepad); false when cuDNN has none (the caller builds FP32 instead). */
static bool compile_fp16(conv_kernel *k, const infd_cuda_conv_desc *d, const float *weights)
{
    char why[256] = "";
    size_t ws = 0;
    infd_cuda_conv_desc h = *d;
    h.fp16 = 1;
    h.fused_relu = h.has_res = 0;
    k->conv = infd_cuda_conv_create(&h, weights, &ws, k->name, sizeof(k->name), why, sizeof(why));
    if (!k->conv)
        return false;
    k->fp16 = true;
    k->fused = false;
    k->n = d->n;
    k->c = d->c;
    k->hp = d->h; /* padded, when prepad */
    k->wp = d->w;
    k->h = k->prepad ? (int)k->in_dims[2] : d->h;
    k->w = k->prepad ? (int)k->in_dims[3] : d->w;
    k->pt = k->prepad ? (int)k->pad_begin[2] : 0;
    k->pl = k->prepad ? (int)k->pad_begin[3] : 0;
    k->oh = d->oh;
    k->ow = d->ow;
    k->prepad = false; /* the conversion pads */
    k->pad_bytes = 0;
    k->xh_bytes = infd_align_up((size_t)k->n * k->c * k->hp * k->wp * 2, INFD_ALIGNMENT);
    k->yh_bytes = infd_align_up((size_t)k->n * d->k * k->oh * k->ow * 2, INFD_ALIGNMENT);
    k->base.base.workspace_bytes = k->xh_bytes + k->yh_bytes + ws;
    return true;
}

static infd_status conv_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    window w;
    int64_t group = 1;
    char why[256] = "";
    if (!get_window(a, &w, err) ||
        infd_ir_attr_int(a->g, a->node, "group", 1, &group, err) != INFD_STATUS_OK)
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    conv_kernel *k =
        (conv_kernel *)infd_cuda_kernel_new(sizeof(conv_kernel), NULL, conv_run, conv_fini);
    if (!k)
        return infd_cuda_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    k->base.base.name = k->name;
    if (!infd_cuda_fused_activation(a, &k->act, &k->alpha, &k->beta, err)) {
        infd_free(k);
        return err ? err->code : INFD_STATUS_UNIMPLEMENTED;
    }
    const infd_ir_value *x = a->inputs[0], *wt = a->inputs[1], *y = a->outputs[0];
    const infd_ir_value *b = a->n_inputs > 2 ? a->inputs[2] : NULL;
    bool sp1 = x->shape.rank == 3;
    k->has_sum = infd_cuda_fused_sum(a);
    k->has_bias = b != NULL;
    k->fused = b && k->act == INFD_CUDA_ACT_RELU;
    k->n_out = infd_cuda_numel(y);
    k->k = y->shape.dims[1].value;
    k->hw = k->n_out / (y->shape.dims[0].value * k->k);

    infd_cuda_conv_desc d = { 0 };
    d.n = (int)x->shape.dims[0].value;
    d.c = (int)x->shape.dims[1].value;
    d.h = sp1 ? 1 : (int)x->shape.dims[2].value;
    d.w = (int)x->shape.dims[x->shape.rank - 1].value;
    d.k = (int)k->k;
    d.oh = sp1 ? 1 : (int)y->shape.dims[2].value;
    d.ow = (int)y->shape.dims[y->shape.rank - 1].value;
    d.r = (int)w.k[0];
    d.s = (int)w.k[1];
    d.stride_h = (int)w.s[0];
    d.stride_w = (int)w.s[1];
    d.dil_h = (int)w.d[0];
    d.dil_w = (int)w.d[1];
    d.groups = (int)group;
    d.fused_relu = k->fused;
    d.has_res = k->fused && k->has_sum;
    if (w.pl[0] == w.pr[0] && w.pl[1] == w.pr[1]) {
        d.pad_h = (int)w.pl[0];
        d.pad_w = (int)w.pl[1];
    } else {
        k->prepad = true;
        int64_t in[4] = { d.n, d.c, d.h, d.w };
        int64_t padded[4] = { d.n, d.c, d.h + w.pl[0] + w.pr[0], d.w + w.pl[1] + w.pr[1] };
        int64_t begin[4] = { 0, 0, w.pl[0], w.pl[1] };
        memcpy(k->in_dims, in, sizeof(in));
        memcpy(k->pad_dims, padded, sizeof(padded));
        memcpy(k->pad_begin, begin, sizeof(begin));
        k->pad_bytes = infd_align_up((size_t)(padded[0] * padded[1] * padded[2] * padded[3]) * 4,
                                     INFD_ALIGNMENT);
        d.h = (int)padded[2];
        d.w = (int)padded[3];
    }
    size_t ws = 0;
    if (a->precision == INFD_PRECISION_FP16 && wt->data && compile_fp16(k, &d, wt->data))
        goto done;
    k->conv = infd_cuda_conv_create(&d, wt->data ? (const float *)wt->data : NULL, &ws, k->name,
                                    sizeof(k->name), why, sizeof(why));
    if (!k->conv && d.fused_relu) { /* no algorithm takes the fused call: epilogue instead */
        k->fused = false;
        d.fused_relu = d.has_res = 0;
        k->conv = infd_cuda_conv_create(&d, wt->data ? (const float *)wt->data : NULL, &ws, k->name,
                                        sizeof(k->name), why, sizeof(why));
    }
    if (!k->conv) {
        infd_free(k);
        return infd_cuda_node_error(a, err, INFD_STATUS_UNIMPLEMENTED, "%s", why);
    }
    k->base.base.workspace_bytes = ws + k->pad_bytes;
done:
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

const infd_cuda_op infd_cuda_ops_conv[] = {
    { "Conv", conv_supports, conv_compile },
    { NULL, NULL, NULL },
};
