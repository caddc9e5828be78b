/*
 * cuda_ops.c - the CUDA backend's own kernels, node glue: elementwise
 * (unary, binary with broadcasting), pooling, softmax, and data movement
 * (Concat, Transpose, Pad, Resize, and Reshape-like ops as device copies).
 *
 * Compute ops take FP32; movement ops take any dtype of 1, 2, 4 or 8
 * bytes. Reshape, Flatten, Squeeze, Unsqueeze and Identity copy (D2D)
 * rather than alias: the memory plan gives each value its own block, and
 * aliasing is a planner change for a later step.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_movement.h"
#include "backends/cuda/cuda_nhwc.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_pool.h"
#include "backends/cuda/cuda_runtime.h"
#include "core/alloc.h"
#include "core/common.h"

static const infd_ir_value *in_at(const infd_kernel_args *a, int i)
{
    return i < a->n_inputs ? a->inputs[i] : NULL;
}

static size_t value_bytes(const infd_ir_value *v)
{
    return (size_t)infd_node_numel(v) * infd_dtype_size(v->dtype);
}

infd_cuda_fmt infd_cuda_input_fmt(const infd_kernel_args *a, int i)
{
    if (!a->input_layouts || i >= a->n_inputs || !a->input_layouts[i])
        return INFD_CUDA_FMT_F32_NCHW;
    return ((const infd_cuda_layout *)a->input_layouts[i])->fmt;
}

/* Output 0's format: the plan's 16-bit NHWC (FP16, or BF16 in a BF16 plan)
 * when the plan allows it (published in the kernel), else plain. */
static infd_cuda_fmt out_fmt(const infd_kernel_args *a, infd_kernel *k)
{
    if (!a->output_opaque_ok)
        return INFD_CUDA_FMT_F32_NCHW;
    bool bf16 = a->precision == INFD_PRECISION_BF16;
    k->output_layout = bf16 ? &infd_cuda_layout_bf16_nhwc : &infd_cuda_layout_f16_nhwc;
    k->output_layout_bytes = (size_t)infd_node_numel(a->outputs[0]) * 2;
    return bf16 ? INFD_CUDA_FMT_BF16_NHWC : INFD_CUDA_FMT_F16_NHWC;
}

static bool is_4d_fp32(const infd_ir_value *v)
{
    return v && v->dtype == INFD_DTYPE_FP32 && v->shape.rank == 4;
}

static infd_cuda_dims dims_of(const infd_ir_value *v)
{
    return (infd_cuda_dims){ v->shape.dims[0].value, v->shape.dims[1].value, v->shape.dims[2].value,
                             v->shape.dims[3].value };
}

static bool same_dims(const infd_ir_value *a, const infd_ir_value *b)
{
    if (a->shape.rank != b->shape.rank)
        return false;
    for (int d = 0; d < a->shape.rank; d++)
        if (a->shape.dims[d].value != b->shape.dims[d].value)
            return false;
    return true;
}

/* ------------------------------------------------------------------------- */
/* Unary                                                                     */
/* ------------------------------------------------------------------------- */

typedef struct unary_kernel {
    infd_cuda_kernel base;
    infd_cuda_act act;
    float alpha, beta;
    int64_t n;
    bool nhwc; /* an operand is FP16 NHWC */
    infd_cuda_fmt fx, fy;
    infd_cuda_dims d;
} unary_kernel;

static const struct {
    const char *op;
    infd_cuda_act act;
    float alpha, beta; /* defaults of the alpha/beta attributes */
} unary_ops[] = {
    { "Relu", INFD_CUDA_ACT_RELU, 0, 0 },
    { "LeakyRelu", INFD_CUDA_ACT_LEAKY_RELU, 0.01f, 0 },
    { "Clip", INFD_CUDA_ACT_CLIP, 0, 0 },
    { "Sigmoid", INFD_CUDA_ACT_SIGMOID, 0, 0 },
    { "HardSigmoid", INFD_CUDA_ACT_HARD_SIGMOID, 0.2f, 0.5f },
    { "Tanh", INFD_CUDA_ACT_TANH, 0, 0 },
    { "HardSwish", INFD_CUDA_ACT_HARD_SWISH, 0, 0 },
    { "Elu", INFD_CUDA_ACT_ELU, 1.0f, 0 },
    { "Sqrt", INFD_CUDA_ACT_SQRT, 0, 0 },
    { "Exp", INFD_CUDA_ACT_EXP, 0, 0 },
    { "Log", INFD_CUDA_ACT_LOG, 0, 0 },
    { "Abs", INFD_CUDA_ACT_ABS, 0, 0 },
    { "Neg", INFD_CUDA_ACT_NEG, 0, 0 },
    { "Reciprocal", INFD_CUDA_ACT_RECIPROCAL, 0, 0 },
    { "Floor", INFD_CUDA_ACT_FLOOR, 0, 0 },
    { "Ceil", INFD_CUDA_ACT_CEIL, 0, 0 },
    { "Erf", INFD_CUDA_ACT_ERF, 0, 0 },
    { "Softplus", INFD_CUDA_ACT_SOFTPLUS, 0, 0 },
};

