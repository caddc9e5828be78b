/*
 * ref_movement.c - data movement kernels: the pure copies (Identity,
 * Reshape, Flatten, Squeeze, Unsqueeze, Dropout at inference), the view
 * copies (Expand, Transpose, Slice, Tile, DepthToSpace, SpaceToDepth: one
 * strided walk in ref_common.c), and Concat, Split, Gather, GatherElements.
 *
 * All work on bytes, so every fixed-size dtype is covered. Shapes, strides
 * and slice bounds are fixed at compile; run() only moves bytes.
 */
#include <string.h>

#include "backends/cpu/ref_common.h"
#include "backends/cpu/ref_kernels.h"
#include "core/alloc.h"
#include "core/common.h"
#include "graph/node_params.h"

static size_t value_bytes(const infd_ir_value *v)
{
    return (size_t)infd_node_numel(v) * infd_dtype_size(v->dtype);
}

static bool fixed_size(const infd_kernel_args *a, const infd_ir_value *v, infd_error *why)
{
    if (!v || infd_dtype_size(v->dtype) == 0) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "dtype %s is not supported",
                        v ? infd_dtype_name(v->dtype) : "(missing)");
        return false;
    }
    return true;
}

/* Default check: input 0 and output 0 present, fixed-size, same dtype. */
static bool same_dtype_io(const infd_kernel_args *a, infd_error *why)
{
    if (a->n_inputs < 1 || a->n_outputs < 1 || !a->inputs[0] || !a->outputs[0]) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "missing input or output");
        return false;
    }
    if (!fixed_size(a, a->inputs[0], why))
        return false;
    if (a->inputs[0]->dtype != a->outputs[0]->dtype) {
        infd_node_error(
            a, why, INFD_STATUS_INVALID_ARGUMENT, "output dtype %s differs from input dtype %s",
            infd_dtype_name(a->outputs[0]->dtype), infd_dtype_name(a->inputs[0]->dtype));
        return false;
    }
    return true;
}

/* ---- copies ---------------------------------------------------------------- */

typedef struct copy_kernel {
    infd_cpu_kernel base;
    size_t nbytes;
    int has_mask; /* Dropout's second output: all true */
    size_t mask_bytes;
} copy_kernel;

static void copy_run(const infd_cpu_kernel *k, const infd_kernel_io *io)
{
    const copy_kernel *c = (const copy_kernel *)k;
    ref_copy(io->outputs[0], io->inputs[0], c->nbytes, io->pool);
    if (c->has_mask && io->outputs[1])
        memset(io->outputs[1], 1, c->mask_bytes);
}

bool ref_copy_supports(const infd_kernel_args *a, infd_error *why)
{
    if (!same_dtype_io(a, why))
        return false;
    if (infd_node_numel(a->inputs[0]) != infd_node_numel(a->outputs[0])) {
        infd_node_error(
            a, why, INFD_STATUS_INVALID_ARGUMENT, "output has %lld elements, input %lld",
            (long long)infd_node_numel(a->outputs[0]), (long long)infd_node_numel(a->inputs[0]));
        return false;
    }
    if (strcmp(a->node->op_type, "Dropout") != 0)
        return true;
    if (a->n_outputs > 1 && a->outputs[1] && a->outputs[1]->dtype != INFD_DTYPE_BOOL) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "Dropout mask must be BOOL");
        return false;
    }
    /* Inference is the identity; training mode (opset 12+ input 2) drops
     * random elements, which an inference engine does not do. */
    const infd_ir_value *training = a->n_inputs > 2 ? a->inputs[2] : NULL;
    if (training &&
        (!training->data || training->nbytes < 1 || ((const uint8_t *)training->data)[0])) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "Dropout in training mode (random masking) is not supported");
        return false;
    }
    return true;
}

