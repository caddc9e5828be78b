/*
 * test_dnnl_conv.c - oneDNN Conv and ConvTranspose against naive loops:
 * pads (asymmetric, SAME_UPPER, SAME_LOWER, VALID), strides, dilations,
 * groups (depthwise), bias, 1-D/3-D, fused post-ops, and no allocation
 * through infd_* in steady-state runs.
 */
#include "core/alloc.h"
#include "dnnl_test.h"

/* Geometry of one convolution; spatial dims are right-aligned in 3 (unused
 * leading ones are 1 with no padding). */
typedef struct cgeom {
    int n_sp;
    int64_t n, c, oc, group;
    int64_t in[3], k[3], s[3], d[3], pl[3], pr[3], out[3];
} cgeom;

static void cgeom_init(cgeom *g, int n_sp, int64_t n, int64_t c, int64_t oc, int64_t group)
{
    memset(g, 0, sizeof(*g));
    g->n_sp = n_sp;
    g->n = n;
    g->c = c;
    g->oc = oc;
    g->group = group;
    for (int i = 0; i < 3; i++) {
        g->in[i] = g->k[i] = g->s[i] = g->d[i] = 1;
    }
}

/* Sets spatial dim i (0-based among the n_sp used ones). */
static void cgeom_dim(cgeom *g, int i, int64_t in, int64_t k, int64_t s, int64_t d, int64_t pl,
                      int64_t pr)
{
    int j = 3 - g->n_sp + i;
    g->in[j] = in;
    g->k[j] = k;
    g->s[j] = s;
    g->d[j] = d;
    g->pl[j] = pl;
    g->pr[j] = pr;
}

static void cgeom_finish(cgeom *g)
{
    for (int j = 0; j < 3; j++)
        g->out[j] = (g->in[j] + g->pl[j] + g->pr[j] - ((g->k[j] - 1) * g->d[j] + 1)) / g->s[j] + 1;
}

static int64_t sp_size(const int64_t *d)
{
    return d[0] * d[1] * d[2];
}

static void ref_conv(const cgeom *g, const float *x, const float *w, const float *b, float *y)
{
    int64_t cg = g->c / g->group, ocg = g->oc / g->group;
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t o = 0; o < g->oc; o++)
            for (int64_t z = 0; z < g->out[0]; z++)
                for (int64_t yy = 0; yy < g->out[1]; yy++)
                    for (int64_t xx = 0; xx < g->out[2]; xx++) {
                        double acc = b ? b[o] : 0;
                        int64_t grp = o / ocg;
                        for (int64_t ci = 0; ci < cg; ci++)
                            for (int64_t kz = 0; kz < g->k[0]; kz++)
                                for (int64_t ky = 0; ky < g->k[1]; ky++)
                                    for (int64_t kx = 0; kx < g->k[2]; kx++) {
                                        int64_t iz = z * g->s[0] - g->pl[0] + kz * g->d[0];
                                        int64_t iy = yy * g->s[1] - g->pl[1] + ky * g->d[1];
                                        int64_t ix = xx * g->s[2] - g->pl[2] + kx * g->d[2];
                                        if (iz < 0 || iz >= g->in[0] || iy < 0 || iy >= g->in[1] ||
                                            ix < 0 || ix >= g->in[2])
                                            continue;
                                        int64_t c = grp * cg + ci;
                                        float xv = x[((n * g->c + c) * g->in[0] + iz) * g->in[1] *
                                                         g->in[2] +
                                                     iy * g->in[2] + ix];
                                        float wv =
                                            w[((o * cg + ci) * g->k[0] + kz) * g->k[1] * g->k[2] +
                                              ky * g->k[2] + kx];
                                        acc += (double)xv * wv;
                                    }
                        y[((n * g->oc + o) * g->out[0] + z) * g->out[1] * g->out[2] +
                          yy * g->out[2] + xx] = (float)acc;
                    }
}

static void geom_dims(const cgeom *g, int64_t ch, const int64_t *sp, int64_t *dims)
{
    dims[0] = g->n;
    dims[1] = ch;
    for (int i = 0; i < g->n_sp; i++)
        dims[2 + i] = sp[3 - g->n_sp + i];
}

/* Options for run_conv beyond the geometry. */
typedef struct copts {
    bool bias;
    bool runtime_weights;
    const char *auto_pad; /* NULL: explicit pads */
    const char *fused_act;
    bool fused_sum;
    bool post; /* _fused_post_scale and _fused_post_shift */
    float post_scale, post_shift;
} copts;

