/*
 * cuda_extra.c - node glue for the CUDA kernels the engine test models need
 * beyond the first set (cuda_extra.h): Slice (any fixed-size dtype, steps
 * of either sign), the Reduce* family (FP32; INT32 and INT64 except
 * ReduceLogSum/ReduceLogSumExp), inference BatchNormalization (FP32),
 * ConvTranspose (FP32, 1-D and 2-D, on cuDNN) and MatMul with batched or
 * 1-D operands (FP32, cuBLASLt strided batches).
 *
 * The table is searched after cuda_conv.c's, cuda_gemm.c's and cuda_ops.c's
 * (cuda_backend.c), so its MatMul entry only sees the MatMuls cuda_gemm.c
 * turned down. Semantics follow the CPU backend's kernels: Slice as
 * ref_movement.c (attributes before opset 10, constant inputs from 10,
 * ONNX's clamping), reductions as ref_reduce.c (axes as an attribute, or as
 * an input from opset 18 and for ReduceSum from 13; noop_with_empty_axes),
 * ConvTranspose's padding as dnnl_conv.c. Everything a run needs is fixed at
 * compile; these kernels read plain layouts only and refuse the fusion
 * hooks, so the plan never fuses into them.
 */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_extra.h"
#include "backends/cuda/cuda_gemm.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_runtime.h"
#include "core/alloc.h"
#include "core/common.h"
#include "graph/node_params.h"

static const infd_ir_value *in_at(const infd_kernel_args *a, int i)
{
    return i < a->n_inputs ? a->inputs[i] : NULL;
}

bool infd_cuda_plain_unfused(const infd_kernel_args *a, infd_error *why)
{
    for (int i = 0; a->input_layouts && i < a->n_inputs; i++) {
        if (a->input_layouts[i]) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "input %d is in an opaque layout; this CUDA kernel reads plain "
                            "data",
                            i);
            return false;
        }
    }
    if (!infd_cuda_fused_known(a, false, why))
        return false;
    if (a->n_inputs < 1 || !a->inputs[0] || a->n_outputs < 1 || !a->outputs[0]) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "missing input or output");
        return false;
    }
    return true;
}

infd_status infd_cuda_kernel_from(const infd_kernel_args *a, const void *tmp, size_t size,
                                  const char *name,
                                  void (*run)(const infd_cuda_kernel *, const infd_kernel_io *),
                                  size_t workspace, infd_kernel **out, infd_error *err)
{
    infd_cuda_kernel *k = infd_cuda_kernel_new(size, name, run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    memcpy((char *)k + sizeof(infd_cuda_kernel), (const char *)tmp + sizeof(infd_cuda_kernel),
           size - sizeof(infd_cuda_kernel));
    k->base.workspace_bytes = workspace;
    *out = &k->base;
    return INFD_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* Slice                                                                     */
/* ------------------------------------------------------------------------- */

typedef struct slice_kernel {
    infd_cuda_kernel base;
    int esize;
    int64_t n;
    infd_cuda_view v;
} slice_kernel;

static int64_t clamp64(int64_t x, int64_t lo, int64_t hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

static bool slice_plan(const infd_kernel_args *a, slice_kernel *k, infd_error *why)
{
    int64_t starts[INFD_MAX_RANK], ends[INFD_MAX_RANK], axes[INFD_MAX_RANK], steps[INFD_MAX_RANK];
    int64_t n = 0, st[INFD_MAX_RANK];
    memset(k, 0, sizeof(*k));
    if (!infd_cuda_plain_unfused(a, why))
        return false;
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    size_t es = infd_dtype_size(x->dtype);
    if ((es != 1 && es != 2 && es != 4 && es != 8) || y->dtype != x->dtype) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "Slice of %s into %s is not supported on CUDA", infd_dtype_name(x->dtype),
                        infd_dtype_name(y->dtype));
        return false;
    }
    int32_t rank = x->shape.rank;
    if (rank < 1 || rank > INFD_CUDA_VIEW_MAX_RANK || y->shape.rank != rank) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "rank %d slices are not supported",
                        (int)rank);
        return false;
    }
    if (!infd_slice_params(a, starts, ends, axes, steps, &n, why))
        return false;
    int64_t s = 1;
    for (int32_t d = rank - 1; d >= 0; d--) {
        st[d] = s;
        s *= x->shape.dims[d].value;
    }
    k->v.rank = rank;
    for (int32_t d = 0; d < rank; d++) {
        k->v.dims[d] = x->shape.dims[d].value;
        k->v.strides[d] = st[d];
    }
    bool done[INFD_MAX_RANK] = { false };
    for (int64_t i = 0; i < n; i++) {
        int64_t d = axes[i], dim = x->shape.dims[d].value, b = starts[i], e = ends[i];
        int64_t step = steps[i], count;
        if (done[d]) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "axis %lld repeated",
                            (long long)d);
            return false;
        }
        done[d] = true;
        if (b < 0)
            b += dim;
        if (e < 0)
            e += dim;
        if (step > 0) {
            b = clamp64(b, 0, dim);
            e = clamp64(e, 0, dim);
            count = e > b ? (e - b + step - 1) / step : 0;
        } else {
            b = clamp64(b, 0, dim - 1);
            e = clamp64(e, -1, dim - 1);
            count = b > e ? (b - e + (-step) - 1) / (-step) : 0;
        }
        if (count > 0)
            k->v.base += b * st[d];
        k->v.dims[d] = count;
        k->v.strides[d] = st[d] * step;
    }
    for (int32_t d = 0; d < rank; d++) {
        if (y->shape.dims[d].value != k->v.dims[d]) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                            "output shape does not match the slice of the input");
            return false;
        }
    }
    k->esize = (int)es;
    k->n = infd_node_numel(y);
    return true;
}