infd_status ref_copy_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    *out = NULL;
    if (!ref_copy_supports(a, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    copy_kernel *k =
        (copy_kernel *)infd_cpu_kernel_new(sizeof(copy_kernel), "ref:copy", copy_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    k->nbytes = value_bytes(a->inputs[0]);
    if (strcmp(a->node->op_type, "Dropout") == 0 && a->n_outputs > 1 && a->outputs[1]) {
        k->has_mask = 1;
        k->mask_bytes = (size_t)infd_node_numel(a->outputs[1]);
    }
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* ---- view copies ------------------------------------------------------------ */

typedef struct view_kernel {
    infd_cpu_kernel base;
    ref_view view;
} view_kernel;

static void view_kernel_run(const infd_cpu_kernel *k, const infd_kernel_io *io)
{
    const view_kernel *v = (const view_kernel *)k;
    ref_view_run(&v->view, io->inputs[0], io->outputs[0], io->pool);
}

static infd_status view_kernel_make(const infd_kernel_args *a, const ref_view *view,
                                    const char *name, infd_kernel **out, infd_error *err)
{
    view_kernel *k =
        (view_kernel *)infd_cpu_kernel_new(sizeof(view_kernel), name, view_kernel_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    k->view = *view;
    ref_view_finish(&k->view);
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* supports() and compile() of a copy described by a view: the dtype is
 * carried through and <name>_view builds the strided view from the node. */
#define VIEW_OP(name)                                                              \
    bool ref_##name##_supports(const infd_kernel_args *a, infd_error *why)         \
    {                                                                              \
        ref_view v;                                                                \
        return same_dtype_io(a, why) && name##_view(a, &v, why);                   \
    }                                                                              \
    infd_status ref_##name##_compile(const infd_kernel_args *a, infd_kernel **out, \
                                     infd_error *err)                              \
    {                                                                              \
        ref_view v;                                                                \
        *out = NULL;                                                               \
        if (!same_dtype_io(a, err) || !name##_view(a, &v, err))                    \
            return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;                 \
        return view_kernel_make(a, &v, "ref:" #name, out, err);                    \
    }

/* Row-major element strides of `s`. */
static void dense_strides(const infd_shape *s, int64_t *strides)
{
    int64_t st = 1;
    for (int32_t d = s->rank - 1; d >= 0; d--) {
        strides[d] = st;
        st *= s->dims[d];
    }
}

static bool expand_view(const infd_kernel_args *a, ref_view *v, infd_error *why)
{
    infd_shape in, o;
    int64_t st[INFD_MAX_RANK];
    ref_shape_of(a->inputs[0], &in);
    ref_shape_of(a->outputs[0], &o);
    dense_strides(&in, st);
    memset(v, 0, sizeof(*v));
    if (in.rank > o.rank)
        goto bad;
    v->rank = o.rank;
    v->esize = infd_dtype_size(a->inputs[0]->dtype);
    for (int32_t d = 0; d < o.rank; d++) {
        int32_t di = d - (o.rank - in.rank);
        int64_t id = di >= 0 ? in.dims[di] : 1;
        v->dims[d] = o.dims[d];
        if (id == o.dims[d])
            v->strides[d] = di >= 0 ? st[di] : 0;
        else if (id == 1)
            v->strides[d] = 0;
        else
            goto bad;
    }
    return true;
bad:
    infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                    "input shape does not broadcast to the output shape");
    return false;
}

VIEW_OP(expand)

static bool transpose_view(const infd_kernel_args *a, ref_view *v, infd_error *why)
{
    infd_shape in, o;
    int64_t st[INFD_MAX_RANK], perm[INFD_MAX_RANK];
    const int64_t *p = NULL;
    int32_t n = 0;
    ref_shape_of(a->inputs[0], &in);
    ref_shape_of(a->outputs[0], &o);
    dense_strides(&in, st);
    if (infd_ir_attr_ints(a->g, a->node, "perm", &p, &n, why) != INFD_STATUS_OK)
        return false;
    if (p && n != in.rank) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "perm has %d entries for rank %d",
                        (int)n, (int)in.rank);
        return false;
    }
    bool seen[INFD_MAX_RANK] = { false };
    for (int32_t d = 0; d < in.rank; d++) {
        perm[d] = p ? p[d] : in.rank - 1 - d;
        if (perm[d] < 0)
            perm[d] += in.rank;
        if (perm[d] < 0 || perm[d] >= in.rank || seen[perm[d]]) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "perm is not a permutation");
            return false;
        }
        seen[perm[d]] = true;
    }
    if (o.rank != in.rank)
        goto bad;
    memset(v, 0, sizeof(*v));
    v->rank = in.rank;
    v->esize = infd_dtype_size(a->inputs[0]->dtype);
    for (int32_t d = 0; d < in.rank; d++) {
        if (o.dims[d] != in.dims[perm[d]])
            goto bad;
        v->dims[d] = o.dims[d];
        v->strides[d] = st[perm[d]];
    }
    return true;
bad:
    infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                    "output shape does not match the permuted input shape");
    return false;
}

