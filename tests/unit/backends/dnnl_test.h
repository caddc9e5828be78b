/*
 * dnnl_test.h - helpers for the oneDNN kernel tests (test_dnnl_*.c): random
 * data, the tolerance check, and a direct look at the oneDNN op table so a
 * test can tell that oneDNN (not the reference table) accepted a node.
 */
#ifndef INFD_TEST_DNNL_TEST_H
#define INFD_TEST_DNNL_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu_ops.h"
#include "kernel_test.h"
#include "test.h"

/* Deterministic uniform floats in [lo, hi). */
static inline void dt_fill(float *p, size_t n, uint32_t seed, float lo, float hi)
{
    uint32_t s = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = lo + (hi - lo) * (float)(s >> 8) / (float)(1u << 24);
    }
}

static inline float *dt_rand(size_t n, uint32_t seed)
{
    float *p = malloc(sizeof(float) * (n ? n : 1));
    dt_fill(p, n, seed, -1.0f, 1.0f);
    return p;
}

/* Index of the first element outside |got - want| <= 1e-4 + 1e-3 |want|,
 * or -1. */
static inline int64_t dt_mismatch(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(got[i] - want[i]);
        if (!(d <= 1e-4f + 1e-3f * fabsf(want[i])))
            return (int64_t)i;
    }
    return -1;
}

#define ASSERT_CLOSE(got, want, n)                                                           \
    do {                                                                                     \
        int64_t at_ = dt_mismatch((got), (want), (n));                                       \
        if (at_ >= 0)                                                                        \
            TEST_FAIL_("%s vs %s: element %" PRId64 " is %g, expected %g", #got, #want, at_, \
                       (double)(got)[at_], (double)(want)[at_]);                             \
    } while (0)

/* True when the oneDNN table has an entry for the node that accepts it;
 * `why` gets the last decline's reason. */
static inline bool dt_dnnl_supports(kt *t, infd_error *why)
{
    const infd_ir_value *ins[KT_MAX_IO], *outs[KT_MAX_IO];
    infd_kernel_args a;
    kt_args(t, &a, ins, outs);
    infd_error_clear(why);
    for (const infd_cpu_op *op = infd_cpu_ops_dnnl; op->op_type; op++) {
        if (strcmp(op->op_type, t->node.op_type) == 0 && op->supports(&a, why))
            return true;
    }
    return false;
}

/* Runs the node through kt_run after checking that oneDNN takes it. */
#define DT_RUN(t, ins, outs)                                            \
    do {                                                                \
        infd_error e_ = { 0 };                                          \
        if (!dt_dnnl_supports((t), &e_))                                \
            TEST_FAIL_("oneDNN declined: %s", e_.msg);                  \
        infd_status s_ = kt_run((t), (ins), (outs), &e_);               \
        if (s_ != INFD_STATUS_OK)                                       \
            TEST_FAIL_("kt_run: %s: %s", infd_status_name(s_), e_.msg); \
    } while (0)

/* Checks that oneDNN declines the node and the reason mentions `needle`. */
#define DT_DECLINES(t, needle)                      \
    do {                                            \
        infd_error e_ = { 0 };                      \
        if (dt_dnnl_supports((t), &e_))             \
            TEST_FAIL_("oneDNN accepted the node"); \
        ASSERT_STR_HAS(e_.msg, (needle));           \
    } while (0)

/*
 * Chains of kernels compiled by hand with layouts, as the plan does: a
 * step is compiled with its inputs' layouts (NULL: plain) and whether its
 * output may be opaque, and run once in slot 0 with a workspace of its
 * own. Buffers of opaque values take dt_out_bytes.
 */
static inline infd_status dt_compile_prec(kt *t, const void *const *in_layouts, bool out_opaque_ok,
                                          infd_precision precision, infd_kernel **out,
                                          infd_error *err)
{
    const infd_ir_value *ins[KT_MAX_IO], *outs[KT_MAX_IO];
    infd_kernel_args a;
    kt_args(t, &a, ins, outs);
    a.input_layouts = in_layouts;
    a.output_opaque_ok = out_opaque_ok;
    a.precision = precision;
    return infd_backend_compile(&infd_cpu_backend, &a, out, err);
}

static inline infd_status dt_compile(kt *t, const void *const *in_layouts, bool out_opaque_ok,
                                     infd_kernel **out, infd_error *err)
{
    return dt_compile_prec(t, in_layouts, out_opaque_ok, INFD_PRECISION_FP32, out, err);
}

static inline bool dt_produces(kt *t)
{
    const infd_ir_value *ins[KT_MAX_IO], *outs[KT_MAX_IO];
    infd_kernel_args a;
    kt_args(t, &a, ins, outs);
    return infd_cpu_backend.produces_opaque(&a);
}

static inline bool dt_accepts(kt *t, int i)
{
    const infd_ir_value *ins[KT_MAX_IO], *outs[KT_MAX_IO];
    infd_kernel_args a;
    kt_args(t, &a, ins, outs);
    return infd_cpu_backend.accepts_opaque(&a, i);
}

/* Bytes of output 0 as k writes it. */
static inline size_t dt_out_bytes(kt *t, const infd_kernel *k)
{
    return k->output_layout ? k->output_layout_bytes : kt_out_bytes(t, 0);
}

static inline void dt_exec(const infd_kernel *k, const void *const *inputs, void *const *outputs)
{
    void *ws = NULL;
    if (k->workspace_bytes)
        ws = infd_aligned_alloc(INFD_ALIGNMENT, infd_align_up(k->workspace_bytes, 64));
    infd_kernel_io io = { .inputs = inputs, .outputs = outputs, .workspace = ws };
    infd_kernel_run(k, &io);
    infd_free(ws);
}

/* An aligned buffer for a value of `n` bytes, filled with a NaN pattern so
 * unwritten elements show. */
static inline void *dt_buf(size_t n)
{
    void *p = infd_aligned_alloc(INFD_ALIGNMENT, infd_align_up(n ? n : 1, 64));
    memset(p, 0xff, n);
    return p;
}

#endif /* INFD_TEST_DNNL_TEST_H */
