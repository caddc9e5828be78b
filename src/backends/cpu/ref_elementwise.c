/*
 * ref_elementwise.c - elementwise kernels with numpy broadcasting:
 * arithmetic (Add, Sub, Mul, Div, Pow, and variadic Min, Max, Sum, Mean) in
 * every numeric dtype, comparisons (Equal, Less, Greater, LessOrEqual,
 * GreaterOrEqual), logic (And, Or, Xor, Not), Where, and unary math (FP32,
 * FP16 and BF16; the integer-friendly ones also on integers).
 *
 * Broadcasting is collapsed at compile (ref_bcast); run() walks output rows
 * where every input steps by 0 or 1, and calls one row function chosen at
 * compile for the (op, dtype) pair, so the inner loops carry no dispatch.
 * FP16/BF16 compute in FP32 per element.
 *
 * Integer semantics are C's, made total: signed arithmetic wraps, Div
 * truncates toward zero, division by zero gives 0 and INT_MIN / -1 wraps,
 * so bad data never traps.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "backends/cpu/ref_common.h"
#include "backends/cpu/ref_kernels.h"
#include "core/alloc.h"
#include "core/common.h"

/* out[i] = f(a[i * sa], b[i * sb]) for i < n; sa, sb are 0 or 1. `out` may
 * be `a` (with sa == 1). */
typedef void (*bin_row)(void *out, const void *a, int64_t sa, const void *b, int64_t sb, int64_t n);

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW, OP_MIN, OP_MAX, N_ARITH };
enum { OP_EQ, OP_LT, OP_GT, OP_LE, OP_GE, N_CMP };
enum { OP_AND, OP_OR, OP_XOR, N_LOGIC };

/* Row functions over a plain C type T, expression in x and y. */
#define ROW(name, TO, TI, EXPR)                                                                   \
    static void name(void *o_, const void *a_, int64_t sa, const void *b_, int64_t sb, int64_t n) \
    {                                                                                             \
        TO *o = o_;                                                                               \
        const TI *a = a_, *b = b_;                                                                \
        if (sa && sb) {                                                                           \
            for (int64_t i = 0; i < n; i++) {                                                     \
                TI x = a[i], y = b[i];                                                            \
                o[i] = (TO)(EXPR);                                                                \
            }                                                                                     \
        } else if (sa) {                                                                          \
            TI y = b[0];                                                                          \
            for (int64_t i = 0; i < n; i++) {                                                     \
                TI x = a[i];                                                                      \
                o[i] = (TO)(EXPR);                                                                \
            }                                                                                     \
        } else if (sb) {                                                                          \
            TI x = a[0];                                                                          \
            for (int64_t i = 0; i < n; i++) {                                                     \
                TI y = b[i];                                                                      \
                o[i] = (TO)(EXPR);                                                                \
            }                                                                                     \
        } else {                                                                                  \
            TI x = a[0], y = b[0];                                                                \
            TO r = (TO)(EXPR);                                                                    \
            for (int64_t i = 0; i < n; i++)                                                       \
                o[i] = r;                                                                         \
        }                                                                                         \
    }

/* Row functions over 16-bit floats, computed in float. */
#define ROW_H(name, TO, TOF, EXPR, STORE)                                                         \
    static void name(void *o_, const void *a_, int64_t sa, const void *b_, int64_t sb, int64_t n) \
    {                                                                                             \
        TO *o = o_;                                                                               \
        const uint16_t *a = a_, *b = b_;                                                          \
        for (int64_t i = 0; i < n; i++) {                                                         \
            float x = TOF(a[i * sa]), y = TOF(b[i * sb]);                                         \
            o[i] = STORE(EXPR);                                                                   \
        }                                                                                         \
    }

#define FMIN_(x, y) (((y) < (x) || (y) != (y)) ? (y) : (x))
#define FMAX_(x, y) (((y) > (x) || (y) != (y)) ? (y) : (x))
#define IMIN_(x, y) ((y) < (x) ? (y) : (x))
#define IMAX_(x, y) ((y) > (x) ? (y) : (x))

/* Integer power with wrapping; negative exponents give 0 unless |x| == 1. */
static uint64_t ipow_u64(uint64_t x, int64_t y, bool is_signed)
{
    if (y < 0) {
        if (x == 1)
            return 1;
        if (is_signed && x == UINT64_MAX) /* -1 */
            return (y & 1) ? UINT64_MAX : 1;
        return 0;
    }
    uint64_t r = 1;
    while (y) {
        if (y & 1)
            r *= x;
        x *= x;
        y >>= 1;
    }
    return r;
}

