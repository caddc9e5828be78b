/*
 * cuda_convg.h - C-linkage 2-D convolution on cuDNN's graph ("backend") API
 * (cuda_convg.cu), with the bias, the residual and the activation fused
 * after it in one operation graph.
 *
 * infd_cuda_convg_create builds the operation graph for one concrete shape
 *   conv(x, w) -> [+ bias] -> [+ z] -> [relu / clip] -> y
 * (intermediates are virtual FP32 tensors), asks cuDNN's heuristics (mode A,
 * then the fallback list) for engine configurations, finalizes an execution
 * plan for each of the first few, times each one on the compile stream with
 * CUDA events (2 warm-up + 5 timed runs, random non-zero data; cuDNN's own
 * timings are ~5x off on the H100) and keeps the fastest, unless a tuning
 * record from an earlier build names the configuration.
 *
 * run() builds a variant pack (the per-call data pointers) on every call and
 * executes the plan on the caller's stream and cuDNN handle: the variant
 * pack is cuDNN's per-execution argument list, so nothing shared is mutated
 * and the module can be run from several threads on different streams at
 * once; the only cost is a few host allocations inside cuDNN (no device
 * memory, no synchronisation), which is what cudnn-frontend and PyTorch do on
 * every execute. It is capturable into a CUDA graph.
 *
 * FP16: x, z and y are FP16 NHWC; the weights are kept as FP16 KRSC and the
 * bias as FP16; accumulation and the fused epilogue in FP32 (engines that
 * reduce in reduced precision are skipped). FP32: NCHW, and engines that use
 * tensor cores (TF32), or whose numerical notes cannot be read, are
 * skipped; plans use this module for FP16 convolutions only (cuda_conv.c,
 * try_convg), FP32 is for its tests. Device pointers must be 16-byte
 * aligned (the tensors are declared with 16-byte alignment).
 */
#ifndef INFD_BACKENDS_CUDA_CONVG_H
#define INFD_BACKENDS_CUDA_CONVG_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest serialized plan a tuning record keeps (about 60 KB for a
 * runtime-compiled engine; one larger is recorded without it). */
#define INFD_CUDA_CONVG_PLAN_MAX (512u << 10)

/* act values */
#define INFD_CUDA_CONVG_ACT_NONE 0
#define INFD_CUDA_CONVG_ACT_RELU 1
#define INFD_CUDA_CONVG_ACT_CLIP 2 /* min(max(v, act_lo), act_hi); ReLU6: 0, 6 */

typedef struct infd_cuda_convg_desc {
    int n, c, h, w; /* input, FP16 NHWC (or FP32 NCHW when fp16 == 0) */
    int k, oh, ow;  /* output */
    int r, s;       /* kernel */
    /* Symmetric padding (cuDNN's post-padding is derived so the output is
     * oh x ow; create fails when no non-negative one gives that size). */
    int pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups;
    int fp16;     /* 1: FP16 NHWC x/z/y, FP16 KRSC weights, FP32 accumulation; 0: FP32 NCHW */
    int has_bias; /* + bias[k] (host_b; kept on the device in the tensors' type) */
    int has_res;  /* + z (residual, same layout and type as y) */
    int act;      /* INFD_CUDA_CONVG_ACT_* */
    float act_lo, act_hi; /* ACT_CLIP bounds */
} infd_cuda_convg_desc;

typedef struct infd_cuda_convg infd_cuda_convg;

/* Creates the convolution. host_w: K*C/G*R*S floats, KCRS (required: the
 * module converts them and keeps a device copy); host_b: K floats (required
 * when has_bias) or NULL.
 *
 * record/record_n: a tuning record from an earlier create() of the same
 * description, or NULL/0: then the candidates are timed. A record that does
 * not parse, belongs to another description, or whose configuration cuDNN
 * no longer accepts (a new cuDNN, another GPU) is ignored and the candidates
 * are timed.
 *
 * While another convolution of the same description is alive on this GPU
 * (and the record, if any, names its configuration), this one shares its
 * operation graph and execution plan instead of timing and compiling
 * again (cuda_convg.cu, "Shared plans"); destroy() in any order.
 *
 * A record holding a serialized plan (runtime-compiled engines) restores
 * it without compiling, about 1 ms instead of 20-65; one cuDNN does not take
 * back is finalized again from the record's configuration.
 *
 * On success fills *workspace_bytes (what run() needs) and `name`
 * ("cudnng:conv_fp16_bias_res_relu:eng12"); either may be NULL. NULL with
 * the reason in `why` on failure (cuDNN status strings and
 * cudnnGetLastErrorString's message). */
infd_cuda_convg *infd_cuda_convg_create(const infd_cuda_convg_desc *d, const float *host_w,
                                        const float *host_b, const void *record, size_t record_n,
                                        size_t *workspace_bytes, char *name, size_t name_n,
                                        char *why, size_t why_n);

/* The convolution's tuning record, for a later create(): *n bytes owned by
 * c (valid until destroy), or NULL and 0 when the configuration has too many
 * knobs to record. */
const void *infd_cuda_convg_record(const infd_cuda_convg *c, size_t *n);

/* Enqueues y = act(conv(x) + bias + z) on `stream` (an infd_cuda_stream,
 * cuda_runtime.h) with its cuDNN handle. x, z (has_res only), y and
 * workspace (*workspace_bytes of it; NULL when 0) are device pointers, z
 * must not alias y. Never allocates device memory, never synchronises,
 * capturable; safe to call concurrently from several threads on different
 * streams. A cuDNN failure is recorded on the stream (infd_cuda_sync reports
 * it). */
void infd_cuda_convg_run(const infd_cuda_convg *c, void *stream, const void *x, const void *z,
                         void *y, void *workspace);

void infd_cuda_convg_destroy(infd_cuda_convg *c);

/* The time per run of the plan chosen by timing, in ms (0 when a record
 * chose it). */
float infd_cuda_convg_ms(const infd_cuda_convg *c);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_CONVG_H */
