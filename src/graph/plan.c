/*
 * plan.c - from an ONNX file to a compiled plan, and running it.
 *
 *   load (src/onnx)            IR with symbolic dims
 *   bind input shapes          every input concrete (batch, explicit shapes)
 *   infer + fold, in order     shapes for each node (src/graph/shape.c); a node
 *                              whose inputs are all constant is run once now
 *                              on the CPU backend and becomes a constant
 *                              (Constant nodes, Shape->Slice->Concat chains,
 *                              weight preprocessing)
 *   remove dead nodes          only what reaches a graph output stays
 *   fuse (src/graph/passes.c)  BatchNorm into Conv; activations and residual
 *                              Adds into Conv/Gemm/MatMul where the backend
 *                              accepts the fused node
 *   compile kernels            one backend kernel per live node
 *   memory plan                every intermediate gets a fixed offset in one
 *                              arena, by liveness (greedy, largest first),
 *                              plus one shared workspace at the end
 *
 * Per-image prefix (CPU plans for a batch > 1): the leading kernels of a
 * convolutional network read and write large activations (112x112 or 56x56
 * planes) that do not fit in the caches for a whole batch, so each layer
 * streams the batch through memory. When those kernels treat images
 * independently (image_prefix_choose says which), they are compiled for
 * one image and run image by image: image 0 through all of them, then
 * image 1, ... The values they pass only among themselves are one image
 * big and reused by every image, so a layer's input is still in the caches
 * when it runs; the values they hand to the rest of the plan (and the
 * graph inputs they read) hold the whole batch, image i at i times an
 * image's bytes (image_stride). A one-image opaque layout read by a kernel
 * compiled for the batch is the batch's layout only when the backend says
 * so (layout_stacks); otherwise the plan is compiled without the prefix.
 *
 * A context owns an arena of plan->arena_bytes, its slot number, helper
 * threads, and a precomputed table of data pointers for every kernel's
 * inputs and outputs; a run patches in the caller's input pointers, runs the
 * kernels in order and copies the graph outputs out. Nothing in
 * infd_plan_run allocates (tests/unit/graph/test_plan.c counts).
 *
 * Graph outputs are computed into the arena and copied to the caller's
 * buffers: it keeps outputs that later nodes still read simple, at the cost
 * of one copy of the (usually small) outputs.
 *
 * Device plans (a backend with memory slots, backend.h "Device backends"):
 * each constant the kernels read is copied once to the device (a form of
 * the model's shared weights: every plan of the model on that device reads
 * the same copy), graph inputs get
 * arena slots like intermediates (live from step 0), and the arena is
 * device memory. A context adds a stream and one pinned host staging
 * buffer; a run copies the caller's inputs into staging, enqueues the H2D
 * copies (from staging, or from the caller's page-locked pieces:
 * infd_context_set_input_pieces; or device-to-device copies from the
 * caller's device memory: infd_context_set_device_input), the kernels and
 * the D2H copies of the outputs on the stream, waits once (sync), and
 * copies staging to the caller's buffers. Callers keep plain host memory
 * on both sides (device inputs aside). A device plan lives on one device
 * (infd_plan_options.device_index): plan create and destroy, context create
 * and destroy, and every run make it current on the calling thread first
 * (the backend's set_device), so one thread may serve plans on several GPUs.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/common.h"
#include "core/log.h"
#include "core/pool.h"
#include "graph/backend.h"
#include "graph/passes.h"
#include "graph/planfile.h"
#include "graph/shape.h"
#include "graph/weights.h"
#include "infd/engine.h"
#include "onnx/loader.h"

/* One live node after compilation. */
typedef struct plan_step {
    int32_t node; /* index in g->nodes */
    infd_kernel *kernel;
} plan_step;

/* Where a value's data lives at run time. */
typedef enum value_home {
    HOME_NONE = 0, /* unused */
    HOME_CONST,    /* value->data */
    HOME_INPUT,    /* the caller's input tensor */
    HOME_ARENA,    /* context arena + offset */
} value_home;

struct infd_plan {
    infd_ir_graph *g;      /* owns names; its constants point at the shared copies in `weights` */
    infd_weights *weights; /* the model's shared constants (a reference) */
    infd_weight_form **consts; /* per value: the shared constant it reads at run time, or NULL */
    int32_t n_consts;          /* entries of consts (the graph's values when shared) */
    const infd_backend_ops *backend;
    plan_step *steps;
    int32_t n_steps;
    uint8_t *home;  /* value_home per value */
    size_t *offset; /* arena offset per HOME_ARENA value */
    size_t arena_bytes;
    size_t workspace_offset; /* shared scratch at the end of the arena */
    size_t workspace_bytes;
    infd_tensor_info *inputs;
    infd_tensor_info *outputs;
    int n_threads;
    int max_contexts;
    bool plain_layouts;       /* INFD_PLAIN_LAYOUTS set: no opaque layouts (for comparisons) */
    int n_opaque;             /* values kept in an opaque layout */
    infd_precision precision; /* handed to every kernel compiled for run time */
    infd_plan_stats stats;
    /* Plan files: the tuning record per step, handed to compile (borrowed
     * while the plan is created, then NULL). */
    const infd_plan_record *records;
    int32_t n_records;
    bool device;      /* the backend computes on its own memory (backend.h) */
    int device_index; /* infd_plan_options.device_index, made current by every call */
    /* Device plans: per value, the device copy of a constant its kernels
     * read at run time (a form shared by every plan of the model on this
     * device), or NULL. */
    infd_weight_form **dev_consts;
    size_t staging_bytes; /* device plans: pinned bytes per context, inputs then outputs */
    size_t *stage_offset; /* device plans: per graph input, then per graph output */

    /* Per-image prefix (see the top): steps [0, n_image_steps) run once per
     * image of `images`; NULL arrays and 0 when the plan has none. */
    int32_t n_image_steps;
    int64_t images;
    infd_ir_value *image_values; /* per value: as the prefix's kernels see it (dim 0 is 1) */
    uint8_t *image_role;         /* per value: IMAGE_* */
    size_t *image_stride;        /* per value: bytes from one image to the next in the prefix */

    pthread_mutex_t mu; /* guards slot_used */
    uint8_t *slot_used;
};

/* How a value takes part in the per-image prefix. */
typedef enum image_role {
    IMAGE_NONE = 0, /* not read or written by the prefix, or a constant */
    IMAGE_OWN,      /* produced and consumed within the prefix: one image's bytes, reused */
    IMAGE_STACKED,  /* graph input or prefix output read later: the batch, image after image */
} image_role;

/* Device plans: a context's runs go eager, then captured, then replayed. */
typedef enum graph_state {
    GRAPH_OFF = 0, /* eager only: no capture in the backend, INFD_GRAPHS=0, or it failed */
    GRAPH_FIRST,   /* the next run is the first: eager */
    GRAPH_NEXT,    /* the next run is captured */
    GRAPH_READY,   /* runs replay the captured graph */
} graph_state;

struct infd_context {
    infd_plan *plan;
    int slot;
    uint8_t *arena;
    infd_pool *pool;
    /* Per step: pointer arrays handed to the kernel (into `ptrs`). */
    const void **in_ptrs;
    void **out_ptrs;
    size_t *in_start; /* per step: first index in in_ptrs / out_ptrs */
    size_t *out_start;
    /* Positions in in_ptrs that hold graph input i: patch[patch_start[i] ..
     * patch_start[i + 1]). */
    size_t *patch;
    size_t *patch_start;
    /* Per-image prefix: per entry of in_ptrs / out_ptrs, the bytes from one
     * image to the next, and the pointers of the image being run. */
    size_t *in_stride;
    size_t *out_stride;
    const void **image_in;
    void **image_out;
    bool profiling;
    uint64_t *step_ns; /* per step, when profiling */
    uint64_t n_profiled_runs;
    void *stream;      /* device plans: the backend's stream */
    uint8_t *staging;  /* device plans: pinned host memory, plan->staging_bytes */
    graph_state graph; /* device plans: where the run's graph capture stands */
    /* Device plans: per graph input, the pieces the next run copies it
     * from (infd_context_set_input_pieces; borrowed), -1 when none. */
    const infd_data_segment **pieces;
    int *n_pieces;
    /* Device plans: per graph input, the device memory the next run copies
     * it from (infd_context_set_device_input; borrowed), NULL when none. */
    const void **dev_in;
};

/* Whether the next run of c takes input i from the caller's tensor data
 * (through the staging buffer), not from pieces or device memory. */
static bool input_from_data(const infd_context *c, int i)
{
    return c->n_pieces[i] < 0 && !c->dev_in[i];
}

/* ------------------------------------------------------------------------- */
/* Compile                                                                   */
/* ------------------------------------------------------------------------- */

void infd_plan_options_init(infd_plan_options *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->device = INFD_DEVICE_CPU;
}

static bool is_const(const infd_ir_graph *g, int32_t v)
{
    return v >= 0 && g->values[v].data != NULL;
}

static size_t value_nbytes(const infd_ir_value *v)
{
    size_t n = infd_dtype_size(v->dtype);
    for (int32_t i = 0; i < v->shape.rank; i++)
        n *= (size_t)v->shape.dims[i].value;
    return n;
}

/* The graph input named `name`, or -1. */
static int32_t find_input(const infd_ir_graph *g, const char *name)
{
    for (int32_t i = 0; i < g->n_inputs; i++) {
        if (name && strcmp(g->values[g->inputs[i]].name, name) == 0)
            return g->inputs[i];
    }
    return -1;
}

/* Makes bound inputs constants holding a copy of their value (after their
 * shapes were bound like any other's). */
static infd_status bind_values(infd_ir_graph *g, const infd_plan_options *o, infd_error *err)
{
    for (int k = 0; k < o->n_values; k++) {
        const infd_tensor *t = &o->values[k].value;
        int32_t v = find_input(g, o->values[k].name);
        if (v < 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: a value is bound to '%s', which is not an input", g->source,
                                  o->values[k].name ? o->values[k].name : "(null)");
        infd_ir_value *val = &g->values[v];
        if (t->dtype != val->dtype || t->nbytes != value_nbytes(val))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: the value bound to input '%s' is %s of %zu bytes, the "
                                  "input is %s of %zu bytes",
                                  g->source, val->name, infd_dtype_name(t->dtype), t->nbytes,
                                  infd_dtype_name(val->dtype), value_nbytes(val));
        void *copy = infd_arena_alloc(&g->weights, t->nbytes ? t->nbytes : 1, INFD_ALIGNMENT);
        if (!copy)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
        if (t->nbytes)
            memcpy(copy, t->data, t->nbytes);
        val->data = copy;
        val->nbytes = t->nbytes;
    }
    return INFD_STATUS_OK;
}

/* Gives every graph input a concrete shape. */
static infd_status bind_inputs(infd_ir_graph *g, const infd_plan_options *o, infd_error *err)
{
    for (int32_t i = 0; i < g->n_inputs; i++) {
        infd_ir_value *v = &g->values[g->inputs[i]];
        const infd_input_shape *given = NULL;
        infd_input_shape from_value;
        for (int k = 0; k < o->n_shapes; k++) {
            if (o->shapes[k].name && strcmp(o->shapes[k].name, v->name) == 0)
                given = &o->shapes[k];
        }
        for (int k = 0; k < o->n_values && !given; k++) {
            if (o->values[k].name && strcmp(o->values[k].name, v->name) == 0) {
                from_value.name = v->name;
                from_value.shape = o->values[k].value.shape;
                given = &from_value;
            }
        }
        char decl[128], got[128];
        infd_ir_shape_format(g, &v->shape, decl, sizeof(decl));
        if (given) {
            if (v->shape.rank >= 0 && v->shape.rank != given->shape.rank)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: input '%s' has shape %s; the given shape %s has "
                                      "another rank",
                                      g->source, v->name, decl,
                                      infd_shape_format(&given->shape, got, sizeof(got)));
            for (int32_t d = 0; d < given->shape.rank && v->shape.rank >= 0; d++) {
                int64_t want = v->shape.dims[d].value;
                if (want >= 0 && want != given->shape.dims[d])
                    return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                          "%s: input '%s' has shape %s; the given shape %s "
                                          "differs in dim %d",
                                          g->source, v->name, decl,
                                          infd_shape_format(&given->shape, got, sizeof(got)),
                                          (int)d);
            }
            v->shape.rank = given->shape.rank;
            for (int32_t d = 0; d < given->shape.rank; d++) {
                v->shape.dims[d].value = given->shape.dims[d];
                v->shape.dims[d].sym = -1;
            }
            continue;
        }
        if (v->shape.rank < 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: input '%s' has no declared shape; give one", g->source,
                                  v->name);
        for (int32_t d = 0; d < v->shape.rank; d++) {
            if (v->shape.dims[d].value >= 0)
                continue;
            if (d != 0)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: input '%s' has shape %s: dim %d is symbolic; give "
                                      "the input's shape",
                                      g->source, v->name, decl, (int)d);
            v->shape.dims[d].value = o->batch > 0 ? o->batch : 1;
            v->shape.dims[d].sym = -1;
        }
    }
    return INFD_STATUS_OK;
}

