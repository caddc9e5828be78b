/*
 * cuda_dwpw.cu - the depthwise + 1x1 convolution block in one kernel
 * (cuda_dwpw.h).
 *
 * One thread block of 8 warps takes a tile of output pixels (th rows of tw
 * pixels of one image) at a time and loops over the tiles (a grid of as
 * many blocks as fit on the GPU at once), so the weights are loaded into
 * shared memory once per block:
 *   1. the patch of input pixels the tile's depthwise windows cover, into
 *      shared memory with coalesced 16-, 8- or 4-byte loads (V channels a
 *      thread, several loads in flight before their stores), zeros where
 *      a window reads padding;
 *   2. the tile's depthwise outputs from the patch into A in shared memory,
 *      FP16, zero past c: each window row is summed in packed FP16 (HFMA2),
 *      the rows in FP32;
 *   3. A x W_pw^T on tensor cores (WMMA), each warp taking jobs of a
 *      16-row tile and NTW 16-column tiles of the output;
 *   4. the FP32 sums (staged in shared memory, over the patch) plus bias,
 *      residual and activation, V channels per thread, written coalesced.
 * kp and np are c and k rounded up to 16 (WMMA's tile); the padding
 * columns of A and rows of W are zero, so they add nothing.
 *
 * Two forms of step 2 (rt_window chooses):
 *   - the register-tiled form (stride 1, 3x3 or 5x5, outputs of 16 x 16 and
 *     more; tiles of 128 pixels): the patch is kept as one plane per
 *     channel pair, and a lane computes RT_TX outputs along x of one pair
 *     from a window row's RT_TX + s - 1 inputs, read with 16-byte loads,
 *     the pair's weights in registers; A is stored transposed, so each
 *     lane writes its outputs as 8-byte words;
 *   - the tile form (any window; tiles of 64 pixels): a thread computes V
 *     channels of one output, reading every tap's inputs and weights from
 *     shared memory.
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
#include "cuda_shared.h"

using namespace nvcuda;

#define THREADS  256          /* 8 warps */
#define SMEM_MAX (160 * 1024) /* shared memory a block may take (the H100 has 227 KB) */
#define RT_TX    4            /* register-tiled form: outputs along x a lane sums at once */

/* Where a tile lies and what it needs in shared memory. A tile is th rows
 * of tw output pixels of one image (tw = min(ow, bm), th = min(bm / tw,
 * oh): whole rows, or one row of bm pixels); its depthwise window covers a
 * patch of ph x pw input pixels. */
typedef struct dwpw_layout {
    int ks;            /* the register-tiled form's window (r = s = ks: 3 or 5), 0: the tile form */
    int bm;            /* output pixels per tile: 128 in the register-tiled form, else 64 */
    int kp, np;        /* c and k rounded up to 16 */
    int ldw, lda, ldc; /* row strides of W_pw and A (halves) and of C (floats) */
    int tw, th, tiles_x, tiles_y, tiles;
    int ph, pw;
    int pwp, ps, kkp; /* register-tiled: patch row and plane (words), window weights a pair */
    /* Byte offsets in shared memory: W_pw [np][ldw], the 1x1 bias [np]
     * (FP32, zeros past k or without one), the depthwise weights, A, then
     * the patch and, over it once the depthwise outputs are in A, C [bm][ldc]
     * (FP32). The tile form: depthwise weights [r*s][c], A [bm][lda], the
     * patch [ph][pw][c] (FP16). The register-tiled form keeps a plane per
     * channel pair (2 FP16 channels, a word): weights [c/2][kkp], A
     * transposed [kp][lda] and the patch [c/2][ph][pwp]. */
    int off_b, off_dw, off_a, off_x;
    size_t smem;
} dwpw_layout;

static size_t round128(size_t n)
{
    return (n + 127) / 128 * 128;
}

