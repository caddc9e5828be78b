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
 * cores (compile_fp16), reading and writing the backend's opaque FP16 NHWC
 * layout (cuda_nhwc.h) where the plan keeps values in it, and converting
 * at the edges where it does not. Bias + ReLU (or identity) + residual run
 * inside cuDNN when its fused call has an algorithm for the shape; anything
 * else runs in one epilogue kernel. Where cuDNN has no FP16 algorithm for
 * a shape the Conv stays FP32 (plain layouts only).
 *
 * Each FP16 convolution times the forms that apply to it and keeps the
 * fastest: cuDNN's legacy call (fused or with the epilogue), a cuBLASLt
 * GEMM for 1x1 stride-1 convolutions (bias, residual and ReLU in its
 * epilogue), our depthwise kernel (cuda_nhwc.h) for groups == channels,
 * cuDNN's graph API with everything fused (cuda_convg.h; FP16 only, and not
 * for a packed stem: see try_convg), and our stem kernel (cuda_stem.h) for
 * few input channels, which reads x unpacked (try_stem).
 * INFD_CONV_DISABLE=gemm,dw,convg,stem,cudnn turns forms off for debugging
 * and tests (cuDNN's legacy call stays the last resort when no other form
 * applies).
 *
 * TF32 plans (INFD_PRECISION_TF32): the FP32 path above with TF32 tensor
 * cores allowed (cuda_conv.h, tf32); plain FP32 plans never use them.
 *
 * Tuning records (infd_kernel.tuning): the form, the algorithm and whether
 * the fused call won, so a plan file skips the timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_conv.h"
#include "backends/cuda/cuda_convg.h"
#include "backends/cuda/cuda_gemm.h"
#include "backends/cuda/cuda_movement.h"
#include "backends/cuda/cuda_nhwc.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_runtime.h"
#include "backends/cuda/cuda_stem.h"
#include "core/alloc.h"
#include "core/common.h"
#include "core/log.h"
#include "cuda_shared.h"

typedef struct conv_kernel {
    infd_cuda_kernel base;
    infd_cuda_conv *conv;
    /* FP16 1x1 stride-1 convolutions over FP16 NHWC are a GEMM,
     * [n*h*w, c] x [c, k], with bias, residual and ReLU in cuBLASLt's
     * epilogue; used instead of conv when it times faster. */
    infd_cuda_gemm *gemm;
    /* FP16 depthwise convolutions over FP16 NHWC: our own kernel
     * (cuda_nhwc.h) with bias, residual and activation, weights [r, s, c]
     * in FP16 (dw_w), used when it times faster than cuDNN. */
    void *dw_w;
    infd_cuda_dw_desc dwd;
    /* FP16 convolutions with bias, residual and ReLU/Clip fused through
     * cuDNN's graph API (cuda_convg.h), when one of its engines times
     * fastest. */
    infd_cuda_convg *convg;
    /* FP16 convolutions over few channels (the image): our implicit GEMM
     * (cuda_stem.h) reading x as it arrives, bias and activation fused. */
    infd_cuda_stem *stem;
    float chosen_ms; /* the time of the form chosen so far (compile only) */
    char name[96];
    infd_cuda_act act;
    float alpha, beta;
    bool fused; /* bias + activation (+ residual) inside cuDNN */
    bool has_sum;
    bool has_bias;
    int64_t n_out, k, hw;
    /* Explicit pre-padding (asymmetric pads): into the workspace. */
    bool prepad;
    int64_t in_dims[4], pad_dims[4], pad_begin[4];
    size_t pad_bytes; /* workspace bytes the padded input takes (aligned) */
    /* FP16 (an FP16 plan with constant weights): the convolution reads and
     * writes FP16 NHWC. x is used in place when it arrives in that layout
     * (cuda_nhwc.h) and needs no padding; otherwise it is packed (converted,
     * padded) into the workspace. y is written in place when the plan keeps
     * the output in that layout, else into the workspace and converted out
     * by the epilogue, which also applies what cuDNN did not fuse. */
    bool fp16;
    bool pack, epilogue;
    bool post_act;            /* fused (bias, residual) but the activation runs in the epilogue */
    infd_cuda_fmt hf;         /* the plan's 16-bit format: FP16 or BF16 NHWC */
    infd_cuda_fmt fx, fr, fy; /* formats of x, the residual and y */
    infd_cuda_dims xd, yd;    /* logical input and output dims (h = 1 for 1-D) */
    int64_t hp, wp, pt, pl;   /* the packed input's size and where x sits in it */
    int64_t cp;               /* the packed input's channels (>= xd.c: see PAD_CHANNELS) */
    size_t xh_bytes, yh_bytes;
} conv_kernel;