VIEW_OP(transpose)

static int64_t clamp64(int64_t x, int64_t lo, int64_t hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

static bool slice_view(const infd_kernel_args *a, ref_view *v, infd_error *why)
{
    int64_t starts[INFD_MAX_RANK], ends[INFD_MAX_RANK], axes[INFD_MAX_RANK], steps[INFD_MAX_RANK],
        n = 0;
    infd_shape in, o;
    int64_t st[INFD_MAX_RANK];
    if (!infd_slice_params(a, starts, ends, axes, steps, &n, why))
        return false;
    ref_shape_of(a->inputs[0], &in);
    ref_shape_of(a->outputs[0], &o);
    dense_strides(&in, st);
    memset(v, 0, sizeof(*v));
    v->rank = in.rank;
    v->esize = infd_dtype_size(a->inputs[0]->dtype);
    bool done[INFD_MAX_RANK] = { false };
    for (int32_t d = 0; d < in.rank; d++) {
        v->dims[d] = in.dims[d];
        v->strides[d] = st[d];
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t d = axes[i], dim = in.dims[d], s = starts[i], e = ends[i], step = steps[i];
        if (done[d]) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "axis %lld repeated",
                            (long long)d);
            return false;
        }
        done[d] = true;
        /* Adding dim to INT64_MIN cannot overflow; INT64_MAX is never
         * negative. */
        if (s < 0)
            s += dim;
        if (e < 0)
            e += dim;
        int64_t count;
        if (step > 0) {
            s = clamp64(s, 0, dim);
            e = clamp64(e, 0, dim);
            count = e > s ? (e - s + step - 1) / step : 0;
        } else {
            s = clamp64(s, 0, dim - 1);
            e = clamp64(e, -1, dim - 1);
            count = s > e ? (s - e + (-step) - 1) / (-step) : 0;
        }
        if (count > 0)
            v->base += s * st[d];
        v->dims[d] = count;
        v->strides[d] = st[d] * step;
    }
    if (o.rank != in.rank)
        goto bad;
    for (int32_t d = 0; d < in.rank; d++)
        if (o.dims[d] != v->dims[d])
            goto bad;
    return true;
bad:
    infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                    "output shape does not match the slice of the input");
    return false;
}

VIEW_OP(slice)

/* Tile as a view of rank 2r: output dim d split into (repeat, input dim)
 * with strides (0, input stride). Repeats follow from the shapes. */
static bool tile_view(const infd_kernel_args *a, ref_view *v, infd_error *why)
{
    infd_shape in, o;
    int64_t st[INFD_MAX_RANK];
    ref_shape_of(a->inputs[0], &in);
    ref_shape_of(a->outputs[0], &o);
    dense_strides(&in, st);
    memset(v, 0, sizeof(*v));
    if (o.rank != in.rank)
        goto bad;
    v->rank = 2 * in.rank;
    v->esize = infd_dtype_size(a->inputs[0]->dtype);
    for (int32_t d = 0; d < in.rank; d++) {
        int64_t rep = in.dims[d] ? o.dims[d] / in.dims[d] : 0;
        if (in.dims[d] ? rep * in.dims[d] != o.dims[d] : o.dims[d] != 0)
            goto bad;
        v->dims[2 * d] = rep;
        v->strides[2 * d] = 0;
        v->dims[2 * d + 1] = in.dims[d];
        v->strides[2 * d + 1] = st[d];
    }
    return true;
bad:
    infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                    "output shape is not a whole repeat of the input shape");
    return false;
}

VIEW_OP(tile)

/* ---- Concat and Split ------------------------------------------------------- */

/* One kernel for both: the "wide" tensor (Concat's output, Split's input) is
 * outer x sum(part_bytes); part i occupies [offset[i], offset[i] +
 * part_bytes[i]) of each outer row. */
typedef struct parts_kernel {
    infd_cpu_kernel base;
    int32_t n_parts;
    int64_t outer;
    size_t row_bytes;   /* bytes of one outer row of the wide tensor */
    size_t *part_bytes; /* owned */
    size_t *offset;     /* owned */
} parts_kernel;

typedef struct parts_job {
    const parts_kernel *k;
    const infd_kernel_io *io;
    bool split;
} parts_job;

