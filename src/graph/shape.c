/*
 * shape.c - shape and dtype inference on concrete shapes.
 *
 * One function per operator family, found through a table by op type. Every
 * function reads its inputs through get_input (which refuses a missing input
 * or a shape that is not concrete), validates what the model says (ranks,
 * channel counts, attribute values: nothing from the file is trusted), does
 * its dim arithmetic with overflow checks and writes each output through
 * set_output, which also refuses an element count above INT64_MAX.
 *
 * Inputs that decide an output shape by their data (Reshape's shape, Slice's
 * starts, Resize's scales, ...) must be constants; the plan compiler folds
 * Shape subgraphs into constants before it calls us. Constant is the one op
 * whose output gets data here too: the compiler needs it before any kernel
 * exists. Memory: only Constant allocates, in g->weights.
 *
 * Opset-dependent forms (axes as attribute or input, Slice attributes before
 * opset 10, Clip's min/max before 11, Split's sizes, Resize's inputs) follow
 * the ONNX operator changelog; each switch is at the top of its function.
 */
#include "graph/shape.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/arena.h"
#include "core/common.h"

/* The node being inferred. */
typedef struct ctx {
    infd_ir_graph *g;
    const infd_ir_node *node;
    infd_error *err;
} ctx;

typedef infd_status (*shape_fn)(const ctx *c);

/* Returns from the calling function when `expr` is not OK. */
#define TRY(expr)                  \
    do {                           \
        infd_status st_ = (expr);  \
        if (st_ != INFD_STATUS_OK) \
            return st_;            \
    } while (0)

/* ---- messages ----------------------------------------------------------- */

static infd_status fail(const ctx *c, const char *fmt, ...) INFD_PRINTF(2, 3);
static infd_status not_constant(const ctx *c, int32_t k, const char *name);

/* INVALID_ARGUMENT with "<file>: node '<name>' (<op>): " in front. */
static infd_status fail(const ctx *c, const char *fmt, ...)
{
    char msg[INFD_ERROR_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return infd_error_set(c->err, INFD_STATUS_INVALID_ARGUMENT, "%s: node '%s' (%s): %s",
                          c->g->source, c->node->name, c->node->op_type, msg);
}

/* UNIMPLEMENTED: input k decides an output shape but has no data when the
 * plan is built. Plans have static shapes; data-dependent shapes are not
 * supported (yet), which is a limitation of infd, not a fault of the model. */
static infd_status not_constant(const ctx *c, int32_t k, const char *name)
{
    return infd_error_set(c->err, INFD_STATUS_UNIMPLEMENTED,
                          "%s: node '%s' (%s): input %d ('%s') decides the output shape but is "
                          "only known at run time; infd needs it to be a constant",
                          c->g->source, c->node->name, c->node->op_type, (int)k, name);
}

/* A formatted shape that lives until the end of the full expression, so
 * `fail(c, "%s", str(&s).s)` needs no buffer at the call site. */
typedef struct shape_str {
    char s[192];
} shape_str;

static shape_str str(const infd_shape *s)
{
    shape_str r;
    infd_shape_format(s, r.s, sizeof(r.s));
    return r;
}

/* ---- inputs, outputs, attributes ---------------------------------------- */

/* Input k's value, or NULL when the node lists fewer inputs or leaves it out. */
static const infd_ir_value *in_value(const ctx *c, int32_t k)
{
    if (k < 0 || k >= c->node->n_inputs || c->node->inputs[k] < 0)
        return NULL;
    INFD_ASSERT(c->node->inputs[k] < c->g->n_values);
    return &c->g->values[c->node->inputs[k]];
}

static bool has_input(const ctx *c, int32_t k)
{
    return in_value(c, k) != NULL;
}

static const char *in_name(const ctx *c, int32_t k)
{
    const infd_ir_value *v = in_value(c, k);
    return v ? v->name : "";
}

/* Input k's dtype and concrete shape; fails when it is absent or unknown. */
static infd_status get_input(const ctx *c, int32_t k, infd_dtype *dtype, infd_shape *s)
{
    /* Defined outputs on every path: GCC 12 at -O3 cannot see that fail()
     * never returns OK and would warn at each caller. */
    *dtype = INFD_DTYPE_INVALID;
    s->rank = 0;
    const infd_ir_value *v = in_value(c, k);
    if (!v)
        return fail(c, "input %d is required, got none", (int)k);
    if (v->dtype <= INFD_DTYPE_INVALID || v->dtype >= INFD_DTYPE_COUNT_)
        return fail(c,
                    "input %d ('%s') has no known dtype, expected one (nodes are inferred in "
                    "topological order)",
                    (int)k, v->name);
    if (v->shape.rank < 0 || v->shape.rank > INFD_MAX_RANK)
        return fail(c, "input %d ('%s') has an unknown shape, expected a concrete shape", (int)k,
                    v->name);
    s->rank = v->shape.rank;
    for (int32_t i = 0; i < s->rank; i++) {
        if (v->shape.dims[i].value < 0) {
            char buf[192];
            return fail(c, "input %d ('%s') has shape %s, expected concrete dims", (int)k, v->name,
                        infd_ir_shape_format(c->g, &v->shape, buf, sizeof(buf)));
        }
        s->dims[i] = v->shape.dims[i].value;
    }
    *dtype = v->dtype;
    return INFD_STATUS_OK;
}

/* As get_input, also requiring a rank at least `min_rank`. */
static infd_status get_input_rank(const ctx *c, int32_t k, int32_t min_rank, infd_dtype *dtype,
                                  infd_shape *s)
{
    TRY(get_input(c, k, dtype, s));
    if (s->rank < min_rank)
        return fail(c, "input %d ('%s') has rank %d, expected %d or more", (int)k, in_name(c, k),
                    (int)s->rank, (int)min_rank);
    return INFD_STATUS_OK;
}

/* Sets output k (skipped when the node leaves it out). */
static infd_status set_output(const ctx *c, int32_t k, infd_dtype dtype, const infd_shape *s)
{
    if (k >= c->node->n_outputs || c->node->outputs[k] < 0)
        return INFD_STATUS_OK;
    INFD_ASSERT(c->node->outputs[k] < c->g->n_values);
    INFD_ASSERT(s->rank >= 0 && s->rank <= INFD_MAX_RANK);
    infd_ir_value *v = &c->g->values[c->node->outputs[k]];
    int64_t numel = 1;
    for (int32_t i = 0; i < s->rank; i++) {
        INFD_ASSERT(s->dims[i] >= 0);
        if (__builtin_mul_overflow(numel, s->dims[i], &numel))
            return fail(c,
                        "output %d ('%s') would have shape %s, expected at most INT64_MAX "
                        "elements",
                        (int)k, v->name, str(s).s);
    }
    int64_t bytes;
    if (__builtin_mul_overflow(numel, (int64_t)infd_dtype_size(dtype), &bytes))
        return fail(c,
                    "output %d ('%s') would have shape %s of %s, expected at most INT64_MAX "
                    "bytes",
                    (int)k, v->name, str(s).s, infd_dtype_name(dtype));
    v->dtype = dtype;
    v->shape.rank = s->rank;
    for (int32_t i = 0; i < s->rank; i++) {
        v->shape.dims[i].value = s->dims[i];
        v->shape.dims[i].sym = -1;
    }
    return INFD_STATUS_OK;
}

static infd_status attr_int(const ctx *c, const char *name, int64_t dflt, int64_t *out)
{
    return infd_ir_attr_int(c->g, c->node, name, dflt, out, c->err);
}

static infd_status attr_float(const ctx *c, const char *name, float dflt, float *out)
{
    return infd_ir_attr_float(c->g, c->node, name, dflt, out, c->err);
}

static infd_status attr_ints(const ctx *c, const char *name, const int64_t **out, int32_t *n)
{
    return infd_ir_attr_ints(c->g, c->node, name, out, n, c->err);
}

static infd_status attr_string(const ctx *c, const char *name, const char *dflt, const char **out)
{
    return infd_ir_attr_string(c->g, c->node, name, dflt, out, c->err);
}

/* Maps `axis` in [-rank, rank) to [0, rank). `what` names it in messages. */
static infd_status norm_axis(const ctx *c, const char *what, int64_t axis, int32_t rank,
                             int32_t *out)
{
    if (axis < -(int64_t)rank || axis >= rank)
        return fail(c, "%s is %" PRId64 ", expected a value in [%d, %d] for rank %d", what, axis,
                    (int)-rank, (int)rank - 1, (int)rank);
    *out = (int32_t)(axis < 0 ? axis + rank : axis);
    return INFD_STATUS_OK;
}

/* Normalises n axes against `rank` into `mask` (bit i: axis i listed),
 * refusing repeats. */
static infd_status norm_axes(const ctx *c, const char *what, const int64_t *axes, int32_t n,
                             int32_t rank, uint32_t *mask)
{
    *mask = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t a = 0;
        TRY(norm_axis(c, what, axes[i], rank, &a));
        if (*mask & (1u << a))
            return fail(c, "%s lists axis %d twice, expected distinct axes", what, (int)a);
        *mask |= 1u << a;
    }
    return INFD_STATUS_OK;
}

/* ---- constant inputs ---------------------------------------------------- */

/* A constant input's elements. */
typedef struct const_view {
    const unsigned char *data;
    infd_dtype dtype;
    int64_t n;
} const_view;

/* Reads any numeric element as int64 and as double. */
static void view_at(const const_view *v, int64_t i, int64_t *as_int, double *as_double)
{
    const unsigned char *p = v->data + (size_t)i * infd_dtype_size(v->dtype);
    int64_t iv = 0;
    double dv = 0;
    switch (v->dtype) {
    case INFD_DTYPE_BOOL:
    case INFD_DTYPE_UINT8: {
        uint8_t x;
        memcpy(&x, p, sizeof(x));
        iv = x, dv = x;
        break;
    }
    case INFD_DTYPE_INT8: {
        int8_t x;
        memcpy(&x, p, sizeof(x));
        iv = x, dv = x;
        break;
    }
    case INFD_DTYPE_UINT16: {
        uint16_t x;
        memcpy(&x, p, sizeof(x));
        iv = x, dv = x;
        break;
    }
    case INFD_DTYPE_INT16: {
        int16_t x;
        memcpy(&x, p, sizeof(x));
        iv = x, dv = x;
        break;
    }
    case INFD_DTYPE_UINT32: {
        uint32_t x;
        memcpy(&x, p, sizeof(x));
        iv = x, dv = x;
        break;
    }
    case INFD_DTYPE_INT32: {
        int32_t x;
        memcpy(&x, p, sizeof(x));
        iv = x, dv = x;
        break;
    }
    case INFD_DTYPE_UINT64: {
        uint64_t x;
        memcpy(&x, p, sizeof(x));
        iv = x > INT64_MAX ? INT64_MAX : (int64_t)x, dv = (double)x;
        break;
    }
    case INFD_DTYPE_INT64:
        memcpy(&iv, p, sizeof(iv));
        dv = (double)iv;
        break;
    case INFD_DTYPE_FP16: {
        uint16_t x;
        memcpy(&x, p, sizeof(x));
        dv = infd_fp16_to_fp32(x);
        break;
    }
    case INFD_DTYPE_BF16: {
        uint16_t x;
        memcpy(&x, p, sizeof(x));
        dv = infd_bf16_to_fp32(x);
        break;
    }
    case INFD_DTYPE_FP32: {
        float x;
        memcpy(&x, p, sizeof(x));
        dv = x;
        break;
    }
    case INFD_DTYPE_FP64:
        memcpy(&dv, p, sizeof(dv));
        break;
    default:
        break;
    }
    if (as_int)
        *as_int = iv;
    if (as_double)
        *as_double = dv;
}

static int64_t view_int(const const_view *v, int64_t i)
{
    int64_t x;
    view_at(v, i, &x, NULL);
    return x;
}

static double view_double(const const_view *v, int64_t i)
{
    double x;
    view_at(v, i, NULL, &x);
    return x;
}

static bool is_float_dtype(infd_dtype t)
{
    return t == INFD_DTYPE_FP16 || t == INFD_DTYPE_BF16 || t == INFD_DTYPE_FP32 ||
           t == INFD_DTYPE_FP64;
}

static bool is_int_index_dtype(infd_dtype t)
{
    return t == INFD_DTYPE_INT64 || t == INFD_DTYPE_INT32;
}

/* Constant input k: a scalar or 1-D tensor whose data is present. `ints`
 * requires INT64 or INT32 elements, otherwise floating point. */
