/*
 * cuda_seq.cu - element-wise ops over any dtype, LayerNormalization,
 * Gather and LSTM for sequence models (cuda_seq.h).
 *
 * The element-wise kernel is generic: each element is decoded into its
 * inputs' offsets (broadcast strides), loaded as int64 (integer and bool
 * types) or double (floating types) and stored as the output type. These
 * ops carry masks and lengths in speech encoders, a few thousand elements,
 * so clarity wins over a specialised kernel per type.
 *
 * LayerNormalization: a block of 256 threads per row, mean and variance
 * about it in double (two passes, as the CPU backend's), the row reread
 * for the output.
 *
 * LSTM: per step, gates[b, r] = X[t, b] . W[r] + h[b] . R[r] + Wb[r] +
 * Rb[r] with a warp per gate row r (its lanes stride over the row, every
 * batch row in turn: the weights are read once per step), then a cell
 * kernel per (b, j) applies the gates in ONNX's order (i, o, f, c), the
 * peepholes and the sequence lengths, and writes Y[t]. h and c live in the
 * workspace between steps.
 */
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "cuda_runtime_impl.h"
#include "cuda_seq.h"

static unsigned grid(int64_t threads)
{
    unsigned b = infd_cuda_blocks(threads);
    return b > 65536 ? 65536 : b;
}

static cudaStream_t stream_of(void *stream)
{
    return ((infd_cuda_stream *)stream)->s;
}

/* ---- element-wise ---------------------------------------------------------- */

static __device__ bool is_float(int t)
{
    return t == INFD_CUDA_T_F16 || t == INFD_CUDA_T_F32 || t == INFD_CUDA_T_F64;
}

static __device__ double load_f(const void *p, int t, int64_t i)
{
    switch (t) {
    case INFD_CUDA_T_BOOL:
    case INFD_CUDA_T_U8:
        return ((const uint8_t *)p)[i];
    case INFD_CUDA_T_I8:
        return ((const int8_t *)p)[i];
    case INFD_CUDA_T_I32:
        return ((const int32_t *)p)[i];
    case INFD_CUDA_T_I64:
        return (double)((const int64_t *)p)[i];
    case INFD_CUDA_T_F16:
        return __half2float(((const __half *)p)[i]);
    case INFD_CUDA_T_F32:
        return ((const float *)p)[i];
    default:
        return ((const double *)p)[i];
    }
}

static __device__ int64_t load_i(const void *p, int t, int64_t i)
{
    switch (t) {
    case INFD_CUDA_T_BOOL:
    case INFD_CUDA_T_U8:
        return ((const uint8_t *)p)[i];
    case INFD_CUDA_T_I8:
        return ((const int8_t *)p)[i];
    case INFD_CUDA_T_I32:
        return ((const int32_t *)p)[i];
    case INFD_CUDA_T_I64:
        return ((const int64_t *)p)[i];
    default:
        return (int64_t)load_f(p, t, i);
    }
}

/* Stores v (or, for integer types, iv) as type t. */
static __device__ void store(void *p, int t, int64_t i, double v, int64_t iv, bool integral)
{
    switch (t) {
    case INFD_CUDA_T_BOOL:
        ((uint8_t *)p)[i] = integral ? iv != 0 : v != 0.0;
        break;
    case INFD_CUDA_T_U8:
        ((uint8_t *)p)[i] = (uint8_t)(integral ? iv : (int64_t)v);
        break;
    case INFD_CUDA_T_I8:
        ((int8_t *)p)[i] = (int8_t)(integral ? iv : (int64_t)v);
        break;
    case INFD_CUDA_T_I32:
        ((int32_t *)p)[i] = (int32_t)(integral ? iv : (int64_t)v);
        break;
    case INFD_CUDA_T_I64:
        ((int64_t *)p)[i] = integral ? iv : (int64_t)v;
        break;
    case INFD_CUDA_T_F16:
        ((__half *)p)[i] = __float2half((float)(integral ? (double)iv : v));
        break;
    case INFD_CUDA_T_F32:
        ((float *)p)[i] = (float)(integral ? (double)iv : v);
        break;
    default:
        ((double *)p)[i] = integral ? (double)iv : v;
        break;
    }
}

static __device__ int esize_of(int t)
{
    switch (t) {
    case INFD_CUDA_T_BOOL:
    case INFD_CUDA_T_U8:
    case INFD_CUDA_T_I8:
        return 1;
    case INFD_CUDA_T_F16:
        return 2;
    case INFD_CUDA_T_I32:
    case INFD_CUDA_T_F32:
        return 4;
    default:
        return 8;
    }
}

