/*
 * Unit tests for the graph passes (src/graph/passes.c) on small ONNX models
 * written here: a constant Mul/Add/Sub after a Conv folded into its weights
 * and bias, hard-swish recognised in its three spellings and fused with a
 * trailing scale and shift into the Conv, and what must be left alone (a
 * value with a second reader, Add 2 instead of 3, a squeeze-excitation gate
 * x * HardSigmoid(y)).
 *
 * A model is checked two ways: run as a plan on the CPU backend against
 * naive loops, with the kernels it became (infd_context_step_profile); and
 * through the passes alone, to read the rewritten graph, with stand-in
 * backends where a test needs one that refuses a fusion (as CUDA refuses
 * HardSwish and the trailing scale and shift).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/backend.h"
#include "graph/ir.h"
#include "graph/passes.h"
#include "graph/shape.h"
#include "infd/engine.h"
#include "onnx.pb-c.h"
#include "onnx/loader.h"
#include "test.h"

/* ---- A small ONNX writer -------------------------------------------------- */

enum { MB_NODES = 16, MB_INITS = 16, MB_ATTRS = 4, MB_FLOATS = 512 };

/* A model under construction: input X [1, C, H, W] FP32, initializers,
 * nodes with up to 3 inputs and 4 attributes, outputs by name. */
typedef struct mb {
    int64_t opset;
    int64_t xdims[4];
    int n_nodes, n_inits, n_outputs;
    Onnx__NodeProto nodes[MB_NODES], *nodep[MB_NODES];
    char *node_in[MB_NODES][3], *node_out[MB_NODES][1];
    Onnx__AttributeProto attrs[MB_NODES][MB_ATTRS], *attrp[MB_NODES][MB_ATTRS];
    int64_t attr_ints[MB_NODES][MB_ATTRS][4];
    Onnx__TensorProto inits[MB_INITS], *initp[MB_INITS];
    int64_t init_dims[MB_INITS][4];
    float init_data[MB_INITS][MB_FLOATS];
    const char *outputs[2];
} mb;

static mb *mb_new(int64_t opset, int64_t c, int64_t h, int64_t w)
{
    mb *b = calloc(1, sizeof(*b));
    b->opset = opset;
    b->xdims[0] = 1;
    b->xdims[1] = c;
    b->xdims[2] = h;
    b->xdims[3] = w;
    return b;
}

/* An FP32 initializer (rank 0: a scalar). */
static void mb_const(mb *b, const char *name, int rank, const int64_t *dims, const float *data)
{
    int i = b->n_inits++;
    Onnx__TensorProto *t = &b->inits[i];
    onnx__tensor_proto__init(t);
    int64_t n = 1;
    for (int d = 0; d < rank; d++) {
        b->init_dims[i][d] = dims[d];
        n *= dims[d];
    }
    memcpy(b->init_data[i], data, (size_t)n * sizeof(float));
    t->name = (char *)name;
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t->n_dims = (size_t)rank;
    t->dims = b->init_dims[i];
    t->has_raw_data = 1;
    t->raw_data.len = (size_t)n * sizeof(float);
    t->raw_data.data = (uint8_t *)b->init_data[i];
    b->initp[i] = t;
}

static void mb_scalar(mb *b, const char *name, float v)
{
    mb_const(b, name, 0, NULL, &v);
}

/* Adds node `op` writing `out` (also its name); returns its index. */
static int mb_node(mb *b, const char *op, const char *out, const char *in0, const char *in1,
                   const char *in2)
{
    int i = b->n_nodes++;
    Onnx__NodeProto *n = &b->nodes[i];
    onnx__node_proto__init(n);
    n->op_type = (char *)op;
    n->name = (char *)out;
    const char *ins[3] = { in0, in1, in2 };
    while (n->n_input < 3 && ins[n->n_input]) {
        b->node_in[i][n->n_input] = (char *)ins[n->n_input];
        n->n_input++;
    }
    n->input = b->node_in[i];
    b->node_out[i][0] = (char *)out;
    n->n_output = 1;
    n->output = b->node_out[i];
    n->attribute = b->attrp[i];
    b->nodep[i] = n;
    return i;
}

static Onnx__AttributeProto *mb_attr(mb *b, int node, const char *name)
{
    Onnx__NodeProto *n = &b->nodes[node];
    Onnx__AttributeProto *a = &b->attrs[node][n->n_attribute];
    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    b->attrp[node][n->n_attribute++] = a;
    return a;
}

static void mb_attr_float(mb *b, int node, const char *name, float f)
{
    Onnx__AttributeProto *a = mb_attr(b, node, name);
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    a->has_f = 1;
    a->f = f;
}

static void mb_attr_int(mb *b, int node, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = mb_attr(b, node, name);
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = 1;
    a->i = v;
}

static void mb_attr_ints(mb *b, int node, const char *name, int n, const int64_t *v)
{
    int k = (int)b->nodes[node].n_attribute;
    Onnx__AttributeProto *a = mb_attr(b, node, name);
    memcpy(b->attr_ints[node][k], v, (size_t)n * sizeof(int64_t));
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    a->n_ints = (size_t)n;
    a->ints = b->attr_ints[node][k];
}

/* A 3x3 Conv with pads 1 (so borders matter) reading x, weights w, bias
 * (NULL: none). */
