/*
 * test_cuda_convg.c - the cuDNN graph-API convolution (cuda_convg.h) on
 * ResNet-50 and MobileNetV2 shapes at batch 1 and 8, with the fusions none,
 * bias+relu, bias+residual+relu and bias+clip(0,6), against the legacy FP32
 * NCHW convolution (cuda_conv.h, no TF32) with the epilogue on the host.
 * Inputs are FP16-representable values in [-1, 1), weights scaled by
 * 1/sqrt(fan_in); tolerance |graph - ref| <= 2e-2 * (1 + |ref|).
 *
 * Each shape prints the chosen engine, its time and the legacy FP16
 * convolution's time on the same shape (events, 3 warm-up + 20 timed runs).
 * Also: the tuning record round trip, bogus records ignored, plans shared
 * between convolutions of one description, CUDA graph capture of run(),
 * two threads running one module on two streams.
 *
 * Without a GPU, or in a build without CUDA, it prints why and exits 77.
 * `./backends_cuda_convg test_shapes` runs one test.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/backend.h"
#include "test.h"

#define SKIP_CODE 77

#ifdef INFD_HAVE_CUDA

#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_conv.h"
#include "backends/cuda/cuda_convg.h"
#include "backends/cuda/cuda_runtime.h"

/* The infd stream object starts with its cudaStream_t
 * (cuda_runtime_impl.h); the test reads it for events and memsets. */
static cudaStream_t raw_stream(void *st)
{
    return *(cudaStream_t *)st;
}

/* ---- FP16 on the host (infd.h's conversions) ---------------------------- */

static float round_h(float f)
{
    return infd_fp16_to_fp32(infd_fp16_from_fp32(f));
}

static uint32_t rng_state = 12345;
static uint32_t data_seed; /* added to make_data's seed: other data of one shape */
static float urand(void)   /* [-1, 1) */
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 8388608.0f - 1.0f;
}

/* ---- device helpers ------------------------------------------------------- */

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void dev_free(void *p)
{
    if (p)
        cudaFree(p);
}