/* Fills the kernel's act/alpha/beta from the node; false with a message. */
static bool unary_params(const infd_kernel_args *a, unary_kernel *k, infd_error *why)
{
    size_t i = 0;
    while (i < INFD_ARRAY_SIZE(unary_ops) && strcmp(unary_ops[i].op, a->node->op_type) != 0)
        i++;
    if (i == INFD_ARRAY_SIZE(unary_ops)) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "not a unary op");
        return false;
    }
    if (!a->inputs[0] || a->n_outputs != 1 || !infd_cuda_fp32_only(a, 1, why))
        return false;
    k->act = unary_ops[i].act;
    k->n = infd_node_numel(a->outputs[0]);
    if (k->act == INFD_CUDA_ACT_CLIP) {
        k->alpha = -INFINITY;
        k->beta = INFINITY;
        if (a->g->opset < 11) {
            return infd_ir_attr_float(a->g, a->node, "min", -INFINITY, &k->alpha, why) ==
                       INFD_STATUS_OK &&
                   infd_ir_attr_float(a->g, a->node, "max", INFINITY, &k->beta, why) ==
                       INFD_STATUS_OK;
        }
        for (int j = 1; j < 3; j++) {
            const infd_ir_value *v = in_at(a, j);
            if (!v)
                continue;
            if (!v->data || v->dtype != INFD_DTYPE_FP32 || infd_node_numel(v) != 1) {
                infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                                "Clip bounds must be constant FP32 scalars on CUDA");
                return false;
            }
            *(j == 1 ? &k->alpha : &k->beta) = *(const float *)v->data;
        }
        return true;
    }
    if (a->n_inputs != 1) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "takes one input");
        return false;
    }
    return infd_ir_attr_float(a->g, a->node, "alpha", unary_ops[i].alpha, &k->alpha, why) ==
               INFD_STATUS_OK &&
           infd_ir_attr_float(a->g, a->node, "beta", unary_ops[i].beta, &k->beta, why) ==
               INFD_STATUS_OK;
}

static bool unary_supports(const infd_kernel_args *a, infd_error *why)
{
    unary_kernel k;
    return unary_params(a, &k, why);
}

static void unary_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const unary_kernel *k = (const unary_kernel *)base;
    if (k->nhwc)
        infd_cuda_nhwc_eltwise(io->stream, k->d, io->inputs[0], k->fx, NULL, 0, NULL, k->fx,
                               io->outputs[0], k->fy, (int)k->act, k->alpha, k->beta);
    else
        infd_cuda_unary(io->stream, k->act, k->alpha, k->beta, io->inputs[0], io->outputs[0], k->n);
}

static infd_status unary_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    unary_kernel *k =
        (unary_kernel *)infd_cuda_kernel_new(sizeof(unary_kernel), "cuda:unary", unary_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    if (!unary_params(a, k, err)) {
        infd_free(k);
        return err ? err->code : INFD_STATUS_UNIMPLEMENTED;
    }
    k->fx = infd_cuda_input_fmt(a, 0);
    k->fy = out_fmt(a, &k->base.base);
    k->nhwc = k->fx != INFD_CUDA_FMT_F32_NCHW || k->fy != INFD_CUDA_FMT_F32_NCHW;
    if (k->nhwc)
        k->d = dims_of(a->outputs[0]);
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* Binary                                                                    */
/* ------------------------------------------------------------------------- */

typedef struct binary_kernel {
    infd_cuda_kernel base;
    infd_cuda_binop op;
    int same_shape;
    int64_t n;
    infd_cuda_bcast bc;
    bool nhwc; /* an operand is FP16 NHWC (all are shaped alike) */
    infd_cuda_fmt fa, fb, fy;
    infd_cuda_dims d;
} binary_kernel;

static const struct {
    const char *op;
    infd_cuda_binop bin;
} binary_ops[] = {
    { "Add", INFD_CUDA_BIN_ADD }, { "Sub", INFD_CUDA_BIN_SUB },     { "Mul", INFD_CUDA_BIN_MUL },
    { "Div", INFD_CUDA_BIN_DIV }, { "Pow", INFD_CUDA_BIN_POW },     { "Max", INFD_CUDA_BIN_MAX },
    { "Min", INFD_CUDA_BIN_MIN }, { "PRelu", INFD_CUDA_BIN_PRELU },
};

/* Right-aligned broadcast of A and B to Y; strides 0 along broadcast dims. */
static bool binary_params(const infd_kernel_args *a, binary_kernel *k, infd_error *why)
{
    size_t i = 0;
    while (i < INFD_ARRAY_SIZE(binary_ops) && strcmp(binary_ops[i].op, a->node->op_type) != 0)
        i++;
    if (i == INFD_ARRAY_SIZE(binary_ops) || a->n_inputs != 2 || !a->inputs[0] || !a->inputs[1] ||
        a->n_outputs != 1) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "CUDA takes this op with exactly two inputs");
        return false;
    }
    if (!infd_cuda_fp32_only(a, 2, why))
        return false;
    const infd_ir_value *y = a->outputs[0];
    int rank = y->shape.rank;
    if (rank > INFD_CUDA_MAX_RANK) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "rank %d exceeds %d", rank,
                        INFD_CUDA_MAX_RANK);
        return false;
    }
    memset(k, 0, sizeof(*k));
    k->op = binary_ops[i].bin;
    k->n = infd_node_numel(y);
    k->bc.rank = rank ? rank : 1;
    k->bc.dims[0] = 1;
    for (int d = 0; d < rank; d++)
        k->bc.dims[d] = y->shape.dims[d].value;
    k->same_shape = 1;
    for (int o = 0; o < 2; o++) {
        const infd_ir_value *v = a->inputs[o];
        int64_t *st = o == 0 ? k->bc.sa : k->bc.sb;
        int64_t stride = 1;
        if (v->shape.rank > rank) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                            "input %d has a higher rank than the output", o);
            return false;
        }
        for (int d = rank - 1; d >= 0; d--) {
            int vd = d - (rank - v->shape.rank);
            int64_t len = vd >= 0 ? v->shape.dims[vd].value : 1;
            if (len != 1 && len != k->bc.dims[d]) {
                infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                                "input %d does not broadcast to the output", o);
                return false;
            }
            st[d] = len == 1 ? 0 : stride;
            stride *= len;
            if (len != k->bc.dims[d])
                k->same_shape = 0;
        }
        if (v->shape.rank != rank)
            k->same_shape = k->same_shape && infd_node_numel(v) == k->n;
    }
    return true;
}