static infd_status const_input(const ctx *c, int32_t k, bool ints, const_view *out)
{
    infd_dtype dt;
    infd_shape s;
    TRY(get_input(c, k, &dt, &s));
    const infd_ir_value *v = in_value(c, k);
    if (!v->data)
        return not_constant(c, k, v->name);
    if (ints && !is_int_index_dtype(dt))
        return fail(c, "input %d ('%s') has dtype %s, expected INT64 or INT32", (int)k, v->name,
                    infd_dtype_name(dt));
    if (!ints && !is_float_dtype(dt))
        return fail(c, "input %d ('%s') has dtype %s, expected a floating-point type", (int)k,
                    v->name, infd_dtype_name(dt));
    if (s.rank > 1)
        return fail(c, "input %d ('%s') has shape %s, expected a 1-D tensor", (int)k, v->name,
                    str(&s).s);
    int64_t n = s.rank == 1 ? s.dims[0] : 1;
    size_t es = infd_dtype_size(dt);
    if ((uint64_t)n > v->nbytes / es)
        return fail(c, "input %d ('%s') holds %zu bytes of data, expected %" PRId64 " elements",
                    (int)k, v->name, v->nbytes, n);
    out->data = v->data;
    out->dtype = dt;
    out->n = n;
    return INFD_STATUS_OK;
}

/* Constant integer input k copied into out[0..cap); more elements fail. */
static infd_status const_ints(const ctx *c, int32_t k, int64_t *out, int32_t cap, int32_t *n)
{
    const_view v;
    TRY(const_input(c, k, true, &v));
    if (v.n > cap)
        return fail(c, "input %d ('%s') has %" PRId64 " elements, expected at most %d", (int)k,
                    in_name(c, k), v.n, (int)cap);
    for (int64_t i = 0; i < v.n; i++)
        out[i] = view_int(&v, i);
    *n = (int32_t)v.n;
    return INFD_STATUS_OK;
}

/* True when input k is present with at least one element (Resize treats an
 * empty scales or sizes tensor as absent). */
static bool has_nonempty_input(const ctx *c, int32_t k)
{
    const infd_ir_value *v = in_value(c, k);
    if (!v || v->shape.rank < 0)
        return v != NULL;
    for (int32_t i = 0; i < v->shape.rank; i++) {
        if (v->shape.dims[i].value == 0)
            return false;
    }
    return true;
}

/* ---- broadcasting ------------------------------------------------------- */

/* Numpy broadcast of a and b into out; false (with *bad the offending dim,
 * counted from the right as a negative index) when they do not broadcast. */
static bool broadcast(const infd_shape *a, const infd_shape *b, infd_shape *out, int32_t *bad)
{
    int32_t r = INFD_MAX(a->rank, b->rank);
    infd_shape o = { .rank = r };
    for (int32_t i = 0; i < r; i++) {
        int32_t ia = a->rank - r + i, ib = b->rank - r + i;
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da == db || db == 1) {
            o.dims[i] = da;
        } else if (da == 1) {
            o.dims[i] = db;
        } else {
            *bad = i - r;
            return false;
        }
    }
    *out = o;
    return true;
}

/* Dim `neg` (negative, from the right) of s, 1 where s has no such dim. */
static int64_t dim_from_right(const infd_shape *s, int32_t neg)
{
    int32_t i = s->rank + neg;
    return i >= 0 ? s->dims[i] : 1;
}

/* Broadcasts input k's shape into *acc. */
static infd_status broadcast_input(const ctx *c, int32_t k, const infd_shape *s, infd_shape *acc)
{
    int32_t bad = 0;
    if (!broadcast(acc, s, acc, &bad))
        return fail(c,
                    "input %d ('%s') has shape %s, which does not broadcast with %s: dim %d, "
                    "expected 1 or %" PRId64 ", got %" PRId64,
                    (int)k, in_name(c, k), str(s).s, str(acc).s, (int)bad, dim_from_right(acc, bad),
                    dim_from_right(s, bad));
    return INFD_STATUS_OK;
}

/* True when `s` broadcasts to exactly `target` (unidirectional). */
static bool broadcasts_to(const infd_shape *s, const infd_shape *target)
{
    infd_shape o;
    int32_t bad;
    return s->rank <= target->rank && broadcast(target, s, &o, &bad) &&
           infd_shape_equal(&o, target);
}

static infd_status same_dtype(const ctx *c, int32_t k, infd_dtype got, int32_t k0, infd_dtype want)
{
    if (got != want)
        return fail(c, "input %d ('%s') has dtype %s, expected %s (the dtype of input %d)", (int)k,
                    in_name(c, k), infd_dtype_name(got), infd_dtype_name(want), (int)k0);
    return INFD_STATUS_OK;
}

/* Broadcasts inputs [first, n_inputs) into *out; all share one dtype when
 * `same` is set. *dtype is the first one's. */
static infd_status broadcast_all(const ctx *c, int32_t first, bool same, infd_dtype *dtype,
                                 infd_shape *out)
{
    if (c->node->n_inputs <= first)
        return fail(c, "has %d inputs, expected at least %d", (int)c->node->n_inputs,
                    (int)first + 1);
    TRY(get_input(c, first, dtype, out));
    for (int32_t k = first + 1; k < c->node->n_inputs; k++) {
        infd_dtype dt;
        infd_shape s;
        TRY(get_input(c, k, &dt, &s));
        if (same)
            TRY(same_dtype(c, k, dt, first, *dtype));
        TRY(broadcast_input(c, k, &s, out));
    }
    return INFD_STATUS_OK;
}

/* ---- elementwise -------------------------------------------------------- */

/* Output 0 is input 0's dtype and shape: activations, Identity, Softmax ... */
static infd_status infer_same(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    TRY(get_input(c, 0, &dt, &s));
    return set_output(c, 0, dt, &s);
}

static infd_status infer_not(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    TRY(get_input(c, 0, &dt, &s));
    if (dt != INFD_DTYPE_BOOL)
        return fail(c, "input 0 ('%s') has dtype %s, expected BOOL", in_name(c, 0),
                    infd_dtype_name(dt));
    return set_output(c, 0, dt, &s);
}

/* IsNaN, IsInf: a BOOL mask of the input's shape. */
static infd_status infer_float_test(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    TRY(get_input(c, 0, &dt, &s));
    return set_output(c, 0, INFD_DTYPE_BOOL, &s);
}

/* Softmax, LogSoftmax, Hardmax: the axis must exist; the default moved from
 * 1 to -1 in opset 13. */
static infd_status infer_softmax(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int64_t axis;
    int32_t a = 0;
    TRY(get_input(c, 0, &dt, &s));
    TRY(attr_int(c, "axis", c->g->opset >= 13 ? -1 : 1, &axis));
    TRY(norm_axis(c, "attribute 'axis'", axis, s.rank, &a));
    return set_output(c, 0, dt, &s);
}

static infd_status infer_lrn(const ctx *c)
{
    int64_t size;
    TRY(attr_int(c, "size", -1, &size));
    if (size < 1)
        return fail(c, "attribute 'size' is %" PRId64 ", expected a value >= 1", size);
    return infer_same(c);
}

/* Clip: min and max are attributes before opset 11, optional scalar inputs
 * from 11. */
static infd_status infer_clip(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    TRY(get_input(c, 0, &dt, &s));
    for (int32_t k = 1; k <= 2 && c->g->opset >= 11; k++) {
        if (!has_input(c, k))
            continue;
        infd_dtype bt;
        infd_shape b;
        int64_t numel;
        TRY(get_input(c, k, &bt, &b));
        TRY(same_dtype(c, k, bt, 0, dt));
        if (infd_shape_numel(&b, &numel, NULL) != INFD_STATUS_OK || numel != 1)
            return fail(c, "input %d ('%s') has shape %s, expected a scalar", (int)k, in_name(c, k),
                        str(&b).s);
    }
    return set_output(c, 0, dt, &s);
}

static infd_status infer_cast(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int64_t to;
    TRY(get_input(c, 0, &dt, &s));
    TRY(attr_int(c, "to", -1, &to));
    if (to == -1)
        return fail(c, "attribute 'to' is required, got none");
    infd_dtype out =
        to < INT32_MIN || to > INT32_MAX ? INFD_DTYPE_INVALID : infd_dtype_from_onnx((int32_t)to);
    if (out == INFD_DTYPE_INVALID || out == INFD_DTYPE_BYTES)
        return fail(c, "attribute 'to' is %" PRId64 ", expected an ONNX numeric data type", to);
    return set_output(c, 0, out, &s);
}

static infd_status infer_cast_like(const ctx *c)
{
    infd_dtype dt, target;
    infd_shape s, ts;
    TRY(get_input(c, 0, &dt, &s));
    TRY(get_input(c, 1, &target, &ts));
    return set_output(c, 0, target, &s);
}

/* Dropout at inference is Identity; the optional mask is BOOL from opset 10
 * (the input's type before). */
static infd_status infer_dropout(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    TRY(get_input(c, 0, &dt, &s));
    TRY(set_output(c, 0, dt, &s));
    return set_output(c, 1, c->g->opset >= 10 ? INFD_DTYPE_BOOL : dt, &s);
}

/* Add, Sub, Mul, Div, Mod, And, Or, Xor, PRelu, Sum, Max, Min, Mean. */
static infd_status infer_broadcast_same(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    TRY(broadcast_all(c, 0, true, &dt, &s));
    return set_output(c, 0, dt, &s);
}

/* Pow: the exponent may have another type; the output has X's. */
static infd_status infer_pow(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    if (c->node->n_inputs != 2)
        return fail(c, "has %d inputs, expected 2", (int)c->node->n_inputs);
    TRY(broadcast_all(c, 0, false, &dt, &s));
    return set_output(c, 0, dt, &s);
}

/* Equal, Less, Greater, LessOrEqual, GreaterOrEqual. */
static infd_status infer_compare(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    if (c->node->n_inputs != 2)
        return fail(c, "has %d inputs, expected 2", (int)c->node->n_inputs);
    TRY(broadcast_all(c, 0, true, &dt, &s));
    return set_output(c, 0, INFD_DTYPE_BOOL, &s);
}

static infd_status infer_where(const ctx *c)
{
    infd_dtype ct, xt, yt;
    infd_shape s, xs, ys;
    if (c->node->n_inputs != 3)
        return fail(c, "has %d inputs, expected 3", (int)c->node->n_inputs);
    TRY(get_input(c, 0, &ct, &s));
    if (ct != INFD_DTYPE_BOOL)
        return fail(c, "input 0 ('%s') has dtype %s, expected BOOL", in_name(c, 0),
                    infd_dtype_name(ct));
    TRY(get_input(c, 1, &xt, &xs));
    TRY(broadcast_input(c, 1, &xs, &s));
    TRY(get_input(c, 2, &yt, &ys));
    TRY(same_dtype(c, 2, yt, 1, xt));
    TRY(broadcast_input(c, 2, &ys, &s));
    return set_output(c, 0, xt, &s);
}

/* ---- normalisation ------------------------------------------------------ */

/* Input k must be the 1-D per-channel tensor [n]. */
static infd_status per_channel(const ctx *c, int32_t k, int64_t n, infd_dtype *dtype)
{
    infd_shape s;
    TRY(get_input(c, k, dtype, &s));
    if (s.rank != 1 || s.dims[0] != n)
        return fail(c, "input %d ('%s') has shape %s, expected [%" PRId64 "] (one per channel)",
                    (int)k, in_name(c, k), str(&s).s, n);
    return INFD_STATUS_OK;
}

/* BatchNormalization: X [N, C, ...], scale/B/mean/var [C]. The optional
 * outputs (training statistics) are [C]. */
static infd_status infer_batchnorm(const ctx *c)
{
    infd_dtype dt, st;
    infd_shape s;
    TRY(get_input_rank(c, 0, 2, &dt, &s));
    if (c->node->n_inputs != 5)
        return fail(c, "has %d inputs, expected 5 (X, scale, B, mean, var)",
                    (int)c->node->n_inputs);
    infd_dtype stats = dt;
    for (int32_t k = 1; k < 5; k++) {
        TRY(per_channel(c, k, s.dims[1], &st));
        if (k == 3)
            stats = st;
    }
    TRY(set_output(c, 0, dt, &s));
    infd_shape cs = { .rank = 1, .dims = { s.dims[1] } };
    for (int32_t k = 1; k < c->node->n_outputs; k++)
        TRY(set_output(c, k, stats, &cs));
    return INFD_STATUS_OK;
}

static infd_status infer_instancenorm(const ctx *c)
{
    infd_dtype dt, st;
    infd_shape s;
    TRY(get_input_rank(c, 0, 3, &dt, &s));
    TRY(per_channel(c, 1, s.dims[1], &st));
    TRY(per_channel(c, 2, s.dims[1], &st));
    return set_output(c, 0, dt, &s);
}

