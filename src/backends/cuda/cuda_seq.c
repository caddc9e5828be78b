/*
 * cuda_seq.c - node glue for the CUDA kernels of sequence models
 * (cuda_seq.h): what a speech encoder computes its masks and lengths with
 * (Equal, Less, LessOrEqual, Greater, GreaterOrEqual, And, Or, Xor, Not,
 * Mod, Where, Cast, and Add/Sub/Mul/Div/Clip on integers), LayerNormalization
 * (FP32), Gather, Split and Expand (any fixed-size dtype; Split and Expand
 * are strided view copies, cuda_extra.h) and LSTM (FP32).
 *
 * Semantics follow the CPU backend: ONNX broadcasting (shapes
 * right-aligned), integer arithmetic made total (ref_elementwise.c),
 * LayerNormalization's statistics in double (ref_reduce.c), LSTM as
 * ref_rnn.c for the default activations. The table is searched after the
 * others (cuda_backend.c), so FP32 Add/Sub/Mul/Div stay on cuda_ops.c's
 * kernels. These kernels read plain layouts only and refuse fusion hooks.
 */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_extra.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_runtime.h"
#include "backends/cuda/cuda_seq.h"
#include "core/alloc.h"
#include "core/common.h"
#include "graph/node_params.h"

static const infd_ir_value *in_at(const infd_kernel_args *a, int i)
{
    return i < a->n_inputs ? a->inputs[i] : NULL;
}

/* The kernels' type code of dtype; -1 for those they do not read. */
static int type_of(infd_dtype t)
{
    switch (t) {
    case INFD_DTYPE_BOOL:
        return INFD_CUDA_T_BOOL;
    case INFD_DTYPE_UINT8:
        return INFD_CUDA_T_U8;
    case INFD_DTYPE_INT8:
        return INFD_CUDA_T_I8;
    case INFD_DTYPE_INT32:
        return INFD_CUDA_T_I32;
    case INFD_DTYPE_INT64:
        return INFD_CUDA_T_I64;
    case INFD_DTYPE_FP16:
        return INFD_CUDA_T_F16;
    case INFD_DTYPE_FP32:
        return INFD_CUDA_T_F32;
    case INFD_DTYPE_FP64:
        return INFD_CUDA_T_F64;
    default:
        return -1;
    }
}

static bool is_int(infd_dtype t)
{
    return t == INFD_DTYPE_INT8 || t == INFD_DTYPE_UINT8 || t == INFD_DTYPE_INT32 ||
           t == INFD_DTYPE_INT64;
}

/* Row-major element strides of v. */
static void strides_of(const infd_ir_value *v, int64_t *st)
{
    int64_t s = 1;
    for (int32_t d = v->shape.rank - 1; d >= 0; d--) {
        st[d] = s;
        s *= v->shape.dims[d].value;
    }
}

/* The broadcast of inputs[0, n_in) to the output (ONNX's right-aligned
 * rule); false with a message when a shape does not broadcast. */
static bool bcast_plan(const infd_kernel_args *a, int n_in, infd_cuda_seq_bcast *b, infd_error *why)
{
    const infd_ir_value *y = a->outputs[0];
    memset(b, 0, sizeof(*b));
    if (y->shape.rank > INFD_CUDA_SEQ_MAX_RANK) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "rank %d is over %d on CUDA",
                        (int)y->shape.rank, INFD_CUDA_SEQ_MAX_RANK);
        return false;
    }
    b->rank = y->shape.rank;
    b->n = infd_node_numel(y);
    for (int d = 0; d < b->rank; d++)
        b->dims[d] = y->shape.dims[d].value;
    for (int k = 0; k < n_in; k++) {
        const infd_ir_value *x = a->inputs[k];
        int64_t st[INFD_MAX_RANK];
        if (!x && k > 0) /* an omitted optional input (Clip's min or max) */
            continue;
        if (!x || x->shape.rank > b->rank) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "input %d does not broadcast", k);
            return false;
        }
        strides_of(x, st);
        int off = b->rank - x->shape.rank;
        for (int d = 0; d < x->shape.rank; d++) {
            int64_t dim = x->shape.dims[d].value;
            if (dim != 1 && dim != b->dims[d + off]) {
                infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                                "input %d does not broadcast to the output", k);
                return false;
            }
            b->strides[k][d + off] = dim == 1 ? 0 : st[d];
        }
    }
    return true;
}