static bool binary_supports(const infd_kernel_args *a, infd_error *why)
{
    binary_kernel k;
    return binary_params(a, &k, why);
}

static void binary_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const binary_kernel *k = (const binary_kernel *)base;
    if (k->nhwc)
        infd_cuda_nhwc_eltwise(io->stream, k->d, io->inputs[0], k->fa, NULL, (int)k->op,
                               io->inputs[1], k->fb, io->outputs[0], k->fy, INFD_CUDA_ACT_NONE,
                               0.0f, 0.0f);
    else
        infd_cuda_binary(io->stream, k->op, io->inputs[0], io->inputs[1], io->outputs[0], k->n,
                         k->same_shape, &k->bc);
}

static infd_status binary_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    binary_kernel tmp;
    if (!binary_params(a, &tmp, err))
        return err ? err->code : INFD_STATUS_UNIMPLEMENTED;
    binary_kernel *k = (binary_kernel *)infd_cuda_kernel_new(sizeof(binary_kernel), "cuda:binary",
                                                             binary_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    infd_cuda_kernel keep = k->base;
    *k = tmp;
    k->base = keep;
    k->fa = infd_cuda_input_fmt(a, 0);
    k->fb = infd_cuda_input_fmt(a, 1);
    k->fy = out_fmt(a, &k->base.base);
    k->nhwc = k->fa != INFD_CUDA_FMT_F32_NCHW || k->fb != INFD_CUDA_FMT_F32_NCHW ||
              k->fy != INFD_CUDA_FMT_F32_NCHW;
    if (k->nhwc)
        k->d = dims_of(a->outputs[0]);
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* Pooling                                                                   */
/* ------------------------------------------------------------------------- */

typedef struct pool_kernel {
    infd_cuda_kernel base;
    infd_cuda_pool_desc d;
    int global;
    int64_t rows, len;
    bool nhwc; /* an operand is FP16 NHWC (4-D only) */
    infd_cuda_fmt fx, fy;
    infd_cuda_dims xd;
} pool_kernel;

static bool pool_params(const infd_kernel_args *a, pool_kernel *k, infd_error *why)
{
    const char *op = a->node->op_type;
    memset(k, 0, sizeof(*k));
    if (!a->inputs[0] || a->n_outputs < 1 || !infd_cuda_fp32_only(a, 1, why))
        return false;
    if (a->n_outputs > 1 && a->outputs[1]) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "MaxPool's Indices output is not supported on CUDA");
        return false;
    }
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    int rank = x->shape.rank;
    if (rank < 3 || rank > 4 || y->shape.rank != rank) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "CUDA pools 1-D and 2-D NCHW data; this is rank %d", rank);
        return false;
    }
    k->d.max = strstr(op, "Max") != NULL;
    int64_t nc = x->shape.dims[0].value * x->shape.dims[1].value;
    if (strncmp(op, "Global", 6) == 0) {
        k->global = 1;
        k->rows = nc;
        k->len = infd_node_numel(x) / (nc ? nc : 1);
        return true;
    }
    int sp = rank - 2;
    const int64_t *ks = NULL, *st = NULL, *pads = NULL, *dil = NULL;
    int32_t nk = 0, ns = 0, np = 0, nd = 0;
    const char *auto_pad = NULL;
    int64_t cip = 0;
    if (infd_ir_attr_ints(a->g, a->node, "kernel_shape", &ks, &nk, why) != INFD_STATUS_OK ||
        infd_ir_attr_ints(a->g, a->node, "strides", &st, &ns, why) != INFD_STATUS_OK ||
        infd_ir_attr_ints(a->g, a->node, "pads", &pads, &np, why) != INFD_STATUS_OK ||
        infd_ir_attr_ints(a->g, a->node, "dilations", &dil, &nd, why) != INFD_STATUS_OK ||
        infd_ir_attr_string(a->g, a->node, "auto_pad", "NOTSET", &auto_pad, why) !=
            INFD_STATUS_OK ||
        infd_ir_attr_int(a->g, a->node, "count_include_pad", 0, &cip, why) != INFD_STATUS_OK)
        return false;
    if (!ks || nk != sp || (st && ns != sp) || (pads && np != 2 * sp) || (dil && nd != sp)) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "kernel_shape, strides, pads or dilations do not match the rank");
        return false;
    }
    int64_t kk[2] = { 1, 1 }, ss[2] = { 1, 1 }, dd[2] = { 1, 1 }, pp[2] = { 0, 0 };
    for (int i = 0; i < sp; i++) {
        int j = i + (2 - sp);
        kk[j] = ks[i];
        ss[j] = st ? st[i] : 1;
        dd[j] = dil ? dil[i] : 1;
        pp[j] = pads ? pads[i] : 0;
        int64_t in = x->shape.dims[2 + i].value, out = y->shape.dims[2 + i].value;
        if (strncmp(auto_pad, "SAME_", 5) == 0) {
            int64_t total = INFD_MAX(0, (out - 1) * ss[j] + (kk[j] - 1) * dd[j] + 1 - in);
            pp[j] = auto_pad[5] == 'U' ? total / 2 : total - total / 2;
        } else if (strcmp(auto_pad, "VALID") == 0) {
            pp[j] = 0;
        }
        if (kk[j] < 1 || ss[j] < 1 || dd[j] < 1 || pp[j] < 0) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "bad window attributes");
            return false;
        }
    }
    k->d.nc = nc;
    k->d.h = sp == 2 ? x->shape.dims[2].value : 1;
    k->d.w = x->shape.dims[rank - 1].value;
    k->d.oh = sp == 2 ? y->shape.dims[2].value : 1;
    k->d.ow = y->shape.dims[rank - 1].value;
    k->d.kh = (int)kk[0];
    k->d.kw = (int)kk[1];
    k->d.sh = (int)ss[0];
    k->d.sw = (int)ss[1];
    k->d.ph = (int)pp[0];
    k->d.pw = (int)pp[1];
    k->d.dh = (int)dd[0];
    k->d.dw = (int)dd[1];
    k->d.count_include_pad = cip != 0;
    return true;
}

