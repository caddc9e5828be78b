/*
 * test_ref_movement.c - the ref data movement kernels: copies, Transpose,
 * Slice, Expand, Tile, Concat, Split, Gather, against hand-worked values and
 * naive index math on random data.
 */
#include <stdint.h>

#include "ref_test.h"
#include "test.h"

static int64_t numel_of(int32_t rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int32_t i = 0; i < rank; i++)
        n *= dims[i];
    return n;
}

static void test_reshape_copies_int64(void)
{
    int64_t x[6] = { 1, -2, 3, INT64_MAX, INT64_MIN, 6 }, y[6] = { 0 };
    int64_t shape[2] = { 3, 2 };
    kt t;
    kt_init(&t, "Reshape", 14);
    kt_input(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 2 }, shape);
    kt_output(&t, INFD_DTYPE_INT64, 2, shape);
    ASSERT_RUN_OK(&t, ((const void *[]){ x, shape }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, x, 6);
}

static void test_squeeze_unsqueeze_flatten_identity(void)
{
    const char *ops[] = { "Squeeze", "Unsqueeze", "Flatten", "Identity" };
    float x[12], y[12];
    rt_fill_f32(x, 12);
    for (int i = 0; i < 4; i++) {
        kt t;
        memset(y, 0, sizeof(y));
        kt_init(&t, ops[i], 13);
        kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 1, 3, 4 }, NULL);
        kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 4 });
        ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
        kt_fini(&t);
        ASSERT_TRUE(memcmp(x, y, sizeof(x)) == 0);
    }
    kt t;
    infd_error why = { 0 };
    kt_init(&t, "Reshape", 14);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 12 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 11 });
    ASSERT_FALSE(rt_supported(&t, &why));
    kt_fini(&t);
    ASSERT_STR_HAS(why.msg, "elements");
}

static void test_dropout_mask(void)
{
    float x[4] = { 1, 2, 3, 4 }, y[4];
    uint8_t m[4] = { 0 };
    kt t;
    kt_init(&t, "Dropout", 13);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 });
    kt_output(&t, INFD_DTYPE_BOOL, 1, (int64_t[]){ 4 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y, m }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, x, 4, 0);
    ASSERT_EQ_INT(m[0] + m[1] + m[2] + m[3], 4);
}

/* Naive transpose of element size es. */
static void naive_transpose(const char *in, char *out, int32_t rank, const int64_t *dims,
                            const int64_t *perm, size_t es)
{
    int64_t st[8], s = 1, n = numel_of(rank, dims);
    for (int32_t d = rank - 1; d >= 0; d--) {
        st[d] = s;
        s *= dims[d];
    }
    for (int64_t o = 0; o < n; o++) {
        int64_t rem = o, off = 0;
        for (int32_t d = rank - 1; d >= 0; d--) {
            int64_t od = dims[perm[d]];
            off += (rem % od) * st[perm[d]];
            rem /= od;
        }
        memcpy(out + (size_t)o * es, in + (size_t)off * es, es);
    }
}

static void run_transpose(int32_t rank, const int64_t *dims, const int64_t *perm, infd_dtype dt)
{
    size_t es = infd_dtype_size(dt);
    int64_t n = numel_of(rank, dims), odims[8];
    for (int32_t d = 0; d < rank; d++)
        odims[d] = dims[perm[d]];
    char *x = malloc((size_t)n * es + 1), *y = malloc((size_t)n * es + 1),
         *want = malloc((size_t)n * es + 1);
    for (int64_t i = 0; i < n * (int64_t)es; i++)
        x[i] = (char)rt_rand();
    naive_transpose(x, want, rank, dims, perm, es);
    kt t;
    kt_init(&t, "Transpose", 13);
    kt_input(&t, dt, rank, dims, NULL);
    kt_output(&t, dt, rank, odims);
    kt_attr_ints(&t, "perm", rank, perm);
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
    bool same = memcmp(y, want, (size_t)n * es) == 0;
    free(x);
    free(y);
    free(want);
    ASSERT_TRUE(same);
}

