/*
 * ir.c - graph tables, attribute access, topological sort.
 *
 * Tables grow by doubling through infd_realloc; everything else lives in the
 * graph's two arenas, so destroying a graph is four frees plus two arena
 * finis however large the model.
 */
#include "graph/ir.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/common.h"

infd_ir_graph *infd_ir_graph_create(const char *source)
{
    infd_ir_graph *g = infd_calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    infd_arena_init(&g->arena, 64 * 1024);
    /* Weights: big chunks, so a model's initializers sit in few blocks. */
    infd_arena_init(&g->weights, 4 * 1024 * 1024);
    g->source = infd_arena_strdup(&g->arena, source ? source : "");
    g->name = "";
    if (!g->source) {
        infd_ir_graph_destroy(g);
        return NULL;
    }
    return g;
}

void infd_ir_graph_destroy(infd_ir_graph *g)
{
    if (!g)
        return;
    infd_free(g->values);
    infd_free(g->nodes);
    infd_free(g->inputs);
    infd_free(g->outputs);
    infd_free(g->sym_names);
    infd_arena_fini(&g->arena);
    infd_arena_fini(&g->weights);
    infd_free(g);
}

/* A copy of n elements of `elem` bytes in the arena (NULL for n == 0). */
static void *arena_dup(infd_arena *a, const void *src, size_t n, size_t elem, bool *oom)
{
    if (!src || n == 0)
        return NULL;
    void *d = infd_arena_alloc(a, n * elem, 16);
    if (!d) {
        *oom = true;
        return NULL;
    }
    memcpy(d, src, n * elem);
    return d;
}

static const char *arena_str(infd_arena *a, const char *s, bool *oom)
{
    if (!s)
        return NULL;
    const char *d = infd_arena_strdup(a, s);
    *oom |= d == NULL;
    return d;
}

/* A copy of a table of n elements (capacity n, at least 1). */
static void *table_dup(const void *src, int32_t n, size_t elem, bool *oom)
{
    void *d = infd_malloc((size_t)(n > 0 ? n : 1) * elem);
    if (!d) {
        *oom = true;
        return NULL;
    }
    if (n > 0)
        memcpy(d, src, (size_t)n * elem);
    return d;
}

static void clone_attr(infd_arena *a, infd_ir_attr *at, bool *oom)
{
    at->name = arena_str(a, at->name, oom);
    if (at->s) { /* s_len bytes plus the NUL; a string may hold NULs */
        at->s = arena_dup(a, at->s, at->s_len + 1, 1, oom);
    }
    at->ints = arena_dup(a, at->ints, at->type == INFD_IR_ATTR_INTS ? (size_t)at->n : 0,
                         sizeof(*at->ints), oom);
    at->floats = arena_dup(a, at->floats, at->type == INFD_IR_ATTR_FLOATS ? (size_t)at->n : 0,
                           sizeof(*at->floats), oom);
    if (at->strings && at->n > 0) {
        const char **s = infd_arena_alloc(a, (size_t)at->n * sizeof(*s), 16);
        if (!s) {
            *oom = true;
            at->strings = NULL;
            return;
        }
        for (int32_t i = 0; i < at->n; i++)
            s[i] = arena_str(a, at->strings[i], oom);
        at->strings = s;
    }
}

