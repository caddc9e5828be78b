/*
 * test_dnnl_pool.c - oneDNN MaxPool, AveragePool, GlobalAveragePool and
 * GlobalMaxPool against naive loops: asymmetric pads, strides, dilations,
 * ceil_mode, count_include_pad, SAME pads, and the declined cases.
 */
#include <float.h>

#include "dnnl_test.h"

typedef struct pgeom {
    int n_sp;
    int64_t n, c;
    int64_t in[3], k[3], s[3], d[3], pl[3], pr[3], out[3];
} pgeom;

typedef enum { P_MAX, P_AVG_EXCL, P_AVG_INCL } pkind;

static void pgeom_init(pgeom *g, int n_sp, int64_t n, int64_t c)
{
    memset(g, 0, sizeof(*g));
    g->n_sp = n_sp;
    g->n = n;
    g->c = c;
    for (int i = 0; i < 3; i++)
        g->in[i] = g->k[i] = g->s[i] = g->d[i] = g->out[i] = 1;
}

/* Spatial dim i of n_sp; out from floor or ceil mode. */
static void pgeom_dim(pgeom *g, int i, int64_t in, int64_t k, int64_t s, int64_t d, int64_t pl,
                      int64_t pr, bool ceil_mode)
{
    int j = 3 - g->n_sp + i;
    g->in[j] = in;
    g->k[j] = k;
    g->s[j] = s;
    g->d[j] = d;
    g->pl[j] = pl;
    g->pr[j] = pr;
    int64_t span = in + pl + pr - ((k - 1) * d + 1);
    g->out[j] = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
}

/* ONNX Runtime semantics: count_include_pad counts the window clipped to
 * the declared pads, never past them. */
static void ref_pool(const pgeom *g, pkind kind, const float *x, float *y)
{
    for (int64_t nc = 0; nc < g->n * g->c; nc++)
        for (int64_t oz = 0; oz < g->out[0]; oz++)
            for (int64_t oy = 0; oy < g->out[1]; oy++)
                for (int64_t ox = 0; ox < g->out[2]; ox++) {
                    int64_t o[3] = { oz, oy, ox }, padded = 1;
                    double acc = kind == P_MAX ? -FLT_MAX : 0;
                    int64_t count = 0;
                    for (int j = 0; j < 3; j++) {
                        int64_t st = o[j] * g->s[j] - g->pl[j];
                        int64_t en =
                            INFD_MIN(st + (g->k[j] - 1) * g->d[j] + 1, g->in[j] + g->pr[j]);
                        padded *= en - st;
                    }
                    for (int64_t kz = 0; kz < g->k[0]; kz++)
                        for (int64_t ky = 0; ky < g->k[1]; ky++)
                            for (int64_t kx = 0; kx < g->k[2]; kx++) {
                                int64_t iz = oz * g->s[0] - g->pl[0] + kz * g->d[0];
                                int64_t iy = oy * g->s[1] - g->pl[1] + ky * g->d[1];
                                int64_t ix = ox * g->s[2] - g->pl[2] + kx * g->d[2];
                                if (iz < 0 || iz >= g->in[0] || iy < 0 || iy >= g->in[1] ||
                                    ix < 0 || ix >= g->in[2])
                                    continue;
                                float v = x[((nc * g->in[0] + iz) * g->in[1] + iy) * g->in[2] + ix];
                                acc = kind == P_MAX ? (v > acc ? v : acc) : acc + v;
                                count++;
                            }
                    if (kind == P_AVG_EXCL)
                        acc /= (double)count;
                    else if (kind == P_AVG_INCL)
                        acc /= (double)padded;
                    y[((nc * g->out[0] + oz) * g->out[1] + oy) * g->out[2] + ox] = (float)acc;
                }
}