/* The tuning record a conv keeps (infd_kernel.tuning): the cuDNN algorithm
 * chosen by timing, for the same shapes, precision and fusion. fp16 is the
 * precision the algorithm was timed in: 0 FP32, 1 FP16, 2 BF16, 3 TF32 (a
 * TF32 record is never taken by a strict FP32 convolution, nor the other
 * way round: the same algorithm id runs other kernels under the two math
 * modes). fused: 0 plain, 1 and 2 cuDNN's fused forms, 3 the GEMM (then
 * followed by cuBLASLt's algorithm, INFD_CUDA_GEMM_ALGO_BYTES), 4 our
 * depthwise kernel, 5 our stem kernel; a graph-API record is "cng1" and
 * cuda_convg's. */
typedef struct conv_record {
    char tag[4]; /* "cnv1" */
    int32_t fp16, fused, algo;
} conv_record;

/* conv_record.fp16 for a description. */
static int record_precision(const infd_cuda_conv_desc *d)
{
    if (d->fp16)
        return d->bf16 ? 2 : 1;
    return d->tf32 ? 3 : 0;
}

typedef infd_cuda_window window;

bool infd_cuda_conv_window(const infd_kernel_args *a, const infd_ir_value *wt, window *w,
                           infd_error *why)
{
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
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
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
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
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
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
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
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
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "needs X and W");
        return false;
    }
    if (!infd_cuda_fp32_only(a, a->n_inputs, why))
        return false;
    const infd_ir_value *x = a->inputs[0], *wt = a->inputs[1], *y = a->outputs[0];
    if ((x->shape.rank != 3 && x->shape.rank != 4) || wt->shape.rank != x->shape.rank ||
        y->shape.rank != x->shape.rank) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "CUDA runs 1-D and 2-D convolutions; this one has rank %d",
                        (int)x->shape.rank);
        return false;
    }
    if (infd_ir_attr_int(a->g, a->node, "group", 1, &group, why) != INFD_STATUS_OK)
        return false;
    int64_t c = x->shape.dims[1].value, oc = y->shape.dims[1].value;
    if (group < 1 || c % group || oc % group || wt->shape.dims[0].value != oc ||
        wt->shape.dims[1].value * group != c) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "channels do not match: input %lld, output %lld, group %lld", (long long)c,
                        (long long)oc, (long long)group);
        return false;
    }
    const infd_ir_value *b = a->n_inputs > 2 ? a->inputs[2] : NULL;
    if (b && infd_node_numel(b) != oc) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "bias must have %lld values",
                        (long long)oc);
        return false;
    }
    if (infd_cuda_fused_sum(a) &&
        (a->n_inputs < 4 || !a->inputs[3] || infd_node_numel(a->inputs[3]) != infd_node_numel(y))) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "the fused residual must be shaped like the output");
        return false;
    }
    for (int i = 0; i < x->shape.rank; i++) {
        if (x->shape.dims[i].value > INT32_MAX || y->shape.dims[i].value > INT32_MAX) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "dims exceed cuDNN's int");
            return false;
        }
    }
    return infd_cuda_conv_window(a, a->inputs[1], &w, why) &&
           infd_cuda_fused_activation(a, &act, &alpha, &beta, why);
}

static void conv_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const conv_kernel *k = (const conv_kernel *)base;
    const void *x = io->inputs[0];
    const float *w = io->inputs[1];
    const float *b = k->has_bias ? io->inputs[2] : NULL;
    const void *res = k->has_sum ? io->inputs[3] : NULL;
    void *y = io->outputs[0];
    uint8_t *ws = io->workspace;
    if (k->fp16) {
        if (k->pack) {
            infd_cuda_nhwc_pack(io->stream, x, k->fx, k->xd, ws, k->hf, k->hp, k->wp, k->pt, k->pl,
                                k->cp);
            x = ws;
            ws += k->xh_bytes;
        }
        void *yh = y;
        if (k->fy != k->hf) {
            yh = ws;
            ws += k->yh_bytes;
        }
        if (k->convg)
            infd_cuda_convg_run(k->convg, io->stream, x, res, yh, ws);
        else if (k->stem)
            infd_cuda_stem_run(k->stem, io->stream, x, yh);
        else if (k->dw_w)
            infd_cuda_nhwc_dwconv(io->stream, &k->dwd, k->hf, x, k->dw_w, b, res, yh, (int)k->act,
                                  k->alpha, k->beta);
        else if (k->gemm)
            infd_cuda_gemm_run(k->gemm, io->stream, x, NULL, res, yh, ws);
        else
            infd_cuda_conv_run(k->conv, io->stream, x, NULL, NULL, res, yh, ws);
        if (k->epilogue)
            infd_cuda_nhwc_eltwise(io->stream, k->yd, yh, k->hf, k->fused ? NULL : b,
                                   INFD_CUDA_BIN_ADD, k->fused ? NULL : res, k->fr, y, k->fy,
                                   k->fused && !k->post_act ? INFD_CUDA_ACT_NONE : (int)k->act,
                                   k->alpha, k->beta);
        return;
    }
    if (k->prepad) {
        int64_t n = k->pad_dims[0] * k->pad_dims[1] * k->pad_dims[2] * k->pad_dims[3];
        infd_cuda_pad(io->stream, x, (float *)ws, 4, k->in_dims, k->pad_dims, k->pad_begin, 0, 0.0f,
                      n);
        x = ws;
        ws += k->pad_bytes;
    }
    infd_cuda_conv_run(k->conv, io->stream, x, w, b, res, y, ws);
    if (!k->fused && (b || res || k->act != INFD_CUDA_ACT_NONE))
        infd_cuda_bias_act(io->stream, y, b, res, k->n_out, k->k, k->hw, k->act, k->alpha, k->beta);
}