infd_ir_graph *infd_ir_graph_clone(const infd_ir_graph *src)
{
    infd_ir_graph *g = infd_ir_graph_create(src->source);
    if (!g)
        return NULL;
    bool oom = false;
    infd_arena *a = &g->arena;
    g->opset = src->opset;
    g->ir_version = src->ir_version;
    g->name = arena_str(a, src->name, &oom);
    g->values = table_dup(src->values, src->n_values, sizeof(*g->values), &oom);
    g->nodes = table_dup(src->nodes, src->n_nodes, sizeof(*g->nodes), &oom);
    g->inputs = table_dup(src->inputs, src->n_inputs, sizeof(*g->inputs), &oom);
    g->outputs = table_dup(src->outputs, src->n_outputs, sizeof(*g->outputs), &oom);
    g->sym_names = table_dup(src->sym_names, src->n_syms, sizeof(*g->sym_names), &oom);
    g->n_meta = src->n_meta;
    if (src->n_meta > 0) {
        g->meta_keys = arena_dup(a, src->meta_keys, (size_t)src->n_meta, sizeof(char *), &oom);
        g->meta_values = arena_dup(a, src->meta_values, (size_t)src->n_meta, sizeof(char *), &oom);
        for (int32_t i = 0; !oom && i < src->n_meta; i++) {
            g->meta_keys[i] = arena_str(a, src->meta_keys[i], &oom);
            g->meta_values[i] = arena_str(a, src->meta_values[i], &oom);
        }
    }
    if (oom) {
        infd_ir_graph_destroy(g);
        return NULL;
    }
    g->n_values = g->cap_values = src->n_values;
    g->n_nodes = g->cap_nodes = src->n_nodes;
    g->n_inputs = src->n_inputs;
    g->n_outputs = src->n_outputs;
    g->n_syms = g->cap_syms = src->n_syms;
    for (int32_t i = 0; i < g->n_syms; i++)
        g->sym_names[i] = arena_str(a, src->sym_names[i], &oom);
    for (int32_t v = 0; v < g->n_values; v++)
        g->values[v].name = arena_str(a, src->values[v].name, &oom);
    for (int32_t n = 0; n < g->n_nodes && !oom; n++) {
        infd_ir_node *node = &g->nodes[n];
        node->name = arena_str(a, node->name, &oom);
        node->op_type = arena_str(a, node->op_type, &oom);
        node->domain = arena_str(a, node->domain, &oom);
        node->inputs = arena_dup(a, node->inputs, (size_t)node->n_inputs, sizeof(int32_t), &oom);
        node->outputs = arena_dup(a, node->outputs, (size_t)node->n_outputs, sizeof(int32_t), &oom);
        infd_ir_attr *attrs =
            arena_dup(a, node->attrs, (size_t)node->n_attrs, sizeof(*node->attrs), &oom);
        for (int32_t i = 0; attrs && i < node->n_attrs; i++)
            clone_attr(a, &attrs[i], &oom);
        node->attrs = attrs;
    }
    if (oom) {
        infd_ir_graph_destroy(g);
        return NULL;
    }
    return g;
}

/* Makes room for one more element in a table of `elem` bytes. */
static int grow(void **table, int32_t *cap, int32_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    if (*cap > INT32_MAX / 2)
        return -1;
    int32_t new_cap = *cap ? *cap * 2 : 64;
    void *t = infd_realloc(*table, (size_t)new_cap * elem);
    if (!t)
        return -1;
    *table = t;
    *cap = new_cap;
    return 0;
}

int32_t infd_ir_graph_add_value(infd_ir_graph *g, const char *name)
{
    if (grow((void **)&g->values, &g->cap_values, g->n_values, sizeof(*g->values)) != 0)
        return -1;
    const char *copy = infd_arena_strdup(&g->arena, name);
    if (!copy)
        return -1;
    infd_ir_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof(*v));
    v->name = copy;
    v->dtype = INFD_DTYPE_INVALID;
    v->shape.rank = -1;
    v->producer = -1;
    return g->n_values++;
}

int32_t infd_ir_graph_add_node(infd_ir_graph *g, const infd_ir_node *node)
{
    if (grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes, sizeof(*g->nodes)) != 0)
        return -1;
    g->nodes[g->n_nodes] = *node;
    return g->n_nodes++;
}

int32_t infd_ir_graph_intern_sym(infd_ir_graph *g, const char *name)
{
    for (int32_t i = 0; i < g->n_syms; i++) {
        if (strcmp(g->sym_names[i], name) == 0)
            return i;
    }
    if (grow((void **)&g->sym_names, &g->cap_syms, g->n_syms, sizeof(*g->sym_names)) != 0)
        return -1;
    const char *copy = infd_arena_strdup(&g->arena, name);
    if (!copy)
        return -1;
    g->sym_names[g->n_syms] = copy;
    return g->n_syms++;
}

bool infd_ir_value_is_zeros(const infd_ir_value *v)
{
    const uint8_t *b = v->data;
    if (!b)
        return false;
    for (size_t i = 0; i < v->nbytes; i++) {
        if (b[i])
            return false;
    }
    return true;
}

const infd_ir_attr *infd_ir_node_attr(const infd_ir_node *node, const char *name)
{
    for (int32_t i = 0; i < node->n_attrs; i++) {
        if (strcmp(node->attrs[i].name, name) == 0)
            return &node->attrs[i];
    }
    return NULL;
}