/* ---- element-wise -------------------------------------------------------- */

typedef struct elt_kernel {
    infd_cuda_kernel base;
    int op, tin, tout, n_in;
    infd_cuda_seq_bcast b;
} elt_kernel;

static const struct {
    const char *name;
    int op;
    int n_in;
} elt_ops[] = {
    { "Equal", INFD_CUDA_SEQ_EQUAL, 2 },
    { "Less", INFD_CUDA_SEQ_LESS, 2 },
    { "LessOrEqual", INFD_CUDA_SEQ_LESS_EQUAL, 2 },
    { "Greater", INFD_CUDA_SEQ_GREATER, 2 },
    { "GreaterOrEqual", INFD_CUDA_SEQ_GREATER_EQUAL, 2 },
    { "And", INFD_CUDA_SEQ_AND, 2 },
    { "Or", INFD_CUDA_SEQ_OR, 2 },
    { "Xor", INFD_CUDA_SEQ_XOR, 2 },
    { "Not", INFD_CUDA_SEQ_NOT, 1 },
    { "Mod", INFD_CUDA_SEQ_MOD, 2 },
    { "Where", INFD_CUDA_SEQ_WHERE, 3 },
    { "Cast", INFD_CUDA_SEQ_CAST, 1 },
    { "Add", INFD_CUDA_SEQ_ADD, 2 },
    { "Sub", INFD_CUDA_SEQ_SUB, 2 },
    { "Mul", INFD_CUDA_SEQ_MUL, 2 },
    { "Div", INFD_CUDA_SEQ_DIV, 2 },
    { "Clip", INFD_CUDA_SEQ_CLIP, 3 },
};

static bool elt_plan(const infd_kernel_args *a, elt_kernel *k, infd_error *why)
{
    memset(k, 0, sizeof(*k));
    size_t i = 0;
    while (i < INFD_ARRAY_SIZE(elt_ops) && strcmp(elt_ops[i].name, a->node->op_type) != 0)
        i++;
    if (i == INFD_ARRAY_SIZE(elt_ops) || !infd_cuda_plain_unfused(a, why))
        return false;
    k->op = elt_ops[i].op;
    k->n_in = elt_ops[i].n_in;
    if (k->op == INFD_CUDA_SEQ_CLIP) { /* min and max are optional inputs (opset 11) */
        if (a->g->opset < 11 || a->n_inputs < 1 || a->n_inputs > 3) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "integer Clip before opset 11 is not supported on CUDA");
            return false;
        }
        k->n_in = a->n_inputs;
    }
    if (a->n_inputs != k->n_in || a->n_outputs != 1) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "%d inputs and %d outputs",
                        (int)a->n_inputs, (int)a->n_outputs);
        return false;
    }
    const infd_ir_value *x = a->inputs[k->op == INFD_CUDA_SEQ_WHERE ? 1 : 0], *y = a->outputs[0];
    k->tin = type_of(x->dtype);
    k->tout = type_of(y->dtype);
    bool ok = k->tin >= 0 && k->tout >= 0;
    for (int j = 1; ok && j < k->n_in; j++)
        ok = (k->op == INFD_CUDA_SEQ_CLIP && !a->inputs[j]) ||
             (a->inputs[j] &&
              (k->op == INFD_CUDA_SEQ_WHERE ? (j == 1 || a->inputs[j]->dtype == x->dtype)
                                            : a->inputs[j]->dtype == x->dtype));
    switch (k->op) {
    case INFD_CUDA_SEQ_AND:
    case INFD_CUDA_SEQ_OR:
    case INFD_CUDA_SEQ_XOR:
    case INFD_CUDA_SEQ_NOT:
        ok = ok && x->dtype == INFD_DTYPE_BOOL && y->dtype == INFD_DTYPE_BOOL;
        break;
    case INFD_CUDA_SEQ_WHERE:
        ok = ok && a->inputs[0]->dtype == INFD_DTYPE_BOOL && y->dtype == x->dtype;
        break;
    case INFD_CUDA_SEQ_CAST:
        break;
    case INFD_CUDA_SEQ_MOD: {
        int64_t fmod_attr = 0;
        if (infd_ir_attr_int(a->g, a->node, "fmod", 0, &fmod_attr, why) != INFD_STATUS_OK)
            return false;
        if (fmod_attr)
            k->op = INFD_CUDA_SEQ_FMOD;
        ok = ok && y->dtype == x->dtype && (fmod_attr || is_int(x->dtype));
        break;
    }
    case INFD_CUDA_SEQ_ADD:
    case INFD_CUDA_SEQ_SUB:
    case INFD_CUDA_SEQ_MUL:
    case INFD_CUDA_SEQ_DIV:
    case INFD_CUDA_SEQ_CLIP:
        ok = ok && is_int(x->dtype) && y->dtype == x->dtype;
        break;
    default: /* comparisons */
        ok = ok && y->dtype == INFD_DTYPE_BOOL &&
             (x->dtype != INFD_DTYPE_BOOL || k->op == INFD_CUDA_SEQ_EQUAL);
        break;
    }
    if (!ok) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "%s of %s into %s is not supported on CUDA", a->node->op_type,
                        infd_dtype_name(x->dtype), infd_dtype_name(y->dtype));
        return false;
    }
    return bcast_plan(a, k->n_in, &k->b, why);
}