/* The arithmetic ops for a signed integer T computed in unsigned U. */
#define ARITH_SIGNED(sfx, T, U)                                                               \
    ROW(add_##sfx, T, T, (U)x + (U)y)                                                         \
    ROW(sub_##sfx, T, T, (U)x - (U)y)                                                         \
    ROW(mul_##sfx, T, T, (U)x *(U)y)                                                          \
    ROW(div_##sfx, T, T, y == 0 ? 0 : y == -1 ? (T)(0u - (U)x) : x / y)                       \
    ROW(pow_##sfx, T, T, (T)ipow_u64((uint64_t)(int64_t)x, (int64_t)y, true))                 \
    ROW(min_##sfx, T, T, IMIN_(x, y))                                                         \
    ROW(max_##sfx, T, T, IMAX_(x, y))                                                         \
    static const bin_row arith_##sfx[N_ARITH] = { add_##sfx, sub_##sfx, mul_##sfx, div_##sfx, \
                                                  pow_##sfx, min_##sfx, max_##sfx };

#define ARITH_UNSIGNED(sfx, T, U)                                                             \
    ROW(add_##sfx, T, T, (U)x + (U)y)                                                         \
    ROW(sub_##sfx, T, T, (U)x - (U)y)                                                         \
    ROW(mul_##sfx, T, T, (U)x *(U)y)                                                          \
    ROW(div_##sfx, T, T, y == 0 ? 0 : x / y)                                                  \
    ROW(pow_##sfx, T, T, (T)ipow_u64((uint64_t)x, (int64_t)y, false))                         \
    ROW(min_##sfx, T, T, IMIN_(x, y))                                                         \
    ROW(max_##sfx, T, T, IMAX_(x, y))                                                         \
    static const bin_row arith_##sfx[N_ARITH] = { add_##sfx, sub_##sfx, mul_##sfx, div_##sfx, \
                                                  pow_##sfx, min_##sfx, max_##sfx };

ARITH_SIGNED(i8, int8_t, uint32_t)
ARITH_SIGNED(i16, int16_t, uint32_t)
ARITH_SIGNED(i32, int32_t, uint32_t)
ARITH_SIGNED(i64, int64_t, uint64_t)
ARITH_UNSIGNED(u8, uint8_t, uint32_t)
ARITH_UNSIGNED(u16, uint16_t, uint32_t)
ARITH_UNSIGNED(u32, uint32_t, uint32_t)
ARITH_UNSIGNED(u64, uint64_t, uint64_t)

/* Pow by a broadcast 2 is the common case (x^2 in norms); powf is slow. */
static void pow_f32(void *o_, const void *a_, int64_t sa, const void *b_, int64_t sb, int64_t n)
{
    float *o = o_;
    const float *a = a_, *b = b_;
    if (!sb && b[0] == 2.0f && sa) {
        for (int64_t i = 0; i < n; i++)
            o[i] = a[i] * a[i];
        return;
    }
    for (int64_t i = 0; i < n; i++)
        o[i] = powf(a[i * sa], b[i * sb]);
}

ROW(add_f32, float, float, x + y)
ROW(sub_f32, float, float, x - y)
ROW(mul_f32, float, float, x *y)
ROW(div_f32, float, float, x / y)
ROW(min_f32, float, float, FMIN_(x, y))
ROW(max_f32, float, float, FMAX_(x, y))
static const bin_row arith_f32[N_ARITH] = { add_f32, sub_f32, mul_f32, div_f32,
                                            pow_f32, min_f32, max_f32 };

ROW(add_f64, double, double, x + y)
ROW(sub_f64, double, double, x - y)
ROW(mul_f64, double, double, x *y)
ROW(div_f64, double, double, x / y)
ROW(pow_f64, double, double, pow(x, y))
ROW(min_f64, double, double, FMIN_(x, y))
ROW(max_f64, double, double, FMAX_(x, y))
static const bin_row arith_f64[N_ARITH] = { add_f64, sub_f64, mul_f64, div_f64,
                                            pow_f64, min_f64, max_f64 };

#define ARITH_HALF(sfx, TOF, FROMF)                                                           \
    ROW_H(add_##sfx, uint16_t, TOF, x + y, FROMF)                                             \
    ROW_H(sub_##sfx, uint16_t, TOF, x - y, FROMF)                                             \
    ROW_H(mul_##sfx, uint16_t, TOF, x *y, FROMF)                                              \
    ROW_H(div_##sfx, uint16_t, TOF, x / y, FROMF)                                             \
    ROW_H(pow_##sfx, uint16_t, TOF, powf(x, y), FROMF)                                        \
    ROW_H(min_##sfx, uint16_t, TOF, FMIN_(x, y), FROMF)                                       \
    ROW_H(max_##sfx, uint16_t, TOF, FMAX_(x, y), FROMF)                                       \
    static const bin_row arith_##sfx[N_ARITH] = { add_##sfx, sub_##sfx, mul_##sfx, div_##sfx, \
                                                  pow_##sfx, min_##sfx, max_##sfx };

ARITH_HALF(f16, infd_fp16_to_fp32, infd_fp16_from_fp32)
ARITH_HALF(bf16, infd_bf16_to_fp32, infd_bf16_from_fp32)

#define BOOL_OUT(v) ((uint8_t)((v) ? 1 : 0))

#define CMP(sfx, T)                   \
    ROW(eq_##sfx, uint8_t, T, x == y) \
    ROW(lt_##sfx, uint8_t, T, x < y)  \
    ROW(gt_##sfx, uint8_t, T, x > y)  \
    ROW(le_##sfx, uint8_t, T, x <= y) \
    ROW(ge_##sfx, uint8_t, T, x >= y) \
    static const bin_row cmp_##sfx[N_CMP] = { eq_##sfx, lt_##sfx, gt_##sfx, le_##sfx, ge_##sfx };

CMP(u8, uint8_t)
CMP(i8, int8_t)
CMP(u16, uint16_t)
CMP(i16, int16_t)
CMP(u32, uint32_t)
CMP(i32, int32_t)
CMP(u64, uint64_t)
CMP(i64, int64_t)
CMP(f32, float)
CMP(f64, double)

#define CMP_HALF(sfx, TOF)                          \
    ROW_H(eq_##sfx, uint8_t, TOF, x == y, BOOL_OUT) \
    ROW_H(lt_##sfx, uint8_t, TOF, x < y, BOOL_OUT)  \
    ROW_H(gt_##sfx, uint8_t, TOF, x > y, BOOL_OUT)  \
    ROW_H(le_##sfx, uint8_t, TOF, x <= y, BOOL_OUT) \
    ROW_H(ge_##sfx, uint8_t, TOF, x >= y, BOOL_OUT) \
    static const bin_row cmp_##sfx[N_CMP] = { eq_##sfx, lt_##sfx, gt_##sfx, le_##sfx, ge_##sfx };

CMP_HALF(f16, infd_fp16_to_fp32)
CMP_HALF(bf16, infd_bf16_to_fp32)

ROW(and_b, uint8_t, uint8_t, (x != 0) & (y != 0))
ROW(or_b, uint8_t, uint8_t, (x != 0) | (y != 0))
ROW(xor_b, uint8_t, uint8_t, (x != 0) ^ (y != 0))
static const bin_row logic_b[N_LOGIC] = { and_b, or_b, xor_b };

static const bin_row *arith_table(infd_dtype dt)
{
    switch (dt) {
    case INFD_DTYPE_INT8:
        return arith_i8;
    case INFD_DTYPE_INT16:
        return arith_i16;
    case INFD_DTYPE_INT32:
        return arith_i32;
    case INFD_DTYPE_INT64:
        return arith_i64;
    case INFD_DTYPE_UINT8:
        return arith_u8;
    case INFD_DTYPE_UINT16:
        return arith_u16;
    case INFD_DTYPE_UINT32:
        return arith_u32;
    case INFD_DTYPE_UINT64:
        return arith_u64;
    case INFD_DTYPE_FP32:
        return arith_f32;
    case INFD_DTYPE_FP64:
        return arith_f64;
    case INFD_DTYPE_FP16:
        return arith_f16;
    case INFD_DTYPE_BF16:
        return arith_bf16;
    default:
        return NULL;
    }
}

static const bin_row *cmp_table(infd_dtype dt)
{
    switch (dt) {
    case INFD_DTYPE_BOOL:
    case INFD_DTYPE_UINT8:
        return cmp_u8;
    case INFD_DTYPE_INT8:
        return cmp_i8;
    case INFD_DTYPE_UINT16:
        return cmp_u16;
    case INFD_DTYPE_INT16:
        return cmp_i16;
    case INFD_DTYPE_UINT32:
        return cmp_u32;
    case INFD_DTYPE_INT32:
        return cmp_i32;
    case INFD_DTYPE_UINT64:
        return cmp_u64;
    case INFD_DTYPE_INT64:
        return cmp_i64;
    case INFD_DTYPE_FP32:
        return cmp_f32;
    case INFD_DTYPE_FP64:
        return cmp_f64;
    case INFD_DTYPE_FP16:
        return cmp_f16;
    case INFD_DTYPE_BF16:
        return cmp_bf16;
    default:
        return NULL;
    }
}

/* ---- the broadcasting kernel ------------------------------------------------------ */

enum { EW_BINARY, EW_VARIADIC, EW_WHERE };

typedef struct ew_kernel {
    infd_cpu_kernel base;
    int kind;
    ref_bcast bc;
    bin_row row;      /* EW_BINARY, and EW_VARIADIC's combine step */
    size_t in_esize;  /* bytes per input element (Where: per X/Y element) */
    size_t out_esize; /* bytes per output element */
    infd_dtype dt;    /* output dtype */
    bool mean;        /* EW_VARIADIC: divide by n_in at the end */
} ew_kernel;

typedef struct ew_job {
    const ew_kernel *k;
    const infd_kernel_io *io;
} ew_job;

static void fill_row(char *dst, const char *src, int64_t s, int64_t n, size_t es)
{
    if (s) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + (size_t)i * es, src, es);
}

static void mean_row(void *row, infd_dtype dt, int64_t n, int32_t count)
{
    switch (dt) {
    case INFD_DTYPE_FP32: {
        float *o = row;
        for (int64_t i = 0; i < n; i++)
            o[i] /= (float)count;
        break;
    }
    case INFD_DTYPE_FP64: {
        double *o = row;
        for (int64_t i = 0; i < n; i++)
            o[i] /= (double)count;
        break;
    }
    case INFD_DTYPE_FP16: {
        uint16_t *o = row;
        for (int64_t i = 0; i < n; i++)
            o[i] = infd_fp16_from_fp32(infd_fp16_to_fp32(o[i]) / (float)count);
        break;
    }
    case INFD_DTYPE_BF16: {
        uint16_t *o = row;
        for (int64_t i = 0; i < n; i++)
            o[i] = infd_bf16_from_fp32(infd_bf16_to_fp32(o[i]) / (float)count);
        break;
    }
    default:
        break;
    }
}

#define WHERE_ROW(T)                                     \
    do {                                                 \
        T *o_ = (T *)o;                                  \
        const T *x_ = (const T *)x, *y_ = (const T *)y;  \
        for (int64_t i = 0; i < n; i++)                  \
            o_[i] = c[i * sc] ? x_[i * sx] : y_[i * sy]; \
    } while (0)

static void where_row(char *o, const uint8_t *c, int64_t sc, const char *x, int64_t sx,
                      const char *y, int64_t sy, int64_t n, size_t es)
{
    switch (es) {
    case 1:
        WHERE_ROW(uint8_t);
        break;
    case 2:
        WHERE_ROW(uint16_t);
        break;
    case 4:
        WHERE_ROW(uint32_t);
        break;
    default:
        WHERE_ROW(uint64_t);
        break;
    }
}

static void ew_body(void *arg, int64_t begin, int64_t end)
{
    const ew_job *j = arg;
    const ew_kernel *k = j->k;
    const ref_bcast *b = &k->bc;
    const int32_t last = b->rank - 1;
    const int64_t len = b->dims[last];
    const size_t ie = k->in_esize, oe = k->out_esize;
    const char *const *in = (const char *const *)j->io->inputs;
    ref_bcast_iter it;
    ref_bcast_iter_seek(b, &it, begin);
    for (int64_t r = begin; r < end; r++, ref_bcast_iter_next(b, &it)) {
        char *o = (char *)j->io->outputs[0] + (size_t)(r * len) * oe;
        switch (k->kind) {
        case EW_BINARY:
            k->row(o, in[0] + it.off[0] * (int64_t)ie, b->strides[0][last],
                   in[1] + it.off[1] * (int64_t)ie, b->strides[1][last], len);
            break;
        case EW_VARIADIC:
            fill_row(o, in[0] + it.off[0] * (int64_t)ie, b->strides[0][last], len, ie);
            for (int32_t i = 1; i < b->n_in; i++)
                k->row(o, o, 1, in[i] + it.off[i] * (int64_t)ie, b->strides[i][last], len);
            if (k->mean)
                mean_row(o, k->dt, len, b->n_in);
            break;
        default:
            where_row(o, (const uint8_t *)in[0] + it.off[0], b->strides[0][last],
                      in[1] + it.off[1] * (int64_t)ie, b->strides[1][last],
                      in[2] + it.off[2] * (int64_t)ie, b->strides[2][last], len, ie);
            break;
        }
    }
}

static void ew_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const ew_kernel *k = (const ew_kernel *)ck;
    if (k->bc.numel == 0)
        return;
    ew_job j = { .k = k, .io = io };
    int64_t len = ref_bcast_row_len(&k->bc);
    int64_t grain = ref_row_grain(len * (k->kind == EW_VARIADIC ? k->bc.n_in : 1));
    ref_parallel(io->pool, k->bc.numel / len, grain, ew_body, &j);
}

/* Looks up op_type in a name list; -1 when absent. */
static int op_index(const char *op, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(op, names[i]) == 0)
            return i;
    return -1;
}

static const char *const arith_names[N_ARITH] = { "Add", "Sub", "Mul", "Div", "Pow", "Min", "Max" };
static const char *const cmp_names[N_CMP] = { "Equal", "Less", "Greater", "LessOrEqual",
                                              "GreaterOrEqual" };
static const char *const logic_names[N_LOGIC] = { "And", "Or", "Xor" };

/* Inputs present, all of dtype `dt` (Where: X and Y), broadcasting to the
 * output; fills `bc`. */
static bool ew_inputs(const infd_kernel_args *a, int32_t first, infd_dtype dt, ref_bcast *bc,
                      infd_error *why)
{
    if (a->n_inputs < 1 || a->n_inputs > REF_MAX_INPUTS || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "%d inputs are not supported",
                           (int)a->n_inputs);
    for (int32_t i = 0; i < a->n_inputs; i++) {
        if (!a->inputs[i])
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "input %d is missing", (int)i);
        if (i >= first && a->inputs[i]->dtype != dt)
            return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "input %d is %s, expected %s",
                               (int)i, infd_dtype_name(a->inputs[i]->dtype), infd_dtype_name(dt));
    }
    if (!ref_bcast_init(bc, a->n_inputs, a->inputs, a->outputs[0]))
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                           "input shapes do not broadcast to the output shape");
    return true;
}

/* Decides the kernel for a node; `k` may be NULL (supports only). */
static bool ew_plan(const infd_kernel_args *a, ew_kernel *k, infd_error *why)
{
    ew_kernel tmp;
    if (!k)
        k = &tmp;
    const char *op = a->node->op_type;
    if (a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "missing output");
    infd_dtype odt = a->outputs[0]->dtype;
    int i;
    k->dt = odt;
    k->out_esize = infd_dtype_size(odt);
    if (strcmp(op, "Where") == 0) {
        if (a->n_inputs != 3 || !a->inputs[0] || a->inputs[0]->dtype != INFD_DTYPE_BOOL)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                               "needs a BOOL condition, X and Y");
        if (k->out_esize == 0)
            return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "dtype %s is not supported",
                               infd_dtype_name(odt));
        k->kind = EW_WHERE;
        k->in_esize = k->out_esize;
        return ew_inputs(a, 1, odt, &k->bc, why);
    }
    if ((i = op_index(op, cmp_names, N_CMP)) >= 0) {
        if (a->n_inputs != 2 || !a->inputs[0] || odt != INFD_DTYPE_BOOL)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                               "needs two inputs and a BOOL output");
        infd_dtype idt = a->inputs[0]->dtype;
        const bin_row *t = cmp_table(idt);
        if (!t)
            return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "dtype %s is not supported",
                               infd_dtype_name(idt));
        k->kind = EW_BINARY;
        k->row = t[i];
        k->in_esize = infd_dtype_size(idt);
        return ew_inputs(a, 0, idt, &k->bc, why);
    }
    if ((i = op_index(op, logic_names, N_LOGIC)) >= 0) {
        if (a->n_inputs != 2 || odt != INFD_DTYPE_BOOL)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "needs two BOOL inputs");
        k->kind = EW_BINARY;
        k->row = logic_b[i];
        k->in_esize = 1;
        return ew_inputs(a, 0, INFD_DTYPE_BOOL, &k->bc, why);
    }
    const bin_row *t = arith_table(odt);
    if (!t)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "dtype %s is not supported",
                           infd_dtype_name(odt));
    k->in_esize = k->out_esize;
    if ((i = op_index(op, arith_names, N_ARITH)) >= 0 && a->n_inputs == 2 && i != OP_MIN &&
        i != OP_MAX) {
        k->kind = EW_BINARY;
        k->row = t[i];
        return ew_inputs(a, 0, odt, &k->bc, why);
    }
    /* Variadic: Min, Max, Sum, Mean (Min/Max with two inputs land here). */
    k->kind = EW_VARIADIC;
    k->mean = strcmp(op, "Mean") == 0;
    if (k->mean && !ref_dtype_is_float(odt))
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "Mean needs a float dtype");
    if (strcmp(op, "Min") == 0)
        k->row = t[OP_MIN];
    else if (strcmp(op, "Max") == 0)
        k->row = t[OP_MAX];
    else if (strcmp(op, "Sum") == 0 || k->mean)
        k->row = t[OP_ADD];
    else
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "%s needs two inputs", op);
    return ew_inputs(a, 0, odt, &k->bc, why);
}

static bool ew_supports(const infd_kernel_args *a, infd_error *why)
{
    return ew_plan(a, NULL, why);
}

static infd_status ew_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    *out = NULL;
    if (!ew_plan(a, NULL, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    ew_kernel *k =
        (ew_kernel *)infd_cpu_kernel_new(sizeof(ew_kernel), "ref:elementwise", ew_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    ew_plan(a, k, NULL);
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

bool ref_binary_supports(const infd_kernel_args *a, infd_error *why)
{
    return ew_supports(a, why);
}

infd_status ref_binary_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    return ew_compile(a, out, err);
}

bool ref_compare_supports(const infd_kernel_args *a, infd_error *why)
{
    return ew_supports(a, why);
}

infd_status ref_compare_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    return ew_compile(a, out, err);
}

bool ref_logic_supports(const infd_kernel_args *a, infd_error *why)
{
    return ew_supports(a, why);
}

infd_status ref_logic_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    return ew_compile(a, out, err);
}

bool ref_where_supports(const infd_kernel_args *a, infd_error *why)
{
    return ew_supports(a, why);
}

infd_status ref_where_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    return ew_compile(a, out, err);
}

bool ref_variadic_supports(const infd_kernel_args *a, infd_error *why)
{
    return ew_supports(a, why);
}

infd_status ref_variadic_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    return ew_compile(a, out, err);
}

/* ---- unary ---------------------------------------------------------------------------- */

typedef enum unary_op {
    U_RELU,
    U_SIGMOID,
    U_SQRT,
    U_NEG,
    U_EXP,
    U_LOG,
    U_TANH,
    U_ABS,
    U_ERF,
    U_FLOOR,
    U_CEIL,
    U_RECIPROCAL,
    U_HARDSIGMOID,
    U_LEAKYRELU,
    U_CLIP,
    U_ELU,
    U_SELU,
    U_SOFTPLUS,
    U_SOFTSIGN,
    U_HARDSWISH,
    U_SIN,
    U_COS,
    U_ROUND,
    U_SIGN,
    U_GELU,
    U_GELU_TANH,
    U_THRESHOLDEDRELU,
    U_MISH,
    U_NOT,
    N_UNARY
} unary_op;

static const char *const unary_names[N_UNARY] = {
    "Relu",        "Sigmoid",   "Sqrt",
    "Neg",         "Exp",       "Log",
    "Tanh",        "Abs",       "Erf",
    "Floor",       "Ceil",      "Reciprocal",
    "HardSigmoid", "LeakyRelu", "Clip",
    "Elu",         "Selu",      "Softplus",
    "Softsign",    "HardSwish", "Sin",
    "Cos",         "Round",     "Sign",
    "Gelu",        "",          "ThresholdedRelu",
    "Mish",        "Not",
};

/* Ops that also run on integers (computed in int64). */
static bool unary_int_ok(unary_op op)
{
    return op == U_RELU || op == U_NEG || op == U_ABS || op == U_CLIP || op == U_SIGN;
}

typedef struct unary_kernel {
    infd_cpu_kernel base;
    unary_op op;
    infd_dtype dt;
    int64_t numel;
    float alpha, beta, gamma;
    /* Clip: bounds from attributes or constants, or from inputs 1/2 at run
     * time (lo_input/hi_input set). */
    double lo, hi;
    bool lo_input, hi_input;
    infd_dtype bound_dt;
} unary_kernel;

typedef struct unary_job {
    const unary_kernel *k;
    const char *in;
    char *out;
    double lo, hi;
} unary_job;

static void unary_f32(const unary_job *j, float *o, const float *x, int64_t n)
{
    const unary_kernel *k = j->k;
    const float al = k->alpha, be = k->beta, ga = k->gamma;
    const float lo = (float)j->lo, hi = (float)j->hi;
    switch (k->op) {
    case U_RELU:
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] < 0 ? 0 : x[i];
        break;
    case U_SIGMOID:
        for (int64_t i = 0; i < n; i++)
            o[i] = 1.0f / (1.0f + expf(-x[i]));
        break;
    case U_SQRT:
        for (int64_t i = 0; i < n; i++)
            o[i] = sqrtf(x[i]);
        break;
    case U_NEG:
        for (int64_t i = 0; i < n; i++)
            o[i] = -x[i];
        break;
    case U_EXP:
        for (int64_t i = 0; i < n; i++)
            o[i] = expf(x[i]);
        break;
    case U_LOG:
        for (int64_t i = 0; i < n; i++)
            o[i] = logf(x[i]);
        break;
    case U_TANH:
        for (int64_t i = 0; i < n; i++)
            o[i] = tanhf(x[i]);
        break;
    case U_ABS:
        for (int64_t i = 0; i < n; i++)
            o[i] = fabsf(x[i]);
        break;
    case U_ERF:
        for (int64_t i = 0; i < n; i++)
            o[i] = erff(x[i]);
        break;
    case U_FLOOR:
        for (int64_t i = 0; i < n; i++)
            o[i] = floorf(x[i]);
        break;
    case U_CEIL:
        for (int64_t i = 0; i < n; i++)
            o[i] = ceilf(x[i]);
        break;
    case U_RECIPROCAL:
        for (int64_t i = 0; i < n; i++)
            o[i] = 1.0f / x[i];
        break;
    case U_HARDSIGMOID:
        for (int64_t i = 0; i < n; i++) {
            float v = al * x[i] + be;
            o[i] = v < 0 ? 0 : v > 1 ? 1 : v;
        }
        break;
    case U_LEAKYRELU:
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] < 0 ? al * x[i] : x[i];
        break;
    case U_CLIP:
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
        break;
    case U_ELU:
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] < 0 ? al * (expf(x[i]) - 1.0f) : x[i];
        break;
    case U_SELU:
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] <= 0 ? ga * (al * expf(x[i]) - al) : ga * x[i];
        break;
    case U_SOFTPLUS:
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] > 20.0f ? x[i] : log1pf(expf(x[i]));
        break;
    case U_SOFTSIGN:
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] / (1.0f + fabsf(x[i]));
        break;
    case U_HARDSWISH:
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] / 6.0f + 0.5f;
            o[i] = x[i] * (v < 0 ? 0 : v > 1 ? 1 : v);
        }
        break;
    case U_SIN:
        for (int64_t i = 0; i < n; i++)
            o[i] = sinf(x[i]);
        break;
    case U_COS:
        for (int64_t i = 0; i < n; i++)
            o[i] = cosf(x[i]);
        break;
    case U_ROUND:
        for (int64_t i = 0; i < n; i++)
            o[i] = nearbyintf(x[i]);
        break;
    case U_SIGN:
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] > 0 ? 1.0f : x[i] < 0 ? -1.0f : x[i];
        break;
    case U_GELU:
        for (int64_t i = 0; i < n; i++)
            o[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
        break;
    case U_GELU_TANH:
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            o[i] = 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
        }
        break;
    case U_THRESHOLDEDRELU:
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] > al ? x[i] : 0;
        break;
    case U_MISH:
        for (int64_t i = 0; i < n; i++) {
            float sp = x[i] > 20.0f ? x[i] : log1pf(expf(x[i]));
            o[i] = x[i] * tanhf(sp);
        }
        break;
    default:
        break;
    }
}

/* A Clip bound as an integer: saturated, since bounds come from the model
 * as floats (possibly +-inf or FLT_MAX) and an out-of-range conversion is
 * undefined behaviour (found by fuzz_plan). NaN means no bound. */
static int64_t bound_i64(double b, int64_t none)
{
    if (b != b)
        return none;
    if (b <= -9223372036854775808.0)
        return INT64_MIN;
    if (b >= 9223372036854775807.0)
        return INT64_MAX;
    return (int64_t)b;
}

static void unary_i64(const unary_job *j, int64_t *v, int64_t n)
{
    const int64_t lo = bound_i64(j->lo, INT64_MIN), hi = bound_i64(j->hi, INT64_MAX);
    switch (j->k->op) {
    case U_RELU:
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] < 0 ? 0 : v[i];
        break;
    case U_NEG:
        for (int64_t i = 0; i < n; i++)
            v[i] = (int64_t)(0u - (uint64_t)v[i]);
        break;
    case U_ABS:
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] < 0 ? (int64_t)(0u - (uint64_t)v[i]) : v[i];
        break;
    case U_CLIP:
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] < lo ? lo : v[i] > hi ? hi : v[i];
        break;
    case U_SIGN:
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] > 0 ? 1 : v[i] < 0 ? -1 : 0;
        break;
    default:
        break;
    }
}

#define UNARY_BLOCK 256

#define INT_BLOCK(T)                        \
    do {                                    \
        const T *s_ = (const T *)j->in + b; \
        T *d_ = (T *)j->out + b;            \
        for (int64_t i = 0; i < n; i++)     \
            buf[i] = s_[i];                 \
        unary_i64(j, buf, n);               \
        for (int64_t i = 0; i < n; i++)     \
            d_[i] = (T)buf[i];              \
    } while (0)

static void unary_body(void *arg, int64_t begin, int64_t end)
{
    const unary_job *j = arg;
    const unary_kernel *k = j->k;
    if (k->op == U_NOT) {
        for (int64_t i = begin; i < end; i++)
            ((uint8_t *)j->out)[i] = !((const uint8_t *)j->in)[i];
        return;
    }
    if (k->dt == INFD_DTYPE_FP32) {
        unary_f32(j, (float *)j->out + begin, (const float *)j->in + begin, end - begin);
        return;
    }
    for (int64_t b = begin; b < end; b += UNARY_BLOCK) {
        int64_t n = INFD_MIN(UNARY_BLOCK, end - b);
        float fb[UNARY_BLOCK];
        int64_t buf[UNARY_BLOCK];
        const uint16_t *hs = (const uint16_t *)j->in + b;
        uint16_t *hd = (uint16_t *)j->out + b;
        switch (k->dt) {
        case INFD_DTYPE_FP16:
            infd_fp16_to_fp32_n(fb, hs, (size_t)n);
            unary_f32(j, fb, fb, n);
            infd_fp32_to_fp16_n(hd, fb, (size_t)n);
            break;
        case INFD_DTYPE_BF16:
            infd_bf16_to_fp32_n(fb, hs, (size_t)n);
            unary_f32(j, fb, fb, n);
            infd_fp32_to_bf16_n(hd, fb, (size_t)n);
            break;
        case INFD_DTYPE_INT8:
            INT_BLOCK(int8_t);
            break;
        case INFD_DTYPE_INT16:
            INT_BLOCK(int16_t);
            break;
        case INFD_DTYPE_INT32:
            INT_BLOCK(int32_t);
            break;
        case INFD_DTYPE_INT64:
            INT_BLOCK(int64_t);
            break;
        case INFD_DTYPE_UINT8:
            INT_BLOCK(uint8_t);
            break;
        case INFD_DTYPE_UINT16:
            INT_BLOCK(uint16_t);
            break;
        case INFD_DTYPE_UINT32:
            INT_BLOCK(uint32_t);
            break;
        default:
            break;
        }
    }
}

static void unary_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const unary_kernel *k = (const unary_kernel *)ck;
    unary_job j = { .k = k, .in = io->inputs[0], .out = io->outputs[0], .lo = k->lo, .hi = k->hi };
    if (k->lo_input && io->inputs[1])
        j.lo = ref_load_f64(k->bound_dt, io->inputs[1]);
    if (k->hi_input && io->inputs[2])
        j.hi = ref_load_f64(k->bound_dt, io->inputs[2]);
    ref_parallel(io->pool, k->numel, REF_GRAIN, unary_body, &j);
}

