/*
 * cuda_runtime.h - C-linkage memory, stream and error plumbing of the CUDA
 * backend (cuda_runtime.cu). No CUDA type appears here: a stream is an
 * opaque `void *` that carries the CUDA stream and the per-stream library
 * handles (cuDNN, cuBLASLt) the kernels need, plus the first error any
 * enqueued work hit (reported by infd_cuda_sync).
 *
 * Every function acts on the calling thread's current device, which
 * infd_cuda_set_device (the set_device slot) selects per plan.
 */
#ifndef INFD_BACKENDS_CUDA_RUNTIME_H
#define INFD_BACKENDS_CUDA_RUNTIME_H

#include <stddef.h>

#include "infd/infd.h" /* infd_status, infd_error (infd_cuda_set_device) */

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when a CUDA device is usable; -1 with the reason in `why` otherwise. */
int infd_cuda_check_device(char *why, size_t n);

/* Device (host == 0) or pinned host (host == 1) memory; NULL with the reason
 * in `why` on failure. */
void *infd_cuda_alloc(int host, size_t bytes, char *why, size_t n);
void infd_cuda_free(int host, void *p);

/* A stream with its cuDNN and cuBLASLt handles; NULL with the reason. */
void *infd_cuda_stream_create(char *why, size_t n);
void infd_cuda_stream_destroy(void *stream);

/* dir: 0 H2D, 1 D2H, 2 D2D. stream NULL: synchronous. */
void infd_cuda_copy(void *dst, const void *src, size_t bytes, int dir, void *stream);

/* Waits for the stream (NULL: the whole device); 0 on success, -1 with the
 * first recorded or pending error in `why`. Clears the recorded error. */
int infd_cuda_sync(void *stream, char *why, size_t n);

/* Records the first failure of work enqueued on `stream` (a library status
 * a run() cannot return). printf-style. */
void infd_cuda_stream_fail(void *stream, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Stream capture into a CUDA graph kept by the stream (see backend.h):
 * 0 on success, -1 with the reason in `why`. */
int infd_cuda_capture_begin(void *stream, char *why, size_t n);
int infd_cuda_capture_end(void *stream, char *why, size_t n);
void infd_cuda_replay(void *stream);

/* The device's run order (backend.h, order_begin and order_end). */
void infd_cuda_order_begin(void *stream);
void infd_cuda_order_end(void *stream);

/* The current GPU's stream used while compiling (algorithm timing), and
 * the per-GPU lock that serialises its users; unlock on the same thread. */
void *infd_cuda_compile_stream_lock(char *why, size_t n);
void infd_cuda_compile_stream_unlock(void);

/* Starts the libraries' one-time initialization for GPU `index` on
 * threads of their own, once per GPU and process (cuda_runtime.cu,
 * "Warm-up"); returns at once. INFD_CUDA_WARM=0 turns it off. */
void infd_cuda_warm_start(int index);

/* Waits for the warm-up threads (the backend's settle slot): none is left
 * inside a library afterwards. Returns at once when none runs. */
void infd_cuda_warm_join(int index);

/* The backend's set_device slot (cuda_device_select.cu): makes GPU `index`
 * current on the calling thread; INVALID_ARGUMENT "GPU 3 does not exist
 * (this machine has 1)" outside the GPUs. */
infd_status infd_cuda_set_device(int index, infd_error *err);

/* Enqueues n hash-based values in [-1, 1) into device memory p on `stream`
 * (kind 0: FP32, 1: FP16, 2: BF16): scratch data for timing kernels, which
 * can run faster on zeros than on real data. */
void infd_cuda_fill_random(void *stream, void *p, size_t n, int kind, unsigned seed);

/* INFD_CONV_DISABLE (a debugging knob): a list naming what FP16
 * convolutions must not use: the forms "gemm", "dw", "convg", "stem" and
 * "cudnn" (cuda_conv.c; "cudnn" stays the fallback when nothing else
 * applies), and "share", plans shared between graph-API convolutions of
 * one description (cuda_convg.cu). E.g. "dw,gemm". True when `what` is
 * listed. */
bool infd_cuda_conv_disabled(const char *what);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_RUNTIME_H */