static bool elt_supports(const infd_kernel_args *a, infd_error *why)
{
    elt_kernel k;
    return elt_plan(a, &k, why);
}

static void elt_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const elt_kernel *k = (const elt_kernel *)base;
    infd_cuda_seq_eltwise(io->stream, k->op, k->tin, k->tout, &k->b, io->inputs[0],
                          k->n_in > 1 ? io->inputs[1] : NULL, k->n_in > 2 ? io->inputs[2] : NULL,
                          io->outputs[0]);
}

static infd_status elt_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    elt_kernel tmp;
    *out = NULL;
    if (!elt_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return infd_cuda_kernel_from(a, &tmp, sizeof(tmp), "cuda:seq_eltwise", elt_run, 0, out, err);
}

/* ---- LayerNormalization ---------------------------------------------------- */

typedef struct ln_kernel {
    infd_cuda_kernel base;
    float eps;
    bool has_bias;
    int n_out;
    int64_t rows, len, scale_n, bias_n;
} ln_kernel;

static bool ln_plan(const infd_kernel_args *a, ln_kernel *k, infd_error *why)
{
    memset(k, 0, sizeof(*k));
    if (!infd_cuda_plain_unfused(a, why))
        return false;
    if (a->n_inputs < 2 || !a->inputs[1] || a->n_outputs > 3) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "needs X, Scale and Y");
        return false;
    }
    for (int i = 0; i < a->n_inputs; i++)
        if (a->inputs[i] && a->inputs[i]->dtype != INFD_DTYPE_FP32) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "LayerNormalization of %s is not supported on CUDA (FP32 only)",
                            infd_dtype_name(a->inputs[i]->dtype));
            return false;
        }
    for (int i = 0; i < a->n_outputs; i++)
        if (a->outputs[i] && a->outputs[i]->dtype != INFD_DTYPE_FP32) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "LayerNormalization output %d is %s (FP32 only on CUDA)", i,
                            infd_dtype_name(a->outputs[i]->dtype));
            return false;
        }
    int64_t axis = -1, stash = 1;
    if (infd_ir_attr_int(a->g, a->node, "axis", -1, &axis, why) != INFD_STATUS_OK ||
        infd_ir_attr_int(a->g, a->node, "stash_type", 1, &stash, why) != INFD_STATUS_OK ||
        infd_ir_attr_float(a->g, a->node, "epsilon", 1e-5f, &k->eps, why) != INFD_STATUS_OK)
        return false;
    const infd_ir_value *x = a->inputs[0];
    int32_t rank = x->shape.rank;
    if (axis < 0)
        axis += rank;
    if (stash != 1 || axis < 0 || axis >= rank) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "axis %lld, stash_type %lld",
                        (long long)axis, (long long)stash);
        return false;
    }
    k->rows = k->len = 1;
    for (int32_t d = 0; d < rank; d++)
        *(d < axis ? &k->rows : &k->len) *= x->shape.dims[d].value;
    k->scale_n = infd_node_numel(a->inputs[1]);
    k->has_bias = a->n_inputs > 2 && a->inputs[2];
    k->bias_n = k->has_bias ? infd_node_numel(a->inputs[2]) : 0;
    if ((k->scale_n != k->len && k->scale_n != 1) ||
        (k->has_bias && k->bias_n != k->len && k->bias_n != 1)) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "Scale and B must have the normalised shape or one element");
        return false;
    }
    k->n_out = a->n_outputs;
    return true;
}