static bool pool_supports(const infd_kernel_args *a, infd_error *why)
{
    pool_kernel k;
    return pool_params(a, &k, why);
}

static void pool_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const pool_kernel *k = (const pool_kernel *)base;
    if (k->nhwc && k->global)
        infd_cuda_nhwc_global_pool(io->stream, k->d.max, io->inputs[0], k->fx, io->outputs[0],
                                   k->xd);
    else if (k->nhwc)
        infd_cuda_nhwc_pool(io->stream, &k->d, k->xd, k->d.oh, k->d.ow, io->inputs[0], k->fx,
                            io->outputs[0], k->fy);
    else if (k->global)
        infd_cuda_global_pool(io->stream, k->d.max, io->inputs[0], io->outputs[0], k->rows, k->len);
    else
        infd_cuda_pool2d(io->stream, &k->d, io->inputs[0], io->outputs[0]);
}

static infd_status pool_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    pool_kernel tmp;
    if (!pool_params(a, &tmp, err))
        return err ? err->code : INFD_STATUS_UNIMPLEMENTED;
    pool_kernel *k =
        (pool_kernel *)infd_cuda_kernel_new(sizeof(pool_kernel), "cuda:pool", pool_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    infd_cuda_kernel keep = k->base;
    *k = tmp;
    k->base = keep;
    k->fx = infd_cuda_input_fmt(a, 0);
    k->fy = tmp.global ? INFD_CUDA_FMT_F32_NCHW : out_fmt(a, &k->base.base);
    k->nhwc = k->fx != INFD_CUDA_FMT_F32_NCHW || k->fy != INFD_CUDA_FMT_F32_NCHW;
    if (k->nhwc)
        k->xd = dims_of(a->inputs[0]);
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* Softmax                                                                   */
/* ------------------------------------------------------------------------- */

typedef struct softmax_kernel {
    infd_cuda_kernel base;
    int log;
    int64_t outer, axis, inner;
} softmax_kernel;

static bool softmax_params(const infd_kernel_args *a, softmax_kernel *k, infd_error *why)
{
    int64_t axis = a->g->opset >= 13 ? -1 : 1;
    if (!a->inputs[0] || !infd_cuda_fp32_only(a, 1, why) ||
        infd_ir_attr_int(a->g, a->node, "axis", axis, &axis, why) != INFD_STATUS_OK)
        return false;
    const infd_ir_value *x = a->inputs[0];
    int rank = x->shape.rank;
    if (axis < 0)
        axis += rank;
    if (axis < 0 || axis >= (rank ? rank : 1)) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "axis out of range");
        return false;
    }
    k->log = strcmp(a->node->op_type, "LogSoftmax") == 0;
    k->outer = k->axis = k->inner = 1;
    for (int d = 0; d < rank; d++) {
        int64_t len = x->shape.dims[d].value;
        if (d < axis)
            k->outer *= len;
        else if (d == axis || a->g->opset < 13) /* before 13: [outer, rest] */
            k->axis *= len;
        else
            k->inner *= len;
    }
    return true;
}

static bool softmax_supports(const infd_kernel_args *a, infd_error *why)
{
    softmax_kernel k;
    return softmax_params(a, &k, why);
}

static void softmax_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const softmax_kernel *k = (const softmax_kernel *)base;
    infd_cuda_softmax(io->stream, k->log, io->inputs[0], io->outputs[0], k->outer, k->axis,
                      k->inner);
}

static infd_status softmax_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    softmax_kernel *k = (softmax_kernel *)infd_cuda_kernel_new(sizeof(softmax_kernel),
                                                               "cuda:softmax", softmax_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    if (!softmax_params(a, k, err)) {
        infd_free(k);
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    }
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* Movement                                                                  */
/* ------------------------------------------------------------------------- */

static bool movable_dtype(const infd_kernel_args *a, infd_error *why)
{
    size_t es = a->outputs[0] ? infd_dtype_size(a->outputs[0]->dtype) : 0;
    if (es != 1 && es != 2 && es != 4 && es != 8) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "dtype %s is not supported on CUDA",
                        a->outputs[0] ? infd_dtype_name(a->outputs[0]->dtype) : "?");
        return false;
    }
    return true;
}

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout: a copy. */
typedef struct copy_kernel {
    infd_cuda_kernel base;
    size_t bytes;
} copy_kernel;

static bool copy_supports(const infd_kernel_args *a, infd_error *why)
{
    if (a->n_outputs < 1 || !a->outputs[0] || a->n_inputs < 1 || !a->inputs[0]) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "needs data");
        return false;
    }
    if (a->n_outputs > 1 && a->outputs[1]) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "a mask output is not supported");
        return false;
    }
    if (value_bytes(a->inputs[0]) != value_bytes(a->outputs[0])) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "input and output sizes differ");
        return false;
    }
    return true;
}

static void copy_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const copy_kernel *k = (const copy_kernel *)base;
    if (k->bytes && io->outputs[0] != io->inputs[0])
        infd_cuda_copy(io->outputs[0], io->inputs[0], k->bytes, INFD_BACKEND_COPY_D2D, io->stream);
}