/* LayerNormalization (opset 17): Scale and B broadcast to X[axis:]; Mean
 * and InvStdDev are X's shape with ones from axis on, in stash_type. */
static infd_status infer_layernorm(const ctx *c)
{
    infd_dtype dt, bt;
    infd_shape s, b;
    int64_t axis, stash;
    int32_t a = 0;
    TRY(get_input(c, 0, &dt, &s));
    TRY(attr_int(c, "axis", -1, &axis));
    TRY(attr_int(c, "stash_type", 1, &stash));
    TRY(norm_axis(c, "attribute 'axis'", axis, s.rank, &a));
    infd_shape tail = { .rank = s.rank - a };
    memcpy(tail.dims, s.dims + a, sizeof(int64_t) * (size_t)tail.rank);
    for (int32_t k = 1; k <= 2; k++) {
        if (!has_input(c, k))
            continue;
        TRY(get_input(c, k, &bt, &b));
        if (!broadcasts_to(&b, &tail))
            return fail(c, "input %d ('%s') has shape %s, expected a shape that broadcasts to %s",
                        (int)k, in_name(c, k), str(&b).s, str(&tail).s);
    }
    infd_dtype st = stash < INT32_MIN || stash > INT32_MAX ? INFD_DTYPE_INVALID
                                                           : infd_dtype_from_onnx((int32_t)stash);
    if (!is_float_dtype(st))
        return fail(c, "attribute 'stash_type' is %" PRId64 ", expected a floating-point type",
                    stash);
    TRY(set_output(c, 0, dt, &s));
    infd_shape m = s;
    for (int32_t i = a; i < m.rank; i++)
        m.dims[i] = 1;
    TRY(set_output(c, 1, st, &m));
    return set_output(c, 2, st, &m);
}

/* ---- recurrent ---------------------------------------------------------- */

/* LSTM (opsets 7 and 14): X [seq, batch, input] ([batch, seq, input] with
 * layout 1), W [dirs, 4H, input], R [dirs, 4H, H], optional B [dirs, 8H],
 * sequence_lens [batch] (int32), initial_h and initial_c [dirs, batch, H]
 * ([batch, dirs, H] with layout 1), P [dirs, 3H]. Y is [seq, dirs, batch,
 * H] ([batch, seq, dirs, H]); Y_h and Y_c are initial_h's shape. */
static infd_status infer_lstm(const ctx *c)
{
    infd_dtype dt, t;
    infd_shape x, w, r, b;
    const char *direction = NULL;
    int64_t hidden = 0, layout = 0;
    TRY(get_input(c, 0, &dt, &x));
    if (!is_float_dtype(dt))
        return fail(c, "input 0 ('%s') has dtype %s, expected a floating-point type", in_name(c, 0),
                    infd_dtype_name(dt));
    TRY(attr_string(c, "direction", "forward", &direction));
    int64_t dirs = strcmp(direction, "bidirectional") == 0 ? 2 : 1;
    if (dirs == 1 && strcmp(direction, "forward") != 0 && strcmp(direction, "reverse") != 0)
        return fail(c, "attribute 'direction' is '%s', expected forward, reverse or bidirectional",
                    direction);
    TRY(attr_int(c, "layout", 0, &layout));
    if (layout != 0 && layout != 1)
        return fail(c, "attribute 'layout' is %" PRId64 ", expected 0 or 1", layout);
    if (x.rank != 3)
        return fail(c, "input 0 ('%s') has shape %s, expected rank 3", in_name(c, 0), str(&x).s);
    int64_t seq = layout ? x.dims[1] : x.dims[0], batch = layout ? x.dims[0] : x.dims[1];
    TRY(get_input(c, 2, &t, &r));
    TRY(same_dtype(c, 2, t, 0, dt));
    TRY(attr_int(c, "hidden_size", r.rank == 3 ? r.dims[2] : 0, &hidden));
    if (hidden < 1)
        return fail(c, "attribute 'hidden_size' is %" PRId64 ", expected at least 1", hidden);
    TRY(get_input(c, 1, &t, &w));
    TRY(same_dtype(c, 1, t, 0, dt));
    if (w.rank != 3 || w.dims[0] != dirs || w.dims[1] != 4 * hidden || w.dims[2] != x.dims[2])
        return fail(c,
                    "input 1 ('%s', W) has shape %s, expected [%" PRId64 ", %" PRId64 ", %" PRId64
                    "] (directions, 4 x hidden_size, input size)",
                    in_name(c, 1), str(&w).s, dirs, 4 * hidden, x.dims[2]);

    if (r.rank != 3 || r.dims[0] != dirs || r.dims[1] != 4 * hidden || r.dims[2] != hidden)
        return fail(c,
                    "input 2 ('%s', R) has shape %s, expected [%" PRId64 ", %" PRId64 ", %" PRId64
                    "] (directions, 4 x hidden_size, hidden_size)",
                    in_name(c, 2), str(&r).s, dirs, 4 * hidden, hidden);
    if (has_input(c, 3)) {
        TRY(get_input(c, 3, &t, &b));
        TRY(same_dtype(c, 3, t, 0, dt));
        if (b.rank != 2 || b.dims[0] != dirs || b.dims[1] != 8 * hidden)
            return fail(c, "input 3 ('%s', B) has shape %s, expected [%" PRId64 ", %" PRId64 "]",
                        in_name(c, 3), str(&b).s, dirs, 8 * hidden);
    }
    if (has_input(c, 4)) {
        TRY(get_input(c, 4, &t, &b));
        if (t != INFD_DTYPE_INT32 || b.rank != 1 || b.dims[0] != batch)
            return fail(c, "input 4 ('%s', sequence_lens) is %s %s, expected INT32 [%" PRId64 "]",
                        in_name(c, 4), infd_dtype_name(t), str(&b).s, batch);
    }
    infd_shape state = { .rank = 3 };
    state.dims[0] = layout ? batch : dirs;
    state.dims[1] = layout ? dirs : batch;
    state.dims[2] = hidden;
    for (int32_t k = 5; k <= 6; k++) {
        if (!has_input(c, k))
            continue;
        TRY(get_input(c, k, &t, &b));
        TRY(same_dtype(c, k, t, 0, dt));
        if (!infd_shape_equal(&b, &state))
            return fail(c, "input %d ('%s') has shape %s, expected %s", (int)k, in_name(c, k),
                        str(&b).s, str(&state).s);
    }
    if (has_input(c, 7)) {
        TRY(get_input(c, 7, &t, &b));
        TRY(same_dtype(c, 7, t, 0, dt));
        if (b.rank != 2 || b.dims[0] != dirs || b.dims[1] != 3 * hidden)
            return fail(c, "input 7 ('%s', P) has shape %s, expected [%" PRId64 ", %" PRId64 "]",
                        in_name(c, 7), str(&b).s, dirs, 3 * hidden);
    }
    infd_shape y = { .rank = 4 };
    if (layout) {
        y.dims[0] = batch, y.dims[1] = seq, y.dims[2] = dirs, y.dims[3] = hidden;
    } else {
        y.dims[0] = seq, y.dims[1] = dirs, y.dims[2] = batch, y.dims[3] = hidden;
    }
    TRY(set_output(c, 0, dt, &y));
    TRY(set_output(c, 1, dt, &state));
    return set_output(c, 2, dt, &state);
}

/* ---- convolution and pooling ------------------------------------------- */

typedef enum auto_pad {
    AUTO_PAD_NOTSET,
    AUTO_PAD_SAME_UPPER,
    AUTO_PAD_SAME_LOWER,
    AUTO_PAD_VALID,
} auto_pad;

/* The sliding-window attributes of Conv, ConvTranspose and the pools. */
typedef struct window {
    int32_t n; /* spatial dims */
    int64_t kernel[INFD_MAX_RANK];
    int64_t strides[INFD_MAX_RANK];
    int64_t dilations[INFD_MAX_RANK];
    int64_t pads[2 * INFD_MAX_RANK]; /* n begins, then n ends */
    auto_pad pad;
} window;

/* An ints attribute of exactly n values, each >= min; `dflt` fills it when
 * the attribute is absent (or empty). */
static infd_status attr_dims(const ctx *c, const char *name, int32_t n, int64_t min, int64_t dflt,
                             int64_t *out, bool *present)
{
    const int64_t *v;
    int32_t count;
    TRY(attr_ints(c, name, &v, &count));
    if (present)
        *present = v && count;
    if (!v || !count) {
        for (int32_t i = 0; i < n; i++)
            out[i] = dflt;
        return INFD_STATUS_OK;
    }
    if (count != n)
        return fail(c, "attribute '%s' has %d values, expected %d", name, (int)count, (int)n);
    for (int32_t i = 0; i < n; i++) {
        if (v[i] < min)
            return fail(c,
                        "attribute '%s' has %" PRId64 " at index %d, expected a value >= %" PRId64,
                        name, v[i], (int)i, min);
        out[i] = v[i];
    }
    return INFD_STATUS_OK;
}

static infd_status read_auto_pad(const ctx *c, auto_pad *out)
{
    const char *s;
    TRY(attr_string(c, "auto_pad", "NOTSET", &s));
    if (strcmp(s, "NOTSET") == 0 || s[0] == '\0')
        *out = AUTO_PAD_NOTSET;
    else if (strcmp(s, "SAME_UPPER") == 0)
        *out = AUTO_PAD_SAME_UPPER;
    else if (strcmp(s, "SAME_LOWER") == 0)
        *out = AUTO_PAD_SAME_LOWER;
    else if (strcmp(s, "VALID") == 0)
        *out = AUTO_PAD_VALID;
    else
        return fail(c,
                    "attribute 'auto_pad' is '%s', expected NOTSET, SAME_UPPER, SAME_LOWER or "
                    "VALID",
                    s);
    return INFD_STATUS_OK;
}

/* Reads the window attributes for n spatial dims. `w_shape`, when not NULL,
 * is the weight input's shape whose dims from 2 on give the kernel (Conv,
 * ConvTranspose); pools need the kernel_shape attribute. */
static infd_status read_window(const ctx *c, int32_t n, const infd_shape *w_shape, window *w)
{
    bool has_kernel;
    w->n = n;
    TRY(attr_dims(c, "kernel_shape", n, 1, 0, w->kernel, &has_kernel));
    if (w_shape) {
        for (int32_t i = 0; i < n; i++) {
            int64_t k = w_shape->dims[2 + i];
            if (k < 1)
                return fail(c, "input 1 ('%s') has shape %s, expected kernel dims >= 1",
                            in_name(c, 1), str(w_shape).s);
            if (has_kernel && w->kernel[i] != k)
                return fail(c,
                            "attribute 'kernel_shape' has %" PRId64 " at index %d, expected "
                            "%" PRId64 " (input 1 ('%s') has shape %s)",
                            w->kernel[i], (int)i, k, in_name(c, 1), str(w_shape).s);
            w->kernel[i] = k;
        }
    } else if (!has_kernel) {
        return fail(c, "attribute 'kernel_shape' is required, got none");
    }
    TRY(attr_dims(c, "strides", n, 1, 1, w->strides, NULL));
    TRY(attr_dims(c, "dilations", n, 1, 1, w->dilations, NULL));
    TRY(attr_dims(c, "pads", 2 * n, 0, 0, w->pads, NULL));
    TRY(read_auto_pad(c, &w->pad));
    return INFD_STATUS_OK;
}

/* (kernel - 1) * dilation + 1, the extent of a dilated kernel. */
static infd_status effective_kernel(const ctx *c, const window *w, int32_t i, int64_t *out)
{
    if (__builtin_mul_overflow(w->kernel[i] - 1, w->dilations[i], out) ||
        __builtin_add_overflow(*out, 1, out))
        return fail(c,
                    "spatial dim %d: kernel %" PRId64 " with dilation %" PRId64 " overflows int64",
                    (int)i, w->kernel[i], w->dilations[i]);
    return INFD_STATUS_OK;
}

/* Output size of spatial dim i for an input of `in` (Conv and pools). SAME
 * ignores ceil_mode; NOTSET and VALID (pads 0) honour it, and then the last
 * window must still start inside the input or the leading padding
 * (PyTorch's rule, adopted by ONNX 1.16). */