/* `vals`: the values the kernel sees (g->values, or the per-image prefix's
 * one-image copies). */
static void make_args_of(const infd_ir_graph *g, const infd_ir_value *vals, int32_t n,
                         const infd_ir_value **ins, const infd_ir_value **outs, int n_threads,
                         int n_slots, infd_kernel_args *a)
{
    const infd_ir_node *node = &g->nodes[n];
    *a = (infd_kernel_args){ 0 }; /* every field, the ones added later included */
    for (int32_t i = 0; i < node->n_inputs; i++)
        ins[i] = node->inputs[i] >= 0 ? &vals[node->inputs[i]] : NULL;
    for (int32_t i = 0; i < node->n_outputs; i++)
        outs[i] = node->outputs[i] >= 0 ? &vals[node->outputs[i]] : NULL;
    a->g = g;
    a->node = node;
    a->n_inputs = node->n_inputs;
    a->n_outputs = node->n_outputs;
    a->inputs = ins;
    a->outputs = outs;
    a->n_threads = n_threads;
    a->n_slots = n_slots;
    a->input_layouts = NULL; /* plain unless compile_steps says otherwise */
    a->output_opaque_ok = false;
    a->precision =
        INFD_PRECISION_FP32; /* folding computes in FP32; compile_steps sets the plan's */
    a->tuning = NULL;        /* tune afresh unless compile_steps has a record */
    a->tuning_bytes = 0;
    a->weights = NULL; /* folding's kernels are temporary: their forms unshared */
}

static void make_args(const infd_ir_graph *g, int32_t n, const infd_ir_value **ins,
                      const infd_ir_value **outs, int n_threads, int n_slots, infd_kernel_args *a)
{
    make_args_of(g, g->values, n, ins, outs, n_threads, n_slots, a);
}

/* Runs node n once now on the CPU backend and makes its outputs constants. */
static infd_status fold(infd_ir_graph *g, int32_t n, infd_error *err)
{
    infd_ir_node *node = &g->nodes[n];
    infd_status st = INFD_STATUS_OK;
    const infd_ir_value **ins = NULL, **outs = NULL;
    const void **in_data = NULL;
    void **out_data = NULL;
    void *ws = NULL;
    infd_kernel *k = NULL;
    size_t ni = (size_t)node->n_inputs + 1, no = (size_t)node->n_outputs + 1;

    ins = infd_calloc(ni, sizeof(*ins));
    outs = infd_calloc(no, sizeof(*outs));
    in_data = infd_calloc(ni, sizeof(*in_data));
    out_data = infd_calloc(no, sizeof(*out_data));
    if (!ins || !outs || !in_data || !out_data) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory folding '%s'",
                            g->source, node->name);
        goto out;
    }
    infd_kernel_args a;
    make_args(g, n, ins, outs, 1, 1, &a);
    st = infd_backend_compile(&infd_cpu_backend, &a, &k, err);
    if (st != INFD_STATUS_OK)
        goto out;
    for (int32_t i = 0; i < node->n_inputs; i++)
        in_data[i] = node->inputs[i] >= 0 ? g->values[node->inputs[i]].data : NULL;
    for (int32_t i = 0; i < node->n_outputs; i++) {
        if (node->outputs[i] < 0)
            continue;
        size_t nb = value_nbytes(&g->values[node->outputs[i]]);
        out_data[i] = infd_arena_alloc(&g->weights, nb ? nb : 1, INFD_ALIGNMENT);
        if (!out_data[i]) {
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory folding '%s'",
                                g->source, node->name);
            goto out;
        }
    }
    if (k->workspace_bytes) {
        ws = infd_aligned_alloc(INFD_ALIGNMENT, infd_align_up(k->workspace_bytes, INFD_ALIGNMENT));
        if (!ws) {
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory folding '%s'",
                                g->source, node->name);
            goto out;
        }
    }
    infd_kernel_io io = { .inputs = in_data, .outputs = out_data, .workspace = ws };
    infd_kernel_run(k, &io);
    for (int32_t i = 0; i < node->n_outputs; i++) {
        if (node->outputs[i] < 0)
            continue;
        infd_ir_value *v = &g->values[node->outputs[i]];
        v->data = out_data[i];
        v->nbytes = value_nbytes(v);
    }
    node->dead = true;
out:
    infd_kernel_destroy(k);
    infd_free(ws);
    infd_free(ins);
    infd_free(outs);
    infd_free(in_data);
    infd_free(out_data);
    return st;
}

/* Shape and Size need only their input's shape, which is known here:
 * their outputs become constants even when the input is computed at run
 * time, which is what lets Shape -> Slice -> Concat -> Reshape chains fold. */
static infd_status fold_shape_op(infd_ir_graph *g, int32_t n, infd_error *err)
{
    infd_ir_node *node = &g->nodes[n];
    const infd_ir_value *in = &g->values[node->inputs[0]];
    int32_t rank = in->shape.rank;
    int64_t start = 0, end = rank, dims[INFD_MAX_RANK], count;
    bool is_size = strcmp(node->op_type, "Size") == 0;
    if (is_size) {
        count = 1;
        dims[0] = 1;
        for (int32_t d = 0; d < rank; d++)
            dims[0] *= in->shape.dims[d].value;
    } else {
        if (g->opset >= 15) {
            infd_status st = infd_ir_attr_int(g, node, "start", 0, &start, err);
            if (st == INFD_STATUS_OK)
                st = infd_ir_attr_int(g, node, "end", rank, &end, err);
            if (st != INFD_STATUS_OK)
                return st;
        }
        start = start < 0 ? start + rank : start;
        end = end < 0 ? end + rank : end;
        start = INFD_MIN(INFD_MAX(start, 0), rank);
        end = INFD_MIN(INFD_MAX(end, 0), rank);
        count = end > start ? end - start : 0;
        for (int64_t d = 0; d < count; d++)
            dims[d] = in->shape.dims[start + d].value;
    }
    infd_ir_value *out = &g->values[node->outputs[0]];
    size_t nb = (size_t)count * sizeof(int64_t);
    if (value_nbytes(out) != nb)
        return infd_error_set(err, INFD_STATUS_INTERNAL,
                              "%s: node '%s' (%s): output holds %zu bytes, folding made %zu",
                              g->source, node->name, node->op_type, value_nbytes(out), nb);
    int64_t *data = infd_arena_alloc(&g->weights, nb ? nb : 1, INFD_ALIGNMENT);
    if (!data)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
    memcpy(data, dims, nb);
    out->data = data;
    out->nbytes = nb;
    node->dead = true;
    return INFD_STATUS_OK;
}

/* Shape inference and constant folding over the nodes in order. */
static infd_status infer_and_fold(infd_ir_graph *g, int *n_folded, infd_error *err)
{
    for (int32_t n = 0; n < g->n_nodes; n++) {
        infd_ir_node *node = &g->nodes[n];
        infd_status st = infd_shape_infer_node(g, n, err);
        if (st != INFD_STATUS_OK)
            return st;
        bool all_const = true, any_out = false;
        for (int32_t i = 0; i < node->n_inputs; i++) {
            if (node->inputs[i] >= 0 && !is_const(g, node->inputs[i]))
                all_const = false;
        }
        for (int32_t i = 0; i < node->n_outputs; i++) {
            if (node->outputs[i] >= 0 && !is_const(g, node->outputs[i]))
                any_out = true;
        }
        if (!any_out) { /* Constant: shape inference already gave it data */
            node->dead = true;
            (*n_folded)++;
            continue;
        }
        if ((strcmp(node->op_type, "Shape") == 0 || strcmp(node->op_type, "Size") == 0) &&
            node->n_inputs == 1 && node->inputs[0] >= 0 && node->n_outputs == 1 &&
            node->outputs[0] >= 0) {
            st = fold_shape_op(g, n, err);
            if (st != INFD_STATUS_OK)
                return st;
            (*n_folded)++;
        } else if (all_const) {
            st = fold(g, n, err);
            if (st != INFD_STATUS_OK)
                return st;
            (*n_folded)++;
        }
    }
    return INFD_STATUS_OK;
}

/* Marks nodes that no graph output depends on as dead. */
static infd_status remove_dead(infd_ir_graph *g, infd_error *err)
{
    uint8_t *needed = infd_calloc((size_t)g->n_values + 1, 1);
    if (!needed)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
    for (int32_t i = 0; i < g->n_outputs; i++)
        needed[g->outputs[i]] = 1;
    for (int32_t n = g->n_nodes - 1; n >= 0; n--) {
        infd_ir_node *node = &g->nodes[n];
        if (node->dead)
            continue;
        bool live = false;
        for (int32_t i = 0; i < node->n_outputs; i++)
            live |= node->outputs[i] >= 0 && needed[node->outputs[i]];
        if (!live) {
            node->dead = true;
            continue;
        }
        for (int32_t i = 0; i < node->n_inputs; i++) {
            if (node->inputs[i] >= 0)
                needed[node->inputs[i]] = 1;
        }
    }
    infd_free(needed);
    return INFD_STATUS_OK;
}

typedef struct block {
    int32_t value;
    size_t bytes;
    int32_t first, last; /* step range during which the value is live */
} block;

static int by_size_desc(const void *a, const void *b)
{
    const block *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return x->value - y->value;
}

/* Assigns arena offsets: values whose live ranges overlap never share
 * bytes. Greedy by decreasing size: each block goes to the lowest offset
 * that does not collide with an already-placed, time-overlapping block. */
