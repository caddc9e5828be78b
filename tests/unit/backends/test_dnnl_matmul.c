/*
 * test_dnnl_matmul.c - oneDNN Gemm and MatMul against naive loops: Gemm
 * transposes, alpha/beta, C broadcast shapes, constant and run-time C;
 * MatMul with batch broadcasting, 1-D operands, constant B; fused post-ops
 * (residual + Clip; HardSwish then a scale and shift).
 */
#include "dnnl_test.h"

/* ---- Gemm ----------------------------------------------------------------- */

typedef struct gcase {
    int64_t m, k, n;
    int ta, tb;
    float alpha, beta;
    int c_rank; /* -1: no C */
    int64_t c_dims[2];
    bool c_const, b_const;
    const char *act;
} gcase;

static void run_gemm(const gcase *c)
{
    int64_t ad[2] = { c->ta ? c->k : c->m, c->ta ? c->m : c->k };
    int64_t bd[2] = { c->tb ? c->n : c->k, c->tb ? c->k : c->n };
    int64_t yd[2] = { c->m, c->n };
    int64_t c0 = c->c_rank == 2 ? c->c_dims[0] : 1;
    int64_t c1 = c->c_rank >= 1 ? c->c_dims[c->c_rank - 1] : 1;
    size_t ny = (size_t)(c->m * c->n);
    float *a = dt_rand((size_t)(c->m * c->k), 21), *b = dt_rand((size_t)(c->k * c->n), 22);
    float *cc = dt_rand((size_t)(c0 * c1), 23);
    float *y = calloc(ny, sizeof(float)), *want = calloc(ny, sizeof(float));
    for (int64_t i = 0; i < c->m; i++)
        for (int64_t j = 0; j < c->n; j++) {
            double acc = 0;
            for (int64_t p = 0; p < c->k; p++)
                acc += (double)a[c->ta ? p * c->m + i : i * c->k + p] *
                       b[c->tb ? j * c->k + p : p * c->n + j];
            acc *= c->alpha;
            if (c->c_rank >= 0)
                acc += c->beta * cc[(c0 == 1 ? 0 : i) * c1 + (c1 == 1 ? 0 : j)];
            if (c->act)
                acc = acc > 0 ? acc : 0;
            want[i * c->n + j] = (float)acc;
        }
    kt t;
    kt_init(&t, "Gemm", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, ad, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 2, bd, c->b_const ? b : NULL);
    if (c->c_rank >= 0)
        kt_input(&t, INFD_DTYPE_FP32, c->c_rank, c->c_dims, c->c_const ? cc : NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, yd);
    kt_attr_int(&t, "transA", c->ta);
    kt_attr_int(&t, "transB", c->tb);
    kt_attr_float(&t, "alpha", c->alpha);
    kt_attr_float(&t, "beta", c->beta);
    if (c->act)
        kt_attr_string(&t, "_fused_activation", c->act);
    DT_RUN(&t, ((const void *[]){ a, b, cc }), ((void *[]){ y }));
    ASSERT_CLOSE(y, want, ny);
    kt_fini(&t);
    free(a);
    free(b);
    free(cc);
    free(y);
    free(want);
}

static void test_gemm_cases(void)
{
    static const gcase cases[] = {
        /* the FC layer: transB, constant B and bias [N] */
        { 4, 32, 10, 0, 1, 1.0f, 1.0f, 1, { 10 }, true, true, NULL },
        /* every transpose combination, alpha and beta, C [M, N] */
        { 5, 7, 6, 0, 0, 0.5f, 2.0f, 2, { 5, 6 }, true, true, NULL },
        { 5, 7, 6, 1, 0, 1.0f, 0.5f, 2, { 5, 6 }, true, false, NULL },
        { 5, 7, 6, 1, 1, 2.0f, 1.0f, 2, { 1, 6 }, true, true, NULL },
        /* C [M, 1], C scalar, no C */
        { 5, 7, 6, 0, 1, 1.0f, 1.0f, 2, { 5, 1 }, true, true, NULL },
        { 5, 7, 6, 0, 0, 1.5f, 3.0f, 0, { 0 }, true, true, NULL },
        { 3, 4, 5, 1, 0, 1.0f, 1.0f, -1, { 0 }, false, false, NULL },
        /* run-time C (beta 1), with alpha, and a fused Relu */
        { 5, 7, 6, 0, 0, 0.5f, 1.0f, 1, { 6 }, false, true, "Relu" },
        { 5, 7, 6, 0, 1, 1.0f, 1.0f, 2, { 5, 6 }, false, false, NULL },
    };
    for (size_t i = 0; i < INFD_ARRAY_SIZE(cases) && !test_failed_; i++)
        run_gemm(&cases[i]);
}

