/*
 * passes.c - BatchNorm and constant-affine folding into Conv, hard-swish
 * recognition, activation fusion, depthwise + 1x1 Conv fusion.
 *
 * All need "who reads this value": consumer counts over live nodes are
 * recomputed per pass (one sweep), and a value that is a graph output counts
 * as read, so it is never fused away.
 *
 * Paddle's ONNX exports (PaddleOCR) write each Conv of a MobileNetV3/PP-LCNet
 * block as
 *
 *   Conv -> Mul(c1) -> Add(c2) -> Add(3) -> Clip(0, 6) -> Mul(x, .) -> Div(6)
 *        -> Mul(c3) -> Add(c4) -> next op
 *
 * (a learnable scalar affine, hard-swish spelt out, another affine): nine
 * passes over the activation. In plan.c's order, infd_pass_fold_conv_affine
 * moves c1, c2 into the weights and bias, infd_pass_fuse_hardswish makes the
 * middle one HardSwish node, and infd_pass_fuse_activations gives it and the
 * c3, c4 affine (a trailing oneDNN eltwise_linear) to the Conv: one pass. The
 * trailing affine is not folded into the next Conv instead: that Conv's zero
 * padding would then pad with c4 instead of 0 at the borders.
 */
#include "graph/passes.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/common.h"
#include "graph/node_params.h"

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

static bool is_op(const infd_ir_node *n, const char *op_type)
{
    return strcmp(n->op_type, op_type) == 0;
}

/* The value of a constant FP32 scalar (one element, any rank). */
static bool const_scalar(const infd_ir_graph *g, int32_t v, float *out)
{
    if (!is_fp32_const(g, v, 1))
        return false;
    *out = *(const float *)g->values[v].data;
    return true;
}

/* Same dtype and the same known dims. */
static bool same_shape(const infd_ir_value *a, const infd_ir_value *b)
{
    if (a->dtype != b->dtype || a->shape.rank != b->shape.rank || a->shape.rank < 0)
        return false;
    for (int32_t d = 0; d < a->shape.rank; d++) {
        if (a->shape.dims[d].value < 0 || a->shape.dims[d].value != b->shape.dims[d].value)
            return false;
    }
    return true;
}

/* Whether the node has any fusion attribute (_fused_*): a node a pass has
 * already rewritten. */
static bool has_fused_attr(const infd_ir_node *n)
{
    for (int32_t k = 0; k < n->n_attrs; k++) {
        if (strncmp(n->attrs[k].name, "_fused_", 7) == 0)
            return true;
    }
    return false;
}

/* For a two-input, one-output node reading v once: the other input when it
 * is constant (*v_first: v is input 0), else -1. */
static int32_t const_operand(const infd_ir_graph *g, const infd_ir_node *n, int32_t v,
                             bool *v_first)
{
    if (n->n_inputs != 2 || n->n_outputs != 1 || n->outputs[0] < 0)
        return -1;
    int32_t a = n->inputs[0], b = n->inputs[1];
    *v_first = a == v;
    int32_t c = a == v ? b : a;
    if ((a == v) == (b == v) || c < 0 || !g->values[c].data)
        return -1;
    return c;
}