/* Frees whichever form the kernel holds (at most one, once chosen). */
static void free_forms(conv_kernel *k)
{
    infd_cuda_conv_destroy(k->conv);
    infd_cuda_gemm_destroy(k->gemm);
    infd_cuda_weights_free(k->dw_w);
    infd_cuda_convg_destroy(k->convg);
    infd_cuda_stem_destroy(k->stem);
    k->conv = NULL;
    k->gemm = NULL;
    k->dw_w = NULL;
    k->convg = NULL;
    k->stem = NULL;
}

static void conv_fini(infd_cuda_kernel *base)
{
    free_forms((conv_kernel *)base);
}

/* The conv record a->tuning holds, in *r; false when it holds none. The
 * GEMM form's (fused == 3) is followed by cuBLASLt's algorithm, in *algo
 * (may be NULL; NULL when absent). */
static bool read_record(const infd_kernel_args *a, conv_record *r, const void **algo)
{
    if (algo)
        *algo = NULL;
    if (!a->tuning || a->tuning_bytes < sizeof(*r))
        return false;
    memcpy(r, a->tuning, sizeof(*r));
    if (memcmp(r->tag, "cnv1", 4) != 0)
        return false;
    if (a->tuning_bytes == sizeof(*r))
        return true;
    if (r->fused != 3 || a->tuning_bytes != sizeof(*r) + INFD_CUDA_GEMM_ALGO_BYTES)
        return false;
    if (algo)
        *algo = a->tuning + sizeof(*r);
    return true;
}

/* The algorithm a tuning record names for this variant, or -1. */
static int recorded_algo(const infd_kernel_args *a, int fp16, int fused)
{
    conv_record r;
    if (!read_record(a, &r, NULL) || r.fp16 != fp16 || r.fused != fused || r.algo < 0)
        return -1;
    return r.algo;
}

/* Whether a tuning record says the fused variant lost (no fused algorithm
 * ran), so compile goes straight to the plain one. */
static bool recorded_unfused(const infd_kernel_args *a, int fp16)
{
    conv_record r;
    return read_record(a, &r, NULL) && r.fp16 == fp16 && r.fused == 0;
}

/* Creates the cuDNN convolution for `d`, from the record when it has one
 * that works, and keeps the choice as the kernel's tuning record. */
static infd_cuda_conv *create_conv(const infd_kernel_args *a, conv_kernel *k,
                                   const infd_cuda_conv_desc *d, const float *w, const float *b,
                                   size_t *ws, char *why, size_t why_n)
{
    int prec = record_precision(d);
    int algo = recorded_algo(a, prec, d->fused), chosen = -1;
    infd_cuda_conv *c = NULL;
    if (algo >= 0)
        c = infd_cuda_conv_create(d, w, b, algo, ws, &chosen, k->name, sizeof(k->name), why, why_n);
    if (!c)
        c = infd_cuda_conv_create(d, w, b, -1, ws, &chosen, k->name, sizeof(k->name), why, why_n);
    if (c) {
        conv_record r = { { 'c', 'n', 'v', '1' }, prec, d->fused, chosen };
        infd_cuda_kernel_keep_tuning(&k->base, &r, sizeof(r), NULL, 0);
    }
    return c;
}

/* Whether a tuning record chose a form other than cuDNN: the GEMM
 * (conv_record.fused == 3), our depthwise kernel (4) or our stem (5). */
static bool recorded_form(const infd_kernel_args *a, int form)
{
    conv_record r;
    return read_record(a, &r, NULL) && r.fp16 >= 1 && r.fused == form;
}

/* A graph-API record: "cng1", its length, then cuda_convg's own bytes. */
#define CONVG_TAG "cng1"

static bool recorded_convg(const infd_kernel_args *a)
{
    return a->tuning && a->tuning_bytes > 8 && memcmp(a->tuning, CONVG_TAG, 4) == 0;
}

static bool recorded_not_cudnn(const infd_kernel_args *a)
{
    return recorded_form(a, 3) || recorded_form(a, 4) || recorded_form(a, 5) || recorded_convg(a);
}

/* Whether the kernel has a tuning record naming some form, so forms it
 * does not name are not timed (a plan file loads without tuning). */
static bool have_record(const infd_kernel_args *a)
{
    conv_record r;
    return recorded_convg(a) || read_record(a, &r, NULL);
}

/* The convolution through cuDNN's graph API with everything fused
 * (cuda_convg.h) when its fastest engine beats the form chosen so far, or
 * when the record names it. x is FP16 NHWC (packed: unpadded, cp
 * channels), y FP16 NHWC. */
