/*
 * test_dnnl_layout.c - oneDNN kernels passing opaque (blocked) layouts to
 * each other, as the plan wires them: chains compiled by hand with the
 * producer's output_layout as the reader's input layout, each compared
 * element-wise with the same chain in plain layouts, and the layout hooks
 * (a broadcast operand of Add must stay plain).
 */
#include "backends/cpu/dnnl_common.h"
#include "core/alloc.h"
#include "dnnl_test.h"

#define MAX_STEPS 6

/* A chain: steps[i] reads the outputs of earlier steps or the chain's
 * input. from[i][j] = -1: the chain input x; s >= 0: output of step s; -2:
 * the constant given to kt_input. */
typedef struct chain {
    kt t[MAX_STEPS];
    int n;
    int from[MAX_STEPS][4];
} chain;

/* Conv over [n, c, h, w] -> oc channels, k x k, pad k/2, stride 1, with
 * bias; `sum`: input 3 is a residual shaped like the output. */
static void add_conv(chain *c, const int64_t *xd, int64_t oc, int64_t k, int from_x, int from_res,
                     const char *act, uint32_t seed)
{
    kt *t = &c->t[c->n];
    int64_t wd[4] = { oc, xd[1], k, k }, yd[4] = { xd[0], oc, xd[2], xd[3] };
    size_t nw = (size_t)(oc * xd[1] * k * k);
    float *w = dt_rand(nw, seed), *b = dt_rand((size_t)oc, seed + 1);
    for (size_t i = 0; i < nw; i++)
        w[i] *= 0.2f;
    kt_init(t, "Conv", 17);
    kt_input(t, INFD_DTYPE_FP32, 4, xd, NULL);
    kt_input(t, INFD_DTYPE_FP32, 4, wd, w);
    kt_input(t, INFD_DTYPE_FP32, 1, &oc, b);
    c->from[c->n][0] = from_x;
    c->from[c->n][1] = -2;
    c->from[c->n][2] = -2;
    if (from_res != -3) {
        kt_input(t, INFD_DTYPE_FP32, 4, yd, NULL);
        c->from[c->n][3] = from_res;
        kt_attr_int(t, "_fused_sum", 1);
    }
    kt_output(t, INFD_DTYPE_FP32, 4, yd);
    kt_attr_ints(t, "kernel_shape", 2, (int64_t[]){ k, k });
    kt_attr_ints(t, "pads", 4, (int64_t[]){ k / 2, k / 2, k / 2, k / 2 });
    if (act)
        kt_attr_string(t, "_fused_activation", act);
    free(w);
    free(b);
    c->n++;
}

static void add_unary(chain *c, const char *op, const int64_t *xd, const int64_t *yd, int from)
{
    kt *t = &c->t[c->n];
    kt_init(t, op, 17);
    kt_input(t, INFD_DTYPE_FP32, 4, xd, NULL);
    kt_output(t, INFD_DTYPE_FP32, 4, yd);
    c->from[c->n][0] = from;
    if (strcmp(op, "MaxPool") == 0) {
        kt_attr_ints(t, "kernel_shape", 2, (int64_t[]){ 2, 2 });
        kt_attr_ints(t, "strides", 2, (int64_t[]){ 2, 2 });
    }
    c->n++;
}

/* Add of two values shaped `ad` and `bd` (from step or constant data). */
static void add_add(chain *c, const int64_t *ad, int from_a, int32_t rank_b, const int64_t *bd,
                    int from_b, const float *b_data)
{
    kt *t = &c->t[c->n];
    kt_init(t, "Add", 17);
    kt_input(t, INFD_DTYPE_FP32, 4, ad, NULL);
    kt_input(t, INFD_DTYPE_FP32, rank_b, bd, b_data);
    kt_output(t, INFD_DTYPE_FP32, 4, ad);
    c->from[c->n][0] = from_a;
    c->from[c->n][1] = from_b;
    c->n++;
}

/* Op (Add/Sub/Mul/Div) of a (rank 4, `ad`) and b (`rank_b`, `bd`), each
 * from a step, the chain input or constant data; output shaped `yd`. */