static int mb_conv(mb *b, const char *out, const char *x, const char *w, const char *bias)
{
    int n = mb_node(b, "Conv", out, x, w, bias);
    mb_attr_ints(b, n, "kernel_shape", 2, (int64_t[]){ 3, 3 });
    mb_attr_ints(b, n, "pads", 4, (int64_t[]){ 1, 1, 1, 1 });
    return n;
}

static void mb_output(mb *b, const char *name)
{
    b->outputs[b->n_outputs++] = name;
}

/* The serialized model (the caller frees it). */
static uint8_t *mb_pack(mb *b, size_t *n)
{
    Onnx__TensorShapeProto__Dimension dims[4], *dimp[4];
    for (int i = 0; i < 4; i++) {
        onnx__tensor_shape_proto__dimension__init(&dims[i]);
        dims[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        dims[i].dim_value = b->xdims[i];
        dimp[i] = &dims[i];
    }
    Onnx__TensorShapeProto shape = ONNX__TENSOR_SHAPE_PROTO__INIT;
    shape.n_dim = 4;
    shape.dim = dimp;
    Onnx__TypeProto__Tensor tt = ONNX__TYPE_PROTO__TENSOR__INIT;
    tt.has_elem_type = 1;
    tt.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tt.shape = &shape;
    Onnx__TypeProto type = ONNX__TYPE_PROTO__INIT;
    type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    type.tensor_type = &tt;
    Onnx__ValueInfoProto x = ONNX__VALUE_INFO_PROTO__INIT, ys[2], *xp[1] = { &x }, *yp[2];
    x.name = "X";
    x.type = &type;
    for (int i = 0; i < b->n_outputs; i++) {
        onnx__value_info_proto__init(&ys[i]);
        ys[i].name = (char *)b->outputs[i];
        yp[i] = &ys[i];
    }
    Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
    g.name = "passes";
    g.n_node = (size_t)b->n_nodes;
    g.node = b->nodep;
    g.n_initializer = (size_t)b->n_inits;
    g.initializer = b->initp;
    g.n_input = 1;
    g.input = xp;
    g.n_output = (size_t)b->n_outputs;
    g.output = yp;
    Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT, *opsets[1] = { &opset };
    opset.domain = "";
    opset.has_version = 1;
    opset.version = b->opset;
    Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
    m.has_ir_version = 1;
    m.ir_version = 7;
    m.n_opset_import = 1;
    m.opset_import = opsets;
    m.graph = &g;
    *n = onnx__model_proto__get_packed_size(&m);
    uint8_t *buf = malloc(*n);
    onnx__model_proto__pack(&m, buf);
    return buf;
}

/* ---- Running a model --------------------------------------------------- */

/* Runs the model as a CPU plan on input x: the outputs into ys[i] (n_y of
 * them, each of ny floats), the kernels' op types space-separated into ops.
 * False (with a message) when anything fails. */
static bool run_plan(mb *b, const float *x, float **ys, int n_y, size_t ny, char *ops, size_t n_ops)
{
    size_t n = 0;
    uint8_t *buf = mb_pack(b, &n);
    infd_plan_options o;
    infd_plan *plan = NULL;
    infd_context *ctx = NULL;
    infd_error err = { 0 };
    bool ok = false;
    infd_plan_options_init(&o);
    o.n_threads = 1;
    if (infd_plan_create_from_memory(buf, n, "t.onnx", &o, &plan, &err) != INFD_STATUS_OK ||
        infd_context_create(plan, &ctx, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "    %s\n", err.msg);
        goto out;
    }
    infd_tensor_info in, outi;
    infd_tensor tx, ty[2];
    infd_plan_input(plan, 0, &in);
    infd_tensor_init_view(&tx, INFD_DTYPE_FP32, &in.shape, (void *)x, in.nbytes, NULL);
    for (int i = 0; i < n_y; i++) {
        infd_plan_output(plan, i, &outi);
        if (outi.nbytes != ny * sizeof(float)) {
            fprintf(stderr, "    output %d has %zu bytes, expected %zu\n", i, outi.nbytes,
                    ny * sizeof(float));
            goto out;
        }
        infd_tensor_init_view(&ty[i], INFD_DTYPE_FP32, &outi.shape, ys[i], outi.nbytes, NULL);
    }
    if (infd_plan_run(plan, ctx, &tx, 1, ty, n_y, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "    %s\n", err.msg);
        goto out;
    }
    ops[0] = '\0';
    for (int i = 0; i < infd_context_n_steps(ctx); i++) {
        infd_step_profile p;
        infd_context_step_profile(ctx, i, &p);
        size_t at = strlen(ops);
        snprintf(ops + at, n_ops - at, "%s%s", at ? " " : "", p.op_type);
    }
    ok = true;
out:
    infd_context_destroy(ctx);
    infd_plan_destroy(plan);
    free(buf);
    return ok;
}

/* Loads the model and runs the passes as plan.c does, with `backend`. */
static infd_ir_graph *run_passes(mb *b, const infd_backend_ops *backend)
{
    size_t n = 0;
    uint8_t *buf = mb_pack(b, &n);
    infd_ir_graph *g = NULL;
    infd_error err = { 0 };
    int n_fused = 0;
    infd_status st = infd_onnx_load_buffer(buf, n, "t.onnx", NULL, &g, &err);
    free(buf);
    for (int32_t i = 0; st == INFD_STATUS_OK && i < g->n_nodes; i++)
        st = infd_shape_infer_node(g, i, &err);
    if (st == INFD_STATUS_OK)
        st = infd_pass_fold_batchnorm(g, &n_fused, &err);
    if (st == INFD_STATUS_OK)
        st = infd_pass_fold_conv_affine(g, &n_fused, &err);
    if (st == INFD_STATUS_OK)
        st = infd_pass_fuse_hardswish(g, backend, 1, INFD_PRECISION_FP16, &n_fused, &err);
    if (st == INFD_STATUS_OK)
        st = infd_pass_fuse_activations(g, backend, 1, INFD_PRECISION_FP16, &n_fused, &err);
    if (st == INFD_STATUS_OK)
        st = infd_pass_fuse_depthwise(g, backend, 1, INFD_PRECISION_FP16, &n_fused, &err);
    if (st != INFD_STATUS_OK) {
        fprintf(stderr, "    %s\n", err.msg);
        infd_ir_graph_destroy(g);
        return NULL;
    }
    return g;
}

/* The live nodes' op types, space-separated. */
static const char *live_ops(const infd_ir_graph *g, char *buf, size_t n)
{
    buf[0] = '\0';
    for (int32_t i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead)
            continue;
        size_t at = strlen(buf);
        snprintf(buf + at, n - at, "%s%s", at ? " " : "", g->nodes[i].op_type);
    }
    return buf;
}

