/*
 * test_dnnl_bf16.c - oneDNN kernels in a BF16 plan (infd_kernel_args.
 * precision): chains compiled by hand with opaque layouts, as the plan
 * wires them, run in BF16 and compared with the same chain in FP32 within
 * a BF16 tolerance (2e-2 of the output's largest magnitude). Checks too
 * that the opaque values really are bf16 and the convolutions run a bf16
 * implementation. Skips when oneDNN sees no BF16 instructions.
 */
#include <oneapi/dnnl/dnnl.h>

#include "core/alloc.h"
#include "dnnl_test.h"

#define MAX_STEPS 6
#define BF16_TOL  2e-2

/* A chain: steps[i] reads from[i][j]: -1 the chain input x, s >= 0 the
 * output of step s, -2 the constant given to kt_input. */
typedef struct chain {
    kt t[MAX_STEPS];
    int n;
    int from[MAX_STEPS][5];
} chain;

/* What a run saw. */
typedef struct chain_info {
    int n_opaque;    /* values passed in an opaque layout */
    int n_bf16;      /* of those, bf16 ones */
    int n_conv;      /* Conv and ConvTranspose steps */
    int n_conv_bf16; /* of those, with a bf16 implementation */
    char slow[128];  /* a conv implementation that is gemm or ref, if any */
} chain_info;

static bool have_bf16(void)
{
    unsigned want = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    return ((unsigned)dnnl_get_effective_cpu_isa() & want) == want;
}

#define SKIP_WITHOUT_BF16()                                                    \
    do {                                                                       \
        if (!have_bf16()) {                                                    \
            fprintf(stderr, "    skipped: oneDNN sees no BF16 on this CPU\n"); \
            return;                                                            \
        }                                                                      \
    } while (0)

/* Conv [n, c, h, w] -> oc channels, k x k, stride s, pad k/2, with bias;
 * from_res != -3: input 3 is a fused residual from there. */
static void add_conv(chain *c, const int64_t *xd, int64_t oc, int64_t k, int64_t s, int from_x,
                     int from_res, const char *act, uint32_t seed)
{
    kt *t = &c->t[c->n];
    int64_t oh = (xd[2] + 2 * (k / 2) - k) / s + 1, ow = (xd[3] + 2 * (k / 2) - k) / s + 1;
    int64_t wd[4] = { oc, xd[1], k, k }, yd[4] = { xd[0], oc, oh, ow };
    size_t nw = (size_t)(oc * xd[1] * k * k);
    float *w = dt_rand(nw, seed), *b = dt_rand((size_t)oc, seed + 1);
    for (size_t i = 0; i < nw; i++)
        w[i] *= 1.5f / sqrtf((float)(xd[1] * k * k));
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
    kt_attr_ints(t, "strides", 2, (int64_t[]){ s, s });
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
    if (strcmp(op, "MaxPool") == 0 || strcmp(op, "AveragePool") == 0) {
        kt_attr_ints(t, "kernel_shape", 2, (int64_t[]){ 2, 2 });
        kt_attr_ints(t, "strides", 2, (int64_t[]){ 2, 2 });
    }
    c->n++;
}

static void add_add(chain *c, const int64_t *d, int from_a, int from_b)
{
    kt *t = &c->t[c->n];
    kt_init(t, "Add", 17);
    kt_input(t, INFD_DTYPE_FP32, 4, d, NULL);
    kt_input(t, INFD_DTYPE_FP32, 4, d, NULL);
    kt_output(t, INFD_DTYPE_FP32, 4, d);
    c->from[c->n][0] = from_a;
    c->from[c->n][1] = from_b;
    c->n++;
}

