/*
 * ref_reduce.c - reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin,
 * ReduceProd, ReduceSumSquare, ReduceL1, ReduceL2 in FP32, INT32 and INT64;
 * ReduceLogSum in FP32; ReduceLogSumExp in FP32 and FP64); Softmax,
 * LogSoftmax and Hardmax in FP32; a plain FP32 MatMul for the shapes oneDNN
 * declines; LayerNormalization in FP32.
 *
 * Reductions are planned at compile: size-1 dims dropped, neighbouring dims
 * of the same kind (kept or reduced) merged. If the innermost group is kept,
 * each output row of `inner` contiguous elements accumulates whole input
 * rows (vectorisable); otherwise each output element runs a strided loop over
 * the innermost reduced group. Each output element is computed by one thread
 * in a fixed order, so results do not depend on the pool.
 */
#include <math.h>
#include <string.h>

#include "backends/cpu/ref_common.h"
#include "backends/cpu/ref_kernels.h"
#include "core/alloc.h"
#include "core/common.h"

typedef enum red_op {
    R_SUM,
    R_MEAN,
    R_MAX,
    R_MIN,
    R_PROD,
    R_SUMSQ,
    R_L1,
    R_L2,
    R_LOGSUM,
    R_LOGSUMEXP,
    N_RED
} red_op;

static const char *const red_names[N_RED] = { "ReduceSum",      "ReduceMean", "ReduceMax",
                                              "ReduceMin",      "ReduceProd", "ReduceSumSquare",
                                              "ReduceL1",       "ReduceL2",   "ReduceLogSum",
                                              "ReduceLogSumExp" };

typedef struct reduce_kernel {
    infd_cpu_kernel base;
    red_op op;
    infd_dtype dt;
    bool copy;     /* noop_with_empty_axes with no axes: output = input */
    int64_t numel; /* input elements (copy) */
    int64_t n_rows;
    int64_t inner; /* contiguous kept elements at the end (1: last group reduced) */
    int32_t n_kept;
    int64_t kept_dims[INFD_MAX_RANK];
    int64_t kept_strides[INFD_MAX_RANK];
    int32_t n_red;
    int64_t red_dims[INFD_MAX_RANK];
    int64_t red_strides[INFD_MAX_RANK];
    int64_t red_count;
} reduce_kernel;

typedef struct reduce_job {
    const reduce_kernel *k;
    const void *in;
    void *out;
} reduce_job;

/* Offset of reduced position `r` (an index over all reduced groups except
 * the last one when `skip_last`). */
static int64_t red_offset(const reduce_kernel *k, int64_t r, int32_t n)
{
    int64_t off = 0;
    for (int32_t d = n - 1; d >= 0; d--) {
        off += (r % k->red_dims[d]) * k->red_strides[d];
        r /= k->red_dims[d];
    }
    return off;
}

static int64_t kept_offset(const reduce_kernel *k, int64_t row)
{
    int64_t off = 0;
    for (int32_t d = k->n_kept - 1; d >= 0; d--) {
        off += (row % k->kept_dims[d]) * k->kept_strides[d];
        row /= k->kept_dims[d];
    }
    return off;
}

/* Accumulate one value v into acc (both ACC). */
#define RED_STEP(op, acc, v)                       \
    switch (op) {                                  \
    case R_MAX:                                    \
        acc = (v) > acc || (v) != (v) ? (v) : acc; \
        break;                                     \
    case R_MIN:                                    \
        acc = (v) < acc || (v) != (v) ? (v) : acc; \
        break;                                     \
    default:                                       \
        break;                                     \
    }

/* One implementation per element type T with accumulator ACC. The op switch
 * sits outside each inner loop. */