static bool ln_supports(const infd_kernel_args *a, infd_error *why)
{
    ln_kernel k;
    return ln_plan(a, &k, why);
}

static void ln_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const ln_kernel *k = (const ln_kernel *)base;
    infd_cuda_layernorm(io->stream, io->inputs[0], io->inputs[1], k->scale_n,
                        k->has_bias ? io->inputs[2] : NULL, k->bias_n, io->outputs[0],
                        k->n_out > 1 ? io->outputs[1] : NULL, k->n_out > 2 ? io->outputs[2] : NULL,
                        k->rows, k->len, k->eps);
}

static infd_status ln_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    ln_kernel tmp;
    *out = NULL;
    if (!ln_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return infd_cuda_kernel_from(a, &tmp, sizeof(tmp), "cuda:layernorm", ln_run, 0, out, err);
}

/* ---- Gather -------------------------------------------------------------------- */

typedef struct gather_kernel {
    infd_cuda_kernel base;
    int esize, idx64;
    int64_t outer, axis_dim, n_idx, inner;
} gather_kernel;

static bool gather_plan(const infd_kernel_args *a, gather_kernel *k, infd_error *why)
{
    memset(k, 0, sizeof(*k));
    if (!infd_cuda_plain_unfused(a, why))
        return false;
    const infd_ir_value *x = a->inputs[0], *idx = in_at(a, 1), *y = a->outputs[0];
    size_t es = infd_dtype_size(x->dtype);
    if (!idx || (idx->dtype != INFD_DTYPE_INT64 && idx->dtype != INFD_DTYPE_INT32) ||
        (es != 1 && es != 2 && es != 4 && es != 8) || y->dtype != x->dtype) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "Gather of %s by %s is not supported on CUDA", infd_dtype_name(x->dtype),
                        idx ? infd_dtype_name(idx->dtype) : "nothing");
        return false;
    }
    int64_t axis = 0;
    if (infd_ir_attr_int(a->g, a->node, "axis", 0, &axis, why) != INFD_STATUS_OK)
        return false;
    int32_t rank = x->shape.rank;
    if (axis < 0)
        axis += rank;
    if (axis < 0 || axis >= rank) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "axis out of range");
        return false;
    }
    k->outer = k->inner = 1;
    for (int32_t d = 0; d < rank; d++)
        if (d < axis)
            k->outer *= x->shape.dims[d].value;
        else if (d > axis)
            k->inner *= x->shape.dims[d].value;
    k->axis_dim = x->shape.dims[axis].value;
    k->n_idx = infd_node_numel(idx);
    k->esize = (int)es;
    k->idx64 = idx->dtype == INFD_DTYPE_INT64;
    return true;
}

static bool gather_supports(const infd_kernel_args *a, infd_error *why)
{
    gather_kernel k;
    return gather_plan(a, &k, why);
}

static void gather_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const gather_kernel *k = (const gather_kernel *)base;
    infd_cuda_gather(io->stream, io->inputs[0], io->inputs[1], k->idx64, io->outputs[0], k->esize,
                     k->outer, k->axis_dim, k->n_idx, k->inner);
}

static infd_status gather_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    gather_kernel tmp;
    *out = NULL;
    if (!gather_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return infd_cuda_kernel_from(a, &tmp, sizeof(tmp), "cuda:gather", gather_run, 0, out, err);
}