static bool slice_supports(const infd_kernel_args *a, infd_error *why)
{
    slice_kernel k;
    return slice_plan(a, &k, why);
}

static void slice_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const slice_kernel *k = (const slice_kernel *)base;
    if (k->n > 0)
        infd_cuda_view_copy(io->stream, io->inputs[0], io->outputs[0], k->esize, &k->v, k->n);
}

static infd_status slice_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    slice_kernel tmp;
    *out = NULL;
    if (!slice_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return infd_cuda_kernel_from(a, &tmp, sizeof(tmp), "cuda:slice", slice_run, 0, out, err);
}

/* ------------------------------------------------------------------------- */
/* Reductions                                                                */
/* ------------------------------------------------------------------------- */

static const char *const red_names[] = { "ReduceSum",      "ReduceMean", "ReduceMax",
                                         "ReduceMin",      "ReduceProd", "ReduceSumSquare",
                                         "ReduceL1",       "ReduceL2",   "ReduceLogSum",
                                         "ReduceLogSumExp" };

typedef struct reduce_kernel {
    infd_cuda_kernel base;
    bool copy;    /* noop_with_empty_axes with no axes: y = x */
    size_t bytes; /* of the copy */
    infd_cuda_reduce_desc d;
} reduce_kernel;

_Static_assert(INFD_CUDA_VIEW_MAX_RANK == INFD_MAX_RANK, "reduce groups are copied as they are");