static void add_batch_norm(chain *c, const int64_t *d, int from)
{
    kt *t = &c->t[c->n];
    int64_t ch = d[1];
    float *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = dt_rand((size_t)ch, 40 + (uint32_t)i);
    for (int64_t i = 0; i < ch; i++) {
        p[0][i] = 1.0f + 0.5f * p[0][i]; /* scale */
        p[3][i] = 1.0f + 0.5f * p[3][i]; /* var > 0 */
    }
    kt_init(t, "BatchNormalization", 15);
    kt_input(t, INFD_DTYPE_FP32, 4, d, NULL);
    for (int i = 0; i < 4; i++) {
        kt_input(t, INFD_DTYPE_FP32, 1, &ch, p[i]);
        c->from[c->n][1 + i] = -2;
        free(p[i]);
    }
    kt_output(t, INFD_DTYPE_FP32, 4, d);
    c->from[c->n][0] = from;
    c->n++;
}

/* ConvTranspose 2x2, stride 2: [n, c, h, w] -> [n, oc, 2h, 2w]. */
static void add_deconv(chain *c, const int64_t *xd, int64_t oc, int from, uint32_t seed)
{
    kt *t = &c->t[c->n];
    int64_t wd[4] = { xd[1], oc, 2, 2 }, yd[4] = { xd[0], oc, 2 * xd[2], 2 * xd[3] };
    size_t nw = (size_t)(xd[1] * oc * 4);
    float *w = dt_rand(nw, seed);
    kt_init(t, "ConvTranspose", 17);
    kt_input(t, INFD_DTYPE_FP32, 4, xd, NULL);
    kt_input(t, INFD_DTYPE_FP32, 4, wd, w);
    kt_output(t, INFD_DTYPE_FP32, 4, yd);
    kt_attr_ints(t, "kernel_shape", 2, (int64_t[]){ 2, 2 });
    kt_attr_ints(t, "strides", 2, (int64_t[]){ 2, 2 });
    c->from[c->n][0] = from;
    c->from[c->n][1] = -2;
    free(w);
    c->n++;
}

static void chain_fini(chain *c)
{
    for (int i = 0; i < c->n; i++)
        kt_fini(&c->t[i]);
}

static bool is_conv(const kt *t)
{
    return strcmp(t->node.op_type, "Conv") == 0 || strcmp(t->node.op_type, "ConvTranspose") == 0;
}

/* Runs the chain on x in `precision` with opaque layouts where producer and
 * readers agree (the last output plain, into y). */
