/* Unit tests for the IR tables: values, symbols, attributes, sorting. */
#include "core/alloc.h"
#include "graph/ir.h"
#include "test.h"

/* Adds node `op` reading values ins[0..n_in) and writing out. */
static int32_t add_node(infd_ir_graph *g, const char *name, const int32_t *ins, int32_t n_in,
                        int32_t out)
{
    int32_t *i = infd_arena_alloc(&g->arena, sizeof(int32_t) * (size_t)(n_in + 1), 0);
    int32_t *o = infd_arena_alloc(&g->arena, sizeof(int32_t), 0);
    memcpy(i, ins, sizeof(int32_t) * (size_t)n_in);
    o[0] = out;
    infd_ir_node node = { .name = name,
                          .op_type = "Op",
                          .domain = "",
                          .inputs = i,
                          .n_inputs = n_in,
                          .outputs = o,
                          .n_outputs = 1 };
    return infd_ir_graph_add_node(g, &node);
}

static void test_values_and_symbols(void)
{
    infd_ir_graph *g = infd_ir_graph_create("t.onnx");
    ASSERT_TRUE(g != NULL);
    for (int i = 0; i < 1000; i++) {
        char name[32];
        snprintf(name, sizeof(name), "v%d", i);
        ASSERT_EQ_INT(infd_ir_graph_add_value(g, name), i);
    }
    ASSERT_STR_EQ(g->values[999].name, "v999");
    ASSERT_EQ_INT(g->values[5].shape.rank, -1);
    ASSERT_EQ_INT(g->values[5].producer, -1);
    int32_t b = infd_ir_graph_intern_sym(g, "batch");
    ASSERT_EQ_INT(infd_ir_graph_intern_sym(g, "seq"), b + 1);
    ASSERT_EQ_INT(infd_ir_graph_intern_sym(g, "batch"), b);
    infd_ir_shape s = { .rank = 3 };
    s.dims[0] = (infd_ir_dim){ -1, b };
    s.dims[1] = (infd_ir_dim){ 3, -1 };
    s.dims[2] = (infd_ir_dim){ -1, -1 };
    char buf[64];
    ASSERT_STR_EQ(infd_ir_shape_format(g, &s, buf, sizeof(buf)), "[batch,3,?]");
    s.rank = 0;
    ASSERT_STR_EQ(infd_ir_shape_format(g, &s, buf, sizeof(buf)), "[]");
    s.rank = -1;
    ASSERT_STR_EQ(infd_ir_shape_format(g, &s, buf, sizeof(buf)), "[?]");
    infd_ir_graph_destroy(g);
    infd_ir_graph_destroy(NULL);
}

/* Nodes listed backwards are sorted producers-first; a cycle is named. */
static void test_toposort(void)
{
    infd_ir_graph *g = infd_ir_graph_create("t.onnx");
    int32_t v[5];
    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof(name), "v%d", i);
        v[i] = infd_ir_graph_add_value(g, name);
    }
    /* v0 -> c -> v1 ; v1 -> b -> v2 ; (v1, v2) -> a -> v3, listed a, b, c. */
    int32_t a_in[2] = { v[1], v[2] }, b_in[1] = { v[1] }, c_in[1] = { v[0] };
    add_node(g, "a", a_in, 2, v[3]);
    add_node(g, "b", b_in, 1, v[2]);
    add_node(g, "c", c_in, 1, v[1]);
    ASSERT_STATUS(infd_ir_graph_toposort(g, NULL), INFD_STATUS_OK);
    ASSERT_STR_EQ(g->nodes[0].name, "c");
    ASSERT_STR_EQ(g->nodes[1].name, "b");
    ASSERT_STR_EQ(g->nodes[2].name, "a");
    ASSERT_EQ_INT(g->values[v[3]].producer, 2);
    ASSERT_EQ_INT(g->values[v[1]].producer, 0);

    /* Close a loop: c now reads v3. */
    ((int32_t *)g->nodes[0].inputs)[0] = v[3];
    infd_error err = { 0 };
    ASSERT_STATUS(infd_ir_graph_toposort(g, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "t.onnx: the graph has a cycle through node");
    infd_ir_graph_destroy(g);
}

