/*
 * ref_shape.c - kernels that make tensors from shapes and attributes
 * (Shape, Constant, ConstantOfShape, Range) and Cast between every numeric
 * dtype.
 *
 * Constant and ConstantOfShape copy their attribute data into the kernel at
 * compile, since compiled kernels must not point back into the graph.
 */
#include <math.h>
#include <string.h>

#include "backends/cpu/ref_common.h"
#include "backends/cpu/ref_kernels.h"
#include "core/alloc.h"
#include "core/common.h"

/* ---- Shape -------------------------------------------------------------------- */

typedef struct shape_kernel {
    infd_cpu_kernel base;
    int32_t n;
    int64_t dims[INFD_MAX_RANK];
} shape_kernel;

static void shape_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const shape_kernel *k = (const shape_kernel *)ck;
    memcpy(io->outputs[0], k->dims, sizeof(int64_t) * (size_t)k->n);
}

static bool shape_range(const infd_kernel_args *a, int64_t *start, int64_t *end, infd_error *why)
{
    if (a->n_inputs < 1 || !a->inputs[0])
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "missing input");
    int64_t rank = a->inputs[0]->shape.rank;
    *start = 0;
    *end = rank;
    if (a->g->opset >= 15) {
        if (infd_ir_attr_int(a->g, a->node, "start", 0, start, why) != INFD_STATUS_OK ||
            infd_ir_attr_int(a->g, a->node, "end", rank, end, why) != INFD_STATUS_OK)
            return false;
        if (*start < 0)
            *start += rank;
        if (*end < 0)
            *end += rank;
        *start = *start < 0 ? 0 : *start > rank ? rank : *start;
        *end = *end < 0 ? 0 : *end > rank ? rank : *end;
        if (*end < *start)
            *end = *start;
    }
    const infd_ir_value *o = a->outputs[0];
    if (o->dtype != INFD_DTYPE_INT64 || infd_node_numel(o) != *end - *start)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                           "output must be INT64 with %lld elements", (long long)(*end - *start));
    return true;
}

bool ref_shape_supports(const infd_kernel_args *a, infd_error *why)
{
    int64_t s, e;
    return shape_range(a, &s, &e, why);
}

infd_status ref_shape_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    int64_t s = 0, e = 0;
    *out = NULL;
    if (!shape_range(a, &s, &e, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    shape_kernel *k =
        (shape_kernel *)infd_cpu_kernel_new(sizeof(shape_kernel), "ref:shape", shape_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    k->n = (int32_t)(e - s);
    for (int64_t i = s; i < e; i++)
        k->dims[i - s] = a->inputs[0]->shape.dims[i].value;
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* ---- Constant and ConstantOfShape ------------------------------------------------ */

typedef struct fill_kernel {
    infd_cpu_kernel base;
    void *data;    /* owned: Constant's bytes, or ConstantOfShape's one element */
    size_t nbytes; /* of data */
    int64_t numel; /* ConstantOfShape: elements to fill */
    bool zero;     /* ConstantOfShape: the element is all zero bytes */
} fill_kernel;

static void fill_fini(infd_cpu_kernel *ck)
{
    infd_free(((fill_kernel *)ck)->data);
}

static void constant_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const fill_kernel *k = (const fill_kernel *)ck;
    if (k->nbytes)
        memcpy(io->outputs[0], k->data, k->nbytes);
}

/* The bytes and dtype a Constant's attribute describes. */
static bool constant_source(const infd_kernel_args *a, const void **data, size_t *nbytes,
                            infd_dtype *dt, infd_error *why)
{
    for (int32_t i = 0; i < a->node->n_attrs; i++) {
        const infd_ir_attr *at = &a->node->attrs[i];
        if (strcmp(at->name, "value") == 0 && at->type == INFD_IR_ATTR_TENSOR && at->tensor >= 0 &&
            at->tensor < a->g->n_values) {
            const infd_ir_value *v = &a->g->values[at->tensor];
            if (!v->data && v->nbytes)
                break;
            *data = v->data;
            *nbytes = v->nbytes;
            *dt = v->dtype;
            return true;
        }
        if (strcmp(at->name, "value_float") == 0 && at->type == INFD_IR_ATTR_FLOAT) {
            *data = &at->f;
            *nbytes = sizeof(float);
            *dt = INFD_DTYPE_FP32;
            return true;
        }
        if (strcmp(at->name, "value_floats") == 0 && at->type == INFD_IR_ATTR_FLOATS) {
            *data = at->floats;
            *nbytes = sizeof(float) * (size_t)at->n;
            *dt = INFD_DTYPE_FP32;
            return true;
        }
        if (strcmp(at->name, "value_int") == 0 && at->type == INFD_IR_ATTR_INT) {
            *data = &at->i;
            *nbytes = sizeof(int64_t);
            *dt = INFD_DTYPE_INT64;
            return true;
        }
        if (strcmp(at->name, "value_ints") == 0 && at->type == INFD_IR_ATTR_INTS) {
            *data = at->ints;
            *nbytes = sizeof(int64_t) * (size_t)at->n;
            *dt = INFD_DTYPE_INT64;
            return true;
        }
    }
    return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                       "needs a 'value' tensor or value_float(s)/value_int(s) attribute "
                       "(sparse and string values are not supported)");
}

static bool constant_check(const infd_kernel_args *a, const void **data, size_t *nbytes,
                           infd_error *why)
{
    infd_dtype dt = INFD_DTYPE_INVALID;
    if (a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "missing output");
    if (!constant_source(a, data, nbytes, &dt, why))
        return false;
    const infd_ir_value *o = a->outputs[0];
    size_t want = (size_t)infd_node_numel(o) * infd_dtype_size(o->dtype);
    if (dt != o->dtype || *nbytes != want || infd_dtype_size(dt) == 0)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                           "value (%s, %zu bytes) does not match the output (%s, %zu bytes)",
                           infd_dtype_name(dt), *nbytes, infd_dtype_name(o->dtype), want);
    return true;
}

