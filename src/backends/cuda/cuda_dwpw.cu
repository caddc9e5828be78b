/*
 * cuda_dwpw.cu - the depthwise + 1x1 convolution block in one kernel
 * (cuda_dwpw.h).
 *
 * One thread block of 8 warps takes a tile of 64 output pixels (th rows of
 * tw pixels of one image) at a time and loops over the tiles (a grid of as
 * many blocks as fit on the GPU at once), so the weights are loaded into
 * shared memory once per block:
 *   1. the patch of input pixels the tile's depthwise windows cover, into
 *      shared memory with coalesced 16-, 8- or 4-byte loads (V channels a
 *      thread, several loads in flight before their stores), zeros where
 *      a window reads padding;
 *   2. the 64 pixels' depthwise outputs from the patch into A [64 x kp] in
 *      shared memory, FP16, zero past c: each window row is summed in
 *      packed FP16 (HFMA2: the FP32 form, converting every element, was
 *      bound by its conversions, 116 us for BlazeFace's first block at
 *      batch 128), the rows in FP32;
 *   3. A x W_pw^T on tensor cores: warp w takes rows 16 (w % 4) .. + 16 and
 *      half of the 16-column tiles of the output;
 *   4. the FP32 sums (staged in shared memory, over the patch) plus bias,
 *      residual and activation, V channels per thread, written coalesced.
 * kp and np are c and k rounded up to 16 (WMMA's tile); the padding
 * columns of A and rows of W are zero, so they add nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_fp16.h>
#include <mma.h>

#include "infd/infd.h"

#include "cuda_act.cuh"
#include "cuda_dwpw.h"
#include "cuda_nhwc.h"
#include "cuda_runtime_impl.h"
#include "cuda_vec.cuh"

using namespace nvcuda;

#define BM       64           /* output pixels per tile */
#define THREADS  256          /* 8 warps: 4 row tiles x 2 halves of the column tiles */
#define SMEM_MAX (160 * 1024) /* shared memory a block may take (the H100 has 227 KB) */

/* Where a tile lies and what it needs in shared memory. A tile is th rows
 * of tw output pixels of one image (tw = min(ow, 64), th = 64 / tw); its
 * depthwise window covers a patch of ph x pw input pixels. */
typedef struct dwpw_layout {
    int kp, np, lda, ldc; /* padded c and k; row strides of W, A (halves) and C (floats) */
    int tw, th, tiles_x, tiles_y, tiles;
    int ph, pw;
    /* Byte offsets in shared memory: W_pw [np][lda], W_dw [r*s][c], A
     * [BM][lda], then the patch [ph][pw][c] (FP16) and, over it once the
     * depthwise outputs are in A, C [BM][ldc] (FP32). */
    int off_dw, off_a, off_x;
    size_t smem;
} dwpw_layout;

static size_t round128(size_t n)
{
    return (n + 127) / 128 * 128;
}

static void layout_of(const infd_cuda_dwpw_desc *d, dwpw_layout *l)
{
    l->kp = (d->c + 15) / 16 * 16;
    l->np = (d->k + 15) / 16 * 16;
    l->lda = l->kp + 8; /* 16 bytes of skew against bank conflicts */
    l->ldc = l->np + 4;
    /* Whole rows where they fit. (8 x 8 tiles, the smallest patch, ran
     * slower on BlazeFace: 122 against 99 us for the first block, the
     * patch loaded row by row then.) */
    l->tw = d->ow < BM ? d->ow : BM;
    l->th = BM / l->tw;
    l->tiles_x = (d->ow + l->tw - 1) / l->tw;
    l->tiles_y = (d->oh + l->th - 1) / l->th;
    l->tiles = d->n * l->tiles_x * l->tiles_y;
    l->ph = (l->th - 1) * d->sh + (d->r - 1) * d->dh + 1;
    l->pw = (l->tw - 1) * d->sw + (d->s - 1) * d->dw + 1;
    size_t w = round128((size_t)l->np * l->lda * 2);
    size_t dw = round128((size_t)d->r * d->s * d->c * 2);
    size_t a = round128((size_t)BM * l->lda * 2);
    size_t patch = (size_t)l->ph * l->pw * d->c * 2, c = (size_t)BM * l->ldc * 4;
    l->off_dw = (int)w;
    l->off_a = (int)(w + dw);
    l->off_x = (int)(w + dw + a);
    l->smem = w + dw + a + (patch > c ? patch : c);
}