static void parts_body(void *arg, int64_t begin, int64_t end)
{
    const parts_job *j = arg;
    const parts_kernel *k = j->k;
    for (int64_t item = begin; item < end; item++) {
        int64_t o = item / k->n_parts;
        int32_t i = (int32_t)(item % k->n_parts);
        size_t nb = k->part_bytes[i];
        if (nb == 0)
            continue;
        if (j->split) {
            char *dst = j->io->outputs[i];
            if (dst)
                memcpy(dst + (size_t)o * nb,
                       (const char *)j->io->inputs[0] + (size_t)o * k->row_bytes + k->offset[i],
                       nb);
        } else {
            memcpy((char *)j->io->outputs[0] + (size_t)o * k->row_bytes + k->offset[i],
                   (const char *)j->io->inputs[i] + (size_t)o * nb, nb);
        }
    }
}

static void parts_run(const infd_cpu_kernel *ck, const infd_kernel_io *io, bool split)
{
    const parts_kernel *k = (const parts_kernel *)ck;
    parts_job j = { .k = k, .io = io, .split = split };
    int64_t avg = k->n_parts ? (int64_t)(k->row_bytes / (size_t)k->n_parts) : 1;
    ref_parallel(io->pool, k->outer * k->n_parts, ref_row_grain(avg / 4), parts_body, &j);
}

static void concat_run(const infd_cpu_kernel *k, const infd_kernel_io *io)
{
    parts_run(k, io, false);
}

static void split_run(const infd_cpu_kernel *k, const infd_kernel_io *io)
{
    parts_run(k, io, true);
}

static void parts_fini(infd_cpu_kernel *ck)
{
    parts_kernel *k = (parts_kernel *)ck;
    infd_free(k->part_bytes);
    infd_free(k->offset);
}

/* Checks parts against the wide tensor along `axis` (already normalised). */
static bool parts_check(const infd_kernel_args *a, const infd_ir_value *wide,
                        const infd_ir_value *const *parts, int32_t n, int64_t axis, infd_error *why)
{
    int64_t sum = 0;
    if (!fixed_size(a, wide, why))
        return false;
    for (int32_t i = 0; i < n; i++) {
        const infd_ir_value *p = parts[i];
        if (!p || p->dtype != wide->dtype || p->shape.rank != wide->shape.rank) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                            "part %d is missing or differs in dtype or rank", (int)i);
            return false;
        }
        for (int32_t d = 0; d < p->shape.rank; d++) {
            if (d != axis && p->shape.dims[d].value != wide->shape.dims[d].value) {
                infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                                "part %d differs in dim %d outside the axis", (int)i, (int)d);
                return false;
            }
        }
        sum += p->shape.dims[axis].value;
    }
    if (sum != wide->shape.dims[axis].value) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "parts add up to %lld along axis %lld, expected %lld", (long long)sum,
                        (long long)axis, (long long)wide->shape.dims[axis].value);
        return false;
    }
    return true;
}

static bool parts_axis(const infd_kernel_args *a, const infd_ir_value *wide, int64_t dflt,
                       int64_t *axis, infd_error *why)
{
    if (infd_ir_attr_int(a->g, a->node, "axis", dflt, axis, why) != INFD_STATUS_OK)
        return false;
    int32_t rank = wide->shape.rank;
    if (*axis < 0)
        *axis += rank;
    if (*axis < 0 || *axis >= rank) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "axis out of range for rank %d",
                        (int)rank);
        return false;
    }
    return true;
}

static bool concat_check(const infd_kernel_args *a, int64_t *axis, infd_error *why)
{
    if (a->n_inputs < 1 || a->n_outputs != 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "bad arity");
    return parts_axis(a, a->outputs[0], 0, axis, why) &&
           parts_check(a, a->outputs[0], a->inputs, a->n_inputs, *axis, why);
}

static bool split_check(const infd_kernel_args *a, int64_t *axis, infd_error *why)
{
    if (a->n_inputs < 1 || !a->inputs[0] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "bad arity");
    return parts_axis(a, a->inputs[0], 0, axis, why) &&
           parts_check(a, a->inputs[0], a->outputs, a->n_outputs, *axis, why);
}

bool ref_concat_supports(const infd_kernel_args *a, infd_error *why)
{
    int64_t axis;
    return concat_check(a, &axis, why);
}