static infd_status copy_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    if (!copy_supports(a, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    copy_kernel *k =
        (copy_kernel *)infd_cuda_kernel_new(sizeof(copy_kernel), "cuda:copy", copy_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    k->bytes = value_bytes(a->outputs[0]);
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* Concat: per input, `outer` rows of its slice, copied 2-D into place. */
typedef struct concat_kernel {
    infd_cuda_kernel base;
    bool nhwc;       /* 4-D on axis 1 with an operand in FP16 NHWC */
    int64_t c_total; /* nhwc: the output's channels */
    infd_cuda_fmt fy, *fx;
    infd_cuda_dims *xd;
    bool *zero;    /* nhwc: the input is a constant of zeros (never read) */
    bool one_pass; /* nhwc: every input in fy's format or zeros */
    int n;
    size_t out_row;
    size_t outer;
    size_t *row;    /* per input: bytes of one row */
    size_t *offset; /* per input: byte offset in the output row */
} concat_kernel;

static bool concat_params(const infd_kernel_args *a, int64_t *axis, infd_error *why)
{
    if (!movable_dtype(a, why) ||
        infd_ir_attr_int(a->g, a->node, "axis", 0, axis, why) != INFD_STATUS_OK)
        return false;
    int rank = a->outputs[0]->shape.rank;
    if (*axis < 0)
        *axis += rank;
    if (*axis < 0 || *axis >= rank) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "axis out of range");
        return false;
    }
    for (int i = 0; i < a->n_inputs; i++) {
        if (!a->inputs[i] || a->inputs[i]->dtype != a->outputs[0]->dtype) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                            "input %d is missing or of another dtype", i);
            return false;
        }
    }
    return true;
}

static bool concat_supports(const infd_kernel_args *a, infd_error *why)
{
    int64_t axis;
    return concat_params(a, &axis, why);
}

static void concat_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const concat_kernel *k = (const concat_kernel *)base;
    if (k->nhwc) {
        if (k->one_pass) {
            const void *xs[INFD_CUDA_CONCAT_MAX];
            int64_t cs[INFD_CUDA_CONCAT_MAX];
            for (int i = 0; i < k->n; i++) {
                xs[i] = k->zero[i] ? NULL : io->inputs[i];
                cs[i] = k->xd[i].c;
            }
            int64_t npx = k->xd[0].n * k->xd[0].h * k->xd[0].w;
            if (infd_cuda_nhwc_concat_all(io->stream, k->n, xs, cs, npx, io->outputs[0],
                                          k->c_total))
                return;
        }
        int64_t c_off = 0;
        for (int i = 0; i < k->n; i++) {
            if (k->xd[i].n * k->xd[i].c * k->xd[i].h * k->xd[i].w != 0)
                infd_cuda_nhwc_concat(io->stream, k->zero[i] ? NULL : io->inputs[i], k->fx[i],
                                      k->xd[i], io->outputs[0], k->fy, c_off, k->c_total);
            c_off += k->xd[i].c;
        }
        return;
    }
    for (int i = 0; i < k->n; i++)
        infd_cuda_copy2d(io->stream, (uint8_t *)io->outputs[0] + k->offset[i], k->out_row,
                         io->inputs[i], k->row[i], k->row[i], k->outer);
}

static void concat_fini(infd_cuda_kernel *base)
{
    concat_kernel *k = (concat_kernel *)base;
    infd_free(k->row);
    infd_free(k->offset);
    infd_free(k->fx);
    infd_free(k->xd);
    infd_free(k->zero);
}