#define REDUCE_IMPL(sfx, T, ACC, INIT_MAX, INIT_MIN, MUL, ABS, EXP, FIN)                          \
    static ACC red_init_##sfx(red_op op)                                                          \
    {                                                                                             \
        return op == R_MAX ? (INIT_MAX) : op == R_MIN ? (INIT_MIN) : op == R_PROD ? 1 : 0;        \
    }                                                                                             \
    static void red_vec_##sfx(red_op op, ACC *acc, const T *s, int64_t n)                         \
    {                                                                                             \
        switch (op) {                                                                             \
        case R_MAX:                                                                               \
            for (int64_t i = 0; i < n; i++)                                                       \
                acc[i] = ((ACC)s[i] > acc[i] || s[i] != s[i]) ? (ACC)s[i] : acc[i];               \
            break;                                                                                \
        case R_MIN:                                                                               \
            for (int64_t i = 0; i < n; i++)                                                       \
                acc[i] = ((ACC)s[i] < acc[i] || s[i] != s[i]) ? (ACC)s[i] : acc[i];               \
            break;                                                                                \
        case R_PROD:                                                                              \
            for (int64_t i = 0; i < n; i++)                                                       \
                acc[i] = MUL(acc[i], (ACC)s[i]);                                                  \
            break;                                                                                \
        case R_SUMSQ:                                                                             \
        case R_L2:                                                                                \
            for (int64_t i = 0; i < n; i++)                                                       \
                acc[i] += MUL((ACC)s[i], (ACC)s[i]);                                              \
            break;                                                                                \
        case R_L1:                                                                                \
            for (int64_t i = 0; i < n; i++)                                                       \
                acc[i] += ABS((ACC)s[i]);                                                         \
            break;                                                                                \
        case R_LOGSUMEXP:                                                                         \
            for (int64_t i = 0; i < n; i++)                                                       \
                acc[i] += EXP((ACC)s[i]);                                                         \
            break;                                                                                \
        default:                                                                                  \
            for (int64_t i = 0; i < n; i++)                                                       \
                acc[i] += (ACC)s[i];                                                              \
            break;                                                                                \
        }                                                                                         \
    }                                                                                             \
    static ACC red_strided_##sfx(red_op op, ACC acc, const T *s, int64_t st, int64_t n)           \
    {                                                                                             \
        switch (op) {                                                                             \
        case R_MAX:                                                                               \
        case R_MIN:                                                                               \
            for (int64_t i = 0; i < n; i++) {                                                     \
                ACC v = (ACC)s[i * st];                                                           \
                RED_STEP(op, acc, v)                                                              \
            }                                                                                     \
            break;                                                                                \
        case R_PROD:                                                                              \
            for (int64_t i = 0; i < n; i++)                                                       \
                acc = MUL(acc, (ACC)s[i * st]);                                                   \
            break;                                                                                \
        case R_SUMSQ:                                                                             \
        case R_L2:                                                                                \
            for (int64_t i = 0; i < n; i++)                                                       \
                acc += MUL((ACC)s[i * st], (ACC)s[i * st]);                                       \
            break;                                                                                \
        case R_L1:                                                                                \
            for (int64_t i = 0; i < n; i++)                                                       \
                acc += ABS((ACC)s[i * st]);                                                       \
            break;                                                                                \
        case R_LOGSUMEXP:                                                                         \
            for (int64_t i = 0; i < n; i++)                                                       \
                acc += EXP((ACC)s[i * st]);                                                       \
            break;                                                                                \
        default:                                                                                  \
            for (int64_t i = 0; i < n; i++)                                                       \
                acc += (ACC)s[i * st];                                                            \
            break;                                                                                \
        }                                                                                         \
        return acc;                                                                               \
    }                                                                                             \
    static void red_rows_##sfx(const reduce_job *j, int64_t begin, int64_t end)                   \
    {                                                                                             \
        const reduce_kernel *k = j->k;                                                            \
        const T *in = j->in;                                                                      \
        T *out = j->out;                                                                          \
        ACC accs[256];                                                                            \
        for (int64_t r = begin; r < end; r++) {                                                   \
            int64_t base = kept_offset(k, r);                                                     \
            if (k->inner > 1) {                                                                   \
                for (int64_t c0 = 0; c0 < k->inner; c0 += 256) {                                  \
                    int64_t n = INFD_MIN(256, k->inner - c0);                                     \
                    for (int64_t i = 0; i < n; i++)                                               \
                        accs[i] = red_init_##sfx(k->op);                                          \
                    for (int64_t q = 0; q < k->red_count; q++)                                    \
                        red_vec_##sfx(k->op, accs, in + base + c0 + red_offset(k, q, k->n_red),   \
                                      n);                                                         \
                    for (int64_t i = 0; i < n; i++)                                               \
                        out[r * k->inner + c0 + i] = (T)FIN(k->op, accs[i], k->red_count);        \
                }                                                                                 \
            } else {                                                                              \
                ACC acc = red_init_##sfx(k->op);                                                  \
                int32_t nl = k->n_red - 1;                                                        \
                int64_t len = k->red_dims[nl], st = k->red_strides[nl];                           \
                int64_t n_outer = len ? k->red_count / len : 0;                                   \
                for (int64_t q = 0; q < n_outer; q++)                                             \
                    acc =                                                                         \
                        red_strided_##sfx(k->op, acc, in + base + red_offset(k, q, nl), st, len); \
                out[r] = (T)FIN(k->op, acc, k->red_count);                                        \
            }                                                                                     \
        }                                                                                         \
    }