static void try_convg(const infd_kernel_args *a, conv_kernel *k, const infd_cuda_conv_desc *d,
                      const float *wt, size_t *ws)
{
    const infd_ir_value *b = a->n_inputs > 2 ? a->inputs[2] : NULL;
    bool from_record = recorded_convg(a);
    char why[256] = "";
    /* Not for a packed input (the network's stem). It once gave wrong
     * results there (ResNet-50 FP16 1.6e-2 of the logits' range instead of
     * 5e-4), then blamed on cuDNN's graph path; the cause was ours: the
     * descriptor below dropped the spatial padding of a pack that only
     * converts (see try_dw). Fixed: allowed at the stem on the H200 it gave
     * ResNet-50 FP16 5.9e-4 (legacy call: 6.6e-4). It stays off there:
     * its runtime-compiled engine took 172 ms to compile against the
     * legacy call's 59 ms (plan load matters, issue #6); batch-32
     * throughput was 9.85k against 9.38k img/s, one run each: to be
     * repeated before it is turned on. */
    if ((have_record(a) && !from_record) || infd_cuda_conv_disabled("convg") || k->pack ||
        k->prepad || /* d is the packed input's, and the depthwise form reads x unpacked */
        k->hf != INFD_CUDA_FMT_F16_NHWC || k->fy != k->hf || (k->has_sum && k->fr != k->hf) ||
        (b && !b->data) ||
        (k->act != INFD_CUDA_ACT_NONE && k->act != INFD_CUDA_ACT_RELU &&
         k->act != INFD_CUDA_ACT_CLIP))
        return;
    infd_cuda_convg_desc g = { .n = d->n,
                               .c = (int)k->cp,
                               .h = d->h,
                               .w = d->w,
                               .k = d->k,
                               .oh = d->oh,
                               .ow = d->ow,
                               .r = d->r,
                               .s = d->s,
                               .pad_h = d->pad_h,
                               .pad_w = d->pad_w,
                               .stride_h = d->stride_h,
                               .stride_w = d->stride_w,
                               .dil_h = d->dil_h,
                               .dil_w = d->dil_w,
                               .groups = d->groups,
                               .fp16 = 1,
                               .has_bias = b != NULL,
                               .has_res = k->has_sum,
                               .act = k->act == INFD_CUDA_ACT_RELU   ? INFD_CUDA_CONVG_ACT_RELU
                                      : k->act == INFD_CUDA_ACT_CLIP ? INFD_CUDA_CONVG_ACT_CLIP
                                                                     : INFD_CUDA_CONVG_ACT_NONE,
                               .act_lo = k->alpha,
                               .act_hi = k->beta };
    size_t gws = 0;
    char name[96];
    const uint8_t *in = a->tuning;
    infd_cuda_convg *c = infd_cuda_convg_create(
        &g, wt, b ? b->data : NULL, from_record ? in + 8 : NULL,
        from_record ? a->tuning_bytes - 8 : 0, &gws, name, sizeof(name), why, sizeof(why));
    if (!c)
        return;
    float ms = infd_cuda_convg_ms(c);
    bool others = k->conv || k->gemm || k->dw_w;
    if (!from_record && others && k->chosen_ms <= ms) {
        infd_cuda_convg_destroy(c);
        return;
    }
    free_forms(k);
    k->post_act = false;
    k->convg = c;
    k->fused = true;
    k->chosen_ms = ms;
    *ws = gws;
    snprintf(k->name, sizeof(k->name), "%s", name);
    size_t rec_n = 0;
    const void *rec = infd_cuda_convg_record(c, &rec_n);
    infd_cuda_kernel_keep_tuning(&k->base, NULL, 0, NULL, 0);
    if (rec_n > 0 && rec_n + 8 <= INFD_KERNEL_TUNING_MAX) {
        uint8_t head[8];
        uint32_t n32 = (uint32_t)rec_n;
        memcpy(head, CONVG_TAG, 4);
        memcpy(head + 4, &n32, 4);
        infd_cuda_kernel_keep_tuning(&k->base, head, sizeof(head), rec, rec_n);
    }
}

/* A depthwise FP16 convolution (groups == c == k) between FP16 NHWC values
 * (x packed when it needs padding or converting): our kernel with bias,
 * residual and activation fused, replacing cuDNN when it times faster.
 * The pack pads only when k->prepad, and then d already has the padded
 * sizes and no padding; a pack that only converts keeps d's padding. (It
 * was taken as 0 for every pack: PaddleOCR rec and det FP16, whose
 * depthwise convs read plain values, came out shifted by a pixel.) */