static infd_status concat_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    int64_t axis;
    if (!concat_params(a, &axis, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    concat_kernel *k = (concat_kernel *)infd_cuda_kernel_new(sizeof(concat_kernel), "cuda:concat",
                                                             concat_run, concat_fini);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    const infd_ir_value *y = a->outputs[0];
    size_t es = infd_dtype_size(y->dtype), inner = 1;
    k->outer = 1;
    for (int d = 0; d < axis; d++)
        k->outer *= (size_t)y->shape.dims[d].value;
    for (int d = (int)axis + 1; d < y->shape.rank; d++)
        inner *= (size_t)y->shape.dims[d].value;
    k->out_row = (size_t)y->shape.dims[axis].value * inner * es;
    k->n = a->n_inputs;
    k->row = infd_calloc((size_t)k->n + 1, sizeof(size_t));
    k->offset = infd_calloc((size_t)k->n + 1, sizeof(size_t));
    if (!k->row || !k->offset) {
        concat_fini(&k->base);
        infd_free(k);
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    size_t at = 0;
    for (int i = 0; i < k->n; i++) {
        const infd_ir_value *v = a->inputs[i];
        k->row[i] = (v->shape.rank > axis ? (size_t)v->shape.dims[axis].value : 0) * inner * es;
        k->offset[i] = at;
        at += k->row[i];
    }
    if (at != k->out_row) {
        concat_fini(&k->base);
        infd_free(k);
        return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                               "input sizes along the axis do not add up to the output");
    }
    k->fy = out_fmt(a, &k->base.base);
    k->nhwc = k->fy != INFD_CUDA_FMT_F32_NCHW;
    for (int i = 0; i < k->n; i++)
        k->nhwc = k->nhwc || infd_cuda_input_fmt(a, i) != INFD_CUDA_FMT_F32_NCHW;
    if (k->nhwc) {
        k->fx = infd_calloc((size_t)k->n, sizeof(*k->fx));
        k->xd = infd_calloc((size_t)k->n, sizeof(*k->xd));
        k->zero = infd_calloc((size_t)k->n, sizeof(*k->zero));
        if (!k->fx || !k->xd || !k->zero) {
            concat_fini(&k->base);
            infd_free(k);
            return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        }
        k->one_pass = k->fy != INFD_CUDA_FMT_F32_NCHW && k->n <= INFD_CUDA_CONCAT_MAX;
        for (int i = 0; i < k->n; i++) {
            k->fx[i] = infd_cuda_input_fmt(a, i);
            k->xd[i] = dims_of(a->inputs[i]);
            k->c_total += k->xd[i].c;
            /* Channel padding (BlazeFace: Concat with a ConstantOfShape of
             * zeros): written, never read nor uploaded. */
            k->zero[i] = i < 32 && infd_ir_value_is_zeros(a->inputs[i]);
            if (k->zero[i])
                k->base.base.unread_inputs |= 1u << i;
            k->one_pass = k->one_pass && (k->zero[i] || k->fx[i] == k->fy);
        }
    }
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* Transpose: output dims and, per output dim, the input stride. */
typedef struct transpose_kernel {
    infd_cuda_kernel base;
    bool from_nhwc; /* 16-bit NHWC in, perm (0, 2, 3, 1): a conversion */
    infd_cuda_fmt fx;
    infd_cuda_fmt fy; /* 16-bit NHWC out, perm (0, 3, 1, 2): a conversion */
    int rank, esize;
    int64_t n;
    int64_t dims[INFD_CUDA_MAX_RANK], strides[INFD_CUDA_MAX_RANK];
} transpose_kernel;

static bool transpose_params(const infd_kernel_args *a, transpose_kernel *k, infd_error *why)
{
    const int64_t *perm = NULL;
    int32_t np = 0;
    memset(k, 0, sizeof(*k));
    if (!a->inputs[0] || !movable_dtype(a, why) ||
        infd_ir_attr_ints(a->g, a->node, "perm", &perm, &np, why) != INFD_STATUS_OK)
        return false;
    const infd_ir_value *x = a->inputs[0];
    int rank = x->shape.rank;
    if (rank > INFD_CUDA_MAX_RANK || (perm && np != rank)) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "rank %d transposes (up to %d) with a matching perm", rank,
                        INFD_CUDA_MAX_RANK);
        return false;
    }
    int64_t in_stride[INFD_CUDA_MAX_RANK];
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        in_stride[d] = s;
        s *= x->shape.dims[d].value;
    }
    k->rank = rank ? rank : 1;
    k->dims[0] = 1;
    for (int d = 0; d < rank; d++) {
        int64_t p = perm ? perm[d] : rank - 1 - d;
        if (p < 0 || p >= rank) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "perm out of range");
            return false;
        }
        k->dims[d] = x->shape.dims[p].value;
        k->strides[d] = in_stride[p];
    }
    k->esize = (int)infd_dtype_size(x->dtype);
    k->n = infd_node_numel(x);
    return true;
}

static bool transpose_supports(const infd_kernel_args *a, infd_error *why)
{
    transpose_kernel k;
    return transpose_params(a, &k, why);
}

static void transpose_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const transpose_kernel *k = (const transpose_kernel *)base;
    if (k->from_nhwc)
        infd_cuda_nhwc_to_float(io->stream, io->inputs[0], k->fx, io->outputs[0], k->n);
    else if (k->fy != INFD_CUDA_FMT_F32_NCHW)
        infd_cuda_nhwc_from_float(io->stream, io->inputs[0], io->outputs[0], k->fy, k->n);
    else if (k->n)
        infd_cuda_transpose(io->stream, io->inputs[0], io->outputs[0], k->esize, k->rank, k->dims,
                            k->strides, k->n);
}

static infd_status transpose_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    transpose_kernel tmp;
    if (!transpose_params(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    transpose_kernel *k = (transpose_kernel *)infd_cuda_kernel_new(
        sizeof(transpose_kernel), "cuda:transpose", transpose_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    infd_cuda_kernel keep = k->base;
    *k = tmp;
    k->base = keep;
    k->fx = infd_cuda_input_fmt(a, 0);
    k->from_nhwc = k->fx != INFD_CUDA_FMT_F32_NCHW;
    k->fy = out_fmt(a, &k->base.base); /* plain unless the plan agreed (misc_opaque) */
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* Pad (opset >= 11: pads and constant_value as constant inputs). */
typedef struct pad_kernel {
    infd_cuda_kernel base;
    int rank, mode;
    float value;
    int64_t n;
    int64_t in[INFD_CUDA_MAX_RANK], out[INFD_CUDA_MAX_RANK], begin[INFD_CUDA_MAX_RANK];
} pad_kernel;

static bool pad_params(const infd_kernel_args *a, pad_kernel *k, infd_error *why)
{
    const char *mode = NULL;
    memset(k, 0, sizeof(*k));
    if (!a->inputs[0] || !infd_cuda_fp32_only(a, 1, why) ||
        infd_ir_attr_string(a->g, a->node, "mode", "constant", &mode, why) != INFD_STATUS_OK)
        return false;
    const infd_ir_value *x = a->inputs[0];
    int rank = x->shape.rank;
    k->mode = strcmp(mode, "constant") == 0  ? 0
              : strcmp(mode, "reflect") == 0 ? 1
              : strcmp(mode, "edge") == 0    ? 2
                                             : -1;
    if (k->mode < 0 || rank < 1 || rank > INFD_CUDA_MAX_RANK) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "mode '%s' at rank %d is not supported on CUDA", mode, rank);
        return false;
    }
    const int64_t *pads = NULL;
    int32_t np = 0;
    if (a->g->opset < 11) {
        if (infd_ir_attr_ints(a->g, a->node, "pads", &pads, &np, why) != INFD_STATUS_OK ||
            infd_ir_attr_float(a->g, a->node, "value", 0.0f, &k->value, why) != INFD_STATUS_OK)
            return false;
    } else {
        const infd_ir_value *p = in_at(a, 1), *cv = in_at(a, 2);
        if (!p || !p->data || p->dtype != INFD_DTYPE_INT64 || in_at(a, 3) ||
            (cv && (!cv->data || cv->dtype != INFD_DTYPE_FP32))) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "pads and constant_value must be constants (no axes input)");
            return false;
        }
        pads = p->data;
        np = (int32_t)infd_node_numel(p);
        if (cv && infd_node_numel(cv) >= 1)
            k->value = *(const float *)cv->data;
    }
    if (!pads || np != 2 * rank) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "pads must have %d values", 2 * rank);
        return false;
    }
    k->rank = rank;
    for (int d = 0; d < rank; d++) {
        k->in[d] = x->shape.dims[d].value;
        k->out[d] = a->outputs[0]->shape.dims[d].value;
        k->begin[d] = pads[d];
        if (pads[d] < 0 || pads[d + rank] < 0) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "negative pads (cropping) are not supported on CUDA");
            return false;
        }
    }
    k->n = infd_node_numel(a->outputs[0]);
    return true;
}

