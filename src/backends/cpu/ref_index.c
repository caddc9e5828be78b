/*
 * ref_index.c - index and mask kernels: ArgMax and ArgMin (FP32, INT32,
 * INT64 in, INT64 out), IsNaN and IsInf (FP32, FP64), Trilu (any fixed-size
 * dtype, k read at run time), Mod (integers of every width with both fmod
 * modes, FP32/FP64 with fmod=1, broadcasting as the elementwise kernels do),
 * CumSum (FP32, FP64, INT32, INT64; axis read at run time), EyeLike and
 * OneHot (constant depth; values read at run time).
 *
 * Each output element is written by exactly one thread in a fixed order, so
 * results do not depend on the pool.
 */
#include <math.h>
#include <string.h>

#include "backends/cpu/ref_common.h"
#include "backends/cpu/ref_kernels.h"
#include "core/common.h"

/* ---- ArgMax, ArgMin ---------------------------------------------------------------- */

typedef struct arg_kernel {
    infd_cpu_kernel base;
    infd_dtype dt;
    bool is_min; /* ArgMin */
    bool last;   /* select_last_index */
    int64_t outer, len, inner;
} arg_kernel;

typedef struct arg_job {
    const arg_kernel *k;
    const void *in;
    int64_t *out;
} arg_job;

/* Items are output elements (outer x inner); each scans its `len` values. A
 * tie keeps the first index, or the last with select_last_index. */
#define ARG_IMPL(sfx, T)                                                                           \
    static void arg_##sfx(const arg_kernel *k, const T *x, int64_t *y, int64_t begin, int64_t end) \
    {                                                                                              \
        const int64_t len = k->len, inner = k->inner;                                              \
        for (int64_t it = begin; it < end; it++) {                                                 \
            const T *p = x + (it / inner) * len * inner + it % inner;                              \
            T best = p[0];                                                                         \
            int64_t bi = 0;                                                                        \
            for (int64_t l = 1; l < len; l++) {                                                    \
                T v = p[l * inner];                                                                \
                bool take = k->is_min ? (k->last ? v <= best : v < best)                           \
                                      : (k->last ? v >= best : v > best);                          \
                if (take) {                                                                        \
                    best = v;                                                                      \
                    bi = l;                                                                        \
                }                                                                                  \
            }                                                                                      \
            y[it] = bi;                                                                            \
        }                                                                                          \
    }

ARG_IMPL(f32, float)
ARG_IMPL(i32, int32_t)
ARG_IMPL(i64, int64_t)

static void arg_body(void *arg, int64_t begin, int64_t end)
{
    const arg_job *j = arg;
    switch (j->k->dt) {
    case INFD_DTYPE_FP32:
        arg_f32(j->k, j->in, j->out, begin, end);
        break;
    case INFD_DTYPE_INT32:
        arg_i32(j->k, j->in, j->out, begin, end);
        break;
    default:
        arg_i64(j->k, j->in, j->out, begin, end);
        break;
    }
}

static void arg_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const arg_kernel *k = (const arg_kernel *)ck;
    arg_job j = { .k = k, .in = io->inputs[0], .out = io->outputs[0] };
    ref_parallel(io->pool, k->outer * k->inner, ref_row_grain(k->len), arg_body, &j);
}

static bool arg_plan(const infd_kernel_args *a, arg_kernel *k, infd_error *why)
{
    if (a->n_inputs < 1 || !a->inputs[0] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "missing input or output");
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    k->dt = x->dtype;
    if (k->dt != INFD_DTYPE_FP32 && k->dt != INFD_DTYPE_INT32 && k->dt != INFD_DTYPE_INT64)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                           "%s supports FP32, INT32 and INT64 inputs, not %s", a->node->op_type,
                           infd_dtype_name(k->dt));
    if (y->dtype != INFD_DTYPE_INT64)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output must be INT64");
    int64_t axis = 0, keepdims = 1, last = 0;
    if (infd_ir_attr_int(a->g, a->node, "axis", 0, &axis, why) != INFD_STATUS_OK ||
        infd_ir_attr_int(a->g, a->node, "keepdims", 1, &keepdims, why) != INFD_STATUS_OK ||
        infd_ir_attr_int(a->g, a->node, "select_last_index", 0, &last, why) != INFD_STATUS_OK)
        return false;
    int32_t rank = x->shape.rank;
    if (axis < 0)
        axis += rank;
    if (axis < 0 || axis >= rank)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "axis out of range");
    k->is_min = strcmp(a->node->op_type, "ArgMin") == 0;
    k->last = last != 0;
    k->outer = k->len = k->inner = 1;
    for (int32_t d = 0; d < rank; d++) {
        int64_t dim = x->shape.dims[d].value;
        if (d < axis)
            k->outer *= dim;
        else if (d == axis)
            k->len = dim;
        else
            k->inner *= dim;
    }
    if (infd_node_numel(y) != k->outer * k->inner)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output size differs");
    if (k->len == 0 && k->outer * k->inner > 0)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "reduced axis is empty");
    return true;
}