static const infd_ir_node *live_node(const infd_ir_graph *g, const char *op_type)
{
    for (int32_t i = 0; i < g->n_nodes; i++) {
        if (!g->nodes[i].dead && strcmp(g->nodes[i].op_type, op_type) == 0)
            return &g->nodes[i];
    }
    return NULL;
}

static float attr_f(const infd_ir_graph *g, const infd_ir_node *n, const char *name, float dflt)
{
    float f = dflt;
    infd_ir_attr_float(g, n, name, dflt, &f, NULL);
    return f;
}

static const char *attr_s(const infd_ir_graph *g, const infd_ir_node *n, const char *name)
{
    const char *s = NULL;
    infd_ir_attr_string(g, n, name, NULL, &s, NULL);
    return s ? s : "(none)";
}

/* Stand-in backends: one takes everything; "cuda-like" refuses what the
 * CUDA backend refuses (a fused HardSwish, the trailing scale and shift);
 * one has no HardSwish op at all. */
static bool takes_all(const infd_kernel_args *a, infd_error *why)
{
    (void)a;
    (void)why;
    return true;
}

static bool cuda_like(const infd_kernel_args *a, infd_error *why)
{
    const char *act = NULL;
    (void)why;
    infd_ir_attr_string(a->g, a->node, "_fused_activation", NULL, &act, NULL);
    return !infd_ir_node_attr(a->node, "_fused_post_scale") &&
           !infd_ir_node_attr(a->node, "_fused_post_shift") && !(act && !strcmp(act, "HardSwish"));
}

static bool no_hardswish(const infd_kernel_args *a, infd_error *why)
{
    (void)why;
    return strcmp(a->node->op_type, "HardSwish") != 0;
}

/* Stand-ins for the fused depthwise block: one takes it (in FP16) without
 * a pooled residual, one never. */
static bool no_pooled_residual(const infd_kernel_args *a, infd_error *why)
{
    (void)why;
    if (strcmp(a->node->op_type, "_DwPwConv") != 0)
        return true;
    return a->precision == INFD_PRECISION_FP16 && !infd_ir_node_attr(a->node, "residual_pool");
}

static bool no_dwpw(const infd_kernel_args *a, infd_error *why)
{
    (void)why;
    return strcmp(a->node->op_type, "_DwPwConv") != 0;
}

static const infd_backend_ops backend_all = { .version = INFD_BACKEND_OPS_VERSION,
                                              .size = sizeof(infd_backend_ops),
                                              .name = "all",
                                              .supports = takes_all };
static const infd_backend_ops backend_cuda_like = { .version = INFD_BACKEND_OPS_VERSION,
                                                    .size = sizeof(infd_backend_ops),
                                                    .name = "cuda-like",
                                                    .supports = cuda_like };
static const infd_backend_ops backend_no_hardswish = { .version = INFD_BACKEND_OPS_VERSION,
                                                       .size = sizeof(infd_backend_ops),
                                                       .name = "no-hardswish",
                                                       .supports = no_hardswish };

static const infd_backend_ops backend_no_pool = { .version = INFD_BACKEND_OPS_VERSION,
                                                  .size = sizeof(infd_backend_ops),
                                                  .name = "no-pooled-residual",
                                                  .supports = no_pooled_residual };
static const infd_backend_ops backend_no_dwpw = { .version = INFD_BACKEND_OPS_VERSION,
                                                  .size = sizeof(infd_backend_ops),
                                                  .name = "no-dwpw",
                                                  .supports = no_dwpw };

/* ---- Reference ------------------------------------------------------------ */

enum { C = 4, M = 8, H = 5, W = 6, NX = C * H * W, NY = M * H * W };

static float wts[M * C * 9], bias[M], wts2[M * C * 9], bias2[M], xin[NX];

static void fill(float *v, int n, unsigned seed, float scale)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = ((float)((seed >> 8) & 0xffff) / 65535.0f * 2.0f - 1.0f) * scale;
    }
}