static bool pad_supports(const infd_kernel_args *a, infd_error *why)
{
    pad_kernel k;
    return pad_params(a, &k, why);
}

static void pad_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const pad_kernel *k = (const pad_kernel *)base;
    if (k->n)
        infd_cuda_pad(io->stream, io->inputs[0], io->outputs[0], k->rank, k->in, k->out, k->begin,
                      k->mode, k->value, k->n);
}

static infd_status pad_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    pad_kernel tmp;
    if (!pad_params(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    pad_kernel *k =
        (pad_kernel *)infd_cuda_kernel_new(sizeof(pad_kernel), "cuda:pad", pad_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    infd_cuda_kernel keep = k->base;
    *k = tmp;
    k->base = keep;
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* Resize / Upsample over H and W of 4-D data; scales from the shapes. */
typedef struct resize_kernel {
    infd_cuda_kernel base;
    infd_cuda_resize_desc d;
} resize_kernel;

static bool resize_params(const infd_kernel_args *a, resize_kernel *k, infd_error *why)
{
    const char *mode = NULL, *coord = NULL, *nearest = NULL;
    memset(k, 0, sizeof(*k));
    if (!a->inputs[0] || !infd_cuda_fp32_only(a, 1, why) ||
        infd_ir_attr_string(a->g, a->node, "mode", "nearest", &mode, why) != INFD_STATUS_OK ||
        infd_ir_attr_string(a->g, a->node, "coordinate_transformation_mode",
                            strcmp(a->node->op_type, "Upsample") == 0 ? "asymmetric" : "half_pixel",
                            &coord, why) != INFD_STATUS_OK ||
        infd_ir_attr_string(a->g, a->node, "nearest_mode", "round_prefer_floor", &nearest, why) !=
            INFD_STATUS_OK)
        return false;
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    if (x->shape.rank != 4 || y->shape.rank != 4 ||
        x->shape.dims[0].value != y->shape.dims[0].value ||
        x->shape.dims[1].value != y->shape.dims[1].value) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "CUDA resizes the last two dims of 4-D data only");
        return false;
    }
    k->d.mode = strcmp(mode, "nearest") == 0 ? 0 : strcmp(mode, "linear") == 0 ? 1 : -1;
    k->d.coord = strcmp(coord, "half_pixel") == 0           ? 0
                 : strcmp(coord, "asymmetric") == 0         ? 1
                 : strcmp(coord, "align_corners") == 0      ? 2
                 : strcmp(coord, "pytorch_half_pixel") == 0 ? 3
                                                            : -1;
    k->d.nearest_mode = strcmp(nearest, "round_prefer_floor") == 0  ? 0
                        : strcmp(nearest, "round_prefer_ceil") == 0 ? 1
                        : strcmp(nearest, "floor") == 0             ? 2
                        : strcmp(nearest, "ceil") == 0              ? 3
                                                                    : -1;
    if (k->d.mode < 0 || k->d.coord < 0 || k->d.nearest_mode < 0) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "mode '%s', coordinate_transformation_mode '%s', nearest_mode '%s' "
                        "is not supported on CUDA",
                        mode, coord, nearest);
        return false;
    }
    k->d.nc = x->shape.dims[0].value * x->shape.dims[1].value;
    k->d.h = x->shape.dims[2].value;
    k->d.w = x->shape.dims[3].value;
    k->d.oh = y->shape.dims[2].value;
    k->d.ow = y->shape.dims[3].value;
    k->d.scale_h = (float)k->d.oh / (float)(k->d.h ? k->d.h : 1);
    k->d.scale_w = (float)k->d.ow / (float)(k->d.w ? k->d.w : 1);
    /* Given scales win over the shape ratio (they differ when the output
     * size was rounded). */
    const infd_ir_value *sc = in_at(a, strcmp(a->node->op_type, "Upsample") == 0 ? 1 : 2);
    if (sc && sc->data && sc->dtype == INFD_DTYPE_FP32 && infd_node_numel(sc) == 4) {
        const float *s = sc->data;
        k->d.scale_h = s[2];
        k->d.scale_w = s[3];
    }
    return true;
}

static bool resize_supports(const infd_kernel_args *a, infd_error *why)
{
    resize_kernel k;
    return resize_params(a, &k, why);
}

static void resize_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const resize_kernel *k = (const resize_kernel *)base;
    infd_cuda_resize(io->stream, &k->d, io->inputs[0], io->outputs[0]);
}