/* Whether the two-input node reads exactly a and b (in either order). */
static bool reads_pair(const infd_ir_node *n, int32_t a, int32_t b)
{
    return n->n_inputs == 2 && n->n_outputs == 1 && n->outputs[0] >= 0 && a != b &&
           ((n->inputs[0] == a && n->inputs[1] == b) || (n->inputs[0] == b && n->inputs[1] == a));
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
    if (strcmp(n->op_type, "HardSwish") == 0) {
        *kind = "HardSwish";
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

/* What a fusion gives a producer: activation, residual, trailing affine. */
typedef struct fusion {
    const char *kind; /* activation, or NULL */
    float alpha, beta;
    int32_t residual; /* value added before the activation, or -1 */
    bool post;        /* a trailing scale and shift */
    float post_scale, post_shift;
    int32_t out_value; /* what the fused node writes */
} fusion;

/* Builds the fused version of `prod` in `out` (arrays in g->arena). */
static infd_status build_fused(infd_ir_graph *g, const infd_ir_node *prod, const fusion *f,
                               infd_ir_node *out)
{
    *out = *prod;
    /* The residual goes after the optional bias: input 3 of Conv and Gemm
     * (W and B or C before it, -1 where left out), input 2 of MatMul. */
    int32_t res_at = strcmp(prod->op_type, "MatMul") == 0 ? 2 : 3;
    int32_t n_in = f->residual >= 0 ? INFD_MAX(prod->n_inputs, res_at) + 1 : prod->n_inputs;
    int32_t *ins = infd_arena_alloc(&g->arena, (size_t)(n_in + 1) * sizeof(int32_t), 0);
    int32_t *outs = infd_arena_alloc(&g->arena, sizeof(int32_t), 0);
    infd_ir_attr *attrs =
        infd_arena_alloc(&g->arena, (size_t)(prod->n_attrs + 6) * sizeof(infd_ir_attr), 0);
    if (!ins || !outs || !attrs)
        return INFD_STATUS_OUT_OF_MEMORY;
    for (int32_t k = 0; k < n_in; k++)
        ins[k] = k < prod->n_inputs ? prod->inputs[k] : -1;
    if (f->residual >= 0)
        ins[n_in - 1] = f->residual;
    outs[0] = f->out_value;
    if (prod->n_attrs) /* a node without attributes has no array */
        memcpy(attrs, prod->attrs, (size_t)prod->n_attrs * sizeof(infd_ir_attr));
    int32_t na = prod->n_attrs;
    if (f->kind) {
        attrs[na++] = (infd_ir_attr){ .name = "_fused_activation",
                                      .type = INFD_IR_ATTR_STRING,
                                      .s = f->kind,
                                      .s_len = strlen(f->kind),
                                      .tensor = -1 };
        attrs[na++] = (infd_ir_attr){
            .name = "_fused_alpha", .type = INFD_IR_ATTR_FLOAT, .f = f->alpha, .tensor = -1
        };
        attrs[na++] = (infd_ir_attr){
            .name = "_fused_beta", .type = INFD_IR_ATTR_FLOAT, .f = f->beta, .tensor = -1
        };
    }
    if (f->residual >= 0)
        attrs[na++] =
            (infd_ir_attr){ .name = "_fused_sum", .type = INFD_IR_ATTR_INT, .i = 1, .tensor = -1 };
    if (f->post) {
        attrs[na++] = (infd_ir_attr){ .name = "_fused_post_scale",
                                      .type = INFD_IR_ATTR_FLOAT,
                                      .f = f->post_scale,
                                      .tensor = -1 };
        attrs[na++] = (infd_ir_attr){ .name = "_fused_post_shift",
                                      .type = INFD_IR_ATTR_FLOAT,
                                      .f = f->post_shift,
                                      .tensor = -1 };
    }
    out->inputs = ins;
    out->n_inputs = n_in;
    out->outputs = outs;
    out->n_outputs = 1;
    out->attrs = attrs;
    out->n_attrs = na;
    return INFD_STATUS_OK;
}

static bool backend_accepts(const infd_ir_graph *g, const infd_ir_node *node,
                            const infd_backend_ops *backend, int n_threads,
                            infd_precision precision)
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
                           .n_slots = 1,
                           .precision = precision };
    return infd_backend_supports(backend, &a, NULL);
}

/* Most nodes of a constant affine chain folded or fused at once. */
#define MAX_AFFINE 8

/* The constant `c` as per-channel values for an output shaped `y` (dim 1
 * holds the channels): one value for all (*stride 0) or one per channel
 * along y's dim 1 after right-aligned broadcasting (*stride 1). */
static bool channel_const(const infd_ir_graph *g, int32_t c, const infd_ir_shape *y,
                          const float **data, int64_t *stride)
{
    const infd_ir_value *cv = &g->values[c];
    if (cv->dtype != INFD_DTYPE_FP32 || !cv->data || y->rank < 2 || cv->shape.rank < 0 ||
        cv->shape.rank > y->rank)
        return false;
    int64_t m = y->dims[1].value, numel = (int64_t)(cv->nbytes / sizeof(float));
    *data = cv->data;
    *stride = 0;
    if (numel == 1)
        return true;
    int32_t off = y->rank - cv->shape.rank; /* c's dim i broadcasts against y's dim off + i */
    if (numel != m || off > 1)
        return false;
    for (int32_t i = 0; i < cv->shape.rank; i++) {
        if (cv->shape.dims[i].value != (off + i == 1 ? m : 1))
            return false;
    }
    *stride = 1;
    return true;
}

static bool all_finite(const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(v[i]))
            return false;
    }
    return true;
}

/* The chain of Mul(c), Add(c), Sub(., c) nodes with constant FP32 c that
 * reads v, each link the single reader of the one before, each output
 * shaped like v: the node indices, their constants and strides (0: one
 * value; 1: one per channel of v's dim 1). `per_channel` false takes
 * scalars only (any rank of v); true also per-channel constants
 * (channel_const). Returns the chain's length. */