static void try_dw(const infd_kernel_args *a, conv_kernel *k, const infd_cuda_conv_desc *d,
                   size_t *ws)
{
    char why[256] = "";
    if (d->groups != d->c || d->k != d->c || k->fy != k->hf || (k->has_sum && k->fr != k->hf) ||
        k->cp != d->c || k->gemm)
        return;
    /* Pads that differ at the two ends (TF's SAME with stride 2): the
     * kernel pads x itself, where the other forms read it packed. */
    bool own_pads = k->prepad && k->fx == k->hf;
    infd_cuda_dw_desc dw = { .n = d->n,
                             .c = d->c,
                             .h = own_pads ? k->in_dims[2] : d->h,
                             .w = own_pads ? k->in_dims[3] : d->w,
                             .oh = d->oh,
                             .ow = d->ow,
                             .r = d->r,
                             .s = d->s,
                             .sh = d->stride_h,
                             .sw = d->stride_w,
                             .ph = own_pads ? (int)k->pad_begin[2] : d->pad_h,
                             .pw = own_pads ? (int)k->pad_begin[3] : d->pad_w,
                             .dh = d->dil_h,
                             .dw = d->dil_w };
    bool from_record = recorded_form(a, 4);
    float ms = 0.0f;
    if ((have_record(a) && !from_record) || infd_cuda_conv_disabled("dw"))
        return;
    if (!from_record) {
        ms = infd_cuda_nhwc_dwconv_time(&dw, k->hf, k->has_sum, (int)k->act);
        float others = k->chosen_ms; /* plus the pack they need and this form does not */
        if (own_pads && k->conv && ms >= 0)
            others +=
                infd_cuda_nhwc_pack_time(k->fx, k->xd, k->hf, k->hp, k->wp, k->pt, k->pl, k->cp);
        if (ms < 0 || (k->conv && others <= ms))
            return;
    }
    /* [k, 1, r, s] is KCRS with one output row of c channels: its KRSC
     * copy is [r, s, c]. */
    void *w16 = infd_cuda_upload_krsc(a->inputs[1]->data, 1, d->c, (int64_t)d->r * d->s, k->hf, why,
                                      sizeof(why));
    if (!w16)
        return;
    free_forms(k);
    k->dw_w = w16;
    *ws = 0; /* the kernel needs none */
    k->dwd = dw;
    k->pack = k->pack && !own_pads;
    k->chosen_ms = ms;
    k->fused = true; /* bias, residual and activation are in the kernel */
    snprintf(k->name, sizeof(k->name), "cuda:dwconv_fp16");
    conv_record r = { { 'c', 'n', 'v', '1' }, 1, 4, 0 };
    infd_cuda_kernel_keep_tuning(&k->base, &r, sizeof(r), NULL, 0);
}

/* The time of the epilogue kernel a form leaves work to, over the output
 * in the plan's 16-bit layout: the activation, and with bias_res the bias
 * and residual too (cuDNN's unfused call). Added to that form's own time
 * when forms are compared, so a fully fused form (the graph API's Clip,
 * our depthwise kernel) wins where the two passes together are slower:
 * MobileNetV2's ReLU6 after a cuBLASLt GEMM used to win on the GEMM's time
 * alone and then cost a third of the network in epilogues. 0 when the
 * output is not in that layout (every form then converts it alike). */
static float epilogue_ms(const conv_kernel *k, bool bias_res)
{
    if (k->fy != k->hf)
        return 0.0f;
    float ms = infd_cuda_nhwc_eltwise_time(k->yd, k->hf, bias_res && k->has_bias,
                                           bias_res && k->has_sum, (int)k->act, k->alpha, k->beta);
    return ms > 0.0f ? ms : 0.0f;
}

/* A 1x1, stride-1, unpadded, ungrouped FP16 convolution between FP16 NHWC
 * values is Y[n*h*w, k] = X[n*h*w, c] W[k, c]^T: cuBLASLt with bias,
 * residual (beta = 1) and ReLU in the epilogue. Replaces the cuDNN
 * convolution (k->conv, or none when a record chose the GEMM) when it runs
 * faster, or when there is none. */