static infd_status plan_memory(infd_plan *p, infd_error *err)
{
    infd_ir_graph *g = p->g;
    infd_status st = INFD_STATUS_OK;
    block *blocks = NULL;
    size_t *order_off = NULL;
    int32_t *first = NULL, *last = NULL;
    int32_t n_blocks = 0;

    first = infd_malloc(sizeof(*first) * ((size_t)g->n_values + 1));
    last = infd_malloc(sizeof(*last) * ((size_t)g->n_values + 1));
    blocks = infd_malloc(sizeof(*blocks) * ((size_t)g->n_values + 1));
    order_off = infd_malloc(sizeof(*order_off) * ((size_t)g->n_values + 1));
    if (!first || !last || !blocks || !order_off) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
        goto out;
    }
    for (int32_t v = 0; v < g->n_values; v++) {
        first[v] = -1;
        last[v] = -1;
        if (g->values[v].data)
            p->home[v] = HOME_CONST;
    }
    for (int32_t i = 0; i < g->n_inputs; i++) {
        int32_t v = g->inputs[i];
        if (g->values[v].data) /* bound inputs stay constants */
            continue;
        if (p->device) { /* copied into the arena before step 0 */
            p->home[v] = HOME_ARENA;
            first[v] = last[v] = 0;
        } else {
            p->home[v] = HOME_INPUT;
        }
    }
    for (int32_t s = 0; s < p->n_steps; s++) {
        const infd_ir_node *node = &g->nodes[p->steps[s].node];
        for (int32_t i = 0; i < node->n_outputs; i++) {
            int32_t v = node->outputs[i];
            if (v >= 0 && p->home[v] == HOME_NONE) {
                p->home[v] = HOME_ARENA;
                first[v] = last[v] = s;
            }
        }
        for (int32_t i = 0; i < node->n_inputs; i++) {
            int32_t v = node->inputs[i];
            if (v >= 0 && p->home[v] == HOME_ARENA)
                last[v] = s;
        }
    }
    for (int32_t i = 0; i < g->n_outputs; i++) {
        int32_t v = g->outputs[i];
        if (p->home[v] == HOME_ARENA)
            last[v] = p->n_steps; /* read after the last step, by the copy out */
    }
    for (int32_t v = 0; v < g->n_values; v++) {
        if (p->home[v] != HOME_ARENA)
            continue;
        uint8_t role = p->image_role ? p->image_role[v] : IMAGE_NONE;
        size_t nb = value_nbytes(role == IMAGE_OWN ? &p->image_values[v] : &g->values[v]);
        int32_t prod = g->values[v].producer;
        for (int32_t s = 0; s < p->n_steps && prod >= 0; s++) {
            const infd_kernel *k = p->steps[s].kernel;
            if (p->steps[s].node == prod && k->output_layout && g->nodes[prod].outputs[0] == v)
                nb = INFD_MAX(nb, k->output_layout_bytes);
        }
        if (role == IMAGE_STACKED) {
            /* Image 0 writes it before images 1.. run the prefix's first
             * steps: nothing the prefix uses may share its bytes. */
            nb = INFD_MAX(nb, (size_t)p->images * p->image_stride[v]);
            first[v] = 0;
        }
        blocks[n_blocks].value = v;
        blocks[n_blocks].bytes = infd_align_up(nb ? nb : 1, INFD_ALIGNMENT);
        blocks[n_blocks].first = first[v];
        blocks[n_blocks].last = last[v];
        n_blocks++;
    }
    qsort(blocks, (size_t)n_blocks, sizeof(*blocks), by_size_desc);
    size_t total = 0;
    for (int32_t b = 0; b < n_blocks; b++) {
        /* Candidate offsets: 0 and the end of every placed block that is
         * live at the same time; take the lowest that fits. O(n^2) per
         * block, fine for graphs of a few thousand values. */
        size_t best = SIZE_MAX;
        for (int32_t c = -1; c < b; c++) {
            size_t cand = 0;
            if (c >= 0) {
                if (blocks[c].last < blocks[b].first || blocks[b].last < blocks[c].first)
                    continue;
                cand = order_off[c] + blocks[c].bytes;
            }
            if (cand >= best)
                continue;
            bool fits = true;
            for (int32_t o = 0; o < b && fits; o++) {
                if (blocks[o].last < blocks[b].first || blocks[b].last < blocks[o].first)
                    continue;
                if (cand < order_off[o] + blocks[o].bytes && order_off[o] < cand + blocks[b].bytes)
                    fits = false;
            }
            if (fits)
                best = cand;
        }
        order_off[b] = best;
        p->offset[blocks[b].value] = best;
        if (best + blocks[b].bytes > total)
            total = best + blocks[b].bytes;
    }
    size_t ws = 0;
    for (int32_t s = 0; s < p->n_steps; s++)
        ws = INFD_MAX(ws, p->steps[s].kernel->workspace_bytes);
    /* A device arena starts 256-byte aligned (the backend's alloc); the
     * workspace after the values must be too (cuBLASLt's requirement): at
     * 64 it depended on the values' total whether a cuBLASLt kernel ran. */
    p->workspace_offset = p->device ? infd_align_up(total, INFD_WORKSPACE_ALIGNMENT) : total;
    p->workspace_bytes = infd_align_up(ws, INFD_ALIGNMENT);
    p->arena_bytes = p->workspace_offset + p->workspace_bytes;
out:
    infd_free(first);
    infd_free(last);
    infd_free(blocks);
    infd_free(order_off);
    return st;
}

static infd_status fill_info(const infd_ir_graph *g, int32_t v, infd_tensor_info *info,
                             infd_error *err)
{
    const infd_ir_value *val = &g->values[v];
    int64_t dims[INFD_MAX_RANK];
    for (int32_t d = 0; d < val->shape.rank; d++)
        dims[d] = val->shape.dims[d].value;
    info->name = val->name;
    info->dtype = val->dtype;
    info->nbytes = value_nbytes(val);
    return infd_shape_init(&info->shape, val->shape.rank, dims, err);
}

/* Which values may travel in an opaque layout: produced by a kernel that
 * can write one, read only by kernels that can read one, not a graph
 * output (see backend.h, "Layout"). */
static infd_status choose_opaque(infd_plan *p, const infd_ir_value **ins,
                                 const infd_ir_value **outs, uint8_t *ok, infd_error *err)
{
    infd_ir_graph *g = p->g;
    if (!p->backend->produces_opaque || !p->backend->accepts_opaque || p->plain_layouts)
        return INFD_STATUS_OK;
    for (int32_t n = 0; n < g->n_nodes; n++) {
        const infd_ir_node *node = &g->nodes[n];
        if (node->dead || node->n_outputs < 1 || node->outputs[0] < 0)
            continue;
        infd_kernel_args a;
        make_args(g, n, ins, outs, p->n_threads, p->max_contexts, &a);
        a.precision = p->precision;
        ok[node->outputs[0]] = p->backend->produces_opaque(&a);
    }
    for (int32_t i = 0; i < g->n_outputs; i++)
        ok[g->outputs[i]] = 0;
    for (int32_t n = 0; n < g->n_nodes; n++) {
        const infd_ir_node *node = &g->nodes[n];
        if (node->dead)
            continue;
        infd_kernel_args a;
        make_args(g, n, ins, outs, p->n_threads, p->max_contexts, &a);
        a.precision = p->precision;
        for (int32_t i = 0; i < node->n_inputs; i++) {
            int32_t v = node->inputs[i];
            if (v >= 0 && ok[v] && !p->backend->accepts_opaque(&a, i))
                ok[v] = 0;
        }
    }
    (void)err;
    return INFD_STATUS_OK;
}

/* Plan files: the record kept for the next step, checked against the node
 * it was made for. The model and the infd version are the file's, and the
 * passes are deterministic, so a mismatch means a damaged file (or a bug):
 * an error rather than silently tuning, so it is seen. */
static infd_status take_record(const infd_plan *p, const infd_ir_node *node, infd_kernel_args *a,
                               infd_error *err)
{
    const char *src = p->g->source;
    if (p->n_steps >= p->n_records)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: the plan has more kernels than the file's %d tuning records "
                              "(node '%s'); rebuild it with infd build",
                              src, (int)p->n_records, node->name);
    const infd_plan_record *r = &p->records[p->n_steps];
    if (strcmp(r->node, node->name) != 0 || strcmp(r->op_type, node->op_type) != 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: tuning record %d is for node '%s' (%s) but kernel %d is node "
                              "'%s' (%s); rebuild it with infd build",
                              src, (int)p->n_steps, r->node, r->op_type, (int)p->n_steps,
                              node->name, node->op_type);
    a->tuning = r->n_bytes ? r->bytes : NULL;
    a->tuning_bytes = r->n_bytes;
    return INFD_STATUS_OK;
}

/* Counts a compiled kernel's tuning: a kernel that took the record it was
 * given keeps the same bytes in kernel->tuning (backend.h); any other
 * record it wrote came from tuning now. */
static infd_status count_tuning(infd_plan *p, const infd_ir_node *node, const infd_kernel_args *a,
                                const infd_kernel *k, infd_error *err)
{
    if (k->tuning_bytes > INFD_KERNEL_TUNING_MAX)
        return infd_error_set(err, INFD_STATUS_INTERNAL,
                              "%s: node '%s' (%s): kernel wrote a %zu-byte tuning record (at "
                              "most %d)",
                              p->g->source, node->name, node->op_type, k->tuning_bytes,
                              INFD_KERNEL_TUNING_MAX);
    if (!k->tuning_bytes)
        return INFD_STATUS_OK;
    if (a->tuning && a->tuning_bytes == k->tuning_bytes &&
        memcmp(a->tuning, k->tuning, k->tuning_bytes) == 0)
        p->stats.n_from_cache++;
    else
        p->stats.n_tuned++;
    return INFD_STATUS_OK;
}

/* Per-image prefix (see the top of the file). */

/* Output planes smaller than 28x28 fit in the caches for a whole batch;
 * the prefix ends at the last kernel writing one at least this big. */
#define IMAGE_MIN_PLANE 784

static bool same_shape(const infd_ir_value *a, const infd_ir_value *b)
{
    if (a->shape.rank != b->shape.rank)
        return false;
    for (int32_t d = 0; d < a->shape.rank; d++) {
        if (a->shape.dims[d].value != b->shape.dims[d].value)
            return false;
    }
    return true;
}

static bool in_list(const char *op, const char *const *list)
{
    for (int i = 0; list[i]; i++) {
        if (strcmp(op, list[i]) == 0)
            return true;
    }
    return false;
}

/* Whether `node` computes each image of the batch from that image alone, so
 * that it may be compiled for one image and run once per image: one of the
 * ops below, with its one output and every run-time input batch-major (dim 0
 * is `images`). Constants are parameters (weights, bias, BatchNorm's
 * statistics), broadcast operands that do not reach the batch dim, or the
 * fused residual (shaped like the output). */
static bool image_separable(const infd_ir_graph *g, const infd_ir_node *node, int64_t images)
{
    static const char *const with_params[] = {
        "Conv",          "ConvTranspose",      "MaxPool", "AveragePool", "GlobalAveragePool",
        "GlobalMaxPool", "BatchNormalization", NULL
    };
    static const char *const elementwise[] = { "Relu",        "LeakyRelu", "Clip", "Sigmoid",
                                               "HardSigmoid", "HardSwish", "Tanh", "Add",
                                               "Sub",         "Mul",       "Div",  "Max",
                                               "Min",         "PRelu",     NULL };
    bool params = in_list(node->op_type, with_params);
    bool concat = strcmp(node->op_type, "Concat") == 0;
    if (!params && !concat && !in_list(node->op_type, elementwise))
        return false;
    /* One output: MaxPool's Indices count across the whole batch. */
    if (node->n_outputs < 1 || node->outputs[0] < 0)
        return false;
    for (int32_t i = 1; i < node->n_outputs; i++) {
        if (node->outputs[i] >= 0)
            return false;
    }
    const infd_ir_value *y = &g->values[node->outputs[0]];
    if (y->shape.rank < 1 || y->shape.dims[0].value != images)
        return false;
    if (concat) {
        int64_t axis = 0;
        if (infd_ir_attr_int(g, node, "axis", 0, &axis, NULL) != INFD_STATUS_OK)
            return false;
        if (axis < 0)
            axis += y->shape.rank;
        if (axis == 0)
            return false;
    }
    for (int32_t i = 0; i < node->n_inputs; i++) {
        if (node->inputs[i] < 0)
            continue;
        const infd_ir_value *v = &g->values[node->inputs[i]];
        if (v->data) {
            if (concat)
                return false;
            if (!params && v->shape.rank >= y->shape.rank && v->shape.dims[0].value != 1)
                return false; /* a constant that varies along the batch */
            continue;
        }
        if (params && i > 0 && !same_shape(v, y))
            return false; /* a run-time weight, say */
        if (v->shape.rank != y->shape.rank || v->shape.dims[0].value != images)
            return false;
    }
    return true;
}

/* Frees the prefix's tables; the plan then has none. */
static void image_prefix_clear(infd_plan *p)
{
    infd_free(p->image_values);
    infd_free(p->image_role);
    infd_free(p->image_stride);
    p->image_values = NULL;
    p->image_role = NULL;
    p->image_stride = NULL;
    p->n_image_steps = 0;
    p->images = 0;
}

/* Picks the prefix: the leading live nodes up to the last one, among those
 * that are all separable, whose output planes are IMAGE_MIN_PLANE or
 * larger; and makes the one-image values and the roles. CPU-style backends
 * only (a device plan's batch is parallel work, not cache traffic), for a
 * batch > 1, and not with INFD_IMAGE_PREFIX=0. */