/* Fills the data every test uses (each test calls it, so one can run alone). */
static void setup_data(void)
{
    fill(wts, M * C * 9, 1, 0.5f);
    fill(bias, M, 2, 1.0f);
    fill(wts2, M * C * 9, 3, 0.5f);
    fill(bias2, M, 4, 1.0f);
    fill(xin, NX, 5, 3.0f);
}

/* y = conv3x3(x, w, pads 1) + b (b NULL: none), [1,C,H,W] -> [1,M,H,W]. */
static void ref_conv(const float *x, const float *w, const float *b, float *y)
{
    for (int o = 0; o < M; o++)
        for (int i = 0; i < H; i++)
            for (int j = 0; j < W; j++) {
                double acc = b ? b[o] : 0.0;
                for (int c = 0; c < C; c++)
                    for (int ki = 0; ki < 3; ki++)
                        for (int kj = 0; kj < 3; kj++) {
                            int ii = i + ki - 1, jj = j + kj - 1;
                            if (ii < 0 || ii >= H || jj < 0 || jj >= W)
                                continue;
                            acc += (double)x[(c * H + ii) * W + jj] *
                                   w[((o * C + c) * 3 + ki) * 3 + kj];
                        }
                y[(o * H + i) * W + j] = (float)acc;
            }
}

static float hswish(float v)
{
    return v * fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) / 6.0f;
}

/* Every element within 1e-4 + 1e-4 |want|; prints the first miss. */
#define ASSERT_NEAR_ALL(got, want, n)                                                   \
    do {                                                                                \
        for (int i_ = 0; i_ < (int)(n); i_++) {                                         \
            if (!(fabsf((got)[i_] - (want)[i_]) <= 1e-4f + 1e-4f * fabsf((want)[i_])))  \
                TEST_FAIL_("%s[%d] = %.7g, expected %.7g", #got, i_, (double)(got)[i_], \
                           (double)(want)[i_]);                                         \
        }                                                                               \
    } while (0)

/* ---- Models --------------------------------------------------------------- */

static const float K1 = 1.5f, K2 = 0.25f, K3 = 0.5f, K4 = -0.125f;

/* Paddle's block, opset 11 (Clip bounds as inputs), constants [1] first:
 * Conv -> Mul(k1) -> Add(k2) -> Add(3) -> Clip(0, 6) -> Mul(x, .) -> Div(6)
 * -> Mul(k3) -> Add(k4) -> Y. With `conv_out`, the Conv's output is also a
 * graph output (a second reader); with `clip_out`, the Clip's. */
static mb *paddle_block(bool conv_out, bool clip_out)
{
    mb *b = mb_new(11, C, H, W);
    int64_t one = 1;
    mb_const(b, "W", 4, (int64_t[]){ M, C, 3, 3 }, wts);
    mb_const(b, "B", 1, (int64_t[]){ M }, bias);
    mb_const(b, "k1", 1, &one, &K1);
    mb_const(b, "k2", 1, &one, &K2);
    mb_const(b, "k3", 1, &one, &K3);
    mb_const(b, "k4", 1, &one, &K4);
    mb_scalar(b, "three", 3.0f);
    mb_scalar(b, "zero", 0.0f);
    mb_scalar(b, "six", 6.0f);
    mb_conv(b, "c", "X", "W", "B");
    mb_node(b, "Mul", "m1", "k1", "c", NULL);
    mb_node(b, "Add", "a1", "m1", "k2", NULL);
    mb_node(b, "Add", "a3", "a1", "three", NULL);
    mb_node(b, "Clip", "cl", "a3", "zero", "six");
    mb_node(b, "Mul", "mm", "a1", "cl", NULL);
    mb_node(b, "Div", "hs", "mm", "six", NULL);
    mb_node(b, "Mul", "m3", "k3", "hs", NULL);
    mb_node(b, "Add", "Y", "m3", "k4", NULL);
    mb_output(b, "Y");
    if (conv_out)
        mb_output(b, "c");
    if (clip_out)
        mb_output(b, "cl");
    return b;
}

/* What paddle_block computes: Y, and the Conv and Clip outputs. */
static void paddle_ref(float *y, float *c, float *cl)
{
    ref_conv(xin, wts, bias, c);
    for (int i = 0; i < NY; i++) {
        float a1 = c[i] * K1 + K2;
        cl[i] = fminf(fmaxf(a1 + 3.0f, 0.0f), 6.0f);
        y[i] = a1 * cl[i] / 6.0f * K3 + K4;
    }
}

static void test_paddle_block_is_one_conv(void)
{
    setup_data();
    float y[NY], want[NY], c[NY], cl[NY];
    char ops[256];
    paddle_ref(want, c, cl);
    mb *b = paddle_block(false, false);
    bool ok = run_plan(b, xin, (float *[]){ y }, 1, NY, ops, sizeof(ops));
    infd_ir_graph *g = ok ? run_passes(b, &backend_all) : NULL;
    free(b);
    ASSERT_TRUE(ok && g);
    ASSERT_STR_EQ(ops, "Conv");
    ASSERT_NEAR_ALL(y, want, NY);

    /* The graph: one Conv with the activation, scale and shift, the first
     * affine in its weights and bias. */
    ASSERT_STR_EQ(live_ops(g, ops, sizeof(ops)), "Conv");
    const infd_ir_node *conv = live_node(g, "Conv");
    ASSERT_STR_EQ(attr_s(g, conv, "_fused_activation"), "HardSwish");
    ASSERT_TRUE(attr_f(g, conv, "_fused_post_scale", 1.0f) == K3);
    ASSERT_TRUE(attr_f(g, conv, "_fused_post_shift", 0.0f) == K4);
    ASSERT_EQ_INT(conv->n_inputs, 3);
    const float *nw = g->values[conv->inputs[1]].data, *nb = g->values[conv->inputs[2]].data;
    for (int i = 0; i < M * C * 9; i++)
        ASSERT_TRUE(nw[i] == wts[i] * K1);
    for (int o = 0; o < M; o++)
        ASSERT_TRUE(nb[o] == bias[o] * K1 + K2);
    ASSERT_STR_EQ(g->values[conv->outputs[0]].name, "Y");
    infd_ir_graph_destroy(g);
}