static void *dev_upload(const void *src, size_t bytes)
{
    void *p = dev_alloc(bytes);
    if (p && cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

/* NCHW floats -> NHWC FP16 bits. */
static uint16_t *to_nhwc_half(const float *src, int n, int c, int h, int w)
{
    uint16_t *d = malloc((size_t)n * c * h * w * 2);
    for (int b = 0; b < n; b++)
        for (int ch = 0; ch < c; ch++)
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++)
                    d[(((size_t)b * h + y) * w + x) * c + ch] =
                        infd_fp16_from_fp32(src[(((size_t)b * c + ch) * h + y) * w + x]);
    return d;
}

static double elapsed_ms(struct timespec a, struct timespec b)
{
    return (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
}

/* ---- cases ------------------------------------------------------------------ */

typedef struct shape {
    const char *name;
    int c, h, w, k, r, s, stride, pad, groups;
} shape;

enum { F_NONE, F_BIAS_RELU, F_BIAS_RES_RELU, F_BIAS_CLIP6, F_COUNT };
static const char *fusion_names[F_COUNT] = { "none", "bias+relu", "bias+res+relu",
                                             "bias+clip(0,6)" };

static const shape shapes[] = {
    { "rn50 1x1 256->64 56x56", 256, 56, 56, 64, 1, 1, 1, 0, 1 },
    { "rn50 3x3 64->64 56x56", 64, 56, 56, 64, 3, 3, 1, 1, 1 },
    { "rn50 3x3/2 128->128 56x56", 128, 56, 56, 128, 3, 3, 2, 1, 1 },
    { "rn50 1x1/2 256->512 56x56 (downsample)", 256, 56, 56, 512, 1, 1, 2, 0, 1 },
    { "rn50 7x7/2 3->64 224x224 (stem)", 3, 224, 224, 64, 7, 7, 2, 3, 1 },
    { "mbv2 dw3x3 144 56x56", 144, 56, 56, 144, 3, 3, 1, 1, 144 },
    { "rn50 1x1 1024->256 14x14", 1024, 14, 14, 256, 1, 1, 1, 0, 1 },
};

/* Host data of one case (NCHW floats, FP16-representable). */
typedef struct data {
    int n, c, h, w, k, oh, ow, r, s, stride, pad, groups;
    float *x, *wt, *b, *z, *ref; /* ref: the expected y, NCHW */
} data;

static void data_free(data *t)
{
    free(t->x);
    free(t->wt);
    free(t->b);
    free(t->z);
    free(t->ref);
}

static infd_cuda_convg_desc desc_of(const data *t, int fusion)
{
    infd_cuda_convg_desc d;
    memset(&d, 0, sizeof(d));
    d.n = t->n;
    d.c = t->c;
    d.h = t->h;
    d.w = t->w;
    d.k = t->k;
    d.oh = t->oh;
    d.ow = t->ow;
    d.r = t->r;
    d.s = t->s;
    d.pad_h = d.pad_w = t->pad;
    d.stride_h = d.stride_w = t->stride;
    d.dil_h = d.dil_w = 1;
    d.groups = t->groups;
    d.fp16 = 1;
    d.has_bias = fusion != F_NONE;
    d.has_res = fusion == F_BIAS_RES_RELU;
    d.act = fusion == F_BIAS_RELU || fusion == F_BIAS_RES_RELU ? INFD_CUDA_CONVG_ACT_RELU
            : fusion == F_BIAS_CLIP6                           ? INFD_CUDA_CONVG_ACT_CLIP
                                                               : INFD_CUDA_CONVG_ACT_NONE;
    d.act_lo = 0.0f;
    d.act_hi = 6.0f;
    return d;
}

/* Random data for shape `sh` at batch n with `c_eff` >= sh->c input
 * channels (the extra ones zero, in x and w), and the reference output:
 * the legacy FP32 NCHW convolution plus the epilogue on the host. false
 * with a message on failure. */
static bool make_data(const shape *sh, int n, int c_eff, int fusion, data *t)
{
    memset(t, 0, sizeof(*t));
    t->n = n;
    t->c = c_eff;
    t->h = sh->h;
    t->w = sh->w;
    t->k = sh->k;
    t->r = sh->r;
    t->s = sh->s;
    t->stride = sh->stride;
    t->pad = sh->pad;
    t->groups = sh->groups;
    t->oh = (sh->h + 2 * sh->pad - sh->r) / sh->stride + 1;
    t->ow = (sh->w + 2 * sh->pad - sh->s) / sh->stride + 1;
    int cg = c_eff / sh->groups, cg_real = sh->c / sh->groups;
    size_t xn = (size_t)n * c_eff * t->h * t->w, yn = (size_t)n * t->k * t->oh * t->ow;
    size_t wn = (size_t)t->k * cg * t->r * t->s;
    float scale = 1.0f / sqrtf((float)(cg_real * t->r * t->s));
    t->x = calloc(xn, 4);
    t->wt = calloc(wn, 4);
    t->b = calloc((size_t)t->k, 4);
    t->z = calloc(yn, 4);
    t->ref = calloc(yn, 4);
    if (!t->x || !t->wt || !t->b || !t->z || !t->ref)
        return false;
    rng_state = 777u + (unsigned)sh->c * 31u + (unsigned)n + data_seed;
    for (size_t i = 0; i < xn; i++) {
        int ch = (int)((i / ((size_t)t->h * t->w)) % c_eff);
        t->x[i] = ch < sh->c ? round_h(urand()) : 0.0f;
    }
    for (size_t i = 0; i < wn; i++) {
        int ci = (int)((i / ((size_t)t->r * t->s)) % cg);
        t->wt[i] = ci < cg_real ? round_h(urand() * scale) : 0.0f;
    }
    for (int i = 0; i < t->k; i++)
        t->b[i] = round_h(0.5f * urand());
    for (size_t i = 0; i < yn; i++)
        t->z[i] = round_h(urand());

    /* Legacy FP32 NCHW (no TF32) on the GPU. */
    infd_cuda_conv_desc ld;
    memset(&ld, 0, sizeof(ld));
    ld.n = n;
    ld.c = c_eff;
    ld.h = t->h;
    ld.w = t->w;
    ld.k = t->k;
    ld.oh = t->oh;
    ld.ow = t->ow;
    ld.r = t->r;
    ld.s = t->s;
    ld.pad_h = ld.pad_w = t->pad;
    ld.stride_h = ld.stride_w = t->stride;
    ld.dil_h = ld.dil_w = 1;
    ld.groups = t->groups;
    char why[512] = "", name[96];
    size_t ws_bytes = 0;
    int algo = -1;
    infd_cuda_conv *ref = infd_cuda_conv_create(&ld, t->wt, NULL, -1, &ws_bytes, &algo, name,
                                                sizeof(name), why, sizeof(why));
    if (!ref) {
        fprintf(stderr, "    reference convolution: %s\n", why);
        return false;
    }
    void *st = infd_cuda_stream_create(why, sizeof(why));
    float *dx = dev_upload(t->x, xn * 4), *dw = dev_upload(t->wt, wn * 4);
    float *dy = dev_alloc(yn * 4);
    void *ws = ws_bytes ? dev_alloc(ws_bytes) : NULL;
    bool ok = st && dx && dw && dy && (!ws_bytes || ws);
    if (ok) {
        infd_cuda_conv_run(ref, st, dx, dw, NULL, NULL, dy, ws);
        ok = infd_cuda_sync(st, why, sizeof(why)) == 0 &&
             cudaMemcpy(t->ref, dy, yn * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
    }
    if (!ok)
        fprintf(stderr, "    reference run failed: %s\n", why);
    if (st)
        infd_cuda_stream_destroy(st);
    dev_free(dx);
    dev_free(dw);
    dev_free(dy);
    dev_free(ws);
    infd_cuda_conv_destroy(ref);
    if (!ok)
        return false;
    size_t plane = (size_t)t->oh * t->ow;
    for (size_t i = 0; i < yn; i++) {
        int k = (int)((i / plane) % t->k);
        float v = t->ref[i];
        if (fusion != F_NONE)
            v += t->b[k];
        if (fusion == F_BIAS_RES_RELU)
            v += t->z[i];
        if (fusion == F_BIAS_RELU || fusion == F_BIAS_RES_RELU)
            v = v > 0.0f ? v : 0.0f;
        if (fusion == F_BIAS_CLIP6)
            v = v < 0.0f ? 0.0f : v > 6.0f ? 6.0f : v;
        t->ref[i] = v;
    }
    return true;
}

/* Device copies of one case's FP16 NHWC x and z, and y. */
typedef struct dev_case {
    void *x, *z, *y, *ws;
    size_t yn;
} dev_case;

static bool dev_case_make(const data *t, size_t ws_bytes, dev_case *dc)
{
    memset(dc, 0, sizeof(*dc));
    uint16_t *x16 = to_nhwc_half(t->x, t->n, t->c, t->h, t->w);
    uint16_t *z16 = to_nhwc_half(t->z, t->n, t->k, t->oh, t->ow);
    dc->yn = (size_t)t->n * t->k * t->oh * t->ow;
    dc->x = dev_upload(x16, (size_t)t->n * t->c * t->h * t->w * 2);
    dc->z = dev_upload(z16, dc->yn * 2);
    dc->y = dev_alloc(dc->yn * 2);
    dc->ws = ws_bytes ? dev_alloc(ws_bytes) : NULL;
    free(x16);
    free(z16);
    return dc->x && dc->z && dc->y && (!ws_bytes || dc->ws);
}

static void dev_case_free(dev_case *dc)
{
    dev_free(dc->x);
    dev_free(dc->z);
    dev_free(dc->y);
    dev_free(dc->ws);
}

/* y (device FP16 NHWC) against ref (NCHW); the number of elements out of
 * tolerance, printing the first few and the largest error. */
static size_t compare(const data *t, const void *dy, double *max_err)
{
    size_t yn = (size_t)t->n * t->k * t->oh * t->ow, bad = 0;
    uint16_t *y16 = malloc(yn * 2);
    *max_err = 0.0;
    if (!y16 || cudaMemcpy(y16, dy, yn * 2, cudaMemcpyDeviceToHost) != cudaSuccess) {
        fprintf(stderr, "    reading y back failed\n");
        free(y16);
        return yn;
    }
    for (int b = 0; b < t->n; b++)
        for (int k = 0; k < t->k; k++)
            for (int y = 0; y < t->oh; y++)
                for (int x = 0; x < t->ow; x++) {
                    float got =
                        infd_fp16_to_fp32(y16[(((size_t)b * t->oh + y) * t->ow + x) * t->k + k]);
                    float want = t->ref[(((size_t)b * t->k + k) * t->oh + y) * t->ow + x];
                    double err = fabs((double)got - want);
                    if (!(err <= 2e-2 * (1.0 + fabs(want)))) {
                        if (bad < 5)
                            fprintf(stderr, "    y[n=%d,k=%d,h=%d,w=%d] = %g, expected %g\n", b, k,
                                    y, x, got, want);
                        bad++;
                    }
                    if (err > *max_err || err != err)
                        *max_err = err;
                }
    free(y16);
    return bad;
}

/* Mean microseconds of `run` over 20 runs after 3 warm-ups on stream st. */
typedef void (*run_fn)(void *ctx, void *st);
static double time_us(run_fn fn, void *ctx, void *st)
{
    cudaEvent_t e0, e1;
    float ms = -1.0f;
    char why[256];
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < 3; i++)
        fn(ctx, st);
    cudaEventRecord(e0, raw_stream(st));
    for (int i = 0; i < 20; i++)
        fn(ctx, st);
    cudaEventRecord(e1, raw_stream(st));
    if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
        ms = -20e-3f;
    if (infd_cuda_sync(st, why, sizeof(why)) != 0) {
        fprintf(stderr, "    timed runs failed: %s\n", why);
        ms = -20e-3f;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms * 1e3 / 20.0;
}

typedef struct g_ctx {
    infd_cuda_convg *g;
    dev_case *dc;
} g_ctx;

static void g_run(void *ctx, void *st)
{
    g_ctx *c = ctx;
    infd_cuda_convg_run(c->g, st, c->dc->x, c->dc->z, c->dc->y, c->dc->ws);
}

typedef struct l_ctx {
    infd_cuda_conv *l;
    dev_case *dc;
    void *ws;
} l_ctx;

static void l_run(void *ctx, void *st)
{
    l_ctx *c = ctx;
    infd_cuda_conv_run(c->l, st, c->dc->x, NULL, NULL, c->dc->z, c->dc->y, c->ws);
}

/* The legacy FP16 NHWC convolution's time on the same case (fused as far
 * as it can: no clip), or < 0; its name in `name`. */
static double legacy_us(const data *t, int fusion, dev_case *dc, void *st, char *name,
                        size_t name_n)
{
    infd_cuda_conv_desc ld;
    memset(&ld, 0, sizeof(ld));
    ld.n = t->n;
    ld.c = t->c;
    ld.h = t->h;
    ld.w = t->w;
    ld.k = t->k;
    ld.oh = t->oh;
    ld.ow = t->ow;
    ld.r = t->r;
    ld.s = t->s;
    ld.pad_h = ld.pad_w = t->pad;
    ld.stride_h = ld.stride_w = t->stride;
    ld.dil_h = ld.dil_w = 1;
    ld.groups = t->groups;
    ld.fp16 = 1;
    ld.fused = fusion == F_NONE ? 0 : fusion == F_BIAS_CLIP6 ? 2 : 1;
    ld.has_res = fusion == F_BIAS_RES_RELU;
    char why[512] = "";
    size_t ws_bytes = 0;
    int algo = -1;
    infd_cuda_conv *l = infd_cuda_conv_create(&ld, t->wt, t->b, -1, &ws_bytes, &algo, name, name_n,
                                              why, sizeof(why));
    if (!l) {
        snprintf(name, name_n, "legacy failed: %.80s", why);
        return -1.0;
    }
    l_ctx lc = { l, dc, ws_bytes ? dev_alloc(ws_bytes) : NULL };
    double us = time_us(l_run, &lc, st);
    dev_free(lc.ws);
    infd_cuda_conv_destroy(l);
    return us;
}

typedef struct case_result {
    infd_cuda_convg *g;
    size_t ws_bytes;
    unsigned char record[INFD_CUDA_CONVG_PLAN_MAX + 256]; /* a copy: outlives g */
    size_t record_n;
    char name[96];
    double create_ms;
} case_result;

/* Creates the graph convolution for t (with record/record_n); NULL with the
 * reason printed. */
static infd_cuda_convg *create_for(const data *t, int fusion, const void *record, size_t record_n,
                                   case_result *r)
{
    infd_cuda_convg_desc d = desc_of(t, fusion);
    char why[1024] = "";
    struct timespec a, b;
    memset(r, 0, sizeof(*r));
    clock_gettime(CLOCK_MONOTONIC, &a);
    r->g = infd_cuda_convg_create(&d, t->wt, t->b, record, record_n, &r->ws_bytes, r->name,
                                  sizeof(r->name), why, sizeof(why));
    clock_gettime(CLOCK_MONOTONIC, &b);
    r->create_ms = elapsed_ms(a, b);
    if (r->g) {
        const void *rec = infd_cuda_convg_record(r->g, &r->record_n);
        if (r->record_n > sizeof(r->record)) {
            fprintf(stderr, "    a %zu-byte record: larger than the test keeps\n", r->record_n);
            r->record_n = 0;
        }
        memcpy(r->record, rec, r->record_n);
    }
    if (!r->g)
        fprintf(stderr, "    infd_cuda_convg_create (C=%d, %s): %s\n", t->c, fusion_names[fusion],
                why);
    return r->g;
}

/* One shape, batch and fusion: create (C padded to 4, then 8, when the
 * stem's C=3 has no engine), compare, time both APIs, print. */
static bool run_case(const shape *sh, int n, int fusion, void *st)
{
    static const int pads[] = { 0, 4, 8 };
    data t;
    case_result r;
    bool ok = false;
    for (size_t p = 0; p < sizeof(pads) / sizeof(pads[0]); p++) {
        int c_eff = pads[p] ? pads[p] : sh->c;
        if (pads[p] && (sh->groups != 1 || sh->c >= pads[p]))
            continue;
        if (!make_data(sh, n, c_eff, fusion, &t)) {
            data_free(&t);
            return false;
        }
        if (create_for(&t, fusion, NULL, 0, &r))
            break;
        data_free(&t);
        if (sh->groups != 1 || sh->c >= 8)
            return false;
        if (p + 1 < sizeof(pads) / sizeof(pads[0]))
            fprintf(stderr, "    retrying with C padded\n");
    }
    if (!r.g)
        return false;
    dev_case dc;
    char lname[160] = "";
    double max_err = 0.0;
    size_t bad = 0;
    if (!dev_case_make(&t, r.ws_bytes, &dc)) {
        fprintf(stderr, "    out of device memory\n");
        goto done;
    }
    {
        char why[512] = "";
        infd_cuda_convg_run(r.g, st, dc.x, dc.z, dc.y, dc.ws);
        if (infd_cuda_sync(st, why, sizeof(why)) != 0) {
            fprintf(stderr, "    run failed: %s\n", why);
            goto done;
        }
    }
    bad = compare(&t, dc.y, &max_err);
    {
        g_ctx gc = { r.g, &dc };
        double gus = time_us(g_run, &gc, st);
        double lus = legacy_us(&t, fusion, &dc, st, lname, sizeof(lname));
        printf("  %-40s n=%d C=%-4d %-15s %-38s %8.1f us  legacy %8.1f us (%s)  ws %zu  "
               "create %.0f ms  max err %.2g%s\n",
               sh->name, n, t.c, fusion_names[fusion], r.name, gus, lus, lname, r.ws_bytes,
               r.create_ms, max_err, bad ? "  MISMATCH" : "");
        fflush(stdout);
        ok = bad == 0 && gus > 0.0;
    }
done:
    dev_case_free(&dc);
    infd_cuda_convg_destroy(r.g);
    data_free(&t);
    return ok;
}

static void test_shapes(void)
{
    char why[256] = "";
    void *st = infd_cuda_stream_create(why, sizeof(why));
    int failed = 0, total = 0;
    ASSERT_TRUE(st != NULL);
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        for (int n = 1; n <= 8; n += 7)
            for (int f = 0; f < F_COUNT; f++) {
                total++;
                if (!run_case(&shapes[i], n, f, st)) {
                    failed++;
                    printf("  FAILED: %s n=%d %s\n", shapes[i].name, n, fusion_names[f]);
                }
            }
    infd_cuda_stream_destroy(st);
    printf("  %d of %d cases failed\n", failed, total);
    ASSERT_EQ_INT(failed, 0);
}

/* The case the remaining tests share: ResNet-50's 3x3 64->64 with bias,
 * residual and ReLU at batch 1. */
static bool shared_case(data *t)
{
    return make_data(&shapes[1], 1, shapes[1].c, F_BIAS_RES_RELU, t);
}

/* Bitwise equality of two device FP16 buffers. */
static bool same_bits(const void *a, const void *b, size_t n)
{
    uint16_t *ha = malloc(n * 2), *hb = malloc(n * 2);
    bool same = ha && hb && cudaMemcpy(ha, a, n * 2, cudaMemcpyDeviceToHost) == cudaSuccess &&
                cudaMemcpy(hb, b, n * 2, cudaMemcpyDeviceToHost) == cudaSuccess &&
                memcmp(ha, hb, n * 2) == 0;
    free(ha);
    free(hb);
    return same;
}

/* A record gives back the same configuration without timing: with the
 * first convolution gone (nothing to share), from the serialized plan when
 * its engine is runtime-compiled, restored rather than compiled again. The
 * two compute the same bits and write the same record. */
static void test_record_round_trip(void)
{
    data t;
    case_result a, b;
    dev_case da, db;
    char why[512] = "";
    double err;
    void *st = infd_cuda_stream_create(why, sizeof(why));
    ASSERT_TRUE(st != NULL);
    ASSERT_TRUE(shared_case(&t));
    ASSERT_TRUE(create_for(&t, F_BIAS_RES_RELU, NULL, 0, &a) != NULL);
    size_t plan_n = a.record_n - (18 + 5 * (size_t)a.record[3]);
    printf("  first create: %s, %.1f ms, record %zu bytes (serialized plan: %zu)\n", a.name,
           a.create_ms, a.record_n, plan_n);
    ASSERT_TRUE(a.record_n > 0);
    ASSERT_TRUE(dev_case_make(&t, a.ws_bytes, &da));
    infd_cuda_convg_run(a.g, st, da.x, da.z, da.y, da.ws);
    ASSERT_EQ_INT(infd_cuda_sync(st, why, sizeof(why)), 0);
    ASSERT_EQ_U64(compare(&t, da.y, &err), 0);
    infd_cuda_convg_destroy(a.g);
    ASSERT_TRUE(create_for(&t, F_BIAS_RES_RELU, a.record, a.record_n, &b) != NULL);
    printf("  from the record, alone: %s, %.1f ms, record %zu bytes\n", b.name, b.create_ms,
           b.record_n);
    ASSERT_STR_EQ(a.name, b.name);
    ASSERT_EQ_U64(a.record_n, b.record_n);
    ASSERT_TRUE(memcmp(a.record, b.record, a.record_n) == 0);
    ASSERT_EQ_U64(a.ws_bytes, b.ws_bytes);
    ASSERT_TRUE(dev_case_make(&t, b.ws_bytes, &db));
    infd_cuda_convg_run(b.g, st, db.x, db.z, db.y, db.ws);
    ASSERT_EQ_INT(infd_cuda_sync(st, why, sizeof(why)), 0);
    ASSERT_TRUE(same_bits(da.y, db.y, da.yn));
    dev_case_free(&da);
    dev_case_free(&db);
    infd_cuda_convg_destroy(b.g);
    infd_cuda_stream_destroy(st);
    data_free(&t);
}

/* Two convolutions of one description with different weights share the
 * first one's execution plan (cuda_convg.cu, "Shared plans"): the second
 * takes its configuration without timing (the same time per run, to the
 * bit, and the same record), each computes with its own weights, and the
 * second still runs after the first is destroyed. */
static void test_shared_plan(void)
{
    data t1, t2;
    case_result a, b, c;
    dev_case d1, d2;
    char why[512] = "";
    double err;
    void *st = infd_cuda_stream_create(why, sizeof(why));
    ASSERT_TRUE(st != NULL);
    ASSERT_TRUE(shared_case(&t1));
    data_seed = 1; /* other weights and inputs, one description */
    bool made = shared_case(&t2);
    data_seed = 0;
    ASSERT_TRUE(made);
    ASSERT_TRUE(memcmp(t1.wt, t2.wt, sizeof(float) * 16) != 0);
    ASSERT_TRUE(create_for(&t1, F_BIAS_RES_RELU, NULL, 0, &a) != NULL);
    ASSERT_TRUE(create_for(&t2, F_BIAS_RES_RELU, NULL, 0, &b) != NULL);
    printf("  first: %s in %.1f ms; second, shared: %s in %.1f ms\n", a.name, a.create_ms, b.name,
           b.create_ms);
    ASSERT_STR_EQ(a.name, b.name);
    ASSERT_TRUE(infd_cuda_convg_ms(a.g) == infd_cuda_convg_ms(b.g));
    ASSERT_EQ_U64(a.record_n, b.record_n);
    ASSERT_TRUE(memcmp(a.record, b.record, a.record_n) == 0);
    ASSERT_TRUE(dev_case_make(&t1, a.ws_bytes, &d1));
    ASSERT_TRUE(dev_case_make(&t2, b.ws_bytes, &d2));
    infd_cuda_convg_run(a.g, st, d1.x, d1.z, d1.y, d1.ws);
    infd_cuda_convg_run(b.g, st, d2.x, d2.z, d2.y, d2.ws);
    ASSERT_EQ_INT(infd_cuda_sync(st, why, sizeof(why)), 0);
    ASSERT_EQ_U64(compare(&t1, d1.y, &err), 0);
    ASSERT_EQ_U64(compare(&t2, d2.y, &err), 0);
    infd_cuda_convg_destroy(a.g);
    cudaMemset(d2.y, 0, d2.yn * 2);
    infd_cuda_convg_run(b.g, st, d2.x, d2.z, d2.y, d2.ws);
    ASSERT_EQ_INT(infd_cuda_sync(st, why, sizeof(why)), 0);
    ASSERT_EQ_U64(compare(&t2, d2.y, &err), 0);
    /* A third, given the record while the second still lends the plan. */
    ASSERT_TRUE(create_for(&t1, F_BIAS_RES_RELU, a.record, a.record_n, &c) != NULL);
    printf("  third, from the record while shared: %s in %.1f ms\n", c.name, c.create_ms);
    infd_cuda_convg_run(c.g, st, d1.x, d1.z, d1.y, d1.ws);
    ASSERT_EQ_INT(infd_cuda_sync(st, why, sizeof(why)), 0);
    ASSERT_EQ_U64(compare(&t1, d1.y, &err), 0);
    infd_cuda_convg_destroy(b.g);
    infd_cuda_convg_destroy(c.g);
    dev_case_free(&d1);
    dev_case_free(&d2);
    infd_cuda_stream_destroy(st);
    data_free(&t1);
    data_free(&t2);
}

static void test_bogus_record(void)
{
    data t;
    case_result a, b;
    dev_case dc;
    char why[512] = "";
    double err;
    static unsigned char bogus[sizeof(a.record)];
    void *st = infd_cuda_stream_create(why, sizeof(why));
    ASSERT_TRUE(st != NULL);
    ASSERT_TRUE(shared_case(&t));
    ASSERT_TRUE(create_for(&t, F_BIAS_RES_RELU, NULL, 0, &a) != NULL);
    ASSERT_TRUE(dev_case_make(&t, 256u << 20, &dc));
    /* The record's serialized plan (cuda_convg.cu, "The record"). */
    size_t head = 18 + 5 * (size_t)a.record[3];
    ASSERT_TRUE(a.record_n >= head);
    size_t plan_n = a.record_n - head;
    printf("  record: %zu bytes, %zu of them a serialized plan\n", a.record_n, plan_n);
    for (int kind = 0; kind < 5; kind++) {
        const char *what;
        size_t n = a.record_n;
        memcpy(bogus, a.record, a.record_n);
        if (kind == 0) {
            what = "random bytes";
            n = 4096;
            for (size_t i = 0; i < n; i++)
                bogus[i] = (unsigned char)(urand() * 127 + 128);
        } else if (kind == 4) {
            /* A plan whose bytes pass the record's checks but not cuDNN's:
             * the configuration is finalized again from the key. */
            if (!plan_n) {
                printf("  (its engine is not runtime-compiled: no serialized plan to spoil)\n");
                continue;
            }
            what = "a serialized plan cuDNN does not take";
            memset(bogus + head, '#', plan_n < 64 ? plan_n : 64);
            uint32_t h = 2166136261u;
            for (size_t i = head; i < n; i++)
                h = (h ^ bogus[i]) * 16777619u;
            memcpy(bogus + head - 4, &h, 4); /* little-endian hosts */
        } else if (kind == 1) {
            what = "an engine index cuDNN does not have";
            bogus[8] = 0x30;
            bogus[9] = 0x75; /* 30000 */
        } else if (kind == 2) {
            what = "another description's hash";
            bogus[4] ^= 0x5a;
        } else {
            what = "a truncated record";
            n = a.record_n - 1;
        }
        if (kind == 4) /* a lives: with sharing, b would borrow its plan */
            setenv("INFD_CONV_DISABLE", "share", 1);
        ASSERT_TRUE(create_for(&t, F_BIAS_RES_RELU, bogus, n, &b) != NULL);
        if (kind == 4)
            unsetenv("INFD_CONV_DISABLE");
        printf("  %s: ignored: %s (%.1f ms)\n", what, b.name, b.create_ms);
        ASSERT_TRUE(b.record_n > 0);
        ASSERT_TRUE(b.ws_bytes <= (256u << 20));
        infd_cuda_convg_run(b.g, st, dc.x, dc.z, dc.y, dc.ws);
        ASSERT_EQ_INT(infd_cuda_sync(st, why, sizeof(why)), 0);
        ASSERT_EQ_U64(compare(&t, dc.y, &err), 0);
        infd_cuda_convg_destroy(b.g);
    }
    /* A record of one description given to another is ignored too. */
    {
        data t2;
        ASSERT_TRUE(make_data(&shapes[1], 1, shapes[1].c, F_BIAS_RELU, &t2));
        ASSERT_TRUE(create_for(&t2, F_BIAS_RELU, a.record, a.record_n, &b) != NULL);
        printf("  another fusion's record: ignored: %s\n", b.name);
        infd_cuda_convg_run(b.g, st, dc.x, dc.z, dc.y, dc.ws);
        ASSERT_EQ_INT(infd_cuda_sync(st, why, sizeof(why)), 0);
        ASSERT_EQ_U64(compare(&t2, dc.y, &err), 0);
        infd_cuda_convg_destroy(b.g);
        data_free(&t2);
    }
    dev_case_free(&dc);
    infd_cuda_convg_destroy(a.g);
    infd_cuda_stream_destroy(st);
    data_free(&t);
}

static void test_graph_capture(void)
{
    data t;
    case_result a;
    dev_case dc;
    char why[512] = "";
    double err;
    void *st = infd_cuda_stream_create(why, sizeof(why));
    ASSERT_TRUE(st != NULL);
    ASSERT_TRUE(shared_case(&t));
    ASSERT_TRUE(create_for(&t, F_BIAS_RES_RELU, NULL, 0, &a) != NULL);
    ASSERT_TRUE(dev_case_make(&t, a.ws_bytes, &dc));
    void *eager = dev_alloc(dc.yn * 2);
    ASSERT_TRUE(eager != NULL);
    infd_cuda_convg_run(a.g, st, dc.x, dc.z, eager, dc.ws);
    ASSERT_EQ_INT(infd_cuda_sync(st, why, sizeof(why)), 0);
    cudaMemsetAsync(dc.y, 0, dc.yn * 2, raw_stream(st));
    if (infd_cuda_capture_begin(st, why, sizeof(why)) != 0)
        TEST_FAIL_("capture_begin: %s", why);
    infd_cuda_convg_run(a.g, st, dc.x, dc.z, dc.y, dc.ws);
    if (infd_cuda_capture_end(st, why, sizeof(why)) != 0)
        TEST_FAIL_("capture of %s: %s", a.name, why);
    ASSERT_EQ_INT(infd_cuda_sync(st, why, sizeof(why)), 0);
    ASSERT_TRUE(!same_bits(eager, dc.y, dc.yn)); /* nothing ran while capturing */
    for (int i = 0; i < 3; i++)
        infd_cuda_replay(st);
    if (infd_cuda_sync(st, why, sizeof(why)) != 0)
        TEST_FAIL_("replay: %s", why);
    ASSERT_EQ_U64(compare(&t, dc.y, &err), 0);
    ASSERT_TRUE(same_bits(eager, dc.y, dc.yn));
    printf("  %s captured and replayed\n", a.name);
    dev_free(eager);
    dev_case_free(&dc);
    infd_cuda_convg_destroy(a.g);
    infd_cuda_stream_destroy(st);
    data_free(&t);
}

typedef struct thread_arg {
    infd_cuda_convg *g;
    void *st;
    dev_case *dc;
    int iters;
    int failed;
    char why[512];
} thread_arg;

static void *thread_main(void *p)
{
    thread_arg *a = p;
    /* The thread's first CUDA call: binds the primary context, which
     * cuDNN's graph-API execute needs current (as plan runs get it from
     * the backend's set_device). */
    cudaSetDevice(0);
    for (int i = 0; i < a->iters; i++)
        infd_cuda_convg_run(a->g, a->st, a->dc->x, a->dc->z, a->dc->y, a->dc->ws);
    a->failed = infd_cuda_sync(a->st, a->why, sizeof(a->why)) != 0;
    return NULL;
}

static void test_two_streams(void)
{
    data t1;
    case_result a;
    dev_case d1, d2;
    char why[512] = "";
    double err;
    void *s1 = infd_cuda_stream_create(why, sizeof(why));
    void *s2 = infd_cuda_stream_create(why, sizeof(why));
    ASSERT_TRUE(s1 && s2);
    /* ResNet-50's 1x1 256->64 at batch 8 with bias, residual and ReLU. */
    ASSERT_TRUE(make_data(&shapes[0], 8, shapes[0].c, F_BIAS_RES_RELU, &t1));
    ASSERT_TRUE(create_for(&t1, F_BIAS_RES_RELU, NULL, 0, &a) != NULL);
    ASSERT_TRUE(dev_case_make(&t1, a.ws_bytes, &d1));
    ASSERT_TRUE(dev_case_make(&t1, a.ws_bytes, &d2));
    void *e1 = dev_alloc(d1.yn * 2), *e2 = dev_alloc(d2.yn * 2);
    ASSERT_TRUE(e1 && e2);
    /* d2 gets x = d1's x shifted by one image (images 1..7, 0), so the two
     * threads compute different outputs. */
    {
        size_t img = (size_t)t1.c * t1.h * t1.w * 2;
        cudaMemcpy(d2.x, (char *)d1.x + img, img * 7, cudaMemcpyDeviceToDevice);
        cudaMemcpy((char *)d2.x + img * 7, d1.x, img, cudaMemcpyDeviceToDevice);
    }
    infd_cuda_convg_run(a.g, s1, d1.x, d1.z, e1, d1.ws);
    infd_cuda_convg_run(a.g, s1, d2.x, d2.z, e2, d1.ws);
    ASSERT_EQ_INT(infd_cuda_sync(s1, why, sizeof(why)), 0);
    ASSERT_EQ_U64(compare(&t1, e1, &err), 0);
    ASSERT_TRUE(!same_bits(e1, e2, d1.yn));

    thread_arg ta = { a.g, s1, &d1, 200, 0, "" }, tb = { a.g, s2, &d2, 200, 0, "" };
    pthread_t th1, th2;
    struct timespec t0, t9;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ASSERT_EQ_INT(pthread_create(&th1, NULL, thread_main, &ta), 0);
    ASSERT_EQ_INT(pthread_create(&th2, NULL, thread_main, &tb), 0);
    pthread_join(th1, NULL);
    pthread_join(th2, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t9);
    if (ta.failed || tb.failed)
        TEST_FAIL_("concurrent runs: %s %s", ta.why, tb.why);
    ASSERT_TRUE(same_bits(e1, d1.y, d1.yn));
    ASSERT_TRUE(same_bits(e2, d2.y, d2.yn));
    printf("  2 threads x 200 runs of %s on 2 streams: %.1f ms, results exact\n", a.name,
           elapsed_ms(t0, t9));

    /* Host cost of one run() (variant pack built per call). */
    {
        struct timespec h0, h1;
        clock_gettime(CLOCK_MONOTONIC, &h0);
        for (int i = 0; i < 200; i++)
            infd_cuda_convg_run(a.g, s1, d1.x, d1.z, d1.y, d1.ws);
        clock_gettime(CLOCK_MONOTONIC, &h1);
        ASSERT_EQ_INT(infd_cuda_sync(s1, why, sizeof(why)), 0);
        printf("  host time per run() call: %.1f us (includes any launch back-pressure)\n",
               elapsed_ms(h0, h1) * 1e3 / 200);
    }
    dev_free(e1);
    dev_free(e2);
    dev_case_free(&d1);
    dev_case_free(&d2);
    infd_cuda_convg_destroy(a.g);
    infd_cuda_stream_destroy(s1);
    infd_cuda_stream_destroy(s2);
    data_free(&t1);
}

/* FP32 NCHW (no TF32) on ResNet-50's 3x3 64->64: each fusion either works
 * (checked to 1e-3) or fails with a reason (cuDNN's fused engines may want
 * FP16 tensors); the plain convolution must work. */
static bool fp32_case(int fusion, void *st)
{
    data t;
    char why[1024] = "", name[96] = "";
    size_t ws_bytes = 0;
    bool ok = false;
    if (!make_data(&shapes[1], 1, shapes[1].c, fusion, &t)) {
        data_free(&t);
        return false;
    }
    infd_cuda_convg_desc d = desc_of(&t, fusion);
    d.fp16 = 0;
    infd_cuda_convg *g = infd_cuda_convg_create(&d, t.wt, t.b, NULL, 0, &ws_bytes, name,
                                                sizeof(name), why, sizeof(why));
    if (!g) {
        printf("  FP32 %s: not available: %s\n", fusion_names[fusion], why);
        data_free(&t);
        return fusion != F_NONE;
    }
    size_t xn = (size_t)t.n * t.c * t.h * t.w, yn = (size_t)t.n * t.k * t.oh * t.ow;
    float *dx = dev_upload(t.x, xn * 4), *dz = dev_upload(t.z, yn * 4), *dy = dev_alloc(yn * 4);
    void *ws = ws_bytes ? dev_alloc(ws_bytes) : NULL;
    float *y = malloc(yn * 4);
    if (dx && dz && dy && y && (!ws_bytes || ws)) {
        infd_cuda_convg_run(g, st, dx, dz, dy, ws);
        if (infd_cuda_sync(st, why, sizeof(why)) != 0)
            fprintf(stderr, "    FP32 run: %s\n", why);
        else if (cudaMemcpy(y, dy, yn * 4, cudaMemcpyDeviceToHost) == cudaSuccess) {
            size_t bad = 0;
            double max_err = 0.0;
            for (size_t i = 0; i < yn; i++) {
                double err = fabs((double)y[i] - t.ref[i]);
                if (!(err <= 1e-3 * (1.0 + fabs(t.ref[i])))) {
                    if (bad < 5)
                        fprintf(stderr, "    y[%zu] = %g, expected %g\n", i, y[i], t.ref[i]);
                    bad++;
                }
                if (err > max_err || err != err)
                    max_err = err;
            }
            printf("  FP32 %s: %s, max err %.2g%s\n", fusion_names[fusion], name, max_err,
                   bad ? "  MISMATCH" : "");
            ok = bad == 0;
        }
    }
    free(y);
    dev_free(dx);
    dev_free(dz);
    dev_free(dy);
    dev_free(ws);
    infd_cuda_convg_destroy(g);
    data_free(&t);
    return ok;
}

static void test_fp32(void)
{
    char why[256] = "";
    void *st = infd_cuda_stream_create(why, sizeof(why));
    int failed = 0;
    ASSERT_TRUE(st != NULL);
    for (int f = 0; f < F_COUNT; f++)
        failed += !fp32_case(f, st);
    infd_cuda_stream_destroy(st);
    ASSERT_EQ_INT(failed, 0);
}

int main(int argc, char **argv)
{
    infd_error err = { 0 };
    if (infd_cuda_backend.available(&err) != INFD_STATUS_OK) {
        printf("SKIP: graph-API convolution tests: %s\n", err.msg);
        return SKIP_CODE;
    }
    static const test_case_ cases[] = {
        { "test_record_round_trip", test_record_round_trip },
        { "test_shared_plan", test_shared_plan },
        { "test_bogus_record", test_bogus_record },
        { "test_graph_capture", test_graph_capture },
        { "test_two_streams", test_two_streams },
        { "test_fp32", test_fp32 },
        { "test_shapes", test_shapes },
    };
    return test_run_(cases, sizeof(cases) / sizeof(cases[0]), argc, argv);
}

#else

int main(void)
{
    (void)test_run_;
    printf("SKIP: graph-API convolution tests: this build has no CUDA backend\n");
    return SKIP_CODE;
}

#endif