static void test_transpose_random(void)
{
    const infd_dtype dts[] = { INFD_DTYPE_UINT8, INFD_DTYPE_FP16, INFD_DTYPE_FP32,
                               INFD_DTYPE_INT64 };
    for (int iter = 0; iter < 60; iter++) {
        int32_t rank = 1 + (int32_t)(rt_rand() % 6);
        int64_t dims[8], perm[8];
        for (int32_t d = 0; d < rank; d++) {
            dims[d] = 1 + (int64_t)(rt_rand() % 5);
            perm[d] = d;
        }
        for (int32_t d = rank - 1; d > 0; d--) {
            int32_t j = (int32_t)(rt_rand() % (uint64_t)(d + 1));
            int64_t tmp = perm[d];
            perm[d] = perm[j];
            perm[j] = tmp;
        }
        run_transpose(rank, dims, perm, dts[iter % 4]);
        if (test_failed_)
            return;
    }
}

static void test_transpose_2d_blocked_and_large(void)
{
    /* Big enough for the pool and the blocked 2-D path, with ragged
     * blocks. */
    run_transpose(2, (int64_t[]){ 301, 203 }, (int64_t[]){ 1, 0 }, INFD_DTYPE_FP32);
    run_transpose(3, (int64_t[]){ 3, 67, 130 }, (int64_t[]){ 0, 2, 1 }, INFD_DTYPE_FP16);
    run_transpose(4, (int64_t[]){ 2, 40, 3, 50 }, (int64_t[]){ 0, 3, 2, 1 }, INFD_DTYPE_INT64);
    /* NCHW -> NHWC and back. */
    run_transpose(4, (int64_t[]){ 2, 16, 24, 24 }, (int64_t[]){ 0, 2, 3, 1 }, INFD_DTYPE_FP32);
    run_transpose(4, (int64_t[]){ 2, 24, 24, 16 }, (int64_t[]){ 0, 3, 1, 2 }, INFD_DTYPE_UINT8);
    /* Default perm reverses. */
    float x[6] = { 1, 2, 3, 4, 5, 6 }, y[6], want[6] = { 1, 4, 2, 5, 3, 6 };
    kt t;
    kt_init(&t, "Transpose", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 2 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, want, 6, 0);
}

/* Slice of arange(n) along one axis (opset 13 inputs). */
static void slice_1d(int64_t n, int64_t start, int64_t end, int64_t step, int64_t n_out,
                     const int32_t *want)
{
    int32_t x[64], y[64];
    for (int64_t i = 0; i < n; i++)
        x[i] = (int32_t)i;
    kt t;
    kt_init(&t, "Slice", 13);
    kt_input(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ n }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, &start);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, &end);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, (int64_t[]){ 0 });
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, &step);
    kt_output(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ n_out });
    ASSERT_RUN_OK(&t, ((const void *[]){ x, &start, &end, (int64_t[]){ 0 }, &step }),
                  ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, want, n_out);
}

static void test_slice_steps_and_clamping(void)
{
    slice_1d(10, -1, INT64_MIN, -1, 10, (int32_t[]){ 9, 8, 7, 6, 5, 4, 3, 2, 1, 0 });
    if (test_failed_)
        return;
    slice_1d(10, 8, 1, -3, 3, (int32_t[]){ 8, 5, 2 });
    if (test_failed_)
        return;
    slice_1d(10, 2, 1000, 3, 3, (int32_t[]){ 2, 5, 8 });
    if (test_failed_)
        return;
    slice_1d(10, -100, 3, 1, 3, (int32_t[]){ 0, 1, 2 });
    if (test_failed_)
        return;
    slice_1d(10, 100, -100, -4, 3, (int32_t[]){ 9, 5, 1 });
    if (test_failed_)
        return;
    slice_1d(10, 1, INT64_MAX, 1, 9, (int32_t[]){ 1, 2, 3, 4, 5, 6, 7, 8, 9 });
    if (test_failed_)
        return;
    slice_1d(10, 5, 2, 1, 0, (int32_t[]){ 0 });
    if (test_failed_)
        return;
    /* Wrong output shape is declined with a reason. */
    kt t;
    infd_error why = { 0 };
    int64_t s = 0, e = 4;
    kt_init(&t, "Slice", 13);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 10 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, &s);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, &e);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 5 });
    ASSERT_FALSE(rt_supported(&t, &why));
    kt_fini(&t);
    ASSERT_STR_HAS(why.msg, "slice");
}