static void test_gemm_runtime_c_beta_declined(void)
{
    kt t;
    kt_init(&t, "Gemm", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 4 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 4 });
    kt_attr_float(&t, "beta", 0.5f);
    DT_DECLINES(&t, "beta == 1");
    kt_fini(&t);
}

/* ---- MatMul --------------------------------------------------------------- */

/* Post-ops for run_matmul: none; a residual and Clip(-0.5, 0.5); HardSwish,
 * then y * 0.5 - 0.25 (_fused_post_scale/_fused_post_shift). */
enum { FUSE_NONE, FUSE_SUM_CLIP, FUSE_HSWISH_AFFINE };

/* Runs MatMul on A [ra dims] x B [rb dims]; the reference follows numpy. */
static void run_matmul(int ra, const int64_t *adims, int rb, const int64_t *bdims, bool b_const,
                       int fuse)
{
    /* Expand to a common rank as numpy does. */
    int64_t ea[8] = { 0 }, eb[8] = { 0 }, ey[8] = { 0 }, yd[8] = { 0 }; /* GCC -O1 + TSan warns */
    int na = ra == 1 ? 2 : ra, nb = rb == 1 ? 2 : rb, nd = na > nb ? na : nb, ny_rank = 0;
    int64_t ta[8], tb[8];
    if (ra == 1) {
        ta[0] = 1;
        ta[1] = adims[0];
    } else {
        memcpy(ta, adims, sizeof(int64_t) * (size_t)ra);
    }
    if (rb == 1) {
        tb[0] = bdims[0];
        tb[1] = 1;
    } else {
        memcpy(tb, bdims, sizeof(int64_t) * (size_t)rb);
    }
    for (int i = 0; i < nd; i++) {
        ea[i] = i < nd - na ? 1 : ta[i - (nd - na)];
        eb[i] = i < nd - nb ? 1 : tb[i - (nd - nb)];
        ey[i] = ea[i] > eb[i] ? ea[i] : eb[i];
    }
    int64_t m = ea[nd - 2], k = ea[nd - 1], n = eb[nd - 1];
    ey[nd - 2] = m;
    ey[nd - 1] = n;
    int64_t batch = 1, na_el = 1, nb_el = 1;
    for (int i = 0; i < nd - 2; i++)
        batch *= ey[i];
    for (int i = 0; i < nd; i++) {
        na_el *= ea[i];
        nb_el *= eb[i];
    }
    for (int i = 0; i < nd - 2; i++)
        yd[ny_rank++] = ey[i];
    if (ra != 1)
        yd[ny_rank++] = m;
    if (rb != 1)
        yd[ny_rank++] = n;
    size_t ny = (size_t)(batch * m * n);
    float *a = dt_rand((size_t)na_el, 31), *b = dt_rand((size_t)nb_el, 32);
    float *r = dt_rand(ny, 33), *y = calloc(ny, sizeof(float)), *want = calloc(ny, sizeof(float));
    for (int64_t bi = 0; bi < batch; bi++) {
        /* Batch index -> offsets into A and B with broadcasting. */
        int64_t rem = bi, oa = 0, ob = 0, sa = m * k, sb = k * n;
        for (int i = nd - 3; i >= 0; i--) {
            int64_t idx = rem % ey[i];
            rem /= ey[i];
            oa += (ea[i] == 1 ? 0 : idx) * sa;
            ob += (eb[i] == 1 ? 0 : idx) * sb;
            sa *= ea[i];
            sb *= eb[i];
        }
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double acc = 0;
                for (int64_t p = 0; p < k; p++)
                    acc += (double)a[oa + i * k + p] * b[ob + p * n + j];
                size_t at = (size_t)((bi * m + i) * n + j);
                if (fuse == FUSE_SUM_CLIP) {
                    acc += r[at];
                    acc = acc < -0.5 ? -0.5 : acc > 0.5 ? 0.5 : acc;
                } else if (fuse == FUSE_HSWISH_AFFINE) {
                    acc = acc * fmin(fmax(acc + 3.0, 0.0), 6.0) / 6.0 * 0.5 - 0.25;
                }
                want[at] = (float)acc;
            }
    }
    kt t;
    kt_init(&t, "MatMul", 13);
    kt_input(&t, INFD_DTYPE_FP32, ra, adims, NULL);
    kt_input(&t, INFD_DTYPE_FP32, rb, bdims, b_const ? b : NULL);
    if (fuse == FUSE_HSWISH_AFFINE) {
        kt_attr_string(&t, "_fused_activation", "HardSwish");
        kt_attr_float(&t, "_fused_post_scale", 0.5f);
        kt_attr_float(&t, "_fused_post_shift", -0.25f);
    }
    if (fuse == FUSE_SUM_CLIP) {
        kt_input(&t, INFD_DTYPE_FP32, ny_rank, yd, NULL);
        kt_attr_int(&t, "_fused_sum", 1);
        kt_attr_string(&t, "_fused_activation", "Clip");
        kt_attr_float(&t, "_fused_alpha", -0.5f);
        kt_attr_float(&t, "_fused_beta", 0.5f);
    }
    kt_output(&t, INFD_DTYPE_FP32, ny_rank, yd);
    DT_RUN(&t, ((const void *[]){ a, b, r }), ((void *[]){ y }));
    ASSERT_CLOSE(y, want, ny);
    kt_fini(&t);
    free(a);
    free(b);
    free(r);
    free(y);
    free(want);
}