/* Builds a Conv node for `g`, runs it through oneDNN and compares with the
 * naive loops. */
static void run_conv(const cgeom *g, const copts *o)
{
    int64_t xd[5], wd[5], yd[5];
    int rank = g->n_sp + 2;
    geom_dims(g, g->c, g->in, xd);
    geom_dims(g, g->oc, g->out, yd);
    wd[0] = g->oc;
    wd[1] = g->c / g->group;
    for (int i = 0; i < g->n_sp; i++)
        wd[2 + i] = g->k[3 - g->n_sp + i];
    size_t nx = (size_t)(g->n * g->c * sp_size(g->in));
    size_t nw = (size_t)(g->oc * wd[1] * sp_size(g->k));
    size_t ny = (size_t)(g->n * g->oc * sp_size(g->out));
    float *x = dt_rand(nx, 1), *w = dt_rand(nw, 2), *b = dt_rand((size_t)g->oc, 3);
    float *r = dt_rand(ny, 4);
    float *y = calloc(ny, sizeof(float)), *want = calloc(ny, sizeof(float));
    ref_conv(g, x, w, o->bias ? b : NULL, want);
    if (o->fused_sum)
        for (size_t i = 0; i < ny; i++)
            want[i] += r[i];
    if (o->fused_act && strcmp(o->fused_act, "Relu") == 0)
        for (size_t i = 0; i < ny; i++)
            want[i] = want[i] > 0 ? want[i] : 0;
    if (o->fused_act && strcmp(o->fused_act, "Clip") == 0)
        for (size_t i = 0; i < ny; i++)
            want[i] = fminf(fmaxf(want[i], -0.5f), 0.25f);
    if (o->fused_act && strcmp(o->fused_act, "HardSwish") == 0)
        for (size_t i = 0; i < ny; i++)
            want[i] = want[i] * fminf(fmaxf(want[i] + 3.0f, 0.0f), 6.0f) / 6.0f;
    if (o->post)
        for (size_t i = 0; i < ny; i++)
            want[i] = want[i] * o->post_scale + o->post_shift;

    kt t;
    kt_init(&t, "Conv", 17);
    kt_input(&t, INFD_DTYPE_FP32, rank, xd, NULL);
    kt_input(&t, INFD_DTYPE_FP32, rank, wd, o->runtime_weights ? NULL : w);
    if (o->bias)
        kt_input(&t, INFD_DTYPE_FP32, 1, &g->oc, b);
    else if (o->fused_sum)
        kt_input_omitted(&t);
    if (o->fused_sum)
        kt_input(&t, INFD_DTYPE_FP32, rank, yd, NULL);
    kt_output(&t, INFD_DTYPE_FP32, rank, yd);
    int64_t s[3], d[3], p[6], k[3];
    for (int i = 0; i < g->n_sp; i++) {
        int j = 3 - g->n_sp + i;
        k[i] = g->k[j];
        s[i] = g->s[j];
        d[i] = g->d[j];
        p[i] = g->pl[j];
        p[i + g->n_sp] = g->pr[j];
    }
    kt_attr_ints(&t, "kernel_shape", g->n_sp, k);
    kt_attr_ints(&t, "strides", g->n_sp, s);
    kt_attr_ints(&t, "dilations", g->n_sp, d);
    if (o->auto_pad)
        kt_attr_string(&t, "auto_pad", o->auto_pad);
    else
        kt_attr_ints(&t, "pads", 2 * g->n_sp, p);
    if (g->group != 1)
        kt_attr_int(&t, "group", g->group);
    if (o->fused_act) {
        kt_attr_string(&t, "_fused_activation", o->fused_act);
        if (strcmp(o->fused_act, "Clip") == 0) {
            kt_attr_float(&t, "_fused_alpha", -0.5f);
            kt_attr_float(&t, "_fused_beta", 0.25f);
        }
    }
    if (o->fused_sum)
        kt_attr_int(&t, "_fused_sum", 1);
    if (o->post) {
        kt_attr_float(&t, "_fused_post_scale", o->post_scale);
        kt_attr_float(&t, "_fused_post_shift", o->post_shift);
    }
    const void *ins[4] = { x, w, o->bias ? b : NULL, r };
    DT_RUN(&t, ins, (void *[]){ y });
    ASSERT_CLOSE(y, want, ny);
    kt_fini(&t);
    free(x);
    free(w);
    free(b);
    free(r);
    free(y);
    free(want);
}