static infd_status image_prefix_choose(infd_plan *p, infd_error *err)
{
    infd_ir_graph *g = p->g;
    const char *env = getenv("INFD_IMAGE_PREFIX");
    if (p->device || !p->backend->layout_stacks || (env && env[0] == '0') || g->n_inputs < 1)
        return INFD_STATUS_OK;
    const infd_ir_value *x = &g->values[g->inputs[0]];
    int64_t images = x->shape.rank >= 1 ? x->shape.dims[0].value : 0;
    if (images < 2)
        return INFD_STATUS_OK;
    int32_t n_steps = 0, n_prefix = 0, last = -1; /* last: node index of the prefix's last */
    for (int32_t n = 0; n < g->n_nodes; n++) {
        const infd_ir_node *node = &g->nodes[n];
        if (node->dead)
            continue;
        if (!image_separable(g, node, images))
            break;
        n_steps++;
        const infd_ir_value *y = &g->values[node->outputs[0]];
        int64_t plane = 1;
        for (int32_t d = 2; d < y->shape.rank; d++)
            plane *= y->shape.dims[d].value;
        if (y->shape.rank >= 3 && plane >= IMAGE_MIN_PLANE) {
            n_prefix = n_steps;
            last = n;
        }
    }
    if (n_prefix == 0)
        return INFD_STATUS_OK;
    p->image_values = infd_malloc(sizeof(*p->image_values) * ((size_t)g->n_values + 1));
    p->image_role = infd_calloc((size_t)g->n_values + 1, 1);
    p->image_stride = infd_calloc((size_t)g->n_values + 1, sizeof(*p->image_stride));
    if (!p->image_values || !p->image_role || !p->image_stride) {
        image_prefix_clear(p);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
    }
    memcpy(p->image_values, g->values, sizeof(*p->image_values) * (size_t)g->n_values);
    p->n_image_steps = n_prefix;
    p->images = images;
    /* Values the prefix touches: one image each; produced there and read
     * only there, or stacked. */
    for (int32_t n = 0; n <= last; n++) {
        const infd_ir_node *node = &g->nodes[n];
        if (node->dead)
            continue;
        for (int32_t i = 0; i < node->n_inputs + node->n_outputs; i++) {
            int32_t v = i < node->n_inputs ? node->inputs[i] : node->outputs[i - node->n_inputs];
            if (v < 0 || g->values[v].data || p->image_role[v] != IMAGE_NONE)
                continue;
            p->image_values[v].shape.dims[0].value = 1;
            p->image_role[v] = i < node->n_inputs ? IMAGE_STACKED : IMAGE_OWN;
        }
    }
    for (int32_t i = 0; i < g->n_outputs; i++) {
        if (p->image_role[g->outputs[i]] == IMAGE_OWN)
            p->image_role[g->outputs[i]] = IMAGE_STACKED;
    }
    for (int32_t n = last + 1; n < g->n_nodes; n++) {
        const infd_ir_node *node = &g->nodes[n];
        for (int32_t i = 0; i < node->n_inputs && !node->dead; i++) {
            int32_t v = node->inputs[i];
            if (v >= 0 && p->image_role[v] == IMAGE_OWN)
                p->image_role[v] = IMAGE_STACKED;
        }
    }
    for (int32_t v = 0; v < g->n_values; v++) { /* graph inputs: plain, their bytes */
        if (p->image_role[v] == IMAGE_STACKED && g->values[v].producer < 0)
            p->image_stride[v] = value_nbytes(&p->image_values[v]);
    }
    INFD_LOG_DEBUG("%s: the first %d kernels run image by image (%lld images)", g->source,
                   (int)n_prefix, (long long)images);
    return INFD_STATUS_OK;
}

/* Sets mark[v] for each value v a tensor attribute of `node` holds. */
static void mark_attr_tensors(const infd_ir_graph *g, const infd_ir_node *node, uint8_t *mark)
{
    for (int32_t i = 0; i < node->n_attrs; i++)
        if (node->attrs[i].type == INFD_IR_ATTR_TENSOR && node->attrs[i].tensor >= 0 &&
            node->attrs[i].tensor < g->n_values)
            mark[node->attrs[i].tensor] = 1;
}

/* Marks in keep[] the values whose constant data the plan's kernels may
 * read: inputs and tensor attributes of live nodes, graph inputs bound to
 * values, graph outputs. */
static void constants_used(const infd_ir_graph *g, uint8_t *keep)
{
    for (int32_t n = 0; n < g->n_nodes; n++) {
        const infd_ir_node *node = &g->nodes[n];
        if (node->dead)
            continue;
        for (int32_t i = 0; i < node->n_inputs; i++)
            if (node->inputs[i] >= 0)
                keep[node->inputs[i]] = 1;
        mark_attr_tensors(g, node, keep);
    }
    for (int32_t i = 0; i < g->n_inputs; i++)
        keep[g->inputs[i]] = 1;
    for (int32_t i = 0; i < g->n_outputs; i++)
        keep[g->outputs[i]] = 1;
}

/* Points every constant the kernels may read at its shared copy in
 * p->weights (graph/weights.h: one copy per model, found by content, so
 * the weights two plans fold alike are one) and frees the plan's own
 * weight arena, where folding put this plan's constants; a constant
 * nothing live reads loses its data. Runs before the kernels are compiled,
 * so every pointer a kernel sees is the shared one. */
static infd_status share_constants(infd_plan *p, infd_error *err)
{
    infd_ir_graph *g = p->g;
    infd_status st = INFD_STATUS_OK;
    uint8_t *keep = infd_calloc((size_t)g->n_values + 1, 1);
    p->consts = infd_calloc((size_t)g->n_values + 1, sizeof(*p->consts));
    if (!keep || !p->consts) {
        infd_free(keep);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
    }
    p->n_consts = g->n_values;
    constants_used(g, keep);
    for (int32_t v = 0; v < g->n_values && st == INFD_STATUS_OK; v++) {
        infd_ir_value *val = &g->values[v];
        if (!val->data)
            continue;
        if (!keep[v]) {
            val->data = NULL;
            continue;
        }
        char what[INFD_ERROR_MSG_BYTES / 2];
        snprintf(what, sizeof(what), "%s: constant '%s'", g->source, val->name);
        st = infd_weights_copy(p->weights, val->data, val->nbytes, what, &p->consts[v], err);
        if (st == INFD_STATUS_OK)
            val->data = infd_weight_form_data(p->consts[v]);
    }
    infd_free(keep);
    if (st != INFD_STATUS_OK)
        return st;
    infd_arena_fini(&g->weights); /* nothing points into it any more */
    infd_arena_init(&g->weights, 0);
    return INFD_STATUS_OK;
}

/* After compiling: lets go of the constants no kernel reads at run time
 * (each kernel reading one made its own form of it: unread_inputs), so the
 * plan holds only what its runs read. */
static infd_status drop_unread_constants(infd_plan *p, infd_error *err)
{
    infd_ir_graph *g = p->g;
    uint8_t *read = infd_calloc((size_t)g->n_values + 1, 1);
    if (!read)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
    for (int32_t s = 0; s < p->n_steps; s++) {
        const infd_ir_node *node = &g->nodes[p->steps[s].node];
        uint32_t unread = p->steps[s].kernel->unread_inputs;
        for (int32_t i = 0; i < node->n_inputs; i++)
            if (node->inputs[i] >= 0 && !(i < 32 && (unread >> i & 1u)))
                read[node->inputs[i]] = 1;
        mark_attr_tensors(g, node, read); /* conservatively: a kernel may keep them */
    }
    for (int32_t i = 0; i < g->n_inputs; i++)
        read[g->inputs[i]] = 1;
    for (int32_t i = 0; i < g->n_outputs; i++)
        read[g->outputs[i]] = 1;
    for (int32_t v = 0; v < p->n_consts; v++) {
        if (!p->consts[v] || read[v])
            continue;
        infd_weight_form_release(p->consts[v]);
        p->consts[v] = NULL;
        g->values[v].data = NULL;
        if (p->image_values)
            p->image_values[v].data = NULL;
    }
    infd_free(read);
    return INFD_STATUS_OK;
}

/* Compiles every live node; *unstackable is set (and UNAVAILABLE returned)
 * when a stacked value of the per-image prefix got a layout the backend
 * cannot stack. */
static infd_status compile_kernels(infd_plan *p, bool *unstackable, infd_error *err)
{
    infd_ir_graph *g = p->g;
    infd_status st = INFD_STATUS_OK;
    int32_t n_live = 0, max_io = 1;
    for (int32_t n = 0; n < g->n_nodes; n++) {
        n_live += !g->nodes[n].dead;
        max_io = INFD_MAX(max_io, INFD_MAX(g->nodes[n].n_inputs, g->nodes[n].n_outputs));
    }
    const infd_ir_value **ins = infd_calloc((size_t)max_io, sizeof(*ins));
    const infd_ir_value **outs = infd_calloc((size_t)max_io, sizeof(*outs));
    const void **in_layouts = infd_calloc((size_t)max_io, sizeof(*in_layouts));
    const void **layout = infd_calloc((size_t)g->n_values + 1, sizeof(*layout));
    uint8_t *opaque_ok = infd_calloc((size_t)g->n_values + 1, 1);
    p->steps = infd_calloc((size_t)n_live + 1, sizeof(*p->steps));
    if (!ins || !outs || !in_layouts || !layout || !opaque_ok || !p->steps) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
        goto out;
    }
    st = choose_opaque(p, ins, outs, opaque_ok, err);
    if (st != INFD_STATUS_OK)
        goto out;
    for (int32_t n = 0; n < g->n_nodes; n++) {
        const infd_ir_node *node = &g->nodes[n];
        if (node->dead)
            continue;
        /* Only the recurrent ops may leave their first output out (ONNX's
         * optional Y); every other kernel writes output 0. */
        if ((node->n_outputs < 1 || node->outputs[0] < 0) && strcmp(node->op_type, "LSTM") != 0 &&
            strcmp(node->op_type, "GRU") != 0 && strcmp(node->op_type, "RNN") != 0) {
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "%s: node '%s' (%s): its first output is left out (an empty name)",
                                g->source, node->name, node->op_type);
            goto out;
        }
        infd_kernel_args a;
        bool per_image = p->n_steps < p->n_image_steps;
        make_args_of(g, per_image ? p->image_values : g->values, n, ins, outs, p->n_threads,
                     p->max_contexts, &a);
        for (int32_t i = 0; i < node->n_inputs; i++)
            in_layouts[i] = node->inputs[i] >= 0 ? layout[node->inputs[i]] : NULL;
        a.input_layouts = in_layouts;
        a.precision = p->precision;
        a.weights = p->weights;
        a.output_opaque_ok =
            node->n_outputs > 0 && node->outputs[0] >= 0 && opaque_ok[node->outputs[0]];
        if (p->records) {
            st = take_record(p, node, &a, err);
            if (st != INFD_STATUS_OK)
                goto out;
        }
        infd_kernel *k = NULL;
        uint64_t tk = infd_clock_ns();
        st = infd_backend_compile(p->backend, &a, &k, err);
        if (st != INFD_STATUS_OK)
            goto out;
        tk = infd_clock_ns() - tk;
        if (tk > 5000000) /* INFD_LOG_LEVEL=debug: where a slow build or load goes */
            INFD_LOG_DEBUG("%s: node '%s' (%s): %s compiled in %.1f ms%s", g->source, node->name,
                           node->op_type, k->name, (double)tk / 1e6,
                           a.tuning ? " (given a tuning record)" : "");
        p->steps[p->n_steps].node = n;
        p->steps[p->n_steps].kernel = k;
        p->n_steps++;
        st = count_tuning(p, node, &a, k, err);
        if (st != INFD_STATUS_OK)
            goto out;
        if (k->output_layout) {
            if (!a.output_opaque_ok) {
                st = infd_error_set(err, INFD_STATUS_INTERNAL,
                                    "%s: node '%s' (%s): kernel chose an opaque layout it was "
                                    "not allowed",
                                    g->source, node->name, node->op_type);
                goto out;
            }
            layout[node->outputs[0]] = k->output_layout;
            p->n_opaque++;
        }
        for (int32_t i = 0; per_image && i < node->n_outputs; i++) {
            int32_t v = node->outputs[i];
            if (v < 0 || p->image_role[v] != IMAGE_STACKED)
                continue;
            if (i == 0 && k->output_layout) {
                if (!p->backend->layout_stacks(k->output_layout)) {
                    *unstackable = true;
                    st = infd_error_set(err, INFD_STATUS_UNAVAILABLE,
                                        "%s: node '%s' (%s): its one-image layout does not stack",
                                        g->source, node->name, node->op_type);
                    goto out;
                }
                p->image_stride[v] = k->output_layout_bytes;
            } else {
                p->image_stride[v] = value_nbytes(&p->image_values[v]);
            }
        }
    }
    if (p->records && p->n_steps != p->n_records)
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: the plan has %d kernels but the file keeps %d tuning records; "
                            "rebuild it with infd build",
                            g->source, (int)p->n_steps, (int)p->n_records);
out:
    infd_free(ins);
    infd_free(outs);
    infd_free(in_layouts);
    infd_free(layout);
    infd_free(opaque_ok);
    return st;
}