bool ref_split_supports(const infd_kernel_args *a, infd_error *why)
{
    int64_t axis;
    return split_check(a, &axis, why);
}

static infd_status parts_compile(const infd_kernel_args *a, bool split, infd_kernel **out,
                                 infd_error *err)
{
    int64_t axis = 0;
    *out = NULL;
    if (!(split ? split_check(a, &axis, err) : concat_check(a, &axis, err)))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    const infd_ir_value *wide = split ? a->inputs[0] : a->outputs[0];
    const infd_ir_value *const *parts = split ? a->outputs : a->inputs;
    int32_t n = split ? a->n_outputs : a->n_inputs;
    parts_kernel *k = (parts_kernel *)infd_cpu_kernel_new(
        sizeof(parts_kernel), split ? "ref:split" : "ref:concat", split ? split_run : concat_run,
        parts_fini);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    k->part_bytes = infd_malloc(sizeof(size_t) * (size_t)n);
    k->offset = infd_malloc(sizeof(size_t) * (size_t)n);
    if (!k->part_bytes || !k->offset) {
        infd_kernel_destroy(&k->base.base);
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    size_t es = infd_dtype_size(wide->dtype), inner = es;
    k->outer = 1;
    for (int32_t d = 0; d < wide->shape.rank; d++) {
        if (d < axis)
            k->outer *= wide->shape.dims[d].value;
        else if (d > axis)
            inner *= (size_t)wide->shape.dims[d].value;
    }
    k->n_parts = n;
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        k->part_bytes[i] = inner * (size_t)parts[i]->shape.dims[axis].value;
        k->offset[i] = off;
        off += k->part_bytes[i];
    }
    k->row_bytes = off;
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

infd_status ref_concat_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    return parts_compile(a, false, out, err);
}

infd_status ref_split_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    return parts_compile(a, true, out, err);
}

/* ---- Gather ----------------------------------------------------------------- */

typedef struct gather_kernel {
    infd_cpu_kernel base;
    int64_t outer;       /* prod data dims before axis */
    int64_t n_idx;       /* index count */
    int64_t axis_dim;    /* data dim at axis */
    size_t inner_bytes;  /* bytes of one slice after axis */
    infd_dtype idx_type; /* INT32 or INT64 */
} gather_kernel;

typedef struct gather_job {
    const gather_kernel *k;
    const char *data;
    const void *idx;
    char *out;
} gather_job;

static void gather_body(void *arg, int64_t begin, int64_t end)
{
    const gather_job *j = arg;
    const gather_kernel *k = j->k;
    size_t nb = k->inner_bytes;
    for (int64_t item = begin; item < end; item++) {
        int64_t o = item / k->n_idx, i = item % k->n_idx;
        int64_t ix = k->idx_type == INFD_DTYPE_INT64 ? ((const int64_t *)j->idx)[i]
                                                     : ((const int32_t *)j->idx)[i];
        if (ix < 0)
            ix += k->axis_dim;
        char *dst = j->out + (size_t)item * nb;
        /* Out-of-range indices are invalid input; they must not crash. */
        if (ix < 0 || ix >= k->axis_dim)
            memset(dst, 0, nb);
        else
            memcpy(dst, j->data + (size_t)(o * k->axis_dim + ix) * nb, nb);
    }
}

static void gather_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const gather_kernel *k = (const gather_kernel *)ck;
    gather_job j = { .k = k, .data = io->inputs[0], .idx = io->inputs[1], .out = io->outputs[0] };
    int64_t es = (int64_t)k->inner_bytes;
    ref_parallel(io->pool, k->outer * k->n_idx, ref_row_grain(es / 4), gather_body, &j);
}

static bool gather_check(const infd_kernel_args *a, int64_t *axis, infd_error *why)
{
    if (!same_dtype_io(a, why))
        return false;
    if (a->n_inputs < 2 || !a->inputs[1] ||
        (a->inputs[1]->dtype != INFD_DTYPE_INT64 && a->inputs[1]->dtype != INFD_DTYPE_INT32)) {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "indices must be INT32 or INT64");
        return false;
    }
    if (!parts_axis(a, a->inputs[0], 0, axis, why))
        return false;
    int32_t want = a->inputs[0]->shape.rank - 1 + a->inputs[1]->shape.rank;
    if (a->outputs[0]->shape.rank != want ||
        infd_node_numel(a->outputs[0]) * a->inputs[0]->shape.dims[*axis].value !=
            infd_node_numel(a->inputs[0]) * infd_node_numel(a->inputs[1])) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "output shape does not match data and indices");
        return false;
    }
    return true;
}

