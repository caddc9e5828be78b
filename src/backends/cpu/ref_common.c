/*
 * ref_common.c - shared helpers of the CPU backend's own kernels: parallel
 * chunking, constant inputs, broadcasting and view copies. See ref_common.h.
 */
#include "backends/cpu/ref_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/common.h"

/* More chunks than this only add hand-out overhead on the small pools we
 * run with; the cap keeps chunking a function of (n, grain) alone. */
#define REF_MAX_CHUNKS 256

typedef struct par_ctx {
    ref_range_fn fn;
    void *arg;
    int64_t n;
    int64_t chunk;
} par_ctx;

static void par_body(void *arg, int64_t index)
{
    const par_ctx *c = arg;
    int64_t begin = index * c->chunk;
    int64_t end = INFD_MIN(begin + c->chunk, c->n);
    if (begin < end)
        c->fn(c->arg, begin, end);
}

void ref_parallel(infd_pool *pool, int64_t n, int64_t grain, ref_range_fn fn, void *arg)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int64_t n_chunks = (n + grain - 1) / grain;
    if (!pool || n_chunks <= 1) {
        fn(arg, 0, n);
        return;
    }
    if (n_chunks > REF_MAX_CHUNKS)
        n_chunks = REF_MAX_CHUNKS;
    par_ctx c = { .fn = fn, .arg = arg, .n = n, .chunk = (n + n_chunks - 1) / n_chunks };
    infd_pool_parallel_for(pool, (n + c.chunk - 1) / c.chunk, par_body, &c);
}

bool ref_decline(const infd_kernel_args *a, infd_error *why, infd_status code, const char *fmt, ...)
{
    char msg[INFD_ERROR_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    infd_node_error(a, why, code, "%s", msg);
    return false;
}

void ref_shape_of(const infd_ir_value *v, infd_shape *s)
{
    memset(s, 0, sizeof(*s));
    s->rank = v->shape.rank;
    for (int32_t i = 0; i < v->shape.rank; i++)
        s->dims[i] = v->shape.dims[i].value;
}

bool ref_const_floats(const infd_ir_value *v, float *out, int64_t cap, int64_t *n)
{
    *n = 0;
    if (!infd_node_is_const(v))
        return false;
    int64_t count = infd_node_numel(v);
    if (count > cap || !ref_dtype_is_float(v->dtype))
        return false;
    size_t es = infd_dtype_size(v->dtype);
    for (int64_t i = 0; i < count; i++)
        out[i] = (float)ref_load_f64(v->dtype, (const char *)v->data + (size_t)i * es);
    *n = count;
    return true;
}

double ref_load_f64(infd_dtype dt, const void *p)
{
    switch (dt) {
    case INFD_DTYPE_FP32: {
        float x;
        memcpy(&x, p, 4);
        return x;
    }
    case INFD_DTYPE_FP64: {
        double x;
        memcpy(&x, p, 8);
        return x;
    }
    case INFD_DTYPE_FP16: {
        uint16_t x;
        memcpy(&x, p, 2);
        return infd_fp16_to_fp32(x);
    }
    case INFD_DTYPE_BF16: {
        uint16_t x;
        memcpy(&x, p, 2);
        return infd_bf16_to_fp32(x);
    }
    case INFD_DTYPE_UINT64: {
        uint64_t x;
        memcpy(&x, p, 8);
        return (double)x;
    }
    default:
        return (double)ref_load_i64(dt, p);
    }
}

int64_t ref_load_i64(infd_dtype dt, const void *p)
{
    switch (dt) {
    case INFD_DTYPE_BOOL:
    case INFD_DTYPE_UINT8:
        return *(const uint8_t *)p;
    case INFD_DTYPE_INT8:
        return *(const int8_t *)p;
    case INFD_DTYPE_UINT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        return x;
    }
    case INFD_DTYPE_INT16: {
        int16_t x;
        memcpy(&x, p, 2);
        return x;
    }
    case INFD_DTYPE_UINT32: {
        uint32_t x;
        memcpy(&x, p, 4);
        return x;
    }
    case INFD_DTYPE_INT32: {
        int32_t x;
        memcpy(&x, p, 4);
        return x;
    }
    case INFD_DTYPE_INT64:
    case INFD_DTYPE_UINT64: {
        int64_t x;
        memcpy(&x, p, 8);
        return x;
    }
    default: {
        double d = ref_load_f64(dt, p);
        if (d != d)
            return 0;
        if (d >= 9223372036854775807.0)
            return INT64_MAX;
        if (d <= -9223372036854775808.0)
            return INT64_MIN;
        return (int64_t)d;
    }
    }
}

bool ref_dtype_is_float(infd_dtype dt)
{
    return dt == INFD_DTYPE_FP32 || dt == INFD_DTYPE_FP16 || dt == INFD_DTYPE_BF16 ||
           dt == INFD_DTYPE_FP64;
}