/* ---- Split and Expand: strided view copies ------------------------------------- */

#define SPLIT_MAX 16

typedef struct views_kernel {
    infd_cuda_kernel base;
    int esize, n;
    int64_t numel[SPLIT_MAX];
    infd_cuda_view v[SPLIT_MAX]; /* output i is view v[i] of input 0 */
} views_kernel;

static bool views_plan(const infd_kernel_args *a, views_kernel *k, infd_error *why)
{
    memset(k, 0, sizeof(*k));
    if (!infd_cuda_plain_unfused(a, why))
        return false;
    const infd_ir_value *x = a->inputs[0];
    size_t es = infd_dtype_size(x->dtype);
    int32_t rank = x->shape.rank;
    if ((es != 1 && es != 2 && es != 4 && es != 8) || rank > INFD_CUDA_VIEW_MAX_RANK) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "%s of %s (rank %d) on CUDA",
                        a->node->op_type, infd_dtype_name(x->dtype), (int)rank);
        return false;
    }
    k->esize = (int)es;
    int64_t st[INFD_MAX_RANK];
    strides_of(x, st);
    if (strcmp(a->node->op_type, "Expand") == 0) {
        const infd_ir_value *y = a->outputs[0];
        if (y->shape.rank > INFD_CUDA_VIEW_MAX_RANK || y->shape.rank < rank ||
            y->dtype != x->dtype) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "Expand to rank %d",
                            (int)y->shape.rank);
            return false;
        }
        infd_cuda_view *v = &k->v[0];
        v->rank = y->shape.rank > 0 ? y->shape.rank : 1;
        v->dims[0] = 1;
        int off = y->shape.rank - rank;
        for (int d = 0; d < y->shape.rank; d++) {
            v->dims[d] = y->shape.dims[d].value;
            int64_t xd = d >= off ? x->shape.dims[d - off].value : 1;
            if (xd != 1 && xd != v->dims[d]) {
                infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                                "the input does not broadcast to the output");
                return false;
            }
            v->strides[d] = d >= off && xd != 1 ? st[d - off] : 0;
        }
        k->n = 1;
        k->numel[0] = infd_node_numel(y);
        return true;
    }
    /* Split: the outputs' shapes (inferred) say where each part starts */
    int64_t axis = 0;
    if (infd_ir_attr_int(a->g, a->node, "axis", 0, &axis, why) != INFD_STATUS_OK)
        return false;
    if (axis < 0)
        axis += rank;
    if (axis < 0 || axis >= rank || a->n_outputs > SPLIT_MAX || rank < 1) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "Split on axis %lld into %d parts",
                        (long long)axis, (int)a->n_outputs);
        return false;
    }
    int64_t at = 0;
    k->n = a->n_outputs;
    for (int i = 0; i < a->n_outputs; i++) {
        const infd_ir_value *y = a->outputs[i];
        infd_cuda_view *v = &k->v[i];
        if (!y) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "an unused Split output");
            return false;
        }
        if (y->shape.rank != rank || y->dtype != x->dtype) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "output %d's shape", i);
            return false;
        }
        v->rank = rank;
        v->base = at * st[axis];
        for (int d = 0; d < rank; d++) {
            v->dims[d] = y->shape.dims[d].value;
            v->strides[d] = st[d];
        }
        at += y->shape.dims[axis].value;
        k->numel[i] = infd_node_numel(y);
    }
    if (at != x->shape.dims[axis].value) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "the parts cover %lld of %lld along the axis", (long long)at,
                        (long long)x->shape.dims[axis].value);
        return false;
    }
    return true;
}

static bool views_supports(const infd_kernel_args *a, infd_error *why)
{
    views_kernel k;
    return views_plan(a, &k, why);
}

static void views_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const views_kernel *k = (const views_kernel *)base;
    for (int i = 0; i < k->n; i++)
        if (k->numel[i] > 0 && io->outputs[i])
            infd_cuda_view_copy(io->stream, io->inputs[0], io->outputs[i], k->esize, &k->v[i],
                                k->numel[i]);
}

