/*
 * test_dnnl_binary.c - oneDNN Add/Sub/Mul/Div with numpy broadcasting:
 * same shapes, a broadcast second operand (per-channel, scalar, lower
 * rank), Add/Mul with a broadcast first operand (swapped), and the cases
 * oneDNN cannot take (declined for the reference kernel).
 */
#include "dnnl_test.h"

static float apply(const char *op, float a, float b)
{
    switch (op[0]) {
    case 'A':
        return a + b;
    case 'S':
        return a - b;
    case 'M':
        return a * b;
    default:
        return a / b;
    }
}

/* numpy broadcasting reference for ranks <= 4. */
static void ref_binary(const char *op, int ra, const int64_t *ad, const float *a, int rb,
                       const int64_t *bd, const float *b, int ry, const int64_t *yd, float *y)
{
    int64_t ea[4], eb[4], ey[4];
    for (int i = 0; i < 4; i++) {
        int ia = i - (4 - ra), ib = i - (4 - rb), iy = i - (4 - ry);
        ea[i] = ia >= 0 ? ad[ia] : 1;
        eb[i] = ib >= 0 ? bd[ib] : 1;
        ey[i] = iy >= 0 ? yd[iy] : 1;
    }
    for (int64_t i0 = 0; i0 < ey[0]; i0++)
        for (int64_t i1 = 0; i1 < ey[1]; i1++)
            for (int64_t i2 = 0; i2 < ey[2]; i2++)
                for (int64_t i3 = 0; i3 < ey[3]; i3++) {
                    int64_t idx[4] = { i0, i1, i2, i3 }, oa = 0, ob = 0, oy = 0;
                    for (int d = 0; d < 4; d++) {
                        oa = oa * ea[d] + (ea[d] == 1 ? 0 : idx[d]);
                        ob = ob * eb[d] + (eb[d] == 1 ? 0 : idx[d]);
                        oy = oy * ey[d] + idx[d];
                    }
                    y[oy] = apply(op, a[oa], b[ob]);
                }
}

static int64_t numel(int r, const int64_t *d)
{
    int64_t n = 1;
    for (int i = 0; i < r; i++)
        n *= d[i];
    return n;
}

static void binary_node(kt *t, const char *op, int ra, const int64_t *ad, int rb, const int64_t *bd,
                        int ry, const int64_t *yd)
{
    kt_init(t, op, 14);
    kt_input(t, INFD_DTYPE_FP32, ra, ad, NULL);
    kt_input(t, INFD_DTYPE_FP32, rb, bd, NULL);
    kt_output(t, INFD_DTYPE_FP32, ry, yd);
}

static void run_binary(const char *op, int ra, const int64_t *ad, int rb, const int64_t *bd, int ry,
                       const int64_t *yd)
{
    size_t ny = (size_t)numel(ry, yd);
    float *a = dt_rand((size_t)numel(ra, ad), 51), *b = dt_rand((size_t)numel(rb, bd), 52);
    float *y = calloc(ny, sizeof(float)), *want = calloc(ny, sizeof(float));
    if (op[0] == 'D')
        for (int64_t i = 0; i < numel(rb, bd); i++)
            b[i] = b[i] >= 0 ? b[i] + 0.5f : b[i] - 0.5f;
    ref_binary(op, ra, ad, a, rb, bd, b, ry, yd, want);
    kt t;
    binary_node(&t, op, ra, ad, rb, bd, ry, yd);
    DT_RUN(&t, ((const void *[]){ a, b }), ((void *[]){ y }));
    ASSERT_CLOSE(y, want, ny);
    kt_fini(&t);
    free(a);
    free(b);
    free(y);
    free(want);
}

static void test_same_shape_all_ops(void)
{
    static const char *const ops[] = { "Add", "Sub", "Mul", "Div" };
    int64_t d[3] = { 2, 3, 5 };
    for (size_t i = 0; i < INFD_ARRAY_SIZE(ops) && !test_failed_; i++)
        run_binary(ops[i], 3, d, 3, d, 3, d);
}

static void test_second_broadcasts(void)
{
    int64_t x[4] = { 2, 4, 3, 3 };
    /* per-channel [1, 4, 1, 1], trailing [3], scalar [], middle [4, 1, 1] */
    run_binary("Sub", 4, x, 4, (int64_t[]){ 1, 4, 1, 1 }, 4, x);
    if (!test_failed_)
        run_binary("Div", 4, x, 1, (int64_t[]){ 3 }, 4, x);
    if (!test_failed_)
        run_binary("Mul", 4, x, 0, NULL, 4, x);
    if (!test_failed_)
        run_binary("Add", 4, x, 3, (int64_t[]){ 4, 1, 1 }, 4, x);
}

static void test_first_broadcasts_commutative(void)
{
    int64_t x[3] = { 3, 4, 5 };
    run_binary("Add", 1, (int64_t[]){ 5 }, 3, x, 3, x);
    if (!test_failed_)
        run_binary("Mul", 3, (int64_t[]){ 3, 1, 1 }, 3, x, 3, x);
}

static void test_declined_broadcasts(void)
{
    kt t;
    int64_t x[3] = { 3, 4, 5 };
    /* Sub with a broadcast first operand. */
    binary_node(&t, "Sub", 1, (int64_t[]){ 5 }, 3, x, 3, x);
    DT_DECLINES(&t, "first operand shaped like the output");
    kt_fini(&t);
    /* Both operands broadcast: [3, 1] + [1, 4] -> [3, 4]. */
    binary_node(&t, "Add", 2, (int64_t[]){ 3, 1 }, 2, (int64_t[]){ 1, 4 }, 2, (int64_t[]){ 3, 4 });
    DT_DECLINES(&t, "first operand shaped like the output");
    kt_fini(&t);
    /* Integer dtypes. */
    kt_init(&t, "Add", 14);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 4 });
    DT_DECLINES(&t, "FP32 only");
    kt_fini(&t);
}

TEST_MAIN(test_same_shape_all_ops, test_second_broadcasts, test_first_broadcasts_commutative,
          test_declined_broadcasts)