__global__ void seq_eltwise_kernel(int op, int tin, int tout, infd_cuda_seq_bcast b, const void *x0,
                                   const void *x1, const void *x2, void *y)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < b.n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, o0 = 0, o1 = 0, o2 = 0;
        for (int d = b.rank - 1; d >= 0; d--) {
            int64_t k = rem % b.dims[d];
            rem /= b.dims[d];
            o0 += k * b.strides[0][d];
            o1 += k * b.strides[1][d];
            o2 += k * b.strides[2][d];
        }
        switch (op) {
        case INFD_CUDA_SEQ_EQUAL:
        case INFD_CUDA_SEQ_LESS:
        case INFD_CUDA_SEQ_LESS_EQUAL:
        case INFD_CUDA_SEQ_GREATER:
        case INFD_CUDA_SEQ_GREATER_EQUAL: {
            int c; /* -1, 0, 1; 2 when unordered (NaN) */
            if (is_float(tin)) {
                double a = load_f(x0, tin, o0), e = load_f(x1, tin, o1);
                c = a < e ? -1 : a > e ? 1 : a == e ? 0 : 2;
            } else {
                int64_t a = load_i(x0, tin, o0), e = load_i(x1, tin, o1);
                c = a < e ? -1 : a > e ? 1 : 0;
            }
            bool r = op == INFD_CUDA_SEQ_EQUAL        ? c == 0
                     : op == INFD_CUDA_SEQ_LESS       ? c == -1
                     : op == INFD_CUDA_SEQ_LESS_EQUAL ? (c == -1 || c == 0)
                     : op == INFD_CUDA_SEQ_GREATER    ? c == 1
                                                      : (c == 1 || c == 0);
            ((uint8_t *)y)[i] = r;
            break;
        }
        case INFD_CUDA_SEQ_AND:
        case INFD_CUDA_SEQ_OR:
        case INFD_CUDA_SEQ_XOR: {
            bool a = ((const uint8_t *)x0)[o0] != 0, e = ((const uint8_t *)x1)[o1] != 0;
            ((uint8_t *)y)[i] = op == INFD_CUDA_SEQ_AND  ? (a && e)
                                : op == INFD_CUDA_SEQ_OR ? (a || e)
                                                         : (a != e);
            break;
        }
        case INFD_CUDA_SEQ_NOT:
            ((uint8_t *)y)[i] = ((const uint8_t *)x0)[o0] == 0;
            break;
        case INFD_CUDA_SEQ_MOD:
        case INFD_CUDA_SEQ_FMOD:
            if (is_float(tin)) {
                store(y, tout, i, fmod(load_f(x0, tin, o0), load_f(x1, tin, o1)), 0, false);
            } else {
                int64_t a = load_i(x0, tin, o0), e = load_i(x1, tin, o1), r = 0;
                if (e != 0) {
                    r = a % e;
                    if (op == INFD_CUDA_SEQ_MOD && r != 0 && ((r < 0) != (e < 0)))
                        r += e;
                }
                store(y, tout, i, 0.0, r, true);
            }
            break;
        case INFD_CUDA_SEQ_WHERE: {
            bool c = ((const uint8_t *)x0)[o0] != 0;
            int es = esize_of(tin);
            const char *src = c ? (const char *)x1 + o1 * es : (const char *)x2 + o2 * es;
            char *dst = (char *)y + i * es;
            for (int k = 0; k < es; k++)
                dst[k] = src[k];
            break;
        }
        case INFD_CUDA_SEQ_ADD:
        case INFD_CUDA_SEQ_SUB:
        case INFD_CUDA_SEQ_MUL:
        case INFD_CUDA_SEQ_DIV: {
            uint64_t a = (uint64_t)load_i(x0, tin, o0), e = (uint64_t)load_i(x1, tin, o1);
            int64_t r;
            if (op == INFD_CUDA_SEQ_ADD)
                r = (int64_t)(a + e);
            else if (op == INFD_CUDA_SEQ_SUB)
                r = (int64_t)(a - e);
            else if (op == INFD_CUDA_SEQ_MUL)
                r = (int64_t)(a * e);
            else if (e == 0)
                r = 0;
            else if ((int64_t)e == -1)
                r = (int64_t)(0 - a); /* wraps for INT_MIN */
            else
                r = (int64_t)a / (int64_t)e;
            store(y, tout, i, 0.0, r, true);
            break;
        }
        case INFD_CUDA_SEQ_CLIP: {
            int64_t v = load_i(x0, tin, o0);
            if (x1 && v < load_i(x1, tin, o1))
                v = load_i(x1, tin, o1);
            if (x2 && v > load_i(x2, tin, o2))
                v = load_i(x2, tin, o2);
            store(y, tout, i, 0.0, v, true);
            break;
        }
        default: /* Cast */
            if (is_float(tin))
                store(y, tout, i, load_f(x0, tin, o0), 0, false);
            else
                store(y, tout, i, 0.0, load_i(x0, tin, o0), true);
            break;
        }
    }
}