static infd_status views_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    views_kernel tmp;
    *out = NULL;
    if (!views_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return infd_cuda_kernel_from(
        a, &tmp, sizeof(tmp), strcmp(a->node->op_type, "Split") == 0 ? "cuda:split" : "cuda:expand",
        views_run, 0, out, err);
}

/* ---- LSTM ------------------------------------------------------------------------ */

typedef struct lstm_kernel {
    infd_cuda_kernel base;
    infd_cuda_lstm_desc d;
    int n_in, n_out;
} lstm_kernel;

static bool lstm_plan(const infd_kernel_args *a, lstm_kernel *k, infd_error *why)
{
    memset(k, 0, sizeof(*k));
    if (!infd_cuda_plain_unfused(a, why))
        return false;
    const infd_ir_value *x = a->inputs[0], *w = in_at(a, 1), *r = in_at(a, 2);
    const infd_ir_value *seq = in_at(a, 4);
    if (!w || !r || x->shape.rank != 3 || w->shape.rank != 3) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "needs X [seq, batch, input], W, R");
        return false;
    }
    for (int i = 0; i < a->n_inputs; i++)
        if (i != 4 && a->inputs[i] && a->inputs[i]->dtype != INFD_DTYPE_FP32) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "LSTM input %d is %s (FP32 only on CUDA)", i,
                            infd_dtype_name(a->inputs[i]->dtype));
            return false;
        }
    if (seq && seq->dtype != INFD_DTYPE_INT32) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "sequence_lens must be INT32");
        return false;
    }
    int64_t layout = 0, input_forget = 0, hidden = 0;
    char dir[32] = "forward";
    const char *ds = NULL;
    if (infd_ir_attr_int(a->g, a->node, "layout", 0, &layout, why) != INFD_STATUS_OK ||
        infd_ir_attr_int(a->g, a->node, "input_forget", 0, &input_forget, why) != INFD_STATUS_OK ||
        infd_ir_attr_int(a->g, a->node, "hidden_size", 0, &hidden, why) != INFD_STATUS_OK)
        return false;
    if (infd_ir_attr_string(a->g, a->node, "direction", "forward", &ds, why) != INFD_STATUS_OK)
        return false;
    snprintf(dir, sizeof(dir), "%s", ds ? ds : "forward");
    int dirs = strcmp(dir, "bidirectional") == 0 ? 2 : 1;
    bool custom =
        !infd_lstm_default_activations(a->node, dirs) || infd_ir_node_attr(a->node, "clip");
    if (layout != 0 || input_forget != 0 || custom ||
        (dirs == 1 && strcmp(dir, "forward") != 0 && strcmp(dir, "reverse") != 0)) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "LSTM with layout %lld, input_forget %lld, direction %s%s is not "
                        "supported on CUDA (layout 0, default activations, no clip)",
                        (long long)layout, (long long)input_forget, dir,
                        custom ? ", custom activations or clip" : "");
        return false;
    }
    k->d.seq = x->shape.dims[0].value;
    k->d.batch = x->shape.dims[1].value;
    k->d.input = x->shape.dims[2].value;
    k->d.hidden = hidden > 0 ? hidden : r->shape.dims[2].value;
    k->d.dirs = dirs;
    k->d.reverse = strcmp(dir, "reverse") == 0;
    k->n_in = a->n_inputs;
    k->n_out = a->n_outputs;
    if (w->shape.dims[0].value != dirs || w->shape.dims[1].value != 4 * k->d.hidden ||
        w->shape.dims[2].value != k->d.input) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "W is not [%d, 4 x %lld, %lld]", dirs,
                        (long long)k->d.hidden, (long long)k->d.input);
        return false;
    }
    return true;
}

static bool lstm_supports(const infd_kernel_args *a, infd_error *why)
{
    lstm_kernel k;
    return lstm_plan(a, &k, why);
}

static void lstm_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const lstm_kernel *k = (const lstm_kernel *)base;
    const void *in[8] = { NULL };
    for (int i = 0; i < k->n_in && i < 8; i++)
        in[i] = io->inputs[i];
    infd_cuda_lstm(io->stream, &k->d, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7],
                   k->n_out > 0 ? io->outputs[0] : NULL, k->n_out > 1 ? io->outputs[1] : NULL,
                   k->n_out > 2 ? io->outputs[2] : NULL, io->workspace);
}

