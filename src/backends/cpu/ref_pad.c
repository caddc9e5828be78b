/*
 * ref_pad.c - Pad (constant, reflect, edge) for every fixed-size dtype;
 * pads as an attribute before opset 11 and as a constant input from 11,
 * constant_value as an input (read at run time when not constant), axes from
 * opset 18. Negative pads crop.
 *
 * The output is walked by rows (the innermost dim): each output row maps to
 * one input row (or to the constant), and within a row the in-range middle is
 * one memcpy; only the padded ends are mapped element by element.
 */
#include <string.h>

#include "backends/cpu/ref_common.h"
#include "backends/cpu/ref_kernels.h"
#include "core/common.h"

typedef enum pad_mode { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE } pad_mode;

typedef struct pad_kernel {
    infd_cpu_kernel base;
    pad_mode mode;
    bool value_input; /* constant_value is read from input 2 at run time */
    size_t esize;
    int32_t rank; /* >= 1 (a scalar is run as [1]) */
    int64_t rows; /* output rows: product of the output dims but the last */
    int64_t in_dims[INFD_MAX_RANK];
    int64_t out_dims[INFD_MAX_RANK];
    int64_t pads_begin[INFD_MAX_RANK];
    int64_t in_strides[INFD_MAX_RANK]; /* elements */
    uint8_t value[8];                  /* the constant, in the data's dtype */
} pad_kernel;

typedef struct pad_job {
    const pad_kernel *k;
    const uint8_t *value;
    const char *in;
    char *out;
} pad_job;

/* Input index for padded index `i` of a dim of `n`; -1 for the constant. */
static int64_t pad_map(int64_t i, int64_t n, pad_mode mode)
{
    if (i >= 0 && i < n)
        return i;
    if (mode == PAD_CONSTANT)
        return -1;
    if (mode == PAD_EDGE)
        return i < 0 ? 0 : n - 1;
    if (n == 1)
        return 0;
    int64_t period = 2 * (n - 1);
    i %= period;
    if (i < 0)
        i += period;
    return i < n ? i : period - i;
}

static void pad_fill(char *dst, const uint8_t *value, size_t esize, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + (size_t)i * esize, value, esize);
}

static void pad_body(void *arg, int64_t begin, int64_t end)
{
    const pad_job *j = arg;
    const pad_kernel *k = j->k;
    const int32_t last = k->rank - 1;
    const size_t es = k->esize;
    const int64_t olen = k->out_dims[last], ilen = k->in_dims[last], pb = k->pads_begin[last];
    /* In-range middle of a row: output columns [c0, c1). */
    const int64_t c0 = INFD_MAX(0, pb), c1 = INFD_MIN(olen, pb + ilen);
    for (int64_t r = begin; r < end; r++) {
        char *dst = j->out + (size_t)(r * olen) * es;
        int64_t rem = r, src_off = 0;
        bool constant = false;
        for (int32_t d = last - 1; d >= 0; d--) {
            int64_t o = rem % k->out_dims[d];
            rem /= k->out_dims[d];
            int64_t i = pad_map(o - k->pads_begin[d], k->in_dims[d], k->mode);
            if (i < 0)
                constant = true;
            else
                src_off += i * k->in_strides[d];
        }
        if (constant) {
            pad_fill(dst, j->value, es, olen);
            continue;
        }
        const char *src = j->in + (size_t)src_off * es;
        for (int64_t c = 0; c < olen; c++) {
            if (c == c0 && c0 < c1) {
                memcpy(dst + (size_t)c * es, src + (size_t)(c - pb) * es, (size_t)(c1 - c0) * es);
                c = c1 - 1;
                continue;
            }
            int64_t i = pad_map(c - pb, ilen, k->mode);
            if (i < 0)
                memcpy(dst + (size_t)c * es, j->value, es);
            else
                memcpy(dst + (size_t)c * es, src + (size_t)i * es, es);
        }
    }
}

static void pad_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const pad_kernel *k = (const pad_kernel *)ck;
    pad_job j = { .k = k, .value = k->value, .in = io->inputs[0], .out = io->outputs[0] };
    if (k->value_input)
        j.value = io->inputs[2];
    if (k->rows == 0 || k->out_dims[k->rank - 1] == 0)
        return;
    ref_parallel(io->pool, k->rows, ref_row_grain(k->out_dims[k->rank - 1]), pad_body, &j);
}

/* Stores `v` in `dt` into out (the pre-11 float 'value' attribute). */
static bool pad_value_from_float(infd_dtype dt, float v, uint8_t *out)
{
    switch (dt) {
    case INFD_DTYPE_FP32:
        memcpy(out, &v, 4);
        return true;
    case INFD_DTYPE_FP64: {
        double d = v;
        memcpy(out, &d, 8);
        return true;
    }
    case INFD_DTYPE_INT32: {
        int32_t i = (int32_t)v;
        memcpy(out, &i, 4);
        return true;
    }
    case INFD_DTYPE_INT64: {
        int64_t i = (int64_t)v;
        memcpy(out, &i, 8);
        return true;
    }
    default:
        return v == 0.0f; /* zero bytes are zero in every other dtype */
    }
}

