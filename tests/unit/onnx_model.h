/*
 * onnx_model.h - small ONNX models for the unit tests, written with
 * protobuf-c into a model repository.
 *
 * A model is a few nodes (Add, Sub, Identity, ...) over FP32 tensors that
 * all have one 2-D shape, [batch, width] with a symbolic batch or
 * [rows, width]: enough for tests of the server and its frontends, which
 * care about names, shapes and batching rather than operators; and
 * onnx_model_tiny, Y = Relu(X + B) with an initializer, for the engine's
 * plan tests. Header-only (static inline functions): include it from the
 * test's .c; tests/unit is on every unit test's include path.
 */
#ifndef INFD_TESTS_UNIT_ONNX_MODEL_H
#define INFD_TESTS_UNIT_ONNX_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "onnx.pb-c.h"

#define ONNX_MODEL_MAX_IO    8 /* inputs, outputs, nodes: each at most */
#define ONNX_MODEL_MAX_INPUT 2 /* inputs of one node */

typedef struct onnx_model_node {
    const char *op_type;
    const char *name;
    const char *in[ONNX_MODEL_MAX_INPUT]; /* unused trailing slots NULL */
    const char *out;
} onnx_model_node;

/* Lists end at the first NULL name (op_type for nodes). */
typedef struct onnx_model_spec {
    const char *graph_name;
    int64_t rows;  /* first dimension; 0: the symbolic "batch" */
    int64_t width; /* second dimension */
    const char *inputs[ONNX_MODEL_MAX_IO];
    const char *outputs[ONNX_MODEL_MAX_IO];
    onnx_model_node nodes[ONNX_MODEL_MAX_IO];
} onnx_model_spec;

/* Fills `info` (and the protos it points to) for a FLOAT tensor of the
 * spec's shape named `name`. */
static inline void onnx_model_value_info_(Onnx__ValueInfoProto *info, Onnx__TypeProto *type,
                                          Onnx__TypeProto__Tensor *tensor,
                                          Onnx__TensorShapeProto *shape,
                                          Onnx__TensorShapeProto__Dimension dims[2],
                                          Onnx__TensorShapeProto__Dimension *dimp[2],
                                          const onnx_model_spec *spec, const char *name)
{
    onnx__tensor_shape_proto__dimension__init(&dims[0]);
    onnx__tensor_shape_proto__dimension__init(&dims[1]);
    if (spec->rows > 0) {
        dims[0].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        dims[0].dim_value = spec->rows;
    } else {
        dims[0].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
        dims[0].dim_param = "batch";
    }
    dims[1].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    dims[1].dim_value = spec->width;
    dimp[0] = &dims[0];
    dimp[1] = &dims[1];
    onnx__tensor_shape_proto__init(shape);
    shape->n_dim = 2;
    shape->dim = dimp;
    onnx__type_proto__tensor__init(tensor);
    tensor->has_elem_type = 1;
    tensor->elem_type = 1; /* FLOAT */
    tensor->shape = shape;
    onnx__type_proto__init(type);
    type->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    type->tensor_type = tensor;
    onnx__value_info_proto__init(info);
    info->name = (char *)name;
    info->type = type;
}

static inline bool onnx_model_write_file_(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(data, 1, n, f) == n;
    if (f && fclose(f) != 0)
        ok = false;
    if (!ok)
        fprintf(stderr, "    cannot write %s\n", path);
    return ok;
}

/* A serialized model Y = Relu(X + B), X: FP32 [batch, 4] with a symbolic
 * batch, B an initializer [-1.5, -0.5, 0.5, 1.5], metadata window_size
 * "121" and normalize_type ""; returns its size (the
 * caller frees *out). Inline: not every includer uses it. */