static int affine_chain(const infd_ir_graph *g, const int32_t *readers, int32_t v, bool per_channel,
                        int32_t *nodes, const float **consts, int64_t *strides)
{
    const infd_ir_value *vv = &g->values[v];
    int64_t m = vv->shape.rank >= 2 ? vv->shape.dims[1].value : 1;
    int32_t at = v;
    int n = 0;
    while (n < MAX_AFFINE) {
        int32_t r = only_reader(g, readers, at);
        if (r < 0)
            break;
        const infd_ir_node *node = &g->nodes[r];
        bool sub = is_op(node, "Sub"), v_first = false;
        if (!sub && !is_op(node, "Mul") && !is_op(node, "Add"))
            break;
        int32_t c = const_operand(g, node, at, &v_first);
        if (c < 0 || (sub && !v_first) || !same_shape(&g->values[node->outputs[0]], vv))
            break;
        if (per_channel) {
            if (!channel_const(g, c, &vv->shape, &consts[n], &strides[n]))
                break;
        } else {
            if (!is_fp32_const(g, c, 1))
                break;
            consts[n] = g->values[c].data;
            strides[n] = 0;
        }
        if (!all_finite(consts[n], strides[n] ? m : 1))
            break;
        nodes[n++] = r;
        at = node->outputs[0];
    }
    return n;
}

/* y = scale * x + shift for channel `o` of the chain affine_chain found. */
static void chain_scale_shift(const infd_ir_graph *g, const int32_t *nodes, int n,
                              const float *const *consts, const int64_t *strides, int64_t o,
                              float *scale, float *shift)
{
    *scale = 1.0f;
    *shift = 0.0f;
    for (int k = 0; k < n; k++) {
        const infd_ir_node *node = &g->nodes[nodes[k]];
        float c = consts[k][o * strides[k]];
        if (is_op(node, "Mul")) {
            *scale *= c;
            *shift *= c;
        } else {
            *shift += is_op(node, "Add") ? c : -c;
        }
    }
}

infd_status infd_pass_fold_conv_affine(infd_ir_graph *g, int *n_folded, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    float *scale = NULL, *shift = NULL;
    int32_t *readers = count_readers(g);
    if (!readers)
        goto oom;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        infd_ir_node *conv = &g->nodes[i];
        if (conv->dead || !is_op(conv, "Conv") || conv->n_inputs < 2 || conv->n_inputs > 3 ||
            conv->n_outputs != 1 || conv->outputs[0] < 0 || conv->inputs[1] < 0 ||
            has_fused_attr(conv))
            continue;
        const infd_ir_value *w = &g->values[conv->inputs[1]];
        const infd_ir_value *y = &g->values[conv->outputs[0]];
        if (w->shape.rank < 3 || w->dtype != INFD_DTYPE_FP32 || !w->data ||
            y->dtype != INFD_DTYPE_FP32 || y->shape.rank != w->shape.rank)
            continue;
        int64_t m = w->shape.dims[0].value;
        int64_t per = m > 0 ? (int64_t)(w->nbytes / sizeof(float)) / m : 0;
        int32_t b = conv->n_inputs > 2 ? conv->inputs[2] : -1;
        if (m < 1 || y->shape.dims[1].value != m || (b >= 0 && !is_fp32_const(g, b, m)))
            continue;
        int32_t chain[MAX_AFFINE];
        const float *consts[MAX_AFFINE];
        int64_t strides[MAX_AFFINE];
        int n_chain = affine_chain(g, readers, conv->outputs[0], true, chain, consts, strides);
        if (n_chain == 0)
            continue;

        /* y = conv(x) * scale + shift, per output channel. */
        infd_free(scale);
        infd_free(shift);
        scale = infd_malloc((size_t)m * sizeof(float));
        shift = infd_malloc((size_t)m * sizeof(float));
        if (!scale || !shift)
            goto oom;
        bool scaled = false;
        for (int64_t o = 0; o < m; o++)
            chain_scale_shift(g, chain, n_chain, consts, strides, o, &scale[o], &shift[o]);
        for (int k = 0; k < n_chain; k++)
            scaled |= is_op(&g->nodes[chain[k]], "Mul");

        /* Copied: adding values below may move g->values (not the data). */
        const float *wd = w->data, *bias = b >= 0 ? g->values[b].data : NULL;
        infd_ir_shape wshape = w->shape;
        infd_ir_shape bshape = { .rank = 1 };
        bshape.dims[0].value = m;
        bshape.dims[0].sym = -1;
        int32_t vw = conv->inputs[1];
        float *nw = NULL, *nb = NULL;
        char name[600];
        if (scaled) { /* an Add-only chain leaves the weights as they are */
            snprintf(name, sizeof(name), "%s#affine_weight", conv->name);
            vw = new_const(g, name, &wshape, (size_t)(m * per), &nw);
        }
        snprintf(name, sizeof(name), "%s#affine_bias", conv->name);
        int32_t vb = vw >= 0 ? new_const(g, name, &bshape, (size_t)m, &nb) : -1;
        int32_t *ins = infd_arena_alloc(&g->arena, 3 * sizeof(int32_t), 0);
        int32_t *outs = infd_arena_alloc(&g->arena, sizeof(int32_t), 0);
        if (vw < 0 || vb < 0 || !ins || !outs)
            goto oom;
        for (int64_t o = 0; o < m; o++) {
            for (int64_t k = 0; nw && k < per; k++)
                nw[o * per + k] = wd[o * per + k] * scale[o];
            nb[o] = (bias ? bias[o] : 0.0f) * scale[o] + shift[o];
        }
        int32_t last = g->nodes[chain[n_chain - 1]].outputs[0];
        ins[0] = conv->inputs[0];
        ins[1] = vw;
        ins[2] = vb;
        outs[0] = last;
        conv->inputs = ins;
        conv->n_inputs = 3;
        conv->outputs = outs;
        g->values[last].producer = i;
        for (int k = 0; k < n_chain; k++)
            g->nodes[chain[k]].dead = true;
        *n_folded += n_chain;
    }
    goto out;
