/*
 * test_cuda_seq.c - the CUDA kernels of cuda_seq.c (what speech encoders
 * and their LSTM predictors need: comparisons, logic, Mod, Where, Cast,
 * integer arithmetic, LayerNormalization, Gather, Split, Expand, LSTM, and
 * the SegmentArgMax of infd_plan_options.argmax)
 * against the CPU backend on the same random inputs, every output
 * compared: FP32 within |cuda - cpu| <= 1e-4 * (1 + |cpu|), everything else
 * bit for bit. Each case checks which kernel ran.
 *
 * Without a GPU (CI), or in a build without CUDA, the binary prints why and
 * exits 77, which ctest reports as skipped.
 */
#include "infd/engine.h"
#include "kernel_test.h"
#ifdef INFD_HAVE_CUDA
#include "cuda_test.h"
#endif
#include "test.h"

#define SKIP_CODE 77

#ifdef INFD_HAVE_CUDA

static const infd_backend_ops *cuda = &infd_cuda_backend;
static char last_kernel[64];
static char fail_msg[1024];

static size_t numel_of(kt *t, int32_t v)
{
    const infd_ir_value *val = &t->g->values[v];
    size_t n = 1;
    for (int32_t d = 0; d < val->shape.rank; d++)
        n *= (size_t)val->shape.dims[d].value;
    return n;
}

/* Runs the node on both backends and compares every output; false with
 * the reason in fail_msg. */
static bool check(kt *t, const void *const *inputs, const char *kernel)
{
    infd_error err = { 0 };
    int32_t n_out = t->node.n_outputs;
    void *ref[KT_MAX_IO] = { 0 }, *got[KT_MAX_IO] = { 0 };
    bool ok = false;
    fail_msg[0] = '\0';
    for (int32_t o = 0; o < n_out; o++) {
        size_t nb = ct_value_bytes(t, t->outs[o]);
        ref[o] = calloc(1, nb + 8);
        got[o] = calloc(1, nb + 8);
    }
    if (kt_run(t, inputs, ref, &err) != INFD_STATUS_OK) {
        snprintf(fail_msg, sizeof(fail_msg), "%s: CPU reference failed: %s", t->node.op_type,
                 err.msg);
        goto out;
    }
    if (ct_run(t, INFD_PRECISION_FP32, true, inputs, got, last_kernel, sizeof(last_kernel), &err) !=
        INFD_STATUS_OK) {
        snprintf(fail_msg, sizeof(fail_msg), "%s: CUDA failed: %s", t->node.op_type, err.msg);
        goto out;
    }
    if (kernel && strncmp(last_kernel, kernel, strlen(kernel)) != 0) {
        snprintf(fail_msg, sizeof(fail_msg), "%s: ran kernel '%s', expected '%s'", t->node.op_type,
                 last_kernel, kernel);
        goto out;
    }
    for (int32_t o = 0; o < n_out; o++) {
        const infd_ir_value *y = &t->g->values[t->outs[o]];
        size_t n = numel_of(t, t->outs[o]), es = infd_dtype_size(y->dtype);
        for (size_t i = 0; i < n; i++) {
            if (y->dtype == INFD_DTYPE_FP32) {
                double r = ((const float *)ref[o])[i], g = ((const float *)got[o])[i];
                if (!((isnan(r) && isnan(g)) || fabs(g - r) <= 1e-4 * (1.0 + fabs(r)))) {
                    snprintf(fail_msg, sizeof(fail_msg),
                             "%s: output %d element %zu of %zu: cuda %.7g vs cpu %.7g",
                             t->node.op_type, (int)o, i, n, g, r);
                    goto out;
                }
            } else if (memcmp((const char *)ref[o] + i * es, (const char *)got[o] + i * es, es)) {
                long long r = 0, g = 0;
                memcpy(&r, (const char *)ref[o] + i * es, es < 8 ? es : 8);
                memcpy(&g, (const char *)got[o] + i * es, es < 8 ? es : 8);
                snprintf(fail_msg, sizeof(fail_msg),
                         "%s: output %d element %zu of %zu differs: cuda %lld vs cpu %lld",
                         t->node.op_type, (int)o, i, n, g, r);
                goto out;
            }
        }
    }
    ok = true;
out:
    for (int32_t o = 0; o < n_out; o++) {
        free(ref[o]);
        free(got[o]);
    }
    return ok;
}