static bool pad_plan(const infd_kernel_args *a, pad_kernel *k, infd_error *why)
{
    memset(k, 0, sizeof(*k));
    if (a->n_inputs < 1 || !a->inputs[0] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "missing input or output");
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    infd_dtype dt = x->dtype;
    k->esize = infd_dtype_size(dt);
    if (k->esize == 0 || k->esize > sizeof(k->value) || y->dtype != dt)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "Pad on %s is not supported",
                           infd_dtype_name(dt));
    const char *mode = NULL;
    if (infd_ir_attr_string(a->g, a->node, "mode", "constant", &mode, why) != INFD_STATUS_OK)
        return false;
    if (strcmp(mode, "constant") == 0)
        k->mode = PAD_CONSTANT;
    else if (strcmp(mode, "reflect") == 0)
        k->mode = PAD_REFLECT;
    else if (strcmp(mode, "edge") == 0)
        k->mode = PAD_EDGE;
    else
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "mode '%s' is not supported", mode);
    int32_t rank = x->shape.rank;
    int64_t pads[2 * INFD_MAX_RANK], axes[INFD_MAX_RANK], n_pads = 0, n_axes = rank;
    if (a->g->opset >= 11) {
        if (a->n_inputs < 2 || !a->inputs[1] ||
            !infd_node_const_ints(a->inputs[1], pads, 2 * INFD_MAX_RANK, &n_pads))
            return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                               "pads must be a constant INT64 input");
        const infd_ir_value *cv = a->n_inputs > 2 ? a->inputs[2] : NULL;
        if (cv) {
            if (cv->dtype != dt || infd_node_numel(cv) != 1)
                return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                                   "constant_value must be one %s", infd_dtype_name(dt));
            if (infd_node_is_const(cv) && cv->data)
                memcpy(k->value, cv->data, k->esize);
            else
                k->value_input = true;
        }
    } else {
        const int64_t *p = NULL;
        int32_t n = 0;
        float v = 0.0f;
        if (infd_ir_attr_ints(a->g, a->node, "pads", &p, &n, why) != INFD_STATUS_OK ||
            infd_ir_attr_float(a->g, a->node, "value", 0.0f, &v, why) != INFD_STATUS_OK)
            return false;
        if (n > 2 * INFD_MAX_RANK)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "too many pads");
        if (n)
            memcpy(pads, p, sizeof(int64_t) * (size_t)n);
        n_pads = n;
        if (!pad_value_from_float(dt, v, k->value))
            return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                               "a nonzero 'value' on %s is not supported", infd_dtype_name(dt));
    }
    if (a->g->opset >= 18 && a->n_inputs > 3 && a->inputs[3]) {
        if (!infd_node_const_ints(a->inputs[3], axes, INFD_MAX_RANK, &n_axes))
            return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                               "axes must be a constant INT64 input");
    } else {
        for (int32_t d = 0; d < rank; d++)
            axes[d] = d;
    }
    if (n_pads != 2 * n_axes)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                           "pads has %lld values, expected %lld", (long long)n_pads,
                           (long long)(2 * n_axes));
    int64_t pb[INFD_MAX_RANK] = { 0 }, pe[INFD_MAX_RANK] = { 0 };
    for (int64_t i = 0; i < n_axes; i++) {
        int64_t ax = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (ax < 0 || ax >= rank)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "axis %lld out of range",
                               (long long)axes[i]);
        pb[ax] = pads[i];
        pe[ax] = pads[n_axes + i];
    }
    /* A scalar runs as [1]. */
    k->rank = rank ? rank : 1;
    int64_t out_numel = 1;
    for (int32_t d = 0; d < k->rank; d++) {
        int64_t n = rank ? x->shape.dims[d].value : 1;
        k->in_dims[d] = n;
        k->pads_begin[d] = pb[d];
        k->out_dims[d] = n + pb[d] + pe[d];
        if (k->out_dims[d] < 0)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "pads crop dim %d below 0",
                               (int)d);
        if (n == 0 && k->out_dims[d] > 0 && k->mode != PAD_CONSTANT)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "%s padding of an empty dim",
                               mode);
        out_numel *= k->out_dims[d];
    }
    if (infd_node_numel(y) != out_numel)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output size differs");
    int64_t s = 1;
    for (int32_t d = k->rank - 1; d >= 0; d--) {
        k->in_strides[d] = s;
        s *= k->in_dims[d];
    }
    k->rows = 1;
    for (int32_t d = 0; d < k->rank - 1; d++)
        k->rows *= k->out_dims[d];
    return true;
}

bool ref_pad_supports(const infd_kernel_args *a, infd_error *why)
{
    pad_kernel k;
    return pad_plan(a, &k, why);
}

infd_status ref_pad_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    pad_kernel tmp;
    *out = NULL;
    if (!pad_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return ref_kernel_from_plan(a, &tmp.base, sizeof(tmp), "ref:pad", pad_run, NULL, out, err);
}
