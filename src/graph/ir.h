/*
 * ir.h - the engine's intermediate representation of a model graph.
 *
 * A graph is a table of values (tensors: graph inputs, initializers,
 * intermediates, outputs) and a table of nodes (one operator each) that refer
 * to values by index. The loader (src/onnx/) builds it from an ONNX file; the
 * passes (shape inference, folding, fusion, layout, memory plan) rewrite it;
 * the plan compiler lowers it to backend kernels.
 *
 *   values[]   name, dtype, shape (dims may be symbolic: "batch"), producer,
 *              constant data for initializers and folded constants
 *   nodes[]    op type, attributes, inputs[] / outputs[] as value indices
 *              (-1 for an omitted optional input)
 *
 * Ownership: everything a graph points to (names, attributes, dims, constant
 * data) lives in the graph's arenas and dies with infd_ir_graph_destroy; no
 * pointer into a graph survives it. Not thread-safe: one thread builds and
 * rewrites a graph; compiled plans do not refer back to it.
 */
#ifndef INFD_GRAPH_IR_H
#define INFD_GRAPH_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "infd/infd.h"

/* A dimension: a known size (>= 0), or a symbol (sym >= 0 names it in
 * graph->sym_names; value is -1). Two dims with the same symbol are equal. */
typedef struct infd_ir_dim {
    int64_t value; /* >= 0 when known, -1 when symbolic */
    int32_t sym;   /* index into sym_names when symbolic, else -1 */
} infd_ir_dim;

/* rank -1: the shape is not known (yet). */
typedef struct infd_ir_shape {
    int32_t rank;
    infd_ir_dim dims[INFD_MAX_RANK];
} infd_ir_shape;

enum {
    INFD_IR_VALUE_INPUT = 1u << 0,       /* a graph input fed at run time */
    INFD_IR_VALUE_OUTPUT = 1u << 1,      /* a graph output */
    INFD_IR_VALUE_INITIALIZER = 1u << 2, /* constant data from the model */
};

typedef struct infd_ir_value {
    const char *name; /* unique within the graph; "" never names a value */
    infd_dtype dtype; /* INVALID until known */
    infd_ir_shape shape;
    uint32_t flags;   /* INFD_IR_VALUE_* */
    int32_t producer; /* node index, -1 for inputs and constants */
    /* Constant data (initializers, Constant nodes, folded values): contiguous
     * row-major, INFD_ALIGNMENT-aligned, in the graph's weight arena; NULL
     * for values computed at run time. BYTES constants are not carried. */
    const void *data;
    size_t nbytes;
} infd_ir_value;

typedef enum infd_ir_attr_type {
    INFD_IR_ATTR_FLOAT = 1,
    INFD_IR_ATTR_INT = 2,
    INFD_IR_ATTR_STRING = 3,
    INFD_IR_ATTR_TENSOR = 4, /* a constant: `tensor` is a value index */
    INFD_IR_ATTR_GRAPH = 5,  /* a subgraph: recorded, not carried */
    INFD_IR_ATTR_FLOATS = 6,
    INFD_IR_ATTR_INTS = 7,
    INFD_IR_ATTR_STRINGS = 8,
    INFD_IR_ATTR_OTHER = 9, /* tensors, graphs, sparse or type attributes */
} infd_ir_attr_type;

typedef struct infd_ir_attr {
    const char *name;
    infd_ir_attr_type type;
    int64_t i;
    float f;
    const char *s; /* NUL-terminated; s_len excludes the NUL */
    size_t s_len;
    int32_t tensor; /* value index for TENSOR attributes, else -1 */
    int32_t n;      /* element count of ints / floats / strings */
    const int64_t *ints;
    const float *floats;
    const char *const *strings;
} infd_ir_attr;

typedef struct infd_ir_node {
    const char *name; /* from the model, or "<op_type>_<index>" when unnamed */
    const char *op_type;
    const char *domain; /* "" for the default ONNX domain */
    int32_t n_inputs;
    int32_t n_outputs;
    int32_t n_attrs;
    const int32_t *inputs; /* value indices; -1: optional input left out */
    const int32_t *outputs;
    const infd_ir_attr *attrs;
    bool dead; /* removed by a pass; kept in the table so indices stay valid */
} infd_ir_node;