static bool reduce_plan(const infd_kernel_args *a, reduce_kernel *k, infd_error *why)
{
    memset(k, 0, sizeof(*k));
    int op = -1;
    for (size_t i = 0; i < INFD_ARRAY_SIZE(red_names); i++)
        if (strcmp(a->node->op_type, red_names[i]) == 0)
            op = (int)i;
    if (op < 0) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "not a reduction");
        return false;
    }
    if (!infd_cuda_plain_unfused(a, why))
        return false;
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    k->d.op = op;
    switch (x->dtype) {
    case INFD_DTYPE_FP32:
        k->d.dtype = INFD_CUDA_RED_F32;
        break;
    case INFD_DTYPE_INT32:
        k->d.dtype = INFD_CUDA_RED_I32;
        break;
    case INFD_DTYPE_INT64:
        k->d.dtype = INFD_CUDA_RED_I64;
        break;
    default:
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "%s on %s is not supported on CUDA",
                        a->node->op_type, infd_dtype_name(x->dtype));
        return false;
    }
    if ((op == INFD_CUDA_RED_LOGSUM || op == INFD_CUDA_RED_LOGSUMEXP) &&
        x->dtype != INFD_DTYPE_FP32) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "%s needs FP32 on CUDA",
                        a->node->op_type);
        return false;
    }
    if (y->dtype != x->dtype) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "output dtype differs");
        return false;
    }
    infd_reduce_geom g;
    if (!infd_reduce_geom_get(a, &g, why))
        return false;
    if (g.copy) {
        k->copy = true;
        k->bytes = (size_t)infd_node_numel(x) * infd_dtype_size(x->dtype);
        return true;
    }
    k->d.n_kept = g.n_kept;
    k->d.n_red = g.n_red;
    memcpy(k->d.kept_dims, g.kept_dims, sizeof(k->d.kept_dims));
    memcpy(k->d.kept_strides, g.kept_strides, sizeof(k->d.kept_strides));
    memcpy(k->d.red_dims, g.red_dims, sizeof(k->d.red_dims));
    memcpy(k->d.red_strides, g.red_strides, sizeof(k->d.red_strides));
    k->d.red_count = g.red_count;
    k->d.n_out = g.out_numel;
    return true;
}

static bool reduce_supports(const infd_kernel_args *a, infd_error *why)
{
    reduce_kernel k;
    return reduce_plan(a, &k, why);
}

static void reduce_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const reduce_kernel *k = (const reduce_kernel *)base;
    if (k->copy) {
        if (k->bytes && io->outputs[0] != io->inputs[0])
            infd_cuda_copy(io->outputs[0], io->inputs[0], k->bytes, INFD_BACKEND_COPY_D2D,
                           io->stream);
        return;
    }
    infd_cuda_reduce(io->stream, &k->d, io->inputs[0], io->outputs[0]);
}

static infd_status reduce_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    reduce_kernel tmp;
    *out = NULL;
    if (!reduce_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return infd_cuda_kernel_from(a, &tmp, sizeof(tmp), "cuda:reduce", reduce_run, 0, out, err);
}

/* ------------------------------------------------------------------------- */
/* BatchNormalization (inference)                                            */
/* ------------------------------------------------------------------------- */

typedef struct batchnorm_kernel {
    infd_cuda_kernel base;
    float eps;
    int64_t n, channels, inner;
} batchnorm_kernel;

static bool batchnorm_plan(const infd_kernel_args *a, batchnorm_kernel *k, infd_error *why)
{
    memset(k, 0, sizeof(*k));
    if (!infd_cuda_plain_unfused(a, why))
        return false;
    if (a->n_inputs != 5) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "takes X, scale, B, mean and var");
        return false;
    }
    for (int i = 1; i < a->n_outputs; i++) {
        if (a->outputs[i]) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "training outputs (running mean/var) are not supported on CUDA");
            return false;
        }
    }
    if (!infd_cuda_fp32_only(a, 5, why))
        return false;
    int64_t training = 0, spatial = 1;
    if (infd_ir_attr_float(a->g, a->node, "epsilon", 1e-5f, &k->eps, why) != INFD_STATUS_OK ||
        infd_ir_attr_int(a->g, a->node, "training_mode", 0, &training, why) != INFD_STATUS_OK ||
        infd_ir_attr_int(a->g, a->node, "spatial", 1, &spatial, why) != INFD_STATUS_OK)
        return false;
    if (training || !spatial) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "training_mode and spatial=0 are not supported on CUDA");
        return false;
    }
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    if (x->shape.rank < 2 || infd_node_numel(y) != infd_node_numel(x)) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "X must be [N, C, ...] and Y shaped like it");
        return false;
    }
    k->channels = x->shape.dims[1].value;
    k->inner = 1;
    for (int32_t d = 2; d < x->shape.rank; d++)
        k->inner *= x->shape.dims[d].value;
    for (int i = 1; i < 5; i++) {
        if (!a->inputs[i] || infd_node_numel(a->inputs[i]) != k->channels) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                            "input %d must hold C = %lld values", i, (long long)k->channels);
            return false;
        }
    }
    k->n = infd_node_numel(x);
    return true;
}