#define CHECK_OR_FAIL(ok)               \
    do {                                \
        if (!(ok))                      \
            TEST_FAIL_("%s", fail_msg); \
    } while (0)

static void fill_i64(int64_t *p, size_t n, uint32_t seed, int64_t lo, int64_t hi)
{
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = lo + (int64_t)((s >> 8) % (uint32_t)(hi - lo + 1));
    }
}

static void fill_bool(uint8_t *p, size_t n, uint32_t seed)
{
    int64_t v[256];
    for (size_t i = 0; i < n; i += 256) {
        size_t k = n - i < 256 ? n - i : 256;
        fill_i64(v, k, seed + (uint32_t)i, 0, 1);
        for (size_t j = 0; j < k; j++)
            p[i + j] = (uint8_t)v[j];
    }
}

/* A speech encoder's length mask: Less(arange [1, T] int64, lengths [B, 1])
 * and the rest of the comparisons, broadcast both ways. */
static void test_compare_int64_broadcast(void)
{
    const char *ops[] = { "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual" };
    int64_t a[1 * 7], b[3 * 1];
    fill_i64(a, 7, 1, -3, 5);
    fill_i64(b, 3, 2, -3, 5);
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        kt t;
        kt_init(&t, ops[i], 16);
        kt_input(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 1, 7 }, NULL);
        kt_input(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 3, 1 }, NULL);
        kt_output(&t, INFD_DTYPE_BOOL, 2, (int64_t[]){ 3, 7 });
        CHECK_OR_FAIL(check(&t, (const void *[]){ a, b }, "cuda:seq_eltwise"));
        kt_fini(&t);
    }
    float x[24], y[4];
    ct_fill(x, 24, 3, -1, 1);
    ct_fill(y, 4, 4, -1, 1);
    kt t;
    kt_init(&t, "Less", 16);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 3, 4 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 1, (int64_t[]){ 4 }, NULL);
    kt_output(&t, INFD_DTYPE_BOOL, 3, (int64_t[]){ 2, 3, 4 });
    CHECK_OR_FAIL(check(&t, (const void *[]){ x, y }, "cuda:seq_eltwise"));
    kt_fini(&t);
}

static void test_logic_and_not(void)
{
    const char *ops[] = { "And", "Or", "Xor" };
    uint8_t a[4 * 5], b[5];
    fill_bool(a, 20, 5);
    fill_bool(b, 5, 6);
    for (size_t i = 0; i < 3; i++) {
        kt t;
        kt_init(&t, ops[i], 16);
        kt_input(&t, INFD_DTYPE_BOOL, 2, (int64_t[]){ 4, 5 }, NULL);
        kt_input(&t, INFD_DTYPE_BOOL, 1, (int64_t[]){ 5 }, NULL);
        kt_output(&t, INFD_DTYPE_BOOL, 2, (int64_t[]){ 4, 5 });
        CHECK_OR_FAIL(check(&t, (const void *[]){ a, b }, "cuda:seq_eltwise"));
        kt_fini(&t);
    }
    kt t;
    kt_init(&t, "Not", 16);
    kt_input(&t, INFD_DTYPE_BOOL, 2, (int64_t[]){ 4, 5 }, NULL);
    kt_output(&t, INFD_DTYPE_BOOL, 2, (int64_t[]){ 4, 5 });
    CHECK_OR_FAIL(check(&t, (const void *[]){ a }, "cuda:seq_eltwise"));
    kt_fini(&t);
}