static void test_matmul_2d_and_const_b(void)
{
    run_matmul(2, (int64_t[]){ 7, 9 }, 2, (int64_t[]){ 9, 5 }, false, FUSE_NONE);
    if (!test_failed_)
        run_matmul(2, (int64_t[]){ 7, 9 }, 2, (int64_t[]){ 9, 5 }, true, FUSE_NONE);
}

static void test_matmul_batched_broadcast(void)
{
    run_matmul(3, (int64_t[]){ 4, 3, 5 }, 3, (int64_t[]){ 4, 5, 6 }, false, FUSE_NONE);
    if (!test_failed_) /* B broadcast over batch, constant */
        run_matmul(4, (int64_t[]){ 2, 3, 4, 5 }, 2, (int64_t[]){ 5, 6 }, true, FUSE_NONE);
    if (!test_failed_) /* both broadcast: [2,1,4,5] x [3,5,6] */
        run_matmul(4, (int64_t[]){ 2, 1, 4, 5 }, 3, (int64_t[]){ 3, 5, 6 }, false, FUSE_NONE);
    if (!test_failed_) /* A broadcast over B's batch */
        run_matmul(2, (int64_t[]){ 4, 5 }, 3, (int64_t[]){ 3, 5, 6 }, false, FUSE_NONE);
}

static void test_matmul_1d(void)
{
    run_matmul(1, (int64_t[]){ 5 }, 2, (int64_t[]){ 5, 6 }, false, FUSE_NONE);
    if (!test_failed_)
        run_matmul(3, (int64_t[]){ 2, 4, 5 }, 1, (int64_t[]){ 5 }, false, FUSE_NONE);
    if (!test_failed_)
        run_matmul(1, (int64_t[]){ 5 }, 1, (int64_t[]){ 5 }, true, FUSE_NONE);
    if (!test_failed_)
        run_matmul(1, (int64_t[]){ 5 }, 3, (int64_t[]){ 3, 5, 2 }, false, FUSE_NONE);
}

static void test_matmul_fused_sum_clip(void)
{
    run_matmul(3, (int64_t[]){ 2, 8, 16 }, 2, (int64_t[]){ 16, 8 }, true, FUSE_SUM_CLIP);
}

/* Both ends of hard-swish (x < -3: 0, x > 3: x) need |x| > 3: K = 64. */
static void test_matmul_fused_hardswish_scale_shift(void)
{
    run_matmul(2, (int64_t[]){ 6, 64 }, 2, (int64_t[]){ 64, 40 }, true, FUSE_HSWISH_AFFINE);
}

static void test_matmul_declines(void)
{
    kt t;
    kt_init(&t, "MatMul", 13);
    kt_input(&t, INFD_DTYPE_INT32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT32, 2, (int64_t[]){ 3, 4 }, NULL);
    kt_output(&t, INFD_DTYPE_INT32, 2, (int64_t[]){ 2, 4 });
    DT_DECLINES(&t, "FP32 only");
    kt_fini(&t);
}

TEST_MAIN(test_gemm_cases, test_gemm_runtime_c_beta_declined, test_matmul_2d_and_const_b,
          test_matmul_batched_broadcast, test_matmul_1d, test_matmul_fused_sum_clip,
          test_matmul_fused_hardswish_scale_shift, test_matmul_declines)