struct infd_cuda_dwpw {
    infd_cuda_dwpw_desc d;
    dwpw_layout l;
    int v;              /* channels per thread: 8, 4 or 2, as c, k and cres allow */
    int blocks;         /* grid size */
    const void *fn[9];  /* fn[v]: the kernel instance for v and the column tiles */
    __half *w_dw;       /* [r, s, c] */
    __half *w_pw;       /* [np, kp], zero-padded */
    float *b_dw, *b_pw; /* [c], [k] or NULL */
};

/* What a kernel launch reads (by value, in the parameter space). */
struct dwpw_args {
    infd_cuda_dwpw_desc d;
    dwpw_layout l;
    const __half *w_dw, *w_pw;
    const float *b_dw, *b_pw;
};

/* V: channels per thread; NTW: 16-column tiles per warp (the ceiling of
 * half of np / 16). */
template <int V, int NTW>
__global__ void __launch_bounds__(THREADS)
    dwpw_kernel(dwpw_args p, const __half *__restrict__ x, const __half *__restrict__ res,
                __half *__restrict__ y)
{
    typedef typename vec_t<V>::type vt;
    /* Patch words a thread has in flight. BlazeFace FP16 at batch 128
     * (H100): the stride-2 blocks 54 -> 45 us (V = 4) and 34 -> 28 us (V =
     * 2) against one word at a time; with V = 8, 4 words made the 16 x 16
     * blocks slower (20-23 -> 24-28 us), 2 words 19-22 us. */
    constexpr int CH = V >= 8 ? 2 : 8;
    extern __shared__ __align__(128) unsigned char smem[];
    const infd_cuda_dwpw_desc &d = p.d;
    const dwpw_layout &l = p.l;
    __half *sw = (__half *)smem;
    __half *sdw = (__half *)(smem + l.off_dw);
    __half *sa = (__half *)(smem + l.off_a);
    __half *sx = (__half *)(smem + l.off_x);
    float *sc = (float *)(smem + l.off_x);

    for (int i = threadIdx.x; i < l.np * (l.kp / 8); i += THREADS) {
        int r = i / (l.kp / 8), k8 = (i % (l.kp / 8)) * 8;
        *(uint4 *)(sw + r * l.lda + k8) = *(const uint4 *)(p.w_pw + r * l.kp + k8);
    }
    const int cv = d.c / V, cg = l.kp / V, kg = d.k / V;
    for (int i = threadIdx.x; i < d.r * d.s * cv; i += THREADS)
        ((vt *)sdw)[i] = ((const vt *)p.w_dw)[i];
    const int warp = threadIdx.x >> 5, rt = warp & 3, half = warp >> 2, nt_all = l.np / 16;
    for (int t = blockIdx.x; t < l.tiles; t += gridDim.x) {
        const int n = t / (l.tiles_x * l.tiles_y), txy = t % (l.tiles_x * l.tiles_y);
        const int oy0 = txy / l.tiles_x * l.th, ox0 = txy % l.tiles_x * l.tw;
        const int iy0 = oy0 * d.sh - d.pt, ix0 = ox0 * d.sw - d.pl;
        __syncthreads(); /* the weights are in; the last tile's epilogue is done with C */
        /* 1. the input patch, zeros where the window reads padding. A
         * patch row is one run of x (words e = ix0 * cv + j, inside the
         * image when 0 <= e < w * cv); CH words a thread are loaded before
         * any is stored, so their latencies overlap. */
        {
            const vt *xv = (const vt *)(x + (size_t)n * d.h * d.w * d.c);
            const int rowv = l.pw * cv, j0 = ix0 * cv, wv = d.w * cv;
            int py = 0, j = threadIdx.x;
            for (; j >= rowv && py < l.ph; j -= rowv)
                py++;
            while (py < l.ph) {
                vt v[CH];
                int at[CH];
#pragma unroll
                for (int m = 0; m < CH; m++) {
                    at[m] = -1;
                    if (py < l.ph) {
                        int iy = iy0 + py, e = j0 + j;
                        vt t = {};
                        if ((unsigned)iy < (unsigned)d.h && (unsigned)e < (unsigned)wv)
                            t = xv[iy * wv + e];
                        v[m] = t;
                        at[m] = py * rowv + j;
                        for (j += THREADS; j >= rowv && py < l.ph; j -= rowv)
                            py++;
                    }
                }
#pragma unroll
                for (int m = 0; m < CH; m++) {
                    if (at[m] >= 0)
                        ((vt *)sx)[at[m]] = v[m];
                }
            }
        }
        __syncthreads();
        /* 2. the depthwise outputs into A, zero past c and past the image */
        for (int i = threadIdx.x; i < BM * cg; i += THREADS) {
            int row = i / cg, c0 = (i % cg) * V, ty = row / l.tw, tx = row % l.tw;
            float acc[V];
#pragma unroll
            for (int j = 0; j < V; j++)
                acc[j] = 0.0f;
            if (c0 < d.c && ty < l.th && oy0 + ty < d.oh && ox0 + tx < d.ow) {
#pragma unroll
                for (int j = 0; j < V; j++)
                    acc[j] = p.b_dw ? p.b_dw[c0 + j] : 0.0f;
                const __half *base = sx + (ty * d.sh * l.pw + tx * d.sw) * d.c + c0;
                for (int ky = 0; ky < d.r; ky++) {
                    /* A window row in packed FP16 (two channels an
                     * instruction, no conversions), the rows summed in
                     * FP32. */
                    __half2 row_sum[V / 2];
#pragma unroll
                    for (int j = 0; j < V / 2; j++)
                        row_sum[j] = __float2half2_rn(0.0f);
#pragma unroll 4
                    for (int kx = 0; kx < d.s; kx++) {
                        vt xv = *(const vt *)(base + (ky * d.dh * l.pw + kx * d.dw) * d.c);
                        vt wv = *(const vt *)(sdw + (ky * d.s + kx) * d.c + c0);
                        const __half2 *xe = (const __half2 *)&xv, *we = (const __half2 *)&wv;
#pragma unroll
                        for (int j = 0; j < V / 2; j++)
                            row_sum[j] = __hfma2(xe[j], we[j], row_sum[j]);
                    }
#pragma unroll
                    for (int j = 0; j < V / 2; j++) {
                        float2 f = __half22float2(row_sum[j]);
                        acc[2 * j] += f.x;
                        acc[2 * j + 1] += f.y;
                    }
                }
            }
            vt av;
            __half *ae = (__half *)&av;
#pragma unroll
            for (int j = 0; j < V; j++)
                ae[j] = __float2half_rn(acc[j]);
            *(vt *)(sa + row * l.lda + c0) = av;
        }
        __syncthreads();
        /* 3. the 1x1 convolution on tensor cores; C goes over the patch,
         * which nobody reads any more */
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[NTW];
#pragma unroll
        for (int j = 0; j < NTW; j++)
            wmma::fill_fragment(acc[j], 0.0f);
        for (int kk = 0; kk < l.kp; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
            wmma::load_matrix_sync(a, sa + rt * 16 * l.lda + kk, l.lda);
#pragma unroll
            for (int j = 0; j < NTW; j++) {
                int nt = half * NTW + j;
                if (nt < nt_all) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
                    wmma::load_matrix_sync(b, sw + nt * 16 * l.lda + kk, l.lda);
                    wmma::mma_sync(acc[j], a, b, acc[j]);
                }
            }
        }
#pragma unroll
        for (int j = 0; j < NTW; j++) {
            int nt = half * NTW + j;
            if (nt < nt_all)
                wmma::store_matrix_sync(sc + rt * 16 * l.ldc + nt * 16, acc[j], l.ldc,
                                        wmma::mem_row_major);
        }
        __syncthreads();
        /* 4. bias, residual, activation */
        for (int i = threadIdx.x; i < BM * kg; i += THREADS) {
            int row = i / kg, c0 = (i % kg) * V, ty = row / l.tw, tx = row % l.tw;
            int oy = oy0 + ty, ox = ox0 + tx;
            if (ty >= l.th || oy >= d.oh || ox >= d.ow)
                continue;
            int m = (n * d.oh + oy) * d.ow + ox;
            float v[V];
#pragma unroll
            for (int j = 0; j < V; j++)
                v[j] = sc[row * l.ldc + c0 + j] + (p.b_pw ? p.b_pw[c0 + j] : 0.0f);
            if (c0 < d.cres) {
                float r[V];
                if (d.res_pool) {
#pragma unroll
                    for (int j = 0; j < V; j++)
                        r[j] = -INFINITY;
                    for (int q = 0; q < 4; q++) {
                        int iy = 2 * oy + q / 2, ix = 2 * ox + q % 2;
                        if (iy >= d.rh || ix >= d.rw)
                            continue;
                        vt rv = *(const vt *)(res + ((n * d.rh + iy) * d.rw + ix) * d.cres + c0);
                        const __half *re = (const __half *)&rv;
#pragma unroll
                        for (int j = 0; j < V; j++)
                            r[j] = fmaxf(r[j], __half2float(re[j]));
                    }
                } else {
                    vt rv = *(const vt *)(res + m * d.cres + c0);
                    const __half *re = (const __half *)&rv;
#pragma unroll
                    for (int j = 0; j < V; j++)
                        r[j] = __half2float(re[j]);
                }
#pragma unroll
                for (int j = 0; j < V; j++)
                    v[j] += r[j];
            }
            vt yv;
            __half *ye = (__half *)&yv;
#pragma unroll
            for (int j = 0; j < V; j++)
                ye[j] = __float2half_rn(apply_act(d.act, v[j], d.alpha, d.beta));
            *(vt *)(y + m * d.k + c0) = yv;
        }
    }
}