static infd_status compile_steps(infd_plan *p, infd_error *err)
{
    infd_status st = image_prefix_choose(p, err);
    if (st != INFD_STATUS_OK)
        return st;
    bool unstackable = false;
    st = compile_kernels(p, &unstackable, err);
    if (!unstackable)
        return st;
    INFD_LOG_DEBUG("%s: compiling without the per-image prefix: %s", p->g->source,
                   err ? err->msg : "a layout does not stack");
    infd_error_clear(err);
    for (int32_t s = 0; s < p->n_steps; s++)
        infd_kernel_destroy(p->steps[s].kernel);
    infd_free(p->steps);
    p->steps = NULL;
    p->n_steps = 0;
    p->n_opaque = 0;
    p->stats.n_tuned = p->stats.n_from_cache = 0;
    image_prefix_clear(p);
    return compile_kernels(p, &unstackable, err);
}

/* A device copy of a constant (a shared form, graph/weights.h). */
typedef struct dev_const_ctx {
    const infd_plan *p;
    const infd_ir_value *v;
} dev_const_ctx;

static infd_status make_dev_const(void *ctx, void **data, size_t *bytes, infd_error *err)
{
    const dev_const_ctx *c = ctx;
    const infd_backend_ops *b = c->p->backend;
    size_t n = c->v->nbytes;
    void *d = b->alloc(INFD_BACKEND_MEM_DEVICE, n ? n : 1, err);
    if (!d)
        return err ? err->code : INFD_STATUS_OUT_OF_MEMORY;
    if (n)
        b->copy(d, c->v->data, n, INFD_BACKEND_COPY_H2D, NULL);
    infd_status st = b->sync(NULL, err);
    if (st != INFD_STATUS_OK) {
        b->free(INFD_BACKEND_MEM_DEVICE, d);
        return st;
    }
    *data = d;
    *bytes = n;
    return INFD_STATUS_OK;
}

static void free_dev_const(void *data, int32_t device, const void *arg)
{
    /* The plan releasing it made its device current (infd_plan_destroy). */
    const infd_backend_ops *b = arg;
    (void)device;
    b->free(INFD_BACKEND_MEM_DEVICE, data);
}

/* Device plans: gives each constant a kernel reads at run time its device
 * copy (shared by the model's plans on this device: keyed by content and
 * device) and lays out the staging buffer. */
static infd_status plan_device_memory(infd_plan *p, infd_error *err)
{
    infd_ir_graph *g = p->g;
    size_t total = 0;
    p->dev_consts = infd_calloc((size_t)p->n_consts + 1, sizeof(*p->dev_consts));
    if (!p->dev_consts)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
    /* A constant read by a step (home[] HOME_CONST) is uploaded unless
     * every kernel reading it has its own copy (unread_inputs). */
    for (int32_t s = 0; s < p->n_steps; s++) {
        const infd_ir_node *node = &g->nodes[p->steps[s].node];
        uint32_t unread = p->steps[s].kernel->unread_inputs;
        for (int32_t i = 0; i < node->n_inputs; i++) {
            int32_t v = node->inputs[i];
            if (v < 0 || v >= p->n_consts || p->home[v] != HOME_CONST || p->dev_consts[v] ||
                (i < 32 && (unread >> i & 1u)))
                continue;
            dev_const_ctx c = { p, &g->values[v] };
            infd_form_key k;
            infd_form_key_init(&k, g->values[v].data, g->values[v].nbytes, "device:copy", NULL, 0,
                               p->device_index);
            char what[INFD_ERROR_MSG_BYTES / 2];
            snprintf(what, sizeof(what), "%s: constant '%s'", g->source, g->values[v].name);
            infd_status st = infd_weights_form(p->weights, &k, make_dev_const, &c, free_dev_const,
                                               p->backend, what, &p->dev_consts[v], err);
            if (st != INFD_STATUS_OK)
                return st;
            total += g->values[v].nbytes;
        }
    }
    /* Runs read the device copies: the host ones go, but for graph inputs
     * and outputs (a bound input's value, a constant output). */
    uint8_t *io = infd_calloc((size_t)p->n_consts + 1, 1);
    if (!io)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
    for (int32_t i = 0; i < g->n_inputs; i++)
        io[g->inputs[i]] = 1;
    for (int32_t i = 0; i < g->n_outputs; i++)
        io[g->outputs[i]] = 1;
    for (int32_t v = 0; v < p->n_consts; v++) {
        if (!p->dev_consts[v] || !p->consts[v] || io[v])
            continue;
        infd_weight_form_release(p->consts[v]);
        p->consts[v] = NULL;
        g->values[v].data = NULL;
    }
    infd_free(io);
    p->stats.weight_bytes = total;
    size_t n_io = (size_t)g->n_inputs + (size_t)g->n_outputs;
    p->stage_offset = infd_calloc(n_io + 1, sizeof(size_t));
    if (!p->stage_offset)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
    size_t at = 0;
    for (int32_t i = 0; i < g->n_inputs; i++) {
        p->stage_offset[i] = at;
        at += infd_align_up(p->inputs[i].nbytes ? p->inputs[i].nbytes : 1, INFD_ALIGNMENT);
    }
    for (int32_t i = 0; i < g->n_outputs; i++) {
        p->stage_offset[g->n_inputs + i] = at;
        at += infd_align_up(p->outputs[i].nbytes ? p->outputs[i].nbytes : 1, INFD_ALIGNMENT);
    }
    p->staging_bytes = at;
    return INFD_STATUS_OK;
}

static void *prep_main(void *arg)
{
    infd_device_prep *d = arg;
    const infd_backend_ops *b = d->backend;
    uint64_t t0 = infd_clock_ns();
    d->st = INFD_STATUS_OK;
    if (b->available)
        d->st = b->available(&d->err);
    uint64_t t1 = infd_clock_ns();
    if (d->st == INFD_STATUS_OK && d->prepare && b->prepare) {
        d->st = b->prepare(d->index, &d->err);
        d->failed_in_prepare = d->st != INFD_STATUS_OK;
    }
    INFD_LOG_DEBUG("%s backend: available in %.1f ms, prepared in %.1f ms more (helper thread)",
                   b->name, (double)(t1 - t0) / 1e6, (double)(infd_clock_ns() - t1) / 1e6);
    return NULL;
}

void infd_device_prep_start(infd_device_prep *d, infd_device_kind kind, int index, bool prepare)
{
    infd_device_prep_start_backend(d, infd_backend_for(kind), index, prepare);
}

void infd_device_prep_start_backend(infd_device_prep *d, const infd_backend_ops *b, int index,
                                    bool prepare)
{
    memset(d, 0, sizeof(*d));
    if (!b || (!b->available && !(prepare && b->prepare)))
        return;
    d->backend = b;
    d->index = index;
    d->prepare = prepare;
    d->threaded = pthread_create(&d->thread, NULL, prep_main, d) == 0;
    if (!d->threaded)
        prep_main(d);
}

infd_status infd_device_prep_join(infd_device_prep *d, infd_error *err)
{
    if (!d->backend)
        return INFD_STATUS_OK;
    if (d->threaded)
        pthread_join(d->thread, NULL);
    d->threaded = false;
    d->backend = NULL; /* joined: a second join returns OK */
    if (d->st != INFD_STATUS_OK && err)
        *err = d->err;
    return d->st;
}

/* Joins the device preparation of plan_create and makes the device current
 * on this thread; a failure fills `err` (the path prefixed where the
 * device was there but could not be used). p NULL: only join, reporting
 * the preparation's failure. */
static infd_status device_ready(infd_device_prep *prep, const infd_plan *p, const char *path,
                                infd_error *err)
{
    infd_error perr = { 0 };
    infd_status st = infd_device_prep_join(prep, &perr);
    if (st != INFD_STATUS_OK) {
        if (err)
            *err = perr;
        /* available()'s reasons name themselves; prepare()'s get the path. */
        if (prep->failed_in_prepare)
            infd_error_prefix(err, "%s", path);
        return st;
    }
    if (!p)
        return INFD_STATUS_OK;
    st = infd_backend_set_device(p->backend, p->device_index, err);
    if (st != INFD_STATUS_OK)
        infd_error_prefix(err, "%s", path);
    return st;
}

/* Where a plan's model comes from: a file, or bytes in memory. */
typedef struct model_source {
    const char *path; /* the file, or the name used in messages */
    const void *data; /* NULL: read `path` */
    size_t n;
    const infd_plan_record *records; /* plan files: a record per step, or NULL */
    int32_t n_records;
} model_source;

/* Builds a plan of the model in `w` (retained by the plan), with the
 * tuning records of a plan file when `records` is set. `sole`: no other
 * plan will be built from w, so the model as loaded is freed as soon as the
 * plan's constants are its own (share_constants), before the kernels make
 * their forms: ResNet-50's peak then holds two copies of the weights, not
 * three. */
/* infd_plan_options.argmax: each named graph output gets a SegmentArgMax
 * node (an infd op: attributes `starts` and `ends`, INT64 indices over the
 * last axis) whose output takes its place and its name; the logits become
 * an intermediate named "<name>:logits". */
static infd_status append_argmax(infd_ir_graph *g, const infd_plan_options *o, infd_error *err)
{
    for (int k = 0; k < o->n_argmax; k++) {
        const infd_argmax_output *a = &o->argmax[k];
        int32_t slot = -1;
        for (int32_t i = 0; a->output && i < g->n_outputs; i++)
            if (strcmp(g->values[g->outputs[i]].name, a->output) == 0)
                slot = i;
        if (slot < 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: argmax of '%s': not an output of the model", g->source,
                                  a->output ? a->output : "(null)");
        if (a->n_segments < 1 || a->n_segments > INFD_MAX_ARGMAX_SEGMENTS)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: argmax of '%s': %d segments (1 to %d)", g->source, a->output,
                                  a->n_segments, INFD_MAX_ARGMAX_SEGMENTS);
        int32_t v = g->outputs[slot];
        char logits[300];
        snprintf(logits, sizeof(logits), "%s:logits", a->output);
        const char *old_name = g->values[v].name;
        const char *renamed = infd_arena_strdup(&g->arena, logits);
        int64_t *starts = infd_arena_alloc(&g->arena, sizeof(int64_t) * (size_t)a->n_segments, 8);
        int64_t *ends = infd_arena_alloc(&g->arena, sizeof(int64_t) * (size_t)a->n_segments, 8);
        infd_ir_attr *attrs = infd_arena_alloc(&g->arena, 2 * sizeof(infd_ir_attr), 8);
        int32_t *ins = infd_arena_alloc(&g->arena, sizeof(int32_t), 4);
        int32_t *outs = infd_arena_alloc(&g->arena, sizeof(int32_t), 4);
        int32_t nv = infd_ir_graph_add_value(g, old_name);
        if (!renamed || !starts || !ends || !attrs || !ins || !outs || nv < 0)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        g->values[v].name = renamed;
        g->values[v].flags &= ~(uint32_t)INFD_IR_VALUE_OUTPUT;
        g->values[nv].flags |= INFD_IR_VALUE_OUTPUT;
        for (int s = 0; s < a->n_segments; s++) {
            starts[s] = a->starts[s];
            ends[s] = a->ends[s];
        }
        memset(attrs, 0, 2 * sizeof(infd_ir_attr));
        attrs[0] = (infd_ir_attr){ .name = "starts",
                                   .type = INFD_IR_ATTR_INTS,
                                   .tensor = -1,
                                   .n = a->n_segments,
                                   .ints = starts };
        attrs[1] = (infd_ir_attr){ .name = "ends",
                                   .type = INFD_IR_ATTR_INTS,
                                   .tensor = -1,
                                   .n = a->n_segments,
                                   .ints = ends };
        ins[0] = v;
        outs[0] = nv;
        infd_ir_node node = { .name = renamed,
                              .op_type = "SegmentArgMax",
                              .domain = "",
                              .n_inputs = 1,
                              .n_outputs = 1,
                              .n_attrs = 2,
                              .inputs = ins,
                              .outputs = outs,
                              .attrs = attrs };
        int32_t n = infd_ir_graph_add_node(g, &node);
        if (n < 0)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        g->values[nv].producer = n;
        g->outputs[slot] = nv;
    }
    return INFD_STATUS_OK;
}