static inline size_t onnx_model_tiny(uint8_t **out)
{
    Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
    Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
    Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    Onnx__OperatorSetIdProto *opsets[1] = { &opset };
    Onnx__TensorProto b = ONNX__TENSOR_PROTO__INIT;
    Onnx__TensorProto *inits[1] = { &b };
    Onnx__ValueInfoProto x = ONNX__VALUE_INFO_PROTO__INIT, y = ONNX__VALUE_INFO_PROTO__INIT;
    Onnx__ValueInfoProto *ins[1] = { &x }, *outs[1] = { &y };
    Onnx__TypeProto xt = ONNX__TYPE_PROTO__INIT;
    Onnx__TypeProto__Tensor xtt = ONNX__TYPE_PROTO__TENSOR__INIT;
    Onnx__TensorShapeProto xs = ONNX__TENSOR_SHAPE_PROTO__INIT;
    Onnx__TensorShapeProto__Dimension d0 = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
    Onnx__TensorShapeProto__Dimension d1 = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
    Onnx__TensorShapeProto__Dimension *dims[2] = { &d0, &d1 };
    Onnx__NodeProto add = ONNX__NODE_PROTO__INIT, relu = ONNX__NODE_PROTO__INIT;
    Onnx__NodeProto *nodes[2] = { &add, &relu };
    char *add_in[2] = { "X", "B" }, *add_out[1] = { "S" }, *relu_in[1] = { "S" };
    char *relu_out[1] = { "Y" };
    int64_t b_dims[1] = { 4 };
    float b_data[4] = { -1.5f, -0.5f, 0.5f, 1.5f };

    m.has_ir_version = 1;
    m.ir_version = 8;
    opset.domain = "";
    opset.has_version = 1;
    opset.version = 17;
    m.n_opset_import = 1;
    m.opset_import = opsets;
    m.graph = &g;
    /* metadata_props, as exporters write them (infd_weights_metadata) */
    Onnx__StringStringEntryProto meta0 = ONNX__STRING_STRING_ENTRY_PROTO__INIT;
    Onnx__StringStringEntryProto meta1 = ONNX__STRING_STRING_ENTRY_PROTO__INIT;
    Onnx__StringStringEntryProto *metas[2] = { &meta0, &meta1 };
    meta0.key = "window_size";
    meta0.value = "121";
    meta1.key = "normalize_type";
    meta1.value = "";
    m.n_metadata_props = 2;
    m.metadata_props = metas;
    b.name = "B";
    b.has_data_type = 1;
    b.data_type = 1;
    b.n_dims = 1;
    b.dims = b_dims;
    b.has_raw_data = 1;
    b.raw_data.len = sizeof(b_data);
    b.raw_data.data = (uint8_t *)b_data;
    g.n_initializer = 1;
    g.initializer = inits;
    d0.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
    d0.dim_param = "batch";
    d1.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    d1.dim_value = 4;
    xs.n_dim = 2;
    xs.dim = dims;
    xtt.has_elem_type = 1;
    xtt.elem_type = 1;
    xtt.shape = &xs;
    xt.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    xt.tensor_type = &xtt;
    x.name = "X";
    x.type = &xt;
    y.name = "Y";
    g.n_input = 1;
    g.input = ins;
    g.n_output = 1;
    g.output = outs;
    add.op_type = "Add";
    add.n_input = 2;
    add.input = add_in;
    add.n_output = 1;
    add.output = add_out;
    relu.op_type = "Relu";
    relu.n_input = 1;
    relu.input = relu_in;
    relu.n_output = 1;
    relu.output = relu_out;
    g.n_node = 2;
    g.node = nodes;

    size_t n = onnx__model_proto__get_packed_size(&m);
    *out = malloc(n);
    onnx__model_proto__pack(&m, *out);
    return n;
}

/* Writes <repo>/<name>/1/model.onnx from `spec`, and <repo>/<name>/config.pbtxt
 * holding `config` when it is non-NULL, creating the directories. False, with
 * a message on stderr, when a file cannot be written. */