/* The lowest and highest values of dtype `dt`, as double. */
static void dtype_range(infd_dtype dt, double *lo, double *hi)
{
    switch (dt) {
    case INFD_DTYPE_INT8:
        *lo = INT8_MIN, *hi = INT8_MAX;
        break;
    case INFD_DTYPE_INT16:
        *lo = INT16_MIN, *hi = INT16_MAX;
        break;
    case INFD_DTYPE_INT32:
        *lo = INT32_MIN, *hi = INT32_MAX;
        break;
    case INFD_DTYPE_INT64:
        /* As doubles these round to +-2^63; unary_i64 casts them back, so
         * keep them just inside. */
        *lo = -9223372036854774784.0, *hi = 9223372036854774784.0;
        break;
    case INFD_DTYPE_UINT8:
        *lo = 0, *hi = UINT8_MAX;
        break;
    case INFD_DTYPE_UINT16:
        *lo = 0, *hi = UINT16_MAX;
        break;
    case INFD_DTYPE_UINT32:
        *lo = 0, *hi = UINT32_MAX;
        break;
    default:
        *lo = -INFINITY, *hi = INFINITY;
        break;
    }
}

static bool unary_plan(const infd_kernel_args *a, unary_kernel *k, infd_error *why)
{
    unary_kernel tmp;
    if (!k)
        k = &tmp;
    memset(&k->op, 0, sizeof(*k) - offsetof(unary_kernel, op));
    int op = op_index(a->node->op_type, unary_names, N_UNARY);
    if (op < 0 || a->n_inputs < 1 || !a->inputs[0] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "unexpected unary node");
    k->op = (unary_op)op;
    k->dt = a->inputs[0]->dtype;
    k->numel = infd_node_numel(a->inputs[0]);
    if (a->outputs[0]->dtype != k->dt || infd_node_numel(a->outputs[0]) != k->numel)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                           "output dtype or size differs from the input");
    if (k->op == U_NOT) {
        if (k->dt != INFD_DTYPE_BOOL)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "Not needs BOOL");
        return true;
    }
    bool flt = k->dt == INFD_DTYPE_FP32 || k->dt == INFD_DTYPE_FP16 || k->dt == INFD_DTYPE_BF16;
    bool intok = ref_dtype_is_int(k->dt) && k->dt != INFD_DTYPE_UINT64 && unary_int_ok(k->op);
    if (!flt && !intok)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "%s on %s is not supported",
                           a->node->op_type, infd_dtype_name(k->dt));
    float dalpha = 0, dbeta = 0;
    switch (k->op) {
    case U_HARDSIGMOID:
        dalpha = 0.2f, dbeta = 0.5f;
        break;
    case U_LEAKYRELU:
        dalpha = 0.01f;
        break;
    case U_ELU:
    case U_THRESHOLDEDRELU:
        dalpha = 1.0f;
        break;
    case U_SELU:
        dalpha = 1.67326319217681884765625f;
        break;
    default:
        break;
    }
    if (infd_ir_attr_float(a->g, a->node, "alpha", dalpha, &k->alpha, why) != INFD_STATUS_OK ||
        infd_ir_attr_float(a->g, a->node, "beta", dbeta, &k->beta, why) != INFD_STATUS_OK ||
        infd_ir_attr_float(a->g, a->node, "gamma", 1.05070102214813232421875f, &k->gamma, why) !=
            INFD_STATUS_OK)
        return false;
    if (k->op == U_GELU) {
        const char *approx = "none";
        if (infd_ir_attr_string(a->g, a->node, "approximate", "none", &approx, why) !=
            INFD_STATUS_OK)
            return false;
        if (strcmp(approx, "tanh") == 0)
            k->op = U_GELU_TANH;
        else if (strcmp(approx, "none") != 0)
            return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "approximate='%s'", approx);
    }
    if (k->op == U_CLIP) {
        dtype_range(k->dt, &k->lo, &k->hi);
        if (a->g->opset < 11) {
            float lo, hi;
            if (infd_ir_attr_float(a->g, a->node, "min", -FLT_MAX, &lo, why) != INFD_STATUS_OK ||
                infd_ir_attr_float(a->g, a->node, "max", FLT_MAX, &hi, why) != INFD_STATUS_OK)
                return false;
            k->lo = lo, k->hi = hi;
        } else {
            for (int i = 1; i <= 2 && i < a->n_inputs; i++) {
                const infd_ir_value *v = a->inputs[i];
                if (!v)
                    continue;
                if (v->dtype != k->dt || infd_node_numel(v) != 1)
                    return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                                       "Clip bound %d must be a scalar of the input dtype", i);
                k->bound_dt = v->dtype;
                if (v->data) {
                    double b = ref_load_f64(v->dtype, v->data);
                    *(i == 1 ? &k->lo : &k->hi) = b;
                } else {
                    *(i == 1 ? &k->lo_input : &k->hi_input) = true;
                }
            }
        }
    }
    return true;
}

bool ref_unary_supports(const infd_kernel_args *a, infd_error *why)
{
    return unary_plan(a, NULL, why);
}

infd_status ref_unary_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    *out = NULL;
    if (!unary_plan(a, NULL, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    unary_kernel *k =
        (unary_kernel *)infd_cpu_kernel_new(sizeof(unary_kernel), "ref:unary", unary_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    unary_plan(a, k, NULL);
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

bool ref_logical_not_supports(const infd_kernel_args *a, infd_error *why)
{
    return unary_plan(a, NULL, why);
}

infd_status ref_logical_not_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    return ref_unary_compile(a, out, err);
}