extern "C" void infd_cuda_seq_eltwise(void *stream, int op, int tin, int tout,
                                      const infd_cuda_seq_bcast *b, const void *x0, const void *x1,
                                      const void *x2, void *y)
{
    if (b->n <= 0)
        return;
    seq_eltwise_kernel<<<grid(b->n), 256, 0, stream_of(stream)>>>(op, tin, tout, *b, x0, x1, x2, y);
}

/* ---- LayerNormalization --------------------------------------------------- */

#define LN_THREADS 256

/* Sum of v over the block (every thread gets it). */
static __device__ double block_sum(double v, double *shared)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    double t = 0.0;
    for (int w = 0; w < LN_THREADS / 32; w++)
        t += shared[w];
    __syncthreads();
    return t;
}

__global__ void layernorm_kernel(const float *x, const float *scale, int64_t scale_n,
                                 const float *bias, int64_t bias_n, float *y, float *mean_out,
                                 float *inv_out, int64_t len, float eps)
{
    __shared__ double shared[LN_THREADS / 32];
    int64_t r = blockIdx.x;
    const float *xr = x + r * len;
    float *yr = y + r * len;
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < len; i += LN_THREADS)
        s += xr[i];
    double mean = len ? block_sum(s, shared) / (double)len : 0.0;
    double q = 0.0;
    for (int64_t i = threadIdx.x; i < len; i += LN_THREADS) {
        double d = (double)xr[i] - mean;
        q += d * d;
    }
    double var = len ? block_sum(q, shared) / (double)len : 0.0;
    float inv = (float)(1.0 / sqrt(var + (double)eps)), m = (float)mean;
    for (int64_t i = threadIdx.x; i < len; i += LN_THREADS) {
        float sc = scale[scale_n == 1 ? 0 : i];
        float bi = bias ? bias[bias_n == 1 ? 0 : i] : 0.0f;
        yr[i] = (xr[i] - m) * inv * sc + bi;
    }
    if (threadIdx.x == 0) {
        if (mean_out)
            mean_out[r] = m;
        if (inv_out)
            inv_out[r] = inv;
    }
}

extern "C" void infd_cuda_layernorm(void *stream, const float *x, const float *scale,
                                    int64_t scale_n, const float *bias, int64_t bias_n, float *y,
                                    float *mean_out, float *inv_out, int64_t rows, int64_t len,
                                    float eps)
{
    if (rows <= 0)
        return;
    layernorm_kernel<<<(unsigned)rows, LN_THREADS, 0, stream_of(stream)>>>(
        x, scale, scale_n, bias, bias_n, y, mean_out, inv_out, len, eps);
}

/* ---- Gather ---------------------------------------------------------------- */

template <typename T>
__global__ void gather_kernel(const T *x, const void *idx, int idx64, T *y, int64_t axis_dim,
                              int64_t n_idx, int64_t inner, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t in = i % inner, j = (i / inner) % n_idx, o = i / (inner * n_idx);
        int64_t k = idx64 ? ((const int64_t *)idx)[j] : ((const int32_t *)idx)[j];
        if (k < 0)
            k += axis_dim;
        y[i] = k >= 0 && k < axis_dim ? x[(o * axis_dim + k) * inner + in] : T(0);
    }
}

extern "C" void infd_cuda_gather(void *stream, const void *x, const void *idx, int idx64, void *y,
                                 int esize, int64_t outer, int64_t axis_dim, int64_t n_idx,
                                 int64_t inner)
{
    int64_t n = outer * n_idx * inner;
    cudaStream_t s = stream_of(stream);
    if (n <= 0)
        return;
    switch (esize) {
    case 1:
        gather_kernel<uint8_t><<<grid(n), 256, 0, s>>>((const uint8_t *)x, idx, idx64, (uint8_t *)y,
                                                       axis_dim, n_idx, inner, n);
        break;
    case 2:
        gather_kernel<uint16_t><<<grid(n), 256, 0, s>>>((const uint16_t *)x, idx, idx64,
                                                        (uint16_t *)y, axis_dim, n_idx, inner, n);
        break;
    case 4:
        gather_kernel<uint32_t><<<grid(n), 256, 0, s>>>((const uint32_t *)x, idx, idx64,
                                                        (uint32_t *)y, axis_dim, n_idx, inner, n);
        break;
    default:
        gather_kernel<uint64_t><<<grid(n), 256, 0, s>>>((const uint64_t *)x, idx, idx64,
                                                        (uint64_t *)y, axis_dim, n_idx, inner, n);
        break;
    }
}