static void test_slice_2d_negative_axes_and_opset9(void)
{
    float x[12], y[4];
    for (int i = 0; i < 12; i++)
        x[i] = (float)i; /* 3 x 4 */
    int64_t starts[2] = { 1, 0 }, ends[2] = { INT64_MAX, 2 }, axes[2] = { -1, 0 },
            steps[2] = { 2, 1 };
    kt t;
    kt_init(&t, "Slice", 11);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 4 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 2 }, starts);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 2 }, ends);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 2 }, axes);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 2 }, steps);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 2 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x, starts, ends, axes, steps }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, ((float[]){ 1, 3, 5, 7 }), 4, 0);

    /* Opset 9: attributes, no steps. Rows 1.., cols -3..-1. */
    float y9[4];
    kt_init(&t, "Slice", 9);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 4 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 2 });
    kt_attr_ints(&t, "starts", 2, (int64_t[]){ 1, -3 });
    kt_attr_ints(&t, "ends", 2, (int64_t[]){ 1000, -1 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y9 }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y9, ((float[]){ 5, 6, 9, 10 }), 4, 0);

    /* Non-constant starts are declined. */
    infd_error why = { 0 };
    kt_init(&t, "Slice", 13);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 10 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 1 }, ends);
    kt_output(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 5 });
    ASSERT_FALSE(rt_supported(&t, &why));
    kt_fini(&t);
    ASSERT_STR_HAS(why.msg, "constants");
}

static void test_slice_random_vs_naive(void)
{
    for (int iter = 0; iter < 40; iter++) {
        int64_t dims[3], starts[3], ends[3], steps[3], axes[3] = { 0, 1, 2 }, odims[3];
        int64_t n = 1;
        for (int d = 0; d < 3; d++) {
            dims[d] = 1 + (int64_t)(rt_rand() % 7);
            n *= dims[d];
            steps[d] = (int64_t)(rt_rand() % 3) + 1;
            if (rt_rand() & 1)
                steps[d] = -steps[d];
            starts[d] = (int64_t)(rt_rand() % 20) - 10;
            ends[d] = (int64_t)(rt_rand() % 20) - 10;
            /* Naive: walk the clamped range. */
            int64_t s = starts[d] < 0 ? starts[d] + dims[d] : starts[d];
            int64_t e = ends[d] < 0 ? ends[d] + dims[d] : ends[d];
            int64_t c = 0;
            if (steps[d] > 0) {
                s = s < 0 ? 0 : s > dims[d] ? dims[d] : s;
                e = e < 0 ? 0 : e > dims[d] ? dims[d] : e;
                for (int64_t i = s; i < e; i += steps[d])
                    c++;
            } else {
                s = s < 0 ? 0 : s > dims[d] - 1 ? dims[d] - 1 : s;
                e = e < -1 ? -1 : e > dims[d] - 1 ? dims[d] - 1 : e;
                for (int64_t i = s; i > e; i += steps[d])
                    c++;
            }
            odims[d] = c;
            starts[d] = s; /* normalised for the reference below */
        }
        int64_t on = odims[0] * odims[1] * odims[2];
        float x[343], y[343], want[343];
        rt_fill_f32(x, n);
        for (int64_t o = 0; o < on; o++) {
            int64_t i2 = o % odims[2], i1 = (o / odims[2]) % odims[1], i0 = o / odims[2] / odims[1];
            int64_t src =
                ((starts[0] + i0 * steps[0]) * dims[1] + starts[1] + i1 * steps[1]) * dims[2] +
                starts[2] + i2 * steps[2];
            want[o] = x[src];
        }
        /* Re-derive the raw starts the kernel sees: use the normalised ones,
         * which are valid inputs with the same meaning. */
        kt t;
        kt_init(&t, "Slice", 13);
        kt_input(&t, INFD_DTYPE_FP32, 3, dims, NULL);
        kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 }, starts);
        kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 }, ends);
        kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 }, axes);
        kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 }, steps);
        kt_output(&t, INFD_DTYPE_FP32, 3, odims);
        ASSERT_RUN_OK(&t, ((const void *[]){ x, starts, ends, axes, steps }), ((void *[]){ y }));
        kt_fini(&t);
        ASSERT_F32_ARRAY(y, want, on, 0);
    }
}