bool ref_arg_supports(const infd_kernel_args *a, infd_error *why)
{
    arg_kernel k;
    return arg_plan(a, &k, why);
}

infd_status ref_arg_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    arg_kernel tmp;
    *out = NULL;
    if (!arg_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return ref_kernel_from_plan(a, &tmp.base, sizeof(tmp), "ref:arg", arg_run, NULL, out, err);
}

/* ---- SegmentArgMax (infd_plan_options.argmax) ------------------------------------- */

typedef struct segarg_kernel {
    infd_cpu_kernel base;
    int n;
    int64_t rows, len;
    int64_t starts[INFD_MAX_ARGMAX_SEGMENTS], ends[INFD_MAX_ARGMAX_SEGMENTS];
} segarg_kernel;

typedef struct segarg_job {
    const segarg_kernel *k;
    const float *in;
    int64_t *out;
} segarg_job;

static void segarg_body(void *arg, int64_t begin, int64_t end)
{
    const segarg_job *j = arg;
    const segarg_kernel *k = j->k;
    for (int64_t r = begin; r < end; r++) {
        const float *x = j->in + r * k->len;
        for (int s = 0; s < k->n; s++) {
            int64_t bi = 0;
            float best = x[k->starts[s]];
            for (int64_t i = k->starts[s] + 1; i < k->ends[s]; i++)
                if (x[i] > best || (best != best && x[i] == x[i])) { /* a NaN never wins */
                    best = x[i];
                    bi = i - k->starts[s];
                }
            j->out[r * k->n + s] = bi;
        }
    }
}

static void segarg_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const segarg_kernel *k = (const segarg_kernel *)ck;
    segarg_job j = { .k = k, .in = io->inputs[0], .out = io->outputs[0] };
    ref_parallel(io->pool, k->rows, ref_row_grain(k->len), segarg_body, &j);
}

static bool segarg_plan(const infd_kernel_args *a, segarg_kernel *k, infd_error *why)
{
    memset(k, 0, sizeof(*k));
    if (a->n_inputs < 1 || !a->inputs[0] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "missing input or output");
    const infd_ir_value *x = a->inputs[0];
    if (x->dtype != INFD_DTYPE_FP32 || a->outputs[0]->dtype != INFD_DTYPE_INT64 ||
        x->shape.rank < 1)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "FP32 in, INT64 out");
    const int64_t *st = NULL, *en = NULL;
    int32_t ns = 0, ne = 0;
    if (infd_ir_attr_ints(a->g, a->node, "starts", &st, &ns, why) != INFD_STATUS_OK ||
        infd_ir_attr_ints(a->g, a->node, "ends", &en, &ne, why) != INFD_STATUS_OK)
        return false;
    if (ns < 1 || ns != ne || ns > INFD_MAX_ARGMAX_SEGMENTS)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "starts/ends");
    k->len = x->shape.dims[x->shape.rank - 1].value;
    k->rows = k->len > 0 ? infd_node_numel(x) / k->len : 0;
    k->n = ns;
    for (int s = 0; s < ns; s++) {
        if (st[s] < 0 || st[s] >= en[s] || en[s] > k->len)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "segment outside the axis");
        k->starts[s] = st[s];
        k->ends[s] = en[s];
    }
    return true;
}

bool ref_segarg_supports(const infd_kernel_args *a, infd_error *why)
{
    segarg_kernel k;
    return segarg_plan(a, &k, why);
}

infd_status ref_segarg_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    segarg_kernel tmp;
    *out = NULL;
    if (!segarg_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return ref_kernel_from_plan(a, &tmp.base, sizeof(tmp), "ref:segment_argmax", segarg_run, NULL,
                                out, err);
}

/* ---- IsNaN, IsInf ------------------------------------------------------------------ */

typedef struct isx_kernel {
    infd_cpu_kernel base;
    infd_dtype dt;
    bool inf;      /* IsInf, else IsNaN */
    bool pos, neg; /* IsInf: detect_positive, detect_negative */
    int64_t numel;
} isx_kernel;