static void pool_node(kt *t, const pgeom *g, pkind kind, bool ceil_mode, const char *auto_pad)
{
    int64_t xd[5] = { g->n, g->c }, yd[5] = { g->n, g->c }, k[3], s[3], d[3], p[6];
    for (int i = 0; i < g->n_sp; i++) {
        int j = 3 - g->n_sp + i;
        xd[2 + i] = g->in[j];
        yd[2 + i] = g->out[j];
        k[i] = g->k[j];
        s[i] = g->s[j];
        d[i] = g->d[j];
        p[i] = g->pl[j];
        p[i + g->n_sp] = g->pr[j];
    }
    kt_init(t, kind == P_MAX ? "MaxPool" : "AveragePool", 19);
    kt_input(t, INFD_DTYPE_FP32, g->n_sp + 2, xd, NULL);
    kt_output(t, INFD_DTYPE_FP32, g->n_sp + 2, yd);
    kt_attr_ints(t, "kernel_shape", g->n_sp, k);
    kt_attr_ints(t, "strides", g->n_sp, s);
    if (kind == P_MAX)
        kt_attr_ints(t, "dilations", g->n_sp, d);
    if (auto_pad)
        kt_attr_string(t, "auto_pad", auto_pad);
    else
        kt_attr_ints(t, "pads", 2 * g->n_sp, p);
    if (ceil_mode)
        kt_attr_int(t, "ceil_mode", 1);
    if (kind == P_AVG_INCL)
        kt_attr_int(t, "count_include_pad", 1);
}

static void run_pool(const pgeom *g, pkind kind, bool ceil_mode, const char *auto_pad)
{
    size_t nx = (size_t)(g->n * g->c * g->in[0] * g->in[1] * g->in[2]);
    size_t ny = (size_t)(g->n * g->c * g->out[0] * g->out[1] * g->out[2]);
    float *x = dt_rand(nx, 11), *y = calloc(ny, sizeof(float)), *want = calloc(ny, sizeof(float));
    ref_pool(g, kind, x, want);
    kt t;
    pool_node(&t, g, kind, ceil_mode, auto_pad);
    DT_RUN(&t, ((const void *[]){ x }), ((void *[]){ y }));
    ASSERT_CLOSE(y, want, ny);
    kt_fini(&t);
    free(x);
    free(y);
    free(want);
}

static void test_maxpool_asymmetric_dilated(void)
{
    pgeom g;
    pgeom_init(&g, 2, 2, 3);
    pgeom_dim(&g, 0, 9, 3, 2, 1, 0, 1, false);
    pgeom_dim(&g, 1, 10, 2, 1, 2, 1, 0, false);
    run_pool(&g, P_MAX, false, NULL);
}

static void test_maxpool_ceil_mode(void)
{
    pgeom g;
    pgeom_init(&g, 2, 1, 4);
    pgeom_dim(&g, 0, 8, 3, 2, 1, 0, 0, true); /* floor 3, ceil 4 */
    pgeom_dim(&g, 1, 7, 2, 2, 1, 1, 0, true);
    ASSERT_EQ_I64(g.out[1], 4);
    run_pool(&g, P_MAX, true, NULL);
}

static void test_maxpool_1d_3d_same(void)
{
    pgeom g;
    pgeom_init(&g, 1, 2, 3);
    /* SAME_UPPER, in 9, k 4, s 2: out 5, total 3 -> pads 1 / 2. */
    pgeom_dim(&g, 0, 9, 4, 2, 1, 1, 2, false);
    run_pool(&g, P_MAX, false, "SAME_UPPER");
    if (test_failed_)
        return;
    pgeom_init(&g, 1, 2, 3);
    pgeom_dim(&g, 0, 9, 4, 2, 1, 2, 1, false);
    run_pool(&g, P_MAX, false, "SAME_LOWER");
    if (test_failed_)
        return;
    pgeom_init(&g, 3, 1, 2);
    pgeom_dim(&g, 0, 5, 2, 2, 1, 0, 1, false);
    pgeom_dim(&g, 1, 6, 3, 1, 1, 1, 1, false);
    pgeom_dim(&g, 2, 7, 3, 2, 1, 1, 1, false);
    run_pool(&g, P_MAX, false, NULL);
}