static const char *const attr_type_names[] = {
    [INFD_IR_ATTR_FLOAT] = "float",   [INFD_IR_ATTR_INT] = "int",
    [INFD_IR_ATTR_STRING] = "string", [INFD_IR_ATTR_TENSOR] = "tensor",
    [INFD_IR_ATTR_GRAPH] = "graph",   [INFD_IR_ATTR_FLOATS] = "floats",
    [INFD_IR_ATTR_INTS] = "ints",     [INFD_IR_ATTR_STRINGS] = "strings",
    [INFD_IR_ATTR_OTHER] = "other",
};

static infd_status wrong_type(const infd_ir_graph *g, const infd_ir_node *node,
                              const infd_ir_attr *a, const char *want, infd_error *err)
{
    return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                          "%s: node '%s' (%s): attribute '%s' is %s, expected %s", g->source,
                          node->name, node->op_type, a->name, attr_type_names[a->type], want);
}

infd_status infd_ir_attr_int(const infd_ir_graph *g, const infd_ir_node *node, const char *name,
                             int64_t dflt, int64_t *out, infd_error *err)
{
    const infd_ir_attr *a = infd_ir_node_attr(node, name);
    if (!a) {
        *out = dflt;
        return INFD_STATUS_OK;
    }
    if (a->type != INFD_IR_ATTR_INT)
        return wrong_type(g, node, a, "int", err);
    *out = a->i;
    return INFD_STATUS_OK;
}

infd_status infd_ir_attr_float(const infd_ir_graph *g, const infd_ir_node *node, const char *name,
                               float dflt, float *out, infd_error *err)
{
    const infd_ir_attr *a = infd_ir_node_attr(node, name);
    if (!a) {
        *out = dflt;
        return INFD_STATUS_OK;
    }
    if (a->type != INFD_IR_ATTR_FLOAT)
        return wrong_type(g, node, a, "float", err);
    *out = a->f;
    return INFD_STATUS_OK;
}

infd_status infd_ir_attr_ints(const infd_ir_graph *g, const infd_ir_node *node, const char *name,
                              const int64_t **out, int32_t *n, infd_error *err)
{
    const infd_ir_attr *a = infd_ir_node_attr(node, name);
    *out = NULL;
    *n = 0;
    if (!a)
        return INFD_STATUS_OK;
    if (a->type != INFD_IR_ATTR_INTS)
        return wrong_type(g, node, a, "ints", err);
    *out = a->ints;
    *n = a->n;
    return INFD_STATUS_OK;
}

infd_status infd_ir_attr_string(const infd_ir_graph *g, const infd_ir_node *node, const char *name,
                                const char *dflt, const char **out, infd_error *err)
{
    const infd_ir_attr *a = infd_ir_node_attr(node, name);
    if (!a) {
        *out = dflt;
        return INFD_STATUS_OK;
    }
    if (a->type != INFD_IR_ATTR_STRING)
        return wrong_type(g, node, a, "string", err);
    *out = a->s;
    return INFD_STATUS_OK;
}

char *infd_ir_shape_format(const infd_ir_graph *g, const infd_ir_shape *shape, char *buf, size_t n)
{
    size_t off = 0;
    if (n == 0)
        return buf;
    if (shape->rank < 0) {
        snprintf(buf, n, "[?]");
        return buf;
    }
    buf[0] = '\0';
    for (int32_t i = 0; i <= shape->rank && off < n; i++) {
        int w;
        const char *sep = i == 0 ? "[" : ",";
        if (i == shape->rank)
            w = snprintf(buf + off, n - off, "%s]", i == 0 ? "[" : "");
        else if (shape->dims[i].value >= 0)
            w = snprintf(buf + off, n - off, "%s%lld", sep, (long long)shape->dims[i].value);
        else if (shape->dims[i].sym >= 0 && shape->dims[i].sym < g->n_syms)
            w = snprintf(buf + off, n - off, "%s%s", sep, g->sym_names[shape->dims[i].sym]);
        else
            w = snprintf(buf + off, n - off, "%s?", sep);
        if (w < 0)
            break;
        off += (size_t)w;
    }
    return buf;
}