static bool batchnorm_supports(const infd_kernel_args *a, infd_error *why)
{
    batchnorm_kernel k;
    return batchnorm_plan(a, &k, why);
}

static void batchnorm_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const batchnorm_kernel *k = (const batchnorm_kernel *)base;
    infd_cuda_batchnorm(io->stream, io->inputs[0], io->inputs[1], io->inputs[2], io->inputs[3],
                        io->inputs[4], k->eps, io->outputs[0], k->n, k->channels, k->inner);
}

static infd_status batchnorm_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    batchnorm_kernel tmp;
    *out = NULL;
    if (!batchnorm_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return infd_cuda_kernel_from(a, &tmp, sizeof(tmp), "cuda:batchnorm", batchnorm_run, 0, out,
                                 err);
}

/* ------------------------------------------------------------------------- */
/* ConvTranspose                                                             */
/* ------------------------------------------------------------------------- */

typedef struct deconv_kernel {
    infd_cuda_kernel base;
    infd_cuda_deconv *deconv;
    bool has_bias;
    char name[64];
} deconv_kernel;

/* Resolves the geometry like dnnl_conv.c's deconv_geom_get: per spatial
 * dim, pad_begin (pl) from pads, auto_pad or output_shape, and the end pad
 * pr = s (in - 1) + dk - pl - out, with output_padding folded into it (pr
 * may be negative: output past the last input tap is bias only). 1-D runs
 * as H = 1. */