typedef struct isx_job {
    const isx_kernel *k;
    const void *in;
    uint8_t *out;
} isx_job;

#define ISX_IMPL(sfx, T)                                                                     \
    static void isx_##sfx(const isx_kernel *k, const T *x, uint8_t *y, int64_t b, int64_t e) \
    {                                                                                        \
        if (!k->inf) {                                                                       \
            for (int64_t i = b; i < e; i++)                                                  \
                y[i] = isnan(x[i]) ? 1 : 0;                                                  \
            return;                                                                          \
        }                                                                                    \
        for (int64_t i = b; i < e; i++)                                                      \
            y[i] = isinf(x[i]) && (x[i] > 0 ? k->pos : k->neg) ? 1 : 0;                      \
    }

ISX_IMPL(f32, float)
ISX_IMPL(f64, double)

static void isx_body(void *arg, int64_t begin, int64_t end)
{
    const isx_job *j = arg;
    if (j->k->dt == INFD_DTYPE_FP32)
        isx_f32(j->k, j->in, j->out, begin, end);
    else
        isx_f64(j->k, j->in, j->out, begin, end);
}

static void isx_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const isx_kernel *k = (const isx_kernel *)ck;
    isx_job j = { .k = k, .in = io->inputs[0], .out = io->outputs[0] };
    ref_parallel(io->pool, k->numel, REF_GRAIN, isx_body, &j);
}

static bool isx_plan(const infd_kernel_args *a, isx_kernel *k, infd_error *why)
{
    if (a->n_inputs < 1 || !a->inputs[0] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "missing input or output");
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    k->dt = x->dtype;
    if (k->dt != INFD_DTYPE_FP32 && k->dt != INFD_DTYPE_FP64)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "%s supports FP32 and FP64, not %s",
                           a->node->op_type, infd_dtype_name(k->dt));
    if (y->dtype != INFD_DTYPE_BOOL)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output must be BOOL");
    k->numel = infd_node_numel(x);
    if (infd_node_numel(y) != k->numel)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output size differs");
    k->inf = strcmp(a->node->op_type, "IsInf") == 0;
    int64_t pos = 1, neg = 1;
    if (k->inf &&
        (infd_ir_attr_int(a->g, a->node, "detect_positive", 1, &pos, why) != INFD_STATUS_OK ||
         infd_ir_attr_int(a->g, a->node, "detect_negative", 1, &neg, why) != INFD_STATUS_OK))
        return false;
    k->pos = pos != 0;
    k->neg = neg != 0;
    return true;
}

bool ref_isx_supports(const infd_kernel_args *a, infd_error *why)
{
    isx_kernel k;
    return isx_plan(a, &k, why);
}

infd_status ref_isx_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    isx_kernel tmp;
    *out = NULL;
    if (!isx_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return ref_kernel_from_plan(a, &tmp.base, sizeof(tmp), "ref:isx", isx_run, NULL, out, err);
}

/* ---- Trilu ------------------------------------------------------------------------- */

typedef struct trilu_kernel {
    infd_cpu_kernel base;
    bool upper;
    bool has_k; /* the k input is given */
    size_t esize;
    int64_t rows; /* batch x N */
    int64_t N, M;
} trilu_kernel;

typedef struct trilu_job {
    const trilu_kernel *k;
    int64_t diag; /* the k input */
    const char *in;
    char *out;
} trilu_job;

/* Row r keeps columns j with j - i >= diag (upper) or j - i <= diag (lower),
 * one contiguous run either way; the rest is zeroed. */
static void trilu_body(void *arg, int64_t begin, int64_t end)
{
    const trilu_job *j = arg;
    const trilu_kernel *k = j->k;
    const size_t row_bytes = (size_t)k->M * k->esize;
    for (int64_t r = begin; r < end; r++) {
        int64_t i = r % k->N;
        /* Split point in [0, M]: columns before it go one way, the rest the other. */
        int64_t cut = k->upper ? i + j->diag : i + j->diag + 1;
        if (cut < 0)
            cut = 0;
        if (cut > k->M)
            cut = k->M;
        const char *src = j->in + (size_t)r * row_bytes;
        char *dst = j->out + (size_t)r * row_bytes;
        size_t cut_bytes = (size_t)cut * k->esize;
        if (k->upper) {
            memset(dst, 0, cut_bytes);
            memcpy(dst + cut_bytes, src + cut_bytes, row_bytes - cut_bytes);
        } else {
            memcpy(dst, src, cut_bytes);
            memset(dst + cut_bytes, 0, row_bytes - cut_bytes);
        }
    }
}