static void try_gemm(const infd_kernel_args *a, conv_kernel *k, const infd_cuda_conv_desc *d,
                     size_t *ws)
{
    const infd_ir_value *b = a->n_inputs > 2 ? a->inputs[2] : NULL;
    char why[256] = "";
    if (d->r != 1 || d->s != 1 || d->stride_h != 1 || d->stride_w != 1 || d->pad_h || d->pad_w ||
        d->groups != 1 || k->pack || k->prepad || k->fy != k->hf ||
        (k->has_sum && k->fr != k->hf) || (b && !b->data))
        return;
    bool from_record = recorded_form(a, 3);
    conv_record rec = { { 0 }, 0, 0, 0 };
    const void *algo = NULL;
    if ((have_record(a) && !from_record) || infd_cuda_conv_disabled("gemm"))
        return;
    if (from_record)
        read_record(a, &rec, &algo);
    infd_cuda_gemm_desc g = { .m = (int64_t)d->n * d->oh * d->ow,
                              .n = d->k,
                              .k = d->c,
                              .trans_b = 1,
                              .alpha = 1.0f,
                              .host_bias = b ? b->data : NULL,
                              .relu = k->act == INFD_CUDA_ACT_RELU,
                              .has_res = k->has_sum,
                              .fp16 = 1,
                              .bf16 = k->hf == INFD_CUDA_FMT_BF16_NHWC,
                              .host_b = a->inputs[1]->data,
                              .tune = !from_record,
                              .pick = from_record ? rec.algo : 0,
                              .algo = algo };
    size_t gws = 0;
    float ms = 0.0f;
    infd_cuda_gemm *gm = infd_cuda_gemm_create(&g, &gws, &ms, why, sizeof(why));
    if (!gm)
        return;
    bool post_act = k->act != INFD_CUDA_ACT_NONE && k->act != INFD_CUDA_ACT_RELU;
    if (post_act && !from_record)
        ms += epilogue_ms(k, false);
    if (k->conv && !from_record && k->chosen_ms <= ms) {
        infd_cuda_gemm_destroy(gm); /* cuDNN is faster */
        return;
    }
    free_forms(k);
    k->gemm = gm;
    k->chosen_ms = ms;
    k->fused = true; /* bias, residual and ReLU are in cuBLASLt's epilogue */
    k->post_act = post_act;
    *ws = gws;
    snprintf(k->name, sizeof(k->name), "cublaslt:conv1x1_fp16%s", b ? "_bias" : "");
    conv_record r = { { 'c', 'n', 'v', '1' }, 1, 3, infd_cuda_gemm_pick(gm) };
    infd_cuda_kernel_keep_tuning(&k->base, &r, sizeof(r), infd_cuda_gemm_algo(gm),
                                 INFD_CUDA_GEMM_ALGO_BYTES);
}

/* A packed input with fewer channels than this (the image at a network's
 * first conv: 3) is padded with zero channels to it: cuDNN's FP16 NHWC
 * tensor-core kernels want channels in multiples of 8, and at C = 3 it
 * falls back to kernels many times slower. */
#define PAD_CHANNELS 8

/* A convolution over few input channels (the image at a network's first
 * conv: c = 3) with FP16 output: our implicit GEMM (cuda_stem.h), which
 * reads x as it arrives (plain FP32 NCHW or FP16 NHWC) and pads it itself,
 * with bias and activation fused, replacing cuDNN when it times faster
 * than cuDNN's convolution plus the pack (conversion, padding, channels to
 * PAD_CHANNELS) cuDNN needs first. */
static void try_stem(const infd_kernel_args *a, conv_kernel *k, const infd_cuda_conv_desc *d,
                     size_t *ws)
{
    const infd_ir_value *b = a->n_inputs > 2 ? a->inputs[2] : NULL;
    char why[256] = "";
    if (k->hf != INFD_CUDA_FMT_F16_NHWC || a->inputs[0]->shape.rank != 4 || d->groups != 1 ||
        k->has_sum || (b && !b->data) || k->xd.c >= PAD_CHANNELS ||
        (k->fx != INFD_CUDA_FMT_F32_NCHW && k->fx != INFD_CUDA_FMT_F16_NHWC))
        return;
    bool from_record = recorded_form(a, 5);
    if ((have_record(a) && !from_record) || infd_cuda_conv_disabled("stem"))
        return;
    /* With asymmetric pads d has the padded sizes and no padding; the
     * kernel takes x unpadded with its top and left pads. */
    infd_cuda_stem_desc sd = { .n = d->n,
                               .c = (int)k->xd.c,
                               .h = (int)k->xd.h,
                               .w = (int)k->xd.w,
                               .fx = (int)k->fx,
                               .k = d->k,
                               .oh = d->oh,
                               .ow = d->ow,
                               .r = d->r,
                               .s = d->s,
                               .sh = d->stride_h,
                               .sw = d->stride_w,
                               .pt = k->prepad ? (int)k->pad_begin[2] : d->pad_h,
                               .pl = k->prepad ? (int)k->pad_begin[3] : d->pad_w,
                               .dh = d->dil_h,
                               .dw = d->dil_w,
                               .act = (int)k->act,
                               .alpha = k->alpha,
                               .beta = k->beta };
    if (!infd_cuda_stem_fits(&sd, why, sizeof(why)))
        return;
    infd_cuda_stem *st =
        infd_cuda_stem_create(&sd, a->inputs[1]->data, b ? b->data : NULL, why, sizeof(why));
    if (!st)
        return;
    float ms = 0.0f;
    if (!from_record) {
        ms = infd_cuda_stem_time(st);
        bool others = k->conv || k->gemm || k->dw_w || k->convg;
        float theirs = k->chosen_ms; /* plus the pack they need and this form does not */
        if (others && k->pack && ms >= 0)
            theirs +=
                infd_cuda_nhwc_pack_time(k->fx, k->xd, k->hf, k->hp, k->wp, k->pt, k->pl, k->cp);
        INFD_LOG_DEBUG("'%s': the stem kernel takes %.3f ms, %s %.3f ms", a->node->name, ms,
                       others ? k->name : "no other form", others ? theirs : 0.0f);
        if (ms < 0 || (others && theirs <= ms)) {
            infd_cuda_stem_destroy(st);
            return;
        }
    }
    free_forms(k);
    k->stem = st;
    *ws = 0; /* the kernel needs none */
    k->pack = false;
    k->chosen_ms = ms;
    k->fused = true; /* bias and activation are in the kernel */
    k->post_act = false;
    snprintf(k->name, sizeof(k->name), "cuda:stem_fp16");
    conv_record r = { { 'c', 'n', 'v', '1' }, 1, 5, 0 };
    infd_cuda_kernel_keep_tuning(&k->base, &r, sizeof(r), NULL, 0);
}