static void layout_of(const infd_cuda_dwpw_desc *d, int ks, dwpw_layout *l)
{
    l->ks = ks;
    l->bm = ks ? 128 : 64;
    l->kp = (d->c + 15) / 16 * 16;
    l->np = (d->k + 15) / 16 * 16;
    l->ldw = l->kp + 8; /* 16 bytes of skew against bank conflicts */
    l->lda = ks ? l->bm + 8 : l->kp + 8;
    l->ldc = l->np + 4;
    /* Whole rows where they fit. (8 x 8 tiles, the smallest patch, ran
     * slower on BlazeFace: 122 against 99 us for the first block, the
     * patch loaded row by row then.) */
    l->tw = d->ow < l->bm ? d->ow : l->bm;
    l->th = l->bm / l->tw < d->oh ? l->bm / l->tw : d->oh;
    l->tiles_x = (d->ow + l->tw - 1) / l->tw;
    l->tiles_y = (d->oh + l->th - 1) / l->th;
    l->tiles = d->n * l->tiles_x * l->tiles_y;
    l->ph = (l->th - 1) * d->sh + (d->r - 1) * d->dh + 1;
    l->pw = (l->tw - 1) * d->sw + (d->s - 1) * d->dw + 1;
    l->pwp = (l->pw + 3) / 4 * 4; /* 16-byte rows */
    l->ps = l->ph * l->pwp;
    l->kkp = (ks * ks + 3) / 4 * 4;
    size_t w = round128((size_t)l->np * l->ldw * 2), b = round128((size_t)l->np * 4);
    size_t dw = round128(ks ? (size_t)d->c / 2 * l->kkp * 4 : (size_t)d->r * d->s * d->c * 2);
    size_t a = round128((size_t)(ks ? l->kp : l->bm) * l->lda * 2);
    size_t patch = ks ? (size_t)d->c / 2 * l->ps * 4 : (size_t)l->ph * l->pw * d->c * 2;
    size_t c = (size_t)l->bm * l->ldc * 4;
    l->off_b = (int)w;
    l->off_dw = (int)(w + b);
    l->off_a = (int)(w + b + dw);
    l->off_x = (int)(w + b + dw + a);
    l->smem = w + b + dw + a + (patch > c ? patch : c);
}

/* The register-tiled form's window for d (3 or 5), or 0 where the tile
 * form runs: the register-tiled form takes a square 3x3 or 5x5 window at
 * stride and dilation 1, tile rows a multiple of RT_TX wide, and needs room
 * in shared memory. It is chosen for outputs of at least 16 x 16 pixels:
 * BlazeFace FP16 at batch 128 (H100, Nsight Compute), register-tiled
 * against tile form, 64 x 64: 51 against 88 us and 63 against 114 us;
 * 32 x 32: 26 against 36 and 34 against 67; 16 x 16: 12.5-19.4 against
 * 13.7-24.6; but 8 x 8: 13.7-13.9 against 12.5-12.9 (one image a tile
 * either way, 128 tiles for 132 SMs). */
