/*
 * passes.c - BatchNorm folding and activation fusion.
 *
 * Both need "who reads this value": consumer counts over live nodes are
 * recomputed per pass (one sweep), and a value that is a graph output counts
 * as read, so it is never fused away.
 */
#include "graph/passes.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/common.h"

/* Number of live readers of each value (+1 for graph outputs). */
static int32_t *count_readers(const infd_ir_graph *g)
{
    int32_t *n = infd_calloc((size_t)g->n_values + 1, sizeof(*n));
    if (!n)
        return NULL;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const infd_ir_node *node = &g->nodes[i];
        if (node->dead)
            continue;
        for (int32_t k = 0; k < node->n_inputs; k++) {
            if (node->inputs[k] >= 0)
                n[node->inputs[k]]++;
        }
    }
    for (int32_t i = 0; i < g->n_outputs; i++)
        n[g->outputs[i]]++;
    return n;
}

static bool is_fp32_const(const infd_ir_graph *g, int32_t v, int64_t numel)
{
    if (v < 0 || !g->values[v].data || g->values[v].dtype != INFD_DTYPE_FP32)
        return false;
    return (int64_t)(g->values[v].nbytes / sizeof(float)) == numel;
}

/* A new constant FP32 value with `n` elements shaped like `like`. */
static int32_t new_const(infd_ir_graph *g, const char *name, const infd_ir_shape *shape, size_t n,
                         float **data)
{
    int32_t v = infd_ir_graph_add_value(g, name);
    if (v < 0)
        return -1;
    float *d = infd_arena_alloc(&g->weights, n * sizeof(float), INFD_ALIGNMENT);
    if (!d)
        return -1;
    infd_ir_value *val = &g->values[v];
    val->dtype = INFD_DTYPE_FP32;
    val->shape = *shape;
    val->data = d;
    val->nbytes = n * sizeof(float);
    val->flags |= INFD_IR_VALUE_INITIALIZER;
    *data = d;
    return v;
}

infd_status infd_pass_fold_batchnorm(infd_ir_graph *g, int *n_folded, infd_error *err)
{
    int32_t *readers = count_readers(g);
    if (!readers)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        infd_ir_node *bn = &g->nodes[i];
        if (bn->dead || strcmp(bn->op_type, "BatchNormalization") != 0 || bn->n_inputs != 5)
            continue;
        if (bn->n_outputs > 1) {
            bool extra = false; /* training outputs in use: leave it */
            for (int32_t k = 1; k < bn->n_outputs; k++)
                extra |= bn->outputs[k] >= 0 && readers[bn->outputs[k]] > 0;
            if (extra)
                continue;
        }
        int32_t x = bn->inputs[0];
        int32_t p = g->values[x].producer;
        if (p < 0 || g->nodes[p].dead || strcmp(g->nodes[p].op_type, "Conv") != 0 ||
            readers[x] != 1)
            continue;
        infd_ir_node *conv = &g->nodes[p];
        if (conv->n_inputs < 2 || conv->n_outputs != 1 || conv->outputs[0] != x)
            continue;
        const infd_ir_value *w = &g->values[conv->inputs[1]];
        if (w->shape.rank < 3 || w->dtype != INFD_DTYPE_FP32 || !w->data)
            continue;
        int64_t m = w->shape.dims[0].value;
        int64_t per = (int64_t)(w->nbytes / sizeof(float)) / (m ? m : 1);
        int32_t b = conv->n_inputs > 2 ? conv->inputs[2] : -1;
        if ((b >= 0 && !is_fp32_const(g, b, m)) || !is_fp32_const(g, bn->inputs[1], m) ||
            !is_fp32_const(g, bn->inputs[2], m) || !is_fp32_const(g, bn->inputs[3], m) ||
            !is_fp32_const(g, bn->inputs[4], m))
            continue;
        float eps = 1e-5f;
        if (infd_ir_attr_float(g, bn, "epsilon", 1e-5f, &eps, NULL) != INFD_STATUS_OK)
            continue;

        const float *scale = g->values[bn->inputs[1]].data;
        const float *beta = g->values[bn->inputs[2]].data;
        const float *mean = g->values[bn->inputs[3]].data;
        const float *var = g->values[bn->inputs[4]].data;
        const float *bias = b >= 0 ? g->values[b].data : NULL;
        const float *wd = w->data;
        infd_ir_shape bshape = { .rank = 1 };
        bshape.dims[0].value = m;
        bshape.dims[0].sym = -1;
        float *nw, *nb;
        char name[600];
        /* Copied: adding values below may move g->values. */
        infd_ir_shape wshape = w->shape;
        snprintf(name, sizeof(name), "%s#bn_weight", conv->name);
        int32_t vw = new_const(g, name, &wshape, (size_t)(m * per), &nw);
        snprintf(name, sizeof(name), "%s#bn_bias", conv->name);
        int32_t vb = vw >= 0 ? new_const(g, name, &bshape, (size_t)m, &nb) : -1;
        int32_t *ins = infd_arena_alloc(&g->arena, 3 * sizeof(int32_t), 0);
        if (vw < 0 || vb < 0 || !ins) {
            infd_free(readers);
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
        }
        /* g->values may have moved; conv and bn are in g->nodes, which did not. */
        for (int64_t o = 0; o < m; o++) {
            float s = scale[o] / sqrtf(var[o] + eps);
            for (int64_t k = 0; k < per; k++)
                nw[o * per + k] = wd[o * per + k] * s;
            nb[o] = ((bias ? bias[o] : 0.0f) - mean[o]) * s + beta[o];
        }
        ins[0] = conv->inputs[0];
        ins[1] = vw;
        ins[2] = vb;
        conv->inputs = ins;
        conv->n_inputs = 3;
        /* The Conv now writes the BatchNormalization's output. */
        int32_t *outs = infd_arena_alloc(&g->arena, sizeof(int32_t), 0);
        if (!outs) {
            infd_free(readers);
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
        }
        outs[0] = bn->outputs[0];
        conv->outputs = outs;
        g->values[bn->outputs[0]].producer = p;
        bn->dead = true;
        (*n_folded)++;
    }
    infd_free(readers);
    return INFD_STATUS_OK;
}