static void trilu_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const trilu_kernel *k = (const trilu_kernel *)ck;
    trilu_job j = { .k = k, .in = io->inputs[0], .out = io->outputs[0] };
    if (k->rows == 0 || k->M == 0)
        return;
    /* Clamp so i + diag cannot overflow. */
    int64_t d = k->has_k ? ref_load_i64(INFD_DTYPE_INT64, io->inputs[1]) : 0;
    j.diag = d > k->M + 1 ? k->M + 1 : d < -k->N - 1 ? -k->N - 1 : d;
    ref_parallel(io->pool, k->rows, ref_row_grain(k->M), trilu_body, &j);
}

static bool trilu_plan(const infd_kernel_args *a, trilu_kernel *k, infd_error *why)
{
    if (a->n_inputs < 1 || !a->inputs[0] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "missing input or output");
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    k->esize = infd_dtype_size(x->dtype);
    if (k->esize == 0 || y->dtype != x->dtype)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "Trilu on %s is not supported",
                           infd_dtype_name(x->dtype));
    if (a->n_inputs > 1 && a->inputs[1] &&
        (a->inputs[1]->dtype != INFD_DTYPE_INT64 || infd_node_numel(a->inputs[1]) != 1))
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "k must be an INT64 scalar");
    int32_t rank = x->shape.rank;
    if (rank < 2)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "input rank must be >= 2");
    if (infd_node_numel(y) != infd_node_numel(x))
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output size differs");
    int64_t upper = 1;
    if (infd_ir_attr_int(a->g, a->node, "upper", 1, &upper, why) != INFD_STATUS_OK)
        return false;
    k->upper = upper != 0;
    k->has_k = a->n_inputs > 1 && a->inputs[1];
    k->N = x->shape.dims[rank - 2].value;
    k->M = x->shape.dims[rank - 1].value;
    k->rows = 1;
    for (int32_t d = 0; d < rank - 1; d++)
        k->rows *= x->shape.dims[d].value;
    return true;
}

bool ref_trilu_supports(const infd_kernel_args *a, infd_error *why)
{
    trilu_kernel k;
    return trilu_plan(a, &k, why);
}

infd_status ref_trilu_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    trilu_kernel tmp;
    *out = NULL;
    if (!trilu_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return ref_kernel_from_plan(a, &tmp.base, sizeof(tmp), "ref:trilu", trilu_run, NULL, out, err);
}

/* ---- Mod --------------------------------------------------------------------------- */

typedef void (*mod_row_fn)(void *o, const void *a, int64_t sa, const void *b, int64_t sb, int64_t n,
                           bool fmod_mode);

/* Signed integers: fmod=1 truncates (sign of the dividend), fmod=0 floors
 * (sign of the divisor). Division by zero, which ONNX leaves undefined,
 * gives 0, as does MIN % -1. */
#define MOD_SIGNED(sfx, T, TMIN)                                                         \
    static void mod_##sfx(void *o, const void *a, int64_t sa, const void *b, int64_t sb, \
                          int64_t n, bool fmod_mode)                                     \
    {                                                                                    \
        T *y = o;                                                                        \
        const T *x = a, *d = b;                                                          \
        for (int64_t i = 0; i < n; i++) {                                                \
            T p = x[i * sa], q = d[i * sb], r;                                           \
            if (q == 0 || (q == -1 && p == (TMIN)))                                      \
                r = 0;                                                                   \
            else                                                                         \
                r = (T)(p % q);                                                          \
            if (!fmod_mode && r != 0 && ((r < 0) != (q < 0)))                            \
                r = (T)(r + q);                                                          \
            y[i] = r;                                                                    \
        }                                                                                \
    }

#define MOD_UNSIGNED(sfx, T)                                                             \
    static void mod_##sfx(void *o, const void *a, int64_t sa, const void *b, int64_t sb, \
                          int64_t n, bool fmod_mode)                                     \
    {                                                                                    \
        (void)fmod_mode;                                                                 \
        T *y = o;                                                                        \
        const T *x = a, *d = b;                                                          \
        for (int64_t i = 0; i < n; i++) {                                                \
            T q = d[i * sb];                                                             \
            y[i] = q == 0 ? 0 : (T)(x[i * sa] % q);                                      \
        }                                                                                \
    }