static bool deconv_plan(const infd_kernel_args *a, infd_cuda_deconv_desc *d, infd_error *why)
{
    memset(d, 0, sizeof(*d));
    if (!infd_cuda_plain_unfused(a, why))
        return false;
    if (a->n_inputs < 2 || !a->inputs[1] || a->n_outputs != 1) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "needs X and W");
        return false;
    }
    if (!infd_cuda_fp32_only(a, 3, why))
        return false;
    const infd_ir_value *x = a->inputs[0], *w = a->inputs[1], *b = in_at(a, 2);
    const infd_ir_value *y = a->outputs[0];
    int sp = x->shape.rank - 2;
    if (sp < 1 || sp > 2 || w->shape.rank != x->shape.rank || y->shape.rank != x->shape.rank) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "CUDA ConvTranspose takes 1-D and 2-D data; this is rank %d",
                        (int)x->shape.rank);
        return false;
    }
    int64_t group = 1;
    const int64_t *strides = NULL, *dil = NULL, *pads = NULL, *opad = NULL, *oshape = NULL;
    int32_t ns = 0, nd = 0, np = 0, no = 0, nos = 0;
    const char *auto_pad = NULL;
    if (infd_ir_attr_int(a->g, a->node, "group", 1, &group, why) != INFD_STATUS_OK ||
        infd_ir_attr_ints(a->g, a->node, "strides", &strides, &ns, why) != INFD_STATUS_OK ||
        infd_ir_attr_ints(a->g, a->node, "dilations", &dil, &nd, why) != INFD_STATUS_OK ||
        infd_ir_attr_ints(a->g, a->node, "pads", &pads, &np, why) != INFD_STATUS_OK ||
        infd_ir_attr_ints(a->g, a->node, "output_padding", &opad, &no, why) != INFD_STATUS_OK ||
        infd_ir_attr_ints(a->g, a->node, "output_shape", &oshape, &nos, why) != INFD_STATUS_OK ||
        infd_ir_attr_string(a->g, a->node, "auto_pad", "NOTSET", &auto_pad, why) != INFD_STATUS_OK)
        return false;
    if ((strides && ns != sp) || (dil && nd != sp) || (pads && np != 2 * sp) ||
        (opad && no != sp) || (oshape && nos != sp)) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "strides, dilations, pads, output_padding or output_shape do not "
                        "match %d spatial dims",
                        sp);
        return false;
    }
    bool same = strcmp(auto_pad, "SAME_UPPER") == 0 || strcmp(auto_pad, "SAME_LOWER") == 0;
    bool valid = strcmp(auto_pad, "VALID") == 0;
    if (!same && !valid && strcmp(auto_pad, "NOTSET") != 0) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "auto_pad '%s' is unknown", auto_pad);
        return false;
    }
    int64_t n = x->shape.dims[0].value, c = x->shape.dims[1].value, k = y->shape.dims[1].value;
    if (group < 1 || c % group != 0 || w->shape.dims[0].value != c ||
        w->shape.dims[1].value * group != k || y->shape.dims[0].value != n) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "channels, group and weight shape do not agree");
        return false;
    }
    if (b && (infd_node_numel(b) != k)) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "B must hold %lld values",
                        (long long)k);
        return false;
    }
    int64_t in[2] = { 1, 1 }, out[2] = { 1, 1 }, ker[2] = { 1, 1 }, s[2] = { 1, 1 };
    int64_t dl[2] = { 1, 1 }, pad[2] = { 0, 0 }, full[2] = { 1, 1 }, off[2] = { 0, 0 };
    for (int i = 0; i < sp; i++) {
        int j = i + (2 - sp); /* 1-D: the W slot */
        in[j] = x->shape.dims[2 + i].value;
        out[j] = y->shape.dims[2 + i].value;
        ker[j] = w->shape.dims[2 + i].value;
        s[j] = strides ? strides[i] : 1;
        dl[j] = dil ? dil[i] : 1;
        if (s[j] < 1 || dl[j] < 1 || ker[j] < 1) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                            "strides, dilations and kernel sizes must be >= 1");
            return false;
        }
        int64_t dk = (ker[j] - 1) * dl[j] + 1;
        int64_t op = opad ? opad[i] : 0;
        int64_t pl = pads ? pads[i] : 0;
        if (valid) {
            pl = 0;
        } else if (same || oshape) {
            /* With output_shape, ONNX ignores pads. */
            int64_t total = s[j] * (in[j] - 1) + op + dk - out[j];
            if (total < 0 || total % 2 != 0) {
                infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                                "output_shape/auto_pad needs an odd or negative total "
                                "padding (%lld) on dim %d",
                                (long long)total, 2 + i);
                return false;
            }
            pl = total / 2;
        }
        int64_t pr = s[j] * (in[j] - 1) + dk - pl - out[j];
        if (pl < 0 || op < 0) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                            "negative pads or output_padding");
            return false;
        }
        /* cuDNN computes the full output with pad p on both sides. */
        int64_t p = INFD_MAX(0, INFD_MIN(pl, pr));
        pad[j] = p;
        full[j] = s[j] * (in[j] - 1) + dk - 2 * p;
        off[j] = pl - p;
        if (full[j] < 1) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                            "the transposed convolution has no output on dim %d", 2 + i);
            return false;
        }
    }
    int64_t dims[] = { n,       c,    k,    in[0], in[1], out[0], out[1], ker[0], ker[1], full[0],
                       full[1], s[0], s[1], dl[0], dl[1], pad[0], pad[1], off[0], off[1], group };
    for (size_t i = 0; i < INFD_ARRAY_SIZE(dims); i++) {
        if (dims[i] < 0 || dims[i] > 2147483647LL) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "a dimension exceeds cuDNN's 32-bit sizes");
            return false;
        }
    }
    if (n < 1 || c < 1 || k < 1) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "empty tensors are not supported");
        return false;
    }
    d->n = (int)n;
    d->c = (int)c;
    d->h = (int)in[0];
    d->w = (int)in[1];
    d->k = (int)k;
    d->oh = (int)out[0];
    d->ow = (int)out[1];
    d->r = (int)ker[0];
    d->s = (int)ker[1];
    d->groups = (int)group;
    d->stride_h = (int)s[0];
    d->stride_w = (int)s[1];
    d->dil_h = (int)dl[0];
    d->dil_w = (int)dl[1];
    d->pad_h = (int)pad[0];
    d->pad_w = (int)pad[1];
    d->fh = (int)full[0];
    d->fw = (int)full[1];
    d->off_h = (int)off[0];
    d->off_w = (int)off[1];
    return true;
}