static double fin_f64(red_op op, double acc, int64_t count)
{
    switch (op) {
    case R_MEAN:
        return acc / (double)count;
    case R_L2:
        return sqrt(acc);
    case R_LOGSUM:
    case R_LOGSUMEXP:
        return log(acc);
    default:
        return acc;
    }
}

static int64_t fin_i64(red_op op, int64_t acc, int64_t count)
{
    switch (op) {
    case R_MEAN:
        return count ? acc / count : 0;
    case R_L2:
        return (int64_t)sqrt((double)acc);
    default:
        return acc;
    }
}

#define MUL_F(a, b) ((a) * (b))
#define MUL_I(a, b) ((int64_t)((uint64_t)(a) * (uint64_t)(b)))
#define ABS_I(a)    ((a) < 0 ? (int64_t)(0u - (uint64_t)(a)) : (a))

/* Integer sums wrap like the elementwise kernels: accumulate in uint64
 * semantics through int64 additions of small terms is well defined only
 * without overflow, so inputs that overflow int64 give unspecified sums. */
#define EXP_NONE(a) (a) /* integers never reach R_LOGSUMEXP */

/* FP32 accumulates in double: sums of many elements keep their precision,
 * and ReduceLogSumExp's exp() overflows only past x = 709 instead of 88 (it
 * does not subtract the maximum first; inputs that large still give inf). */
REDUCE_IMPL(f32, float, double, -INFINITY, INFINITY, MUL_F, fabs, exp, fin_f64)
REDUCE_IMPL(f64, double, double, -INFINITY, INFINITY, MUL_F, fabs, exp, fin_f64)
REDUCE_IMPL(i64, int64_t, int64_t, INT64_MIN, INT64_MAX, MUL_I, ABS_I, EXP_NONE, fin_i64)
REDUCE_IMPL(i32, int32_t, int64_t, INT32_MIN, INT32_MAX, MUL_I, ABS_I, EXP_NONE, fin_i64)

static void reduce_body(void *arg, int64_t begin, int64_t end)
{
    const reduce_job *j = arg;
    switch (j->k->dt) {
    case INFD_DTYPE_FP32:
        red_rows_f32(j, begin, end);
        break;
    case INFD_DTYPE_FP64:
        red_rows_f64(j, begin, end);
        break;
    case INFD_DTYPE_INT64:
        red_rows_i64(j, begin, end);
        break;
    default:
        red_rows_i32(j, begin, end);
        break;
    }
}

static void reduce_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const reduce_kernel *k = (const reduce_kernel *)ck;
    if (k->copy) {
        ref_copy(io->outputs[0], io->inputs[0], (size_t)k->numel * infd_dtype_size(k->dt),
                 io->pool);
        return;
    }
    reduce_job j = { .k = k, .in = io->inputs[0], .out = io->outputs[0] };
    int64_t work = k->red_count * k->inner;
    ref_parallel(io->pool, k->n_rows, ref_row_grain(work), reduce_body, &j);
}