bool ref_constant_supports(const infd_kernel_args *a, infd_error *why)
{
    const void *d;
    size_t n;
    return constant_check(a, &d, &n, why);
}

infd_status ref_constant_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    const void *data = NULL;
    size_t nbytes = 0;
    *out = NULL;
    if (!constant_check(a, &data, &nbytes, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    fill_kernel *k = (fill_kernel *)infd_cpu_kernel_new(sizeof(fill_kernel), "ref:constant",
                                                        constant_run, fill_fini);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    if (nbytes) {
        k->data = infd_malloc(nbytes);
        if (!k->data) {
            infd_kernel_destroy(&k->base.base);
            return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        }
        memcpy(k->data, data, nbytes);
    }
    k->nbytes = nbytes;
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

typedef struct fill_job {
    const fill_kernel *k;
    char *out;
} fill_job;

static void fill_body(void *arg, int64_t begin, int64_t end)
{
    const fill_job *j = arg;
    size_t es = j->k->nbytes;
    if (j->k->zero) {
        memset(j->out + (size_t)begin * es, 0, (size_t)(end - begin) * es);
        return;
    }
    for (int64_t i = begin; i < end; i++)
        memcpy(j->out + (size_t)i * es, j->k->data, es);
}

static void constant_of_shape_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const fill_kernel *k = (const fill_kernel *)ck;
    fill_job j = { .k = k, .out = io->outputs[0] };
    ref_parallel(io->pool, k->numel, REF_GRAIN, fill_body, &j);
}

/* The one-element value of ConstantOfShape (NULL: float 0). */
static bool cos_value(const infd_kernel_args *a, const infd_ir_value **val, infd_error *why)
{
    const infd_ir_attr *at = infd_ir_node_attr(a->node, "value");
    *val = NULL;
    if (a->n_outputs < 1 || infd_dtype_size(a->outputs[0]->dtype) == 0)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "output dtype is not supported");
    if (at) {
        if (at->type != INFD_IR_ATTR_TENSOR || at->tensor < 0 || at->tensor >= a->g->n_values)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "'value' must be a tensor");
        *val = &a->g->values[at->tensor];
        if (!(*val)->data || infd_node_numel(*val) != 1)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                               "'value' must hold exactly one element");
    }
    infd_dtype dt = *val ? (*val)->dtype : INFD_DTYPE_FP32;
    if (dt != a->outputs[0]->dtype)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                           "'value' is %s but the output is %s", infd_dtype_name(dt),
                           infd_dtype_name(a->outputs[0]->dtype));
    return true;
}