static void add_bin(chain *c, const char *op, const int64_t *ad, int from_a, const float *a_data,
                    int32_t rank_b, const int64_t *bd, int from_b, const float *b_data,
                    const int64_t *yd)
{
    kt *t = &c->t[c->n];
    kt_init(t, op, 17);
    kt_input(t, INFD_DTYPE_FP32, ad ? 4 : 0, ad, a_data);
    kt_input(t, INFD_DTYPE_FP32, rank_b, bd, b_data);
    kt_output(t, INFD_DTYPE_FP32, 4, yd);
    c->from[c->n][0] = from_a;
    c->from[c->n][1] = from_b;
    c->n++;
}

/* Kernel names of the last chain_run's steps. */
static char step_names[MAX_STEPS][INFD_DNNL_NAME_BYTES];

static void chain_fini(chain *c)
{
    for (int i = 0; i < c->n; i++)
        kt_fini(&c->t[i]);
}

/* Runs the chain on x (last step's output into y, plain bytes). With
 * `opaque`, a value is opaque where its producer and every reader agree and
 * it is not the last; `n_opaque` counts the values that came out opaque.
 * `conv_name` (nullable) gets the name of the last Conv after the first. */
static void chain_run(chain *c, const float *x, float *y, bool opaque, int *n_opaque,
                      char *conv_name, size_t name_bytes)
{
    infd_kernel *k[MAX_STEPS] = { 0 };
    void *out[MAX_STEPS] = { 0 };
    bool ok[MAX_STEPS] = { 0 };
    infd_error err = { 0 };
    *n_opaque = 0;
    for (int s = 0; s < c->n; s++)
        ok[s] = opaque && s < c->n - 1 && dt_produces(&c->t[s]);
    for (int r = 0; r < c->n; r++) {
        for (int j = 0; j < c->t[r].node.n_inputs; j++) {
            int f = c->from[r][j];
            if (f >= 0 && !dt_accepts(&c->t[r], j))
                ok[f] = false;
        }
    }
    for (int s = 0; s < c->n; s++) {
        const void *layouts[4] = { 0 };
        const void *ins[4] = { 0 };
        kt *t = &c->t[s];
        for (int j = 0; j < t->node.n_inputs; j++) {
            int f = c->from[s][j];
            layouts[j] = f >= 0 ? k[f]->output_layout : NULL;
            ins[j] = f >= 0 ? out[f] : f == -1 ? (const void *)x : t->g->values[t->ins[j]].data;
        }
        infd_status st = dt_compile(t, layouts, ok[s], &k[s], &err);
        if (st != INFD_STATUS_OK) {
            fprintf(stderr, "    step %d: %s\n", s, err.msg);
            test_failed_ = 1;
            goto out;
        }
        if (k[s]->output_layout)
            (*n_opaque)++;
        snprintf(step_names[s], sizeof(step_names[s]), "%s", k[s]->name);
        if (conv_name && strcmp(t->node.op_type, "Conv") == 0 && s > 0)
            snprintf(conv_name, name_bytes, "%s", k[s]->name);
        out[s] = s == c->n - 1 ? (void *)y : dt_buf(dt_out_bytes(t, k[s]));
        dt_exec(k[s], ins, (void *const[]){ out[s] });
    }
out:
    for (int s = 0; s < c->n; s++) {
        if (s < c->n - 1)
            infd_free(out[s]);
        infd_kernel_destroy(k[s]);
    }
}

/* Runs the chain plain and opaque; both must agree, and at least
 * `min_opaque` values must have been opaque. */