infd_status infd_ir_graph_toposort(infd_ir_graph *g, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    int32_t n = g->n_nodes;
    int32_t *producer = NULL; /* value -> node in the old order */
    int32_t *pending = NULL;  /* node -> inputs whose producer is not placed yet */
    int32_t *order = NULL;    /* nodes in the new order */
    int32_t *users = NULL;    /* CSR: consumers of each node, by edge */
    int32_t *user_start = NULL;
    infd_ir_node *sorted = NULL;

    if (n == 0)
        return INFD_STATUS_OK;
    producer = infd_malloc((size_t)g->n_values * sizeof(*producer));
    pending = infd_calloc((size_t)n, sizeof(*pending));
    order = infd_malloc((size_t)n * sizeof(*order));
    user_start = infd_calloc((size_t)n + 1, sizeof(*user_start));
    sorted = infd_malloc((size_t)n * sizeof(*sorted));
    if (!producer || !pending || !order || !user_start || !sorted) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory sorting nodes",
                            g->source);
        goto out;
    }
    for (int32_t v = 0; v < g->n_values; v++)
        producer[v] = -1;
    for (int32_t i = 0; i < n; i++) {
        for (int32_t k = 0; k < g->nodes[i].n_outputs; k++) {
            if (g->nodes[i].outputs[k] >= 0) /* -1: an unused optional output */
                producer[g->nodes[i].outputs[k]] = i;
        }
    }
    /* Count edges producer -> consumer, then fill them (CSR). */
    size_t n_edges = 0;
    for (int32_t i = 0; i < n; i++) {
        for (int32_t k = 0; k < g->nodes[i].n_inputs; k++) {
            int32_t v = g->nodes[i].inputs[k];
            if (v >= 0 && producer[v] >= 0) {
                user_start[producer[v] + 1]++;
                pending[i]++;
                n_edges++;
            }
        }
    }
    for (int32_t i = 0; i < n; i++)
        user_start[i + 1] += user_start[i];
    users = infd_malloc((n_edges ? n_edges : 1) * sizeof(*users));
    if (!users) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory sorting nodes",
                            g->source);
        goto out;
    }
    {
        int32_t *fill = order; /* reuse as a cursor array before it holds the order */
        for (int32_t i = 0; i < n; i++)
            fill[i] = user_start[i];
        for (int32_t i = 0; i < n; i++) {
            for (int32_t k = 0; k < g->nodes[i].n_inputs; k++) {
                int32_t v = g->nodes[i].inputs[k];
                if (v >= 0 && producer[v] >= 0)
                    users[fill[producer[v]]++] = i;
            }
        }
    }
    /* Kahn's algorithm; the queue is `order` itself. Seeding in index order
     * and appending keeps an already-sorted graph in its original order. */
    int32_t head = 0, tail = 0;
    for (int32_t i = 0; i < n; i++) {
        if (pending[i] == 0)
            order[tail++] = i;
    }
    while (head < tail) {
        int32_t i = order[head++];
        for (int32_t e = user_start[i]; e < user_start[i + 1]; e++) {
            if (--pending[users[e]] == 0)
                order[tail++] = users[e];
        }
    }
    if (tail < n) {
        for (int32_t i = 0; i < n; i++) {
            if (pending[i] > 0) {
                st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                    "%s: the graph has a cycle through node '%s' (%s)", g->source,
                                    g->nodes[i].name, g->nodes[i].op_type);
                break;
            }
        }
        goto out;
    }
    for (int32_t i = 0; i < n; i++)
        sorted[i] = g->nodes[order[i]];
    memcpy(g->nodes, sorted, (size_t)n * sizeof(*sorted));
    for (int32_t i = 0; i < n; i++) {
        for (int32_t k = 0; k < g->nodes[i].n_outputs; k++) {
            if (g->nodes[i].outputs[k] >= 0)
                g->values[g->nodes[i].outputs[k]].producer = i;
        }
    }
out:
    infd_free(producer);
    infd_free(pending);
    infd_free(order);
    infd_free(users);
    infd_free(user_start);
    infd_free(sorted);
    return st;
}

void infd_ir_graph_summary(const infd_ir_graph *g, char *buf, size_t n)
{
    size_t off = 0;
    if (n == 0)
        return;
    buf[0] = '\0';
    for (int32_t i = 0; i < g->n_nodes && off < n; i++) {
        const infd_ir_node *node = &g->nodes[i];
        if (node->dead)
            continue;
        int seen = 0;
        for (int32_t j = 0; j < i && !seen; j++)
            seen = !g->nodes[j].dead && strcmp(g->nodes[j].op_type, node->op_type) == 0;
        if (seen)
            continue;
        int count = 0;
        for (int32_t j = i; j < g->n_nodes; j++)
            count += !g->nodes[j].dead && strcmp(g->nodes[j].op_type, node->op_type) == 0;
        int w = snprintf(buf + off, n - off, "%s%s x%d", off ? ", " : "", node->op_type, count);
        if (w < 0)
            break;
        off += (size_t)w;
    }
}