bool ref_gather_supports(const infd_kernel_args *a, infd_error *why)
{
    int64_t axis;
    return gather_check(a, &axis, why);
}

infd_status ref_gather_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    int64_t axis = 0;
    *out = NULL;
    if (!gather_check(a, &axis, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    gather_kernel *k =
        (gather_kernel *)infd_cpu_kernel_new(sizeof(gather_kernel), "ref:gather", gather_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    const infd_ir_value *data = a->inputs[0];
    k->outer = 1;
    k->inner_bytes = infd_dtype_size(data->dtype);
    for (int32_t d = 0; d < data->shape.rank; d++) {
        if (d < axis)
            k->outer *= data->shape.dims[d].value;
        else if (d > axis)
            k->inner_bytes *= (size_t)data->shape.dims[d].value;
    }
    k->axis_dim = data->shape.dims[axis].value;
    k->n_idx = infd_node_numel(a->inputs[1]);
    k->idx_type = a->inputs[1]->dtype;
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* ---- DepthToSpace, SpaceToDepth ------------------------------------------------ */

/* Both are a reshape to 6-D and a transpose, so one view copy: the output,
 * seen as 6-D, reads the input at the strides of the reshaped dims. */
static bool depth_space_view(const infd_kernel_args *a, ref_view *v, infd_error *why)
{
    if (!same_dtype_io(a, why))
        return false;
    const infd_ir_value *x = a->inputs[0];
    if (x->shape.rank != 4)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "input must be 4-D");
    int64_t b = 0;
    if (infd_ir_attr_int(a->g, a->node, "blocksize", 0, &b, why) != INFD_STATUS_OK)
        return false;
    int64_t N = x->shape.dims[0].value, C = x->shape.dims[1].value;
    int64_t H = x->shape.dims[2].value, W = x->shape.dims[3].value;
    bool d2s = strcmp(a->node->op_type, "DepthToSpace") == 0;
    if (b < 1 || (d2s ? C % (b * b) != 0 : (H % b != 0 || W % b != 0)))
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                           "blocksize %lld does not divide the input", (long long)b);
    memset(v, 0, sizeof(*v));
    v->rank = 6;
    v->esize = infd_dtype_size(x->dtype);
    const int64_t HW = H * W;
    if (d2s) {
        const char *mode = NULL;
        if (infd_ir_attr_string(a->g, a->node, "mode", "DCR", &mode, why) != INFD_STATUS_OK)
            return false;
        bool crd = strcmp(mode, "CRD") == 0;
        if (!crd && strcmp(mode, "DCR") != 0)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "mode '%s' is unknown", mode);
        int64_t c = C / (b * b);
        /* Output [N, c, H, b1, W, b2]; input [N, b1, b2, c, H, W] (DCR) or
         * [N, c, b1, b2, H, W] (CRD). */
        int64_t s_c = crd ? b * b * HW : HW, s_b1 = crd ? b * HW : b * c * HW;
        int64_t s_b2 = crd ? HW : c * HW;
        int64_t dims[6] = { N, c, H, b, W, b }, st[6] = { C * HW, s_c, W, s_b1, 1, s_b2 };
        memcpy(v->dims, dims, sizeof(dims));
        memcpy(v->strides, st, sizeof(st));
    } else {
        /* Input [N, C, h, b1, w, b2]; output [N, b1, b2, C, h, w]. */
        int64_t dims[6] = { N, b, b, C, H / b, W / b };
        int64_t st[6] = { C * HW, W, 1, HW, b * W, b };
        memcpy(v->dims, dims, sizeof(dims));
        memcpy(v->strides, st, sizeof(st));
    }
    if (infd_node_numel(a->outputs[0]) != infd_node_numel(x))
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output size differs");
    return true;
}

bool ref_depth_space_supports(const infd_kernel_args *a, infd_error *why)
{
    ref_view v;
    return depth_space_view(a, &v, why);
}