static void test_conv_basic_bias(void)
{
    cgeom g;
    cgeom_init(&g, 2, 2, 3, 4, 1);
    cgeom_dim(&g, 0, 8, 3, 1, 1, 1, 1);
    cgeom_dim(&g, 1, 9, 3, 1, 1, 1, 1);
    cgeom_finish(&g);
    run_conv(&g, &(copts){ .bias = true });
}

static void test_conv_asymmetric_pads_stride2(void)
{
    cgeom g;
    cgeom_init(&g, 2, 1, 5, 6, 1);
    cgeom_dim(&g, 0, 11, 3, 2, 1, 0, 2);
    cgeom_dim(&g, 1, 10, 2, 2, 1, 1, 0);
    cgeom_finish(&g);
    run_conv(&g, &(copts){ 0 });
}

/* SAME pads with an even kernel and stride 2 leave an odd total, which
 * SAME_UPPER puts at the end and SAME_LOWER at the start. */
static void test_conv_same_upper_lower(void)
{
    for (int lower = 0; lower < 2; lower++) {
        cgeom g;
        cgeom_init(&g, 2, 1, 3, 4, 1);
        /* in 9, k 4, s 2: out 5, total = 4*2 + 4 - 9 = 3. */
        cgeom_dim(&g, 0, 9, 4, 2, 1, lower ? 2 : 1, lower ? 1 : 2);
        /* in 8, k 3, s 1: out 8, total 2 (even). */
        cgeom_dim(&g, 1, 8, 3, 1, 1, 1, 1);
        cgeom_finish(&g);
        ASSERT_EQ_I64(g.out[1], 5);
        run_conv(&g, &(copts){ .auto_pad = lower ? "SAME_LOWER" : "SAME_UPPER", .bias = true });
        if (test_failed_)
            return;
    }
}

static void test_conv_valid(void)
{
    cgeom g;
    cgeom_init(&g, 2, 1, 2, 3, 1);
    cgeom_dim(&g, 0, 7, 3, 2, 1, 0, 0);
    cgeom_dim(&g, 1, 6, 2, 1, 1, 0, 0);
    cgeom_finish(&g);
    run_conv(&g, &(copts){ .auto_pad = "VALID" });
}

static void test_conv_depthwise_dilated(void)
{
    cgeom g;
    cgeom_init(&g, 2, 2, 8, 8, 8);
    cgeom_dim(&g, 0, 12, 3, 1, 2, 2, 2);
    cgeom_dim(&g, 1, 10, 3, 2, 2, 1, 2);
    cgeom_finish(&g);
    run_conv(&g, &(copts){ .bias = true });
}

static void test_conv_grouped_1d_3d(void)
{
    cgeom g;
    cgeom_init(&g, 1, 2, 6, 4, 2);
    cgeom_dim(&g, 0, 17, 5, 3, 2, 3, 1);
    cgeom_finish(&g);
    run_conv(&g, &(copts){ .bias = true });
    if (test_failed_)
        return;
    cgeom_init(&g, 3, 1, 4, 6, 2);
    cgeom_dim(&g, 0, 5, 3, 1, 1, 1, 0);
    cgeom_dim(&g, 1, 6, 2, 2, 1, 0, 1);
    cgeom_dim(&g, 2, 7, 3, 1, 2, 2, 2);
    cgeom_finish(&g);
    run_conv(&g, &(copts){ .bias = true });
}

static void test_conv_runtime_weights(void)
{
    cgeom g;
    cgeom_init(&g, 2, 1, 4, 4, 2);
    cgeom_dim(&g, 0, 6, 3, 1, 1, 1, 1);
    cgeom_dim(&g, 1, 6, 3, 1, 1, 1, 1);
    cgeom_finish(&g);
    run_conv(&g, &(copts){ .runtime_weights = true, .bias = true });
}

static void test_conv_fused_sum_relu_clip(void)
{
    cgeom g;
    cgeom_init(&g, 2, 2, 16, 16, 1);
    cgeom_dim(&g, 0, 7, 3, 1, 1, 1, 1);
    cgeom_dim(&g, 1, 7, 3, 1, 1, 1, 1);
    cgeom_finish(&g);
    run_conv(&g, &(copts){ .bias = true, .fused_sum = true, .fused_act = "Relu" });
    if (test_failed_)
        return;
    run_conv(&g, &(copts){ .bias = false, .fused_sum = true, .fused_act = "Clip" });
    if (test_failed_)
        return;
    run_conv(&g, &(copts){ .bias = true, .fused_act = "Clip" });
}