static void test_expand_and_tile(void)
{
    int16_t x[3] = { 1, 2, 3 }, y[24];
    kt t;
    kt_init(&t, "Expand", 13);
    kt_input(&t, INFD_DTYPE_INT16, 2, (int64_t[]){ 3, 1 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 }, (int64_t[]){ 2, 1, 4 });
    kt_output(&t, INFD_DTYPE_INT16, 3, (int64_t[]){ 2, 3, 4 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x, (int64_t[]){ 2, 1, 4 } }), ((void *[]){ y }));
    kt_fini(&t);
    for (int i = 0; i < 24; i++)
        ASSERT_EQ_INT(y[i], x[(i / 4) % 3]);

    float tx[6] = { 1, 2, 3, 4, 5, 6 }, ty[24];
    kt_init(&t, "Tile", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 2 }, (int64_t[]){ 2, 2 });
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 4, 6 });
    ASSERT_RUN_OK(&t, ((const void *[]){ tx, (int64_t[]){ 2, 2 } }), ((void *[]){ ty }));
    kt_fini(&t);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 6; c++)
            ASSERT_TRUE(ty[r * 6 + c] == tx[(r % 2) * 3 + c % 3]);
}

static void test_concat_axes_and_empty(void)
{
    int8_t a[4] = { 1, 2, 3, 4 }, b[2] = { 5, 6 }, y[6];
    kt t;
    kt_init(&t, "Concat", 13);
    kt_attr_int(&t, "axis", -1);
    kt_input(&t, INFD_DTYPE_INT8, 2, (int64_t[]){ 2, 2 }, NULL);
    kt_input(&t, INFD_DTYPE_INT8, 2, (int64_t[]){ 2, 0 }, NULL);
    kt_input(&t, INFD_DTYPE_INT8, 2, (int64_t[]){ 2, 1 }, NULL);
    kt_output(&t, INFD_DTYPE_INT8, 2, (int64_t[]){ 2, 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ a, a, b }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int8_t[]){ 1, 2, 5, 3, 4, 6 }), 6);

    /* Axis 0, large: exercises the pool. */
    enum { N = 40000 };
    float *p = malloc(sizeof(float) * N), *q = malloc(sizeof(float) * N),
          *r = malloc(sizeof(float) * 2 * N);
    rt_fill_f32(p, N);
    rt_fill_f32(q, N);
    kt_init(&t, "Concat", 4);
    kt_attr_int(&t, "axis", 0);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 100, 400 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 100, 400 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 200, 400 });
    ASSERT_RUN_OK(&t, ((const void *[]){ p, q }), ((void *[]){ r }));
    kt_fini(&t);
    bool ok = memcmp(r, p, sizeof(float) * N) == 0 && memcmp(r + N, q, sizeof(float) * N) == 0;
    free(p);
    free(q);
    free(r);
    ASSERT_TRUE(ok);
}

static void test_split(void)
{
    int64_t x[10] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 }, y0[4], y1[6];
    kt t;
    kt_init(&t, "Split", 13);
    kt_attr_int(&t, "axis", 1);
    kt_input(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 2, 5 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 2 }, (int64_t[]){ 2, 3 });
    kt_output(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 2, 2 });
    kt_output(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 2, 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x, (int64_t[]){ 2, 3 } }), ((void *[]){ y0, y1 }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y0, ((int64_t[]){ 0, 1, 5, 6 }), 4);
    ASSERT_I64_ARRAY(y1, ((int64_t[]){ 2, 3, 4, 7, 8, 9 }), 6);
}