/* Opset 9 (Clip bounds as attributes), per-channel constants ([1,M,1,1]
 * and [M,1,1]), Sub, and the other spelling x * (clip / 6) with 1/6 as a
 * Mul; the trailing affine is one Sub. */
static void test_per_channel_affine_and_mul_sixth(void)
{
    setup_data();
    float kc[M], kd[M], y[NY], want[NY];
    const float k5 = 0.75f;
    char ops[256];
    fill(kc, M, 6, 2.0f);
    fill(kd, M, 7, 1.0f);
    mb *b = mb_new(9, C, H, W);
    mb_const(b, "W", 4, (int64_t[]){ M, C, 3, 3 }, wts);
    mb_const(b, "kc", 4, (int64_t[]){ 1, M, 1, 1 }, kc);
    mb_const(b, "kd", 3, (int64_t[]){ M, 1, 1 }, kd);
    mb_scalar(b, "three", 3.0f);
    mb_scalar(b, "sixth", 1.0f / 6.0f);
    mb_scalar(b, "k5", k5);
    mb_conv(b, "c", "X", "W", NULL);
    mb_node(b, "Mul", "m1", "c", "kc", NULL);
    mb_node(b, "Sub", "a1", "m1", "kd", NULL);
    mb_node(b, "Add", "a3", "three", "a1", NULL);
    int clip = mb_node(b, "Clip", "cl", "a3", NULL, NULL);
    mb_attr_float(b, clip, "min", 0.0f);
    mb_attr_float(b, clip, "max", 6.0f);
    mb_node(b, "Mul", "q", "cl", "sixth", NULL);
    mb_node(b, "Mul", "hs", "q", "a1", NULL);
    mb_node(b, "Sub", "Y", "hs", "k5", NULL);
    mb_output(b, "Y");
    ref_conv(xin, wts, NULL, want);
    for (int i = 0; i < NY; i++)
        want[i] = hswish(want[i] * kc[i / (H * W)] - kd[i / (H * W)]) - k5;
    bool ok = run_plan(b, xin, (float *[]){ y }, 1, NY, ops, sizeof(ops));
    infd_ir_graph *g = ok ? run_passes(b, &backend_all) : NULL;
    free(b);
    ASSERT_TRUE(ok && g);
    ASSERT_STR_EQ(ops, "Conv");
    ASSERT_NEAR_ALL(y, want, NY);
    const infd_ir_node *conv = live_node(g, "Conv");
    ASSERT_TRUE(conv != NULL);
    ASSERT_TRUE(attr_f(g, conv, "_fused_post_scale", 0.0f) == 1.0f);
    ASSERT_TRUE(attr_f(g, conv, "_fused_post_shift", 0.0f) == -k5);
    infd_ir_graph_destroy(g);
}

/* x * HardSigmoid(x) with alpha 1/6 as Paddle writes it (0.1666667014). */
static void test_hardsigmoid_spelling(void)
{
    setup_data();
    float y[NY], want[NY];
    char ops[256];
    mb *b = mb_new(13, C, H, W);
    mb_const(b, "W", 4, (int64_t[]){ M, C, 3, 3 }, wts);
    mb_const(b, "B", 1, (int64_t[]){ M }, bias);
    mb_conv(b, "c", "X", "W", "B");
    int hs = mb_node(b, "HardSigmoid", "h", "c", NULL, NULL);
    mb_attr_float(b, hs, "alpha", 0.16666670143604279f);
    mb_attr_float(b, hs, "beta", 0.5f);
    mb_node(b, "Mul", "Y", "h", "c", NULL);
    mb_output(b, "Y");
    ref_conv(xin, wts, bias, want);
    for (int i = 0; i < NY; i++)
        want[i] = hswish(want[i]);
    bool ok = run_plan(b, xin, (float *[]){ y }, 1, NY, ops, sizeof(ops));
    free(b);
    ASSERT_TRUE(ok);
    ASSERT_STR_EQ(ops, "Conv");
    ASSERT_NEAR_ALL(y, want, NY);
}

/* Hard-swish on a graph input: no producer to fuse into, one HardSwish
 * kernel. With Add 2 instead of 3 it is not hard-swish: left as it is. */