#define MOD_FLOAT(sfx, T, FMOD)                                                          \
    static void mod_##sfx(void *o, const void *a, int64_t sa, const void *b, int64_t sb, \
                          int64_t n, bool fmod_mode)                                     \
    {                                                                                    \
        (void)fmod_mode;                                                                 \
        T *y = o;                                                                        \
        const T *x = a, *d = b;                                                          \
        for (int64_t i = 0; i < n; i++)                                                  \
            y[i] = FMOD(x[i * sa], d[i * sb]);                                           \
    }

MOD_SIGNED(i8, int8_t, INT8_MIN)
MOD_SIGNED(i16, int16_t, INT16_MIN)
MOD_SIGNED(i32, int32_t, INT32_MIN)
MOD_SIGNED(i64, int64_t, INT64_MIN)
MOD_UNSIGNED(u8, uint8_t)
MOD_UNSIGNED(u16, uint16_t)
MOD_UNSIGNED(u32, uint32_t)
MOD_UNSIGNED(u64, uint64_t)
MOD_FLOAT(f32, float, fmodf)
MOD_FLOAT(f64, double, fmod)

static mod_row_fn mod_row_for(infd_dtype dt)
{
    switch (dt) {
    case INFD_DTYPE_INT8:
        return mod_i8;
    case INFD_DTYPE_INT16:
        return mod_i16;
    case INFD_DTYPE_INT32:
        return mod_i32;
    case INFD_DTYPE_INT64:
        return mod_i64;
    case INFD_DTYPE_UINT8:
        return mod_u8;
    case INFD_DTYPE_UINT16:
        return mod_u16;
    case INFD_DTYPE_UINT32:
        return mod_u32;
    case INFD_DTYPE_UINT64:
        return mod_u64;
    case INFD_DTYPE_FP32:
        return mod_f32;
    case INFD_DTYPE_FP64:
        return mod_f64;
    default:
        return NULL;
    }
}

typedef struct mod_kernel {
    infd_cpu_kernel base;
    mod_row_fn row;
    bool fmod_mode;
    size_t esize;
    ref_bcast bc;
} mod_kernel;

typedef struct mod_job {
    const mod_kernel *k;
    const infd_kernel_io *io;
} mod_job;

static void mod_body(void *arg, int64_t begin, int64_t end)
{
    const mod_job *j = arg;
    const mod_kernel *k = j->k;
    const ref_bcast *b = &k->bc;
    const int32_t last = b->rank - 1;
    const int64_t len = ref_bcast_row_len(b);
    const size_t es = k->esize;
    const char *x = j->io->inputs[0], *d = j->io->inputs[1];
    ref_bcast_iter it;
    ref_bcast_iter_seek(b, &it, begin);
    for (int64_t r = begin; r < end; r++, ref_bcast_iter_next(b, &it)) {
        char *o = (char *)j->io->outputs[0] + (size_t)(r * len) * es;
        k->row(o, x + (size_t)it.off[0] * es, b->strides[0][last], d + (size_t)it.off[1] * es,
               b->strides[1][last], len, k->fmod_mode);
    }
}

static void mod_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const mod_kernel *k = (const mod_kernel *)ck;
    if (k->bc.numel == 0)
        return;
    mod_job j = { .k = k, .io = io };
    int64_t len = ref_bcast_row_len(&k->bc);
    ref_parallel(io->pool, k->bc.numel / len, ref_row_grain(len), mod_body, &j);
}

static bool mod_plan(const infd_kernel_args *a, mod_kernel *k, infd_error *why)
{
    if (a->n_inputs != 2 || !a->inputs[0] || !a->inputs[1] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "needs A, B and an output");
    infd_dtype dt = a->outputs[0]->dtype;
    if (a->inputs[0]->dtype != dt || a->inputs[1]->dtype != dt)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "input dtypes differ");
    k->row = mod_row_for(dt);
    if (!k->row)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "Mod on %s is not supported",
                           infd_dtype_name(dt));
    int64_t fm = 0;
    if (infd_ir_attr_int(a->g, a->node, "fmod", 0, &fm, why) != INFD_STATUS_OK)
        return false;
    k->fmod_mode = fm != 0;
    if (ref_dtype_is_float(dt) && !k->fmod_mode)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "Mod on %s needs fmod=1",
                           infd_dtype_name(dt));
    k->esize = infd_dtype_size(dt);
    if (!ref_bcast_init(&k->bc, 2, a->inputs, a->outputs[0]))
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                           "input shapes do not broadcast to the output shape");
    return true;
}