static void test_gather(void)
{
    /* Axis 1, INT32 indices with a negative one: [2,3] x [2,2] -> [2,2,2]. */
    float x[6] = { 0, 1, 2, 10, 11, 12 }, y[8];
    int32_t idx[4] = { 0, -1, 2, 1 };
    kt t;
    kt_init(&t, "Gather", 13);
    kt_attr_int(&t, "axis", 1);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT32, 2, (int64_t[]){ 2, 2 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 2, 2 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x, idx }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(y, ((float[]){ 0, 2, 2, 1, 10, 12, 12, 11 }), 8, 0);

    /* Axis 0 with a scalar INT64 index (shape arithmetic: shape[-2]). */
    int64_t shape[4] = { 1, 3, 224, 112 }, k = -2, out = 0;
    kt_init(&t, "Gather", 13);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 0, NULL, &k);
    kt_output(&t, INFD_DTYPE_INT64, 0, NULL);
    ASSERT_RUN_OK(&t, ((const void *[]){ shape, &k }), ((void *[]){ &out }));
    kt_fini(&t);
    ASSERT_EQ_I64(out, 224);

    /* Out-of-range indices do not crash (zeros). */
    int64_t bad[2] = { 7, -9 };
    float yb[6];
    kt_init(&t, "Gather", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 2 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 2, 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ x, bad }), ((void *[]){ yb }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(yb, ((float[]){ 0, 0, 0, 0, 0, 0 }), 6, 0);
}

/* DepthToSpace in both modes and SpaceToDepth on [1, 8, 1, 2], blocksize 2,
 * against the reshape/transpose definitions worked out by hand. */
static void test_depth_space(void)
{
    float x[16], y[16], z[16];
    for (int i = 0; i < 16; i++)
        x[i] = (float)i;
    /* DCR: out[0, c, h*2+b1, w*2+b2] = x[0, (b1*2+b2)*2+c, h, w]. */
    static const float dcr[16] = { 0, 4, 1, 5, 8, 12, 9, 13, 2, 6, 3, 7, 10, 14, 11, 15 };
    /* CRD: out[0, c, h*2+b1, w*2+b2] = x[0, c*4+b1*2+b2, h, w]. */
    static const float crd[16] = { 0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15 };
    for (int m = 0; m < 2; m++) {
        kt t;
        kt_init(&t, "DepthToSpace", 13);
        kt_attr_int(&t, "blocksize", 2);
        kt_attr_string(&t, "mode", m ? "CRD" : "DCR");
        kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 8, 1, 2 }, NULL);
        kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 2, 2, 4 });
        ASSERT_RUN_OK(&t, ((const void *[]){ x }), ((void *[]){ y }));
        kt_fini(&t);
        ASSERT_F32_ARRAY(y, m ? crd : dcr, 16, 0);
    }
    /* SpaceToDepth undoes DCR. */
    kt t;
    kt_init(&t, "SpaceToDepth", 13);
    kt_attr_int(&t, "blocksize", 2);
    kt_input(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 2, 2, 4 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 1, 8, 1, 2 });
    ASSERT_RUN_OK(&t, ((const void *[]){ dcr }), ((void *[]){ z }));
    kt_fini(&t);
    ASSERT_F32_ARRAY(z, x, 16, 0);
}

static void test_gather_elements(void)
{
    /* data [3, 3] = 1..9; indices [2, 3] on axis 0 (with a negative one) and
     * [3, 2] on axis 1, INT32 indices, INT64 data. */
    int64_t d[9] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 }, y[6];
    int64_t i0[6] = { 1, 2, 0, 2, 0, -1 };
    kt t;
    kt_init(&t, "GatherElements", 13);
    kt_input(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 3, 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 2, 3 });
    ASSERT_RUN_OK(&t, ((const void *[]){ d, i0 }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 4, 8, 3, 7, 2, 9 }), 6);

    int32_t i1[6] = { 0, 0, 1, 0, 2, 1 };
    kt_init(&t, "GatherElements", 13);
    kt_attr_int(&t, "axis", 1);
    kt_input(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 3, 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT32, 2, (int64_t[]){ 3, 2 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 3, 2 });
    ASSERT_RUN_OK(&t, ((const void *[]){ d, i1 }), ((void *[]){ y }));
    kt_fini(&t);
    ASSERT_I64_ARRAY(y, ((int64_t[]){ 1, 1, 5, 4, 9, 8 }), 6);
}

TEST_MAIN(test_reshape_copies_int64, test_squeeze_unsqueeze_flatten_identity, test_dropout_mask,
          test_transpose_random, test_transpose_2d_blocked_and_large, test_slice_steps_and_clamping,
          test_slice_2d_negative_axes_and_opset9, test_slice_random_vs_naive, test_expand_and_tile,
          test_concat_axes_and_empty, test_split, test_gather, test_depth_space,
          test_gather_elements)
