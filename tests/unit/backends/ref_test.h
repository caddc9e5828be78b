/*
 * ref_test.h - runs one node through the CPU backend's own kernel table
 * (infd_cpu_ops_ref) directly, skipping oneDNN, so the ref kernels are tested
 * even for ops and dtypes oneDNN would take. Same contract as kt_run: the
 * node is compiled for two slots, run inline into `outputs` and again on a
 * 2-thread pool, and the two results must be byte-identical.
 *
 * Plus small helpers: a deterministic RNG and array comparisons.
 */
#ifndef INFD_TEST_REF_TEST_H
#define INFD_TEST_REF_TEST_H

#include <inttypes.h>
#include <math.h>

#include "backends/cpu/cpu_ops.h"
#include "kernel_test.h"
#include "test.h"

static inline const infd_cpu_op *rt_find(kt *t)
{
    for (const infd_cpu_op *op = infd_cpu_ops_ref; op->op_type; op++)
        if (strcmp(op->op_type, t->node.op_type) == 0)
            return op;
    return NULL;
}

/* True when the ref table accepts the node; `why` says why not. */
static inline bool rt_supported(kt *t, infd_error *why)
{
    const infd_ir_value *ins[KT_MAX_IO], *outs[KT_MAX_IO];
    infd_kernel_args a;
    const infd_cpu_op *op = rt_find(t);
    if (!op)
        return infd_error_set(why, INFD_STATUS_UNIMPLEMENTED, "not in the ref table") == 0;
    kt_args(t, &a, ins, outs);
    return !op->supports || op->supports(&a, why);
}

static inline infd_status rt_run(kt *t, const void *const *inputs, void *const *outputs,
                                 infd_error *err)
{
    const infd_ir_value *ins[KT_MAX_IO], *outs[KT_MAX_IO];
    infd_kernel_args a;
    infd_kernel *k = NULL;
    const infd_cpu_op *op = rt_find(t);
    if (!op)
        return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED, "not in the ref table");
    kt_args(t, &a, ins, outs);
    if (op->supports && !op->supports(&a, err))
        return err ? err->code : INFD_STATUS_UNIMPLEMENTED;
    infd_status st = op->compile(&a, &k, err);
    if (st != INFD_STATUS_OK)
        return st;
    return kt_run_kernel(t, k, inputs, outputs, err);
}

/* Adds a constant tensor value to the graph (for TENSOR attributes); returns
 * its index. */
static inline int32_t rt_tensor(kt *t, infd_dtype dtype, int32_t rank, const int64_t *dims,
                                const void *data)
{
    int32_t v = kt_value(t, "t", dtype, rank, dims);
    infd_ir_value *val = &t->g->values[v];
    size_t n = infd_dtype_size(dtype);
    for (int32_t i = 0; i < rank; i++)
        n *= (size_t)dims[i];
    void *copy = infd_arena_alloc(&t->g->weights, n ? n : 1, INFD_ALIGNMENT);
    memcpy(copy, data, n);
    val->data = copy;
    val->nbytes = n;
    val->flags |= INFD_IR_VALUE_INITIALIZER;
    return v;
}

static inline void rt_attr_tensor(kt *t, const char *name, int32_t value)
{
    kt_attr(t, name, INFD_IR_ATTR_TENSOR)->tensor = value;
}

static uint64_t rt_rng_state_ = 0x9e3779b97f4a7c15ull;

static inline uint64_t rt_rand(void)
{
    uint64_t x = rt_rng_state_;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rt_rng_state_ = x;
    return x;
}

/* Uniform in [-1, 1). */
static inline float rt_randf(void)
{
    return (float)((double)(rt_rand() >> 11) / (double)(1ull << 53)) * 2.0f - 1.0f;
}

static inline void rt_fill_f32(float *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = rt_randf();
}

/* Index of the first element where |a - b| > tol * (1 + |b|); -1 if none. */
static inline int64_t rt_mismatch_f32(const float *a, const float *b, int64_t n, float tol)
{
    for (int64_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= tol * (1.0f + fabsf(b[i]))) && !(a[i] != a[i] && b[i] != b[i]))
            return i;
    }
    return -1;
}

#define ASSERT_F32_ARRAY(got, want, n, tol)                                                      \
    do {                                                                                         \
        int64_t bad_ = rt_mismatch_f32((got), (want), (n), (tol));                               \
        if (bad_ >= 0)                                                                           \
            TEST_FAIL_("%s[%" PRId64 "] = %.9g, expected %.9g", #got, bad_, (double)(got)[bad_], \
                       (double)(want)[bad_]);                                                    \
    } while (0)

#define ASSERT_I64_ARRAY(got, want, n)                                                   \
    do {                                                                                 \
        for (int64_t i_ = 0; i_ < (int64_t)(n); i_++)                                    \
            if ((int64_t)(got)[i_] != (int64_t)(want)[i_])                               \
                TEST_FAIL_("%s[%" PRId64 "] = %" PRId64 ", expected %" PRId64, #got, i_, \
                           (int64_t)(got)[i_], (int64_t)(want)[i_]);                     \
    } while (0)

#define ASSERT_RUN_OK(t, ins, outs)                                     \
    do {                                                                \
        infd_error e_ = { 0 };                                          \
        infd_status s_ = rt_run((t), (ins), (outs), &e_);               \
        if (s_ != INFD_STATUS_OK)                                       \
            TEST_FAIL_("rt_run: %s: %s", infd_status_name(s_), e_.msg); \
    } while (0)

#endif /* INFD_TEST_REF_TEST_H */