static infd_status plan_build(infd_weights *w, const infd_plan_record *records, int32_t n_records,
                              bool sole, const infd_plan_options *opts, infd_plan **out,
                              infd_error *err)
{
    infd_status st;
    infd_plan *p = NULL;
    infd_plan_options defaults;
    uint64_t t0 = infd_clock_ns();
    const char *path = infd_weights_name(w);
    bool using_model = false;
    *out = NULL;

    if (!opts) {
        infd_plan_options_init(&defaults);
        opts = &defaults;
    }
    const infd_backend_ops *backend = infd_backend_for(opts->device);
    if (!backend && opts->device == INFD_DEVICE_CUDA)
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE,
                              "%s: no usable CUDA device: this build has no CUDA backend", path);
    if (!backend)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: unknown device %d", path,
                              (int)opts->device);
    if (opts->precision != INFD_PRECISION_FP32 && opts->precision != INFD_PRECISION_BF16 &&
        opts->precision != INFD_PRECISION_FP16 && opts->precision != INFD_PRECISION_TF32)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: unknown precision %d", path,
                              (int)opts->precision);
    /* TF32 is a tensor-core format: refused on the CPU like FP16 rather
     * than quietly run as FP32, which is what the caller did not ask for. */
    if ((opts->precision == INFD_PRECISION_FP16 || opts->precision == INFD_PRECISION_TF32) &&
        backend == &infd_cpu_backend)
        return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED,
                              "%s: precision %s is implemented on the CUDA backend only "
                              "(--device cuda)",
                              path, opts->precision == INFD_PRECISION_FP16 ? "fp16" : "tf32");
    /* The device gets ready on a helper thread (CUDA: its context and the
     * compile stream's library handles, about 200 ms) while this one reads
     * and optimizes the model; its failure is reported first, as when it
     * was checked before reading. */
    infd_device_prep prep;
    infd_device_prep_start(&prep, opts->device, opts->device_index, true);
    p = infd_calloc(1, sizeof(*p));
    if (!p) {
        infd_device_prep_join(&prep, NULL);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    pthread_mutex_init(&p->mu, NULL);
    p->weights = w;
    infd_weights_retain(w);
    infd_weights_count_plan(w, 1);
    p->backend = backend;
    p->device = infd_backend_is_device(backend);
    p->device_index = opts->device_index;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    p->n_threads = opts->n_threads > 0 ? opts->n_threads : (int)(cores > 0 ? cores : 1);
    p->max_contexts = opts->max_contexts > 0 ? opts->max_contexts : 4;
    p->precision = opts->precision;
    const char *plain = getenv("INFD_PLAIN_LAYOUTS");
    p->plain_layouts = plain && plain[0] && plain[0] != '0';
    p->records = records;
    p->n_records = n_records;

    /* The model's structure is copied; its constants stay where they are,
     * shared (share_constants below). */
    const infd_ir_graph *base = NULL;
    st = infd_weights_use_model(w, &base, err);
    if (st != INFD_STATUS_OK)
        goto fail;
    using_model = true; /* the copy's constants point into it until share_constants */
    p->g = infd_ir_graph_clone(base);
    if (!p->g) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
        goto fail;
    }
    infd_ir_graph *g = p->g;
    p->stats.n_nodes_model = g->n_nodes;
    st = bind_inputs(g, opts, err);
    if (st == INFD_STATUS_OK)
        st = bind_values(g, opts, err);
    if (st == INFD_STATUS_OK)
        st = append_argmax(g, opts, err);
    if (st != INFD_STATUS_OK)
        goto fail;
    st = infer_and_fold(g, &p->stats.n_folded, err);
    if (st != INFD_STATUS_OK)
        goto fail;
    st = remove_dead(g, err);
    if (st == INFD_STATUS_OK)
        st = infd_pass_fold_batchnorm(g, &p->stats.n_fused, err);
    if (st == INFD_STATUS_OK)
        st = infd_pass_fold_conv_affine(g, &p->stats.n_fused, err);
    if (st == INFD_STATUS_OK)
        st = infd_pass_fuse_hardswish(g, p->backend, p->n_threads, p->precision, &p->stats.n_fused,
                                      err);
    if (st == INFD_STATUS_OK)
        st = infd_pass_fuse_activations(g, p->backend, p->n_threads, p->precision,
                                        &p->stats.n_fused, err);
    if (st == INFD_STATUS_OK)
        st = infd_pass_fuse_depthwise(g, p->backend, p->n_threads, p->precision, &p->stats.n_fused,
                                      err);
    if (st == INFD_STATUS_OK)
        st = share_constants(p, err);
    if (st != INFD_STATUS_OK)
        goto fail;
    infd_weights_unuse_model(w); /* nothing points into it any more */
    using_model = false;
    if (sole)
        infd_weights_drop_model(w);
    st = device_ready(&prep, p, path, err);
    if (st != INFD_STATUS_OK)
        goto fail;
    INFD_LOG_DEBUG("%s: %s backend ready: %.1f ms from the start", path, backend->name,
                   (double)(infd_clock_ns() - t0) / 1e6);
    uint64_t t_steps = infd_clock_ns();
    INFD_LOG_DEBUG("%s: model read and optimized: %.1f ms from the start", path,
                   (double)(t_steps - t0) / 1e6);
    st = compile_steps(p, err);
    if (backend->settle) /* what prepare started is done with once the kernels are */
        backend->settle(p->device_index);
    if (st == INFD_STATUS_OK)
        INFD_LOG_DEBUG("%s: %d kernels compiled: %.1f ms", path, p->n_steps,
                       (double)(infd_clock_ns() - t_steps) / 1e6);
    p->records = NULL; /* borrowed for the build only */
    if (st == INFD_STATUS_OK)
        st = drop_unread_constants(p, err);
    if (st != INFD_STATUS_OK)
        goto fail;

    p->home = infd_calloc((size_t)g->n_values + 1, 1);
    p->offset = infd_calloc((size_t)g->n_values + 1, sizeof(*p->offset));
    p->inputs = infd_calloc((size_t)g->n_inputs + 1, sizeof(*p->inputs));
    p->outputs = infd_calloc((size_t)g->n_outputs + 1, sizeof(*p->outputs));
    p->slot_used = infd_calloc((size_t)p->max_contexts, 1);
    if (!p->home || !p->offset || !p->inputs || !p->outputs || !p->slot_used) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
        goto fail;
    }
    st = plan_memory(p, err);
    if (st != INFD_STATUS_OK)
        goto fail;
    for (int32_t i = 0; i < g->n_inputs && st == INFD_STATUS_OK; i++)
        st = fill_info(g, g->inputs[i], &p->inputs[i], err);
    for (int32_t i = 0; i < g->n_outputs && st == INFD_STATUS_OK; i++)
        st = fill_info(g, g->outputs[i], &p->outputs[i], err);
    if (st == INFD_STATUS_OK && p->device)
        st = plan_device_memory(p, err);
    if (st != INFD_STATUS_OK)
        goto fail;
    INFD_LOG_DEBUG("%s: memory planned: %.1f ms from the start", path,
                   (double)(infd_clock_ns() - t0) / 1e6);

    p->stats.n_kernels = p->n_steps;
    p->stats.n_opaque = p->n_opaque;
    p->stats.n_image_kernels = p->n_image_steps;
    p->stats.arena_bytes = p->arena_bytes;
    if (!p->device) /* the constants its runs read (prepared forms: infd_weights_get_stats) */
        for (int32_t v = 0; v < p->n_consts; v++)
            p->stats.weight_bytes += p->consts[v] ? infd_weight_form_bytes(p->consts[v]) : 0;
    p->stats.compile_ms = (double)(infd_clock_ns() - t0) / 1e6;
    INFD_LOG_DEBUG("%s: compiled %d nodes into %d kernels (%d folded), arena %zu bytes, %.1f ms",
                   path, p->stats.n_nodes_model, p->n_steps, p->stats.n_folded, p->arena_bytes,
                   p->stats.compile_ms);
    *out = p;
    return INFD_STATUS_OK;
fail:
    if (using_model)
        infd_weights_unuse_model(w);
    /* A device that could not be readied is the first thing wrong. */
    if (device_ready(&prep, NULL, path, err) != INFD_STATUS_OK)
        st = prep.st;
    if (backend->settle)
        backend->settle(opts->device_index);
    infd_plan_destroy(p);
    return st;
}

static infd_status plan_create(const model_source *src, const infd_plan_options *opts,
                               infd_plan **out, infd_error *err)
{
    infd_weights *w = NULL;
    infd_status st = src->data
                         ? infd_weights_create_from_memory(src->data, src->n, src->path, &w, err)
                         : infd_weights_create(src->path, &w, err);
    *out = NULL;
    if (st != INFD_STATUS_OK)
        return st;
    st = plan_build(w, src->records, src->n_records, true, opts, out, err);
    infd_weights_drop_model(w); /* no other plan will be built from it (if it failed early) */
    infd_weights_destroy(w);
    return st;
}

infd_status infd_plan_create_from_weights(infd_weights *w, const infd_plan_options *opts,
                                          infd_plan **out, infd_error *err)
{
    *out = NULL;
    if (!w)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "no weights given");
    return plan_build(w, NULL, 0, false, opts, out, err);
}

infd_status infd_plan_create(const char *path, const infd_plan_options *opts, infd_plan **out,
                             infd_error *err)
{
    model_source src = { .path = path };
    if (path && infd_plan_file_is(path) && opts && opts->n_argmax > 0) {
        *out = NULL;
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: argmax outputs are not kept in plan files; build from the "
                              "ONNX model",
                              path);
    }
    if (path && infd_plan_file_is(path))
        return infd_planfile_load(NULL, 0, path, opts, out, err);
    return plan_create(&src, opts, out, err);
}

infd_status infd_plan_create_from_memory(const void *data, size_t n, const char *name,
                                         const infd_plan_options *opts, infd_plan **out,
                                         infd_error *err)
{
    model_source src = { .path = name ? name : "<memory>", .data = data, .n = n };
    if (!data || n == 0) {
        *out = NULL;
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: the model is empty",
                              src.path);
    }
    if (infd_planfile_has_magic(data, n) && opts && opts->n_argmax > 0) {
        *out = NULL;
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: argmax outputs are not kept in plan files; build from the "
                              "ONNX model",
                              src.path);
    }
    if (infd_planfile_has_magic(data, n))
        return infd_planfile_load(data, n, src.path, opts, out, err);
    return plan_create(&src, opts, out, err);
}