/* Mod with fmod 0 (the divisor's sign), negative operands, a zero divisor;
 * and integer Add, Sub, Mul, Div (truncating). */
static void test_integer_arithmetic_and_mod(void)
{
    const char *ops[] = { "Mod", "Add", "Sub", "Mul", "Div" };
    int64_t a[6 * 4], b[4] = { 3, -3, 0, 7 };
    fill_i64(a, 24, 7, -20, 20);
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        for (int wide = 0; wide < 2; wide++) {
            infd_dtype dt = wide ? INFD_DTYPE_INT64 : INFD_DTYPE_INT32;
            int32_t a32[24], b32[4];
            for (int k = 0; k < 24; k++)
                a32[k] = (int32_t)a[k];
            for (int k = 0; k < 4; k++)
                b32[k] = (int32_t)b[k];
            kt t;
            kt_init(&t, ops[i], 16);
            kt_input(&t, dt, 2, (int64_t[]){ 6, 4 }, NULL);
            kt_input(&t, dt, 1, (int64_t[]){ 4 }, NULL);
            kt_output(&t, dt, 2, (int64_t[]){ 6, 4 });
            CHECK_OR_FAIL(check(&t, wide ? (const void *[]){ a, b } : (const void *[]){ a32, b32 },
                                "cuda:seq_eltwise"));
            kt_fini(&t);
        }
    }
}

/* Clip of int64 (a cache length clamped to its size): max only, both. */
static void test_clip_int64(void)
{
    int64_t x[10], lo = -2, hi = 8;
    fill_i64(x, 10, 15, -6, 12);
    for (int both = 0; both < 2; both++) {
        kt t;
        kt_init(&t, "Clip", 13);
        kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 10 }, NULL);
        if (both)
            kt_input(&t, INFD_DTYPE_INT64, 0, NULL, &lo);
        else
            kt_input_omitted(&t);
        kt_input(&t, INFD_DTYPE_INT64, 0, NULL, &hi);
        kt_output(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 10 });
        CHECK_OR_FAIL(check(&t, (const void *[]){ x, &lo, &hi }, "cuda:seq_eltwise"));
        kt_fini(&t);
    }
}