static infd_status window_out(const ctx *c, const window *w, int32_t i, int64_t in, bool ceil_mode,
                              int64_t *out)
{
    int64_t ek, s = w->strides[i];
    TRY(effective_kernel(c, w, i, &ek));
    if (w->pad == AUTO_PAD_SAME_UPPER || w->pad == AUTO_PAD_SAME_LOWER) {
        *out = in / s + (in % s != 0);
        return INFD_STATUS_OK;
    }
    int64_t pb = 0, pe = 0, padded;
    if (w->pad == AUTO_PAD_NOTSET)
        pb = w->pads[i], pe = w->pads[w->n + i];
    if (__builtin_add_overflow(in, pb, &padded) || __builtin_add_overflow(padded, pe, &padded))
        return fail(c,
                    "spatial dim %d: input %" PRId64 " with pads %" PRId64 "+%" PRId64
                    " overflows int64",
                    (int)i, in, pb, pe);
    if (padded < ek)
        return fail(c,
                    "spatial dim %d: the padded input is %" PRId64 " (%" PRId64 " + pads %" PRId64
                    "+%" PRId64 "), expected at least the dilated kernel %" PRId64,
                    (int)i, padded, in, pb, pe, ek);
    int64_t span = padded - ek;
    int64_t n = span / s + 1;
    if (ceil_mode && span % s != 0) {
        int64_t start;
        n++;
        if (__builtin_mul_overflow(n - 1, s, &start) || start >= in + pb)
            n--;
    }
    *out = n;
    return INFD_STATUS_OK;
}

/* Conv: X [N, C, D...], W [M, C/group, k...], B [M]. */
static infd_status infer_conv(const ctx *c)
{
    infd_dtype xt, wt, bt;
    infd_shape x, w;
    int64_t group;
    window win;
    TRY(get_input_rank(c, 0, 3, &xt, &x));
    TRY(get_input(c, 1, &wt, &w));
    TRY(same_dtype(c, 1, wt, 0, xt));
    if (w.rank != x.rank)
        return fail(c, "input 1 ('%s') has shape %s, expected rank %d (the rank of input 0)",
                    in_name(c, 1), str(&w).s, (int)x.rank);
    TRY(attr_int(c, "group", 1, &group));
    if (group < 1)
        return fail(c, "attribute 'group' is %" PRId64 ", expected a value >= 1", group);
    int64_t m = w.dims[0];
    if (m % group != 0)
        return fail(c,
                    "input 1 ('%s') has %" PRId64 " output channels, expected a multiple of "
                    "group %" PRId64,
                    in_name(c, 1), m, group);
    if (x.dims[1] % group != 0 || x.dims[1] / group != w.dims[1])
        return fail(c,
                    "input 0 ('%s') has %" PRId64 " channels, expected %" PRId64 " x group %" PRId64
                    " (input 1 ('%s') has shape %s)",
                    in_name(c, 0), x.dims[1], w.dims[1], group, in_name(c, 1), str(&w).s);
    if (has_input(c, 2))
        TRY(per_channel(c, 2, m, &bt));
    TRY(read_window(c, x.rank - 2, &w, &win));
    infd_shape y = { .rank = x.rank, .dims = { x.dims[0], m } };
    for (int32_t i = 0; i < win.n; i++)
        TRY(window_out(c, &win, i, x.dims[2 + i], false, &y.dims[2 + i]));
    return set_output(c, 0, xt, &y);
}

/* ConvTranspose: X [N, C, D...], W [C, M/group, k...]; output channels M.
 * Spatial dims come from output_shape when given, else
 * stride * (in - 1) + output_padding + dilated kernel - pads (SAME: in *
 * stride). */
static infd_status infer_conv_transpose(const ctx *c)
{
    infd_dtype xt, wt, bt;
    infd_shape x, w;
    int64_t group;
    window win;
    TRY(get_input_rank(c, 0, 3, &xt, &x));
    TRY(get_input(c, 1, &wt, &w));
    TRY(same_dtype(c, 1, wt, 0, xt));
    if (w.rank != x.rank)
        return fail(c, "input 1 ('%s') has shape %s, expected rank %d (the rank of input 0)",
                    in_name(c, 1), str(&w).s, (int)x.rank);
    TRY(attr_int(c, "group", 1, &group));
    if (group < 1)
        return fail(c, "attribute 'group' is %" PRId64 ", expected a value >= 1", group);
    if (w.dims[0] != x.dims[1] || x.dims[1] % group != 0)
        return fail(c,
                    "input 0 ('%s') has %" PRId64 " channels, expected %" PRId64
                    " (dim 0 of input 1 ('%s'), a multiple of group %" PRId64 ")",
                    in_name(c, 0), x.dims[1], w.dims[0], in_name(c, 1), group);
    int64_t m;
    if (__builtin_mul_overflow(w.dims[1], group, &m))
        return fail(c, "output channels %" PRId64 " x group %" PRId64 " overflow int64", w.dims[1],
                    group);
    if (has_input(c, 2))
        TRY(per_channel(c, 2, m, &bt));
    int32_t n = x.rank - 2;
    TRY(read_window(c, n, &w, &win));
    int64_t out_pad[INFD_MAX_RANK];
    TRY(attr_dims(c, "output_padding", n, 0, 0, out_pad, NULL));
    const int64_t *os;
    int32_t n_os;
    TRY(attr_ints(c, "output_shape", &os, &n_os));
    if (os && n_os != n && n_os != n + 2)
        return fail(c, "attribute 'output_shape' has %d values, expected %d", (int)n_os, (int)n);
    infd_shape y = { .rank = x.rank, .dims = { x.dims[0], m } };
    for (int32_t i = 0; i < n; i++) {
        int64_t ek, o = 0;
        if (os) {
            o = os[n_os - n + i];
            if (o < 0)
                return fail(c,
                            "attribute 'output_shape' has %" PRId64 " at index %d, expected a "
                            "value >= 0",
                            o, (int)(n_os - n + i));
            y.dims[2 + i] = o;
            continue;
        }
        TRY(effective_kernel(c, &win, i, &ek));
        bool ok;
        if (win.pad == AUTO_PAD_SAME_UPPER || win.pad == AUTO_PAD_SAME_LOWER) {
            ok = !__builtin_mul_overflow(x.dims[2 + i], win.strides[i], &o);
        } else {
            int64_t pads = 0;
            if (win.pad == AUTO_PAD_NOTSET)
                ok = !__builtin_add_overflow(win.pads[i], win.pads[n + i], &pads);
            else
                ok = true;
            ok = ok && !__builtin_mul_overflow(win.strides[i], x.dims[2 + i] - 1, &o) &&
                 !__builtin_add_overflow(o, out_pad[i], &o) && !__builtin_add_overflow(o, ek, &o) &&
                 !__builtin_sub_overflow(o, pads, &o);
        }
        if (!ok)
            return fail(c, "spatial dim %d: the output size overflows int64", (int)i);
        if (o < 0)
            return fail(c,
                        "spatial dim %d: the output size would be %" PRId64 ", expected a "
                        "value >= 0 (check pads)",
                        (int)i, o);
        y.dims[2 + i] = o;
    }
    return set_output(c, 0, xt, &y);
}

/* MaxPool, AveragePool, LpPool: X [N, C, D...]; MaxPool's optional second
 * output holds INT64 indices. */
static infd_status infer_pool(const ctx *c)
{
    infd_dtype dt;
    infd_shape x;
    int64_t ceil_mode, storage_order;
    window win;
    TRY(get_input_rank(c, 0, 3, &dt, &x));
    TRY(read_window(c, x.rank - 2, NULL, &win));
    TRY(attr_int(c, "ceil_mode", 0, &ceil_mode));
    TRY(attr_int(c, "storage_order", 0, &storage_order));
    if (ceil_mode != 0 && ceil_mode != 1)
        return fail(c, "attribute 'ceil_mode' is %" PRId64 ", expected 0 or 1", ceil_mode);
    if (storage_order != 0 && storage_order != 1)
        return fail(c, "attribute 'storage_order' is %" PRId64 ", expected 0 or 1", storage_order);
    infd_shape y = x;
    for (int32_t i = 0; i < win.n; i++)
        TRY(window_out(c, &win, i, x.dims[2 + i], ceil_mode == 1, &y.dims[2 + i]));
    TRY(set_output(c, 0, dt, &y));
    return set_output(c, 1, INFD_DTYPE_INT64, &y);
}

/* GlobalAveragePool, GlobalMaxPool, GlobalLpPool: spatial dims become 1. */
static infd_status infer_global_pool(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    TRY(get_input_rank(c, 0, 3, &dt, &s));
    for (int32_t i = 2; i < s.rank; i++)
        s.dims[i] = 1;
    return set_output(c, 0, dt, &s);
}

/* ---- matrix products ---------------------------------------------------- */

/* Gemm: A [M, K] (or [K, M] with transA), B [K, N] (or [N, K]), C
 * broadcastable to [M, N]. */
static infd_status infer_gemm(const ctx *c)
{
    infd_dtype at, bt, ct;
    infd_shape a, b, cs;
    int64_t ta, tb;
    TRY(get_input(c, 0, &at, &a));
    TRY(get_input(c, 1, &bt, &b));
    TRY(same_dtype(c, 1, bt, 0, at));
    TRY(attr_int(c, "transA", 0, &ta));
    TRY(attr_int(c, "transB", 0, &tb));
    for (int32_t k = 0; k < 2; k++) {
        const infd_shape *s = k ? &b : &a;
        if (s->rank != 2)
            return fail(c, "input %d ('%s') has shape %s, expected rank 2", (int)k, in_name(c, k),
                        str(s).s);
    }
    int64_t m = ta ? a.dims[1] : a.dims[0], ka = ta ? a.dims[0] : a.dims[1];
    int64_t kb = tb ? b.dims[1] : b.dims[0], n = tb ? b.dims[0] : b.dims[1];
    if (ka != kb)
        return fail(c,
                    "input 1 ('%s') has shape %s (transB=%" PRId64 "), expected an inner dim of "
                    "%" PRId64 " to match input 0 %s (transA=%" PRId64 "), got %" PRId64,
                    in_name(c, 1), str(&b).s, tb, ka, str(&a).s, ta, kb);
    infd_shape y = { .rank = 2, .dims = { m, n } };
    if (has_input(c, 2)) {
        TRY(get_input(c, 2, &ct, &cs));
        if (!broadcasts_to(&cs, &y))
            return fail(c, "input 2 ('%s') has shape %s, expected a shape that broadcasts to %s",
                        in_name(c, 2), str(&cs).s, str(&y).s);
    }
    return set_output(c, 0, at, &y);
}

/* MatMul as numpy.matmul: 1-D operands gain a dim for the product and lose
 * it after; batch dims broadcast. */
static infd_status infer_matmul(const ctx *c)
{
    infd_dtype at, bt;
    infd_shape a, b;
    TRY(get_input_rank(c, 0, 1, &at, &a));
    TRY(get_input_rank(c, 1, 1, &bt, &b));
    TRY(same_dtype(c, 1, bt, 0, at));
    bool vec_a = a.rank == 1, vec_b = b.rank == 1;
    if (vec_a)
        a = (infd_shape){ .rank = 2, .dims = { 1, a.dims[0] } };
    if (vec_b)
        b = (infd_shape){ .rank = 2, .dims = { b.dims[0], 1 } };
    int64_t ka = a.dims[a.rank - 1], kb = b.dims[b.rank - 2];
    if (ka != kb)
        return fail(c,
                    "input 1 ('%s') has %" PRId64 " rows, expected %" PRId64 " (the columns "
                    "of input 0 ('%s'))",
                    in_name(c, 1), kb, ka, in_name(c, 0));
    infd_shape ba = { .rank = a.rank - 2 }, bb = { .rank = b.rank - 2 }, y;
    memcpy(ba.dims, a.dims, sizeof(int64_t) * (size_t)ba.rank);
    memcpy(bb.dims, b.dims, sizeof(int64_t) * (size_t)bb.rank);
    int32_t bad;
    if (!broadcast(&ba, &bb, &y, &bad))
        return fail(c,
                    "the batch dims of input 0 %s and input 1 %s do not broadcast: dim %d, "
                    "expected 1 or %" PRId64 ", got %" PRId64,
                    str(&ba).s, str(&bb).s, (int)bad, dim_from_right(&ba, bad),
                    dim_from_right(&bb, bad));
    if (y.rank + 2 - vec_a - vec_b > INFD_MAX_RANK)
        return fail(c, "the output rank would exceed infd's maximum %d", INFD_MAX_RANK);
    if (!vec_a)
        y.dims[y.rank++] = a.dims[a.rank - 2];
    if (!vec_b)
        y.dims[y.rank++] = b.dims[b.rank - 1];
    return set_output(c, 0, at, &y);
}

/* ---- shape manipulation ------------------------------------------------- */

static infd_status infer_flatten(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int64_t axis;
    TRY(get_input(c, 0, &dt, &s));
    TRY(attr_int(c, "axis", 1, &axis));
    if (axis < -(int64_t)s.rank || axis > s.rank)
        return fail(c, "attribute 'axis' is %" PRId64 ", expected a value in [%d, %d]", axis,
                    (int)-s.rank, (int)s.rank);
    int32_t a = (int32_t)(axis < 0 ? axis + s.rank : axis);
    infd_shape y = { .rank = 2, .dims = { 1, 1 } };
    for (int32_t i = 0; i < s.rank; i++) {
        if (__builtin_mul_overflow(y.dims[i >= a], s.dims[i], &y.dims[i >= a]))
            return fail(c, "the flattened dims overflow int64");
    }
    return set_output(c, 0, dt, &y);
}