bool ref_dtype_is_int(infd_dtype dt)
{
    switch (dt) {
    case INFD_DTYPE_UINT8:
    case INFD_DTYPE_UINT16:
    case INFD_DTYPE_UINT32:
    case INFD_DTYPE_UINT64:
    case INFD_DTYPE_INT8:
    case INFD_DTYPE_INT16:
    case INFD_DTYPE_INT32:
    case INFD_DTYPE_INT64:
        return true;
    default:
        return false;
    }
}

/* ---- broadcasting --------------------------------------------------------- */

bool ref_bcast_init(ref_bcast *b, int32_t n_in, const infd_ir_value *const *ins,
                    const infd_ir_value *out)
{
    INFD_ASSERT(n_in >= 1 && n_in <= REF_MAX_INPUTS);
    memset(b, 0, sizeof(*b));
    b->n_in = n_in;
    int32_t rank = out->shape.rank;
    int64_t dims[INFD_MAX_RANK];
    int64_t strides[REF_MAX_INPUTS][INFD_MAX_RANK];
    for (int32_t d = 0; d < rank; d++)
        dims[d] = out->shape.dims[d].value;
    for (int32_t k = 0; k < n_in; k++) {
        const infd_ir_value *v = ins[k];
        int32_t r = v->shape.rank;
        if (r > rank)
            return false;
        int64_t stride = 1;
        for (int32_t d = rank - 1; d >= 0; d--) {
            int32_t di = d - (rank - r);
            int64_t in_dim = di >= 0 ? v->shape.dims[di].value : 1;
            if (in_dim == dims[d]) {
                strides[k][d] = in_dim == 1 ? 0 : stride;
            } else if (in_dim == 1) {
                strides[k][d] = 0;
            } else {
                return false;
            }
            stride *= in_dim;
        }
    }
    /* Drop size-1 dims, then merge neighbours that stay linear for every
     * input. */
    int32_t n = 0;
    b->numel = 1;
    for (int32_t d = 0; d < rank; d++) {
        b->numel *= dims[d];
        if (dims[d] == 1)
            continue;
        bool merge = n > 0;
        for (int32_t k = 0; k < n_in && merge; k++)
            merge = b->strides[k][n - 1] == strides[k][d] * dims[d];
        if (merge) {
            b->dims[n - 1] *= dims[d];
            for (int32_t k = 0; k < n_in; k++)
                b->strides[k][n - 1] = strides[k][d];
        } else {
            b->dims[n] = dims[d];
            for (int32_t k = 0; k < n_in; k++)
                b->strides[k][n] = strides[k][d];
            n++;
        }
    }
    if (n == 0) {
        b->dims[0] = 1;
        n = 1;
    }
    b->rank = n;
    return true;
}

void ref_bcast_iter_seek(const ref_bcast *b, ref_bcast_iter *it, int64_t row)
{
    for (int32_t k = 0; k < b->n_in; k++)
        it->off[k] = 0;
    for (int32_t d = b->rank - 2; d >= 0; d--) {
        it->idx[d] = row % b->dims[d];
        row /= b->dims[d];
        for (int32_t k = 0; k < b->n_in; k++)
            it->off[k] += it->idx[d] * b->strides[k][d];
    }
}

void ref_bcast_iter_next(const ref_bcast *b, ref_bcast_iter *it)
{
    for (int32_t d = b->rank - 2; d >= 0; d--) {
        if (++it->idx[d] < b->dims[d]) {
            for (int32_t k = 0; k < b->n_in; k++)
                it->off[k] += b->strides[k][d];
            return;
        }
        it->idx[d] = 0;
        for (int32_t k = 0; k < b->n_in; k++)
            it->off[k] -= (b->dims[d] - 1) * b->strides[k][d];
    }
}

/* ---- view copies ---------------------------------------------------------- */

/* Blocks of a 2-D transpose: 32x32 elements of 8 bytes fit L1 twice over. */
#define REF_TBLOCK 32

void ref_view_finish(ref_view *v)
{
    int32_t n = 0;
    v->numel = 1;
    for (int32_t d = 0; d < v->rank; d++) {
        v->numel *= v->dims[d];
        if (v->dims[d] == 1)
            continue;
        if (n > 0 && v->strides[n - 1] == v->strides[d] * v->dims[d]) {
            v->dims[n - 1] *= v->dims[d];
            v->strides[n - 1] = v->strides[d];
        } else {
            v->dims[n] = v->dims[d];
            v->strides[n] = v->strides[d];
            n++;
        }
    }
    if (n == 0) {
        v->dims[0] = 1;
        v->strides[0] = 0;
        n = 1;
    }
    v->rank = n;
    v->transpose2d = n >= 2 && v->strides[n - 2] == 1 && v->strides[n - 1] > 1 &&
                     v->dims[n - 1] >= 8 && v->dims[n - 2] >= 8;
}

typedef struct view_job {
    const ref_view *v;
    const char *in;
    char *out;
} view_job;