bool ref_mod_supports(const infd_kernel_args *a, infd_error *why)
{
    mod_kernel k;
    return mod_plan(a, &k, why);
}

infd_status ref_mod_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    *out = NULL;
    if (!mod_plan(a, &(mod_kernel){ 0 }, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    mod_kernel *k = (mod_kernel *)infd_cpu_kernel_new(sizeof(mod_kernel), "ref:mod", mod_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    mod_plan(a, k, NULL);
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* ---- CumSum ------------------------------------------------------------------------ */

typedef struct cumsum_kernel {
    infd_cpu_kernel base;
    infd_dtype dt;
    infd_dtype axis_dt;
    bool exclusive, reverse;
    int32_t rank;
    int64_t numel;
    int64_t dims[INFD_MAX_RANK];
} cumsum_kernel;

typedef struct cumsum_job {
    const cumsum_kernel *k;
    int64_t len, inner;
    const void *in;
    void *out;
} cumsum_job;

/* Items are the lines along the axis (outer x inner); each runs its sum in
 * order. Integer sums wrap (unsigned arithmetic). */
#define CUMSUM_IMPL(sfx, T, ACC, ADD)                                         \
    static void cumsum_##sfx(const cumsum_job *j, int64_t begin, int64_t end) \
    {                                                                         \
        const T *x = j->in;                                                   \
        T *y = j->out;                                                        \
        const int64_t len = j->len, inner = j->inner;                         \
        for (int64_t it = begin; it < end; it++) {                            \
            int64_t base = (it / inner) * len * inner + it % inner;           \
            ACC acc = 0;                                                      \
            for (int64_t s = 0; s < len; s++) {                               \
                int64_t l = j->k->reverse ? len - 1 - s : s;                  \
                int64_t off = base + l * inner;                               \
                if (j->k->exclusive) {                                        \
                    y[off] = (T)acc;                                          \
                    acc = ADD(acc, x[off]);                                   \
                } else {                                                      \
                    acc = ADD(acc, x[off]);                                   \
                    y[off] = (T)acc;                                          \
                }                                                             \
            }                                                                 \
        }                                                                     \
    }

#define ADD_F(a, b)   ((a) + (b))
#define ADD_U32(a, b) ((uint32_t)((a) + (uint32_t)(b)))
#define ADD_U64(a, b) ((uint64_t)((a) + (uint64_t)(b)))

CUMSUM_IMPL(f32, float, float, ADD_F)
CUMSUM_IMPL(f64, double, double, ADD_F)
CUMSUM_IMPL(i32, int32_t, uint32_t, ADD_U32)
CUMSUM_IMPL(i64, int64_t, uint64_t, ADD_U64)

static void cumsum_body(void *arg, int64_t begin, int64_t end)
{
    const cumsum_job *j = arg;
    switch (j->k->dt) {
    case INFD_DTYPE_FP32:
        cumsum_f32(j, begin, end);
        break;
    case INFD_DTYPE_FP64:
        cumsum_f64(j, begin, end);
        break;
    case INFD_DTYPE_INT32:
        cumsum_i32(j, begin, end);
        break;
    default:
        cumsum_i64(j, begin, end);
        break;
    }
}

/* The axis is read at run time (it may be a graph input); an axis out of
 * range is invalid input and gives zeros. */
static void cumsum_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const cumsum_kernel *k = (const cumsum_kernel *)ck;
    int64_t axis = ref_load_i64(k->axis_dt, io->inputs[1]);
    if (axis < 0)
        axis += k->rank;
    if (axis < 0 || axis >= k->rank) {
        memset(io->outputs[0], 0, (size_t)k->numel * infd_dtype_size(k->dt));
        return;
    }
    cumsum_job j = {
        .k = k, .len = k->dims[axis], .inner = 1, .in = io->inputs[0], .out = io->outputs[0]
    };
    for (int32_t d = (int32_t)axis + 1; d < k->rank; d++)
        j.inner *= k->dims[d];
    if (k->numel == 0)
        return;
    ref_parallel(io->pool, k->numel / j.len, ref_row_grain(j.len), cumsum_body, &j);
}

static bool cumsum_plan(const infd_kernel_args *a, cumsum_kernel *k, infd_error *why)
{
    if (a->n_inputs < 2 || !a->inputs[0] || !a->inputs[1] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "needs x and axis");
    const infd_ir_value *x = a->inputs[0], *ax = a->inputs[1];
    k->dt = x->dtype;
    if (k->dt != INFD_DTYPE_FP32 && k->dt != INFD_DTYPE_FP64 && k->dt != INFD_DTYPE_INT32 &&
        k->dt != INFD_DTYPE_INT64)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                           "CumSum supports FP32, FP64, INT32 and INT64, not %s",
                           infd_dtype_name(k->dt));
    if (a->outputs[0]->dtype != k->dt)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output dtype differs");
    k->axis_dt = ax->dtype;
    if ((ax->dtype != INFD_DTYPE_INT32 && ax->dtype != INFD_DTYPE_INT64) ||
        infd_node_numel(ax) != 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                           "axis must be an INT32 or INT64 scalar");
    int64_t excl = 0, rev = 0;
    if (infd_ir_attr_int(a->g, a->node, "exclusive", 0, &excl, why) != INFD_STATUS_OK ||
        infd_ir_attr_int(a->g, a->node, "reverse", 0, &rev, why) != INFD_STATUS_OK)
        return false;
    k->exclusive = excl != 0;
    k->reverse = rev != 0;
    k->rank = x->shape.rank;
    if (k->rank < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "input must have rank >= 1");
    for (int32_t d = 0; d < k->rank; d++)
        k->dims[d] = x->shape.dims[d].value;
    k->numel = infd_node_numel(x);
    if (infd_node_numel(a->outputs[0]) != k->numel)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output size differs");
    if (infd_node_is_const(ax)) {
        int64_t v = 0, n = 0;
        if (!infd_node_const_ints(ax, &v, 1, &n) || v < -k->rank || v >= k->rank)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "axis out of range");
    }
    return true;
}