/* Paddle's blocks: HardSwish then a scalar scale and shift, on a dense and
 * a depthwise Conv (values reach past both ends of hard-swish, |x| > 3);
 * and a scale alone after a residual and Relu. */
static void test_conv_fused_hardswish_scale_shift(void)
{
    cgeom g;
    cgeom_init(&g, 2, 1, 16, 16, 1);
    cgeom_dim(&g, 0, 7, 3, 1, 1, 1, 1);
    cgeom_dim(&g, 1, 9, 3, 1, 1, 1, 1);
    cgeom_finish(&g);
    run_conv(&g, &(copts){ .bias = true,
                           .fused_act = "HardSwish",
                           .post = true,
                           .post_scale = 0.5f,
                           .post_shift = -0.25f });
    if (test_failed_)
        return;
    run_conv(&g, &(copts){ .bias = true,
                           .fused_sum = true,
                           .fused_act = "Relu",
                           .post = true,
                           .post_scale = -2.0f });
    if (test_failed_)
        return;
    cgeom_init(&g, 2, 2, 32, 32, 32);
    cgeom_dim(&g, 0, 8, 5, 1, 1, 2, 2);
    cgeom_dim(&g, 1, 8, 5, 2, 1, 2, 2);
    cgeom_finish(&g);
    run_conv(&g, &(copts){ .bias = true,
                           .fused_act = "HardSwish",
                           .post = true,
                           .post_scale = 1.75f,
                           .post_shift = 0.125f });
}

static void test_conv_declines(void)
{
    kt t;
    kt_init(&t, "Conv", 17);
    kt_input(&t, INFD_DTYPE_FP16, 4, (int64_t[]){ 1, 2, 4, 4 }, NULL);
    kt_input(&t, INFD_DTYPE_FP16, 4, (int64_t[]){ 2, 2, 1, 1 }, NULL);
    kt_output(&t, INFD_DTYPE_FP16, 4, (int64_t[]){ 1, 2, 4, 4 });
    DT_DECLINES(&t, "FP32 only");
    kt_fini(&t);

    kt_init(&t, "Conv", 17);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 2, 4, 4 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 2, 2, 1, 1 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 2, 4, 4 });
    kt_attr_string(&t, "_fused_activation", "Gelu");
    DT_DECLINES(&t, "fused activation 'Gelu'");
    kt_fini(&t);

    /* A fusion hook this backend does not know is refused, not ignored. */
    kt_init(&t, "Conv", 17);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 2, 4, 4 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 2, 2, 1, 1 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 2, 4, 4 });
    kt_attr_float(&t, "_fused_post_gain", 2.0f);
    DT_DECLINES(&t, "fusion attribute '_fused_post_gain' is not supported");
    kt_fini(&t);
}

/* Steady-state runs allocate nothing through infd_*. oneDNN's own
 * allocations (its C++ runtime builds an argument map per execute; OpenMP
 * may allocate on first use of a thread) go through operator new / malloc
 * inside libdnnl and cannot be counted this way. */