/* Where(mask [B, 1, T], scores [B, H, T], -10000 as a constant scalar). */
static void test_where_broadcast(void)
{
    uint8_t c[2 * 1 * 6];
    float x[2 * 3 * 6], y = -10000.0f;
    fill_bool(c, 12, 8);
    ct_fill(x, 36, 9, -2, 2);
    kt t;
    kt_init(&t, "Where", 16);
    kt_input(&t, INFD_DTYPE_BOOL, 3, (int64_t[]){ 2, 1, 6 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 3, 6 }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 0, NULL, &y);
    kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 3, 6 });
    CHECK_OR_FAIL(check(&t, (const void *[]){ c, x, &y }, "cuda:seq_eltwise"));
    kt_fini(&t);
    int64_t xi[12], yi[12];
    fill_i64(xi, 12, 10, -100, 100);
    fill_i64(yi, 12, 11, -100, 100);
    kt_init(&t, "Where", 16);
    kt_input(&t, INFD_DTYPE_BOOL, 3, (int64_t[]){ 2, 1, 6 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 3, (int64_t[]){ 2, 1, 6 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 3, (int64_t[]){ 2, 1, 6 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 3, (int64_t[]){ 2, 1, 6 });
    CHECK_OR_FAIL(check(&t, (const void *[]){ c, xi, yi }, "cuda:seq_eltwise"));
    kt_fini(&t);
}

static void test_cast(void)
{
    static const struct {
        infd_dtype from, to;
    } pairs[] = {
        { INFD_DTYPE_INT64, INFD_DTYPE_FP32 }, { INFD_DTYPE_FP32, INFD_DTYPE_INT64 },
        { INFD_DTYPE_BOOL, INFD_DTYPE_INT64 }, { INFD_DTYPE_INT64, INFD_DTYPE_BOOL },
        { INFD_DTYPE_BOOL, INFD_DTYPE_FP32 },  { INFD_DTYPE_INT64, INFD_DTYPE_INT32 },
        { INFD_DTYPE_FP32, INFD_DTYPE_BOOL },
    };
    union {
        int64_t i[16];
        float f[16];
        uint8_t b[16];
    } x;
    for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++) {
        memset(&x, 0, sizeof(x));
        if (pairs[p].from == INFD_DTYPE_INT64)
            fill_i64(x.i, 16, 12, -50, 50);
        else if (pairs[p].from == INFD_DTYPE_FP32)
            ct_fill(x.f, 16, 13, -5, 5);
        else
            fill_bool(x.b, 16, 14);
        if (pairs[p].from == INFD_DTYPE_FP32)
            x.f[3] = 0.0f;
        kt t;
        kt_init(&t, "Cast", 16);
        kt_input(&t, pairs[p].from, 2, (int64_t[]){ 4, 4 }, NULL);
        kt_output(&t, pairs[p].to, 2, (int64_t[]){ 4, 4 });
        kt_attr_int(&t, "to",
                    pairs[p].to == INFD_DTYPE_FP32    ? 1
                    : pairs[p].to == INFD_DTYPE_INT64 ? 7
                    : pairs[p].to == INFD_DTYPE_INT32 ? 6
                                                      : 9);
        CHECK_OR_FAIL(check(&t, (const void *[]){ &x }, "cuda:seq_eltwise"));
        kt_fini(&t);
    }
}

/* A conformer's LayerNorm: [B, T, D] over D, with and without bias, and
 * over two trailing axes. */
static void test_layernorm(void)
{
    for (int c = 0; c < 3; c++) {
        int64_t dims[3] = { 2, 9, c == 1 ? 1024 : 64 };
        int64_t len = c == 2 ? dims[1] * dims[2] : dims[2];
        size_t n = (size_t)(dims[0] * dims[1] * dims[2]);
        float *x = malloc(n * 4), *scale = malloc((size_t)len * 4), *bias = malloc((size_t)len * 4);
        ct_fill(x, n, 20 + (uint32_t)c, -3, 5);
        ct_fill(scale, (size_t)len, 21, 0.5f, 1.5f);
        ct_fill(bias, (size_t)len, 22, -1, 1);
        kt t;
        kt_init(&t, "LayerNormalization", 17);
        kt_input(&t, INFD_DTYPE_FP32, 3, dims, NULL);
        if (c == 2)
            kt_input(&t, INFD_DTYPE_FP32, 2, dims + 1, scale);
        else
            kt_input(&t, INFD_DTYPE_FP32, 1, dims + 2, scale);
        if (c != 1) {
            if (c == 2)
                kt_input(&t, INFD_DTYPE_FP32, 2, dims + 1, bias);
            else
                kt_input(&t, INFD_DTYPE_FP32, 1, dims + 2, bias);
        }
        kt_output(&t, INFD_DTYPE_FP32, 3, dims);
        kt_attr_int(&t, "axis", c == 2 ? 1 : -1);
        kt_attr_float(&t, "epsilon", 1e-5f);
        CHECK_OR_FAIL(check(&t, (const void *[]){ x, scale, bias }, "cuda:layernorm"));
        kt_fini(&t);
        free(x);
        free(scale);
        free(bias);
    }
}

static void test_gather(void)
{
    float x[3 * 5 * 4];
    int64_t idx[2 * 3] = { 0, 4, -1, 2, -5, 3 };
    ct_fill(x, 60, 30, -1, 1);
    kt t;
    kt_init(&t, "Gather", 13);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 3, 5, 4 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 2, 3 }, NULL);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ 3, 2, 3, 4 });
    kt_attr_int(&t, "axis", 1);
    CHECK_OR_FAIL(check(&t, (const void *[]){ x, idx }, "cuda:gather"));
    kt_fini(&t);
    int64_t table[10 * 2], tok[3] = { 9, 0, 4 };
    fill_i64(table, 20, 31, -9, 9);
    kt_init(&t, "Gather", 13);
    kt_input(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 10, 2 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ 3, 2 });
    CHECK_OR_FAIL(check(&t, (const void *[]){ table, tok }, "cuda:gather"));
    kt_fini(&t);
}