static bool reduce_plan(const infd_kernel_args *a, reduce_kernel *k, infd_error *why)
{
    reduce_kernel tmp;
    if (!k)
        k = &tmp;
    memset(&k->op, 0, sizeof(*k) - offsetof(reduce_kernel, op));
    int op = -1;
    for (int i = 0; i < N_RED; i++)
        if (strcmp(a->node->op_type, red_names[i]) == 0)
            op = i;
    if (op < 0 || a->n_inputs < 1 || !a->inputs[0] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "unexpected reduce node");
    k->op = (red_op)op;
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    k->dt = x->dtype;
    if (k->dt == INFD_DTYPE_FP64 && k->op != R_LOGSUMEXP)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "%s on FP64 is not supported",
                           a->node->op_type);
    if (k->dt != INFD_DTYPE_FP32 && k->dt != INFD_DTYPE_FP64 && k->dt != INFD_DTYPE_INT64 &&
        k->dt != INFD_DTYPE_INT32)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "%s on %s is not supported",
                           a->node->op_type, infd_dtype_name(k->dt));
    if (k->op == R_LOGSUM && k->dt != INFD_DTYPE_FP32)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "ReduceLogSum needs FP32");
    if (k->op == R_LOGSUMEXP && !ref_dtype_is_float(k->dt))
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "ReduceLogSumExp needs FP32 or FP64");
    if (y->dtype != k->dt)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output dtype differs");
    infd_reduce_geom g;
    if (!infd_reduce_geom_get(a, &g, why))
        return false;
    if (g.copy) {
        k->copy = true;
        k->numel = infd_node_numel(x);
        return true;
    }
    k->n_kept = g.n_kept;
    k->n_red = g.n_red;
    memcpy(k->kept_dims, g.kept_dims, sizeof(k->kept_dims));
    memcpy(k->kept_strides, g.kept_strides, sizeof(k->kept_strides));
    memcpy(k->red_dims, g.red_dims, sizeof(k->red_dims));
    memcpy(k->red_strides, g.red_strides, sizeof(k->red_strides));
    k->red_count = g.red_count;
    int64_t out_numel = g.out_numel;
    /* The last kept group (when the dims end with one) is walked as
     * contiguous inner elements. */
    k->inner = 1;
    if (g.ends_kept) {
        k->inner = k->kept_dims[k->n_kept - 1];
        k->n_kept--;
    }
    if (k->n_red == 0) {
        k->red_dims[0] = 1;
        k->red_strides[0] = 0;
        k->n_red = 1;
    }
    k->n_rows = k->inner ? out_numel / k->inner : 0;
    return true;
}

bool ref_reduce_supports(const infd_kernel_args *a, infd_error *why)
{
    return reduce_plan(a, NULL, why);
}

infd_status ref_reduce_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    *out = NULL;
    if (!reduce_plan(a, NULL, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    reduce_kernel *k =
        (reduce_kernel *)infd_cpu_kernel_new(sizeof(reduce_kernel), "ref:reduce", reduce_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    reduce_plan(a, k, NULL);
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* ---- Softmax and LogSoftmax ------------------------------------------------------- */

typedef struct softmax_kernel {
    infd_cpu_kernel base;
    bool log;
    int64_t outer, len, inner;
} softmax_kernel;

typedef struct softmax_job {
    const softmax_kernel *k;
    const float *in;
    float *out;
} softmax_job;

#define SM_COLS 64

/* One (outer, column block) item: columns c0..c0+n of the len x inner
 * block, all at once so the axis walk reads whole rows. */
static void softmax_item(const softmax_kernel *k, const float *x, float *y, int64_t n)
{
    float mx[SM_COLS], sum[SM_COLS];
    int64_t len = k->len, st = k->inner;
    for (int64_t i = 0; i < n; i++) {
        mx[i] = -INFINITY;
        sum[i] = 0.0f;
    }
    for (int64_t l = 0; l < len; l++)
        for (int64_t i = 0; i < n; i++)
            mx[i] = x[l * st + i] > mx[i] ? x[l * st + i] : mx[i];
    for (int64_t l = 0; l < len; l++)
        for (int64_t i = 0; i < n; i++) {
            float e = expf(x[l * st + i] - mx[i]);
            sum[i] += e;
            if (!k->log)
                y[l * st + i] = e;
        }
    for (int64_t i = 0; i < n; i++)
        sum[i] = k->log ? logf(sum[i]) : 1.0f / sum[i];
    for (int64_t l = 0; l < len; l++)
        for (int64_t i = 0; i < n; i++)
            y[l * st + i] = k->log ? x[l * st + i] - mx[i] - sum[i] : y[l * st + i] * sum[i];
}

/* Rows of a contiguous axis (inner == 1). */
static void softmax_row(const softmax_kernel *k, const float *x, float *y)
{
    float mx = -INFINITY, sum = 0.0f;
    for (int64_t l = 0; l < k->len; l++)
        mx = x[l] > mx ? x[l] : mx;
    for (int64_t l = 0; l < k->len; l++) {
        float e = expf(x[l] - mx);
        sum += e;
        if (!k->log)
            y[l] = e;
    }
    if (k->log) {
        float ls = logf(sum);
        for (int64_t l = 0; l < k->len; l++)
            y[l] = x[l] - mx - ls;
    } else {
        float inv = 1.0f / sum;
        for (int64_t l = 0; l < k->len; l++)
            y[l] *= inv;
    }
}

static void softmax_body(void *arg, int64_t begin, int64_t end)
{
    const softmax_job *j = arg;
    const softmax_kernel *k = j->k;
    if (k->inner == 1) {
        for (int64_t r = begin; r < end; r++)
            softmax_row(k, j->in + r * k->len, j->out + r * k->len);
        return;
    }
    int64_t n_cb = (k->inner + SM_COLS - 1) / SM_COLS;
    for (int64_t item = begin; item < end; item++) {
        int64_t o = item / n_cb, c0 = (item % n_cb) * SM_COLS;
        int64_t off = o * k->len * k->inner + c0;
        softmax_item(k, j->in + off, j->out + off, INFD_MIN(SM_COLS, k->inner - c0));
    }
}

static void softmax_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const softmax_kernel *k = (const softmax_kernel *)ck;
    softmax_job j = { .k = k, .in = io->inputs[0], .out = io->outputs[0] };
    if (k->len == 0)
        return;
    if (k->inner == 1) {
        ref_parallel(io->pool, k->outer, ref_row_grain(k->len), softmax_body, &j);
    } else {
        int64_t n_cb = (k->inner + SM_COLS - 1) / SM_COLS;
        ref_parallel(io->pool, k->outer * n_cb, ref_row_grain(k->len * SM_COLS), softmax_body, &j);
    }
}

static bool softmax_plan(const infd_kernel_args *a, softmax_kernel *k, infd_error *why)
{
    if (a->n_inputs < 1 || !a->inputs[0] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "missing input or output");
    const infd_ir_value *x = a->inputs[0];
    if (x->dtype != INFD_DTYPE_FP32 || a->outputs[0]->dtype != INFD_DTYPE_FP32)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "%s supports FP32 only, not %s",
                           a->node->op_type, infd_dtype_name(x->dtype));
    if (infd_node_numel(a->outputs[0]) != infd_node_numel(x))
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output size differs");
    int32_t rank = x->shape.rank;
    bool legacy = a->g->opset < 13;
    int64_t axis = 0;
    if (infd_ir_attr_int(a->g, a->node, "axis", legacy ? 1 : -1, &axis, why) != INFD_STATUS_OK)
        return false;
    if (axis < 0)
        axis += rank;
    if (rank == 0 && (axis == 0 || axis == -1))
        axis = 0;
    else if (axis < 0 || axis >= (rank ? rank : 1) + (legacy ? 1 : 0))
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "axis out of range");
    k->log = strcmp(a->node->op_type, "LogSoftmax") == 0;
    k->outer = 1;
    k->len = 1;
    k->inner = 1;
    for (int32_t d = 0; d < rank; d++) {
        int64_t dim = x->shape.dims[d].value;
        if (d < axis)
            k->outer *= dim;
        else if (d == axis || legacy)
            k->len *= dim;
        else
            k->inner *= dim;
    }
    return true;
}