static void test_standalone_and_add_two(void)
{
    setup_data();
    for (int two = 0; two < 2; two++) {
        float y[NX], want[NX];
        char ops[256];
        float k = two ? 2.0f : 3.0f;
        mb *b = mb_new(13, C, H, W);
        mb_scalar(b, "k", k);
        mb_scalar(b, "zero", 0.0f);
        mb_scalar(b, "six", 6.0f);
        mb_scalar(b, "sixth", 1.0f / 6.0f);
        mb_node(b, "Add", "a", "X", "k", NULL);
        mb_node(b, "Clip", "cl", "a", "zero", "six");
        mb_node(b, "Mul", "m", "X", "cl", NULL);
        mb_node(b, "Mul", "Y", "sixth", "m", NULL);
        mb_output(b, "Y");
        for (int i = 0; i < NX; i++)
            want[i] = xin[i] * fminf(fmaxf(xin[i] + k, 0.0f), 6.0f) / 6.0f;
        bool ok = run_plan(b, xin, (float *[]){ y }, 1, NX, ops, sizeof(ops));
        free(b);
        ASSERT_TRUE(ok);
        ASSERT_STR_EQ(ops, two ? "Add Clip Mul Mul" : "HardSwish");
        ASSERT_NEAR_ALL(y, want, NX);
    }
}

/* The Conv's output also read elsewhere (a graph output): the Mul and Add
 * after it stay (the hard-swish after them still forms, on its own). */
static void test_second_reader_of_conv_output(void)
{
    setup_data();
    float y[NY], c[NY], want[NY], want_c[NY], cl[NY];
    char ops[256];
    paddle_ref(want, want_c, cl);
    mb *b = paddle_block(true, false);
    bool ok = run_plan(b, xin, (float *[]){ y, c }, 2, NY, ops, sizeof(ops));
    free(b);
    ASSERT_TRUE(ok);
    ASSERT_STR_EQ(ops, "Conv Mul Add HardSwish Mul Add");
    ASSERT_NEAR_ALL(y, want, NY);
    ASSERT_NEAR_ALL(c, want_c, NY);
}

/* A value inside the hard-swish chain read elsewhere: no hard-swish; the
 * affine before it still folds into the Conv, and the Conv takes the Add
 * of 3 no further (it is not an activation). */
static void test_second_reader_inside_chain(void)
{
    setup_data();
    float y[NY], cl[NY], want[NY], c[NY], want_cl[NY];
    char ops[256];
    paddle_ref(want, c, want_cl);
    mb *b = paddle_block(false, true);
    bool ok = run_plan(b, xin, (float *[]){ y, cl }, 2, NY, ops, sizeof(ops));
    free(b);
    ASSERT_TRUE(ok);
    ASSERT_STR_EQ(ops, "Conv Add Clip Mul Div Mul Add");
    ASSERT_NEAR_ALL(y, want, NY);
    ASSERT_NEAR_ALL(cl, want_cl, NY);
}

/* A squeeze-excitation gate: c * HardSigmoid(d) of two Convs is not
 * hard-swish; the HardSigmoid fuses into its Conv, the Mul stays. */
static void test_gate_is_not_hardswish(void)
{
    setup_data();
    float y[NY], want[NY], d[NY];
    char ops[256];
    mb *b = mb_new(13, C, H, W);
    mb_const(b, "W", 4, (int64_t[]){ M, C, 3, 3 }, wts);
    mb_const(b, "B", 1, (int64_t[]){ M }, bias);
    mb_const(b, "W2", 4, (int64_t[]){ M, C, 3, 3 }, wts2);
    mb_const(b, "B2", 1, (int64_t[]){ M }, bias2);
    mb_conv(b, "c", "X", "W", "B");
    mb_conv(b, "d", "X", "W2", "B2");
    int hs = mb_node(b, "HardSigmoid", "h", "d", NULL, NULL);
    mb_attr_float(b, hs, "alpha", 1.0f / 6.0f);
    mb_attr_float(b, hs, "beta", 0.5f);
    mb_node(b, "Mul", "Y", "c", "h", NULL);
    mb_output(b, "Y");
    ref_conv(xin, wts, bias, want);
    ref_conv(xin, wts2, bias2, d);
    for (int i = 0; i < NY; i++)
        want[i] *= fminf(fmaxf(d[i] / 6.0f + 0.5f, 0.0f), 1.0f);
    bool ok = run_plan(b, xin, (float *[]){ y }, 1, NY, ops, sizeof(ops));
    free(b);
    ASSERT_TRUE(ok);
    ASSERT_STR_EQ(ops, "Conv Conv Mul");
    ASSERT_NEAR_ALL(y, want, NY);
}

/* A backend that refuses a fused HardSwish and the trailing scale and shift
 * (as CUDA does) gets a Conv with the first affine folded, a standalone
 * HardSwish and the trailing Mul and Add; one without a HardSwish op gets
 * the chain as written. */
static void test_backend_refusals(void)
{
    setup_data();
    char ops[256];
    mb *b = paddle_block(false, false);
    infd_ir_graph *g = run_passes(b, &backend_cuda_like);
    infd_ir_graph *g2 = run_passes(b, &backend_no_hardswish);
    free(b);
    ASSERT_TRUE(g && g2);
    ASSERT_STR_EQ(live_ops(g, ops, sizeof(ops)), "Conv HardSwish Mul Add");
    ASSERT_STR_EQ(attr_s(g, live_node(g, "Conv"), "_fused_activation"), "(none)");
    ASSERT_STR_EQ(live_ops(g2, ops, sizeof(ops)), "Conv Add Clip Mul Div Mul Add");
    infd_ir_graph_destroy(g);
    infd_ir_graph_destroy(g2);
}