/* Reshape: 0 copies the input dim (unless allowzero, opset 14), one -1 is
 * inferred from the element count. */
static infd_status infer_reshape(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int64_t spec[INFD_MAX_RANK], allowzero, numel;
    int32_t n;
    TRY(get_input(c, 0, &dt, &s));
    TRY(const_ints(c, 1, spec, INFD_MAX_RANK, &n));
    TRY(attr_int(c, "allowzero", 0, &allowzero));
    if (infd_shape_numel(&s, &numel, NULL) != INFD_STATUS_OK)
        return fail(c, "input 0 ('%s') has shape %s, expected at most INT64_MAX elements",
                    in_name(c, 0), str(&s).s);
    infd_shape y = { .rank = n };
    int32_t infer = -1;
    bool has_zero = false;
    int64_t known = 1;
    for (int32_t i = 0; i < n; i++) {
        int64_t d = spec[i];
        if (d == -1) {
            if (infer >= 0)
                return fail(c, "input 1 ('%s') has -1 at index %d and %d, expected at most one",
                            in_name(c, 1), (int)infer, (int)i);
            infer = i;
            continue;
        }
        if (d < -1)
            return fail(c, "input 1 ('%s') has %" PRId64 " at index %d, expected a dim >= -1",
                        in_name(c, 1), d, (int)i);
        if (d == 0 && !allowzero) {
            if (i >= s.rank)
                return fail(c,
                            "input 1 ('%s') has 0 (copy) at index %d, expected an index below "
                            "the input's rank %d",
                            in_name(c, 1), (int)i, (int)s.rank);
            d = s.dims[i];
        }
        has_zero |= d == 0;
        y.dims[i] = d;
        if (__builtin_mul_overflow(known, d, &known))
            return fail(c, "input 1 ('%s') gives a shape of more than INT64_MAX elements",
                        in_name(c, 1));
    }
    if (infer >= 0) {
        if (allowzero && has_zero)
            return fail(c,
                        "input 1 ('%s') has both 0 and -1 with allowzero=1, expected one of "
                        "them",
                        in_name(c, 1));
        if (known == 0 || numel % known != 0)
            return fail(c,
                        "cannot reshape %s (%" PRId64 " elements) with -1 into dims whose "
                        "product is %" PRId64 ", expected a divisor",
                        str(&s).s, numel, known);
        y.dims[infer] = numel / known;
        known = numel;
    }
    if (known != numel)
        return fail(c, "cannot reshape %s into %s, expected %" PRId64 " elements, got %" PRId64,
                    str(&s).s, str(&y).s, numel, known);
    return set_output(c, 0, dt, &y);
}

/* Shape, with start/end (opset 15) clamped to [0, rank]. */
static infd_status infer_shape_op(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int64_t start, end;
    TRY(get_input(c, 0, &dt, &s));
    TRY(attr_int(c, "start", 0, &start));
    TRY(attr_int(c, "end", INT64_MAX, &end));
    if (start < 0)
        start = start < -(int64_t)s.rank ? 0 : start + s.rank;
    if (end < 0)
        end = end < -(int64_t)s.rank ? 0 : end + s.rank;
    start = INFD_MIN(start, s.rank);
    end = INFD_MIN(end, s.rank);
    infd_shape y = { .rank = 1, .dims = { end > start ? end - start : 0 } };
    return set_output(c, 0, INFD_DTYPE_INT64, &y);
}

static infd_status infer_size(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    TRY(get_input(c, 0, &dt, &s));
    infd_shape y = { .rank = 0 };
    return set_output(c, 0, INFD_DTYPE_INT64, &y);
}

static infd_status infer_transpose(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    const int64_t *perm;
    int32_t n;
    TRY(get_input(c, 0, &dt, &s));
    TRY(attr_ints(c, "perm", &perm, &n));
    infd_shape y = { .rank = s.rank };
    if (!perm || n == 0) {
        for (int32_t i = 0; i < s.rank; i++)
            y.dims[i] = s.dims[s.rank - 1 - i];
        return set_output(c, 0, dt, &y);
    }
    if (n != s.rank)
        return fail(c, "attribute 'perm' has %d values, expected %d (the input's rank)", (int)n,
                    (int)s.rank);
    uint32_t seen = 0;
    for (int32_t i = 0; i < n; i++) {
        if (perm[i] < 0 || perm[i] >= s.rank || (seen & (1u << perm[i])))
            return fail(c,
                        "attribute 'perm' has %" PRId64 " at index %d, expected a permutation "
                        "of 0..%d",
                        perm[i], (int)i, (int)s.rank - 1);
        seen |= 1u << perm[i];
        y.dims[i] = s.dims[perm[i]];
    }
    return set_output(c, 0, dt, &y);
}

static infd_status infer_concat(const ctx *c)
{
    infd_dtype dt, t;
    infd_shape y, s;
    int64_t axis;
    int32_t a = 0;
    if (c->node->n_inputs < 1)
        return fail(c, "has no inputs, expected at least 1");
    TRY(get_input_rank(c, 0, 1, &dt, &y));
    if (!infd_ir_node_attr(c->node, "axis"))
        return fail(c, "attribute 'axis' is required, got none");
    TRY(attr_int(c, "axis", 0, &axis));
    TRY(norm_axis(c, "attribute 'axis'", axis, y.rank, &a));
    for (int32_t k = 1; k < c->node->n_inputs; k++) {
        TRY(get_input(c, k, &t, &s));
        TRY(same_dtype(c, k, t, 0, dt));
        if (s.rank != y.rank)
            return fail(c, "input %d ('%s') has shape %s, expected rank %d (the rank of input 0)",
                        (int)k, in_name(c, k), str(&s).s, (int)y.rank);
        for (int32_t i = 0; i < s.rank; i++) {
            if (i != a && s.dims[i] != y.dims[i])
                return fail(c,
                            "input %d ('%s') has shape %s, expected dim %d to be %" PRId64
                            " as in input 0, got %" PRId64,
                            (int)k, in_name(c, k), str(&s).s, (int)i, y.dims[i], s.dims[i]);
        }
        if (__builtin_add_overflow(y.dims[a], s.dims[a], &y.dims[a]))
            return fail(c, "the concatenated dim overflows int64");
    }
    return set_output(c, 0, dt, &y);
}

/* Split: sizes from the 'split' attribute (< 13) or input 1 (>= 13); else
 * num_outputs (18, last chunk smaller) or an even split over the outputs. */
static infd_status infer_split(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int64_t axis, num_outputs;
    int32_t a = 0, n_out = c->node->n_outputs;
    TRY(get_input(c, 0, &dt, &s));
    TRY(attr_int(c, "axis", 0, &axis));
    TRY(norm_axis(c, "attribute 'axis'", axis, s.rank, &a));
    TRY(attr_int(c, "num_outputs", -1, &num_outputs));
    int64_t dim = s.dims[a];
    const_view sizes = { 0 };
    const int64_t *attr_sizes = NULL;
    int32_t n_attr = 0;
    if (c->g->opset >= 13 && has_input(c, 1))
        TRY(const_input(c, 1, true, &sizes));
    else if (c->g->opset < 13)
        TRY(attr_ints(c, "split", &attr_sizes, &n_attr));
    if (attr_sizes && n_attr) {
        sizes = (const_view){ (const unsigned char *)attr_sizes, INFD_DTYPE_INT64, n_attr };
    }
    if (sizes.data) {
        if (sizes.n != n_out)
            return fail(c, "has %" PRId64 " split sizes, expected %d (one per output)", sizes.n,
                        (int)n_out);
        int64_t sum = 0;
        for (int32_t k = 0; k < n_out; k++) {
            int64_t d = view_int(&sizes, k);
            if (d < 0 || __builtin_add_overflow(sum, d, &sum))
                return fail(c, "split size %d is %" PRId64 ", expected a value >= 0", (int)k, d);
        }
        if (sum != dim)
            return fail(
                c, "split sizes add up to %" PRId64 ", expected %" PRId64 " (dim %d of input 0)",
                sum, dim, (int)a);
        for (int32_t k = 0; k < n_out; k++) {
            s.dims[a] = view_int(&sizes, k);
            TRY(set_output(c, k, dt, &s));
        }
        return INFD_STATUS_OK;
    }
    if (n_out < 1)
        return fail(c, "has no outputs, expected at least 1");
    int64_t chunk;
    if (num_outputs != -1) {
        if (num_outputs != n_out)
            return fail(c,
                        "attribute 'num_outputs' is %" PRId64 ", expected %d (the node's "
                        "outputs)",
                        num_outputs, (int)n_out);
        chunk = dim / n_out + (dim % n_out != 0);
    } else {
        if (dim % n_out != 0)
            return fail(c,
                        "dim %d of input 0 is %" PRId64 ", expected a multiple of the %d "
                        "outputs",
                        (int)a, dim, (int)n_out);
        chunk = dim / n_out;
    }
    int64_t left = dim;
    for (int32_t k = 0; k < n_out; k++) {
        s.dims[a] = INFD_MIN(chunk, left);
        left -= s.dims[a];
        TRY(set_output(c, k, dt, &s));
    }
    return INFD_STATUS_OK;
}

/* The axes of Squeeze, Unsqueeze and the reductions: the 'axes' attribute
 * before `input_opset`, input 1 from it. *present tells an absent list from
 * an empty one only for the input form. */
static infd_status read_axes(const ctx *c, int64_t input_opset, int64_t *axes, int32_t *n,
                             bool *present)
{
    *n = 0;
    *present = false;
    if (c->g->opset >= input_opset) {
        if (!has_input(c, 1))
            return INFD_STATUS_OK;
        *present = true;
        return const_ints(c, 1, axes, INFD_MAX_RANK, n);
    }
    const int64_t *a;
    int32_t count;
    TRY(attr_ints(c, "axes", &a, &count));
    if (!a)
        return INFD_STATUS_OK;
    if (count > INFD_MAX_RANK)
        return fail(c, "attribute 'axes' has %d values, expected at most %d", (int)count,
                    INFD_MAX_RANK);
    memcpy(axes, a, sizeof(int64_t) * (size_t)count);
    *n = count;
    *present = true;
    return INFD_STATUS_OK;
}

static infd_status infer_squeeze(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int64_t axes[INFD_MAX_RANK];
    int32_t n;
    bool present;
    uint32_t mask = 0;
    TRY(get_input(c, 0, &dt, &s));
    TRY(read_axes(c, 13, axes, &n, &present));
    if (n) {
        TRY(norm_axes(c, "axes", axes, n, s.rank, &mask));
        for (int32_t i = 0; i < s.rank; i++) {
            if ((mask & (1u << i)) && s.dims[i] != 1)
                return fail(c, "axis %d of input 0 ('%s') %s has size %" PRId64 ", expected 1",
                            (int)i, in_name(c, 0), str(&s).s, s.dims[i]);
        }
    } else {
        for (int32_t i = 0; i < s.rank; i++) {
            if (s.dims[i] == 1)
                mask |= 1u << i;
        }
    }
    infd_shape y = { .rank = 0 };
    for (int32_t i = 0; i < s.rank; i++) {
        if (!(mask & (1u << i)))
            y.dims[y.rank++] = s.dims[i];
    }
    return set_output(c, 0, dt, &y);
}

static infd_status infer_unsqueeze(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int64_t axes[INFD_MAX_RANK];
    int32_t n;
    bool present;
    uint32_t mask;
    TRY(get_input(c, 0, &dt, &s));
    TRY(read_axes(c, 13, axes, &n, &present));
    if (n == 0)
        return fail(c, "axes are required, got none");
    if (s.rank + n > INFD_MAX_RANK)
        return fail(c, "the output rank would be %d, expected at most %d", (int)(s.rank + n),
                    INFD_MAX_RANK);
    int32_t r = s.rank + n;
    TRY(norm_axes(c, "axes", axes, n, r, &mask));
    infd_shape y = { .rank = r };
    for (int32_t i = 0, j = 0; i < r; i++)
        y.dims[i] = (mask & (1u << i)) ? 1 : s.dims[j++];
    return set_output(c, 0, dt, &y);
}

/* Reduce*: axes from attribute before `input_opset` (13 for ReduceSum, 18
 * for the others), from input 1 after; empty axes reduce everything unless
 * noop_with_empty_axes. */