bool ref_constant_of_shape_supports(const infd_kernel_args *a, infd_error *why)
{
    const infd_ir_value *v;
    return cos_value(a, &v, why);
}

infd_status ref_constant_of_shape_compile(const infd_kernel_args *a, infd_kernel **out,
                                          infd_error *err)
{
    const infd_ir_value *val = NULL;
    *out = NULL;
    if (!cos_value(a, &val, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    fill_kernel *k = (fill_kernel *)infd_cpu_kernel_new(
        sizeof(fill_kernel), "ref:constant_of_shape", constant_of_shape_run, fill_fini);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    k->nbytes = infd_dtype_size(a->outputs[0]->dtype);
    k->data = infd_calloc(1, k->nbytes);
    if (!k->data) {
        infd_kernel_destroy(&k->base.base);
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    if (val)
        memcpy(k->data, val->data, k->nbytes);
    k->zero = true;
    for (size_t i = 0; i < k->nbytes; i++)
        k->zero = k->zero && ((const unsigned char *)k->data)[i] == 0;
    k->numel = infd_node_numel(a->outputs[0]);
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* ---- Range ---------------------------------------------------------------------- */

typedef struct range_kernel {
    infd_cpu_kernel base;
    infd_dtype dt;
    int64_t n;
} range_kernel;

/* Accumulates `value += delta` as ONNX Runtime does rather than computing
 * start + i * delta; the two differ only in float rounding. */
static void range_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const range_kernel *k = (const range_kernel *)ck;
    const void *s = io->inputs[0], *d = io->inputs[2];
    switch (k->dt) {
    case INFD_DTYPE_FP32: {
        float v = *(const float *)s, dl = *(const float *)d, *o = io->outputs[0];
        for (int64_t i = 0; i < k->n; i++, v += dl)
            o[i] = v;
        break;
    }
    case INFD_DTYPE_FP64: {
        double v = *(const double *)s, dl = *(const double *)d, *o = io->outputs[0];
        for (int64_t i = 0; i < k->n; i++, v += dl)
            o[i] = v;
        break;
    }
    case INFD_DTYPE_INT16: {
        int16_t v = *(const int16_t *)s, dl = *(const int16_t *)d, *o = io->outputs[0];
        for (int64_t i = 0; i < k->n; i++, v = (int16_t)(v + dl))
            o[i] = v;
        break;
    }
    case INFD_DTYPE_INT32: {
        uint32_t v = (uint32_t) * (const int32_t *)s, dl = (uint32_t) * (const int32_t *)d;
        int32_t *o = io->outputs[0];
        for (int64_t i = 0; i < k->n; i++, v += dl)
            o[i] = (int32_t)v;
        break;
    }
    default: {
        uint64_t v = (uint64_t) * (const int64_t *)s, dl = (uint64_t) * (const int64_t *)d;
        int64_t *o = io->outputs[0];
        for (int64_t i = 0; i < k->n; i++, v += dl)
            o[i] = (int64_t)v;
        break;
    }
    }
}

bool ref_range_supports(const infd_kernel_args *a, infd_error *why)
{
    if (a->n_inputs != 3 || !a->inputs[0] || !a->inputs[1] || !a->inputs[2])
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "needs start, limit, delta");
    infd_dtype dt = a->outputs[0]->dtype;
    if (dt != INFD_DTYPE_FP32 && dt != INFD_DTYPE_FP64 && dt != INFD_DTYPE_INT16 &&
        dt != INFD_DTYPE_INT32 && dt != INFD_DTYPE_INT64)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "dtype %s is not supported",
                           infd_dtype_name(dt));
    for (int i = 0; i < 3; i++)
        if (a->inputs[i]->dtype != dt || infd_node_numel(a->inputs[i]) != 1)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                               "inputs must be scalars of the output dtype");
    if (a->outputs[0]->shape.rank != 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "output must be 1-D");
    return true;
}