bool ref_cumsum_supports(const infd_kernel_args *a, infd_error *why)
{
    cumsum_kernel k;
    return cumsum_plan(a, &k, why);
}

infd_status ref_cumsum_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    cumsum_kernel tmp;
    *out = NULL;
    if (!cumsum_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return ref_kernel_from_plan(a, &tmp.base, sizeof(tmp), "ref:cumsum", cumsum_run, NULL, out,
                                err);
}

/* ---- EyeLike ----------------------------------------------------------------------- */

typedef struct eye_kernel {
    infd_cpu_kernel base;
    size_t esize;
    int64_t rows, cols, k;
    uint8_t one[8]; /* 1 in the output dtype */
} eye_kernel;

static void eye_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const eye_kernel *k = (const eye_kernel *)ck;
    char *y = io->outputs[0];
    memset(y, 0, (size_t)(k->rows * k->cols) * k->esize);
    for (int64_t i = 0; i < k->rows; i++) {
        int64_t j = i + k->k;
        if (j >= 0 && j < k->cols)
            memcpy(y + (size_t)(i * k->cols + j) * k->esize, k->one, k->esize);
    }
}

/* Writes 1 in `dt` into out; false for dtypes without one. */
static bool store_one(infd_dtype dt, uint8_t *out)
{
    memset(out, 0, 8);
    switch (dt) {
    case INFD_DTYPE_FP32: {
        float f = 1.0f;
        memcpy(out, &f, 4);
        return true;
    }
    case INFD_DTYPE_FP64: {
        double d = 1.0;
        memcpy(out, &d, 8);
        return true;
    }
    case INFD_DTYPE_FP16: {
        uint16_t h = 0x3c00;
        memcpy(out, &h, 2);
        return true;
    }
    case INFD_DTYPE_BF16: {
        uint16_t h = 0x3f80;
        memcpy(out, &h, 2);
        return true;
    }
    default:
        if (!ref_dtype_is_int(dt) && dt != INFD_DTYPE_BOOL)
            return false;
        /* Little-endian integers: 1 is the low byte. */
        out[0] = 1;
        return true;
    }
}

static bool eye_plan(const infd_kernel_args *a, eye_kernel *k, infd_error *why)
{
    if (a->n_inputs < 1 || !a->inputs[0] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "missing input or output");
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    if (x->shape.rank != 2 || y->shape.rank != 2)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "EyeLike needs 2-D tensors");
    k->esize = infd_dtype_size(y->dtype);
    if (k->esize == 0 || k->esize > 8 || !store_one(y->dtype, k->one))
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "EyeLike to %s is not supported",
                           infd_dtype_name(y->dtype));
    if (infd_ir_attr_int(a->g, a->node, "k", 0, &k->k, why) != INFD_STATUS_OK)
        return false;
    k->rows = y->shape.dims[0].value;
    k->cols = y->shape.dims[1].value;
    if (k->rows != x->shape.dims[0].value || k->cols != x->shape.dims[1].value)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output shape differs");
    return true;
}