static inline bool onnx_model_add(const char *repo, const char *name, const onnx_model_spec *spec,
                                  const char *config)
{
    enum { MAX_VALUES = 2 * ONNX_MODEL_MAX_IO };
    Onnx__ValueInfoProto infos[MAX_VALUES], *vi[MAX_VALUES];
    Onnx__TypeProto types[MAX_VALUES];
    Onnx__TypeProto__Tensor tensors[MAX_VALUES];
    Onnx__TensorShapeProto shapes[MAX_VALUES];
    Onnx__TensorShapeProto__Dimension dims[MAX_VALUES][2], *dimp[MAX_VALUES][2];
    Onnx__NodeProto nodes[ONNX_MODEL_MAX_IO], *nodep[ONNX_MODEL_MAX_IO];
    char *node_in[ONNX_MODEL_MAX_IO][ONNX_MODEL_MAX_INPUT], *node_out[ONNX_MODEL_MAX_IO];

    int n_in = 0, n_out = 0, n_nodes = 0;
    while (n_in < ONNX_MODEL_MAX_IO && spec->inputs[n_in])
        n_in++;
    while (n_out < ONNX_MODEL_MAX_IO && spec->outputs[n_out])
        n_out++;
    for (int i = 0; i < n_in + n_out; i++) {
        const char *vname = i < n_in ? spec->inputs[i] : spec->outputs[i - n_in];
        onnx_model_value_info_(&infos[i], &types[i], &tensors[i], &shapes[i], dims[i], dimp[i],
                               spec, vname);
        vi[i] = &infos[i];
    }
    for (; n_nodes < ONNX_MODEL_MAX_IO && spec->nodes[n_nodes].op_type; n_nodes++) {
        const onnx_model_node *sn = &spec->nodes[n_nodes];
        Onnx__NodeProto *np = &nodes[n_nodes];
        onnx__node_proto__init(np);
        np->op_type = (char *)sn->op_type;
        np->name = (char *)sn->name;
        while (np->n_input < ONNX_MODEL_MAX_INPUT && sn->in[np->n_input]) {
            node_in[n_nodes][np->n_input] = (char *)sn->in[np->n_input];
            np->n_input++;
        }
        np->input = node_in[n_nodes];
        node_out[n_nodes] = (char *)sn->out;
        np->n_output = 1;
        np->output = &node_out[n_nodes];
        nodep[n_nodes] = np;
    }

    Onnx__GraphProto g;
    onnx__graph_proto__init(&g);
    g.name = (char *)spec->graph_name;
    g.n_node = (size_t)n_nodes;
    g.node = nodep;
    g.n_input = (size_t)n_in;
    g.input = vi;
    g.n_output = (size_t)n_out;
    g.output = vi + n_in;
    Onnx__OperatorSetIdProto opset;
    onnx__operator_set_id_proto__init(&opset);
    opset.domain = "";
    opset.has_version = 1;
    opset.version = 13;
    Onnx__OperatorSetIdProto *opsets[] = { &opset };
    Onnx__ModelProto mp;
    onnx__model_proto__init(&mp);
    mp.has_ir_version = 1;
    mp.ir_version = 7;
    mp.n_opset_import = 1;
    mp.opset_import = opsets;
    mp.graph = &g;

    char path[512];
    mkdir(repo, 0755);
    snprintf(path, sizeof(path), "%s/%s", repo, name);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/%s/1", repo, name);
    mkdir(path, 0755);
    size_t n = onnx__model_proto__get_packed_size(&mp);
    uint8_t *buf = malloc(n);
    if (!buf)
        return false;
    onnx__model_proto__pack(&mp, buf);
    snprintf(path, sizeof(path), "%s/%s/1/model.onnx", repo, name);
    bool ok = onnx_model_write_file_(path, buf, n);
    free(buf);
    if (ok && config) {
        snprintf(path, sizeof(path), "%s/%s/config.pbtxt", repo, name);
        ok = onnx_model_write_file_(path, config, strlen(config));
    }
    return ok;
}

/* Writes <repo>/twin: INPUT0 [batch, 4] FP32 -> OUTPUT0 = INPUT0 (Identity),
 * OUTPUT1 = INPUT0 + INPUT0 (Add); max_batch_size 8, dynamic batching. A
 * failure shows as the server's missing model. */
static inline void onnx_model_add_twin(const char *repo)
{
    const onnx_model_spec twin = {
        .graph_name = "twin",
        .width = 4,
        .inputs = { "INPUT0" },
        .outputs = { "OUTPUT0", "OUTPUT1" },
        .nodes = { { "Identity", "id", { "INPUT0" }, "OUTPUT0" },
                   { "Add", "add", { "INPUT0", "INPUT0" }, "OUTPUT1" } },
    };
    onnx_model_add(repo, "twin", &twin, "max_batch_size: 8\ndynamic_batching { }\n");
}

#endif /* INFD_TESTS_UNIT_ONNX_MODEL_H */