infd_status ref_range_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    *out = NULL;
    if (!ref_range_supports(a, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    range_kernel *k =
        (range_kernel *)infd_cpu_kernel_new(sizeof(range_kernel), "ref:range", range_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    k->dt = a->outputs[0]->dtype;
    k->n = infd_node_numel(a->outputs[0]);
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* ---- Cast --------------------------------------------------------------------------
 *
 * Two passes per block of CAST_BLOCK elements through an intermediate: int64
 * for integer and BOOL sources (UINT64 kept as its bits), double for float
 * sources. Every pair of dtypes is then one load and one store loop, with no
 * per-element dispatch. Float to integer truncates toward zero; NaN becomes
 * 0 and out-of-range values saturate to the int64 range before the
 * (modular) narrowing, so no conversion is undefined.
 */

#define CAST_BLOCK 256

typedef struct cast_kernel {
    infd_cpu_kernel base;
    infd_dtype from, to;
    int64_t numel;
} cast_kernel;

typedef struct cast_job {
    const cast_kernel *k;
    const char *in;
    char *out;
} cast_job;

static int64_t f2i64(double d)
{
    if (d != d)
        return 0;
    if (d >= 9223372036854775807.0)
        return INT64_MAX;
    if (d <= -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)d;
}

static uint64_t f2u64(double d)
{
    if (d >= 18446744073709551615.0)
        return UINT64_MAX;
    if (d >= 9223372036854775808.0)
        return (uint64_t)d;
    return (uint64_t)f2i64(d);
}

#define CAST_LOAD_I(T)                  \
    do {                                \
        const T *s_ = (const T *)src;   \
        for (int64_t i = 0; i < n; i++) \
            ib[i] = (int64_t)s_[i];     \
    } while (0)

#define CAST_STORE_I(T)                     \
    do {                                    \
        T *d_ = (T *)dst;                   \
        if (is_float)                       \
            for (int64_t i = 0; i < n; i++) \
                d_[i] = (T)f2i64(fb[i]);    \
        else                                \
            for (int64_t i = 0; i < n; i++) \
                d_[i] = (T)ib[i];           \
    } while (0)

static void cast_block(infd_dtype from, infd_dtype to, const void *src, void *dst, int64_t n)
{
    int64_t ib[CAST_BLOCK];
    double fb[CAST_BLOCK];
    bool is_float = ref_dtype_is_float(from), is_u64 = from == INFD_DTYPE_UINT64;
    switch (from) {
    case INFD_DTYPE_BOOL:
    case INFD_DTYPE_UINT8:
        CAST_LOAD_I(uint8_t);
        break;
    case INFD_DTYPE_INT8:
        CAST_LOAD_I(int8_t);
        break;
    case INFD_DTYPE_UINT16:
        CAST_LOAD_I(uint16_t);
        break;
    case INFD_DTYPE_INT16:
        CAST_LOAD_I(int16_t);
        break;
    case INFD_DTYPE_UINT32:
        CAST_LOAD_I(uint32_t);
        break;
    case INFD_DTYPE_INT32:
        CAST_LOAD_I(int32_t);
        break;
    case INFD_DTYPE_INT64:
    case INFD_DTYPE_UINT64:
        memcpy(ib, src, (size_t)n * 8);
        break;
    case INFD_DTYPE_FP32:
        for (int64_t i = 0; i < n; i++)
            fb[i] = ((const float *)src)[i];
        break;
    case INFD_DTYPE_FP64:
        memcpy(fb, src, (size_t)n * 8);
        break;
    case INFD_DTYPE_FP16:
        for (int64_t i = 0; i < n; i++)
            fb[i] = infd_fp16_to_fp32(((const uint16_t *)src)[i]);
        break;
    case INFD_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            fb[i] = infd_bf16_to_fp32(((const uint16_t *)src)[i]);
        break;
    default:
        return;
    }
    switch (to) {
    case INFD_DTYPE_BOOL: {
        uint8_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = is_float ? fb[i] != 0 : ib[i] != 0;
        break;
    }
    case INFD_DTYPE_UINT8:
        CAST_STORE_I(uint8_t);
        break;
    case INFD_DTYPE_INT8:
        CAST_STORE_I(int8_t);
        break;
    case INFD_DTYPE_UINT16:
        CAST_STORE_I(uint16_t);
        break;
    case INFD_DTYPE_INT16:
        CAST_STORE_I(int16_t);
        break;
    case INFD_DTYPE_UINT32:
        CAST_STORE_I(uint32_t);
        break;
    case INFD_DTYPE_INT32:
        CAST_STORE_I(int32_t);
        break;
    case INFD_DTYPE_INT64:
        CAST_STORE_I(int64_t);
        break;
    case INFD_DTYPE_UINT64: {
        uint64_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = is_float ? f2u64(fb[i]) : (uint64_t)ib[i];
        break;
    }
    default: {
        /* Float destinations: promote the integers first. */
        if (!is_float)
            for (int64_t i = 0; i < n; i++)
                fb[i] = is_u64 ? (double)(uint64_t)ib[i] : (double)ib[i];
        if (to == INFD_DTYPE_FP64) {
            memcpy(dst, fb, (size_t)n * 8);
        } else if (to == INFD_DTYPE_FP32) {
            float *d = dst;
            /* int64 -> float directly: via double could round twice. */
            if (!is_float && !is_u64)
                for (int64_t i = 0; i < n; i++)
                    d[i] = (float)ib[i];
            else
                for (int64_t i = 0; i < n; i++)
                    d[i] = (float)fb[i];
        } else {
            uint16_t *d = dst;
            for (int64_t i = 0; i < n; i++)
                d[i] = to == INFD_DTYPE_FP16 ? infd_fp16_from_fp32((float)fb[i])
                                             : infd_bf16_from_fp32((float)fb[i]);
        }
        break;
    }
    }
}

static void cast_body(void *arg, int64_t begin, int64_t end)
{
    const cast_job *j = arg;
    const cast_kernel *k = j->k;
    size_t si = infd_dtype_size(k->from), so = infd_dtype_size(k->to);
    if (k->from == k->to) {
        memcpy(j->out + (size_t)begin * so, j->in + (size_t)begin * si, (size_t)(end - begin) * si);
        return;
    }
    if (k->from == INFD_DTYPE_FP32 && k->to == INFD_DTYPE_FP16) {
        infd_fp32_to_fp16_n((uint16_t *)j->out + begin, (const float *)j->in + begin,
                            (size_t)(end - begin));
        return;
    }
    if (k->from == INFD_DTYPE_FP16 && k->to == INFD_DTYPE_FP32) {
        infd_fp16_to_fp32_n((float *)j->out + begin, (const uint16_t *)j->in + begin,
                            (size_t)(end - begin));
        return;
    }
    for (int64_t i = begin; i < end; i += CAST_BLOCK) {
        int64_t n = INFD_MIN(CAST_BLOCK, end - i);
        cast_block(k->from, k->to, j->in + (size_t)i * si, j->out + (size_t)i * so, n);
    }
}

static void cast_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const cast_kernel *k = (const cast_kernel *)ck;
    cast_job j = { .k = k, .in = io->inputs[0], .out = io->outputs[0] };
    ref_parallel(io->pool, k->numel, REF_GRAIN, cast_body, &j);
}

static bool castable(infd_dtype dt)
{
    return dt == INFD_DTYPE_BOOL || ref_dtype_is_int(dt) || ref_dtype_is_float(dt);
}

bool ref_cast_supports(const infd_kernel_args *a, infd_error *why)
{
    if (a->n_inputs < 1 || !a->inputs[0] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "missing input or output");
    infd_dtype from = a->inputs[0]->dtype, to = a->outputs[0]->dtype;
    if (!castable(from) || !castable(to))
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "cast from %s to %s is not supported",
                           infd_dtype_name(from), infd_dtype_name(to));
    if (infd_node_numel(a->inputs[0]) != infd_node_numel(a->outputs[0]))
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                           "output and input element counts differ");
    return true;
}

infd_status ref_cast_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    *out = NULL;
    if (!ref_cast_supports(a, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    cast_kernel *k =
        (cast_kernel *)infd_cpu_kernel_new(sizeof(cast_kernel), "ref:cast", cast_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    k->from = a->inputs[0]->dtype;
    k->to = a->outputs[0]->dtype;
    k->numel = infd_node_numel(a->outputs[0]);
    *out = &k->base.base;
    return INFD_STATUS_OK;
}