static bool deconv_supports(const infd_kernel_args *a, infd_error *why)
{
    infd_cuda_deconv_desc d;
    return deconv_plan(a, &d, why);
}

static void deconv_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const deconv_kernel *k = (const deconv_kernel *)base;
    infd_cuda_deconv_run(k->deconv, io->stream, io->inputs[0], io->inputs[1],
                         k->has_bias ? io->inputs[2] : NULL, io->outputs[0], io->workspace);
}

static void deconv_fini(infd_cuda_kernel *base)
{
    infd_cuda_deconv_destroy(((deconv_kernel *)base)->deconv);
}

static infd_status deconv_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    infd_cuda_deconv_desc d;
    char why[256] = "";
    size_t ws = 0;
    *out = NULL;
    if (!deconv_plan(a, &d, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    deconv_kernel *k = (deconv_kernel *)infd_cuda_kernel_new(sizeof(deconv_kernel), "cudnn:deconv",
                                                             deconv_run, deconv_fini);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    k->has_bias = in_at(a, 2) != NULL;
    d.tf32 = a->precision == INFD_PRECISION_TF32;
    k->deconv = infd_cuda_deconv_create(&d, a->inputs[1]->data, &ws, k->name, sizeof(k->name), why,
                                        sizeof(why));
    if (!k->deconv) {
        infd_free(k);
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED, "%s", why);
    }
    k->base.base.name = k->name;
    k->base.base.workspace_bytes = ws;
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* MatMul with batched or 1-D operands                                       */
/* ------------------------------------------------------------------------- */

/* Batch dims past the cuBLASLt batch run as a loop of launches at most this
 * long (broadcast batch dims, say A [2, 1, m, k] times B [1, 3, k, n]). */
#define BMM_MAX_CALLS 4096

typedef struct bmm_kernel {
    infd_cuda_kernel base;
    infd_cuda_gemm *gemm; /* strided batches, FP32 */
    int64_t n_calls;
    int64_t *off; /* n_calls x (A, B, Y) element offsets */
} bmm_kernel;

typedef struct bmm_plan {
    infd_cuda_gemm_desc d;
    int n_outer; /* batch dims looped over, outermost first */
    int64_t outer_dims[INFD_MAX_RANK];
    int64_t outer_sa[INFD_MAX_RANK], outer_sb[INFD_MAX_RANK], outer_sy[INFD_MAX_RANK];
    int64_t n_calls;
} bmm_plan;

static bool bmm_plan_get(const infd_kernel_args *a, bmm_plan *p, infd_error *why)
{
    memset(p, 0, sizeof(*p));
    if (!infd_cuda_plain_unfused(a, why))
        return false;
    if (a->n_inputs != 2 || !a->inputs[1] || a->n_outputs != 1) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "MatMul takes A and B");
        return false;
    }
    if (!infd_cuda_fp32_only(a, 2, why))
        return false;
    const infd_ir_value *A = a->inputs[0], *B = a->inputs[1], *Y = a->outputs[0];
    int ra = A->shape.rank, rb = B->shape.rank, ry = Y->shape.rank;
    if (ra < 1 || rb < 1) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "A and B must have rank >= 1");
        return false;
    }
    /* A 1-D A is [1, k] and a 1-D B [k, 1], their unit dim dropped from Y. */
    int64_t m = ra == 1 ? 1 : A->shape.dims[ra - 2].value;
    int64_t k = A->shape.dims[ra - 1].value;
    int64_t kb = rb == 1 ? B->shape.dims[0].value : B->shape.dims[rb - 2].value;
    int64_t n = rb == 1 ? 1 : B->shape.dims[rb - 1].value;
    int ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0; /* batch ranks */
    int nb = INFD_MAX(ba, bb);
    int ry_want = nb + (ra > 1) + (rb > 1);
    if (k != kb || ry != ry_want) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "K of A and B differ or the output rank is wrong");
        return false;
    }
    if (ra > 1 && Y->shape.dims[nb].value != m) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "output M differs");
        return false;
    }
    if (rb > 1 && Y->shape.dims[ry - 1].value != n) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "output N differs");
        return false;
    }
    if (m < 1 || n < 1 || k < 1) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "empty matmuls are not supported on CUDA");
        return false;
    }
    /* Per batch dim of Y (right-aligned): its size and each operand's
     * element stride (0 where the operand broadcasts). */
    int64_t yd[INFD_MAX_RANK], sa[INFD_MAX_RANK], sb[INFD_MAX_RANK], sy[INFD_MAX_RANK];
    int64_t stride_a = m * k, stride_b = k * n, stride_y = m * n;
    for (int d = nb - 1; d >= 0; d--) {
        int da = d - (nb - ba), db = d - (nb - bb);
        int64_t la = da >= 0 ? A->shape.dims[da].value : 1;
        int64_t lb = db >= 0 ? B->shape.dims[db].value : 1;
        int64_t ly = Y->shape.dims[d].value;
        if ((la != 1 && la != ly) || (lb != 1 && lb != ly) || (la != ly && lb != ly)) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                            "batch dims of A and B do not broadcast to the output");
            return false;
        }
        yd[d] = ly;
        sa[d] = la == 1 ? 0 : stride_a;
        sb[d] = lb == 1 ? 0 : stride_b;
        sy[d] = stride_y;
        stride_a *= la;
        stride_b *= lb;
        stride_y *= ly;
    }
    /* Drop unit batch dims, then take the innermost run of dims that one
     * stride per operand describes (no broadcasting in it) as cuBLASLt's
     * batch; the rest is looped over. */
    int nd = 0;
    for (int d = 0; d < nb; d++) {
        if (yd[d] == 1)
            continue;
        yd[nd] = yd[d];
        sa[nd] = sa[d];
        sb[nd] = sb[d];
        sy[nd] = sy[d];
        nd++;
    }
    p->d.m = m;
    p->d.n = n;
    p->d.k = k;
    p->d.alpha = 1.0f;
    p->d.batch = 1;
    int inner = nd; /* first dim of the cuBLASLt batch */
    if (nd > 0 && sa[nd - 1] != 0 && sb[nd - 1] != 0) {
        inner = nd - 1;
        p->d.batch = yd[nd - 1];
        p->d.stride_a = sa[nd - 1];
        p->d.stride_b = sb[nd - 1];
        p->d.stride_y = sy[nd - 1];
        while (inner > 0 && sa[inner - 1] == sa[inner] * yd[inner] &&
               sb[inner - 1] == sb[inner] * yd[inner] &&
               p->d.batch * yd[inner - 1] <= 2147483647LL) {
            inner--;
            p->d.batch *= yd[inner];
        }
    } else if (nd > 0 && sb[nd - 1] == 0 && ra > 1) {
        /* B shared across the innermost batch dims while A and Y run
         * densely through them: fold them into M (a linear layer). */
        int64_t mm = m;
        inner = nd;
        while (inner > 0 && sb[inner - 1] == 0 && sa[inner - 1] == mm * k) {
            inner--;
            mm *= yd[inner];
        }
        p->d.m = mm;
    }
    p->n_outer = inner;
    p->n_calls = 1;
    for (int d = 0; d < inner; d++) {
        p->outer_dims[d] = yd[d];
        p->outer_sa[d] = sa[d];
        p->outer_sb[d] = sb[d];
        p->outer_sy[d] = sy[d];
        p->n_calls *= yd[d];
        if (p->n_calls > BMM_MAX_CALLS) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "this broadcast would take more than %d cuBLASLt calls", BMM_MAX_CALLS);
            return false;
        }
    }
    /* Batch strides and loop offsets can leave a matrix at any element
     * offset, and graph inputs may be only element-aligned (backend.h):
     * cuBLASLt may assume FP32 alignment only. These matmuls are small
     * (attention heads); the kernels that read 4-byte-aligned data are
     * fast enough for them. */
    p->d.align_bytes = 4;
    return true;
}