bool ref_softmax_supports(const infd_kernel_args *a, infd_error *why)
{
    softmax_kernel k;
    return softmax_plan(a, &k, why);
}

infd_status ref_softmax_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    softmax_kernel tmp = { 0 }; /* GCC 12 -O3 loses track of softmax_plan's writes */
    *out = NULL;
    if (!softmax_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    softmax_kernel *k = (softmax_kernel *)infd_cpu_kernel_new(sizeof(softmax_kernel), "ref:softmax",
                                                              softmax_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    k->log = tmp.log;
    k->outer = tmp.outer;
    k->len = tmp.len;
    k->inner = tmp.inner;
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* ---- Hardmax ----------------------------------------------------------------------- */

typedef struct hardmax_job {
    const softmax_kernel *k;
    const float *in;
    float *out;
} hardmax_job;

/* Items are lines along the axis (outer x inner): 1 at the first maximum,
 * 0 elsewhere (a NaN line keeps index 0, as no comparison wins). */
static void hardmax_body(void *arg, int64_t begin, int64_t end)
{
    const hardmax_job *j = arg;
    const int64_t len = j->k->len, inner = j->k->inner;
    for (int64_t it = begin; it < end; it++) {
        int64_t base = (it / inner) * len * inner + it % inner, best = 0;
        for (int64_t l = 1; l < len; l++)
            if (j->in[base + l * inner] > j->in[base + best * inner])
                best = l;
        for (int64_t l = 0; l < len; l++)
            j->out[base + l * inner] = l == best ? 1.0f : 0.0f;
    }
}

static void hardmax_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const softmax_kernel *k = (const softmax_kernel *)ck;
    hardmax_job j = { .k = k, .in = io->inputs[0], .out = io->outputs[0] };
    if (k->len == 0)
        return;
    ref_parallel(io->pool, k->outer * k->inner, ref_row_grain(k->len), hardmax_body, &j);
}

bool ref_hardmax_supports(const infd_kernel_args *a, infd_error *why)
{
    softmax_kernel k;
    return softmax_plan(a, &k, why);
}

/* Same axis rules (and plan) as Softmax. */
infd_status ref_hardmax_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    softmax_kernel tmp = { 0 }; /* GCC 12 -O3 loses track of softmax_plan's writes */
    *out = NULL;
    if (!softmax_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return ref_kernel_from_plan(a, &tmp.base, sizeof(tmp), "ref:hardmax", hardmax_run, NULL, out,
                                err);
}

/* ---- MatMul ------------------------------------------------------------------------- */

typedef struct matmul_kernel {
    infd_cpu_kernel base;
    int64_t batch, M, K, N;
    int64_t *a_off; /* owned: per batch, element offset into A */
    int64_t *b_off; /* owned: per batch, element offset into B */
} matmul_kernel;

typedef struct matmul_job {
    const matmul_kernel *k;
    const float *A, *B;
    float *C;
} matmul_job;

/* Row m of batch b: C[m, :] = sum_k A[m, k] * B[k, :], k ascending. */
static void matmul_body(void *arg, int64_t begin, int64_t end)
{
    const matmul_job *j = arg;
    const matmul_kernel *k = j->k;
    const int64_t M = k->M, K = k->K, N = k->N;
    for (int64_t item = begin; item < end; item++) {
        int64_t b = item / M, m = item % M;
        const float *a = j->A + k->a_off[b] + m * K;
        const float *B = j->B + k->b_off[b];
        float *c = j->C + item * N;
        for (int64_t n = 0; n < N; n++)
            c[n] = 0.0f;
        for (int64_t kk = 0; kk < K; kk++) {
            float av = a[kk];
            const float *brow = B + kk * N;
            for (int64_t n = 0; n < N; n++)
                c[n] += av * brow[n];
        }
    }
}

static void matmul_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const matmul_kernel *k = (const matmul_kernel *)ck;
    matmul_job j = { .k = k, .A = io->inputs[0], .B = io->inputs[1], .C = io->outputs[0] };
    ref_parallel(io->pool, k->batch * k->M, ref_row_grain(k->K * k->N), matmul_body, &j);
}