infd_status infd_plan_create_tuned(const void *onnx, size_t n, const char *name,
                                   const infd_plan_options *opts, const infd_plan_record *records,
                                   int32_t n_records, infd_plan **out, infd_error *err)
{
    model_source src = {
        .path = name, .data = onnx, .n = n, .records = records, .n_records = n_records
    };
    *out = NULL;
    if (!onnx || n == 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: the model is empty", name);
    return plan_create(&src, opts, out, err);
}

const infd_weights *infd_plan_weights(const infd_plan *p)
{
    return p->weights;
}

const void *infd_plan_constant_data(const infd_plan *p, const char *name)
{
    for (int32_t v = 0; v < p->n_consts; v++)
        if (p->consts[v] && strcmp(p->g->values[v].name, name) == 0)
            return infd_weight_form_data(p->consts[v]);
    return NULL;
}

int32_t infd_plan_n_records(const infd_plan *p)
{
    return p->n_steps;
}

void infd_plan_record_at(const infd_plan *p, int32_t s, infd_plan_record *out)
{
    const infd_ir_node *node = &p->g->nodes[p->steps[s].node];
    const infd_kernel *k = p->steps[s].kernel;
    out->node = node->name;
    out->op_type = node->op_type;
    out->n_bytes = (uint32_t)k->tuning_bytes;
    out->bytes = k->tuning_bytes ? k->tuning : NULL;
}

const char *infd_plan_backend_name(const infd_plan *p)
{
    return p->backend->name;
}

void infd_plan_destroy(infd_plan *p)
{
    if (!p)
        return;
    (void)infd_backend_set_device(p->backend, p->device_index, NULL); /* frees on its device */
    for (int32_t s = 0; s < p->n_steps; s++)
        infd_kernel_destroy(p->steps[s].kernel);
    for (int32_t v = 0; p->dev_consts && v < p->n_consts; v++)
        infd_weight_form_release(p->dev_consts[v]);
    infd_free(p->dev_consts);
    for (int32_t v = 0; v < p->n_consts; v++)
        infd_weight_form_release(p->consts[v]);
    infd_free(p->consts);
    infd_free(p->stage_offset);
    infd_free(p->steps);
    infd_free(p->home);
    infd_free(p->offset);
    infd_free(p->inputs);
    infd_free(p->outputs);
    infd_free(p->slot_used);
    image_prefix_clear(p);
    infd_ir_graph_destroy(p->g);
    if (p->weights) {
        infd_weights_count_plan(p->weights, -1);
        infd_weights_release(p->weights);
    }
    pthread_mutex_destroy(&p->mu);
    infd_free(p);
}

int infd_plan_n_inputs(const infd_plan *p)
{
    return p->g->n_inputs;
}

int infd_plan_n_outputs(const infd_plan *p)
{
    return p->g->n_outputs;
}

infd_status infd_plan_input(const infd_plan *p, int i, infd_tensor_info *out)
{
    if (i < 0 || i >= p->g->n_inputs)
        return INFD_STATUS_NOT_FOUND;
    *out = p->inputs[i];
    return INFD_STATUS_OK;
}

infd_status infd_plan_output(const infd_plan *p, int i, infd_tensor_info *out)
{
    if (i < 0 || i >= p->g->n_outputs)
        return INFD_STATUS_NOT_FOUND;
    *out = p->outputs[i];
    return INFD_STATUS_OK;
}

void infd_plan_get_stats(const infd_plan *p, infd_plan_stats *out)
{
    *out = p->stats;
}

/* ------------------------------------------------------------------------- */
/* Contexts and runs                                                         */
/* ------------------------------------------------------------------------- */

/* The data pointer of value v in context c (NULL for graph inputs: patched
 * per run). */
static void *value_ptr(const infd_context *c, int32_t v)
{
    const infd_plan *p = c->plan;
    if (v < 0)
        return NULL;
    switch ((value_home)p->home[v]) {
    case HOME_CONST:
        if (p->device) /* NULL: no kernel reads it (they keep their own copies) */
            return v < p->n_consts && p->dev_consts[v] ? infd_weight_form_data(p->dev_consts[v])
                                                       : NULL;
        return (void *)p->g->values[v].data;
    case HOME_ARENA:
        return c->arena + p->offset[v];
    default:
        return NULL;
    }
}

infd_status infd_context_create(infd_plan *p, infd_context **out, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    infd_context *c = NULL;
    const infd_ir_graph *g = p->g;
    size_t n_in = 0, n_out = 0;
    *out = NULL;
    st = infd_backend_set_device(p->backend, p->device_index, err); /* stream, arena, staging */
    if (st != INFD_STATUS_OK)
        return st;

    int slot = -1;
    pthread_mutex_lock(&p->mu);
    for (int s = 0; s < p->max_contexts && slot < 0; s++) {
        if (!p->slot_used[s]) {
            p->slot_used[s] = 1;
            slot = s;
        }
    }
    pthread_mutex_unlock(&p->mu);
    if (slot < 0)
        return infd_error_set(err, INFD_STATUS_RESOURCE_EXHAUSTED,
                              "%s: all %d contexts of the plan are in use", g->source,
                              p->max_contexts);
    c = infd_calloc(1, sizeof(*c));
    if (!c) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        goto fail;
    }
    c->plan = p;
    c->slot = slot;
    for (int32_t s = 0; s < p->n_steps; s++) {
        n_in += (size_t)g->nodes[p->steps[s].node].n_inputs;
        n_out += (size_t)g->nodes[p->steps[s].node].n_outputs;
    }
    if (p->device) {
        uint64_t t0 = infd_clock_ns();
        st = p->backend->stream_create(&c->stream, err);
        if (st != INFD_STATUS_OK)
            goto fail;
        INFD_LOG_DEBUG("%s: context %d: stream and its library handles in %.1f ms", g->source, slot,
                       (double)(infd_clock_ns() - t0) / 1e6);
        const char *graphs = getenv("INFD_GRAPHS");
        if (p->backend->capture_begin && !(graphs && graphs[0] == '0'))
            c->graph = GRAPH_FIRST;
        if (p->arena_bytes) {
            c->arena = p->backend->alloc(INFD_BACKEND_MEM_DEVICE, p->arena_bytes, err);
            if (!c->arena) {
                st = err ? err->code : INFD_STATUS_OUT_OF_MEMORY;
                goto fail;
            }
        }
        if (p->staging_bytes) {
            c->staging = p->backend->alloc(INFD_BACKEND_MEM_HOST, p->staging_bytes, err);
            if (!c->staging) {
                st = err ? err->code : INFD_STATUS_OUT_OF_MEMORY;
                goto fail;
            }
        }
    } else {
        c->arena = p->arena_bytes ? infd_aligned_alloc(INFD_ALIGNMENT, p->arena_bytes) : NULL;
    }
    c->in_ptrs = infd_calloc(n_in + 1, sizeof(*c->in_ptrs));
    c->out_ptrs = infd_calloc(n_out + 1, sizeof(*c->out_ptrs));
    c->in_start = infd_calloc((size_t)p->n_steps + 1, sizeof(size_t));
    c->out_start = infd_calloc((size_t)p->n_steps + 1, sizeof(size_t));
    c->patch = infd_calloc(n_in + 1, sizeof(size_t));
    c->patch_start = infd_calloc((size_t)g->n_inputs + 1, sizeof(size_t));
    c->step_ns = infd_calloc((size_t)p->n_steps + 1, sizeof(uint64_t));
    c->in_stride = infd_calloc(n_in + 1, sizeof(*c->in_stride));
    c->out_stride = infd_calloc(n_out + 1, sizeof(*c->out_stride));
    c->image_in = infd_calloc(n_in + 1, sizeof(*c->image_in));
    c->image_out = infd_calloc(n_out + 1, sizeof(*c->image_out));
    c->pieces = infd_calloc((size_t)g->n_inputs + 1, sizeof(*c->pieces));
    c->n_pieces = infd_calloc((size_t)g->n_inputs + 1, sizeof(*c->n_pieces));
    c->dev_in = infd_calloc((size_t)g->n_inputs + 1, sizeof(*c->dev_in));
    if ((p->arena_bytes && !c->arena) || !c->in_ptrs || !c->out_ptrs || !c->in_start ||
        !c->out_start || !c->patch || !c->patch_start || !c->step_ns || !c->in_stride ||
        !c->out_stride || !c->image_in || !c->image_out || !c->pieces || !c->n_pieces ||
        !c->dev_in) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                            "out of memory creating a context (%zu-byte arena)", p->arena_bytes);
        goto fail;
    }
    for (int32_t i = 0; i < g->n_inputs; i++)
        c->n_pieces[i] = -1;
    size_t ii = 0, oo = 0;
    for (int32_t s = 0; s < p->n_steps; s++) {
        const infd_ir_node *node = &g->nodes[p->steps[s].node];
        c->in_start[s] = ii;
        c->out_start[s] = oo;
        for (int32_t i = 0; i < node->n_inputs; i++) {
            int32_t v = node->inputs[i];
            if (s < p->n_image_steps && v >= 0)
                c->in_stride[ii] = p->image_stride[v];
            c->in_ptrs[ii++] = value_ptr(c, v);
        }
        for (int32_t i = 0; i < node->n_outputs; i++) {
            int32_t v = node->outputs[i];
            if (s < p->n_image_steps && v >= 0)
                c->out_stride[oo] = p->image_stride[v];
            c->out_ptrs[oo++] = value_ptr(c, v);
        }
    }
    /* Patch positions of graph inputs, grouped by input. */
    size_t np = 0;
    for (int32_t i = 0; i < g->n_inputs; i++) {
        c->patch_start[i] = np;
        for (int32_t s = 0; s < p->n_steps; s++) {
            const infd_ir_node *node = &g->nodes[p->steps[s].node];
            for (int32_t k = 0; k < node->n_inputs; k++) {
                if (node->inputs[k] == g->inputs[i] && p->home[g->inputs[i]] == HOME_INPUT)
                    c->patch[np++] = c->in_start[s] + (size_t)k;
            }
        }
    }
    c->patch_start[g->n_inputs] = np;
    if (p->n_threads > 1 && !p->device) {
        st = infd_pool_create(p->n_threads - 1, 0, &c->pool, err);
        if (st != INFD_STATUS_OK)
            goto fail;
    }
    *out = c;
    return INFD_STATUS_OK;
fail:
    if (c)
        infd_context_destroy(c);
    else {
        pthread_mutex_lock(&p->mu);
        p->slot_used[slot] = 0;
        pthread_mutex_unlock(&p->mu);
    }
    return st;
}

void infd_context_destroy(infd_context *c)
{
    if (!c)
        return;
    infd_pool_destroy(c->pool);
    pthread_mutex_lock(&c->plan->mu);
    c->plan->slot_used[c->slot] = 0;
    pthread_mutex_unlock(&c->plan->mu);
    if (c->plan->device) {
        const infd_backend_ops *b = c->plan->backend;
        (void)infd_backend_set_device(b, c->plan->device_index, NULL);
        b->free(INFD_BACKEND_MEM_DEVICE, c->arena);
        b->free(INFD_BACKEND_MEM_HOST, c->staging);
        b->stream_destroy(c->stream);
    } else {
        infd_free(c->arena);
    }
    infd_free(c->in_ptrs);
    infd_free(c->out_ptrs);
    infd_free(c->in_start);
    infd_free(c->out_start);
    infd_free(c->patch);
    infd_free(c->patch_start);
    infd_free(c->step_ns);
    infd_free(c->in_stride);
    infd_free(c->out_stride);
    infd_free(c->image_in);
    infd_free(c->image_out);
    infd_free(c->pieces);
    infd_free(c->n_pieces);
    infd_free(c->dev_in);
    infd_free(c);
}

void *infd_context_input_buffer(infd_context *c, int i)
{
    const infd_plan *p = c->plan;
    if (!c->staging || i < 0 || i >= p->g->n_inputs || p->home[p->g->inputs[i]] != HOME_ARENA)
        return NULL;
    return c->staging + p->stage_offset[i];
}

void *infd_context_output_buffer(infd_context *c, int i)
{
    const infd_plan *p = c->plan;
    if (!c->staging || i < 0 || i >= p->g->n_outputs || p->home[p->g->outputs[i]] != HOME_ARENA)
        return NULL;
    return c->staging + p->stage_offset[p->g->n_inputs + i];
}

infd_status infd_context_set_input_pieces(infd_context *c, int i, const infd_data_segment *pieces,
                                          int n, infd_error *err)
{
    const infd_plan *p = c->plan;
    if (!infd_context_input_buffer(c, i))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: input %d is not copied to a device, so it takes no pieces",
                              p->g->source, i);
    if (n < 0 || (n > 0 && !pieces))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: input '%s': %d pieces",
                              p->g->source, p->inputs[i].name, n);
    size_t total = 0;
    for (int k = 0; k < n; k++) {
        if (pieces[k].nbytes > p->inputs[i].nbytes - total || (pieces[k].nbytes && !pieces[k].data))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: input '%s': piece %d (%zu bytes) %s", p->g->source,
                                  p->inputs[i].name, k, pieces[k].nbytes,
                                  pieces[k].data ? "runs past the input's end" : "has no data");
        total += pieces[k].nbytes;
    }
    c->pieces[i] = pieces;
    c->n_pieces[i] = n;
    c->dev_in[i] = NULL;
    return INFD_STATUS_OK;
}

infd_status infd_context_set_device_input(infd_context *c, int i, const void *dev, infd_error *err)
{
    const infd_plan *p = c->plan;
    if (!infd_context_input_buffer(c, i))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: input %d is not copied to a device, so it cannot come from "
                              "device memory",
                              p->g->source, i);
    if (!dev)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: input '%s': no device memory given", p->g->source,
                              p->inputs[i].name);
    c->dev_in[i] = dev;
    c->n_pieces[i] = -1;
    return INFD_STATUS_OK;
}

void infd_context_set_profiling(infd_context *c, bool on)
{
    c->profiling = on;
}

int infd_context_n_steps(const infd_context *c)
{
    return c->plan->n_steps;
}

infd_status infd_context_step_profile(const infd_context *c, int i, infd_step_profile *out)
{
    const infd_plan *p = c->plan;
    if (i < 0 || i >= p->n_steps)
        return INFD_STATUS_NOT_FOUND;
    const infd_ir_node *node = &p->g->nodes[p->steps[i].node];
    out->node = node->name;
    out->op_type = node->op_type;
    out->kernel = p->steps[i].kernel->name ? p->steps[i].kernel->name : p->backend->name;
    out->total_ns = c->step_ns[i];
    out->runs = c->n_profiled_runs;
    return INFD_STATUS_OK;
}

/* Enqueues the input copies of a device plan's run on the context's
 * stream: each input from its staging, from the pieces the caller set, or
 * (device to device) from the caller's device memory. They stay out of
 * the captured graph, whose pointers are frozen, so that the pieces may
 * lie anywhere; one more enqueue per input per run. */