/* SegmentArgMax (infd_plan_options.argmax): a transducer joint's 8198
 * logits per row, the tokens [0, 8193) and the durations [8193, 8198), in
 * rows of distinct values, of ties (values on a coarse grid: the first
 * index wins) and with NaNs (never a winner). */
static void test_segment_argmax(void)
{
    enum { ROWS = 4, LEN = 8198 };
    static float x[ROWS * LEN];
    ct_fill(x, ROWS * LEN, 41, -4, 4);
    for (int i = LEN; i < 2 * LEN; i++) /* row 1: ties */
        x[i] = (float)(int)(x[i] * 2) / 2;
    for (int i = 2 * LEN; i < 3 * LEN; i += 7) /* row 2: NaNs */
        x[i] = NAN;
    x[2 * LEN + 8193 + 4] = NAN;
    kt t;
    kt_init(&t, "SegmentArgMax", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ ROWS, LEN }, NULL);
    kt_output(&t, INFD_DTYPE_INT64, 2, (int64_t[]){ ROWS, 2 });
    kt_attr_ints(&t, "starts", 2, (int64_t[]){ 0, 8193 });
    kt_attr_ints(&t, "ends", 2, (int64_t[]){ 8193, 8198 });
    CHECK_OR_FAIL(check(&t, (const void *[]){ x }, "cuda:segment_argmax"));
    kt_fini(&t);
}

/* Split [2, 12, 3] into 5 + 4 + 3 on axis 1 (sizes as an input, opset 13);
 * Expand [3, 1] to [2, 3, 4]. */
static void test_split_and_expand(void)
{
    float x[2 * 12 * 3], e[3];
    int64_t sizes[3] = { 5, 4, 3 };
    ct_fill(x, 72, 40, -1, 1);
    ct_fill(e, 3, 41, -1, 1);
    kt t;
    kt_init(&t, "Split", 13);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 12, 3 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 }, sizes);
    kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 5, 3 });
    kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 4, 3 });
    kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ 2, 3, 3 });
    kt_attr_int(&t, "axis", 1);
    CHECK_OR_FAIL(check(&t, (const void *[]){ x, sizes }, "cuda:split"));
    kt_fini(&t);
    int64_t shape[3] = { 2, 3, 4 };
    kt_init(&t, "Expand", 13);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ 3, 1 }, NULL);
    kt_input(&t, INFD_DTYPE_INT64, 1, (int64_t[]){ 3 }, shape);
    kt_output(&t, INFD_DTYPE_FP32, 3, shape);
    CHECK_OR_FAIL(check(&t, (const void *[]){ e, shape }, "cuda:expand"));
    kt_fini(&t);
}

/* LSTM [seq, batch, input] -> Y, Y_h, Y_c: the predictor's one step with
 * initial states, and longer sequences forward, reverse and bidirectional
 * with sequence_lens and peepholes. */