static void matmul_fini(infd_cpu_kernel *ck)
{
    matmul_kernel *k = (matmul_kernel *)ck;
    infd_free(k->a_off);
    infd_free(k->b_off);
}

/* Shapes of a MatMul after numpy's 1-D promotion: batch dims of A and B
 * (right-aligned to the output's batch dims), M, K, N. */
typedef struct mm_shape {
    int32_t n_batch;
    int64_t out_batch[INFD_MAX_RANK];
    int64_t a_batch[INFD_MAX_RANK], b_batch[INFD_MAX_RANK];
    int64_t M, K, N;
} mm_shape;

static bool matmul_shape(const infd_kernel_args *a, mm_shape *s, infd_error *why)
{
    if (a->n_inputs != 2 || !a->inputs[0] || !a->inputs[1] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "needs A and B");
    const infd_ir_value *A = a->inputs[0], *B = a->inputs[1], *C = a->outputs[0];
    if (A->dtype != INFD_DTYPE_FP32 || B->dtype != INFD_DTYPE_FP32 || C->dtype != INFD_DTYPE_FP32)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "MatMul supports FP32 only");
    int32_t ra = A->shape.rank, rb = B->shape.rank;
    if (ra < 1 || rb < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "MatMul of a scalar");
    memset(s, 0, sizeof(*s));
    s->M = ra == 1 ? 1 : A->shape.dims[ra - 2].value;
    s->K = A->shape.dims[ra - 1].value;
    int64_t kb = rb == 1 ? B->shape.dims[0].value : B->shape.dims[rb - 2].value;
    s->N = rb == 1 ? 1 : B->shape.dims[rb - 1].value;
    if (kb != s->K)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "inner dims differ: %lld vs %lld",
                           (long long)s->K, (long long)kb);
    int32_t na = ra > 2 ? ra - 2 : 0, nb = rb > 2 ? rb - 2 : 0;
    s->n_batch = na > nb ? na : nb;
    for (int32_t d = 0; d < s->n_batch; d++) {
        int32_t da = d - (s->n_batch - na), db = d - (s->n_batch - nb);
        s->a_batch[d] = da >= 0 ? A->shape.dims[da].value : 1;
        s->b_batch[d] = db >= 0 ? B->shape.dims[db].value : 1;
        if (s->a_batch[d] != s->b_batch[d] && s->a_batch[d] != 1 && s->b_batch[d] != 1)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "batch dims do not broadcast");
        s->out_batch[d] = s->a_batch[d] == 1 ? s->b_batch[d] : s->a_batch[d];
    }
    int64_t want = s->M * s->N;
    for (int32_t d = 0; d < s->n_batch; d++)
        want *= s->out_batch[d];
    if (infd_node_numel(C) != want)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                           "output has %lld elements, expected %lld", (long long)infd_node_numel(C),
                           (long long)want);
    return true;
}