static void enqueue_device_inputs(const infd_plan *p, infd_context *c, int n_inputs)
{
    const infd_ir_graph *g = p->g;
    const infd_backend_ops *b = p->backend;
    for (int i = 0; i < n_inputs; i++) {
        int32_t v = g->inputs[i];
        size_t nb = p->inputs[i].nbytes;
        if (p->home[v] != HOME_ARENA || !nb)
            continue;
        if (c->dev_in[i]) {
            b->copy(c->arena + p->offset[v], c->dev_in[i], nb, INFD_BACKEND_COPY_D2D, c->stream);
            continue;
        }
        if (c->n_pieces[i] < 0) {
            b->copy(c->arena + p->offset[v], c->staging + p->stage_offset[i], nb,
                    INFD_BACKEND_COPY_H2D, c->stream);
            continue;
        }
        size_t at = 0;
        for (int k = 0; k < c->n_pieces[i]; k++) {
            const infd_data_segment *s = &c->pieces[i][k];
            if (s->nbytes) /* page-locked host memory or device memory */
                b->copy(c->arena + p->offset[v] + at, s->data, s->nbytes, INFD_BACKEND_COPY_ANY,
                        c->stream);
            at += s->nbytes;
        }
    }
}

/* Enqueues the D2H copies of a device plan's outputs into staging, after
 * the kernels (and outside the captured graph, so that the next run's
 * kernels, ordered after this one's, need not wait for them). */
static void enqueue_device_outputs(const infd_plan *p, infd_context *c, int n_inputs, int n_outputs)
{
    const infd_ir_graph *g = p->g;
    for (int i = 0; i < n_outputs; i++) {
        int32_t v = g->outputs[i];
        size_t nb = p->outputs[i].nbytes;
        if (p->home[v] == HOME_ARENA && nb)
            p->backend->copy(c->staging + p->stage_offset[n_inputs + i], c->arena + p->offset[v],
                             nb, INFD_BACKEND_COPY_D2H, c->stream);
    }
}

/* Enqueues the kernels of one run of a device plan on the context's
 * stream, after its input copies. Every pointer is fixed per context, so
 * the same sequence can be captured once and replayed. Profiling syncs
 * after every kernel, so its times are the kernels' own (and the run is
 * slower). */
static infd_status enqueue_device_run(const infd_plan *p, infd_context *c, infd_error *err)
{
    const infd_backend_ops *b = p->backend;
    infd_kernel_io io = { .pool = NULL, .slot = c->slot, .stream = c->stream };
    io.workspace = p->workspace_bytes ? c->arena + p->workspace_offset : NULL;
    for (int32_t s = 0; s < p->n_steps; s++) {
        io.inputs = c->in_ptrs + c->in_start[s];
        io.outputs = c->out_ptrs + c->out_start[s];
        if (INFD_UNLIKELY(c->profiling)) {
            uint64_t t0 = infd_clock_ns();
            infd_kernel_run(p->steps[s].kernel, &io);
            infd_status st = b->sync(c->stream, err);
            if (st != INFD_STATUS_OK)
                return st;
            c->step_ns[s] += infd_clock_ns() - t0;
        } else {
            infd_kernel_run(p->steps[s].kernel, &io);
        }
    }
    return INFD_STATUS_OK;
}

/* A run of a device plan (validated by infd_plan_run). The first run is
 * eager (libraries finish their lazy setup in it); the second is captured
 * into a graph (backend.h, capture_begin) that later runs replay, which
 * takes the per-kernel launch cost off the host. A failed capture leaves
 * the context eager for good. INFD_GRAPHS=0 turns capture off. */
static infd_status run_device(const infd_plan *p, infd_context *c, const infd_tensor *inputs,
                              int n_inputs, infd_tensor *outputs, int n_outputs, infd_error *err)
{
    const infd_ir_graph *g = p->g;
    const infd_backend_ops *b = p->backend;
    infd_status st = INFD_STATUS_OK;
    for (int i = 0; i < n_inputs; i++) {
        uint8_t *stage = c->staging + p->stage_offset[i];
        if (p->home[g->inputs[i]] == HOME_ARENA && p->inputs[i].nbytes && input_from_data(c, i) &&
            inputs[i].data != stage) /* infd_context_input_buffer: already there */
            memcpy(stage, inputs[i].data, p->inputs[i].nbytes);
    }
    enqueue_device_inputs(p, c, n_inputs);
    if (b->order_begin)
        b->order_begin(c->stream);
    if (c->graph == GRAPH_READY && !c->profiling) {
        b->replay(c->stream);
    } else if (c->graph == GRAPH_NEXT && !c->profiling) {
        infd_error cap = { 0 };
        bool ok = b->capture_begin(c->stream, &cap) == INFD_STATUS_OK;
        if (ok) {
            st = enqueue_device_run(p, c, err);
            ok = b->capture_end(c->stream, &cap) == INFD_STATUS_OK && st == INFD_STATUS_OK;
        }
        c->graph = ok ? GRAPH_READY : GRAPH_OFF;
        if (ok) {
            b->replay(c->stream);
        } else {
            INFD_LOG_WARN("%s: running without a captured graph: %s", g->source, cap.msg);
            st = enqueue_device_run(p, c, err);
        }
    } else {
        st = enqueue_device_run(p, c, err);
        if (c->graph == GRAPH_FIRST && !c->profiling)
            c->graph = GRAPH_NEXT;
    }
    if (b->order_end)
        b->order_end(c->stream);
    enqueue_device_outputs(p, c, n_inputs, n_outputs);
    c->n_profiled_runs += c->profiling;
    infd_status sst = b->sync(c->stream, err);
    if (st == INFD_STATUS_OK)
        st = sst;
    if (st != INFD_STATUS_OK)
        return st;
    for (int i = 0; i < n_outputs; i++) {
        int32_t v = g->outputs[i];
        size_t nb = p->outputs[i].nbytes;
        const void *src = p->home[v] == HOME_ARENA ? c->staging + p->stage_offset[n_inputs + i]
                                                   : g->values[v].data;
        if (nb && outputs[i].data != src)
            memcpy(outputs[i].data, src, nb);
        outputs[i].dtype = p->outputs[i].dtype;
        outputs[i].shape = p->outputs[i].shape;
    }
    return INFD_STATUS_OK;
}

static void run_step(const infd_plan *p, infd_context *c, const infd_kernel_io *io, int32_t s)
{
    if (INFD_UNLIKELY(c->profiling)) {
        uint64_t t0 = infd_clock_ns();
        infd_kernel_run(p->steps[s].kernel, io);
        c->step_ns[s] += infd_clock_ns() - t0;
    } else {
        infd_kernel_run(p->steps[s].kernel, io);
    }
}

/* The per-image prefix for image `img`: every pointer moved on by its
 * value's stride (0 for the values each image reuses). */
static void run_image(const infd_plan *p, infd_context *c, infd_kernel_io *io, int64_t img)
{
    const infd_ir_graph *g = p->g;
    for (int32_t s = 0; s < p->n_image_steps; s++) {
        const infd_ir_node *node = &g->nodes[p->steps[s].node];
        size_t i0 = c->in_start[s], o0 = c->out_start[s];
        for (int32_t i = 0; i < node->n_inputs; i++) {
            const uint8_t *ptr = c->in_ptrs[i0 + (size_t)i];
            c->image_in[i0 + (size_t)i] =
                ptr ? ptr + (size_t)img * c->in_stride[i0 + (size_t)i] : NULL;
        }
        for (int32_t i = 0; i < node->n_outputs; i++) {
            uint8_t *ptr = c->out_ptrs[o0 + (size_t)i];
            c->image_out[o0 + (size_t)i] =
                ptr ? ptr + (size_t)img * c->out_stride[o0 + (size_t)i] : NULL;
        }
        io->inputs = c->image_in + i0;
        io->outputs = c->image_out + o0;
        run_step(p, c, io, s);
    }
}

static infd_status plan_run(const infd_plan *p, infd_context *c, const infd_tensor *inputs,
                            int n_inputs, infd_tensor *outputs, int n_outputs, infd_error *err);

infd_status infd_plan_run(const infd_plan *p, infd_context *c, const infd_tensor *inputs,
                          int n_inputs, infd_tensor *outputs, int n_outputs, infd_error *err)
{
    infd_status st = plan_run(p, c, inputs, n_inputs, outputs, n_outputs, err);
    if (c->plan == p) /* the pieces are for one run, whatever came of it */
        for (int32_t i = 0; i < p->g->n_inputs; i++) {
            c->n_pieces[i] = -1;
            c->dev_in[i] = NULL;
        }
    return st;
}

static infd_status plan_run(const infd_plan *p, infd_context *c, const infd_tensor *inputs,
                            int n_inputs, infd_tensor *outputs, int n_outputs, infd_error *err)
{
    const infd_ir_graph *g = p->g;
    char want[128], got[128];
    if (c->plan != p)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "the context belongs to another plan");
    if (n_inputs != g->n_inputs || n_outputs != g->n_outputs)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: expected %d inputs and %d outputs, got %d and %d", g->source,
                              (int)g->n_inputs, (int)g->n_outputs, n_inputs, n_outputs);
    for (int i = 0; i < n_inputs; i++) {
        const infd_tensor_info *info = &p->inputs[i];
        const infd_tensor *t = &inputs[i];
        if (t->dtype != info->dtype || !infd_shape_equal(&t->shape, &info->shape) ||
            t->nbytes != info->nbytes || (info->nbytes && !t->data && input_from_data(c, i)))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: input '%s' must be %s %s (%zu bytes), got %s %s (%zu bytes)",
                                  g->source, info->name, infd_dtype_name(info->dtype),
                                  infd_shape_format(&info->shape, want, sizeof(want)), info->nbytes,
                                  infd_dtype_name(t->dtype),
                                  infd_shape_format(&t->shape, got, sizeof(got)), t->nbytes);
    }
    for (int i = 0; i < n_inputs; i++) {
        const infd_ir_value *v = &g->values[g->inputs[i]];
        if (p->home[g->inputs[i]] == HOME_CONST && v->nbytes &&
            memcmp(inputs[i].data, v->data, v->nbytes) != 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: input '%s' was bound to a value when the plan was built "
                                  "(it decides shapes); this run feeds another value: build a "
                                  "plan for it",
                                  g->source, v->name);
    }
    for (int i = 0; i < n_outputs; i++) {
        if (outputs[i].nbytes < p->outputs[i].nbytes || (p->outputs[i].nbytes && !outputs[i].data))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: output '%s' needs a %zu-byte buffer, got %zu", g->source,
                                  p->outputs[i].name, p->outputs[i].nbytes, outputs[i].nbytes);
    }
    if (p->device) {
        /* The calling thread may last have run a plan on another GPU. */
        infd_status st = infd_backend_set_device(p->backend, p->device_index, err);
        if (st != INFD_STATUS_OK)
            return st;
        return run_device(p, c, inputs, n_inputs, outputs, n_outputs, err);
    }
    for (int i = 0; i < n_inputs; i++) {
        for (size_t k = c->patch_start[i]; k < c->patch_start[i + 1]; k++)
            c->in_ptrs[c->patch[k]] = inputs[i].data;
    }
    infd_kernel_io io = { .pool = c->pool, .slot = c->slot };
    io.workspace = p->workspace_bytes ? c->arena + p->workspace_offset : NULL;
    for (int64_t img = 0; img < p->images; img++)
        run_image(p, c, &io, img);
    for (int32_t s = p->n_image_steps; s < p->n_steps; s++) {
        io.inputs = c->in_ptrs + c->in_start[s];
        io.outputs = c->out_ptrs + c->out_start[s];
        run_step(p, c, &io, s);
    }
    c->n_profiled_runs += c->profiling;
    for (int i = 0; i < n_outputs; i++) {
        int32_t v = g->outputs[i];
        const void *src = NULL;
        if (p->home[v] == HOME_INPUT) {
            for (int k = 0; k < n_inputs; k++) {
                if (g->inputs[k] == v)
                    src = inputs[k].data;
            }
        } else {
            src = value_ptr(c, v);
        }
        if (p->outputs[i].nbytes)
            memcpy(outputs[i].data, src, p->outputs[i].nbytes);
        outputs[i].dtype = p->outputs[i].dtype;
        outputs[i].shape = p->outputs[i].shape;
    }
    return INFD_STATUS_OK;
}
