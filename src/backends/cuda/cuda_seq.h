/*
 * cuda_seq.h - C-linkage launchers for the CUDA kernels of sequence models
 * (speech encoders and their LSTM predictors; cuda_seq.c is the node glue):
 * broadcast element-wise ops over any dtype (comparisons, logic, Mod,
 * Where, Cast), LayerNormalization, Gather and ONNX LSTM.
 *
 * As cuda_extra.h: every launcher enqueues on `stream` and returns at once;
 * nothing allocates, synchronises or copies from the host at run time, so
 * launches can be captured into a CUDA graph. Index arithmetic is int64.
 */
#ifndef INFD_BACKENDS_CUDA_SEQ_H
#define INFD_BACKENDS_CUDA_SEQ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define INFD_CUDA_SEQ_MAX_RANK 8

/* Element types the kernels read and write. */
typedef enum infd_cuda_seq_type {
    INFD_CUDA_T_BOOL = 0, /* one byte, 0 or 1 */
    INFD_CUDA_T_U8,
    INFD_CUDA_T_I8,
    INFD_CUDA_T_I32,
    INFD_CUDA_T_I64,
    INFD_CUDA_T_F16,
    INFD_CUDA_T_F32,
    INFD_CUDA_T_F64,
} infd_cuda_seq_type;

typedef enum infd_cuda_seq_op {
    INFD_CUDA_SEQ_EQUAL = 0,
    INFD_CUDA_SEQ_LESS,
    INFD_CUDA_SEQ_LESS_EQUAL,
    INFD_CUDA_SEQ_GREATER,
    INFD_CUDA_SEQ_GREATER_EQUAL,
    INFD_CUDA_SEQ_AND,
    INFD_CUDA_SEQ_OR,
    INFD_CUDA_SEQ_XOR,
    INFD_CUDA_SEQ_NOT,
    INFD_CUDA_SEQ_MOD,  /* integers: the sign of the divisor (fmod 0); x % 0 is 0 */
    INFD_CUDA_SEQ_FMOD, /* C's fmod (fmod 1), any type */
    INFD_CUDA_SEQ_WHERE,
    INFD_CUDA_SEQ_CAST,
    /* integer arithmetic, C's made total as the CPU backend's: wrapping,
     * Div truncating toward 0, x / 0 = 0 */
    INFD_CUDA_SEQ_ADD,
    INFD_CUDA_SEQ_SUB,
    INFD_CUDA_SEQ_MUL,
    INFD_CUDA_SEQ_DIV,
    INFD_CUDA_SEQ_CLIP, /* integers: x0 clamped to [x1, x2] (either nullable) */
} infd_cuda_seq_op;

/* Output element i (row-major over dims) reads input k at
 * sum(idx[d] * strides[k][d]) (0 strides where input k broadcasts). */
typedef struct infd_cuda_seq_bcast {
    int rank; /* 0..INFD_CUDA_SEQ_MAX_RANK */
    int64_t n;
    int64_t dims[INFD_CUDA_SEQ_MAX_RANK];
    int64_t strides[3][INFD_CUDA_SEQ_MAX_RANK];
} infd_cuda_seq_bcast;

/* y = op(x0[, x1[, x2]]). Comparisons read x0 and x1 of type `tin` and
 * write BOOL; And/Or/Xor/Not read and write BOOL; Mod/FMod read and write
 * `tin`, and so do Add, Sub, Mul and Div (integer types); Where reads BOOL
 * x0 and x1, x2 of type `tin` and writes `tin`;
 * Cast reads `tin` and writes `tout` (to BOOL: x != 0; float to integer
 * truncates toward 0, as C does). */
void infd_cuda_seq_eltwise(void *stream, int op, int tin, int tout, const infd_cuda_seq_bcast *b,
                           const void *x0, const void *x1, const void *x2, void *y);

/* LayerNormalization of FP32 rows of `len`: y = (x - mean) / sqrt(var +
 * eps) * scale + bias (bias nullable; scale_n and bias_n are len or 1, a
 * broadcast), the statistics in double; mean_out and inv_out (nullable)
 * get each row's mean and 1 / sqrt(var + eps). */
void infd_cuda_layernorm(void *stream, const float *x, const float *scale, int64_t scale_n,
                         const float *bias, int64_t bias_n, float *y, float *mean_out,
                         float *inv_out, int64_t rows, int64_t len, float eps);

/* y[o, j, i] = x[o, idx[j], i] for o < outer, j < n_idx, i < inner, the
 * index wrapped once when negative; an index outside [-axis_dim, axis_dim)
 * gives zeros (ONNX calls it an error; a kernel cannot stop). Elements of
 * `esize` bytes (1, 2, 4 or 8); idx INT64 when idx64, else INT32. */
void infd_cuda_gather(void *stream, const void *x, const void *idx, int idx64, void *y, int esize,
                      int64_t outer, int64_t axis_dim, int64_t n_idx, int64_t inner);

/* The segments of infd_plan_options.argmax (engine.h). */
#define INFD_CUDA_SEGARG_MAX 4
typedef struct infd_cuda_segarg_spans {
    int n;
    int64_t starts[INFD_CUDA_SEGARG_MAX], ends[INFD_CUDA_SEGARG_MAX];
} infd_cuda_segarg_spans;

/* y[r, k] = the index (from starts[k]) of the largest x[r, starts[k]..ends[k])
 * for each of `rows` rows of `len`: the first on ties, a NaN never winning
 * (0 when all are NaN). One block per row and segment. */
void infd_cuda_segment_argmax(void *stream, const float *x, int64_t *y, int64_t rows, int64_t len,
                              const infd_cuda_segarg_spans *spans);

/* ONNX LSTM, FP32, layout 0, default activations (sigmoid, tanh, tanh), no
 * clip: X [seq, batch, input]; W [dirs, 4H, input], R [dirs, 4H, H] in
 * ONNX's gate order i, o, f, c; B [dirs, 8H] (Wb then Rb; nullable);
 * seq_lens [batch] INT32 (nullable: every sequence is seq long); h0, c0
 * [dirs, batch, H] (nullable: zeros); P [dirs, 3H] peepholes i, o, f
 * (nullable). Y [seq, dirs, batch, H] (0 past a sequence's length), Yh and
 * Yc [dirs, batch, H] (each nullable). Direction 0 runs forward unless
 * `reverse` (direction "reverse"); with dirs 2 direction 1 runs backward.
 * Per step a gates kernel (a warp per gate row, every batch row) and a
 * cell kernel. work: infd_cuda_lstm_work_bytes. */
typedef struct infd_cuda_lstm_desc {
    int64_t seq, batch, input, hidden;
    int dirs;
    int reverse;
} infd_cuda_lstm_desc;

size_t infd_cuda_lstm_work_bytes(const infd_cuda_lstm_desc *d);
void infd_cuda_lstm(void *stream, const infd_cuda_lstm_desc *d, const float *X, const float *W,
                    const float *R, const float *B, const int32_t *seq_lens, const float *h0,
                    const float *c0, const float *P, float *Y, float *Yh, float *Yc, void *work);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_SEQ_H */