bool ref_matmul_supports(const infd_kernel_args *a, infd_error *why)
{
    mm_shape s;
    return matmul_shape(a, &s, why);
}

infd_status ref_matmul_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    mm_shape s;
    *out = NULL;
    if (!matmul_shape(a, &s, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    matmul_kernel *k = (matmul_kernel *)infd_cpu_kernel_new(sizeof(matmul_kernel), "ref:matmul",
                                                            matmul_run, matmul_fini);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    k->M = s.M;
    k->K = s.K;
    k->N = s.N;
    k->batch = 1;
    for (int32_t d = 0; d < s.n_batch; d++)
        k->batch *= s.out_batch[d];
    size_t nb = (size_t)(k->batch ? k->batch : 1) * sizeof(int64_t);
    k->a_off = infd_malloc(nb);
    k->b_off = infd_malloc(nb);
    if (!k->a_off || !k->b_off) {
        infd_kernel_destroy(&k->base.base);
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    for (int64_t b = 0; b < k->batch; b++) {
        int64_t rem = b, ao = 0, bo = 0, as = s.M * s.K, bs = s.K * s.N;
        for (int32_t d = s.n_batch - 1; d >= 0; d--) {
            int64_t i = rem % s.out_batch[d];
            rem /= s.out_batch[d];
            ao += (s.a_batch[d] == 1 ? 0 : i) * as;
            bo += (s.b_batch[d] == 1 ? 0 : i) * bs;
            as *= s.a_batch[d];
            bs *= s.b_batch[d];
        }
        k->a_off[b] = ao;
        k->b_off[b] = bo;
    }
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* ---- LayerNormalization ------------------------------------------------------------- */

typedef struct layernorm_kernel {
    infd_cpu_kernel base;
    float eps;
    bool has_bias;
    int32_t n_out;     /* outputs the node has (Mean, InvStdDev are optional) */
    int64_t rows, len; /* rows of `len` normalised elements */
    int64_t scale_n;   /* elements of Scale (len, or 1: broadcast) */
    int64_t bias_n;
} layernorm_kernel;

typedef struct layernorm_job {
    const layernorm_kernel *k;
    const infd_kernel_io *io;
} layernorm_job;

/* Sum of x[0, n) in double, over 8 independent partial sums (one vector
 * of lanes: the compiler vectorizes it without reassociating anything),
 * `mean` subtracted and squared when `sq`. A single running double sum
 * was a chain of dependent adds: 23 us per 32 x 256 LayerNorm of a
 * speech encoder, 7% of its run. */
static double row_sum(const float *x, int64_t n, double mean, bool sq)
{
    double acc[8] = { 0 };
    int64_t i = 0;
    if (sq) {
        for (; i + 8 <= n; i += 8)
            for (int u = 0; u < 8; u++)
                acc[u] += ((double)x[i + u] - mean) * ((double)x[i + u] - mean);
    } else {
        for (; i + 8 <= n; i += 8)
            for (int u = 0; u < 8; u++)
                acc[u] += (double)x[i + u];
    }
    double total = 0.0;
    for (int u = 0; u < 8; u++)
        total += acc[u];
    for (; i < n; i++)
        total += sq ? ((double)x[i] - mean) * ((double)x[i] - mean) : (double)x[i];
    return total;
}

/* One row: two passes in double (mean, then variance about it). */
static void layernorm_body(void *arg, int64_t begin, int64_t end)
{
    const layernorm_job *j = arg;
    const layernorm_kernel *k = j->k;
    const float *scale = j->io->inputs[1];
    const float *bias = k->has_bias ? j->io->inputs[2] : NULL;
    float *mean_out = k->n_out > 1 ? j->io->outputs[1] : NULL;
    float *inv_out = k->n_out > 2 ? j->io->outputs[2] : NULL;
    const int64_t len = k->len;
    for (int64_t r = begin; r < end; r++) {
        const float *x = (const float *)j->io->inputs[0] + r * len;
        float *y = (float *)j->io->outputs[0] + r * len;
        double mean = len ? row_sum(x, len, 0.0, false) / (double)len : 0.0;
        double var = len ? row_sum(x, len, mean, true) / (double)len : 0.0;
        float inv = (float)(1.0 / sqrt(var + (double)k->eps));
        float m = (float)mean;
        if (k->scale_n == len && bias && k->bias_n == len) {
            for (int64_t i = 0; i < len; i++)
                y[i] = (x[i] - m) * inv * scale[i] + bias[i];
        } else {
            for (int64_t i = 0; i < len; i++) {
                float s = scale[k->scale_n == 1 ? 0 : i];
                float b = bias ? bias[k->bias_n == 1 ? 0 : i] : 0.0f;
                y[i] = (x[i] - m) * inv * s + b;
            }
        }
        if (mean_out)
            mean_out[r] = m;
        if (inv_out)
            inv_out[r] = inv;
    }
}

static void layernorm_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const layernorm_kernel *k = (const layernorm_kernel *)ck;
    layernorm_job j = { .k = k, .io = io };
    ref_parallel(io->pool, k->rows, ref_row_grain(k->len), layernorm_body, &j);
}

static bool layernorm_plan(const infd_kernel_args *a, layernorm_kernel *k, infd_error *why)
{
    if (a->n_inputs < 2 || !a->inputs[0] || !a->inputs[1] || a->n_outputs < 1 || !a->outputs[0])
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "needs X, Scale and Y");
    const infd_ir_value *x = a->inputs[0];
    k->has_bias = a->n_inputs > 2 && a->inputs[2];
    k->n_out = a->n_outputs;
    for (int32_t i = 0; i < a->n_inputs; i++)
        if (a->inputs[i] && a->inputs[i]->dtype != INFD_DTYPE_FP32)
            return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                               "LayerNormalization supports FP32 only, input %d is %s", (int)i,
                               infd_dtype_name(a->inputs[i]->dtype));
    for (int32_t i = 0; i < a->n_outputs && i < 3; i++)
        if (a->outputs[i] && a->outputs[i]->dtype != INFD_DTYPE_FP32)
            return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                               "LayerNormalization supports FP32 only, output %d is %s", (int)i,
                               infd_dtype_name(a->outputs[i]->dtype));
    if (a->n_outputs > 3)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "too many outputs");
    int64_t axis = -1, stash = 1;
    if (infd_ir_attr_int(a->g, a->node, "axis", -1, &axis, why) != INFD_STATUS_OK ||
        infd_ir_attr_int(a->g, a->node, "stash_type", 1, &stash, why) != INFD_STATUS_OK ||
        infd_ir_attr_float(a->g, a->node, "epsilon", 1e-5f, &k->eps, why) != INFD_STATUS_OK)
        return false;
    if (stash != 1)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                           "stash_type %lld is not supported (FP32 only)", (long long)stash);
    int32_t rank = x->shape.rank;
    if (axis < 0)
        axis += rank;
    if (axis < 0 || axis >= rank)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "axis out of range");
    k->rows = k->len = 1;
    for (int32_t d = 0; d < rank; d++)
        *(d < axis ? &k->rows : &k->len) *= x->shape.dims[d].value;
    k->scale_n = infd_node_numel(a->inputs[1]);
    k->bias_n = k->has_bias ? infd_node_numel(a->inputs[2]) : 1;
    if ((k->scale_n != k->len && k->scale_n != 1) || (k->bias_n != k->len && k->bias_n != 1))
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                           "Scale and B must have the normalised shape or one element");
    if (infd_node_numel(a->outputs[0]) != k->rows * k->len)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output size differs");
    for (int32_t i = 1; i < a->n_outputs; i++)
        if (a->outputs[i] && infd_node_numel(a->outputs[i]) != k->rows)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                               "output %d must have one element per row", (int)i);
    return true;
}

bool ref_layernorm_supports(const infd_kernel_args *a, infd_error *why)
{
    layernorm_kernel k;
    return layernorm_plan(a, &k, why);
}

infd_status ref_layernorm_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    layernorm_kernel tmp;
    *out = NULL;
    if (!layernorm_plan(a, &tmp, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    return ref_kernel_from_plan(a, &tmp.base, sizeof(tmp), "ref:layernorm", layernorm_run, NULL,
                                out, err);
}