oom:
    st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
out:
    infd_free(scale);
    infd_free(shift);
    infd_free(readers);
    return st;
}

/* |a - b| within FP32 rounding of a constant written in decimal (1/6 is
 * 0.16666667 in the models we have seen, 0.1666667014 in others). */
static bool near(float a, float b)
{
    return fabsf(a - b) <= 1e-6f * fmaxf(1.0f, fabsf(b));
}

/* Whether node n computes v / 6 or v * (1/6) with a constant scalar. */
static bool divides_by_6(const infd_ir_graph *g, const infd_ir_node *n, int32_t v)
{
    bool v_first = false;
    float c;
    int32_t k = const_operand(g, n, v, &v_first);
    if (k < 0 || !const_scalar(g, k, &c))
        return false;
    if (is_op(n, "Div"))
        return v_first && near(c, 6.0f);
    return is_op(n, "Mul") && near(c, 1.0f / 6.0f);
}

/* The hard-swish chain that node `first` starts (see passes.h): its nodes
 * in order, the last writing the result, and x; returns the count, 0 when
 * it is not one. */
static int match_hardswish(const infd_ir_graph *g, const int32_t *readers, int32_t first,
                           int32_t *nodes, int32_t *x_out)
{
    const infd_ir_node *n = &g->nodes[first];
    int32_t x = -1, count = 0;
    if (n->n_outputs != 1 || n->outputs[0] < 0)
        return 0;
    if (is_op(n, "HardSigmoid")) {
        float alpha, beta;
        if (n->n_inputs != 1 || n->inputs[0] < 0 ||
            infd_ir_attr_float(g, n, "alpha", 0.2f, &alpha, NULL) != INFD_STATUS_OK ||
            infd_ir_attr_float(g, n, "beta", 0.5f, &beta, NULL) != INFD_STATUS_OK ||
            !near(alpha, 1.0f / 6.0f) || !near(beta, 0.5f))
            return 0;
        x = n->inputs[0];
        int32_t r = only_reader(g, readers, n->outputs[0]);
        if (r < 0 || !is_op(&g->nodes[r], "Mul") || !reads_pair(&g->nodes[r], x, n->outputs[0]))
            return 0;
        nodes[count++] = first;
        nodes[count++] = r;
    } else if (is_op(n, "Add") && n->n_inputs == 2) {
        float c, lo, hi;
        for (int k = 0; k < 2 && x < 0; k++) {
            int32_t o = n->inputs[1 - k];
            if (const_scalar(g, n->inputs[k], &c) && near(c, 3.0f) && o >= 0 && !g->values[o].data)
                x = o;
        }
        int32_t a = n->outputs[0];
        int32_t r1 = x >= 0 ? only_reader(g, readers, a) : -1;
        const infd_ir_node *clip = r1 >= 0 ? &g->nodes[r1] : NULL;
        const char *kind;
        if (!clip || !is_op(clip, "Clip") || clip->inputs[0] != a || clip->n_outputs != 1 ||
            clip->outputs[0] < 0 || !activation_of(g, clip, &kind, &lo, &hi) || lo != 0.0f ||
            !near(hi, 6.0f))
            return 0;
        int32_t cv = clip->outputs[0];
        int32_t r2 = only_reader(g, readers, cv);
        if (r2 < 0)
            return 0;
        const infd_ir_node *n2 = &g->nodes[r2];
        int32_t r3 = -1;
        if (is_op(n2, "Mul") && reads_pair(n2, x, cv)) { /* x * clip / 6 */
            r3 = only_reader(g, readers, n2->outputs[0]);
            if (r3 < 0 || !divides_by_6(g, &g->nodes[r3], n2->outputs[0]))
                return 0;
        } else if (divides_by_6(g, n2, cv)) { /* x * (clip / 6) */
            r3 = only_reader(g, readers, n2->outputs[0]);
            if (r3 < 0 || !is_op(&g->nodes[r3], "Mul") ||
                !reads_pair(&g->nodes[r3], x, n2->outputs[0]))
                return 0;
        } else {
            return 0;
        }
        nodes[count++] = first;
        nodes[count++] = r1;
        nodes[count++] = r2;
        nodes[count++] = r3;
    } else {
        return 0;
    }
    const infd_ir_value *xv = &g->values[x];
    if (xv->dtype != INFD_DTYPE_FP32 ||
        !same_shape(&g->values[g->nodes[nodes[count - 1]].outputs[0]], xv))
        return 0;
    *x_out = x;
    return count;
}