/* The activation a node computes, as fused-attribute values; false when the
 * node is not a fusable activation. */
static bool activation_of(const infd_ir_graph *g, const infd_ir_node *n, const char **kind,
                          float *alpha, float *beta)
{
    *alpha = 0.0f;
    *beta = 0.0f;
    if (strcmp(n->op_type, "Relu") == 0) {
        *kind = "Relu";
        return true;
    }
    if (strcmp(n->op_type, "Sigmoid") == 0) {
        *kind = "Sigmoid";
        return true;
    }
    if (strcmp(n->op_type, "LeakyRelu") == 0) {
        *kind = "LeakyRelu";
        return infd_ir_attr_float(g, n, "alpha", 0.01f, alpha, NULL) == INFD_STATUS_OK;
    }
    if (strcmp(n->op_type, "HardSigmoid") == 0) {
        *kind = "HardSigmoid";
        return infd_ir_attr_float(g, n, "alpha", 0.2f, alpha, NULL) == INFD_STATUS_OK &&
               infd_ir_attr_float(g, n, "beta", 0.5f, beta, NULL) == INFD_STATUS_OK;
    }
    if (strcmp(n->op_type, "Clip") == 0) {
        *kind = "Clip";
        *alpha = -INFINITY;
        *beta = INFINITY;
        if (g->opset < 11) {
            return infd_ir_attr_float(g, n, "min", -INFINITY, alpha, NULL) == INFD_STATUS_OK &&
                   infd_ir_attr_float(g, n, "max", INFINITY, beta, NULL) == INFD_STATUS_OK;
        }
        for (int32_t k = 1; k < n->n_inputs && k < 3; k++) {
            int32_t v = n->inputs[k];
            if (v < 0)
                continue;
            if (!is_fp32_const(g, v, 1))
                return false;
            *(k == 1 ? alpha : beta) = *(const float *)g->values[v].data;
        }
        return true;
    }
    return false;
}

/* The single live reader of value v, or -1. */
static int32_t only_reader(const infd_ir_graph *g, const int32_t *readers, int32_t v)
{
    if (readers[v] != 1)
        return -1;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const infd_ir_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int32_t k = 0; k < n->n_inputs; k++) {
            if (n->inputs[k] == v)
                return i;
        }
    }
    return -1;
}

/* Builds the fused version of `prod` in `out` (arrays in g->arena). */
static infd_status build_fused(infd_ir_graph *g, const infd_ir_node *prod, const char *kind,
                               float alpha, float beta, int32_t residual, int32_t out_value,
                               infd_ir_node *out)
{
    *out = *prod;
    /* The residual goes after the optional bias: input 3 of Conv and Gemm
     * (W and B or C before it, -1 where left out), input 2 of MatMul. */
    int32_t res_at = strcmp(prod->op_type, "MatMul") == 0 ? 2 : 3;
    int32_t n_in = residual >= 0 ? INFD_MAX(prod->n_inputs, res_at) + 1 : prod->n_inputs;
    int32_t *ins = infd_arena_alloc(&g->arena, (size_t)(n_in + 1) * sizeof(int32_t), 0);
    int32_t *outs = infd_arena_alloc(&g->arena, sizeof(int32_t), 0);
    infd_ir_attr *attrs =
        infd_arena_alloc(&g->arena, (size_t)(prod->n_attrs + 4) * sizeof(infd_ir_attr), 0);
    if (!ins || !outs || !attrs)
        return INFD_STATUS_OUT_OF_MEMORY;
    for (int32_t k = 0; k < n_in; k++)
        ins[k] = k < prod->n_inputs ? prod->inputs[k] : -1;
    if (residual >= 0)
        ins[n_in - 1] = residual;
    outs[0] = out_value;
    memcpy(attrs, prod->attrs, (size_t)prod->n_attrs * sizeof(infd_ir_attr));
    int32_t na = prod->n_attrs;
    if (kind) {
        attrs[na++] = (infd_ir_attr){ .name = "_fused_activation",
                                      .type = INFD_IR_ATTR_STRING,
                                      .s = kind,
                                      .s_len = strlen(kind),
                                      .tensor = -1 };
        attrs[na++] = (infd_ir_attr){
            .name = "_fused_alpha", .type = INFD_IR_ATTR_FLOAT, .f = alpha, .tensor = -1
        };
        attrs[na++] = (infd_ir_attr){
            .name = "_fused_beta", .type = INFD_IR_ATTR_FLOAT, .f = beta, .tensor = -1
        };
    }
    if (residual >= 0)
        attrs[na++] =
            (infd_ir_attr){ .name = "_fused_sum", .type = INFD_IR_ATTR_INT, .i = 1, .tensor = -1 };
    out->inputs = ins;
    out->n_inputs = n_in;
    out->outputs = outs;
    out->n_outputs = 1;
    out->attrs = attrs;
    out->n_attrs = na;
    return INFD_STATUS_OK;
}