/* ---- SegmentArgMax ---------------------------------------------------------- */

#define SEGARG_THREADS 256

/* One block per (row, segment): each thread scans a stride of the segment,
 * then the block reduces (value, index) pairs, the lower index on ties, a
 * NaN never winning. */
__global__ void segarg_kernel(const float *__restrict__ x, int64_t *__restrict__ y, int64_t len,
                              int n_seg, infd_cuda_segarg_spans spans)
{
    __shared__ float sv[SEGARG_THREADS];
    __shared__ int64_t si[SEGARG_THREADS];
    int64_t row = blockIdx.x / n_seg;
    int seg = (int)(blockIdx.x % n_seg);
    int64_t b = spans.starts[seg], e = spans.ends[seg];
    const float *p = x + row * len;
    float best = -INFINITY;
    int64_t bi = -1;
    for (int64_t i = b + threadIdx.x; i < e; i += blockDim.x) {
        float v = p[i];
        if (v == v && (bi < 0 || v > best)) {
            best = v;
            bi = i;
        }
    }
    sv[threadIdx.x] = best;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int w = SEGARG_THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) {
            float v = sv[threadIdx.x + w];
            int64_t i = si[threadIdx.x + w];
            if (i >= 0 && (si[threadIdx.x] < 0 || v > sv[threadIdx.x] ||
                           (v == sv[threadIdx.x] && i < si[threadIdx.x]))) {
                sv[threadIdx.x] = v;
                si[threadIdx.x] = i;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        y[row * n_seg + seg] = si[0] < 0 ? 0 : si[0] - b; /* all NaN: the first */
}

extern "C" void infd_cuda_segment_argmax(void *stream, const float *x, int64_t *y, int64_t rows,
                                         int64_t len, const infd_cuda_segarg_spans *spans)
{
    if (rows <= 0 || spans->n <= 0)
        return;
    segarg_kernel<<<(unsigned)(rows * spans->n), SEGARG_THREADS, 0, stream_of(stream)>>>(
        x, y, len, spans->n, *spans);
}

/* ---- LSTM -------------------------------------------------------------------- */

/* Batch rows one warp of lstm_gates_kernel computes together. */
#define LSTM_ROWS 8

/* gates[b, r] for every batch row b and gate row r: a warp per gate row
 * and LSTM_ROWS batch rows, each lane keeping a partial sum per batch row,
 * so that every weight it reads serves LSTM_ROWS rows (independent
 * accumulations, where a warp per row and a loop over the batch waited on
 * one load after another). Each row's sum is taken in the same order as
 * with one row at a time. */
__global__ void lstm_gates_kernel(const float *xt, int64_t x_stride, const float *W, const float *R,
                                  const float *B, const float *h, float *gates, int64_t batch,
                                  int64_t input, int64_t hidden)
{
    int64_t rows = 4 * hidden, tiles = (batch + LSTM_ROWS - 1) / LSTM_ROWS;
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (warp >= rows * tiles)
        return;
    int64_t r = warp % rows, b0 = warp / rows * LSTM_ROWS;
    int nb = batch - b0 < LSTM_ROWS ? (int)(batch - b0) : LSTM_ROWS;
    const float *w = W + r * input, *rr = R + r * hidden;
    float acc[LSTM_ROWS];
#pragma unroll
    for (int i = 0; i < LSTM_ROWS; i++)
        acc[i] = 0.0f;
    for (int64_t k = lane; k < input; k += 32) {
        float wk = w[k];
#pragma unroll
        for (int i = 0; i < LSTM_ROWS; i++)
            if (i < nb)
                acc[i] += wk * xt[(b0 + i) * x_stride + k];
    }
    for (int64_t k = lane; k < hidden; k += 32) {
        float rk = rr[k];
#pragma unroll
        for (int i = 0; i < LSTM_ROWS; i++)
            if (i < nb)
                acc[i] += rk * h[(b0 + i) * hidden + k];
    }
    float bias = B ? B[r] + B[rows + r] : 0.0f;
#pragma unroll
    for (int i = 0; i < LSTM_ROWS; i++) {
        float a = acc[i];
        for (int o = 16; o > 0; o >>= 1)
            a += __shfl_xor_sync(0xffffffffu, a, o);
        if (lane == 0 && i < nb)
            gates[(b0 + i) * rows + r] = a + bias;
    }
}

static __device__ float sigm(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* The cell at step t: h and c updated where t is inside the sequence, Y[t]
 * written (0 outside it). */
__global__ void lstm_cell_kernel(const float *gates, const float *P, const int32_t *seq_lens,
                                 int64_t t, float *h, float *c, float *yt, int64_t y_stride,
                                 int64_t batch, int64_t hidden)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= batch * hidden)
        return;
    int64_t b = i / hidden, j = i % hidden;
    bool live = !seq_lens || t < seq_lens[b];
    if (!live) {
        if (yt)
            yt[b * y_stride + j] = 0.0f;
        return;
    }
    const float *g = gates + b * 4 * hidden;
    float cp = c[i];
    float gi = g[j], go = g[hidden + j], gf = g[2 * hidden + j], gc = g[3 * hidden + j];
    if (P) {
        gi += P[j] * cp;
        gf += P[2 * hidden + j] * cp;
    }
    float it = sigm(gi), ft = sigm(gf), ct = ft * cp + it * tanhf(gc);
    if (P)
        go += P[hidden + j] * ct;
    float ht = sigm(go) * tanhf(ct);
    c[i] = ct;
    h[i] = ht;
    if (yt)
        yt[b * y_stride + j] = ht;
}