infd_status infd_pass_fuse_hardswish(infd_ir_graph *g, const infd_backend_ops *backend,
                                     int n_threads, infd_precision precision, int *n_fused,
                                     infd_error *err)
{
    int32_t *readers = count_readers(g);
    if (!readers)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        int32_t chain[4], x = -1;
        if (g->nodes[i].dead)
            continue;
        int n = match_hardswish(g, readers, i, chain, &x);
        if (n == 0)
            continue;
        infd_ir_node *last = &g->nodes[chain[n - 1]];
        int32_t *ins = infd_arena_alloc(&g->arena, sizeof(int32_t), 0);
        if (!ins) {
            infd_free(readers);
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
        }
        ins[0] = x;
        /* The last node of the chain becomes the HardSwish: it comes after
         * x's producer and before every reader of the result. */
        infd_ir_node hs = { .name = last->name,
                            .op_type = "HardSwish",
                            .domain = "",
                            .n_inputs = 1,
                            .n_outputs = 1,
                            .inputs = ins,
                            .outputs = last->outputs };
        if (!backend_accepts(g, &hs, backend, n_threads, precision))
            continue;
        *last = hs;
        for (int k = 0; k < n - 1; k++)
            g->nodes[chain[k]].dead = true;
        readers[x]--; /* read twice by the chain, once by the HardSwish */
        *n_fused += n - 1;
    }
    infd_free(readers);
    return INFD_STATUS_OK;
}

/* The chain of constant scalar Mul/Add/Sub that reads v (affine_chain):
 * its nodes, the combined y = scale * v + shift and the value the chain
 * ends in; returns its length. */
static int scalar_affine_chain(const infd_ir_graph *g, const int32_t *readers, int32_t v,
                               int32_t *nodes, float *scale, float *shift, int32_t *end)
{
    const float *consts[MAX_AFFINE];
    int64_t strides[MAX_AFFINE];
    int n = affine_chain(g, readers, v, false, nodes, consts, strides);
    chain_scale_shift(g, nodes, n, consts, strides, 0, scale, shift);
    *end = n ? g->nodes[nodes[n - 1]].outputs[0] : v;
    return n;
}