static void test_attrs(void)
{
    infd_ir_graph *g = infd_ir_graph_create("t.onnx");
    static const int64_t pads[4] = { 1, 1, 2, 2 };
    infd_ir_attr attrs[3] = {
        { .name = "alpha", .type = INFD_IR_ATTR_FLOAT, .f = 0.5f, .tensor = -1 },
        { .name = "pads", .type = INFD_IR_ATTR_INTS, .n = 4, .ints = pads, .tensor = -1 },
        { .name = "mode", .type = INFD_IR_ATTR_STRING, .s = "nearest", .s_len = 7, .tensor = -1 },
    };
    infd_ir_node node = { .name = "n", .op_type = "Resize", .attrs = attrs, .n_attrs = 3 };
    float f;
    const int64_t *ints;
    int32_t n;
    const char *s;
    infd_error err = { 0 };
    ASSERT_STATUS(infd_ir_attr_float(g, &node, "alpha", 1.0f, &f, &err), INFD_STATUS_OK);
    ASSERT_TRUE(f == 0.5f);
    ASSERT_STATUS(infd_ir_attr_float(g, &node, "beta", 1.0f, &f, &err), INFD_STATUS_OK);
    ASSERT_TRUE(f == 1.0f);
    ASSERT_STATUS(infd_ir_attr_ints(g, &node, "pads", &ints, &n, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(n, 4);
    ASSERT_EQ_I64(ints[2], 2);
    ASSERT_STATUS(infd_ir_attr_ints(g, &node, "strides", &ints, &n, &err), INFD_STATUS_OK);
    ASSERT_TRUE(ints == NULL && n == 0);
    ASSERT_STATUS(infd_ir_attr_string(g, &node, "mode", "linear", &s, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(s, "nearest");
    ASSERT_STATUS(infd_ir_attr_ints(g, &node, "mode", &ints, &n, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_EQ(err.msg, "t.onnx: node 'n' (Resize): attribute 'mode' is string, expected ints");
    infd_ir_graph_destroy(g);
}

static void test_create_out_of_memory(void)
{
    for (int64_t k = 1; k < 10; k++) {
        infd_alloc_fail_after(k);
        infd_ir_graph *g = infd_ir_graph_create("t.onnx");
        int fired = infd_alloc_injected_fired();
        infd_alloc_fail_after(0);
        if (!fired) {
            ASSERT_TRUE(g != NULL);
            infd_ir_graph_destroy(g);
            return;
        }
        ASSERT_TRUE(g == NULL);
    }
    TEST_FAIL_("graph creation never succeeded");
}

/* infd_ir_value_is_zeros: +0.0 everywhere (any dtype: the bytes), not -0.0
 * nor a value computed at run time. */
static void test_value_is_zeros(void)
{
    float zeros[4] = { 0 }, neg[4] = { 0, 0, -0.0f, 0 }, one[4] = { 0, 0, 0, 1e-30f };
    int64_t ints[2] = { 0, 0 };
    infd_ir_value v = { .data = zeros, .nbytes = sizeof(zeros) };
    ASSERT_TRUE(infd_ir_value_is_zeros(&v));
    v.data = neg;
    ASSERT_TRUE(!infd_ir_value_is_zeros(&v));
    v.data = one;
    ASSERT_TRUE(!infd_ir_value_is_zeros(&v));
    v = (infd_ir_value){ .data = ints, .nbytes = sizeof(ints) };
    ASSERT_TRUE(infd_ir_value_is_zeros(&v));
    v = (infd_ir_value){ .data = NULL, .nbytes = 16 };
    ASSERT_TRUE(!infd_ir_value_is_zeros(&v));
}

TEST_MAIN(test_values_and_symbols, test_toposort, test_attrs, test_create_out_of_memory,
          test_value_is_zeros)
