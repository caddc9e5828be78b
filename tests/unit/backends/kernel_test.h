/*
 * kernel_test.h - builds a one-node graph by hand and runs it through the
 * CPU backend, for kernel unit tests.
 *
 *   kt t;
 *   kt_init(&t, "Conv", 17);
 *   kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){1, 3, 8, 8}, NULL);   // fed at run time
 *   kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){4, 3, 3, 3}, w);      // a constant
 *   kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){1, 4, 6, 6});
 *   kt_attr_ints(&t, "pads", 4, (int64_t[]){0, 0, 0, 0});
 *   ASSERT_STATUS(kt_run(&t, (const void *[]){x, w}, (void *[]){y}, &err), INFD_STATUS_OK);
 *   kt_fini(&t);
 *
 * kt_run compiles the node with infd_cpu_backend for two slots, runs it once
 * inline in slot 0 and once on a 2-thread pool in slot 1 (the second run's
 * output is compared with the first, byte for byte), and destroys the kernel. Inputs given data at
 * kt_input are constants the kernel may read at compile time; pass the same
 * pointer again in kt_run's inputs.
 */
#ifndef INFD_TEST_KERNEL_TEST_H
#define INFD_TEST_KERNEL_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/common.h"
#include "core/pool.h"
#include "graph/backend.h"
#include "graph/ir.h"

#define KT_MAX_IO    16
#define KT_MAX_ATTRS 16

typedef struct kt {
    infd_ir_graph *g;
    infd_ir_node node;
    int32_t ins[KT_MAX_IO];
    int32_t outs[KT_MAX_IO];
    infd_ir_attr attrs[KT_MAX_ATTRS];
    int n_threads;
} kt;

static inline void kt_init(kt *t, const char *op_type, int64_t opset)
{
    memset(t, 0, sizeof(*t));
    t->g = infd_ir_graph_create("kernel_test.onnx");
    t->g->opset = opset;
    t->node.name = "node0";
    t->node.op_type = op_type;
    t->node.domain = "";
    t->node.inputs = t->ins;
    t->node.outputs = t->outs;
    t->node.attrs = t->attrs;
    t->n_threads = 2;
}

static inline void kt_fini(kt *t)
{
    infd_ir_graph_destroy(t->g);
    memset(t, 0, sizeof(*t));
}

static inline int32_t kt_value(kt *t, const char *prefix, infd_dtype dtype, int32_t rank,
                               const int64_t *dims)
{
    char name[32];
    snprintf(name, sizeof(name), "%s%d", prefix, (int)t->g->n_values);
    int32_t v = infd_ir_graph_add_value(t->g, name);
    infd_ir_value *val = &t->g->values[v];
    val->dtype = dtype;
    val->shape.rank = rank;
    for (int32_t i = 0; i < rank; i++) {
        val->shape.dims[i].value = dims[i];
        val->shape.dims[i].sym = -1;
    }
    return v;
}

/* Adds input i (in call order). `data` non-NULL makes it a constant (copied
 * into the graph). */
static inline void kt_input(kt *t, infd_dtype dtype, int32_t rank, const int64_t *dims,
                            const void *data)
{
    int32_t v = kt_value(t, "in", dtype, rank, dims);
    if (data) {
        infd_ir_value *val = &t->g->values[v];
        size_t n = infd_dtype_size(dtype);
        for (int32_t i = 0; i < rank; i++)
            n *= (size_t)dims[i];
        void *copy = infd_arena_alloc(&t->g->weights, n ? n : 1, INFD_ALIGNMENT);
        memcpy(copy, data, n);
        val->data = copy;
        val->nbytes = n;
        val->flags |= INFD_IR_VALUE_INITIALIZER;
    }
    t->ins[t->node.n_inputs++] = v;
}

/* Leaves an optional input out (ONNX's empty name). */
static inline void kt_input_omitted(kt *t)
{
    t->ins[t->node.n_inputs++] = -1;
}

static inline void kt_output(kt *t, infd_dtype dtype, int32_t rank, const int64_t *dims)
{
    t->outs[t->node.n_outputs++] = kt_value(t, "out", dtype, rank, dims);
}

static inline infd_ir_attr *kt_attr(kt *t, const char *name, infd_ir_attr_type type)
{
    infd_ir_attr *a = &t->attrs[t->node.n_attrs++];
    memset(a, 0, sizeof(*a));
    a->name = name;
    a->type = type;
    a->tensor = -1;
    return a;
}

static inline void kt_attr_int(kt *t, const char *name, int64_t v)
{
    kt_attr(t, name, INFD_IR_ATTR_INT)->i = v;
}

static inline void kt_attr_float(kt *t, const char *name, float v)
{
    kt_attr(t, name, INFD_IR_ATTR_FLOAT)->f = v;
}

static inline void kt_attr_string(kt *t, const char *name, const char *s)
{
    infd_ir_attr *a = kt_attr(t, name, INFD_IR_ATTR_STRING);
    a->s = infd_arena_strdup(&t->g->arena, s);
    a->s_len = strlen(s);
}