bool ref_eye_like_supports(const infd_kernel_args *a, infd_error *why)
{
    eye_kernel k;
    return eye_plan(a, &k, why);
}

infd_status ref_eye_like_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    eye_kernel tmp;
    *out = NULL;
    if (!eye_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return ref_kernel_from_plan(a, &tmp.base, sizeof(tmp), "ref:eye_like", eye_run, NULL, out, err);
}

/* ---- OneHot ------------------------------------------------------------------------ */

typedef struct one_hot_kernel {
    infd_cpu_kernel base;
    infd_dtype idx_dt;
    size_t esize; /* of values and the output */
    int64_t outer, depth, inner;
} one_hot_kernel;

typedef struct one_hot_job {
    const one_hot_kernel *k;
    const char *idx;
    const char *values; /* [off, on] */
    char *out;
} one_hot_job;

/* Items are output elements [outer, depth, inner]; an index (negative ones
 * count from depth) out of range gives an all-off line, as ONNX says. */
static void one_hot_body(void *arg, int64_t begin, int64_t end)
{
    const one_hot_job *j = arg;
    const one_hot_kernel *k = j->k;
    const size_t es = k->esize, is = infd_dtype_size(k->idx_dt);
    for (int64_t it = begin; it < end; it++) {
        int64_t i = it % k->inner, d = (it / k->inner) % k->depth;
        int64_t o = it / (k->inner * k->depth);
        int64_t ix = ref_load_i64(k->idx_dt, j->idx + (size_t)(o * k->inner + i) * is);
        if (ix < 0)
            ix += k->depth;
        memcpy(j->out + (size_t)it * es, j->values + (ix == d ? es : 0), es);
    }
}

static void one_hot_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const one_hot_kernel *k = (const one_hot_kernel *)ck;
    one_hot_job j = {
        .k = k, .idx = io->inputs[0], .values = io->inputs[2], .out = io->outputs[0]
    };
    ref_parallel(io->pool, k->outer * k->depth * k->inner, REF_GRAIN / 4, one_hot_body, &j);
}

static bool one_hot_plan(const infd_kernel_args *a, one_hot_kernel *k, infd_error *why)
{
    if (a->n_inputs != 3 || !a->inputs[0] || !a->inputs[1] || !a->inputs[2] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "needs indices, depth, values");
    const infd_ir_value *ind = a->inputs[0], *dv = a->inputs[1], *vals = a->inputs[2];
    const infd_ir_value *y = a->outputs[0];
    k->idx_dt = ind->dtype;
    if (!ref_dtype_is_int(k->idx_dt) && k->idx_dt != INFD_DTYPE_FP32 &&
        k->idx_dt != INFD_DTYPE_FP64)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "indices of %s are not supported",
                           infd_dtype_name(k->idx_dt));
    k->esize = infd_dtype_size(vals->dtype);
    if (k->esize == 0 || y->dtype != vals->dtype || infd_node_numel(vals) != 2)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                           "values must be two elements of the output dtype");
    int64_t di = 0, n = 0;
    float df = 0.0f;
    if (infd_node_const_ints(dv, &di, 1, &n) && n == 1)
        k->depth = di;
    else if (ref_const_floats(dv, &df, 1, &n) && n == 1)
        k->depth = (int64_t)df;
    else
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "depth must be a constant scalar");
    int64_t axis = -1;
    if (infd_ir_attr_int(a->g, a->node, "axis", -1, &axis, why) != INFD_STATUS_OK)
        return false;
    int32_t rank = ind->shape.rank;
    if (axis < 0)
        axis += rank + 1;
    if (axis < 0 || axis > rank || k->depth < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "axis or depth out of range");
    k->outer = k->inner = 1;
    for (int32_t d = 0; d < rank; d++)
        *(d < axis ? &k->outer : &k->inner) *= ind->shape.dims[d].value;
    if (infd_node_numel(y) != k->outer * k->depth * k->inner)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output size differs");
    return true;
}

bool ref_one_hot_supports(const infd_kernel_args *a, infd_error *why)
{
    one_hot_kernel k;
    return one_hot_plan(a, &k, why);
}

infd_status ref_one_hot_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    one_hot_kernel tmp;
    *out = NULL;
    if (!one_hot_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return ref_kernel_from_plan(a, &tmp.base, sizeof(tmp), "ref:one_hot", one_hot_run, NULL, out,
                                err);
}