static infd_status resize_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    resize_kernel tmp;
    if (!resize_params(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    resize_kernel *k = (resize_kernel *)infd_cuda_kernel_new(sizeof(resize_kernel), "cuda:resize",
                                                             resize_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    infd_cuda_kernel keep = k->base;
    *k = tmp;
    k->base = keep;
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

const infd_cuda_op infd_cuda_ops_misc[] = {
    { "Relu", unary_supports, unary_compile },
    { "LeakyRelu", unary_supports, unary_compile },
    { "Clip", unary_supports, unary_compile },
    { "Sigmoid", unary_supports, unary_compile },
    { "HardSigmoid", unary_supports, unary_compile },
    { "Tanh", unary_supports, unary_compile },
    { "HardSwish", unary_supports, unary_compile },
    { "Elu", unary_supports, unary_compile },
    { "Sqrt", unary_supports, unary_compile },
    { "Exp", unary_supports, unary_compile },
    { "Log", unary_supports, unary_compile },
    { "Abs", unary_supports, unary_compile },
    { "Neg", unary_supports, unary_compile },
    { "Reciprocal", unary_supports, unary_compile },
    { "Floor", unary_supports, unary_compile },
    { "Ceil", unary_supports, unary_compile },
    { "Erf", unary_supports, unary_compile },
    { "Softplus", unary_supports, unary_compile },
    { "Add", binary_supports, binary_compile },
    { "Sub", binary_supports, binary_compile },
    { "Mul", binary_supports, binary_compile },
    { "Div", binary_supports, binary_compile },
    { "Pow", binary_supports, binary_compile },
    { "Max", binary_supports, binary_compile },
    { "Min", binary_supports, binary_compile },
    { "PRelu", binary_supports, binary_compile },
    { "MaxPool", pool_supports, pool_compile },
    { "AveragePool", pool_supports, pool_compile },
    { "GlobalAveragePool", pool_supports, pool_compile },
    { "GlobalMaxPool", pool_supports, pool_compile },
    { "Softmax", softmax_supports, softmax_compile },
    { "LogSoftmax", softmax_supports, softmax_compile },
    { "Concat", concat_supports, concat_compile },
    { "Transpose", transpose_supports, transpose_compile },
    { "Pad", pad_supports, pad_compile },
    { "Resize", resize_supports, resize_compile },
    { "Upsample", resize_supports, resize_compile },
    { "Reshape", copy_supports, copy_compile },
    { "Flatten", copy_supports, copy_compile },
    { "Squeeze", copy_supports, copy_compile },
    { "Unsqueeze", copy_supports, copy_compile },
    { "Identity", copy_supports, copy_compile },
    { "Dropout", copy_supports, copy_compile },
    { NULL, NULL, NULL },
};

/* ------------------------------------------------------------------------- */
/* FP16 NHWC layout policy                                                   */
/* ------------------------------------------------------------------------- */

static bool is_op(const infd_kernel_args *a, const char *const *names)
{
    for (; *names; names++)
        if (strcmp(a->node->op_type, *names) == 0)
            return true;
    return false;
}

bool infd_cuda_misc_opaque(const infd_kernel_args *a, int i)
{
    static const char *const unary[] = { "Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid",
                                         "Tanh", "HardSwish", "Elu",  NULL };
    static const char *const binary[] = { "Add", "Sub", "Mul", "Div", "Max", "Min", NULL };
    static const char *const pools[] = { "MaxPool", "AveragePool", NULL };
    static const char *const global[] = { "GlobalAveragePool", "GlobalMaxPool", NULL };
    const infd_ir_value *y = a->n_outputs > 0 ? a->outputs[0] : NULL;
    const infd_ir_value *x = in_at(a, 0);
    if ((a->precision != INFD_PRECISION_FP16 && a->precision != INFD_PRECISION_BF16) ||
        !is_4d_fp32(x))
        return false;
    if (is_op(a, global))
        return i == 0;
    if (!is_4d_fp32(y))
        return false;
    if (is_op(a, unary))
        return i <= 0 && a->n_outputs == 1;
    if (is_op(a, binary)) {
        const infd_ir_value *b = in_at(a, 1);
        return i <= 1 && a->n_inputs == 2 && is_4d_fp32(b) && same_dims(x, y) && same_dims(b, y);
    }
    if (is_op(a, pools))
        return i <= 0 && (a->n_outputs == 1 || !a->outputs[1]);
    if (strcmp(a->node->op_type, "Concat") == 0) {
        int64_t axis = 0;
        if (infd_ir_attr_int(a->g, a->node, "axis", 0, &axis, NULL) != INFD_STATUS_OK ||
            (axis != 1 && axis != -3))
            return false;
        for (int j = 0; j < a->n_inputs; j++)
            if (!is_4d_fp32(a->inputs[j]))
                return false;
        return true;
    }
    if (strcmp(a->node->op_type, "Transpose") == 0 && i <= 0) {
        /* Reading 16-bit NHWC into NHWC FP32 (perm 0, 2, 3, 1), or writing
         * NHWC FP32 as the 16-bit NHWC of its NCHW transpose (0, 3, 1, 2):
         * either way the elements keep their order, a conversion. */
        static const int64_t to_nhwc[4] = { 0, 2, 3, 1 }, from_nhwc[4] = { 0, 3, 1, 2 };
        const int64_t *perm = NULL;
        int32_t np = 0;
        return infd_ir_attr_ints(a->g, a->node, "perm", &perm, &np, NULL) == INFD_STATUS_OK &&
               perm && np == 4 && memcmp(perm, i == 0 ? to_nhwc : from_nhwc, sizeof(to_nhwc)) == 0;
    }
    return false;
}