static infd_status reduce(const ctx *c, int64_t input_opset)
{
    infd_dtype dt;
    infd_shape s;
    int64_t axes[INFD_MAX_RANK], keepdims, noop;
    int32_t n;
    bool present;
    uint32_t mask;
    TRY(get_input(c, 0, &dt, &s));
    TRY(read_axes(c, input_opset, axes, &n, &present));
    TRY(attr_int(c, "keepdims", 1, &keepdims));
    TRY(attr_int(c, "noop_with_empty_axes", 0, &noop));
    if (n == 0) {
        if (noop && c->g->opset >= input_opset)
            return set_output(c, 0, dt, &s);
        mask = s.rank ? (uint32_t)((1ull << s.rank) - 1) : 0;
    } else {
        TRY(norm_axes(c, "axes", axes, n, s.rank, &mask));
    }
    infd_shape y = { .rank = 0 };
    for (int32_t i = 0; i < s.rank; i++) {
        if (!(mask & (1u << i)))
            y.dims[y.rank++] = s.dims[i];
        else if (keepdims)
            y.dims[y.rank++] = 1;
    }
    return set_output(c, 0, dt, &y);
}

static infd_status infer_reduce_sum(const ctx *c)
{
    return reduce(c, 13);
}

static infd_status infer_reduce(const ctx *c)
{
    return reduce(c, 18);
}

static infd_status infer_arg(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int64_t axis, keepdims;
    int32_t a = 0;
    TRY(get_input(c, 0, &dt, &s));
    TRY(attr_int(c, "axis", 0, &axis));
    TRY(attr_int(c, "keepdims", 1, &keepdims));
    TRY(norm_axis(c, "attribute 'axis'", axis, s.rank, &a));
    if (keepdims) {
        s.dims[a] = 1;
    } else {
        memmove(s.dims + a, s.dims + a + 1, sizeof(int64_t) * (size_t)(s.rank - a - 1));
        s.rank--;
    }
    return set_output(c, 0, INFD_DTYPE_INT64, &s);
}

/* SegmentArgMax (infd's, infd_plan_options.argmax): INT64 [..., n] for the
 * n segments [starts[k], ends[k]) of the last axis. */
static infd_status infer_segment_arg(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    TRY(get_input_rank(c, 0, 1, &dt, &s));
    if (dt != INFD_DTYPE_FP32)
        return fail(c, "input 0 ('%s') has dtype %s, expected FP32", in_name(c, 0),
                    infd_dtype_name(dt));
    const int64_t *st = NULL, *en = NULL;
    int32_t ns = 0, ne = 0;
    TRY(infd_ir_attr_ints(c->g, c->node, "starts", &st, &ns, c->err));
    TRY(infd_ir_attr_ints(c->g, c->node, "ends", &en, &ne, c->err));
    if (ns < 1 || ns != ne)
        return fail(c, "starts (%d) and ends (%d) must be equally many, at least one", ns, ne);
    int64_t len = s.dims[s.rank - 1];
    for (int32_t k = 0; k < ns; k++)
        if (st[k] < 0 || st[k] >= en[k] || (len >= 0 && en[k] > len))
            return fail(c, "segment %d [%lld, %lld) is not inside the last axis (%lld)", k,
                        (long long)st[k], (long long)en[k], (long long)len);
    s.dims[s.rank - 1] = ns;
    return set_output(c, 0, INFD_DTYPE_INT64, &s);
}

/* Gather: data[:axis] + indices.shape + data[axis+1:]. */
static infd_status infer_gather(const ctx *c)
{
    infd_dtype dt, it;
    infd_shape d, ind;
    int64_t axis;
    int32_t a = 0;
    TRY(get_input_rank(c, 0, 1, &dt, &d));
    TRY(get_input(c, 1, &it, &ind));
    if (!is_int_index_dtype(it))
        return fail(c, "input 1 ('%s') has dtype %s, expected INT64 or INT32", in_name(c, 1),
                    infd_dtype_name(it));
    TRY(attr_int(c, "axis", 0, &axis));
    TRY(norm_axis(c, "attribute 'axis'", axis, d.rank, &a));
    int32_t r = d.rank - 1 + ind.rank;
    if (r > INFD_MAX_RANK)
        return fail(c, "the output rank would be %d, expected at most %d", (int)r, INFD_MAX_RANK);
    infd_shape y = { .rank = 0 };
    for (int32_t i = 0; i < a; i++)
        y.dims[y.rank++] = d.dims[i];
    for (int32_t i = 0; i < ind.rank; i++)
        y.dims[y.rank++] = ind.dims[i];
    for (int32_t i = a + 1; i < d.rank; i++)
        y.dims[y.rank++] = d.dims[i];
    return set_output(c, 0, dt, &y);
}

static infd_status infer_gather_elements(const ctx *c)
{
    infd_dtype dt, it;
    infd_shape d, ind;
    int64_t axis;
    int32_t a = 0;
    TRY(get_input_rank(c, 0, 1, &dt, &d));
    TRY(get_input(c, 1, &it, &ind));
    if (!is_int_index_dtype(it))
        return fail(c, "input 1 ('%s') has dtype %s, expected INT64 or INT32", in_name(c, 1),
                    infd_dtype_name(it));
    if (ind.rank != d.rank)
        return fail(c, "input 1 ('%s') has shape %s, expected rank %d (the rank of input 0)",
                    in_name(c, 1), str(&ind).s, (int)d.rank);
    TRY(attr_int(c, "axis", 0, &axis));
    TRY(norm_axis(c, "attribute 'axis'", axis, d.rank, &a));
    return set_output(c, 0, dt, &ind);
}

/* DepthToSpace [N, C, H, W] -> [N, C/b^2, H*b, W*b]; SpaceToDepth the
 * inverse. */
static infd_status infer_depth_space(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int64_t b;
    TRY(get_input(c, 0, &dt, &s));
    if (s.rank != 4)
        return fail(c, "input 0 ('%s') has shape %s, expected rank 4", in_name(c, 0), str(&s).s);
    TRY(attr_int(c, "blocksize", 0, &b));
    if (b < 1 || b > INT32_MAX)
        return fail(c, "attribute 'blocksize' is %" PRId64 ", expected a value >= 1", b);
    if (strcmp(c->node->op_type, "DepthToSpace") == 0) {
        const char *mode;
        TRY(attr_string(c, "mode", "DCR", &mode));
        if (strcmp(mode, "DCR") != 0 && strcmp(mode, "CRD") != 0)
            return fail(c, "attribute 'mode' is '%s', expected DCR or CRD", mode);
        if (s.dims[1] % (b * b) != 0)
            return fail(c, "channels %" PRId64 " are not a multiple of blocksize^2 (%" PRId64 ")",
                        s.dims[1], b * b);
        s.dims[1] /= b * b;
        s.dims[2] *= b;
        s.dims[3] *= b;
    } else {
        if (s.dims[2] % b != 0 || s.dims[3] % b != 0)
            return fail(c, "spatial dims %s are not multiples of blocksize %" PRId64, str(&s).s, b);
        s.dims[1] *= b * b;
        s.dims[2] /= b;
        s.dims[3] /= b;
    }
    return set_output(c, 0, dt, &s);
}

/* CumSum: the shape of x; axis is a constant or run-time scalar. */
static infd_status infer_cumsum(const ctx *c)
{
    infd_dtype dt, at;
    infd_shape s, as;
    TRY(get_input_rank(c, 0, 1, &dt, &s));
    TRY(get_input(c, 1, &at, &as));
    if (!is_int_index_dtype(at) || as.rank > 1)
        return fail(c, "input 1 ('%s') must be an INT64 or INT32 scalar", in_name(c, 1));
    return set_output(c, 0, dt, &s);
}

/* EyeLike: the 2-D shape of the input; dtype from 'dtype' or the input's. */
static infd_status infer_eye_like(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int64_t to;
    TRY(get_input(c, 0, &dt, &s));
    if (s.rank != 2)
        return fail(c, "input 0 ('%s') has shape %s, expected rank 2", in_name(c, 0), str(&s).s);
    TRY(attr_int(c, "dtype", 0, &to));
    if (to != 0) {
        dt = to < INT32_MIN || to > INT32_MAX ? INFD_DTYPE_INVALID
                                              : infd_dtype_from_onnx((int32_t)to);
        if (dt == INFD_DTYPE_INVALID || infd_dtype_size(dt) == 0)
            return fail(c, "attribute 'dtype' is %" PRId64 ", expected a numeric type", to);
    }
    return set_output(c, 0, dt, &s);
}

/* OneHot: indices' shape with the constant depth inserted at axis; the
 * dtype of values. */
static infd_status infer_one_hot(const ctx *c)
{
    infd_dtype it, dt, vt;
    infd_shape s, ds, vs;
    const_view v;
    int64_t axis;
    int32_t a = 0;
    TRY(get_input(c, 0, &it, &s));
    TRY(get_input(c, 1, &dt, &ds));
    TRY(get_input(c, 2, &vt, &vs));
    if (s.rank + 1 > INFD_MAX_RANK)
        return fail(c, "input 0 ('%s') has rank %d, too many for OneHot", in_name(c, 0),
                    (int)s.rank);
    TRY(const_input(c, 1, is_int_index_dtype(dt), &v));
    if (v.n != 1)
        return fail(c, "input 1 ('%s') has %" PRId64 " elements, expected one", in_name(c, 1), v.n);
    double depth = is_int_index_dtype(dt) ? (double)view_int(&v, 0) : view_double(&v, 0);
    if (!(depth >= 1 && depth <= (double)INT32_MAX))
        return fail(c, "depth is %g, expected a value >= 1", depth);
    TRY(attr_int(c, "axis", -1, &axis));
    TRY(norm_axis(c, "attribute 'axis'", axis, s.rank + 1, &a));
    memmove(s.dims + a + 1, s.dims + a, sizeof(int64_t) * (size_t)(s.rank - a));
    s.dims[a] = (int64_t)depth;
    s.rank++;
    return set_output(c, 0, vt, &s);
}

/* Expand: input broadcast with the constant shape (both ways, as numpy). */
static infd_status infer_expand(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int64_t dims[INFD_MAX_RANK];
    int32_t n;
    TRY(get_input(c, 0, &dt, &s));
    TRY(const_ints(c, 1, dims, INFD_MAX_RANK, &n));
    infd_shape t = { .rank = n };
    for (int32_t i = 0; i < n; i++) {
        if (dims[i] < 0)
            return fail(c, "input 1 ('%s') has %" PRId64 " at index %d, expected a dim >= 0",
                        in_name(c, 1), dims[i], (int)i);
        t.dims[i] = dims[i];
    }
    TRY(broadcast_input(c, 1, &t, &s));
    return set_output(c, 0, dt, &s);
}

static infd_status infer_tile(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int64_t reps[INFD_MAX_RANK];
    int32_t n;
    TRY(get_input(c, 0, &dt, &s));
    TRY(const_ints(c, 1, reps, INFD_MAX_RANK, &n));
    if (n != s.rank)
        return fail(c, "input 1 ('%s') has %d repeats, expected %d (the rank of input 0)",
                    in_name(c, 1), (int)n, (int)s.rank);
    for (int32_t i = 0; i < n; i++) {
        if (reps[i] < 0)
            return fail(c, "input 1 ('%s') has %" PRId64 " at index %d, expected a repeat >= 0",
                        in_name(c, 1), reps[i], (int)i);
        if (__builtin_mul_overflow(s.dims[i], reps[i], &s.dims[i]))
            return fail(c, "dim %d times %" PRId64 " repeats overflows int64", (int)i, reps[i]);
    }
    return set_output(c, 0, dt, &s);
}

/* Pad: pads from the attribute (< 11) or input 1 (>= 11), optionally for
 * the axes of input 3 (18); negative pads crop. */