typedef struct infd_ir_graph {
    infd_arena arena;   /* names, attributes, index arrays */
    infd_arena weights; /* constant data, 64-byte aligned */

    infd_ir_value *values;
    int32_t n_values;
    int32_t cap_values;

    infd_ir_node *nodes; /* topologically sorted after loading */
    int32_t n_nodes;
    int32_t cap_nodes;

    int32_t *inputs; /* value indices of the graph inputs (not initializers) */
    int32_t n_inputs;
    int32_t *outputs; /* value indices of the graph outputs */
    int32_t n_outputs;

    const char **sym_names; /* symbolic dim names ("batch", "N", "unk__0") */
    int32_t n_syms;
    int32_t cap_syms;

    int64_t opset;      /* version of the default ONNX domain the model imports */
    int64_t ir_version; /* the model's IR version */
    const char *name;   /* the graph's name, or "" */
    const char *source; /* the file it came from, for messages; "" if none */

    /* The model's metadata_props (key, value pairs in file order; exporters
     * such as sherpa-onnx's put model facts there). */
    const char **meta_keys, **meta_values;
    int32_t n_meta;
} infd_ir_graph;

/* An empty graph; NULL on out of memory. `source` names it in messages. */
infd_ir_graph *infd_ir_graph_create(const char *source);

/* Frees the graph and everything it points to. NULL is a no-op. */
void infd_ir_graph_destroy(infd_ir_graph *g);

/* A copy of `src` that owns everything it points to except constant data:
 * each value's `data` points where src's does (src's weight arena, or
 * wherever it points), so the copy must not outlive that memory and must
 * not write through those pointers (no pass does: passes put new constants
 * in the copy's own weight arena). Tables, names, attributes and index
 * arrays are copied into the new graph's arenas. NULL on out of memory.
 * Cost: O(size of the graph's structure), no weight bytes. */
infd_ir_graph *infd_ir_graph_clone(const infd_ir_graph *src);

/* Adds a value named `name` (copied) with unknown dtype and shape; returns its
 * index, or -1 on out of memory. Names are not checked for uniqueness here:
 * the loader does that with its name table. */
int32_t infd_ir_graph_add_value(infd_ir_graph *g, const char *name);

/* Adds a node (fields copied shallowly: the arrays must already live in
 * g->arena); returns its index, or -1 on out of memory. */
int32_t infd_ir_graph_add_node(infd_ir_graph *g, const infd_ir_node *node);

/* The index of symbol `name`, added if new; -1 on out of memory. */
int32_t infd_ir_graph_intern_sym(infd_ir_graph *g, const char *name);

/* Whether v is a constant whose bytes are all zero (for floats +0.0, not
 * -0.0): the zeros a channel-padding Concat appends (BlazeFace), which
 * backends write instead of reading. */
bool infd_ir_value_is_zeros(const infd_ir_value *v);

/* Looks up attribute `name` on `node`; NULL when absent. */
const infd_ir_attr *infd_ir_node_attr(const infd_ir_node *node, const char *name);

/* Attribute accessors with a default for absent attributes. A present
 * attribute of the wrong type fails with a message naming node and
 * attribute. */
infd_status infd_ir_attr_int(const infd_ir_graph *g, const infd_ir_node *node, const char *name,
                             int64_t dflt, int64_t *out, infd_error *err);
infd_status infd_ir_attr_float(const infd_ir_graph *g, const infd_ir_node *node, const char *name,
                               float dflt, float *out, infd_error *err);
/* `*out` is NULL (and `*n` 0) when absent. */
infd_status infd_ir_attr_ints(const infd_ir_graph *g, const infd_ir_node *node, const char *name,
                              const int64_t **out, int32_t *n, infd_error *err);
infd_status infd_ir_attr_string(const infd_ir_graph *g, const infd_ir_node *node, const char *name,
                                const char *dflt, const char **out, infd_error *err);

/* Writes "[batch,3,224,224]" ("[?]" for an unknown shape) into buf. */
char *infd_ir_shape_format(const infd_ir_graph *g, const infd_ir_shape *shape, char *buf, size_t n);

/* Reorders nodes so that every node comes after the producers of its inputs
 * (Kahn's algorithm, stable for already-sorted graphs) and fixes producer
 * indices. Fails with INVALID_ARGUMENT naming a node on a cycle. */
infd_status infd_ir_graph_toposort(infd_ir_graph *g, infd_error *err);

/* Counts live nodes of each op type and writes "Conv x53, Relu x49, ..." */
void infd_ir_graph_summary(const infd_ir_graph *g, char *buf, size_t n);

#endif /* INFD_GRAPH_IR_H */