/* Conv -> Add(conv, r) -> Relu where r is produced after the Conv (a
 * channel Concat, as BlazeFace pads its block inputs): the fused Conv
 * takes the Add's place, after r. Where r comes from a later Conv, that
 * Conv takes the residual instead (ResNet's projection shortcut). */
static void test_residual_produced_after_conv(void)
{
    setup_data();
    float y[NY], want[NY], c[NY];
    char ops[256];
    mb *b = mb_new(13, C, H, W);
    mb_const(b, "W", 4, (int64_t[]){ M, C, 3, 3 }, wts);
    mb_const(b, "B", 1, (int64_t[]){ M }, bias);
    mb_conv(b, "c", "X", "W", "B");
    int cat = mb_node(b, "Concat", "r", "X", "X", NULL);
    mb_attr_int(b, cat, "axis", 1);
    mb_node(b, "Add", "s", "c", "r", NULL);
    mb_node(b, "Relu", "Y", "s", NULL, NULL);
    mb_output(b, "Y");
    ref_conv(xin, wts, bias, c);
    for (int i = 0; i < NY; i++)
        want[i] = fmaxf(c[i] + xin[i % NX], 0.0f); /* r = [X, X] */
    bool ok = run_plan(b, xin, (float *[]){ y }, 1, NY, ops, sizeof(ops));
    infd_ir_graph *g = run_passes(b, &backend_all);
    free(b);
    ASSERT_TRUE(ok && g);
    ASSERT_STR_EQ(live_ops(g, ops, sizeof(ops)), "Concat Conv");
    ASSERT_TRUE(infd_ir_node_attr(live_node(g, "Conv"), "_fused_sum") != NULL);
    ASSERT_STR_EQ(attr_s(g, live_node(g, "Conv"), "_fused_activation"), "Relu");
    infd_ir_graph_destroy(g);
    ASSERT_NEAR_ALL(y, want, NY);

    float c2[NY];
    b = mb_new(13, C, H, W);
    mb_const(b, "W", 4, (int64_t[]){ M, C, 3, 3 }, wts);
    mb_const(b, "B", 1, (int64_t[]){ M }, bias);
    mb_const(b, "W2", 4, (int64_t[]){ M, C, 3, 3 }, wts2);
    mb_conv(b, "c", "X", "W", "B");
    mb_conv(b, "d", "X", "W2", NULL);
    mb_node(b, "Add", "s", "c", "d", NULL);
    mb_node(b, "Relu", "Y", "s", NULL, NULL);
    mb_output(b, "Y");
    ref_conv(xin, wts2, NULL, c2);
    for (int i = 0; i < NY; i++)
        want[i] = fmaxf(c[i] + c2[i], 0.0f);
    ok = run_plan(b, xin, (float *[]){ y }, 1, NY, ops, sizeof(ops));
    g = run_passes(b, &backend_all);
    free(b);
    ASSERT_TRUE(ok && g);
    ASSERT_STR_EQ(live_ops(g, ops, sizeof(ops)), "Conv Conv");
    ASSERT_TRUE(infd_ir_node_attr(&g->nodes[0], "_fused_sum") == NULL);
    ASSERT_TRUE(infd_ir_node_attr(&g->nodes[1], "_fused_sum") != NULL);
    infd_ir_graph_destroy(g);
    ASSERT_NEAR_ALL(y, want, NY);
}

/* A stride-2 BlazeFace block: depthwise 3x3 stride 2 -> 1x1 (4 -> 8
 * channels) + Concat(MaxPool 2x2 (x), zeros) -> Relu becomes one _DwPwConv
 * reading x as its residual, pooled; a backend without the pooled residual
 * gets the narrower residual (the MaxPool stays, the Concat goes); one
 * without the node keeps the graph. A second reader of the depthwise
 * output keeps it too. (The fused node's numbers: test_cuda.c.) */