static inline void kt_attr_ints(kt *t, const char *name, int32_t n, const int64_t *v)
{
    infd_ir_attr *a = kt_attr(t, name, INFD_IR_ATTR_INTS);
    int64_t *copy = infd_arena_alloc(&t->g->arena, sizeof(int64_t) * (size_t)(n ? n : 1), 0);
    memcpy(copy, v, sizeof(int64_t) * (size_t)n);
    a->ints = copy;
    a->n = n;
}

static inline void kt_attr_floats(kt *t, const char *name, int32_t n, const float *v)
{
    infd_ir_attr *a = kt_attr(t, name, INFD_IR_ATTR_FLOATS);
    float *copy = infd_arena_alloc(&t->g->arena, sizeof(float) * (size_t)(n ? n : 1), 0);
    memcpy(copy, v, sizeof(float) * (size_t)n);
    a->floats = copy;
    a->n = n;
}

static inline void kt_args(kt *t, infd_kernel_args *a, const infd_ir_value **ins,
                           const infd_ir_value **outs)
{
    memset(a, 0, sizeof(*a)); /* plain layouts, no opaque output */
    for (int32_t i = 0; i < t->node.n_inputs; i++)
        ins[i] = t->ins[i] >= 0 ? &t->g->values[t->ins[i]] : NULL;
    for (int32_t i = 0; i < t->node.n_outputs; i++)
        outs[i] = &t->g->values[t->outs[i]];
    a->g = t->g;
    a->node = &t->node;
    a->n_inputs = t->node.n_inputs;
    a->n_outputs = t->node.n_outputs;
    a->inputs = ins;
    a->outputs = outs;
    a->n_threads = t->n_threads;
    a->n_slots = 2;
}

/* True when the CPU backend accepts the node; `why` says why not. */
static inline bool kt_supported(kt *t, infd_error *why)
{
    const infd_ir_value *ins[KT_MAX_IO], *outs[KT_MAX_IO];
    infd_kernel_args a;
    kt_args(t, &a, ins, outs);
    return infd_backend_supports(&infd_cpu_backend, &a, why);
}

static inline size_t kt_out_bytes(kt *t, int32_t i)
{
    const infd_ir_value *v = &t->g->values[t->outs[i]];
    size_t n = infd_dtype_size(v->dtype);
    for (int32_t d = 0; d < v->shape.rank; d++)
        n *= (size_t)v->shape.dims[d].value;
    return n;
}

/* Runs compiled kernel `k` (taken: destroyed here) inline in slot 0 into
 * `outputs`, then on a 2-thread pool in slot 1, and fails (INTERNAL) if the
 * two results differ. */
static inline infd_status kt_run_kernel(kt *t, infd_kernel *k, const void *const *inputs,
                                        void *const *outputs, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    infd_pool *pool = NULL;
    void *again[KT_MAX_IO] = { 0 };
    void *ws = NULL;
    if (k->workspace_bytes)
        ws = infd_aligned_alloc(INFD_ALIGNMENT, infd_align_up(k->workspace_bytes, 64));
    infd_kernel_io io = { .inputs = inputs, .outputs = outputs, .workspace = ws, .pool = NULL };
    infd_kernel_run(k, &io);

    infd_pool_create(t->n_threads, 0, &pool, NULL);
    for (int32_t i = 0; i < t->node.n_outputs; i++) {
        again[i] = malloc(kt_out_bytes(t, i) + 1);
        memset(again[i], 0xcd, kt_out_bytes(t, i) + 1);
    }
    io.outputs = again;
    io.pool = pool;
    io.slot = 1;
    infd_kernel_run(k, &io);
    for (int32_t i = 0; i < t->node.n_outputs && st == INFD_STATUS_OK; i++) {
        if (outputs[i] && memcmp(again[i], outputs[i], kt_out_bytes(t, i)) != 0)
            st = infd_error_set(err, INFD_STATUS_INTERNAL,
                                "output %d differs between the inline and the pool run", (int)i);
    }
    for (int32_t i = 0; i < t->node.n_outputs; i++)
        free(again[i]);
    infd_pool_destroy(pool);
    infd_free(ws);
    infd_kernel_destroy(k);
    return st;
}

/* Compiles the node with the CPU backend and runs it with kt_run_kernel. */
static inline infd_status kt_run(kt *t, const void *const *inputs, void *const *outputs,
                                 infd_error *err)
{
    const infd_ir_value *ins[KT_MAX_IO], *outs[KT_MAX_IO];
    infd_kernel_args a;
    infd_kernel *k = NULL;
    kt_args(t, &a, ins, outs);
    infd_status st = infd_backend_compile(&infd_cpu_backend, &a, &k, err);
    if (st != INFD_STATUS_OK)
        return st;
    return kt_run_kernel(t, k, inputs, outputs, err);
}

#endif /* INFD_TEST_KERNEL_TEST_H */