static void check_chain(chain *c, const int64_t *xd, size_t ny, int min_opaque)
{
    size_t nx = (size_t)(xd[0] * xd[1] * xd[2] * xd[3]);
    float *x = dt_rand(nx, 7), *y0 = malloc(ny * sizeof(float)), *y1 = malloc(ny * sizeof(float));
    int n_plain = 0, n_opaque = 0;
    chain_run(c, x, y0, false, &n_plain, NULL, 0);
    chain_run(c, x, y1, true, &n_opaque, NULL, 0);
    int64_t bad = dt_mismatch(y1, y0, ny);
    int ok = n_plain == 0 && n_opaque >= min_opaque;
    if (!ok)
        fprintf(stderr, "    opaque values: plain run %d, opaque run %d (want >= %d)\n", n_plain,
                n_opaque, min_opaque);
    if (bad >= 0)
        fprintf(stderr, "    element %lld: opaque %g, plain %g\n", (long long)bad, (double)y1[bad],
                (double)y0[bad]);
    free(x);
    free(y0);
    free(y1);
    ASSERT_TRUE(ok);
    ASSERT_TRUE(bad < 0);
}

/* Conv (+bias, opaque out) -> Relu (opaque in/out) -> MaxPool (opaque in,
 * plain out). 20 channels: the blocked layout has padded channels. */
static void test_conv_relu_maxpool(void)
{
    chain c = { 0 };
    int64_t xd[4] = { 2, 24, 10, 10 }, yd[4] = { 2, 20, 10, 10 }, pd[4] = { 2, 20, 5, 5 };
    add_conv(&c, xd, 20, 3, -1, -3, NULL, 1);
    add_unary(&c, "Relu", yd, yd, 0);
    add_unary(&c, "MaxPool", yd, pd, 1);
    check_chain(&c, xd, 2 * 20 * 5 * 5, 2);
    chain_fini(&c);
}

/* Conv (opaque) -> Conv with the fused residual read opaque and Relu ->
 * GlobalAveragePool (plain out). */
static void test_conv_residual_gap(void)
{
    chain c = { 0 };
    int64_t xd[4] = { 1, 16, 8, 8 }, yd[4] = { 1, 32, 8, 8 }, gd[4] = { 1, 32, 1, 1 };
    add_conv(&c, xd, 32, 3, -1, -3, "Relu", 3);
    add_conv(&c, yd, 32, 1, 0, 0, "Relu", 5);
    add_unary(&c, "GlobalAveragePool", yd, gd, 1);
    check_chain(&c, xd, 32, 2);
    chain_fini(&c);
}

/* The residual read opaque while input 0 is plain (a graph input). */
static void test_conv_plain_src_opaque_residual(void)
{
    chain c = { 0 };
    int64_t xd[4] = { 1, 32, 6, 6 };
    add_conv(&c, xd, 32, 3, -1, -3, NULL, 9);
    add_conv(&c, xd, 32, 3, -1, 0, "Relu", 11);
    check_chain(&c, xd, 32 * 36, 1);
    chain_fini(&c);
}

/* The residual plain (the chain input) while input 0 is opaque: the conv
 * may copy the residual into its own format. Both 1x1 (BlazeFace's case)
 * and 3x3. */
static void test_conv_opaque_src_plain_residual(void)
{
    for (int64_t k = 1; k <= 3; k += 2) {
        chain c = { 0 };
        int64_t xd[4] = { 1, 24, 12, 12 };
        add_conv(&c, xd, 24, 3, -1, -3, "Relu", 29);
        add_conv(&c, xd, 24, k, 0, -1, "Relu", 31);
        check_chain(&c, xd, 24 * 144, 1);
        chain_fini(&c);
    }
}

/* Add of two opaque operands, plain output (reordered in the kernel). */
static void test_add_two_opaque(void)
{
    chain c = { 0 };
    int64_t xd[4] = { 1, 8, 7, 7 }, yd[4] = { 1, 24, 7, 7 };
    add_conv(&c, xd, 24, 3, -1, -3, NULL, 13);
    add_conv(&c, xd, 24, 1, -1, -3, NULL, 15);
    add_add(&c, yd, 0, 4, yd, 1, NULL);
    check_chain(&c, xd, 24 * 49, 2);
    chain_fini(&c);
}

/* Add with an opaque operand and opaque output, then Relu (opaque in,
 * plain out: reorder, then the op in place). */