static void lstm_case(const char *direction, int64_t seq, int64_t batch, int64_t in, int64_t hid,
                      bool lens, bool peep)
{
    int64_t dirs = strcmp(direction, "bidirectional") == 0 ? 2 : 1;
    size_t nx = (size_t)(seq * batch * in), nw = (size_t)(dirs * 4 * hid * in);
    size_t nr = (size_t)(dirs * 4 * hid * hid), nb = (size_t)(dirs * 8 * hid);
    size_t nh = (size_t)(dirs * batch * hid), np = (size_t)(dirs * 3 * hid);
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *r = malloc(nr * 4), *b = malloc(nb * 4);
    float *h0 = malloc(nh * 4), *c0 = malloc(nh * 4), *p = malloc(np * 4);
    int32_t sl[64]; /* batch <= 64 */
    ct_fill(x, nx, 50, -1, 1);
    ct_fill(w, nw, 51, -0.4f, 0.4f);
    ct_fill(r, nr, 52, -0.4f, 0.4f);
    ct_fill(b, nb, 53, -0.2f, 0.2f);
    ct_fill(h0, nh, 54, -0.5f, 0.5f);
    ct_fill(c0, nh, 55, -0.5f, 0.5f);
    ct_fill(p, np, 56, -0.3f, 0.3f);
    for (int64_t i = 0; i < batch; i++)
        sl[i] = (int32_t)(lens ? (i * 3 + 1) % seq + 1 : seq);
    kt t;
    kt_init(&t, "LSTM", 14);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ seq, batch, in }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ dirs, 4 * hid, in }, w);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ dirs, 4 * hid, hid }, r);
    kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ dirs, 8 * hid }, b);
    if (lens)
        kt_input(&t, INFD_DTYPE_INT32, 1, (int64_t[]){ batch }, NULL);
    else
        kt_input_omitted(&t);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ dirs, batch, hid }, NULL);
    kt_input(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ dirs, batch, hid }, NULL);
    if (peep)
        kt_input(&t, INFD_DTYPE_FP32, 2, (int64_t[]){ dirs, 3 * hid }, p);
    kt_output(&t, INFD_DTYPE_FP32, 4, (int64_t[]){ seq, dirs, batch, hid });
    kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ dirs, batch, hid });
    kt_output(&t, INFD_DTYPE_FP32, 3, (int64_t[]){ dirs, batch, hid });
    kt_attr_int(&t, "hidden_size", hid);
    kt_attr_string(&t, "direction", direction);
    CHECK_OR_FAIL(
        check(&t, (const void *[]){ x, w, r, b, lens ? sl : NULL, h0, c0, p }, "cuda:lstm"));
    kt_fini(&t);
    free(x);
    free(w);
    free(r);
    free(b);
    free(h0);
    free(c0);
    free(p);
}

static void test_lstm(void)
{
    lstm_case("forward", 1, 1, 64, 64, false, false); /* a predictor step */
    lstm_case("forward", 1, 4, 40, 80, false, false);
    lstm_case("forward", 1, 21, 40, 48, false, false); /* batch rows in tiles of 8, one partial */
    lstm_case("forward", 3, 64, 33, 40, true, true);   /* 64 streams decoded in lockstep */
    lstm_case("forward", 7, 3, 16, 24, true, true);
    lstm_case("reverse", 6, 2, 16, 24, true, false);
    lstm_case("bidirectional", 5, 3, 8, 12, true, true);
}

int main(int argc, char **argv)
{
    infd_error err = { 0 };
    if (cuda->available(&err) != INFD_STATUS_OK) {
        printf("SKIP: CUDA kernel tests: %s\n", err.msg);
        return SKIP_CODE;
    }
    static const test_case_ cases[] = {
        { "test_compare_int64_broadcast", test_compare_int64_broadcast },
        { "test_logic_and_not", test_logic_and_not },
        { "test_integer_arithmetic_and_mod", test_integer_arithmetic_and_mod },
        { "test_clip_int64", test_clip_int64 },
        { "test_where_broadcast", test_where_broadcast },
        { "test_cast", test_cast },
        { "test_layernorm", test_layernorm },
        { "test_gather", test_gather },
        { "test_split_and_expand", test_split_and_expand },
        { "test_lstm", test_lstm },
        { "test_segment_argmax", test_segment_argmax },
    };
    return test_run_(cases, sizeof(cases) / sizeof(cases[0]), argc, argv);
}

#else

int main(void)
{
    (void)test_run_;
    printf("SKIP: CUDA kernel tests: this build has no CUDA backend\n");
    return SKIP_CODE;
}

#endif