infd_status infd_pass_fuse_activations(infd_ir_graph *g, const infd_backend_ops *backend,
                                       int n_threads, infd_precision precision, int *n_fused,
                                       infd_error *err)
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
        int32_t at = i; /* where the fused node runs */
        /* Conv -> Add(conv, other) [-> activation]: the residual of ResNet. */
        if (strcmp(n1->op_type, "Add") == 0 && n1->n_inputs == 2 && n1->n_outputs == 1 &&
            strcmp(prod->op_type, "Conv") == 0) {
            int32_t other = n1->inputs[0] == v ? n1->inputs[1] : n1->inputs[0];
            if (other == v || other < 0)
                continue;
            /* The fused node runs where the Conv is, or where the Add is
             * when the residual is produced after the Conv (BlazeFace's
             * channel padding of the block input): every input is ready
             * there. A residual that comes from a later Conv is fused
             * into that Conv instead (ResNet's projection shortcut). */
            int32_t op = g->values[other].producer;
            if (!same_shape(&g->values[other], &g->values[n1->outputs[0]]))
                continue;
            if (op > i) {
                const char *t = g->nodes[op].op_type;
                if (strcmp(t, "Conv") == 0 || strcmp(t, "Gemm") == 0 || strcmp(t, "MatMul") == 0)
                    continue;
                at = next;
            }
            residual = other;
            add_node = next;
            after_add = n1->outputs[0];
            next = only_reader(g, readers, after_add);
            n1 = next >= 0 ? &g->nodes[next] : NULL;
        }
        fusion f = { .residual = residual };
        bool act = n1 && n1->n_outputs == 1 && n1->outputs[0] >= 0 &&
                   activation_of(g, n1, &f.kind, &f.alpha, &f.beta);
        if (!act && residual < 0)
            continue;
        if (!act)
            f.kind = NULL;
        int32_t out_value = act ? n1->outputs[0] : after_add;
        int32_t post[MAX_AFFINE];
        int n_post = scalar_affine_chain(g, readers, out_value, post, &f.post_scale, &f.post_shift,
                                         &f.out_value);
        f.post = n_post > 0;
        infd_ir_node fused;
        bool ok = false;
        for (int attempt = 0; attempt < 2 && !ok; attempt++) {
            if (attempt == 1) { /* the backend may take the fusion without the affine */
                if (!f.post)
                    break;
                f.post = false;
                n_post = 0;
                f.out_value = out_value;
            }
            if (build_fused(g, prod, &f, &fused) != INFD_STATUS_OK) {
                infd_free(readers);
                return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory",
                                      g->source);
            }
            ok = backend_accepts(g, &fused, backend, n_threads, precision);
        }
        if (!ok)
            continue;
        if (at != i) { /* the Add's slot takes the fused node */
            g->nodes[at] = fused;
            prod->dead = true;
        } else {
            *prod = fused;
            if (add_node >= 0)
                g->nodes[add_node].dead = true;
        }
        g->values[f.out_value].producer = at;
        if (add_node >= 0)
            (*n_fused)++;
        if (act) {
            n1->dead = true;
            (*n_fused)++;
        }
        for (int k = 0; k < n_post; k++)
            g->nodes[post[k]].dead = true;
        *n_fused += n_post;
        /* Reader counts of the fused values no longer matter: they are gone. */
    }
    infd_free(readers);
    return INFD_STATUS_OK;
}

/* An int attribute list of node n equal to `want` (n_want values) or, when
 * absent, to what ONNX defaults it to (all of `dflt`). */
static bool ints_are(const infd_ir_graph *g, const infd_ir_node *n, const char *name, int64_t dflt,
                     int32_t n_want)
{
    const int64_t *v = NULL;
    int32_t nv = 0;
    if (infd_ir_attr_ints(g, n, name, &v, &nv, NULL) != INFD_STATUS_OK)
        return false;
    if (!v)
        return true;
    if (nv != n_want)
        return false;
    for (int32_t i = 0; i < nv; i++) {
        if (v[i] != dflt)
            return false;
    }
    return true;
}

/* A 2-D Conv with constant FP32 weights [k, c/group, kh, kw], the optional
 * bias constant too, no fusion: its input, output and weight values. */
/* The _DwPwConv name of a depthwise Conv's activation attribute
 * (_fused_activation, _fused_alpha, _fused_beta), or NULL for any other. */
static const char *dw_activation_name(const char *name)
{
    return strcmp(name, "_fused_activation") == 0 ? "_dw_activation"
           : strcmp(name, "_fused_alpha") == 0    ? "_dw_alpha"
           : strcmp(name, "_fused_beta") == 0     ? "_dw_beta"
                                                  : NULL;
}