static infd_status lstm_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    lstm_kernel tmp;
    *out = NULL;
    if (!lstm_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return infd_cuda_kernel_from(a, &tmp, sizeof(tmp), "cuda:lstm", lstm_run,
                                 infd_cuda_lstm_work_bytes(&tmp.d), out, err);
}

/* ---- SegmentArgMax (infd_plan_options.argmax) --------------------------------- */

typedef struct segarg_kernel {
    infd_cuda_kernel base;
    int64_t rows, len;
    infd_cuda_segarg_spans spans;
} segarg_kernel;

static bool segarg_plan(const infd_kernel_args *a, segarg_kernel *k, infd_error *why)
{
    memset(k, 0, sizeof(*k));
    if (!infd_cuda_plain_unfused(a, why))
        return false;
    const infd_ir_value *x = a->inputs[0];
    if (x->dtype != INFD_DTYPE_FP32 || a->outputs[0]->dtype != INFD_DTYPE_INT64 ||
        x->shape.rank < 1) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "FP32 in, INT64 out");
        return false;
    }
    const int64_t *st = NULL, *en = NULL;
    int32_t ns = 0, ne = 0;
    if (infd_ir_attr_ints(a->g, a->node, "starts", &st, &ns, why) != INFD_STATUS_OK ||
        infd_ir_attr_ints(a->g, a->node, "ends", &en, &ne, why) != INFD_STATUS_OK)
        return false;
    k->len = x->shape.dims[x->shape.rank - 1].value;
    if (ns < 1 || ns != ne || ns > INFD_CUDA_SEGARG_MAX || k->len <= 0) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "starts/ends");
        return false;
    }
    k->rows = infd_node_numel(x) / k->len;
    k->spans.n = ns;
    for (int s = 0; s < ns; s++) {
        if (st[s] < 0 || st[s] >= en[s] || en[s] > k->len) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "segment outside the axis");
            return false;
        }
        k->spans.starts[s] = st[s];
        k->spans.ends[s] = en[s];
    }
    return true;
}

static bool segarg_supports(const infd_kernel_args *a, infd_error *why)
{
    segarg_kernel k;
    return segarg_plan(a, &k, why);
}

static void segarg_run(const infd_cuda_kernel *base, const infd_kernel_io *io)
{
    const segarg_kernel *k = (const segarg_kernel *)base;
    infd_cuda_segment_argmax(io->stream, io->inputs[0], io->outputs[0], k->rows, k->len, &k->spans);
}

static infd_status segarg_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    segarg_kernel tmp;
    *out = NULL;
    if (!segarg_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return infd_cuda_kernel_from(a, &tmp, sizeof(tmp), "cuda:segment_argmax", segarg_run, 0, out,
                                 err);
}

const infd_cuda_op infd_cuda_ops_seq[] = {
    { "Equal", elt_supports, elt_compile },
    { "Less", elt_supports, elt_compile },
    { "LessOrEqual", elt_supports, elt_compile },
    { "Greater", elt_supports, elt_compile },
    { "GreaterOrEqual", elt_supports, elt_compile },
    { "And", elt_supports, elt_compile },
    { "Or", elt_supports, elt_compile },
    { "Xor", elt_supports, elt_compile },
    { "Not", elt_supports, elt_compile },
    { "Mod", elt_supports, elt_compile },
    { "Where", elt_supports, elt_compile },
    { "Cast", elt_supports, elt_compile },
    { "Add", elt_supports, elt_compile },
    { "Sub", elt_supports, elt_compile },
    { "Mul", elt_supports, elt_compile },
    { "Div", elt_supports, elt_compile },
    { "Clip", elt_supports, elt_compile },
    { "LayerNormalization", ln_supports, ln_compile },
    { "Gather", gather_supports, gather_compile },
    { "Split", views_supports, views_compile },
    { "Expand", views_supports, views_compile },
    { "LSTM", lstm_supports, lstm_compile },
    { "SegmentArgMax", segarg_supports, segarg_compile },
    { NULL, NULL, NULL },
};