static void test_avgpool_exclude_include_pad(void)
{
    pgeom g;
    pgeom_init(&g, 2, 2, 3);
    pgeom_dim(&g, 0, 7, 3, 2, 1, 1, 2, false);
    pgeom_dim(&g, 1, 8, 3, 1, 1, 0, 1, false);
    run_pool(&g, P_AVG_EXCL, false, NULL);
    if (test_failed_)
        return;
    run_pool(&g, P_AVG_INCL, false, NULL);
}

static void test_avgpool_ceil_mode(void)
{
    pgeom g;
    pgeom_init(&g, 2, 1, 3);
    pgeom_dim(&g, 0, 8, 3, 2, 1, 1, 1, true); /* (8+2-3)/2 = 3.5 -> 5 */
    pgeom_dim(&g, 1, 6, 2, 2, 1, 0, 0, true);
    run_pool(&g, P_AVG_EXCL, true, NULL);
    if (test_failed_)
        return;
    /* count_include_pad with a window past the end pad: declined. */
    kt t;
    pool_node(&t, &g, P_AVG_INCL, true, NULL);
    DT_DECLINES(&t, "count_include_pad");
    kt_fini(&t);
    /* count_include_pad under ceil_mode where the windows fit: accepted. */
    pgeom_init(&g, 2, 1, 3);
    pgeom_dim(&g, 0, 7, 3, 2, 1, 1, 1, true);
    pgeom_dim(&g, 1, 6, 2, 2, 1, 0, 0, true);
    run_pool(&g, P_AVG_INCL, true, NULL);
}

static void test_maxpool_indices_declined(void)
{
    kt t;
    kt_init(&t, "MaxPool", 12);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 1, 4, 4 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 1, 2, 2 });
    kt_output(&t, INFD_DTYPE_INT64, 4, (int64_t[]){ 1, 1, 2, 2 });
    kt_attr_ints(&t, "kernel_shape", 2, (int64_t[]){ 2, 2 });
    kt_attr_ints(&t, "strides", 2, (int64_t[]){ 2, 2 });
    DT_DECLINES(&t, "Indices");
    kt_fini(&t);
    kt_init(&t, "MaxPool", 12);
    kt_input(&t, INFD_DTYPE_INT8, 4, (int64_t[]){ 1, 1, 4, 4 }, NULL);
    kt_output(&t, INFD_DTYPE_INT8, 4, (int64_t[]){ 1, 1, 2, 2 });
    kt_attr_ints(&t, "kernel_shape", 2, (int64_t[]){ 2, 2 });
    kt_attr_ints(&t, "strides", 2, (int64_t[]){ 2, 2 });
    DT_DECLINES(&t, "FP32 only");
    kt_fini(&t);
}

static void test_global_pools(void)
{
    int64_t xd[4] = { 2, 5, 7, 6 }, yd[4] = { 2, 5, 1, 1 };
    float *x = dt_rand(2 * 5 * 42, 12), y[10], want_avg[10], want_max[10];
    for (int i = 0; i < 10; i++) {
        double s = 0;
        float m = -FLT_MAX;
        for (int j = 0; j < 42; j++) {
            s += x[i * 42 + j];
            m = x[i * 42 + j] > m ? x[i * 42 + j] : m;
        }
        want_avg[i] = (float)(s / 42);
        want_max[i] = m;
    }
    kt t;
    kt_init(&t, "GlobalAveragePool", 17);
    kt_input(&t, INFD_DTYPE_FP32, 4, xd, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 4, yd);
    DT_RUN(&t, ((const void *[]){ x }), ((void *[]){ y }));
    ASSERT_CLOSE(y, want_avg, 10);
    kt_fini(&t);
    kt_init(&t, "GlobalMaxPool", 17);
    kt_input(&t, INFD_DTYPE_FP32, 4, xd, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 4, yd);
    DT_RUN(&t, ((const void *[]){ x }), ((void *[]){ y }));
    ASSERT_CLOSE(y, want_max, 10);
    kt_fini(&t);
    free(x);
}

TEST_MAIN(test_maxpool_asymmetric_dilated, test_maxpool_ceil_mode, test_maxpool_1d_3d_same,
          test_avgpool_exclude_include_pad, test_avgpool_ceil_mode, test_maxpool_indices_declined,
          test_global_pools)