static void chain_run(chain *c, const float *x, float *y, infd_precision precision,
                      chain_info *info)
{
    infd_kernel *k[MAX_STEPS] = { 0 };
    void *out[MAX_STEPS] = { 0 };
    bool ok[MAX_STEPS] = { 0 };
    infd_error err = { 0 };
    memset(info, 0, sizeof(*info));
    for (int s = 0; s < c->n; s++)
        ok[s] = s < c->n - 1 && dt_produces(&c->t[s]);
    for (int r = 0; r < c->n; r++) {
        for (int j = 0; j < c->t[r].node.n_inputs; j++) {
            int f = c->from[r][j];
            if (f >= 0 && !dt_accepts(&c->t[r], j))
                ok[f] = false;
        }
    }
    for (int s = 0; s < c->n; s++) {
        const void *layouts[5] = { 0 };
        const void *ins[5] = { 0 };
        kt *t = &c->t[s];
        for (int j = 0; j < t->node.n_inputs; j++) {
            int f = c->from[s][j];
            layouts[j] = f >= 0 ? k[f]->output_layout : NULL;
            ins[j] = f >= 0 ? out[f] : f == -1 ? (const void *)x : t->g->values[t->ins[j]].data;
        }
        infd_status st = dt_compile_prec(t, layouts, ok[s], precision, &k[s], &err);
        if (st != INFD_STATUS_OK) {
            fprintf(stderr, "    step %d: %s\n", s, err.msg);
            test_failed_ = 1;
            goto out;
        }
        if (k[s]->output_layout) {
            const dnnl_memory_desc_t *md = k[s]->output_layout;
            info->n_opaque++;
            info->n_bf16 += md->data_type == dnnl_bf16;
        }
        if (is_conv(t)) {
            info->n_conv++;
            info->n_conv_bf16 += strstr(k[s]->name, "bf16") != NULL;
            if (strstr(k[s]->name, "gemm") || strstr(k[s]->name, "ref"))
                snprintf(info->slow, sizeof(info->slow), "%s", k[s]->name);
        }
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

/* Runs the chain in FP32 and BF16: BF16 must agree within BF16_TOL of the
 * largest |FP32| output, pass at least `min_bf16` bf16 opaque values and
 * run every conv on a bf16 implementation. */
static void check_chain(chain *c, const int64_t *xd, size_t ny, int min_bf16)
{
    size_t nx = (size_t)(xd[0] * xd[1] * xd[2] * xd[3]);
    float *x = dt_rand(nx, 7), *y32 = malloc(ny * sizeof(float)), *y16 = malloc(ny * sizeof(float));
    chain_info i32, i16;
    chain_run(c, x, y32, INFD_PRECISION_FP32, &i32);
    chain_run(c, x, y16, INFD_PRECISION_BF16, &i16);
    double max_ref = 0, max_err = 0;
    size_t worst = 0;
    for (size_t i = 0; i < ny; i++) {
        double e = fabs((double)y16[i] - (double)y32[i]);
        max_ref = fmax(max_ref, fabs((double)y32[i]));
        if (!(e <= max_err)) {
            max_err = e;
            worst = i;
        }
    }
    bool close = max_err <= BF16_TOL * max_ref && max_ref > 0;
    fprintf(stderr,
            "    max |bf16 - fp32| %.4g of max |fp32| %.4g (%.4f; element %zu); opaque fp32 %d "
            "(bf16 %d), bf16 %d (bf16 %d); bf16 convs %d of %d\n",
            max_err, max_ref, max_ref > 0 ? max_err / max_ref : 0.0, worst, i32.n_opaque,
            i32.n_bf16, i16.n_opaque, i16.n_bf16, i16.n_conv_bf16, i16.n_conv);
    if (i16.slow[0])
        fprintf(stderr, "    slow conv in bf16: %s\n", i16.slow);
    free(x);
    free(y32);
    free(y16);
    ASSERT_TRUE(close);
    ASSERT_TRUE(i32.n_bf16 == 0);
    ASSERT_TRUE(i16.n_bf16 >= min_bf16);
    ASSERT_TRUE(i16.n_conv_bf16 == i16.n_conv);
}

/* Conv (bf16 out) -> Conv with the fused residual read as bf16 and Relu
 * -> MaxPool (bf16 in, plain FP32 out). 20 channels: padded blocks. */
static void test_conv_residual_maxpool(void)
{
    SKIP_WITHOUT_BF16();
    chain c = { 0 };
    int64_t xd[4] = { 2, 16, 14, 14 }, yd[4] = { 2, 20, 14, 14 };
    add_conv(&c, xd, 20, 3, 1, -1, -3, "Relu", 1);
    add_conv(&c, yd, 20, 1, 1, 0, 0, "Relu", 3);
    add_unary(&c, "MaxPool", yd, (int64_t[]){ 2, 20, 7, 7 }, 1);
    check_chain(&c, xd, 2 * 20 * 7 * 7, 2);
    chain_fini(&c);
}

/* ResNet's stem: 3 channels of plain FP32 in, 7x7 stride 2 (the src
 * converted to bf16 in the kernel), then Relu -> GlobalAveragePool. */
static void test_stem_plain_input_gap(void)
{
    SKIP_WITHOUT_BF16();
    chain c = { 0 };
    int64_t xd[4] = { 1, 3, 32, 32 }, yd[4] = { 1, 64, 16, 16 };
    add_conv(&c, xd, 64, 7, 2, -1, -3, NULL, 5);
    add_unary(&c, "Relu", yd, yd, 0);
    add_unary(&c, "GlobalAveragePool", yd, (int64_t[]){ 1, 64, 1, 1 }, 1);
    check_chain(&c, xd, 64, 2);
    chain_fini(&c);
}

/* A single conv whose output must be plain: FP32 out of a bf16 conv. */
static void test_conv_plain_out(void)
{
    SKIP_WITHOUT_BF16();
    chain c = { 0 };
    int64_t xd[4] = { 1, 32, 9, 9 };
    add_conv(&c, xd, 48, 3, 1, -1, -3, "Clip", 9);
    kt_attr_float(&c.t[0], "_fused_alpha", 0.0f);
    kt_attr_float(&c.t[0], "_fused_beta", 6.0f);
    check_chain(&c, xd, 48 * 81, 0);
    chain_fini(&c);
}

/* Two bf16 convs -> Add of both (bf16 in and out) -> BatchNormalization
 * (bf16) -> Relu (bf16 in, plain FP32 out). */
static void test_add_batchnorm_relu(void)
{
    SKIP_WITHOUT_BF16();
    chain c = { 0 };
    int64_t xd[4] = { 1, 16, 10, 10 }, yd[4] = { 1, 32, 10, 10 };
    add_conv(&c, xd, 32, 3, 1, -1, -3, NULL, 11);
    add_conv(&c, xd, 32, 1, 1, -1, -3, NULL, 13);
    add_add(&c, yd, 0, 1);
    add_batch_norm(&c, yd, 2);
    add_unary(&c, "Relu", yd, yd, 3);
    check_chain(&c, xd, 32 * 100, 4);
    chain_fini(&c);
}

/* The residual plain FP32 (the chain input) while input 0 is bf16. */
static void test_conv_plain_residual(void)
{
    SKIP_WITHOUT_BF16();
    chain c = { 0 };
    int64_t xd[4] = { 1, 32, 8, 8 };
    add_conv(&c, xd, 32, 3, 1, -1, -3, "Relu", 15);
    add_conv(&c, xd, 32, 1, 1, 0, -1, "Relu", 17);
    check_chain(&c, xd, 32 * 64, 1);
    chain_fini(&c);
}

/* Conv (bf16) -> ConvTranspose (bf16 in, plain out) and a plain-input
 * ConvTranspose (src converted in the kernel) -> AveragePool. */
static void test_conv_transpose(void)
{
    SKIP_WITHOUT_BF16();
    chain c = { 0 };
    int64_t xd[4] = { 1, 16, 6, 6 };
    add_conv(&c, xd, 16, 3, 1, -1, -3, "Relu", 19);
    add_deconv(&c, xd, 8, 0, 21);
    check_chain(&c, xd, 8 * 12 * 12, 1);
    chain_fini(&c);

    chain d = { 0 };
    add_deconv(&d, xd, 16, -1, 23);
    add_unary(&d, "AveragePool", (int64_t[]){ 1, 16, 12, 12 }, (int64_t[]){ 1, 16, 6, 6 }, 0);
    check_chain(&d, xd, 16 * 36, 1);
    chain_fini(&d);
}

/* PaddleOCR's blocks: Conv with HardSwish and a trailing scale and shift
 * (post-ops on the FP32 accumulator), twice (the second reads bf16), then
 * a standalone HardSwish (bf16 in, plain FP32 out). */
static void test_conv_hardswish_scale_shift(void)
{
    SKIP_WITHOUT_BF16();
    chain c = { 0 };
    int64_t xd[4] = { 1, 16, 10, 10 }, yd[4] = { 1, 24, 10, 10 };
    add_conv(&c, xd, 24, 3, 1, -1, -3, "HardSwish", 25);
    kt_attr_float(&c.t[0], "_fused_post_scale", 2.5f);
    kt_attr_float(&c.t[0], "_fused_post_shift", -0.5f);
    add_conv(&c, yd, 24, 1, 1, 0, -3, "HardSwish", 27);
    kt_attr_float(&c.t[1], "_fused_post_scale", 1.5f);
    kt_attr_float(&c.t[1], "_fused_post_shift", 0.25f);
    add_unary(&c, "HardSwish", yd, yd, 1);
    check_chain(&c, xd, 24 * 100, 2);
    chain_fini(&c);
}

TEST_MAIN(test_conv_residual_maxpool, test_stem_plain_input_gap, test_conv_plain_out,
          test_add_batchnorm_relu, test_conv_plain_residual, test_conv_transpose,
          test_conv_hardswish_scale_shift)