static bool plain_conv(const infd_ir_graph *g, const infd_ir_node *n, int64_t *group,
                       const infd_ir_value **w)
{
    if (n->dead || !is_op(n, "Conv") || n->n_inputs < 2 || n->n_inputs > 3 || n->n_outputs != 1 ||
        n->inputs[0] < 0 || n->inputs[1] < 0 || n->outputs[0] < 0)
        return false;
    for (int32_t k = 0; k < n->n_attrs; k++) { /* an activation only */
        const char *name = n->attrs[k].name;
        if (strncmp(name, "_fused_", 7) == 0 && !dw_activation_name(name))
            return false;
    }
    const infd_ir_value *x = &g->values[n->inputs[0]], *y = &g->values[n->outputs[0]];
    *w = &g->values[n->inputs[1]];
    if (x->shape.rank != 4 || y->shape.rank != 4 || (*w)->shape.rank != 4 ||
        !is_fp32_const(g, n->inputs[1], infd_node_numel(*w)) ||
        (n->n_inputs > 2 && n->inputs[2] >= 0 &&
         !is_fp32_const(g, n->inputs[2], y->shape.dims[1].value)))
        return false;
    return infd_ir_attr_int(g, n, "group", 1, group, NULL) == INFD_STATUS_OK;
}

/* Whether node n's auto_pad is absent or NOTSET (its pads attribute rules). */
static bool no_auto_pad(const infd_ir_node *n)
{
    const infd_ir_attr *ap = infd_ir_node_attr(n, "auto_pad");
    return !ap || (ap->type == INFD_IR_ATTR_STRING && strcmp(ap->s, "NOTSET") == 0);
}

/* The 1x1 Conv of the block: stride 1, no pads, group 1; it may carry an
 * activation and residual from infd_pass_fuse_activations. */
static bool pointwise_conv(const infd_ir_graph *g, const infd_ir_node *n)
{
    if (n->dead || !is_op(n, "Conv") || n->n_outputs != 1 || n->n_inputs < 2 || n->inputs[0] < 0 ||
        n->inputs[1] < 0 || n->outputs[0] < 0 || infd_ir_node_attr(n, "_fused_post_scale"))
        return false;
    const infd_ir_value *w = &g->values[n->inputs[1]];
    int64_t group = 1;
    return w->shape.rank == 4 && w->shape.dims[2].value == 1 && w->shape.dims[3].value == 1 &&
           is_fp32_const(g, n->inputs[1], infd_node_numel(w)) &&
           (n->n_inputs < 3 || n->inputs[2] < 0 ||
            is_fp32_const(g, n->inputs[2], w->shape.dims[0].value)) &&
           infd_ir_attr_int(g, n, "group", 1, &group, NULL) == INFD_STATUS_OK && group == 1 &&
           ints_are(g, n, "strides", 1, 2) && ints_are(g, n, "pads", 0, 4) && no_auto_pad(n);
}

/* A MaxPool 2x2 with stride 2, no pads, floor mode, one output: the
 * shortcut of a stride-2 block. */
static bool pool_2x2(const infd_ir_graph *g, const infd_ir_node *n)
{
    const int64_t *k = NULL;
    int32_t nk = 0;
    int64_t ceil = 0;
    return !n->dead && is_op(n, "MaxPool") && n->n_inputs == 1 && n->n_outputs == 1 &&
           infd_ir_attr_ints(g, n, "kernel_shape", &k, &nk, NULL) == INFD_STATUS_OK && nk == 2 &&
           k[0] == 2 && k[1] == 2 && ints_are(g, n, "strides", 2, 2) &&
           infd_ir_node_attr(n, "strides") && ints_are(g, n, "pads", 0, 4) &&
           ints_are(g, n, "dilations", 1, 2) &&
           infd_ir_attr_int(g, n, "ceil_mode", 0, &ceil, NULL) == INFD_STATUS_OK && ceil == 0 &&
           no_auto_pad(n);
}

/* Attribute names of a Conv's window, taken from the depthwise Conv. */
static bool window_attr(const char *name)
{
    static const char *const names[] = { "kernel_shape", "strides",  "pads",
                                         "dilations",    "auto_pad", "group" };
    for (size_t i = 0; i < INFD_ARRAY_SIZE(names); i++) {
        if (strcmp(name, names[i]) == 0)
            return true;
    }
    return false;
}