extern "C" size_t infd_cuda_lstm_work_bytes(const infd_cuda_lstm_desc *d)
{
    return sizeof(float) * (size_t)(d->batch * 4 * d->hidden + 2 * d->batch * d->hidden);
}

extern "C" void infd_cuda_lstm(void *stream, const infd_cuda_lstm_desc *d, const float *X,
                               const float *W, const float *R, const float *B,
                               const int32_t *seq_lens, const float *h0, const float *c0,
                               const float *P, float *Y, float *Yh, float *Yc, void *work)
{
    cudaStream_t s = stream_of(stream);
    int64_t H = d->hidden, Bn = d->batch, I = d->input;
    size_t state = sizeof(float) * (size_t)(Bn * H);
    float *gates = (float *)work, *h = gates + Bn * 4 * H, *c = h + Bn * H;
    int threads = 256;
    int64_t gate_warps = 4 * H * ((Bn + LSTM_ROWS - 1) / LSTM_ROWS);
    unsigned gate_blocks = (unsigned)((gate_warps * 32 + threads - 1) / threads);
    unsigned cell_blocks = (unsigned)((Bn * H + threads - 1) / threads);
    for (int dir = 0; dir < d->dirs; dir++) {
        bool backward = d->dirs == 2 ? dir == 1 : d->reverse != 0;
        const float *Wd = W + dir * 4 * H * I, *Rd = R + dir * 4 * H * H;
        const float *Bd = B ? B + dir * 8 * H : NULL, *Pd = P ? P + dir * 3 * H : NULL;
        if (h0)
            cudaMemcpyAsync(h, h0 + dir * Bn * H, state, cudaMemcpyDeviceToDevice, s);
        else
            cudaMemsetAsync(h, 0, state, s);
        if (c0)
            cudaMemcpyAsync(c, c0 + dir * Bn * H, state, cudaMemcpyDeviceToDevice, s);
        else
            cudaMemsetAsync(c, 0, state, s);
        for (int64_t step = 0; step < d->seq; step++) {
            int64_t t = backward ? d->seq - 1 - step : step;
            lstm_gates_kernel<<<gate_blocks, threads, 0, s>>>(X + t * Bn * I, I, Wd, Rd, Bd, h,
                                                              gates, Bn, I, H);
            float *yt = Y ? Y + (t * d->dirs + dir) * Bn * H : NULL;
            lstm_cell_kernel<<<cell_blocks, threads, 0, s>>>(gates, Pd, seq_lens, t, h, c, yt, H,
                                                             Bn, H);
        }
        if (Yh)
            cudaMemcpyAsync(Yh + dir * Bn * H, h, state, cudaMemcpyDeviceToDevice, s);
        if (Yc)
            cudaMemcpyAsync(Yc + dir * Bn * H, c, state, cudaMemcpyDeviceToDevice, s);
    }
}