/* The FP16 variant of the convolution `d` describes (FP32 NCHW sizes,
 * padded when k->prepad); false when cuDNN has none (the caller builds
 * FP32 instead, which works only with plain layouts). */
static bool compile_fp16(const infd_kernel_args *a, conv_kernel *k, const infd_cuda_conv_desc *d)
{
    char why[256] = "";
    size_t ws = 0;
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    const infd_ir_value *b = a->n_inputs > 2 ? a->inputs[2] : NULL;
    bool sp1 = x->shape.rank == 3;
    k->hf = a->precision == INFD_PRECISION_BF16 ? INFD_CUDA_FMT_BF16_NHWC : INFD_CUDA_FMT_F16_NHWC;
    k->fx = infd_cuda_input_fmt(a, 0);
    k->fr = k->has_sum ? infd_cuda_input_fmt(a, 3) : INFD_CUDA_FMT_F32_NCHW;
    k->fy = a->output_opaque_ok && !sp1 ? k->hf : INFD_CUDA_FMT_F32_NCHW;
    k->xd = (infd_cuda_dims){ d->n, d->c, k->prepad ? k->in_dims[2] : d->h,
                              k->prepad ? k->in_dims[3] : d->w };
    k->yd = (infd_cuda_dims){ d->n, d->k, d->oh, d->ow };
    k->hp = d->h; /* padded, when prepad */
    k->wp = d->w;
    k->pt = k->prepad ? k->pad_begin[2] : 0;
    k->pl = k->prepad ? k->pad_begin[3] : 0;
    k->pack = k->prepad || k->fx != k->hf;
    k->cp = d->c;

    infd_cuda_conv_desc h = *d;
    h.fp16 = 1;
    h.bf16 = k->hf == INFD_CUDA_FMT_BF16_NHWC;
    h.fused = h.has_res = 0;
    const float *wt = a->inputs[1]->data;
    float *wpad = NULL;
    if (k->pack && d->groups == 1 && d->c < PAD_CHANNELS) {
        /* Zero input channels, and zero weights for them: the same sums. */
        size_t rs = (size_t)d->r * d->s;
        wpad = infd_calloc((size_t)d->k * PAD_CHANNELS * rs, sizeof(float));
        if (!wpad)
            return false;
        for (int ko = 0; ko < d->k; ko++)
            memcpy(wpad + (size_t)ko * PAD_CHANNELS * rs, wt + (size_t)ko * d->c * rs,
                   (size_t)d->c * rs * sizeof(float));
        wt = wpad;
        k->cp = h.c = PAD_CHANNELS;
    }
    /* cuDNN fuses bias + ReLU or identity (+ residual) when everything
     * stays FP16 NHWC; anything else runs in the epilogue. */
    bool fusable = k->fy == k->hf && b && b->data &&
                   (k->act == INFD_CUDA_ACT_RELU || k->act == INFD_CUDA_ACT_NONE) &&
                   (!k->has_sum || k->fr == k->hf);
    k->conv = NULL;
    k->fused = false;
    bool cudnn_off = infd_cuda_conv_disabled("cudnn"); /* tests: force the other forms */
    if (fusable && !cudnn_off && !recorded_unfused(a, record_precision(&h)) &&
        !recorded_not_cudnn(a)) {
        infd_cuda_conv_desc f = h;
        f.fused = k->act == INFD_CUDA_ACT_RELU ? 1 : 2;
        f.has_res = k->has_sum;
        k->conv = create_conv(a, k, &f, wt, b->data, &ws, why, sizeof(why));
        k->fused = k->conv != NULL;
    }
    if (!k->conv && !cudnn_off && !recorded_not_cudnn(a))
        k->conv = create_conv(a, k, &h, wt, NULL, &ws, why, sizeof(why));
    k->chosen_ms = k->conv ? infd_cuda_conv_ms(k->conv) : 0.0f;
    if (k->conv && !k->fused && (k->has_bias || k->has_sum || k->act != INFD_CUDA_ACT_NONE))
        k->chosen_ms += epilogue_ms(k, true);
    try_gemm(a, k, d, &ws);
    try_dw(a, k, d, &ws);
    try_convg(a, k, d, wt, &ws);
    try_stem(a, k, d, &ws);
    if (!k->conv && !k->gemm && !k->dw_w && !k->convg && !k->stem) /* the record's form failed */
        k->conv = create_conv(a, k, &h, wt, NULL, &ws, why, sizeof(why));
    infd_free(wpad);
    if (!k->conv && !k->gemm && !k->dw_w && !k->convg && !k->stem)
        return false;
    k->fp16 = true;
    k->prepad = false; /* the pack pads */
    k->pad_bytes = 0;
    k->epilogue = k->fy != k->hf || k->post_act ||
                  (!k->fused && (k->has_bias || k->has_sum || k->act != INFD_CUDA_ACT_NONE));
    k->xh_bytes = k->pack ? infd_align_up((size_t)(k->xd.n * k->hp * k->wp * k->cp) * 2,
                                          INFD_WORKSPACE_ALIGNMENT)
                          : 0;
    k->yh_bytes = k->fy != k->hf
                      ? infd_align_up((size_t)infd_node_numel(y) * 2, INFD_WORKSPACE_ALIGNMENT)
                      : 0;
    k->base.base.workspace_bytes = k->xh_bytes + k->yh_bytes + ws;
    if (k->fy == k->hf) {
        k->base.base.output_layout = k->hf == INFD_CUDA_FMT_BF16_NHWC ? &infd_cuda_layout_bf16_nhwc
                                                                      : &infd_cuda_layout_f16_nhwc;
        k->base.base.output_layout_bytes = (size_t)infd_node_numel(y) * 2;
    }
    return true;
}