infd_status infd_pass_fuse_depthwise(infd_ir_graph *g, const infd_backend_ops *backend,
                                     int n_threads, infd_precision precision, int *n_fused,
                                     infd_error *err)
{
    int32_t *readers = count_readers(g);
    if (!readers)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        infd_ir_node *pw = &g->nodes[i];
        if (!pointwise_conv(g, pw))
            continue;
        int32_t mid = pw->inputs[0], di = g->values[mid].producer;
        int64_t group = 0;
        const infd_ir_value *wd = NULL;
        if (readers[mid] != 1 || di < 0 || !plain_conv(g, &g->nodes[di], &group, &wd))
            continue;
        infd_ir_node *dw = &g->nodes[di];
        int64_t c = g->values[dw->inputs[0]].shape.dims[1].value;
        if (group != c || wd->shape.dims[0].value != c || wd->shape.dims[1].value != 1 ||
            g->values[pw->inputs[1]].shape.dims[1].value != c)
            continue;
        /* The residual, then narrower and pooled versions of it: a Concat
         * of it with zeros on the channels, and a MaxPool 2x2 before. */
        bool sum = infd_ir_node_attr(pw, "_fused_sum") != NULL;
        int32_t res = sum && pw->n_inputs > 3 ? pw->inputs[3] : -1;
        int32_t cand[3] = { res, -1, -1 }, gone[3][2] = { { -1, -1 }, { -1, -1 }, { -1, -1 } };
        bool pooled[3] = { false, false, false };
        int n_cand = 1;
        int32_t r = res, cat = -1;
        const infd_ir_node *rp =
            r >= 0 && g->values[r].producer >= 0 ? &g->nodes[g->values[r].producer] : NULL;
        int64_t axis = 0;
        if (rp && readers[r] == 1 && is_op(rp, "Concat") && rp->n_inputs == 2 &&
            rp->n_outputs == 1 && rp->inputs[0] >= 0 && rp->inputs[1] >= 0 &&
            rp->inputs[0] != rp->inputs[1] &&
            infd_ir_attr_int(g, rp, "axis", 0, &axis, NULL) == INFD_STATUS_OK &&
            (axis == 1 || axis == -3) && g->values[rp->inputs[1]].data &&
            infd_ir_value_is_zeros(&g->values[rp->inputs[1]])) {
            cat = g->values[r].producer;
            r = rp->inputs[0];
            cand[n_cand] = r;
            gone[n_cand][0] = cat;
            n_cand++;
        }
        const infd_ir_node *pp =
            r >= 0 && g->values[r].producer >= 0 ? &g->nodes[g->values[r].producer] : NULL;
        if (pp && readers[r] == 1 && pool_2x2(g, pp)) {
            cand[n_cand] = pp->inputs[0];
            gone[n_cand][0] = cat;
            gone[n_cand][1] = g->values[r].producer;
            pooled[n_cand] = true;
            n_cand++;
        }
        int32_t *ins = infd_arena_alloc(&g->arena, 6 * sizeof(int32_t), 0);
        infd_ir_attr *attrs = infd_arena_alloc(
            &g->arena, (size_t)(pw->n_attrs + dw->n_attrs + 1) * sizeof(infd_ir_attr), 0);
        if (!ins || !attrs) {
            infd_free(readers);
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", g->source);
        }
        int32_t na = 0;
        for (int32_t k = 0; k < pw->n_attrs; k++) {
            if (!window_attr(pw->attrs[k].name))
                attrs[na++] = pw->attrs[k];
        }
        for (int32_t k = 0; k < dw->n_attrs; k++) {
            const char *name = dw->attrs[k].name, *dw_name = dw_activation_name(name);
            if (window_attr(name)) {
                attrs[na++] = dw->attrs[k];
            } else if (dw_name) {
                attrs[na] = dw->attrs[k];
                attrs[na++].name = dw_name;
            }
        }
        infd_ir_node fused = *pw;
        fused.op_type = "_DwPwConv";
        fused.domain = "";
        fused.inputs = ins;
        fused.n_inputs = 6;
        fused.attrs = attrs;
        ins[0] = dw->inputs[0];
        ins[1] = pw->inputs[1];
        ins[2] = pw->n_inputs > 2 ? pw->inputs[2] : -1;
        ins[4] = dw->inputs[1];
        ins[5] = dw->n_inputs > 2 ? dw->inputs[2] : -1;
        int pick = -1;
        for (int k = n_cand - 1; k >= 0 && pick < 0; k--) { /* the most fused first */
            ins[3] = cand[k];
            fused.n_attrs = na;
            if (pooled[k])
                attrs[fused.n_attrs++] = (infd_ir_attr){
                    .name = "residual_pool", .type = INFD_IR_ATTR_INT, .i = 2, .tensor = -1
                };
            if (backend_accepts(g, &fused, backend, n_threads, precision))
                pick = k;
        }
        if (pick < 0)
            continue;
        *pw = fused;
        dw->dead = true;
        (*n_fused)++;
        for (int k = 0; k < 2; k++) {
            if (gone[pick][k] >= 0) {
                g->nodes[gone[pick][k]].dead = true;
                (*n_fused)++;
            }
        }
    }
    infd_free(readers);
    return INFD_STATUS_OK;
}