/* The kernel instance for V channels per thread and ntw column tiles per
 * warp, or NULL. */
static const void *pick_kernel(int v, int ntw)
{
#define DWPW_CASE(V)                                \
    if (v == V) {                                   \
        switch (ntw) {                              \
        case 1:                                     \
            return (const void *)dwpw_kernel<V, 1>; \
        case 2:                                     \
            return (const void *)dwpw_kernel<V, 2>; \
        case 3:                                     \
            return (const void *)dwpw_kernel<V, 3>; \
        case 4:                                     \
            return (const void *)dwpw_kernel<V, 4>; \
        }                                           \
    }
    DWPW_CASE(8)
    DWPW_CASE(4)
    DWPW_CASE(2)
#undef DWPW_CASE
    return NULL;
}

extern "C" int infd_cuda_dwpw_fits(const infd_cuda_dwpw_desc *d, char *why, size_t why_n)
{
    long long xn = (long long)d->n * d->h * d->w * d->c;
    long long yn = (long long)d->n * d->oh * d->ow * d->k;
    long long rn = d->res_pool ? (long long)d->n * d->rh * d->rw * d->cres
                               : (long long)d->n * d->oh * d->ow * d->cres;
    if (d->c < 2 || d->k < 2 || d->c > INFD_CUDA_DWPW_MAX_C || d->k > INFD_CUDA_DWPW_MAX_C ||
        d->c % 2 || d->k % 2 || d->cres % 2 || d->cres < 0 || d->cres > d->k) {
        snprintf(why, why_n,
                 "the fused depthwise block takes even channel counts up to %d (here %d in, %d "
                 "out, %d in the residual)",
                 INFD_CUDA_DWPW_MAX_C, d->c, d->k, d->cres);
        return 0;
    }
    if (xn >= INT32_MAX || yn >= INT32_MAX || rn >= INT32_MAX) {
        snprintf(why, why_n, "the fused depthwise block indexes with 32 bits");
        return 0;
    }
    if (d->res_pool && (d->res_pool != 2 || d->rh / 2 != d->oh || d->rw / 2 != d->ow)) {
        snprintf(why, why_n, "a pooled residual must be twice the output's size");
        return 0;
    }
    if (d->r < 1 || d->s < 1 || d->sh < 1 || d->sw < 1 || d->dh < 1 || d->dw < 1 || d->pt < 0 ||
        d->pl < 0 || d->oh < 1 || d->ow < 1) {
        snprintf(why, why_n, "bad depthwise window");
        return 0;
    }
    dwpw_layout l;
    layout_of(d, &l);
    if (l.smem > SMEM_MAX) {
        snprintf(why, why_n,
                 "the fused depthwise block's tile needs %zu bytes of shared memory (at most %d)",
                 l.smem, SMEM_MAX);
        return 0;
    }
    return 1;
}