static bool bmm_supports(const infd_kernel_args *a, infd_error *why)
{
    bmm_plan p;
    return bmm_plan_get(a, &p, why);
}

static void bmm_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const bmm_kernel *k = (const bmm_kernel *)base;
    const float *A = io->inputs[0], *B = io->inputs[1];
    float *Y = io->outputs[0];
    for (int64_t i = 0; i < k->n_calls; i++) {
        const int64_t *o = &k->off[3 * i];
        infd_cuda_gemm_run(k->gemm, io->stream, A + o[0], B + o[1], NULL, Y + o[2], io->workspace);
    }
}

static void bmm_fini(infd_cuda_kernel *base)
{
    bmm_kernel *k = (bmm_kernel *)base;
    infd_cuda_gemm_destroy(k->gemm);
    infd_free(k->off);
}

static infd_status bmm_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    bmm_plan p;
    char why[256] = "";
    size_t ws = 0;
    *out = NULL;
    if (!bmm_plan_get(a, &p, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    bmm_kernel *k =
        (bmm_kernel *)infd_cuda_kernel_new(sizeof(bmm_kernel), "cublasLt:bmm", bmm_run, bmm_fini);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    k->n_calls = p.n_calls;
    k->off = infd_calloc((size_t)p.n_calls * 3, sizeof(int64_t));
    if (!k->off) {
        infd_free(k);
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    for (int64_t i = 0; i < p.n_calls; i++) {
        int64_t rem = i, oa = 0, ob = 0, oy = 0;
        for (int d = p.n_outer - 1; d >= 0; d--) {
            int64_t idx = rem % p.outer_dims[d];
            rem /= p.outer_dims[d];
            oa += idx * p.outer_sa[d];
            ob += idx * p.outer_sb[d];
            oy += idx * p.outer_sy[d];
        }
        k->off[3 * i] = oa;
        k->off[3 * i + 1] = ob;
        k->off[3 * i + 2] = oy;
    }
    p.d.tf32 = a->precision == INFD_PRECISION_TF32;
    p.d.fast16 = a->precision == INFD_PRECISION_FP16   ? 1
                 : a->precision == INFD_PRECISION_BF16 ? 2
                                                       : 0;
    if (p.d.tf32)
        k->base.base.name = "cublasLt:bmm_tf32";
    else if (p.d.fast16)
        k->base.base.name = p.d.fast16 == 1 ? "cublasLt:bmm_fast16f" : "cublasLt:bmm_fast16bf";
    k->gemm = infd_cuda_gemm_create(&p.d, &ws, NULL, why, sizeof(why));
    if (!k->gemm) {
        infd_free(k->off);
        infd_free(k);
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED, "%s", why);
    }
    k->base.base.workspace_bytes = ws;
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

const infd_cuda_op infd_cuda_ops_extra[] = {
    { "Slice", slice_supports, slice_compile },
    { "ReduceSum", reduce_supports, reduce_compile },
    { "ReduceMean", reduce_supports, reduce_compile },
    { "ReduceMax", reduce_supports, reduce_compile },
    { "ReduceMin", reduce_supports, reduce_compile },
    { "ReduceProd", reduce_supports, reduce_compile },
    { "ReduceSumSquare", reduce_supports, reduce_compile },
    { "ReduceL1", reduce_supports, reduce_compile },
    { "ReduceL2", reduce_supports, reduce_compile },
    { "ReduceLogSum", reduce_supports, reduce_compile },
    { "ReduceLogSumExp", reduce_supports, reduce_compile },
    { "BatchNormalization", batchnorm_supports, batchnorm_compile },
    { "ConvTranspose", deconv_supports, deconv_compile },
    { "MatMul", bmm_supports, bmm_compile },
    { NULL, NULL, NULL },
};