static void test_conv_runs_do_not_allocate(void)
{
    kt t;
    kt_init(&t, "Conv", 17);
    int64_t xd[4] = { 1, 8, 14, 14 }, wd[4] = { 16, 8, 3, 3 }, yd[4] = { 1, 16, 14, 14 };
    float *x = dt_rand(8 * 14 * 14, 1), *w = dt_rand(16 * 8 * 9, 2), *b = dt_rand(16, 3);
    float *y = calloc(16 * 14 * 14, sizeof(float));
    kt_input(&t, INFD_DTYPE_FP32, 4, xd, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 4, wd, w);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 16 }, b);
    kt_output(&t, INFD_DTYPE_FP32, 4, yd);
    kt_attr_ints(&t, "pads", 4, (int64_t[]){ 1, 1, 1, 1 });
    const infd_ir_value *ins[KT_MAX_IO], *outs[KT_MAX_IO];
    infd_kernel_args a;
    infd_kernel *k = NULL;
    infd_error err = { 0 };
    kt_args(&t, &a, ins, outs);
    ASSERT_STATUS(infd_backend_compile(&infd_cpu_backend, &a, &k, &err), INFD_STATUS_OK);
    ASSERT_TRUE(strncmp(k->name, "dnnl:conv:", 10) == 0);
    void *ws = k->workspace_bytes ? infd_aligned_alloc(64, k->workspace_bytes) : NULL;
    infd_kernel_io io = { .inputs = (const void *[]){ x, w, b },
                          .outputs = (void *[]){ y },
                          .workspace = ws };
    infd_kernel_run(k, &io); /* warm-up: first-use work in oneDNN/OpenMP */
    infd_alloc_stats before = infd_alloc_get_stats();
    for (int i = 0; i < 100; i++) {
        io.slot = i & 1;
        infd_kernel_run(k, &io);
    }
    infd_alloc_stats after = infd_alloc_get_stats();
    ASSERT_EQ_U64(after.n_allocs, before.n_allocs);
    ASSERT_EQ_U64(after.n_frees, before.n_frees);
    infd_kernel_destroy(k);
    infd_free(ws);
    kt_fini(&t);
    free(x);
    free(w);
    free(b);
    free(y);
}

/* Compile fails cleanly (no leak under ASan) at every infd_* allocation. */
static void test_conv_compile_oom(void)
{
    kt t;
    kt_init(&t, "Conv", 17);
    float *w = dt_rand(4 * 2 * 9, 2), *b = dt_rand(4, 3);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 2, 5, 5 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 4, 2, 3, 3 }, w);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, b);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 4, 3, 3 });
    const infd_ir_value *ins[KT_MAX_IO], *outs[KT_MAX_IO];
    infd_kernel_args a;
    kt_args(&t, &a, ins, outs);
    int n;
    for (n = 1; n < 100; n++) {
        infd_kernel *k = NULL;
        infd_error err = { 0 };
        infd_alloc_fail_after(n);
        infd_status st = infd_backend_compile(&infd_cpu_backend, &a, &k, &err);
        int fired = infd_alloc_injected_fired();
        infd_alloc_fail_after(0);
        if (st == INFD_STATUS_OK) {
            infd_kernel_destroy(k);
            if (!fired)
                break;
            continue;
        }
        ASSERT_TRUE(fired);
        ASSERT_STATUS(st, INFD_STATUS_OUT_OF_MEMORY);
        ASSERT_TRUE(k == NULL);
        ASSERT_STR_HAS(err.msg, "node0");
    }
    ASSERT_TRUE(n > 3 && n < 100);
    kt_fini(&t);
    free(w);
    free(b);
}

/* ---- ConvTranspose -------------------------------------------------------- */

/* 2-D ConvTranspose reference: y[n, o, oy, ox] += x[n, c, iy, ix] *
 * w[c, o % ocg, ky, kx] at oy = iy*s - pl + ky*d (ONNX col2im form). */
static void ref_deconv2d(int64_t n_, int64_t c_, int64_t oc, int64_t group, const int64_t *in,
                         const int64_t *k, const int64_t *s, const int64_t *d, const int64_t *pl,
                         const int64_t *out, const float *x, const float *w, const float *b,
                         float *y)
{
    int64_t cg = c_ / group, ocg = oc / group;
    for (int64_t n = 0; n < n_; n++)
        for (int64_t o = 0; o < oc; o++)
            for (int64_t i = 0; i < out[0] * out[1]; i++)
                y[(n * oc + o) * out[0] * out[1] + i] = b ? b[o] : 0;
    for (int64_t n = 0; n < n_; n++)
        for (int64_t c = 0; c < c_; c++) {
            int64_t grp = c / cg;
            for (int64_t oo = 0; oo < ocg; oo++)
                for (int64_t iy = 0; iy < in[0]; iy++)
                    for (int64_t ix = 0; ix < in[1]; ix++)
                        for (int64_t ky = 0; ky < k[0]; ky++)
                            for (int64_t kx = 0; kx < k[1]; kx++) {
                                int64_t oy = iy * s[0] - pl[0] + ky * d[0];
                                int64_t ox = ix * s[1] - pl[1] + kx * d[1];
                                if (oy < 0 || oy >= out[0] || ox < 0 || ox >= out[1])
                                    continue;
                                int64_t o = grp * ocg + oo;
                                y[((n * oc + o) * out[0] + oy) * out[1] + ox] +=
                                    x[((n * c_ + c) * in[0] + iy) * in[1] + ix] *
                                    w[((c * ocg + oo) * k[0] + ky) * k[1] + kx];
                            }
        }
}