static infd_status infer_pad(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int64_t pads[2 * INFD_MAX_RANK], axes[INFD_MAX_RANK];
    int32_t n_pads = 0, n_axes;
    TRY(get_input(c, 0, &dt, &s));
    if (c->g->opset >= 11) {
        TRY(const_ints(c, 1, pads, 2 * INFD_MAX_RANK, &n_pads));
    } else {
        const int64_t *p;
        TRY(attr_ints(c, "pads", &p, &n_pads));
        if (n_pads > 2 * INFD_MAX_RANK)
            return fail(c, "attribute 'pads' has %d values, expected %d", (int)n_pads,
                        (int)(2 * s.rank));
        if (n_pads)
            memcpy(pads, p, sizeof(int64_t) * (size_t)n_pads);
    }
    if (c->g->opset >= 18 && has_input(c, 3)) {
        TRY(const_ints(c, 3, axes, INFD_MAX_RANK, &n_axes));
    } else {
        n_axes = s.rank;
        for (int32_t i = 0; i < s.rank; i++)
            axes[i] = i;
    }
    if (n_pads != 2 * n_axes)
        return fail(c, "pads has %d values, expected %d (two per axis)", (int)n_pads,
                    (int)(2 * n_axes));
    uint32_t mask;
    TRY(norm_axes(c, "axes", axes, n_axes, s.rank, &mask));
    for (int32_t i = 0; i < n_axes; i++) {
        int32_t a = (int32_t)(axes[i] < 0 ? axes[i] + s.rank : axes[i]);
        int64_t d;
        if (__builtin_add_overflow(s.dims[a], pads[i], &d) ||
            __builtin_add_overflow(d, pads[n_axes + i], &d))
            return fail(c, "dim %d with pads overflows int64", (int)a);
        if (d < 0)
            return fail(c, "dim %d would be %" PRId64 " after padding, expected a value >= 0",
                        (int)a, d);
        s.dims[a] = d;
    }
    return set_output(c, 0, dt, &s);
}

/* ---- constants and generators ------------------------------------------- */

/* The dtype a ConstantOfShape or Constant 'value' tensor attribute names. */
static infd_status tensor_attr(const ctx *c, const infd_ir_attr *a, const infd_ir_value **out)
{
    *out = NULL; /* as get_input: defined on every path */
    if (a->type != INFD_IR_ATTR_TENSOR)
        return fail(c, "attribute '%s' has type %d, expected a tensor", a->name, (int)a->type);
    if (a->tensor < 0 || a->tensor >= c->g->n_values || !c->g->values[a->tensor].data)
        return fail(c, "attribute '%s' holds no tensor data, expected a numeric tensor", a->name);
    *out = &c->g->values[a->tensor];
    return INFD_STATUS_OK;
}

static infd_status infer_constant_of_shape(const ctx *c)
{
    int64_t dims[INFD_MAX_RANK];
    int32_t n;
    TRY(const_ints(c, 0, dims, INFD_MAX_RANK, &n));
    infd_shape y = { .rank = n };
    for (int32_t i = 0; i < n; i++) {
        if (dims[i] < 0)
            return fail(c, "input 0 ('%s') has %" PRId64 " at index %d, expected a dim >= 0",
                        in_name(c, 0), dims[i], (int)i);
        y.dims[i] = dims[i];
    }
    infd_dtype dt = INFD_DTYPE_FP32;
    const infd_ir_attr *a = infd_ir_node_attr(c->node, "value");
    if (a) {
        const infd_ir_value *v;
        int64_t numel;
        TRY(tensor_attr(c, a, &v));
        infd_shape vs = { .rank = v->shape.rank };
        for (int32_t i = 0; i < vs.rank; i++)
            vs.dims[i] = v->shape.dims[i].value;
        if (infd_shape_numel(&vs, &numel, NULL) != INFD_STATUS_OK || numel != 1)
            return fail(c, "attribute 'value' has shape %s, expected one element", str(&vs).s);
        dt = v->dtype;
    }
    return set_output(c, 0, dt, &y);
}

/* Constant data of `n` elements of `es` bytes in the weight arena. */
static infd_status constant_data(const ctx *c, const void *src, size_t n, size_t es, void **out)
{
    size_t bytes = n * es;
    *out = infd_arena_alloc(&c->g->weights, bytes ? bytes : 1, INFD_ALIGNMENT);
    if (!*out)
        return infd_error_set(c->err, INFD_STATUS_OUT_OF_MEMORY,
                              "%s: node '%s' (%s): out of memory for %zu bytes of constant data",
                              c->g->source, c->node->name, c->node->op_type, bytes);
    if (bytes)
        memcpy(*out, src, bytes);
    return INFD_STATUS_OK;
}

/* Constant: the output takes the attribute's dtype, shape and data. */
static infd_status infer_constant(const ctx *c)
{
    if (c->node->n_outputs < 1 || c->node->outputs[0] < 0)
        return INFD_STATUS_OK;
    infd_ir_value *out = &c->g->values[c->node->outputs[0]];
    const infd_ir_attr *a = NULL;
    for (int32_t i = 0; i < c->node->n_attrs && !a; i++) {
        if (strncmp(c->node->attrs[i].name, "value", 5) == 0 ||
            strcmp(c->node->attrs[i].name, "sparse_value") == 0)
            a = &c->node->attrs[i];
    }
    if (!a)
        return fail(c, "expected one of the attributes value, value_float, value_floats, "
                       "value_int, value_ints, got none");
    infd_dtype dt;
    infd_shape s = { .rank = 0 };
    const void *data = NULL;
    size_t nbytes = 0;
    void *copy;
    if (strcmp(a->name, "value") == 0) {
        const infd_ir_value *v;
        TRY(tensor_attr(c, a, &v));
        dt = v->dtype;
        s.rank = v->shape.rank;
        for (int32_t i = 0; i < s.rank; i++)
            s.dims[i] = v->shape.dims[i].value;
        data = v->data;
        nbytes = v->nbytes;
    } else if (strcmp(a->name, "value_float") == 0) {
        float f;
        TRY(attr_float(c, "value_float", 0.0f, &f));
        TRY(constant_data(c, &f, 1, sizeof(f), &copy));
        dt = INFD_DTYPE_FP32, data = copy, nbytes = sizeof(f);
    } else if (strcmp(a->name, "value_int") == 0) {
        int64_t i;
        TRY(attr_int(c, "value_int", 0, &i));
        TRY(constant_data(c, &i, 1, sizeof(i), &copy));
        dt = INFD_DTYPE_INT64, data = copy, nbytes = sizeof(i);
    } else if (strcmp(a->name, "value_ints") == 0) {
        const int64_t *v;
        int32_t n;
        TRY(attr_ints(c, "value_ints", &v, &n));
        TRY(constant_data(c, v, (size_t)n, sizeof(int64_t), &copy));
        dt = INFD_DTYPE_INT64, data = copy, nbytes = (size_t)n * sizeof(int64_t);
        s = (infd_shape){ .rank = 1, .dims = { n } };
    } else if (strcmp(a->name, "value_floats") == 0) {
        if (a->type != INFD_IR_ATTR_FLOATS)
            return fail(c, "attribute 'value_floats' has type %d, expected floats", (int)a->type);
        TRY(constant_data(c, a->floats, (size_t)a->n, sizeof(float), &copy));
        dt = INFD_DTYPE_FP32, data = copy, nbytes = (size_t)a->n * sizeof(float);
        s = (infd_shape){ .rank = 1, .dims = { a->n } };
    } else {
        return infd_error_set(c->err, INFD_STATUS_UNIMPLEMENTED,
                              "%s: node '%s' (%s): attribute '%s' is not supported; infd "
                              "carries dense numeric constants only",
                              c->g->source, c->node->name, c->node->op_type, a->name);
    }
    TRY(set_output(c, 0, dt, &s));
    out->data = data;
    out->nbytes = nbytes;
    return INFD_STATUS_OK;
}

/* Range: max(ceil((limit - start) / delta), 0) elements of start's type. */
static infd_status infer_range(const ctx *c)
{
    infd_dtype dt[3];
    infd_shape s[3];
    const_view v[3];
    for (int32_t k = 0; k < 3; k++) {
        TRY(get_input(c, k, &dt[k], &s[k]));
        if (k)
            TRY(same_dtype(c, k, dt[k], 0, dt[0]));
        const infd_ir_value *val = in_value(c, k);
        if (!val->data)
            return not_constant(c, k, val->name);
        int64_t numel;
        size_t es = infd_dtype_size(dt[k]);
        if (infd_shape_numel(&s[k], &numel, NULL) != INFD_STATUS_OK || numel != 1)
            return fail(c, "input %d ('%s') has shape %s, expected a scalar", (int)k, in_name(c, k),
                        str(&s[k]).s);
        if (es == 0 || val->nbytes < es)
            return fail(c, "input %d ('%s') holds %zu bytes of %s, expected one element", (int)k,
                        val->name, val->nbytes, infd_dtype_name(dt[k]));
        v[k] = (const_view){ val->data, dt[k], 1 };
    }
    uint64_t n;
    if (is_float_dtype(dt[0])) {
        double start = view_double(&v[0], 0), limit = view_double(&v[1], 0);
        double delta = view_double(&v[2], 0);
        if (delta == 0)
            return fail(c, "input 2 ('%s') is 0, expected a non-zero delta", in_name(c, 2));
        double q = ceil((limit - start) / delta);
        if (!isfinite(q) || q >= 9.2e18)
            return fail(c, "start %g, limit %g and delta %g give no finite element count", start,
                        limit, delta);
        n = q > 0 ? (uint64_t)q : 0;
    } else {
        int64_t start = view_int(&v[0], 0), limit = view_int(&v[1], 0);
        int64_t delta = view_int(&v[2], 0);
        if (delta == 0)
            return fail(c, "input 2 ('%s') is 0, expected a non-zero delta", in_name(c, 2));
        uint64_t span, step;
        if (delta > 0) {
            span = limit > start ? (uint64_t)limit - (uint64_t)start : 0;
            step = (uint64_t)delta;
        } else {
            span = start > limit ? (uint64_t)start - (uint64_t)limit : 0;
            step = 0 - (uint64_t)delta;
        }
        n = span / step + (span % step != 0);
    }
    if (n > INT64_MAX)
        return fail(c, "the output would have more than INT64_MAX elements");
    infd_shape y = { .rank = 1, .dims = { (int64_t)n } };
    return set_output(c, 0, dt[0], &y);
}

/* ---- slicing ------------------------------------------------------------ */

/* Output length of one sliced axis, clamping as the ONNX spec says. */
static int64_t slice_len(int64_t dim, int64_t start, int64_t end, int64_t step)
{
    if (dim == 0)
        return 0;
    if (start < 0)
        start += dim;
    if (end < 0)
        end += dim;
    if (step > 0) {
        start = start < 0 ? 0 : INFD_MIN(start, dim);
        end = end < 0 ? 0 : INFD_MIN(end, dim);
        if (end <= start)
            return 0;
        uint64_t span = (uint64_t)(end - start);
        return (int64_t)(span / (uint64_t)step + (span % (uint64_t)step != 0));
    }
    start = start < 0 ? 0 : INFD_MIN(start, dim - 1);
    end = end < -1 ? -1 : INFD_MIN(end, dim - 1);
    if (start <= end)
        return 0;
    uint64_t span = (uint64_t)(start - end), ustep = 0 - (uint64_t)step;
    return (int64_t)(span / ustep + (span % ustep != 0));
}

/* Slice: starts/ends/axes attributes before opset 10, inputs (with steps)
 * from 10. */
static infd_status infer_slice(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int64_t starts[INFD_MAX_RANK], ends[INFD_MAX_RANK], axes[INFD_MAX_RANK], steps[INFD_MAX_RANK];
    int32_t n_starts, n_ends, n_axes = -1, n_steps = -1;
    TRY(get_input(c, 0, &dt, &s));
    if (c->g->opset >= 10) {
        TRY(const_ints(c, 1, starts, INFD_MAX_RANK, &n_starts));
        TRY(const_ints(c, 2, ends, INFD_MAX_RANK, &n_ends));
        if (has_input(c, 3))
            TRY(const_ints(c, 3, axes, INFD_MAX_RANK, &n_axes));
        if (has_input(c, 4))
            TRY(const_ints(c, 4, steps, INFD_MAX_RANK, &n_steps));
    } else {
        static const char *const names[3] = { "starts", "ends", "axes" };
        int64_t *dst[3] = { starts, ends, axes };
        int32_t *cnt[3] = { &n_starts, &n_ends, &n_axes };
        for (int32_t i = 0; i < 3; i++) {
            const int64_t *v;
            int32_t n;
            TRY(attr_ints(c, names[i], &v, &n));
            if (!v && i < 2)
                return fail(c, "attribute '%s' is required, got none", names[i]);
            if (!v)
                continue;
            if (n > INFD_MAX_RANK)
                return fail(c, "attribute '%s' has %d values, expected at most %d", names[i],
                            (int)n, INFD_MAX_RANK);
            memcpy(dst[i], v, sizeof(int64_t) * (size_t)n);
            *cnt[i] = n;
        }
    }
    if (n_ends != n_starts)
        return fail(c, "has %d starts and %d ends, expected as many ends as starts", (int)n_starts,
                    (int)n_ends);
    if (n_axes >= 0 && n_axes != n_starts)
        return fail(c, "has %d axes, expected %d (one per start)", (int)n_axes, (int)n_starts);
    if (n_steps >= 0 && n_steps != n_starts)
        return fail(c, "has %d steps, expected %d (one per start)", (int)n_steps, (int)n_starts);
    if (n_axes < 0) {
        for (int32_t i = 0; i < n_starts; i++)
            axes[i] = i;
    }
    uint32_t mask;
    TRY(norm_axes(c, "axes", axes, n_starts, s.rank, &mask));
    for (int32_t i = 0; i < n_starts; i++) {
        int64_t step = n_steps >= 0 ? steps[i] : 1;
        if (step == 0)
            return fail(c, "step %d is 0, expected a non-zero step", (int)i);
        int32_t a = (int32_t)(axes[i] < 0 ? axes[i] + s.rank : axes[i]);
        s.dims[a] = slice_len(s.dims[a], starts[i], ends[i], step);
    }
    return set_output(c, 0, dt, &s);
}