static void test_add_opaque_out_relu(void)
{
    chain c = { 0 };
    int64_t xd[4] = { 1, 8, 7, 7 }, yd[4] = { 1, 24, 7, 7 };
    add_conv(&c, xd, 24, 3, -1, -3, NULL, 17);
    add_conv(&c, xd, 24, 1, -1, -3, NULL, 19);
    add_add(&c, yd, 0, 4, yd, 1, NULL);
    add_unary(&c, "Relu", yd, yd, 2);
    check_chain(&c, xd, 24 * 49, 3);
    chain_fini(&c);
}

/* Add whose second operand broadcasts ([1, C, 1, 1]): that operand is
 * declined as opaque, the full-shaped one is accepted, and the chain agrees
 * with the plain one. */
static void test_add_broadcast_operand_stays_plain(void)
{
    chain c = { 0 };
    int64_t xd[4] = { 1, 8, 5, 5 }, yd[4] = { 1, 20, 5, 5 }, bd[4] = { 1, 20, 1, 1 };
    float *bias = dt_rand(20, 21);
    add_conv(&c, xd, 20, 3, -1, -3, NULL, 23);
    add_add(&c, yd, 0, 4, bd, -2, bias);
    ASSERT_TRUE(dt_accepts(&c.t[1], 0));
    ASSERT_FALSE(dt_accepts(&c.t[1], 1));
    /* The broadcast operand first (Add swaps it): still declined. */
    kt t;
    kt_init(&t, "Add", 17);
    kt_input(&t, INFD_DTYPE_FP32, 4, bd, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 4, yd, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 4, yd);
    bool acc0 = dt_accepts(&t, 0), acc1 = dt_accepts(&t, 1);
    kt_fini(&t);
    ASSERT_FALSE(acc0);
    ASSERT_TRUE(acc1);
    add_unary(&c, "Relu", yd, yd, 1);
    check_chain(&c, xd, 20 * 25, 2);
    free(bias);
    chain_fini(&c);
}

/* Conv's implementation with opaque layouts is a jit/brgemm one, not gemm or ref. */
static void test_conv_opaque_picks_jit(void)
{
    chain c = { 0 };
    int64_t xd[4] = { 1, 64, 14, 14 };
    add_conv(&c, xd, 64, 3, -1, -3, "Relu", 25);
    add_conv(&c, xd, 64, 1, 0, -3, "Relu", 27);
    add_unary(&c, "Relu", xd, xd, 1);
    float *x = dt_rand(64 * 196, 1), *y = malloc(64 * 196 * sizeof(float));
    int n = 0;
    char name[128] = "";
    chain_run(&c, x, y, true, &n, name, sizeof(name));
    bool jit = !strstr(name, "gemm") && !strstr(name, "ref") && n == 2;
    if (!jit)
        fprintf(stderr, "    second conv: '%s', %d opaque values\n", name, n);
    free(x);
    free(y);
    chain_fini(&c);
    ASSERT_TRUE(jit);
}

/* A 3x3 stride-1 conv in blocked layouts takes oneDNN's Winograd F(2x2,
 * 3x3) where the CPU has it (AVX-512), at batch 4 on 2 threads in two runs
 * of 2 images (oneDNN takes at most as many images as threads), and agrees
 * with the direct conv that INFD_WINOGRAD=0 keeps. */