static bool backend_accepts(const infd_ir_graph *g, const infd_ir_node *node,
                            const infd_backend_ops *backend, int n_threads)
{
    const infd_ir_value *ins[16], *outs[1];
    if (node->n_inputs > 16)
        return false;
    for (int32_t k = 0; k < node->n_inputs; k++)
        ins[k] = node->inputs[k] >= 0 ? &g->values[node->inputs[k]] : NULL;
    outs[0] = &g->values[node->outputs[0]];
    infd_kernel_args a = { .g = g,
                           .node = node,
                           .n_inputs = node->n_inputs,
                           .n_outputs = 1,
                           .inputs = ins,
                           .outputs = outs,
                           .n_threads = n_threads,
                           .n_slots = 1 };
    return infd_backend_supports(backend, &a, NULL);
}

infd_status infd_pass_fuse_activations(infd_ir_graph *g, const infd_backend_ops *backend,
                                       int n_threads, int *n_fused, infd_error *err)
{
    int32_t *readers = count_readers(g);
    if (!readers)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        infd_ir_node *prod = &g->nodes[i];
        if (prod->dead || prod->n_outputs != 1 || prod->outputs[0] < 0)
            continue;
        if (strcmp(prod->op_type, "Conv") != 0 && strcmp(prod->op_type, "Gemm") != 0 &&
            strcmp(prod->op_type, "MatMul") != 0)
            continue;
        if (infd_ir_node_attr(prod, "_fused_activation") || infd_ir_node_attr(prod, "_fused_sum"))
            continue;
        int32_t v = prod->outputs[0];
        int32_t next = only_reader(g, readers, v);
        if (next < 0)
            continue;
        infd_ir_node *n1 = &g->nodes[next];
        int32_t residual = -1, after_add = -1;
        int32_t add_node = -1;
        /* Conv -> Add(conv, other) [-> activation]: the residual of ResNet. */
        if (strcmp(n1->op_type, "Add") == 0 && n1->n_inputs == 2 && n1->n_outputs == 1 &&
            strcmp(prod->op_type, "Conv") == 0) {
            int32_t other = n1->inputs[0] == v ? n1->inputs[1] : n1->inputs[0];
            if (other == v || other < 0)
                continue;
            const infd_ir_value *ov = &g->values[other], *av = &g->values[n1->outputs[0]];
            bool same_shape = ov->shape.rank == av->shape.rank && ov->dtype == av->dtype;
            for (int32_t d = 0; same_shape && d < ov->shape.rank; d++)
                same_shape = ov->shape.dims[d].value == av->shape.dims[d].value;
            /* The fused node runs where the Conv is: the residual must be
             * ready by then. (In a ResNet block the other branch's Conv
             * usually comes later; it is fused there instead.) */
            int32_t op = g->values[other].producer;
            if (!same_shape || (op >= 0 && op > i))
                continue;
            residual = other;
            add_node = next;
            after_add = n1->outputs[0];
            next = only_reader(g, readers, after_add);
            n1 = next >= 0 ? &g->nodes[next] : NULL;
        }
        const char *kind = NULL;
        float alpha = 0, beta = 0;
        bool act = n1 && n1->n_outputs == 1 && n1->outputs[0] >= 0 &&
                   activation_of(g, n1, &kind, &alpha, &beta);
        if (!act && residual < 0)
            continue;
        int32_t out_value = act ? n1->outputs[0] : after_add;
        infd_ir_node fused;
        if (build_fused(g, prod, act ? kind : NULL, alpha, beta, residual, out_value, &fused) !=
            INFD_STATUS_OK) {
            infd_free(readers);
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
        }
        if (!backend_accepts(g, &fused, backend, n_threads))
            continue;
        *prod = fused;
        g->values[out_value].producer = i;
        if (add_node >= 0) {
            g->nodes[add_node].dead = true;
            (*n_fused)++;
        }
        if (act) {
            n1->dead = true;
            (*n_fused)++;
        }
        /* Reader counts of the fused values no longer matter: both are gone. */
    }
    infd_free(readers);
    return INFD_STATUS_OK;
}
