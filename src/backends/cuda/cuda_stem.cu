/*
 * cuda_stem.cu - a convolution over few input channels as one implicit
 * GEMM kernel (cuda_stem.h).
 *
 * One thread block of 8 warps takes a tile of 128 output pixels at a time
 * (th rows of tw pixels of one image) and loops over the tiles (a grid of
 * as many blocks as fit on the GPU at once), so the weights are loaded
 * into shared memory once per block:
 *   1. the patch of input pixels the tile's windows cover, converted to
 *      FP16 into shared memory [ph][pw][c], along x's rows, CH elements
 *      a thread loaded before any is stored (their latencies overlap),
 *      zeros where a window reads padding;
 *   2. the windows from the patch into A [kp x 128] (column-major: pixel
 *      fastest) through a table of the offsets of each window element
 *      (ky, kx, ci) built once per block: warp w takes every eighth row,
 *      a lane four pixels; zero past c * r * s;
 *   3. A^T x W [kp x np] on tensor cores: warp w takes rows 16 w .. + 16
 *      and every 16-column tile;
 *   4. the FP32 sums (staged in shared memory over A) plus bias,
 *      activated, written 8 (or 2) channels a thread.
 * BlazeFace's stem at batch 128 (H100, Nsight Compute): gathering each
 * window element straight from x took 88 us (a separate L2 request each);
 * 64-pixel tiles with a patch loaded one element at a time 87 us; loading
 * CH elements before storing them 72 us. The kernel stays latency-bound
 * (about half the issue slots used).
 * kp and np are c * r * s and k rounded up to 16 (WMMA's tile); the
 * padding rows of W are zero.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_fp16.h>
#include <mma.h>

#include "infd/infd.h"

#include "cuda_act.cuh"
#include "cuda_nhwc.h"
#include "cuda_runtime_impl.h"
#include "cuda_stem.h"
#include "cuda_time.cuh"
#include "cuda_shared.h"

using namespace nvcuda;

#define BM       128         /* output pixels per tile */
#define THREADS  256         /* 8 warps: one 16-row tile of A each */
#define LDA      (BM + 8)    /* A's column stride in halves (16 bytes of skew) */
#define PX       (BM / 32)   /* pixels a lane lays out in step 2 */
#define CH       8           /* patch elements a thread has in flight in step 1 */
#define SMEM_MAX (96 * 1024) /* the most a block may take (every instance is set to it) */

/* Where a tile lies and what it needs in shared memory. A tile is th rows
 * of tw output pixels of one image (tw: ow split evenly into pieces of at
 * most 64; th = 64 / tw); its windows cover a patch of ph x pw input
 * pixels. At these byte offsets: A [kp][LDA] (FP16; C [BM][ldc], FP32,
 * over it once the GEMM has read it), W [kp][ldb] (FP16), the offset
 * table [kp] (int), the patch [ph][pw][c] (FP16). */
typedef struct stem_layout {
    int kk, kp, np, ldb, ldc;
    int tw, th, tiles_x, tiles_y, tiles;
    int ph, pw;
    int off_b, off_t, off_x;
    size_t smem;
} stem_layout;

static size_t round128(size_t n)
{
    return (n + 127) / 128 * 128;
}

static void layout_of(const infd_cuda_stem_desc *d, stem_layout *l)
{
    l->kk = d->c * d->r * d->s;
    l->kp = (l->kk + 15) / 16 * 16;
    l->np = (d->k + 15) / 16 * 16;
    l->ldb = l->np + 8;
    l->ldc = l->np + 4;
    l->tiles_x = (d->ow + BM - 1) / BM;
    l->tw = (d->ow + l->tiles_x - 1) / l->tiles_x;
    l->th = BM / l->tw;
    l->tiles_y = (d->oh + l->th - 1) / l->th;
    l->tiles = d->n * l->tiles_x * l->tiles_y;
    l->ph = (l->th - 1) * d->sh + (d->r - 1) * d->dh + 1;
    l->pw = (l->tw - 1) * d->sw + (d->s - 1) * d->dw + 1;
    size_t a = round128((size_t)l->kp * LDA * 2), c = round128((size_t)BM * l->ldc * 4);
    size_t b = round128((size_t)l->kp * l->ldb * 2), t = round128((size_t)l->kp * 4);
    a = a > c ? a : c;
    l->off_b = (int)a;
    l->off_t = (int)(a + b);
    l->off_x = (int)(a + b + t);
    l->smem = a + b + t + (size_t)l->ph * l->pw * d->c * 2;
}