/* One row of `n` elements from `src` at element stride `s` into `dst`. */
static void copy_row(char *dst, const char *src, int64_t s, int64_t n, size_t es)
{
    if (s == 1) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
    switch (es) {
    case 1:
        for (int64_t i = 0; i < n; i++)
            dst[i] = src[i * s];
        break;
    case 2:
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + i * 2, src + i * s * 2, 2);
        break;
    case 4:
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + i * 4, src + i * s * 4, 4);
        break;
    case 8:
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + i * 8, src + i * s * 8, 8);
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + (size_t)i * es, src + (size_t)(i * s) * es, es);
        break;
    }
}

/* Element offset of output row `row` (all dims but the last). */
static int64_t view_row_offset(const ref_view *v, int64_t row, int32_t last)
{
    int64_t off = v->base;
    for (int32_t d = last - 1; d >= 0; d--) {
        off += (row % v->dims[d]) * v->strides[d];
        row /= v->dims[d];
    }
    return off;
}

static void view_rows(void *arg, int64_t begin, int64_t end)
{
    const view_job *j = arg;
    const ref_view *v = j->v;
    int32_t last = v->rank - 1;
    int64_t len = v->dims[last], s = v->strides[last];
    size_t es = v->esize;
    int64_t idx[REF_VIEW_MAX_RANK];
    int64_t off = view_row_offset(v, begin, last);
    int64_t r = begin;
    for (int32_t d = last - 1; d >= 0; d--) {
        idx[d] = r % v->dims[d];
        r /= v->dims[d];
    }
    for (int64_t row = begin; row < end; row++) {
        copy_row(j->out + (size_t)(row * len) * es, j->in + off * (int64_t)es, s, len, es);
        for (int32_t d = last - 1; d >= 0; d--) {
            if (++idx[d] < v->dims[d]) {
                off += v->strides[d];
                break;
            }
            idx[d] = 0;
            off -= (v->dims[d] - 1) * v->strides[d];
        }
    }
}

/* Items are (batch, block of output rows); each copies REF_TBLOCK x Q. */
static void view_transpose(void *arg, int64_t begin, int64_t end)
{
    const view_job *j = arg;
    const ref_view *v = j->v;
    int32_t n = v->rank;
    int64_t P = v->dims[n - 2], Q = v->dims[n - 1], ld = v->strides[n - 1];
    int64_t n_pb = (P + REF_TBLOCK - 1) / REF_TBLOCK;
    size_t es = v->esize;
    for (int64_t item = begin; item < end; item++) {
        int64_t batch = item / n_pb, p0 = (item % n_pb) * REF_TBLOCK;
        int64_t p1 = INFD_MIN(p0 + REF_TBLOCK, P);
        const char *src = j->in + view_row_offset(v, batch, n - 2) * (int64_t)es;
        char *dst = j->out + (size_t)(batch * P * Q) * es;
        for (int64_t q0 = 0; q0 < Q; q0 += REF_TBLOCK) {
            int64_t q1 = INFD_MIN(q0 + REF_TBLOCK, Q);
            for (int64_t p = p0; p < p1; p++)
                copy_row(dst + (size_t)(p * Q + q0) * es, src + (size_t)(p + q0 * ld) * es, ld,
                         q1 - q0, es);
        }
    }
}

void ref_view_run(const ref_view *v, const void *in, void *out, infd_pool *pool)
{
    if (v->numel == 0)
        return;
    view_job j = { .v = v, .in = in, .out = out };
    if (v->transpose2d) {
        int64_t P = v->dims[v->rank - 2], Q = v->dims[v->rank - 1];
        int64_t items = v->numel / (P * Q) * ((P + REF_TBLOCK - 1) / REF_TBLOCK);
        ref_parallel(pool, items, ref_row_grain(REF_TBLOCK * Q), view_transpose, &j);
        return;
    }
    int64_t len = v->dims[v->rank - 1];
    ref_parallel(pool, v->numel / len, ref_row_grain(len), view_rows, &j);
}

typedef struct copy_job {
    char *dst;
    const char *src;
} copy_job;

static void copy_bytes(void *arg, int64_t begin, int64_t end)
{
    const copy_job *c = arg;
    memcpy(c->dst + begin, c->src + begin, (size_t)(end - begin));
}

void ref_copy(void *dst, const void *src, size_t nbytes, infd_pool *pool)
{
    if (dst == src || nbytes == 0)
        return;
    copy_job c = { .dst = dst, .src = src };
    ref_parallel(pool, (int64_t)nbytes, 1 << 18, copy_bytes, &c);
}

infd_status ref_kernel_from_plan(const infd_kernel_args *a, const infd_cpu_kernel *plan,
                                 size_t size, const char *name,
                                 void (*run)(const infd_cpu_kernel *, const infd_kernel_io *),
                                 void (*fini)(infd_cpu_kernel *), infd_kernel **out,
                                 infd_error *err)
{
    infd_cpu_kernel *k = infd_cpu_kernel_new(size, name, run, fini);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    memcpy((char *)k + sizeof(*k), (const char *)plan + sizeof(*k), size - sizeof(*k));
    *out = &k->base;
    return INFD_STATUS_OK;
}