/* ---- resizing ----------------------------------------------------------- */

/* Output dims from scales: floor(in * scale) for the listed axes. */
static infd_status apply_scales(const ctx *c, const char *what, const const_view *v,
                                const int32_t *axes, int32_t n, infd_shape *s)
{
    for (int32_t i = 0; i < n; i++) {
        double sc = view_double(v, i);
        if (!(sc > 0) || !isfinite(sc))
            return fail(c, "%s has scale %g at index %d, expected a finite scale > 0", what, sc,
                        (int)i);
        double d = floor((double)s->dims[axes[i]] * sc);
        if (d >= 9.2e18)
            return fail(c, "dim %d scaled by %g overflows int64", (int)axes[i], sc);
        s->dims[axes[i]] = (int64_t)d;
    }
    return INFD_STATUS_OK;
}

/* Resize: opset 10 reads (X, scales); 11+ (X, roi, scales, sizes), an empty
 * scales or sizes counting as absent; 18 adds 'axes' and
 * keep_aspect_ratio_policy. */
static infd_status infer_resize(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int32_t axes[INFD_MAX_RANK], n_axes;
    TRY(get_input(c, 0, &dt, &s));
    const int64_t *attr_axes = NULL;
    int32_t n_attr_axes = 0;
    if (c->g->opset >= 18)
        TRY(attr_ints(c, "axes", &attr_axes, &n_attr_axes));
    if (attr_axes && n_attr_axes) {
        uint32_t mask;
        if (n_attr_axes > s.rank)
            return fail(c, "attribute 'axes' has %d values, expected at most %d", (int)n_attr_axes,
                        (int)s.rank);
        TRY(norm_axes(c, "attribute 'axes'", attr_axes, n_attr_axes, s.rank, &mask));
        for (int32_t i = 0; i < n_attr_axes; i++)
            axes[i] = (int32_t)(attr_axes[i] < 0 ? attr_axes[i] + s.rank : attr_axes[i]);
        n_axes = n_attr_axes;
    } else {
        for (int32_t i = 0; i < s.rank; i++)
            axes[i] = i;
        n_axes = s.rank;
    }
    int32_t k_scales = c->g->opset >= 11 ? 2 : 1, k_sizes = c->g->opset >= 11 ? 3 : -1;
    const_view v;
    if (k_sizes > 0 && has_nonempty_input(c, k_sizes)) {
        if (has_nonempty_input(c, k_scales))
            return fail(c, "has both scales and sizes, expected only one of them");
        TRY(const_input(c, k_sizes, true, &v));
        if (v.n != n_axes)
            return fail(c, "input %d ('%s') has %" PRId64 " sizes, expected %d", (int)k_sizes,
                        in_name(c, k_sizes), v.n, (int)n_axes);
        const char *policy;
        TRY(attr_string(c, "keep_aspect_ratio_policy", "stretch", &policy));
        bool not_larger = strcmp(policy, "not_larger") == 0;
        bool not_smaller = strcmp(policy, "not_smaller") == 0;
        if (!not_larger && !not_smaller && strcmp(policy, "stretch") != 0)
            return fail(c,
                        "attribute 'keep_aspect_ratio_policy' is '%s', expected stretch, "
                        "not_larger or not_smaller",
                        policy);
        double scale = not_larger ? INFINITY : 0;
        for (int32_t i = 0; i < n_axes; i++) {
            int64_t d = view_int(&v, i);
            if (d < 0)
                return fail(c,
                            "input %d ('%s') has size %" PRId64 " at index %d, expected a "
                            "size >= 0",
                            (int)k_sizes, in_name(c, k_sizes), d, (int)i);
            double r = s.dims[axes[i]] ? (double)d / (double)s.dims[axes[i]] : 1.0;
            scale = not_larger ? fmin(scale, r) : fmax(scale, r);
            if (!not_larger && !not_smaller)
                s.dims[axes[i]] = d;
        }
        for (int32_t i = 0; i < n_axes && (not_larger || not_smaller); i++) {
            double d = floor((double)s.dims[axes[i]] * scale + 0.5);
            if (d >= 9.2e18)
                return fail(c, "dim %d scaled by %g overflows int64", (int)axes[i], scale);
            s.dims[axes[i]] = (int64_t)d;
        }
        return set_output(c, 0, dt, &s);
    }
    if (!has_nonempty_input(c, k_scales))
        return fail(c, "has neither scales nor sizes, expected one of them");
    TRY(const_input(c, k_scales, false, &v));
    if (v.n != n_axes)
        return fail(c, "input %d ('%s') has %" PRId64 " scales, expected %d", (int)k_scales,
                    in_name(c, k_scales), v.n, (int)n_axes);
    char what[300];
    snprintf(what, sizeof(what), "input %d ('%s')", (int)k_scales, in_name(c, k_scales));
    TRY(apply_scales(c, what, &v, axes, n_axes, &s));
    return set_output(c, 0, dt, &s);
}

/* Upsample (opsets 7 to 9): scales attribute before 9, input 1 from 9. */
static infd_status infer_upsample(const ctx *c)
{
    infd_dtype dt;
    infd_shape s;
    int32_t axes[INFD_MAX_RANK];
    const_view v;
    TRY(get_input(c, 0, &dt, &s));
    if (c->g->opset >= 9) {
        TRY(const_input(c, 1, false, &v));
    } else {
        const infd_ir_attr *a = infd_ir_node_attr(c->node, "scales");
        if (!a || a->type != INFD_IR_ATTR_FLOATS)
            return fail(c, "attribute 'scales' is required as floats, got %s",
                        a ? "another type" : "none");
        v = (const_view){ (const unsigned char *)a->floats, INFD_DTYPE_FP32, a->n };
    }
    if (v.n != s.rank)
        return fail(c, "has %" PRId64 " scales, expected %d (the input's rank)", v.n, (int)s.rank);
    for (int32_t i = 0; i < s.rank; i++)
        axes[i] = i;
    TRY(apply_scales(c, c->g->opset >= 9 ? "input 1" : "attribute 'scales'", &v, axes, s.rank, &s));
    return set_output(c, 0, dt, &s);
}

/* ---- the table ---------------------------------------------------------- */

typedef struct op_entry {
    const char *op;
    shape_fn fn;
} op_entry;

static const op_entry ops[] = {
    { "Abs", infer_same },
    { "Acos", infer_same },
    { "Add", infer_broadcast_same },
    { "And", infer_broadcast_same },
    { "ArgMax", infer_arg },
    { "SegmentArgMax", infer_segment_arg },
    { "ArgMin", infer_arg },
    { "Asin", infer_same },
    { "Atan", infer_same },
    { "AveragePool", infer_pool },
    { "BatchNormalization", infer_batchnorm },
    { "Cast", infer_cast },
    { "CastLike", infer_cast_like },
    { "Ceil", infer_same },
    { "Celu", infer_same },
    { "Clip", infer_clip },
    { "Concat", infer_concat },
    { "Constant", infer_constant },
    { "ConstantOfShape", infer_constant_of_shape },
    { "Conv", infer_conv },
    { "ConvTranspose", infer_conv_transpose },
    { "CumSum", infer_cumsum },
    { "DepthToSpace", infer_depth_space },
    { "Cos", infer_same },
    { "Div", infer_broadcast_same },
    { "Dropout", infer_dropout },
    { "Elu", infer_same },
    { "Equal", infer_compare },
    { "Erf", infer_same },
    { "Exp", infer_same },
    { "Expand", infer_expand },
    { "EyeLike", infer_eye_like },
    { "Flatten", infer_flatten },
    { "Floor", infer_same },
    { "Gather", infer_gather },
    { "GatherElements", infer_gather_elements },
    { "Gelu", infer_same },
    { "Gemm", infer_gemm },
    { "GlobalAveragePool", infer_global_pool },
    { "GlobalLpPool", infer_global_pool },
    { "GlobalMaxPool", infer_global_pool },
    { "Greater", infer_compare },
    { "GreaterOrEqual", infer_compare },
    { "HardSigmoid", infer_same },
    { "HardSwish", infer_same },
    { "Hardmax", infer_softmax },
    { "Identity", infer_same },
    { "InstanceNormalization", infer_instancenorm },
    { "IsInf", infer_float_test },
    { "IsNaN", infer_float_test },
    { "LRN", infer_lrn },
    { "LSTM", infer_lstm },
    { "LayerNormalization", infer_layernorm },
    { "LeakyRelu", infer_same },
    { "Less", infer_compare },
    { "LessOrEqual", infer_compare },
    { "Log", infer_same },
    { "LogSoftmax", infer_softmax },
    { "LpPool", infer_pool },
    { "MatMul", infer_matmul },
    { "Max", infer_broadcast_same },
    { "MaxPool", infer_pool },
    { "Mean", infer_broadcast_same },
    { "Min", infer_broadcast_same },
    { "Mish", infer_same },
    { "Mod", infer_broadcast_same },
    { "Mul", infer_broadcast_same },
    { "Neg", infer_same },
    { "Not", infer_not },
    { "OneHot", infer_one_hot },
    { "Or", infer_broadcast_same },
    { "PRelu", infer_broadcast_same },
    { "Pad", infer_pad },
    { "Pow", infer_pow },
    { "Range", infer_range },
    { "Reciprocal", infer_same },
    { "ReduceL1", infer_reduce },
    { "ReduceL2", infer_reduce },
    { "ReduceLogSum", infer_reduce },
    { "ReduceLogSumExp", infer_reduce },
    { "ReduceMax", infer_reduce },
    { "ReduceMean", infer_reduce },
    { "ReduceMin", infer_reduce },
    { "ReduceProd", infer_reduce },
    { "ReduceSum", infer_reduce_sum },
    { "ReduceSumSquare", infer_reduce },
    { "Relu", infer_same },
    { "Reshape", infer_reshape },
    { "Resize", infer_resize },
    { "Round", infer_same },
    { "Selu", infer_same },
    { "Shape", infer_shape_op },
    { "Sigmoid", infer_same },
    { "Sign", infer_same },
    { "Sin", infer_same },
    { "Size", infer_size },
    { "Slice", infer_slice },
    { "Softmax", infer_softmax },
    { "Softplus", infer_same },
    { "Softsign", infer_same },
    { "SpaceToDepth", infer_depth_space },
    { "Split", infer_split },
    { "Sqrt", infer_same },
    { "Squeeze", infer_squeeze },
    { "Sub", infer_broadcast_same },
    { "Sum", infer_broadcast_same },
    { "Tan", infer_same },
    { "Tanh", infer_same },
    { "ThresholdedRelu", infer_same },
    { "Tile", infer_tile },
    { "Transpose", infer_transpose },
    { "Trilu", infer_same },
    { "Unsqueeze", infer_unsqueeze },
    { "Upsample", infer_upsample },
    { "Where", infer_where },
    { "Xor", infer_broadcast_same },
};

static shape_fn find_op(const char *op_type)
{
    for (size_t i = 0; i < INFD_ARRAY_SIZE(ops); i++) {
        if (strcmp(ops[i].op, op_type) == 0)
            return ops[i].fn;
    }
    return NULL;
}

static bool is_default_domain(const char *domain)
{
    return !domain || domain[0] == '\0' || strcmp(domain, "ai.onnx") == 0;
}

bool infd_shape_has_op(const char *op_type)
{
    return op_type && find_op(op_type) != NULL;
}

infd_status infd_shape_infer_node(infd_ir_graph *g, int32_t node, infd_error *err)
{
    INFD_ASSERT(g && node >= 0 && node < g->n_nodes);
    const infd_ir_node *n = &g->nodes[node];
    shape_fn fn = is_default_domain(n->domain) ? find_op(n->op_type) : NULL;
    if (!fn)
        return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED,
                              "%s: node '%s' (%s): no shape inference for operator %s%s%s",
                              g->source, n->name, n->op_type,
                              is_default_domain(n->domain) ? "" : n->domain,
                              is_default_domain(n->domain) ? "" : ".", n->op_type);
    ctx c = { .g = g, .node = n, .err = err };
    return fn(&c);
}