struct infd_cuda_stem {
    infd_cuda_stem_desc d;
    stem_layout l;
    int blocks;     /* grid size */
    const void *fn; /* the kernel instance for x's format and np */
    __half *w;      /* [kp, np], zero-padded */
    float *b;       /* [k] or NULL */
};

/* What a kernel launch reads (by value, in the parameter space). */
struct stem_args {
    infd_cuda_stem_desc d;
    stem_layout l;
    const __half *w;
    const float *b;
    int v; /* channels a thread writes in step 4: 8 (k and y allow it) or 2 */
};

/* FX: x's format (INFD_CUDA_FMT_F32_NCHW or _F16_NHWC); NT: np / 16. */
template <int FX, int NT>
__global__ void __launch_bounds__(THREADS, 4) /* 4 blocks an SM: 64 registers */
    stem_kernel(stem_args p, const void *__restrict__ x, __half *__restrict__ y)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const infd_cuda_stem_desc &d = p.d;
    const stem_layout &l = p.l;
    __half *sa = (__half *)smem;
    __half *sb = (__half *)(smem + l.off_b);
    float *sc = (float *)smem;
    int *tab = (int *)(smem + l.off_t);
    __half *sx = (__half *)(smem + l.off_x);

    for (int i = threadIdx.x; i < l.kp * (l.np / 8); i += THREADS) {
        int r = i / (l.np / 8), c8 = (i % (l.np / 8)) * 8;
        *(uint4 *)(sb + r * l.ldb + c8) = *(const uint4 *)(p.w + r * l.np + c8);
    }
    /* Row kk of A is window element (ky, kx, ci), kk = (ky * s + kx) * c +
     * ci: its offset in the patch from the window's corner. */
    for (int i = threadIdx.x; i < l.kk; i += THREADS) {
        int ci = i % d.c, kx = i / d.c % d.s, ky = i / d.c / d.s;
        tab[i] = (ky * d.dh * l.pw + kx * d.dw) * d.c + ci;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row_len = l.pw * d.c; /* halves in a patch row */
    /* Step 2's pixels: PX lane .. + PX - 1 a thread; their window corners
     * in the patch (pixels past the tile read the patch's corner: their
     * rows of C are not written). */
    int corner[PX];
#pragma unroll
    for (int j = 0; j < PX; j++) {
        int px = PX * lane + j, ty = px / l.tw, tx = px % l.tw;
        corner[j] = ty < l.th ? ty * d.sh * row_len + tx * d.sw * d.c : 0;
    }
    /* Step 4's share: channels ch0 .. + V - 1 (V = 8 where k allows, else
     * 2) of the tile's pixels r0, r0 + rstep, ... */
    const int V = p.v, kv = d.k / V, rstep = THREADS / kv;
    const int ch0 = threadIdx.x % kv * V, r0 = threadIdx.x / kv;
    float bias[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        bias[j] = p.b && j < V ? p.b[ch0 + j] : 0.0f;
    for (int t = blockIdx.x; t < l.tiles; t += gridDim.x) {
        const int n = t / (l.tiles_x * l.tiles_y), txy = t % (l.tiles_x * l.tiles_y);
        const int oy0 = txy / l.tiles_x * l.th, ox0 = txy % l.tiles_x * l.tw;
        const int iy0 = oy0 * d.sh - d.pt, ix0 = ox0 * d.sw - d.pl;
        __syncthreads(); /* the weights and table are in; the last tile is done with the patch */
        /* 1. the patch, FP16, zeros where the windows read padding: rows
         * of x (NCHW: row ci * ph + py of pw pixels; NHWC: row py of pw * c
         * values, one run of x), CH elements a thread loaded before any is
         * stored, so their latencies overlap */
        const bool nchw = FX == INFD_CUDA_FMT_F32_NCHW;
        const int rows = nchw ? d.c * l.ph : l.ph, len = nchw ? l.pw : row_len;
        const int j0 = nchw ? ix0 : ix0 * d.c, wlen = nchw ? d.w : d.w * d.c;
        int rr = 0, j = threadIdx.x, ci = 0, py = 0;
        for (; j >= len && rr < rows; j -= len) {
            rr++;
            ci += ++py == l.ph ? 1 : 0;
            py = py == l.ph ? 0 : py;
        }
        while (rr < rows) {
            __half v[CH];
            int at[CH];
#pragma unroll
            for (int m = 0; m < CH; m++) {
                at[m] = -1;
                if (rr < rows) {
                    int iy = iy0 + (nchw ? py : rr), e = j0 + j;
                    bool in = (unsigned)iy < (unsigned)d.h && (unsigned)e < (unsigned)wlen;
                    if (nchw) {
                        size_t g = ((size_t)(n * d.c + ci) * d.h + iy) * d.w + e;
                        v[m] = __float2half_rn(in ? __ldg((const float *)x + g) : 0.0f);
                        at[m] = (py * l.pw + j) * d.c + ci;
                    } else {
                        size_t g = ((size_t)n * d.h + iy) * wlen + e;
                        v[m] = in ? ((const __half *)x)[g] : __float2half_rn(0.0f);
                        at[m] = rr * row_len + j;
                    }
                    for (j += THREADS; j >= len && rr < rows; j -= len) {
                        rr++;
                        ci += ++py == l.ph ? 1 : 0;
                        py = py == l.ph ? 0 : py;
                    }
                }
            }
#pragma unroll
            for (int m = 0; m < CH; m++) {
                if (at[m] >= 0)
                    sx[at[m]] = v[m];
            }
        }
        __syncthreads();
        /* 2. the windows into A: warp w takes the rows kk = w, w + 8, ...,
         * a lane PX pixels (one 8-byte store) */
#pragma unroll 2
        for (int kk = warp; kk < l.kp; kk += THREADS / 32) {
            __half2 v[PX / 2];
#pragma unroll
            for (int j = 0; j < PX / 2; j++)
                v[j] = __float2half2_rn(0.0f);
            if (kk < l.kk) {
                int off = tab[kk];
#pragma unroll
                for (int j = 0; j < PX / 2; j++)
                    v[j] = __halves2half2(sx[corner[2 * j] + off], sx[corner[2 * j + 1] + off]);
            }
            *(uint2 *)(sa + kk * LDA + PX * lane) = *(const uint2 *)v;
        }
        __syncthreads();
        /* 3. the GEMM on tensor cores */
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[NT];
#pragma unroll
        for (int j = 0; j < NT; j++)
            wmma::fill_fragment(acc[j], 0.0f);
        for (int k0 = 0; k0 < l.kp; k0 += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::col_major> a;
            wmma::load_matrix_sync(a, sa + k0 * LDA + warp * 16, LDA);
#pragma unroll
            for (int j = 0; j < NT; j++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
                wmma::load_matrix_sync(b, sb + k0 * l.ldb + j * 16, l.ldb);
                wmma::mma_sync(acc[j], a, b, acc[j]);
            }
        }
        __syncthreads(); /* C goes over A */
#pragma unroll
        for (int j = 0; j < NT; j++)
            wmma::store_matrix_sync(sc + warp * 16 * l.ldc + j * 16, acc[j], l.ldc,
                                    wmma::mem_row_major);
        __syncthreads();
        /* 4. bias and activation, V channels a thread: threads of
         * consecutive channel groups and pixels write consecutive words */
        if (r0 < rstep) {
            int ty = r0 / l.tw, tx = r0 % l.tw;
            for (int row = r0; row < l.th * l.tw; row += rstep) {
                int oy = oy0 + ty, ox = ox0 + tx;
                if (oy < d.oh && ox < d.ow) {
                    const float *cr = sc + row * l.ldc + ch0;
                    __half *yp = y + ((size_t)(n * d.oh + oy) * d.ow + ox) * d.k + ch0;
                    if (V == 8) {
                        float4 c0 = *(const float4 *)cr, c1 = *(const float4 *)(cr + 4);
                        float v[8] = { c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w };
                        __half2 h[4];
#pragma unroll
                        for (int j = 0; j < 4; j++)
                            h[j] = __floats2half2_rn(
                                apply_act(d.act, v[2 * j] + bias[2 * j], d.alpha, d.beta),
                                apply_act(d.act, v[2 * j + 1] + bias[2 * j + 1], d.alpha, d.beta));
                        *(uint4 *)yp = *(const uint4 *)h;
                    } else {
                        *(__half2 *)yp =
                            __floats2half2_rn(apply_act(d.act, cr[0] + bias[0], d.alpha, d.beta),
                                              apply_act(d.act, cr[1] + bias[1], d.alpha, d.beta));
                    }
                }
                for (tx += rstep; tx >= l.tw; tx -= l.tw)
                    ty++;
            }
        }
    }
}

/* The kernel instance for x's format and nt = np / 16, or NULL. */
static const void *pick_kernel(int fx, int nt)
{
#define STEM_CASE(FX)                            \
    switch (nt) {                                \
    case 1:                                      \
        return (const void *)stem_kernel<FX, 1>; \
    case 2:                                      \
        return (const void *)stem_kernel<FX, 2>; \
    case 3:                                      \
        return (const void *)stem_kernel<FX, 3>; \
    case 4:                                      \
        return (const void *)stem_kernel<FX, 4>; \
    }                                            \
    return NULL;
    if (fx == INFD_CUDA_FMT_F32_NCHW) {
        STEM_CASE(INFD_CUDA_FMT_F32_NCHW)
    }
    if (fx == INFD_CUDA_FMT_F16_NHWC) {
        STEM_CASE(INFD_CUDA_FMT_F16_NHWC)
    }
#undef STEM_CASE
    return NULL;
}

extern "C" int infd_cuda_stem_fits(const infd_cuda_stem_desc *d, char *why, size_t why_n)
{
    long long xn = (long long)d->n * d->c * d->h * d->w;
    long long yn = (long long)d->n * d->oh * d->ow * d->k;
    if (d->fx != INFD_CUDA_FMT_F32_NCHW && d->fx != INFD_CUDA_FMT_F16_NHWC) {
        snprintf(why, why_n, "the stem convolution reads FP32 NCHW or FP16 NHWC only");
        return 0;
    }
    if (d->c < 1 || (long long)d->c * d->r * d->s > INFD_CUDA_STEM_MAX_K || d->k < 2 || d->k % 2 ||
        d->k > INFD_CUDA_STEM_MAX_N) {
        snprintf(why, why_n,
                 "the stem convolution takes windows of at most %d values and an even number "
                 "of outputs up to %d (here %d x %d x %d, %d out)",
                 INFD_CUDA_STEM_MAX_K, INFD_CUDA_STEM_MAX_N, d->c, d->r, d->s, d->k);
        return 0;
    }
    if (d->n < 1 || d->r < 1 || d->s < 1 || d->sh < 1 || d->sw < 1 || d->dh < 1 || d->dw < 1 ||
        d->pt < 0 || d->pl < 0 || d->oh < 1 || d->ow < 1 || d->h < 1 || d->w < 1) {
        snprintf(why, why_n, "bad stem convolution window");
        return 0;
    }
    if (xn >= INT32_MAX || yn >= INT32_MAX) {
        snprintf(why, why_n, "the stem convolution indexes with 32 bits");
        return 0;
    }
    stem_layout l;
    layout_of(d, &l);
    if (l.smem > SMEM_MAX) {
        snprintf(why, why_n,
                 "the stem convolution's tile needs %zu bytes of shared memory (at most %d)",
                 l.smem, SMEM_MAX);
        return 0;
    }
    return 1;
}

extern "C" void infd_cuda_stem_destroy(infd_cuda_stem *p)
{
    if (!p)
        return;
    infd_cuda_weights_free(p->w); /* shared forms (cuda_shared.h) */
    infd_cuda_weights_free(p->b);
    free(p);
}

extern "C" infd_cuda_stem *infd_cuda_stem_create(const infd_cuda_stem_desc *d, const float *w,
                                                 const float *b, char *why, size_t why_n)
{
    if (!infd_cuda_stem_fits(d, why, why_n))
        return NULL;
    infd_cuda_stem *p = (infd_cuda_stem *)calloc(1, sizeof(*p));
    if (!p) {
        snprintf(why, why_n, "out of memory");
        return NULL;
    }
    p->d = *d;
    layout_of(d, &p->l);
    p->fn = pick_kernel(d->fx, p->l.np / 16);
    const int kp = p->l.kp, np = p->l.np, rs = d->r * d->s;
    /* W [kp, np]: row (ky * s + kx) * c + ci, column ko = w[ko][ci][ky][kx]. */
    float *wm = (float *)calloc((size_t)kp * np, sizeof(float));
    bool ok = wm != NULL;
    if (!ok)
        snprintf(why, why_n, "out of memory");
    for (int ko = 0; ok && ko < d->k; ko++) {
        for (int ci = 0; ci < d->c; ci++) {
            for (int q = 0; q < rs; q++)
                wm[((size_t)q * d->c + ci) * np + ko] = w[((size_t)ko * d->c + ci) * rs + q];
        }
    }
    if (ok)
        ok = (p->w = (__half *)infd_cuda_upload(wm, (size_t)kp * np, INFD_CUDA_FMT_F16_NHWC, why,
                                                why_n));
    free(wm);
    if (ok && b)
        ok =
            (p->b = (float *)infd_cuda_upload(b, (size_t)d->k, INFD_CUDA_FMT_F32_NCHW, why, why_n));
    if (ok)
        ok = (p->blocks =
                  infd_cuda_persistent_grid(&p->fn, 1, THREADS, p->l.smem, SMEM_MAX, p->l.tiles,
                                            "the stem convolution", why, why_n)) > 0;
    if (!ok) {
        infd_cuda_stem_destroy(p);
        return NULL;
    }
    return p;
}

extern "C" void infd_cuda_stem_run(const infd_cuda_stem *p, void *stream, const void *x, void *y)
{
    int v = p->d.k % 8 == 0 && (uintptr_t)y % 16 == 0 ? 8 : 2;
    stem_args a = { p->d, p->l, p->w, p->b, v };
    __half *yp = (__half *)y;
    void *args[] = { &a, &x, &yp };
    cudaLaunchKernel(p->fn, dim3((unsigned)p->blocks), dim3(THREADS), args, p->l.smem,
                     ((infd_cuda_stream *)stream)->s);
}

extern "C" float infd_cuda_stem_time(const infd_cuda_stem *p)
{
    const infd_cuda_stem_desc *d = &p->d;
    bool plain = d->fx == INFD_CUDA_FMT_F32_NCHW;
    size_t xn = (size_t)d->n * d->c * d->h * d->w, yn = (size_t)d->n * d->oh * d->ow * d->k;
    const size_t bytes[2] = { xn * (plain ? 4 : 2), yn * 2 };
    const int kind[2] = { plain ? 0 : 1, 1 };
    return time_on_scratch(2, bytes, kind, [&](infd_cuda_stream *st, void **s) {
        return time_runs(st, [&] { infd_cuda_stem_run(p, st, s[0], s[1]); });
    });
}