static int rt_window(const infd_cuda_dwpw_desc *d)
{
    if (d->r != d->s || (d->r != 3 && d->r != 5) || d->sh != 1 || d->sw != 1 || d->dh != 1 ||
        d->dw != 1 || (long long)d->oh * d->ow < 16 * 16)
        return 0;
    dwpw_layout l;
    layout_of(d, d->r, &l);
    return l.tw % RT_TX == 0 && l.smem <= SMEM_MAX ? d->r : 0;
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

/* A's WMMA layout: transposed (column-major) in the register-tiled form. */
template <int KS> struct a_layout {
    typedef wmma::col_major type;
};
template <> struct a_layout<0> {
    typedef wmma::row_major type;
};

/* n floats from shared memory, 16 or 8 bytes at a time (p aligned so). */
template <int N> __device__ __forceinline__ void load_floats(const float *p, float *v)
{
    if (N % 4 == 0) {
#pragma unroll
        for (int j = 0; j < N; j += 4)
            *(float4 *)(v + j) = *(const float4 *)(p + j);
    } else {
#pragma unroll
        for (int j = 0; j < N; j += 2)
            *(float2 *)(v + j) = *(const float2 *)(p + j);
    }
}

/* V: channels per thread in the patch loads and the epilogue; NTW:
 * 16-column tiles of a warp's job in the 1x1 product; KS: the
 * register-tiled form's window (3 or 5), 0: the tile form. */
template <int V, int NTW, int KS>
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
    constexpr int KKP = KS ? (KS * KS + 3) / 4 * 4 : 4;
    extern __shared__ __align__(128) unsigned char smem[];
    const infd_cuda_dwpw_desc &d = p.d;
    const dwpw_layout &l = p.l;
    const int BM = l.bm, RTILES = BM / 16, P = d.c / 2;
    __half *sw = (__half *)smem;
    float *sb = (float *)(smem + l.off_b);
    __half *sdw = (__half *)(smem + l.off_dw);
    __half *sa = (__half *)(smem + l.off_a);
    __half *sx = (__half *)(smem + l.off_x);
    float *sc = (float *)(smem + l.off_x);

    for (int i = threadIdx.x; i < l.np * (l.kp / 8); i += THREADS) {
        int r = i / (l.kp / 8), k8 = (i % (l.kp / 8)) * 8;
        *(uint4 *)(sw + r * l.ldw + k8) = *(const uint4 *)(p.w_pw + r * l.kp + k8);
    }
    for (int i = threadIdx.x; i < l.np; i += THREADS)
        sb[i] = p.b_pw && i < d.k ? p.b_pw[i] : 0.0f;
    const int cv = d.c / V, cg = l.kp / V, kg = d.k / V;
    if constexpr (KS != 0) {
        /* weights [c/2][kkp] from [r*s][c/2] (channel pairs), zero past
         * r*s; A's rows (channels) past c zero for good */
        for (int i = threadIdx.x; i < P * KKP; i += THREADS) {
            int q = i % KKP;
            ((__half2 *)sdw)[i] =
                q < KS * KS ? ((const __half2 *)p.w_dw)[q * P + i / KKP] : __float2half2_rn(0.0f);
        }
        for (int i = threadIdx.x; i < (l.kp - d.c) * l.lda; i += THREADS)
            sa[d.c * l.lda + i] = __float2half_rn(0.0f);
    } else {
        for (int i = threadIdx.x; i < d.r * d.s * cv; i += THREADS)
            ((vt *)sdw)[i] = ((const vt *)p.w_dw)[i];
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nt_all = l.np / 16, chunks = (nt_all + NTW - 1) / NTW;
    /* The register-tiled form: lane l sums the RT_TX outputs from (sty,
     * stx) on, of the channel pairs warp, warp + 8, ... (lanes from strips
     * on have none; a tile has at most 32 strips). */
    const int spr = l.tw / RT_TX, strips = l.th * spr;
    const int sty = KS ? lane / spr : 0, stx = KS ? lane % spr * RT_TX : 0;
    const float inv_cv = 1.0f / (float)cv;
    /* The epilogue: thread t takes channels g V .. of output row `row`,
     * then every THREADS-th (row, channel group) after. */
    const int e_row = threadIdx.x / kg, e_g = threadIdx.x % kg;
    const int e_dr = THREADS / kg, e_dg = THREADS % kg;
    for (int t = blockIdx.x; t < l.tiles; t += gridDim.x) {
        const int n = t / (l.tiles_x * l.tiles_y), txy = t % (l.tiles_x * l.tiles_y);
        const int oy0 = txy / l.tiles_x * l.th, ox0 = txy % l.tiles_x * l.tw;
        const int iy0 = oy0 * d.sh - d.pt, ix0 = ox0 * d.sw - d.pl;
        __syncthreads(); /* the weights are in; the last tile's epilogue is done with C */
        /* 1. the input patch, zeros where the window reads padding. A
         * patch row is one run of x (words e = ix0 * cv + j, inside the
         * image when 0 <= e < w * cv); CH words a thread are loaded before
         * any is stored, so their latencies overlap. The register-tiled
         * form stores a word's channel pairs in their planes. */
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
                        if constexpr (KS != 0) {
                            /* pixel px = j / cv: exact in FP32 (j < 2^14) */
                            int px = (int)(((float)j + 0.5f) * inv_cv), g = j - px * cv;
                            at[m] = g * (V / 2) * l.ps + py * l.pwp + px;
                        } else {
                            at[m] = py * rowv + j;
                        }
                        for (j += THREADS; j >= rowv && py < l.ph; j -= rowv)
                            py++;
                    }
                }
#pragma unroll
                for (int m = 0; m < CH; m++) {
                    if (at[m] >= 0) {
                        if constexpr (KS != 0) {
#pragma unroll
                            for (int q = 0; q < V / 2; q++)
                                ((unsigned *)sx)[at[m] + q * l.ps] = ((const unsigned *)&v[m])[q];
                        } else {
                            ((vt *)sx)[at[m]] = v[m];
                        }
                    }
                }
            }
        }
        __syncthreads();
        /* 2. the depthwise outputs into A; each window row is summed in
         * packed FP16 (HFMA2: the FP32 form, converting every element, was
         * bound by its conversions, 116 us for BlazeFace's first block at
         * batch 128), the rows in FP32. */
        if constexpr (KS != 0) {
            /* A lane reads a window row's RT_TX + KS - 1 inputs (16-byte
             * loads from the pair's plane) for RT_TX outputs, with the
             * pair's weights in registers, and writes the outputs into A's
             * two channel rows (8 bytes each). */
            for (int pj = warp; pj < P && lane < strips; pj += THREADS / 32) {
                __half2 wr[KKP];
#pragma unroll
                for (int q = 0; q < KKP; q += 4)
                    *(uint4 *)(wr + q) = *(const uint4 *)((const __half2 *)sdw + pj * KKP + q);
                const float2 b0 = p.b_dw ? make_float2(p.b_dw[2 * pj], p.b_dw[2 * pj + 1])
                                         : make_float2(0.0f, 0.0f);
                float2 acc[RT_TX];
#pragma unroll
                for (int j = 0; j < RT_TX; j++)
                    acc[j] = b0;
                const __half2 *row = (const __half2 *)sx + pj * l.ps + sty * l.pwp + stx;
#pragma unroll
                for (int ky = 0; ky < KS; ky++) {
                    __half2 xv[8], rs[RT_TX];
                    *(uint4 *)xv = *(const uint4 *)(row + ky * l.pwp);
                    if constexpr (KS > 3)
                        *(uint4 *)(xv + 4) = *(const uint4 *)(row + ky * l.pwp + 4);
                    else
                        *(uint2 *)(xv + 4) = *(const uint2 *)(row + ky * l.pwp + 4);
#pragma unroll
                    for (int j = 0; j < RT_TX; j++)
                        rs[j] = __float2half2_rn(0.0f);
#pragma unroll
                    for (int kx = 0; kx < KS; kx++) {
#pragma unroll
                        for (int j = 0; j < RT_TX; j++)
                            rs[j] = __hfma2(xv[j + kx], wr[ky * KS + kx], rs[j]);
                    }
#pragma unroll
                    for (int j = 0; j < RT_TX; j++) {
                        float2 f = __half22float2(rs[j]);
                        acc[j].x += f.x;
                        acc[j].y += f.y;
                    }
                }
                apply_act_n<2 * RT_TX>(d.dw_act, (float *)acc, d.dw_alpha, d.dw_beta);
                __half lo[RT_TX], hi[RT_TX];
#pragma unroll
                for (int j = 0; j < RT_TX; j++) {
                    lo[j] = __float2half_rn(acc[j].x);
                    hi[j] = __float2half_rn(acc[j].y);
                }
                const int col = sty * l.tw + stx;
                *(uint2 *)(sa + 2 * pj * l.lda + col) = *(const uint2 *)lo;
                *(uint2 *)(sa + (2 * pj + 1) * l.lda + col) = *(const uint2 *)hi;
            }
        } else {
            /* zero past c and past the image */
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
        }
        __syncthreads();
        /* 3. the 1x1 convolution on tensor cores; C goes over the patch,
         * which nobody reads any more. A warp's job is a row tile and NTW
         * column tiles; the tile form has one job a warp. */
        for (int job = warp; job < RTILES * chunks; job += THREADS / 32) {
            const int rtile = job % RTILES, nt0 = job / RTILES * NTW;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[NTW];
#pragma unroll
            for (int j = 0; j < NTW; j++)
                wmma::fill_fragment(acc[j], 0.0f);
            for (int kk = 0; kk < l.kp; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, typename a_layout<KS>::type> a;
                wmma::load_matrix_sync(
                    a, KS ? sa + kk * l.lda + rtile * 16 : sa + rtile * 16 * l.lda + kk, l.lda);
#pragma unroll
                for (int j = 0; j < NTW; j++) {
                    if (nt0 + j < nt_all) {
                        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
                        wmma::load_matrix_sync(b, sw + (nt0 + j) * 16 * l.ldw + kk, l.ldw);
                        wmma::mma_sync(acc[j], a, b, acc[j]);
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < NTW; j++) {
                if (nt0 + j < nt_all)
                    wmma::store_matrix_sync(sc + rtile * 16 * l.ldc + (nt0 + j) * 16, acc[j], l.ldc,
                                            wmma::mem_row_major);
            }
        }
        __syncthreads();
        /* 4. bias, residual, activation. A tile is whole output rows or
         * part of one, so its row r is output pixel m0 + r. */
        const int m0 = (n * d.oh + oy0) * d.ow + ox0;
        const int rows = l.tw == d.ow ? min(l.th, d.oh - oy0) * d.ow : min(l.tw, d.ow - ox0);
        for (int row = e_row, g = e_g; row < rows;) {
            const int c0 = g * V, m = m0 + row;
            float v[V], b[V];
            load_floats<V>(sc + row * l.ldc + c0, v);
            load_floats<V>(sb + c0, b);
#pragma unroll
            for (int j = 0; j < V; j++)
                v[j] += b[j];
            if (c0 < d.cres) {
                float r[V];
                if (d.res_pool) {
                    const int oy = oy0 + row / l.tw, ox = ox0 + row % l.tw;
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
            apply_act_n<V>(d.act, v, d.alpha, d.beta);
            vt yv;
            __half *ye = (__half *)&yv;
#pragma unroll
            for (int j = 0; j < V; j++)
                ye[j] = __float2half_rn(v[j]);
            *(vt *)(y + m * d.k + c0) = yv;
            row += e_dr;
            g += e_dg;
            if (g >= kg) {
                g -= kg;
                row++;
            }
        }
    }
}

/* The kernel instance for V channels per thread, the form (ks: the
 * register-tiled form's window, 0: the tile form) and ntw column tiles a
 * job (the tile form: at most 4, one job a warp; the register-tiled form:
 * 2 for up to 2 column tiles, else 4 and more jobs), or NULL. */
static const void *pick_kernel(int v, int ntw, int ks)
{
#define DWPW_TILE(V, N)                \
    if (v == V && ks == 0 && ntw == N) \
        return (const void *)dwpw_kernel<V, N, 0>;
#define DWPW_RT(V, KS)      \
    if (v == V && ks == KS) \
        return ntw <= 2 ? (const void *)dwpw_kernel<V, 2, KS> : (const void *)dwpw_kernel<V, 4, KS>;
#define DWPW_V(V)   \
    DWPW_TILE(V, 1) \
    DWPW_TILE(V, 2) \
    DWPW_TILE(V, 3) \
    DWPW_TILE(V, 4) \
    DWPW_RT(V, 3)   \
    DWPW_RT(V, 5)
    DWPW_V(8)
    DWPW_V(4)
    DWPW_V(2)
#undef DWPW_V
#undef DWPW_RT
#undef DWPW_TILE
    return NULL;
}

extern "C" int infd_cuda_dwpw_register_tiled(const infd_cuda_dwpw_desc *d)
{
    return !infd_cuda_conv_disabled("regtile") && rt_window(d) != 0;
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
    if (d->dw_act != INFD_CUDA_ACT_NONE && !infd_cuda_dwpw_register_tiled(d)) {
        /* the tile form has none: it measured slower than two kernels */
        snprintf(why, why_n,
                 "the fused depthwise block takes a depthwise activation only in its "
                 "register-tiled form (stride 1, 3x3 or 5x5, outputs of 16x16 and more)");
        return 0;
    }
    dwpw_layout l; /* the tile form: the register-tiled one is taken where it fits as well */
    layout_of(d, 0, &l);
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
    infd_cuda_weights_free(p->w_dw);
    infd_cuda_weights_free(p->w_pw);
    infd_cuda_weights_free(p->b_dw);
    infd_cuda_weights_free(p->b_pw);
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
    /* INFD_CONV_DISABLE=regtile: the tile form everywhere (tests) */
    layout_of(d, infd_cuda_dwpw_register_tiled(d) ? d->r : 0, &p->l);
    p->v = vec_width(d->c | d->k | d->cres, 0); /* >= 2: the counts are even (fits) */
    for (int v = p->v; v >= 2; v /= 2)          /* narrower ones for pointers aligned less (run) */
        p->fn[v] = pick_kernel(v, p->l.ks ? p->l.np / 16 : (p->l.np / 16 + 1) / 2, p->l.ks);
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