typedef struct dtcase {
    int64_t n, c, oc, group, in[2], k[2], s[2], d[2], pads[4], opad[2];
    bool bias;
    bool use_output_shape;
} dtcase;

static void run_deconv(const dtcase *tc)
{
    int64_t out[2], pl[2] = { tc->pads[0], tc->pads[1] };
    for (int i = 0; i < 2; i++)
        out[i] = tc->s[i] * (tc->in[i] - 1) + tc->opad[i] + (tc->k[i] - 1) * tc->d[i] + 1 -
                 tc->pads[i] - tc->pads[i + 2];
    int64_t xd[4] = { tc->n, tc->c, tc->in[0], tc->in[1] };
    int64_t wd[4] = { tc->c, tc->oc / tc->group, tc->k[0], tc->k[1] };
    int64_t yd[4] = { tc->n, tc->oc, out[0], out[1] };
    size_t nx = (size_t)(tc->n * tc->c * tc->in[0] * tc->in[1]);
    size_t nw = (size_t)(wd[0] * wd[1] * wd[2] * wd[3]);
    size_t ny = (size_t)(tc->n * tc->oc * out[0] * out[1]);
    float *x = dt_rand(nx, 5), *w = dt_rand(nw, 6), *b = dt_rand((size_t)tc->oc, 7);
    float *y = calloc(ny, sizeof(float)), *want = calloc(ny, sizeof(float));
    ref_deconv2d(tc->n, tc->c, tc->oc, tc->group, tc->in, tc->k, tc->s, tc->d, pl, out, x, w,
                 tc->bias ? b : NULL, want);
    kt t;
    kt_init(&t, "ConvTranspose", 17);
    kt_input(&t, INFD_DTYPE_FP32, 4, xd, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 4, wd, w);
    if (tc->bias)
        kt_input(&t, INFD_DTYPE_FP32, 1, &tc->oc, b);
    kt_output(&t, INFD_DTYPE_FP32, 4, yd);
    kt_attr_ints(&t, "strides", 2, tc->s);
    kt_attr_ints(&t, "dilations", 2, tc->d);
    if (tc->use_output_shape)
        kt_attr_ints(&t, "output_shape", 2, out);
    else
        kt_attr_ints(&t, "pads", 4, tc->pads);
    kt_attr_ints(&t, "output_padding", 2, tc->opad);
    if (tc->group != 1)
        kt_attr_int(&t, "group", tc->group);
    DT_RUN(&t, ((const void *[]){ x, w, b }), ((void *[]){ y }));
    ASSERT_CLOSE(y, want, ny);
    kt_fini(&t);
    free(x);
    free(w);
    free(b);
    free(y);
    free(want);
}

static void test_conv_transpose(void)
{
    static const dtcase cases[] = {
        /* stride 2, pads 1, output_padding 1, bias */
        { 2,
          4,
          6,
          1,
          { 5, 4 },
          { 3, 3 },
          { 2, 2 },
          { 1, 1 },
          { 1, 1, 1, 1 },
          { 1, 1 },
          true,
          false },
        /* groups, dilation, asymmetric pads */
        { 1,
          4,
          6,
          2,
          { 4, 5 },
          { 3, 2 },
          { 1, 2 },
          { 2, 1 },
          { 0, 1, 2, 0 },
          { 0, 0 },
          false,
          false },
        /* output_shape with an even total padding */
        { 1,
          3,
          2,
          1,
          { 4, 4 },
          { 4, 4 },
          { 2, 2 },
          { 1, 1 },
          { 1, 1, 1, 1 },
          { 0, 0 },
          true,
          true },
    };
    for (size_t i = 0; i < INFD_ARRAY_SIZE(cases) && !test_failed_; i++)
        run_deconv(&cases[i]);
}

TEST_MAIN(test_conv_basic_bias, test_conv_asymmetric_pads_stride2, test_conv_same_upper_lower,
          test_conv_valid, test_conv_depthwise_dilated, test_conv_grouped_1d_3d,
          test_conv_runtime_weights, test_conv_fused_sum_relu_clip,
          test_conv_fused_hardswish_scale_shift, test_conv_declines, test_conv_runs_do_not_allocate,
          test_conv_compile_oom, test_conv_transpose)