static void test_conv3x3_winograd(void)
{
    chain c = { 0 };
    /* A stem conv from 3 channels hands the 3x3 conv nChw16c, as ResNet's does. */
    int64_t x3[4] = { 4, 3, 28, 28 }, xd[4] = { 4, 64, 28, 28 };
    size_t n = (size_t)(4 * 64 * 28 * 28);
    add_conv(&c, x3, 64, 3, -1, -3, "Relu", 31);
    add_conv(&c, xd, 64, 3, 0, -3, "Relu", 33);
    add_unary(&c, "Relu", xd, xd, 1);
    float *x = dt_rand((size_t)(4 * 3 * 28 * 28), 5), *y_wino = malloc(n * sizeof(float)),
          *y_direct = malloc(n * sizeof(float));
    int n_opaque = 0;
    char name[INFD_DNNL_NAME_BYTES] = "";
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    bool avx512 = (isa & (unsigned)dnnl_cpu_isa_avx512_core) == (unsigned)dnnl_cpu_isa_avx512_core;
    chain_run(&c, x, y_wino, true, &n_opaque, NULL, 0);
    snprintf(name, sizeof(name), "%s", step_names[1]);
    ASSERT_EQ_INT(setenv("INFD_WINOGRAD", "0", 1), 0);
    chain_run(&c, x, y_direct, true, &n_opaque, NULL, 0);
    unsetenv("INFD_WINOGRAD");
    if (avx512 && (!strstr(name, "wino_2x3") || !strstr(name, ":2x2")))
        TEST_FAIL_("3x3 conv on AVX-512: '%s', expected jit_fp32_wino_2x3 in 2 runs of 2", name);
    if (strstr(step_names[1], "wino"))
        TEST_FAIL_("INFD_WINOGRAD=0 still took '%s'", step_names[1]);
    ASSERT_CLOSE(y_wino, y_direct, n);
    if (avx512)
        check_chain(&c, x3, n, 2);
    free(x);
    free(y_wino);
    free(y_direct);
    chain_fini(&c);
}

/* Runs the chain with opaque layouts and checks that no step landed on a
 * ref implementation, then check_chain (plain vs opaque). */
static void check_fast_chain(chain *c, const int64_t *xd, size_t ny, int min_opaque)
{
    size_t nx = (size_t)(xd[0] * xd[1] * xd[2] * xd[3]);
    float *x = dt_rand(nx, 3), *y = malloc(ny * sizeof(float));
    int n = 0;
    chain_run(c, x, y, true, &n, NULL, 0);
    for (int s = 0; s < c->n; s++) {
        if (strstr(step_names[s], "ref:any")) {
            fprintf(stderr, "    step %d (%s): %s\n", s, c->t[s].node.op_type, step_names[s]);
            test_failed_ = 1;
        }
    }
    free(x);
    free(y);
    if (!test_failed_)
        check_chain(c, xd, ny, min_opaque);
}

/* PP-OCR's hard-swish on a blocked conv output: x * clip(x + 3, 0, 6) / 6,
 * with 32 channels (dense blocks) and 24 (padded): every step jit. */
static void test_hard_swish_is_fast(void)
{
    static const float three = 3.0f, six = 6.0f, zero = 0.0f;
    for (int64_t ch = 24; ch <= 32 && !test_failed_; ch += 8) {
        chain c = { 0 };
        int64_t xd[4] = { 1, 8, 9, 9 }, yd[4] = { 1, ch, 9, 9 };
        add_conv(&c, xd, ch, 3, -1, -3, NULL, 41);
        add_bin(&c, "Add", yd, 0, NULL, 0, NULL, -2, &three, yd);
        kt *t = &c.t[c.n];
        kt_init(t, "Clip", 17);
        kt_input(t, INFD_DTYPE_FP32, 4, yd, NULL);
        kt_input(t, INFD_DTYPE_FP32, 0, NULL, &zero);
        kt_input(t, INFD_DTYPE_FP32, 0, NULL, &six);
        kt_output(t, INFD_DTYPE_FP32, 4, yd);
        c.from[c.n][0] = 1;
        c.from[c.n][1] = c.from[c.n][2] = -2;
        c.n++;
        add_bin(&c, "Mul", yd, 0, NULL, 4, yd, 2, NULL, yd);
        add_bin(&c, "Div", yd, 3, NULL, 1, (int64_t[]){ 1 }, -2, &six, yd);
        add_unary(&c, "Relu", yd, yd, 4);
        check_fast_chain(&c, xd, (size_t)(ch * 81), 4);
        chain_fini(&c);
    }
}

/* The scalar on either side, Sub both ways, Mul: jit on blocked inputs
 * (dense and padded channel blocks). */