static infd_status conv_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    window w;
    int64_t group = 1;
    char why[256] = "";
    if (!infd_cuda_conv_window(a, a->inputs[1], &w, err) ||
        infd_ir_attr_int(a->g, a->node, "group", 1, &group, err) != INFD_STATUS_OK)
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    conv_kernel *k =
        (conv_kernel *)infd_cuda_kernel_new(sizeof(conv_kernel), NULL, conv_run, conv_fini);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
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
    k->n_out = infd_node_numel(y);
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
    d.fused = k->fused ? 1 : 0;
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
                                     INFD_WORKSPACE_ALIGNMENT);
        d.h = (int)padded[2];
        d.w = (int)padded[3];
    }
    size_t ws = 0;
    /* compile_fp16 sets the kernel's fields as it goes; when it finds no
     * 16-bit form the FP32 path starts again from what was set here. */
    conv_kernel before = *k;
    if ((a->precision == INFD_PRECISION_FP16 || a->precision == INFD_PRECISION_BF16) && wt->data &&
        compile_fp16(a, k, &d)) {
        /* Every 16-bit form runs on its own converted weights; the FP32
         * bias is read by the depthwise kernel and an unfused epilogue
         * (conv_run). */
        bool reads_bias = (!k->convg && k->dw_w) || (k->epilogue && !k->fused);
        k->base.base.unread_inputs = 1u << 1 | (k->has_bias && !reads_bias ? 1u << 2 : 0);
        goto done;
    }
    *k = before;
    if (a->input_layouts && (a->input_layouts[0] || (a->n_inputs > 3 && a->input_layouts[3]))) {
        infd_free(k);
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                               "cuDNN has no FP16 algorithm for this convolution");
    }
    k->conv = NULL;
    /* FP32 convolutions, FP16 and BF16 plans' fallbacks included, are
     * strict FP32 unless the plan asked for TF32. */
    d.tf32 = a->precision == INFD_PRECISION_TF32;
    if (d.fused && !recorded_unfused(a, record_precision(&d)))
        k->conv = create_conv(a, k, &d, wt->data, NULL, &ws, why, sizeof(why));
    if (!k->conv && d.fused) { /* no algorithm takes the fused call: epilogue instead */
        k->fused = false;
        d.fused = d.has_res = 0;
    }
    if (!k->conv)
        k->conv = create_conv(a, k, &d, wt->data, NULL, &ws, why, sizeof(why));
    if (!k->conv) {
        infd_free(k);
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED, "%s", why);
    }
    k->base.base.workspace_bytes = ws + k->pad_bytes;
done:
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

bool infd_cuda_conv_opaque(const infd_kernel_args *a, int i)
{
    const infd_ir_value *x = a->n_inputs > 0 ? a->inputs[0] : NULL;
    const infd_ir_value *w = a->n_inputs > 1 ? a->inputs[1] : NULL;
    const infd_ir_value *y = a->n_outputs > 0 ? a->outputs[0] : NULL;
    if ((a->precision != INFD_PRECISION_FP16 && a->precision != INFD_PRECISION_BF16) ||
        strcmp(a->node->op_type, "Conv") != 0 || !x || !w || !w->data || !y ||
        x->dtype != INFD_DTYPE_FP32 || y->dtype != INFD_DTYPE_FP32 || x->shape.rank != 4 ||
        y->shape.rank != 4 || a->n_outputs != 1)
        return false;
    if (i == 3)
        return infd_cuda_fused_sum(a) && a->n_inputs > 3 && a->inputs[3] &&
               a->inputs[3]->dtype == INFD_DTYPE_FP32 && a->inputs[3]->shape.rank == 4;
    return i <= 0;
}

const infd_cuda_op infd_cuda_ops_conv[] = {
    { "Conv", conv_supports, conv_compile },
    { NULL, NULL, NULL },
};