infd_status ref_depth_space_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    ref_view v;
    *out = NULL;
    if (!depth_space_view(a, &v, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return view_kernel_make(a, &v, "ref:depth_space", out, err);
}

/* ---- GatherElements --------------------------------------------------------- */

typedef struct gather_el_kernel {
    infd_cpu_kernel base;
    int32_t rank;
    int32_t axis;
    size_t esize;
    infd_dtype idx_type; /* INT32 or INT64 */
    int64_t numel;       /* output (= indices) elements */
    int64_t idx_dims[INFD_MAX_RANK];
    int64_t data_strides[INFD_MAX_RANK]; /* elements */
    int64_t axis_dim;
} gather_el_kernel;

typedef struct gather_el_job {
    const gather_el_kernel *k;
    const char *data;
    const void *idx;
    char *out;
} gather_el_job;

static void gather_el_body(void *arg, int64_t begin, int64_t end)
{
    const gather_el_job *j = arg;
    const gather_el_kernel *k = j->k;
    const size_t es = k->esize;
    for (int64_t item = begin; item < end; item++) {
        int64_t ix = k->idx_type == INFD_DTYPE_INT64 ? ((const int64_t *)j->idx)[item]
                                                     : ((const int32_t *)j->idx)[item];
        if (ix < 0)
            ix += k->axis_dim;
        char *dst = j->out + (size_t)item * es;
        /* Out-of-range indices are invalid input; they must not crash. */
        if (ix < 0 || ix >= k->axis_dim) {
            memset(dst, 0, es);
            continue;
        }
        int64_t rem = item, off = 0;
        for (int32_t d = k->rank - 1; d >= 0; d--) {
            int64_t i = rem % k->idx_dims[d];
            rem /= k->idx_dims[d];
            off += (d == k->axis ? ix : i) * k->data_strides[d];
        }
        memcpy(dst, j->data + (size_t)off * es, es);
    }
}

static void gather_el_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const gather_el_kernel *k = (const gather_el_kernel *)ck;
    gather_el_job j = {
        .k = k, .data = io->inputs[0], .idx = io->inputs[1], .out = io->outputs[0]
    };
    ref_parallel(io->pool, k->numel, REF_GRAIN / 4, gather_el_body, &j);
}

static bool gather_el_plan(const infd_kernel_args *a, gather_el_kernel *k, infd_error *why)
{
    if (!same_dtype_io(a, why))
        return false;
    if (a->n_inputs < 2 || !a->inputs[1] ||
        (a->inputs[1]->dtype != INFD_DTYPE_INT64 && a->inputs[1]->dtype != INFD_DTYPE_INT32))
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "indices must be INT32 or INT64");
    const infd_ir_value *x = a->inputs[0], *ind = a->inputs[1];
    int32_t rank = x->shape.rank;
    if (rank < 1 || ind->shape.rank != rank)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                           "data and indices must have the same rank >= 1");
    int64_t axis = 0;
    if (infd_ir_attr_int(a->g, a->node, "axis", 0, &axis, why) != INFD_STATUS_OK)
        return false;
    if (axis < 0)
        axis += rank;
    if (axis < 0 || axis >= rank)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "axis out of range");
    k->rank = rank;
    k->axis = (int32_t)axis;
    k->esize = infd_dtype_size(x->dtype);
    k->idx_type = ind->dtype;
    k->numel = infd_node_numel(ind);
    k->axis_dim = x->shape.dims[axis].value;
    int64_t s = 1;
    for (int32_t d = rank - 1; d >= 0; d--) {
        k->idx_dims[d] = ind->shape.dims[d].value;
        k->data_strides[d] = s;
        s *= x->shape.dims[d].value;
        if (d != axis && k->idx_dims[d] > x->shape.dims[d].value)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                               "indices dim %d exceeds the data dim", (int)d);
    }
    if (infd_node_numel(a->outputs[0]) != k->numel)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output size differs");
    return true;
}

bool ref_gather_elements_supports(const infd_kernel_args *a, infd_error *why)
{
    gather_el_kernel k;
    return gather_el_plan(a, &k, why);
}

infd_status ref_gather_elements_compile(const infd_kernel_args *a, infd_kernel **out,
                                        infd_error *err)
{
    gather_el_kernel tmp;
    *out = NULL;
    if (!gather_el_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return ref_kernel_from_plan(a, &tmp.base, sizeof(tmp), "ref:gather_elements", gather_el_run,
                                NULL, out, err);
}