static void test_scalar_operands_are_fast(void)
{
    static const float c2 = 2.5f;
    static const char *const ops[] = { "Add", "Sub", "Mul" };
    for (size_t i = 0; i < INFD_ARRAY_SIZE(ops) && !test_failed_; i++) {
        for (int64_t ch = 24; ch <= 32 && !test_failed_; ch += 8) {
            chain c = { 0 };
            int64_t xd[4] = { 1, 8, 6, 6 }, yd[4] = { 1, ch, 6, 6 };
            add_conv(&c, xd, ch, 3, -1, -3, NULL, 43);
            add_bin(&c, ops[i], NULL, -2, &c2, 4, yd, 0, NULL, yd);
            add_bin(&c, ops[i], yd, 1, NULL, 0, NULL, -2, &c2, yd);
            add_unary(&c, "Relu", yd, yd, 2);
            /* c - x on padded blocks is linear(-1, c), which would write
             * the padding: computed plain (jit) instead, output plain. */
            check_fast_chain(&c, xd, (size_t)(ch * 36), ops[i][0] == 'S' && ch == 24 ? 1 : 3);
            chain_fini(&c);
        }
    }
}

/* Squeeze-excitation: a blocked [1, C, H, W] times its own pooled
 * [1, C, 1, 1] (plain), in both operand orders; and a blocked operand
 * plus a plain full-shaped one (the chain input). */
static void test_broadcast_and_mixed_are_fast(void)
{
    for (int64_t ch = 24; ch <= 32 && !test_failed_; ch += 8) {
        chain c = { 0 };
        int64_t xd[4] = { 1, ch, 7, 7 }, gd[4] = { 1, ch, 1, 1 };
        add_conv(&c, xd, ch, 3, -1, -3, NULL, 47);
        add_unary(&c, "GlobalAveragePool", xd, gd, 0);
        add_bin(&c, "Mul", xd, 0, NULL, 4, gd, 1, NULL, xd);
        add_bin(&c, "Mul", gd, 1, NULL, 4, xd, 2, NULL, xd);
        add_bin(&c, "Add", xd, 3, NULL, 4, xd, -1, NULL, xd);
        add_unary(&c, "Relu", xd, xd, 4);
        check_fast_chain(&c, xd, (size_t)(ch * 49), 4);
        chain_fini(&c);
    }
}

/* Constant scalar operands on a plain input, against the FP32 arithmetic:
 * x+c, c+x, x-c, c-x, x*c, c*x, x/c (as x * (1/c)), each jit. */
static void test_scalar_operands_plain(void)
{
    static const char *const ops[] = { "Add", "Sub", "Mul", "Div" };
    const float cv = -1.75f;
    int64_t xd[4] = { 2, 3, 4, 5 };
    size_t n = 120;
    float *x = dt_rand(n, 61), *y = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    for (size_t i = 0; i < INFD_ARRAY_SIZE(ops) && !test_failed_; i++) {
        for (int first = 0; first < 2 && !test_failed_; first++) {
            if (ops[i][0] == 'D' && first)
                continue;
            kt t;
            infd_kernel *k = NULL;
            infd_error err = { 0 };
            kt_init(&t, ops[i], 17);
            kt_input(&t, INFD_DTYPE_FP32, first ? 0 : 4, first ? NULL : xd, first ? &cv : NULL);
            kt_input(&t, INFD_DTYPE_FP32, first ? 4 : 0, first ? xd : NULL, first ? NULL : &cv);
            kt_output(&t, INFD_DTYPE_FP32, 4, xd);
            for (size_t j = 0; j < n; j++) {
                float a = first ? cv : x[j], b = first ? x[j] : cv;
                want[j] = ops[i][0] == 'A'   ? a + b
                          : ops[i][0] == 'S' ? a - b
                          : ops[i][0] == 'M' ? a * b
                                             : a / b;
            }
            ASSERT_TRUE(dt_compile(&t, (const void *[]){ NULL, NULL }, false, &k, &err) ==
                        INFD_STATUS_OK);
            if (k) {
                const void *ins[2] = { first ? (const void *)&cv : x,
                                       first ? (const void *)x : &cv };
                dt_exec(k, ins, (void *const[]){ y });
                if (strstr(k->name, "ref"))
                    TEST_FAIL_("%s (constant %s): %s", ops[i], first ? "first" : "second", k->name);
                ASSERT_CLOSE(y, want, n);
            }
            infd_kernel_destroy(k);
            kt_fini(&t);
        }
    }
    free(x);
    free(y);
    free(want);
}