extern "C" void infd_cuda_dwpw_destroy(infd_cuda_dwpw *p)
{
    if (!p)
        return;
    cudaFree(p->w_dw);
    cudaFree(p->w_pw);
    cudaFree(p->b_dw);
    cudaFree(p->b_pw);
    free(p);
}

extern "C" infd_cuda_dwpw *infd_cuda_dwpw_create(const infd_cuda_dwpw_desc *d, const float *w_dw,
                                                 const float *b_dw, const float *w_pw,
                                                 const float *b_pw, char *why, size_t why_n)
{
    if (!infd_cuda_dwpw_fits(d, why, why_n))
        return NULL;
    infd_cuda_dwpw *p = (infd_cuda_dwpw *)calloc(1, sizeof(*p));
    if (!p) {
        snprintf(why, why_n, "out of memory");
        return NULL;
    }
    p->d = *d;
    layout_of(d, &p->l);
    p->v = vec_width(d->c | d->k | d->cres, 0); /* >= 2: the counts are even (fits) */
    for (int v = p->v; v >= 2; v /= 2)          /* narrower ones for pointers aligned less (run) */
        p->fn[v] = pick_kernel(v, (p->l.np / 16 + 1) / 2);
    const int kp = p->l.kp, np = p->l.np;

    /* [c, 1, r, s] is KCRS with k = 1, so its KRSC copy is [r, s, c];
     * [k, c] is uploaded padded to [np, kp] with zeros. */
    float *wp = (float *)calloc((size_t)np * kp, sizeof(float));
    bool ok = wp != NULL;
    if (!ok)
        snprintf(why, why_n, "out of memory");
    for (int o = 0; ok && o < d->k; o++)
        memcpy(wp + (size_t)o * kp, w_pw + (size_t)o * d->c, (size_t)d->c * sizeof(float));
    if (ok)
        ok = (p->w_dw = (__half *)infd_cuda_upload_krsc(w_dw, 1, d->c, (int64_t)d->r * d->s,
                                                        INFD_CUDA_FMT_F16_NHWC, why, why_n));
    if (ok)
        ok = (p->w_pw = (__half *)infd_cuda_upload(wp, (size_t)np * kp, INFD_CUDA_FMT_F16_NHWC, why,
                                                   why_n));
    free(wp);
    if (ok && b_dw)
        ok = (p->b_dw = (float *)infd_cuda_upload(b_dw, (size_t)d->c, INFD_CUDA_FMT_F32_NCHW, why,
                                                  why_n));
    if (ok && b_pw)
        ok = (p->b_pw = (float *)infd_cuda_upload(b_pw, (size_t)d->k, INFD_CUDA_FMT_F32_NCHW, why,
                                                  why_n));
    const void *fns[3]; /* the widest instance first: it sizes the grid */
    int n_fns = 0;
    for (int v = p->v; v >= 2; v /= 2)
        fns[n_fns++] = p->fn[v];
    if (ok)
        ok = (p->blocks =
                  infd_cuda_persistent_grid(fns, n_fns, THREADS, p->l.smem, SMEM_MAX, p->l.tiles,
                                            "the fused depthwise block", why, why_n)) > 0;
    if (!ok) {
        infd_cuda_dwpw_destroy(p);
        return NULL;
    }
    return p;
}

extern "C" void infd_cuda_dwpw_run(const infd_cuda_dwpw *p, void *stream, const void *x,
                                   const void *res, void *y)
{
    dwpw_args a = { p->d, p->l, p->w_dw, p->w_pw, p->b_dw, p->b_pw };
    const __half *xp = (const __half *)x, *rp = (const __half *)res;
    __half *yp = (__half *)y;
    void *args[] = { &a, &xp, &rp, &yp };
    /* Narrower for pointers aligned less (never below 2: the plan's
     * 16-bit values are at least 4-byte aligned). */
    int v = vec_width(p->v, (uintptr_t)x | (uintptr_t)res | (uintptr_t)y);
    v = v < 2 ? 2 : v;
    cudaLaunchKernel(p->fn[v], dim3((unsigned)p->blocks), dim3(THREADS), args, p->l.smem,
                     ((infd_cuda_stream *)stream)->s);
}