static void test_depthwise_block(void)
{
    static const float zeros[4 * 3 * 3] = { 0 };
    float wd[4 * 9], wp[8 * 4], bp[8];
    fill(wd, 4 * 9, 11, 0.5f);
    fill(wp, 8 * 4, 12, 0.5f);
    fill(bp, 8, 13, 0.1f);
    char ops[256];
    for (int variant = 0; variant < 4; variant++) {
        mb *b = mb_new(13, 4, 6, 6);
        mb_const(b, "WD", 4, (int64_t[]){ 4, 1, 3, 3 }, wd);
        mb_const(b, "WP", 4, (int64_t[]){ 8, 4, 1, 1 }, wp);
        mb_const(b, "BP", 1, (int64_t[]){ 8 }, bp);
        mb_const(b, "Z", 4, (int64_t[]){ 1, 4, 3, 3 }, zeros);
        int dw = mb_node(b, "Conv", "d", "X", "WD", NULL);
        mb_attr_ints(b, dw, "kernel_shape", 2, (int64_t[]){ 3, 3 });
        mb_attr_ints(b, dw, "strides", 2, (int64_t[]){ 2, 2 });
        mb_attr_ints(b, dw, "pads", 4, (int64_t[]){ 0, 0, 1, 1 });
        mb_attr_int(b, dw, "group", 4);
        mb_node(b, "Conv", "p", "d", "WP", "BP");
        int pool = mb_node(b, "MaxPool", "m", "X", NULL, NULL);
        mb_attr_ints(b, pool, "kernel_shape", 2, (int64_t[]){ 2, 2 });
        mb_attr_ints(b, pool, "strides", 2, (int64_t[]){ 2, 2 });
        int cat = mb_node(b, "Concat", "r", "m", "Z", NULL);
        mb_attr_int(b, cat, "axis", 1);
        mb_node(b, "Add", "s", "p", "r", NULL);
        mb_node(b, "Relu", "Y", "s", NULL, NULL);
        mb_output(b, "Y");
        if (variant == 3)
            mb_output(b, "d"); /* a second reader of the depthwise output */
        const infd_backend_ops *be = variant == 0   ? &backend_all
                                     : variant == 1 ? &backend_no_pool
                                     : variant == 2 ? &backend_no_dwpw
                                                    : &backend_all;
        infd_ir_graph *g = run_passes(b, be);
        free(b);
        ASSERT_TRUE(g != NULL);
        /* Unfused, the 1x1 Conv (with the residual and Relu) runs last. */
        static const char *const want[4] = { "_DwPwConv", "MaxPool _DwPwConv",
                                             "Conv MaxPool Concat Conv",
                                             "Conv MaxPool Concat Conv" };
        ASSERT_STR_EQ(live_ops(g, ops, sizeof(ops)), want[variant]);
        const infd_ir_node *f = live_node(g, "_DwPwConv");
        if (variant <= 1) {
            ASSERT_TRUE(f != NULL && f->n_inputs == 6);
            int32_t res = f->inputs[3];
            ASSERT_STR_EQ(g->values[res].name, variant == 0 ? "X" : "m");
            ASSERT_EQ_INT(g->values[res].shape.dims[1].value, 4);
            ASSERT_TRUE((infd_ir_node_attr(f, "residual_pool") != NULL) == (variant == 0));
            ASSERT_STR_EQ(g->values[f->inputs[0]].name, "X");
            ASSERT_STR_EQ(g->values[f->inputs[4]].name, "WD");
            ASSERT_TRUE(f->inputs[5] < 0);
            ASSERT_STR_EQ(attr_s(g, f, "_fused_activation"), "Relu");
            int64_t group = 0;
            infd_ir_attr_int(g, f, "group", 1, &group, NULL);
            ASSERT_EQ_INT(group, 4);
        } else {
            ASSERT_TRUE(f == NULL);
        }
        infd_ir_graph_destroy(g);
    }
}

/* MobileNetV2's first block: depthwise 3x3 -> Clip(0, 6) -> 1x1 becomes
 * one _DwPwConv carrying the depthwise Conv's activation as
 * _dw_activation (the 1x1 Conv has none); a backend without the node keeps
 * the depthwise Conv with the Clip fused into it. */
static void test_depthwise_block_activation(void)
{
    float wd[4 * 9], wp[8 * 4];
    fill(wd, 4 * 9, 21, 0.5f);
    fill(wp, 8 * 4, 22, 0.5f);
    char ops[256];
    for (int variant = 0; variant < 2; variant++) {
        mb *b = mb_new(13, 4, 6, 6);
        mb_const(b, "WD", 4, (int64_t[]){ 4, 1, 3, 3 }, wd);
        mb_const(b, "WP", 4, (int64_t[]){ 8, 4, 1, 1 }, wp);
        mb_scalar(b, "zero", 0.0f);
        mb_scalar(b, "six", 6.0f);
        int dw = mb_node(b, "Conv", "d", "X", "WD", NULL);
        mb_attr_ints(b, dw, "kernel_shape", 2, (int64_t[]){ 3, 3 });
        mb_attr_ints(b, dw, "pads", 4, (int64_t[]){ 1, 1, 1, 1 });
        mb_attr_int(b, dw, "group", 4);
        mb_node(b, "Clip", "r6", "d", "zero", "six");
        mb_node(b, "Conv", "Y", "r6", "WP", NULL);
        mb_output(b, "Y");
        infd_ir_graph *g = run_passes(b, variant == 0 ? &backend_all : &backend_no_dwpw);
        free(b);
        ASSERT_TRUE(g != NULL);
        ASSERT_STR_EQ(live_ops(g, ops, sizeof(ops)), variant == 0 ? "_DwPwConv" : "Conv Conv");
        const infd_ir_node *f = live_node(g, variant == 0 ? "_DwPwConv" : "Conv");
        ASSERT_TRUE(f != NULL);
        if (variant == 0) {
            ASSERT_STR_EQ(attr_s(g, f, "_dw_activation"), "Clip");
            ASSERT_TRUE(attr_f(g, f, "_dw_alpha", -1.0f) == 0.0f);
            ASSERT_TRUE(attr_f(g, f, "_dw_beta", -1.0f) == 6.0f);
            ASSERT_STR_EQ(attr_s(g, f, "_fused_activation"), "(none)");
        } else {
            ASSERT_STR_EQ(attr_s(g, f, "_fused_activation"), "Clip");
        }
        infd_ir_graph_destroy(g);
    }
}

TEST_MAIN(test_paddle_block_is_one_conv, test_per_channel_affine_and_mul_sixth,
          test_hardsigmoid_spelling, test_standalone_and_add_two, test_second_reader_of_conv_output,
          test_second_reader_inside_chain, test_gate_is_not_hardswish, test_backend_refusals,
          test_residual_produced_after_conv, test_depthwise_block, test_depthwise_block_activation)