/* Concat along channels of a (from step `from_a`, `ad`) and b (from step
 * `from_b`, or constant `b_data` when from_b is -2, `bd`). */
static void add_concat(chain *c, const int64_t *ad, int from_a, const int64_t *bd, int from_b,
                       const float *b_data)
{
    kt *t = &c->t[c->n];
    int64_t yd[4] = { ad[0], ad[1] + bd[1], ad[2], ad[3] };
    kt_init(t, "Concat", 13);
    kt_input(t, INFD_DTYPE_FP32, 4, ad, NULL);
    kt_input(t, INFD_DTYPE_FP32, 4, bd, b_data);
    kt_output(t, INFD_DTYPE_FP32, 4, yd);
    kt_attr_int(t, "axis", 1);
    c->from[c->n][0] = from_a;
    c->from[c->n][1] = from_b;
    c->n++;
}

/* BlazeFace's channel padding, Concat(conv, zeros), between blocked
 * kernels: 20 -> 24 (within a block), 24 -> 40 (new blocks), and 32 ->
 * 36 (a new partial block); the zeros must land where the padded channels
 * of the blocked conv output were. Then a concat of a conv with non-zero
 * constants and one of two convs (offsets off the blocks: the fallback). */
static void test_concat_keeps_layout(void)
{
    static const int64_t cases[][2] = { { 20, 4 }, { 24, 16 }, { 32, 4 } };
    for (size_t i = 0; i < INFD_ARRAY_SIZE(cases) && !test_failed_; i++) {
        chain c = { 0 };
        int64_t ch = cases[i][0], pad = cases[i][1];
        int64_t xd[4] = { 2, 8, 6, 6 }, cd[4] = { 2, ch, 6, 6 }, zd[4] = { 2, pad, 6, 6 };
        int64_t yd[4] = { 2, ch + pad, 6, 6 };
        float *z = calloc((size_t)(2 * pad * 36), sizeof(float));
        add_conv(&c, xd, ch, 3, -1, -3, "Relu", 71);
        add_concat(&c, cd, 0, zd, -2, z);
        add_conv(&c, yd, ch + pad, 1, 1, 1, NULL, 73);
        check_chain(&c, xd, (size_t)(2 * (ch + pad) * 36), 2);
        if (!strstr(step_names[1], "pad_channels"))
            TEST_FAIL_("Concat with zeros of %lld + %lld channels: %s", (long long)ch,
                       (long long)pad, step_names[1]);
        chain_fini(&c);
        free(z);
    }
    for (int two = 0; two < 2 && !test_failed_; two++) {
        chain c = { 0 };
        int64_t xd[4] = { 1, 8, 5, 5 }, ad[4] = { 1, 20, 5, 5 }, bd[4] = { 1, 12, 5, 5 };
        int64_t yd[4] = { 1, 32, 5, 5 };
        float *b = dt_rand(12 * 25, 75);
        add_conv(&c, xd, 20, 3, -1, -3, NULL, 77);
        if (two)
            add_conv(&c, xd, 12, 1, -1, -3, NULL, 79);
        add_concat(&c, ad, 0, bd, two ? 1 : -2, two ? NULL : b);
        add_unary(&c, "Relu", yd, yd, c.n - 1);
        check_chain(&c, xd, 32 * 25, 1);
        chain_fini(&c);
        free(b);
    }
}

TEST_MAIN(test_conv_relu_maxpool, test_conv_residual_gap, test_conv_plain_src_opaque_residual,
          test_conv_opaque_src_plain_residual, test_add_two_opaque, test_add_opaque_out_relu,
          test_add_broadcast_operand_stays_plain, test_conv_opaque_picks_jit,
          test_hard_swish_is_fast, test_scalar_operands_are_fast, test_broadcast_and_mixed_are_fast,
          test_scalar_operands_plain, test_concat_keeps_layout, test_conv3x3_winograd)
